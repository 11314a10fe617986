/* model/llama: hyperparameters, weight binding and the forward pass. */
#include "model/llama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/quant.h"
#include "memory/mem.h"

/* ---- architectures ---- */

typedef struct {
  const char *name;
  il_rope_mode rope_mode;
  bool qkv_bias;
} il__arch;

static const il__arch il__archs[] = {
    {"llama", IL_ROPE_NORM, false},
    {"mistral", IL_ROPE_NORM, false}, /* Llama layout; sliding window not used at these contexts */
    {"qwen2", IL_ROPE_NEOX, true},
};

il_status il_hparams_set_arch(il_hparams *hp, const char *arch) {
  for (size_t i = 0; i < sizeof il__archs / sizeof il__archs[0]; i++) {
    if (!strcmp(arch, il__archs[i].name)) {
      snprintf(hp->arch, sizeof hp->arch, "%s", arch);
      hp->rope_mode = il__archs[i].rope_mode;
      hp->qkv_bias = il__archs[i].qkv_bias;
      return IL_OK;
    }
  }
  return il_error(IL_ERR_UNSUPPORTED, "general.architecture: '%s' is not supported (supported: llama, mistral, qwen2)",
                  arch);
}

/* ---- hyperparameters ---- */

static il_status il__get_i32(const il_gguf *g, const char *arch, const char *suffix, bool required, int32_t dflt,
                             int32_t *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  int64_t v;
  il_status st = il_gguf_get_i64(g, key, &v);
  if (st == IL_ERR_NOT_FOUND && !required) {
    *out = dflt;
    return IL_OK;
  }
  if (st == IL_ERR_NOT_FOUND) return il_error(IL_ERR_FORMAT, "%s: missing required key '%s'", il_gguf_path(g), key);
  if (st != IL_OK) return st;
  if (v <= 0 || v > INT32_MAX)
    return il_error(IL_ERR_FORMAT, "%s: %s = %lld is out of range", il_gguf_path(g), key, (long long)v);
  *out = (int32_t)v;
  return IL_OK;
}

static il_status il__get_f32(const il_gguf *g, const char *arch, const char *suffix, float dflt, float *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  il_status st = il_gguf_get_f32(g, key, out);
  if (st == IL_ERR_NOT_FOUND) {
    *out = dflt;
    return IL_OK;
  }
  if (st != IL_OK) return st;
  if (!isfinite(*out) || *out <= 0)
    return il_error(IL_ERR_FORMAT, "%s: %s = %g must be a positive number", il_gguf_path(g), key, *out);
  return IL_OK;
}

il_status il_hparams_validate(const il_hparams *hp, const char *where) {
  if (hp->n_embd % hp->n_head)
    return il_error(IL_ERR_FORMAT, "%s: %s.embedding_length = %d is not a multiple of %s.attention.head_count = %d",
                    where, hp->arch, hp->n_embd, hp->arch, hp->n_head);
  if (hp->n_head % hp->n_head_kv)
    return il_error(IL_ERR_FORMAT,
                    "%s: %s.attention.head_count_kv = %d does not divide %s.attention.head_count = %d", where,
                    hp->arch, hp->n_head_kv, hp->arch, hp->n_head);
  if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
    return il_error(IL_ERR_FORMAT, "%s: %s.rope.dimension_count = %d must be even and at most the head size %d",
                    where, hp->arch, hp->n_rot, hp->head_dim);
  if (hp->n_layer > 4096 || hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22))
    return il_error(IL_ERR_FORMAT, "%s: implausible model size (%d layers, embedding %d, ffn %d)", where,
                    hp->n_layer, hp->n_embd, hp->n_ff);
  return IL_OK;
}

il_status il_hparams_from_gguf(const il_gguf *g, il_hparams *hp) {
  memset(hp, 0, sizeof *hp);
  il_gguf_str s;
  il_status st = il_gguf_get_str(g, "general.architecture", &s);
  if (st == IL_ERR_NOT_FOUND)
    return il_error(IL_ERR_FORMAT, "%s: missing required key 'general.architecture'", il_gguf_path(g));
  if (st != IL_OK) return st;
  char arch[32];
  snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
  IL_TRY(il_hparams_set_arch(hp, arch));
  IL_TRY(il__get_i32(g, arch, "embedding_length", true, 0, &hp->n_embd));
  IL_TRY(il__get_i32(g, arch, "block_count", true, 0, &hp->n_layer));
  IL_TRY(il__get_i32(g, arch, "feed_forward_length", true, 0, &hp->n_ff));
  IL_TRY(il__get_i32(g, arch, "attention.head_count", true, 0, &hp->n_head));
  IL_TRY(il__get_i32(g, arch, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv));
  IL_TRY(il__get_i32(g, arch, "context_length", false, 2048, &hp->n_ctx_train));
  IL_TRY(il__get_f32(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->norm_eps));
  IL_TRY(il__get_f32(g, arch, "rope.freq_base", 10000.0f, &hp->rope_base));
  hp->rope_scale = 1.0f;
  char key[128];
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  st = il_gguf_get_str(g, key, &s);
  if (st == IL_OK) {
    if (s.len == 6 && !memcmp(s.ptr, "linear", 6)) {
      IL_TRY(il__get_f32(g, arch, "rope.scaling.factor", 1.0f, &hp->rope_scale));
    } else if (!(s.len == 4 && !memcmp(s.ptr, "none", 4))) {
      return il_error(IL_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not supported (linear or none)", il_gguf_path(g), key,
                      (int)s.len, s.ptr);
    }
  } else if (st != IL_ERR_NOT_FOUND) {
    return st;
  } else {
    /* older files give only the factor */
    IL_TRY(il__get_f32(g, arch, "rope.scale_linear", 1.0f, &hp->rope_scale));
  }
  if (hp->n_embd % hp->n_head)
    return il_hparams_validate(hp, il_gguf_path(g));
  hp->head_dim = hp->n_embd / hp->n_head;
  IL_TRY(il__get_i32(g, arch, "rope.dimension_count", false, hp->head_dim, &hp->n_rot));
  return il_hparams_validate(hp, il_gguf_path(g));
}

