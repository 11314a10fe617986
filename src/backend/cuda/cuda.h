/* backend/cuda/cuda: what the module's C glue and its kernels share.
 *
 * The glue (cuda.c: ops table, streams, events, allocator, transfers; gemm.c: cuBLAS) checks
 * views, resolves them to device pointers and calls one host launcher per op family, each in
 * its own .cu file:
 *
 *   matvec.cu     il__cu_matvec            y = x W^T for up to 8 tokens, every weight type
 *   matvec_q8.cu  il__cu_matvec_q8         version 2 for Q8_0/Q4_0/Q4_1: 8-bit activations, dp4a
 *   dequant.cu    il__cu_dequant           weight rows -> F32 (get_rows) or F16 (GEMM tiles)
 *   norm.cu       il__cu_rmsnorm
 *   rope.cu       il__cu_rope
 *   act.cuh       activation loads and stores (F32, F16, BF16) every activation kernel uses
 *   elementwise.cu il__cu_swiglu, il__cu_geglu, il__cu_scale, il__cu_add, il__cu_add_bias, il__cu_count_nonfinite,
 *                 il__cu_convert (F32 <-> F16/BF16: copy's conversions, cuBLAS's operands)
 *   kv.cu         il__cu_kv_store          rows to cells at slots; il__cu_rope_kv_store: rope of q and k
 *                 and the store, one launch
 *   attention.cu  il__cu_attn_naive        reference attention over the block-table KV view;
 *                 il__cu_attn_memeff       online softmax, no score matrix
 *   sample.cu     il__cu_sample            the sample op: argmax, or temperature/top-k/top-p
 *   selftest.cu   il__cu_selftest          the decoders of decode.cuh run on the host
 *
 * Launchers take raw device pointers and the stream, launch, and return cudaGetLastError();
 * asynchronous faults surface at the next synchronizing call. Index checks that need device
 * data (token ids, slots, positions, block-table entries) run in the kernels: the first bad
 * value is written to the backend's fault record (il__cu_fault) and sync/download turn it
 * into IL_ERR_RANGE naming the op and tensor, so a bad id is an error value, never a stray
 * read or write.
 * Not for: anything outside the module (the host sees only backend/cudamod.h).
 */
#ifndef IL_BACKEND_CUDA_CUDA_H
#define IL_BACKEND_CUDA_CUDA_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/dtype.h"

/* ---- the first bad index a kernel met ---- */
typedef enum {
  IL__CU_FAULT_NONE = 0,
  IL__CU_FAULT_ROW_ID,   /* get_rows: a = row, b = id, c = rows of w */
  IL__CU_FAULT_SLOT,     /* kv_store: a = row, b = slot, c = cells */
  IL__CU_FAULT_SEQ,      /* attention: a = row, b = sequence, c = n_seq */
  IL__CU_FAULT_POS,      /* attention: a = row, b = position, c = n_ctx */
  IL__CU_FAULT_BLOCK,    /* attention: a = sequence, b = block-table entry, c = cells */
  IL__CU_FAULT_NONFINITE, /* kv_store into q8_0 cells: a = row, b = 0 (k) or 1 (v), c = element */
} il__cu_fault_kind;

typedef struct {
  int kind;      /* il__cu_fault_kind; set first with atomicCAS */
  int launch;    /* the launch id the host gave (names the op and tensor) */
  long long a, b, c;
} il__cu_fault;

#define IL__CU_MV_MAX_TOK 8 /* tokens one matvec launch reads per weight row */

/* y[t * ldy + r] = W[r] . x[t] for t < n_tok (1..IL__CU_MV_MAX_TOK), r < n_out.
 * w: n_out rows of n_in elements of type t, w_stride bytes apart (even); x: n_tok packed rows
 * of n_in floats. One warp per row; each lane decodes 32-element units of the row. */
cudaError_t il__cu_matvec(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out, int64_t n_in,
                          const float *x, int64_t n_tok, float *y, int64_t ldy);

/* Version 2 for Q8_0/Q4_0/Q4_1 (matvec_q8.cu): activations quantized to 8 bits like the CPU's,
 * then dp4a. work: il__cu_matvec_q8_work(n_in, n_tok) bytes of device memory, 256-aligned. */
