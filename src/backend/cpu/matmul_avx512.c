/* backend/cpu/matmul_avx512: AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels. Hot path.
 *
 * Every kernel is one tile function computing R output rows x T tokens (R <= 4, T <= 4) over
 * the whole n_in, instantiated for the (R, T) pairs the driver needs; with one token it is a
 * 4-row GEMV that loads each activation vector once for 4 rows and keeps 4 independent
 * accumulator chains, and with a batch each weight vector is unpacked once and reused for T
 * tokens while each activation vector is reused for R rows. Rows ahead are prefetched in
 * software (il__pf_rows, kernels.h); that, more than the arithmetic, is what brings generation
 * to the bandwidth roofline.
 *
 * Integer paths (weights read in place from their GGUF blocks, no repacking):
 *   Q4_0/Q4_1: four blocks' 16-byte nibble arrays form one zmm; AND 0x0F gives their first
 *     halves and a shift (or one GFNI affine op) their second halves, as unsigned u8 operands of
 *     vpdpbusd against the activation stored in the matching order (see kernels.h). Q4_0's -8
 *     offset is the activation-side -8*sum(q) that seeds the integer accumulator, so there is
 *     no per-weight correction; Q4_1's m*sum term is one FMA per token and 4 blocks x 4 rows.
 *   Q8_0: weights flipped to unsigned (w ^ 0x80 = w + 128) as vpdpbusd's u8 operand; the
 *     activation-side -128*sum(x) seeds the accumulator (one XOR per weight vector, no sign trick).
 *   Block scales: for 4 blocks x 4 rows, each row's four fp16 words are packed in a GPR (2-byte
 *     loads never split a cache line; a 64-byte load + vpermw did, and cost 20% of Q8_0's
 *     in-cache speed) and broadcast into its quarter of one vector, one vcvtph2ps converts all
 *     16, one multiply applies the activation scales, and a vpermps per row spreads them over
 *     the int32 lanes.
 *   K-quants: vpmaddubsw + vpdpwssd against the 6/8-bit sub-block scales, one int32
 *     accumulator per super-block, mins/offsets from the activation block sums.
 * Float paths: F16 via vcvtph2ps, BF16 via a 16-bit shift (exact), F32 direct; all FMA.
 * Only zmm forms of vpdpbusd/vpdpwssd are used, which exist only as EVEX (AVX512_VNNI), so
 * this file never needs the separate AVX-VNNI CPUID bit.
 * Not for: dispatch and threading (matmul.c).
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
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
IL__INLINE float il__hf(const uint8_t *p) { return _cvtsh_ss((unsigned short)il__u16(p)); }


/* ================================================================ activation quantization */

IL__INLINE float il__amax_scale(__m512 m, float *id) {
  const float amax = _mm512_reduce_max_ps(m);
  const float d = amax / 127.0f;
  *id = d != 0.0f ? 1.0f / d : 0.0f;
  return d;
}

static void il__quant_a32(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t nb = a->n_in / IL_QK;
  const bool q8 = il__is_a32n(a->type);
  for (int64_t u = u0; u < u1; u++) {
    const int64_t t = u / nb, b = u % nb;
    uint8_t *row = a->act + (size_t)t * a->act_stride;
    const float *x = a->x + t * a->n_in + b * IL_QK;
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    float id;
    const float d = il__amax_scale(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)), &id);
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
    const __m128i b0 = _mm512_cvtsepi32_epi8(q0), b1 = _mm512_cvtsepi32_epi8(q1);
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    ((float *)(row + il__act_d_off(a->n_in)))[b] = d;
    uint8_t *aux = row + il__act_aux_off(a->n_in, IL_QK) + 4 * b;
    if (q8) {
      _mm_storeu_si128((__m128i *)(row + b * IL_QK), b0);
      _mm_storeu_si128((__m128i *)(row + b * IL_QK + 16), b1);
      const int32_t v = -128 * sum;
      memcpy(aux, &v, 4);
    } else {
      _mm_storeu_si128((__m128i *)(row + il__act_q4_pos(b, 0, nb)), b0);
      _mm_storeu_si128((__m128i *)(row + il__act_q4_pos(b, 16, nb)), b1);
      if (a->type == IL_DTYPE_Q4_0) {
        const int32_t v = -8 * sum;
        memcpy(aux, &v, 4);
      } else {
        const float v = d * (float)sum;
        memcpy(aux, &v, 4);
      }
    }
  }
}

