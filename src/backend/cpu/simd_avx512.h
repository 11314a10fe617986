/* backend/cpu/simd_avx512: AVX-512F helpers shared by the AVX-512 kernel files.
 *
 * exp on 16 lanes: Cephes expf's degree-6 polynomial on the reduced argument (range reduction
 * by ln 2 in two parts), 2^n applied with vscalefps, which also gives exact overflow to inf and
 * underflow to 0; within 2 ulp of libm's expf. Included only by files compiled with AVX-512.
 * Not for: dispatch (cpu.c), anything compiled without AVX-512.
 */
#ifndef IL_BACKEND_CPU_SIMD_AVX512_H
#define IL_BACKEND_CPU_SIMD_AVX512_H

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 il__exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.8f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}
#endif

#endif
