/* tests/test_quant_mix: the per-tensor type mix names the type llama-quantize picks.
 *
 * Llama-shaped tensor lists of 2, 16 and 32 layers (dim 2048, FFN 8192, GQA 32/8, separate
 * output head, like builtin:1b) go through il_quant_choose for every file type. The expected
 * types are written out from reading llama.cpp's src/llama-quant.cpp (llama_tensor_get_type_impl
 * and tensor_type_fallback, ggml 0.25.3), rule by rule, not computed with the same formula:
 *   - output.weight: Q6_K for every quantized file type except Q8_0 (stays Q8_0);
 *   - token_embd.weight: the base type (Q6_K instead when the output head is tied);
 *   - attn_v and ffn_down of layer i: Q6_K in Q4_K_M and Q5_K_M for the "more bits" layers
 *     listed below (use_more_bits: the first n/8, the last n/8, every third in between);
 *     Q4_K_S: attn_v of the first 4 layers and ffn_down of the first n/8 layers are Q5_K;
 *   - norms (1-D) stay F32; float file types put every 2-D weight in that type.
 *   - iq4_nl: attn_v Q5_K when n_head / n_head_kv >= 4, ffn_down Q5_K in the first n/8 layers;
 *     q5_0 / q5_1: only the output rule.
 * Plus: visit order (blk.10 after blk.9), --pure, --keep, and the fallbacks for row lengths
 * that are not a multiple of 256 (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; the IQ4_NL mix's
 * Q5_K -> Q5_1) or of 32 (F16).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model/quantize.h"

typedef struct {
  int n;
  char names[600][48];
  const char *ptr[600];
  uint32_t n_dims[600];
  int64_t ne[600][4];
  il_dtype types[600];
  il_quant_choice ch[600];
} model_list;

static void add(model_list *m, const char *name, int64_t ne0, int64_t ne1) {
  snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
  m->ptr[m->n] = m->names[m->n];
  m->n_dims[m->n] = ne1 ? 2 : 1;
  m->ne[m->n][0] = ne0;
  m->ne[m->n][1] = ne1 ? ne1 : 1;
  m->ne[m->n][2] = m->ne[m->n][3] = 1;
  m->types[m->n] = IL_DTYPE_F16;
  m->n++;
}

/* A Llama model's tensors, in llama.cpp's visit order (sorted like the loader's map). */
static void build(model_list *m, int n_layer, int dim, int ff, bool tied) {
  memset(m, 0, sizeof *m);
  char nm[48];
  const int kv = dim / 4;
  if (!tied) add(m, "output.weight", dim, 32000);
  add(m, "output_norm.weight", dim, 0);
  add(m, "token_embd.weight", dim, 32000);
  for (int l = 0; l < n_layer; l++) {
    static const char *const parts[] = {"attn_k", "attn_norm", "attn_output", "attn_q", "attn_v",
                                        "ffn_down", "ffn_gate", "ffn_norm", "ffn_up"};
    for (int p = 0; p < 9; p++) {
      snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, parts[p]);
      const int64_t ne0 = p == 5 ? ff : dim;
      const int64_t ne1 = p == 1 || p == 7 ? 0 : p == 0 || p == 4 ? kv : p == 6 || p == 8 ? ff : dim;
      add(m, nm, ne0, ne1);
    }
  }
}

static il_dtype type_of(const model_list *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->names[i], name)) return m->ch[i].type;
  return IL_DTYPE_COUNT;
}

static int n_head = 32, n_head_kv = 8;

static il_status choose(model_list *m, il_ftype ft, bool pure, const il_quant_keep *keep, int n_keep, int n_layer) {
  const il_quant_rule rule = {ft, pure, keep, n_keep};
  const il_quant_model_info info = {"llama", n_layer, n_head, n_head_kv};
  return il_quant_choose(&rule, &info, m->n, m->ptr, m->n_dims, (const int64_t(*)[4])m->ne, m->types, m->ch);
}

static bool in_list(int v, const int *list, int n) {
  for (int i = 0; i < n; i++)
    if (list[i] == v) return true;
  return false;
}

