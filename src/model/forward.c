/* model/forward: the batched forward pass and the activation buffers it runs in.
 * A token's path, in il__forward's order: the batch uploaded once per backend; the embedding
 * rows; per layer the attention block (RMSNorm, Q/K/V in one matmul, the per-head QK-norm where
 * the architecture has it, RoPE with the K/V store, attention, output projection, gemma3's
 * post-norm, residual add) and the feed-forward block (RMSNorm, gate and up in one matmul, SwiGLU
 * or gemma3's GeGLU, down projection, gemma3's post-norm, residual add); the final RMSNorm and
 * the logits of the rows that want them. gemma3 scales the embedding rows by sqrt(n_embd).
 * Each op runs on the lane (backend) its layer is placed on; the
 * residual moves between lanes through host staging.
 * Not for: loading or placing weights (model/weights.c), scheduling (engine/). */
#include "model/llama.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/quant.h"
#include "memory/mem.h"
#include "model/tp.h"

/* ---- forward pass ---- */

/* Every op (the lane's `take` on F32 activations, and on 16-bit ones where the backend takes them all). */
#define IL__ALL_OPS ((1u << IL_OP_COUNT) - 1)

int32_t il_forward_chunk_rows(il_dtype act_type, int32_t max_tokens) {
  if (act_type == IL_DTYPE_F32) return max_tokens;
  int32_t r = max_tokens / 4 + (max_tokens % 4 != 0);
  r = r < 16 ? 16 : r > 256 ? 256 : r;
  return r < max_tokens ? r : max_tokens;
}

/* I32 entries per token of a batch upload: id, position, sequence, KV slot, and with sliding-window
 * layers their ring slot (il_kv_view.ring). */
static int il__batch_cols(const il_hparams *hp) { return hp->swa > 0 ? 5 : 4; }

/* F32 columns per row the widest op of a lane holds in its scratch (inputs and outputs). */
static int64_t il__wide_cols(const il_hparams *hp, bool layers) {
  const int64_t dim = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim,
                ff = hp->n_ff;
  int64_t w = 2 * dim; /* rmsnorm, residual add (the embedding and output head need less) */
  if (layers) {
    const int64_t ops[] = {dim + q + 2 * kv, q + 2 * kv, 2 * q, q + dim, dim + 2 * ff, 2 * ff, ff + dim};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) w = ops[i] > w ? ops[i] : w;
    if (hp->n_expert) { /* the router (F32 out), an expert's gate/up, swiglu and down */
      const int64_t fe = hp->n_ff_exp, moe[] = {dim, dim + 2 * fe, 2 * fe, fe + dim};
      for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) w = moe[i] > w ? moe[i] : w;
    }
  }
  return w;
}

/* The ops (a mask of 1 << il_op) b runs on activations of act itself; the pass widens the
 * tensors of every other op into F32 copies chunk by chunk and narrows the results. */
uint32_t il_forward_take(il_backend *b, il_dtype act, il_dtype kv_type) {
  if (act == IL_DTYPE_F32) return IL__ALL_OPS;
  uint32_t take = 0;
  for (int op = 0; op < IL_OP_COUNT; op++)
    if (b->ops->supports(b, (il_op)op, op == IL_OP_KV_STORE || op == IL_OP_ATTENTION ? kv_type : IL_DTYPE_F32, act))
      take |= 1u << op;
  return take;
}

int il_forward_lane_scratches(il_backend *b, il_dtype act_type, il_dtype kv_type) {
  if (act_type == IL_DTYPE_F32) return 0;
  const uint32_t take = b ? il_forward_take(b, act_type, kv_type) : IL__ALL_OPS;
  return (take != IL__ALL_OPS) + (take != 0 && (!b || b->ops->reserve_act));
}

size_t il_forward_lane_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits, bool layers,
                             bool output, il_backend *b, il_dtype kv_type) {
  const size_t T = (size_t)max_tokens, dim = (size_t)hp->n_embd, q_dim = (size_t)hp->n_head * hp->head_dim,
               kv_dim = (size_t)hp->n_head_kv * hp->head_dim, ff = (size_t)hp->n_ff,
               a = il_tensor_row_bytes(act_type, 1);
  size_t n = a * T * 3 * dim + 4 * (size_t)il__batch_cols(hp) * T;
  if (layers) n += a * T * (2 * q_dim + 2 * kv_dim + 2 * ff);
  if (layers && hp->n_expert) /* the router's logits, and the experts' rows (counted with their layers) */
    n += 4 * T * (size_t)hp->n_expert + a * T * (2 * dim + 2 * (size_t)hp->n_ff_exp);
  if (output) n += 4 * (size_t)max_logits * (size_t)hp->n_vocab;
  /* the F32 chunk scratch: the pass's (`wide`), the backend's (reserve_act), or both */
  n += (size_t)il_forward_lane_scratches(b, act_type, kv_type) * 4 * (size_t)il_forward_chunk_rows(act_type, max_tokens) *
       (size_t)il__wide_cols(hp, layers);
  return n;
}

size_t il_forward_state_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits,
                              il_backend *b, il_dtype kv_type) {
  return il_forward_lane_bytes(hp, act_type, max_tokens, max_logits, true, true, b, kv_type);
}

il_forward_lane *il_forward_lane_of(il_forward_state *st, il_backend *b) {
  for (int i = 0; i < st->n_lanes; i++)
    if (st->lane[i].b == b) return &st->lane[i];
  return NULL;
}

static il_forward_lane *il__lane_add(il_forward_state *st, il_backend *b) {
  il_forward_lane *ln = il_forward_lane_of(st, b);
  if (ln || st->n_lanes == IL_MAX_LANES) return ln;
  ln = &st->lane[st->n_lanes++];
  ln->b = b;
  return ln;
}

il_batch_views il_forward_batch_views(const il_forward_lane *ln, int32_t n) {
  const size_t o = ln->batch.off, step = (size_t)n * 4;
  return (il_batch_views){
      .ids = il_tensor_make(ln->batch.buf, o, 1, n, IL_DTYPE_I32, "token ids"),
      .pos = il_tensor_make(ln->batch.buf, o + step, 1, n, IL_DTYPE_I32, "positions"),
      .seq = il_tensor_make(ln->batch.buf, o + 2 * step, 1, n, IL_DTYPE_I32, "sequences"),
      .slots = il_tensor_make(ln->batch.buf, o + 3 * step, 1, n, IL_DTYPE_I32, "kv slots"),
      .ring_slots = il_tensor_make(ln->batch.buf, o + 4 * step, 1, n, IL_DTYPE_I32, "kv ring slots"),
  };
}

il_attn_args il_forward_attn_args(const il_model *m, const il_forward_lane *ln, int32_t n, const il_kv_view *kv) {
  const il_hparams *hp = &m->hp;
  const il_batch_views bv = il_forward_batch_views(ln, n);
  return (il_attn_args){
      .out = il_tensor_rows(ln->att, 0, n),
      .q = il_tensor_rows(ln->q, 0, n),
      .seq = bv.seq,
      .pos = bv.pos,
      .kv = kv,
      .n_heads = hp->n_head,
      .n_kv_heads = hp->n_head_kv,
      .head_dim = hp->head_dim,
      .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim),
  };
}

static il_status il__lane_init(il_forward_lane *ln, const il_model *m, il_dtype act, int32_t T, int32_t max_logits) {
  const il_hparams *hp = &m->hp;
  const int64_t dim = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim,
                kv_dim = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
  const struct {
    il_tensor *t;
    int64_t rows, cols;
    il_dtype type;
    const char *name;
    bool need;
  } bufs[] = {
      {&ln->x, T, dim, act, "activations: residual", true},
      {&ln->xb, T, dim, act, "activations: normed", true},
      {&ln->xo, T, dim, act, "activations: block out", true},
      {&ln->q, T, q_dim, act, "activations: q", ln->has_layers},
      {&ln->att, T, q_dim, act, "activations: attention", ln->has_layers},
      {&ln->k, T, kv_dim, act, "activations: k", ln->has_layers},
      {&ln->v, T, kv_dim, act, "activations: v", ln->has_layers},
      {&ln->hb, T, ff, act, "activations: ffn gate", ln->has_layers},
      {&ln->hb2, T, ff, act, "activations: ffn up", ln->has_layers},
      {&ln->logits, max_logits, hp->n_vocab, IL_DTYPE_F32, "activations: logits", ln->has_output},
      {&ln->batch, 1, il__batch_cols(hp) * (int64_t)T, IL_DTYPE_I32, "activations: batch ids", true},
      {&ln->wide, 1, (int64_t)il_forward_chunk_rows(act, T) * il__wide_cols(hp, ln->has_layers || ln->has_exps),
       IL_DTYPE_F32, "activations: f32 chunk", act != IL_DTYPE_F32 && ln->take != IL__ALL_OPS},
      {&ln->moe_logits, T, hp->n_expert, IL_DTYPE_F32, "activations: router logits", ln->has_layers && hp->n_expert},
      {&ln->moe_x, T, dim, act, "activations: expert input", ln->has_exps},
      {&ln->moe_h, T, hp->n_ff_exp, act, "activations: expert gate", ln->has_exps},
      {&ln->moe_h2, T, hp->n_ff_exp, act, "activations: expert up", ln->has_exps},
      {&ln->moe_y, T, dim, act, "activations: expert output", ln->has_exps},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].need)
      IL_TRY(il_backend_tensor_new(ln->b, IL_MEM_ACTIVATIONS, bufs[i].rows, bufs[i].cols, bufs[i].type, bufs[i].name,
                                   bufs[i].t));
  /* the same F32 scratch, the backend's own for the ops it computes on 16-bit activations
   * itself (a backend that widens in its kernels has no reserve_act) */
  if (act != IL_DTYPE_F32 && ln->take && ln->b->ops->reserve_act) {
    IL_TRY(ln->b->ops->reserve_act(ln->b, act, il_forward_chunk_rows(act, T),
                                   il__wide_cols(hp, ln->has_layers || ln->has_exps)));
    ln->reserved = true;
  }
  return IL_OK;
}

