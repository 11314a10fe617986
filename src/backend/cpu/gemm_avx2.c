/* backend/cpu/gemm_avx2: the blocked GEMM on AVX2 (with and without AVX-VNNI), and the fast
 * panel packer every level uses. Hot path.
 *
 * Packing: the rows' 4-byte groups are transposed 8 rows at a time with unpack/permute
 * shuffles (Q8_0: an 8x8 dword transpose per block; Q4_0: a 4x4 per 128-bit lane), so
 * packing streams the weights at memory speed and batches of 16 tokens already gain from the
 * GEMM. AVX2 only, so
 * the AVX-512 GEMM calls it too (every AVX-512 CPU has AVX2). F16/BF16: a 16-bit 8x8 transpose
 * per 128-bit lane (the plain C packer ran at 3 cycles per weight: 14% of a 512-token GEMM).
 * Q5_K: each row's sub-block unpacked to 32 bytes in one ymm (qs nibbles | qh bit), then the
 * 8x8 dword transpose (half the plain C packer's time: the GEMM pays off from 16-20 tokens).
 * gemm.c's plain C packer is its reference in the tests.
 *
 * Micro-kernels, with only 16 ymm registers: 16 rows (two ymm of 8 lanes) x T tokens at a
 * time, the panel's two halves one after the other (the panel is in L1/L2); one token from
 * weights repacked at load takes both halves block by block instead (il__tile_1x2: the panel
 * comes from DRAM once, in order; one-token passes 0.72x -> 0.91-1.02x of the tile kernels
 * for Q4_0, 0.69-0.71x -> 0.83-0.85x for Q8_0 on one thread).
 *   AVX-VNNI ({vex} vpdpbusd, inline asm so no compiler flag is needed; the table is chosen
 *     only when CPUID reports AVX-VNNI): as the AVX-512 kernel, weights flipped to w + 128
 *     (Q8_0) or nibbles 0..15 (Q4_0) against a broadcast 4-byte activation group, offsets
 *     seeding the accumulators. T = 3 (Q8_0; Q4_0 and Q4_1 in the loop shape below).
 *   AVX2: vpmaddubsw needs its unsigned operand small enough not to saturate int16:
 *     Q8_0: the sign trick (|w| against x with w's sign, 2*128*127 = 32512), then vpmaddwd
 *       with ones and vpaddd per group: 4 ops per 32 products, T = 3.
 *     Q4_0, Q4_1: nibbles (2*15*127 = 3810 per int16 lane) summed in int16 over the block's 8
 *       groups (at most 30480; the low nibbles' 4 groups, then the high ones', as Q4_K), one
 *       vpmaddwd per block: about 2 ops per 32 products, T = 3.
 *     Every plain-AVX2 running sum is kept a chain (IL__CHAIN).
 *   Q4_K (both): one pass per sub-block of 32, T = 3 (il__tile_q4_k).
 *   Q5_K (both): bytes 0..31 in the panel, one pass per sub-block of 32; T = 3 (AVX-VNNI),
 *     2 (AVX2: int16 sums of 4 groups) (il__tile_q5_k).
 *   Q6_K (both): one pass per sub-block of 16, exact int32 totals via vpmulld, T = 2
 *     (il__tile_q6_k).
 *   F16/BF16 (both tables): F32 FMA against the float activations, T = 6 (il__tile_h).
 *   Every kind prefetches the thread's next panel's rows while it computes (gemm.h).
 * Not for: the panel layout (gemm.h), AVX-512 (gemm_avx512.c).
 */
#include "backend/cpu/gemm.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#define IL__INLINE static inline __attribute__((always_inline))

/* ================================================================ packing */

