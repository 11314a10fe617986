/* model/llama: hyperparameters, weight binding and the forward pass. */
#include "model/llama.h"

#include <math.h>
#include <pthread.h>
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

/* ---- binding weights ---- */

il_status il_model_own(il_model *m, void *buf) {
  if (m->n_owned == m->cap_owned) {
    int64_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
    void **p = il_mem_alloc(IL_MEM_MODEL, (size_t)cap * sizeof *p, "model bookkeeping");
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
  const int64_t dim = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim,
                kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
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
  char name[96];
#define IL__N(fmt) (snprintf(name, sizeof name, "blk.%d." fmt, l), name)
  for (int l = 0; l < hp->n_layer; l++) {
    il_layer *L = &m->layers[l];
    IL_TRY(il__bind_vector(m, ts, nt, IL__N("attn_norm.weight"), dim, true, &L->attn_norm));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("attn_q.weight"), dim, q_dim, true, &L->wq));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("attn_k.weight"), dim, kv_dim, true, &L->wk));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("attn_v.weight"), dim, kv_dim, true, &L->wv));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("attn_output.weight"), q_dim, dim, true, &L->wo));
    IL_TRY(il__bind_vector(m, ts, nt, IL__N("attn_q.bias"), q_dim, hp->qkv_bias, &L->bq));
    IL_TRY(il__bind_vector(m, ts, nt, IL__N("attn_k.bias"), kv_dim, hp->qkv_bias, &L->bk));
    IL_TRY(il__bind_vector(m, ts, nt, IL__N("attn_v.bias"), kv_dim, hp->qkv_bias, &L->bv));
    IL_TRY(il__bind_vector(m, ts, nt, IL__N("ffn_norm.weight"), dim, true, &L->ffn_norm));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("ffn_gate.weight"), dim, hp->n_ff, true, &L->w_gate));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("ffn_up.weight"), dim, hp->n_ff, true, &L->w_up));
    IL_TRY(il__bind_matrix(ts, nt, IL__N("ffn_down.weight"), hp->n_ff, dim, true, &L->w_down));
  }
#undef IL__N
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
  il_model *m = il_mem_calloc(IL_MEM_MODEL, sizeof *m, "model");
  if (!m) return IL_ERR_OOM;
  il_status st = il_gguf_open(path, &m->gguf);
  if (st == IL_OK) st = il_hparams_from_gguf(m->gguf, &m->hp);
  if (st == IL_OK) {
    int64_t nt = il_gguf_tensor_count(m->gguf);
    il_gguf_tensor *ts = il_mem_alloc(IL_MEM_MODEL, sizeof *ts * (size_t)(nt ? nt : 1), "tensor table");
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
  const il_hparams *hp = &m->hp;
  const il_layer *L = &m->layers[l];
  const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
  size_t n = il__w_span(&L->wq) + il__w_span(&L->wk) + il__w_span(&L->wv) + il__w_span(&L->wo) +
             il__w_span(&L->w_gate) + il__w_span(&L->w_up) + il__w_span(&L->w_down) + 8 * (size_t)hp->n_embd;
  if (L->bq) n += 4 * (q_dim + 2 * kv_dim);
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
  if (b->ops->version >= 5 && b->ops->prepare_weight) IL_TRY(b->ops->prepare_weight(b, t, &own));
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

/* ---- model offloading: two slots and a copy thread ---- */

struct il__streamer {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  il_model_dev *d;
  int32_t layer, slot;  /* the copy asked for (layer -1: none) */
  bool busy, quit;
  il_status err;
  char msg[512];
};

/* Copies layer l's weights from host memory into slot s (on the copy thread or the caller's). */
static il_status il__slot_load(il_model_dev *d, int s, int32_t l) {
  const il_hparams *hp = &d->model->hp;
  const il_layer *L = &d->model->layers[l];
  il_layer_dev *D = &d->slot[s];
  il_backend *b = d->stream_b;
  const struct {
    il_tensor *t;
    const void *src;
    size_t bytes;
  } parts[] = {
      {&D->attn_norm, L->attn_norm, 4 * (size_t)hp->n_embd},
      {&D->ffn_norm, L->ffn_norm, 4 * (size_t)hp->n_embd},
      {&D->wq, L->wq.data, il__w_span(&L->wq)},
      {&D->wk, L->wk.data, il__w_span(&L->wk)},
      {&D->wv, L->wv.data, il__w_span(&L->wv)},
      {&D->wo, L->wo.data, il__w_span(&L->wo)},
      {&D->bq, L->bq, D->bq.buf ? il_tensor_span(&D->bq) : 0},
      {&D->bk, L->bk, D->bk.buf ? il_tensor_span(&D->bk) : 0},
      {&D->bv, L->bv, D->bv.buf ? il_tensor_span(&D->bv) : 0},
      {&D->w_gate, L->w_gate.data, il__w_span(&L->w_gate)},
      {&D->w_up, L->w_up.data, il__w_span(&L->w_up)},
      {&D->w_down, L->w_down.data, il__w_span(&L->w_down)},
  };
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i].bytes) IL_TRY(b->ops->upload(b, *parts[i].t, parts[i].src, parts[i].bytes));
  return IL_OK;
}