/* The scratch a lane's backend needs for the matmuls it will run (ops->reserve): the weights of
 * its layers (or the stream slots, which are shaped like every layer) and the output head. */
static il_status il__lane_reserve(const il_forward_lane *ln, const il_model_dev *d, int32_t max_tokens) {
  const il_backend_ops *o = ln->b->ops;
  if (!o->reserve) return IL_OK;
  const int32_t n_layer = d->model->hp.n_layer;
  /* every layer's weights as shapes (a mix such as q4_k_m gives layers different types; a
   * streamed layer's slot has its shapes) */
  il_tensor *w = il_mem_alloc(IL_MEM_WORKSPACE,
                              sizeof *w * ((IL_MODEL_LAYER_MATMULS + IL_MODEL_MOE_MATMULS) * (size_t)n_layer + 1),
                              "reserve list");
  if (!w) return IL_ERR_OOM;
  int n = 0;
  for (int32_t l = 0; ln->has_layers && l < n_layer; l++)
    if (d->layer_b[l] == ln->b) n += il_model_layer_shapes(d->model, l, IL_DTYPE_COUNT, w + n);
  for (int32_t l = 0; (ln->has_layers || ln->has_exps) && l < n_layer; l++) /* the router and one expert */
    n += il_model_moe_shapes(d->model, l, IL_DTYPE_COUNT, w + n);
  if (ln->has_output) w[n++] = il_model_output_shape(d->model, IL_DTYPE_COUNT);
  il_status s = n ? o->reserve(ln->b, max_tokens, w, n) : IL_OK;
  il_mem_free(w);
  return s;
}

/* The host side of MoE routing (il_forward_state's moe_* buffers). */
static il_status il__moe_host_init(il_forward_state *st, const il_hparams *hp) {
  const size_t T = (size_t)st->max_tokens, k = (size_t)hp->n_expert_used, dim = (size_t)hp->n_embd;
  st->moe_logits = il_mem_alloc(IL_MEM_STAGING, T * (size_t)hp->n_expert * 4, "router logits staging");
  st->moe_sel = il_mem_alloc(IL_MEM_STAGING, T * k * 4, "expert choices");
  st->moe_w = il_mem_alloc(IL_MEM_STAGING, T * k * 4, "expert weights");
  st->moe_slot = il_mem_alloc(IL_MEM_STAGING, T * 4, "expert rows");
  st->moe_rows = il_mem_alloc(IL_MEM_STAGING, 2 * T * il_tensor_row_bytes(st->act_type, (int64_t)dim), "expert rows staging");
  st->moe_out = il_mem_alloc(IL_MEM_STAGING, T * k * dim * 4, "expert outputs staging");
  return st->moe_logits && st->moe_sel && st->moe_w && st->moe_slot && st->moe_rows && st->moe_out ? IL_OK : IL_ERR_OOM;
}

il_status il_forward_state_init(il_forward_state *st, const il_model_dev *d, il_dtype act_type, int32_t max_tokens,
                                int32_t max_logits, const il_attn_kernel *(*attn_for)(void *ctx, il_backend *b),
                                void *ctx, const il_kv_view *kv) {
  memset(st, 0, sizeof *st);
  const il_model *m = d->model;
  const il_hparams *hp = &m->hp;
  if (max_tokens < 1 || max_logits < 1 || max_logits > max_tokens)
    return il_error(IL_ERR_INVALID_ARG, "forward state: %d tokens with %d logits rows", max_tokens, max_logits);
  st->max_tokens = max_tokens;
  st->max_logits = max_logits;
  if (act_type != IL_DTYPE_F32 && act_type != IL_DTYPE_F16 && act_type != IL_DTYPE_BF16)
    return il_error(IL_ERR_UNSUPPORTED, "forward state: activations of type %s (f32, f16 or bf16)", il_dtype_name(act_type));
  st->act_type = act_type;
  st->chunk = il_forward_chunk_rows(act_type, max_tokens);
  if (d->embd_b) il__lane_add(st, d->embd_b); /* a tensor-parallel shard past the first has neither */
  for (int l = 0; l < hp->n_layer; l++) {
    il_forward_lane *ln = il__lane_add(st, d->layer_b[l]);
    if (!ln) return il_error(IL_ERR_UNSUPPORTED, "placement: more than %d backends in one model", IL_MAX_LANES);
    ln->has_layers = true;
  }
  il_forward_lane *lo = d->out_b ? il__lane_add(st, d->out_b) : NULL;
  if (d->out_b && !lo) return il_error(IL_ERR_UNSUPPORTED, "placement: more than %d backends in one model", IL_MAX_LANES);
  if (lo) lo->has_output = true;
  for (int l = 0; hp->n_expert && l < hp->n_layer; l++) {
    il_forward_lane *le = il__lane_add(st, d->exps_b ? d->exps_b : d->layer_b[l]);
    if (!le) return il_error(IL_ERR_UNSUPPORTED, "placement: more than %d backends in one model", IL_MAX_LANES);
    le->has_exps = true;
  }
  il_status s = IL_OK;
  for (int i = 0; i < st->n_lanes && s == IL_OK; i++) {
    int l = 0; /* the KV cells of the lane's first layer (the others are of the same type) */
    while (l < hp->n_layer - 1 && d->layer_b[l] != st->lane[i].b) l++;
    st->lane[i].take = il_forward_take(st->lane[i].b, act_type, kv[l].k.type);
    s = il__lane_init(&st->lane[i], m, act_type, max_tokens, max_logits);
  }
  if (s == IL_OK) {
    st->host_batch = il_mem_alloc(IL_MEM_STAGING, (size_t)max_tokens * (size_t)il__batch_cols(hp) * sizeof(int32_t),
                                  "batch staging");
    if (!st->host_batch) s = IL_ERR_OOM;
  }
  if (s == IL_OK && hp->n_expert) s = il__moe_host_init(st, hp);
  if (s == IL_OK && st->n_lanes > 1) {
    st->staging = il_mem_alloc(IL_MEM_STAGING, (size_t)max_tokens * (size_t)hp->n_embd * 4, "residual staging");
    if (!st->staging) s = IL_ERR_OOM;
  }
  for (int i = 0; i < st->n_lanes && s == IL_OK; i++) {
    il_forward_lane *ln = &st->lane[i];
    if (!ln->has_layers) continue;
    int l = 0;
    while (d->layer_b[l] != ln->b) l++;
    ln->attn = attn_for ? attn_for(ctx, ln->b) : NULL;
    if (!ln->attn) {
      s = il_error(IL_ERR_UNSUPPORTED, "forward state: no attention kernel for a backend");
      break;
    }
    il_attn_args a = il_forward_attn_args(m, ln, max_tokens, &kv[l]);
    size_t ws = ln->attn->workspace(ln->b, &a);
    int g = l; /* a ring's view is smaller: the lane's first layer without one, if any, too */
    while (g < hp->n_layer && (d->layer_b[g] != ln->b || kv[g].ring)) g++;
    if (g < hp->n_layer && g != l) {
      a = il_forward_attn_args(m, ln, max_tokens, &kv[g]);
      const size_t wg = ln->attn->workspace(ln->b, &a);
      ws = wg > ws ? wg : ws;
    }
    if (ws)
      s = il_backend_tensor_new(ln->b, IL_MEM_WORKSPACE, 1, (int64_t)((ws + 3) / 4), IL_DTYPE_F32, "attention workspace",
                                &ln->attn_ws);
  }
  for (int i = 0; i < st->n_lanes && s == IL_OK; i++) s = il__lane_reserve(&st->lane[i], d, max_tokens);
  if (s != IL_OK) il_forward_state_free(st);
  return s;
}

void il_forward_state_free(il_forward_state *st) {
  for (int i = 0; i < st->n_lanes; i++) {
    il_forward_lane *ln = &st->lane[i];
    il_tensor *ts[] = {&ln->x,     &ln->xb,          &ln->xo,     &ln->q,      &ln->att,   &ln->k,
                       &ln->v,     &ln->hb,          &ln->hb2,    &ln->logits, &ln->batch, &ln->attn_ws,
                       &ln->wide,  &ln->moe_logits,  &ln->moe_x,  &ln->moe_h,  &ln->moe_h2, &ln->moe_y};
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) il_backend_tensor_free(ln->b, ts[j]);
    if (ln->reserved) ln->b->ops->reserve_act(ln->b, st->act_type, 0, 0);
  }
  il_mem_free(st->host_batch);
  il_mem_free(st->staging);
  il_mem_free(st->moe_logits);
  il_mem_free(st->moe_sel);
  il_mem_free(st->moe_w);
  il_mem_free(st->moe_slot);
  il_mem_free(st->moe_rows);
  il_mem_free(st->moe_out);
  memset(st, 0, sizeof *st);
}

