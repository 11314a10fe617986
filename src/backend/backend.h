/* backend/backend: the one interface the model code computes through.
 *
 * A backend is a struct of function pointers over buffers that live in its own memory space
 * (host memory for cpu; later a budgeted space for sim and device memory for cuda). Model code
 * never calls a kernel directly, so the same forward pass runs on every backend and per-layer
 * placement is a table lookup. All float buffers are row-major, rows contiguous.
 * Shapes in comments: [rows x cols].
 * Not for: deciding what to compute (model/), scheduling sequences (engine/).
 */
#ifndef IL_BACKEND_BACKEND_H
#define IL_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "memory/mem.h"

/* A weight matrix [n_out x n_in] in its storage type; data lives where the backend reads it
 * (for cpu: the mmap or a host buffer). Borrowed. */
typedef struct {
  const char *name;
  il_dtype type;
  int64_t n_in;      /* row length (GGUF ne[0]) */
  int64_t n_out;     /* rows (GGUF ne[1]) */
  size_t row_stride; /* bytes between rows */
  const void *data;
} il_weight;

/* One query row of an attention call: which sequence's cache it reads and up to which
 * position (inclusive). */
typedef struct {
  int32_t seq;
  int32_t pos;
} il_attn_row;

/* The KV cache view an attention call reads: per sequence, positions [0, n_ctx) of
 * [n_kv_heads x head_dim] floats. k(seq, pos) = k + ((seq * n_ctx) + pos) * kv_dim. */
typedef struct {
  float *k;
  float *v;
  int32_t n_seq;
  int32_t n_ctx;
  int32_t kv_dim;
} il_kv_view;

typedef enum { IL_ROPE_NORM = 0, IL_ROPE_NEOX = 2 } il_rope_mode;

typedef struct il_backend il_backend;
struct il_backend {
  const char *name;  /* "cpu" */
  il_mem_space *space;
  void *impl;

  /* Allocates bytes in the backend's space under a category; IL_ERR_OOM with a report. */
  il_status (*alloc)(il_backend *b, il_mem_category cat, size_t bytes, const char *what, void **out);
  void (*free)(il_backend *b, void *p);

  /* y[t][r] = W[r] . x[t]  for x [n_tok x n_in], y [n_tok x ldy]. */
  il_status (*matmul)(il_backend *b, const il_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy);
  /* The same for n weights that read the same x: y[i][t][r] = W_i[r] . x[t], y[i] [n_tok x
   * ldy[i]]. Lets a backend read x once for Q, K and V or gate and up. (optional: NULL when
   * the backend lacks it; callers then make n matmul calls) */
  il_status (*matmul_multi)(il_backend *b, int n, const il_weight *const *w, const float *x, int64_t n_tok,
                            float *const *y, const int64_t *ldy);
  /* y[t] = x[t] / rms(x[t]) * g   for [n_tok x n]; y may alias x. */
  void (*rmsnorm)(il_backend *b, float *y, const float *x, const float *g, int64_t n, int64_t n_tok, float eps);
  /* Rotates the first n_rot dims of each head of x [n_tok x n_heads*head_dim] in place, at
   * positions pos[t]. theta_i = pos / scale * base^(-2i/n_rot). */
  void (*rope)(il_backend *b, float *x, const int32_t *pos, int64_t n_tok, int64_t n_heads,
               int64_t head_dim, int64_t n_rot, float base, float scale, il_rope_mode mode);
  /* out[t] = softmax(q[t] K^T / sqrt(head_dim)) V over positions 0..rows[t].pos of
   * rows[t].seq, per head, with grouped-query heads (n_heads / n_kv_heads queries per kv head).
   * q and out are [n_tok x n_heads*head_dim]. */
  il_status (*attention)(il_backend *b, float *out, const float *q, const il_attn_row *rows,
                         int64_t n_tok, const il_kv_view *kv, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim);
  /* gate[i] = silu(gate[i]) * up[i] for n elements. */
  void (*swiglu)(il_backend *b, float *gate, const float *up, int64_t n);
  /* y[i] += x[i] for n elements. */
  void (*add)(il_backend *b, float *y, const float *x, int64_t n);
  /* y[t][i] += bias[i] for [n_tok x n]. (optional: NULL when the backend lacks it) */
  void (*add_bias)(il_backend *b, float *y, const float *bias, int64_t n, int64_t n_tok);
  /* y[t] = dequantized row ids[t] of W (the embedding lookup). */
  il_status (*get_rows)(il_backend *b, const il_weight *w, const int32_t *ids, int64_t n_tok, float *y);
  /* Copies bytes between two buffers of this backend (a KV store). */
  void (*copy)(il_backend *b, void *dst, const void *src, size_t bytes);
  /* Releases the backend (threads, spaces). */
  void (*destroy)(il_backend *b);
};

/* Creates the CPU backend with n_threads (0 = one per core). Free with b->destroy(b). */
il_status il_backend_cpu_new(int n_threads, il_backend **out);
/* Threads the CPU backend runs. */
int il_backend_cpu_threads(const il_backend *b);

#endif
