/* backend/cpu/matmul_avx2: AVX2 + FMA + F16C matmul kernels, for x86-64 CPUs without AVX-512.
 *
 * Same structure as matmul_avx512.c (tiles of R <= 4 rows x T <= 2 tokens, weights read in
 * place, rows of the next tile prefetched), with 256-bit vectors. Without VNNI, u8 x s8 dot
 * products are vpmaddubsw (to int16 pairs) + vpmaddwd with ones (to int32). vpmaddubsw
 * saturates at 32767, so every unsigned operand is kept small enough:
 *   Q4_0/Q4_1: nibbles 0..15 against the activation in the Q4 order of kernels.h; two 16-bit
 *     partial products are added before widening (2 * 2*15*127 = 7620).
 *   Q8_0: the sign trick (|w| <= 128 against x with w's sign; 2*128*127 = 32512), not the
 *     w+128 offset the AVX-512 kernel uses (2*255*127 would saturate); the AVX-VNNI table's
 *     tile does use w+128, with vpdpbusd seeded by the activation's -128 * sum(x).
 *   K-quants: 4/5/6-bit values (at most 2*63*127 = 16002) times the sub-block scale via vpmaddwd.
 * The activation quantizers compute the same bits as the scalar ones (the test compares the
 * workspaces byte for byte).
 * On AVX2-only cores (Zen 2/3) quantized generation is bound by the vector ports (4 on Zen),
 * not by memory (docs/performance-log.md#avx2-generation), so the tiles are written to cut vector ops per block:
 * two blocks per step, the tile's 8 f16 scales converted at once from halves gathered with
 * scalar loads (the integer ALUs are otherwise idle), per-block offsets and mins folded into
 * one FMA per tile, K-quant sub-block scales picked with vpshufb.
 * Only AVX2/FMA/F16C instructions are used here, plus {vex} vpdpbusd (AVX-VNNI, inline asm) in
 * the Q8_0/Q4_0/Q4_1 tiles of the second table, which isa.c picks only when CPUID reports
 * AVX-VNNI (its GEMM is in gemm_avx2.c).
 * Not for: dispatch and threading (matmul.c).
 */
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_q5.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#define IL__INLINE static inline __attribute__((always_inline))

IL__INLINE uint32_t il__u16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
IL__INLINE float il__hf(const uint8_t *p) { return _cvtsh_ss((unsigned short)il__u16(p)); }


