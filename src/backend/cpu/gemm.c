/* backend/cpu/gemm: weight panels for the blocked GEMM (layout in gemm.h).
 *
 * Packing is plain C: it runs once per 32 rows per call and its cost is spread over every token
 * of the batch (at 512 tokens it is under 1% of the GEMM; the driver uses the GEMM only from
 * il__gemm_min_tok tokens on).
 * Not for: the micro-kernels (gemm_avx512.c, gemm_avx2.c).
 */
#include "backend/cpu/gemm.h"

#include <string.h>

static size_t il__gemm_block_bytes(il_dtype t) {
  switch (t) {
  case IL_DTYPE_Q8_0: return 8 * 4 * IL__GEMM_ROWS + 2 * IL__GEMM_ROWS;
  /* Q5_0 and IQ4_NL: a Q8_0 panel, then the panel's rows as Q8_0 blocks (matmul_q5.h) */
  case IL_DTYPE_Q5_0:
  case IL_DTYPE_IQ4_NL: return 8 * 4 * IL__GEMM_ROWS + 2 * IL__GEMM_ROWS + sizeof(il_block_q8_0) * IL__GEMM_ROWS;
  case IL_DTYPE_Q4_0: return 4 * 4 * IL__GEMM_ROWS + 2 * IL__GEMM_ROWS;
  case IL_DTYPE_Q4_1: return 4 * 4 * IL__GEMM_ROWS + 2 * 2 * IL__GEMM_ROWS;
  case IL_DTYPE_Q4_K: return (32 * 4 + 8 * 4 + 4 * 4 + 4) * IL__GEMM_ROWS;
  case IL_DTYPE_Q5_K: return (64 * 4 + 8 * 4 + 4 * 4 + 4) * IL__GEMM_ROWS;
  case IL_DTYPE_Q6_K: return (64 * 4 + 16 * 4 + 4) * IL__GEMM_ROWS;
  case IL_DTYPE_F16:
  case IL_DTYPE_BF16: return 2 * IL__GEMM_ROWS;
  default: return 0;
  }
}

size_t il__gemm_panel_size(il_dtype t, int64_t n_in) {
  if (t == IL_DTYPE_BF16) n_in += n_in & 1; /* the pair layout pads an odd row with a zero */
  return (size_t)(n_in / il_dtype_get(t)->blck) * il__gemm_block_bytes(t);
}

void il__gemm_pack_k4_scales(const uint8_t *blk, uint8_t *ps, int i) {
  uint16_t h[2];
  memcpy(h, blk, 4);
  const float d = il_fp16_to_f32(h[0]), dmin = il_fp16_to_f32(h[1]);
  uint64_t sc, mn;
  il__k4_scales(blk + offsetof(il_block_q4_K, scales), &sc, &mn); /* the same offset in Q5_K */
  for (int s = 0; s < 8; s++) {
    const float v = d * (float)(sc >> (8 * s) & 0xff); /* exact: 11 x 6 bits */
    memcpy(ps + s * 4 * IL__GEMM_ROWS + 4 * i, &v, 4);
    const int16_t m = (int16_t)(mn >> (8 * s) & 0xff);
    memcpy(ps + 8 * 4 * IL__GEMM_ROWS + (s / 2) * 4 * IL__GEMM_ROWS + 4 * i + 2 * (s % 2), &m, 2);
  }
  memcpy(ps + 12 * 4 * IL__GEMM_ROWS + 4 * i, &dmin, 4);
}

