/* backend/cpu/matmul_q5: the SIMD tile kernels of Q5_0, Q5_1 and IQ4_NL weights, the 32-element
 * types llama-quantize falls back to for rows that are not a multiple of 256.
 *
 * They read Q8_0's activation layout (kernels.h) and fill the rows[] entries of the AVX2 and
 * AVX-512 tables (matmul_avx2.c, matmul_avx512.c); for Q5_0 and IQ4_NL also the gemm[]
 * entries, through Q8_0's GEMM (below). Q5_1 has no GEMM (its min does not fit Q8_0): batches
 * run its tiles. Defined only in binaries built with the level (the tables that name them are
 * under the same condition).
 * Not for: dispatch (matmul.c), the scalar oracle (matmul_scalar.c).
 */
#ifndef IL_BACKEND_CPU_MATMUL_Q5_H
#define IL_BACKEND_CPU_MATMUL_Q5_H

#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"

/* The tiles' type switch, and where each type's nibbles start in its block (qh, in Q5_0 and
 * Q5_1, is the 4 bytes before them). */
enum { IL__K_Q5_0, IL__K_Q5_1, IL__K_IQ4_NL };
static inline size_t il__q5_qs_off(int kind) { return kind == IL__K_Q5_1 ? 8 : kind == IL__K_Q5_0 ? 6 : 2; }
static inline size_t il__q5_block(int kind) {
  return kind == IL__K_Q5_0 ? sizeof(il_block_q5_0) : kind == IL__K_Q5_1 ? sizeof(il_block_q5_1) : sizeof(il_block_iq4_nl);
}

/* Q5_0 and IQ4_NL batches take the table's Q8_0 GEMM: a panel's 32 rows are first widened to
 * Q8_0 blocks (exact: the same fp16 d, the values q - 16 or the level as int8) in the space
 * after the Q8_0 panel (gemm.c sizes it), and the activations are already Q8_0's. The widened
 * rows are written only when the panel is packed, so repacked weights (il_cpu_matmul_pack) are
 * Q8_0 panels too. */
static inline void il__q5_widen_q8(const il__mm_args *a, int64_t r0, uint8_t *dst) {
  const int64_t nb = a->n_in / IL_QK, r1 = r0 + 32 < a->n_out ? r0 + 32 : a->n_out;
  const size_t bs = a->type == IL_DTYPE_Q5_0 ? sizeof(il_block_q5_0) : sizeof(il_block_iq4_nl);
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *w = a->w + (size_t)r * a->w_stride;
    for (int64_t b = 0; b < nb; b++, dst += sizeof(il_block_q8_0)) {
      const uint8_t *p = w + (size_t)b * bs;
      memcpy(dst, p, 2); /* d */
      int8_t *q = (int8_t *)dst + 2;
      if (a->type == IL_DTYPE_IQ4_NL) {
        for (int j = 0; j < 16; j++) {
          q[j] = il_iq4nl_values[p[2 + j] & 0xF];
          q[j + 16] = il_iq4nl_values[p[2 + j] >> 4];
        }
      } else {
        uint32_t qh;
        memcpy(&qh, p + 2, 4);
        for (int j = 0; j < 16; j++) {
          q[j] = (int8_t)(((p[6 + j] & 0xF) | (int)((qh >> j & 1) << 4)) - 16);
          q[j + 16] = (int8_t)(((p[6 + j] >> 4) | (int)((qh >> (j + 16) & 1) << 4)) - 16);
        }
      }
    }
  }
}

/* A GEMM driver (kernels.h il__mm_gemm_fn) for Q5_0 / IQ4_NL over the Q8_0 driver q8. */
#define IL__Q5_GEMM_VIA_Q8(name, q8)                                                          \
  void name(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack) { \
    uint8_t *rows = panel + il__gemm_panel_size(IL_DTYPE_Q8_0, a->n_in);                     \
    if (pack) il__q5_widen_q8(a, r0, rows);                                                  \
    il__mm_args a8 = *a; /* w stays where the driver's prefetches expect it unless packing */ \
    a8.type = IL_DTYPE_Q8_0;                                                                 \
    if (pack) {                                                                              \
      a8.w = rows;                                                                           \
      a8.w_stride = (size_t)(a->n_in / IL_QK) * sizeof(il_block_q8_0);                       \
    }                                                                                        \
    a8.n_out = a->n_out - r0;                                                                \
    a8.y = a->y + r0;                                                                        \
    q8(&a8, 0, t0, t1, panel, pack);                                                         \
  }

void il__gemm_q5_avx2(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_q5_avx2_vnni(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__gemm_q5_avx512(const il__mm_args *a, int64_t r0, int64_t t0, int64_t t1, uint8_t *panel, bool pack);
void il__rows_q5_0_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_1_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_iq4_nl_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_0_avx512(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_1_avx512(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_iq4_nl_avx512(const il__mm_args *a, int64_t r0, int64_t r1);

#endif
