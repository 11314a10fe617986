/* tests/test_attn_kernels: the CPU attention kernels (backend/cpu/attn) against each other and
 * against a double-precision reference written here.
 *
 * Random cases from a fixed seed: head sizes 32/64/80/96/128 (and 36, 20 for the reference
 * path), GQA ratios 1/2/4/8, decode (one token per sequence), full prefill and partial prefill
 * (the last rows of each sequence), batches of unequal sequences whose tokens are sometimes
 * interleaved, paged caches with shuffled block tables (blocks of 16 and 7) and contiguous ones
 * (block = n_ctx), padded row strides, F32 and F16 K/V, 1 and 2 threads, every compiled ISA
 * table. Tolerances: naive vs the double reference 2e-5 (F32 and F16: the reference reads the
 * same F16 cache); every kernel vs naive 1e-5 for F32 and for F16 (both read the same F16
 * values; conversion is exact, only summation order differs). Each run gets a buffer of exactly
 * the reported workspace (under ASan an over-read or over-write fails), and one byte less must
 * be refused.
 */
#include "backend/cpu/attn.h"
#include "backend/cpu/matmul.h"
#include "core/quant.h"
#include "harness.h"

typedef struct {
  int64_t n_heads, n_kv, hd, n_tok, n_cells;
  int32_t block, max_blocks, n_seq;
  il_dtype kv_type;
  size_t stride; /* bytes */
  void *k, *v;
  float *kd, *vd; /* q8_0: the cells as the quant module dequantizes them, [cell][n_kv * hd] */
  float *q;
  int32_t *seq, *pos, *table;
} il_case;

static uint64_t rng = 0x5eed1234abcdULL;
static int irand(int n) { return (int)((il_test_randf(&rng) + 1.0f) * 0.5f * (float)n) % n; }

static float kv_get(const il_case *c, const void *base, int64_t cell, int64_t i) {
  if (c->kv_type == IL_DTYPE_Q8_0) return (base == c->k ? c->kd : c->vd)[cell * c->n_kv * c->hd + i];
  const char *row = (const char *)base + (size_t)cell * c->stride;
  if (c->kv_type == IL_DTYPE_F16) return il_fp16_to_f32(((const uint16_t *)row)[i]);
  if (c->kv_type == IL_DTYPE_BF16) return il_bf16_to_f32(((const uint16_t *)row)[i]);
  return ((const float *)row)[i];
}

/* mode 0: decode (one token per sequence, at its last position); 1: full prefill; 2: the last
 * rows of each sequence. paged: blocks of `block` shuffled over the pool; else block = n_ctx. */
