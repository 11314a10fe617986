/* tests/test_quant: the reference conversions of core/quant and the fp16/bf16 helpers.
 *
 * - Hand-built blocks of every type, including the K-quants' packed 6-bit scales, decode to
 *   values worked out by hand from the GGML layouts.
 * - Quantizing known blocks gives the bytes ggml's reference quantizers produce.
 * - dequantize(quantize(x)) stays within each format's rounding bound, block by block.
 * - fp16: every one of the 65536 bit patterns survives fp16 -> f32 -> fp16 (NaNs stay NaN),
 *   and every midpoint between neighbours rounds to even; bf16 the same for its 65536.
 * - Errors: bad lengths and unsupported types.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/quant.h"
#include "harness.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t h(float f) { return il_f32_to_fp16(f); }

static void test_fp16_exhaustive(void) {
  int bad_round_trip = 0, bad_ties = 0, bad_neighbours = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    const float f = il_fp16_to_f32((uint16_t)u);
    const uint16_t back = il_f32_to_fp16(f);
    if (isnan(f)) {
      if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0 || (back & 0x8000) != (u & 0x8000)) bad_round_trip++;
      continue;
    }
    if (back != u) {
      if (bad_round_trip++ < 3) fprintf(stderr, "  fp16 %04x -> %g -> %04x\n", u, (double)f, back);
    }
    /* the midpoint towards the next larger magnitude, when that is finite */
    if ((u & 0x7fff) < 0x7bff) {
      const float g = il_fp16_to_f32((uint16_t)(u + 1));
      const float mid = (float)(((double)f + (double)g) / 2); /* exact: 12 significant bits */
      const uint16_t want = (u & 1) ? (uint16_t)(u + 1) : (uint16_t)u;
      if (il_f32_to_fp16(mid) != want) {
        if (bad_ties++ < 3) fprintf(stderr, "  fp16 tie %g -> %04x, want %04x\n", (double)mid, il_f32_to_fp16(mid), want);
      }
      const float above = nextafterf(mid, g > 0 ? INFINITY : -INFINITY), below = nextafterf(mid, f);
      if (il_f32_to_fp16(above) != (uint16_t)(u + 1) || il_f32_to_fp16(below) != (uint16_t)u) bad_neighbours++;
    }
  }
  IL_CHECK_INT(bad_round_trip, 0);
  IL_CHECK_INT(bad_ties, 0);
  IL_CHECK_INT(bad_neighbours, 0);
  /* edges */
  IL_CHECK_INT(h(1.0f), 0x3c00);
  IL_CHECK_INT(h(-2.0f), 0xc000);
  IL_CHECK_INT(h(65504.0f), 0x7bff);
  IL_CHECK_INT(h(65519.99f), 0x7bff);
  IL_CHECK_INT(h(65520.0f), 0x7c00); /* rounds up to inf */
  IL_CHECK_INT(h(1e10f), 0x7c00);
  IL_CHECK_INT(h(-INFINITY), 0xfc00);
  IL_CHECK_INT(h(ldexpf(1.0f, -24)), 0x0001);  /* smallest subnormal */
  IL_CHECK_INT(h(ldexpf(1.0f, -25)), 0x0000);  /* tie between 0 and 2^-24: even */
  IL_CHECK_INT(h(ldexpf(3.0f, -25)), 0x0002);  /* tie between 1 and 2 ulps: even */
  IL_CHECK_INT(h(ldexpf(1.0f, -14)), 0x0400);  /* smallest normal */
  IL_CHECK_INT(h(-0.0f), 0x8000);
  IL_CHECK(isnan(il_fp16_to_f32(h(NAN))));
  IL_CHECK_NEAR(il_fp16_to_f32(0x0001), ldexp(1.0, -24), 0);
  IL_CHECK_NEAR(il_fp16_to_f32(0x03ff), ldexp(1023.0, -24), 0);
  IL_CHECK(isinf(il_fp16_to_f32(0x7c00)));
}

