/* backend/cpu/gemm: the blocked GEMM for batches of tokens (prompt processing, batched decode).
 *
 * With many tokens the tile kernels of matmul_*.c spend most of their instructions on
 * unpacking, scale conversion and horizontal sums instead of int8 dot products. The GEMM path
 * instead copies IL__GEMM_ROWS weight rows at a time into a "panel" (per thread, in the matmul
 * workspace) whose layout makes every vpdpbusd useful: one 32-bit lane per row, so a register
 * holds 4 consecutive weights of 16 rows and the activation is a broadcast 4-byte group of one
 * token. The panel (at most 40.5 bytes per weight column, Q6_K: 40.5 * n_in bytes, 324 KiB for n_in =
 * 8192) stays in L1/L2 while every token of the batch sweeps it, and each micro-kernel keeps
 * T tokens x 32 rows of int32 and float accumulators in registers.
 *
 * Panel layout, per 32-element block b of the row (IL__GEMM_ROWS = 32 rows; rows past n_out
 * hold zero weights, flipped like the others, and zero scales):
 *   Q8_0: 8 groups g of 128 bytes: bytes 4i..4i+3 = row i's weights 4g..4g+3, as stored
 *         (flip = 0) or XOR 0x80 (flip = 0x80: w + 128, the unsigned operand of vpdpbusd);
 *         then 32 f16: row i's block scale d, as stored.                1088 bytes per block
 *   Q4_0: 4 groups g of 128 bytes: bytes 4i..4i+3 = row i's qs[4g..4g+3] (low nibbles: weights
 *         4g..4g+3, high nibbles: 16+4g..16+4g+3, unsigned 0..15); then 32 f16 scales.
 *                                                                        576 bytes per block
 *   Q4_1: as Q4_0, then 32 f16: row i's block min m.                    640 bytes per block
 *   (Q8_0, Q4_0 and Q4_1 panels are as large as the GGUF rows, 34, 18 and 20 bytes per 32
 *   weights of a row: the scales stay f16, one vcvtph2ps per 8 or 16 rows per block, so
 *   weights repacked at load (--repack) cost no more memory or bandwidth than the file's.)
 *   Q4_K, per 256-element super-block: 4 parts p of 8 groups g of 128 bytes: bytes 4i..4i+3 =
 *         row i's qs[32p+4g..32p+4g+3] (low nibbles: sub-block 2p, elements 4g..4g+3; high:
 *         sub-block 2p+1); then 8 x 32 floats d * scale_s (sub-block s, row i); then 4 x 128
 *         bytes: row i's int16 mins (m_2p, m_2p+1), the vpdpwssd operand against the
 *         activation's sums of 32; then 32 floats dmin.                5760 bytes per block
 *   Q5_K, per 256-element super-block: 8 sub-blocks s of 8 groups g of 128 bytes: bytes 4i..4i+3
 *         = row i's weights 32s+4g..32s+4g+3 as 0..31 (unpacked from qs and qh); then Q4_K's
 *         8 x 32 float scales, 4 x 128 bytes of int16 mins and 32 floats dmin.
 *                                                                       9856 bytes per block
 *   Q6_K, per 256-element super-block: 64 groups g of 128 bytes: bytes 4i..4i+3 = row i's
 *         weights 4g..4g+3 as 0..63 (q + 32, unpacked from ql/qh); then 16 x 32 int32: row i's
 *         scale of sub-block s (16 elements); then 32 floats d.      10368 bytes per block
 *   F16 / BF16, per element k of the row: 64 bytes, 32 16-bit weights, one per row (rows past
 *         n_out hold zero). F16: word i = row i, so vcvtph2ps of bytes 0..31 gives rows 0..15
 *         and of bytes 32..63 rows 16..31. BF16: word 8q + m = row 4q + m and word 8q + 4 + m =
 *         row 16 + 4q + m (q, m < 4), so vpunpcklwd / vpunpckhwd against zero (the weight
 *         in the upper half of a 32-bit lane: exactly the BF16 -> F32 conversion) give rows
 *         0..15 / 16..31 of a zmm, and on ymm rows 0..7, 8..15 (low) and 16..23, 24..31 (high).
 *                                                                        64 bytes per element
 *         The activations are the F32 input itself (no quantization: the results keep the
 *         tile kernels' semantics, F32 products of exactly converted weights, F32 sums).
 *   BF16 against BF16 activations (vdpbf16ps, AVX512_BF16): per pair j of elements (2j, 2j+1),
 *         128 bytes: bytes 4i..4i+3 = row i's two weights (an odd row's last pair padded with
 *         zero); the activations are x as BF16 pairs, converted once per call and used only
 *         when every element of x was exactly a BF16 (--dtype bf16), so the products are the
 *         same exact products and only the summation order differs. 64 * n_in bytes (n_in
 *         rounded up to even).
 * The activations are the A32 (Q8_0, Q4_0, Q4_1) or AK (Q4_K, Q5_K, Q6_K) layouts of kernels.h, quantized
 * once per call; the Q8_0/Q4_0 offsets (-128 or -8 times the block sum) seed the integer
 * accumulators; Q4_1's float d * sum(q) meets the panel's mins in one FMA per block.
 *   Q5_0 / IQ4_NL: the Q8_0 panel of their rows widened to Q8_0 (exact: the same d and the
 *         values q - 16 or the level, as int8), followed by those 32 widened rows
 *         (matmul_q5.h).                                            1088 + 1088 bytes per block
 * Not for: single-token GEMV (the tile kernels are bandwidth-bound there and read the weights
 * in place), threading (matmul.c), other weight types (they keep the tile kernels: Q5_1).
 * F16/BF16 panels are 64 * n_in bytes (128 KiB for n_in = 2048, 512 KiB for 8192: L2).
 */
