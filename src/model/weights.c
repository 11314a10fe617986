/* model/weights: a model's weights, from the file to the backends. Binding finds each tensor
 * by its GGUF name and checks its shape and type (il_model_bind); placement puts each
 * component's weights on its backend, read in place where the backend can (cpu) or uploaded
 * once (il_model_dev_init); with --offload stream the device layers stay in host memory and
 * go through two device slots, the next layer copied on the backend's copy stream while this
 * one computes. Every per-layer list is il_layer_tensors.
 * Not for: hyperparameters (model/llama.c) or computing (model/forward.c). */
#include "model/llama.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/loadsink.h"
#include "core/quant.h"
#include "core/timer.h"
#include "memory/mem.h"

/* ---- the layer's tensors ---- */

#define IL__M(n, slot, in, out, fused, f) \
  {n, slot, in, out, false, IL_NEED_ALWAYS, fused, offsetof(il_layer, f), offsetof(il_layer_dev, f)}
#define IL__V(n, slot, in, need, f) {n, slot, in, in, true, need, NULL, offsetof(il_layer, f), offsetof(il_layer_dev, f)}
const il_layer_tensor il_layer_tensors[IL_LAYER_TENSORS] = {
    IL__V("attn_norm.weight", "slot attn_norm", IL_DIM_EMBD, IL_NEED_ALWAYS, attn_norm),
    IL__V("ffn_norm.weight", "slot ffn_norm", IL_DIM_EMBD, IL_NEED_ALWAYS, ffn_norm),
    IL__M("attn_q.weight", "slot attn_q", IL_DIM_EMBD, IL_DIM_Q, "attn_qkv.weight", wq),
    IL__M("attn_k.weight", "slot attn_k", IL_DIM_EMBD, IL_DIM_KV, "attn_qkv.weight", wk),
    IL__M("attn_v.weight", "slot attn_v", IL_DIM_EMBD, IL_DIM_KV, "attn_qkv.weight", wv),
    IL__M("attn_output.weight", "slot attn_output", IL_DIM_Q, IL_DIM_EMBD, NULL, wo),
    IL__V("attn_q.bias", "slot attn_q.bias", IL_DIM_Q, IL_NEED_QKV_BIAS, bq),
    IL__V("attn_k.bias", "slot attn_k.bias", IL_DIM_KV, IL_NEED_QKV_BIAS, bk),
    IL__V("attn_v.bias", "slot attn_v.bias", IL_DIM_KV, IL_NEED_QKV_BIAS, bv),
    IL__V("attn_q_norm.weight", "slot attn_q_norm", IL_DIM_HEAD, IL_NEED_QK_NORM, q_norm),
    IL__V("attn_k_norm.weight", "slot attn_k_norm", IL_DIM_HEAD, IL_NEED_QK_NORM, k_norm),
    IL__V("post_attention_norm.weight", "slot post_attention_norm", IL_DIM_EMBD, IL_NEED_POST_NORM, attn_post_norm),
    IL__V("post_ffw_norm.weight", "slot post_ffw_norm", IL_DIM_EMBD, IL_NEED_POST_NORM, ffn_post_norm),
    IL__M("ffn_gate.weight", "slot ffn_gate", IL_DIM_EMBD, IL_DIM_FF, "ffn_up.weight", w_gate),
    IL__M("ffn_up.weight", "slot ffn_up", IL_DIM_EMBD, IL_DIM_FF, "ffn_up.weight", w_up),
    IL__M("ffn_down.weight", "slot ffn_down", IL_DIM_FF, IL_DIM_EMBD, NULL, w_down),
};
#undef IL__M
#undef IL__V
_Static_assert(sizeof(il_layer_dev) == IL_LAYER_TENSORS * sizeof(il_tensor), "il_layer_tensors lists every placed tensor");

/* Where tensor t of a layer lives: its matrix or vector in il_layer, its view in il_layer_dev. */
static il_weight *il__lw(il_layer *L, const il_layer_tensor *t) { return (il_weight *)((char *)L + t->host); }
static const il_weight *il__lwc(const il_layer *L, const il_layer_tensor *t) {
  return (const il_weight *)((const char *)L + t->host);
}
static const float **il__lv(il_layer *L, const il_layer_tensor *t) { return (const float **)((char *)L + t->host); }
static const float *il__lvc(const il_layer *L, const il_layer_tensor *t) {
  return *(const float *const *)((const char *)L + t->host);
}
static il_tensor *il__ld(il_layer_dev *D, const il_layer_tensor *t) { return (il_tensor *)((char *)D + t->dev); }

/* ---- binding weights ---- */

