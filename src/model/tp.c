/* model/tp: the shards of tensor parallelism, their placement and states (tp.h). The pass
 * across them is il_model_forward_tp in model/forward.c, beside the one-device pass whose
 * blocks it runs. */
#include "model/tp.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/loadsink.h"
#include "memory/mem.h"

/* Rows [r0, r0 + rows) of w: a view. */
static il_weight il__rows(il_weight w, int64_t r0, int64_t rows) {
  if (w.data) w.data = (const uint8_t *)w.data + (size_t)r0 * w.row_stride;
  w.n_out = rows;
  return w;
}

/* Whether columns [c0, c0 + cols) of a matrix of type t fall on whole blocks. */
static bool il__blocks(il_dtype t, int64_t c0, int64_t cols) {
  const il_dtype_info *i = il_dtype_get(t);
  return i && c0 % i->blck == 0 && cols % i->blck == 0;
}

/* Columns [c0, c0 + cols) of every row of w, copied to dst (rows packed): the shard's share of a
 * row-parallel matrix. Returns the bytes written. */
static size_t il__cols(il_weight *w, int64_t c0, int64_t cols, uint8_t *dst) {
  const size_t skip = il_tensor_row_bytes(w->type, c0), row = il_tensor_row_bytes(w->type, cols);
  if (dst) { /* else shapes only: the planner's dry devices read no weight bytes */
    for (int64_t r = 0; r < w->n_out; r++)
      memcpy(dst + (size_t)r * row, (const uint8_t *)w->data + (size_t)r * w->row_stride + skip, row);
    w->data = dst;
  }
  w->n_in = cols;
  w->row_stride = row;
  return (size_t)w->n_out * row;
}

