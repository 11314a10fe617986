/* tests/test_llama2c: llama2.c checkpoint import.
 *
 * A small synthetic model (random weights from a fixed seed) is written in the version 0, 1
 * and 2 layouts and converted; every tensor of the GGUF is compared with the weights it came
 * from, so the layout mapping is checked independently of the converter. Malformed
 * checkpoints and tokenizers must fail with clear details and leave no output behind. When
 * ../shared/fixtures is present, stories260K.bin + tok512.bin are converted and compared with
 * llama.cpp's own conversion (stories260K-f32.gguf): same tensor names, shapes and identical
 * f32 data, same tokens, scores and token types.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/quant.h"
#include "format/gguf.h"
#include "format/llama2c.h"
#include "harness.h"
#include "memory/mem.h"

/* ---- synthetic model ---- */

enum { D = 32, H = 48, L = 2, NH = 4, NKV = 2, V = 16, S = 8, KV = D / NH * NKV, HS = D / NH, GS = 16 };

typedef struct {
  float tok[V * D], cls[V * D], rms_final[D];
  float rms_att[L * D], rms_ffn[L * D];
  float wq[L * D * D], wk[L * KV * D], wv[L * KV * D], wo[L * D * D];
  float w1[L * H * D], w2[L * D * H], w3[L * H * D];
  float freq[S * HS]; /* real then imag halves, skipped by the importer */
} model;

static void fill(float *x, size_t n, uint64_t *rng) {
  for (size_t i = 0; i < n; i++) x[i] = il_test_randf(rng);
}

static void make_model(model *m, uint64_t seed) {
  uint64_t rng = seed;
  fill(m->tok, V * D, &rng), fill(m->cls, V * D, &rng), fill(m->rms_final, D, &rng);
  fill(m->rms_att, L * D, &rng), fill(m->rms_ffn, L * D, &rng);
  fill(m->wq, L * D * D, &rng), fill(m->wk, L * KV * D, &rng), fill(m->wv, L * KV * D, &rng);
  fill(m->wo, L * D * D, &rng), fill(m->w1, L * H * D, &rng), fill(m->w2, L * D * H, &rng);
  fill(m->w3, L * H * D, &rng), fill(m->freq, S * HS, &rng);
}

typedef struct {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void put_i32(buf *b, int32_t v) { put(b, &v, 4); }

static void put_params(buf *b, int32_t vocab) {
  int32_t p[7] = {D, H, L, NH, NKV, vocab, S};
  put(b, p, sizeof p);
}

static void write_file(const char *path, const buf *b) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b->p, 1, b->n, f) != b->n) abort();
  fclose(f);
}

/* Legacy layout; `separate` appends wcls and stores -vocab. */
static void write_v0(buf *b, const model *m, int separate) {
  b->n = 0;
  put_params(b, separate ? -V : V);
  put(b, m->tok, sizeof m->tok), put(b, m->rms_att, sizeof m->rms_att);
  put(b, m->wq, sizeof m->wq), put(b, m->wk, sizeof m->wk), put(b, m->wv, sizeof m->wv), put(b, m->wo, sizeof m->wo);
  put(b, m->rms_ffn, sizeof m->rms_ffn), put(b, m->w1, sizeof m->w1), put(b, m->w2, sizeof m->w2);
  put(b, m->w3, sizeof m->w3), put(b, m->rms_final, sizeof m->rms_final), put(b, m->freq, sizeof m->freq);
  if (separate) put(b, m->cls, sizeof m->cls);
}

static void put_header_v12(buf *b, int version, int shared, int32_t gs) {
  b->n = 0;
  put_i32(b, 0x616b3432);
  put_i32(b, version);
  put_params(b, V);
  uint8_t flag = (uint8_t)shared;
  put(b, &flag, 1);
  if (version == 2) put_i32(b, gs);
  uint8_t zero[256] = {0};
  put(b, zero, 256 - b->n);
}

static void write_v1(buf *b, const model *m, int shared) {
  put_header_v12(b, 1, shared, 0);
  put(b, m->rms_att, sizeof m->rms_att), put(b, m->rms_ffn, sizeof m->rms_ffn), put(b, m->rms_final, sizeof m->rms_final);
  put(b, m->tok, sizeof m->tok);
  put(b, m->wq, sizeof m->wq), put(b, m->wk, sizeof m->wk), put(b, m->wv, sizeof m->wv), put(b, m->wo, sizeof m->wo);
  put(b, m->w1, sizeof m->w1), put(b, m->w2, sizeof m->w2), put(b, m->w3, sizeof m->w3);
  if (!shared) put(b, m->cls, sizeof m->cls);
}

