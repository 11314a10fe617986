/* backend/cpu/gemm_avx512: AVX-512 VNNI micro-kernels of the blocked GEMM (Q8_0, Q4_0). Hot path.
 *
 * One micro-kernel computes 32 rows (a panel, gemm.h) x T tokens over the whole row: per
 * 4-element group, two zmm of weights (rows 0-15, 16-31) against one broadcast 4-byte group of
 * each token's activation, vpdpbusd into 2T int32 accumulators seeded with the block's offset
 * term (-128 or -8 times the activation block sum); per 32-element block, one vcvtdq2ps, one
 * multiply (weight scales x activation scale) and one FMA per accumulator. That is 8 vpdpbusd
 * per 3 float ops for Q8_0 (plus 6 unpack ops per group shared by the T tokens for Q4_0);
 * the activation broadcasts are memory operands of vpdpbusd ({1to16}). Registers: 2T int +
 * 2T float accumulators + weights, so T = 6 for Q8_0 (28 zmm) and T = 5 for Q4_0 (4 unpacked
 * weight vectors live at once).
 * The float sum runs over the blocks in order with one product of the two scales per block,
 * like the scalar kernel, so results differ from it only by FMA rounding.
 * Not for: packing (gemm_avx2.c), the single-token path (matmul_avx512.c).
 */
#include "backend/cpu/gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

#include <immintrin.h>
#include <string.h>

#define IL__INLINE static inline __attribute__((always_inline))

IL__INLINE int32_t il__ld32(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
IL__INLINE float il__ldf(const uint8_t *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}

typedef struct {
  const uint8_t *x0; /* first token's activation row */
  size_t as, doff, coff;
  float *y;
  int64_t ldy;
  __mmask16 m0, m1; /* valid rows in each half of the panel */
} il__tile_io;

IL__INLINE void il__store(const il__tile_io *io, const int T, __m512 f0[], __m512 f1[]) {
  for (int j = 0; j < T; j++) {
    _mm512_mask_storeu_ps(io->y + j * io->ldy, io->m0, f0[j]);
    if (io->m1) _mm512_mask_storeu_ps(io->y + j * io->ldy + 16, io->m1, f1[j]);
  }
}

IL__INLINE void il__tile_q8_0(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T) {
  __m512 f0[6], f1[6];
  const uint8_t *x[6];
  for (int j = 0; j < T; j++) {
    x[j] = io->x0 + j * io->as;
    f0[j] = f1[j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 1152;
    __m512i a0[6], a1[6];
    for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm512_set1_epi32(il__ld32(x[j] + io->coff + 4 * b));
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
      const __m512i w0 = _mm512_load_si512(pb + 128 * g), w1 = _mm512_load_si512(pb + 128 * g + 64);
      for (int j = 0; j < T; j++) {
        const __m512i xb = _mm512_set1_epi32(il__ld32(x[j] + 32 * b + 4 * g));
        a0[j] = _mm512_dpbusd_epi32(a0[j], w0, xb);
        a1[j] = _mm512_dpbusd_epi32(a1[j], w1, xb);
      }
    }
    const __m512 d0 = _mm512_load_ps(pb + 1024), d1 = _mm512_load_ps(pb + 1088);
    for (int j = 0; j < T; j++) {
      const __m512 dx = _mm512_set1_ps(il__ldf(x[j] + io->doff + 4 * b));
      f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[j]), _mm512_mul_ps(d0, dx), f0[j]);
      f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[j]), _mm512_mul_ps(d1, dx), f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

IL__INLINE void il__tile_q4_0(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  const int64_t nb4 = nb & ~(int64_t)3;
  __m512 f0[6], f1[6];
  const uint8_t *x[6];
  for (int j = 0; j < T; j++) {
    x[j] = io->x0 + j * io->as;
    f0[j] = f1[j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 640;
    /* the Q4 activation order of kernels.h: elements 0..15 and 16..31 of block b */
    const size_t lo = b < nb4 ? (size_t)((b >> 2) * 128 + (b & 3) * 16) : (size_t)(b * 32);
    const size_t hi = lo + (b < nb4 ? 64 : 16);
    __m512i a0[6], a1[6];
    for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm512_set1_epi32(il__ld32(x[j] + io->coff + 4 * b));
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
      const __m512i q0 = _mm512_load_si512(pb + 128 * g), q1 = _mm512_load_si512(pb + 128 * g + 64);
      const __m512i l0 = _mm512_and_si512(q0, m0f), l1 = _mm512_and_si512(q1, m0f);
      const __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m0f);
      const __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m0f);
      for (int j = 0; j < T; j++) {
        const __m512i xl = _mm512_set1_epi32(il__ld32(x[j] + lo + 4 * g));
        const __m512i xh = _mm512_set1_epi32(il__ld32(x[j] + hi + 4 * g));
        a0[j] = _mm512_dpbusd_epi32(a0[j], l0, xl);
        a1[j] = _mm512_dpbusd_epi32(a1[j], l1, xl);
        a0[j] = _mm512_dpbusd_epi32(a0[j], h0, xh);
        a1[j] = _mm512_dpbusd_epi32(a1[j], h1, xh);
      }
    }
    const __m512 d0 = _mm512_load_ps(pb + 512), d1 = _mm512_load_ps(pb + 576);
    for (int j = 0; j < T; j++) {
      const __m512 dx = _mm512_set1_ps(il__ldf(x[j] + io->doff + 4 * b));
      f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[j]), _mm512_mul_ps(d0, dx), f0[j]);
      f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[j]), _mm512_mul_ps(d1, dx), f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

/* Tokens [t0, t1) in tiles of TM, then one tile of the remainder. */
#define IL__GEMM_DRIVER(name, tile, TM, flip)                                                      \
  void name(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) { \
    if (pack) il__gemm_avx2_pack(a, r0, panel, flip);                                                   \
    const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;              \
    il__tile_io io = {.as = a->act_stride,                                                         \
                      .doff = il__act_d_off(a->n_in),                                              \
                      .coff = il__act_aux_off(a->n_in, IL_QK),                                     \
                      .ldy = a->ldy,                                                               \
                      .m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1),                       \
                      .m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0)}; \
    const int64_t nb = a->n_in / IL_QK;                                                            \
    int64_t t = t0;                                                                                \
    for (; t + TM <= t1; t += TM) {                                                                \
      io.x0 = a->act + (size_t)t * a->act_stride;                                                  \
      io.y = a->y + t * a->ldy + r0;                                                               \
      tile(panel, nb, &io, TM);                                                                    \
    }                                                                                              \
    if (t == t1) return;                                                                           \
    io.x0 = a->act + (size_t)t * a->act_stride;                                                    \
    io.y = a->y + t * a->ldy + r0;                                                                 \
    switch (t1 - t) {                                                                              \
    case 1: tile(panel, nb, &io, 1); break;                                                        \
    case 2: tile(panel, nb, &io, 2); break;                                                        \
    case 3: tile(panel, nb, &io, 3); break;                                                        \
    case 4: tile(panel, nb, &io, 4); break;                                                        \
    default: tile(panel, nb, &io, 5); break;                                                       \
    }                                                                                              \
  }

IL__GEMM_DRIVER(il__gemm_avx512_q8_0, il__tile_q8_0, 6, 0x80)
IL__GEMM_DRIVER(il__gemm_avx512_q4_0, il__tile_q4_0, 5, 0)

#endif
