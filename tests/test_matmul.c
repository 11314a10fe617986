/* tests/test_matmul: every SIMD level against the scalar kernels, and the scalar kernels
 * against a double-precision product of the dequantized weights.
 *
 * Shapes cover every block-size multiple in {32..2048}, odd n_in for float types, row counts
 * that are not multiples of the 4-row tile, token counts that are not multiples of the token
 * tile, padded row strides (including odd ones, so loads are unaligned) and ldy > n_out, on
 * pools of 1, 2 and 3 threads. The quantized activations must be bit-identical across levels
 * (the workspaces are compared byte for byte), so level-vs-scalar differences come only from
 * float summation order: tolerance 1e-5 of sum|w*x|. Against the float reference the bound is
 * the activation rounding error, sum |w_k| * d_block(k) / 2. On CPUs with GFNI the AVX-512 Q4
 * kernels are run a second time with their non-GFNI path. Also: error values for bad shapes,
 * strides, ldy and workspace; ISA selection and clamping.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "core/quant.h"
#include "harness.h"
#include "memory/mem.h"

static uint64_t rng = 0x1234567ull;

static bool is_k(il_dtype t) { return t == IL_DTYPE_Q4_K || t == IL_DTYPE_Q5_K || t == IL_DTYPE_Q6_K; }

static void put_f16(uint8_t *p, float v) {
  uint16_t h = il_f32_to_fp16(v);
  memcpy(p, &h, 2);
}

/* Random weights of type t: quantized from floats for the types we quantize, random bytes with
 * sane fp16 scales for the K-quants (and for Q8_0 every other matrix, to reach q = -128). */
static void make_weights(il_dtype t, uint8_t *w, size_t stride, int64_t n_out, int64_t n_in, int variant) {
  float *row = malloc(sizeof(float) * (size_t)n_in);
  const size_t rs = il_dtype_row_size(t, n_in);
  const il_dtype_info *ti = il_dtype_get(t);
  for (int64_t r = 0; r < n_out; r++) {
    uint8_t *dst = w + (size_t)r * stride;
    const float scale = (r % 7 == 3) ? 8.0f : 1.0f;
    for (int64_t k = 0; k < n_in; k++) row[k] = il_test_randf(&rng) * scale;
    const bool q5nl = t == IL_DTYPE_Q5_0 || t == IL_DTYPE_Q5_1 || t == IL_DTYPE_IQ4_NL;
    bool raw = is_k(t) || ((t == IL_DTYPE_Q8_0 || q5nl) && variant % 2 == 1);
    if (!raw) {
      IL_CHECK_OK(il_quantize_row(t, row, dst, n_in));
    } else {
      for (size_t i = 0; i < rs; i++) dst[i] = (uint8_t)(il_test_randf(&rng) * 128.0f + 128.0f);
      for (int64_t b = 0; b < n_in / (int64_t)ti->blck; b++) {
        uint8_t *blk = dst + b * ti->size;
        const float d = 0.001f + 0.01f * fabsf(il_test_randf(&rng)), dm = 0.002f * fabsf(il_test_randf(&rng));
        if (t == IL_DTYPE_Q6_K) put_f16(blk + offsetof(il_block_q6_K, d), d);
        else put_f16(blk, d);
        if (t == IL_DTYPE_Q4_K || t == IL_DTYPE_Q5_K || t == IL_DTYPE_Q5_1) put_f16(blk + 2, t == IL_DTYPE_Q5_1 ? -16 * d : dm);
      }
    }
    for (size_t i = rs; i < stride; i++) dst[i] = 0xA5; /* padding must not be read */
  }
  free(row);
}

typedef struct {
  double max_err_rel; /* worst |a-b| / scale seen */
} stats;

static il_pool *pools[4];

/* The kernel tables under test: scalar first (the oracle), then every level this CPU runs,
 * and the AVX-512 Q4 variants for CPUs without GFNI/VBMI when this one has them. */
static const il__kernels *tables[8];
static const char *table_names[8];
static int n_tables;

static void add_table(const il__kernels *k, const char *name) {
  for (int i = 0; i < n_tables; i++)
    if (tables[i] == k) return;
  tables[n_tables] = k;
  table_names[n_tables++] = name;
}