static void il__quant_ak(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t nb = a->n_in / IL_QK_K;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t t = u / nb, b = u % nb;
    uint8_t *row = a->act + (size_t)t * a->act_stride;
    const float *x = a->x + t * a->n_in + b * IL_QK_K;
    __m512 m = _mm512_setzero_ps();
    for (int s = 0; s < 16; s++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * s)));
    float id;
    ((float *)(row + il__act_d_off(a->n_in)))[b] = il__amax_scale(m, &id);
    const __m512 vid = _mm512_set1_ps(id);
    int16_t *bs16 = (int16_t *)(row + il__act_aux_off(a->n_in, IL_QK_K)) + 16 * b;
    int16_t *bs32 = (int16_t *)(row + il__act_bsum32_off(a->n_in)) + 8 * b;
    for (int s = 0; s < 16; s++) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * s), vid));
      _mm_storeu_si128((__m128i *)(row + b * IL_QK_K + 16 * s), _mm512_cvtsepi32_epi8(q));
      bs16[s] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    for (int s = 0; s < 8; s++) bs32[s] = (int16_t)(bs16[2 * s] + bs16[2 * s + 1]);
  }
}

/* ================================================================ tile drivers */

/* One token on AMD (il__one_row_tiles, kernels.h): one row at a time. Rows are contiguous, so
 * the reads are one sequential stream (plus the prefetch two rows ahead) instead of four
 * streams a row apart, which AMD's prefetchers follow less well than Intel's (bench_matmul
 * --no-gemm; docs/performance-log.md#one-row-tiles). */

/* rows [r0,r1) x all tokens, in token tiles of up to TM and row tiles of 4 (then 1). */
#define IL__GEN_ROWS(name, tile, TM)                                                         \
  static void name(const il__mm_args *a, int64_t r0, int64_t r1) {                           \
    for (int64_t t = 0; t < a->n_tok; t += TM) {                                             \
      const int64_t nt = a->n_tok - t < TM ? a->n_tok - t : TM;                              \
      int64_t r = r0;                                                                        \
      switch (nt) {                                                                          \
      case 1:                                                                                \
        if (!il__one_row_tiles(a))                                                           \
          for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, 1);                                   \
        for (; r < r1; r++) tile(a, r, t, 1, 1);                                             \
        break;                                                                               \
      case 2:                                                                                \
        for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, 2);                                     \
        for (; r < r1; r++) tile(a, r, t, 1, 2);                                             \
        break;                                                                               \
      case 3:                                                                                \
        for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, 3 % (TM + 1));                          \
        for (; r < r1; r++) tile(a, r, t, 1, 3 % (TM + 1));                                  \
        break;                                                                               \
      default:                                                                               \
        for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, TM);                                    \
        for (; r < r1; r++) tile(a, r, t, 1, TM);                                            \
        break;                                                                               \
      }                                                                                      \
    }                                                                                        \
  }

/* Lane i = horizontal sum of the i-th argument: one shuffle tree for 4 rows (13 instructions)
 * instead of 4 separate reductions (about 40). Small models' rows are a few vectors long
 * (stories260K: 64 floats), so the reductions were a third of the tile's instructions. */
IL__INLINE __m128 il__hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

IL__INLINE void il__store(const il__mm_args *a, int64_t r, int64_t t, int R, int T, __m512 acc[4][4],
                          float tail[4][4]) {
  if (R == 4) {
    for (int j = 0; j < T; j++) {
      const __m128 v = _mm_add_ps(il__hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]),
                                  _mm_set_ps(tail[3][j], tail[2][j], tail[1][j], tail[0][j]));
      _mm_storeu_ps(a->y + (t + j) * a->ldy + r, v);
    }
    return;
  }
  /* fewer rows: the same reduction tree per row as above (il__hsum4's lanes are independent),
   * so a row's result does not depend on the tile that computed it: decoding one token at a
   * time gives the bits of the same tokens in a batch */
  const __m512 z = _mm512_setzero_ps();
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++)
      a->y[(t + j) * a->ldy + r + i] = _mm_cvtss_f32(il__hsum4(acc[i][j], z, z, z)) + tail[i][j];
}

/* ================================================================ float weights */

enum { IL__W_F32, IL__W_F16, IL__W_BF16 };

