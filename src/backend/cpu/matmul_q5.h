/* backend/cpu/matmul_q5: the SIMD tile kernels of Q5_0, Q5_1 and IQ4_NL weights, the 32-element
 * types llama-quantize falls back to for rows that are not a multiple of 256.
 *
 * They read Q8_0's activation layout (kernels.h) and fill the rows[] entries of the AVX2 and
 * AVX-512 tables (matmul_avx2.c, matmul_avx512.c). No GEMM and no repacked layout: batches run
 * these tiles too, so a token's outputs do not depend on the batch it is in. Defined only in
 * binaries built with the level (the tables that name them are under the same condition).
 * Not for: dispatch (matmul.c), the scalar oracle (matmul_scalar.c).
 */
#ifndef IL_BACKEND_CPU_MATMUL_Q5_H
#define IL_BACKEND_CPU_MATMUL_Q5_H

#include "backend/cpu/kernels.h"

/* The tiles' type switch, and where each type's nibbles start in its block (qh, in Q5_0 and
 * Q5_1, is the 4 bytes before them). */
enum { IL__K_Q5_0, IL__K_Q5_1, IL__K_IQ4_NL };
static inline size_t il__q5_qs_off(int kind) { return kind == IL__K_Q5_1 ? 8 : kind == IL__K_Q5_0 ? 6 : 2; }
static inline size_t il__q5_block(int kind) {
  return kind == IL__K_Q5_0 ? sizeof(il_block_q5_0) : kind == IL__K_Q5_1 ? sizeof(il_block_q5_1) : sizeof(il_block_iq4_nl);
}

void il__rows_q5_0_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_1_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_iq4_nl_avx2(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_0_avx512(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_q5_1_avx512(const il__mm_args *a, int64_t r0, int64_t r1);
void il__rows_iq4_nl_avx512(const il__mm_args *a, int64_t r0, int64_t r1);

#endif