/* ---- the layer's tensors ---- */

#define IL__M(n, slot, in, out, f) {n, slot, in, out, false, false, offsetof(il_layer, f), offsetof(il_layer_dev, f)}
#define IL__V(n, slot, in, bias, f) {n, slot, in, in, true, bias, offsetof(il_layer, f), offsetof(il_layer_dev, f)}
const il_layer_tensor il_layer_tensors[IL_LAYER_TENSORS] = {
    IL__V("attn_norm.weight", "slot attn_norm", IL_DIM_EMBD, false, attn_norm),
    IL__V("ffn_norm.weight", "slot ffn_norm", IL_DIM_EMBD, false, ffn_norm),
    IL__M("attn_q.weight", "slot attn_q", IL_DIM_EMBD, IL_DIM_Q, wq),
    IL__M("attn_k.weight", "slot attn_k", IL_DIM_EMBD, IL_DIM_KV, wk),
    IL__M("attn_v.weight", "slot attn_v", IL_DIM_EMBD, IL_DIM_KV, wv),
    IL__M("attn_output.weight", "slot attn_output", IL_DIM_Q, IL_DIM_EMBD, wo),
    IL__V("attn_q.bias", "slot attn_q.bias", IL_DIM_Q, true, bq),
    IL__V("attn_k.bias", "slot attn_k.bias", IL_DIM_KV, true, bk),
    IL__V("attn_v.bias", "slot attn_v.bias", IL_DIM_KV, true, bv),
    IL__M("ffn_gate.weight", "slot ffn_gate", IL_DIM_EMBD, IL_DIM_FF, w_gate),
    IL__M("ffn_up.weight", "slot ffn_up", IL_DIM_EMBD, IL_DIM_FF, w_up),
    IL__M("ffn_down.weight", "slot ffn_down", IL_DIM_FF, IL_DIM_EMBD, w_down),
};
#undef IL__M
#undef IL__V
_Static_assert(sizeof(il_layer_dev) == IL_LAYER_TENSORS * sizeof(il_tensor), "il_layer_tensors lists every placed tensor");

int64_t il_hparams_dim(const il_hparams *hp, il_dim d) {
  switch (d) {
  case IL_DIM_EMBD: return hp->n_embd;
  case IL_DIM_Q: return (int64_t)hp->n_head * hp->head_dim;
  case IL_DIM_KV: return (int64_t)hp->n_head_kv * hp->head_dim;
  case IL_DIM_FF: return hp->n_ff;
  }
  return 0;
}

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

il_status il_model_own(il_model *m, void *buf) {
  if (m->n_owned == m->cap_owned) {
    int64_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
    void **p = il_mem_alloc(IL_MEM_OTHER, (size_t)cap * sizeof *p, "model bookkeeping");
    if (!p) {
      il_mem_free(buf); /* ownership passes even on failure, so callers never leak */
      return IL_ERR_OOM;
    }
    if (m->n_owned) memcpy(p, m->owned, (size_t)m->n_owned * sizeof *p);
    il_mem_free(m->owned);
    m->owned = p;
    m->cap_owned = cap;
  }
  m->owned[m->n_owned++] = buf;
  return IL_OK;
}

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

  m->layers = il_mem_calloc(IL_MEM_OTHER, sizeof(il_layer) * (size_t)hp->n_layer, "model layers");
  if (!m->layers) return IL_ERR_OOM;
  char name[96];
  for (int l = 0; l < hp->n_layer; l++) {
    il_layer *L = &m->layers[l];
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      snprintf(name, sizeof name, "blk.%d.%s", l, t->name);
      const int64_t in = il_hparams_dim(hp, t->in), out = il_hparams_dim(hp, t->out);
      if (t->vector) IL_TRY(il__bind_vector(m, ts, nt, name, in, !t->bias || hp->qkv_bias, il__lv(L, t)));
      else IL_TRY(il__bind_matrix(ts, nt, name, in, out, true, il__lw(L, t)));
    }
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