/* 8x8 dword transpose: out[g] = dword g of r[0..7]. */
IL__INLINE void il__tr8x8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int k = 0; k < 4; k++) {
    t[2 * k] = _mm256_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; k++) {
    u[4 * k + 0] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int g = 0; g < 4; g++) {
    r[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
    r[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
  }
}

/* 4x4 dword transpose in each 128-bit lane of 4 ymm. */
IL__INLINE void il__tr4x4(__m256i r[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  r[0] = _mm256_unpacklo_epi64(t0, t2);
  r[1] = _mm256_unpackhi_epi64(t0, t2);
  r[2] = _mm256_unpacklo_epi64(t1, t3);
  r[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* F16 / BF16: 8 rows x 16 elements at a time, a 16-bit 8x8 transpose in each 128-bit lane (one
 * word interleave, then two 4x4 dword transposes), so a lane's output j is element j (low lane)
 * or 8 + j (high lane) of the 8 rows: 16 bytes of the panel. The 8 rows of a pass are those one 16-byte slot of the panel holds: F16 rows
 * 8q..8q+7; BF16 rows 4q..4q+3 and 16+4q..16+4q+3 (gemm.h). Elements past the last multiple
 * of 16 are copied one by one. */
static void il__gemm_avx2_pack16(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  static const uint8_t zero[32];
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS, n = a->n_in;
  const bool bf = a->type == IL_DTYPE_BF16;
  for (int q = 0; q < 4; q++) {
    const uint8_t *row[8];
    size_t step[8];
    for (int i = 0; i < 8; i++) {
      const int r = bf ? (i < 4 ? 4 * q + i : 16 + 4 * q + i - 4) : 8 * q + i;
      row[i] = r < nr ? a->w + (size_t)(r0 + r) * a->w_stride : zero; /* missing rows read zeros */
      step[i] = r < nr ? 2 : 0;
    }
    uint8_t *pq = panel + 16 * q;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
      /* e[0][i] (e[1][i]): elements 0..3 (4..7) of each lane of rows 2i, 2i+1, word-interleaved:
       * as dwords, a 4x4 transpose away from element j of the 8 rows */
      __m256i e[2][4];
      for (int i = 0; i < 4; i++) {
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(row[2 * i] + (size_t)k * step[2 * i]));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(row[2 * i + 1] + (size_t)k * step[2 * i + 1]));
        e[0][i] = _mm256_unpacklo_epi16(v0, v1);
        e[1][i] = _mm256_unpackhi_epi16(v0, v1);
      }
      for (int hf = 0; hf < 2; hf++) {
        il__tr4x4(e[hf]);
        for (int j = 0; j < 4; j++) {
          uint8_t *p = pq + 64 * (k + 4 * hf + j);
          _mm_store_si128((__m128i *)p, _mm256_castsi256_si128(e[hf][j]));
          _mm_store_si128((__m128i *)(p + 64 * 8), _mm256_extracti128_si256(e[hf][j], 1));
        }
      }
    }
    for (; k < n; k++)
      for (int i = 0; i < 8; i++) memcpy(pq + 64 * k + 2 * i, row[i] + (size_t)k * step[i], 2);
  }
}

/* Q5_K: per super-block, 8 rows at a time, each sub-block's 32 weights of a row in one ymm
 * (nibbles of qs | bit s of each qh byte moved to bit 4), then an 8x8 dword transpose: group g
 * of the 8 rows, 32 bytes of the panel. The scales in plain C (il__gemm_pack_k4_scales). */
static void il__gemm_avx2_pack_q5_k(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  static const uint8_t zero[sizeof(il_block_q5_K)];
  const int64_t nb = a->n_in / IL_QK_K;
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;
  const size_t bb = il__gemm_panel_size(IL_DTYPE_Q5_K, IL_QK_K);
  const __m256i m0f = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  for (int q = 0; q < IL__GEMM_ROWS / 8; q++) {
    const uint8_t *row[8];
    size_t step[8];
    for (int i = 0; i < 8; i++) {
      row[i] = 8 * q + i < nr ? a->w + (size_t)(r0 + 8 * q + i) * a->w_stride : zero; /* missing rows read zeros */
      step[i] = 8 * q + i < nr ? sizeof(il_block_q5_K) : 0;
    }
    for (int64_t b = 0; b < nb; b++) {
      uint8_t *pb = panel + b * bb;
      for (int s = 0; s < 8; s++) {
        __m256i r[8];
        for (int i = 0; i < 8; i++) {
          const uint8_t *blk = row[i] + b * step[i];
          const __m256i qs = _mm256_loadu_si256((const __m256i *)(blk + offsetof(il_block_q5_K, qs) + 32 * (s / 2)));
          const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + offsetof(il_block_q5_K, qh)));
          /* bit s of each byte to bit 4 (16-bit shifts: the mask keeps each byte's own bit) */
          const __m256i hb = s <= 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
          const __m256i lo = s % 2 ? _mm256_srli_epi16(qs, 4) : qs;
          r[i] = _mm256_or_si256(_mm256_and_si256(lo, m0f), _mm256_and_si256(hb, m10));
        }
        il__tr8x8(r);
        for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(pb + 1024 * s + 128 * g + 32 * q), r[g]);
      }
      for (int i = 0; i < 8; i++)
        il__gemm_pack_k4_scales(row[i] + b * step[i], pb + 64 * 4 * IL__GEMM_ROWS, 8 * q + i);
    }
  }
}

/* 8 16-bit values into a vector, one insert each. */
static inline __m128i il__gather8(const uint16_t v[8]) {
  return _mm_set_epi16((short)v[7], (short)v[6], (short)v[5], (short)v[4], (short)v[3], (short)v[2], (short)v[1],
                       (short)v[0]);
}