static void il__gemm_pack_q4_k(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  static const uint8_t zero[sizeof(il_block_q4_K)];
  const int64_t nb = a->n_in / IL_QK_K;
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  const size_t bb = il__gemm_block_bytes(IL_DTYPE_Q4_K);
  for (int i = 0; i < IL__GEMM_ROWS; i++) {
    const uint8_t *w = i < nr ? a->w + (size_t)(r0 + i) * a->w_stride : zero;
    const size_t step = i < nr ? sizeof(il_block_q4_K) : 0;
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *blk = w + b * step;
      uint8_t *pb = panel + b * bb;
      for (int pg = 0; pg < 32; pg++) /* part p = pg / 8, group g = pg % 8 */
        memcpy(pb + pg * 4 * IL__GEMM_ROWS + 4 * i, blk + offsetof(il_block_q4_K, qs) + 4 * pg, 4);
      il__gemm_pack_k4_scales(blk, pb + 32 * 4 * IL__GEMM_ROWS, i);
    }
  }
}

/* Q5_K: the 5-bit weights unpacked to bytes 0..31 (low nibble from qs, bit s of qh[l] for
 * element l of sub-block s), then Q4_K's scales, mins and dmin. */
static void il__gemm_pack_q5_k(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  const int64_t nb = a->n_in / IL_QK_K;
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  const size_t bb = il__gemm_block_bytes(IL_DTYPE_Q5_K);
  for (int i = 0; i < IL__GEMM_ROWS; i++)
    for (int64_t b = 0; b < nb; b++) {
      il_block_q5_K blk;
      if (i < nr) memcpy(&blk, a->w + (size_t)(r0 + i) * a->w_stride + b * sizeof blk, sizeof blk);
      else memset(&blk, 0, sizeof blk); /* rows past n_out: zero weights, scales and d */
      uint8_t q[IL_QK_K];
      for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
          q[64 * p + l] = (uint8_t)((blk.qs[32 * p + l] & 0xF) | ((blk.qh[l] >> (2 * p)) & 1) << 4);
          q[64 * p + 32 + l] = (uint8_t)((blk.qs[32 * p + l] >> 4) | ((blk.qh[l] >> (2 * p + 1)) & 1) << 4);
        }
      uint8_t *pb = panel + b * bb;
      for (int g = 0; g < 64; g++) memcpy(pb + g * 4 * IL__GEMM_ROWS + 4 * i, q + 4 * g, 4);
      il__gemm_pack_k4_scales((const uint8_t *)&blk, pb + 64 * 4 * IL__GEMM_ROWS, i);
    }
}

/* Q6_K: the 6-bit weights unpacked to bytes 0..63 (ggml's ql/qh order), the int8 sub-block
 * scales widened to int32, d as float. */
