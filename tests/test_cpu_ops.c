/* tests/test_cpu_ops: the CPU backend's fused matmul and its vectorised ops.
 *
 * il_cpu_matmul_multi (Q,K,V or gate+up sharing one quantized input) must give bit-identical
 * outputs to separate il_cpu_matmul calls, for several types, thread counts and token counts.
 * The AVX-512 attention-head and the AVX-512 and AVX2 SwiGLU kernels must match a
 * double-precision reference, including head sizes that are not multiples of the vector width
 * and extreme gate values.
 * The AVX2 + F16C F32 <-> F16/BF16 row conversions must equal the scalar ones bit for bit.
 */
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/quant.h"
#include "harness.h"
#include "memory/mem.h"

static void test_matmul_multi(void) {
  const il_dtype types[] = {IL_DTYPE_F16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_F32};
  const int64_t n_in = 512, outs[3] = {200, 36, 64}, toks[] = {1, 3, 17};
  for (int th = 1; th <= 2; th++) {
    il_pool *pool;
    IL_CHECK_OK(il_pool_new(th, &pool));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
      const il_dtype t = types[ti];
      const size_t rs = il_dtype_row_size(t, n_in);
      void *w[3];
      float src[512];
      for (int p = 0; p < 3; p++) {
        w[p] = malloc(rs * (size_t)outs[p]);
        for (int64_t r = 0; r < outs[p]; r++) {
          for (int64_t k = 0; k < n_in; k++) src[k] = sinf((float)(r * 7 + k * 13 + p * 101) * 0.37f);
          if (t == IL_DTYPE_Q4_K) { /* no quantizer for K-quants: random bytes with small scales */
            uint64_t s = (uint64_t)(r * 31 + p);
            for (size_t b = 0; b < rs; b++) ((uint8_t *)w[p])[r * rs + b] = (uint8_t)(il_test_randf(&s) * 127 + 128);
            for (size_t blk = 0; blk < rs / sizeof(il_block_q4_K); blk++) {
              il_block_q4_K *q = (il_block_q4_K *)((char *)w[p] + r * rs) + blk;
              q->d = il_f32_to_fp16(0.01f);
              q->dmin = il_f32_to_fp16(0.002f);
            }
          } else {
            IL_CHECK_OK(il_quantize_row(t, src, (char *)w[p] + r * rs, n_in));
          }
        }
      }
      for (size_t ki = 0; ki < 3; ki++) {
        const int64_t nt = toks[ki];
        float *x = malloc(sizeof(float) * (size_t)(n_in * nt));
        for (int64_t i = 0; i < n_in * nt; i++) x[i] = cosf((float)i * 0.11f);
        void *work = malloc(il_cpu_matmul_work_size(t, n_in, nt, il_pool_size(pool)) + 64);
        il_cpu_mm_part parts[3];
        float *y1[3], *y2[3];
        for (int p = 0; p < 3; p++) {
          y1[p] = calloc((size_t)(outs[p] * nt), 4);
          y2[p] = calloc((size_t)(outs[p] * nt), 4);
          IL_CHECK_OK(il_cpu_matmul(pool, il_cpu_isa_kernels(il_cpu_isa_best()), t, w[p], rs, outs[p], n_in, x, nt, y1[p], outs[p], work));
          parts[p] = (il_cpu_mm_part){w[p], rs, outs[p], y2[p], outs[p], NULL};
        }
        IL_CHECK_OK(il_cpu_matmul_multi(pool, il_cpu_isa_kernels(il_cpu_isa_best()), t, 3, parts, n_in, x, nt, work));
        for (int p = 0; p < 3; p++) {
          int same = memcmp(y1[p], y2[p], 4 * (size_t)(outs[p] * nt)) == 0;
          if (!same) fprintf(stderr, "multi != single: %s, %d threads, %lld tokens, part %d\n", il_dtype_name(t), th, (long long)nt, p);
          IL_CHECK(same);
          free(y1[p]), free(y2[p]);
        }
        free(x), free(work);
      }
      for (int p = 0; p < 3; p++) free(w[p]);
    }
    il_pool_free(pool);
  }
}

/* swiglu against double precision at every length around the vector widths, with gates far
 * past exp's overflow (-200: the result is 0 here, -0 in libm's expf, tiny either way; 200)
 * and past its subnormals (+-100, +-90). */
static void check_swiglu(const char *level, il__swiglu_fn swiglu) {
  double worst_sw = 0;
  int nan = 0, bad_edge = 0;
  float g[1000], u[1000], g0[1000];
  for (int n = 1; n < 1000; n += 37) {
    for (int i = 0; i < n; i++) g[i] = (i - n / 2) * 0.25f, u[i] = 1.5f;
    g[0] = -200;
    if (n > 1) g[1] = 200;
    if (n > 5) g[2] = -100, g[3] = 100, g[4] = -90, g[5] = 90;
    memcpy(g0, g, sizeof(float) * (size_t)n);
    swiglu(g, u, n);
    for (int i = 0; i < n; i++) {
      double r = g0[i] / (1.0 + exp(-(double)g0[i])) * 1.5;
      nan += isnan(g[i]);
      if (fabs(r) > 1e-30) worst_sw = fmax(worst_sw, fabs(r - g[i]) / fabs(r));
      else bad_edge += !(fabs(g[i]) < 1e-30f); /* silu of a large negative gate: (about) zero */
    }
  }
  printf("swiglu %s: worst relative error %.3g\n", level, worst_sw);
  IL_CHECK_INT(nan, 0);
  IL_CHECK_INT(bad_edge, 0);
  IL_CHECK_NEAR(worst_sw, 0, 1e-5);
}