/* Activations of run_case: 0 random floats; 1 every element a BF16 (what --dtype bf16 gives,
 * the BF16 GEMM's vdpbf16ps path on CPUs with AVX512_BF16); 2 the same except one element of
 * the last token (the conversion finds it, and the GEMM keeps its F32 path). */
static int x_bf16;
static int n_repacked; /* cases run from a repacked copy (il_cpu_matmul_pack) */

static void run_case(il_dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, int nthreads, int variant,
                     stats *st) {
  const size_t rs = il_dtype_row_size(t, n_in);
  const size_t pad = (variant % 3 == 0) ? 0 : (variant % 3 == 1 ? 3 : 64);
  const size_t stride = rs + pad;
  const int64_t ldy = n_out + (variant % 2 ? 5 : 0);
  uint8_t *w = malloc(stride * (size_t)n_out + 64);
  make_weights(t, w, stride, n_out, n_in, variant);
  float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
  for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = il_test_randf(&rng) * ((i / n_in) % 3 == 1 ? 20.0f : 1.0f);
  if (x_bf16)
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = il_bf16_to_f32(il_f32_to_bf16(x[i]));
  if (x_bf16 == 2 && n_tok > 1) x[n_in * n_tok - 1 - variant % n_in] += 0x1p-20f;
  const int64_t ysz = ldy * (n_tok - 1) + n_out;
  float *y[8];
  const size_t ws = il_cpu_matmul_work_size(t, n_in, n_tok, nthreads);
  uint8_t *work[8];
  const int det = n_tables - 1;
  int failed_call = 0;
  for (int l = 0; l <= det; l++) {
    y[l] = malloc(sizeof(float) * (size_t)(ysz + 1));
    for (int64_t i = 0; i <= ysz; i++) y[l][i] = -12345.0f;
    work[l] = ws ? malloc(ws) : NULL;
    if (ws) memset(work[l], 0x5A, ws);
    il_status s = il_cpu_matmul(pools[nthreads], tables[l], t, w, stride, n_out, n_in, x, n_tok, y[l], ldy, work[l]);
    if (s != IL_OK) {
      IL_CHECK_OK(s);
      failed_call = 1;
    }
  }
  /* --repack: each table that has a panel layout for t multiplies from its own packed copy too
   * (every batch size through the GEMM micro-kernels, one token included); checked below like
   * the tables, and bit for bit against the table's own result where that took the GEMM */
  float *yp[8] = {0};
  uint8_t *pk[8] = {0};
  for (int l = 1; l <= det && !failed_call; l++) {
    const size_t pbytes = il_cpu_matmul_packed_size(tables[l], t, n_out, n_in);
    if (!pbytes) continue;
    pk[l] = aligned_alloc(64, (pbytes + 63) & ~(size_t)63);
    memset(pk[l], 0xA5, pbytes);
    yp[l] = malloc(sizeof(float) * (size_t)(ysz + 1));
    for (int64_t i = 0; i <= ysz; i++) yp[l][i] = -12345.0f;
    IL_CHECK_OK(il_cpu_matmul_pack(pools[nthreads], tables[l], t, w, stride, n_out, n_in, pk[l]));
    n_repacked++;
    const il_cpu_mm_part part = {w, stride, n_out, yp[l], ldy, pk[l]};
    il_status s = il_cpu_matmul_multi(pools[nthreads], tables[l], t, 1, &part, n_in, x, n_tok, work[l]);
    if (s != IL_OK) {
      IL_CHECK_OK(s);
      failed_call = 1;
    } else if (n_tok >= il__gemm_min_tok(t, tables[l]->plain_int8) && ws && !x_bf16) {
      int same = 1;
      for (int64_t tk = 0; tk < n_tok; tk++)
        for (int64_t r = 0; r < n_out; r++) same &= memcmp(&yp[l][tk * ldy + r], &y[l][tk * ldy + r], 4) == 0;
      if (!same)
        fprintf(stderr, "  %s %s: repacked GEMM differs from packing per call (n_in=%lld n_out=%lld n_tok=%lld)\n",
                il_dtype_name(t), table_names[l], (long long)n_in, (long long)n_out, (long long)n_tok);
      IL_CHECK(same);
    }
  }
  if (failed_call) goto out;
  /* With BF16-exact activations on a CPU with AVX512_BF16, the AVX-512 GEMM's workspace starts
   * with x as BF16 (every token: the conversion runs before it knows the last one is exact) */
  for (int l = 1; l <= det && x_bf16 && t == IL_DTYPE_BF16 && ws; l++) {
    if (!tables[l]->bf16_act || !tables[l]->gemm[t] || !il_cpu_features_get()->avx512bf16 ||
        n_tok < IL__GEMM_MIN_TOK_BF16_DOT)
      continue;
    const uint8_t *al = work[l] + ((64 - (uintptr_t)work[l] % 64) % 64);
    const size_t as = il__act_bf16_stride(n_in);
    int conv = 1;
    for (int64_t tk = 0; tk < n_tok && conv; tk++)
      for (int64_t k = 0; k < n_in + (n_in & 1); k++) {
        uint16_t h;
        memcpy(&h, al + (size_t)tk * as + 2 * (size_t)k, 2);
        uint32_t v = 0;
        if (k < n_in) memcpy(&v, x + tk * n_in + k, 4);
        if (h != (uint16_t)(v >> 16)) conv = 0;
      }
    if (!conv) fprintf(stderr, "  bf16 activations not converted by %s (n_in=%lld n_tok=%lld)\n", table_names[l],
                       (long long)n_in, (long long)n_tok);
    IL_CHECK(conv);
  }

  /* reference: double product of dequantized rows */
  float *wd = malloc(sizeof(float) * (size_t)n_in);
  const int blck = il_dtype_get(t)->quantized ? (is_k(t) ? 256 : 32) : 0;
  int bad = 0;
  for (int64_t r = 0; r < n_out && bad < 3; r++) {
    IL_CHECK_OK(il_dequantize_row(t, w + (size_t)r * stride, wd, n_in));
    for (int64_t tk = 0; tk < n_tok && bad < 3; tk++) {
      const float *xt = x + tk * n_in;
      double ref = 0, mag = 0, qerr = 0;
      for (int64_t k = 0; k < n_in; k++) {
        ref += (double)wd[k] * xt[k];
        mag += fabs((double)wd[k] * xt[k]);
      }
      if (blck) {
        for (int64_t b0 = 0; b0 < n_in; b0 += blck) {
          double amax = 0, sw = 0;
          for (int k = 0; k < blck; k++) {
            amax = fmax(amax, fabs(xt[b0 + k]));
            sw += fabs(wd[b0 + k]);
          }
          qerr += sw * amax / 254.0 * 1.0001;
        }
      }
      const double tol_ref = 2e-5 * mag + qerr + 1e-30;
      const double got0 = y[0][tk * ldy + r];
      if (fabs(got0 - ref) > tol_ref) {
        bad++;
        IL_CHECK(fabs(got0 - ref) <= tol_ref);
        fprintf(stderr, "  %s scalar vs reference n_in=%lld n_out=%lld n_tok=%lld row %lld tok %lld: %.9g vs %.9g (tol %g)\n",
                il_dtype_name(t), (long long)n_in, (long long)n_out, (long long)n_tok, (long long)r, (long long)tk,
                got0, ref, tol_ref);
      }
      for (int l = 1; l <= det; l++) {
        const double got = y[l][tk * ldy + r], tol = 1e-5 * mag + 1e-30;
        const double e = fabs(got - got0);
        if (mag > 0 && e / mag > st->max_err_rel) st->max_err_rel = e / mag;
        if (!(e <= tol)) {
          bad++;
          IL_CHECK(e <= tol);
          fprintf(stderr, "  %s %s vs scalar n_in=%lld n_out=%lld n_tok=%lld thr=%d stride=%zu row %lld tok %lld: %.9g vs %.9g\n",
                  il_dtype_name(t), table_names[l], (long long)n_in, (long long)n_out, (long long)n_tok,
                  nthreads, stride, (long long)r, (long long)tk, got, got0);
        }
        if (!yp[l]) continue;
        const double gp = yp[l][tk * ldy + r], ep = fabs(gp - got0);
        if (mag > 0 && ep / mag > st->max_err_rel) st->max_err_rel = ep / mag;
        if (!(ep <= tol)) {
          bad++;
          IL_CHECK(ep <= tol);
          fprintf(stderr, "  %s %s repacked vs scalar n_in=%lld n_out=%lld n_tok=%lld thr=%d row %lld tok %lld: %.9g vs %.9g\n",
                  il_dtype_name(t), table_names[l], (long long)n_in, (long long)n_out, (long long)n_tok, nthreads,
                  (long long)r, (long long)tk, gp, got0);
        }
      }
    }
  }
  if (!bad) il_test_passed++;
  /* untouched padding between rows of y and after it */
  for (int l = 0; l <= det; l++) {
    int pad_bad = 0;
    for (int64_t tk = 0; tk < n_tok; tk++)
      for (int64_t i = n_out; i < ldy && (tk + 1) * ldy <= ysz; i++)
        if (y[l][tk * ldy + i] != -12345.0f || (yp[l] && yp[l][tk * ldy + i] != -12345.0f)) pad_bad = 1;
    if (y[l][ysz] != -12345.0f || (yp[l] && yp[l][ysz] != -12345.0f)) pad_bad = 1;
    IL_CHECK(!pad_bad);
    if (ws && l > 0 && il_dtype_get(t)->quantized) { /* F16/BF16 workspaces hold only GEMM panels */
      /* the kernels align the workspace to 64 bytes; compare from there */
      const uint8_t *a0 = work[0] + ((64 - (uintptr_t)work[0] % 64) % 64);
      const uint8_t *al = work[l] + ((64 - (uintptr_t)work[l] % 64) % 64);
      const int same = memcmp(a0, al, (size_t)n_tok * il__act_stride(t, n_in)) == 0;
      if (!same)
        fprintf(stderr, "  %s: quantized activations differ between scalar and %s (n_in=%lld n_tok=%lld)\n",
                il_dtype_name(t), table_names[l], (long long)n_in, (long long)n_tok);
      IL_CHECK(same);
    }
  }
  free(wd);
out:
  for (int l = 0; l <= det; l++) {
    free(y[l]);
    free(work[l]);
    free(yp[l]);
    free(pk[l]);
  }
  free(w);
  free(x);
}