#ifndef IL_BACKEND_CPU_GEMM_H
#define IL_BACKEND_CPU_GEMM_H

#include <string.h>

#include "backend/cpu/kernels.h"

#define IL__GEMM_ROWS 32
/* The driver uses the GEMM from this many tokens on; below, the tile kernels, which need no
 * packing. Each threshold is where the GEMM overtook the tile kernels on one 1B layer at 1 and 2
 * threads, per type and ISA level (bench_matmul --gemm-only; the ratios per size are in
 * docs/performance-log.md#batched-matmul-against-the-int8-peak-benchbench_matmul---gemm-only and
 * #batched-f16bf16-matmul-against-the-fma-peak-benchbench_matmul---gemm-only). The K-quants
 * cross later than Q8_0/Q4_0/Q4_1 (their packers unpack to bytes); plain AVX2 (no vpdpbusd),
 * whose tile kernels keep up longer, crosses later for Q4_K and Q6_K. BF16 weights against BF16
 * activations (vdpbf16ps) cross at 12: the tile kernels' F32 FMAs do half the work per
 * instruction. Workspaces are sized with plain = false, the earliest use. */
#define IL__GEMM_MIN_TOK_F16 32
#define IL__GEMM_MIN_TOK_BF16_DOT 12
static inline int64_t il__gemm_min_tok(il_dtype t, bool plain) {
  switch (t) {
  case IL_DTYPE_Q8_0:
  case IL_DTYPE_Q5_0: /* Q8_0's GEMM on the rows widened to Q8_0 (matmul_q5.h) */
  case IL_DTYPE_IQ4_NL:
  case IL_DTYPE_Q5_K: return 12;
  case IL_DTYPE_Q4_0:
  case IL_DTYPE_Q4_1: return 16;
  case IL_DTYPE_Q4_K: return plain ? 32 : 20;
  case IL_DTYPE_Q6_K: return plain ? 44 : 40;
  case IL_DTYPE_F16:
  case IL_DTYPE_BF16: return IL__GEMM_MIN_TOK_F16;
  default: return 32;
  }
}

/* The fewest tokens any table runs the GEMM for (BF16's vdpbf16ps path included): what
 * workspaces are sized for. */
static inline int64_t il__gemm_min_tok_first(il_dtype t) {
  return t == IL_DTYPE_BF16 ? IL__GEMM_MIN_TOK_BF16_DOT : il__gemm_min_tok(t, false);
}