/* ---- numerics: an observer of every op's result ----
 * With a numerics record the backends report each op's output (backend.h: il_op_observer) to
 * il_numerics_observe, named by the op (the output view's name) and the layer (the record's
 * `layer`, set here before each op): its largest magnitude before rounding, then inf/nan
 * counted in what the stored type keeps (F16 turns |x| > 65504 into inf), so the first op that
 * made them is named. */

void il_numerics_reset(il_numerics *r) { *r = (il_numerics){.bad_layer = -1}; }

/* Counts inf/nan in t and records the first place they appear. */
static il_status il__bad(il_numerics *r, il_backend *b, il_tensor t, int32_t layer, const char *block) {
  if (r->bad_layer >= 0) return IL_OK;
  int64_t n = 0;
  IL_TRY(b->ops->count_nonfinite(b, t, &n));
  if (n) r->bad_layer = layer, r->bad_block = block, r->bad_count = n;
  return IL_OK;
}

il_status il_numerics_observe(void *ctx, il_backend *b, il_op op, il_tensor y, il_dtype stored) {
  il_numerics *r = ctx;
  if ((unsigned)op < IL_OP_COUNT) r->observed[op]++;
  int64_t n = 0;
  float m = 0;
  IL_TRY(b->ops->value_stats(b, y, &n, &m));
  if (m > r->max_abs) r->max_abs = m, r->max_abs_layer = r->layer, r->max_abs_op = y.name;
  if (stored != IL_DTYPE_F32) IL_TRY(b->ops->round_to(b, y, stored));
  return il__bad(r, b, y, r->layer, y.name);
}

/* The second half of il_numerics_observe for a result the backend reported in F32 (the pass's
 * scratch) and the pass then stores at `stored`: inf/nan counted in what that type keeps. */
static il_status il__numerics_stored(il_numerics *r, il_backend *b, il_tensor y, il_dtype stored) {
  IL_TRY(b->ops->round_to(b, y, stored));
  return il__bad(r, b, y, r->layer, y.name);
}

/* The ops that follow are layer's (for the numerics record). */
static void il__layer(il_forward_state *st, int32_t layer) {
  if (st->numerics) st->numerics->layer = layer;
}

/* ---- ops over chunks of rows ----
 * Decided per op (the ops a loop body calls, `ops`, against the lane's `take`): where the
 * lane's backend computes on the activations' type itself for every one of them (every F32
 * pass; cpu and sim with F16/BF16; cuda's ops but matmul and attention), the op is one call on
 * the buffers and the backend reports its outputs. Where it does not, the op runs as a loop over chunks of
 * st->chunk rows: inputs taken with il__in and outputs with il__out as F32 copies in the lane's
 * scratch (`wide`), the op computed there, and every output handed to il__put, which narrows it
 * back. Either way the backend reports every op it runs (each inner op of a loop body too: the
 * per-head norms, the embedding's get_rows before its scale), the scratch ones as the F32 they
 * stay; il__put adds the inf/nan count of the type it stores, so each result is reported once. */
typedef struct {
  il_forward_state *st;
  il_forward_lane *ln;
  uint32_t ops;        /* the ops the loop body calls (1 << il_op) */
  bool direct;         /* the backend takes the 16-bit tensors of all of them */
  int32_t n, r0, rows; /* rows [r0, r0 + rows) of a batch of n */
  size_t used;         /* bytes of ln->wide this chunk's op has taken */
} il__chunk;

static il__chunk il__chunk_at(il_forward_state *st, il_forward_lane *ln, uint32_t ops, int32_t n, int32_t r0) {
  const bool direct = (ln->take & ops) == ops;
  const int32_t left = n - r0, step = direct ? n : st->chunk;
  ln->b->observer = st->numerics ? (il_op_observer){il_numerics_observe, st->numerics} : (il_op_observer){0};
  return (il__chunk){st, ln, ops, direct, n, r0, left < step ? left : step, 0};
}

#define IL__OP(op) (1u << (op))
#define IL__CHUNKS(k, st, ln, mask, n)                                                                                  \
  for (il__chunk k = il__chunk_at(st, ln, mask, n, 0); k.rows > 0; k = il__chunk_at(st, ln, k.ops, n, k.r0 + k.rows))

/* Where the op writes the chunk's rows of t: t's rows when t is F32 or the backend takes its
 * type, else F32 scratch. */
static il_status il__out(il__chunk *k, il_tensor t, il_tensor *out) {
  if (t.type == IL_DTYPE_F32 || k->direct) {
    *out = il_tensor_rows(t, k->r0, k->rows);
    return IL_OK;
  }
  const il_tensor *w = &k->ln->wide;
  const size_t bytes = (size_t)k->rows * (size_t)t.cols * 4;
  if (!w->buf || k->used + bytes > (size_t)w->cols * 4)
    return il_error(IL_ERR_INTERNAL, "forward: no room for '%s' in the f32 chunk scratch", t.name ? t.name : "tensor");
  *out = il_tensor_make(w->buf, w->off + k->used, k->rows, t.cols, IL_DTYPE_F32, t.name);
  k->used += bytes;
  return IL_OK;
}

/* The chunk's rows of t as the op reads them: t's rows, or widened into scratch. */
static il_status il__in(il__chunk *k, il_tensor t, il_tensor *out) {
  IL_TRY(il__out(k, t, out));
  if (t.type == IL_DTYPE_F32 || k->direct) return IL_OK;
  return k->ln->b->ops->copy(k->ln->b, *out, il_tensor_rows(t, k->r0, k->rows));
}

/* Entries [r0, r0 + n) of an I32 vector (ids, positions, sequences, slots). */
static il_tensor il__ids(il_tensor t, int32_t r0, int32_t n) {
  t.off += (size_t)r0 * 4;
  t.cols = n;
  t.stride = (size_t)n * 4;
  return t;
}

/* y, the op's F32 result for the chunk's rows of t, where the pass computed it on copies (the
 * backend reported it): its inf/nan at t's type checked, then stored at t's type. */
static il_status il__put(il__chunk *k, il_tensor y, il_tensor t) {
  if (t.type == IL_DTYPE_F32 || k->direct) return IL_OK;
  il_backend *b = k->ln->b;
  if (k->st->numerics) IL_TRY(il__numerics_stored(k->st->numerics, b, y, t.type));
  return b->ops->copy(b, il_tensor_rows(t, k->r0, k->rows), y);
}

/* t named for the reports (numerics, errors) by the op that writes it. */
static il_tensor il__as(il_tensor t, const char *op) {
  t.name = op;
  return t;
}

/* t's rows cut into heads of head_dim: [rows * cols / head_dim x head_dim], one row per head,
 * for the per-head ops (QK-norm). t's rows must be contiguous (activation buffers and the F32
 * chunk scratch are). */
static il_status il__heads(il_tensor t, int64_t head_dim, il_tensor *out) {
  if (t.stride != il_tensor_row_bytes(t.type, t.cols) || t.cols % head_dim)
    return il_error(IL_ERR_INTERNAL, "forward: '%s' cannot be viewed as heads of %lld", t.name ? t.name : "tensor",
                    (long long)head_dim);
  t.rows *= t.cols / head_dim;
  t.cols = head_dim;
  t.stride = il_tensor_row_bytes(t.type, head_dim);
  *out = t;
  return IL_OK;
}

/* x = rmsnorm(x) * g per head of x, in place (qwen3's q and k norms). */
static il_status il__head_norm(il_backend *b, il_tensor x, il_tensor g, float eps, const char *op) {
  il_tensor h;
  IL_TRY(il__heads(il__as(x, op), g.cols, &h));
  return b->ops->rmsnorm(b, h, h, g, eps);
}

/* Whether the pass may use the backend's fused ops (matmul_add, gate_up_swiglu): F32
 * activations (16-bit ones go through the chunks of the ops themselves) and no numerics check
 * (it observes every op's own output). The backend's fused op is its composition, bit for bit. */
static bool il__fuse(const il_forward_state *st) {
  return st->act_type == IL_DTYPE_F32 && !st->numerics;
}

/* Y = rmsnorm(X) * g over rows [0, n). */
static il_status il__norm(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, il_tensor g,
                          float eps, int32_t layer, const char *op) {
  il__layer(st, layer);
  Y = il__as(Y, op);
  IL__CHUNKS(k, st, ln, IL__OP(IL_OP_RMSNORM), n) {
    il_tensor x, y;
    IL_TRY(il__in(&k, X, &x));
    IL_TRY(il__out(&k, Y, &y));
    IL_TRY(ln->b->ops->rmsnorm(ln->b, y, x, g, eps));
    IL_TRY(il__put(&k, y, Y));
  }
  return IL_OK;
}

/* Y[i] = X W[i]^T for i < m (one matmul, or matmul_multi reading X once), plus bias[i] when
 * given. op NULL: Y is F32 and not reported (the logits). */