/* Quantizes x (n values, groups of GS) like export.py's quantize_q80 and replaces x by its
 * dequantized value, so the model then holds exactly what the importer must produce. */
static void put_q80(buf *b, float *x, size_t n) {
  int8_t *q = malloc(n);
  float *s = malloc(n / GS * sizeof(float));
  for (size_t g = 0; g < n / GS; g++) {
    float mx = 0;
    for (size_t j = 0; j < GS; j++) mx = fmaxf(mx, fabsf(x[g * GS + j]));
    s[g] = mx / 127.0f;
    for (size_t j = 0; j < GS; j++) {
      q[g * GS + j] = (int8_t)lroundf(s[g] ? x[g * GS + j] / s[g] : 0.0f);
      x[g * GS + j] = (float)q[g * GS + j] * s[g];
    }
  }
  put(b, q, n);
  put(b, s, n / GS * sizeof(float));
  free(q);
  free(s);
}

static void write_v2(buf *b, model *m, int shared) {
  put_header_v12(b, 2, shared, GS);
  put(b, m->rms_att, sizeof m->rms_att), put(b, m->rms_ffn, sizeof m->rms_ffn), put(b, m->rms_final, sizeof m->rms_final);
  put_q80(b, m->tok, V * D);
  for (int l = 0; l < L; l++) put_q80(b, m->wq + l * D * D, D * D);
  for (int l = 0; l < L; l++) put_q80(b, m->wk + l * KV * D, KV * D);
  for (int l = 0; l < L; l++) put_q80(b, m->wv + l * KV * D, KV * D);
  for (int l = 0; l < L; l++) put_q80(b, m->wo + l * D * D, D * D);
  for (int l = 0; l < L; l++) put_q80(b, m->w1 + l * H * D, H * D);
  for (int l = 0; l < L; l++) put_q80(b, m->w2 + l * D * H, D * H);
  for (int l = 0; l < L; l++) put_q80(b, m->w3 + l * H * D, H * D);
  if (!shared) put_q80(b, m->cls, V * D);
  if (shared) memcpy(m->cls, m->tok, sizeof m->tok);
}

static const char *tok_pieces[V] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x00>", "<0x41>", "", " the", "a b",
                                    "<0x4G>", "<0x41>x", "x", "y", "z", "  ", "\xc3\xa9", "end"};

static void write_tokenizer(const char *path, int n_tokens, int extra_bytes, int bad_len_at) {
  buf b = {0};
  put_i32(&b, 16);
  for (int i = 0; i < n_tokens; i++) {
    float score = -(float)i * 0.5f;
    int32_t len = (int32_t)strlen(tok_pieces[i % V]);
    put(&b, &score, 4);
    put_i32(&b, i == bad_len_at ? -3 : len);
    put(&b, tok_pieces[i % V], (size_t)len);
  }
  for (int i = 0; i < extra_bytes; i++) put(&b, "\0", 1);
  write_file(path, &b);
  free(b.p);
}

/* ---- checks ---- */

/* Compares tensor `name` (f32) with x; prints the first mismatch. */
static void check_f32(const il_gguf *g, const char *name, int64_t ne0, int64_t ne1, const float *x) {
  const il_gguf_tensor *t = il_gguf_find_tensor(g, name);
  if (!t) {
    il_test_failed++;
    fprintf(stderr, "FAILED: tensor %s missing\n", name);
    return;
  }
  int64_t n = ne0 * (ne1 ? ne1 : 1);
  if (t->type != IL_DTYPE_F32 || t->ne[0] != ne0 || t->ne[1] != (ne1 ? ne1 : 1) || t->n_dims != (ne1 ? 2u : 1u)) {
    il_test_failed++;
    fprintf(stderr, "FAILED: %s: type %s ne {%lld, %lld} n_dims %u, want f32 {%lld, %lld}\n", name,
            il_dtype_name(t->type), (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)ne0,
            (long long)ne1);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float got;
    memcpy(&got, (const uint8_t *)t->data + 4 * i, 4);
    if (got != x[i]) {
      il_test_failed++;
      fprintf(stderr, "FAILED: %s[%lld] = %.9g, want %.9g\n", name, (long long)i, got, x[i]);
      return;
    }
  }
  il_test_passed++;
}

