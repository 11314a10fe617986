/* backend/cuda/mv3.h: matvec version 3 (matvec3.cu), its variants, the dispatch table that
 * picks one per (weight type, shape class, tokens), and the performance model that ranks them
 * before a GPU has (mv3_model.c). The per-lane work is in mv3.cuh.
 *
 * Variants differ only in schedule (warps per block, chunks in flight per lane): every variant
 * computes the same bits (mv3.cuh). Version 1 (matvec.cu) and version 2 (matvec_q8.cu) are
 * entries of the same table, so a measured table can keep them where they win.
 * Not for: kernels (matvec3.cu) or the ops (cuda.c).
 */
#ifndef IL_BACKEND_CUDA_MV3_H
#define IL_BACKEND_CUDA_MV3_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/dtype.h"

/* The kernels a table entry names: version 1, version 2 (Q8_0/Q4_0/Q4_1 only), and version 3
 * with (warps per block, chunks in flight per lane). */
typedef enum {
  IL__MV_V1 = 0,
  IL__MV_V2,
  IL__MV_W4U1,
  IL__MV_W4U2,
  IL__MV_W8U2,
  IL__MV_N_KINDS,
} il__mv_kind;

#define IL__MV_FIRST_V3 IL__MV_W4U1
const char *il__mv_kind_name(il__mv_kind k); /* "v1", "v2", "w4u1", ... */
int il__mv_kind_warps(il__mv_kind k);          /* version 3: warps per block (0 otherwise) */
int il__mv_kind_chunks(il__mv_kind k);         /* version 3: chunks a lane loads before using them */

/* Shape classes: by the matrix's weight bytes (L2 and SM fill differ more by size than by shape). */
#define IL__MV_N_CLASSES 3
int il__mv_class(il_dtype t, int64_t n_out, int64_t n_in); /* 0: < 8 MiB, 1: < 64 MiB, 2: larger */
const char *il__mv_class_name(int c);                      /* "small", "medium", "large" */
/* Token buckets 1, 2, 4, 8 (a kernel instance handles up to its bucket). */
#define IL__MV_N_TOK 4
int il__mv_tok_bucket(int64_t n_tok);
int il__mv_tok_of_bucket(int b);

/* The weight types the table covers, in its order. */
#define IL__MV_N_TYPES 9
il_dtype il__mv_type_at(int i);
int il__mv_type_index(il_dtype t); /* -1 for a type without an entry */

typedef struct {
  uint8_t kind[IL__MV_N_TYPES][IL__MV_N_CLASSES][IL__MV_N_TOK]; /* il__mv_kind */
} il__mv_table;

/* The committed default: what the performance model ranks best (mv3_model.c). */
void il__mv_table_default(il__mv_table *t);
/* Reads a table file's text over *t: lines "TYPE CLASS TOKENS KIND" ('#' starts a comment; an
 * entry a file does not name keeps its value). 0 on success; else -1 with "LINE: reason" in
 * err. A kind the type cannot run (v2 for a K-quant) is an error. */
int il__mv_table_parse(const char *text, il__mv_table *t, char *err, size_t nerr);
/* Writes the table in the format parse reads; returns the bytes written (snprintf's rule). */
int il__mv_table_format(const il__mv_table *t, char *out, size_t n);

/* ---- the performance model ---- */
typedef struct {
  int sms;            /* streaming multiprocessors */
  double clock_hz;    /* SM clock */
  double copy_bps;    /* device copy bandwidth, bytes read + written per second */
  double launch_s;    /* cost of one stream launch */
  double l1_lines_per_clock; /* 128-byte L1 line visits one SM serves per clock */
} il__mv_hw;

/* The first H200 run's calibration: 132 SMs, 1.98 GHz, 4224 GB/s copy, 3.5 us per launch,
 * one line visit per clock per SM. */
il__mv_hw il__mv_hw_h200(void);