il_status il_model_open_gguf(const char *path, il_model **out) {
  *out = NULL;
  il_model *m = il_mem_calloc(IL_MEM_OTHER, sizeof *m, "model");
  if (!m) return IL_ERR_OOM;
  il_status st = il_gguf_open(path, &m->gguf);
  if (st == IL_OK) st = il_hparams_from_gguf(m->gguf, &m->hp);
  if (st == IL_OK) {
    int64_t nt = il_gguf_tensor_count(m->gguf);
    il_gguf_tensor *ts = il_mem_alloc(IL_MEM_OTHER, sizeof *ts * (size_t)(nt ? nt : 1), "tensor table");
    st = ts ? il_model_own(m, ts) : IL_ERR_OOM;
    for (int64_t i = 0; st == IL_OK && i < nt; i++) ts[i] = *il_gguf_tensor_at(m->gguf, i);
    if (st == IL_OK) st = il_model_bind(m, ts, nt);
    if (st != IL_OK) st = il_error_wrap(st, "%s: ", path);
  }
  if (st == IL_OK) {
    il_gguf_str s;
    if (il_gguf_get_str(m->gguf, "general.name", &s) == IL_OK)
      snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len < 127 ? s.len : 127), s.ptr);
    else {
      const char *base = strrchr(path, '/');
      snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    }
  }
  if (st != IL_OK) {
    il_model_free(m);
    return st;
  }
  *out = m;
  return IL_OK;
}

void il_model_free(il_model *m) {
  if (!m) return;
  for (int64_t i = 0; i < m->n_owned; i++) il_mem_free(m->owned[i]);
  il_mem_free(m->owned);
  il_mem_free(m->layers);
  if (m->gguf) il_gguf_close(m->gguf);
  il_mem_free(m);
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
  return n;
}

size_t il_model_dev_bytes(const il_model *m) {
  size_t n = il_model_embd_bytes(m) + il_model_out_bytes(m) - (m->tied_output ? il__w_span(&m->output) : 0);
  for (int l = 0; l < m->hp.n_layer; l++) n += il_model_layer_bytes(m, l);
  return n;
}

static il_status il__place_w(il_model_dev *d, il_backend *b, const il_weight *w, il_tensor *out) {
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
  if (!d->model->gguf) return; /* built-in weights are the model's own heap memory */
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
  if (b->ops->prepare_weight) IL_TRY(b->ops->prepare_weight(b, t, &own));
  if (own && release) il__release_pages(d, w);
  return IL_OK;
}

/* A matmul weight, placed and prepared. */
static il_status il__place_mm(il_model_dev *d, il_backend *b, const il_weight *w, il_tensor *out) {
  IL_TRY(il__place_w(d, b, w, out));
  return il__prepare_mm(d, b, w, out, true);
}

static il_status il__place_v(il_model_dev *d, il_backend *b, const float *v, int64_t n, const char *name, il_tensor *out) {
  if (!v) return IL_OK;
  IL_TRY(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, v, 1, n, 0, IL_DTYPE_F32, name, out));
  if (!b->ops->buffer_wrap_host) d->uploaded_bytes += (size_t)n * 4;
  return IL_OK;
}

/* ---- model offloading: two slots, filled on the backend's copy stream ----
 * Layer k always lives in slot k % 2. While layer l computes from its slot, layer l+1's
 * weights are copied into the other with upload_async (sim and cuda: the device's copy stream;
 * where the backend has none, the copy is made in order, at once); the pass waits for a slot's
 * copies (event_wait) only when it reaches that layer. */

/* Layer l's weights from host memory into slot s: queued where the backend copies off the op
 * order (their events kept in d->slot_ev[s]), else copied now. */
static il_status il__slot_load(il_model_dev *d, int s, int32_t l) {
  const il_layer *L = &d->model->layers[l];
  il_backend *b = d->stream_b;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    const il_layer_tensor *t = &il_layer_tensors[i];
    const il_tensor *dst = il__ld(&d->slot[s], t);
    if (!dst->buf) continue; /* a bias this architecture has not */
    const void *src = t->vector ? (const void *)il__lvc(L, t) : il__lwc(L, t)->data;
    const size_t bytes = il_tensor_span(dst);
    if (b->ops->upload_async) IL_TRY(b->ops->upload_async(b, *dst, src, bytes, &d->slot_ev[s][i]));
    else IL_TRY(b->ops->upload(b, *dst, src, bytes));
  }
  return IL_OK;
}

/* Waits for slot s's queued copies; the first one's error, if any. */
static il_status il__slot_wait(il_model_dev *d, int s) {
  il_backend *b = d->stream_b;
  il_status st = IL_OK;
  for (int i = 0; i < IL_LAYER_TENSORS; i++) {
    il_event *e = d->slot_ev[s][i];
    if (!e) continue;
    il_status w = b->ops->event_wait(b, e);
    if (w != IL_OK && st == IL_OK) st = il_error_wrap(w, "offload stream: ");
    b->ops->event_free(b, e);
    d->slot_ev[s][i] = NULL;
  }
  return st;
}

/* The slot that holds layer l, ready to compute; starts copying layer l+1 into the other. */
static il_status il__stream_layer(il_model_dev *d, int32_t l, const il_layer_dev **out) {
  const int s = l % 2;
  il_status w = il__slot_wait(d, s);
  if (w != IL_OK) {
    d->slot_layer[s] = -1; /* its weights are not whole */
    return w;
  }
  if (d->slot_layer[s] != l) { /* not prefetched (the first layer of a pass): copy it now */
    d->slot_layer[s] = -1;
    IL_TRY(il__slot_load(d, s, l));
    IL_TRY(il__slot_wait(d, s));
    d->slot_layer[s] = l;
    d->streamed_bytes += il_model_layer_bytes(d->model, l);
  }
  const int32_t next = (l + 1) % d->model->hp.n_layer;
  /* with an odd layer count the wrap to layer 0 lands in the slot just used, so that one is
   * copied at the start of the next pass instead */
  if (next != l && next % 2 == 1 - s && d->slot_layer[1 - s] != next) {
    d->slot_layer[1 - s] = next;
    d->streamed_bytes += il_model_layer_bytes(d->model, next);
    il_status st = il__slot_load(d, 1 - s, next);
    if (st != IL_OK) {
      d->slot_layer[1 - s] = -1;
      return st;
    }
  }
  *out = &d->slot[s];
  return IL_OK;
}