static void check_model(const il_gguf *g, const model *m, int separate) {
  char name[64];
  check_f32(g, "token_embd.weight", D, V, m->tok);
  check_f32(g, "output_norm.weight", D, 0, m->rms_final);
  if (separate) check_f32(g, "output.weight", D, V, m->cls);
  else IL_CHECK(il_gguf_find_tensor(g, "output.weight") == NULL);
  IL_CHECK_INT(il_gguf_tensor_count(g), 2 + (separate ? 1 : 0) + 9 * L);
  for (int l = 0; l < L; l++) {
#define CHK(sfx, ne0, ne1, arr)                                       \
  snprintf(name, sizeof name, "blk.%d." sfx ".weight", l);            \
  check_f32(g, name, ne0, ne1, (arr) + (size_t)l * (ne0) * ((ne1) ? (ne1) : 1))
    CHK("attn_norm", D, 0, m->rms_att);
    CHK("ffn_norm", D, 0, m->rms_ffn);
    CHK("attn_q", D, D, m->wq);
    CHK("attn_k", D, KV, m->wk);
    CHK("attn_v", D, KV, m->wv);
    CHK("attn_output", D, D, m->wo);
    CHK("ffn_gate", D, H, m->w1);
    CHK("ffn_down", H, D, m->w2);
    CHK("ffn_up", D, H, m->w3);
#undef CHK
  }
}

static void check_meta(const il_gguf *g, const char *name, bool with_tokenizer) {
  uint32_t u = 0;
  float f = 0;
  il_gguf_str s = {0};
  IL_CHECK_OK(il_gguf_get_str(g, "general.architecture", &s));
  IL_CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
  IL_CHECK_OK(il_gguf_get_str(g, "general.name", &s));
  IL_CHECK(s.len == strlen(name) && memcmp(s.ptr, name, s.len) == 0);
  struct {
    const char *key;
    uint32_t want;
  } keys[] = {{"llama.context_length", S},          {"llama.embedding_length", D},
              {"llama.feed_forward_length", H},     {"llama.block_count", L},
              {"llama.attention.head_count", NH},   {"llama.attention.head_count_kv", NKV},
              {"llama.rope.dimension_count", HS},   {"tokenizer.ggml.bos_token_id", 1},
              {"tokenizer.ggml.eos_token_id", 2},   {"tokenizer.ggml.unknown_token_id", 0}};
  size_t n_keys = sizeof keys / sizeof keys[0] - (with_tokenizer ? 0 : 3);
  IL_CHECK((il_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) == with_tokenizer);
  IL_CHECK((il_gguf_find_key(g, "tokenizer.ggml.bos_token_id") >= 0) == with_tokenizer);
  for (size_t i = 0; i < n_keys; i++) {
    u = 12345;
    IL_CHECK_OK(il_gguf_get_u32(g, keys[i].key, &u));
    if (u != keys[i].want) fprintf(stderr, "  key %s\n", keys[i].key);
    IL_CHECK_INT(u, keys[i].want);
  }
  IL_CHECK_OK(il_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
  IL_CHECK_NEAR(f, 1e-5, 1e-12);
  IL_CHECK_OK(il_gguf_get_f32(g, "llama.rope.freq_base", &f));
  IL_CHECK_NEAR(f, 10000, 0);
}

static void check_tokens(const il_gguf *g) {
  static const char *want[V] = {"<unk>", "<s>", "</s>", "<0x00>", "<0x41>", "", "\xe2\x96\x81the", ("a\xe2\x96\x81" "b"),
                                "<0x4G>", "<0x41>x", "x", "y", "z", "\xe2\x96\x81\xe2\x96\x81", "\xc3\xa9", "end"};
  static const int32_t types[V] = {2, 3, 3, 6, 6, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  il_gguf_type et;
  uint64_t n = 0;
  const void *data = NULL;
  IL_CHECK_OK(il_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data));
  IL_CHECK_INT(n, V);
  for (int i = 0; i < V && data && n == V; i++) {
    il_gguf_str s = {0};
    IL_CHECK_OK(il_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &s));
    if (s.len != strlen(want[i]) || memcmp(s.ptr, want[i], s.len) != 0) {
      il_test_failed++;
      fprintf(stderr, "FAILED: token %d is \"%.*s\", want \"%s\"\n", i, (int)s.len, s.ptr, want[i]);
    }
    int32_t ty;
    memcpy(&ty, (const uint8_t *)data + 4 * i, 4);
    if (ty != types[i]) fprintf(stderr, "  token %d\n", i);
    IL_CHECK_INT(ty, types[i]);
  }
  IL_CHECK_OK(il_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data));
  IL_CHECK_INT(et, IL_GGUF_F32);
  if (data && n == V) {
    float sc;
    memcpy(&sc, (const uint8_t *)data + 4 * 7, 4);
    IL_CHECK_NEAR(sc, -3.5, 0);
  }
}