static void test_bf16(void) {
  int bad = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    const float f = il_bf16_to_f32((uint16_t)u);
    const uint16_t back = il_f32_to_bf16(f);
    if (isnan(f) ? !isnan(il_bf16_to_f32(back)) : back != u) bad++;
  }
  IL_CHECK_INT(bad, 0);
  IL_CHECK_INT(il_f32_to_bf16(1.0f), 0x3f80);
  IL_CHECK_INT(il_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);      /* tie: even */
  IL_CHECK_INT(il_f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3f82);      /* tie: even (up) */
  IL_CHECK_INT(il_f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)), 0x3f81);
  IL_CHECK_INT(il_f32_to_bf16(INFINITY), 0x7f80);
  IL_CHECK_INT(il_f32_to_bf16(-0.0f), 0x8000);
  IL_CHECK(isnan(il_bf16_to_f32(il_f32_to_bf16(NAN))));
  IL_CHECK_INT(il_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds to inf like ggml */
}

static void test_hand_blocks(void) {
  float y[256];
  /* F16 / BF16 rows */
  uint8_t f16[4];
  put16(f16, 0x3c00);
  put16(f16 + 2, 0xc500); /* -5 */
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_F16, f16, y, 2));
  IL_CHECK_NEAR(y[0], 1.0, 0);
  IL_CHECK_NEAR(y[1], -5.0, 0);
  put16(f16, 0x3f80);
  put16(f16 + 2, 0xc0a0); /* -5 */
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_BF16, f16, y, 2));
  IL_CHECK_NEAR(y[0], 1.0, 0);
  IL_CHECK_NEAR(y[1], -5.0, 0);

  il_block_q8_0 q8 = {.d = 0x3800}; /* 0.5 */
  for (int j = 0; j < 32; j++) q8.qs[j] = (int8_t)(j * 8 - 128);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q8_0, &q8, y, 32));
  IL_CHECK_NEAR(y[0], -64.0, 0);
  IL_CHECK_NEAR(y[31], (31 * 8 - 128) * 0.5, 0);

  il_block_q4_0 q40 = {.d = 0x4000}; /* 2.0 */
  memset(q40.qs, 0x88, 16);
  q40.qs[0] = 0x1f;
  q40.qs[15] = 0x70;
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q4_0, &q40, y, 32));
  IL_CHECK_NEAR(y[0], 14.0, 0);   /* (15 - 8) * 2 */
  IL_CHECK_NEAR(y[16], -14.0, 0); /* (1 - 8) * 2 */
  IL_CHECK_NEAR(y[15], -16.0, 0);
  IL_CHECK_NEAR(y[31], -2.0, 0);
  IL_CHECK_NEAR(y[5], 0.0, 0);

  il_block_q4_1 q41 = {.d = 0x3c00, .m = 0xc200}; /* 1, -3 */
  memset(q41.qs, 0x52, 16);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q4_1, &q41, y, 32));
  IL_CHECK_NEAR(y[3], -1.0, 0); /* 2 - 3 */
  IL_CHECK_NEAR(y[19], 2.0, 0); /* 5 - 3 */

  /* Q4_K: d = 1, dmin = 0.5; sub-block 0: sc 3, m 2; 1: sc 5, m 4; 4: sc = 1 | (1 << 4) = 17
   * (low nibble of scales[8], top bits of scales[0]), m = 2 | (2 << 4) = 34. */
  il_block_q4_K k4;
  memset(&k4, 0, sizeof k4);
  k4.d = 0x3c00;
  k4.dmin = 0x3800;
  const uint8_t sc[12] = {0x43, 5, 7, 9, 0x82, 4, 6, 8, 0x21, 0, 0, 0};
  memcpy(k4.scales, sc, 12);
  k4.qs[0] = 0x5a;  /* element 0 (sub 0): 10; element 32 (sub 1): 5 */
  k4.qs[64] = 0x0c; /* element 128 (sub 4): 12 */
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q4_K, &k4, y, 256));
  IL_CHECK_NEAR(y[0], 3 * 10 - 0.5 * 2, 0);
  IL_CHECK_NEAR(y[32], 5 * 5 - 0.5 * 4, 0);
  IL_CHECK_NEAR(y[128], 17 * 12 - 0.5 * 34, 0);
  IL_CHECK_NEAR(y[1], -0.5 * 2, 0);

  /* Q5_K: same scales; qh[0] bits 0, 1, 4 add 16 to elements 0, 32, 128 */
  il_block_q5_K k5;
  memset(&k5, 0, sizeof k5);
  k5.d = 0x3c00;
  k5.dmin = 0x3800;
  memcpy(k5.scales, sc, 12);
  k5.qs[0] = 0x5a;
  k5.qs[64] = 0x0c;
  k5.qh[0] = 0x13;
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q5_K, &k5, y, 256));
  IL_CHECK_NEAR(y[0], 3 * 26 - 0.5 * 2, 0);
  IL_CHECK_NEAR(y[32], 5 * 21 - 0.5 * 4, 0);
  IL_CHECK_NEAR(y[128], 17 * 28 - 0.5 * 34, 0);
  IL_CHECK_NEAR(y[64], 7 * 0 - 0.5 * 6, 0); /* sub 2: sc 7, m 6 */

  /* Q6_K: d = 0.25, 6-bit q = low nibble | 2 high bits << 4, minus 32 */
  il_block_q6_K k6;
  memset(&k6, 0, sizeof k6);
  k6.d = 0x3400;
  k6.scales[0] = -2;
  k6.scales[2] = 3;
  k6.scales[4] = 5;
  k6.scales[6] = 7;
  k6.scales[8] = -1;
  k6.ql[0] = 0x3a;
  k6.ql[32] = 0x71;
  k6.qh[0] = 0xe4; /* 2-bit fields 0, 1, 2, 3 for elements 0, 32, 64, 96 */
  k6.ql[64] = 0x05;
  k6.qh[32] = 0x03;
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q6_K, &k6, y, 256));
  IL_CHECK_NEAR(y[0], 0.25 * -2 * (10 - 32), 0);
  IL_CHECK_NEAR(y[32], 0.25 * 3 * (17 - 32), 0);
  IL_CHECK_NEAR(y[64], 0.25 * 5 * (35 - 32), 0);
  IL_CHECK_NEAR(y[96], 0.25 * 7 * (55 - 32), 0);
  IL_CHECK_NEAR(y[128], 0.25 * -1 * (53 - 32), 0);
}