static void make_case(il_case *c, int64_t hd, int64_t n_kv, int64_t G, int n_seq, const int *len, int mode,
                      int paged_block, il_dtype t, int interleave) {
  memset(c, 0, sizeof *c);
  c->n_heads = n_kv * G;
  c->n_kv = n_kv;
  c->hd = hd;
  c->n_seq = n_seq;
  c->kv_type = t;
  int maxlen = 0;
  for (int s = 0; s < n_seq; s++) maxlen = len[s] > maxlen ? len[s] : maxlen;
  c->block = paged_block ? paged_block : maxlen + 3;
  c->max_blocks = (maxlen + c->block - 1) / c->block;
  const int n_blocks = n_seq * c->max_blocks;
  c->n_cells = (int64_t)n_blocks * c->block;
  c->stride = t == IL_DTYPE_Q8_0 ? il_dtype_row_size(t, n_kv * hd) + (irand(2) ? 34 : 0)
                                 : (size_t)(n_kv * hd + (irand(2) ? 8 : 0)) * (t == IL_DTYPE_F32 ? 4 : 2);
  c->table = malloc(sizeof(int32_t) * (size_t)n_blocks);
  for (int b = 0; b < n_blocks; b++) c->table[b] = b;
  if (paged_block)
    for (int b = n_blocks - 1; b > 0; b--) {
      int j = irand(b + 1), x = c->table[b];
      c->table[b] = c->table[j];
      c->table[j] = x;
    }
  c->k = malloc(c->stride * (size_t)c->n_cells);
  c->v = malloc(c->stride * (size_t)c->n_cells);
  if (t == IL_DTYPE_Q8_0) {
    const int64_t w = n_kv * hd;
    c->kd = malloc(sizeof(float) * (size_t)(w * c->n_cells));
    c->vd = malloc(sizeof(float) * (size_t)(w * c->n_cells));
    for (int64_t cell = 0; cell < c->n_cells; cell++) {
      float *kr = c->kd + cell * w, *vr = c->vd + cell * w;
      for (int64_t i = 0; i < w; i++) {
        kr[i] = il_test_randf(&rng);
        vr[i] = il_test_randf(&rng) * 2.0f;
      }
      char *kc = (char *)c->k + cell * c->stride, *vc = (char *)c->v + cell * c->stride;
      IL_CHECK_OK(il_quantize_row(t, kr, kc, w));
      IL_CHECK_OK(il_quantize_row(t, vr, vc, w));
      IL_CHECK_OK(il_dequantize_row(t, kc, kr, w));
      IL_CHECK_OK(il_dequantize_row(t, vc, vr, w));
    }
  }
  for (int64_t cell = 0; cell < c->n_cells && t != IL_DTYPE_Q8_0; cell++)
    for (int64_t i = 0; i < n_kv * hd; i++) {
      float a = il_test_randf(&rng), b = il_test_randf(&rng) * 2.0f;
      if (t == IL_DTYPE_F16) {
        ((uint16_t *)((char *)c->k + cell * c->stride))[i] = il_f32_to_fp16(a);
        ((uint16_t *)((char *)c->v + cell * c->stride))[i] = il_f32_to_fp16(b);
      } else if (t == IL_DTYPE_BF16) {
        ((uint16_t *)((char *)c->k + cell * c->stride))[i] = il_f32_to_bf16(a);
        ((uint16_t *)((char *)c->v + cell * c->stride))[i] = il_f32_to_bf16(b);
      } else {
        ((float *)((char *)c->k + cell * c->stride))[i] = a;
        ((float *)((char *)c->v + cell * c->stride))[i] = b;
      }
    }
  int64_t n = 0;
  for (int s = 0; s < n_seq; s++) n += mode == 0 ? 1 : mode == 1 ? len[s] : (len[s] < 5 ? len[s] : 5);
  c->n_tok = n;
  c->seq = malloc(sizeof(int32_t) * (size_t)n);
  c->pos = malloc(sizeof(int32_t) * (size_t)n);
  int64_t t0 = 0;
  for (int s = 0; s < n_seq; s++) {
    int first = mode == 0 ? len[s] - 1 : mode == 1 ? 0 : (len[s] < 5 ? 0 : len[s] - 5);
    for (int p = first; p < len[s]; p++, t0++) {
      c->seq[t0] = s;
      c->pos[t0] = p;
    }
  }
  if (interleave) /* tokens of one sequence no longer consecutive */
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = irand((int)i + 1);
      int32_t a = c->seq[i], b = c->pos[i];
      c->seq[i] = c->seq[j];
      c->pos[i] = c->pos[j];
      c->seq[j] = a;
      c->pos[j] = b;
    }
  c->q = malloc(sizeof(float) * (size_t)(n * c->n_heads * hd));
  for (int64_t i = 0; i < n * c->n_heads * hd; i++) c->q[i] = il_test_randf(&rng) * 1.5f;
}

static void free_case(il_case *c) {
  free(c->kd);
  free(c->vd);
  free(c->k);
  free(c->v);
  free(c->q);
  free(c->seq);
  free(c->pos);
  free(c->table);
}