static il_status il__mm(il_forward_state *st, il_forward_lane *ln, int32_t n, int m, const il_tensor *Y,
                        const il_tensor *W, const il_tensor *bias, il_tensor X, int32_t layer, const char *const *op) {
  il_backend *b = ln->b;
  il__layer(st, layer);
  il_status s = IL_OK;
  IL__CHUNKS(k, st, ln, IL__OP(IL_OP_MATMUL), n) {
    il_tensor x, y[3];
    if (!op) b->observer = (il_op_observer){0};
    if ((s = il__in(&k, X, &x)) != IL_OK) break;
    for (int i = 0; i < m && s == IL_OK; i++) s = il__out(&k, op ? il__as(Y[i], op[i]) : Y[i], &y[i]);
    if (s == IL_OK) s = m == 1 && !bias ? b->ops->matmul(b, y[0], W[0], x) : b->ops->matmul_multi(b, m, y, W, bias, x);
    for (int i = 0; op && i < m && s == IL_OK; i++) s = il__put(&k, y[i], Y[i]);
    if (s != IL_OK) break;
  }
  return s;
}

/* Y = f(Y, X) elementwise: the residual add (Y += X, IL_OP_ADD), SwiGLU (Y = silu(Y) * X,
 * IL_OP_SWIGLU) or GeGLU (Y = gelu(Y) * X, IL_OP_GEGLU). */
static il_status il__binary(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, il_op f,
                            int32_t layer, const char *op) {
  il_backend *b = ln->b;
  il__layer(st, layer);
  Y = il__as(Y, op);
  IL__CHUNKS(k, st, ln, IL__OP(f), n) {
    il_tensor y, x;
    IL_TRY(il__in(&k, Y, &y));
    IL_TRY(il__in(&k, X, &x));
    IL_TRY(f == IL_OP_SWIGLU ? b->ops->swiglu(b, y, x) : f == IL_OP_GEGLU ? b->ops->geglu(b, y, x) : b->ops->add(b, y, x));
    IL_TRY(il__put(&k, y, Y));
  }
  return IL_OK;
}

/* Moves rows [0, n) of the residual from lane a to lane b through host staging. */
static il_status il__move(il_forward_state *st, const il_forward_lane *a, const il_forward_lane *b, int32_t n) {
  const il_tensor src = il_tensor_rows(a->x, 0, n), dst = il_tensor_rows(b->x, 0, n);
  const size_t bytes = il_tensor_span(&src);
  IL_TRY(a->b->ops->download(a->b, st->staging, src, bytes));
  IL_TRY(b->b->ops->upload(b->b, dst, st->staging, bytes));
  st->bytes_moved += 2 * (uint64_t)bytes;
  return IL_OK;
}

/* ---- the pass, block by block ---- */

/* Checks the entries and writes them to host_batch as a lane's batch: ids, positions,
 * sequences, slots. *n_out: how many want logits. */
static il_status il__upload_batch_host(il_forward_state *st, const il_hparams *hp, const il_batch_entry *batch,
                                       int32_t n, const il_kv_view *kv, const int32_t *slots, int32_t *n_out) {
  if (n <= 0 || n > st->max_tokens)
    return il_error(IL_ERR_INVALID_ARG, "forward: batch of %d entries (must be 1..%d)", n, st->max_tokens);
  *n_out = 0;
  int32_t *ids = st->host_batch, *pos = ids + n, *seq = ids + 2 * n, *slot = ids + 3 * n, *ring_slot = ids + 4 * n;
  int32_t ring = 0; /* the sliding-window layers' ring (every such view has the same) */
  for (int32_t l = 0; l < hp->n_layer && !ring; l++) ring = kv[l].ring;
  for (int32_t i = 0; i < n; i++) {
    const il_batch_entry *e = &batch[i];
    if (e->token < 0 || e->token >= hp->n_vocab)
      return il_error(IL_ERR_RANGE, "batch entry %d: token id %d is outside the vocabulary [0, %d)", i, e->token,
                      hp->n_vocab);
    if (e->seq < 0 || e->seq >= kv[0].n_seq)
      return il_error(IL_ERR_RANGE, "batch entry %d: sequence %d outside [0, %d)", i, e->seq, kv[0].n_seq);
    if (e->pos < 0 || e->pos >= kv[0].n_ctx)
      return il_error(IL_ERR_RANGE, "batch entry %d: position %d outside the context [0, %d)", i, e->pos, kv[0].n_ctx);
    ids[i] = e->token;
    pos[i] = e->pos;
    seq[i] = e->seq;
    slot[i] = slots[i];
    if (ring) ring_slot[i] = e->seq * ring + e->pos % ring;
    *n_out += e->logits;
  }
  if (*n_out > st->max_logits)
    return il_error(IL_ERR_INVALID_ARG, "forward: %d entries want logits; the buffers hold %d", *n_out, st->max_logits);
  return IL_OK;
}

/* Checks the entries and uploads them once to every lane. */
static il_status il__upload_batch(il_forward_state *st, const il_hparams *hp, const il_batch_entry *batch, int32_t n,
                                  const il_kv_view *kv, const int32_t *slots, int32_t *n_out) {
  IL_TRY(il__upload_batch_host(st, hp, batch, n, kv, slots, n_out));
  for (int i = 0; i < st->n_lanes; i++)
    IL_TRY(st->lane[i].b->ops->upload(st->lane[i].b, st->lane[i].batch, st->host_batch,
                                      (size_t)n * (size_t)il__batch_cols(hp) * sizeof(int32_t)));
  return IL_OK;
}

/* x = token_embd[ids]: the residual stream's first value. */
static il_status il__embed(const il_model_dev *d, il_forward_state *st, il_forward_lane *ln, int32_t n) {
  const il_tensor X = il__as(il_tensor_rows(ln->x, 0, n), "token_embd"), ids = il_forward_batch_views(ln, n).ids;
  il__layer(st, 0);
  const uint32_t ops = IL__OP(IL_OP_GET_ROWS) | (d->model->hp.gemma ? IL__OP(IL_OP_SCALE) : 0);
  IL__CHUNKS(k, st, ln, ops, n) {
    il_tensor x;
    IL_TRY(il__out(&k, X, &x));
    IL_TRY(ln->b->ops->get_rows(ln->b, x, d->tok_embd, il__ids(ids, k.r0, k.rows)));
    if (d->model->hp.gemma) IL_TRY(ln->b->ops->scale(ln->b, x, sqrtf((float)d->model->hp.n_embd)));
    IL_TRY(il__put(&k, x, X));
  }
  return IL_OK;
}

/* x += XO, gemma3's post-norm of XO first where the layer has one (post: buf NULL where not). */
static il_status il__residual(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor post, float eps, int32_t l,
                              const char *norm_op, const char *add_op) {
  const il_tensor X = il_tensor_rows(ln->x, 0, n), XO = il_tensor_rows(ln->xo, 0, n);
  if (post.buf) IL_TRY(il__norm(st, ln, n, XO, XO, post, eps, l, norm_op));
  return il__binary(st, ln, n, X, XO, IL_OP_ADD, l, add_op);
}

/* x += wo . attention(rope(q), cache + rope(k), v), q k v = W (rmsnorm(x) * attn_norm) (+ biases).
 * partial: stops at xo = wo . attention (a tensor-parallel shard's share of the sum). */
