/* tests/test_quant_q5: the 32-element types llama-quantize falls back to (Q5_0, Q5_1, IQ4_NL).
 *
 * - Hand-built blocks decode to values worked out by hand from ggml's layouts (the 5th bits in
 *   qh, IQ4_NL's level table).
 * - Quantizing hand-picked rows gives the bytes worked out by hand from ggml's algorithms (the
 *   golden bytes llama.cpp wrote for ten rows are in tests/test_quantize_k.c).
 * - dequantize(quantize(x)) stays within each format's rounding bound, block by block; IQ4_NL,
 *   whose levels are not evenly spaced, within half its widest gap, and on near-Gaussian data
 *   with a smaller error than Q4_0 (what its grid is for).
 * - NaN / Inf are refused naming the element; the type table, names and file types.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/quant.h"
#include "harness.h"

static void test_table(void) {
  const struct {
    il_dtype t;
    const char *name;
    uint32_t size, ftype;
  } want[] = {{IL_DTYPE_Q5_0, "q5_0", 22, 8}, {IL_DTYPE_Q5_1, "q5_1", 24, 9}, {IL_DTYPE_IQ4_NL, "iq4_nl", 18, 25}};
  for (int i = 0; i < 3; i++) {
    const il_dtype_info *ti = il_dtype_get((uint32_t)want[i].t);
    IL_CHECK(ti != NULL);
    if (!ti) continue;
    IL_CHECK_STR(ti->name, want[i].name);
    IL_CHECK_INT(ti->blck, 32);
    IL_CHECK_INT(ti->size, want[i].size);
    IL_CHECK(ti->quantized);
    IL_CHECK_INT(il_dtype_file_type(want[i].t), want[i].ftype);
    IL_CHECK_INT(il_dtype_row_size(want[i].t, 64), 2 * want[i].size);
    IL_CHECK_INT(il_dtype_row_size(want[i].t, 48), 0);
    il_dtype p;
    IL_CHECK(il_dtype_parse(want[i].name, &p) && p == want[i].t);
    IL_CHECK(il_quantize_supported(want[i].t));
  }
  IL_CHECK_INT(IL_DTYPE_Q5_0, 6); /* GGML type ids */
  IL_CHECK_INT(IL_DTYPE_Q5_1, 7);
  IL_CHECK_INT(IL_DTYPE_IQ4_NL, 20);
}

static void test_hand_blocks(void) {
  float y[32];
  il_block_q5_0 a = {.d = 0x3800}; /* 0.5 */
  a.qs[0] = 0x3f;                  /* element 0: 15, element 16: 3 */
  a.qs[1] = 0x00;
  const uint32_t qha = 1u | 1u << 17; /* 5th bit of elements 0 and 17 */
  memcpy(a.qh, &qha, 4);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q5_0, &a, y, 32));
  IL_CHECK_NEAR(y[0], 7.5, 0);   /* (15 + 16 - 16) * 0.5 */
  IL_CHECK_NEAR(y[16], -6.5, 0); /* (3 - 16) * 0.5 */
  IL_CHECK_NEAR(y[1], -8.0, 0);  /* (0 - 16) * 0.5 */
  IL_CHECK_NEAR(y[17], 0.0, 0);  /* (0 + 16 - 16) * 0.5 */

  il_block_q5_1 b = {.d = 0x3c00, .m = 0xc200}; /* 1, -3 */
  b.qs[2] = 0x21;
  const uint32_t qhb = 1u << 2 | 1u << 18;
  memcpy(b.qh, &qhb, 4);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q5_1, &b, y, 32));
  IL_CHECK_NEAR(y[2], 14.0, 0);  /* 1 + 16 - 3 */
  IL_CHECK_NEAR(y[18], 15.0, 0); /* 2 + 16 - 3 */
  IL_CHECK_NEAR(y[0], -3.0, 0);

  il_block_iq4_nl c = {.d = 0x4000}; /* 2 */
  memset(c.qs, 0x88, 16);            /* level 8 = 1 */
  c.qs[0] = 0xf0;                    /* element 0: level 0 = -127, element 16: level 15 = 113 */
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_IQ4_NL, &c, y, 32));
  IL_CHECK_NEAR(y[0], -254.0, 0);
  IL_CHECK_NEAR(y[16], 226.0, 0);
  IL_CHECK_NEAR(y[5], 2.0, 0);
}