static il_cpu_attn_args args_of(const il_case *c, float *out) {
  return (il_cpu_attn_args){.out = out,
                            .q = c->q,
                            .seq = c->seq,
                            .pos = c->pos,
                            .n_tok = c->n_tok,
                            .k = c->k,
                            .v = c->v,
                            .kv_type = c->kv_type,
                            .kv_row_stride = c->stride,
                            .n_cells = c->n_cells,
                            .block_table = c->table,
                            .block = c->block,
                            .max_blocks = c->max_blocks,
                            .n_seq = c->n_seq,
                            .n_heads = c->n_heads,
                            .n_kv_heads = c->n_kv,
                            .head_dim = c->hd,
                            .scale = 1.0f / sqrtf((float)c->hd),
                            .slice = irand(3) == 0 ? 0 : 1 + irand(9)};
}

/* The plain definition in double precision. */
static void reference(const il_case *c, float *out) {
  const int64_t hd = c->hd, G = c->n_heads / c->n_kv;
  double *sc = malloc(sizeof(double) * (size_t)(c->block * c->max_blocks));
  for (int64_t t = 0; t < c->n_tok; t++)
    for (int64_t h = 0; h < c->n_heads; h++) {
      const float *q = c->q + (t * c->n_heads + h) * hd;
      const int64_t kh = h / G, n = c->pos[t] + 1;
      double mx = -INFINITY, sum = 0;
      for (int64_t p = 0; p < n; p++) {
        const int64_t cell = (int64_t)c->table[c->seq[t] * c->max_blocks + p / c->block] * c->block + p % c->block;
        double d = 0;
        for (int64_t i = 0; i < hd; i++) d += (double)q[i] * kv_get(c, c->k, cell, kh * hd + i);
        sc[p] = d / sqrt((double)hd);
        mx = sc[p] > mx ? sc[p] : mx;
      }
      for (int64_t p = 0; p < n; p++) sum += (sc[p] = exp(sc[p] - mx));
      for (int64_t i = 0; i < hd; i++) {
        double o = 0;
        for (int64_t p = 0; p < n; p++) {
          const int64_t cell = (int64_t)c->table[c->seq[t] * c->max_blocks + p / c->block] * c->block + p % c->block;
          o += sc[p] * kv_get(c, c->v, cell, kh * hd + i);
        }
        out[(t * c->n_heads + h) * hd + i] = (float)(o / sum);
      }
    }
  free(sc);
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= m)) m = d; /* NaN counts as a failure */
  }
  return m;
}

/* Runs kernel k with exactly its workspace (and checks one byte less is refused). */
static il_status run_exact(const il_cpu_attn_kernel *k, il_pool *pool, const il_cpu_attn_args *a) {
  const size_t ws = k->workspace(a, pool ? il_pool_size(pool) : 1);
  if (ws > 1) {
    void *small = malloc(ws - 1);
    il_status st = k->run(pool, a, small, ws - 1);
    free(small);
    IL_CHECK_INT(st, IL_ERR_INVALID_ARG);
  }
  void *w = malloc(ws ? ws : 1);
  il_status st = k->run(pool, a, w, ws);
  free(w);
  return st;
}

static double worst[4][4]; /* [f32, f16, bf16, q8_0][kernel]: largest difference to naive seen */
static double worst_ref[4];