/* The slots: tensors shaped like layer 0 (every layer must have its shapes and types). */
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
  il_backend *b = d->stream_b;
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      il_tensor *D = il__ld(&d->slot[s], t);
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
    d->slot_layer[s] = -1;
  }
  return IL_OK;
}

il_status il_model_dev_sync(il_model_dev *d) {
  if (!d->stream) return IL_OK;
  il_status a = il__slot_wait(d, 0), b = il__slot_wait(d, 1);
  return a != IL_OK ? a : b;
}

static void il__stream_free(il_model_dev *d) {
  if (d->stream) { /* copies in flight finish before their slots go */
    (void)il_model_dev_sync(d);
    il_error_clear();
  }
  for (int s = 0; s < 2 && d->stream_b; s++) {
    for (int i = 0; i < IL_LAYER_TENSORS; i++) il_backend_tensor_free(d->stream_b, il__ld(&d->slot[s], &il_layer_tensors[i]));
  }
}

static il_status il__dev_init(il_model_dev *d, const il_model *m) {
  const il_hparams *hp = &m->hp;
  IL_TRY(il__place_w(d, d->embd_b, &m->tok_embd, &d->tok_embd));
  IL_TRY(il__place_v(d, d->out_b, m->out_norm, hp->n_embd, "output_norm.weight", &d->out_norm));
  d->output_shared = m->tied_output && d->out_b == d->embd_b;
  if (d->output_shared) {
    d->output = d->tok_embd;
    IL_TRY(il__prepare_mm(d, d->out_b, &m->tok_embd, &d->output, false));
  } else {
    IL_TRY(il__place_mm(d, d->out_b, &m->output, &d->output));
  }
  d->layers = il_mem_calloc(IL_MEM_OTHER, sizeof *d->layers * (size_t)hp->n_layer, "model layers on device");
  if (!d->layers) return IL_ERR_OOM;
  if (d->stream) IL_TRY(il__stream_init(d, m));
  for (int l = 0; l < hp->n_layer; l++) {
    const il_layer *L = &m->layers[l];
    il_layer_dev *D = &d->layers[l];
    il_backend *b = d->layer_b[l];
    if (d->stream && b == d->stream_b) continue; /* streamed through the slots */
    for (int i = 0; i < IL_LAYER_TENSORS; i++) {
      const il_layer_tensor *t = &il_layer_tensors[i];
      if (t->vector) IL_TRY(il__place_v(d, b, il__lvc(L, t), il_hparams_dim(hp, t->in), t->name, il__ld(D, t)));
      else IL_TRY(il__place_mm(d, b, il__lwc(L, t), il__ld(D, t)));
    }
  }
  return IL_OK;
}

il_status il_model_dev_init(il_model_dev *d, const il_model *m, il_backend *b, const il_placement *p) {
  memset(d, 0, sizeof *d);
  d->model = m;
  d->layer_b = il_mem_alloc(IL_MEM_OTHER, sizeof(il_backend *) * (size_t)(m->hp.n_layer ? m->hp.n_layer : 1), "placement");
  if (!d->layer_b) return IL_ERR_OOM;
  d->embd_b = p && p->embd ? p->embd : b;
  d->out_b = p && p->out ? p->out : b;
  for (int l = 0; l < m->hp.n_layer; l++) d->layer_b[l] = p && p->layer && p->layer[l] ? p->layer[l] : b;
  if (p && p->stream && !b->ops->buffer_wrap_host) {
    d->stream = true;
    d->stream_b = b;
  }
  il_status st = il__dev_init(d, m);
  if (st != IL_OK) il_model_dev_free(d);
  return st;
}

void il_model_dev_free(il_model_dev *d) {
  if (!d->layer_b) return;
  il__stream_free(d);
  if (d->layers) {
    for (int l = 0; l < d->model->hp.n_layer; l++) {
      for (int i = 0; i < IL_LAYER_TENSORS; i++)
        il_backend_tensor_free(d->layer_b[l], il__ld(&d->layers[l], &il_layer_tensors[i]));
    }
    il_mem_free(d->layers);
  }
  if (d->output_shared) memset(&d->output, 0, sizeof d->output);
  il_backend_tensor_free(d->out_b, &d->output);
  il_backend_tensor_free(d->out_b, &d->out_norm);
  il_backend_tensor_free(d->embd_b, &d->tok_embd);
  il_mem_free(d->layer_b);
  if (d->released_bytes) il_mem_note_mapped(IL_MEM_WEIGHTS, (int64_t)d->released_bytes); /* the mapping is the model's */
  memset(d, 0, sizeof *d);
}

/* ---- forward pass ---- */

