/* model/llama: the Llama-family model object: architectures, hyperparameters read from GGUF
 * metadata, opening and freeing a model. Its weights are bound and placed by model/weights.c;
 * the forward pass is model/forward.c. */
#include "model/llama.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "memory/mem.h"

/* ---- architectures ---- */

typedef struct {
  const char *name;
  il_rope_mode rope_mode;
  bool qkv_bias, qk_norm, fused, gemma;
} il__arch;

static const il__arch il__archs[] = {
    {"llama", IL_ROPE_NORM, false, false, false, false},
    {"mistral", IL_ROPE_NORM, false, false, false, false}, /* Llama layout; sliding window not used at these contexts */
    {"qwen2", IL_ROPE_NEOX, true, false, false, false},
    {"qwen3", IL_ROPE_NEOX, false, true, false, false},
    /* phi3's sliding window (phi3.attention.sliding_window) is not applied, as llama.cpp does
     * not apply it either */
    {"phi3", IL_ROPE_NEOX, false, false, true, false},
    {"gemma3", IL_ROPE_NEOX, false, true, false, true},
    /* qwen3's attention with a MoE FFN in every layer (routing: il__get_moe) */
    {"qwen3moe", IL_ROPE_NEOX, false, true, false, false},
};
#define IL__N_ARCHS (sizeof il__archs / sizeof il__archs[0])

bool il_hparams_has(const il_hparams *hp, il_need need) {
  switch (need) {
  case IL_NEED_ALWAYS: return true;
  case IL_NEED_QKV_BIAS: return hp->qkv_bias;
  case IL_NEED_QK_NORM: return hp->qk_norm;
  case IL_NEED_POST_NORM: return hp->gemma;
  }
  return false;
}

il_status il_hparams_set_arch(il_hparams *hp, const char *arch) {
  for (size_t i = 0; i < IL__N_ARCHS; i++) {
    if (!strcmp(arch, il__archs[i].name)) {
      snprintf(hp->arch, sizeof hp->arch, "%s", arch);
      hp->rope_mode = il__archs[i].rope_mode;
      hp->qkv_bias = il__archs[i].qkv_bias;
      hp->qk_norm = il__archs[i].qk_norm;
      hp->fused = il__archs[i].fused;
      hp->gemma = il__archs[i].gemma;
      /* llama.cpp's gemma3: every 6th layer global, local layers at base 10000 */
      hp->swa_pattern = hp->gemma ? 6 : 0;
      hp->rope_base_local = 10000.0f;
      return IL_OK;
    }
  }
  return il_error(IL_ERR_UNSUPPORTED, "general.architecture: '%s' is not supported (supported: %s)", arch,
                  il_arch_names());
}

const char *il_arch_names(void) { return "llama, mistral, qwen2, qwen3, phi3, gemma3, qwen3moe"; }

int32_t il_hparams_window(const il_hparams *hp, int32_t l) {
  return hp->swa > 0 && hp->swa_pattern > 0 && l % hp->swa_pattern != hp->swa_pattern - 1 ? hp->swa : 0;
}