static void test_shapes(const il_dtype *types, size_t n_types) {
  /* 160, 224: 32-blocks in groups of 4 plus 1 or 3 trailing ones (the Q4 activation order's
   * tail) and an odd count (the AVX2 Q8_0 kernel's last single block) */
  const int64_t n_ins[] = {1, 7, 33, 100, 32, 64, 96, 160, 224, 256, 512, 768, 2048};
  const int64_t n_outs[] = {1, 3, 17, 64, 100};
  const int64_t n_toks[] = {1, 2, 5, 16, 33};
  for (size_t ti = 0; ti < n_types; ti++) {
    const il_dtype t = types[ti];
    const int blck = (int)il_dtype_get(t)->blck;
    stats st = {0};
    int cases = 0;
    for (size_t a = 0; a < sizeof n_ins / sizeof *n_ins; a++) {
      if (n_ins[a] % blck) continue;
      for (size_t b = 0; b < sizeof n_outs / sizeof *n_outs; b++)
        for (size_t c = 0; c < sizeof n_toks / sizeof *n_toks; c++) {
          /* keep the big corner small enough for the sanitizer build */
          if (n_ins[a] >= 768 && n_outs[b] >= 64 && n_toks[c] >= 16) continue;
          const int variant = (int)(a * 31 + b * 7 + c);
          run_case(t, n_ins[a], n_outs[b], n_toks[c], 1 + variant % 3, variant, &st);
          cases++;
        }
    }
    printf("%-5s %4d shapes, worst SIMD-vs-scalar error %.2e of sum|w*x|\n", il_dtype_name(t), cases,
           st.max_err_rel);
  }
}