static const il_gguf_tensor *il__find(const il_gguf_tensor *t, int64_t n, const char *name) {
  for (int64_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

static il_status il__bind_matrix(const il_gguf_tensor *ts, int64_t nt, const char *name, int64_t n_in, int64_t n_out,
                                 bool required, il_weight *w) {
  const il_gguf_tensor *t = il__find(ts, nt, name);
  memset(w, 0, sizeof *w);
  if (!t) return required ? il_error(IL_ERR_FORMAT, "tensor '%s' is missing", name) : IL_OK;
  if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    return il_error(IL_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld] (%u dims); expected [%lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)n_in, (long long)n_out);
  size_t row = il_dtype_row_size(t->type, n_in);
  if (row == 0)
    return il_error(IL_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size", name,
                    (long long)n_in, il_dtype_name(t->type));
  *w = (il_weight){t->name, t->type, n_in, n_out, row, t->data};
  return IL_OK;
}

/* The matrices of layer l that one fused tensor holds, stacked by rows in table order (phi3:
 * attn_qkv = q, k, v; ffn_up = gate, up): each bound as a view of its rows, so placement,
 * streaming and the matmuls see the separate matrices of the other architectures. */
static il_status il__bind_fused(il_model *m, const il_gguf_tensor *ts, int64_t nt, int l, const char *fused) {
  const il_hparams *hp = &m->hp;
  int64_t rows = 0;
  for (int i = 0; i < IL_LAYER_TENSORS; i++)
    if (il_layer_tensors[i].fused && !strcmp(il_layer_tensors[i].fused, fused))
      rows += il_hparams_dim(hp, il_layer_tensors[i].out);
  char name[96];
  snprintf(name, sizeof name, "blk.%d.%s", l, fused);
  il_weight all;
  IL_TRY(il__bind_matrix(ts, nt, name, hp->n_embd, rows, true, &all));
  int64_t r0 = 0;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    const il_layer_tensor *t = &il_layer_tensors[i];
    if (!t->fused || strcmp(t->fused, fused)) continue;
    il_weight *w = il__lw(&m->layers[l], t);
    *w = all;
    w->n_out = il_hparams_dim(hp, t->out);
    w->data = (const char *)all.data + (size_t)r0 * all.row_stride;
    r0 += w->n_out;
  }
  return IL_OK;
}

static il_status il__bind_vector(il_model *m, const il_gguf_tensor *ts, int64_t nt, const char *name, int64_t n,
                                 bool required, const float **out) {
  const il_gguf_tensor *t = il__find(ts, nt, name);
  *out = NULL;
  if (!t) return required ? il_error(IL_ERR_FORMAT, "tensor '%s' is missing", name) : IL_OK;
  int64_t count = 1;
  for (uint32_t d = 0; d < t->n_dims; d++) count *= t->ne[d];
  if (count != n || t->ne[0] != n)
    return il_error(IL_ERR_FORMAT, "tensor '%s' has %lld elements; expected %lld", name, (long long)count, (long long)n);
  float *f = il_mem_alloc(IL_MEM_WEIGHTS, (size_t)n * sizeof(float), name);
  if (!f) return IL_ERR_OOM;
  il_status st = il_model_own(m, f);
  if (st != IL_OK) return st;
  st = il_dequantize_row(t->type, t->data, f, n);
  if (st != IL_OK) return il_error_wrap(st, "tensor '%s': ", name);
  *out = f;
  return IL_OK;
}

/* A dense FFN matrix (ffn_gate, ffn_up, ffn_down): absent from a MoE layer. */
static bool il__dense_ffn(const il_layer_tensor *t) { return t->in == IL_DIM_FF || t->out == IL_DIM_FF; }

/* An expert stack: the 3-D tensor [in, out, n_expert] as n_expert * out rows of in. */
static il_status il__bind_stack(const il_gguf_tensor *ts, int64_t nt, const char *name, int64_t n_in, int64_t n_out,
                                int64_t n_expert, il_weight *w) {
  const il_gguf_tensor *t = il__find(ts, nt, name);
  memset(w, 0, sizeof *w);
  if (!t) return il_error(IL_ERR_FORMAT, "tensor '%s' is missing (expert_count is %lld)", name, (long long)n_expert);
  if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert)
    return il_error(IL_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld] (%u dims); expected [%lld, %lld, %lld]", name,
                    (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], t->n_dims, (long long)n_in,
                    (long long)n_out, (long long)n_expert);
  const size_t row = il_dtype_row_size(t->type, n_in);
  if (row == 0)
    return il_error(IL_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size", name,
                    (long long)n_in, il_dtype_name(t->type));
  *w = (il_weight){t->name, t->type, n_in, n_out * n_expert, row, t->data};
  return IL_OK;
}