IL__INLINE __m512 il__loadw(int kind, const uint8_t *w, int64_t k) {
  if (kind == IL__W_F32) return _mm512_loadu_ps(w + 4 * k);
  const __m256i h = _mm256_loadu_si256((const __m256i *)(w + 2 * k));
  if (kind == IL__W_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
IL__INLINE __m512 il__loadw_mask(int kind, const uint8_t *w, int64_t k, __mmask16 m) {
  if (kind == IL__W_F32) return _mm512_maskz_loadu_ps(m, w + 4 * k);
  const __m256i h = _mm256_maskz_loadu_epi16(m, w + 2 * k);
  if (kind == IL__W_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

IL__INLINE void il__tile_float(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T,
                               const int kind) {
  __m512 acc[4][4];
  float tail[4][4] = {{0}};
  const uint8_t *w[4];
  const float *x[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  for (int j = 0; j < T; j++) x[j] = a->x + (t + j) * a->n_in;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
  const int64_t n = a->n_in;
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, false);
  int64_t k = 0;
  /* 16-bit weights: 32 elements (one 64-byte line of each row) per step, one prefetch per line */
  if (kind != IL__W_F32)
    for (; k + 32 <= n; k += 32) {
      il__pf_rows_step(&pf, 2 * (size_t)k, 64);
      for (int h = 0; h < 32; h += 16) {
        __m512 wv[4];
        for (int i = 0; i < R; i++) wv[i] = il__loadw(kind, w[i], k + h);
        for (int j = 0; j < T; j++) {
          const __m512 xv = _mm512_loadu_ps(x[j] + k + h);
          for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
      }
    }
  const size_t es = kind == IL__W_F32 ? 4 : 2;
  for (; k + 16 <= n; k += 16) {
    __m512 wv[4];
    il__pf_rows_step(&pf, (size_t)k * es, 16 * es);
    for (int i = 0; i < R; i++) wv[i] = il__loadw(kind, w[i], k);
    for (int j = 0; j < T; j++) {
      const __m512 xv = _mm512_loadu_ps(x[j] + k);
      for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (k < n) {
    const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
    __m512 wv[4];
    for (int i = 0; i < R; i++) wv[i] = il__loadw_mask(kind, w[i], k, m);
    for (int j = 0; j < T; j++) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[j] + k);
      for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}

IL__INLINE void il__tile_f32(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_float(a, r, t, R, T, IL__W_F32);
}
IL__INLINE void il__tile_f16(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_float(a, r, t, R, T, IL__W_F16);
}
IL__INLINE void il__tile_bf16(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_float(a, r, t, R, T, IL__W_BF16);
}
IL__GEN_ROWS(il__rows_f32, il__tile_f32, 4)
IL__GEN_ROWS(il__rows_f16, il__tile_f16, 4)
IL__GEN_ROWS(il__rows_bf16, il__tile_bf16, 4)

/* ================================================================ Q8_0 / Q4_0 / Q4_1 */

/* Block scales of 4 consecutive blocks in up to 4 rows become one vector of 16 floats, lane
 * 4*i + k = row i, block k (qword i of a vector of fp16 words, filled from a GPR); times the 4
 * activation scales (broadcast to the 4 row groups), a per-row vpermps spreads them over the
 * int32 lanes of each block. */
IL__INLINE __m512i il__row_idx(int i) { /* [4i x4, 4i+1 x4, 4i+2 x4, 4i+3 x4] */
  return _mm512_add_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set1_epi32(4 * i));
}
IL__INLINE __m512i il__row_idx2(int i, int k) { /* [4i+k x8, 4i+k+1 x8] */
  return _mm512_add_epi32(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(4 * i + k));
}

/* Q8_0: weights made unsigned (w ^ 0x80 = w + 128) so they are vpdpbusd's u8 operand against
 * the signed activation; the activation-side -128*sum(x) of each block seeds the accumulator.
 * Four blocks (two zmm) per row and step. */
IL__INLINE void il__tile_q8_0(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  const int64_t nb = a->n_in / IL_QK, ng = nb / 4;
  const size_t bs = sizeof(il_block_q8_0);
  const __m512i c80 = _mm512_set1_epi8((char)0x80);
  const __m512i cidx0 = il__row_idx2(0, 0), cidx1 = il__row_idx2(0, 2);
  __m512 acc[4][4];
  float tail[4][4] = {{0}};
  const uint8_t *w[4], *xq[4], *aux[4];
  const float *dx[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, true); /* into L2 on Intel */
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    aux[j] = xq[j] + il__act_aux_off(a->n_in, IL_QK);
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; g++) {
    __m512i w0[4], w1[4], s = _mm512_setzero_si512();
    il__pf_rows_step(&pf, (size_t)g * 4 * bs, 4 * bs);
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + g * 4 * bs;
      /* the 4 fp16 scales of this row from GPR loads (no cache-line-splitting 64-byte loads) */
      const uint64_t s4 = il__u16(p) | il__u16(p + bs) << 16 | il__u16(p + 2 * bs) << 32 | il__u16(p + 3 * bs) << 48;
      s = _mm512_mask_set1_epi64(s, (__mmask8)(1u << i), (long long)s4);
      w0[i] = _mm512_xor_si512(c80, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2))),
                                                        _mm256_loadu_si256((const __m256i *)(p + bs + 2)), 1));
      w1[i] = _mm512_xor_si512(c80, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2 * bs + 2))),
                                                        _mm256_loadu_si256((const __m256i *)(p + 3 * bs + 2)), 1));
    }
    const __m512 dw16 = _mm512_cvtph_ps(_mm512_castsi512_si256(s));
    for (int j = 0; j < T; j++) {
      const __m512i X0 = _mm512_loadu_si512(xq[j] + g * 128), X1 = _mm512_loadu_si512(xq[j] + g * 128 + 64);
      const __m512 dd = _mm512_mul_ps(dw16, _mm512_broadcast_f32x4(_mm_loadu_ps(dx[j] + 4 * g)));
      const __m512i c4 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(aux[j] + 16 * g)));
      const __m512i corr0 = _mm512_maskz_permutexvar_epi32(0x0101, cidx0, c4);
      const __m512i corr1 = _mm512_maskz_permutexvar_epi32(0x0101, cidx1, c4);
      for (int i = 0; i < R; i++) {
        const __m512i a0 = _mm512_dpbusd_epi32(corr0, w0[i], X0), a1 = _mm512_dpbusd_epi32(corr1, w1[i], X1);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_permutexvar_ps(il__row_idx2(i, 0), dd), acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_permutexvar_ps(il__row_idx2(i, 2), dd), acc[i][j]);
      }
    }
  }
  for (int64_t b = ng * 4; b < nb; b++) { /* trailing blocks */
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m512i wv = _mm512_zextsi256_si512(_mm256_xor_si256(_mm512_castsi512_si256(c80), _mm256_loadu_si256((const __m256i *)(p + 2))));
      const float dwf = il__hf(p);
      for (int j = 0; j < T; j++) {
        const __m512i X = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK)));
        int32_t c;
        memcpy(&c, aux[j] + 4 * b, 4);
        tail[i][j] += (float)(_mm512_reduce_add_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, X)) + c) * (dwf * dx[j][b]);
      }
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__GEN_ROWS(il__rows_q8_0, il__tile_q8_0, 4)

