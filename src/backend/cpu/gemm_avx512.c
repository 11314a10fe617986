/* backend/cpu/gemm_avx512: AVX-512 micro-kernels of the blocked GEMM (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
 * Q6_K with VNNI; F16 and BF16 with FMA; BF16 against BF16 activations with vdpbf16ps on CPUs
 * with AVX512_BF16).
 * Hot path.
 *
 * One micro-kernel computes 32 rows (a panel, gemm.h) x T tokens over the whole row: per
 * 4-element group, two zmm of weights (rows 0-15, 16-31) against one broadcast 4-byte group of
 * each token's activation, vpdpbusd into 2T int32 accumulators seeded with the block's offset
 * term (-128 or -8 times the activation block sum); per 32-element block, one vcvtdq2ps, one
 * multiply (weight scales x activation scale) and one FMA per accumulator. That is 8 vpdpbusd
 * per 3 float ops for Q8_0 (plus 6 unpack ops per group shared by the T tokens for Q4_0);
 * the activation broadcasts are vpbroadcastd loads (an inline-asm variant with {1to16} memory
 * operands of vpdpbusd measured the same, so the intrinsics stay). Registers: 2T int +
 * 2T float accumulators + weights, so T = 6 for Q8_0 (28 zmm) and T = 5 for Q4_0 (4 unpacked
 * weight vectors live at once).
 * The float sum runs over the blocks in order with one product of the two scales per block,
 * like the scalar kernel, so results differ from it only by FMA rounding. Q4_K: il__tile_q4_k;
 * Q5_K: il__tile_q5_k; Q6_K: il__tile_q6_k.
 * Not for: packing (gemm_avx2.c), the single-token path (matmul_avx512.c).
 */
#include "backend/cpu/gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

#include <immintrin.h>

#define IL__INLINE static inline __attribute__((always_inline))

typedef struct {
  const uint8_t *x0; /* first token's activation row */
  size_t as, doff, coff; /* coff: A32 offsets, or AK sums of 32 (Q4_K) */
  float *y;
  int64_t ldy;
  __mmask16 m0, m1; /* valid rows in each half of the panel */
} il__tile_io;

/* The T tokens' activation rows and zeroed float accumulators. */
IL__INLINE void il__tile_begin(const il__tile_io *io, const int T, const uint8_t *x[], __m512 f0[], __m512 f1[]) {
  for (int j = 0; j < T; j++) {
    x[j] = io->x0 + j * io->as;
    f0[j] = f1[j] = _mm512_setzero_ps();
  }
}

/* The panel's valid rows of each token's output. */
IL__INLINE void il__store(const il__tile_io *io, const int T, __m512 f0[], __m512 f1[]) {
  for (int j = 0; j < T; j++) {
    _mm512_mask_storeu_ps(io->y + j * io->ldy, io->m0, f0[j]);
    if (io->m1) _mm512_mask_storeu_ps(io->y + j * io->ldy + 16, io->m1, f1[j]);
  }
}

/* The quantized activations' offsets (coff: A32 aux, AK bsum16 or bsum32) and the masks of the
 * panel's valid rows from r0; x0 and y are set per tile. */
IL__INLINE il__tile_io il__io_init(const il__mm_args *a, int64_t r0, size_t coff) {
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;
  return (il__tile_io){.as = a->act_stride,
                       .doff = il__act_d_off(a->n_in),
                       .coff = coff,
                       .ldy = a->ldy,
                       .m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1),
                       .m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr > 16 ? (1u << (nr - 16)) - 1 : 0)};
}

/* 32 rows x T tokens; q4: the panel holds Q4_0 nibbles, or with q41 Q4_1 nibbles and mins
 * (else Q8_0 bytes, flipped). Q4_1 has no integer offset: its m * d*sum(x) term is one FMA
 * per accumulator at the block's end, as in the tile kernels. */