/* Layer l's router and expert stacks. */
static il_status il__bind_moe(const il_gguf_tensor *ts, int64_t nt, const il_hparams *hp, int l, il_layer_moe *M) {
  char name[96];
  const int64_t dim = hp->n_embd, ff = hp->n_ff_exp, ne = hp->n_expert;
  snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
  IL_TRY(il__bind_matrix(ts, nt, name, dim, ne, true, &M->gate_inp));
  snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
  IL_TRY(il__bind_stack(ts, nt, name, dim, ff, ne, &M->gate_exps));
  snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
  IL_TRY(il__bind_stack(ts, nt, name, dim, ff, ne, &M->up_exps));
  snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
  return il__bind_stack(ts, nt, name, ff, dim, ne, &M->down_exps);
}

il_status il_model_bind(il_model *m, const il_gguf_tensor *ts, int64_t nt) {
  const il_hparams *hp = &m->hp;
  const int64_t dim = hp->n_embd;
  const il_gguf_tensor *emb = il__find(ts, nt, "token_embd.weight");
  if (!emb) return il_error(IL_ERR_FORMAT, "tensor 'token_embd.weight' is missing");
  if (emb->n_dims != 2) return il_error(IL_ERR_FORMAT, "tensor 'token_embd.weight' must have 2 dimensions");
  m->hp.n_vocab = (int32_t)emb->ne[1];
  IL_TRY(il__bind_matrix(ts, nt, "token_embd.weight", dim, hp->n_vocab, true, &m->tok_embd));
  IL_TRY(il__bind_vector(m, ts, nt, "output_norm.weight", dim, true, &m->out_norm));
  IL_TRY(il__bind_matrix(ts, nt, "output.weight", dim, hp->n_vocab, false, &m->output));
  m->tied_output = m->output.data == NULL;
  if (m->tied_output) m->output = m->tok_embd;

  m->layers = il_mem_calloc(IL_MEM_MODEL, sizeof(il_layer) * (size_t)hp->n_layer, "model layers");
  if (!m->layers) return IL_ERR_OOM;
  /* LongRoPE (phi3 128k): per-frequency factors this pass does not apply */
  static const char *const longrope[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
  for (int i = 0; i < 2; i++)
    if (il__find(ts, nt, longrope[i]))
      return il_error(IL_ERR_UNSUPPORTED, "tensor '%s': LongRoPE scaling (%s.rope.scaling) is not supported",
                      longrope[i], hp->arch);
  char name[96];
  for (int l = 0; l < hp->n_layer; l++) {
    il_layer *L = &m->layers[l];
    if (hp->fused) {
      IL_TRY(il__bind_fused(m, ts, nt, l, "attn_qkv.weight"));
      IL_TRY(il__bind_fused(m, ts, nt, l, "ffn_up.weight"));
    }
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      if (hp->fused && t->fused) continue; /* bound above */
      snprintf(name, sizeof name, "blk.%d.%s", l, t->name);
      const int64_t in = il_hparams_dim(hp, t->in), out = il_hparams_dim(hp, t->out);
      if (t->vector) IL_TRY(il__bind_vector(m, ts, nt, name, in, il_hparams_has(hp, t->need), il__lv(L, t)));
      else IL_TRY(il__bind_matrix(ts, nt, name, in, out, !(hp->n_expert && il__dense_ffn(t)), il__lw(L, t)));
    }
    if (hp->n_expert) IL_TRY(il__bind_moe(ts, nt, hp, l, &L->moe));
  }
  /* totals, and the most common 2-D type for display */
  uint64_t by_type[IL_DTYPE_COUNT] = {0};
  m->n_params = 0;
  m->weight_bytes = 0;
  for (int64_t i = 0; i < nt; i++) {
    int64_t count = 1;
    for (uint32_t d = 0; d < ts[i].n_dims; d++) count *= ts[i].ne[d];
    m->n_params += (uint64_t)count;
    m->weight_bytes += ts[i].nbytes;
    if (ts[i].n_dims == 2 && ts[i].type < IL_DTYPE_COUNT) by_type[ts[i].type] += (uint64_t)count;
  }
  m->main_type = IL_DTYPE_F32;
  for (int t = 0; t < IL_DTYPE_COUNT; t++)
    if (by_type[t] > by_type[m->main_type]) m->main_type = (il_dtype)t;
  m->tensors = ts;
  m->n_tensors = nt;
  return IL_OK;
}

/* ---- weights on their backends ---- */

static size_t il__w_span(const il_weight *w) { return (size_t)w->n_out * w->row_stride; }

