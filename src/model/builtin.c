/* model/builtin: deterministic in-memory models (see builtin.h). */
#include "model/builtin.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sys/pool.h"
#include "core/quant.h"
#include "memory/mem.h"

typedef struct {
  const char *name;
  int32_t n_vocab, n_ctx, n_embd, n_ff, n_layer, n_head, n_head_kv;
  float rope_base;
  bool tied;
  il_dtype default_type;
  const char *arch;  /* general.architecture */
  int32_t head_dim;  /* 0: n_embd / n_head */
  int32_t n_expert, n_expert_used; /* a mixtral-style MoE (n_ff is then an expert's FFN length); 0: dense */
  int32_t swa;       /* gemma3: the sliding window */
} il__builtin_spec;

static const il__builtin_spec il__specs[] = {
    {"tiny", 512, 1024, 256, 768, 4, 8, 4, 10000.0f, false, IL_DTYPE_F32, "llama", 0, 0, 0, 0},
    {"1b", 32000, 4096, 2048, 8192, 16, 32, 8, 500000.0f, false, IL_DTYPE_F16, "llama", 0, 0, 0, 0},
    /* draft models for speculative decoding (engine/spec): the first two layers of tiny and
     * of 1b (weights are seeded by tensor name, so these layers, the embeddings and the head
     * are the bigger model's own), and unrelated models with tiny's and with 1b's vocabulary */
    {"tiny-2l", 512, 1024, 256, 768, 2, 8, 4, 10000.0f, false, IL_DTYPE_F32, "llama", 0, 0, 0, 0},
    {"tiny-other", 512, 1024, 128, 384, 2, 4, 2, 10000.0f, false, IL_DTYPE_F32, "llama", 0, 0, 0, 0},
    {"1b-2l", 32000, 4096, 2048, 8192, 2, 32, 8, 500000.0f, false, IL_DTYPE_F16, "llama", 0, 0, 0, 0},
    {"1b-other", 32000, 4096, 512, 1536, 2, 8, 4, 500000.0f, false, IL_DTYPE_F16, "llama", 0, 0, 0, 0},
    /* the other architectures at tiny's size; qwen3's heads are wider than n_embd / n_head
     * (as Qwen3-0.6B's 16 x 128 at n_embd 1024), so q is 512 wide on a 256 residual */
    {"qwen3-tiny", 512, 1024, 256, 768, 4, 8, 4, 1000000.0f, true, IL_DTYPE_F32, "qwen3", 64, 0, 0, 0},
    {"phi3-tiny", 512, 1024, 256, 768, 4, 8, 4, 10000.0f, false, IL_DTYPE_F32, "phi3", 0, 0, 0, 0},
    /* Gemma 3 270M's layout at tiny's size (4 heads, 1 KV head, heads wider than n_embd /
     * n_head, tied output): 6 layers, so layers 0-4 are local and 5 global, with a sliding
     * window of 24 positions, so a short test crosses it */
    {"gemma3-tiny", 512, 512, 256, 768, 6, 4, 1, 1000000.0f, true, IL_DTYPE_F32, "gemma3", 96, 0, 0, 24},
    /* mixtral-style mixture of experts: tiny's attention, 8 experts of FFN 256, 2 per token */
    {"moe-tiny", 512, 1024, 256, 256, 4, 8, 4, 10000.0f, false, IL_DTYPE_F32, "llama", 0, 8, 2, 0},
    /* Qwen3-MoE (30B-A3B: 128 experts of FFN 768, 8 per token, heads of 128 wider than n_embd /
     * n_head) at tiny's size: qwen3-tiny's attention, 16 experts of FFN 128, 4 per token */
    {"qwen3moe-tiny", 512, 1024, 256, 128, 4, 8, 4, 1000000.0f, false, IL_DTYPE_F32, "qwen3moe", 64, 16, 4, 0},
    /* real shapes (the published configs' vocabulary, widths, heads and FFN), for plan and bench:
     * Gemma 3 270M whole (18 layers, 15 local with a window of 512: 268.1M params, most in its
     * 262144-token embedding); Qwen3-0.6B with 4 of its 28 layers; Phi-3-mini-4k with 2 of 32;
     * Qwen3-30B-A3B with 2 of 48 (128 experts of 768, 8 per token: 623M params a layer) */
    {"gemma3-270m", 262144, 32768, 640, 2048, 18, 4, 1, 1000000.0f, true, IL_DTYPE_F16, "gemma3", 256, 0, 0, 512},
    {"qwen3-0.6b-4l", 151936, 40960, 1024, 3072, 4, 16, 8, 1000000.0f, true, IL_DTYPE_F16, "qwen3", 128, 0, 0, 0},
    {"phi3-mini-2l", 32064, 4096, 3072, 8192, 2, 32, 32, 10000.0f, false, IL_DTYPE_F16, "phi3", 0, 0, 0, 0},
    {"qwen3moe-30b-a3b-2l", 151936, 40960, 2048, 768, 2, 32, 4, 1000000.0f, false, IL_DTYPE_F16, "qwen3moe", 128, 128, 8,
     0},
};
#define IL__N_SPECS (sizeof il__specs / sizeof il__specs[0])
#define IL__SEED 0x1f2e3d4c5b6a7988ull