/* The blocked GEMM (batches of il__gemm_min_tok tokens or more) on every level against the
 * scalar kernels: every batch size 1..70 (tiles of 2, 3, 5, 6 tokens and their remainders,
 * token slices), random row counts (panels of 32 with 1..31 rows left, halves of 16) and
 * random n_in (Q4_0's and Q4_1's trailing blocks when n_in/32 is not a multiple of 4; any n_in for F16 and
 * BF16), and each type's il__gemm_min_tok - 1, + 0 and + 1 tokens on 49 rows (a full panel and
 * one of 17: a second half of one row). The F16/BF16 GEMM keeps F32 activations, so it meets the same 1e-5 bound. */
static void test_gemm_batches(void) {
  const il_dtype types[] = {IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K,
                            IL_DTYPE_Q6_K, IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q5_0, IL_DTYPE_IQ4_NL};
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
    stats st = {0};
    int cases = 0;
    const int64_t blck = il_dtype_get(types[ti])->blck;
    for (int64_t n_tok = 1; n_tok <= 70; n_tok++) {
      /* F16/BF16 (blck 1): any n_in up to 1100, odd ones included */
      const int64_t n_in = blck * (1 + (int64_t)(fabsf(il_test_randf(&rng)) * (blck == 32 ? 23 : blck == 1 ? 1100 : 4)));
      const int64_t n_out = 1 + (int64_t)(fabsf(il_test_randf(&rng)) * 99);
      run_case(types[ti], n_in, n_out, n_tok, 1 + (int)(n_tok % 3), (int)n_tok, &st);
      cases++;
    }
    /* a panel count below 4 per thread with many tokens: token slices */
    run_case(types[ti], 256, 40, 64, 2, 1, &st);
    run_case(types[ti], blck == 256 ? 512 : 96, 7, 70, 3, 2, &st);
    /* BF16 with BF16-exact activations (vdpbf16ps where the CPU has it), and with one inexact
     * element in the last token (back to F32 FMAs), odd n_in and token tails included */
    for (x_bf16 = 1; x_bf16 <= 2 && types[ti] == IL_DTYPE_BF16; x_bf16++)
      for (int64_t n_tok = IL__GEMM_MIN_TOK_BF16_DOT - 1; n_tok <= 70; n_tok += 3) {
        const int64_t n_in = 1 + (int64_t)(fabsf(il_test_randf(&rng)) * 700);
        run_case(types[ti], n_in, 1 + (int64_t)(fabsf(il_test_randf(&rng)) * 99), n_tok, 1 + (int)(n_tok % 3),
                 (int)n_tok, &st);
        cases++;
      }
    x_bf16 = 0;
    /* both sides of the threshold with a full panel and one of 17 rows (a 1-row second half) */
    for (int plain = 0; plain < 2; plain++) { /* the thresholds of tables with and without vpdpbusd */
      const int64_t mt = il__gemm_min_tok(types[ti], plain);
      for (int64_t n_tok = mt - 1; n_tok <= mt + 1; n_tok++)
        run_case(types[ti], blck == 256 ? 768 : 128, 49, n_tok, 2, (int)n_tok, &st);
    }
    cases += 8;
    printf("%-5s GEMM %3d shapes (batches 1..70), worst SIMD-vs-scalar error %.2e of sum|w*x|\n",
           il_dtype_name(types[ti]), cases, st.max_err_rel);
  }
}