IL__INLINE void il__tile(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T, const bool q4,
                         const bool q41, il__gemm_pf *pf) {
  const size_t bb = q41 ? 640 : q4 ? 576 : 1088, so = q4 ? 512 : 1024;
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  const int64_t nb4 = nb & ~(int64_t)3;
  __m512 f0[6], f1[6];
  const uint8_t *x[6];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * bb;
    il__gemm_pf_step(pf);
    if (pf->stream) /* (past the last panel it touches nothing: prefetches do not fault) */
      for (size_t l = 0; l < bb; l += 64) _mm_prefetch((const char *)pb + IL__GEMM_STREAM_PF + l, _MM_HINT_T0);
    __m512i a0[6], a1[6];
    for (int j = 0; j < T; j++)
      a0[j] = a1[j] = q41 ? _mm512_setzero_si512() : _mm512_set1_epi32(il__gemm_ld32(x[j] + io->coff + 4 * b));
    if (q4) {
      /* the Q4 activation order of kernels.h: elements 0..15 and 16..31 of block b */
      const size_t lo = b < nb4 ? (size_t)((b >> 2) * 128 + (b & 3) * 16) : (size_t)(b * 32);
      const size_t hi = lo + (b < nb4 ? 64 : 16);
#pragma GCC unroll 4
      for (int g = 0; g < 4; g++) {
        const __m512i q0 = _mm512_load_si512(pb + 128 * g), q1 = _mm512_load_si512(pb + 128 * g + 64);
        const __m512i l0 = _mm512_and_si512(q0, m0f), l1 = _mm512_and_si512(q1, m0f);
        const __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m0f);
        const __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m0f);
        for (int j = 0; j < T; j++) {
          const __m512i xl = _mm512_set1_epi32(il__gemm_ld32(x[j] + lo + 4 * g));
          const __m512i xh = _mm512_set1_epi32(il__gemm_ld32(x[j] + hi + 4 * g));
          a0[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a0[j], l0, xl), h0, xh);
          a1[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a1[j], l1, xl), h1, xh);
        }
      }
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < 8; g++) {
        const __m512i w0 = _mm512_load_si512(pb + 128 * g), w1 = _mm512_load_si512(pb + 128 * g + 64);
        for (int j = 0; j < T; j++) {
          const __m512i xb = _mm512_set1_epi32(il__gemm_ld32(x[j] + 32 * b + 4 * g));
          a0[j] = _mm512_dpbusd_epi32(a0[j], w0, xb);
          a1[j] = _mm512_dpbusd_epi32(a1[j], w1, xb);
        }
      }
    }
    const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pb + so))),
                 d1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pb + so + 32)));
    for (int j = 0; j < T; j++) {
      const __m512 dx = _mm512_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
      f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[j]), _mm512_mul_ps(d0, dx), f0[j]);
      f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[j]), _mm512_mul_ps(d1, dx), f1[j]);
    }
    if (q41) {
      const __m512 m0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pb + so + 64))),
                   m1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pb + so + 96)));
      for (int j = 0; j < T; j++) {
        const __m512 s = _mm512_set1_ps(il__gemm_ldf(x[j] + io->coff + 4 * b)); /* d * sum(q) */
        f0[j] = _mm512_fmadd_ps(m0, s, f0[j]);
        f1[j] = _mm512_fmadd_ps(m1, s, f1[j]);
      }
    }
  }
  il__store(io, T, f0, f1);
}

/* Q4_K and Q5_K: f -= dmin x the activation scale x sum_s m_s * sum32_s over super-block b,
 * one vpdpwssd per pair of sub-blocks; pm: the panel's int16 mins (4 x 128 bytes), then dmin. */
IL__INLINE void il__tile_k4_mins(const uint8_t *pm, int64_t b, const il__tile_io *io, const int T, const uint8_t *x[],
                                 __m512 f0[], __m512 f1[]) {
  const __m512 dm0 = _mm512_load_ps(pm + 512), dm1 = _mm512_load_ps(pm + 576);
  for (int j = 0; j < T; j++) {
    const __m512 dx = _mm512_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    for (int p = 0; p < 4; p++) {
      const __m512i bs = _mm512_set1_epi32(il__gemm_ld32(x[j] + io->coff + 16 * b + 4 * p));
      m0 = _mm512_dpwssd_epi32(m0, _mm512_load_si512(pm + 128 * p), bs);
      m1 = _mm512_dpwssd_epi32(m1, _mm512_load_si512(pm + 128 * p + 64), bs);
    }
    f0[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m0), _mm512_mul_ps(dm0, dx), f0[j]);
    f1[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m1), _mm512_mul_ps(dm1, dx), f1[j]);
  }
}

/* Q4_K and Q5_K: f += the int32 sums a of one sub-block x d * scale_s (sc: the panel's 32
 * floats) x the activation scale of super-block b. */
