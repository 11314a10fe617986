/* backend/cpu/attn_avx512: AVX-512 micro-kernels for the attention drivers in attn.c.
 *
 * Q K^T runs in blocks of up to 4 query rows x 4 keys: each 16-float chunk of a key is loaded
 * (and, for F16 caches, converted with vcvtph2ps) once and used by 4 rows, and the 16
 * accumulators are reduced in one shuffle tree into a single vector of 16 dot products (lane
 * 4r + c = row r, key c). P V runs in blocks of up to 4 rows x 64 output floats kept in 16
 * registers while the keys stream by. exp is the Cephes expf polynomial with 2^n applied by
 * vscalefps (as in ops_avx512.c). Any head size works (masked tails); attn.c sends head sizes
 * that are not a multiple of 8 to the scalar table anyway (flash declines them).
 * Head size 8 (stories260K) has kernels of its own: a key is half a vector there, so the
 * general ones ran half-empty lanes and reduced 16 accumulators per 4 keys (and P V advanced one
 * FMA chain per key). Those put two keys in a vector: Q K^T takes 16 keys per step with one
 * 3-level shuffle tree, P V 4 keys per step on two chains per row.
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
IL__INLINE void il__qk_block(float *s, size_t lds, const float *const *q, const int R, const char *k, size_t ks,
                             int nk, int64_t hd, int f16, float scale) {
  const void *kp[4];
  #pragma GCC unroll 16
  for (int c = 0; c < 4; c++) kp[c] = k + (size_t)(c < nk ? c : nk - 1) * ks;
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

/* ---- head size 8: two keys per vector ---- */

/* Keys a and b (8 elements each) as one vector: a in lanes 0-7, b in lanes 8-15. */
IL__INLINE __m512 il__ld8x2(const void *a, const void *b, int f16) {
  if (f16 == 0)
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(a)), _mm_loadu_si128(b), 1);
  if (f16 == 1) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

IL__INLINE __m256 il__ld8(const void *a, int f16) {
  if (f16 == 0) return _mm256_loadu_ps(a);
  const __m128i h = _mm_loadu_si128(a);
  if (f16 == 1) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Scores of m rows against n keys, 16 keys per step. Vector i < 4 holds keys i and 4 + i,
 * vector 4 + i keys 8 + i and 12 + i; the reduction then leaves key c's dot product in lane c
 * (levels 1-2 sum within 128-bit blocks, 4 vectors to the lanes of a block; level 3 adds the
 * two blocks of each key). Missing keys of the last step repeat the last one, unstored. */
IL__INLINE void il__qk8(float *s, size_t lds, const float *const *q, int m, const char *k, size_t ks, int n, int f16,
                        float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int nk = n - j0 < 16 ? n - j0 : 16;
    const void *kp[16];
    #pragma GCC unroll 16
    for (int c = 0; c < 16; c++) kp[c] = k + (size_t)(j0 + (c < nk ? c : nk - 1)) * ks;
    __m512 kv[8];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      kv[i] = il__ld8x2(kp[i], kp[4 + i], f16);
      kv[4 + i] = il__ld8x2(kp[8 + i], kp[12 + i], f16);
    }
    const __mmask16 mk = il__tail(nk);
    for (int r = 0; r < m; r++) {
      const __m512 qv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q[r]))));
      __m512 x[4], y[2];
      #pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m512 a = _mm512_mul_ps(kv[2 * i], qv), b = _mm512_mul_ps(kv[2 * i + 1], qv);
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
      }
      #pragma GCC unroll 2
      for (int i = 0; i < 2; i++)
        y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44), _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
      const __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
      _mm512_mask_storeu_ps(s + (size_t)r * lds + j0, mk, _mm512_mul_ps(z, vs));
    }
  }
}

/* o[r] += p[r] V for R rows, 4 keys per step: keys j, j+1 in one vector times p[j] and p[j+1]
 * spread over its halves, keys j+2, j+3 on a second accumulator (two FMA chains per row). */