size_t il_model_embd_bytes(const il_model *m) { return il__w_span(&m->tok_embd); }

size_t il_model_out_bytes(const il_model *m) { return il__w_span(&m->output) + 4 * (size_t)m->hp.n_embd; }

size_t il_model_layer_bytes(const il_model *m, int l) {
  const il_layer *L = &m->layers[l];
  size_t n = 0;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    const il_layer_tensor *t = &il_layer_tensors[i];
    if (!t->vector) n += il__w_span(il__lwc(L, t));
    else if (il__lvc(L, t)) n += 4 * (size_t)il_hparams_dim(&m->hp, t->in);
  }
  return n + il__w_span(&L->moe.gate_inp);
}

size_t il_model_layer_bytes_as(const il_model *m, int l, il_dtype type, size_t *n_tensors) {
  if (type == IL_DTYPE_COUNT) {
    *n_tensors = 0;
    for (int i = 0; i < IL_LAYER_TENSORS; i++)
      *n_tensors += !il_layer_tensors[i].vector || il__lvc(&m->layers[l], &il_layer_tensors[i]);
    return il_model_layer_bytes(m, l);
  }
  const il_layer *L = &m->layers[l];
  size_t n = 0, c = 0;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    const il_layer_tensor *t = &il_layer_tensors[i];
    if (!t->vector) {
      const il_weight *w = il__lwc(L, t);
      n += il_dtype_row_size(type, w->n_in) * (size_t)w->n_out, c++;
    } else if (il__lvc(L, t)) {
      n += 4 * (size_t)il_hparams_dim(&m->hp, t->in), c++;
    }
  }
  *n_tensors = c;
  return n;
}

size_t il_model_exps_bytes(const il_model *m, int l) {
  const il_layer_moe *M = &m->layers[l].moe;
  return il__w_span(&M->gate_exps) + il__w_span(&M->up_exps) + il__w_span(&M->down_exps);
}

size_t il_model_dev_bytes(const il_model *m) {
  size_t n = il_model_embd_bytes(m) + il_model_out_bytes(m) - (m->tied_output ? il__w_span(&m->output) : 0);
  for (int l = 0; l < m->hp.n_layer; l++) n += il_model_layer_bytes(m, l) + il_model_exps_bytes(m, l);
  return n;
}

static il_status il__place_w(il_model_dev *d, il_backend *b, const il_weight *w, il_tensor *out) {
  IL_TRY(il_load_wait(w->data, il__w_span(w))); /* --no-mmap --load-pipeline: its bytes read in */
  IL_TRY(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, w->data, w->n_out, w->n_in, w->row_stride, w->type, w->name, out));
  if (!b->ops->buffer_wrap_host) d->uploaded_bytes += il__w_span(w);
  return IL_OK;
}

/* The whole pages of a file-mapped weight the backend no longer reads (it keeps its own copy:
 * cpu --repack), paged out so the copy does not double the resident memory (MADV_PAGEOUT drops
 * clean file pages; a later read faults them in again from the file, so nothing is lost) and
 * no longer counted as mapped. A hint: where it fails nothing changes. */
static void il__release_pages(il_model_dev *d, const il_weight *w) {
#ifdef MADV_PAGEOUT
  /* built-in weights and --no-mmap's are the process's own memory: paging them out would not free them */
  if (!d->model->gguf || il_gguf_read_in(d->model->gguf)) return;
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), p = (uintptr_t)w->data;
  const uintptr_t a = (p + pg - 1) & ~(pg - 1), e = (p + il__w_span(w)) & ~(pg - 1);
  if (pg > 1 && e > a && madvise((void *)a, e - a, MADV_PAGEOUT) == 0) {
    il_mem_note_mapped(IL_MEM_WEIGHTS, -(int64_t)(e - a));
    d->released_bytes += e - a;
  }
#else
  (void)d;
  (void)w;
#endif
}

/* The backend may keep its own layout of matmul weight t, placed from w (cpu --repack); with
 * release, the mapping's pages of w then go (not when get_rows still reads them). */
static il_status il__prepare_mm(il_model_dev *d, il_backend *b, const il_weight *w, il_tensor *t, bool release) {
  bool own = false;
  const double t0 = il_time_now();
  if (b->ops->prepare_weight) IL_TRY(b->ops->prepare_weight(b, t, &own));
  if (own && release) il__release_pages(d, w);
  il_load_converted(il_time_now() - t0, own ? il__w_span(w) : 0); /* repacked: not an upload */
  return IL_OK;
}