static il_status il__attention(const il_model *m, il_forward_state *st, il_forward_lane *ln, const il_layer_dev *L,
                               int32_t l, int32_t n, const il_kv_view *kv, bool partial) {
  static const char *const qkv_ops[3] = {"attn_q", "attn_k", "attn_v"}, *const wo_op[1] = {"attn_output"};
  const il_hparams *hp = &m->hp;
  float base, scale;
  il_hparams_rope(hp, l, &base, &scale);
  const il_rope_params rq = {hp->n_head, hp->head_dim, hp->n_rot, base, scale, hp->rope_mode};
  const il_rope_params rk = {hp->n_head_kv, hp->head_dim, hp->n_rot, base, scale, hp->rope_mode};
  il_backend *b = ln->b;
  const il_attn_args a0 = il_forward_attn_args(m, ln, n, kv);
  const il_tensor slots = kv->ring ? il_forward_batch_views(ln, n).ring_slots : il_forward_batch_views(ln, n).slots;
  const il_tensor X = il_tensor_rows(ln->x, 0, n), XB = il_tensor_rows(ln->xb, 0, n), XO = il_tensor_rows(ln->xo, 0, n),
                  Q = il_tensor_rows(ln->q, 0, n), K = il_tensor_rows(ln->k, 0, n), V = il_tensor_rows(ln->v, 0, n),
                  ATT = il_tensor_rows(ln->att, 0, n);
  IL_TRY(il__norm(st, ln, n, XB, X, L->attn_norm, hp->norm_eps, l, "attn_norm"));
  const il_tensor wqkv[3] = {L->wq, L->wk, L->wv}, yqkv[3] = {Q, K, V}, bqkv[3] = {L->bq, L->bk, L->bv};
  IL_TRY(il__mm(st, ln, n, 3, yqkv, wqkv, L->bq.buf ? bqkv : NULL, XB, l, qkv_ops));
  const uint32_t rope_ops =
      IL__OP(IL_OP_ROPE) | IL__OP(IL_OP_KV_STORE) | (L->q_norm.buf || L->k_norm.buf ? IL__OP(IL_OP_RMSNORM) : 0);
  IL__CHUNKS(k, st, ln, rope_ops, n) { /* q and k normed per head (qwen3) and rotated; k and v into the cache */
    il_tensor q, kk, vv;
    IL_TRY(il__in(&k, il__as(Q, "rope"), &q));
    IL_TRY(il__in(&k, K, &kk));
    IL_TRY(il__in(&k, V, &vv));
    if (L->q_norm.buf) IL_TRY(il__head_norm(b, q, L->q_norm, hp->norm_eps, "attn_q_norm"));
    if (L->k_norm.buf) IL_TRY(il__head_norm(b, kk, L->k_norm, hp->norm_eps, "attn_k_norm"));
    IL_TRY(b->ops->rope_kv_store(b, q, kk, vv, il__ids(a0.pos, k.r0, k.rows), &rq, &rk, kv, il__ids(slots, k.r0, k.rows)));
    IL_TRY(il__put(&k, q, Q));
  }
  IL__CHUNKS(k, st, ln, IL__OP(IL_OP_ATTENTION), n) {
    il_attn_args a = a0;
    IL_TRY(il__in(&k, Q, &a.q));
    IL_TRY(il__out(&k, il__as(ATT, "attention"), &a.out));
    a.pos = il__ids(a0.pos, k.r0, k.rows);
    a.seq = il__ids(a0.seq, k.r0, k.rows);
    a.slice = st->attn_slice;
    /* a local layer's window, where the context is longer than it (shorter: it masks nothing) */
    if (il_hparams_window(hp, l) && hp->swa < kv->n_ctx) a.window = hp->swa;
    IL_TRY(ln->attn->run(b, &a, ln->attn_ws));
    IL_TRY(il__put(&k, a.out, ATT));
  }
  if (!partial && il__fuse(st) && !L->attn_post_norm.buf && b->ops->matmul_add) { /* the add in the matmul's epilogue */
    il__layer(st, l);
    return b->ops->matmul_add(b, il__as(X, "attention residual"), L->wo, ATT, il__as(XO, "attn_output"));
  }
  IL_TRY(il__mm(st, ln, n, 1, &XO, &L->wo, NULL, ATT, l, wo_op));
  return partial ? IL_OK
                 : il__residual(st, ln, n, L->attn_post_norm, hp->norm_eps, l, "post_attention_norm", "attention residual");
}

/* x += w_down . (silu(w_gate . h) * (w_up . h)), h = rmsnorm(x) * ffn_norm. partial: stops at
 * xo = w_down . (...), as il__attention. */
static il_status il__ffn(const il_model *m, il_forward_state *st, il_forward_lane *ln, const il_layer_dev *L, int32_t l,
                         int32_t n, bool partial) {
  static const char *const gu_ops[2] = {"ffn_gate", "ffn_up"}, *const down_op[1] = {"ffn_down"};
  const il_tensor X = il_tensor_rows(ln->x, 0, n), XB = il_tensor_rows(ln->xb, 0, n), XO = il_tensor_rows(ln->xo, 0, n),
                  HB = il_tensor_rows(ln->hb, 0, n), HB2 = il_tensor_rows(ln->hb2, 0, n);
  il_backend *b = ln->b;
  IL_TRY(il__norm(st, ln, n, XB, X, L->ffn_norm, m->hp.norm_eps, l, "ffn_norm"));
  if (il__fuse(st) && !m->hp.gemma && b->ops->gate_up_swiglu) {
    il__layer(st, l);
    IL_TRY(b->ops->gate_up_swiglu(b, il__as(HB, "ffn_swiglu"), il__as(HB2, "ffn_up"), L->w_gate, L->w_up, XB));
  } else {
    const il_tensor wgu[2] = {L->w_gate, L->w_up}, ygu[2] = {HB, HB2};
    IL_TRY(il__mm(st, ln, n, 2, ygu, wgu, NULL, XB, l, gu_ops));
    if (m->hp.gemma) IL_TRY(il__binary(st, ln, n, HB, HB2, IL_OP_GEGLU, l, "ffn_geglu"));
    else IL_TRY(il__binary(st, ln, n, HB, HB2, IL_OP_SWIGLU, l, "ffn_swiglu"));
  }
  if (!partial && il__fuse(st) && !L->ffn_post_norm.buf && b->ops->matmul_add) {
    il__layer(st, l);
    return b->ops->matmul_add(b, il__as(X, "feed-forward residual"), L->w_down, HB, il__as(XO, "ffn_down"));
  }
  IL_TRY(il__mm(st, ln, n, 1, &XO, &L->w_down, NULL, HB, l, down_op));
  return partial ? IL_OK
                 : il__residual(st, ln, n, L->ffn_post_norm, m->hp.norm_eps, l, "post_ffw_norm", "feed-forward residual");
}

/* ---- mixture of experts ---- */

void il_moe_route(const float *logits, int32_t n_expert, int32_t k, bool norm, int32_t *sel, float *w) {
  float p[512]; /* n_expert <= 512 (il_hparams_validate) */
  uint8_t taken[512] = {0};
  float mx = logits[0], sum = 0;
  for (int32_t e = 1; e < n_expert; e++) mx = logits[e] > mx ? logits[e] : mx;
  for (int32_t e = 0; e < n_expert; e++) sum += p[e] = expf(logits[e] - mx);
  float wsum = 0;
  for (int32_t r = 0; r < k; r++) {
    int32_t best = -1;
    for (int32_t e = 0; e < n_expert; e++)
      if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
    taken[best] = 1;
    sel[r] = best;
    wsum += w[r] = p[best] / sum;
  }
  for (int32_t r = 0; norm && r < k; r++) w[r] /= wsum;
}

/* One row of activations at act_type to F32 and back (the host's share of the MoE branch). */
static il_status il__row_f32(il_dtype act, const void *src, float *dst, int64_t n) {
  if (act == IL_DTYPE_F32) return memcpy(dst, src, (size_t)n * 4), IL_OK;
  return il_dequantize_row(act, src, dst, n);
}

static il_status il__row_act(il_dtype act, const float *src, void *dst, int64_t n) {
  if (act == IL_DTYPE_F32) return memcpy(dst, src, (size_t)n * 4), IL_OK;
  return il_quantize_row(act, src, dst, n);
}

/* Expert e of layer l on the experts' lane le for the cnt rows gathered in `rows` (at
 * act_type): y = down_e . (silu(gate_e . x) * (up_e . x)), downloaded back into `rows`. */
static il_status il__expert(const il_moe_dev *M, const il_hparams *hp, il_forward_state *st, il_forward_lane *le,
                            int32_t l, int32_t e, int32_t cnt, void *rows) {
  static const char *const gu_ops[2] = {"ffn_gate_exps", "ffn_up_exps"}, *const down_op[1] = {"ffn_down_exps"};
  il_backend *b = le->b;
  const il_tensor MX = il_tensor_rows(le->moe_x, 0, cnt), H = il_tensor_rows(le->moe_h, 0, cnt),
                  H2 = il_tensor_rows(le->moe_h2, 0, cnt), MY = il_tensor_rows(le->moe_y, 0, cnt);
  const size_t bytes = il_tensor_span(&MX);
  IL_TRY(b->ops->upload(b, MX, rows, bytes));
  const il_tensor wgu[2] = {il_tensor_rows(M->gate_exps, (int64_t)e * hp->n_ff_exp, hp->n_ff_exp),
                            il_tensor_rows(M->up_exps, (int64_t)e * hp->n_ff_exp, hp->n_ff_exp)},
                  ygu[2] = {H, H2}, wd = il_tensor_rows(M->down_exps, (int64_t)e * hp->n_embd, hp->n_embd);
  IL_TRY(il__mm(st, le, cnt, 2, ygu, wgu, NULL, MX, l, gu_ops));
  IL_TRY(il__binary(st, le, cnt, H, H2, IL_OP_SWIGLU, l, "ffn_moe_swiglu"));
  IL_TRY(il__mm(st, le, cnt, 1, &MY, &wd, NULL, H, l, down_op));
  IL_TRY(b->ops->download(b, rows, MY, bytes));
  st->expert_bytes += 2 * (uint64_t)bytes;
  return IL_OK;
}

/* The MoE feed-forward block: x += sum over each token's k experts of w_r * expert_r(h),
 * h = rmsnorm(x) * ffn_norm. The router runs on the layer's lane; its logits come to the host,
 * which picks each token's experts (il_moe_route), gathers every expert's rows and runs the
 * expert on the experts' lane (the layer's, or the CPU with --place exps=cpu); the weighted sum
 * is taken on the host in F32, rank by rank, so it is the same wherever the experts ran. */
