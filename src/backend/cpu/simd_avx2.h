/* backend/cpu/simd_avx2: AVX2 + FMA helpers shared by the AVX2 kernel files.
 *
 * exp on 8 lanes: Cephes expf's degree-6 polynomial on the reduced argument (range reduction
 * by ln 2 in two parts), then 2^n. il__exp8 applies 2^n as two factors that are each a normal
 * float (AVX2 has no vscalefps), so it overflows to inf and underflows through the subnormals
 * to 0 exactly as il__exp16 (simd_avx512.h) does: within 2 ulp of libm's expf over the whole
 * float range. Included only by files compiled with AVX2 and FMA.
 * Not for: dispatch (cpu.c), anything compiled without AVX2.
 */
#ifndef IL_BACKEND_CPU_SIMD_AVX2_H
#define IL_BACKEND_CPU_SIMD_AVX2_H

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* exp(x - n ln 2) for n = round(x / ln 2), returned with n; the caller clamps x and applies 2^n. */
static inline __attribute__((always_inline)) __m256 il__exp8_reduced(__m256 x, __m256 *n) {
  *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  return _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
}

/* 2^k as a float for k in [-126, 127]. */
static inline __attribute__((always_inline)) __m256 il__pow2i8(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

/* exp over the whole float range: x clamped to [-104, 88.8] (beyond, the result is 0 or inf
 * anyway), n in [-150, 128] split into halves in [-75, 64], each a normal power of two, so the
 * one rounding is the last multiply's. NaN gives inf, as il__exp16 does. */
static inline __attribute__((always_inline)) __m256 il__exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.8f)), _mm256_set1_ps(-104.0f));
  __m256 n;
  const __m256 y = il__exp8_reduced(x, &n);
  const __m256i k = _mm256_cvtps_epi32(n), k1 = _mm256_srai_epi32(k, 1);
  return _mm256_mul_ps(_mm256_mul_ps(y, il__pow2i8(k1)), il__pow2i8(_mm256_sub_epi32(k, k1)));
}
#endif

#endif
