/* model/llama: hyperparameters, weight binding and the forward pass. */
#include "model/llama.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

  m->layers = il_mem_calloc(IL_MEM_OTHER, sizeof(il_layer) * (size_t)hp->n_layer, "model layers");
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
  m->tensors = (il_gguf_tensor *)ts;
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

/* ---- forward pass ---- */

il_status il_forward_state_init(il_forward_state *st, const il_model *m, il_backend *b, int32_t max_tokens) {
  memset(st, 0, sizeof *st);
  const il_hparams *hp = &m->hp;
  const size_t T = (size_t)max_tokens, dim = (size_t)hp->n_embd, q_dim = (size_t)hp->n_head * hp->head_dim,
               kv_dim = (size_t)hp->n_head_kv * hp->head_dim, ff = (size_t)hp->n_ff;
  st->max_tokens = max_tokens;
  struct {
    void **p;
    size_t bytes;
  } bufs[] = {
      {(void **)&st->x, T * dim * 4},      {(void **)&st->xb, T * dim * 4},    {(void **)&st->q, T * q_dim * 4},
      {(void **)&st->k, T * kv_dim * 4},   {(void **)&st->v, T * kv_dim * 4},  {(void **)&st->att, T * q_dim * 4},
      {(void **)&st->hb, T * ff * 4},      {(void **)&st->hb2, T * ff * 4},    {(void **)&st->xo, T * dim * 4},
      {(void **)&st->ids, T * 4},          {(void **)&st->pos, T * 4},         {(void **)&st->rows, T * sizeof(il_attn_row)},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    il_status s = b->alloc(b, IL_MEM_ACTIVATIONS, bufs[i].bytes, "activations", bufs[i].p);
    if (s != IL_OK) {
      il_forward_state_free(st, b);
      return s;
    }
  }
  return IL_OK;
}

void il_forward_state_free(il_forward_state *st, il_backend *b) {
  void *ps[] = {st->x, st->xb, st->q, st->k, st->v, st->att, st->hb, st->hb2, st->xo, st->ids, st->pos, st->rows};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
    if (ps[i]) b->free(b, ps[i]);
  memset(st, 0, sizeof *st);
}

/* y[i] = W_i x for weights that share x, through the backend's fused op when it has one. */
static il_status il__matmul_shared(il_backend *b, int n, const il_weight *const *w, const float *x, int64_t n_tok,
                                   float *const *y, const int64_t *ldy) {
  if (b->matmul_multi) return b->matmul_multi(b, n, w, x, n_tok, y, ldy);
  for (int i = 0; i < n; i++) IL_TRY(b->matmul(b, w[i], x, n_tok, y[i], ldy[i]));
  return IL_OK;
}

il_status il_model_forward(const il_model *m, il_backend *b, il_forward_state *st, const il_batch_entry *batch,
                           int32_t n, const il_kv_view *kv, float *logits) {
  const il_hparams *hp = &m->hp;
  const int64_t dim = hp->n_embd, hd = hp->head_dim, q_dim = (int64_t)hp->n_head * hd,
                kv_dim = (int64_t)hp->n_head_kv * hd, ff = hp->n_ff;
  if (n <= 0 || n > st->max_tokens)
    return il_error(IL_ERR_INVALID_ARG, "forward: batch of %d entries (must be 1..%d)", n, st->max_tokens);
  for (int32_t i = 0; i < n; i++) {
    const il_batch_entry *e = &batch[i];
    if (e->token < 0 || e->token >= hp->n_vocab)
      return il_error(IL_ERR_RANGE, "batch entry %d: token id %d is outside the vocabulary [0, %d)", i, e->token,
                      hp->n_vocab);
    if (e->seq < 0 || e->seq >= kv[0].n_seq)
      return il_error(IL_ERR_RANGE, "batch entry %d: sequence %d outside [0, %d)", i, e->seq, kv[0].n_seq);
    if (e->pos < 0 || e->pos >= kv[0].n_ctx)
      return il_error(IL_ERR_RANGE, "batch entry %d: position %d outside the context [0, %d)", i, e->pos,
                      kv[0].n_ctx);
    st->ids[i] = e->token;
    st->pos[i] = e->pos;
    st->rows[i] = (il_attn_row){e->seq, e->pos};
  }

  IL_TRY(b->get_rows(b, &m->tok_embd, st->ids, n, st->x));
  for (int l = 0; l < hp->n_layer; l++) {
    const il_layer *L = &m->layers[l];
    /* attention block */
    b->rmsnorm(b, st->xb, st->x, L->attn_norm, dim, n, hp->norm_eps);
    const il_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
    float *const yqkv[3] = {st->q, st->k, st->v};
    const int64_t ldqkv[3] = {q_dim, kv_dim, kv_dim};
    IL_TRY(il__matmul_shared(b, 3, wqkv, st->xb, n, yqkv, ldqkv));
    if (L->bq) {
      b->add_bias(b, st->q, L->bq, q_dim, n);
      b->add_bias(b, st->k, L->bk, kv_dim, n);
      b->add_bias(b, st->v, L->bv, kv_dim, n);
    }
    b->rope(b, st->q, st->pos, n, hp->n_head, hd, hp->n_rot, hp->rope_base, hp->rope_scale, hp->rope_mode);
    b->rope(b, st->k, st->pos, n, hp->n_head_kv, hd, hp->n_rot, hp->rope_base, hp->rope_scale, hp->rope_mode);
    const il_kv_view *c = &kv[l];
    for (int32_t i = 0; i < n; i++) {
      size_t cell = ((size_t)batch[i].seq * (size_t)c->n_ctx + (size_t)batch[i].pos) * (size_t)kv_dim;
      b->copy(b, c->k + cell, st->k + i * kv_dim, (size_t)kv_dim * sizeof(float));
      b->copy(b, c->v + cell, st->v + i * kv_dim, (size_t)kv_dim * sizeof(float));
    }
    IL_TRY(b->attention(b, st->att, st->q, st->rows, n, c, hp->n_head, hp->n_head_kv, hd));
    IL_TRY(b->matmul(b, &L->wo, st->att, n, st->xo, dim));
    b->add(b, st->x, st->xo, n * dim);
    /* feed-forward block */
    b->rmsnorm(b, st->xb, st->x, L->ffn_norm, dim, n, hp->norm_eps);
    const il_weight *wgu[2] = {&L->w_gate, &L->w_up};
    float *const ygu[2] = {st->hb, st->hb2};
    const int64_t ldgu[2] = {ff, ff};
    IL_TRY(il__matmul_shared(b, 2, wgu, st->xb, n, ygu, ldgu));
    b->swiglu(b, st->hb, st->hb2, n * ff);
    IL_TRY(b->matmul(b, &L->w_down, st->hb, n, st->xo, dim));
    b->add(b, st->x, st->xo, n * dim);
  }
  /* output head only for the rows that want logits */
  int32_t n_out = 0;
  for (int32_t i = 0; i < n; i++)
    if (batch[i].logits) {
      if (n_out != i) b->copy(b, st->x + n_out * dim, st->x + i * dim, (size_t)dim * sizeof(float));
      n_out++;
    }
  if (n_out == 0) return IL_OK;
  b->rmsnorm(b, st->xb, st->x, m->out_norm, dim, n_out, hp->norm_eps);
  return b->matmul(b, &m->output, st->xb, n_out, logits, hp->n_vocab);
}