IL__INLINE float il__hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
IL__INLINE int32_t il__hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
/* sum over pairs of u8 x s8 products, widened to 8 int32 lanes */
IL__INLINE __m256i il__dot(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* ================================================================ activation quantization */

/* Same bits as the scalar quantizer: d = amax/127, q = cvtps2dq(x * (1/d)) (round half even). */
IL__INLINE float il__amax8(__m256 m) {
  __m128 v = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}
/* 32 int32 (4 vectors) to 32 int8 in order */
IL__INLINE __m256i il__pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(b, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0));
}
IL__INLINE __m256 il__abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static void il__quant_a32(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t nb = a->n_in / IL_QK;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t t = u / nb, b = u % nb;
    uint8_t *row = a->act + (size_t)t * a->act_stride;
    const float *x = a->x + t * a->n_in + b * IL_QK;
    __m256 v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
    const float amax = il__amax8(_mm256_max_ps(_mm256_max_ps(il__abs(v[0]), il__abs(v[1])),
                                               _mm256_max_ps(il__abs(v[2]), il__abs(v[3]))));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
    const int32_t sum = il__hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    const __m256i p = il__pack32(q[0], q[1], q[2], q[3]);
    ((float *)(row + il__act_d_off(a->n_in)))[b] = d;
    uint8_t *aux = row + il__act_aux_off(a->n_in, IL_QK) + 4 * b;
    if (il__is_a32n(a->type)) {
      _mm256_storeu_si256((__m256i *)(row + b * IL_QK), p);
      const int32_t c = -128 * sum;
      memcpy(aux, &c, 4);
    } else {
      _mm_storeu_si128((__m128i *)(row + il__act_q4_pos(b, 0, nb)), _mm256_castsi256_si128(p));
      _mm_storeu_si128((__m128i *)(row + il__act_q4_pos(b, 16, nb)), _mm256_extracti128_si256(p, 1));
      if (a->type == IL_DTYPE_Q4_0) {
        const int32_t c = -8 * sum;
        memcpy(aux, &c, 4);
      } else {
        const float c = d * (float)sum;
        memcpy(aux, &c, 4);
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
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, il__abs(_mm256_loadu_ps(x + 8 * k)));
    const float d = il__amax8(m) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    ((float *)(row + il__act_d_off(a->n_in)))[b] = d;
    int16_t *bs16 = (int16_t *)(row + il__act_aux_off(a->n_in, IL_QK_K)) + 16 * b;
    int16_t *bs32 = (int16_t *)(row + il__act_bsum32_off(a->n_in)) + 8 * b;
    for (int s = 0; s < 8; s++) { /* 32 elements: sub-sums of 16 and 32 */
      __m256i q[4];
      for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * s + 8 * k), _mm256_set1_ps(id)));
      _mm256_storeu_si256((__m256i *)(row + b * IL_QK_K + 32 * s), il__pack32(q[0], q[1], q[2], q[3]));
      bs16[2 * s] = (int16_t)il__hsum_i32(_mm256_add_epi32(q[0], q[1]));
      bs16[2 * s + 1] = (int16_t)il__hsum_i32(_mm256_add_epi32(q[2], q[3]));
      bs32[s] = (int16_t)(bs16[2 * s] + bs16[2 * s + 1]);
    }
  }
}

/* ONE: one row at a time where il__one_row_tiles (kernels.h) says so (one sequential stream:
 * matmul_avx512.c; a row's sum is the same il__hsum whatever the tile). F16/BF16 and
 * Q4_0/Q4_1 keep 4 rows: their one-row tiles read at a lower share of the bandwidth
 * (bench_matmul --isa avx2 --no-gemm;
 * docs/performance-log.md#one-row-tiles). */
#define IL__GEN_ROWS(name, tile, TM, ONE)                                                    \
  static void name(const il__mm_args *a, int64_t r0, int64_t r1) {                           \
    for (int64_t t = 0; t < a->n_tok; t += TM) {                                             \
      int64_t r = r0;                                                                        \
      if (a->n_tok - t >= 2 && TM >= 2) {                                                    \
        for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, TM);                                    \
        for (; r < r1; r++) tile(a, r, t, 1, TM);                                            \
      } else {                                                                               \
        if (!(ONE && il__one_row_tiles(a)))                                                  \
          for (; r + 4 <= r1; r += 4) tile(a, r, t, 4, 1);                                   \
        for (; r < r1; r++) tile(a, r, t, 1, 1);                                             \
        if (TM >= 2) t -= TM - 1;                                                            \
      }                                                                                      \
    }                                                                                        \
  }

IL__INLINE void il__store(const il__mm_args *a, int64_t r, int64_t t, int R, int T, __m256 acc[4][2],
                          float tail[4][2]) {
  for (int i = 0; i < R; i++)
    for (int j = 0; j < T; j++) a->y[(t + j) * a->ldy + r + i] = il__hsum(acc[i][j]) + tail[i][j];
}

#define IL__TILE_SETUP()                                                                     \
  __m256 acc[4][2];                                                                          \
  float tail[4][2] = {{0}};                                                                  \
  const uint8_t *w[4];                                                                       \
  for (int i = 0; i < R; i++) w[i] = a->w + (size_t)(r + i) * a->w_stride;                   \
  for (int i = 0; i < R; i++)                                                                \
    for (int j = 0; j < T; j++) acc[i][j] = _mm256_setzero_ps();                             \
  const il__pf_rows pf = il__pf_rows_init(w[0], a->w_stride, R, false)

/* ================================================================ float weights */

enum { IL__W_F32, IL__W_F16, IL__W_BF16 };