void il__gemm_avx2_pack(const il__mm_args *a, int64_t r0, uint8_t *panel, uint8_t flip) {
  if (a->type == IL_DTYPE_F16 || a->type == IL_DTYPE_BF16) {
    il__gemm_avx2_pack16(a, r0, panel);
    return;
  }
  if (a->type == IL_DTYPE_Q5_K) {
    il__gemm_avx2_pack_q5_k(a, r0, panel);
    return;
  }
  static const uint8_t zero[64];
  const int64_t nb = a->n_in / IL_QK;
  const bool q8 = a->type == IL_DTYPE_Q8_0, q41 = a->type == IL_DTYPE_Q4_1;
  const size_t bsz = q8 ? sizeof(il_block_q8_0) : q41 ? sizeof(il_block_q4_1) : sizeof(il_block_q4_0);
  const size_t qo = q41 ? 4 : 2; /* qs after d (and Q4_1's m) */
  const size_t bb = il__gemm_panel_size(a->type, IL_QK), so = q8 ? 1024 : 512;
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;
  const uint8_t *row[IL__GEMM_ROWS];
  size_t step[IL__GEMM_ROWS];
  for (int i = 0; i < IL__GEMM_ROWS; i++) {
    row[i] = i < nr ? a->w + (size_t)(r0 + i) * a->w_stride : zero; /* missing rows read zeros */
    step[i] = i < nr ? bsz : 0;
  }
  const __m256i fx = _mm256_set1_epi8((char)flip);
  /* 8 rows at a time over the whole row length: 8 sequential read streams (32 at once defeat
   * the hardware prefetchers: packing ran at a third of the tile kernels' speed), each
   * prefetched about 1 KiB ahead. */
  for (int q = 0; q < IL__GEMM_ROWS / 8; q++) {
    const uint8_t *const *rq = row + 8 * q;
    const size_t *sq = step + 8 * q;
    for (int64_t b = 0; b < nb; b++) {
      uint8_t *pb = panel + b * bb + 32 * q;
      uint16_t h[8], m[8];
      for (int i = 0; i < 8; i++) {
        const uint8_t *blk = rq[i] + b * sq[i];
        _mm_prefetch((const char *)(blk + 30 * sq[i]), _MM_HINT_T0);
        memcpy(&h[i], blk, 2);
        memcpy(&m[i], blk + 2, 2);
      }
      /* vpinsrw, not a 16-byte reload of the 2-byte stores: that reload misses store
       * forwarding and stalled the pack (41% of its samples on one instruction) */
      _mm_store_si128((__m128i *)(pb + so - 16 * q), il__gather8(h)); /* rows 8q..8q+7: so + 16q */
      if (q41) _mm_store_si128((__m128i *)(pb + so + 64 - 16 * q), il__gather8(m));
      if (q8) {
        __m256i r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_xor_si256(fx, _mm256_loadu_si256((const __m256i *)(rq[i] + b * sq[i] + 2)));
        il__tr8x8(r);
        for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(pb + 128 * g), r[g]);
      } else {
        /* rows 0..3 of the 8 in the low lanes, 4..7 in the high: group g's 32 bytes at once */
        __m256i r[4];
        for (int i = 0; i < 4; i++)
          r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rq[i] + b * sq[i] + qo))),
                                         _mm_loadu_si128((const __m128i *)(rq[4 + i] + b * sq[4 + i] + qo)), 1);
        il__tr4x4(r);
        for (int g = 0; g < 4; g++) _mm256_store_si256((__m256i *)(pb + 128 * g), r[g]);
      }
    }
  }
}

/* ================================================================ micro-kernels */

typedef struct {
  const uint8_t *x0; /* first token's activation row */
  size_t as, doff, coff;
  float *y;
  int64_t ldy;
  int nr; /* valid rows of this 16-row half */
} il__tile_io;

IL__INLINE __m256i il__dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  __asm__("%{vex%} vpdpbusd %[s], %[u], %[acc]" : [acc] "+x"(acc) : [u] "x"(u), [s] "x"(s));
  return acc;
}

/* The T tokens' activation rows and zeroed float accumulators. */
IL__INLINE void il__tile_begin(const il__tile_io *io, const int T, const uint8_t *x[], __m256 f0[], __m256 f1[]) {
  for (int j = 0; j < T; j++) {
    x[j] = io->x0 + j * io->as;
    f0[j] = f1[j] = _mm256_setzero_ps();
  }
}

IL__INLINE void il__store(const il__tile_io *io, const int T, __m256 f0[], __m256 f1[]) {
  for (int j = 0; j < T; j++) {
    float *y = io->y + j * io->ldy;
    if (io->nr >= 16) {
      _mm256_storeu_ps(y, f0[j]);
      _mm256_storeu_ps(y + 8, f1[j]);
    } else {
      float tmp[16];
      _mm256_storeu_ps(tmp, f0[j]);
      _mm256_storeu_ps(tmp + 8, f1[j]);
      memcpy(y, tmp, sizeof(float) * (size_t)io->nr);
    }
  }
}

/* One 4-byte group of unsigned weights of the 16 rows (w0: rows 0..7, w1: 8..15) against each
 * of the T tokens' 4 activation bytes at x[j] + xo: vpdpbusd into int32 (vnni), or vpmaddubsw
 * added into int16 sums (the caller bounds how many). Q4_0, Q4_1, Q4_K, Q5_K. */