/* The AVX2 panel packer the kernels use against the plain C one, byte for byte. */
static void test_gemm_pack(void) {
  if (!il_cpu_isa_kernels(IL_ISA_AVX2)) {
    printf("note: AVX2 panel packer not exercised on this CPU\n");
    return;
  }
  const il_dtype types[] = {IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1, IL_DTYPE_Q5_K, IL_DTYPE_F16, IL_DTYPE_BF16};
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
    for (int k = 0; k < 12; k++) {
      const il_dtype t = types[ti];
      const uint32_t blck = il_dtype_get(t)->blck;
      const int64_t n_in = blck == 1 ? 1 + k * 37 % 83 : blck == 256 ? 256 * (1 + k % 4) : 32 * (1 + k * 5 % 13), n_out = 1 + k * 17 % 70, r0 = k % 3 == 0 ? 0 : 32 * (n_out / 64);
      const size_t stride = il_dtype_row_size(t, n_in) + (size_t)(k % 4);
      uint8_t *w = malloc(stride * (size_t)n_out);
      make_weights(t, w, stride, n_out, n_in, k);
      const size_t ps = il__gemm_panel_size(t, n_in);
      uint8_t *p0 = il_mem_alloc(IL_MEM_OTHER, ps, "panel"), *p1 = il_mem_alloc(IL_MEM_OTHER, ps, "panel");
      memset(p0, 0x11, ps);
      memset(p1, 0x22, ps);
      const il__mm_args a = {.type = t, .w = w, .w_stride = stride, .n_out = n_out, .n_in = n_in};
      const uint8_t flip = k % 2 ? 0x80 : 0;
      il__gemm_pack(&a, r0, p0, flip);
      il__gemm_avx2_pack(&a, r0, p1, flip);
      /* a BF16 panel's room for an odd row's pad is the pair layout's (below) */
      const int same = memcmp(p0, p1, t == IL_DTYPE_BF16 ? 64 * (size_t)n_in : ps) == 0;
      if (!same)
        fprintf(stderr, "  %s panel differs: n_in=%lld n_out=%lld r0=%lld flip=%d\n", il_dtype_name(t), (long long)n_in,
                (long long)n_out, (long long)r0, flip);
      IL_CHECK(same);
      if (t == IL_DTYPE_BF16 && il_cpu_isa_kernels(IL_ISA_AVX512)) { /* the pair layout */
        memset(p0, 0x11, ps);
        memset(p1, 0x22, ps);
        il__gemm_pack_bf16_pairs(&a, r0, p0);
        il__gemm_avx512_pack_bf16_pairs(&a, r0, p1);
        const int same2 = memcmp(p0, p1, ps) == 0;
        if (!same2)
          fprintf(stderr, "  bf16 pair panel differs: n_in=%lld n_out=%lld r0=%lld\n", (long long)n_in,
                  (long long)n_out, (long long)r0);
        IL_CHECK(same2);
      }
      il_mem_free(p0);
      il_mem_free(p1);
      free(w);
    }
}