/* The layers that get more bits (read off use_more_bits for n = 2, 16, 32). */
static const int more2[] = {1};
static const int more16[] = {0, 1, 4, 7, 10, 13, 14, 15};
static const int more32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

static void check_layers(model_list *m, int n_layer, const int *more, int n_more) {
  char nm[64];
  /* Q4_K_M */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q4_K);
  IL_CHECK_INT(type_of(m, "output_norm.weight"), IL_DTYPE_F16); /* 1-D: kept as it is */
  int bad = 0;
  for (int l = 0; l < n_layer; l++) {
    const il_dtype want = in_list(l, more, n_more) ? IL_DTYPE_Q6_K : IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
    bad += type_of(m, nm) != want;
    snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
    bad += type_of(m, nm) != want;
    snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.attn_k.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.attn_output.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q4_K;
    snprintf(nm, sizeof nm, "blk.%d.ffn_norm.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_F16;
  }
  IL_CHECK_INT(bad, 0);
  /* Q5_K_M: the same layers get Q6_K, the rest Q5_K */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q5_K_M, false, NULL, 0, n_layer));
  bad = 0;
  for (int l = 0; l < n_layer; l++) {
    const il_dtype want = in_list(l, more, n_more) ? IL_DTYPE_Q6_K : IL_DTYPE_Q5_K;
    snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
    bad += type_of(m, nm) != want;
    snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
    bad += type_of(m, nm) != want;
    snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
    bad += type_of(m, nm) != IL_DTYPE_Q5_K;
  }
  IL_CHECK_INT(bad, 0);
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q5_K);
  /* Q4_K_S: attn_v of layers 0..3, ffn_down of layers < n/8 get Q5_K */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_S, false, NULL, 0, n_layer));
  bad = 0;
  for (int l = 0; l < n_layer; l++) {
    snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
    bad += type_of(m, nm) != (l < 4 ? IL_DTYPE_Q5_K : IL_DTYPE_Q4_K);
    snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
    bad += type_of(m, nm) != (l < n_layer / 8 ? IL_DTYPE_Q5_K : IL_DTYPE_Q4_K);
  }
  IL_CHECK_INT(bad, 0);
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q6_K);
  /* Q5_K_S and Q6_K: no per-layer rule; output Q6_K */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q5_K_S, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "blk.1.attn_v.weight"), IL_DTYPE_Q5_K);
  IL_CHECK_INT(type_of(m, "blk.1.ffn_down.weight"), IL_DTYPE_Q5_K);
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q6_K, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "blk.1.attn_q.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q6_K);
  /* legacy types: output Q6_K (Q4_0, Q4_1), Q8_0 stays Q8_0 */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_0, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "blk.1.attn_v.weight"), IL_DTYPE_Q4_0);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q8_0, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q8_0);
  /* float types: every 2-D weight in the type, no rule */
  IL_CHECK_OK(choose(m, IL_FTYPE_BF16, false, NULL, 0, n_layer));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_BF16);
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_BF16);
  IL_CHECK_INT(type_of(m, "blk.0.attn_norm.weight"), IL_DTYPE_F16);
}

static void test_llama_mixes(void) {
  model_list *m = malloc(sizeof *m);
  build(m, 2, 2048, 8192, false);
  check_layers(m, 2, more2, 1);
  build(m, 16, 2048, 8192, false);
  check_layers(m, 16, more16, 8);
  build(m, 32, 2048, 8192, false);
  check_layers(m, 32, more32, 16);
  /* tied output head: token_embd takes the output's Q6_K */
  build(m, 16, 2048, 8192, true);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, false, NULL, 0, 16));
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q6_K);
  free(m);
}