/* Q4_0 / Q4_1: four blocks' 16-byte nibble arrays form one zmm; AND 0x0F gives their first
 * halves, a 4-bit shift their second halves (the activation is stored in this order). */
/* High nibbles as bytes 0..15 in one GFNI affine transform (bit i of the result = bit i+4 of
 * the input) instead of a shift and a mask: one fewer p0/p5 uop per 128 weights, +8% in-cache
 * Q4 throughput. Inline asm so the compiler never emits GFNI on its own; in the table chosen only
 * when CPUID reports it (il__matmul_avx512_gfni), since some AVX-512 VNNI CPUs (Cascade Lake) lack it. */
IL__INLINE __m512i il__gfni_hi_nibbles(__m512i q) {
  const __m512i m = _mm512_set1_epi64(0x1020408000000000ll);
  __m512i r;
  __asm__("vgf2p8affineqb $0, %[m], %[q], %[r]" : [r] "=v"(r) : [q] "v"(q), [m] "v"(m));
  return r;
}

/* Q4_0 with VBMI: a row's 4 blocks (72 bytes) come in as one 64-byte load plus a 16-byte load
 * of the last block's nibbles; one two-table byte permute (vpermt2b) gathers the four 16-byte
 * nibble arrays, and two word permutes (vpermt2w) gather the 16 fp16 scales of 4 rows. That
 * replaces 4 loads and 3 inserts per row and 4 scalar scale loads with their shifts and ORs:
 * the front end, not the loads, limited this kernel. Inline asm for the one VBMI instruction,
 * in the table chosen only when CPUID reports VBMI (il__matmul_avx512_vbmi). */