static void convert_and_check(const char *dir, const char *ckpt, const char *tok, const model *m, int separate,
                              const char *name) {
  char out[600];
  snprintf(out, sizeof out, "%s/out.gguf", dir);
  il_llama2c_stats st;
  IL_CHECK_OK(il_llama2c_convert_ex(ckpt, tok, IL_DTYPE_F32, out, NULL, &st));
  IL_CHECK_INT(st.n_tensors, 2 + separate + 9 * L);
  IL_CHECK_INT(st.n_kept, 0);
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(out, &g));
  if (!g) return;
  check_model(g, m, separate);
  check_meta(g, name, tok != NULL);
  if (tok) check_tokens(g);
  il_gguf_close(g);
  remove(out);
}

static void test_layouts(const char *dir) {
  model *m = malloc(sizeof *m);
  buf b = {0};
  char ckpt[600], tok[600];
  snprintf(tok, sizeof tok, "%s/tok.bin", dir);
  write_tokenizer(tok, V, 0, -1);
  il_llama2c_config cfg;
  for (int separate = 0; separate < 2; separate++) {
    make_model(m, 7 + (uint64_t)separate);
    snprintf(ckpt, sizeof ckpt, "%s/m%d.bin", dir, separate);
    write_v0(&b, m, separate);
    write_file(ckpt, &b);
    IL_CHECK_OK(il_llama2c_read_config(ckpt, &cfg));
    IL_CHECK_INT(cfg.version, 0);
    IL_CHECK_INT(cfg.vocab_size, V);
    IL_CHECK_INT(cfg.shared_classifier, !separate);
    IL_CHECK_INT(cfg.file_size, b.n);
    convert_and_check(dir, ckpt, tok, m, separate, separate ? "m1" : "m0");

    write_v1(&b, m, !separate);
    snprintf(ckpt, sizeof ckpt, "%s/v1.model.bin", dir);
    write_file(ckpt, &b);
    IL_CHECK_OK(il_llama2c_read_config(ckpt, &cfg));
    IL_CHECK_INT(cfg.version, 1);
    IL_CHECK_INT(cfg.data_offset, 256);
    convert_and_check(dir, ckpt, NULL, m, separate, "v1.model");

    write_v2(&b, m, !separate);
    snprintf(ckpt, sizeof ckpt, "%s/v2", dir);
    write_file(ckpt, &b);
    IL_CHECK_OK(il_llama2c_read_config(ckpt, &cfg));
    IL_CHECK_INT(cfg.version, 2);
    IL_CHECK_INT(cfg.group_size, GS);
    convert_and_check(dir, ckpt, tok, m, separate, "v2");
  }
  free(b.p);
  free(m);
}