static void test_pure_keep(void) {
  model_list *m = malloc(sizeof *m);
  build(m, 16, 2048, 8192, false);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, true, NULL, 0, 16));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q4_K);
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_Q4_K);
  IL_CHECK_INT(type_of(m, "blk.0.attn_norm.weight"), IL_DTYPE_F16);
  const il_quant_keep keep[] = {{"ffn_down", IL_DTYPE_Q8_0}, {"^blk\\.1\\.", IL_DTYPE_Q5_K}};
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, false, keep, 2, 16));
  IL_CHECK_INT(type_of(m, "blk.3.ffn_down.weight"), IL_DTYPE_Q8_0);
  IL_CHECK_INT(type_of(m, "blk.1.ffn_down.weight"), IL_DTYPE_Q8_0); /* first match wins */
  IL_CHECK_INT(type_of(m, "blk.1.attn_q.weight"), IL_DTYPE_Q5_K);
  /* a --keep on attn_v takes the tensor out of the rule, and (as in llama.cpp) the attn_v
   * counter only advances inside the rule: layer 1 is kept, so layers 2, 4, 5 are counted as
   * i = 1, 3, 4: Q6_K (1 < 16/8), Q4_K, Q6_K ((4 - 2) % 3 == 2), where without the --keep they
   * would be Q4_K, Q6_K, Q4_K. */
  IL_CHECK_INT(type_of(m, "blk.1.attn_v.weight"), IL_DTYPE_Q5_K);
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "blk.2.attn_v.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "blk.4.attn_v.weight"), IL_DTYPE_Q4_K);
  IL_CHECK_INT(type_of(m, "blk.5.attn_v.weight"), IL_DTYPE_Q6_K);
  const il_quant_keep bad[] = {{"(", IL_DTYPE_Q8_0}};
  IL_CHECK_INT(choose(m, IL_FTYPE_Q4_K_M, false, bad, 1, 16), IL_ERR_INVALID_ARG);
  free(m);
}

static void test_fallback(void) {
  model_list *m = malloc(sizeof *m);
  /* stories260K-like: dim 64, FFN 172 (not a multiple of 32) */
  build(m, 5, 64, 172, false);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, false, NULL, 0, 5));
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q8_0); /* 64 % 256: Q8_0 by the output rule */
  IL_CHECK_INT(type_of(m, "blk.0.attn_q.weight"), IL_DTYPE_Q5_0); /* llama.cpp's Q4_K fallback */
  IL_CHECK_INT(type_of(m, "blk.2.attn_v.weight"), IL_DTYPE_Q8_0); /* a Q6_K layer: Q6_K -> Q8_0 */
  IL_CHECK_INT(type_of(m, "blk.1.attn_v.weight"), IL_DTYPE_Q5_0);
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->names[i], "blk.0.attn_q.weight"))
      IL_CHECK_STR(m->ch[i].note, "row length 64 is not a multiple of 256 (q4_K): fell back to q5_0");
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_F16); /* 172 % 32 != 0 */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q6_K, false, NULL, 0, 5));
  IL_CHECK_INT(type_of(m, "blk.0.attn_q.weight"), IL_DTYPE_Q8_0); /* llama.cpp's Q6_K fallback */
  IL_CHECK_OK(choose(m, IL_FTYPE_Q5_K_S, false, NULL, 0, 5));
  IL_CHECK_INT(type_of(m, "blk.0.attn_q.weight"), IL_DTYPE_Q5_1); /* llama.cpp's Q5_K fallback */
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q5_1);
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_F16);
  /* IQ4_NL at GQA 32/8 = 4: attn_v's Q5_K and layer 0's ffn_down Q5_K (0 < 5/8 is false:
   * none) fall back to Q5_1; the rest is IQ4_NL, a 32-block type */
  IL_CHECK_OK(choose(m, IL_FTYPE_IQ4_NL, false, NULL, 0, 5));
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_Q5_1);
  IL_CHECK_INT(type_of(m, "blk.0.attn_q.weight"), IL_DTYPE_IQ4_NL);
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_F16);
  /* 64 % 32 == 0: the output rule gives Q6_K, which then falls back to Q8_0 */
  IL_CHECK_INT(type_of(m, "output.weight"), IL_DTYPE_Q8_0);
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->names[i], "output.weight"))
      IL_CHECK_STR(m->ch[i].note, "row length 64 is not a multiple of 256 (q6_K): fell back to q8_0");
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_0, false, NULL, 0, 5));
  IL_CHECK_INT(type_of(m, "blk.0.attn_q.weight"), IL_DTYPE_Q4_0);
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_F16);
  free(m);
  m = malloc(sizeof *m);
  /* SmolLM2-135M's shapes: dim 576 (2.25 x 256), FFN 1536 (6 x 256), 30 layers, GQA 9/3 */
  n_head = 9, n_head_kv = 3;
  build(m, 30, 576, 1536, true);
  IL_CHECK_OK(choose(m, IL_FTYPE_Q4_K_M, false, NULL, 0, 30));
  IL_CHECK_INT(type_of(m, "token_embd.weight"), IL_DTYPE_Q8_0); /* tied head: 576 % 256: Q8_0 */
  IL_CHECK_INT(type_of(m, "blk.5.attn_q.weight"), IL_DTYPE_Q5_0);
  IL_CHECK_INT(type_of(m, "blk.5.ffn_up.weight"), IL_DTYPE_Q5_0);
  IL_CHECK_INT(type_of(m, "blk.6.ffn_down.weight"), IL_DTYPE_Q4_K); /* rows of 1536 fit */
  IL_CHECK_INT(type_of(m, "blk.5.ffn_down.weight"), IL_DTYPE_Q6_K); /* (5 - 3) % 3 == 2 */
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_Q6_K);
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_Q8_0);   /* Q6_K of 576: Q8_0 */
  IL_CHECK_OK(choose(m, IL_FTYPE_IQ4_NL, false, NULL, 0, 30));
  IL_CHECK_INT(type_of(m, "blk.0.attn_v.weight"), IL_DTYPE_IQ4_NL); /* GQA 3 < 4 */
  IL_CHECK_INT(type_of(m, "blk.0.ffn_down.weight"), IL_DTYPE_Q5_K); /* layers 0..2 of 30 */
  IL_CHECK_INT(type_of(m, "blk.3.ffn_down.weight"), IL_DTYPE_IQ4_NL);
  n_head = 32, n_head_kv = 8;
  free(m);
}