il_status il_model_tp_split(il_model_tp *t, const il_model *m, int n, bool shapes) {
  memset(t, 0, sizeof *t);
  const il_hparams *hp = &m->hp;
  if (n < 1 || n > IL_TP_MAX) return il_error(IL_ERR_INVALID_ARG, "--tp %d: 1 to %d devices", n, IL_TP_MAX);
  if (hp->n_expert)
    return il_error(IL_ERR_UNSUPPORTED, "--tp %d: a MoE model's experts are not split across devices; split its layers "
                    "instead (--device A,B without --tp)", n);
  const struct {
    int64_t v;
    const char *what;
  } dims[] = {{hp->n_head, "attention heads"}, {hp->n_head_kv, "KV heads"}, {hp->n_ff, "feed-forward units"}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].v % n)
      return il_error(IL_ERR_INVALID_ARG, "--tp %d does not divide the model's %lld %s: each device holds an equal "
                      "share of them (try --tp %s)", n, (long long)dims[i].v, dims[i].what,
                      n > 2 && dims[i].v % 2 == 0 ? "2" : "1, or split the layers with --device A,B");
  const int64_t q = (int64_t)hp->n_head * hp->head_dim / n, kv = (int64_t)hp->n_head_kv * hp->head_dim / n,
                ff = hp->n_ff / n;
  const int32_t L = hp->n_layer;
  size_t packed = 0; /* a shard's columns of O and down */
  for (int32_t l = 0; l < L; l++) {
    const il_layer *ly = &m->layers[l];
    const il_weight *cw[2] = {&ly->wo, &ly->w_down};
    const int64_t cc[2] = {q, ff};
    for (int i = 0; i < 2; i++) {
      if (!il__blocks(cw[i]->type, cc[i], cc[i]))
        return il_error(IL_ERR_INVALID_ARG, "--tp %d: a device's %lld columns of '%s' (%s) are not whole blocks of %u; "
                        "use fewer devices or a type with smaller blocks", n, (long long)cc[i], cw[i]->name,
                        il_dtype_name(cw[i]->type), il_dtype_get(cw[i]->type) ? il_dtype_get(cw[i]->type)->blck : 0);
      packed += (size_t)cw[i]->n_out * il_tensor_row_bytes(cw[i]->type, cc[i]);
    }
  }
  t->n = n;
  for (int s = 0; s < n; s++) {
    il_model *sh = &t->shard[s];
    *sh = *m;
    sh->hp.n_head /= n;
    sh->hp.n_head_kv /= n;
    sh->hp.n_ff /= n;
    /* the shard borrows the model's weights and owns nothing; no file of its own to page */
    sh->gguf = NULL;
    sh->owned = NULL;
    sh->n_owned = sh->cap_owned = 0;
    t->layers[s] = il_mem_alloc(IL_MEM_MODEL, sizeof(il_layer) * (size_t)(L ? L : 1), "tensor-parallel shard layers");
    const bool pack = n > 1 && packed && !shapes;
    t->packed[s] = pack ? il_mem_alloc(IL_MEM_WEIGHTS, packed, "tensor-parallel columns of O and down") : NULL;
    if (!t->layers[s] || (pack && !t->packed[s])) {
      il_model_tp_free(t);
      return IL_ERR_OOM;
    }
    t->packed_bytes[s] = pack ? packed : 0;
    sh->layers = t->layers[s];
    uint8_t *dst = t->packed[s];
    for (int32_t l = 0; l < L; l++) {
      il_layer *S = &t->layers[s][l];
      *S = m->layers[l];
      if (n == 1) continue;
      S->wq = il__rows(S->wq, s * q, q);
      S->wk = il__rows(S->wk, s * kv, kv);
      S->wv = il__rows(S->wv, s * kv, kv);
      if (S->bq) S->bq += s * q;
      if (S->bk) S->bk += s * kv;
      if (S->bv) S->bv += s * kv;
      S->w_gate = il__rows(S->w_gate, s * ff, ff);
      S->w_up = il__rows(S->w_up, s * ff, ff);
      /* --no-mmap --load-pipeline: the columns are read once the file's bytes are in */
      il_status w = shapes ? IL_OK : il_load_wait(S->wo.data, (size_t)S->wo.n_out * S->wo.row_stride);
      if (w == IL_OK && !shapes) w = il_load_wait(S->w_down.data, (size_t)S->w_down.n_out * S->w_down.row_stride);
      if (w != IL_OK) {
        il_model_tp_free(t);
        return w;
      }
      const size_t o = il__cols(&S->wo, s * q, q, dst);
      if (dst) dst += o;
      const size_t d = il__cols(&S->w_down, s * ff, ff, dst);
      if (dst) dst += d;
    }
  }
  return IL_OK;
}

/* A tensor placed on shard s's device, for NCCL's view of it (its ordinal). */
static il_status il__device_of(il_model_tp *t, int s, int *device) {
  void *p, *stream;
  return t->b[s]->ops->native(t->b[s], t->dev[s]->layers[0].attn_norm, &p, &stream, device);
}

il_status il_model_tp_place(il_model_tp *t, il_backend *const *b, il_model_dev *dev0, const il_placement *p0) {
  for (int s = 0; s < t->n; s++) t->b[s] = b[s];
  for (int32_t l = 0; p0 && p0->layer && l < t->shard[0].hp.n_layer; l++)
    if (p0->layer[l] && p0->layer[l] != b[0])
      return il_error(IL_ERR_INVALID_ARG, "--tp %d: layer %d is placed off the first device; every layer runs on every "
                      "device of the list", t->n, l);
  t->dev[0] = dev0;
  IL_TRY(il_model_dev_init(dev0, &t->shard[0], b[0], p0));
  il_status st = IL_OK;
  int placed = 1;
  for (int s = 1; s < t->n && st == IL_OK; s++, placed++) {
    const il_placement ps = {.layers_only = true};
    t->dev[s] = &t->own_dev[s];
    st = il_model_dev_init(t->dev[s], &t->shard[s], b[s], &ps);
    if (st != IL_OK) t->dev[s] = NULL;
  }
  t->placed = true;
  if (st == IL_OK && t->n > 1 && t->shard[0].hp.n_layer > 0) {
    bool all = true;
    for (int s = 0; s < t->n; s++) all = all && b[s]->ops->native;
    if (all) { /* every shard on a cuda device: NCCL sums on the devices */
      int devlist[IL_TP_MAX];
      for (int s = 0; s < t->n && st == IL_OK; s++) st = il__device_of(t, s, &devlist[s]);
      if (st == IL_OK) st = il_nccl_open(&t->nccl, getenv("INFERLAB_NCCL_LIB")); /* NULL: libnccl.so.2 */
      if (st == IL_OK) st = il_nccl_init(&t->nccl, t->comms, t->n, devlist);
      t->use_nccl = st == IL_OK;
    }
  }
  if (st != IL_OK) {
    for (int s = 1; s < placed && s < t->n; s++)
      if (t->dev[s]) il_model_dev_free(t->dev[s]), t->dev[s] = NULL;
    t->placed = false;
    return st;
  }
  /* the devices copied their columns of O and down; the cpu reads them in place and keeps them */
  for (int s = 0; s < t->n; s++)
    if (t->packed[s] && !b[s]->ops->buffer_wrap_host) {
      il_mem_free(t->packed[s]);
      t->packed[s] = NULL;
      for (int32_t l = 0; l < t->shard[s].hp.n_layer; l++) t->layers[s][l].wo.data = t->layers[s][l].w_down.data = NULL;
    }
  return IL_OK;
}