IL__INLINE __m512i il__vbmi_perm2(__m512i z, __m512i idx, __m512i t2) {
  __asm__("vpermt2b %[t2], %[idx], %[z]" : [z] "+v"(z) : [idx] "v"(idx), [t2] "v"(t2));
  return z;
}
IL__INLINE __m512i il__q4_nib_idx(void) { /* out byte 16b + j = block b's qs[j] */
  uint8_t ix[64];
  for (int b = 0; b < 4; b++)
    for (int j = 0; j < 16; j++) ix[16 * b + j] = (uint8_t)(b < 3 ? 18 * b + 2 + j : 64 + j);
  return _mm512_loadu_si512(ix);
}
IL__INLINE __m512i il__q4_scale_idx(void) { /* words 0..3: table 1's block scales, 4..7: table 2's */
  return _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 59, 50, 41, 32, 27,
                          18, 9, 0);
}

IL__INLINE void il__tile_q4(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const bool q41,
                            const bool gfni, const bool vbmi) {
  const int64_t nb = a->n_in / IL_QK, ng = nb / 4;
  const size_t bs = q41 ? sizeof(il_block_q4_1) : sizeof(il_block_q4_0), qo = q41 ? 4 : 2;
  const __m512i idx4 = il__row_idx(0);
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  const __m512i nib_idx = il__q4_nib_idx(), sc_idx = il__q4_scale_idx();
  __m512 acc[4][4], accm[4];
  float tail[4][4] = {{0}};
  const uint8_t *w[4], *xq[4], *aux[4];
  const float *dx[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, true); /* into L2 on Intel */
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    aux[j] = xq[j] + il__act_aux_off(a->n_in, IL_QK);
    accm[j] = _mm512_setzero_ps();
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t g = 0; g < ng; g++) {
    __m512i lo[4], hi[4], zr[4], sd = _mm512_setzero_si512(), sm = _mm512_setzero_si512();
    il__pf_rows_step(&pf, (size_t)g * 4 * bs, 4 * bs);
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + g * 4 * bs;
      if (vbmi) {
        zr[i] = _mm512_loadu_si512(p);
        const __m512i q = il__vbmi_perm2(zr[i], nib_idx, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 56))));
        lo[i] = _mm512_and_si512(q, m0f);
        hi[i] = il__gfni_hi_nibbles(q);
        continue;
      }
      const uint64_t d4 = il__u16(p) | il__u16(p + bs) << 16 | il__u16(p + 2 * bs) << 32 | il__u16(p + 3 * bs) << 48;
      sd = _mm512_mask_set1_epi64(sd, (__mmask8)(1u << i), (long long)d4);
      if (q41) {
        const uint64_t m4 = il__u16(p + 2) | il__u16(p + bs + 2) << 16 | il__u16(p + 2 * bs + 2) << 32 | il__u16(p + 3 * bs + 2) << 48;
        sm = _mm512_mask_set1_epi64(sm, (__mmask8)(1u << i), (long long)m4);
      }
      /* a balanced insert tree: two 32-byte halves, then one 64-byte vector (depth 2, not 3) */
      const __m256i q01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + qo))),
                                                  _mm_loadu_si128((const __m128i *)(p + bs + qo)), 1);
      const __m256i q23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 2 * bs + qo))),
                                                  _mm_loadu_si128((const __m128i *)(p + 3 * bs + qo)), 1);
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
      lo[i] = _mm512_and_si512(q, m0f);
      hi[i] = gfni ? il__gfni_hi_nibbles(q) : _mm512_and_si512(_mm512_srli_epi16(q, 4), m0f);
    }
    if (vbmi) {
      for (int i = R; i < 4; i++) zr[i] = zr[0];
      const __m512i s01 = _mm512_permutex2var_epi16(zr[0], sc_idx, zr[1]);
      const __m512i s23 = _mm512_permutex2var_epi16(zr[2], sc_idx, zr[3]);
      sd = _mm512_inserti32x4(s01, _mm512_castsi512_si128(s23), 1);
    }
    const __m512 dw16 = _mm512_cvtph_ps(_mm512_castsi512_si256(sd));
    const __m512 m16 = _mm512_cvtph_ps(_mm512_castsi512_si256(sm));
    for (int j = 0; j < T; j++) {
      const __m512i X0 = _mm512_loadu_si512(xq[j] + g * 128), X1 = _mm512_loadu_si512(xq[j] + g * 128 + 64);
      const __m512 dd = _mm512_mul_ps(dw16, _mm512_broadcast_f32x4(_mm_loadu_ps(dx[j] + 4 * g)));
      const __m128i a4 = _mm_loadu_si128((const __m128i *)(aux[j] + 16 * g));
      __m512i corr = _mm512_setzero_si512();
      if (q41) accm[j] = _mm512_fmadd_ps(m16, _mm512_broadcast_f32x4(_mm_castsi128_ps(a4)), accm[j]);
      else corr = _mm512_maskz_permutexvar_epi32(0x1111, idx4, _mm512_castsi128_si512(a4));
      for (int i = 0; i < R; i++) {
        __m512i ai = _mm512_dpbusd_epi32(corr, lo[i], X0);
        ai = _mm512_dpbusd_epi32(ai, hi[i], X1);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_permutexvar_ps(il__row_idx(i), dd), acc[i][j]);
      }
    }
  }
  if (q41 && ng > 0) {
    for (int j = 0; j < T; j++) {
      float m[16];
      _mm512_storeu_ps(m, accm[j]);
      for (int i = 0; i < R; i++) tail[i][j] += (m[4 * i] + m[4 * i + 1]) + (m[4 * i + 2] + m[4 * i + 3]);
    }
  }
  for (int64_t b = ng * 4; b < nb; b++) { /* trailing blocks, natural activation order */
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m128i q = _mm_loadu_si128((const __m128i *)(p + qo)), m = _mm_set1_epi8(0x0F);
      const __m512i wv = _mm512_zextsi256_si512(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m)));
      const float dwf = il__hf(p);
      for (int j = 0; j < T; j++) {
        const __m512i X = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK)));
        const int32_t is = _mm512_reduce_add_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, X));
        if (q41) {
          float s;
          memcpy(&s, aux[j] + 4 * b, 4);
          tail[i][j] += (float)is * (dwf * dx[j][b]) + il__hf(p + 2) * s;
        } else {
          int32_t c;
          memcpy(&c, aux[j] + 4 * b, 4);
          tail[i][j] += (float)(is + c) * (dwf * dx[j][b]);
        }
      }
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__INLINE void il__tile_q4_0(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, false, false, false);
}
IL__INLINE void il__tile_q4_1(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, true, false, false);
}
IL__INLINE void il__tile_q4_0g(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, false, true, false);
}
IL__INLINE void il__tile_q4_1g(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, true, true, false);
}
IL__INLINE void il__tile_q4_0v(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, false, true, true);
}
IL__GEN_ROWS(il__rows_q4_0p, il__tile_q4_0, 4)
IL__GEN_ROWS(il__rows_q4_1p, il__tile_q4_1, 4)
IL__GEN_ROWS(il__rows_q4_0g, il__tile_q4_0g, 4)
IL__GEN_ROWS(il__rows_q4_1g, il__tile_q4_1g, 4)
IL__GEN_ROWS(il__rows_q4_0v, il__tile_q4_0v, 4)
/* ================================================================ K-quants */