IL__INLINE __m256 il__loadw(int kind, const uint8_t *w, int64_t k) {
  if (kind == IL__W_F32) return _mm256_loadu_ps((const float *)(w + 4 * k));
  const __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * k));
  if (kind == IL__W_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
IL__INLINE float il__loadw1(int kind, const uint8_t *w, int64_t k) {
  if (kind == IL__W_F32) {
    float v;
    memcpy(&v, w + 4 * k, 4);
    return v;
  }
  if (kind == IL__W_F16) return il__hf(w + 2 * k);
  return il_bf16_to_f32((uint16_t)il__u16(w + 2 * k));
}

IL__INLINE void il__tile_float(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const int kind) {
  IL__TILE_SETUP();
  const float *x[2];
  for (int j = 0; j < T; j++) x[j] = a->x + (t + j) * a->n_in;
  const int64_t n = a->n_in;
  const int es = kind == IL__W_F32 ? 4 : 2, step = 64 / es; /* elements per 64-byte line */
  int64_t k = 0;
  for (; k + step <= n; k += step) {
    il__pf_rows_step(&pf, (size_t)k * es, 64);
    for (int h = 0; h < step; h += 8) {
      __m256 wv[4];
      for (int i = 0; i < R; i++) wv[i] = il__loadw(kind, w[i], k + h);
      for (int j = 0; j < T; j++) {
        const __m256 xv = _mm256_loadu_ps(x[j] + k + h);
        for (int i = 0; i < R; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
  }
  for (; k + 8 <= n; k += 8) {
    __m256 wv[4];
    for (int i = 0; i < R; i++) wv[i] = il__loadw(kind, w[i], k);
    for (int j = 0; j < T; j++) {
      const __m256 xv = _mm256_loadu_ps(x[j] + k);
      for (int i = 0; i < R; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (; k < n; k++)
    for (int i = 0; i < R; i++)
      for (int j = 0; j < T; j++) tail[i][j] += il__loadw1(kind, w[i], k) * x[j][k];
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
IL__GEN_ROWS(il__rows_f32, il__tile_f32, 2, 1)
IL__GEN_ROWS(il__rows_f16, il__tile_f16, 2, 0)
IL__GEN_ROWS(il__rows_bf16, il__tile_bf16, 2, 0)

/* ================================================================ Q8_0 / Q4_0 / Q4_1 helpers */

/* vpdpbusd ymm (AVX-VNNI) as in gemm_avx2.c: inline asm, so no compiler flag; only the
 * AVX-VNNI table (chosen when CPUID reports it) reaches it. */
IL__INLINE __m256i il__dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  __asm__("%{vex%} vpdpbusd %[s], %[u], %[acc]" : [acc] "+x"(acc) : [u] "x"(u), [s] "x"(s));
  return acc;
}

/* The f16 values at p[i] and p[i] + bs (row i's two blocks of this step) of R <= 4 rows, as
 * 8 floats [r0 b0, r0 b1, r1 b0, r1 b1, ...] (zero past R). Gathered in general-purpose
 * registers, which these kernels leave idle, and converted once for the tile: the vector
 * ports are what binds (per row, a vmovd, vcvtph2ps and vpermps took 3 of about 15 vector
 * ops per two blocks; now one vpermps picks the row's lanes). */
IL__INLINE __m256 il__h8(const uint8_t *const p[4], size_t bs, const int R) {
  uint64_t v[2] = {0, 0};
  for (int i = 0; i < R; i++)
    v[i >> 1] |= (uint64_t)(il__u16(p[i]) | il__u16(p[i] + bs) << 16) << (32 * (i & 1));
  return _mm256_cvtph_ps(_mm_set_epi64x((long long)v[1], (long long)v[0]));
}

/* Two floats at f (blocks b, b+1 of an activation row) repeated: [f0, f1, f0, f1, ...]. */
IL__INLINE __m256 il__f2x4(const void *f) {
  return _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)f))));
}

/* Two blocks' 8-lane int32 sums folded into one vector, lanes [b0, b0, b1, b1] in each
 * 128-bit half: 3 cheap shuffles/adds instead of a second conversion and FMA. */
IL__INLINE __m256i il__pair(__m256i s0, __m256i s1) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(s0, s1), _mm256_unpackhi_epi64(s0, s1));
}