static uint32_t qh_of(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static void test_known_quantization(void) {
  float x[32], y[32];
  /* Q5_0, x = j - 16: the largest magnitude is -16 (j = 0), d = -16 / -16 = 1, code =
   * (int8)(x + 16.5) = j: low nibbles j & 15 in both halves, 5th bits for elements 16..31. */
  for (int j = 0; j < 32; j++) x[j] = (float)j - 16.0f;
  il_block_q5_0 a;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q5_0, x, &a, 32));
  IL_CHECK_INT(a.d, 0x3c00);
  IL_CHECK_INT(qh_of(a.qh), 0xffff0000u);
  int bad = 0;
  for (int j = 0; j < 16; j++) bad += a.qs[j] != (uint8_t)(j | j << 4);
  IL_CHECK_INT(bad, 0);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q5_0, &a, y, 32));
  IL_CHECK(memcmp(x, y, sizeof x) == 0);
  /* a positive maximum: x[5] = 4 is the largest, d = 4 / -16 = -0.25, so 4 gets code
   * (int8)(-16 + 16.5) = 0 and 0 gets 16 */
  memset(x, 0, sizeof x);
  x[5] = 4.0f;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q5_0, x, &a, 32));
  IL_CHECK_INT(a.d, 0xb400);                   /* -0.25 */
  IL_CHECK_INT(a.qs[5], 0x00);                 /* elements 5 and 21: codes 0 and 16 */
  IL_CHECK_INT(qh_of(a.qh), 0xffffffffu & ~(1u << 5));

  /* Q5_1, x = j/2 - 3: min -3, d = 15.5 / 31 = 0.5, code = (uint8)((x + 3) * 2 + 0.5) = j */
  for (int j = 0; j < 32; j++) x[j] = 0.5f * (float)j - 3.0f;
  il_block_q5_1 b;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q5_1, x, &b, 32));
  IL_CHECK_INT(b.d, 0x3800);
  IL_CHECK_INT(b.m, 0xc200);
  IL_CHECK_INT(qh_of(b.qh), 0xffff0000u);
  bad = 0;
  for (int j = 0; j < 16; j++) bad += b.qs[j] != (uint8_t)(j | j << 4);
  IL_CHECK_INT(bad, 0);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q5_1, &b, y, 32));
  IL_CHECK(memcmp(x, y, sizeof x) == 0);

  /* IQ4_NL on x = level[j % 16] / 4: the candidate scale (0 - 127) / max = 4 maps every element
   * onto its own level with zero error, which no other candidate beats: d = 0.25, codes j % 16. */
  for (int j = 0; j < 32; j++) x[j] = il_iq4nl_values[j % 16] * 0.25f;
  il_block_iq4_nl c;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_IQ4_NL, x, &c, 32));
  IL_CHECK_INT(c.d, 0x3400);
  bad = 0;
  for (int j = 0; j < 16; j++) bad += c.qs[j] != (uint8_t)(j | j << 4);
  IL_CHECK_INT(bad, 0);
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_IQ4_NL, &c, y, 32));
  IL_CHECK(memcmp(x, y, sizeof x) == 0);
  /* all zeros: d = 0 and every code the level nearest 0 (index 8, value 1) */
  memset(x, 0, sizeof x);
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_IQ4_NL, x, &c, 32));
  IL_CHECK_INT(c.d, 0);
  IL_CHECK_INT(c.qs[3], 0x88);
}