typedef struct {
  double weight_bytes;   /* bytes of weights read from DRAM */
  double act_bytes;      /* activation bytes read (per row, from L1/L2) */
  double line_visits;    /* 128-byte L1 line visits of all load instructions */
  int launches;          /* kernels launched (activation quantization included) */
  double waves;          /* blocks / (SMs x resident blocks per SM) */
  double t_dram, t_l1, t_launch, seconds; /* the parts and the prediction */
} il__mv_cost;

/* Predicted cost of y = x W^T with kernel k (n_tok tokens; quant_shared: the activations were
 * quantized by an earlier matmul of the same input, so no launch for them). False when k cannot
 * run this type. */
bool il__mv_model(const il__mv_hw *hw, il__mv_kind k, il_dtype t, int64_t n_out, int64_t n_in, int64_t n_tok,
                  bool quant_shared, il__mv_cost *out);
/* Whether kernel k runs type t at all (v2: Q8_0/Q4_0/Q4_1 only). */
bool il__mv_kind_runs(il__mv_kind k, il_dtype t);

/* ---- the launchers (matvec3.cu) ---- */

/* Whether version 3 takes rows of n_in elements of type t at w, stride bytes apart. */
bool il__cu_mv3_eligible(il_dtype t, int64_t n_in, const void *w, size_t stride, int64_t n_rows);
/* Device bytes for the 8-bit activations of n_tok rows of n_in floats (n_in a multiple of 32). */
size_t il__cu_mv3_work(int64_t n_in, int64_t n_tok);
/* Quantizes n_tok packed rows of n_in floats into work (what il__cu_mv3 reads for quantized
 * weights): once per input vector, for every matrix that multiplies it. */
cudaError_t il__cu_mv3_quant(cudaStream_t s, const float *x, int64_t n_in, int64_t n_tok, void *work);
/* y[t * ldy + r] = W[r] . x[t] for t < n_tok (1..8), r < n_out, with version 3 kernel k
 * (IL__MV_W4U1 ..). Float weights read x; quantized ones read work (il__cu_mv3_quant of x). */
cudaError_t il__cu_mv3(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride, int64_t n_out,
                       int64_t n_in, const float *x, const void *work, int64_t n_tok, float *y, int64_t ldy);

/* What a version-3 launch does with each dot product d = W[r] . x[t] at y[t * ldy + r]: store
 * it; add it (y += d: matmul_add's residual, the add op's float sum); or y = silu(y) * d
 * (gate_up_swiglu: y holds the gate's row, d is the up row's; the swiglu op's expression). */
typedef enum { IL__MV3_STORE = 0, IL__MV3_ADD = 1, IL__MV3_SWIGLU = 2 } il__mv3_epi;
/* il__cu_mv3 with epilogue epi (il__mv3_epi). */
cudaError_t il__cu_mv3_epi(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride, int64_t n_out,
                           int64_t n_in, const float *x, const void *work, int64_t n_tok, float *y, int64_t ldy,
                           int epi);

/* Matrices of one type and width that read the same x (Q, K and V): one launch of kernel k,
 * the grid's blocks split between them in order, each row computed as il__cu_mv3 computes it
 * (the same bits). */
#define IL__MV3_MAX_MATS 3
typedef struct {
  const void *w;
  size_t stride;
  int64_t n_out;
  float *y;
  int64_t ldy;
} il__mv3_mat;
cudaError_t il__cu_mv3_multi(cudaStream_t s, il__mv_kind k, il_dtype t, int n, const il__mv3_mat *m, int64_t n_in,
                             const float *x, const void *work, int64_t n_tok);
/* gate_up_swiglu in one launch: gate->y[t][r] = silu(gate[r] . x[t]) * (up[r] . x[t]), a warp
 * computing row r of both matrices (up of gate's rows, both of type t): the bits of the gate's
 * launch followed by the up one's with the SwiGLU epilogue (il__cu_mv3_epi). */
cudaError_t il__cu_mv3_gate_up(cudaStream_t s, il__mv_kind k, il_dtype t, const il__mv3_mat *gate, const void *w_up,
                               size_t up_stride, int64_t n_in, const float *x, const void *work, int64_t n_tok);

#ifdef __cplusplus
}
#endif

#endif
