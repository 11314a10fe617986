/* backend/cpu/kernels: the contract between the matmul driver and its per-ISA kernels.
 *
 * The driver (matmul.c) quantizes the activations into the workspace, splits the output rows
 * into chunks and calls one kernel per chunk; a kernel computes a range of output rows for all
 * tokens, reading the weights in place. Each instruction-set file fills one il__kernels table.
 *
 * Quantized-activation layouts (one "act row" per token, act_stride bytes apart, all offsets
 * 64-byte aligned). Their values are bit-identical whichever ISA produced them: every level
 * computes d = amax/127 in float, q = round-half-even(x * (1/d)).
 *   A32 (Q8_0, Q4_0, Q4_1 weights; blocks of 32):
 *     qs[n_in] bytes, then d: float[nb], then aux: 4 bytes[nb].
 *     Q8_0: qs natural order, signed; aux int32 -128*sum(q) (the kernels flip the weights'
 *           sign bit, w ^ 0x80 = w + 128, to make them the unsigned VNNI operand).
 *     Q4_0/Q4_1: groups of 4 blocks (128 elements) are stored as the first halves (elements
 *           0..15) of the 4 blocks, then their second halves, matching a zmm built from four
 *           16-byte nibble arrays (low nibbles then high nibbles); trailing blocks (nb % 4) are
 *           natural. q signed. aux: Q4_0 int32 -8*sum(q); Q4_1 float d*sum(q).
 *     Q5_0/Q5_1/IQ4_NL: Q8_0's layout (natural order, aux -128*sum(q)); the kernels derive
 *           Q5_0's -16*sum(q) (aux / 8) and Q5_1's d*sum(q) from it.
 *   AK (K-quant weights; blocks of 256): qs[n_in] int8 natural, then d: float[nb], then
 *     bsum16: int16[16*nb] (sums of 16 consecutive q), then bsum32: int16[8*nb] (sums of 32).
 * Not for: anything outside backend/cpu.
 */
#ifndef IL_BACKEND_CPU_KERNELS_H
#define IL_BACKEND_CPU_KERNELS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

typedef struct {
  il_dtype type;
  const uint8_t *w; /* n_out rows, w_stride bytes apart */
  size_t w_stride;
  int64_t n_out, n_in, n_tok;
  const float *x; /* float activations, n_tok rows of n_in */
  uint8_t *act;   /* quantized activations (quantized types), or BF16 pairs (below) */
  size_t act_stride;
  /* BF16 weights on a table with bf16_act, when x looked BF16-exact: act holds x as BF16 (each
   * row padded to an even count with a zero), and the conversion sets *inexact if some element
   * was not exactly a BF16 after all; the GEMM then keeps its F32 path. NULL otherwise. */
  _Atomic int *inexact;
  float *y;
  int64_t ldy;
  /* a small batch from repacked panels (stream_tok): the GEMM prefetches the panel it reads
   * into L1 instead of the next one into L2 (gemm.h) */
  bool stream;
} il__mm_args;

/* Rows [r0, r1) of y for every token. */
typedef void (*il__mm_rows_fn)(const il__mm_args *a, int64_t r0, int64_t r1);
/* Quantizes activation blocks [u0, u1) where unit u is block u % nb of token u / nb. */
typedef void (*il__mm_quant_fn)(const il__mm_args *a, int64_t u0, int64_t u1);
/* Blocked GEMM (backend/cpu/gemm.h): rows [r0, r0 + 32) (those below n_out) x tokens [t0, t1)
 * of y, from the thread's weight panel; pack = true first copies those rows into the panel
 * (false: the panel already holds them, from this thread's previous chunk). */
typedef void (*il__mm_gemm_fn)(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);

struct il__kernels {
  bool compiled; /* false when this binary was built without the level */
  il__mm_rows_fn rows[IL_DTYPE_COUNT];
  il__mm_quant_fn quant[IL_DTYPE_COUNT];
  il__mm_gemm_fn gemm[IL_DTYPE_COUNT]; /* (optional) batches of il__gemm_min_tok tokens or more */
  bool plain_int8; /* int8 products without vpdpbusd (plain AVX2): later GEMM thresholds */
  /* batches of at most stream_tok[type] tokens from repacked weights run with
   * il__mm_args.stream (matmul.c; AVX-512 only; 0: never) */
  uint8_t stream_tok[IL_DTYPE_COUNT];
  /* (optional) x -> BF16 pairs for the BF16 GEMM's vdpbf16ps path, units = tokens; used only on
   * CPUs with AVX512_BF16 (sys/cpuid), and only when x is exactly BF16 (--dtype bf16). */
  il__mm_quant_fn bf16_act;
};
typedef struct il__kernels il__kernels;

