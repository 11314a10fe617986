/* tests/test_quantize_k: quantization to every block type, byte for byte against llama.cpp.
 *
 * - Golden blocks: tests/data/kquant_golden.txt holds the bytes ggml_quantize_chunk (llama.cpp's
 *   reference quantizers, no importance matrix) wrote for ten 256-element inputs (all zeros, one
 *   huge value, negative maxima, subnormals, heavy tails, constants, ...) in Q4_0, Q4_1, Q8_0,
 *   Q4_K, Q5_K, Q6_K, Q5_0, Q5_1 and IQ4_NL; gc_case() below regenerates the inputs with exact integer/float steps.
 *   How the file was made: tests/data/README-kquant.md.
 * - Hand-computed blocks: all zeros give all-zero K blocks; a lone value is reproduced exactly.
 * - NaN and Inf are rejected naming the element.
 * - Error bounds on Gaussian-like and heavy-tailed rows: RMS error relative to the RMS of the
 *   data stays under each type's bound, and more bits always give a smaller error.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "harness.h"

/* The golden inputs (the same formula as the generator that produced the golden file). */
static float gc_randf(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
#define GC_N_CASES 10
static void gc_case(int c, float *x) {
  uint64_t s = 1000 + (uint64_t)c;
  for (int i = 0; i < 256; i++) {
    float u = gc_randf(&s), v;
    switch (c) {
    case 0: v = 0.0f; break;                                       /* all zeros */
    case 1: v = i == 37 ? 1.0e4f : 0.01f * u; break;               /* one huge value */
    case 2: v = u; break;                                          /* uniform [-1, 1) */
    case 3: v = i % 32 == 5 ? -3.0f - u : 0.6f * u - 0.4f; break;  /* negative maxima */
    case 4: v = u * 1.0e-39f; break;                               /* subnormals */
    case 5: v = 10.0f * u * u * u; break;                          /* heavy tailed */
    case 6: v = 1.0f + 0.5f * u; break;                            /* all positive */
    case 7: v = 0.3f; break;                                       /* constant */
    case 8: {
      float a = gc_randf(&s), b = gc_randf(&s), d = gc_randf(&s);
      v = 0.5f * (u + a + b + d); /* ~gaussian */
    } break;
    default: v = u * (float)(1 << (i / 32)) * 0.0625f; break; /* sub-blocks of growing scale */
    }
    x[i] = v;
  }
}

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static void test_golden(void) {
  const char *src = getenv("IL_SRC");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/kquant_golden.txt", src ? src : ".");
  char *text = il_test_read_file(path, NULL);
  if (!text) {
    fprintf(stderr, "cannot read %s (set IL_SRC to the source tree)\n", path);
    IL_CHECK(text != NULL);
    return;
  }
  int n_lines = 0, n_bad = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    int c;
    char tname[16], hex[1024];
    if (sscanf(line, "%d %15s %1023s", &c, tname, hex) != 3) continue;
    il_dtype t;
    IL_CHECK(il_dtype_parse(tname, &t));
    float x[256];
    gc_case(c, x);
    uint8_t want[512], got[512];
    const size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) want[i] = (uint8_t)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    IL_CHECK_INT(il_dtype_row_size(t, 256), n);
    IL_CHECK_OK(il_quantize_row(t, x, got, 256));
    if (memcmp(got, want, n) != 0) {
      size_t k = 0;
      while (got[k] == want[k]) k++;
      if (n_bad++ < 5)
        fprintf(stderr, "  case %d %s: first difference at byte %zu: %02x vs ggml %02x\n", c, tname, k, got[k], want[k]);
    }
    n_lines++;
  }
  free(text);
  IL_CHECK_INT(n_lines, GC_N_CASES * 9);
  IL_CHECK_INT(n_bad, 0);
}

static uint16_t b6_d(const uint8_t *buf) {
  il_block_q6_K b;
  memcpy(&b, buf, sizeof b);
  return b.d;
}