const char *il_builtin_names(void) {
  return "builtin:tiny, builtin:1b, builtin:tiny-2l, builtin:tiny-other, builtin:1b-2l, builtin:1b-other, "
         "builtin:qwen3-tiny, builtin:phi3-tiny, builtin:gemma3-tiny, builtin:moe-tiny, builtin:qwen3moe-tiny, "
         "builtin:gemma3-270m, builtin:qwen3-0.6b-4l, builtin:phi3-mini-2l, builtin:qwen3moe-30b-a3b-2l";
}

bool il_builtin_is(const char *spec) { return spec && !strncmp(spec, "builtin:", 8); }

static const il__builtin_spec *il__spec_of(const char *name) {
  for (size_t i = 0; i < IL__N_SPECS; i++)
    if (!strcmp(il__specs[i].name, name)) return &il__specs[i];
  return NULL;
}

/* ---- weights ---- */

static uint64_t il__splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t il__hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
  return h;
}

typedef struct {
  const il_gguf_tensor *t;
  uint8_t *dst;   /* t's data, which this generator owns */
  float base, amp; /* base + uniform in [-amp, amp); base 1, amp 0 = all ones (norms) */
  uint64_t seed;
  _Atomic int failed; /* the il_status of a thread that failed (its row buffer, quantizing), or 0 */
} il__gen_task;

static void il__gen_worker(void *p, int ith, int nth) {
  il__gen_task *g = p;
  const il_gguf_tensor *t = g->t;
  const int64_t n_in = t->ne[0], rows = t->n_dims > 1 ? t->ne[1] : 1;
  const size_t row_bytes = il_dtype_row_size(t->type, n_in);
  float *buf = il_mem_alloc(IL_MEM_WORKSPACE, (size_t)n_in * sizeof(float), "builtin generator row");
  if (!buf) {
    atomic_store(&g->failed, IL_ERR_OOM);
    return;
  }
  for (int64_t r = ith; r < rows; r += nth) {
    uint64_t s = g->seed ^ ((uint64_t)r * 0xd1342543de82ef95ull);
    for (int64_t i = 0; i < n_in; i++) {
      if (g->amp == 0) buf[i] = g->base;
      else buf[i] = g->base + g->amp * ((float)(il__splitmix(&s) >> 40) / (float)(1 << 23) - 1.0f);
    }
    il_status st = il_quantize_row(t->type, buf, g->dst + (size_t)r * row_bytes, n_in);
    if (st != IL_OK) {
      atomic_store(&g->failed, st);
      break;
    }
  }
  il_mem_free(buf);
}

/* A tensor of ne1 rows of ne0 (ne1 0: a vector, kept F32): weights uniform in [-amp, amp);
 * a vector with amp 0 is all ones (norms), with amp > 0 uniform in 1 +- amp. */
static il_status il__add_tensor(il_model *m, il_pool *pool, il_gguf_tensor *t, const char *name, il_dtype type,
                                int64_t ne0, int64_t ne1, float amp);

/* An expert stack [ne0, ne1, n_expert]: generated as n_expert * ne1 rows (each row seeded by
 * its index, as in a matrix), then given its three dimensions. */
static il_status il__add_stack(il_model *m, il_pool *pool, il_gguf_tensor *t, const char *name, il_dtype type,
                               int64_t ne0, int64_t ne1, int64_t n_expert, float amp) {
  IL_TRY(il__add_tensor(m, pool, t, name, type, ne0, ne1 * n_expert, amp));
  t->n_dims = 3;
  t->ne[1] = ne1;
  t->ne[2] = n_expert;
  return IL_OK;
}