/* A token's outputs do not depend on the tile that computed them: three tokens in one call
 * (row tiles of 4, token tiles of 2-4) and each token alone (on AMD, rows of 1024 or more run
 * one row at a time) give the same bits, on every level and type. Decoding one token at a time
 * must reproduce a batch exactly (tests/test_kv_engine.c relies on it end to end). */
static void test_one_vs_batch(void) {
  const il_dtype types[] = {IL_DTYPE_F32,  IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                            IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K, IL_DTYPE_Q5_0,
                            IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
  const int64_t n_in = 2048, n_out = 37, n_tok = 3;
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
    const il_dtype t = types[ti];
    const size_t stride = il_dtype_row_size(t, n_in);
    uint8_t *w = malloc(stride * (size_t)n_out);
    make_weights(t, w, stride, n_out, n_in, 0);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok)), *yb = malloc(sizeof(float) * (size_t)(n_out * n_tok)),
          *y1 = malloc(sizeof(float) * (size_t)n_out);
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = il_test_randf(&rng);
    const size_t ws = il_cpu_matmul_work_size(t, n_in, n_tok, 2);
    uint8_t *work = ws ? malloc(ws) : NULL;
    for (int l = 0; l < n_tables; l++) {
      IL_CHECK_OK(il_cpu_matmul(pools[2], tables[l], t, w, stride, n_out, n_in, x, n_tok, yb, n_out, work));
      int same = 1;
      for (int64_t tk = 0; tk < n_tok; tk++) {
        IL_CHECK_OK(il_cpu_matmul(pools[2], tables[l], t, w, stride, n_out, n_in, x + tk * n_in, 1, y1, n_out, work));
        same &= memcmp(y1, yb + tk * n_out, sizeof(float) * (size_t)n_out) == 0;
      }
      if (!same) fprintf(stderr, "  %s %s: one token alone differs from the same token in a batch of 3\n", il_dtype_name(t),
                         table_names[l]);
      IL_CHECK(same);
    }
    free(work);
    free(w), free(x), free(yb), free(y1);
  }
}