static il_status il__moe(const il_model_dev *d, il_forward_state *st, il_forward_lane *ln, const il_layer_dev *L,
                         int32_t l, int32_t n) {
  const il_hparams *hp = &d->model->hp;
  const il_moe_dev *M = &d->moe[l];
  il_forward_lane *le = il_forward_lane_of(st, d->exps_b ? d->exps_b : ln->b);
  const int32_t ne = hp->n_expert, k = hp->n_expert_used, dim = hp->n_embd;
  const size_t rb = il_tensor_row_bytes(st->act_type, dim);
  const il_tensor X = il_tensor_rows(ln->x, 0, n), XB = il_tensor_rows(ln->xb, 0, n), XO = il_tensor_rows(ln->xo, 0, n),
                  LG = il_tensor_rows(ln->moe_logits, 0, n);
  IL_TRY(il__norm(st, ln, n, XB, X, L->ffn_norm, hp->norm_eps, l, "ffn_norm"));
  IL_TRY(il__mm(st, ln, n, 1, &LG, &M->gate_inp, NULL, XB, l, NULL));
  IL_TRY(ln->b->ops->download(ln->b, st->moe_logits, LG, (size_t)n * (size_t)ne * 4));
  for (int32_t t = 0; t < n; t++)
    il_moe_route(st->moe_logits + (size_t)t * ne, ne, k, hp->expert_weights_norm, st->moe_sel + (size_t)t * k,
                 st->moe_w + (size_t)t * k);
  uint8_t *normed = st->moe_rows, *gather = normed + (size_t)st->max_tokens * rb;
  IL_TRY(ln->b->ops->download(ln->b, normed, XB, (size_t)n * rb));
  st->expert_bytes += (uint64_t)n * rb;
  int32_t *slot = st->moe_slot; /* an expert takes a token's row once, so at most n rows */
  for (int32_t e = 0; e < ne; e++) {
    int32_t cnt = 0;
    for (int32_t i = 0; i < n * k; i++)
      if (st->moe_sel[i] == e) {
        memcpy(gather + (size_t)cnt * rb, normed + (size_t)(i / k) * rb, rb);
        slot[cnt++] = i;
      }
    if (!cnt) continue;
    IL_TRY(il__expert(M, hp, st, le, l, e, cnt, gather));
    for (int32_t j = 0; j < cnt; j++)
      IL_TRY(il__row_f32(st->act_type, gather + (size_t)j * rb, st->moe_out + (size_t)slot[j] * dim, dim));
  }
  for (int32_t t = 0; t < n; t++) { /* the weighted sum, into rank 0's row, then at act_type */
    float *acc = st->moe_out + (size_t)t * k * dim;
    const float *w = st->moe_w + (size_t)t * k;
    for (int32_t i = 0; i < dim; i++) acc[i] *= w[0];
    for (int32_t r = 1; r < k; r++) {
      const float *o = acc + (size_t)r * dim;
      for (int32_t i = 0; i < dim; i++) acc[i] += w[r] * o[i];
    }
    IL_TRY(il__row_act(st->act_type, acc, gather + (size_t)t * rb, dim));
  }
  IL_TRY(ln->b->ops->upload(ln->b, XO, gather, (size_t)n * rb));
  st->expert_bytes += (uint64_t)n * rb;
  return il__binary(st, ln, n, X, XO, IL_OP_ADD, l, "feed-forward residual");
}

/* logits = output . (rmsnorm(x) * output_norm), for the rows that want them, moved together
 * to rows 0.. first. */
static il_status il__logits(const il_model_dev *d, il_forward_state *st, il_forward_lane *lo, const il_batch_entry *batch,
                            int32_t n, int32_t n_out, int32_t o0) {
  const il_hparams *hp = &d->model->hp;
  il_backend *b = lo->b;
  int32_t j = 0;
  for (int32_t i = 0; i < n; i++)
    if (batch[i].logits) {
      if (j != i) IL_TRY(b->ops->copy(b, il_tensor_rows(lo->x, j, 1), il_tensor_rows(lo->x, i, 1)));
      j++;
    }
  if (n_out == 0) return IL_OK;
  const il_tensor XN = il_tensor_rows(lo->xb, 0, n_out), LG = il_tensor_rows(lo->logits, o0, n_out);
  IL_TRY(il__norm(st, lo, n_out, XN, il_tensor_rows(lo->x, 0, n_out), d->out_norm, hp->norm_eps, hp->n_layer,
                  "output_norm"));
  IL_TRY(il__mm(st, lo, n_out, 1, &LG, &d->output, NULL, XN, hp->n_layer, NULL));
  /* logits are downloaded as F32: checked, not rounded */
  return st->numerics ? il__bad(st->numerics, b, LG, hp->n_layer, "output") : IL_OK;
}

/* Layer l on lane ln: the attention block, then the feed-forward or MoE block. */
static il_status il__block(il_model_dev *d, il_forward_state *st, il_forward_lane *ln, int32_t l, int32_t n,
                           const il_kv_view *kv) {
  const il_model *m = d->model;
  const il_layer_dev *L;
  IL_TRY(il_model_dev_layer(d, l, &L));
  IL_TRY(il__attention(m, st, ln, L, l, n, kv, false));
  return m->hp.n_expert ? il__moe(d, st, ln, L, l, n) : il__ffn(m, st, ln, L, l, n, false);
}

/* The token's path after the batch's upload (the file's opening paragraph), one backend lane
 * at a time. */
static il_status il__forward_ops(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                                 const il_kv_view *kv, int32_t n_out) {
  const il_model *m = d->model;
  il_forward_lane *cur = il_forward_lane_of(st, d->embd_b);
  IL_TRY(il__embed(d, st, cur, n));
  for (int32_t l = 0; l < m->hp.n_layer; l++) {
    il_forward_lane *ln = il_forward_lane_of(st, d->layer_b[l]);
    if (ln != cur) IL_TRY(il__move(st, cur, ln, n)); /* the residual crosses to the layer's backend */
    cur = ln;
    IL_TRY(il__block(d, st, ln, l, n, &kv[l]));
  }
  il_forward_lane *lo = il_forward_lane_of(st, d->out_b);
  if (lo != cur) IL_TRY(il__move(st, cur, lo, n));
  return il__logits(d, st, lo, batch, n, n_out, 0);
}

static il_status il__forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                             const il_kv_view *kv, const int32_t *slots, int32_t *n_logits) {
  int32_t n_out = 0;
  st->passes++;
  IL_TRY(il__upload_batch(st, &d->model->hp, batch, n, kv, slots, &n_out));
  IL_TRY(il__forward_ops(d, st, batch, n, kv, n_out));
  *n_logits = n_out;
  return IL_OK;
}

il_status il_model_forward_upload(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                                  const il_kv_view *kv, const int32_t *slots, int32_t *n_logits) {
  *n_logits = 0;
  st->passes++;
  return il__upload_batch(st, &d->model->hp, batch, n, kv, slots, n_logits);
}

il_status il_model_forward_ops(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                               const il_kv_view *kv, int32_t n_logits) {
  return il__forward_ops(d, st, batch, n, kv, n_logits);
}

il_status il_model_forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                           const il_kv_view *kv, const int32_t *slots, int32_t *n_logits) {
  *n_logits = 0;
  /* with the check on, the lanes' backends report every op's result for the pass */
  for (int i = 0; i < st->n_lanes; i++)
    st->lane[i].b->observer = st->numerics ? (il_op_observer){il_numerics_observe, st->numerics} : (il_op_observer){0};
  il_status s = il__forward(d, st, batch, n, kv, slots, n_logits);
  for (int i = 0; i < st->n_lanes; i++) st->lane[i].b->observer = (il_op_observer){0};
  return s;
}

/* ---- pipelined micro-batches ----
 * The batch cut into micro-batches of consecutive entries; the components (embedding, layers,
 * logits) cut into stages, the runs of consecutive components on one lane. Stage s runs on its
 * own thread and takes micro-batch i once stage s - 1 has finished it, so while the second
 * device runs micro-batch 0's layers the first runs micro-batch 1's. A stage keeps the
 * micro-batches' order, so each layer's cache sees the entries in batch order as it does in
 * one pass. Micro-batch i's residual crosses stages in staging rows [r0_i, r0_i + n_i) and its
 * logits land at rows after the earlier micro-batches' logits. */
#define IL__MAX_MB 64

typedef struct {
  il_model_dev *d;
  il_forward_state *st;
  const il_batch_entry *batch;
  const il_kv_view *kv;
  int32_t n_mb, r0[IL__MAX_MB + 1], o0[IL__MAX_MB + 1]; /* micro-batch i: entries [r0[i], r0[i+1]) */
  int n_stages;
  int32_t first[IL_MAX_LANES + 1]; /* stage s: components [first[s], first[s+1]) (-1 embed, n_layer logits) */
  int cols;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int32_t done[IL_MAX_LANES]; /* micro-batches stage s has finished */
  uint64_t moved[IL_MAX_LANES];
  il_status failed;
  char why[1024];
} il__pipe;

static il_backend *il__component_b(const il_model_dev *d, int32_t c) {
  return c < 0 ? d->embd_b : c >= d->model->hp.n_layer ? d->out_b : d->layer_b[c];
}