/* int16 lane index vectors: lanes [0,16) -> a, [16,32) -> b; or four runs of 8. */
IL__INLINE __m512i il__idx16_2(int a, int b) {
  return _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)a), _mm512_set1_epi16((short)b));
}
IL__INLINE __m512i il__idx16_4(int a) {
  __m512i v = _mm512_set1_epi16((short)a);
  v = _mm512_mask_blend_epi16(0x0000FF00u, v, _mm512_set1_epi16((short)(a + 1)));
  v = _mm512_mask_blend_epi16(0x00FF0000u, v, _mm512_set1_epi16((short)(a + 2)));
  return _mm512_mask_blend_epi16(0xFF000000u, v, _mm512_set1_epi16((short)(a + 3)));
}

/* Q4_K (q5 = false) and Q5_K: per 64-element part j, the unsigned 4/5-bit values of sub-blocks
 * 2j and 2j+1 fill one zmm; vpmaddubsw with the activation then vpdpwssd with the scales. */
IL__INLINE void il__tile_q45k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const bool q5) {
  const int64_t nb = a->n_in / IL_QK_K;
  const size_t bs = q5 ? sizeof(il_block_q5_K) : sizeof(il_block_q4_K);
  const size_t qso = q5 ? offsetof(il_block_q5_K, qs) : offsetof(il_block_q4_K, qs);
  const __m512i m0f = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  __m512 acc[4][4];
  float tail[4][4] = {{0}};
  const uint8_t *w[4], *xq[4];
  const float *dx[4];
  const int16_t *bs32[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, true); /* into L2 on Intel */
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    bs32[j] = (const int16_t *)(xq[j] + il__act_bsum32_off(a->n_in));
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512i ai[4][4];
    for (int i = 0; i < R; i++)
      for (int j = 0; j < T; j++) ai[i][j] = _mm512_setzero_si512();
    il__pf_rows_step(&pf, (size_t)b * bs, bs);
    __m512i sc16[4], qh[4];
    __m128i mn16[4];
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      uint64_t sc, mn;
      il__k4_scales(p + 4, &sc, &mn);
      sc16[i] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
      mn16[i] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
      if (q5) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(p + offsetof(il_block_q5_K, qh)));
        qh[i] = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);
      }
    }