IL__INLINE void il__pv8_block(float *const *o, const float *p, size_t ldp, const int R, const char *v, size_t vs,
                              int n, int f16) {
  const __m512i lo = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i hi = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512 acc[4][2];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const char *vj = v + (size_t)j * vs;
    const __m512 v01 = il__ld8x2(vj, vj + vs, f16), v23 = il__ld8x2(vj + 2 * vs, vj + 3 * vs, f16);
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      const __m512 p4 = _mm512_castps128_ps512(_mm_loadu_ps(p + (size_t)r * ldp + j));
      acc[r][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(lo, p4), v01, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(hi, p4), v23, acc[r][1]);
    }
  }
  __m256 o8[4];
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    const __m512 a = _mm512_add_ps(acc[r][0], acc[r][1]);
    o8[r] = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
  }
  for (; j < n; j++) {
    const __m256 vv = il__ld8(v + (size_t)j * vs, f16);
    #pragma GCC unroll 4
    for (int r = 0; r < R; r++) o8[r] = _mm256_fmadd_ps(_mm256_set1_ps(p[(size_t)r * ldp + j]), vv, o8[r]);
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; r++) _mm256_storeu_ps(o[r], _mm256_add_ps(_mm256_loadu_ps(o[r]), o8[r]));
}

IL__INLINE void il__pv8(float *const *o, const float *p, size_t ldp, int m, const char *v, size_t vs, int n, int f16) {
  int i0 = 0;
  for (; i0 + 4 <= m; i0 += 4) il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 4, v, vs, n, f16);
  switch (m - i0) {
  case 3: il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 3, v, vs, n, f16); break;
  case 2: il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 2, v, vs, n, f16); break;
  case 1: il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 1, v, vs, n, f16); break;
  default: break;
  }
}

/* ---- any head size ---- */

static void il__qk(float *s, size_t lds, const float *const *q, int m, const void *kv, size_t ks, int n, int64_t hd,
                   il_dtype kt, float scale) {
  const int f16 = kt == IL_DTYPE_F16 ? 1 : kt == IL_DTYPE_BF16 ? 2 : kt == IL_DTYPE_Q8_0 ? 3 : 0;
  const char *k = kv;
  if (hd == 8 && f16 != 3) {
    if (f16 == 1) il__qk8(s, lds, q, m, k, ks, n, 1, scale);
    else if (f16 == 2) il__qk8(s, lds, q, m, k, ks, n, 2, scale);
    else il__qk8(s, lds, q, m, k, ks, n, 0, scale);
    return;
  }
  for (int j0 = 0; j0 < n; j0 += 4) {
    const int nk = n - j0 < 4 ? n - j0 : 4;
    const char *kj = k + (size_t)j0 * ks;
    int i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 4, kj, ks, nk, hd, f16, scale);
    switch (m - i0) {
    case 3: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 3, kj, ks, nk, hd, f16, scale); break;
    case 2: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 2, kj, ks, nk, hd, f16, scale); break;
    case 1: il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 1, kj, ks, nk, hd, f16, scale); break;
    default: break;
    }
  }
}

/* R rows x NC chunks of 16 output floats starting at d0 (the last chunk masked by mlast). */
IL__INLINE void il__pv_block(float *const *o, const float *p, size_t ldp, const int R, const char *v, size_t vs,
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
    for (int c = 0; c < NC; c++) vv[c] = il__ld(v + (size_t)j * vs, d0 + 16 * c, c == NC - 1 ? mlast : 0xffff, f16);
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
  case 4: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 4, ml, f16); break;      \
  case 3: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 3, ml, f16); break;      \
  case 2: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 2, ml, f16); break;      \
  default: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 1, ml, f16); break;     \
  }

static void il__pv(float *const *o, const float *p, size_t ldp, int m, const void *vv, size_t vs, int n, int64_t hd,
                   il_dtype vt) {
  const int f16 = vt == IL_DTYPE_F16 ? 1 : vt == IL_DTYPE_BF16 ? 2 : vt == IL_DTYPE_Q8_0 ? 3 : 0;
  const char *v = vv;
  if (hd == 8 && f16 != 3) {
    if (f16 == 1) il__pv8(o, p, ldp, m, v, vs, n, 1);
    else if (f16 == 2) il__pv8(o, p, ldp, m, v, vs, n, 2);
    else il__pv8(o, p, ldp, m, v, vs, n, 0);
    return;
  }
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