IL__INLINE void il__group_dot(__m256i w0, __m256i w1, const uint8_t *const x[], const size_t xo, const int T,
                              const bool vnni, __m256i a0[], __m256i a1[]) {
  for (int j = 0; j < T; j++) {
    const __m256i xb = _mm256_set1_epi32(il__gemm_ld32(x[j] + xo));
    if (vnni) {
      a0[j] = il__dpbusd_vex(a0[j], w0, xb);
      a1[j] = il__dpbusd_vex(a1[j], w1, xb);
    } else {
      a0[j] = _mm256_add_epi16(a0[j], _mm256_maddubs_epi16(w0, xb));
      a1[j] = _mm256_add_epi16(a1[j], _mm256_maddubs_epi16(w1, xb));
      IL__CHAIN(a0[j]);
      IL__CHAIN(a1[j]);
    }
  }
}

/* One 4-byte group of 4-bit weights of the 16 rows (panel lanes at p: the low nibbles, or the
 * high with hi), as il__group_dot (AVX2: 8 groups at most in the int16 sums, 8 x 3810).
 * Q4_0, Q4_1, Q4_K. */
IL__INLINE void il__nibble_group(const uint8_t *p, const bool hi, const uint8_t *const x[], const size_t xo,
                                 const int T, const bool vnni, __m256i a0[], __m256i a1[]) {
  const __m256i m0f = _mm256_set1_epi8(0x0F);
  __m256i w0 = _mm256_load_si256((const __m256i *)p), w1 = _mm256_load_si256((const __m256i *)(p + 32));
  if (hi) {
    w0 = _mm256_srli_epi16(w0, 4);
    w1 = _mm256_srli_epi16(w1, 4);
  }
  il__group_dot(_mm256_and_si256(w0, m0f), _mm256_and_si256(w1, m0f), x, xo, T, vnni, a0, a1);
}

/* Block b of 16 rows (panel lanes [h, h+16)) x T tokens into the float accumulators f0, f1:
 * the body of il__tile and il__tile_1x2. */
IL__INLINE void il__tile_block(const uint8_t *panel, int64_t b, int64_t nb4, const il__tile_io *io,
                               const uint8_t *const x[], const int h, const int T, const bool q4, const bool q41,
                               const bool vnni, __m256 f0[], __m256 f1[]) {
  const size_t bb = q41 ? 640 : q4 ? 576 : 1088, so = q4 ? 512 : 1024;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t *pb = panel + b * bb + 4 * h;
  /* vnni: the offsets seed the accumulators; AVX2 Q4_0 adds them after the int16 sums;
   * AVX2 Q8_0 has none (the sign trick needs no offset), nor has Q4_1 (its m * d*sum(x)
   * term is a float FMA at the block's end) */
  __m256i a0[3], a1[3];
  for (int j = 0; j < T; j++)
    a0[j] = a1[j] = vnni && !q41 ? _mm256_set1_epi32(il__gemm_ld32(x[j] + io->coff + 4 * b)) : _mm256_setzero_si256();
  if (q4) { /* as Q4_K: the low nibbles' 4 groups, then the high ones' (AVX2: into one int16
             * sum, at most 8 x 3810), so only 2 weight registers are live and T = 3 fits */
    const size_t lo = b < nb4 ? (size_t)((b >> 2) * 128 + (b & 3) * 16) : (size_t)(b * 32);
    const size_t hi = lo + (b < nb4 ? 64 : 16);
#pragma GCC unroll 1
    for (int s = 0; s < 2; s++) {
      const size_t xo = s ? hi : lo;
#pragma GCC unroll 4
      for (int g = 0; g < 4; g++) il__nibble_group(pb + 128 * g, s, x, xo + 4 * g, T, vnni, a0, a1);
    }
    if (!vnni)
      for (int j = 0; j < T; j++) {
        const __m256i c = q41 ? _mm256_setzero_si256() : _mm256_set1_epi32(il__gemm_ld32(x[j] + io->coff + 4 * b));
        a0[j] = _mm256_add_epi32(c, _mm256_madd_epi16(a0[j], ones));
        a1[j] = _mm256_add_epi32(c, _mm256_madd_epi16(a1[j], ones));
      }
  } else {
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
      const __m256i w0 = _mm256_load_si256((const __m256i *)(pb + 128 * g));
      const __m256i w1 = _mm256_load_si256((const __m256i *)(pb + 128 * g + 32));
      const __m256i u0 = _mm256_sign_epi8(w0, w0), u1 = _mm256_sign_epi8(w1, w1); /* |w| (unused by vnni) */
      for (int j = 0; j < T; j++) {
        const __m256i xb = _mm256_set1_epi32(il__gemm_ld32(x[j] + 32 * b + 4 * g));
        if (vnni) {
          a0[j] = il__dpbusd_vex(a0[j], w0, xb);
          a1[j] = il__dpbusd_vex(a1[j], w1, xb);
        } else {
          a0[j] = _mm256_add_epi32(a0[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(xb, w0)), ones));
          a1[j] = _mm256_add_epi32(a1[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(xb, w1)), ones));
          IL__CHAIN(a0[j]);
          IL__CHAIN(a1[j]);
        }
      }
    }
  }
  const uint8_t *ps = panel + b * bb + so + 2 * h; /* f16 scales of rows h.., mins 64 bytes on */
  const __m256 d0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)ps)), d1 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(ps + 16)));
  for (int j = 0; j < T; j++) {
    const __m256 dx = _mm256_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
    f0[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0[j]), _mm256_mul_ps(d0, dx), f0[j]);
    f1[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1[j]), _mm256_mul_ps(d1, dx), f1[j]);
  }
  if (q41) {
    const __m256 m0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(ps + 64))),
                 m1 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(ps + 80)));
    for (int j = 0; j < T; j++) {
      const __m256 s = _mm256_set1_ps(il__gemm_ldf(x[j] + io->coff + 4 * b)); /* d * sum(q) */
      f0[j] = _mm256_fmadd_ps(m0, s, f0[j]);
      f1[j] = _mm256_fmadd_ps(m1, s, f1[j]);
    }
  }
}