/* A matmul weight, placed and prepared. */
static il_status il__place_mm(il_model_dev *d, il_backend *b, const il_weight *w, il_tensor *out) {
  IL_TRY(il__place_w(d, b, w, out));
  return il__prepare_mm(d, b, w, out, true);
}

static il_status il__place_v(il_model_dev *d, il_backend *b, const float *v, int64_t n, const char *name, il_tensor *out) {
  if (!v) return IL_OK;
  IL_TRY(il_load_wait(v, (size_t)n * 4));
  IL_TRY(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, v, 1, n, 0, IL_DTYPE_F32, name, out));
  if (!b->ops->buffer_wrap_host) d->uploaded_bytes += (size_t)n * 4;
  return IL_OK;
}

/* ---- model offloading: two slots, filled on the backend's copy stream ----
 * Layer k always lives in slot k % 2. While layer l computes from its slot, layer l+1's
 * weights are copied into the other with upload_async (sim and cuda: the device's copy stream;
 * where the backend has none, the copy is made in order, at once); the pass waits for a slot's
 * copies (event_wait) only when it reaches that layer. */

typedef struct il_stream_dev il__sd;

/* The stream group of backend b, or NULL. */
static int il__sd_index(const il_model_dev *d, const il_backend *b) {
  for (int g = 0; g < d->n_streams; g++)
    if (d->streams[g].b == b) return g;
  return -1;
}

static il__sd *il__sd_of(il_model_dev *d, const il_backend *b) {
  const int g = il__sd_index(d, b);
  return g >= 0 ? &d->streams[g] : NULL;
}

/* Layer l's weights from host memory into slot s of group g: queued where the backend copies
 * off the op order (their events kept in g->slot_ev[s]), else copied now. */
static il_status il__slot_load(il_model_dev *d, il__sd *g, int s, int32_t l) {
  const il_layer *L = &d->model->layers[l];
  il_backend *b = g->b;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    const il_layer_tensor *t = &il_layer_tensors[i];
    const il_tensor *dst = il__ld(&g->slot[s], t);
    if (!dst->buf) continue; /* a bias or norm this architecture has not */
    const void *src = t->vector ? (const void *)il__lvc(L, t) : il__lwc(L, t)->data;
    const size_t bytes = il_tensor_span(dst);
    if (b->ops->upload_async) IL_TRY(b->ops->upload_async(b, *dst, src, bytes, &g->slot_ev[s][i]));
    else IL_TRY(b->ops->upload(b, *dst, src, bytes));
  }
  return IL_OK;
}

/* Waits for slot s's queued copies; the first one's error, if any. */
static il_status il__slot_wait(il__sd *g, int s) {
  il_backend *b = g->b;
  il_status st = IL_OK;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    il_event *e = g->slot_ev[s][i];
    if (!e) continue;
    il_status w = b->ops->event_wait(b, e);
    if (w != IL_OK && st == IL_OK) st = il_error_wrap(w, "offload stream: ");
    b->ops->event_free(b, e);
    g->slot_ev[s][i] = NULL;
  }
  return st;
}

/* The slot that holds layer l, ready to compute; starts copying the next layer of the same
 * device (wrapping to its first) into the other. */
static il_status il__stream_layer(il_model_dev *d, il__sd *g, int32_t l, const il_layer_dev **out) {
  const int s = l % 2;
  const int32_t L = d->model->hp.n_layer;
  il_status w = il__slot_wait(g, s);
  if (w != IL_OK) {
    g->slot_layer[s] = -1; /* its weights are not whole */
    return w;
  }
  if (g->slot_layer[s] != l) { /* not prefetched (the first layer of a pass): copy it now */
    g->slot_layer[s] = -1;
    IL_TRY(il__slot_load(d, g, s, l));
    IL_TRY(il__slot_wait(g, s));
    g->slot_layer[s] = l;
    d->streamed_bytes += il_model_layer_bytes(d->model, l);
  }
  int32_t next = (l + 1) % L;
  while (next != l && d->layer_b[next] != g->b) next = (next + 1) % L;
  /* when the wrap lands in the slot just used (an odd count), that one is copied at the start
   * of the next pass instead */
  if (next != l && next % 2 == 1 - s && g->slot_layer[1 - s] != next) {
    g->slot_layer[1 - s] = next;
    d->streamed_bytes += il_model_layer_bytes(d->model, next);
    il_status st = il__slot_load(d, g, 1 - s, next);
    if (st != IL_OK) {
      g->slot_layer[1 - s] = -1;
      return st;
    }
  }
  *out = &g->slot[s];
  return IL_OK;
}

il_status il_model_dev_layer(il_model_dev *d, int32_t l, const il_layer_dev **out) {
  *out = &d->layers[l];
  il__sd *g = d->stream ? il__sd_of(d, d->layer_b[l]) : NULL;
  return g ? il__stream_layer(d, g, l, out) : IL_OK;
}