IL__INLINE void il__tile_k4_scale(const float *sc, int64_t b, const il__tile_io *io, const int T, const uint8_t *x[],
                                  const __m512i a0[], const __m512i a1[], __m512 f0[], __m512 f1[]) {
  const __m512 s0 = _mm512_load_ps(sc), s1 = _mm512_load_ps(sc + 16);
  for (int j = 0; j < T; j++) {
    const __m512 dx = _mm512_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
    f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[j]), _mm512_mul_ps(s0, dx), f0[j]);
    f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[j]), _mm512_mul_ps(s1, dx), f1[j]);
  }
}

/* Q4_K, 32 rows x T tokens: per part p (64 elements) the low and high nibbles of one load
 * are sub-blocks 2p and 2p+1, each with its own int32 accumulators, converted and scaled by
 * d * scale_s x the activation scale at the end of the part (4T int32 registers, so T = 3);
 * the mins are one vpdpwssd per part pair of sub-blocks against the activation's sums of 32,
 * scaled by dmin once per super-block. */
IL__INLINE void il__tile_q4_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T,
                              il__gemm_pf *pf) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  __m512 f0[3], f1[3];
  const uint8_t *x[3];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 5760;
    il__gemm_pf_step(pf);
    for (int p = 0; p < 4; p++) {
      __m512i l0[3], l1[3], h0[3], h1[3];
      for (int j = 0; j < T; j++) l0[j] = l1[j] = h0[j] = h1[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; g++) {
        const __m512i q0 = _mm512_load_si512(pb + 1024 * p + 128 * g), q1 = _mm512_load_si512(pb + 1024 * p + 128 * g + 64);
        const __m512i wl0 = _mm512_and_si512(q0, m0f), wl1 = _mm512_and_si512(q1, m0f);
        const __m512i wh0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m0f);
        const __m512i wh1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m0f);
        for (int j = 0; j < T; j++) {
          const uint8_t *xp = x[j] + b * IL_QK_K + 64 * p + 4 * g;
          const __m512i xl = _mm512_set1_epi32(il__gemm_ld32(xp)), xh = _mm512_set1_epi32(il__gemm_ld32(xp + 32));
          l0[j] = _mm512_dpbusd_epi32(l0[j], wl0, xl);
          l1[j] = _mm512_dpbusd_epi32(l1[j], wl1, xl);
          h0[j] = _mm512_dpbusd_epi32(h0[j], wh0, xh);
          h1[j] = _mm512_dpbusd_epi32(h1[j], wh1, xh);
        }
      }
      const float *sc = (const float *)(pb + 4096) + 2 * p * 32;
      il__tile_k4_scale(sc, b, io, T, x, l0, l1, f0, f1);      /* sub-block 2p */
      il__tile_k4_scale(sc + 32, b, io, T, x, h0, h1, f0, f1); /* sub-block 2p + 1 */
    }
    il__tile_k4_mins(pb + 5120, b, io, T, x, f0, f1);
  }
  il__store(io, T, f0, f1);
}

/* Q5_K, 32 rows x T tokens: the panel's weights are bytes 0..31, so a group is two loads and
 * 2T vpdpbusd with no unpacking; one pass per 32-element sub-block s, its int32 accumulators
 * converted and scaled by d * scale_s x the activation scale at its end, and the mins as
 * Q4_K's. 2T int32 + 2T float accumulators, 2 weights and a broadcast: T = 6. */
IL__INLINE void il__tile_q5_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T,
                              il__gemm_pf *pf) {
  __m512 f0[6], f1[6];
  const uint8_t *x[6];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 9856;
    il__gemm_pf_step(pf);
    for (int s = 0; s < 8; s++) {
      __m512i a0[6], a1[6];
      for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; g++) {
        const __m512i w0 = _mm512_load_si512(pb + 1024 * s + 128 * g), w1 = _mm512_load_si512(pb + 1024 * s + 128 * g + 64);
        for (int j = 0; j < T; j++) {
          const __m512i xb = _mm512_set1_epi32(il__gemm_ld32(x[j] + b * IL_QK_K + 32 * s + 4 * g));
          a0[j] = _mm512_dpbusd_epi32(a0[j], w0, xb);
          a1[j] = _mm512_dpbusd_epi32(a1[j], w1, xb);
        }
      }
      il__tile_k4_scale((const float *)(pb + 8192) + 32 * s, b, io, T, x, a0, a1, f0, f1);
    }
    il__tile_k4_mins(pb + 9216, b, io, T, x, f0, f1);
  }
  il__store(io, T, f0, f1);
}