static void test_errors(void) {
  float x[64] = {0}, y[4];
  uint8_t w[256] = {0};
  IL_CHECK_INT(il_cpu_matmul(pools[1], NULL, IL_DTYPE_Q4_0, w, 18, 1, 33, x, 1, y, 1, w), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_cpu_matmul(pools[1], NULL, (il_dtype)10, w, 18, 1, 32, x, 1, y, 1, w), IL_ERR_UNSUPPORTED);
  IL_CHECK_INT(il_cpu_matmul(pools[1], NULL, IL_DTYPE_Q8_0, w, 10, 1, 32, x, 1, y, 1, w), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_cpu_matmul(pools[1], NULL, IL_DTYPE_Q8_0, w, 34, 1, 32, x, 1, y, 1, NULL), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_cpu_matmul(pools[1], NULL, IL_DTYPE_F32, w, 128, 2, 32, x, 2, y, 1, NULL), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "ldy");
  IL_CHECK_OK(il_cpu_matmul(pools[1], NULL, IL_DTYPE_F32, w, 128, 0, 32, x, 1, y, 1, NULL));
  IL_CHECK(!il_cpu_matmul_supported((il_dtype)5));
  IL_CHECK(il_cpu_matmul_supported(IL_DTYPE_Q6_K));
  IL_CHECK_INT(il_cpu_matmul_work_size(IL_DTYPE_F16, 64, 3, 1), 0);
  IL_CHECK_INT(il_cpu_matmul_work_size(IL_DTYPE_F32, 64, 512, 1), 0);
  /* F16 batches for the GEMM: one 32-row panel of 64 * n_in bytes per thread */
  IL_CHECK(il_cpu_matmul_work_size(IL_DTYPE_F16, 64, IL__GEMM_MIN_TOK_F16, 2) >= 2 * 64 * 64);
  IL_CHECK(il_cpu_matmul_work_size(IL_DTYPE_Q4_0, 64, 3, 1) >= 3 * (64 + 8));
  /* NULL pool runs on the caller */
  float xx[32], yy[1];
  for (int i = 0; i < 32; i++) xx[i] = 1.0f;
  float wf[32];
  for (int i = 0; i < 32; i++) wf[i] = (float)i;
  IL_CHECK_OK(il_cpu_matmul(NULL, NULL, IL_DTYPE_F32, wf, 128, 1, 32, xx, 1, yy, 1, NULL));
  IL_CHECK_NEAR(yy[0], 496.0, 1e-4);
  /* --repack: no panel layout on the scalar table, for F32 or BF16; the copy must be aligned;
   * repacked and plain parts do not mix in one call; repacked weights need a table with their GEMM */
  static _Alignas(64) uint8_t pk[4096];
  IL_CHECK_INT(il_cpu_matmul_packed_size(&il__matmul_scalar, IL_DTYPE_Q8_0, 1, 32), 0);
  IL_CHECK_INT(il_cpu_matmul_pack(pools[1], &il__matmul_scalar, IL_DTYPE_Q8_0, w, 34, 1, 32, pk), IL_ERR_UNSUPPORTED);
  IL_CHECK_CONTAINS(il_error_detail(), "q8_0");
  const il__kernels *k2 = il_cpu_isa_kernels(IL_ISA_AVX2);
  if (k2) {
    IL_CHECK_INT(il_cpu_matmul_packed_size(k2, IL_DTYPE_F32, 1, 32), 0);
    IL_CHECK_INT(il_cpu_matmul_packed_size(k2, IL_DTYPE_BF16, 1, 32), 0);
    IL_CHECK_INT(il_cpu_matmul_packed_size(k2, IL_DTYPE_Q8_0, 33, 32), 2 * il__align64(il__gemm_panel_size(IL_DTYPE_Q8_0, 32)));
    IL_CHECK_INT(il_cpu_matmul_pack(pools[1], k2, IL_DTYPE_Q8_0, w, 34, 1, 32, pk + 1), IL_ERR_INVALID_ARG);
    IL_CHECK_OK(il_cpu_matmul_pack(pools[1], k2, IL_DTYPE_Q8_0, w, 34, 1, 32, pk));
    const il_cpu_mm_part mixed[2] = {{w, 34, 1, y, 1, pk}, {w, 34, 1, y + 1, 1, NULL}};
    IL_CHECK_INT(il_cpu_matmul_multi(pools[1], k2, IL_DTYPE_Q8_0, 2, mixed, 32, x, 1, w + 128), IL_ERR_INVALID_ARG);
    IL_CHECK_INT(il_cpu_matmul_multi(pools[1], &il__matmul_scalar, IL_DTYPE_Q8_0, 1, mixed, 32, x, 1, w + 128), IL_ERR_INVALID_ARG);
  } else {
    printf("note: no AVX2 table on this CPU: repacking's errors on it not exercised\n");
  }
}