static void check_case(const il_case *c, il_pool *const *pools, const char *what) {
  const int64_t n = c->n_tok * c->n_heads * c->hd;
  float *ref = malloc(sizeof(float) * (size_t)n), *base = malloc(sizeof(float) * (size_t)n),
        *out = malloc(sizeof(float) * (size_t)n);
  reference(c, ref);
  const il_isa levels[3] = {IL_ISA_SCALAR, IL_ISA_AVX2, IL_ISA_AVX512};
  const int f16 = c->kv_type == IL_DTYPE_F16 ? 1 : c->kv_type == IL_DTYPE_BF16 ? 2 : c->kv_type == IL_DTYPE_Q8_0 ? 3 : 0;
  int nk;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&nk);
  for (int li = 0; li < 3; li++) {
    if (levels[li] > il_cpu_isa_detected()) continue;
    for (int pi = 0; pi < 2; pi++) {
      il_cpu_attn_args a = args_of(c, base);
      a.isa = levels[li];
      IL_CHECK_OK(run_exact(il_cpu_attn_find("naive"), pools[pi], &a));
      const double dr = max_diff(base, ref, n);
      worst_ref[f16] = dr > worst_ref[f16] ? dr : worst_ref[f16];
      if (!(dr <= 2e-5)) fprintf(stderr, "%s: naive vs reference %g (isa %d, %d threads)\n", what, dr, li, pi + 1);
      IL_CHECK(dr <= 2e-5);
      char why[256];
      const il_cpu_attn_kernel *au = il_cpu_attn_auto(&a, why, sizeof why);
      IL_CHECK(au != NULL && au->why_not(&a) == NULL);
      for (int ki = 0; ki < nk; ki++) {
        if (ks[ki].why_not(&a)) {
          IL_CHECK(au != &ks[ki]);
          IL_CHECK_CONTAINS(why, ks[ki].name);
          continue;
        }
        for (int64_t i = 0; i < n; i++) out[i] = NAN;
        a.out = out;
        IL_CHECK_OK(run_exact(&ks[ki], pools[pi], &a));
        a.out = base;
        const double d = max_diff(out, base, n);
        worst[f16][ki] = d > worst[f16][ki] ? d : worst[f16][ki];
        if (!(d <= 1e-5))
          fprintf(stderr, "%s: %s vs naive %g (isa %d, %d threads)\n", what, ks[ki].name, d, li, pi + 1);
        IL_CHECK(d <= 1e-5);
      }
    }
  }
  free(ref);
  free(base);
  free(out);
}

static void test_random(il_pool *const *pools) {
  const int64_t hds[] = {32, 64, 80, 96, 128, 36, 20, 8, 16}, gqa[] = {1, 2, 4, 8};
  for (int it = 0; it < 54; it++) {
    const int64_t hd = hds[it % 9], G = gqa[(it / 9 + it) % 4], n_kv = 1 + irand(2);
    const int n_seq = 1 + irand(3), mode = it % 3, paged = irand(3) == 0 ? 0 : (irand(2) ? 16 : 7);
    const il_dtype t = it % 4 == 3                  ? IL_DTYPE_F16
                       : it % 4 == 1                ? IL_DTYPE_BF16
                       : it % 4 == 2 && hd % 32 == 0 ? IL_DTYPE_Q8_0
                                                    : IL_DTYPE_F32;
    int len[3];
    for (int s = 0; s < n_seq; s++) len[s] = 1 + irand(mode == 1 ? 90 : 300);
    il_case c;
    make_case(&c, hd, n_kv, G, n_seq, len, mode, paged, t, irand(4) == 0);
    char what[160];
    snprintf(what, sizeof what, "case %d: hd %lld G %lld kv %lld seqs %d len0 %d mode %d block %d %s", it,
             (long long)hd, (long long)G, (long long)n_kv, n_seq, len[0], mode, c.block, il_dtype_name(t));
    check_case(&c, pools, what);
    free_case(&c);
  }
}

/* Decode of one long sequence with one KV head: flash splits the keys over the threads. And a
 * multi-query shape wider than a flash tile. */