/* Q6_K, 32 rows x T tokens: per 16-element sub-block s, int32 accumulators seeded with
 * -32 times the activation's sum of 16 (the weights are stored 0..63, i.e. q + 32), 4 groups of
 * vpdpbusd, then multiplied by the rows' int8 scale (vpmulld) into a per-super-block int32
 * total, exactly the scalar kernel's integer sum; the total is converted and scaled by d x the
 * activation scale once per super-block. 6T live registers, so T = 4. */
IL__INLINE void il__tile_q6_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T,
                              il__gemm_pf *pf) {
  __m512 f0[4], f1[4];
  const uint8_t *x[4];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 10368;
    il__gemm_pf_step(pf);
    __m512i t0[4], t1[4];
    for (int j = 0; j < T; j++) t0[j] = t1[j] = _mm512_setzero_si512();
    for (int s = 0; s < 16; s++) {
      __m512i a0[4], a1[4];
      for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm512_set1_epi32(il__gemm_q6_off(x[j], io->coff, b, s));
#pragma GCC unroll 4
      for (int g = 0; g < 4; g++) {
        const __m512i w0 = _mm512_load_si512(pb + 512 * s + 128 * g), w1 = _mm512_load_si512(pb + 512 * s + 128 * g + 64);
        for (int j = 0; j < T; j++) {
          const __m512i xb = _mm512_set1_epi32(il__gemm_ld32(x[j] + b * IL_QK_K + 16 * s + 4 * g));
          a0[j] = _mm512_dpbusd_epi32(a0[j], w0, xb);
          a1[j] = _mm512_dpbusd_epi32(a1[j], w1, xb);
        }
      }
      const __m512i s0 = _mm512_load_si512(pb + 8192 + 128 * s), s1 = _mm512_load_si512(pb + 8192 + 128 * s + 64);
      for (int j = 0; j < T; j++) {
        t0[j] = _mm512_add_epi32(t0[j], _mm512_mullo_epi32(a0[j], s0));
        t1[j] = _mm512_add_epi32(t1[j], _mm512_mullo_epi32(a1[j], s1));
      }
    }
    const __m512 d0 = _mm512_load_ps(pb + 10240), d1 = _mm512_load_ps(pb + 10304);
    for (int j = 0; j < T; j++) {
      const __m512 dx = _mm512_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
      f0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t0[j]), _mm512_mul_ps(d0, dx), f0[j]);
      f1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t1[j]), _mm512_mul_ps(d1, dx), f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

/* One tile of T tokens of K-quant weights t (Q4_K: T <= 3, Q5_K: T <= 6, Q6_K: T <= 4). */
IL__INLINE void il__tile_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int T, const il_dtype t,
                           il__gemm_pf *pf) {
  if (t == IL_DTYPE_Q4_K) il__tile_q4_k(panel, nb, io, T < 3 ? T : 3, pf);
  else if (t == IL_DTYPE_Q5_K) il__tile_q5_k(panel, nb, io, T, pf);
  else il__tile_q6_k(panel, nb, io, T < 4 ? T : 4, pf);
}

/* Q4_K (tiles of 3 tokens), Q5_K (6) and Q6_K (4) over tokens [t0, t1). */
IL__INLINE void il__gemm_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack,
                           const il_dtype t) {
  if (pack && t == IL_DTYPE_Q5_K) il__gemm_avx2_pack(a, r0, panel, 0);
  else if (pack) il__gemm_pack(a, r0, panel, 0);
  if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */
  /* Q6_K: the sums of 16 (its -32 offset); Q4_K, Q5_K: the sums of 32 (their mins) */
  il__tile_io io = il__io_init(a, r0, t == IL_DTYPE_Q6_K ? il__act_aux_off(a->n_in, IL_QK_K) : il__act_bsum32_off(a->n_in));
  const int64_t nb = a->n_in / IL_QK_K, tm = t == IL_DTYPE_Q4_K ? 3 : t == IL_DTYPE_Q5_K ? 6 : 4;
  il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (t1 - t0 + tm - 1) / tm * nb); /* the next panel, into L2 */
  for (int64_t k = t0; k < t1; k += tm) {
    io.x0 = a->act + (size_t)k * a->act_stride;
    io.y = a->y + k * a->ldy + r0;
    switch (t1 - k < tm ? t1 - k : tm) {
    case 1: il__tile_k(panel, nb, &io, 1, t, &pf); break;
    case 2: il__tile_k(panel, nb, &io, 2, t, &pf); break;
    case 3: il__tile_k(panel, nb, &io, 3, t, &pf); break;
    case 4: il__tile_k(panel, nb, &io, 4, t, &pf); break;
    case 5: il__tile_k(panel, nb, &io, 5, t, &pf); break;
    default: il__tile_k(panel, nb, &io, 6, t, &pf); break;
    }
  }
}