/* Other output types: 2-D weights converted (or kept with a note), norms f32, values close. */
static void test_types(const char *dir) {
  model *m = malloc(sizeof *m);
  make_model(m, 99);
  buf b = {0};
  char ckpt[600], out[600];
  snprintf(ckpt, sizeof ckpt, "%s/m.bin", dir);
  snprintf(out, sizeof out, "%s/t.gguf", dir);
  write_v0(&b, m, 0);
  write_file(ckpt, &b);
  const il_dtype types[5] = {IL_DTYPE_F16, IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1};
  const double tol[5] = {1e-3, 8e-3, 0.02, 0.3, 0.15};
  for (int k = 0; k < 5; k++) {
    char *notes_text = NULL;
    size_t notes_len = 0;
    FILE *notes = open_memstream(&notes_text, &notes_len);
    il_llama2c_stats st;
    IL_CHECK_OK(il_llama2c_convert_ex(ckpt, NULL, types[k], out, notes, &st));
    fclose(notes);
    bool block = il_dtype_get(types[k])->blck > 1;
    /* norms: 1 + 2L; ffn_down rows are H = 48 long, not a multiple of 32 */
    IL_CHECK_INT(st.n_kept, 1 + 2 * L + (block ? L : 0));
    IL_CHECK_INT(st.n_converted, st.n_tensors - st.n_kept);
    if (block) {
      IL_CHECK(notes_text && strstr(notes_text, "note: blk.1.ffn_down.weight (ne = {48, 32}) kept in f32: row length 48 "
                                                "is not a multiple of the"));
    } else {
      IL_CHECK(notes_len == 0);
    }
    free(notes_text);
    il_gguf *g = NULL;
    IL_CHECK_OK(il_gguf_open(out, &g));
    if (!g) continue;
    uint32_t ft = 99;
    IL_CHECK_OK(il_gguf_get_u32(g, "general.file_type", &ft));
    const uint32_t ftypes[5] = {1, 32, 7, 2, 3};
    IL_CHECK_INT(ft, ftypes[k]);
    IL_CHECK_INT(il_gguf_find_tensor(g, "blk.0.attn_norm.weight")->type, IL_DTYPE_F32);
    IL_CHECK_INT(il_gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, block ? IL_DTYPE_F32 : types[k]);
    const il_gguf_tensor *t = il_gguf_find_tensor(g, "blk.1.attn_q.weight");
    IL_CHECK_INT(t->type, types[k]);
    float row[D];
    double maxerr = 0;
    for (int r = 0; r < D; r++) {
      IL_CHECK_OK(il_dequantize_row(t->type, (const uint8_t *)t->data + r * il_dtype_row_size(t->type, D), row, D));
      for (int j = 0; j < D; j++) maxerr = fmax(maxerr, fabs(row[j] - m->wq[D * D + r * D + j]));
    }
    if (maxerr > tol[k]) fprintf(stderr, "  type %s\n", il_dtype_name(types[k]));
    IL_CHECK(maxerr <= tol[k]);
    printf("%s: attn_q max abs error %.5f (weights in [-1, 1))\n", il_dtype_name(types[k]), maxerr);
    il_gguf_close(g);
  }
  remove(out);
  free(b.p);
  free(m);
}

/* ---- malformed inputs ---- */

static void expect_fail_at(int line, const char *ckpt, const char *tok, il_dtype t, const char *out, il_status want,
                           const char *sub) {
  il_status st = il_llama2c_convert_ex(ckpt, tok, t, out, NULL, NULL);
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  if (st == want && strstr(il_error_detail(), sub) && access(out, F_OK) != 0 && access(tmp, F_OK) != 0) {
    il_test_passed++;
  } else {
    il_test_failed++;
    fprintf(stderr, "test_llama2c.c:%d: FAILED: want %s containing \"%s\", got %s: \"%s\"%s\n", line,
            il_status_name(want), sub, il_status_name(st), il_error_detail(),
            access(out, F_OK) == 0 ? " (and an output file exists)" : "");
  }
}
#define EXPECT_FAIL(ckpt, tok, t, want, sub) expect_fail_at(__LINE__, ckpt, tok, t, out, want, sub)