/* ---- activation layout helpers ---- */

static inline size_t il__align64(size_t n) { return (n + 63) & ~(size_t)63; }
static inline bool il__is_kquant(il_dtype t) {
  return t == IL_DTYPE_Q4_K || t == IL_DTYPE_Q5_K || t == IL_DTYPE_Q6_K;
}
/* Weight types whose activations take Q8_0's natural A32 layout. */
static inline bool il__is_a32n(il_dtype t) {
  return t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q5_0 || t == IL_DTYPE_Q5_1 || t == IL_DTYPE_IQ4_NL;
}
static inline int il__act_blck(il_dtype t) { return il__is_kquant(t) ? IL_QK_K : IL_QK; }
static inline size_t il__act_d_off(int64_t n_in) { return il__align64((size_t)n_in); }
static inline size_t il__act_aux_off(int64_t n_in, int blck) {
  return il__act_d_off(n_in) + il__align64((size_t)(n_in / blck) * 4);
}
/* BF16 pairs (the vdpbf16ps GEMM's activations): one token's row, n_in rounded up to even. */
static inline size_t il__act_bf16_stride(int64_t n_in) { return il__align64(2 * (size_t)(n_in + (n_in & 1))); }

/* One token on AMD, rows of 1024 elements or more: the one-token tile kernels take one row at
 * a time, one sequential stream instead of four a row apart (matmul_avx512.c has the figures;
 * short rows, a small model's, keep the 4-row tiles and their shared reductions). */
#define IL__ONE_ROW_MIN_IN 1024
/* The vendor test of these helpers: libgcc's CPU model, x86 only (the SIMD kernels that use
 * them are x86 only; elsewhere the answer is no). */
static inline bool il__cpu_amd(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}
static inline bool il__one_row_tiles(const il__mm_args *a) {
  return a->n_tok == 1 && a->n_in >= IL__ONE_ROW_MIN_IN && il__cpu_amd();
}

/* Software prefetch of the rows a tile kernel reads next (matmul_avx2.c, matmul_avx512.c).
 *
 * Distance: rows are contiguous, so the tile after this one starts R rows further; fetching
 * one or more tiles ahead (at least 8 KiB) at the same relative offset keeps enough reads in
 * flight. It makes short rows (1-2 KiB, shorter than what the hardware prefetcher needs to ramp
 * up within a 4 KiB page) stream at full bandwidth: +30-60% on one thread for Q4_0/Q8_0 rows of
 * 2048. The driver gives each thread a contiguous range, so the prefetched rows are normally
 * the thread's own next rows.
 *
 * Pattern: the R rows of a future tile are one run of R * stride bytes. On AMD a tile of R > 1
 * rows prefetches that run in order, as one sequential stream: at byte o of its rows, R * n
 * bytes from R * o. Elsewhere (and for one row) each row prefetches its own lines, R streams
 * a row apart (Intel's prefetchers already read those at the bandwidth). AMD's do not: the one
 * stream raised 4-row tiles by 10-15 points of the bandwidth (bench_matmul --no-gemm;
 * docs/performance-log.md#one-stream-prefetch).
 *
 * Level: into L1, except a tile's own rows with l2 (the AVX-512 quantized tiles on Intel,
 * whose L1 fill buffers the demand loads also need; AMD prefers L1:
 * docs/performance-log.md#prefetch-level). */
typedef struct {
  const uint8_t *f; /* the first row + the distance: where the future tile starts */
  size_t stride;
  int R;
  bool stream; /* one stream (AMD, R > 1) */
  bool l2;     /* per-row lines into L2 */
} il__pf_rows;