static il_status il__pipe_mb(il__pipe *p, int s, int32_t i) {
  il_forward_state *st = p->st;
  il_forward_lane *ln = il_forward_lane_of(st, il__component_b(p->d, p->first[s]));
  const int32_t r0 = p->r0[i], n = p->r0[i + 1] - r0;
  const size_t row = ln->x.stride, bytes = (size_t)n * row;
  char *staging = (char *)st->staging + (size_t)r0 * row;
  IL_TRY(ln->b->ops->upload(ln->b, ln->batch, st->host_batch + (size_t)p->cols * r0, (size_t)n * p->cols * 4));
  if (s > 0) IL_TRY(ln->b->ops->upload(ln->b, il_tensor_rows(ln->x, 0, n), staging, bytes));
  for (int32_t c = p->first[s]; c < p->first[s + 1]; c++) {
    if (c < 0) {
      IL_TRY(il__embed(p->d, st, ln, n));
    } else if (c < p->d->model->hp.n_layer) {
      IL_TRY(il__block(p->d, st, ln, c, n, &p->kv[c]));
    } else {
      IL_TRY(il__logits(p->d, st, ln, p->batch + r0, n, p->o0[i + 1] - p->o0[i], p->o0[i]));
    }
  }
  if (s + 1 < p->n_stages) IL_TRY(ln->b->ops->download(ln->b, staging, il_tensor_rows(ln->x, 0, n), bytes));
  p->moved[s] += (uint64_t)bytes * ((s > 0) + (s + 1 < p->n_stages));
  return IL_OK;
}

typedef struct {
  il__pipe *p;
  int s;
} il__stage_arg;

static void *il__pipe_stage(void *arg) {
  il__pipe *p = ((il__stage_arg *)arg)->p;
  const int s = ((il__stage_arg *)arg)->s;
  for (int32_t i = 0; i < p->n_mb; i++) {
    pthread_mutex_lock(&p->lock);
    while (!p->failed && s > 0 && p->done[s - 1] <= i) pthread_cond_wait(&p->cond, &p->lock);
    const bool stop = p->failed != IL_OK;
    pthread_mutex_unlock(&p->lock);
    if (stop) break;
    const il_status r = il__pipe_mb(p, s, i);
    pthread_mutex_lock(&p->lock);
    if (r != IL_OK && !p->failed) {
      p->failed = r;
      snprintf(p->why, sizeof p->why, "stage %d, micro-batch %d: %s", s, i, il_error_detail());
    }
    if (r == IL_OK) p->done[s]++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (r != IL_OK) break;
  }
  return NULL;
}

/* The stages of d's placement: false where a backend would hold two stages (A, B, A), whose
 * lane the stage threads could not share. */
static bool il__pipe_stages(const il_model_dev *d, int32_t *first, int *n_stages) {
  const int32_t L = d->model->hp.n_layer;
  const il_backend *seen[IL_MAX_LANES + 1];
  *n_stages = 0;
  for (int32_t c = -1; c <= L; c++) {
    const il_backend *ln = il__component_b(d, c); /* one lane per backend */
    if (c > -1 && ln == il__component_b(d, c - 1)) continue;
    for (int k = 0; k < *n_stages; k++)
      if (seen[k] == ln) return false;
    if (*n_stages == IL_MAX_LANES) return false;
    seen[*n_stages] = ln;
    first[(*n_stages)++] = c;
  }
  first[*n_stages] = L + 1;
  return true;
}

/* host_batch (cols columns of n) rewritten as micro-batch blocks: block i, at entry r0[i] *
 * cols, holds its n_i entries' columns, each n_i long, as a lane's batch of n_i. */
static void il__batch_blocks(il_forward_state *st, int cols, const int32_t *r0, int32_t n_mb, int32_t n) {
  int32_t *all = st->host_batch, *tmp = (int32_t *)st->staging; /* staging is free before the stages run */
  memcpy(tmp, all, (size_t)n * cols * sizeof *all);
  for (int32_t i = 0; i < n_mb; i++) {
    const int32_t ni = r0[i + 1] - r0[i];
    for (int c = 0; c < cols; c++)
      memcpy(all + (size_t)cols * r0[i] + (size_t)c * ni, tmp + (size_t)c * n + r0[i], (size_t)ni * sizeof *all);
  }
}

int il_model_pipeline_stages(const il_model_dev *d) {
  int32_t first[IL_MAX_LANES + 1];
  int n = 0;
  return il__pipe_stages(d, first, &n) ? n : 0;
}

il_status il_model_forward_pipelined(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                                     const il_kv_view *kv, const int32_t *slots, int32_t n_mb, int32_t *n_logits) {
  il__pipe pipe = {.d = d, .st = st, .batch = batch, .kv = kv, .cols = il__batch_cols(&d->model->hp)}, *p = &pipe;
  if (n_mb > n) n_mb = n;
  if (n_mb > IL__MAX_MB) n_mb = IL__MAX_MB;
  /* one pass where there is nothing to overlap, or where the pass's shared host state (the
   * numerics check, MoE routing, streamed layer slots) would be touched by two stages at once */
  if (n_mb < 2 || st->numerics || d->model->hp.n_expert || d->stream || !il__pipe_stages(d, p->first, &p->n_stages) ||
      p->n_stages < 2)
    return il_model_forward(d, st, batch, n, kv, slots, n_logits);
  IL_TRY(il__upload_batch_host(st, &d->model->hp, batch, n, kv, slots, n_logits));
  p->n_mb = n_mb;
  for (int32_t i = 0; i <= n_mb; i++) p->r0[i] = (int32_t)(((int64_t)n * i) / n_mb);
  for (int32_t i = 0; i < n_mb; i++) {
    p->o0[i + 1] = p->o0[i];
    for (int32_t j = p->r0[i]; j < p->r0[i + 1]; j++) p->o0[i + 1] += batch[j].logits;
  }
  /* host_batch as micro-batch blocks: block i holds its entries' columns, each n_i long */
  il__batch_blocks(st, p->cols, p->r0, n_mb, n);
  st->passes++;
  st->pipelined_passes++;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->cond, NULL);
  il__stage_arg args[IL_MAX_LANES];
  pthread_t th[IL_MAX_LANES];
  bool started[IL_MAX_LANES] = {false};
  for (int s = 1; s < p->n_stages; s++) {
    args[s] = (il__stage_arg){p, s};
    started[s] = pthread_create(&th[s], NULL, il__pipe_stage, &args[s]) == 0;
    if (!started[s]) {
      pthread_mutex_lock(&p->lock);
      p->failed = IL_ERR_INTERNAL;
      snprintf(p->why, sizeof p->why, "forward: cannot start the thread of pipeline stage %d", s);
      pthread_cond_broadcast(&p->cond);
      pthread_mutex_unlock(&p->lock);
      break;
    }
  }
  args[0] = (il__stage_arg){p, 0};
  il__pipe_stage(&args[0]);
  for (int s = 1; s < p->n_stages; s++)
    if (started[s]) pthread_join(th[s], NULL);
  for (int s = 0; s < p->n_stages; s++) st->bytes_moved += p->moved[s];
  const il_status r = p->failed ? il_error(p->failed, "%s", p->why) : IL_OK;
  pthread_mutex_destroy(&p->lock);
  pthread_cond_destroy(&p->cond);
  return r;
}

/* ---- tensor parallelism (model/tp.h) ----
 * Every shard runs each block on its own device up to its partial xo (il__attention and il__ffn
 * with partial set), the partials are summed across the shards, and every shard adds the sum to
 * its copy of the residual. With NCCL (cuda) the shards' ops are queued one shard after the
 * other from this thread: each device runs its share while the host queues the next one's, and
 * the sum is queued on every device's stream in one group. With the host's sum (cpu, sim) each
 * shard runs on a thread of its own, which meet at a barrier around each sum (computed by shard
 * 0's thread), so the devices compute at once as GPUs would; with --check-numerics (one record
 * for every op) they run in turn on this thread. */

/* xo = the sum of every shard's xo, on every shard. */
static il_status il__tp_reduce(il_model_tp *t, il_forward_lane *const *ln, int32_t n) {
  il_tensor parts[IL_TP_MAX];
  for (int s = 0; s < t->n; s++) parts[s] = il_tensor_rows(ln[s]->xo, 0, n);
  const size_t bytes = il_tensor_span(&parts[0]);
  t->allreduces++;
  if (!t->use_nccl) {
    IL_TRY(il_allreduce_host(t->b, parts, t->n, t->scratch));
    t->allreduce_bytes += 2 * (uint64_t)bytes * (uint64_t)t->n; /* each part down, the sum up */
    return IL_OK;
  }
  void *buf[IL_TP_MAX], *stream[IL_TP_MAX];
  int dev;
  for (int s = 0; s < t->n; s++) IL_TRY(t->b[s]->ops->native(t->b[s], parts[s], &buf[s], &stream[s], &dev));
  IL_TRY(il_nccl_allreduce_sum(&t->nccl, t->comms, buf, stream, t->n, (size_t)n * (size_t)parts[0].cols,
                               il_nccl_dtype(parts[0].type)));
  /* a ring all-reduce sends and receives 2 (n-1)/n of the buffer per device */
  t->allreduce_bytes += 2 * (uint64_t)(t->n - 1) * (uint64_t)bytes;
  return IL_OK;
}

/* The settings the caller gives shard 0's state (the numerics record, --attn-slice) on every
 * shard's; the observer on every lane while a pass runs (on), off after it. */
static void il__tp_observe(il_model_tp *t, bool on) {
  il_numerics *r = t->st[0]->numerics;
  for (int s = 0; s < t->n; s++) {
    il_forward_state *st = t->st[s];
    st->numerics = r;
    st->attn_slice = t->st[0]->attn_slice;
    for (int i = 0; i < st->n_lanes; i++)
      st->lane[i].b->observer = on && r ? (il_op_observer){il_numerics_observe, r} : (il_op_observer){0};
  }
}

