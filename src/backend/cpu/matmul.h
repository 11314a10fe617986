/* backend/cpu/matmul: y = W x for every weight type, on the thread pool.
 *
 * W is n_out rows of n_in elements in its storage type (as in the GGUF file, read in place from
 * the mmap), or its copy repacked into the GEMM's panels (il_cpu_matmul_pack, below). X is n_tok rows of n_in floats. For quantized W the activations are first
 * quantized to 8 bits (in the workspace, shared by all threads) and the dot products run in
 * integer arithmetic, as GGUF engines do. The caller passes the kernel table of one
 * instruction-set level (AVX-512 VNNI, AVX2, or scalar; NULL = scalar), which the CPU backend
 * resolves once (backend/cpu/isa); the scalar path is also the test oracle.
 * Hot path: with one token this is a matrix-vector product and bounded by memory bandwidth.
 * Not for: attention or elementwise ops (backend/cpu/ops).
 */
#ifndef IL_BACKEND_CPU_MATMUL_H
#define IL_BACKEND_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/isa.h"
#include "sys/pool.h"
#include "core/dtype.h"
#include "core/status.h"

/* True when a kernel exists for weights of type t. */
bool il_cpu_matmul_supported(il_dtype t);
/* Bytes of workspace il_cpu_matmul needs for these shapes on a pool of n_threads (quantized
 * activations, and one weight panel per thread for the batched GEMM: quantized types, and F16 /
 * BF16 from 40 tokens); 0 for F32 weights and for F16 / BF16 below the GEMM's batch size. With
 * no workspace, F16 / BF16 batches take the tile kernels instead. */
size_t il_cpu_matmul_work_size(il_dtype wtype, int64_t n_in, int64_t n_tok, int n_threads);

/* y[t * ldy + r] = sum_k W[r][k] * x[t * n_in + k] for t < n_tok, r < n_out.
 * w_stride is the byte distance between weight rows (il_dtype_row_size(wtype, n_in) for a
 * plain tensor). work must hold il_cpu_matmul_work_size bytes for il_pool_size(pool) threads
 * (1 for a NULL pool). Runs on all pool threads.
 * IL_ERR_UNSUPPORTED for a type without kernel; IL_ERR_INVALID_ARG for n_in not a multiple
 * of the block size. */
il_status il_cpu_matmul(il_pool *pool, const il__kernels *k, il_dtype wtype, const void *w, size_t w_stride,
                        int64_t n_out, int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy, void *work);

/* Several weight matrices of one type that read the same input (Q, K and V; gate and up),
 * computed as one task: the activations are quantized once and all threads work through the
 * rows of every part in one list, with one barrier. Part i computes
 * parts[i].y[t * parts[i].ldy + r] = W_i[r] . x[t]. Same errors as il_cpu_matmul, and
 * IL_ERR_INVALID_ARG for n_parts outside 1..IL_CPU_MM_MAX_PARTS. */
#define IL_CPU_MM_MAX_PARTS 4
typedef struct {
  const void *w;
  size_t w_stride;
  int64_t n_out;
  float *y;
  int64_t ldy;
  const void *packed; /* NULL, or W repacked by il_cpu_matmul_pack with the same table (w unused) */
} il_cpu_mm_part;
il_status il_cpu_matmul_multi(il_pool *pool, const il__kernels *k, il_dtype wtype, int n_parts,
                              const il_cpu_mm_part *parts, int64_t n_in, const float *x, int64_t n_tok, void *work);

/* Weights repacked once, at load (--repack): the GEMM's 32-row panels (backend/cpu/gemm.h) of
 * the whole matrix, one after another, so every matmul on them, one token or many, runs the
 * blocked GEMM micro-kernels straight from the panels and never packs. Bytes of that copy for
 * table k (the panel layout depends on it: Q8_0's bytes are flipped where vpdpbusd multiplies
 * them), or 0 when k has no GEMM for wtype (scalar, F32) or the type has two layouts (BF16:
 * which one a batch uses depends on its activations). */
size_t il_cpu_matmul_packed_size(const il__kernels *k, il_dtype wtype, int64_t n_out, int64_t n_in);
/* Writes that copy of W (n_out rows of n_in, w_stride apart) to dst (64-byte aligned, of
 * il_cpu_matmul_packed_size bytes), the panels shared out over the pool's threads.
 * IL_ERR_UNSUPPORTED when the size is 0. Pass dst as il_cpu_mm_part.packed, to calls with the
 * same table. */
il_status il_cpu_matmul_pack(il_pool *pool, const il__kernels *k, il_dtype wtype, const void *w, size_t w_stride,
                             int64_t n_out, int64_t n_in, void *dst);

/* Multiply-adds below which a matmul runs on the calling thread alone (default 2^17); tests set
 * 0 so that every shape also runs threaded. Not thread-safe: set it before any matmul runs. */
void il_cpu_matmul_par_min(double macs);

#endif
