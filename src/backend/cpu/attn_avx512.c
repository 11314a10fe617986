/* backend/cpu/attn_avx512: AVX-512 micro-kernels for the attention drivers in attn.c.
 *
 * Q K^T runs in blocks of up to 4 query rows x 4 keys: each 16-float chunk of a key is loaded
 * (and, for F16 caches, converted with vcvtph2ps) once and used by 4 rows, and the 16
 * accumulators are reduced in one shuffle tree into a single vector of 16 dot products (lane
 * 4r + c = row r, key c). P V runs in blocks of up to 4 rows x 64 output floats kept in 16
 * registers while the keys stream by. exp is the Cephes expf polynomial with 2^n applied by
 * vscalefps (as in ops_avx512.c). Any head size works (masked tails); attn.c sends head sizes
 * that are not a multiple of 8 to the scalar table anyway (flash declines them).
 * Not for: the tiling, softmax bookkeeping and threading (attn.c).
 */
#include "backend/cpu/attn.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

#include <immintrin.h>

#include "backend/cpu/simd_avx512.h"

#define IL__INLINE static inline __attribute__((always_inline))

IL__INLINE __mmask16 il__tail(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* kind: 0 f32, 1 f16, 2 bf16 (the upper half of an f32: shift the 16 bits into place), 3 q8_0
 * (blocks of 32: an fp16 scale then 32 int8; d is a multiple of 16 there, as q8_0 heads are
 * whole blocks, so 16 values never cross a block) */
IL__INLINE __m512 il__ld(const void *row, int64_t d, __mmask16 m, int f16) {
  if (f16 == 3) {
    const il_block_q8_0 *blk = (const il_block_q8_0 *)row + d / IL_QK;
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, blk->qs + d % IL_QK)));
    return _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(blk->d)));
  }
  if (f16 == 1) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d));
  if (f16 == 2)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d)), 16));
  return _mm512_maskz_loadu_ps(m, (const float *)row + d);
}


/* Lane i of the result = horizontal sum of v[i]. */
IL__INLINE __m512 il__hsum16(const __m512 *v) {
  __m512 x[8], y[4], z[2];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; i++)
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  #pragma GCC unroll 16
  for (int i = 0; i < 4; i++)
    y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44), _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
  #pragma GCC unroll 16
  for (int i = 0; i < 2; i++)
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
}

/* R rows x 4 keys (nk valid, the others duplicate the last key and are not stored). */
IL__INLINE void il__qk_block(float *s, size_t lds, const float *const *q, const int R, const void *const *k, int nk,
                             int64_t hd, int f16, float scale) {
  const void *kp[4];
  #pragma GCC unroll 16
  for (int c = 0; c < 4; c++) kp[c] = k[c < nk ? c : nk - 1];
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; d += 16) {
    const __mmask16 m = il__tail(hd - d);
    __m512 kv[4];
    #pragma GCC unroll 16
    for (int c = 0; c < 4; c++) kv[c] = il__ld(kp[c], d, m, f16);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q[r] + d);
      #pragma GCC unroll 16
      for (int c = 0; c < 4; c++) acc[4 * r + c] = _mm512_fmadd_ps(qv, kv[c], acc[4 * r + c]);
    }
  }
  float out[16];
  _mm512_storeu_ps(out, _mm512_mul_ps(il__hsum16(acc), _mm512_set1_ps(scale)));
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < nk; c++) s[(size_t)r * lds + c] = out[4 * r + c];
}

static void il__qk(float *s, size_t lds, const float *const *q, int m, const void *const *k, int n, int64_t hd,
                   il_dtype kt, float scale) {
  const int f16 = kt == IL_DTYPE_F16 ? 1 : kt == IL_DTYPE_BF16 ? 2 : kt == IL_DTYPE_Q8_0 ? 3 : 0;
  for (int j0 = 0; j0 < n; j0 += 4) {
    const int nk = n - j0 < 4 ? n - j0 : 4;
    int i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 4, k + j0, nk, hd, f16, scale);
    switch (m - i0) {
    case 3: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 3, k + j0, nk, hd, f16, scale); break;
    case 2: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 2, k + j0, nk, hd, f16, scale); break;
    case 1: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 1, k + j0, nk, hd, f16, scale); break;
    default: break;
    }
  }
}

/* R rows x NC chunks of 16 output floats starting at d0 (the last chunk masked by mlast). */
IL__INLINE void il__pv_block(float *const *o, const float *p, size_t ldp, const int R, const void *const *v,
                             int n, int64_t d0, const int NC, __mmask16 mlast, int f16) {
  __m512 acc[4][4];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++)
      acc[r][c] = _mm512_maskz_loadu_ps(c == NC - 1 ? mlast : 0xffff, o[r] + d0 + 16 * c);
  for (int j = 0; j < n; j++) {
    __m512 vv[4];
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++) vv[c] = il__ld(v[j], d0 + 16 * c, c == NC - 1 ? mlast : 0xffff, f16);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m512 pr = _mm512_set1_ps(p[(size_t)r * ldp + j]);
      #pragma GCC unroll 16
      for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++)
      _mm512_mask_storeu_ps(o[r] + d0 + 16 * c, c == NC - 1 ? mlast : 0xffff, acc[r][c]);
}

#define IL__PV_NC(R)                                                                                                   \
  switch (nc) {                                                                                                        \
  case 4: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, n, d0, 4, ml, f16); break;          \
  case 3: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, n, d0, 3, ml, f16); break;          \
  case 2: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, n, d0, 2, ml, f16); break;          \
  default: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, n, d0, 1, ml, f16); break;         \
  }

static void il__pv(float *const *o, const float *p, size_t ldp, int m, const void *const *v, int n, int64_t hd,
                   il_dtype vt) {
  const int f16 = vt == IL_DTYPE_F16 ? 1 : vt == IL_DTYPE_BF16 ? 2 : vt == IL_DTYPE_Q8_0 ? 3 : 0;
  for (int i0 = 0; i0 < m; i0 += 4) {
    const int R = m - i0 < 4 ? m - i0 : 4;
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
      const int64_t w = hd - d0 < 64 ? hd - d0 : 64;
      const int nc = (int)((w + 15) / 16);
      const __mmask16 ml = il__tail(w - 16 * (nc - 1));
      switch (R) {
      case 4: IL__PV_NC(4) break;
      case 3: IL__PV_NC(3) break;
      case 2: IL__PV_NC(2) break;
      default: IL__PV_NC(1) break;
      }
    }
  }
}

static float il__exp_sum(float *s, int n, float mx) {
  const __m512 mv = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = il__tail(n - j);
    const __m512 e = il__exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mv));
    _mm512_mask_storeu_ps(s + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

static float il__max(const float *s, int n) {
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  for (int j = 0; j < n; j += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, il__tail(n - j), s + j));
  return _mm512_reduce_max_ps(mx);
}

const il__attn_isa il__attn_isa_avx512 = {.compiled = true,
                                          .name = "avx512",
                                          .width = 8,
                                          .qk = il__qk,
                                          .pv = il__pv,
                                          .exp_sum = il__exp_sum,
                                          .max = il__max};

#else
const il__attn_isa il__attn_isa_avx512 = {.compiled = false, .name = "avx512"};
#endif