/* The slots of each group: tensors shaped like layer 0 (every layer must have its shapes and
 * types). */
static il_status il__stream_init(il_model_dev *d, const il_model *m) {
  const il_hparams *hp = &m->hp;
  const il_layer *L0 = &m->layers[0];
  for (int l = 1; l < hp->n_layer; l++)
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      if (t->vector) continue;
      const il_weight *a = il__lwc(L0, t), *b = il__lwc(&m->layers[l], t);
      if (a->type != b->type || a->row_stride != b->row_stride || a->n_out != b->n_out)
        return il_error(IL_ERR_UNSUPPORTED, "--offload stream: '%s' is %s but '%s' is %s: streamed layers share two "
                        "slots, so every layer needs the same types and shapes", b->name, il_dtype_name(b->type),
                        a->name, il_dtype_name(a->type));
    }
  for (int gi = 0; gi < d->n_streams; gi++) {
    il__sd *g = &d->streams[gi];
    il_backend *b = g->b;
    for (int s = 0; s < 2; s++) {
      for (int i = 0; i < IL_LAYER_TENSORS; i++) {
        const il_layer_tensor *t = &il_layer_tensors[i];
        il_tensor *D = il__ld(&g->slot[s], t);
        if (t->vector) {
          if (il__lvc(L0, t))
            IL_TRY(il_backend_tensor_new(b, IL_MEM_WEIGHTS, 1, il_hparams_dim(hp, t->in), IL_DTYPE_F32, t->slot, D));
          continue;
        }
        const il_weight *w = il__lwc(L0, t);
        il_buffer *buf;
        IL_TRY(b->ops->buffer_alloc(b, IL_MEM_WEIGHTS, il__w_span(w), t->slot, &buf));
        *D = (il_tensor){buf, 0, w->row_stride, w->n_out, w->n_in, w->type, t->slot};
      }
      g->slot_layer[s] = -1;
    }
  }
  return IL_OK;
}

il_status il_model_dev_sync(il_model_dev *d) {
  if (!d->stream) return IL_OK;
  il_status st = IL_OK;
  for (int g = 0; g < d->n_streams; g++) {
    il_status a = il__slot_wait(&d->streams[g], 0), b = il__slot_wait(&d->streams[g], 1);
    if (st == IL_OK) st = a != IL_OK ? a : b;
  }
  return st;
}

static void il__stream_free(il_model_dev *d) {
  for (int gi = 0; gi < d->n_streams; gi++) {
    il__sd *g = &d->streams[gi];
    for (int s = 0; s < 2; s++) /* copies in flight finish before their slots go */
      for (int i = 0; i < IL_LAYER_TENSORS; i++)
        if (g->slot_ev[s][i]) {
          g->b->ops->event_free(g->b, g->slot_ev[s][i]);
          g->slot_ev[s][i] = NULL;
        }
    for (int s = 0; s < 2; s++)
      for (int i = 0; i < IL_LAYER_TENSORS; i++) il_backend_tensor_free(g->b, il__ld(&g->slot[s], &il_layer_tensors[i]));
  }
}

/* ---- MoE: the router with its layer, the expert stacks on the experts' backend ---- */

/* Where layer l's experts compute. */
static il_backend *il__exps_b(const il_model_dev *d, int32_t l) { return d->exps_b ? d->exps_b : d->layer_b[l]; }

/* The stacks are placed as they are stored, not prepared: the forward pass multiplies by row
 * views of one expert, which a backend's own layout of the whole stack (cpu --repack) would
 * not serve. */
static il_status il__moe_init(il_model_dev *d, const il_model *m) {
  d->moe = il_mem_calloc(IL_MEM_MODEL, sizeof *d->moe * (size_t)m->hp.n_layer, "model experts on device");
  if (!d->moe) return IL_ERR_OOM;
  for (int l = 0; l < m->hp.n_layer; l++) {
    const il_layer_moe *M = &m->layers[l].moe;
    il_moe_dev *D = &d->moe[l];
    il_backend *e = il__exps_b(d, l);
    IL_TRY(il__place_mm(d, d->layer_b[l], &M->gate_inp, &D->gate_inp));
    IL_TRY(il__place_w(d, e, &M->gate_exps, &D->gate_exps));
    IL_TRY(il__place_w(d, e, &M->up_exps, &D->up_exps));
    IL_TRY(il__place_w(d, e, &M->down_exps, &D->down_exps));
  }
  return IL_OK;
}