/* For the tile of R rows starting at w0; l2: per-row lines into L2 unless on AMD. */
static inline il__pf_rows il__pf_rows_init(const uint8_t *w0, size_t stride, int R, bool l2) {
  const size_t tile = (size_t)R * stride;
  const bool amd = il__cpu_amd();
  return (il__pf_rows){w0 + tile * ((8192 + tile - 1) / tile), stride, R, R > 1 && amd, l2 && !amd};
}
/* The lines for bytes [o, o + n) of each of the tile's rows, in the future tile. */
static inline void il__pf_rows_step(const il__pf_rows *p, size_t o, size_t n) {
  if (p->stream) {
    for (size_t b = 0; b < (size_t)p->R * n; b += 64) __builtin_prefetch(p->f + (size_t)p->R * o + b, 0, 3);
    return;
  }
  for (int i = 0; i < p->R; i++)
    for (size_t b = 0; b < n; b += 64) {
      const uint8_t *q = p->f + (size_t)i * p->stride + o + b;
      if (p->l2) __builtin_prefetch(q, 0, 1);
      else __builtin_prefetch(q, 0, 3);
    }
}

/* Keeps an integer SIMD running sum (one vector register) a chain of adds: without it GCC
 * reassociates the unrolled adds of a block into a tree over all its products and spills them
 * to the stack (the plain-AVX2 Q4_0 GEMM ran at 0.73x, the AVX2 K-quant tiles at 0.87-0.93x).
 * An empty asm statement with the sum as an in-out register operand: it emits no instruction.
 * x86 only (the "x" constraint); the float sums need none (GCC keeps their order). */
#define IL__CHAIN(v) __asm__("" : "+x"(v))

/* AK: bsum16 starts at il__act_aux_off(n_in, 256), bsum32 here. */
static inline size_t il__act_bsum32_off(int64_t n_in) {
  return il__act_aux_off(n_in, IL_QK_K) + il__align64((size_t)(n_in / IL_QK_K) * 32);
}
static inline size_t il__act_stride(il_dtype t, int64_t n_in) {
  if (il__is_kquant(t)) return il__act_bsum32_off(n_in) + il__align64((size_t)(n_in / IL_QK_K) * 16);
  return il__act_aux_off(n_in, IL_QK) + il__align64((size_t)(n_in / IL_QK) * 4);
}
/* Byte offset inside qs of element j (0..31) of block b for the Q4 A32 layout. */
static inline size_t il__act_q4_pos(int64_t b, int j, int64_t nb) {
  if (b < (nb & ~(int64_t)3)) {
    int64_t g = b >> 2;
    return (size_t)(g * 128 + (j >= 16 ? 64 : 0) + (b & 3) * 16 + (j & 15));
  }
  return (size_t)(b * 32 + j);
}

/* 8 scales and 8 mins of a Q4_K/Q5_K super-block, unpacked from its 12 packed bytes (the
 * vector form of ggml's get_scale_min_k4), returned as 8 bytes each in a 64-bit word (byte j
 * = sub-block j) so SIMD code can move them to a vector register without a memory round trip. */
static inline void il__k4_scales(const uint8_t *packed, uint64_t *sc, uint64_t *mn) {
  uint32_t u0, u1, u2;
  memcpy(&u0, packed, 4);
  memcpy(&u1, packed + 4, 4);
  memcpy(&u2, packed + 8, 4);
  const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  const uint32_t m47 = ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4);
  const uint32_t m03 = u1 & k1;
  const uint32_t s47 = (u2 & k2) | (((u0 >> 6) & k3) << 4);
  *sc = (uint64_t)(u0 & k1) | (uint64_t)s47 << 32;
  *mn = (uint64_t)m03 | (uint64_t)m47 << 32;
}

/* Per-ISA tables. Entries are NULL where a level has no kernel of its own; the driver falls
 * back to the scalar entry. */
extern const il__kernels il__matmul_scalar;
extern const il__kernels il__matmul_avx2;
extern const il__kernels il__matmul_avx2_vnni;    /* with the AVX-VNNI GEMM (Alder Lake, Zen 4+) */
extern const il__kernels il__matmul_avx512;      /* Q4 without GFNI (Cascade Lake) */
extern const il__kernels il__matmul_avx512_gfni; /* Q4 with one GFNI instruction */
extern const il__kernels il__matmul_avx512_vbmi; /* and Q4_0 gathered with VBMI */

#endif
