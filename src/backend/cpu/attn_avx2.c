/* backend/cpu/attn_avx2: AVX2 + FMA + F16C micro-kernels for the attention drivers in attn.c.
 *
 * The same shapes as attn_avx512.c in 8-float vectors, sized for 16 ymm registers: Q K^T in
 * blocks of up to 2 query rows x 4 keys (8 accumulators reduced by one hadd/permute tree into
 * the 8 dot products), P V in blocks of up to 2 rows x 32 output floats. exp is the Cephes
 * expf polynomial with 2^n built in the exponent bits (inputs clamped to [-87.3, 88], so an
 * exp that underflows comes out as about 1e-38 rather than 0: harmless next to the row max's
 * exp of 1). Head sizes must be a multiple of 8 (attn.c uses the scalar table otherwise); key
 * counts are arbitrary.
 * Head size 8 (stories260K) has kernels of its own, as in attn_avx512.c: Q K^T takes 8 keys per
 * step (one hadd tree and one store per row for 8 scores), P V four keys per step on four FMA
 * chains per row.
 * Not for: the tiling, softmax bookkeeping and threading (attn.c).
 */
#include "backend/cpu/attn.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/simd_avx2.h"

#define IL__INLINE static inline __attribute__((always_inline))

/* kind: 0 f32, 1 f16, 2 bf16 (the upper half of an f32: shift the 16 bits into place), 3 q8_0
 * (blocks of 32: an fp16 scale then 32 int8; d is a multiple of 8, so 8 values never cross a
 * block) */
IL__INLINE __m256 il__ld(const void *row, int64_t d, int f16) {
  if (f16 == 3) {
    const il_block_q8_0 *blk = (const il_block_q8_0 *)row + d / IL_QK;
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk->qs + d % IL_QK))));
    return _mm256_mul_ps(q, _mm256_set1_ps(_cvtsh_ss(blk->d)));
  }
  if (f16 == 1) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
  if (f16 == 2)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d))), 16));
  return _mm256_loadu_ps((const float *)row + d);
}

/* exp for the softmax: inputs clamped to [-87.3, 88] and 2^n in one factor (an underflow
 * gives about 1e-38, not 0: harmless next to the row max's exp of 1; cheaper than il__exp8). */
IL__INLINE __m256 il__exp8_softmax(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3365447504f));
  __m256 n;
  const __m256 y = il__exp8_reduced(x, &n);
  return _mm256_mul_ps(y, il__pow2i8(_mm256_cvtps_epi32(n)));
}

/* Lane i of the result = horizontal sum of v[i]. */
IL__INLINE __m256 il__hsum8(const __m256 *v) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

IL__INLINE float il__hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* R (1 or 2) rows x 4 keys (nk valid; the others duplicate the last key and are not stored). */
IL__INLINE void il__qk_block(float *s, size_t lds, const float *const *q, const int R, const char *k, size_t ks,
                             int nk, int64_t hd, int f16, float scale) {
  const void *kp[4];
  #pragma GCC unroll 16
  for (int c = 0; c < 4; c++) kp[c] = k + (size_t)(c < nk ? c : nk - 1) * ks;
  __m256 acc[8];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 kv[4];
    #pragma GCC unroll 16
    for (int c = 0; c < 4; c++) kv[c] = il__ld(kp[c], d, f16);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
      #pragma GCC unroll 16
      for (int c = 0; c < 4; c++) acc[4 * r + c] = _mm256_fmadd_ps(qv, kv[c], acc[4 * r + c]);
    }
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_mul_ps(il__hsum8(acc), _mm256_set1_ps(scale)));
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < nk; c++) s[(size_t)r * lds + c] = out[4 * r + c];
}

/* ---- head size 8: a key is one vector ---- */

/* Lanes below n set (n < 8). */
IL__INLINE __m256i il__first(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Scores of m rows against n keys, 8 keys per step: each key is loaded (and converted) once for
 * all rows, and a row's 8 products are reduced by one hadd tree into its 8 dot products, stored
 * with one write (the general kernel reduced 4 keys per tree and stored them one by one).
 * Missing keys of the last step repeat the last one, unstored. */
IL__INLINE void il__qk8(float *s, size_t lds, const float *const *q, int m, const char *k, size_t ks, int n, int f16,
                        float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    const int nk = n - j0 < 8 ? n - j0 : 8;
    __m256 kv[8];
    #pragma GCC unroll 8
    for (int c = 0; c < 8; c++) kv[c] = il__ld(k + (size_t)(j0 + (c < nk ? c : nk - 1)) * ks, 0, f16);
    for (int r = 0; r < m; r++) {
      const __m256 qv = _mm256_loadu_ps(q[r]);
      __m256 pr[8];
      #pragma GCC unroll 8
      for (int c = 0; c < 8; c++) pr[c] = _mm256_mul_ps(qv, kv[c]);
      const __m256 d = _mm256_mul_ps(il__hsum8(pr), vs);
      if (nk == 8) _mm256_storeu_ps(s + (size_t)r * lds + j0, d);
      else _mm256_maskstore_ps(s + (size_t)r * lds + j0, il__first(nk), d);
    }
  }
}