bool il__cu_matvec_q8_supports(il_dtype t);
size_t il__cu_matvec_q8_work(int64_t n_in, int64_t n_tok);
cudaError_t il__cu_matvec_q8(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out, int64_t n_in,
                             const float *x, int64_t n_tok, float *y, int64_t ldy, void *work);

/* Decodes rows of w into activations of out_type (F32, F16 or BF16, narrowed to nearest even),
 * row r at out + r * out_stride bytes (the GEMM's F16 tiles: packed, n_in * 2). ids (may be NULL: rows 0..n-1) picks the rows; an id
 * outside [0, w_rows) is recorded in fault (launch id `launch`) and its row left unwritten. */
cudaError_t il__cu_dequant(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t w_rows, int64_t n_in,
                           const int32_t *ids, int64_t n, void *out, size_t out_stride, il_dtype out_type,
                           il__cu_fault *fault, int launch);

/* Activations (the il_dtype arguments below named with them) are F32, F16 or BF16 (act.cuh):
 * loaded as F32, computed in F32, stored rounded to nearest even; any other type is
 * cudaErrorInvalidValue, nothing launched. */

/* y[t] = x[t] / rms(x[t]) * g, rows of `cols` values; y may be x. Sum of squares in double,
 * as the CPU reference. */
cudaError_t il__cu_rmsnorm(cudaStream_t s, void *y, size_t ys, il_dtype yt, const void *x, size_t xs, il_dtype xt,
                           const float *g, int64_t rows, int64_t cols, float eps);

/* Rotates x [rows x n_heads*head_dim] of type t (rows xs bytes apart) in place at positions pos. */
cudaError_t il__cu_rope(cudaStream_t s, void *x, size_t xs, il_dtype t, int64_t rows, const int32_t *pos,
                        int64_t n_heads, int64_t head_dim, int64_t n_rot, float base, float scale, int mode);

/* gate = silu(gate) * up; gate = gelu(gate) * up; x *= v; y += x; y[t] += bias (F32 bias, rows
 * ys bytes apart), over n packed elements. */
cudaError_t il__cu_swiglu(cudaStream_t s, void *gate, il_dtype gt, const void *up, il_dtype ut, int64_t n);
cudaError_t il__cu_geglu(cudaStream_t s, void *gate, il_dtype gt, const void *up, il_dtype ut, int64_t n);
cudaError_t il__cu_scale(cudaStream_t s, void *x, il_dtype t, float v, int64_t n);
cudaError_t il__cu_add(cudaStream_t s, void *y, il_dtype yt, const void *x, il_dtype xt, int64_t n);
cudaError_t il__cu_add_bias(cudaStream_t s, void *y, size_t ys, il_dtype t, int64_t rows, int64_t cols,
                            const float *bias);
/* *count (device) += number of inf/nan elements of x [rows x cols], rows xs bytes apart. */
cudaError_t il__cu_count_nonfinite(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                   unsigned long long *count);
/* x rounded in place to the values F16 (bf16 false) or BF16 can hold (F16 overflows to inf). */
cudaError_t il__cu_round_to(cudaStream_t s, float *x, size_t xs, int64_t rows, int64_t cols, bool bf16);
/* stats[0] (device) += number of inf/nan elements of x; stats[1] = max(stats[1], bits of the
 * largest finite |x|) (a non-negative float's bits order as the float does). */
cudaError_t il__cu_value_stats(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                               unsigned long long *stats);
/* dst = src [rows x cols] converted between F32 and F16 or BF16 (kinds: 0 F32, 1 F16, 2 BF16;
 * one of them F32), rows ds / ss bytes apart, rounding to nearest even (copy with a type change;
 * the F32 copies of 16-bit activations an op reports to its observer). */
cudaError_t il__cu_convert(cudaStream_t s, void *dst, size_t ds, int dst_kind, const void *src, size_t ss, int src_kind,
                           int64_t rows, int64_t cols);

/* Row i of k and v (cols activations of type rows_t, ks/vs bytes apart) to cell slots[i] of kc/vc (kcs/vcs bytes
 * apart, n_cells cells of type cells: F32, F16, BF16, or Q8_0 with cols a multiple of 32). A slot
 * outside [0, n_cells), or (Q8_0) a row with a non-finite value, is recorded in fault. */