static void test_ops_avx512(void) {
  if (!il__ops_avx512.compiled || il_cpu_isa_detected() < IL_ISA_AVX512) {
    printf("SKIP (part): no AVX-512 on this CPU or in this build: vectorised ops not checked\n");
    return;
  }
  const int hds[] = {8, 16, 40, 64, 80, 128, 200, 256, 300}, nps[] = {1, 2, 15, 16, 17, 100};
  const size_t stride = 320;
  float *q = malloc(4 * 300), *k = malloc(4 * stride * 100), *v = malloc(4 * stride * 100), *o = malloc(4 * 300),
        *sc = malloc(4 * 100);
  for (int i = 0; i < 300; i++) q[i] = sinf(i * 0.7f);
  for (size_t i = 0; i < stride * 100; i++) k[i] = cosf(i * 0.31f) * 2, v[i] = sinf(i * 0.13f);
  double worst = 0;
  for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
    for (size_t b = 0; b < sizeof nps / sizeof *nps; b++) {
      const int hd = hds[a], np = nps[b];
      il__ops_avx512.attn_head(o, q, k, v, stride, hd, np, 1.0f / sqrtf((float)hd), sc);
      double s[100], mx = -1e30, sum = 0;
      for (int p = 0; p < np; p++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)q[i] * k[p * stride + i];
        s[p] = d / sqrt(hd);
        if (s[p] > mx) mx = s[p];
      }
      for (int p = 0; p < np; p++) sum += s[p] = exp(s[p] - mx);
      for (int i = 0; i < hd; i++) {
        double r = 0;
        for (int p = 0; p < np; p++) r += s[p] / sum * v[p * stride + i];
        worst = fmax(worst, fabs(r - o[i]));
      }
    }
  printf("attention head: worst |error| %.3g\n", worst);
  IL_CHECK_NEAR(worst, 0, 1e-5);
  free(q), free(k), free(v), free(o), free(sc);
  check_swiglu("avx512", il__ops_avx512.swiglu);
}

/* The AVX2 SwiGLU, as the AVX-512 one (the AVX2 level of every CPU that has it). */
static void test_ops_avx2(void) {
  if (!il__ops_avx2.compiled || il_cpu_isa_detected() < IL_ISA_AVX2) {
    printf("SKIP (part): no AVX2 on this CPU or in this build: AVX2 swiglu not checked\n");
    return;
  }
  check_swiglu("avx2", il__ops_avx2.swiglu);
}

/* The AVX2 + F16C row conversions (copy's and the KV store's): bit for bit the scalar ones, at
 * every length around the vector width (ties, subnormals, overflow to inf, signs, NaN). */
static void test_cvt_avx2(void) {
  if (!il__cvt_avx2.compiled || il_cpu_isa_detected() < IL_ISA_AVX2) {
    printf("SKIP (part): no AVX2 on this CPU or in this build: vectorised conversions not checked\n");
    return;
  }
  float x[300], back[300];
  uint16_t h[300];
  int bad = 0;
  for (int n = 1; n < 300; n += 23) {
    for (int i = 0; i < n; i++) x[i] = ldexpf(sinf(i * 1.7f + n), i % 50 - 30);
    x[0] = 65519.0f, x[n - 1] = -70000.0f;
    if (n > 7) x[1] = 1.0f + 1.0f / 2048, x[2] = 5.96e-8f * 2.5f, x[3] = -0.0f, x[4] = NAN, x[5] = 1.01171875f, x[6] = 1.00146484375f;
    for (int bf = 0; bf < 2; bf++) {
      (bf ? il__cvt_avx2.f32_to_bf16 : il__cvt_avx2.f32_to_f16)(h, x, n);
      (bf ? il__cvt_avx2.bf16_to_f32 : il__cvt_avx2.f16_to_f32)(back, h, n);
      for (int i = 0; i < n; i++) {
        const uint16_t want = bf ? il_f32_to_bf16(x[i]) : il_f32_to_fp16(x[i]);
        const float wb = bf ? il_bf16_to_f32(want) : il_fp16_to_f32(want);
        const bool ok = isnan(x[i]) ? isnan(back[i]) : h[i] == want && memcmp(&back[i], &wb, 4) == 0;
        if (!ok && !bad++)
          fprintf(stderr, "%s(%g) = 0x%04x, scalar 0x%04x\n", bf ? "f32_to_bf16" : "f32_to_f16", x[i], h[i], want);
      }
    }
  }
  IL_CHECK_INT(bad, 0);
}

int main(void) {
  il_cpu_matmul_par_min(0); /* small shapes run threaded too */
  test_matmul_multi();
  test_ops_avx512();
  test_ops_avx2();
  test_cvt_avx2();
  return il_test_finish();
}
