/* backend/cpu/matmul_q5_avx512: AVX-512 (BW + VNNI) tiles for Q5_0, Q5_1 and IQ4_NL weights.
 *
 * A tile is R <= 4 rows x T <= 4 tokens over the whole row, two 32-element blocks (one zmm of
 * weights, one of activations) per step. A block's 16 nibble bytes become its 32 elements in
 * order (low nibbles = elements 0..15, high = 16..31, as the activation layout stores them):
 *   Q5_0/Q5_1: the 5th bits are one 64-bit mask (qh of both blocks) and one masked byte add of
 *     16; the values 0..31 are vpdpbusd's unsigned operand. Q5_0's -16 is the activation-side
 *     -16*sum(x) seeding the accumulator; Q5_1's m*sum(x) is one FMA per step for the tile's
 *     rows (their mins in the lanes of the scales), summed per row at the end.
 *   IQ4_NL: vpshufb looks the nibbles up in the levels + 128 (unsigned, 1..241), and the
 *     activation's -128*sum(x) (Q8_0's aux) seeds the accumulator.
 * The two blocks' int32 sums are lanes 0-7 and 8-15; one vcvtph2ps converts the tile's 8 fp16
 * scales, times the tokens' activation scales. Every row's sum is computed and reduced the same
 * way whatever R and T are, so a token alone gives the bits it gets in a batch.
 * Not for: dispatch (matmul.c), Q8_0/Q4 weights (matmul_avx512.c).
 */
#include "backend/cpu/matmul_q5.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

#include <immintrin.h>
#include <string.h>

#define IL__INLINE static inline __attribute__((always_inline))

IL__INLINE uint64_t il__u16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* Blocks b (and b + 1 when two) of a row at p as 64 unsigned bytes in element order. */
IL__INLINE __m512i il__unpack2(const uint8_t *p, size_t bs, int kind, bool two, __m512i tbl) {
  const size_t qo = il__q5_qs_off(kind);
  const __m128i q0 = _mm_loadu_si128((const __m128i *)(p + qo));
  const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(p + bs + qo)) : _mm_setzero_si128();
  /* lanes [q0, q0, q1, q1], lanes 1 and 3 shifted down a nibble: [lo0, hi0, lo1, hi1] */
  const __m512i v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(q0), 0xFF00, q1);
  const __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0x0F));
  if (kind == IL__K_IQ4_NL) return _mm512_shuffle_epi8(tbl, u);
  uint32_t h0, h1 = 0;
  memcpy(&h0, p + qo - 4, 4);
  if (two) memcpy(&h1, p + bs + qo - 4, 4);
  return _mm512_mask_add_epi8(u, (__mmask64)((uint64_t)h0 | (uint64_t)h1 << 32), u, _mm512_set1_epi8(0x10));
}