static il_status il__add_tensor(il_model *m, il_pool *pool, il_gguf_tensor *t, const char *name, il_dtype type,
                                int64_t ne0, int64_t ne1, float amp) {
  const bool values = pool != NULL; /* NULL pool: shapes only (the buffers stay untouched zero pages) */
  char *nm = il_mem_alloc(IL_MEM_MODEL, strlen(name) + 1, "tensor name");
  if (!nm) return IL_ERR_OOM;
  strcpy(nm, name);
  IL_TRY(il_model_own(m, nm));
  if (ne1 == 0) type = IL_DTYPE_F32; /* 1-D tensors stay F32, as llama.cpp keeps them */
  size_t row = il_dtype_row_size(type, ne0);
  if (row == 0)
    return il_error(IL_ERR_UNSUPPORTED, "builtin: tensor '%s' with rows of %lld cannot be stored as %s", name,
                    (long long)ne0, il_dtype_name(type));
  size_t bytes = row * (size_t)(ne1 ? ne1 : 1);
  void *data = values ? il_mem_alloc(IL_MEM_WEIGHTS, bytes, name) : il_mem_calloc(IL_MEM_WEIGHTS, ne1 ? 64 : bytes, name);
  if (!data) return IL_ERR_OOM;
  IL_TRY(il_model_own(m, data));
  if (!values) { /* 1-D tensors are read at bind (zeros); 2-D ones never are: one small buffer stands in */
    *t = (il_gguf_tensor){.name = nm, .n_dims = ne1 ? 2 : 1, .ne = {ne0, ne1 ? ne1 : 1, 1, 1}, .type = type,
                          .nbytes = bytes, .data = data};
    return IL_OK;
  }
  *t = (il_gguf_tensor){.name = nm, .n_dims = ne1 ? 2 : 1, .ne = {ne0, ne1 ? ne1 : 1, 1, 1}, .type = type,
                        .nbytes = bytes, .data = data};
  il__gen_task g = {t, data, ne1 ? 0.0f : 1.0f, amp, IL__SEED ^ il__hash(name), 0};
  il_pool_run(pool, il__gen_worker, &g);
  return (il_status)atomic_load(&g.failed);
}

static il_status il__generate(il_model *m, const il__builtin_spec *sp, il_dtype type, il_pool *pool) {
  const il_hparams *hp = &m->hp;
  const int64_t dim = sp->n_embd, hd = hp->head_dim, q_dim = (int64_t)sp->n_head * hd,
                kv_dim = (int64_t)sp->n_head_kv * hd, ff = sp->n_ff;
  int64_t nt = 3 + 13 * (int64_t)sp->n_layer;
  il_gguf_tensor *ts = il_mem_calloc(IL_MEM_MODEL, sizeof *ts * (size_t)nt, "tensor table");
  if (!ts) return IL_ERR_OOM;
  IL_TRY(il_model_own(m, ts));
  int64_t k = 0;
  const float a_dim = sqrtf(3.0f / (float)dim), a_q = sqrtf(3.0f / (float)q_dim), a_ff = sqrtf(3.0f / (float)ff);
  /* llama keeps its norms at 1 (its outputs are pinned by other tests); the other
   * architectures' norms vary, so a norm applied to the wrong rows shows in their tests */
  const float a_norm = strcmp(hp->arch, "llama") ? 0.25f : 0.0f;
  IL_TRY(il__add_tensor(m, pool, &ts[k++], "token_embd.weight", type, dim, sp->n_vocab, 1.0f));
  IL_TRY(il__add_tensor(m, pool, &ts[k++], "output_norm.weight", type, dim, 0, a_norm));
  if (!sp->tied) IL_TRY(il__add_tensor(m, pool, &ts[k++], "output.weight", type, dim, sp->n_vocab, a_dim));
  char name[96];
  for (int l = 0; l < sp->n_layer; l++) {
#define IL__T(suffix, ne0, ne1, amp)                                                  \
  do {                                                                              \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                            \
    IL_TRY(il__add_tensor(m, pool, &ts[k++], name, type, ne0, ne1, amp));           \
  } while (0)
    IL__T("attn_norm.weight", dim, 0, a_norm);
    if (hp->fused) {
      IL__T("attn_qkv.weight", dim, q_dim + 2 * kv_dim, a_dim);
    } else {
      IL__T("attn_q.weight", dim, q_dim, a_dim);
      IL__T("attn_k.weight", dim, kv_dim, a_dim);
      IL__T("attn_v.weight", dim, kv_dim, a_dim);
    }
    if (hp->qk_norm) {
      IL__T("attn_q_norm.weight", hd, 0, a_norm);
      IL__T("attn_k_norm.weight", hd, 0, a_norm);
    }
    IL__T("attn_output.weight", q_dim, dim, a_q);
    if (hp->gemma) IL__T("post_attention_norm.weight", dim, 0, a_norm);
    IL__T("ffn_norm.weight", dim, 0, a_norm);
    if (sp->n_expert) {
      /* the router's logits of order 1, so routing differs from token to token */
      IL__T("ffn_gate_inp.weight", dim, sp->n_expert, 1.0f);
#define IL__S(suffix, ne0, ne1, amp)                                                            \
  do {                                                                                        \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                      \
    IL_TRY(il__add_stack(m, pool, &ts[k++], name, type, ne0, ne1, sp->n_expert, amp));        \
  } while (0)
      IL__S("ffn_gate_exps.weight", dim, ff, a_dim);
      IL__S("ffn_up_exps.weight", dim, ff, a_dim);
      IL__S("ffn_down_exps.weight", ff, dim, a_ff);
#undef IL__S
      continue;
    }
    if (hp->fused) {
      IL__T("ffn_up.weight", dim, 2 * ff, a_dim);
    } else {
      IL__T("ffn_gate.weight", dim, ff, a_dim);
      IL__T("ffn_up.weight", dim, ff, a_dim);
    }
    IL__T("ffn_down.weight", ff, dim, a_ff);
    if (hp->gemma) IL__T("post_ffw_norm.weight", dim, 0, a_norm);
#undef IL__T
  }
  return il_model_bind(m, ts, k);
}