int32_t il_forward_chunk_rows(il_dtype act_type, int32_t max_tokens) {
  if (act_type == IL_DTYPE_F32) return max_tokens;
  int32_t r = max_tokens / 4 + (max_tokens % 4 != 0);
  r = r < 16 ? 16 : r > 256 ? 256 : r;
  return r < max_tokens ? r : max_tokens;
}

/* F32 columns per row the widest op of a lane holds in its scratch (inputs and outputs). */
static int64_t il__wide_cols(const il_hparams *hp, bool layers) {
  const int64_t dim = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim,
                ff = hp->n_ff;
  int64_t w = 2 * dim; /* rmsnorm, residual add (the embedding and output head need less) */
  if (layers) {
    const int64_t ops[] = {dim + q + 2 * kv, q + 2 * kv, 2 * q, q + dim, dim + 2 * ff, 2 * ff, ff + dim};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) w = ops[i] > w ? ops[i] : w;
  }
  return w;
}

size_t il_forward_lane_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits, bool layers,
                             bool output) {
  const size_t T = (size_t)max_tokens, dim = (size_t)hp->n_embd, q_dim = (size_t)hp->n_head * hp->head_dim,
               kv_dim = (size_t)hp->n_head_kv * hp->head_dim, ff = (size_t)hp->n_ff,
               a = il_tensor_row_bytes(act_type, 1);
  size_t n = a * T * 3 * dim + 4 * 4 * T;
  if (layers) n += a * T * (2 * q_dim + 2 * kv_dim + 2 * ff);
  if (output) n += 4 * (size_t)max_logits * (size_t)hp->n_vocab;
  if (act_type != IL_DTYPE_F32) n += 4 * (size_t)il_forward_chunk_rows(act_type, max_tokens) * (size_t)il__wide_cols(hp, layers);
  return n;
}

size_t il_forward_state_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits) {
  return il_forward_lane_bytes(hp, act_type, max_tokens, max_logits, true, true);
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
      .scale = 1.0f / sqrtf((float)hp->head_dim),
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
      {&ln->batch, 1, 4 * (int64_t)T, IL_DTYPE_I32, "activations: batch ids", true},
      {&ln->wide, 1, (int64_t)il_forward_chunk_rows(act, T) * il__wide_cols(hp, ln->has_layers), IL_DTYPE_F32,
       "activations: f32 chunk", act != IL_DTYPE_F32 && !ln->direct},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].need)
      IL_TRY(il_backend_tensor_new(ln->b, IL_MEM_ACTIVATIONS, bufs[i].rows, bufs[i].cols, bufs[i].type, bufs[i].name,
                                   bufs[i].t));
  /* the same F32 scratch, the backend's own where it computes on 16-bit activations itself */
  if (act != IL_DTYPE_F32 && ln->direct) {
    IL_TRY(ln->b->ops->reserve_act(ln->b, act, il_forward_chunk_rows(act, T), il__wide_cols(hp, ln->has_layers)));
    ln->reserved = true;
  }
  return IL_OK;
}

/* Whether b runs every op of the forward pass on activations of act itself (else the pass
 * widens them into F32 copies chunk by chunk and narrows the results). */
static bool il__direct(il_backend *b, il_dtype act, il_dtype kv_type) {
  if (act == IL_DTYPE_F32) return true;
  if (!b->ops->reserve_act) return false;
  for (int op = 0; op < IL_OP_COUNT; op++)
    if (!b->ops->supports(b, (il_op)op, op == IL_OP_KV_STORE || op == IL_OP_ATTENTION ? kv_type : IL_DTYPE_F32, act))
      return false;
  return true;
}

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

il_tensor il_model_output_shape(const il_model *m, il_dtype force) { return il__shape_of(&m->output, force); }

/* The scratch a lane's backend needs for the matmuls it will run (ops->reserve): the weights of
 * its layers (or the stream slots, which are shaped like every layer) and the output head. */
static il_status il__lane_reserve(const il_forward_lane *ln, const il_model_dev *d, int32_t max_tokens) {
  const il_backend_ops *o = ln->b->ops;
  if (!o->reserve) return IL_OK;
  const int32_t n_layer = d->model->hp.n_layer;
  /* every layer's weights as shapes (a mix such as q4_k_m gives layers different types; a
   * streamed layer's slot has its shapes) */
  il_tensor *w = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *w * (IL_MODEL_LAYER_MATMULS * (size_t)n_layer + 1),
                              "reserve list");
  if (!w) return IL_ERR_OOM;
  int n = 0;
  for (int32_t l = 0; ln->has_layers && l < n_layer; l++)
    if (d->layer_b[l] == ln->b) n += il_model_layer_shapes(d->model, l, IL_DTYPE_COUNT, w + n);
  if (ln->has_output) w[n++] = il_model_output_shape(d->model, IL_DTYPE_COUNT);
  il_status s = n ? o->reserve(ln->b, max_tokens, w, n) : IL_OK;
  il_mem_free(w);
  return s;
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
  st->bad_layer = -1;
  il__lane_add(st, d->embd_b);
  for (int l = 0; l < hp->n_layer; l++) {
    il_forward_lane *ln = il__lane_add(st, d->layer_b[l]);
    if (!ln) return il_error(IL_ERR_UNSUPPORTED, "placement: more than %d backends in one model", IL_MAX_LANES);
    ln->has_layers = true;
  }
  il_forward_lane *lo = il__lane_add(st, d->out_b);
  if (!lo) return il_error(IL_ERR_UNSUPPORTED, "placement: more than %d backends in one model", IL_MAX_LANES);
  lo->has_output = true;
  il_status s = IL_OK;
  for (int i = 0; i < st->n_lanes && s == IL_OK; i++) {
    int l = 0; /* the KV cells of the lane's first layer (the others are of the same type) */
    while (l < hp->n_layer - 1 && d->layer_b[l] != st->lane[i].b) l++;
    st->lane[i].direct = il__direct(st->lane[i].b, act_type, kv[l].k.type);
    s = il__lane_init(&st->lane[i], m, act_type, max_tokens, max_logits);
  }
  if (s == IL_OK) {
    st->host_batch = il_mem_alloc(IL_MEM_STAGING, (size_t)max_tokens * 4 * sizeof(int32_t), "batch staging");
    if (!st->host_batch) s = IL_ERR_OOM;
  }
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
    il_tensor *ts[] = {&ln->x,  &ln->xb,     &ln->xo,    &ln->q,   &ln->att,     &ln->k,   &ln->v,
                       &ln->hb, &ln->hb2,    &ln->logits, &ln->batch, &ln->attn_ws, &ln->wide};
    for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) il_backend_tensor_free(ln->b, ts[j]);
    if (ln->reserved) ln->b->ops->reserve_act(ln->b, st->act_type, 0, 0);
  }
  il_mem_free(st->host_batch);
  il_mem_free(st->staging);
  memset(st, 0, sizeof *st);
}