void il__gemm_avx512_q4_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_k(a, r0, t0, t1, panel, pack, IL_DTYPE_Q4_K);
}
void il__gemm_avx512_q5_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_k(a, r0, t0, t1, panel, pack, IL_DTYPE_Q5_K);
}
void il__gemm_avx512_q6_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_k(a, r0, t0, t1, panel, pack, IL_DTYPE_Q6_K);
}

/* Tokens [t0, t1) in tiles of TM, then one tile of the remainder. */
#define IL__GEMM_DRIVER(name, q4, q41, TM, flip)                                                    \
  void name(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) { \
    if (pack) il__gemm_avx2_pack(a, r0, panel, flip);                                                   \
    if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */                                          \
    il__tile_io io = il__io_init(a, r0, il__act_aux_off(a->n_in, IL_QK));                          \
    const int64_t nb = a->n_in / IL_QK;                                                            \
    il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (t1 - t0 + TM - 1) / TM * nb);                   \
    int64_t t = t0;                                                                                \
    for (; t + TM <= t1; t += TM) {                                                                \
      io.x0 = a->act + (size_t)t * a->act_stride;                                                  \
      io.y = a->y + t * a->ldy + r0;                                                               \
      il__tile(panel, nb, &io, TM, q4, q41, &pf);                                                                 \
    }                                                                                              \
    if (t == t1) return;                                                                           \
    io.x0 = a->act + (size_t)t * a->act_stride;                                                    \
    io.y = a->y + t * a->ldy + r0;                                                                 \
    switch (t1 - t) {                                                                              \
    case 1: il__tile(panel, nb, &io, 1, q4, q41, &pf); break;                                                        \
    case 2: il__tile(panel, nb, &io, 2, q4, q41, &pf); break;                                                        \
    case 3: il__tile(panel, nb, &io, 3, q4, q41, &pf); break;                                                        \
    case 4: il__tile(panel, nb, &io, 4, q4, q41, &pf); break;                                                        \
    default: il__tile(panel, nb, &io, 5, q4, q41, &pf); break;                                                       \
    }                                                                                              \
  }

IL__GEMM_DRIVER(il__gemm_avx512_q8_0, false, false, 6, 0x80)
IL__GEMM_DRIVER(il__gemm_avx512_q4_0, true, false, 5, 0)
IL__GEMM_DRIVER(il__gemm_avx512_q4_1, true, true, 5, 0)

/* ================================================================ F16 / BF16 */

/* 32 rows x T tokens of F16/BF16 weights against F32 activations: per element k, the panel's
 * 32 weights become two zmm of F32 (two vcvtph2ps, or two vpunpck*wd against zero for BF16:
 * exact), and each token's x[k], broadcast from memory into the FMA, updates 2T accumulators.
 * 2T FMAs per 2 conversions and 2 + T loads: T = 12 (24 accumulators) keeps the FMA pipes the
 * limit. */