/* The layers of one pass on shard threads (the comment above): each thread runs its shard; the
 * first error stops every thread's work at the next barrier, which all of them still reach. */
typedef struct {
  il_model_tp *t;
  const il_kv_view *kv;
  il_forward_lane *const *ln;
  int32_t n;
  pthread_barrier_t bar;
  pthread_mutex_t lock;
  pthread_cond_t go_cv;
  bool go;          /* every shard's thread started (or not: failed says so) */
  il_status failed;
  char why[1024];
} il__tpr;

typedef struct {
  il__tpr *r;
  int s;
} il__tpr_arg;

static bool il__tpr_ok(il__tpr *r) {
  pthread_mutex_lock(&r->lock);
  const bool ok = r->failed == IL_OK;
  pthread_mutex_unlock(&r->lock);
  return ok;
}

static void il__tpr_note(il__tpr *r, il_status st, int s, int32_t l) {
  if (st == IL_OK) return;
  pthread_mutex_lock(&r->lock);
  if (r->failed == IL_OK) {
    r->failed = st;
    snprintf(r->why, sizeof r->why, "--tp shard %d, layer %d: %s", s, l, il_error_detail());
  }
  pthread_mutex_unlock(&r->lock);
}

/* Shard s's layers; shard 0 computes the sums between the barriers. */
static void il__tpr_layers(il__tpr *r, int s) {
  il_model_tp *t = r->t;
  const il_hparams *hp = &t->shard[0].hp;
  const int32_t L = hp->n_layer, n = r->n;
  il_forward_lane *ln = r->ln[s];
  il_forward_state *st = t->st[s];
  for (int32_t l = 0; l < L; l++) {
    const il_layer_dev *Ld = NULL;
    il_status e = IL_OK;
    if (il__tpr_ok(r)) {
      e = il_model_dev_layer(t->dev[s], l, &Ld);
      if (e == IL_OK) e = il__attention(&t->shard[s], st, ln, Ld, l, n, &r->kv[(size_t)s * L + l], true);
      il__tpr_note(r, e, s, l);
    }
    pthread_barrier_wait(&r->bar);
    if (s == 0 && il__tpr_ok(r)) il__tpr_note(r, il__tp_reduce(t, r->ln, n), s, l);
    pthread_barrier_wait(&r->bar);
    if (il__tpr_ok(r)) {
      e = il__residual(st, ln, n, Ld->attn_post_norm, hp->norm_eps, l, "post_attention_norm", "attention residual");
      if (e == IL_OK) e = il__ffn(&t->shard[s], st, ln, Ld, l, n, true);
      il__tpr_note(r, e, s, l);
    }
    pthread_barrier_wait(&r->bar);
    if (s == 0 && il__tpr_ok(r)) il__tpr_note(r, il__tp_reduce(t, r->ln, n), s, l);
    pthread_barrier_wait(&r->bar);
    if (il__tpr_ok(r))
      il__tpr_note(r, il__residual(st, ln, n, Ld->ffn_post_norm, hp->norm_eps, l, "post_ffw_norm", "feed-forward residual"),
                   s, l);
  }
}

static void *il__tpr_main(void *arg) {
  il__tpr *r = ((il__tpr_arg *)arg)->r;
  pthread_mutex_lock(&r->lock);
  while (!r->go) pthread_cond_wait(&r->go_cv, &r->lock);
  const bool run = r->failed == IL_OK; /* else a thread did not start: nobody meets at the barrier */
  pthread_mutex_unlock(&r->lock);
  if (run) il__tpr_layers(r, ((il__tpr_arg *)arg)->s);
  return NULL;
}

static il_status il__tp_layers_threaded(il_model_tp *t, il_forward_lane *const *ln, int32_t n, const il_kv_view *kv) {
  il__tpr r = {.t = t, .kv = kv, .ln = ln, .n = n};
  if (pthread_barrier_init(&r.bar, NULL, (unsigned)t->n))
    return il_error(IL_ERR_INTERNAL, "forward --tp: cannot make the shards' barrier");
  pthread_mutex_init(&r.lock, NULL);
  pthread_cond_init(&r.go_cv, NULL);
  pthread_t th[IL_TP_MAX];
  il__tpr_arg args[IL_TP_MAX];
  int started = 1;
  for (int s = 1; s < t->n; s++, started++) {
    args[s] = (il__tpr_arg){&r, s};
    if (pthread_create(&th[s], NULL, il__tpr_main, &args[s])) break;
  }
  pthread_mutex_lock(&r.lock);
  if (started < t->n) {
    r.failed = IL_ERR_INTERNAL;
    snprintf(r.why, sizeof r.why, "forward --tp: cannot start the thread of shard %d", started);
  }
  r.go = true;
  pthread_cond_broadcast(&r.go_cv);
  pthread_mutex_unlock(&r.lock);
  if (started == t->n) il__tpr_layers(&r, 0);
  for (int s = 1; s < started; s++) pthread_join(th[s], NULL);
  const il_status st = r.failed != IL_OK ? il_error(r.failed, "%s", r.why) : IL_OK;
  pthread_barrier_destroy(&r.bar);
  pthread_cond_destroy(&r.go_cv);
  pthread_mutex_destroy(&r.lock);
  return st;
}

static il_status il__forward_tp(il_model_tp *t, const il_batch_entry *batch, int32_t n, const il_kv_view *kv,
                                const int32_t *slots, int32_t *n_logits) {
  il_forward_state *st0 = t->st[0];
  il_model_dev *d0 = t->dev[0];
  const il_hparams *hp = &t->shard[0].hp;
  const int32_t L = hp->n_layer;
  int32_t n_out = 0;
  IL_TRY(il__upload_batch_host(st0, hp, batch, n, kv, slots, &n_out));
  const size_t batch_bytes = (size_t)n * (size_t)il__batch_cols(hp) * sizeof(int32_t);
  il_forward_lane *ln[IL_TP_MAX];
  for (int s = 0; s < t->n; s++) {
    il_forward_state *st = t->st[s];
    for (int i = 0; i < st->n_lanes; i++)
      IL_TRY(st->lane[i].b->ops->upload(st->lane[i].b, st->lane[i].batch, st0->host_batch, batch_bytes));
    ln[s] = il_forward_lane_of(st, t->b[s]);
    if (!ln[s] || !ln[s]->has_layers)
      return il_error(IL_ERR_INTERNAL, "forward --tp: shard %d has no layers on its device", s);
  }
  st0->passes++;
  int32_t L0 = 0; /* the first layer the loop below runs */
  /* the embedding on shard 0, its rows sent to every shard's residual */
  il_forward_lane *le = il_forward_lane_of(st0, d0->embd_b);
  IL_TRY(il__embed(d0, st0, le, n));
  const il_tensor X0 = il_tensor_rows(le->x, 0, n);
  const size_t xb = il_tensor_span(&X0);
  IL_TRY(le->b->ops->download(le->b, t->scratch, X0, xb));
  for (int s = 0; s < t->n; s++) {
    if (ln[s] == le) continue;
    IL_TRY(t->b[s]->ops->upload(t->b[s], il_tensor_rows(ln[s]->x, 0, n), t->scratch, xb));
    t->broadcast_bytes += xb;
  }
  if (!t->use_nccl && !st0->numerics) {
    IL_TRY(il__tp_layers_threaded(t, ln, n, kv));
    L0 = L; /* done */
  }
  for (int32_t l = L0; l < L; l++) {
    const il_layer_dev *Ls[IL_TP_MAX];
    for (int s = 0; s < t->n; s++) {
      IL_TRY(il_model_dev_layer(t->dev[s], l, &Ls[s]));
      IL_TRY(il__attention(&t->shard[s], t->st[s], ln[s], Ls[s], l, n, &kv[(size_t)s * L + l], true));
    }
    IL_TRY(il__tp_reduce(t, ln, n));
    for (int s = 0; s < t->n; s++)
      IL_TRY(il__residual(t->st[s], ln[s], n, Ls[s]->attn_post_norm, hp->norm_eps, l, "post_attention_norm",
                          "attention residual"));
    for (int s = 0; s < t->n; s++) IL_TRY(il__ffn(&t->shard[s], t->st[s], ln[s], Ls[s], l, n, true));
    IL_TRY(il__tp_reduce(t, ln, n));
    for (int s = 0; s < t->n; s++)
      IL_TRY(il__residual(t->st[s], ln[s], n, Ls[s]->ffn_post_norm, hp->norm_eps, l, "post_ffw_norm",
                          "feed-forward residual"));
  }
  il_forward_lane *lo = il_forward_lane_of(st0, d0->out_b);
  if (lo != ln[0]) IL_TRY(il__move(st0, ln[0], lo, n));
  IL_TRY(il__logits(d0, st0, lo, batch, n, n_out, 0));
  *n_logits = n_out;
  return IL_OK;
}

il_status il_model_forward_tp(il_model_tp *t, const il_batch_entry *batch, int32_t n, const il_kv_view *kv,
                              const int32_t *slots, int32_t *n_logits) {
  *n_logits = 0;
  if (t->n < 2) return il_model_forward(t->dev[0], t->st[0], batch, n, kv, slots, n_logits);
  il__tp_observe(t, true);
  const il_status s = il__forward_tp(t, batch, n, kv, slots, n_logits);
  il__tp_observe(t, false);
  return s;
}