static void *il__stream_main(void *p) {
  il__streamer *st = p;
  pthread_mutex_lock(&st->lock);
  for (;;) {
    while (!st->quit && st->layer < 0) pthread_cond_wait(&st->cond, &st->lock);
    if (st->quit) break;
    const int32_t l = st->layer, s = st->slot;
    pthread_mutex_unlock(&st->lock);
    il_status e = il__slot_load(st->d, s, l);
    pthread_mutex_lock(&st->lock);
    if (e != IL_OK && st->err == IL_OK) {
      st->err = e;
      snprintf(st->msg, sizeof st->msg, "%s", il_error_detail());
    }
    st->layer = -1;
    st->busy = false;
    pthread_cond_broadcast(&st->cond);
  }
  pthread_mutex_unlock(&st->lock);
  return NULL;
}

/* Waits for the copy in flight; its error, if any, becomes this thread's. */
static il_status il__stream_wait(il__streamer *st) {
  pthread_mutex_lock(&st->lock);
  while (st->busy) pthread_cond_wait(&st->cond, &st->lock);
  il_status e = st->err;
  st->err = IL_OK;
  pthread_mutex_unlock(&st->lock);
  return e == IL_OK ? IL_OK : il_error(e, "offload stream: %s", st->msg);
}

static void il__stream_start(il__streamer *st, int32_t layer, int slot) {
  pthread_mutex_lock(&st->lock);
  st->layer = layer;
  st->slot = slot;
  st->busy = true;
  pthread_cond_broadcast(&st->cond);
  pthread_mutex_unlock(&st->lock);
}

/* The slot that holds layer l, ready to compute; starts copying layer l+1 into the other. */
static il_status il__stream_layer(il_model_dev *d, int32_t l, const il_layer_dev **out) {
  const int s = l % 2;
  IL_TRY(il__stream_wait(d->streamer));
  if (d->slot_layer[s] != l) { /* not prefetched (the first layer of a pass): copy it now */
    IL_TRY(il__slot_load(d, s, l));
    d->slot_layer[s] = l;
    d->streamed_bytes += il_model_layer_bytes(d->model, l);
  }
  const int32_t next = (l + 1) % d->model->hp.n_layer;
  /* layer k always lives in slot k % 2; with an odd layer count the wrap to layer 0 lands in
   * the slot just used, so that one is copied at the start of the next pass instead */
  if (next != l && next % 2 == 1 - s && d->slot_layer[1 - s] != next) {
    d->slot_layer[1 - s] = next;
    d->streamed_bytes += il_model_layer_bytes(d->model, next);
    il__stream_start(d->streamer, next, 1 - s);
  }
  *out = &d->slot[s];
  return IL_OK;
}