static void test_order_and_names(void) {
  const char *names[] = {"blk.10.attn_q.weight", "token_embd.weight", "blk.9.ffn_up.weight", "blk.9.attn_k.weight",
                         "output.weight", "blk.2.attn_v.weight"};
  int64_t order[6];
  il_quant_sort_order(names, 6, order);
  const int want[] = {4, 1, 5, 3, 2, 0};
  for (int i = 0; i < 6; i++) IL_CHECK_INT(order[i], want[i]);
  il_ftype ft;
  IL_CHECK(il_ftype_parse("Q4_K", &ft) && ft == IL_FTYPE_Q4_K_M);
  IL_CHECK(il_ftype_parse("q5_k", &ft) && ft == IL_FTYPE_Q5_K_M);
  IL_CHECK(il_ftype_parse("q4_k_s", &ft) && ft == IL_FTYPE_Q4_K_S);
  IL_CHECK(il_ftype_parse("bf16", &ft) && ft == 32);
  IL_CHECK(!il_ftype_parse("q3_k", &ft));
  IL_CHECK(il_ftype_parse("IQ4_NL", &ft) && ft == 25 && il_ftype_base(ft) == IL_DTYPE_IQ4_NL);
  IL_CHECK(il_ftype_parse("q5_0", &ft) && ft == 8 && il_ftype_base(ft) == IL_DTYPE_Q5_0);
  IL_CHECK(il_ftype_parse("q5_1", &ft) && ft == 9 && il_ftype_base(ft) == IL_DTYPE_Q5_1);
  IL_CHECK_STR(il_ftype_name(IL_FTYPE_Q5_K_S), "q5_k_s");
  IL_CHECK_INT(il_ftype_base(IL_FTYPE_Q4_K_S), IL_DTYPE_Q4_K);
}

int main(void) {
  test_llama_mixes();
  test_pure_keep();
  test_fallback();
  test_order_and_names();
  return il_test_finish();
}