il_status il_builtin_open(const char *spec, const char *wtype, int n_threads, il_model **out) {
  return il_builtin_open_ex(spec, wtype, n_threads, true, out);
}

il_status il_builtin_open_ex(const char *spec, const char *wtype, int n_threads, bool values, il_model **out) {
  *out = NULL;
  const char *name = spec + 8;
  const il__builtin_spec *sp = il_builtin_is(spec) ? il__spec_of(name) : NULL;
  if (!sp) return il_error(IL_ERR_NOT_FOUND, "%s: unknown built-in model (known: %s)", spec, il_builtin_names());
  il_dtype type = sp->default_type;
  if (wtype && *wtype) {
    if (!il_dtype_parse(wtype, &type))
      return il_error(IL_ERR_INVALID_ARG, "--wtype: unknown type '%s'", wtype);
    if (!il_quantize_supported(type))
      return il_error(IL_ERR_UNSUPPORTED, "--wtype: built-in models cannot be generated as %s (use f32, f16, bf16, q8_0, q4_0, q4_1)",
                      il_dtype_name(type));
  }
  il_model *m = il_mem_calloc(IL_MEM_MODEL, sizeof *m, "model");
  if (!m) return IL_ERR_OOM;
  snprintf(m->name, sizeof m->name, "%s", spec);
  il_hparams *hp = &m->hp;
  il_status st = il_hparams_set_arch(hp, sp->arch);
  hp->n_vocab = sp->n_vocab;
  hp->n_ctx_train = sp->n_ctx;
  hp->n_embd = sp->n_embd;
  hp->n_ff = sp->n_ff;
  hp->n_layer = sp->n_layer;
  hp->n_head = sp->n_head;
  hp->n_head_kv = sp->n_head_kv;
  hp->head_dim = sp->head_dim ? sp->head_dim : sp->n_embd / sp->n_head;
  hp->n_expert = sp->n_expert;
  hp->n_expert_used = sp->n_expert_used;
  hp->n_ff_exp = sp->n_ff;
  hp->expert_weights_norm = true;
  hp->n_rot = hp->head_dim;
  hp->norm_eps = 1e-5f;
  hp->rope_base = sp->rope_base;
  hp->rope_scale = 1.0f;
  if (hp->gemma) {
    hp->swa = sp->swa;
    hp->norm_eps = 1e-6f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
  }
  il_pool *pool = NULL;
  if (st == IL_OK && values) st = il_pool_new(n_threads, &pool);
  if (st == IL_OK) st = il__generate(m, sp, type, pool);
  il_pool_free(pool);
  if (st != IL_OK) {
    il_model_free(m);
    return il_error_wrap(st, "%s: ", spec);
  }
  *out = m;
  return IL_OK;
}

/* ---- vocabulary ---- */