static void test_split_decode(il_pool *const *pools) {
  const int lens[2][2] = {{700, 1}, {1000, 333}};
  for (int i = 0; i < 2; i++) {
    il_case c;
    make_case(&c, 64, 1, 4, i + 1, lens[i], 0, i ? 16 : 0, i ? IL_DTYPE_F16 : IL_DTYPE_F32, 0);
    check_case(&c, pools, i ? "split decode, 2 sequences" : "split decode");
    free_case(&c);
  }
  /* decode over more keys than flash's chunk holds (2048 keys at 2 rows, 512 at 8), so the
   * online softmax carries over chunks: head size 8 with G 2 (stories260K), and G 8 paged with
   * a decode token and a short prompt tail side by side */
  {
    const int l1[1] = {2300}, l2[2] = {1200, 700};
    il_case d;
    make_case(&d, 8, 4, 2, 1, l1, 0, 0, IL_DTYPE_F16, 0);
    check_case(&d, pools, "decode over 2 chunks, head size 8");
    free_case(&d);
    make_case(&d, 16, 1, 8, 2, l2, 0, 16, IL_DTYPE_F32, 0);
    check_case(&d, pools, "decode over 3 chunks, G 8, paged");
    free_case(&d);
    make_case(&d, 8, 2, 2, 2, l2, 2, 7, IL_DTYPE_BF16, 0);
    check_case(&d, pools, "prompt tails over chunks, head size 8, paged");
    free_case(&d);
  }
  /* more query heads per KV head than a flash tile has rows: one token per tile */
  il_case c;
  const int len[1] = {20};
  make_case(&c, 32, 1, 96, 1, len, 1, 0, IL_DTYPE_F32, 0);
  check_case(&c, pools, "96 query heads on one KV head");
  free_case(&c);
}

static void test_auto_and_why(void) {
  il_case c;
  const int len[1] = {10};
  make_case(&c, 36, 1, 2, 1, len, 1, 0, IL_DTYPE_F32, 0);
  float *out = malloc(sizeof(float) * (size_t)(c.n_tok * c.n_heads * c.hd));
  il_cpu_attn_args a = args_of(&c, out);
  char why[256];
  const il_cpu_attn_kernel *k = il_cpu_attn_auto(&a, why, sizeof why);
  IL_CHECK_STR(k ? k->name : NULL, "memeff");
  IL_CHECK(strncmp(why, "flash: head_dim 36", 18) == 0);
  IL_CHECK(il_cpu_attn_find("flash")->why_not(&a) != NULL);
  IL_CHECK_INT(il_cpu_attn_find("flash")->run(NULL, &a, NULL, 0), IL_ERR_UNSUPPORTED);
  IL_CHECK_INT(il_cpu_attn_find("flash")->workspace(&a, 1), 0);
  IL_CHECK(il_cpu_attn_find("memeff")->workspace(&a, 1) > 0);
  a.head_dim = 64;
  a.kv_row_stride = 64 * sizeof(float);
  k = il_cpu_attn_auto(&a, why, sizeof why);
  IL_CHECK_STR(k ? k->name : NULL, "flash");
  IL_CHECK_STR(why, "");
  IL_CHECK(il_cpu_attn_find("nope") == NULL);
  int n;
  il_cpu_attn_kernels(&n);
  IL_CHECK_INT(n, 4);
  /* nothing usable: NULL and every reason */
  a.n_heads = 3;
  a.n_kv_heads = 2;
  IL_CHECK(il_cpu_attn_auto(&a, why, sizeof why) == NULL);
  IL_CHECK_CONTAINS(why, "naive: n_heads 3 is not a multiple of n_kv_heads 2");
  IL_CHECK(il_cpu_attn_auto(NULL, why, sizeof why) == NULL);
  free(out);
  free_case(&c);
}