/* The tile's per-token float accumulator of [r0 b0, r0 b1, r1 b0, ...] terms (offsets, mins)
 * added into the rows' tails. */
IL__INLINE void il__tail8(float tail[4][2], const __m256 off[2], const int R, const int T) {
  for (int j = 0; j < T; j++) {
    float o[8];
    _mm256_storeu_ps(o, off[j]);
    for (int i = 0; i < R; i++) tail[i][j] += o[2 * i] + o[2 * i + 1];
  }
}

/* ================================================================ Q8_0 */

/* Two blocks per step. AVX2: the sign trick, vpmaddubsw + vpmaddwd per block. AVX-VNNI: w ^
 * 0x80 = w + 128 against x with one vpdpbusd, seeded with the activation's -128 * sum(x) in
 * lane 0 (the AVX-512 kernel's scheme; vpmaddubsw would saturate on 255 * 127 pairs). The two
 * blocks' sums share one vector (il__pair), scaled by row i's lanes of the tile's d_w * d_x. */
IL__INLINE void il__tile_q8_0(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const bool vnni) {
  IL__TILE_SETUP();
  const int64_t nb = a->n_in / IL_QK;
  const size_t bs = sizeof(il_block_q8_0);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  const int8_t *xq[2];
  const float *dx[2];
  const int32_t *cx[2];
  for (int j = 0; j < T; j++) {
    const uint8_t *row = a->act + (size_t)(t + j) * a->act_stride;
    xq[j] = (const int8_t *)row;
    dx[j] = (const float *)(row + il__act_d_off(a->n_in));
    cx[j] = (const int32_t *)(row + il__act_aux_off(a->n_in, IL_QK));
  }
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t *p[4];
    for (int i = 0; i < R; i++) p[i] = w[i] + b * bs;
    const __m256 d8 = il__h8(p, bs, R);
    __m256i x0[2], x1[2], c0[2], c1[2];
    __m256 s8[2];
    for (int j = 0; j < T; j++) {
      x0[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK));
      x1[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK + IL_QK));
      s8[j] = _mm256_mul_ps(d8, il__f2x4(dx[j] + b));
      c0[j] = _mm256_zextsi128_si256(_mm_cvtsi32_si128(cx[j][b]));
      c1[j] = _mm256_zextsi128_si256(_mm_cvtsi32_si128(cx[j][b + 1]));
    }
    il__pf_rows_step(&pf, (size_t)b * bs, 2 * bs);
    for (int i = 0; i < R; i++) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i *)(p[i] + 2));
      const __m256i w1 = _mm256_loadu_si256((const __m256i *)(p[i] + bs + 2));
      const __m256i si = _mm256_set_epi32(2 * i + 1, 2 * i + 1, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1, 2 * i, 2 * i);
      for (int j = 0; j < T; j++) {
        __m256i s0, s1;
        if (vnni) {
          s0 = il__dpbusd_vex(c0[j], _mm256_xor_si256(w0, flip), x0[j]);
          s1 = il__dpbusd_vex(c1[j], _mm256_xor_si256(w1, flip), x1[j]);
        } else {
          s0 = il__dot(_mm256_abs_epi8(w0), _mm256_sign_epi8(x0[j], w0));
          s1 = il__dot(_mm256_abs_epi8(w1), _mm256_sign_epi8(x1[j], w1));
        }
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il__pair(s0, s1)), _mm256_permutevar8x32_ps(s8[j], si), acc[i][j]);
      }
    }
  }
  for (; b < nb; b++) { /* an odd last block */
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m256i wv = _mm256_loadu_si256((const __m256i *)(p + 2));
      const float dwf = il__hf(p);
      for (int j = 0; j < T; j++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK));
        const __m256i ai = il__dot(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), _mm256_set1_ps(dwf * dx[j][b]), acc[i][j]);
      }
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__INLINE void il__tile_q8_0_avx2(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q8_0(a, r, t, R, T, false);
}
IL__INLINE void il__tile_q8_0_vnni(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q8_0(a, r, t, R, T, true);
}
IL__GEN_ROWS(il__rows_q8_0, il__tile_q8_0_avx2, 2, 1)
IL__GEN_ROWS(il__rows_q8_0_vnni, il__tile_q8_0_vnni, 2, 1)