typedef struct {
  int32_t n;
  char (*text)[16];
  uint64_t *lens;
  float *scores;
  int32_t *types;
} il__vocab_arrays;

static void il__vocab_free(il__vocab_arrays *v) {
  il_mem_free(v->text);
  il_mem_free(v->lens);
  il_mem_free(v->scores);
  il_mem_free(v->types);
}

/* Token types as GGUF stores them: 1 normal, 2 unknown, 3 control, 6 byte. phi3's vocabulary
 * also ends with Phi-3's control tokens, as the real one does: llama.cpp looks up
 * "<|endoftext|>" by name when a file's name says phi3, and refuses a vocabulary without it. */
static il_status il__vocab_build(int32_t n, const char *arch, il__vocab_arrays *v) {
  memset(v, 0, sizeof *v);
  v->n = n;
  v->text = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->text, "builtin vocab");
  v->lens = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(uint64_t), "builtin vocab");
  v->scores = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(float), "builtin vocab");
  v->types = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(int32_t), "builtin vocab");
  if (!v->text || !v->lens || !v->scores || !v->types) {
    il__vocab_free(v);
    return IL_ERR_OOM;
  }
  const char *specials[3] = {"<unk>", "<s>", "</s>"};
  const int32_t special_types[3] = {2, 3, 3};
  int32_t i = 0;
  for (; i < 3; i++) {
    strcpy(v->text[i], specials[i]);
    v->types[i] = special_types[i];
  }
  for (int b = 0; b < 256 && i < n; b++, i++) {
    snprintf(v->text[i], 8, "<0x%02X>", b);
    v->types[i] = 6;
  }
  /* the space marker alone, then letter pieces, shortest first; a longer piece scores
   * higher so it wins the merge */
  static const char sp[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space marker */
  if (i < n) {
    memcpy(v->text[i], sp, 4);
    v->types[i] = 1;
    v->scores[i++] = 0.5f;
  }
  for (int len = 1; len <= 3 && i < n; len++) {
    for (int prefix = 1; prefix >= 0 && i < n; prefix--) {
      int count = len == 1 ? 26 : len == 2 ? 26 * 26 : 26 * 26 * 26;
      if (!prefix && len == 1) continue; /* single letters come from byte tokens */
      for (int c = 0; c < count && i < n; c++, i++) {
        char *t = v->text[i];
        int o = 0;
        if (prefix) {
          memcpy(t, sp, 3);
          o = 3;
        }
        int x = c;
        for (int j = len - 1; j >= 0; j--) {
          t[o + j] = (char)('a' + x % 26);
          x /= 26;
        }
        t[o + len] = 0;
        v->types[i] = 1;
        v->scores[i] = (float)(len + prefix) - (float)c * 1e-6f;
      }
    }
  }
  for (; i < n; i++) { /* the real-shape vocabularies past the pieces: "<" 5 hex digits ">" (unique up to 2^20) */
    snprintf(v->text[i], 8, "<%05x>", (unsigned)i & 0xfffffu);
    v->types[i] = 5;
  }
  static const char *const phi3[] = {"<|endoftext|>", "<|end|>"};
  if (!strcmp(arch, "phi3") && n > 300)
    for (int k = 0; k < 2; k++) {
      snprintf(v->text[n - 2 + k], sizeof v->text[0], "%s", phi3[k]);
      v->types[n - 2 + k] = 3;
      v->scores[n - 2 + k] = 0.0f;
    }
  for (int32_t j = 0; j < n; j++) v->lens[j] = strlen(v->text[j]);
  return IL_OK;
}

static il_status il__builtin_vocab(int32_t n_vocab, const char *arch, il_vocab **out) {
  il__vocab_arrays v;
  IL_TRY(il__vocab_build(n_vocab, arch, &v));
  const char **ptrs = il_mem_alloc(IL_MEM_TOKENIZER, sizeof(char *) * (size_t)v.n, "builtin vocab");
  il_status st = ptrs ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) {
    for (int32_t i = 0; i < v.n; i++) ptrs[i] = v.text[i];
    st = il_vocab_from_arrays("llama", v.n, ptrs, v.lens, v.scores, v.types, out);
    if (st == IL_OK) il_vocab_set_special(*out, 1, 2, 0, true, false);
  }
  il_mem_free(ptrs);
  il__vocab_free(&v);
  return st;
}

il_status il_builtin_vocab(const il_model *m, il_vocab **out) { return il__builtin_vocab(m->hp.n_vocab, m->hp.arch, out); }