/* ---- numerics: an observer of every op's result ----
 * With check_numerics the backends report each op's output (backend.h: il_op_observer) to
 * il__numerics, named by the op (the output view's name) and the layer (st->obs_layer): its
 * largest magnitude before rounding, then inf/nan counted in what the stored type keeps (F16
 * turns |x| > 65504 into inf), so the first op that made them is named. */

/* Counts inf/nan in t and records the first place they appear. */
static il_status il__bad(il_forward_state *st, il_backend *b, il_tensor t, int32_t layer, const char *block) {
  if (st->bad_layer >= 0) return IL_OK;
  int64_t n = 0;
  IL_TRY(b->ops->count_nonfinite(b, t, &n));
  if (n) st->bad_layer = layer, st->bad_block = block, st->bad_count = n;
  return IL_OK;
}

static il_status il__numerics(void *ctx, il_backend *b, il_op op, il_tensor y, il_dtype stored) {
  (void)op;
  il_forward_state *st = ctx;
  int64_t n = 0;
  float m = 0;
  IL_TRY(b->ops->value_stats(b, y, &n, &m));
  if (m > st->max_abs) st->max_abs = m, st->max_abs_layer = st->obs_layer, st->max_abs_op = y.name;
  if (stored != IL_DTYPE_F32) IL_TRY(b->ops->round_to(b, y, stored));
  return il__bad(st, b, y, st->obs_layer, y.name);
}

/* ---- ops over chunks of rows ----
 * Where a lane's backend computes on the activations' type itself (every F32 pass; cpu and sim
 * with F16/BF16), an op is one call on the buffers and the backend reports its outputs. Where
 * it does not (cuda with F16/BF16), the op runs as a loop over chunks of st->chunk rows: inputs
 * taken with il__in and outputs with il__out as F32 copies in the lane's scratch (`wide`), the
 * op computed there, and every output handed to il__put, which reports it and narrows it back. */
typedef struct {
  il_forward_state *st;
  il_forward_lane *ln;
  int32_t n, r0, rows; /* rows [r0, r0 + rows) of a batch of n */
  size_t used;         /* bytes of ln->wide this chunk's op has taken */
} il__chunk;

static il__chunk il__chunk_at(il_forward_state *st, il_forward_lane *ln, int32_t n, int32_t r0) {
  const int32_t left = n - r0, step = ln->direct ? n : st->chunk;
  return (il__chunk){st, ln, n, r0, left < step ? left : step, 0};
}

#define IL__CHUNKS(k, st, ln, n)                                                                                        \
  for (il__chunk k = il__chunk_at(st, ln, n, 0); k.rows > 0; k = il__chunk_at(st, ln, n, k.r0 + k.rows))

/* Where the op writes the chunk's rows of t: t's rows when t is F32 or the backend takes its
 * type, else F32 scratch. */
