/* backend/cpu/attn: the CPU attention kernels (naive, sliced, memeff, flash) and the auto choice.
 *
 * Every kernel computes, for each query token t and query head h,
 *   out[t][h] = softmax_s(q[t][h] . k[s][h/G] * scale) weighted sum of v[s][h/G], s = 0..pos[t],
 * over the cache cells of the token's sequence (G = n_heads / n_kv_heads, grouped-query), read
 * through a block table so a paged and a contiguous cache are one layout. The kernels differ in
 * how much scratch memory they need and how often they read K/V:
 *   naive   the full scores matrix (T_q x T_k) of one (sequence run, head) at a time: the reference.
 *   sliced  the same math in slices of `slice` query rows: workspace slice x T_k per thread.
 *   memeff  one query row at a time, keys in chunks with a running max and sum (online softmax):
 *           no T_q x T_k matrix, workspace O(chunk) per thread.
 *   flash   tiles of query tokens x all query heads of one KV head, against tiles of keys; scale,
 *           causal mask, softmax and P V fused with online rescaling, each K/V tile read once per
 *           query tile; key ranges split across threads when there are too few tiles (decode).
 * The micro-kernels (Q K^T block, P V block, exp, max) come from a per-ISA table chosen by the
 * calling backend's instruction-set level (args.isa): scalar here in attn.c (the reference), AVX2 in
 * attn_avx2.c, AVX-512 in attn_avx512.c. K/V may be F32 or F16 (F16 read directly, converted
 * in registers).
 *
 * The caller owns every buffer: it asks a kernel for its workspace size, allocates it (through
 * memory/, category workspace) and passes it to run. Not for: choosing a kernel from the config
 * or allocating the cache (engine/), the paged-KV bookkeeping (engine/kvpages).
 */
#ifndef IL_BACKEND_CPU_ATTN_H
#define IL_BACKEND_CPU_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sys/cpuid.h"
#include "sys/pool.h"
#include "core/dtype.h"
#include "core/status.h"

/* cell(seq, pos) = block_table[seq * max_blocks + pos / block] * block + pos % block
 * contiguous cache = one block per sequence: block = n_ctx, table[seq] = seq. */
typedef struct {
  float *out;                /* [n_tok x n_heads*head_dim] */
  const float *q;            /* [n_tok x n_heads*head_dim], RoPE already applied */
  const int32_t *seq, *pos;  /* per query token: its sequence, and its position: it attends to 0..pos inclusive */
  int64_t n_tok;
  const void *k, *v;         /* cache cells [n_cells rows], kv_dim = n_kv_heads*head_dim elements per row */
  il_dtype kv_type;          /* IL_DTYPE_F32 or IL_DTYPE_F16 (F16 read directly, no conversion pass) */
  size_t kv_row_stride;      /* bytes between cells */
  int64_t n_cells;
  const int32_t *block_table; /* [n_seq x max_blocks]; only the entries a token reaches are read */
  int32_t block, max_blocks, n_seq;
  int64_t n_heads, n_kv_heads, head_dim; /* grouped-query: n_heads % n_kv_heads == 0 */
  float scale;               /* usually 1/sqrt(head_dim) */
  int32_t slice;             /* sliced: query rows per slice (0 = IL_CPU_ATTN_SLICE_DEFAULT) */
  int32_t window;            /* > 0: token t sees positions pos[t] - window + 1 .. pos[t] only (a
                                sliding window); keys before every row's window are skipped */
  il_isa isa;                /* micro-kernel level: the calling backend's (IL_ISA_SCALAR when zeroed);
                                clamped to what this binary and CPU have */
} il_cpu_attn_args;

#define IL_CPU_ATTN_SLICE_DEFAULT 32