/* 16 rows (panel lanes [h, h+16)) x T tokens; q4: the panel holds Q4_0 nibbles, or with q41
 * Q4_1 nibbles and mins (else Q8_0 bytes, flipped for vnni). */
IL__INLINE void il__tile(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int h, const int T,
                         const bool q4, const bool q41, const bool vnni, il__gemm_pf *pf) {
  __m256 f0[3], f1[3];
  const uint8_t *x[3];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    il__gemm_pf_step(pf);
    il__tile_block(panel, b, nb & ~(int64_t)3, io, x, h, T, q4, q41, vnni, f0, f1);
  }
  il__store(io, T, f0, f1);
}

/* One token, all 32 rows: both halves block by block, so the panel is read once, in order
 * (il__tile takes the halves one after the other, which for one token, with the panel coming
 * from DRAM, read every other line of it twice over: weights repacked at load). io1: the second
 * half's output (the same token). */
IL__INLINE void il__tile_1x2(const uint8_t *panel, int64_t nb, const il__tile_io *io0, const il__tile_io *io1,
                             const bool q4, const bool q41, const bool vnni, il__gemm_pf *pf) {
  __m256 f0[1], f1[1], g0[1], g1[1];
  const uint8_t *x[1];
  il__tile_begin(io0, 1, x, f0, f1);
  g0[0] = g1[0] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    il__gemm_pf_step(pf); /* the driver counted a step per half */
    il__gemm_pf_step(pf);
    il__tile_block(panel, b, nb & ~(int64_t)3, io0, x, 0, 1, q4, q41, vnni, f0, f1);
    il__tile_block(panel, b, nb & ~(int64_t)3, io1, x, 16, 1, q4, q41, vnni, g0, g1);
  }
  il__store(io0, 1, f0, f1);
  il__store(io1, 1, g0, g1);
}

/* Q4_K and Q5_K: f -= dmin x the activation scale x sum_s m_s * sum32_s over super-block b,
 * one vpmaddwd per pair of sub-blocks; pm: this half's int16 mins (4 x 128 bytes from the
 * panel's, then dmin). */
IL__INLINE void il__tile_k4_mins(const uint8_t *pm, int64_t b, const il__tile_io *io, const int T, const uint8_t *x[],
                                 __m256 f0[], __m256 f1[]) {
  const __m256 dm0 = _mm256_load_ps((const float *)(pm + 512)), dm1 = _mm256_load_ps((const float *)(pm + 512) + 8);
  for (int j = 0; j < T; j++) {
    __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
      const __m256i bs = _mm256_set1_epi32(il__gemm_ld32(x[j] + io->coff + 16 * b + 4 * p));
      m0 = _mm256_add_epi32(m0, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(pm + 128 * p)), bs));
      m1 = _mm256_add_epi32(m1, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(pm + 128 * p + 32)), bs));
    }
    const __m256 dx = _mm256_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
    f0[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m0), _mm256_mul_ps(dm0, dx), f0[j]);
    f1[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m1), _mm256_mul_ps(dm1, dx), f1[j]);
  }
}

/* Q4_K and Q5_K: f += the int32 sums a of one sub-block x d * scale_s (sc: this half's 16
 * floats in the panel) x the activation scale of super-block b. */
IL__INLINE void il__tile_k4_scale(const float *sc, int64_t b, const il__tile_io *io, const int T, const uint8_t *x[],
                                  const __m256i a0[], const __m256i a1[], __m256 f0[], __m256 f1[]) {
  const __m256 s0 = _mm256_load_ps(sc), s1 = _mm256_load_ps(sc + 8);
  for (int j = 0; j < T; j++) {
    const __m256 dx = _mm256_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
    f0[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0[j]), _mm256_mul_ps(s0, dx), f0[j]);
    f1[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1[j]), _mm256_mul_ps(s1, dx), f1[j]);
  }
}

/* Q4_K, 16 rows x T tokens: one pass per 32-element sub-block (the low then the high nibbles
 * of a part's bytes, loaded twice: the panel is in L1/L2), its 2T accumulators (int32 with
 * AVX-VNNI; int16 sums of at most 8 x 3810 on AVX2) scaled by d * scale_s and the activation
 * scale at its end; the mins are one vpmaddwd per part against the sums of 32. */