IL__INLINE void il__tile(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const int kind) {
  const int64_t nb = a->n_in / IL_QK;
  const size_t bs = il__q5_block(kind);
  __m512 acc[4][4];
  float tail[4][4] = {{0}};
  /* Q5_1: m * dx * sum(x) per block, lanes [r0 b, r0 b+1, r1 b, ...] as the scales */
  __m256 macc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const uint8_t *w[4], *xq[4];
  const float *dx[4];
  const int32_t *aux[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    aux[j] = (const int32_t *)(xq[j] + il__act_aux_off(a->n_in, IL_QK));
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, true);
  __m512i tbl = _mm512_setzero_si512();
  if (kind == IL__K_IQ4_NL) {
    int8_t l[16];
    for (int k = 0; k < 16; k++) l[k] = (int8_t)(il_iq4nl_values[k] + 128); /* 1..241 as bytes */
    tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)l));
  }
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    il__pf_rows_step(&pf, (size_t)b * bs, 2 * bs);
    __m512i u[4];
    uint64_t sd[2] = {0, 0}, sm[2] = {0, 0}; /* fp16 scales (and Q5_1 mins): [r0 b, r0 b+1, r1 b, ...] */
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + (size_t)b * bs;
      u[i] = il__unpack2(p, bs, kind, two, tbl);
      sd[i >> 1] |= (il__u16(p) | (two ? il__u16(p + bs) : 0) << 16) << (32 * (i & 1));
      if (kind == IL__K_Q5_1) sm[i >> 1] |= (il__u16(p + 2) | (two ? il__u16(p + bs + 2) : 0) << 16) << (32 * (i & 1));
    }
    const __m256 dw8 = _mm256_cvtph_ps(_mm_set_epi64x((long long)sd[1], (long long)sd[0]));
    const __m256 m8 = kind == IL__K_Q5_1 ? _mm256_cvtph_ps(_mm_set_epi64x((long long)sm[1], (long long)sm[0])) : dw8;
    for (int j = 0; j < T; j++) {
      const __m512i X = two ? _mm512_loadu_si512(xq[j] + b * IL_QK)
                            : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK)));
      const float d0 = dx[j][b], d1 = two ? dx[j][b + 1] : 0.0f;
      const int32_t c0 = aux[j][b], c1 = two ? aux[j][b + 1] : 0;
      const __m512 dd = _mm512_castps256_ps512(_mm256_mul_ps(dw8, _mm256_setr_ps(d0, d1, d0, d1, d0, d1, d0, d1)));
      __m512i seed = _mm512_setzero_si512();
      if (kind == IL__K_Q5_0) seed = _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, c0 / 8), 0x0100, c1 / 8);
      if (kind == IL__K_IQ4_NL) seed = _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, c0), 0x0100, c1);
      if (kind == IL__K_Q5_1) { /* dx * sum(x) of both blocks, times every row's mins */
        const float sx0 = d0 * (float)(c0 / -128), sx1 = d1 * (float)(c1 / -128);
        macc[j] = _mm256_fmadd_ps(m8, _mm256_setr_ps(sx0, sx1, sx0, sx1, sx0, sx1, sx0, sx1), macc[j]);
      }
      for (int i = 0; i < R; i++) {
        const __m512i s = _mm512_dpbusd_epi32(seed, u[i], X);
        const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                             _mm512_set1_epi32(2 * i));
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx, dd), acc[i][j]);
      }
    }
  }
  if (kind == IL__K_Q5_1)
    for (int j = 0; j < T; j++) {
      float m[8];
      _mm256_storeu_ps(m, macc[j]);
      for (int i = 0; i < R; i++) tail[i][j] = m[2 * i] + m[2 * i + 1];
    }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) a->y[(t + j) * a->ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]) + tail[i][j];
}

/* Rows [r0, r1) x all tokens: token tiles of up to 4, row tiles of 4 then 1. */
#define IL__Q5_ROWS(name, kind)                                                              \
  void name(const il__mm_args *a, int64_t r0, int64_t r1) {                                  \
    for (int64_t t = 0; t < a->n_tok; t += 4) {                                              \
      const int64_t nt = a->n_tok - t < 4 ? a->n_tok - t : 4;                                \
      int64_t r = r0;                                                                        \
      switch (nt) {                                                                          \
      case 1:                                                                                \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 1, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 1, kind);                                   \
        break;                                                                               \
      case 2:                                                                                \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 2, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 2, kind);                                   \
        break;                                                                               \
      case 3:                                                                                \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 3, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 3, kind);                                   \
        break;                                                                               \
      default:                                                                               \
        for (; r + 4 <= r1; r += 4) il__tile(a, r, t, 4, 4, kind);                           \
        for (; r < r1; r++) il__tile(a, r, t, 1, 4, kind);                                   \
        break;                                                                               \
      }                                                                                      \
    }                                                                                        \
  }

IL__Q5_ROWS(il__rows_q5_0_avx512, IL__K_Q5_0)
IL__Q5_ROWS(il__rows_q5_1_avx512, IL__K_Q5_1)
IL__Q5_ROWS(il__rows_iq4_nl_avx512, IL__K_IQ4_NL)

IL__Q5_GEMM_VIA_Q8(il__gemm_q5_avx512, il__gemm_avx512_q8_0)

#endif