/* ================================================================ Q4_0 / Q4_1 */

/* Two blocks at a time: [qs of block b, qs of block b+1] & 0x0F are their first halves, >> 4
 * their second halves, matching 32-byte runs of the Q4 activation order, so each 128-bit lane
 * holds one block; row i's scales are lanes 2i, 2i+1 of the tile's d_w * d_x (il__h8).
 * Nibbles stay unsigned (0..15). Q4_0's -8: AVX-VNNI seeds the vpdpbusd with the activation's
 * -8 * sum(x); AVX2 adds d_w * d_x * (-8 * sum(x)) for the whole tile with one FMA into a
 * float accumulator of [r0 b0, r0 b1, ...] lanes (per row it was an integer add). Q4_1's
 * m * d_x * sum(x) the same way, with the mins gathered like the scales. */
IL__INLINE void il__tile_q4(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const bool q41,
                            const bool vnni) {
  IL__TILE_SETUP();
  const int64_t nb = a->n_in / IL_QK, ng = nb / 4;
  const size_t bs = q41 ? sizeof(il_block_q4_1) : sizeof(il_block_q4_0), qo = q41 ? 4 : 2;
  const __m256i m0f = _mm256_set1_epi8(0x0F);
  const __m256i cidx = _mm256_set_epi32(2, 2, 2, 1, 2, 2, 2, 0); /* lanes 0 and 4, zeros elsewhere */
  const bool off8 = q41 || !vnni; /* the tile's offset/min accumulator */
  const uint8_t *xq[2], *aux[2];
  const float *dx[2];
  __m256 off[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    aux[j] = xq[j] + il__act_aux_off(a->n_in, IL_QK);
  }
  for (int64_t g = 0; g < ng; g++) {
    for (int h = 0; h < 2; h++) {
      const int64_t b = 4 * g + 2 * h;
      const size_t xo = (size_t)g * 128 + (size_t)h * 32; /* first halves; + 64: second */
      const uint8_t *p[4], *pm[4];
      for (int i = 0; i < R; i++) {
        p[i] = w[i] + b * bs;
        pm[i] = p[i] + 2;
      }
      const __m256 d8 = il__h8(p, bs, R);
      const __m256 m8 = q41 ? il__h8(pm, bs, R) : _mm256_setzero_ps();
      __m256i x0[2], x1[2], cx[2];
      __m256 s8[2];
      for (int j = 0; j < T; j++) {
        x0[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + xo));
        x1[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + xo + 64));
        s8[j] = _mm256_mul_ps(d8, il__f2x4(dx[j] + b));
        if (!off8) { /* int32 -8 * sum(x) of blocks b, b+1 in lanes 0 and 4 */
          cx[j] = _mm256_permutevar8x32_epi32(_mm256_zextsi128_si256(_mm_loadl_epi64((const __m128i *)(aux[j] + 4 * b))), cidx);
        } else if (q41) { /* d_x * sum(x), float */
          off[j] = _mm256_fmadd_ps(m8, il__f2x4(aux[j] + 4 * b), off[j]);
        } else {
          off[j] = _mm256_fmadd_ps(s8[j], _mm256_cvtepi32_ps(_mm256_castps_si256(il__f2x4(aux[j] + 4 * b))), off[j]);
        }
      }
      il__pf_rows_step(&pf, (size_t)b * bs, 2 * bs);
      for (int i = 0; i < R; i++) {
        const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[i] + qo))),
                                                  _mm_loadu_si128((const __m128i *)(p[i] + bs + qo)), 1);
        const __m256i lo = _mm256_and_si256(q, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m0f);
        const __m256i si = _mm256_set_epi32(2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i, 2 * i, 2 * i, 2 * i);
        for (int j = 0; j < T; j++) {
          __m256i ai;
          if (vnni) {
            ai = il__dpbusd_vex(il__dpbusd_vex(q41 ? _mm256_setzero_si256() : cx[j], lo, x0[j]), hi, x1[j]);
          } else {
            const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0[j]), _mm256_maddubs_epi16(hi, x1[j]));
            ai = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
          }
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), _mm256_permutevar8x32_ps(s8[j], si), acc[i][j]);
        }
      }
    }
  }
  if (off8) il__tail8(tail, off, R, T);
  for (int64_t b = ng * 4; b < nb; b++) { /* trailing blocks, natural activation order */
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m128i q = _mm_loadu_si128((const __m128i *)(p + qo)), m = _mm_set1_epi8(0x0F);
      const __m256i wv = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
      const float dwf = il__hf(p);
      for (int j = 0; j < T; j++) {
        const int32_t is = il__hsum_i32(il__dot(wv, _mm256_loadu_si256((const __m256i *)(xq[j] + b * IL_QK))));
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
  il__tile_q4(a, r, t, R, T, false, false);
}
IL__INLINE void il__tile_q4_1(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, true, false);
}
IL__INLINE void il__tile_q4_0_vnni(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, false, true);
}
IL__INLINE void il__tile_q4_1_vnni(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  il__tile_q4(a, r, t, R, T, true, true);
}
IL__GEN_ROWS(il__rows_q4_0, il__tile_q4_0, 2, 0)
IL__GEN_ROWS(il__rows_q4_1, il__tile_q4_1, 2, 0)
IL__GEN_ROWS(il__rows_q4_0_vnni, il__tile_q4_0_vnni, 2, 0)
IL__GEN_ROWS(il__rows_q4_1_vnni, il__tile_q4_1_vnni, 2, 0)