static void il__moe_free(il_model_dev *d) {
  if (!d->moe) return;
  for (int l = 0; l < d->model->hp.n_layer; l++) {
    il_moe_dev *D = &d->moe[l];
    il_backend *e = il__exps_b(d, l);
    il_backend_tensor_free(d->layer_b[l], &D->gate_inp);
    il_backend_tensor_free(e, &D->gate_exps);
    il_backend_tensor_free(e, &D->up_exps);
    il_backend_tensor_free(e, &D->down_exps);
  }
  il_mem_free(d->moe);
  d->moe = NULL;
}

static il_status il__dev_init(il_model_dev *d, const il_model *m) {
  const il_hparams *hp = &m->hp;
  if (d->embd_b) IL_TRY(il__place_w(d, d->embd_b, &m->tok_embd, &d->tok_embd));
  if (d->out_b) IL_TRY(il__place_v(d, d->out_b, m->out_norm, hp->n_embd, "output_norm.weight", &d->out_norm));
  d->output_shared = m->tied_output && d->out_b == d->embd_b;
  if (!d->out_b) {
    /* layers only */
  } else if (d->output_shared) {
    d->output = d->tok_embd;
    IL_TRY(il__prepare_mm(d, d->out_b, &m->tok_embd, &d->output, false));
  } else {
    IL_TRY(il__place_mm(d, d->out_b, &m->output, &d->output));
  }
  d->layers = il_mem_calloc(IL_MEM_MODEL, sizeof *d->layers * (size_t)hp->n_layer, "model layers on device");
  if (!d->layers) return IL_ERR_OOM;
  if (d->stream) IL_TRY(il__stream_init(d, m));
  for (int l = 0; l < hp->n_layer; l++) {
    const il_layer *L = &m->layers[l];
    il_layer_dev *D = &d->layers[l];
    il_backend *b = d->layer_b[l];
    if (d->stream && il__sd_of(d, b)) continue; /* streamed through the slots */
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      if (t->vector) IL_TRY(il__place_v(d, b, il__lvc(L, t), il_hparams_dim(hp, t->in), t->name, il__ld(D, t)));
      else if (il__lwc(L, t)->data) IL_TRY(il__place_mm(d, b, il__lwc(L, t), il__ld(D, t)));
    }
  }
  return hp->n_expert ? il__moe_init(d, m) : IL_OK;
}

/* ---- load pipeline (--load-pipeline) ----
 * Uploading a layer from a file mapping faults its pages in during the copy, so the disk (or the
 * page cache's copy) and the link take turns. A thread reads one byte per page of every layer
 * uploaded to a device, in upload order, while the main thread copies: the copy of layer l
 * then finds its pages resident once the reader is past it, and the reads of later layers run
 * beside it. Read-only on both sides; the reader goes ahead as fast as the file allows (the pages
 * are the page cache's, so reading ahead costs no memory of the process). */
typedef struct {
  const il_model *m;
  const il_model_dev *d;
  double seconds;
} il__reader;

static void il__read_span(const void *p, size_t n) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const volatile uint8_t *b = p;
  uint8_t sink = 0;
  for (size_t i = 0; i < n; i += pg) sink ^= b[i];
  if (n) sink ^= b[n - 1];
  (void)sink;
}

static void *il__reader_main(void *arg) {
  il__reader *r = arg;
  const double t0 = il_time_now();
  const il_hparams *hp = &r->m->hp;
  for (int l = 0; l < hp->n_layer; l++) {
    const il_backend *b = r->d->layer_b[l];
    if (b->ops->buffer_wrap_host || (r->d->stream && il__sd_index(r->d, b) >= 0)) continue;
    const il_layer *L = &r->m->layers[l];
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      if (t->vector) {
        const float *v = il__lvc(L, t);
        if (v) il__read_span(v, sizeof(float) * (size_t)il_hparams_dim(hp, t->in));
      } else {
        const il_weight *w = il__lwc(L, t);
        if (w->data) il__read_span(w->data, il__w_span(w));
      }
    }
  }
  r->seconds = il_time_now() - t0;
  return NULL;
}

/* Whether a reader thread helps: weights from a file mapping, some layer copied to a device. */
static bool il__reader_wanted(const il_model_dev *d, const il_model *m, const il_placement *p) {
  if (!p || !p->load_pipeline || !m->gguf || il_gguf_read_in(m->gguf)) return false;
  for (int l = 0; l < m->hp.n_layer; l++)
    if (!d->layer_b[l]->ops->buffer_wrap_host && !(d->stream && il__sd_index(d, d->layer_b[l]) >= 0)) return true;
  return false;
}