/* The slots: tensors shaped like layer 0 (every layer must have its shapes and types). */
static il_status il__stream_init(il_model_dev *d, const il_model *m) {
  const il_hparams *hp = &m->hp;
  const il_layer *L0 = &m->layers[0];
  for (int l = 1; l < hp->n_layer; l++) {
    const il_layer *L = &m->layers[l];
    const il_weight *a[] = {&L0->wq, &L0->wk, &L0->wv, &L0->wo, &L0->w_gate, &L0->w_up, &L0->w_down},
                    *b[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    for (int i = 0; i < 7; i++)
      if (a[i]->type != b[i]->type || a[i]->row_stride != b[i]->row_stride || a[i]->n_out != b[i]->n_out)
        return il_error(IL_ERR_UNSUPPORTED, "--offload stream: '%s' is %s but '%s' is %s: streamed layers share two "
                        "slots, so every layer needs the same types and shapes", b[i]->name, il_dtype_name(b[i]->type),
                        a[i]->name, il_dtype_name(a[i]->type));
  }
  const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
  il_backend *b = d->stream_b;
  for (int s = 0; s < 2; s++) {
    il_layer_dev *D = &d->slot[s];
    const struct {
      il_tensor *t;
      const il_weight *w; /* NULL: an F32 vector of n */
      int64_t n;
      const char *name;
    } parts[] = {
        {&D->attn_norm, NULL, hp->n_embd, "slot attn_norm"}, {&D->ffn_norm, NULL, hp->n_embd, "slot ffn_norm"},
        {&D->wq, &L0->wq, 0, "slot attn_q"},                 {&D->wk, &L0->wk, 0, "slot attn_k"},
        {&D->wv, &L0->wv, 0, "slot attn_v"},                 {&D->wo, &L0->wo, 0, "slot attn_output"},
        {&D->bq, NULL, L0->bq ? q_dim : 0, "slot attn_q.bias"}, {&D->bk, NULL, L0->bk ? kv_dim : 0, "slot attn_k.bias"},
        {&D->bv, NULL, L0->bv ? kv_dim : 0, "slot attn_v.bias"}, {&D->w_gate, &L0->w_gate, 0, "slot ffn_gate"},
        {&D->w_up, &L0->w_up, 0, "slot ffn_up"},             {&D->w_down, &L0->w_down, 0, "slot ffn_down"},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
      if (parts[i].w) {
        il_buffer *buf;
        IL_TRY(b->ops->buffer_alloc(b, IL_MEM_WEIGHTS, il__w_span(parts[i].w), parts[i].name, &buf));
        *parts[i].t = (il_tensor){buf, 0, parts[i].w->row_stride, parts[i].w->n_out, parts[i].w->n_in, parts[i].w->type,
                                  parts[i].name};
      } else if (parts[i].n) {
        IL_TRY(il_backend_tensor_new(b, IL_MEM_WEIGHTS, 1, parts[i].n, IL_DTYPE_F32, parts[i].name, parts[i].t));
      }
    }
    d->slot_layer[s] = -1;
  }
  il__streamer *st = il_mem_calloc(IL_MEM_MODEL, sizeof *st, "offload stream");
  if (!st) return IL_ERR_OOM;
  st->d = d;
  st->layer = -1;
  pthread_mutex_init(&st->lock, NULL);
  pthread_cond_init(&st->cond, NULL);
  if (pthread_create(&st->thread, NULL, il__stream_main, st) != 0) {
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cond);
    il_mem_free(st);
    return il_error(IL_ERR_INTERNAL, "--offload stream: cannot start the copy thread");
  }
  d->streamer = st;
  return IL_OK;
}

il_status il_model_dev_sync(il_model_dev *d) { return d->streamer ? il__stream_wait(d->streamer) : IL_OK; }

static void il__stream_free(il_model_dev *d) {
  il__streamer *st = d->streamer;
  if (st) {
    pthread_mutex_lock(&st->lock);
    while (st->busy) pthread_cond_wait(&st->cond, &st->lock);
    st->quit = true;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thread, NULL);
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->cond);
    il_mem_free(st);
    d->streamer = NULL;
  }
  for (int s = 0; s < 2 && d->stream_b; s++) {
    il_tensor *ts = &d->slot[s].attn_norm;
    for (size_t i = 0; i < sizeof(il_layer_dev) / sizeof(il_tensor); i++) il_backend_tensor_free(d->stream_b, &ts[i]);
  }
}

static il_status il__dev_init(il_model_dev *d, const il_model *m) {
  const il_hparams *hp = &m->hp;
  const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
  IL_TRY(il__place_w(d, d->embd_b, &m->tok_embd, &d->tok_embd));
  IL_TRY(il__place_v(d, d->out_b, m->out_norm, hp->n_embd, "output_norm.weight", &d->out_norm));
  d->output_shared = m->tied_output && d->out_b == d->embd_b;
  if (d->output_shared) {
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
    if (d->stream && b == d->stream_b) continue; /* streamed through the slots */
    IL_TRY(il__place_v(d, b, L->attn_norm, hp->n_embd, "attn_norm.weight", &D->attn_norm));
    IL_TRY(il__place_v(d, b, L->ffn_norm, hp->n_embd, "ffn_norm.weight", &D->ffn_norm));
    IL_TRY(il__place_mm(d, b, &L->wq, &D->wq));
    IL_TRY(il__place_mm(d, b, &L->wk, &D->wk));
    IL_TRY(il__place_mm(d, b, &L->wv, &D->wv));
    IL_TRY(il__place_mm(d, b, &L->wo, &D->wo));
    IL_TRY(il__place_v(d, b, L->bq, q_dim, "attn_q.bias", &D->bq));
    IL_TRY(il__place_v(d, b, L->bk, kv_dim, "attn_k.bias", &D->bk));
    IL_TRY(il__place_v(d, b, L->bv, kv_dim, "attn_v.bias", &D->bv));
    IL_TRY(il__place_mm(d, b, &L->w_gate, &D->w_gate));
    IL_TRY(il__place_mm(d, b, &L->w_up, &D->w_up));
    IL_TRY(il__place_mm(d, b, &L->w_down, &D->w_down));
  }
  return IL_OK;
}