static il_status il__out(il__chunk *k, il_tensor t, il_tensor *out) {
  if (t.type == IL_DTYPE_F32 || k->ln->direct) {
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
  if (t.type == IL_DTYPE_F32 || k->ln->direct) return IL_OK;
  return k->ln->b->ops->copy(k->ln->b, *out, il_tensor_rows(t, k->r0, k->rows));
}

/* Entries [r0, r0 + n) of an I32 vector (ids, positions, sequences, slots). */
static il_tensor il__ids(il_tensor t, int32_t r0, int32_t n) {
  t.off += (size_t)r0 * 4;
  t.cols = n;
  t.stride = (size_t)n * 4;
  return t;
}

/* y, the op's F32 result for the chunk's rows of t, where the pass computed it on copies:
 * reported as a backend would report it, then stored at t's type. */
static il_status il__put(il__chunk *k, il_tensor y, il_tensor t) {
  if (t.type == IL_DTYPE_F32 || k->ln->direct) return IL_OK;
  il_backend *b = k->ln->b;
  if (k->st->check_numerics) IL_TRY(il__numerics(k->st, b, IL_OP_COUNT, y, t.type));
  return b->ops->copy(b, il_tensor_rows(t, k->r0, k->rows), y);
}

/* t named for the reports (numerics, errors) by the op that writes it. */
static il_tensor il__as(il_tensor t, const char *op) {
  t.name = op;
  return t;
}

/* Y = rmsnorm(X) * g over rows [0, n). */
static il_status il__norm(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, il_tensor g,
                          float eps, int32_t layer, const char *op) {
  st->obs_layer = layer;
  Y = il__as(Y, op);
  IL__CHUNKS(k, st, ln, n) {
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
  const il_op_observer obs = b->observer;
  if (!op) b->observer = (il_op_observer){0};
  st->obs_layer = layer;
  il_status s = IL_OK;
  IL__CHUNKS(k, st, ln, n) {
    il_tensor x, y[3];
    if ((s = il__in(&k, X, &x)) != IL_OK) break;
    for (int i = 0; i < m && s == IL_OK; i++) s = il__out(&k, op ? il__as(Y[i], op[i]) : Y[i], &y[i]);
    if (s == IL_OK) s = m == 1 && !bias ? b->ops->matmul(b, y[0], W[0], x) : b->ops->matmul_multi(b, m, y, W, bias, x);
    for (int i = 0; op && i < m && s == IL_OK; i++) s = il__put(&k, y[i], Y[i]);
    if (s != IL_OK) break;
  }
  b->observer = obs;
  return s;
}

/* Y = f(Y, X) elementwise: the residual add (Y += X) or SwiGLU (Y = silu(Y) * X). */
static il_status il__binary(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, bool swiglu,
                            int32_t layer, const char *op) {
  il_backend *b = ln->b;
  st->obs_layer = layer;
  Y = il__as(Y, op);
  IL__CHUNKS(k, st, ln, n) {
    il_tensor y, x;
    IL_TRY(il__in(&k, Y, &y));
    IL_TRY(il__in(&k, X, &x));
    IL_TRY(swiglu ? b->ops->swiglu(b, y, x) : b->ops->add(b, y, x));
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

static il_status il__forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                             const il_kv_view *kv, const int32_t *slots, int32_t *n_logits);

il_status il_model_forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                           const il_kv_view *kv, const int32_t *slots, int32_t *n_logits) {
  /* with the check on, the lanes' backends report every op's result for the pass */
  for (int i = 0; i < st->n_lanes; i++)
    st->lane[i].b->observer = st->check_numerics && st->lane[i].direct ? (il_op_observer){il__numerics, st}
                                                                       : (il_op_observer){0};
  il_status s = il__forward(d, st, batch, n, kv, slots, n_logits);
  for (int i = 0; i < st->n_lanes; i++) st->lane[i].b->observer = (il_op_observer){0};
  return s;
}

static il_status il__forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                             const il_kv_view *kv, const int32_t *slots, int32_t *n_logits) {
  const il_model *m = d->model;
  const il_hparams *hp = &m->hp;
  *n_logits = 0;
  if (n <= 0 || n > st->max_tokens)
    return il_error(IL_ERR_INVALID_ARG, "forward: batch of %d entries (must be 1..%d)", n, st->max_tokens);
  int32_t n_out = 0;
  int32_t *ids = st->host_batch, *pos = ids + n, *seq = ids + 2 * n, *slot = ids + 3 * n;
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
    n_out += e->logits;
  }
  if (n_out > st->max_logits)
    return il_error(IL_ERR_INVALID_ARG, "forward: %d entries want logits; the buffers hold %d", n_out, st->max_logits);
  /* one upload per backend per pass: ids, positions, sequences, KV slots */
  for (int i = 0; i < st->n_lanes; i++)
    IL_TRY(st->lane[i].b->ops->upload(st->lane[i].b, st->lane[i].batch, st->host_batch, (size_t)n * 4 * sizeof(int32_t)));

  const int64_t hd = hp->head_dim;
  const il_rope_params rq = {hp->n_head, hd, hp->n_rot, hp->rope_base, hp->rope_scale, hp->rope_mode};
  const il_rope_params rk = {hp->n_head_kv, hd, hp->n_rot, hp->rope_base, hp->rope_scale, hp->rope_mode};

  il_forward_lane *cur = il_forward_lane_of(st, d->embd_b);
  {
    const il_tensor X = il__as(il_tensor_rows(cur->x, 0, n), "token_embd");
    const il_tensor tid = il_forward_batch_views(cur, n).ids;
    st->obs_layer = 0;
    IL__CHUNKS(k, st, cur, n) {
      il_tensor x;
      IL_TRY(il__out(&k, X, &x));
      IL_TRY(d->embd_b->ops->get_rows(d->embd_b, x, d->tok_embd, il__ids(tid, k.r0, k.rows)));
      IL_TRY(il__put(&k, x, X));
    }
  }
  static const char *const qkv_ops[3] = {"attn_q", "attn_k", "attn_v"}, *const gu_ops[2] = {"ffn_gate", "ffn_up"},
                           *const wo_op[1] = {"attn_output"}, *const down_op[1] = {"ffn_down"};
  for (int l = 0; l < hp->n_layer; l++) {
    il_forward_lane *ln = il_forward_lane_of(st, d->layer_b[l]);
    if (ln != cur) IL_TRY(il__move(st, cur, ln, n));
    cur = ln;
    il_backend *b = ln->b;
    const il_backend_ops *ops = b->ops;
    const il_layer_dev *L = &d->layers[l];
    if (d->stream && b == d->stream_b) IL_TRY(il__stream_layer(d, l, &L));
    st->obs_layer = l;
    const il_attn_args a0 = il_forward_attn_args(m, ln, n, &kv[l]);
    const il_tensor tslot = il_forward_batch_views(ln, n).slots;
    const il_tensor X = il_tensor_rows(ln->x, 0, n), XB = il_tensor_rows(ln->xb, 0, n), XO = il_tensor_rows(ln->xo, 0, n),
                    Q = il_tensor_rows(ln->q, 0, n), K = il_tensor_rows(ln->k, 0, n), V = il_tensor_rows(ln->v, 0, n),
                    ATT = il_tensor_rows(ln->att, 0, n), HB = il_tensor_rows(ln->hb, 0, n),
                    HB2 = il_tensor_rows(ln->hb2, 0, n);
    /* attention block */
    IL_TRY(il__norm(st, ln, n, XB, X, L->attn_norm, hp->norm_eps, l, "attn_norm"));
    const il_tensor wqkv[3] = {L->wq, L->wk, L->wv}, yqkv[3] = {Q, K, V}, bqkv[3] = {L->bq, L->bk, L->bv};
    IL_TRY(il__mm(st, ln, n, 3, yqkv, wqkv, L->bq.buf ? bqkv : NULL, XB, l, qkv_ops));
    IL__CHUNKS(k, st, ln, n) { /* q and k rotated; k and v into the cache */
      il_tensor q, kk, vv;
      IL_TRY(il__in(&k, il__as(Q, "rope"), &q));
      IL_TRY(il__in(&k, K, &kk));
      IL_TRY(il__in(&k, V, &vv));
      IL_TRY(ops->rope_kv_store(b, q, kk, vv, il__ids(a0.pos, k.r0, k.rows), &rq, &rk, &kv[l],
                                il__ids(tslot, k.r0, k.rows)));
      IL_TRY(il__put(&k, q, Q));
    }
    IL__CHUNKS(k, st, ln, n) {
      il_attn_args a = a0;
      IL_TRY(il__in(&k, Q, &a.q));
      IL_TRY(il__out(&k, il__as(ATT, "attention"), &a.out));
      a.pos = il__ids(a0.pos, k.r0, k.rows);
      a.seq = il__ids(a0.seq, k.r0, k.rows);
      a.slice = st->attn_slice;
      IL_TRY(ln->attn->run(b, &a, ln->attn_ws));
      IL_TRY(il__put(&k, a.out, ATT));
    }
    IL_TRY(il__mm(st, ln, n, 1, &XO, &L->wo, NULL, ATT, l, wo_op));
    IL_TRY(il__binary(st, ln, n, X, XO, false, l, "attention residual"));
    /* feed-forward block */
    IL_TRY(il__norm(st, ln, n, XB, X, L->ffn_norm, hp->norm_eps, l, "ffn_norm"));
    const il_tensor wgu[2] = {L->w_gate, L->w_up}, ygu[2] = {HB, HB2};
    IL_TRY(il__mm(st, ln, n, 2, ygu, wgu, NULL, XB, l, gu_ops));
    IL_TRY(il__binary(st, ln, n, HB, HB2, true, l, "ffn_swiglu"));
    IL_TRY(il__mm(st, ln, n, 1, &XO, &L->w_down, NULL, HB, l, down_op));
    IL_TRY(il__binary(st, ln, n, X, XO, false, l, "feed-forward residual"));
  }
  il_forward_lane *lo = il_forward_lane_of(st, d->out_b);
  if (lo != cur) IL_TRY(il__move(st, cur, lo, n));
  il_backend *b = lo->b;
  /* output head only for the rows that want logits, moved together first */
  int32_t j = 0;
  for (int32_t i = 0; i < n; i++)
    if (batch[i].logits) {
      if (j != i) IL_TRY(b->ops->copy(b, il_tensor_rows(lo->x, j, 1), il_tensor_rows(lo->x, i, 1)));
      j++;
    }
  *n_logits = n_out;
  if (n_out == 0) return IL_OK;
  const il_tensor XN = il_tensor_rows(lo->xb, 0, n_out), LG = il_tensor_rows(lo->logits, 0, n_out);
  IL_TRY(il__norm(st, lo, n_out, XN, il_tensor_rows(lo->x, 0, n_out), d->out_norm, hp->norm_eps, hp->n_layer,
                  "output_norm"));
  IL_TRY(il__mm(st, lo, n_out, 1, &LG, &d->output, NULL, XN, hp->n_layer, NULL));
  /* logits are downloaded as F32: checked, not rounded */
  return st->check_numerics ? il__bad(st, b, LG, hp->n_layer, "output") : IL_OK;
}

int32_t il_model_n_vocab(const il_model *m) { return m->hp.n_vocab; }
int32_t il_model_n_layer(const il_model *m) { return m->hp.n_layer; }
int32_t il_model_n_embd(const il_model *m) { return m->hp.n_embd; }
int32_t il_model_n_ctx_train(const il_model *m) { return m->hp.n_ctx_train; }
