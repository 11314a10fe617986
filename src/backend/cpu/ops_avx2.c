/* backend/cpu/ops_avx2: copy's F32 <-> F16/BF16 row conversions with AVX2 and F16C, and SwiGLU
 * with AVX2 and FMA (ops.h). F16 through vcvtps2ph / vcvtph2ps (round to nearest even); BF16 by
 * the integer rounding of il_f32_to_bf16 on eight lanes. Tails go through the scalar
 * conversions of core/dtype.h. SwiGLU: exp from simd_avx2.h (the portable C calls libm's expf
 * per element: 2.5% of an AVX2 prompt's time). */
#include "backend/cpu/ops.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>

#include "backend/cpu/simd_avx2.h"
#include "core/dtype.h"

static void il__f16_to_f32(void *dst, const void *src, int64_t n) {
  float *d = dst;
  const uint16_t *s = src;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) d[i] = il_fp16_to_f32(s[i]);
}

static void il__f32_to_f16(void *dst, const void *src, int64_t n) {
  uint16_t *d = dst;
  const float *s = src;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; i++) d[i] = il_f32_to_fp16(s[i]);
}

static void il__bf16_to_f32(void *dst, const void *src, int64_t n) {
  float *d = dst;
  const uint16_t *s = src;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
    _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; i++) d[i] = il_bf16_to_f32(s[i]);
}

static void il__f32_to_bf16(void *dst, const void *src, int64_t n) {
  uint16_t *d = dst;
  const float *s = src;
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), abs = _mm256_set1_epi32(0x7fffffff),
                inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(s + i));
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(half, _mm256_and_si256(hi, one))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
    const __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
    /* 32 -> 16 bits within each 128-bit lane, then the lanes' low halves together */
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));
  }
  for (; i < n; i++) d[i] = il_f32_to_bf16(s[i]);
}

const il__cvt il__cvt_avx2 = {.compiled = true,
                              .f16_to_f32 = il__f16_to_f32,
                              .f32_to_f16 = il__f32_to_f16,
                              .bf16_to_f32 = il__bf16_to_f32,
                              .f32_to_bf16 = il__f32_to_bf16};

static inline __m256 il__silu_mul8(__m256 g, __m256 u) {
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), il__exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)))), u);
}

/* gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i], 8 lanes at a time, the tail masked. */
static void il__swiglu(float *gate, const float *up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, il__silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(gate + i, m, il__silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
  }
}

/* attn_head: none (the attention kernels are attn.c's, for every level) */
const il__ops il__ops_avx2 = {.compiled = true, .swiglu = il__swiglu};

#else
const il__cvt il__cvt_avx2 = {.compiled = false};
const il__ops il__ops_avx2 = {.compiled = false};
#endif