il_status il_model_dev_init(il_model_dev *d, const il_model *m, il_backend *b, const il_placement *p) {
  memset(d, 0, sizeof *d);
  d->model = m;
  d->layer_b = il_mem_alloc(IL_MEM_MODEL, sizeof(il_backend *) * (size_t)(m->hp.n_layer ? m->hp.n_layer : 1), "placement");
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
      il_tensor *ts = &d->layers[l].attn_norm;
      for (size_t i = 0; i < sizeof(il_layer_dev) / sizeof(il_tensor); i++) il_backend_tensor_free(d->layer_b[l], &ts[i]);
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

il_attn_args il_forward_attn_args(const il_model *m, const il_forward_lane *ln, int32_t n, const il_kv_view *kv) {
  const il_hparams *hp = &m->hp;
  il_tensor ids = ln->batch;
  ids.cols = n;
  ids.stride = (size_t)n * 4;
  il_tensor pos = ids, seq = ids;
  pos.off += (size_t)n * 4;
  seq.off += (size_t)n * 8;
  return (il_attn_args){
      .out = il_tensor_rows(ln->att, 0, n),
      .q = il_tensor_rows(ln->q, 0, n),
      .seq = seq,
      .pos = pos,
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
       "activations: f32 chunk", act != IL_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].need)
      IL_TRY(il_backend_tensor_new(ln->b, IL_MEM_ACTIVATIONS, bufs[i].rows, bufs[i].cols, bufs[i].type, bufs[i].name,
                                   bufs[i].t));
  return IL_OK;
}

static il_tensor il__shape_of(const il_weight *w, il_dtype force) {
  return (il_tensor){NULL, 0, 0, w->n_out, w->n_in, force != IL_DTYPE_COUNT ? force : w->type, w->name};
}

int il_model_layer_shapes(const il_model *m, int32_t l, il_dtype force, il_tensor *out) {
  const il_layer *L = &m->layers[l];
  const il_weight *t[IL_MODEL_LAYER_MATMULS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
  for (int i = 0; i < IL_MODEL_LAYER_MATMULS; i++) out[i] = il__shape_of(t[i], force);
  return IL_MODEL_LAYER_MATMULS;
}

il_tensor il_model_output_shape(const il_model *m, il_dtype force) { return il__shape_of(&m->output, force); }

/* The scratch a lane's backend needs for the matmuls it will run (ops->reserve): the weights of
 * its layers (or the stream slots, which are shaped like every layer) and the output head. */
static il_status il__lane_reserve(const il_forward_lane *ln, const il_model_dev *d, int32_t max_tokens) {
  const il_backend_ops *o = ln->b->ops;
  if (o->version < 3 || !o->reserve) return IL_OK;
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
  for (int i = 0; i < st->n_lanes && s == IL_OK; i++) s = il__lane_init(&st->lane[i], m, act_type, max_tokens, max_logits);
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
  }
  il_mem_free(st->host_batch);
  il_mem_free(st->staging);
  memset(st, 0, sizeof *st);
}

/* ---- ops over chunks of rows ----
 * An op of the forward pass runs as a loop over chunks of st->chunk rows of the batch. For each
 * it takes its inputs with il__in and its outputs with il__out, computes on those F32 views, and
 * hands every output to il__put. With F32 activations there is one chunk and the views are the
 * buffers themselves; with F16/BF16 they are F32 copies in the lane's scratch (`wide`): inputs
 * widened there, outputs narrowed back to the buffer by il__put. */
typedef struct {
  il_forward_state *st;
  il_forward_lane *ln;
  int32_t n, r0, rows; /* rows [r0, r0 + rows) of a batch of n */
  size_t used;         /* bytes of ln->wide this chunk's op has taken */
} il__chunk;