static void test_hand_blocks(void) {
  float x[256] = {0}, y[256];
  uint8_t buf[256], zero[256] = {0};
  /* all zeros: every K type writes an all-zero block (d = dmin = 0, no scales) */
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_K, x, buf, 256));
  IL_CHECK(memcmp(buf, zero, 144) == 0);
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q5_K, x, buf, 256));
  IL_CHECK(memcmp(buf, zero, 176) == 0);
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q6_K, x, buf, 256));
  IL_CHECK(memcmp(buf, zero, 210) == 0);
  /* one value -2 in an otherwise zero block (hand-computed): Q6_K's sub-block 6 (elements
   * 96..111) gets scale 2/32 on level -32; it is the largest, so its int8 scale is -128 and
   * d = fp16(-(2/32)/128) = -2^-11 exactly; -2 decodes as d * -128 * (0 - 32) = -2. */
  x[100] = -2.0f;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q6_K, x, buf, 256));
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q6_K, buf, y, 256));
  IL_CHECK_NEAR(y[100], -2.0, 1e-3);
  IL_CHECK_INT(b6_d(buf), 0x9000); /* -2^-11 as fp16 */
  int nonzero = 0;
  for (int i = 0; i < 256; i++) nonzero += i != 100 && y[i] != 0.0f;
  IL_CHECK_INT(nonzero, 0);
  il_block_q6_K b6;
  memcpy(&b6, buf, sizeof b6);
  IL_CHECK_INT(b6.scales[6], -128);
  IL_CHECK_INT(b6.scales[5], 0);
  /* a positive lone value in Q4_K: min clamps to 0, d*sc*15 = value */
  memset(x, 0, sizeof x);
  x[3] = 1.5f;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_K, x, buf, 256));
  IL_CHECK_OK(il_dequantize_row(IL_DTYPE_Q4_K, buf, y, 256));
  IL_CHECK_NEAR(y[3], 1.5, 1.5 / 63 / 15 + 1e-3);
  IL_CHECK_NEAR(y[4], 0.0, 1e-6);
}

static void test_nonfinite(void) {
  float x[256] = {0};
  uint8_t buf[256];
  const il_dtype types[] = {IL_DTYPE_Q4_0, IL_DTYPE_Q4_1, IL_DTYPE_Q8_0, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K};
  for (int t = 0; t < 6; t++) {
    x[77] = NAN;
    IL_CHECK_INT(il_quantize_row(types[t], x, buf, 256), IL_ERR_FORMAT);
    IL_CHECK_CONTAINS(il_error_detail(), "element 77 is nan");
    x[77] = -INFINITY;
    IL_CHECK_INT(il_quantize_row(types[t], x, buf, 256), IL_ERR_FORMAT);
    IL_CHECK_CONTAINS(il_error_detail(), "element 77 is inf");
    x[77] = 0;
  }
}

/* RMS of (dequantize(quantize(x)) - x) over RMS of x, for n elements. */
static double rel_rmse(il_dtype t, const float *x, int n) {
  uint8_t *q = malloc(il_dtype_row_size(t, n));
  float *y = malloc(sizeof(float) * (size_t)n);
  double e = 0, s = 0;
  if (il_quantize_row(t, x, q, n) == IL_OK && il_dequantize_row(t, q, y, n) == IL_OK)
    for (int i = 0; i < n; i++) {
      e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
      s += (double)x[i] * x[i];
    }
  else
    e = s = 1;
  free(q);
  free(y);
  return sqrt(e / s);
}

static void test_error_bounds(void) {
  enum { N = 256 * 64 };
  float *g = malloc(sizeof(float) * N), *h = malloc(sizeof(float) * N);
  uint64_t s = 42;
  for (int i = 0; i < N; i++) {
    float a = il_test_randf(&s), b = il_test_randf(&s), c = il_test_randf(&s), d = il_test_randf(&s);
    g[i] = 0.5f * (a + b + c + d);                              /* ~N(0, 0.33) */
    const float u = il_test_randf(&s);
    h[i] = 0.02f * u / (0.05f + fabsf(il_test_randf(&s)));     /* Cauchy-like heavy tails */
  }
  /* bounds: about 1.5x what these quantizers reach here (measured: Q4_K 0.069 / 0.098,
   * Q5_K 0.035 / 0.049, Q6_K 0.017 / 0.026, Q8_0 0.005 / 0.008; each extra bit halves it) */
  const struct { il_dtype t; double gauss, heavy; } b[] = {
      {IL_DTYPE_Q4_K, 0.10, 0.15}, {IL_DTYPE_Q5_K, 0.05, 0.075}, {IL_DTYPE_Q6_K, 0.025, 0.04}, {IL_DTYPE_Q8_0, 0.0075, 0.012},
  };
  double prev_g = 1, prev_h = 1;
  for (int i = 0; i < 4; i++) {
    const double eg = rel_rmse(b[i].t, g, N), eh = rel_rmse(b[i].t, h, N);
    printf("  %-5s relative RMSE: gaussian %.4f, heavy-tailed %.4f\n", il_dtype_name(b[i].t), eg, eh);
    IL_CHECK(eg < b[i].gauss);
    IL_CHECK(eh < b[i].heavy);
    IL_CHECK(eg < prev_g); /* more bits, less error */
    IL_CHECK(eh < prev_h);
    prev_g = eg;
    prev_h = eh;
  }
  /* K-quants beat the 32-block legacy type of the same width on Gaussian data */
  IL_CHECK(rel_rmse(IL_DTYPE_Q4_K, g, N) < rel_rmse(IL_DTYPE_Q4_0, g, N));
  free(g);
  free(h);
}

int main(void) {
  test_golden();
  test_hand_blocks();
  test_nonfinite();
  test_error_bounds();
  return il_test_finish();
}