cudaError_t il__cu_kv_store(cudaStream_t s, uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells,
                            il_dtype cells, const uint8_t *k, size_t ks, const uint8_t *v, size_t vs, il_dtype rows_t,
                            int64_t cols, const int32_t *slots, int64_t n, il__cu_fault *fault, int launch);

/* One rope's parameters (il_rope_params; scale > 0). */
typedef struct {
  int64_t n_heads, head_dim, n_rot;
  float base, scale;
  int mode;
} il__cu_rope_p;

/* Everything il__cu_rope_kv_store reads and writes: q [n x rq.n_heads*rq.head_dim] and k
 * [n x cols] rotated at pos, then row i of k (its rotated F32 values) and v to cell slots[i]
 * as il__cu_kv_store does. q, k and v each F32, F16 or BF16; k keeps its rotated values,
 * rounded to kt, when k_back (else it may be left as it was). */
typedef struct {
  void *q, *k;
  const void *v;
  size_t qs, ks, vs;
  il_dtype qt, kt, vt, cells;
  il__cu_rope_p rq, rk;
  int64_t cols, n, n_cells;
  bool k_back;
  uint8_t *kc, *vc;
  size_t kcs, vcs;
  const int32_t *pos, *slots;
} il__cu_rkv;

/* rope(q), rope(k) and kv_store in one launch (one block per row, k's row in shared memory:
 * cols <= IL__CU_RKV_MAX_COLS). Faults as il__cu_kv_store's. */
#define IL__CU_RKV_MAX_COLS 8192
cudaError_t il__cu_rope_kv_store(cudaStream_t s, const il__cu_rkv *a, il__cu_fault *fault, int launch);

/* Everything il__cu_attn_naive reads. */
typedef struct {
  float *out;
  const float *q;
  size_t out_stride, q_stride;               /* bytes */
  const int32_t *seq, *pos, *table;
  const void *k, *v;                         /* cells, F32 or F16 */
  size_t k_stride, v_stride;                 /* bytes */
  il_dtype kv_type;                          /* F32, F16, BF16 or Q8_0 cells */
  int64_t n_tok, n_heads, n_kv_heads, head_dim, n_cells;
  int32_t block, n_seq, max_blocks, n_ctx;
  int32_t window;                            /* > 0: token t sees positions pos[t] - window + 1 ..
                                                pos[t] only (every kernel starts there) */
  float scale;
  float *scores;                             /* workspace: il__cu_attn_naive_rows() rows of n_ctx */
  il__cu_fault *fault;
  int launch;
} il__cu_attn;

/* Score rows of workspace the naive kernel uses for n_items (token, head) pairs. */
int64_t il__cu_attn_naive_rows(int64_t n_items);
cudaError_t il__cu_attn_naive(cudaStream_t s, const il__cu_attn *a);
/* The online-softmax kernel: no workspace (scores unused), head_dim up to
 * il__cu_attn_memeff_max_head_dim(). */
int64_t il__cu_attn_memeff_max_head_dim(void);
cudaError_t il__cu_attn_memeff(cudaStream_t s, const il__cu_attn *a);

/* Runs the decoders of decode.cuh on the host for every weight type and compares them with
 * ref (the library's dequantize_row) bit for bit. 0 when they agree; else nonzero with a
 * message in err. */
typedef int (*il__cu_ref_fn)(il_dtype t, const void *src, float *dst, int64_t n);
typedef int (*il__cu_qref_fn)(il_dtype t, const float *src, void *dst, int64_t n);
int il__cu_selftest(il__cu_ref_fn ref, il__cu_qref_fn qref, char *err, size_t nerr);

/* ids[r] (I32, device) = the token backend.h's il_sample_args (temp, top_k, top_p) picks from row
 * r of logits [rows x cols] (rows ls bytes apart) with draw u[r] (read only when temp > 0); -1
 * for a row holding a non-finite logit (sample.cu, its per-row work in sample.cuh). */
cudaError_t il__cu_sample(cudaStream_t s, int32_t *ids, const float *logits, size_t ls, int64_t rows, int64_t cols,
                          const float *u, float temp, int32_t top_k, float top_p);

/* cudaFuncGetAttributes of one kernel: cudaErrorNoKernelImageForDevice when the module has
 * neither SASS nor PTX for the current device. binary/ptx: the versions it will run. */
cudaError_t il__cu_probe_image(int *binary, int *ptx);

#ifdef __cplusplus
}
#endif

#endif