typedef struct {
  const char *name; /* "naive" "sliced" "memeff" "flash" */
  /* NULL = usable for this shape and type; else a reason ("head_dim 36 is not a multiple of 8").
   * Checks shapes and types only (never reads the tables); never crashes, a NULL args included.
   * The text is in a per-thread buffer valid until the next why_not call on this thread. */
  const char *(*why_not)(const il_cpu_attn_args *a);
  /* Bytes run needs for these args when the pool has n_threads threads (exactly what run uses,
   * including 64 bytes of alignment slack). Validates the args as run does (it reads seq, pos
   * and the table entries the tokens reach): 0 when they are invalid, with the reason in
   * il_error_detail(). */
  size_t (*workspace)(const il_cpu_attn_args *a, int n_threads);
  /* Computes out on all threads of pool (NULL = the calling thread only). work is borrowed
   * scratch of work_bytes >= workspace(a, il_pool_size(pool)), any alignment. Validates the
   * inputs first (sequences, positions inside the table, table entries inside n_cells) and
   * returns IL_ERR_INVALID_ARG / IL_ERR_RANGE / IL_ERR_UNSUPPORTED with a detail naming the
   * token or table entry; out is untouched then. */
  il_status (*run)(il_pool *pool, const il_cpu_attn_args *a, void *work, size_t work_bytes);
} il_cpu_attn_kernel;

/* The list in dispatch order for auto (best first): flash, memeff, sliced, naive. Static; can't
 * fail. n may be NULL. */
const il_cpu_attn_kernel *il_cpu_attn_kernels(int *n);
/* The KV cell types the kernels read: F32, F16, BF16, Q8_0 (blocks of 32: head sizes that are
 * multiples of 32). */
bool il_cpu_attn_kv_type_ok(il_dtype t);
/* The kernel called `name`, or NULL. */
const il_cpu_attn_kernel *il_cpu_attn_find(const char *name);
/* auto: the first usable kernel, or NULL when none is. why (may be NULL) gets
 * "flash: <reason>; memeff: <reason>" for the skipped ones ("" when the first was usable),
 * truncated to n bytes. */
const il_cpu_attn_kernel *il_cpu_attn_auto(const il_cpu_attn_args *a, char *why, size_t n);

/* An upper bound of flash's workspace for any call with at most a->n_tok tokens and these
 * heads (reads shapes only: seq, pos and the table may be NULL). */
size_t il_cpu_attn_flash_bound(const il_cpu_attn_args *a, int n_threads);

/* ---- internal: the per-ISA micro-kernels (attn.c, attn_avx2.c, attn_avx512.c) ---- */

/* s[i*lds + j] = scale * (q[i] . k_j) for i < m, j < n; q[i] are float rows, k_j = k + j*ks
 * bytes rows of kt, all head_dim long. The keys are a run of cells at one stride (the drivers
 * cut a paged cache's positions into runs within a block): a base and a stride, not a pointer
 * per key, which with head size 8 cost as much to fill and read as the keys themselves. */
typedef void (*il__attn_qk_fn)(float *s, size_t lds, const float *const *q, int m, const void *k, size_t ks, int n,
                               int64_t hd, il_dtype kt, float scale);
/* o[i][d] += sum_j p[i*ldp + j] * v_j[d] for i < m, j < n, d < hd (o: m row pointers; v_j =
 * v + j*vs bytes). */
typedef void (*il__attn_pv_fn)(float *const *o, const float *p, size_t ldp, int m, const void *v, size_t vs, int n,
                               int64_t hd, il_dtype vt);
/* s[j] = exp(s[j] - mx) for j < n; returns their sum. */
typedef float (*il__attn_expsum_fn)(float *s, int n, float mx);
/* max of s[0..n), n >= 1. */
typedef float (*il__attn_max_fn)(const float *s, int n);

typedef struct {
  bool compiled; /* false when this binary was built without the level */
  const char *name;
  int width; /* floats per vector; head_dim % width != 0 falls back to the scalar table */
  il__attn_qk_fn qk;
  il__attn_pv_fn pv;
  il__attn_expsum_fn exp_sum;
  il__attn_max_fn max;
} il__attn_isa;

extern const il__attn_isa il__attn_isa_scalar, il__attn_isa_avx2, il__attn_isa_avx512;

/* The table for a level (falling back to what is compiled and detected). */
const il__attn_isa *il__attn_isa_for(il_isa isa);

/* Multiply-adds below which an attention call runs on the calling thread alone (default 2^16);
 * tests set 0 so that every shape also runs threaded. Not thread-safe: set it before use. */
void il_cpu_attn_par_min(double macs);

#endif