static void test_malformed(const char *dir) {
  model *m = malloc(sizeof *m);
  make_model(m, 3);
  buf b = {0};
  char ckpt[600], tok[600], out[600];
  snprintf(ckpt, sizeof ckpt, "%s/bad.bin", dir);
  snprintf(tok, sizeof tok, "%s/tok.bin", dir);
  snprintf(out, sizeof out, "%s/never.gguf", dir);
  write_tokenizer(tok, V, 0, -1);
  write_v0(&b, m, 0);
  size_t full = b.n;
  char sub[300];

  b.n = full - 1;
  write_file(ckpt, &b);
  snprintf(sub, sizeof sub, "bad.bin: file is %zu bytes but its version 0 header (dim=32 hidden_dim=48 n_layers=2 "
                            "n_heads=4 n_kv_heads=2 vocab_size=16 seq_len=8, shared classifier) implies %zu bytes",
           full - 1, full);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, sub);
  b.n = full;
  put(&b, "x", 1);
  write_file(ckpt, &b);
  snprintf(sub, sizeof sub, "file is %zu bytes but", full + 1);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, sub);
  b.n = 20;
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "bad.bin: file is 20 bytes, too small for the 28-byte llama2.c header");
  b.n = 0;
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "file is 0 bytes");

  /* header fields, patched into an otherwise complete file */
  struct {
    int field;
    int32_t value;
    const char *sub;
  } cases[] = {
      {0, 0, "offset 0: header field dim = 0 must be positive"},
      {2, -2, "offset 8: header field n_layers = -2 must be positive"},
      {5, 0, "header field vocab_size = 0 must be positive"},
      {5, INT32_MIN, "header field vocab_size = -2147483648 must be positive"},
      {6, -1, "header field seq_len = -1 must be positive"},
      {3, 7, "n_heads = 7 does not divide dim = 32"},
      {4, 3, "n_kv_heads = 3 must divide n_heads = 4"},
      {4, 8, "n_kv_heads = 8 must divide n_heads = 4"},
      {3, 32, "head size dim / n_heads = 1 is odd"},
      {2, 1 << 30, "implausible model size (1073741824 layers"},
      {1, INT32_MAX, "implausible model size"},
      {2, 4097, "implausible model size (4097 layers"},
      {1, 1 << 20, "implies"}, /* within the limits: the size check still applies */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_v0(&b, m, 0);
    memcpy(b.p + 4 * cases[i].field, &cases[i].value, 4);
    write_file(ckpt, &b);
    expect_fail_at(__LINE__ * 1000 + (int)i, ckpt, tok, IL_DTYPE_F32, out, IL_ERR_FORMAT, cases[i].sub);
  }
  /* "ak42" headers */
  put_header_v12(&b, 3, 1, 0);
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_UNSUPPORTED, "llama2.c export version 3 is not supported");
  put_header_v12(&b, 1, 1, 0);
  b.n = 100;
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "file is 100 bytes, too small for the 256-byte version 1 header");
  write_v2(&b, m, 1);
  int32_t gs0 = 0, gs7 = 7;
  memcpy(b.p + 37, &gs0, 4);
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "offset 37: group_size = 0 must be positive");
  memcpy(b.p + 37, &gs7, 4);
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "group_size = 7 does not divide");
  write_v1(&b, m, 1);
  b.p[36] = 5;
  write_file(ckpt, &b);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "offset 36: shared_classifier flag is 5");

  /* tokenizer problems, with a valid checkpoint */
  write_v0(&b, m, 0);
  write_file(ckpt, &b);
  write_tokenizer(tok, V - 1, 0, -1);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "tok.bin: offset 179: token 15: truncated: the checkpoint's vocab_size is 16");
  write_tokenizer(tok, V, 3, -1);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "3 bytes left after the 16 tokens");
  write_tokenizer(tok, V, 0, 4);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_F32, IL_ERR_FORMAT, "token 4: length -3 does not fit");
  char missing[700];
  snprintf(missing, sizeof missing, "%s/missing.bin", dir);
  EXPECT_FAIL(missing, NULL, IL_DTYPE_F32, IL_ERR_NOT_FOUND, "missing.bin: cannot open: No such file or directory");
  IL_CHECK_INT(il_llama2c_convert(missing, NULL, IL_DTYPE_F32, out), IL_ERR_NOT_FOUND); /* the short form */
  write_tokenizer(tok, V, 0, -1);
  EXPECT_FAIL(ckpt, tok, IL_DTYPE_Q4_K, IL_ERR_UNSUPPORTED, "output type q4_K is not supported");
  char badout[700];
  snprintf(badout, sizeof badout, "%s/no/dir/x.gguf", dir);
  {
    il_status st = il_llama2c_convert_ex(ckpt, tok, IL_DTYPE_F32, badout, NULL, NULL);
    IL_CHECK_INT(st, IL_ERR_OUTPUT);
    IL_CHECK_CONTAINS(il_error_detail(), "x.gguf: cannot create");
  }
  /* every allocation can fail: IL_ERR_OOM, nothing leaked, no output left behind */
  {
    il_mem_stats before, after;
    il_mem_stats_get(&before);
    int n_fail = 0;
    for (long k = 1; k < 200; k++) {
      il_mem_fail_after(k);
      il_status st = il_llama2c_convert_ex(ckpt, tok, IL_DTYPE_Q8_0, out, NULL, NULL);
      il_mem_fail_after(0);
      if (st == IL_OK) break;
      n_fail++;
      if (st != IL_ERR_OOM) fprintf(stderr, "  fail_after %ld: %s\n", k, il_error_detail());
      IL_CHECK_INT(st, IL_ERR_OOM);
      IL_CHECK(access(out, F_OK) != 0);
    }
    IL_CHECK(n_fail > 10);
    il_mem_stats_get(&after);
    IL_CHECK_INT(after.current[IL_MEM_MODEL] + after.current[IL_MEM_TOKENIZER] + after.current[IL_MEM_OTHER],
                 before.current[IL_MEM_MODEL] + before.current[IL_MEM_TOKENIZER] + before.current[IL_MEM_OTHER]);
    remove(out);
  }
  /* nothing leaked */
  il_mem_stats ms;
  il_mem_stats_get(&ms);
  IL_CHECK_INT(ms.current[IL_MEM_STAGING], 0);
  free(b.p);
  free(m);
  remove(ckpt);
  remove(tok);
}

