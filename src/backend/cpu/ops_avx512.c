/* backend/cpu/ops_avx512: AVX-512F versions of the attention head and SwiGLU.
 *
 * The portable C in cpu.c cannot be vectorised by the compiler without fast-math: its dot
 * products are one long dependent chain of scalar adds and expf is a libm call per element.
 * Here the dot products run 16 lanes wide, and exp is a degree-6 polynomial on the reduced
 * argument (Cephes expf: range reduction by ln 2 in two parts, 2^n applied with vscalefps,
 * which also gives exact overflow to inf and underflow to 0), within 2 ulp of libm's expf.
 * Not for: dispatch (cpu.c), matmul (matmul_avx512.c).
 */
#include "backend/cpu/ops.h"

#if defined(__x86_64__) && defined(__AVX512F__)

#include <immintrin.h>

#include "backend/cpu/simd_avx512.h"

#define IL__INLINE static inline __attribute__((always_inline))


IL__INLINE __mmask16 il__tail(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

static void il__attn_head(float *out, const float *q, const float *k, const float *v, size_t kv_stride, int64_t hd,
                          int32_t n_pos, float scale, float *scores) {
  /* scores and their max */
  __m512 qv[16];
  const int nq = hd <= 256 ? (int)((hd + 15) / 16) : 0;
  for (int c = 0; c < nq; c++) qv[c] = _mm512_maskz_loadu_ps(il__tail(hd - 16 * c), q + 16 * c);
  float mx = -__builtin_inff();
  for (int32_t s = 0; s < n_pos; s++) {
    const float *ks = k + (size_t)s * kv_stride;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    if (nq > 0) {
      int c = 0;
      for (; c + 2 <= nq; c += 2) {
        acc0 = _mm512_fmadd_ps(qv[c], _mm512_maskz_loadu_ps(il__tail(hd - 16 * c), ks + 16 * c), acc0);
        acc1 = _mm512_fmadd_ps(qv[c + 1], _mm512_maskz_loadu_ps(il__tail(hd - 16 * c - 16), ks + 16 * c + 16), acc1);
      }
      if (c < nq) acc0 = _mm512_fmadd_ps(qv[c], _mm512_maskz_loadu_ps(il__tail(hd - 16 * c), ks + 16 * c), acc0);
    } else {
      for (int64_t i = 0; i < hd; i += 16) {
        const __mmask16 m = il__tail(hd - i);
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, ks + i), acc0);
      }
    }
    const float d = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) * scale;
    scores[s] = d;
    mx = d > mx ? d : mx;
  }
  /* exp and sum */
  const __m512 mxv = _mm512_set1_ps(mx);
  __m512 sumv = _mm512_setzero_ps();
  for (int32_t s = 0; s < n_pos; s += 16) {
    const __mmask16 m = il__tail(n_pos - s);
    const __m512 e = il__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + s), mxv));
    _mm512_mask_storeu_ps(scores + s, m, e);
    sumv = _mm512_mask_add_ps(sumv, m, sumv, e);
  }
  const float norm = 1.0f / _mm512_reduce_add_ps(sumv);
  /* weighted sum of v, 128 output floats (8 registers) at a time */
  for (int64_t i0 = 0; i0 < hd; i0 += 128) {
    const int64_t w = hd - i0 < 128 ? hd - i0 : 128;
    const int nc = (int)((w + 15) / 16);
    __m512 acc[8];
    for (int c = 0; c < 8; c++) acc[c] = _mm512_setzero_ps();
    for (int32_t s = 0; s < n_pos; s++) {
      const float *vs = v + (size_t)s * kv_stride + i0;
      const __m512 ws = _mm512_set1_ps(scores[s] * norm);
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++)
        if (c < nc) acc[c] = _mm512_fmadd_ps(ws, _mm512_maskz_loadu_ps(il__tail(w - 16 * c), vs + 16 * c), acc[c]);
    }
    for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(out + i0 + 16 * c, il__tail(w - 16 * c), acc[c]);
  }
}

static void il__swiglu(float *gate, const float *up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = il__tail(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = il__exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

const il__ops il__ops_avx512 = {.compiled = true, .attn_head = il__attn_head, .swiglu = il__swiglu};

#else
const il__ops il__ops_avx512 = {.compiled = false};
#endif