IL__INLINE void il__tile_q4_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int h, const int T,
                              const bool vnni, il__gemm_pf *pf) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f0[3], f1[3];
  const uint8_t *x[3];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 5760 + 4 * h;
    il__gemm_pf_step(pf);
    for (int s = 0; s < 8; s++) { /* sub-block s: part s / 2, high nibbles when s is odd */
      const int p = s / 2, hi = s % 2;
      __m256i a0[3], a1[3];
      for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < 8; g++)
        il__nibble_group(pb + 1024 * p + 128 * g, hi, x, (size_t)(b * IL_QK_K + 32 * s + 4 * g), T, vnni, a0, a1);
      if (!vnni)
        for (int j = 0; j < T; j++) {
          a0[j] = _mm256_madd_epi16(a0[j], ones);
          a1[j] = _mm256_madd_epi16(a1[j], ones);
        }
      il__tile_k4_scale((const float *)(pb + 4096 + 128 * s), b, io, T, x, a0, a1, f0, f1);
    }
    il__tile_k4_mins(pb + 5120, b, io, T, x, f0, f1);
  }
  il__store(io, T, f0, f1);
}

/* Q5_K, 16 rows x T tokens: the panel's weights are bytes 0..31 (no unpacking), one pass per
 * 32-element sub-block, scaled at its end and the mins as Q4_K's. AVX-VNNI: int32
 * accumulators, T = 3. AVX2: vpmaddubsw sums of 4 groups in int16 (at most 4 x 2 x 31 x 127 =
 * 31496), then one vpmaddwd into int32 per half sub-block: 2T int16 + 2T int32 + 2T float
 * accumulators, so T = 2. */
IL__INLINE void il__tile_q5_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int h, const int T,
                              const bool vnni, il__gemm_pf *pf) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f0[3], f1[3];
  const uint8_t *x[3];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 9856 + 4 * h;
    il__gemm_pf_step(pf);
    for (int s = 0; s < 8; s++) {
      __m256i a0[3], a1[3];
      for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm256_setzero_si256();
      for (int g4 = 0; g4 < 8; g4 += 4) {
        __m256i c0[3], c1[3]; /* AVX2: the int16 sums of these 4 groups */
        for (int j = 0; j < T; j++) c0[j] = c1[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = g4; g < g4 + 4; g++) {
          il__group_dot(_mm256_load_si256((const __m256i *)(pb + 1024 * s + 128 * g)),
                        _mm256_load_si256((const __m256i *)(pb + 1024 * s + 128 * g + 32)), x,
                        (size_t)(b * IL_QK_K + 32 * s + 4 * g), T, vnni, vnni ? a0 : c0, vnni ? a1 : c1);
        }
        if (!vnni)
          for (int j = 0; j < T; j++) {
            a0[j] = _mm256_add_epi32(a0[j], _mm256_madd_epi16(c0[j], ones));
            a1[j] = _mm256_add_epi32(a1[j], _mm256_madd_epi16(c1[j], ones));
          }
      }
      il__tile_k4_scale((const float *)(pb + 8192 + 128 * s), b, io, T, x, a0, a1, f0, f1);
    }
    il__tile_k4_mins(pb + 9216, b, io, T, x, f0, f1);
  }
  il__store(io, T, f0, f1);
}

/* Q6_K, 16 rows x T tokens: per 16-element sub-block, int32 accumulators that start at -32 x
 * the activation's sum of 16 (AVX-VNNI: seeded, 4 vpdpbusd; AVX2: vpmaddubsw pairs of groups
 * summed in int16, at most 2 x 2 x 63 x 127 = 32004, then one vpmaddwd per pair), multiplied by
 * the rows' int8 scale (vpmulld) into the super-block's exact int32 total (as il__tile_q6_k of
 * gemm_avx512.c). 6T live ymm and the weights: T = 2. */