/* Bytes ggml's reference quantizers produce for x_j = j - 16 (and a Q4_1 ramp). */
static void test_known_quantization(void) {
  float x[32];
  for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
  il_block_q4_0 q40;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_0, x, &q40, 32));
  IL_CHECK_INT(q40.d, 0x4000); /* max |x| is -16 at j=0: d = -16/-8 = 2 */
  IL_CHECK_INT(q40.qs[0], 0x80); /* q0 = (int8)(-8 + 8.5) = 0, q16 = (int8)(0 + 8.5) = 8 */
  IL_CHECK_INT(q40.qs[1], 0x91); /* q1 = (int8)(-7.5 + 8.5) = 1, q17 = 9 */
  IL_CHECK_INT(q40.qs[15] >> 4, 15); /* q31 = min(15, (int8)(7.5 + 8.5)) */

  il_block_q8_0 q8;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q8_0, x, &q8, 32));
  IL_CHECK_INT(q8.d, il_f32_to_fp16(16.0f / 127.0f));
  IL_CHECK_INT(q8.qs[0], -127);
  IL_CHECK_INT(q8.qs[1], -119); /* roundf(-15 * 7.9375) = -119 */
  IL_CHECK_INT(q8.qs[17], 8);   /* roundf(7.9375) */
  IL_CHECK_INT(q8.qs[16], 0);

  for (int j = 0; j < 32; j++) x[j] = 0.5f * (float)j - 3.0f;
  il_block_q4_1 q41;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_1, x, &q41, 32));
  IL_CHECK_INT(q41.m, 0xc200); /* min = -3 */
  IL_CHECK_INT(q41.d, il_f32_to_fp16(15.5f / 15.0f));
  IL_CHECK_INT(q41.qs[0], 0x80);     /* q0 = 0, q16 = (int8)(8 * 15/15.5 + 0.5) = 8 */
  IL_CHECK_INT(q41.qs[15] >> 4, 15); /* q31 = 15 */

  /* all-zero block: d = 0 / -8 = -0 (as in ggml), codes at the zero point */
  memset(x, 0, sizeof x);
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_0, x, &q40, 32));
  IL_CHECK_INT(q40.d, 0x8000);
  IL_CHECK_INT(q40.qs[7], 0x88);
}