static void test_bad_input(void) {
  il_case c;
  const int len[2] = {20, 9};
  make_case(&c, 32, 2, 2, 2, len, 1, 16, IL_DTYPE_F32, 0);
  float *out = malloc(sizeof(float) * (size_t)(c.n_tok * c.n_heads * c.hd));
  int nk;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&nk);
  char big[1 << 16];
  for (int ki = 0; ki < nk; ki++) {
    il_cpu_attn_args a = args_of(&c, out);
    IL_CHECK(ks[ki].workspace(&a, 2) <= sizeof big);
    IL_CHECK_OK(ks[ki].run(NULL, &a, big, sizeof big));
    c.pos[3] = 32; /* max_blocks 2 x block 16 */
    IL_CHECK_INT(ks[ki].workspace(&a, 2), 0);
    IL_CHECK_CONTAINS(il_error_detail(), "token 3: position 32 outside the block table");
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_RANGE);
    IL_CHECK_CONTAINS(il_error_detail(), "token 3: position 32 outside the block table");
    c.pos[3] = 3;
    c.seq[0] = 2;
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_RANGE);
    IL_CHECK_CONTAINS(il_error_detail(), "sequence 2 outside 0..1");
    c.seq[0] = 0;
    const int32_t e = c.table[1];
    c.table[1] = 4; /* cells 64..67 of 64 */
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_RANGE);
    IL_CHECK_CONTAINS(il_error_detail(), "block table [seq 0][1] = 4");
    c.table[1] = -1;
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_RANGE);
    c.table[1] = e;
    a.kv_type = IL_DTYPE_Q8_0; /* q8_0 cells need whole blocks per head */
    a.head_dim = 36;
    IL_CHECK_CONTAINS(ks[ki].why_not(&a), "not a multiple of 32");
    a.head_dim = c.hd;
    a.kv_type = IL_DTYPE_Q4_0;
    IL_CHECK(ks[ki].why_not(&a) != NULL);
    IL_CHECK_INT(ks[ki].workspace(&a, 1), 0);
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_UNSUPPORTED);
    a.kv_type = IL_DTYPE_F32;
    a.n_heads = 3;
    IL_CHECK(ks[ki].why_not(&a) != NULL);
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_INVALID_ARG);
    a.n_heads = 4;
    a.kv_row_stride = 4;
    IL_CHECK_CONTAINS(ks[ki].why_not(&a), "kv_row_stride 4");
    a.kv_row_stride = c.stride;
    a.k = NULL;
    IL_CHECK(ks[ki].why_not(&a) != NULL);
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, sizeof big), IL_ERR_INVALID_ARG);
    a.k = c.k;
    IL_CHECK(ks[ki].why_not(NULL) != NULL);
    IL_CHECK_INT(ks[ki].run(NULL, NULL, big, sizeof big), IL_ERR_INVALID_ARG);
    IL_CHECK_INT(ks[ki].run(NULL, &a, big, 10), IL_ERR_INVALID_ARG);
    IL_CHECK_CONTAINS(il_error_detail(), "workspace of 10 bytes");
    a.n_tok = 0; /* nothing to do is fine */
    IL_CHECK_OK(ks[ki].run(NULL, &a, NULL, 0));
  }
  free(out);
  free_case(&c);
}

int main(void) {
  il_cpu_attn_par_min(0); /* small shapes run threaded too (the default keeps them on one thread) */
  il_pool *pools[2];
  IL_CHECK_OK(il_pool_new(1, &pools[0]));
  IL_CHECK_OK(il_pool_new(2, &pools[1]));
  test_auto_and_why();
  test_bad_input();
  test_split_decode(pools);
  test_random(pools);
  int nk;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&nk);
  printf("naive vs double reference: max |diff| f32 %.3g, f16 %.3g, bf16 %.3g, q8_0 %.3g\n", worst_ref[0],
         worst_ref[1], worst_ref[2], worst_ref[3]);
  for (int ki = 0; ki < nk; ki++)
    printf("%-6s vs naive: max |diff| f32 %.3g, f16 %.3g, bf16 %.3g, q8_0 %.3g\n", ks[ki].name, worst[0][ki],
           worst[1][ki], worst[2][ki], worst[3][ki]);
  il_pool_free(pools[0]);
  il_pool_free(pools[1]);
  return il_test_finish();
}