#pragma GCC unroll 4
    for (int part = 0; part < 4; part++) {
      const __m512i sidx = il__idx16_2(2 * part, 2 * part + 1);
      for (int i = 0; i < R; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i] + b * bs + qso + 32 * part));
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
        z = _mm512_and_si512(z, m0f);
        if (q5) {
          /* bit 2*part of each byte (both halves were pre-shifted) moved to bit 4 */
          const int sh = 4 - 2 * part;
          const __m512i hb = sh >= 0 ? _mm512_slli_epi16(qh[i], sh) : _mm512_srli_epi16(qh[i], -sh);
          z = _mm512_or_si512(z, _mm512_and_si512(hb, m10));
        }
        const __m512i s = _mm512_permutexvar_epi16(sidx, sc16[i]);
        for (int j = 0; j < T; j++) {
          const __m512i X = _mm512_loadu_si512(xq[j] + b * IL_QK_K + 64 * part);
          ai[i][j] = _mm512_dpwssd_epi32(ai[i][j], _mm512_maddubs_epi16(z, X), s);
        }
      }
    }
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const float d = il__hf(p), dmin = il__hf(p + 2);
      for (int j = 0; j < T; j++) {
        const __m128i mm = _mm_madd_epi16(mn16[i], _mm_loadu_si128((const __m128i *)(bs32[j] + 8 * b)));
        const float dxb = dx[j][b];
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i][j]), _mm512_set1_ps(d * dxb), acc[i][j]);
        acc[i][j] = _mm512_fnmadd_ps(_mm512_zextps128_ps512(_mm_cvtepi32_ps(mm)), _mm512_set1_ps(dmin * dxb), acc[i][j]);
      }
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__INLINE void il__tile_q4_k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q45k(a, r, t, R, T, false);
}
IL__INLINE void il__tile_q5_k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q45k(a, r, t, R, T, true);
}
IL__GEN_ROWS(il__rows_q4_k, il__tile_q4_k, 2)
IL__GEN_ROWS(il__rows_q5_k, il__tile_q5_k, 2)

/* Q6_K: 128-element halves; Z0 holds elements 0..63 and Z1 64..127 of a half as unsigned 6-bit
 * values, sub-block scales per 16 elements; the -32 offset is -32 * sum(sc * bsum16). */
IL__INLINE void il__tile_q6_k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  const int64_t nb = a->n_in / IL_QK_K;
  const size_t bs = sizeof(il_block_q6_K);
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  __m512 acc[4][4];
  float tail[4][4] = {{0}};
  const uint8_t *w[4], *xq[4];
  const float *dx[4];
  const int16_t *bs16[4];
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, true); /* into L2 on Intel */
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    bs16[j] = (const int16_t *)(xq[j] + il__act_aux_off(a->n_in, IL_QK_K));
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512i ai[4][4], sc16[4];
    il__pf_rows_step(&pf, (size_t)b * bs, bs);
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + offsetof(il_block_q6_K, scales))));
      sc16[i] = _mm512_castsi256_si512(s);
      for (int j = 0; j < T; j++) {
        const __m256i c = _mm256_madd_epi16(s, _mm256_loadu_si256((const __m256i *)(bs16[j] + 16 * b)));
        ai[i][j] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5)));
      }
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
      const __m512i s0 = il__idx16_4(8 * n), s1 = il__idx16_4(8 * n + 4);
      for (int i = 0; i < R; i++) {
        const uint8_t *p = w[i] + b * bs;
        const __m512i ql = _mm512_loadu_si512(p + 64 * n);
        const __m256i h = _mm256_loadu_si256((const __m256i *)(p + offsetof(il_block_q6_K, qh) + 32 * n));
        const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
        const __m512i z0 = _mm512_or_si512(_mm512_and_si512(ql, m0f), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
        const __m512i z1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m0f), _mm512_and_si512(qh, m30));
        const __m512i sv0 = _mm512_permutexvar_epi16(s0, sc16[i]), sv1 = _mm512_permutexvar_epi16(s1, sc16[i]);
        for (int j = 0; j < T; j++) {
          const uint8_t *x = xq[j] + b * IL_QK_K + 128 * n;
          ai[i][j] = _mm512_dpwssd_epi32(ai[i][j], _mm512_maddubs_epi16(z0, _mm512_loadu_si512(x)), sv0);
          ai[i][j] = _mm512_dpwssd_epi32(ai[i][j], _mm512_maddubs_epi16(z1, _mm512_loadu_si512(x + 64)), sv1);
        }
      }
    }
    for (int i = 0; i < R; i++) {
      const float d = il__hf(w[i] + b * bs + offsetof(il_block_q6_K, d));
      for (int j = 0; j < T; j++)
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i][j]), _mm512_set1_ps(d * dx[j][b]), acc[i][j]);
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__GEN_ROWS(il__rows_q6_k, il__tile_q6_k, 2)