static void test_round_trip(void) {
  uint64_t rng = 42;
  enum { N = 32 * 64 };
  static float x[N], y[N];
  static uint8_t buf[N * 4];
  for (int trial = 0; trial < 4; trial++) {
    const float scale = trial == 0 ? 1.0f : trial == 1 ? 1000.0f : trial == 2 ? 1e-3f : 30.0f;
    for (int i = 0; i < N; i++) x[i] = il_test_randf(&rng) * scale;
    if (trial == 3)
      for (int i = 0; i < 32; i++) x[i] = 0.0f; /* a zero block */
    const il_dtype types[] = {IL_DTYPE_F32, IL_DTYPE_F16, IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
      const il_dtype t = types[ti];
      IL_CHECK(il_quantize_supported(t));
      IL_CHECK_OK(il_quantize_row(t, x, buf, N));
      IL_CHECK_OK(il_dequantize_row(t, buf, y, N));
      int bad = 0;
      double worst = 0;
      for (int b = 0; b < N / 32; b++) {
        const float *xb = x + 32 * b, *yb = y + 32 * b;
        float amax = 0, mx = 0, mn = FLT_MAX, mxv = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
          if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            mx = xb[j];
          }
          mn = fminf(mn, xb[j]);
          mxv = fmaxf(mxv, xb[j]);
        }
        for (int j = 0; j < 32; j++) {
          const double e = fabs((double)xb[j] - yb[j]);
          double bound = 0;
          if (t == IL_DTYPE_F16) bound = fabs(xb[j]) * ldexp(1, -11) + ldexp(1, -25);
          else if (t == IL_DTYPE_BF16) bound = fabs(xb[j]) * ldexp(1, -8);
          else if (t == IL_DTYPE_Q8_0) {
            const double d = amax / 127.0, dh = il_fp16_to_f32(il_f32_to_fp16((float)d));
            bound = d / 2 * 1.0001 + 127 * fabs(d - dh);
          } else if (t == IL_DTYPE_Q4_0) {
            const double d = fabs(mx) / 8.0, dh = fabs(il_fp16_to_f32(il_f32_to_fp16(mx / -8.0f)));
            const double code = xb[j] / (mx / -8.0) + 8.5; /* 16 or more is clamped to 15 */
            bound = (code >= 16 ? d : d / 2) * 1.0001 + 8 * fabs(d - dh);
          } else if (t == IL_DTYPE_Q4_1) {
            const double d = (mxv - mn) / 15.0, dh = il_fp16_to_f32(il_f32_to_fp16((float)d));
            bound = d / 2 * 1.0001 + 15 * fabs(d - dh) + fabs(mn - il_fp16_to_f32(il_f32_to_fp16(mn)));
          }
          if (e > bound) {
            if (bad++ < 2)
              fprintf(stderr, "  %s scale %g block %d elem %d: %.9g -> %.9g (err %g > %g)\n", il_dtype_name(t),
                      (double)scale, b, j, (double)xb[j], (double)yb[j], e, bound);
          }
          if (bound > 0 && e / bound > worst) worst = e / bound;
        }
      }
      IL_CHECK_INT(bad, 0);
      if (trial == 0) printf("%-5s round trip: worst error %.2f of its bound\n", il_dtype_name(t), worst);
    }
  }
}

static void test_errors(void) {
  float x[64] = {0};
  uint8_t buf[512];
  IL_CHECK_INT(il_quantize_row(IL_DTYPE_Q4_0, x, buf, 33), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "33");
  IL_CHECK_INT(il_dequantize_row(IL_DTYPE_Q6_K, buf, x, 64), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_quantize_row(IL_DTYPE_Q4_K, x, buf, 255), IL_ERR_INVALID_ARG);
  IL_CHECK(il_quantize_supported(IL_DTYPE_Q6_K));
  IL_CHECK_INT(il_dequantize_row((il_dtype)10, buf, x, 32), IL_ERR_UNSUPPORTED); /* Q2_K */
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_F32, buf, x, 0));
}

int main(void) {
  test_fp16_exhaustive();
  test_bf16();
  test_hand_blocks();
  test_known_quantization();
  test_round_trip();
  test_errors();
  return il_test_finish();
}