/* Unaligned 4-byte loads of an activation group, offset or scale. */
static inline int32_t il__gemm_ld32(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline float il__gemm_ldf(const uint8_t *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}
/* Q6_K: -32 x the activation's sum of 16 of sub-block s of super-block b (AK bsum16 at coff),
 * the start of that sub-block's accumulators (the panel's weights are q + 32). */
static inline int32_t il__gemm_q6_off(const uint8_t *x, size_t coff, int64_t b, int s) {
  int16_t v;
  memcpy(&v, x + coff + 2 * (16 * b + s), 2);
  return -32 * (int32_t)v;
}

/* The next panel's raw weight rows (r0 + 32 .. r0 + 63, the chunk a thread claims next),
 * prefetched into L2 a few lines per block while the micro-kernels compute this panel, so the
 * memory-bound pack that follows reads L2 instead of DRAM, and DRAM is busy during compute
 * rather than idle. Only on the last token slice of a panel (earlier slices are followed by
 * the same panel); nothing past n_out. Type-agnostic: the rows are one byte range. With
 * repacked weights (a->w is the panels, a->w_stride a 32nd of one) this is the next panel, and
 * a->stream turns it off for small batches on AVX-512 (matmul.c). */
typedef struct {
  const char *p, *end;
  int64_t lines; /* cache lines per step */
  bool stream;   /* a->stream: the micro-kernel prefetches its own panel IL__GEMM_STREAM_PF ahead */
} il__gemm_pf;
/* A small batch from repacked panels on AVX-512 (a->stream): the panel streams from DRAM once,
 * and a prefetch into L1 this far ahead of the block being read (instead of the next panel into
 * L2) is faster for one-token passes (bench_matmul --repack; docs/performance-log.md#repack).
 * How many tokens it pays for is the table's stream_tok (matmul_avx512.c). */
#define IL__GEMM_STREAM_PF 4096
static inline il__gemm_pf il__gemm_pf_init(const il__mm_args *a, int64_t r0, int64_t t1, int64_t steps) {
  il__gemm_pf pf = {NULL, NULL, 0, a->stream};
  const int64_t n0 = r0 + IL__GEMM_ROWS;
  if (a->stream || t1 < a->n_tok || n0 >= a->n_out || steps <= 0) return pf;
  const int64_t n1 = n0 + IL__GEMM_ROWS < a->n_out ? n0 + IL__GEMM_ROWS : a->n_out;
  pf.p = (const char *)a->w + (size_t)n0 * a->w_stride;
  pf.end = (const char *)a->w + (size_t)n1 * a->w_stride;
  pf.lines = ((pf.end - pf.p + 63) / 64 + steps - 1) / steps;
  return pf;
}
static inline void il__gemm_pf_step(il__gemm_pf *pf) {
  for (int64_t i = 0; i < pf->lines && pf->p < pf->end; i++, pf->p += 64) __builtin_prefetch(pf->p, 0, 2);
}

/* Panel bytes for weights of type t with rows of n_in elements; 0 when t has no GEMM layout. */
size_t il__gemm_panel_size(il_dtype t, int64_t n_in);

/* Copies rows [r0, r0 + 32) of a->w (those below a->n_out) into panel in the layout above;
 * flip is XORed into Q8_0 weights. Q4_K and Q6_K are packed only here (plain C: their panels
 * are built from unpacked 6-bit scales or weights, and their GEMMs serve 32 and 44 tokens and
 * more); for the other types (Q5_K included) this is the reference of the AVX2 packer.
 * panel must hold il__gemm_panel_size bytes, 64-byte aligned. Can't fail. */
void il__gemm_pack(const il__mm_args *a, int64_t r0, uint8_t *panel, uint8_t flip);

/* Q4_K and Q5_K: row i's 8 floats d * scale_s, int16 mins and dmin (gemm.h) from the
 * super-block at blk (its d, dmin and 12 packed scale bytes) into ps, the scale part of the
 * super-block's panel. Can't fail. */
void il__gemm_pack_k4_scales(const uint8_t *blk, uint8_t *ps, int i);

/* BF16 pair layout (the vdpbf16ps path): per pair j of elements (2j, 2j + 1), 128 bytes:
 * bytes 4i..4i+3 = row i's two BF16 weights (rows past n_out, and element n_in of an odd row,
 * zero). The reference of il__gemm_avx512_pack_bf16_pairs. Can't fail. */
void il__gemm_pack_bf16_pairs(const il__mm_args *a, int64_t r0, uint8_t *panel);
/* The same with AVX-512 (a 16 x 16 transpose of 32-bit pairs per 16 rows); what the kernel
 * uses. */
void il__gemm_avx512_pack_bf16_pairs(const il__mm_args *a, int64_t r0, uint8_t *panel);

/* The same with AVX2 shuffles (gemm_avx2.c), for CPUs with AVX2; what the kernels use. */
void il__gemm_avx2_pack(const il__mm_args *a, int64_t r0, uint8_t *panel, uint8_t flip);

/* The per-ISA micro-kernel drivers (table entries il__kernels.gemm). */
void il__gemm_avx512_q8_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_q4_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_q4_1(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_q6_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_q4_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_q5_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q8_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q4_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q4_1(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q8_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q4_0(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q4_1(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q4_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q6_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q6_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q4_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_q5_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_vnni_q5_k(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_f16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx512_bf16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_f16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_avx2_bf16(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
/* AVX-512 tables' bf16_act (kernels.h): x -> BF16 pairs, *a->inexact set when not exact. */
void il__gemm_avx512_bf16_act(const il__mm_args *a, int64_t u0, int64_t u1);

#endif