/* ================================================================ K-quants */

/* Q4_K / Q5_K: 64-element part j = sub-blocks 2j (low nibbles) and 2j+1 (high nibbles). The 8
 * sub-block scales are widened to int16 once per super-block and each part picks its two with
 * a vpshufb (a scalar shift, vmovd and vpbroadcastw each before); d and dmin are converted
 * together and the mins term is an FMA into the float accumulator, not a horizontal sum. */
IL__INLINE void il__tile_q45k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T, const bool q5) {
  IL__TILE_SETUP();
  const int64_t nb = a->n_in / IL_QK_K;
  const size_t bs = q5 ? sizeof(il_block_q5_K) : sizeof(il_block_q4_K);
  const size_t qso = q5 ? offsetof(il_block_q5_K, qs) : offsetof(il_block_q4_K, qs);
  const __m256i m0f = _mm256_set1_epi8(0x0F), m01 = _mm256_set1_epi8(0x01);
  const uint8_t *xq[2];
  const float *dx[2];
  const int16_t *bs32[2];
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    bs32[j] = (const int16_t *)(xq[j] + il__act_bsum32_off(a->n_in));
  }
  for (int64_t b = 0; b < nb; b++) {
    il__pf_rows_step(&pf, (size_t)b * bs, bs);
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      uint64_t sc, mn;
      il__k4_scales(p + 4, &sc, &mn);
      const __m128i mn16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
      const __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)(p + offsetof(il_block_q5_K, qh))) : _mm256_setzero_si256();
      __m256i ai[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int part = 0; part < 4; part++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(p + qso + 32 * part));
        __m256i lo = _mm256_and_si256(q, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m0f);
        if (q5) {
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * part), m01), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * part + 1), m01), 4));
        }
        const __m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * part + 1) + 4 * part)));
        const __m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * part + 3) + 4 * part + 2)));
        for (int j = 0; j < T; j++) {
          const int8_t *x = (const int8_t *)xq[j] + b * IL_QK_K + 64 * part;
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)x)), s0);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 32))), s1);
          ai[j] = _mm256_add_epi32(ai[j], _mm256_add_epi32(p0, p1));
          IL__CHAIN(ai[j]);
        }
      }
      uint32_t dm32;
      memcpy(&dm32, p, 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm32)); /* [d, dmin] */
      for (int j = 0; j < T; j++) {
        const __m128 dmx = _mm_mul_ps(dm, _mm_set1_ps(dx[j][b]));
        const __m128i mm = _mm_madd_epi16(mn16, _mm_loadu_si128((const __m128i *)(bs32[j] + 8 * b)));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j]), _mm256_broadcastss_ps(dmx), acc[i][j]);
        acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_zextsi128_si256(mm)),
                                     _mm256_broadcastss_ps(_mm_movehdup_ps(dmx)), acc[i][j]);
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
IL__GEN_ROWS(il__rows_q4_k, il__tile_q4_k, 2, 1)
IL__GEN_ROWS(il__rows_q5_k, il__tile_q5_k, 2, 1)