static void test_isa(void) {
  const il_isa det = il_cpu_isa_detected();
  printf("isa detected %s, best with kernels %s, compiled %s\n", il_isa_name(det), il_isa_name(il_cpu_isa_best()),
         il_cpu_isa_compiled());
  IL_CHECK(strncmp(il_cpu_isa_compiled(), "scalar", 6) == 0);
  IL_CHECK(il_cpu_isa_kernels(IL_ISA_SCALAR) == &il__matmul_scalar);
  IL_CHECK((il_cpu_isa_kernels(IL_ISA_AVX512) != NULL) == (det >= IL_ISA_AVX512 && il__matmul_avx512.compiled));
  IL_CHECK(il_cpu_isa_best() <= det);
  IL_CHECK_STR(il_isa_name(IL_ISA_AVX2), "avx2");
  il_isa parsed;
  IL_CHECK(il_isa_parse("avx512", &parsed) && parsed == IL_ISA_AVX512);
  IL_CHECK(!il_isa_parse("avx3", &parsed));
  if (det < IL_ISA_AVX512) printf("note: AVX-512 kernels not exercised on this CPU\n");
  /* the GEMM-less tables (IL_CPU_GEMM=0): same kernels, no GEMM entries */
  for (int i = IL_ISA_SCALAR; i <= IL_ISA_AVX512; i++) {
    const il__kernels *k = il_cpu_isa_kernels((il_isa)i), *tk = il_cpu_isa_kernels_tiles((il_isa)i);
    IL_CHECK((k == NULL) == (tk == NULL));
    if (!k) continue;
    IL_CHECK(memcmp(k->rows, tk->rows, sizeof k->rows) == 0 && memcmp(k->quant, tk->quant, sizeof k->quant) == 0);
    for (int t = 0; t < IL_DTYPE_COUNT; t++) IL_CHECK(tk->gemm[t] == NULL);
  }
  if (il_cpu_isa_kernels(IL_ISA_AVX512)) IL_CHECK(il_cpu_isa_kernels(IL_ISA_AVX512)->gemm[IL_DTYPE_Q8_0] != NULL);
  if (il_cpu_isa_kernels(IL_ISA_AVX2)) IL_CHECK(il_cpu_isa_kernels(IL_ISA_AVX2)->gemm[IL_DTYPE_BF16] != NULL);
  /* IL_CPU_AVXVNNI=0's table: AVX2 without vpdpbusd, on any AVX2 CPU */
  IL_CHECK((il_cpu_isa_kernels_avx2_plain() != NULL) == (il_cpu_isa_kernels(IL_ISA_AVX2) != NULL));
  if (il_cpu_isa_kernels_avx2_plain()) IL_CHECK(il_cpu_isa_kernels_avx2_plain()->plain_int8);
}

int main(void) {
  il_cpu_matmul_par_min(0); /* every shape also runs on 2 and 3 threads (the default keeps small ones on one) */
  for (int n = 1; n <= 3; n++) IL_CHECK_OK(il_pool_new(n, &pools[n]));
  add_table(&il__matmul_scalar, "scalar");
  if (il_cpu_isa_kernels(IL_ISA_AVX2)) {
    add_table(il_cpu_isa_kernels(IL_ISA_AVX2), il_cpu_features_get()->avxvnni ? "avx2-vnni" : "avx2");
    add_table(&il__matmul_avx2, "avx2-plain"); /* the GEMM for AVX2 CPUs without AVX-VNNI */
  }
  if (il_cpu_isa_kernels(IL_ISA_AVX512)) {
    add_table(il_cpu_isa_kernels(IL_ISA_AVX512), "avx512");
    /* the Q4 kernels for AVX-512 CPUs without VBMI (and without GFNI) run here too */
    if (il_cpu_features_get()->gfni) add_table(&il__matmul_avx512_gfni, "avx512-gfni");
    add_table(&il__matmul_avx512, "avx512-plain");
  }
  test_isa();
  test_one_vs_batch();
  test_errors();
  const il_dtype all[] = {IL_DTYPE_F32,  IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                          IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K, IL_DTYPE_Q5_0,
                          IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
  test_shapes(all, sizeof all / sizeof *all);
  /* with the default threshold the small shapes take the one-call path (no chunk list) */
  il_cpu_matmul_par_min(1 << 17);
  const il_dtype some[] = {IL_DTYPE_F32, IL_DTYPE_F16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_K};
  test_shapes(some, sizeof some / sizeof *some);
  il_cpu_matmul_par_min(0);
  test_gemm_pack();
  test_gemm_batches();
  printf("repacked (--repack): %d table x shape cases\n", n_repacked);
  IL_CHECK(n_repacked > 0 || !il_cpu_isa_kernels(IL_ISA_AVX2));
  for (int n = 1; n <= 3; n++) il_pool_free(pools[n]);
  return il_test_finish();
}