/* o[r] += p[r] V for R (1 or 2) rows, keys j..j+3 on four FMA chains per row (one chain per
 * row, as the general kernel runs a head of 8, waits an FMA latency per key). */
IL__INLINE void il__pv8_block(float *const *o, const float *p, size_t ldp, const int R, const char *v, size_t vs,
                              int n, int f16) {
  __m256 acc[2][4];
  #pragma GCC unroll 2
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) acc[r][c] = _mm256_setzero_ps();
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    __m256 vv[4];
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) vv[c] = il__ld(v + (size_t)(j + c) * vs, 0, f16);
    #pragma GCC unroll 2
    for (int r = 0; r < R; r++)
      #pragma GCC unroll 4
      for (int c = 0; c < 4; c++) acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(p[(size_t)r * ldp + j + c]), vv[c], acc[r][c]);
  }
  for (; j < n; j++) {
    const __m256 vv = il__ld(v + (size_t)j * vs, 0, f16);
    #pragma GCC unroll 2
    for (int r = 0; r < R; r++) acc[r][0] = _mm256_fmadd_ps(_mm256_set1_ps(p[(size_t)r * ldp + j]), vv, acc[r][0]);
  }
  #pragma GCC unroll 2
  for (int r = 0; r < R; r++) {
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]));
    _mm256_storeu_ps(o[r], _mm256_add_ps(_mm256_loadu_ps(o[r]), sum));
  }
}

IL__INLINE void il__pv8(float *const *o, const float *p, size_t ldp, int m, const char *v, size_t vs, int n, int f16) {
  int i0 = 0;
  for (; i0 + 2 <= m; i0 += 2) il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 2, v, vs, n, f16);
  if (i0 < m) il__pv8_block(o + i0, p + (size_t)i0 * ldp, ldp, 1, v, vs, n, f16);
}

/* ---- any head size (a multiple of 8) ---- */

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
    for (; i0 + 2 <= m; i0 += 2) il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 2, kj, ks, nk, hd, f16, scale);
    if (i0 < m) il__qk_block(s + (size_t)i0 * lds + j0, lds, q + i0, 1, kj, ks, nk, hd, f16, scale);
  }
}

/* R rows x NC chunks of 8 output floats starting at d0. */
IL__INLINE void il__pv_block(float *const *o, const float *p, size_t ldp, const int R, const char *v, size_t vs,
                             int n, int64_t d0, const int NC, int f16) {
  __m256 acc[2][4];
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++) acc[r][c] = _mm256_loadu_ps(o[r] + d0 + 8 * c);
  for (int j = 0; j < n; j++) {
    __m256 vv[4];
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++) vv[c] = il__ld(v + (size_t)j * vs, d0 + 8 * c, f16);
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      const __m256 pr = _mm256_set1_ps(p[(size_t)r * ldp + j]);
      #pragma GCC unroll 16
      for (int c = 0; c < NC; c++) acc[r][c] = _mm256_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    #pragma GCC unroll 16
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(o[r] + d0 + 8 * c, acc[r][c]);
}

#define IL__PV_NC(R)                                                                                                   \
  switch (nc) {                                                                                                        \
  case 4: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 4, f16); break;          \
  case 3: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 3, f16); break;          \
  case 2: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 2, f16); break;          \
  default: il__pv_block(o + i0, p + (size_t)i0 * ldp, ldp, R, v, vs, n, d0, 1, f16); break;         \
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
  for (int i0 = 0; i0 < m; i0 += 2) {
    for (int64_t d0 = 0; d0 < hd; d0 += 32) {
      const int nc = (int)((hd - d0 < 32 ? hd - d0 : 32) / 8);
      if (m - i0 >= 2) {
        IL__PV_NC(2)
      } else {
        IL__PV_NC(1)
      }
    }
  }
}

static float il__exp_sum(float *s, int n, float mx) {
  const __m256 mv = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = il__exp8_softmax(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < n) {
    float t[8] = {0};
    memcpy(t, s + j, (size_t)(n - j) * sizeof(float));
    const __m256 e = il__exp8_softmax(_mm256_sub_ps(_mm256_loadu_ps(t), mv));
    _mm256_storeu_ps(t, e);
    memcpy(s + j, t, (size_t)(n - j) * sizeof(float));
    float tail = 0;
    for (int i = 0; i < n - j; i++) tail += t[i];
    return il__hsum(sum) + tail;
  }
  return il__hsum(sum);
}

static float il__max(const float *s, int n) {
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  int j = 0;
  for (; j + 8 <= n; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
  float t[8];
  _mm256_storeu_ps(t, mx);
  float m = t[0];
  for (int i = 1; i < 8; i++) m = t[i] > m ? t[i] : m;
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

const il__attn_isa il__attn_isa_avx2 = {.compiled = true,
                                        .name = "avx2",
                                        .width = 8,
                                        .qk = il__qk,
                                        .pv = il__pv,
                                        .exp_sum = il__exp_sum,
                                        .max = il__max};

#else
const il__attn_isa il__attn_isa_avx2 = {.compiled = false, .name = "avx2"};
#endif