static double rms_err(il_dtype t, const float *x, int n, float *y, uint8_t *buf) {
  if (il_quantize_row(t, x, buf, n) != IL_OK || il_dequantize_row(t, buf, y, n) != IL_OK) return INFINITY;
  double e = 0;
  for (int i = 0; i < n; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
  return sqrt(e / n);
}

static void test_round_trip(void) {
  uint64_t rng = 7;
  enum { N = 32 * 64 };
  static float x[N], y[N];
  static uint8_t buf[N * 2];
  for (int trial = 0; trial < 4; trial++) {
    const float scale = trial == 0 ? 1.0f : trial == 1 ? 1000.0f : trial == 2 ? 1e-3f : 30.0f;
    for (int i = 0; i < N; i++) x[i] = il_test_randf(&rng) * scale;
    if (trial == 3)
      for (int i = 0; i < 32; i++) x[i] = 0.0f;
    const il_dtype types[] = {IL_DTYPE_Q5_0, IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
    for (size_t ti = 0; ti < 3; ti++) {
      const il_dtype t = types[ti];
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
        const il_block_iq4_nl *nl = (const il_block_iq4_nl *)(buf + (size_t)b * sizeof *nl);
        for (int j = 0; j < 32; j++) {
          const double e = fabs((double)xb[j] - yb[j]);
          double bound;
          if (t == IL_DTYPE_Q5_0) {
            const double d = fabs(mx) / 16.0, dh = fabs(il_fp16_to_f32(il_f32_to_fp16(mx / -16.0f)));
            const double code = xb[j] / (mx / -16.0) + 16.5; /* 32 or more is clamped to 31 */
            bound = (code >= 32 ? d : d / 2) * 1.0001 + 16 * fabs(d - dh);
          } else if (t == IL_DTYPE_Q5_1) {
            const double d = (mxv - mn) / 31.0, dh = il_fp16_to_f32(il_f32_to_fp16((float)d));
            bound = d / 2 * 1.0001 + 31 * fabs(d - dh) + fabs(mn - il_fp16_to_f32(il_f32_to_fp16(mn)));
          } else {
            /* the widest gap between levels is 24 (89..113); beyond the ends the error is the
             * distance to the end level; plus the fp16 rounding of d (relative 2^-11) */
            uint16_t dbits;
            memcpy(&dbits, &nl->d, 2);
            const double d = fabs(il_fp16_to_f32(dbits));
            const double v = xb[j] / (d > 0 ? d : 1) * (il_fp16_to_f32(dbits) < 0 ? -1 : 1);
            const double over = v > 113 ? v - 113 : v < -127 ? -127 - v : 0;
            bound = d * (12 + over) * 1.0001 + 127 * d * ldexp(1, -11) + 1e-30;
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
      if (trial == 0) printf("%-6s round trip: worst error %.2f of its bound\n", il_dtype_name(t), worst);
    }
  }
  /* near-Gaussian weights (sums of four uniforms): IQ4_NL's grid, denser near 0, beats Q4_0's
   * even steps at the same 4.5 bits; Q5_0 and Q5_1 beat both */
  for (int i = 0; i < N; i++)
    x[i] = 0.5f * (il_test_randf(&rng) + il_test_randf(&rng) + il_test_randf(&rng) + il_test_randf(&rng));
  const double e40 = rms_err(IL_DTYPE_Q4_0, x, N, y, buf), enl = rms_err(IL_DTYPE_IQ4_NL, x, N, y, buf);
  const double e50 = rms_err(IL_DTYPE_Q5_0, x, N, y, buf), e51 = rms_err(IL_DTYPE_Q5_1, x, N, y, buf);
  printf("rms error, near-Gaussian: q4_0 %.5f iq4_nl %.5f q5_0 %.5f q5_1 %.5f\n", e40, enl, e50, e51);
  IL_CHECK(enl < e40);
  IL_CHECK(e50 < enl && e51 < enl);
}

static void test_errors(void) {
  float x[64] = {0};
  uint8_t buf[256];
  const il_dtype types[] = {IL_DTYPE_Q5_0, IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
  for (int t = 0; t < 3; t++) {
    IL_CHECK_INT(il_quantize_row(types[t], x, buf, 48), IL_ERR_INVALID_ARG);
    IL_CHECK_INT(il_dequantize_row(types[t], buf, x, 40), IL_ERR_INVALID_ARG);
    x[41] = NAN;
    IL_CHECK_INT(il_quantize_row(types[t], x, buf, 64), IL_ERR_FORMAT);
    IL_CHECK_CONTAINS(il_error_detail(), "element 41 is nan");
    x[41] = INFINITY;
    IL_CHECK_INT(il_quantize_row(types[t], x, buf, 64), IL_ERR_FORMAT);
    IL_CHECK_CONTAINS(il_error_detail(), "element 41 is inf");
    x[41] = 0;
  }
}

int main(void) {
  test_table();
  test_hand_blocks();
  test_known_quantization();
  test_round_trip();
  test_errors();
  return il_test_finish();
}