il_status il_model_tp_state(il_model_tp *t, il_forward_state *st0, il_dtype act_type, int32_t max_tokens,
                            int32_t max_logits, const il_attn_kernel *(*attn_for)(void *ctx, il_backend *b), void *ctx,
                            const il_kv_view *kv) {
  const int32_t L = t->shard[0].hp.n_layer;
  t->st[0] = st0;
  IL_TRY(il_forward_state_init(st0, t->dev[0], act_type, max_tokens, max_logits, attn_for, ctx, kv));
  il_status st = IL_OK;
  int made = 1;
  for (int s = 1; s < t->n && st == IL_OK; s++, made++) {
    t->st[s] = &t->own_st[s];
    st = il_forward_state_init(t->st[s], t->dev[s], act_type, max_tokens, max_logits, attn_for, ctx, kv + (size_t)s * L);
    if (st != IL_OK) t->st[s] = NULL;
  }
  if (st == IL_OK && t->n > 1) {
    t->scratch = il_mem_alloc(IL_MEM_STAGING, 2 * (size_t)max_tokens * (size_t)t->shard[0].hp.n_embd * sizeof(float),
                              "tensor-parallel all-reduce staging");
    if (!t->scratch) st = IL_ERR_OOM;
  }
  if (st != IL_OK) {
    for (int s = 1; s < made && s < t->n; s++)
      if (t->st[s]) il_forward_state_free(t->st[s]), t->st[s] = NULL;
    il_mem_free(t->scratch);
    t->scratch = NULL;
    il_forward_state_free(st0);
    return st;
  }
  t->stated = true;
  return IL_OK;
}

void il_model_tp_free(il_model_tp *t) {
  for (int s = 1; s < t->n; s++) {
    if (t->stated && t->st[s]) il_forward_state_free(t->st[s]);
    if (t->placed && t->dev[s]) il_model_dev_free(t->dev[s]);
  }
  for (int k = 0; t->use_nccl && k < t->n; k++)
    if (t->comms[k]) (void)t->nccl.comm_destroy(t->comms[k]);
  il_nccl_close(&t->nccl);
  for (int s = 0; s < IL_TP_MAX; s++) {
    il_mem_free(t->layers[s]);
    il_mem_free(t->packed[s]);
  }
  il_mem_free(t->scratch);
  memset(t, 0, sizeof *t);
}

size_t il_model_tp_shard_bytes(const il_model_tp *t, int s) {
  const il_model *m = &t->shard[s];
  size_t n = s == 0 ? il_model_embd_bytes(m) + il_model_out_bytes(m) - (m->tied_output ? il_model_embd_bytes(m) : 0) : 0;
  for (int32_t l = 0; l < m->hp.n_layer; l++) n += il_model_layer_bytes(m, l);
  return n;
}
