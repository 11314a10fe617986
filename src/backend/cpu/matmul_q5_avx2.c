/* backend/cpu/matmul_q5_avx2: AVX2 tiles for Q5_0, Q5_1 and IQ4_NL weights (both AVX2 tables).
 *
 * A tile is R <= 4 rows x T <= 2 tokens over the whole row, one 32-element block (one ymm) per
 * step. The 16 nibble bytes become the block's 32 elements in order (low nibbles = elements
 * 0..15, high = 16..31, the activation layout's order):
 *   Q5_0/Q5_1: qh broadcast, each byte picking its bit (vpshufb + compare), adds the 5th bit;
 *     the values 0..31 are vpmaddubsw's unsigned operand (pairs at most 2*31*127). Q5_0's -16
 *     is folded in as -16*sum(x) of the activation; Q5_1's m*sum(x) is a float term per block.
 *   IQ4_NL: vpshufb looks the nibbles up in the signed levels, and the products take the sign
 *     trick (|w| against x with w's sign: pairs at most 2*127*127), as plain AVX2's Q8_0 does.
 * Every row's sum is accumulated and reduced the same way whatever R and T are, so a token alone
 * gives the bits it gets in a batch. The AVX-VNNI table uses these tiles too (no vpdpbusd).
 * Not for: dispatch (matmul.c), Q8_0/Q4 weights (matmul_avx2.c).
 */
#include "backend/cpu/matmul_q5.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#define IL__INLINE static inline __attribute__((always_inline))

IL__INLINE float il__hf(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

IL__INLINE float il__hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* The block at p as 32 bytes in element order: unsigned 0..31 (Q5) or the signed levels (IQ4_NL). */
IL__INLINE __m256i il__unpack(const uint8_t *p, int kind, __m256i tbl) {
  const size_t qo = il__q5_qs_off(kind);
  const __m128i q = _mm_loadu_si128((const __m128i *)(p + qo));
  const __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
  if (kind == IL__K_IQ4_NL) return _mm256_shuffle_epi8(tbl, u);
  int32_t qh;
  memcpy(&qh, p + qo - 4, 4);
  /* byte k gets byte k/8 of qh, then keeps bit k%8 */
  const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                                      0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
  return _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

IL__INLINE void il__tile(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const int kind) {
  const int64_t nb = a->n_in / IL_QK;
  const size_t bs = il__q5_block(kind);
  __m256 acc[4][2];
  float tail[4][2] = {{0}};
  const uint8_t *w[4], *xq[2];
  const float *dx[2];
  const int32_t *aux[2];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    aux[j] = (const int32_t *)(xq[j] + il__act_aux_off(a->n_in, IL_QK));
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm256_setzero_ps();
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, false);
  const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)il_iq4nl_values));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; b++) {
    il__pf_rows_step(&pf, (size_t)b * bs, bs);
    __m256i u[4], s8[4];
    float dw[4], mw[4];
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + (size_t)b * bs;
      u[i] = il__unpack(p, kind, tbl);
      if (kind == IL__K_IQ4_NL) { /* sign trick: |w| unsigned, x takes w's sign */
        s8[i] = u[i];
        u[i] = _mm256_sign_epi8(u[i], u[i]);
      }
      dw[i] = il__hf(p);
      if (kind == IL__K_Q5_1) mw[i] = il__hf(p + 2);
    }
    for (int j = 0; j < T; j++) {
      const __m256i X = _mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK));
      const int32_t c = aux[j][b];
      const __m256i corr = _mm256_setr_epi32(kind == IL__K_Q5_0 ? c / 8 : 0, 0, 0, 0, 0, 0, 0, 0);
      const float sx = dx[j][b] * (float)(c / -128); /* Q5_1: dx * sum(x) */
      for (int i = 0; i < R; i++) {
        const __m256i xs = kind == IL__K_IQ4_NL ? _mm256_sign_epi8(X, s8[i]) : X;
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u[i], xs), ones), corr);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[i] * dx[j][b]), acc[i][j]);
        if (kind == IL__K_Q5_1) tail[i][j] += mw[i] * sx;
      }
    }
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) a->y[(t + j) * a->ldy + r + i] = il__hsum(acc[i][j]) + tail[i][j];
}

/* Rows [r0, r1) x all tokens: token pairs (then one), row tiles of 4 then 1. */
#define IL__Q5_ROWS(name, kind)                                                              \
  void name(const il__mm_args *a, int64_t r0, int64_t r1) {                                  \
    for (int64_t t = 0; t < a->n_tok; t += 2) {                                              \
      int64_t r = r0;                                                                        \
      if (a->n_tok - t >= 2) {                                                               \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 2, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 2, kind);                                   \
      } else {                                                                               \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 1, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 1, kind);                                   \
      }                                                                                      \
    }                                                                                        \
  }

IL__Q5_ROWS(il__rows_q5_0_avx2, IL__K_Q5_0)
IL__Q5_ROWS(il__rows_q5_1_avx2, IL__K_Q5_1)
IL__Q5_ROWS(il__rows_iq4_nl_avx2, IL__K_IQ4_NL)

IL__Q5_GEMM_VIA_Q8(il__gemm_q5_avx2, il__gemm_avx2_q8_0)
IL__Q5_GEMM_VIA_Q8(il__gemm_q5_avx2_vnni, il__gemm_avx2_vnni_q8_0)

#endif