static void il__gemm_pack_q6_k(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  const int64_t nb = a->n_in / IL_QK_K;
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  const size_t bb = il__gemm_block_bytes(IL_DTYPE_Q6_K);
  for (int i = 0; i < IL__GEMM_ROWS; i++)
    for (int64_t b = 0; b < nb; b++) {
      il_block_q6_K blk;
      if (i < nr) memcpy(&blk, a->w + (size_t)(r0 + i) * a->w_stride + b * sizeof blk, sizeof blk);
      else memset(&blk, 0, sizeof blk); /* rows past n_out: zero weights, scales and d */
      uint8_t q[IL_QK_K];
      for (int n = 0; n < 2; n++) {
        const uint8_t *ql = blk.ql + 64 * n, *qh = blk.qh + 32 * n;
        for (int l = 0; l < 32; l++) {
          q[128 * n + l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
          q[128 * n + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
          q[128 * n + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          q[128 * n + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      uint8_t *pb = panel + b * bb;
      for (int g = 0; g < 64; g++) memcpy(pb + g * 4 * IL__GEMM_ROWS + 4 * i, q + 4 * g, 4);
      for (int s = 0; s < 16; s++) {
        const int32_t sc = blk.scales[s];
        memcpy(pb + (64 + s) * 4 * IL__GEMM_ROWS + 4 * i, &sc, 4);
      }
      const float d = il_fp16_to_f32(blk.d);
      memcpy(pb + 80 * 4 * IL__GEMM_ROWS + 4 * i, &d, 4);
    }
}

/* F16 / BF16: the panel is the transpose of the 32 rows (BF16 rows permuted, gemm.h). Each row
 * is read sequentially; the writes land 64 bytes apart in the panel (L1/L2). */
static void il__gemm_pack_16(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  const bool bf = a->type == IL_DTYPE_BF16;
  const int64_t n = a->n_in;
  for (int i = 0; i < IL__GEMM_ROWS; i++) {
    const int pos = !bf ? i : i < 16 ? 8 * (i / 4) + i % 4 : 8 * ((i - 16) / 4) + 4 + i % 4;
    uint16_t *dst = (uint16_t *)(void *)panel + pos;
    if (i >= nr) {
      for (int64_t k = 0; k < n; k++) dst[k * IL__GEMM_ROWS] = 0;
      continue;
    }
    const uint8_t *w = a->w + (size_t)(r0 + i) * a->w_stride;
    for (int64_t k = 0; k < n; k++) memcpy(&dst[k * IL__GEMM_ROWS], w + 2 * k, 2);
  }
}

void il__gemm_pack_bf16_pairs(const il__mm_args *a, int64_t r0, uint8_t *panel) {
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  const int64_t n = a->n_in, np = (n + 1) / 2;
  for (int i = 0; i < IL__GEMM_ROWS; i++) {
    const uint8_t *w = a->w + (size_t)(r0 + i) * a->w_stride;
    for (int64_t j = 0; j < np; j++) {
      uint8_t *dst = panel + 128 * j + 4 * i;
      memset(dst, 0, 4);
      if (i >= nr) continue;
      memcpy(dst, w + 4 * j, 2 * j + 1 < n ? 4 : 2);
    }
  }
}

void il__gemm_pack(const il__mm_args *a, int64_t r0, uint8_t *panel, uint8_t flip) {
  if (a->type == IL_DTYPE_F16 || a->type == IL_DTYPE_BF16) {
    il__gemm_pack_16(a, r0, panel);
    return;
  }
  if (a->type == IL_DTYPE_Q4_K) {
    il__gemm_pack_q4_k(a, r0, panel);
    return;
  }
  if (a->type == IL_DTYPE_Q5_K) {
    il__gemm_pack_q5_k(a, r0, panel);
    return;
  }
  if (a->type == IL_DTYPE_Q6_K) {
    il__gemm_pack_q6_k(a, r0, panel);
    return;
  }
  const int64_t nb = a->n_in / IL_QK;
  const size_t bb = il__gemm_block_bytes(a->type);
  const bool q8 = a->type == IL_DTYPE_Q8_0;
  const bool q41 = a->type == IL_DTYPE_Q4_1;
  const size_t bsz = q8 ? sizeof(il_block_q8_0) : q41 ? sizeof(il_block_q4_1) : sizeof(il_block_q4_0);
  const size_t qo = q41 ? 4 : 2; /* qs after d (and Q4_1's m) */
  const int groups = q8 ? 8 : 4;
  const uint32_t fx = flip * 0x01010101u;
  static const uint8_t zero[64];
  const int nr = a->n_out - r0 < IL__GEMM_ROWS ? (int)(a->n_out - r0) : IL__GEMM_ROWS;
  for (int i = 0; i < IL__GEMM_ROWS; i++) { /* rows past n_out: zero weights and scales */
    const uint8_t *w = i < nr ? a->w + (size_t)(r0 + i) * a->w_stride : zero;
    const size_t step = i < nr ? bsz : 0;
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t *blk = w + b * step;
      uint8_t *dst = panel + b * bb + 4 * i, *sc = panel + b * bb + groups * 4 * IL__GEMM_ROWS + 2 * i;
      for (int g = 0; g < groups; g++) {
        uint32_t v;
        memcpy(&v, blk + qo + 4 * g, 4);
        if (q8) v ^= fx;
        memcpy(dst + g * 4 * IL__GEMM_ROWS, &v, 4);
      }
      memcpy(sc, blk, 2); /* d (and Q4_1's m) as stored: f16 */
      if (q41) memcpy(sc + 2 * IL__GEMM_ROWS, blk + 2, 2);
    }
  }
}