il_status il_model_dev_init(il_model_dev *d, const il_model *m, il_backend *b, const il_placement *p) {
  memset(d, 0, sizeof *d);
  d->model = m;
  d->layer_b = il_mem_alloc(IL_MEM_MODEL, sizeof(il_backend *) * (size_t)(m->hp.n_layer ? m->hp.n_layer : 1), "placement");
  if (!d->layer_b) return IL_ERR_OOM;
  d->embd_b = p && p->layers_only ? NULL : p && p->embd ? p->embd : b;
  d->out_b = p && p->layers_only ? NULL : p && p->out ? p->out : b;
  for (int l = 0; l < m->hp.n_layer; l++) d->layer_b[l] = p && p->layer && p->layer[l] ? p->layer[l] : b;
  if (p && p->stream && !b->ops->buffer_wrap_host) {
    if (m->hp.n_expert) {
      il_model_dev_free(d);
      return il_error(IL_ERR_UNSUPPORTED, "--offload stream: the slots do not hold a MoE layer's experts; keep the "
                      "experts in host memory with --place exps=cpu instead");
    }
    d->stream = true;
    for (int l = 0; l < m->hp.n_layer; l++) /* every device that holds layers streams its own */
      if (!d->layer_b[l]->ops->buffer_wrap_host && !il__sd_of(d, d->layer_b[l]) && d->n_streams < IL_MODEL_STREAMS)
        d->streams[d->n_streams++].b = d->layer_b[l];
  }
  if (m->hp.n_expert && p && p->exps) d->exps_b = p->exps;
  il__reader rd = {m, d, 0};
  pthread_t th;
  /* no thread (creation failed): the copies fault the pages in themselves, as without the flag */
  const bool reader = il__reader_wanted(d, m, p) && pthread_create(&th, NULL, il__reader_main, &rd) == 0;
  il_status st = il__dev_init(d, m);
  if (reader) {
    pthread_join(th, NULL);
    d->pipeline_seconds = rd.seconds;
  }
  if (st != IL_OK) il_model_dev_free(d);
  return st;
}

double il_model_dev_pipeline_seconds(const il_model_dev *d) { return d->pipeline_seconds; }

void il_model_dev_free(il_model_dev *d) {
  if (!d->layer_b) return;
  il__stream_free(d);
  il__moe_free(d);
  if (d->layers) {
    for (int l = 0; l < d->model->hp.n_layer; l++) {
      for (int i = 0; i < IL_LAYER_TENSORS; i++)
        il_backend_tensor_free(d->layer_b[l], il__ld(&d->layers[l], &il_layer_tensors[i]));
    }
    il_mem_free(d->layers);
  }
  if (d->output_shared) memset(&d->output, 0, sizeof d->output);
  if (d->out_b) il_backend_tensor_free(d->out_b, &d->output);
  if (d->out_b) il_backend_tensor_free(d->out_b, &d->out_norm);
  if (d->embd_b) il_backend_tensor_free(d->embd_b, &d->tok_embd);
  il_mem_free(d->layer_b);
  if (d->released_bytes) il_mem_note_mapped(IL_MEM_WEIGHTS, (int64_t)d->released_bytes); /* the mapping is the model's */
  memset(d, 0, sizeof *d);
}

/* ---- weights as shapes (for the backends' reserve) ---- */

static il_tensor il__shape_of(const il_weight *w, il_dtype force) {
  return (il_tensor){NULL, 0, 0, w->n_out, w->n_in, force != IL_DTYPE_COUNT ? force : w->type, w->name};
}

int il_model_layer_shapes(const il_model *m, int32_t l, il_dtype force, il_tensor *out) {
  int n = 0;
  for (int i = 0; i < IL_LAYER_TENSORS; i++)
    if (!il_layer_tensors[i].vector) out[n++] = il__shape_of(il__lwc(&m->layers[l], &il_layer_tensors[i]), force);
  IL_ASSERT(n == IL_MODEL_LAYER_MATMULS);
  return n;
}

int il_model_moe_shapes(const il_model *m, int32_t l, il_dtype force, il_tensor *out) {
  if (!m->hp.n_expert) return 0;
  const il_layer_moe *M = &m->layers[l].moe;
  out[0] = il__shape_of(&M->gate_inp, force);
  const il_weight *st[3] = {&M->gate_exps, &M->up_exps, &M->down_exps};
  for (int i = 0; i < 3; i++) {
    out[1 + i] = il__shape_of(st[i], force);
    out[1 + i].rows /= m->hp.n_expert; /* one expert */
  }
  return IL_MODEL_MOE_MATMULS;
}

il_tensor il_model_output_shape(const il_model *m, il_dtype force) { return il__shape_of(&m->output, force); }