/* Q6_K: per 128-element half, four 32-element runs of 6-bit values, each with two 16-element
 * sub-block scales; the -32 offset is -32 * sum(sc * bsum16). Run k's two high bits are
 * moved to bits 4-5 with one shift and a 0x30 mask (none for k = 2), and its scales are one
 * vpshufb of the half's int16 scales (sub-block 2k in the low lane, 2k+1 in the high). */
IL__INLINE void il__tile_q6_k(const il__mm_args *a, int64_t r, int64_t t, const int R, const int T) {
  IL__TILE_SETUP();
  const int64_t nb = a->n_in / IL_QK_K;
  const size_t bs = sizeof(il_block_q6_K);
  const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const uint8_t *xq[2];
  const float *dx[2];
  const int16_t *bs16[2];
  for (int j = 0; j < T; j++) {
    xq[j] = a->act + (size_t)(t + j) * a->act_stride;
    dx[j] = (const float *)(xq[j] + il__act_d_off(a->n_in));
    bs16[j] = (const int16_t *)(xq[j] + il__act_aux_off(a->n_in, IL_QK_K));
  }
  for (int64_t b = 0; b < nb; b++) {
    il__pf_rows_step(&pf, (size_t)b * bs, bs);
    for (int i = 0; i < R; i++) {
      const uint8_t *p = w[i] + b * bs;
      const __m128i sc8 = _mm_loadu_si128((const __m128i *)(p + offsetof(il_block_q6_K, scales)));
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      __m256i ai[2];
      for (int j = 0; j < T; j++) {
        const __m256i c = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(bs16[j] + 16 * b)));
        ai[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
      }
      for (int n = 0; n < 2; n++) {
        /* this half's 8 scales in both lanes (two calls: the selector must be an immediate) */
        const __m256i sh = n ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const uint8_t *ql = p + 64 * n, *qhp = p + offsetof(il_block_q6_K, qh) + 32 * n;
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        const __m256i h = _mm256_loadu_si256((const __m256i *)qhp);
        __m256i q[4]; /* bits 2k, 2k+1 of h to bits 4, 5; the 16-bit shifts' spill-over is masked */
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m0f), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m0f), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m0f), _mm256_and_si256(h, m30));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m0f), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
        for (int k = 0; k < 4; k++) {
          const __m256i sv = _mm256_shuffle_epi8(
              sh, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (4 * k + 3) + 4 * k + 2)),
                                   _mm_set1_epi16((short)(0x0100 * (4 * k + 1) + 4 * k))));
          for (int j = 0; j < T; j++) {
            const int8_t *x = (const int8_t *)xq[j] + b * IL_QK_K + 128 * n + 32 * k;
            ai[j] = _mm256_add_epi32(ai[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)x)), sv));
            IL__CHAIN(ai[j]);
          }
        }
      }
      const float d = il__hf(p + offsetof(il_block_q6_K, d));
      for (int j = 0; j < T; j++)
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[j]), _mm256_set1_ps(d * dx[j][b]), acc[i][j]);
    }
  }
  il__store(a, r, t, R, T, acc, tail);
}
IL__GEN_ROWS(il__rows_q6_k, il__tile_q6_k, 2, 1)