IL__INLINE void il__tile_q6_k(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int h, const int T,
                              const bool vnni, il__gemm_pf *pf) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 f0[2], f1[2];
  const uint8_t *x[2];
  il__tile_begin(io, T, x, f0, f1);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *pb = panel + b * 10368 + 4 * h;
    il__gemm_pf_step(pf);
    __m256i t0[2], t1[2];
    for (int j = 0; j < T; j++) t0[j] = t1[j] = _mm256_setzero_si256();
    for (int s = 0; s < 16; s++) {
      __m256i a0[2], a1[2];
      for (int j = 0; j < T; j++) a0[j] = a1[j] = _mm256_set1_epi32(il__gemm_q6_off(x[j], io->coff, b, s));
      for (int g = 0; g < 4; g += 2) {
        const uint8_t *pg = pb + 512 * s + 128 * g;
        const __m256i w0 = _mm256_load_si256((const __m256i *)pg), w1 = _mm256_load_si256((const __m256i *)(pg + 32));
        const __m256i v0 = _mm256_load_si256((const __m256i *)(pg + 128)), v1 = _mm256_load_si256((const __m256i *)(pg + 160));
        for (int j = 0; j < T; j++) {
          const uint8_t *xp = x[j] + b * IL_QK_K + 16 * s + 4 * g;
          const __m256i xa = _mm256_set1_epi32(il__gemm_ld32(xp)), xb = _mm256_set1_epi32(il__gemm_ld32(xp + 4));
          if (vnni) {
            a0[j] = il__dpbusd_vex(il__dpbusd_vex(a0[j], w0, xa), v0, xb);
            a1[j] = il__dpbusd_vex(il__dpbusd_vex(a1[j], w1, xa), v1, xb);
          } else {
            a0[j] = _mm256_add_epi32(a0[j], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w0, xa), _mm256_maddubs_epi16(v0, xb)), ones));
            a1[j] = _mm256_add_epi32(a1[j], _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w1, xa), _mm256_maddubs_epi16(v1, xb)), ones));
            IL__CHAIN(a0[j]);
            IL__CHAIN(a1[j]);
          }
        }
      }
      const __m256i s0 = _mm256_load_si256((const __m256i *)(pb + 8192 + 128 * s));
      const __m256i s1 = _mm256_load_si256((const __m256i *)(pb + 8192 + 128 * s + 32));
      for (int j = 0; j < T; j++) {
        t0[j] = _mm256_add_epi32(t0[j], _mm256_mullo_epi32(a0[j], s0));
        t1[j] = _mm256_add_epi32(t1[j], _mm256_mullo_epi32(a1[j], s1));
      }
    }
    const __m256 d0 = _mm256_load_ps((const float *)(pb + 10240)), d1 = _mm256_load_ps((const float *)(pb + 10240) + 8);
    for (int j = 0; j < T; j++) {
      const __m256 dx = _mm256_set1_ps(il__gemm_ldf(x[j] + io->doff + 4 * b));
      f0[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t0[j]), _mm256_mul_ps(d0, dx), f0[j]);
      f1[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t1[j]), _mm256_mul_ps(d1, dx), f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

/* kind 0: Q8_0, 1: Q4_0, 2: Q4_K, 3: Q4_1, 4: Q6_K, 5: Q5_K; pf: the next panel's prefetch
 * (gemm.h), stepped per block (per super-block for the K kinds) */
IL__INLINE void il__tile_kind(const uint8_t *panel, int64_t nb, const il__tile_io *io, const int h, const int T,
                              const int kind, const bool vnni, il__gemm_pf *pf) {
  if (kind == 2) il__tile_q4_k(panel, nb, io, h, T, vnni, pf);
  else if (kind == 5) il__tile_q5_k(panel, nb, io, h, vnni || T < 2 ? T : 2, vnni, pf);
  else if (kind == 4) il__tile_q6_k(panel, nb, io, h, T < 2 ? T : 2, vnni, pf);
  else il__tile(panel, nb, io, h, T, kind == 1 || kind == 3, kind == 3, vnni, pf);
}

/* Each 16-row half of the panel (the second only when it has rows), tokens [t0, t1) in tiles
 * of TM, the last tile shorter; one token of a full panel (repacked weights) both halves at
 * once (Q8_0, Q4_0, Q4_1). */
#define IL__GEMM_DRIVER(name, kind, TM, vnni, flip)                                                 \
  void name(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) { \
    if (pack && (kind == 2 || kind == 4)) il__gemm_pack(a, r0, panel, 0);                           \
    else if (pack) il__gemm_avx2_pack(a, r0, panel, flip);                                         \
    if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */                                     \
    const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS;              \
    const int64_t nb = a->n_in / (kind == 2 || kind >= 4 ? IL_QK_K : IL_QK);                       \
    il__tile_io io = {.as = a->act_stride,                                                         \
                      .doff = il__act_d_off(a->n_in),                                              \
                      .coff = kind == 2 || kind == 5 ? il__act_bsum32_off(a->n_in)                 \
                              : il__act_aux_off(a->n_in, kind == 4 ? IL_QK_K : IL_QK),             \
                      .ldy = a->ldy};                                                              \
    il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (nr + 15) / 16 * ((t1 - t0 + TM - 1) / TM) * nb); \
    if (t1 - t0 == 1 && nr > 16 && (kind == 0 || kind == 1 || kind == 3)) { /* one token */       \
      io.nr = 16;                                                                                  \
      io.x0 = a->act + (size_t)t0 * a->act_stride;                                                 \
      io.y = a->y + t0 * a->ldy + r0;                                                              \
      il__tile_io io1 = io;                                                                        \
      io1.nr = (int)(nr - 16);                                                                     \
      io1.y = io.y + 16;                                                                           \
      il__tile_1x2(panel, nb, &io, &io1, kind == 1 || kind == 3, kind == 3, vnni, &pf);            \
      return;                                                                                      \
    }                                                                                              \
    for (int h = 0; h < nr; h += 16) {                                                             \
      io.nr = nr - h < 16 ? (int)(nr - h) : 16;                                                    \
      int64_t t = t0;                                                                              \
      for (; t + TM <= t1; t += TM) {                                                              \
        io.x0 = a->act + (size_t)t * a->act_stride;                                                \
        io.y = a->y + t * a->ldy + r0 + h;                                                         \
        il__tile_kind(panel, nb, &io, h, TM, kind, vnni, &pf);                                          \
      }                                                                                            \
      io.x0 = a->act + (size_t)t * a->act_stride;                                                  \
      io.y = a->y + t * a->ldy + r0 + h;                                                           \
      if (t1 - t == 1) il__tile_kind(panel, nb, &io, h, 1, kind, vnni, &pf);                            \
      else if (t1 - t == 2 && TM > 2) il__tile_kind(panel, nb, &io, h, 2, kind, vnni, &pf);             \
    }                                                                                              \
  }