/* ---- the real model, against llama.cpp's conversion ---- */

static void test_stories(const char *dir) {
  char bin[4096], tok[4096], ref[4096], out[600];
  const char *p = il_test_fixture("models/stories260K.bin");
  if (!p) {
    printf("SKIP (part): models/stories260K.bin not found under $IL_FIXTURES\n");
    return;
  }
  snprintf(bin, sizeof bin, "%s", p);
  p = il_test_fixture("models/tok512.bin");
  if (!p) return;
  snprintf(tok, sizeof tok, "%s", p);
  p = il_test_fixture("models/stories260K-f32.gguf");
  if (!p) return;
  snprintf(ref, sizeof ref, "%s", p);
  snprintf(out, sizeof out, "%s/stories260K.gguf", dir);

  il_llama2c_config cfg;
  IL_CHECK_OK(il_llama2c_read_config(bin, &cfg));
  IL_CHECK_INT(cfg.version, 0);
  IL_CHECK_INT(cfg.dim, 64);
  IL_CHECK_INT(cfg.hidden_dim, 172);
  IL_CHECK_INT(cfg.n_layers, 5);
  IL_CHECK_INT(cfg.n_heads, 8);
  IL_CHECK_INT(cfg.n_kv_heads, 4);
  IL_CHECK_INT(cfg.vocab_size, 512);
  IL_CHECK_INT(cfg.seq_len, 512);
  IL_CHECK(cfg.shared_classifier);
  IL_CHECK_INT(cfg.file_size, 1056540);

  il_llama2c_stats st;
  IL_CHECK_OK(il_llama2c_convert_ex(bin, tok, IL_DTYPE_F32, out, NULL, &st));
  IL_CHECK_INT(st.n_tensors, 47);
  il_gguf *a = NULL, *r = NULL;
  IL_CHECK_OK(il_gguf_open(out, &a));
  IL_CHECK_OK(il_gguf_open(ref, &r));
  if (!a || !r) {
    il_gguf_close(a);
    il_gguf_close(r);
    return;
  }
  /* every tensor of ours exists in llama.cpp's file with the same shape and identical bytes */
  int same = 0;
  for (int64_t i = 0; i < il_gguf_tensor_count(a); i++) {
    const il_gguf_tensor *t = il_gguf_tensor_at(a, i), *u = il_gguf_find_tensor(r, t->name);
    if (!u) {
      il_test_failed++;
      fprintf(stderr, "FAILED: %s not in the llama.cpp conversion\n", t->name);
      continue;
    }
    bool ok = t->type == u->type && t->n_dims == u->n_dims && t->nbytes == u->nbytes &&
              memcmp(t->ne, u->ne, sizeof t->ne) == 0 && memcmp(t->data, u->data, t->nbytes) == 0;
    if (!ok)
      fprintf(stderr, "FAILED: %s differs: ne {%lld,%lld} vs {%lld,%lld}\n", t->name, (long long)t->ne[0],
              (long long)t->ne[1], (long long)u->ne[0], (long long)u->ne[1]);
    IL_CHECK(ok);
    same += ok;
  }
  /* llama.cpp writes the shared classifier out as output.weight; it is our token_embd */
  IL_CHECK_INT(il_gguf_tensor_count(r), 48);
  const il_gguf_tensor *outw = il_gguf_find_tensor(r, "output.weight"), *emb = il_gguf_find_tensor(a, "token_embd.weight");
  IL_CHECK(outw && emb && outw->nbytes == emb->nbytes && memcmp(outw->data, emb->data, emb->nbytes) == 0);
  IL_CHECK(il_gguf_find_tensor(a, "output.weight") == NULL);
  printf("stories260K: %d of %lld tensors identical to llama.cpp's conversion (+ its output.weight == token_embd)\n",
         same, (long long)il_gguf_tensor_count(a));

  /* tokens, scores and types identical */
  il_gguf_type et;
  uint64_t n1 = 0, n2 = 0;
  const void *d1, *d2;
  int tok_diff = 0;
  for (uint64_t i = 0; i < 512; i++) {
    il_gguf_str s1 = {0}, s2 = {0};
    il_gguf_arr_str(a, "tokenizer.ggml.tokens", i, &s1);
    il_gguf_arr_str(r, "tokenizer.ggml.tokens", i, &s2);
    if (s1.len != s2.len || memcmp(s1.ptr, s2.ptr, s1.len) != 0) {
      if (!tok_diff++) fprintf(stderr, "FAILED: token %llu: \"%.*s\" vs \"%.*s\"\n", (unsigned long long)i, (int)s1.len,
                               s1.ptr, (int)s2.len, s2.ptr);
    }
  }
  IL_CHECK_INT(tok_diff, 0);
  IL_CHECK_OK(il_gguf_get_arr(a, "tokenizer.ggml.scores", &et, &n1, &d1));
  IL_CHECK_OK(il_gguf_get_arr(r, "tokenizer.ggml.scores", &et, &n2, &d2));
  IL_CHECK(n1 == 512 && n2 == 512 && memcmp(d1, d2, 512 * 4) == 0);
  IL_CHECK_OK(il_gguf_get_arr(a, "tokenizer.ggml.token_type", &et, &n1, &d1));
  IL_CHECK_OK(il_gguf_get_arr(r, "tokenizer.ggml.token_type", &et, &n2, &d2));
  IL_CHECK(n1 == 512 && n2 == 512 && memcmp(d1, d2, 512 * 4) == 0);
  /* hyperparameters agree (context length: llama.cpp's converter wrote 128, the model has 512) */
  const char *keys[] = {"llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
                        "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.dimension_count",
                        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    uint32_t x = 0, y = 1;
    il_gguf_get_u32(a, keys[k], &x);
    il_gguf_get_u32(r, keys[k], &y);
    if (x != y) fprintf(stderr, "  %s\n", keys[k]);
    IL_CHECK_INT(x, y);
  }
  uint32_t ctx = 0;
  IL_CHECK_OK(il_gguf_get_u32(a, "llama.context_length", &ctx));
  IL_CHECK_INT(ctx, 512);
  il_gguf_close(a);
  il_gguf_close(r);

  /* q8_0: ffn_down (row length 172) stays f32 with a note per layer */
  char *notes_text = NULL;
  size_t notes_len = 0;
  FILE *notes = open_memstream(&notes_text, &notes_len);
  IL_CHECK_OK(il_llama2c_convert_ex(bin, tok, IL_DTYPE_Q8_0, out, notes, &st));
  fclose(notes);
  IL_CHECK_INT(st.n_kept, 11 + 5);
  IL_CHECK(notes_text && strstr(notes_text, "note: blk.4.ffn_down.weight (ne = {172, 64}) kept in f32: row length 172 "
                                            "is not a multiple of the q8_0 block size 32"));
  printf("q8_0 notes:\n%s", notes_text ? notes_text : "");
  free(notes_text);
  IL_CHECK_OK(il_gguf_open(out, &a));
  if (a) {
    IL_CHECK_INT(il_gguf_find_tensor(a, "blk.0.ffn_gate.weight")->type, IL_DTYPE_Q8_0);
    IL_CHECK_INT(il_gguf_find_tensor(a, "blk.0.ffn_down.weight")->type, IL_DTYPE_F32);
    il_gguf_close(a);
  }
  remove(out);
}

int main(void) {
  const char *dir = il_test_tmpdir();
  if (!dir) IL_SKIP("cannot create a temporary directory");
  char d[256];
  snprintf(d, sizeof d, "%s", dir);
  test_layouts(d);
  test_types(d);
  test_malformed(d);
  test_stories(d);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", d);
  return il_test_finish();
}