/* Two tables: with AVX-VNNI (chosen when CPUID reports it, backend/cpu/isa.c) and without.
 * They differ in the batched GEMM and in the Q8_0/Q4_0/Q4_1 tile kernels (vpdpbusd). */
#define IL__AVX2_TABLE(v, plain, gemm_q8_0, gemm_q4_0, gemm_q4_1, gemm_q4_k, gemm_q5_k, gemm_q6_k)                                    \
  {                                                                                                 \
    .compiled = true, .plain_int8 = plain,                                                          \
    .rows = {[IL_DTYPE_F32] = il__rows_f32, [IL_DTYPE_F16] = il__rows_f16, [IL_DTYPE_BF16] = il__rows_bf16, \
             [IL_DTYPE_Q8_0] = il__rows_q8_0##v, [IL_DTYPE_Q4_0] = il__rows_q4_0##v, [IL_DTYPE_Q4_1] = il__rows_q4_1##v, \
             [IL_DTYPE_Q4_K] = il__rows_q4_k, [IL_DTYPE_Q5_K] = il__rows_q5_k, [IL_DTYPE_Q6_K] = il__rows_q6_k, \
             [IL_DTYPE_Q5_0] = il__rows_q5_0_avx2, [IL_DTYPE_Q5_1] = il__rows_q5_1_avx2,                    \
             [IL_DTYPE_IQ4_NL] = il__rows_iq4_nl_avx2},                                                     \
    .quant = {[IL_DTYPE_Q8_0] = il__quant_a32, [IL_DTYPE_Q4_0] = il__quant_a32, [IL_DTYPE_Q4_1] = il__quant_a32, \
              [IL_DTYPE_Q4_K] = il__quant_ak, [IL_DTYPE_Q5_K] = il__quant_ak, [IL_DTYPE_Q6_K] = il__quant_ak, \
              [IL_DTYPE_Q5_0] = il__quant_a32, [IL_DTYPE_Q5_1] = il__quant_a32, [IL_DTYPE_IQ4_NL] = il__quant_a32}, \
    .gemm = {[IL_DTYPE_Q8_0] = gemm_q8_0, [IL_DTYPE_Q4_0] = gemm_q4_0, [IL_DTYPE_Q4_1] = gemm_q4_1, \
             [IL_DTYPE_Q4_K] = gemm_q4_k, [IL_DTYPE_Q5_K] = gemm_q5_k, [IL_DTYPE_Q6_K] = gemm_q6_k, \
             [IL_DTYPE_F16] = il__gemm_avx2_f16, [IL_DTYPE_BF16] = il__gemm_avx2_bf16,              \
             [IL_DTYPE_Q5_0] = il__gemm_q5_avx2##v, [IL_DTYPE_IQ4_NL] = il__gemm_q5_avx2##v},         \
  }
const il__kernels il__matmul_avx2 = IL__AVX2_TABLE(, true, il__gemm_avx2_q8_0, il__gemm_avx2_q4_0, il__gemm_avx2_q4_1, il__gemm_avx2_q4_k,
                                                   il__gemm_avx2_q5_k, il__gemm_avx2_q6_k);
const il__kernels il__matmul_avx2_vnni =
    IL__AVX2_TABLE(_vnni, false, il__gemm_avx2_vnni_q8_0, il__gemm_avx2_vnni_q4_0, il__gemm_avx2_vnni_q4_1,
                   il__gemm_avx2_vnni_q4_k, il__gemm_avx2_vnni_q5_k, il__gemm_avx2_vnni_q6_k);

#else
const il__kernels il__matmul_avx2 = {.compiled = false};
const il__kernels il__matmul_avx2_vnni = {.compiled = false};
#endif