IL__GEMM_DRIVER(il__gemm_avx2_q8_0, 0, 3, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_q4_0, 1, 3, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_q4_1, 3, 3, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_q4_k, 2, 3, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_q6_k, 4, 2, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_q5_k, 5, 2, false, 0)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q8_0, 0, 3, true, 0x80)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q4_0, 1, 3, true, 0)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q4_1, 3, 3, true, 0)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q4_k, 2, 3, true, 0)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q6_k, 4, 2, true, 0)
IL__GEMM_DRIVER(il__gemm_avx2_vnni_q5_k, 5, 3, true, 0)

/* ================================================================ F16 / BF16 */

/* 16 rows (half h of the panel) x T tokens of F16/BF16 weights against F32 activations: per
 * element k two ymm of F32 weights (vcvtph2ps of 16 bytes each, or vpunpck*wd against zero
 * for BF16: low for half 0, high for half 1, gemm.h), one vbroadcastss per token and 2T FMAs.
 * 16 ymm: 2T accumulators + 2 weights + 1 broadcast, so T = 6. */
IL__INLINE void il__tile_h(const uint8_t *panel, int64_t n, const il__tile_io *io, const int h, const int T,
                           const bool bf, il__gemm_pf *pf) {
  __m256 f0[6], f1[6];
  const uint8_t *x[6];
  il__tile_begin(io, T, x, f0, f1);
  const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int64_t k = 0; k < n; k++) {
    const uint8_t *p = panel + 64 * k;
    if (k % 32 == 0) il__gemm_pf_step(pf); /* per 32 elements (2 KiB of panel) */
    __m256 w0, w1;
    if (bf) {
      const __m256i v0 = _mm256_load_si256((const __m256i *)p), v1 = _mm256_load_si256((const __m256i *)(p + 32));
      w0 = _mm256_castsi256_ps(h ? _mm256_unpackhi_epi16(zero, v0) : _mm256_unpacklo_epi16(zero, v0));
      w1 = _mm256_castsi256_ps(h ? _mm256_unpackhi_epi16(zero, v1) : _mm256_unpacklo_epi16(zero, v1));
    } else {
      w0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p + 2 * h)));
      w1 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p + 2 * h + 16)));
    }
    for (int j = 0; j < T; j++) {
      const __m256 xb = _mm256_set1_ps(il__gemm_ldf(x[j] + 4 * k));
      f0[j] = _mm256_fmadd_ps(w0, xb, f0[j]);
      f1[j] = _mm256_fmadd_ps(w1, xb, f1[j]);
    }
  }
  il__store(io, T, f0, f1);
}

/* Each 16-row half of the panel (the second only when it has rows), tokens [t0, t1) in tiles
 * of 6, the last shorter; the activations are the float rows of x (io.as: their byte stride). */
IL__INLINE void il__gemm_h(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack,
                           const bool bf) {
  if (pack) il__gemm_avx2_pack(a, r0, panel, 0);
  if (t0 >= t1) return; /* pack only (il_cpu_matmul_pack) */
  const int64_t nr = a->n_out - r0 < IL__GEMM_ROWS ? a->n_out - r0 : IL__GEMM_ROWS, n = a->n_in;
  il__tile_io io = {.as = 4 * (size_t)n, .ldy = a->ldy};
  il__gemm_pf pf = il__gemm_pf_init(a, r0, t1, (nr + 15) / 16 * ((t1 - t0 + 5) / 6) * ((n + 31) / 32));
  for (int h = 0; h < nr; h += 16) {
    io.nr = nr - h < 16 ? (int)(nr - h) : 16;
    for (int64_t t = t0; t < t1; t += 6) {
      io.x0 = (const uint8_t *)(a->x + t * n);
      io.y = a->y + t * a->ldy + r0 + h;
      switch ((t1 - t < 6 ? t1 - t : 6) + (h ? 6 : 0)) { /* h is 0 or 16: a constant per tile */
#define IL__H_TILE(T)                                                                              \
  case T: il__tile_h(panel, n, &io, 0, T, bf, &pf); break;                                         \
  case 6 + T: il__tile_h(panel, n, &io, 16, T, bf, &pf); break;
        IL__H_TILE(1) IL__H_TILE(2) IL__H_TILE(3) IL__H_TILE(4) IL__H_TILE(5) IL__H_TILE(6)
#undef IL__H_TILE
      }
    }
  }
}

void il__gemm_avx2_f16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_h(a, r0, t0, t1, panel, pack, false);
}
void il__gemm_avx2_bf16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) {
  il__gemm_h(a, r0, t0, t1, panel, pack, true);
}

#endif