void il_hparams_rope(const il_hparams *hp, int32_t l, float *base, float *scale) {
  const bool local = hp->swa_pattern > 0 && l % hp->swa_pattern != hp->swa_pattern - 1;
  *base = local ? hp->rope_base_local : hp->rope_base;
  *scale = local ? 1.0f : hp->rope_scale;
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

/* {arch}.expert_count and the keys that go with it; a count of 0 or none is a dense model.
 * qwen3moe as llama.cpp loads it: the count is required, an expert's FFN length defaults to
 * feed_forward_length / expert_used_count, and the k weights are always renormalized (llama.cpp's
 * qwen3moe graph passes norm_w = true, Qwen3-MoE's norm_topk_prob; the key is not read). */
static il_status il__get_moe(const il_gguf *g, const char *arch, il_hparams *hp) {
  const bool qwen3moe = !strcmp(arch, "qwen3moe");
  char key[128];
  snprintf(key, sizeof key, "%s.expert_count", arch);
  int64_t v = 0;
  il_status st = il_gguf_get_i64(g, key, &v);
  if (qwen3moe && (st == IL_ERR_NOT_FOUND || (st == IL_OK && v == 0)))
    return il_error(IL_ERR_FORMAT, "%s: %s is missing or 0 (qwen3moe layers are mixtures of experts)", il_gguf_path(g),
                    key);
  if (st == IL_ERR_NOT_FOUND || (st == IL_OK && v == 0)) return IL_OK;
  if (st != IL_OK) return st;
  if (v < 0 || v > 512) return il_error(IL_ERR_FORMAT, "%s: %s = %lld is out of range (1..512)", il_gguf_path(g), key, (long long)v);
  hp->n_expert = (int32_t)v;
  IL_TRY(il__get_i32(g, arch, "expert_used_count", true, 0, &hp->n_expert_used));
  if (hp->n_expert_used < 1) return il_hparams_validate(hp, il_gguf_path(g));
  IL_TRY(il__get_i32(g, arch, "expert_feed_forward_length", false, qwen3moe ? hp->n_ff / hp->n_expert_used : hp->n_ff,
                     &hp->n_ff_exp));
  hp->expert_weights_norm = true;
  if (qwen3moe) return IL_OK;
  snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
  bool norm = true;
  st = il_gguf_get_bool(g, key, &norm);
  if (st != IL_OK && st != IL_ERR_NOT_FOUND) return st;
  hp->expert_weights_norm = norm;
  return IL_OK;
}

il_status il_hparams_validate(const il_hparams *hp, const char *where) {
  if (hp->head_dim <= 0 && hp->n_embd % hp->n_head)
    return il_error(IL_ERR_FORMAT, "%s: %s.embedding_length = %d is not a multiple of %s.attention.head_count = %d",
                    where, hp->arch, hp->n_embd, hp->arch, hp->n_head);
  if (hp->n_head % hp->n_head_kv)
    return il_error(IL_ERR_FORMAT,
                    "%s: %s.attention.head_count_kv = %d does not divide %s.attention.head_count = %d", where,
                    hp->arch, hp->n_head_kv, hp->arch, hp->n_head);
  if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
    return il_error(IL_ERR_FORMAT, "%s: %s.rope.dimension_count = %d must be even and at most the head size %d",
                    where, hp->arch, hp->n_rot, hp->head_dim);
  if (hp->n_expert && (hp->n_expert > 512 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert))
    return il_error(IL_ERR_FORMAT, "%s: %s.expert_used_count = %d must be 1..%s.expert_count = %d (at most 512)", where,
                    hp->arch, hp->n_expert_used, hp->arch, hp->n_expert);
  if (hp->n_expert && (hp->n_ff_exp < 1 || hp->n_ff_exp > (1 << 22)))
    return il_error(IL_ERR_FORMAT, "%s: %s.expert_feed_forward_length = %d is out of range", where, hp->arch,
                    hp->n_ff_exp);
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
  IL_TRY(il__get_moe(g, arch, hp));
  /* the head size is n_embd / n_head unless the file says otherwise (qwen3: 128 at n_embd 1024
   * and 16 heads); keys and values of one size only */
  IL_TRY(il__get_i32(g, arch, "attention.key_length", false, 0, &hp->head_dim));
  int32_t v_len = 0;
  IL_TRY(il__get_i32(g, arch, "attention.value_length", false, hp->head_dim, &v_len));
  if (v_len != hp->head_dim)
    return il_error(IL_ERR_UNSUPPORTED, "%s: %s.attention.value_length = %d differs from %s.attention.key_length = %d",
                    il_gguf_path(g), arch, v_len, arch, hp->head_dim);
  if (hp->head_dim == 0 && hp->n_embd % hp->n_head) return il_hparams_validate(hp, il_gguf_path(g));
  if (hp->head_dim == 0) hp->head_dim = hp->n_embd / hp->n_head;
  IL_TRY(il__get_i32(g, arch, "rope.dimension_count", false, hp->head_dim, &hp->n_rot));
  if (hp->gemma) {
    IL_TRY(il__get_i32(g, arch, "attention.sliding_window", true, 0, &hp->swa));
    /* llama.cpp's scale: 1/sqrt(head_dim), except Gemma 3 27B (62 layers), whose
     * query_pre_attn_scalar is n_embd / n_head */
    hp->attn_scale = 1.0f / sqrtf((float)(hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim));
    snprintf(key, sizeof key, "%s.final_logit_softcapping", arch);
    float cap;
    if (il_gguf_get_f32(g, key, &cap) == IL_OK)
      return il_error(IL_ERR_UNSUPPORTED, "%s: %s = %g: logit soft-capping is not supported", il_gguf_path(g), key, cap);
  }
  return il_hparams_validate(hp, il_gguf_path(g));
}

int64_t il_hparams_dim(const il_hparams *hp, il_dim d) {
  switch (d) {
  case IL_DIM_EMBD: return hp->n_embd;
  case IL_DIM_Q: return (int64_t)hp->n_head * hp->head_dim;
  case IL_DIM_KV: return (int64_t)hp->n_head_kv * hp->head_dim;
  case IL_DIM_FF: return hp->n_ff;
  case IL_DIM_HEAD: return hp->head_dim;
  }
  return 0;
}

/* ---- the model ---- */

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

int32_t il_model_n_vocab(const il_model *m) { return m->hp.n_vocab; }
int32_t il_model_n_layer(const il_model *m) { return m->hp.n_layer; }
int32_t il_model_n_embd(const il_model *m) { return m->hp.n_embd; }
int32_t il_model_n_ctx_train(const il_model *m) { return m->hp.n_ctx_train; }