IL__INLINE void il__tile_h(const uint8_t *panel, int64_t n, const il__tile_io *io, const int T, const bool bf,
                           il__gemm_pf *pf) {
  __m512 f0[12], f1[12];
  const uint8_t *x[12];
  il__tile_begin(io, T, x, f0, f1);
  const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int64_t k = 0; k < n; k++) {
    const uint8_t *p = panel + 64 * k;
    if (k % 32 == 0) il__gemm_pf_step(pf); /* per 32 elements (2 KiB of panel) */
    if (pf->stream) _mm_prefetch((const char *)p + IL__GEMM_STREAM_PF, _MM_HINT_T0);
    __m512 w0, w1;
    if (bf) {
      const __m512i v = _mm512_load_si512(p);
      w0 = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v));
      w1 = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v));
    } else {
      w0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p));
      w1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(p + 32)));
    }
    for (int j = 0; j < T; j++) {
      const __m512 xb = _mm512_set1_ps(il__gemm_ldf(x[j] + 4 * k));
      f0[j] = _mm512_fmadd_ps(w0, xb, f0[j]);
      f1[j] = _mm512_fmadd_ps(w1, xb, f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

/* Tokens [t0, t1) in tiles of 12, then one tile of the remainder; the activations are the
 * float rows of x (io.as: their byte stride). */
IL__INLINE void il__gemm_h(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack,
                           const bool bf) {
  if (pack) il__gemm_avx2_pack(a, r0, panel, 0);
  if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */
  const int64_t n = a->n_in;
  il__tile_io io = il__io_init(a, r0, 0);
  io.as = 4 * (size_t)n; /* the float rows of x */
  il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (t1 - t0 + 11) / 12 * ((n + 31) / 32));
  for (int64_t t = t0; t < t1; t += 12) {
    io.x0 = (const uint8_t *)(a->x + t * n);
    io.y = a->y + t * a->ldy + r0;
    switch (t1 - t < 12 ? t1 - t : 12) {
#define IL__H_TILE(T) case T: il__tile_h(panel, n, &io, T, bf, &pf); break;
      IL__H_TILE(1) IL__H_TILE(2) IL__H_TILE(3) IL__H_TILE(4) IL__H_TILE(5) IL__H_TILE(6)
      IL__H_TILE(7) IL__H_TILE(8) IL__H_TILE(9) IL__H_TILE(10) IL__H_TILE(11) default: IL__H_TILE(12)
#undef IL__H_TILE
    }
  }
}

void il__gemm_avx512_f16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_h(a, r0, t0, t1, panel, pack, false);
}

/* ================================================================ BF16 x BF16 (vdpbf16ps) */

/* x -> BF16 for tokens [u0, u1): each element's upper 16 bits (exact when the lower 16 are
 * zero, which every element of a --dtype bf16 activation is), an odd row padded with a zero;
 * any nonzero lower half sets *inexact, and the GEMM keeps its F32 path for the whole call. */
void il__gemm_avx512_bf16_act(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t n = a->n_in;
  const __m512i lo = _mm512_set1_epi32(0xFFFF);
  __m512i bad = _mm512_setzero_si512();
  for (int64_t t = u0; t < u1; t++) {
    const float *x = a->x + t * n;
    uint16_t *d = (uint16_t *)(void *)(a->act + (size_t)t * a->act_stride);
    for (int64_t k = 0; k < n; k += 16) {
      const __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - k)) - 1);
      const __m512i v = _mm512_maskz_loadu_epi32(m, x + k);
      bad = _mm512_or_si512(bad, _mm512_and_si512(v, lo));
      _mm256_mask_storeu_epi16(d + k, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    }
    if (n & 1) d[n] = 0;
  }
  if (_mm512_test_epi32_mask(bad, bad)) atomic_store_explicit(a->inexact, 1, memory_order_relaxed);
}

/* The pair layout (gemm.h) from 16 rows at a time: each row's next 16 pairs (64 bytes, masked
 * at the row's end, so an odd row's last pair gets a zero high half) are one zmm, and a 16 x 16
 * transpose of 32-bit lanes (unpack 32, unpack 64, two 128-bit shuffles) makes each zmm one
 * pair of the 16 rows. */