/* Three tables that differ only in the Q4 kernels: the CPU's GFNI and VBMI are resolved once,
 * when a backend picks its table (backend/cpu/isa.c), not on every call. */
#define IL__AVX512_TABLE(q4_0, q4_1)                                                               \
  {                                                                                                \
    .compiled = true,                                                                              \
    .rows = {[IL_DTYPE_F32] = il__rows_f32, [IL_DTYPE_F16] = il__rows_f16, [IL_DTYPE_BF16] = il__rows_bf16, \
             [IL_DTYPE_Q8_0] = il__rows_q8_0, [IL_DTYPE_Q4_0] = q4_0, [IL_DTYPE_Q4_1] = q4_1,             \
             [IL_DTYPE_Q4_K] = il__rows_q4_k, [IL_DTYPE_Q5_K] = il__rows_q5_k, [IL_DTYPE_Q6_K] = il__rows_q6_k, \
             [IL_DTYPE_Q5_0] = il__rows_q5_0_avx512, [IL_DTYPE_Q5_1] = il__rows_q5_1_avx512,                \
             [IL_DTYPE_IQ4_NL] = il__rows_iq4_nl_avx512},                                                   \
    .quant = {[IL_DTYPE_Q8_0] = il__quant_a32, [IL_DTYPE_Q4_0] = il__quant_a32, [IL_DTYPE_Q4_1] = il__quant_a32, \
              [IL_DTYPE_Q4_K] = il__quant_ak, [IL_DTYPE_Q5_K] = il__quant_ak, [IL_DTYPE_Q6_K] = il__quant_ak, \
              [IL_DTYPE_Q5_0] = il__quant_a32, [IL_DTYPE_Q5_1] = il__quant_a32, [IL_DTYPE_IQ4_NL] = il__quant_a32}, \
    .gemm = {[IL_DTYPE_Q8_0] = il__gemm_avx512_q8_0, [IL_DTYPE_Q4_0] = il__gemm_avx512_q4_0,       \
             [IL_DTYPE_Q4_1] = il__gemm_avx512_q4_1,                                               \
             [IL_DTYPE_Q4_K] = il__gemm_avx512_q4_k, [IL_DTYPE_Q5_K] = il__gemm_avx512_q5_k,         \
             [IL_DTYPE_Q6_K] = il__gemm_avx512_q6_k,                                               \
             [IL_DTYPE_F16] = il__gemm_avx512_f16,                                                 \
             [IL_DTYPE_BF16] = il__gemm_avx512_bf16,                                               \
             [IL_DTYPE_Q5_0] = il__gemm_q5_avx512, [IL_DTYPE_IQ4_NL] = il__gemm_q5_avx512},       \
    .bf16_act = il__gemm_avx512_bf16_act,                                                          \
    .stream_tok = {[IL_DTYPE_F16] = 16, [IL_DTYPE_Q8_0] = 8, [IL_DTYPE_Q4_0] = 1, [IL_DTYPE_Q4_1] = 1}, \
  }
const il__kernels il__matmul_avx512 = IL__AVX512_TABLE(il__rows_q4_0p, il__rows_q4_1p);
const il__kernels il__matmul_avx512_gfni = IL__AVX512_TABLE(il__rows_q4_0g, il__rows_q4_1g);
const il__kernels il__matmul_avx512_vbmi = IL__AVX512_TABLE(il__rows_q4_0v, il__rows_q4_1g);

#else
const il__kernels il__matmul_avx512 = {.compiled = false};
const il__kernels il__matmul_avx512_gfni = {.compiled = false};
const il__kernels il__matmul_avx512_vbmi = {.compiled = false};
#endif