static il__chunk il__chunk_at(il_forward_state *st, il_forward_lane *ln, int32_t n, int32_t r0) {
  const int32_t left = n - r0;
  return (il__chunk){st, ln, n, r0, left < st->chunk ? left : st->chunk, 0};
}

#define IL__CHUNKS(k, st, ln, n)                                                                                        \
  for (il__chunk k = il__chunk_at(st, ln, n, 0); k.rows > 0; k = il__chunk_at(st, ln, n, k.r0 + k.rows))

/* Where the op writes the chunk's rows of t: t's rows when t is F32, else F32 scratch. */
static il_status il__out(il__chunk *k, il_tensor t, il_tensor *out) {
  if (t.type == IL_DTYPE_F32) {
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

/* The chunk's rows of t as the op reads them: t's rows when F32, else widened into scratch. */
static il_status il__in(il__chunk *k, il_tensor t, il_tensor *out) {
  IL_TRY(il__out(k, t, out));
  if (t.type == IL_DTYPE_F32) return IL_OK;
  return k->ln->b->ops->copy(k->ln->b, *out, il_tensor_rows(t, k->r0, k->rows));
}

/* Entries [r0, r0 + n) of an I32 vector (ids, positions, sequences, slots). */
static il_tensor il__ids(il_tensor t, int32_t r0, int32_t n) {
  t.off += (size_t)r0 * 4;
  t.cols = n;
  t.stride = (size_t)n * 4;
  return t;
}

/* With check_numerics: counts inf/nan in t and records the first place they appear. */
static il_status il__check(il_forward_state *st, il_backend *b, il_tensor t, int32_t layer, const char *block) {
  if (!st->check_numerics || st->bad_layer >= 0) return IL_OK;
  int64_t n = 0;
  IL_TRY(b->ops->count_nonfinite(b, t, &n));
  if (n) st->bad_layer = layer, st->bad_block = block, st->bad_count = n;
  return IL_OK;
}

/* y, the result of op `op` of layer `layer` for the chunk's rows of t: with a check, its largest
 * magnitude before rounding, then inf/nan counted in what t's type keeps (F16 turns |x| > 65504
 * into inf), so the first op that made them is named; then stored at t's type. */
static il_status il__put(il__chunk *k, il_tensor y, il_tensor t, int32_t layer, const char *op) {
  il_forward_state *st = k->st;
  il_backend *b = k->ln->b;
  if (st->check_numerics) {
    int64_t n = 0;
    float m = 0;
    IL_TRY(b->ops->value_stats(b, y, &n, &m));
    if (m > st->max_abs) st->max_abs = m, st->max_abs_layer = layer, st->max_abs_op = op;
    if (t.type != IL_DTYPE_F32) IL_TRY(b->ops->round_to(b, y, t.type));
    IL_TRY(il__check(st, b, y, layer, op));
  }
  if (t.type == IL_DTYPE_F32) return IL_OK;
  return b->ops->copy(b, il_tensor_rows(t, k->r0, k->rows), y);
}

/* Y = rmsnorm(X) * g over rows [0, n). */
static il_status il__norm(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, il_tensor g,
                          float eps, int32_t layer, const char *op) {
  IL__CHUNKS(k, st, ln, n) {
    il_tensor x, y;
    IL_TRY(il__in(&k, X, &x));
    IL_TRY(il__out(&k, Y, &y));
    IL_TRY(ln->b->ops->rmsnorm(ln->b, y, x, g, eps));
    IL_TRY(il__put(&k, y, Y, layer, op));
  }
  return IL_OK;
}

/* Y[i] = X W[i]^T for i < m (one matmul, or matmul_multi reading X once), plus bias[i] when
 * given. op NULL: Y is F32 and left unchecked (the logits). */
static il_status il__mm(il_forward_state *st, il_forward_lane *ln, int32_t n, int m, const il_tensor *Y,
                        const il_tensor *W, const il_tensor *bias, il_tensor X, int32_t layer, const char *const *op) {
  il_backend *b = ln->b;
  IL__CHUNKS(k, st, ln, n) {
    il_tensor x, y[3];
    IL_TRY(il__in(&k, X, &x));
    for (int i = 0; i < m; i++) IL_TRY(il__out(&k, Y[i], &y[i]));
    IL_TRY(m == 1 ? b->ops->matmul(b, y[0], W[0], x) : b->ops->matmul_multi(b, m, y, W, x));
    for (int i = 0; bias && i < m; i++) IL_TRY(b->ops->add_bias(b, y[i], bias[i]));
    for (int i = 0; op && i < m; i++) IL_TRY(il__put(&k, y[i], Y[i], layer, op[i]));
  }
  return IL_OK;
}

/* Y = f(Y, X) elementwise: the residual add (Y += X) or SwiGLU (Y = silu(Y) * X). */
static il_status il__binary(il_forward_state *st, il_forward_lane *ln, int32_t n, il_tensor Y, il_tensor X, bool swiglu,
                            int32_t layer, const char *op) {
  il_backend *b = ln->b;
  IL__CHUNKS(k, st, ln, n) {
    il_tensor y, x;
    IL_TRY(il__in(&k, Y, &y));
    IL_TRY(il__in(&k, X, &x));
    IL_TRY(swiglu ? b->ops->swiglu(b, y, x) : b->ops->add(b, y, x));
    IL_TRY(il__put(&k, y, Y, layer, op));
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

il_status il_model_forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
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
    const il_tensor X = il_tensor_rows(cur->x, 0, n);
    const il_tensor tid = il_tensor_make(cur->batch.buf, cur->batch.off, 1, n, IL_DTYPE_I32, "token ids");
    IL__CHUNKS(k, st, cur, n) {
      il_tensor x;
      IL_TRY(il__out(&k, X, &x));
      IL_TRY(d->embd_b->ops->get_rows(d->embd_b, x, d->tok_embd, il__ids(tid, k.r0, k.rows)));
      IL_TRY(il__put(&k, x, X, 0, "token_embd"));
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
    const il_attn_args a0 = il_forward_attn_args(m, ln, n, &kv[l]);
    const il_tensor tslot = il_tensor_make(ln->batch.buf, ln->batch.off + (size_t)n * 12, 1, n, IL_DTYPE_I32, "kv slots");
    const il_tensor X = il_tensor_rows(ln->x, 0, n), XB = il_tensor_rows(ln->xb, 0, n), XO = il_tensor_rows(ln->xo, 0, n),
                    Q = il_tensor_rows(ln->q, 0, n), K = il_tensor_rows(ln->k, 0, n), V = il_tensor_rows(ln->v, 0, n),
                    ATT = il_tensor_rows(ln->att, 0, n), HB = il_tensor_rows(ln->hb, 0, n),
                    HB2 = il_tensor_rows(ln->hb2, 0, n);
    /* attention block */
    IL_TRY(il__norm(st, ln, n, XB, X, L->attn_norm, hp->norm_eps, l, "attn_norm"));
    const il_tensor wqkv[3] = {L->wq, L->wk, L->wv}, yqkv[3] = {Q, K, V}, bqkv[3] = {L->bq, L->bk, L->bv};
    IL_TRY(il__mm(st, ln, n, 3, yqkv, wqkv, L->bq.buf ? bqkv : NULL, XB, l, qkv_ops));
    IL__CHUNKS(k, st, ln, n) { /* q and k rotated; k and v into the cache (k's buffer keeps no rotation) */
      il_tensor q, kk, vv;
      IL_TRY(il__in(&k, Q, &q));
      IL_TRY(il__in(&k, K, &kk));
      IL_TRY(il__in(&k, V, &vv));
      const il_tensor at = il__ids(a0.pos, k.r0, k.rows);
      IL_TRY(ops->rope(b, q, at, &rq));
      IL_TRY(ops->rope(b, kk, at, &rk));
      IL_TRY(ops->kv_store(b, &kv[l], kk, vv, il__ids(tslot, k.r0, k.rows)));
      IL_TRY(il__put(&k, q, Q, l, "rope"));
    }
    IL__CHUNKS(k, st, ln, n) {
      il_attn_args a = a0;
      IL_TRY(il__in(&k, Q, &a.q));
      IL_TRY(il__out(&k, ATT, &a.out));
      a.pos = il__ids(a0.pos, k.r0, k.rows);
      a.seq = il__ids(a0.seq, k.r0, k.rows);
      a.slice = st->attn_slice;
      IL_TRY(ln->attn->run(b, &a, ln->attn_ws));
      IL_TRY(il__put(&k, a.out, ATT, l, "attention"));
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
  return il__check(st, b, LG, hp->n_layer, "output");
}

int32_t il_model_n_vocab(const il_model *m) { return m->hp.n_vocab; }
int32_t il_model_n_layer(const il_model *m) { return m->hp.n_layer; }
int32_t il_model_n_embd(const il_model *m) { return m->hp.n_embd; }
int32_t il_model_n_ctx_train(const il_model *m) { return m->hp.n_ctx_train; }