void il__gemm_avx512_pack_bf16_pairs(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;
  const int64_t n = a->n_in, np = (n + 1) / 2;
  for (int g = 0; g < 2; g++) {
    const int64_t valid = nr - 16 * g;
    const uint8_t *w = a->w + (size_t)r0 * a->w_stride;
    for (int64_t c = 0; c < np; c += 16) {
      const int64_t left = n - 2 * c;
      const __mmask32 m = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
      __m512i r[16], t[16], u[16];
      for (int i = 0; i < 16; i++)
        r[i] = i < valid ? _mm512_maskz_loadu_epi16(m, w + (size_t)(16 * g + i) * a->w_stride + 4 * c)
                         : _mm512_setzero_si512();
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);     /* per 128-bit lane L: pairs 4L, 4L+1 */
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]); /* pairs 4L+2, 4L+3 */
      }
      for (int q = 0; q < 16; q += 4) { /* u[q + m], lane L: rows q..q+3 of pair 4L + m */
        u[q] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
        u[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
        u[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
        u[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
      }
      const int64_t cnt = np - c < 16 ? np - c : 16;
      uint8_t *dst = panel + 128 * c + 64 * g;
      for (int mm = 0; mm < 4; mm++) { /* pair 4L + mm = lane L of u[mm], u[4+mm], u[8+mm], u[12+mm] */
        const __m512i v0 = _mm512_shuffle_i32x4(u[mm], u[4 + mm], 0x88), v1 = _mm512_shuffle_i32x4(u[mm], u[4 + mm], 0xDD);
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + mm], u[12 + mm], 0x88),
                      w1 = _mm512_shuffle_i32x4(u[8 + mm], u[12 + mm], 0xDD);
        const __m512i o[4] = {_mm512_shuffle_i32x4(v0, w0, 0x88), _mm512_shuffle_i32x4(v1, w1, 0x88),
                              _mm512_shuffle_i32x4(v0, w0, 0xDD), _mm512_shuffle_i32x4(v1, w1, 0xDD)};
        for (int L = 0; L < 4; L++)
          if (4 * L + mm < cnt) _mm512_storeu_si512(dst + 128 * (4 * L + mm), o[L]);
      }
    }
  }
}

/* 32 rows x T tokens of BF16 weights against BF16 activations: per pair of elements, two zmm
 * of the panel (rows 0-15, 16-31) and each token's pair, broadcast, into 2T vdpbf16ps. Each
 * vdpbf16ps adds two exact products (8-bit x 8-bit significands fit a float) to its F32
 * accumulator, rounding to nearest even after each (denormals flushed), so the result differs
 * from the F32 path's only by summation order: twice the multiply-adds per instruction. */
#define IL__BF16 __attribute__((target("avx512bf16")))
IL__INLINE IL__BF16 void il__tile_bd(const uint8_t *panel, int64_t np, const il__tile_io *io, const int T,
                                     il__gemm_pf *pf) {
  __m512 f0[12], f1[12];
  const uint8_t *x[12];
  il__tile_begin(io, T, x, f0, f1);
#pragma GCC unroll 2
  for (int64_t j = 0; j < np; j++) {
    const uint8_t *p = panel + 128 * j;
    if (j % 16 == 0) il__gemm_pf_step(pf); /* per 32 elements (2 KiB of panel) */
    const __m512bh w0 = (__m512bh)_mm512_load_si512(p), w1 = (__m512bh)_mm512_load_si512(p + 64);
    for (int t = 0; t < T; t++) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(il__gemm_ld32(x[t] + 4 * j));
      f0[t] = _mm512_dpbf16_ps(f0[t], w0, xb);
      f1[t] = _mm512_dpbf16_ps(f1[t], w1, xb);
    }
  }
  il__store(io, T, f0, f1);
}

static IL__BF16 void il__gemm_bd(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  if (pack) il__gemm_avx512_pack_bf16_pairs(a, r0, panel);
  if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */
  const int64_t np = (a->n_in + 1) / 2;
  il__tile_io io = il__io_init(a, r0, 0); /* as: the BF16 pairs' row stride */
  il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (t1 - t0 + 11) / 12 * ((np + 15) / 16));
  for (int64_t t = t0; t < t1; t += 12) {
    io.x0 = a->act + (size_t)t * a->act_stride;
    io.y = a->y + t * a->ldy + r0;
    switch (t1 - t < 12 ? t1 - t : 12) {
#define IL__BD_TILE(T) case T: il__tile_bd(panel, np, &io, T, &pf); break;
      IL__BD_TILE(1) IL__BD_TILE(2) IL__BD_TILE(3) IL__BD_TILE(4) IL__BD_TILE(5) IL__BD_TILE(6)
      IL__BD_TILE(7) IL__BD_TILE(8) IL__BD_TILE(9) IL__BD_TILE(10) IL__BD_TILE(11) default: IL__BD_TILE(12)
#undef IL__BD_TILE
    }
  }
}

/* vdpbf16ps when the driver converted x to BF16 pairs and every element was exact (a->inexact
 * set up and still 0 after the conversion's barrier); otherwise F32 FMAs on x. */
void il__gemm_avx512_bf16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  if (a->inexact && !atomic_load_explicit(a->inexact, memory_order_relaxed)) {
    il__gemm_bd(a, r0, t0, t1, panel, pack);
    return;
  }
  il__gemm_h(a, r0, t0, t1, panel, pack, true);
}

#endif