il_status il_vocab_open(const char *spec, const char *force_pre, il_vocab **out) {
  *out = NULL;
  if (il_builtin_is(spec)) {
    const il__builtin_spec *sp = il__spec_of(spec + 8);
    if (!sp) return il_error(IL_ERR_NOT_FOUND, "%s: unknown built-in model (known: %s)", spec, il_builtin_names());
    return il__builtin_vocab(sp->n_vocab, sp->arch, out);
  }
  il_gguf *g = NULL;
  IL_TRY(il_gguf_open(spec, &g));
  il_vocab_opts o = {force_pre};
  il_status st = il_vocab_from_gguf_opts(g, &o, out);
  il_gguf_close(g);
  return st == IL_OK ? st : il_error_wrap(st, "%s: ", spec);
}

il_status il_builtin_write_metadata(const il_model *m, il_gguf_writer *w, il_dtype file_type) {
  const il_hparams *hp = &m->hp;
  char key[128];
#define IL__K(suffix) (snprintf(key, sizeof key, "%s.%s", hp->arch, suffix), key)
  IL_TRY(il_gguf_writer_set_str(w, "general.architecture", hp->arch));
  IL_TRY(il_gguf_writer_set_str(w, "general.name", m->name));
  IL_TRY(il_gguf_writer_set_u32(w, "general.file_type", il_dtype_file_type(file_type)));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("context_length"), (uint32_t)hp->n_ctx_train));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("embedding_length"), (uint32_t)hp->n_embd));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("feed_forward_length"), (uint32_t)hp->n_ff));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("block_count"), (uint32_t)hp->n_layer));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("attention.head_count"), (uint32_t)hp->n_head));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("attention.head_count_kv"), (uint32_t)hp->n_head_kv));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("rope.dimension_count"), (uint32_t)hp->n_rot));
  IL_TRY(il_gguf_writer_set_f32(w, IL__K("rope.freq_base"), hp->rope_base));
  if (strcmp(hp->arch, "llama")) { /* llama's files stay as they were; the others say their head size */
    IL_TRY(il_gguf_writer_set_u32(w, IL__K("attention.key_length"), (uint32_t)hp->head_dim));
    IL_TRY(il_gguf_writer_set_u32(w, IL__K("attention.value_length"), (uint32_t)hp->head_dim));
  }
  if (hp->swa > 0) IL_TRY(il_gguf_writer_set_u32(w, IL__K("attention.sliding_window"), (uint32_t)hp->swa));
  IL_TRY(il_gguf_writer_set_f32(w, IL__K("attention.layer_norm_rms_epsilon"), hp->norm_eps));
  IL_TRY(il_gguf_writer_set_u32(w, IL__K("vocab_size"), (uint32_t)hp->n_vocab));
  if (hp->n_expert) { /* the keys llama.cpp reads for a mixtral-style llama */
    IL_TRY(il_gguf_writer_set_u32(w, IL__K("expert_count"), (uint32_t)hp->n_expert));
    IL_TRY(il_gguf_writer_set_u32(w, IL__K("expert_used_count"), (uint32_t)hp->n_expert_used));
    if (strcmp(hp->arch, "llama")) /* qwen3moe's default is feed_forward_length / expert_used_count */
      IL_TRY(il_gguf_writer_set_u32(w, IL__K("expert_feed_forward_length"), (uint32_t)hp->n_ff_exp));
  }
#undef IL__K
  il__vocab_arrays v;
  IL_TRY(il__vocab_build(hp->n_vocab, hp->arch, &v));
  const char **ptrs = il_mem_alloc(IL_MEM_TOKENIZER, sizeof(char *) * (size_t)v.n, "builtin vocab");
  il_status st = ptrs ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) {
    for (int32_t i = 0; i < v.n; i++) ptrs[i] = v.text[i];
    st = il_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
  }
  if (st == IL_OK) st = il_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, v.lens, (uint64_t)v.n);
  if (st == IL_OK) st = il_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IL_GGUF_F32, v.scores, (uint64_t)v.n);
  if (st == IL_OK) st = il_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IL_GGUF_I32, v.types, (uint64_t)v.n);
  if (st == IL_OK) st = il_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
  if (st == IL_OK) st = il_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
  if (st == IL_OK) st = il_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
  if (st == IL_OK) st = il_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
  if (st == IL_OK) st = il_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
  il_mem_free(ptrs);
  il__vocab_free(&v);
  return st;
}
