/* backend/backend: the device seam every forward pass computes through.
 *
 * A backend owns a memory space and runs ops on buffers in it. Backend memory is opaque
 * (il_buffer): host code never dereferences it unless the backend hands out a host pointer
 * (cpu does; sim deliberately does not, so a host access left in model/ or engine/ fails its
 * test). Ops take typed 2-D views (il_tensor), so the element type travels with the data.
 * Bytes cross between the host and a backend only through upload, download and copy.
 * Every op returns il_status; ops may run asynchronously and sync returns the first deferred
 * error. The ops table is one const struct per backend kind with a version that must match
 * exactly, so a backend built as a module (cuda) is loaded with dlopen only when it was built
 * against this header. A buffer knows its backend (owner): a view of another backend's buffer
 * is refused by every op, never read as if it were local.
 *
 * Shapes in comments: [rows x cols]; rows are `stride` bytes apart, elements of a row are
 * contiguous. Vectors (norm weights, token ids, positions) are [1 x n].
 * Backends are opened by name through the registry (backend/registry.h): "cpu", "sim:4GiB",
 * "cuda:0". Not for: deciding what to compute (model/), scheduling sequences (engine/).
 */
#ifndef IL_BACKEND_BACKEND_H
#define IL_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "memory/caching.h"
#include "memory/mem.h"

/* The ops table's layout. A table is used only by code built with the same number (the
 * registry and the CUDA module loader refuse any other), so a member may be added, changed or
 * removed together with this number, and no caller tests a table's version or guards a member
 * by it. */
#define IL_BACKEND_OPS_VERSION 7

typedef struct il_backend il_backend;
typedef struct il_buffer il_buffer; /* one allocation in one backend's space; opaque */
typedef struct il_event il_event;
typedef struct il_step il_step; /* a captured forward step (capture_end); opaque */

/* A typed view of part of a buffer; a value that never owns. */
typedef struct {
  il_buffer *buf;
  size_t off;       /* bytes from the start of buf to row 0 */
  size_t stride;    /* bytes between rows */
  int64_t rows, cols;
  il_dtype type;    /* activations F32, or F16/BF16 where supports() says so; weights any storage type; ids I32 */
  const char *name; /* for messages: "blk.3.attn_q.weight" (borrowed, may be NULL) */
} il_tensor;

/* Bytes of one row of a tensor type (I32 included); 0 for a length that is not a multiple
 * of the type's block size. */
size_t il_tensor_row_bytes(il_dtype type, int64_t cols);
/* A dense view of rows x cols at byte offset off. */
il_tensor il_tensor_make(il_buffer *buf, size_t off, int64_t rows, int64_t cols, il_dtype type, const char *name);
/* Rows [r0, r0 + n) of t. Inline: the per-token path takes a few hundred of these views, and
 * a call passed and returned the 56-byte struct through the stack (a store-forwarding stall per
 * call, 2% of a stories260K token). */
static inline il_tensor il_tensor_rows(il_tensor t, int64_t r0, int64_t n) {
  t.off += (size_t)r0 * t.stride;
  t.rows = n;
  return t;
}
/* Bytes from the first byte of row 0 to the end of the last row. */
size_t il_tensor_span(const il_tensor *t);

/* The KV cache of one layer as attention reads it. Paged and contiguous are one layout:
 * cell(seq, pos) = block_table[seq][pos / block] * block + pos % block, and a contiguous cache
 * is one block of n_ctx cells per sequence. k and v are [n_cells x kv_dim] in the cache type. */
typedef struct {
  il_tensor k, v;
  il_tensor block_table; /* I32 [n_seq x max_blocks] */
  int32_t block;         /* positions per block */
  int32_t n_seq, max_blocks;
  int32_t n_ctx;         /* positions a sequence may hold (block * max_blocks) */
  int32_t ring;          /* 0, or a sliding-window layer's ring of positions: position pos of
                            sequence seq is in cell seq * ring + pos % ring (block = ring and
                            every table entry of seq is seq, so kernels read it as any cache);
                            a sequence keeps its last `ring` positions there */
} il_kv_view;

typedef enum { IL_ROPE_NORM = 0, IL_ROPE_NEOX = 2 } il_rope_mode;

typedef struct {
  int64_t n_heads, head_dim, n_rot;
  float base, scale; /* theta_i = pos / scale * base^(-2i/n_rot) */
  il_rope_mode mode;
} il_rope_params;

/* One attention call: out[t] = softmax(q[t] K^T * scale) V over positions 0..pos[t] of
 * sequence seq[t], per head, grouped-query (n_heads / n_kv_heads query heads per kv head). */
typedef struct {
  il_tensor out, q;   /* activations [n_tok x n_heads*head_dim] */
  il_tensor seq, pos; /* I32 [1 x n_tok] */
  const il_kv_view *kv;
  int64_t n_heads, n_kv_heads, head_dim;
  float scale;
  int32_t slice;      /* query rows per slice for kernels that slice (0 = their default) */
  int32_t window;     /* sliding window (gemma3's local layers): token t sees positions
                         pos[t] - window + 1 .. pos[t] only; 0 = all of 0..pos[t]. Every kernel
                         (cpu, cuda) applies it */
} il_attn_args;

/* One attention kernel; a backend lists several, best first. */
typedef struct {
  const char *name; /* "rows", "naive", "sliced", "memeff", "flash" */
  /* NULL when the kernel can run these arguments, else the reason it cannot (static text). */
  const char *(*why_not)(il_backend *b, const il_attn_args *a);
  /* Workspace bytes run needs for these arguments; the engine allocates it. */
  size_t (*workspace)(il_backend *b, const il_attn_args *a);
  il_status (*run)(il_backend *b, const il_attn_args *a, il_tensor workspace);
} il_attn_kernel;

typedef enum {
  IL_OP_GET_ROWS,
  IL_OP_MATMUL,
  IL_OP_RMSNORM,
  IL_OP_ROPE,
  IL_OP_KV_STORE,
  IL_OP_ATTENTION,
  IL_OP_SWIGLU,
  IL_OP_ADD,
  IL_OP_GEGLU,
  IL_OP_SCALE,
  IL_OP_COUNT
} il_op;

/* Facts about one opened backend, for reports. */
typedef struct {
  char kind[16];        /* "cpu", "sim", "cuda" */
  char name[64];        /* the spec it was opened with: "sim:2GiB,pcie=16GB/s" */
  char device[128];     /* "AMD EPYC 9554", "NVIDIA H200" */
  char isa[16];         /* cpu and sim: the kernel level in use */
  int threads;          /* host threads its kernels use (0 for a GPU) */
  bool host_visible;    /* buffers are host memory the caller may read (cpu) */
  bool dry;             /* allocates but computes nothing (the planner's sim:SIZE,dry) */
} il_backend_info;

/* One sampling call: per row t of the logits, temperature <= 0 takes the argmax (the lowest id
 * on ties); else the candidates in descending order of logit (lower id first on ties), the
 * first top_k of them (0: all), softmax(logit / temperature) over those, the shortest prefix
 * whose probability reaches top_p (1: all; at least one), and the first id whose cumulative
 * probability exceeds u[t] times the prefix's total. A row holding a NaN or infinite logit
 * gives -1 (the caller reads that row to say which). */
typedef struct {
  float temperature;
  int32_t top_k;
  float top_p;
} il_sample_args;

/* An observer of op results (numerics checks; llama.cpp's eval callback). A backend calls fn after
 * each op it runs, once per output, with the op and the result as the op computed it in F32: the
 * output tensor itself, or, for an F16/BF16 output, the F32 values before they are narrowed to
 * it (`stored`: the output's type; y.name is the output's name). fn may round y in place to
 * `stored` (round_to): the narrowed bits stay the same. An error from fn is the op's error.
 * kv_store reports nothing; rope_kv_store reports q. fn NULL: none (the default). */
typedef struct {
  il_status (*fn)(void *ctx, il_backend *b, il_op op, il_tensor y, il_dtype stored);
  void *ctx;
} il_op_observer;

/* Counted host<->device traffic (sim and cuda; zero on cpu). */
typedef struct {
  uint64_t upload_bytes, download_bytes, n_uploads, n_downloads;
  double upload_seconds, download_seconds;
} il_transfer_stats;

typedef struct il_backend_ops {
  uint32_t version; /* IL_BACKEND_OPS_VERSION it was built with; checked once, at open */

  /* ---- memory ---- */
  /* A buffer of `bytes` under `cat`; IL_ERR_OOM with the device's report when it does not
   * fit. `what` names the buffer in messages (borrowed for the call). */
  il_status (*buffer_alloc)(il_backend *, il_mem_category cat, size_t bytes, const char *what, il_buffer **out);
  /* NULL is ignored. */
  void (*buffer_free)(il_backend *, il_buffer *);
  /* A buffer over caller-owned host memory (the cpu backend reads the mmap in place).
   * (optional: NULL where the device cannot read host memory; callers then upload) */
  il_status (*buffer_wrap_host)(il_backend *, void *ptr, size_t bytes, il_mem_category cat, il_buffer **out);
  /* The host address of a buffer's first byte, or NULL when it is not host-visible. */
  void *(*host_ptr)(il_backend *, il_buffer *);
  /* Free and total bytes this backend may still allocate / holds in all. */
  void (*memory)(il_backend *, size_t *free, size_t *total);

  /* ---- transfers, in order with the ops ---- */
  il_status (*upload)(il_backend *, il_tensor dst, const void *src, size_t bytes);
  il_status (*download)(il_backend *, void *dst, il_tensor src, size_t bytes);
  /* dst = src, same shape (rows may have different strides); the same type, or (version 4)
   * F32 <-> F16/BF16: 16-bit activations widened for an op and its result narrowed back,
   * rounding to nearest even as round_to does. */
  il_status (*copy)(il_backend *, il_tensor dst, il_tensor src);
  /* Waits for queued work; returns the first deferred error. */
  il_status (*sync)(il_backend *);

  /* ---- capabilities ---- */
  /* Whether `op` runs with weights of wtype (kv_store, attention: the KV cell type) and
   * activations of atype; the caller widens the activations of an op it says no to. */
  bool (*supports)(il_backend *, il_op op, il_dtype wtype, il_dtype atype);
  /* The attention kernels, best first; *n set to their count. */
  const il_attn_kernel *(*attn_kernels)(il_backend *, int *n);
  void (*info)(il_backend *, il_backend_info *out);

  /* ---- ops ----
   * Activations (every tensor but weights, norm weights, biases, ids and KV cells) are F32, or
   * F16/BF16 where supports(op, wtype, atype) says so: the op then computes in F32 on values
   * widened from them and rounds its results back to nearest even, as round_to does (cpu and
   * sim: chunk by chunk in the scratch of reserve_act; cuda: in its kernels, the scratch only
   * for what an observer must see in F32). Each op reports its outputs to the backend's
   * observer (il_op_observer). */
  /* y[t] = row ids[t] of w, dequantized.  y [n x cols(w)], ids I32 [1 x n]. */
  il_status (*get_rows)(il_backend *, il_tensor y, il_tensor w, il_tensor ids);
  /* y = x W^T: y[t][r] = W[r] . x[t].  w [n_out x n_in], x [n_tok x n_in], y [n_tok x n_out]. */
  il_status (*matmul)(il_backend *, il_tensor y, il_tensor w, il_tensor x);
  /* n matmuls that read the same x (Q, K and V; gate and up), so x is prepared once, each plus
   * its bias when bias is not NULL (bias[i] F32 [1 x cols(y[i])]; bias[i].buf NULL: none):
   * QKV in one op, rounded once. */
  il_status (*matmul_multi)(il_backend *, int n, const il_tensor *y, const il_tensor *w, const il_tensor *bias,
                            il_tensor x);
  /* y[t] = x[t] / rms(x[t]) * g.  g [1 x cols]; y may be x. */
  il_status (*rmsnorm)(il_backend *, il_tensor y, il_tensor x, il_tensor g, float eps);
  /* Rotates the first n_rot dims of each head of x [n_tok x n_heads*head_dim] in place at
   * positions pos (I32 [1 x n_tok]). */
  il_status (*rope)(il_backend *, il_tensor x, il_tensor pos, const il_rope_params *p);
  /* Row i of k and v goes to cell slots[i] of kv->k and kv->v (I32 [1 x n]). */
  il_status (*kv_store)(il_backend *, const il_kv_view *kv, il_tensor k, il_tensor v, il_tensor slots);
  /* rope(q, rq) and rope(k, rk) at pos, then kv_store(kv, k, v, slots), in one op: with 16-bit
   * activations k is stored from its rotated F32 values (k itself may be left unrotated). */
  il_status (*rope_kv_store)(il_backend *, il_tensor q, il_tensor k, il_tensor v, il_tensor pos,
                             const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv, il_tensor slots);
  /* gate = silu(gate) * up, elementwise, same shape. */
  il_status (*swiglu)(il_backend *, il_tensor gate, il_tensor up);
  /* gate = gelu(gate) * up, elementwise, same shape (Gemma's GeGLU), with gelu's tanh form
   * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as llama.cpp's ggml_gelu. */
  il_status (*geglu)(il_backend *, il_tensor gate, il_tensor up);
  /* x *= s, elementwise in place (Gemma's embedding scale). */
  il_status (*scale)(il_backend *, il_tensor x, float s);
  /* y += x, same shape. */
  il_status (*add)(il_backend *, il_tensor y, il_tensor x);
  /* y[t] += bias.  bias [1 x cols(y)]. */
  il_status (*add_bias)(il_backend *, il_tensor y, il_tensor bias);
  /* *out = number of inf/nan elements of x (FP16 overflow detection). */
  il_status (*count_nonfinite)(il_backend *, il_tensor x, int64_t *out);

  /* ---- timing ---- */
  il_status (*event_record)(il_backend *, il_event **out);
  /* Seconds from a to b (both recorded, in order). */
  il_status (*event_elapsed)(il_backend *, il_event *a, il_event *b, double *seconds);
  /* NULL is ignored; an event of upload_async still pending is waited for first (its error
   * dropped, the caller's error text left alone). */
  void (*event_free)(il_backend *, il_event *);

  /* Releases the backend and everything it allocated. */
  void (*destroy)(il_backend *);

  /* Host<->device traffic so far. (optional: NULL where nothing is transferred) */
  void (*transfers)(il_backend *, il_transfer_stats *out);
  /* The device allocator's counters and its memory map; empty_cache returns cached segments.
   * (optional: NULL where memory is not managed by a caching allocator, as on cpu) */
  void (*allocator_stats)(il_backend *, il_caching_stats *out);
  il_status (*allocator_snapshot)(il_backend *, il_caching_snapshot *out);
  size_t (*empty_cache)(il_backend *);

  /* ---- appended in version 2: mixed precision ---- */
  /* Rounds F32 x in place to the values `type` (F16 or BF16) can hold: activations stored at
   * that precision between ops (F16 overflows to inf beyond 65504, as a real F16 buffer would). */
  il_status (*round_to)(il_backend *, il_tensor x, il_dtype type);
  /* *nonfinite = inf/nan count, *absmax = largest finite |x| (numerics checks). */
  il_status (*value_stats)(il_backend *, il_tensor x, int64_t *nonfinite, float *absmax);

  /* ---- appended in version 3: memory known at open ---- */
  /* Allocates now the scratch the ops will need for passes of at most max_tokens rows with the
   * weights w[0..n) (CUDA: the GEMM's 16-bit staging, the quantized activations of the dp4a
   * matvec, cuBLAS's own workspace), so it is counted, planned and refused at open rather
   * than met at the first batch. IL_ERR_OOM with the device's report. reserve_bytes: what
   * reserve would allocate, from shapes and types alone (w[i].buf may be NULL), for the
   * out-of-memory report's arithmetic. (optional, both: NULL where ops need no scratch) */
  il_status (*reserve)(il_backend *, int32_t max_tokens, const il_tensor *w, int n);
  size_t (*reserve_bytes)(il_backend *, int32_t max_tokens, const il_tensor *w, int n);

  /* ---- appended in version 5: weight layouts ---- */
  /* Called by the model once for each matmul weight it placed (not for the embedding table,
   * which only get_rows reads, unless the output head shares it), before any op reads it: the
   * backend may keep a copy in the layout its matmul prefers (cpu with --repack: the GEMM's
   * panels, under IL_MEM_WEIGHTS, freed with the buffer). The tensor keeps its view and type.
   * *own_copy: true when matmul will never read the placed bytes again (the model may then
   * release a file mapping's pages of them); get_rows, copy and the other ops still read them.
   * IL_ERR_OOM with the report. (optional: NULL where weights are used as placed) */
  il_status (*prepare_weight)(il_backend *, const il_tensor *w, bool *own_copy);

  /* ---- 16-bit activations ---- */
  /* Allocates now (under IL_MEM_ACTIVATIONS, freeing the previous one) the F32 scratch in
   * which the ops compute on atype (F16 or BF16) activations: chunks of `rows` rows, the F32
   * copies of one op's inputs and outputs taking at most `cols` columns together (a backend
   * whose kernels read 16-bit values may use less of it: cuda, for the F32 results it reports
   * to an observer). rows 0 releases it. IL_ERR_OOM with the report. An op that needs it and
   * finds none refuses its 16-bit tensors by name. (optional: NULL where supports() refuses
   * 16-bit activations; the caller then widens them itself with copy) */
  il_status (*reserve_act)(il_backend *, il_dtype atype, int32_t rows, int64_t cols);

  /* ---- fused ops: each equals the composition of the ops above it names (the cpu runs that
   * composition; a device may run one kernel). (optional, each: NULL where not fused; the
   * caller then runs the composition itself) ---- */
  /* rmsnorm(x, g, eps) quantized to y's type (Q8_0: the activations a quantized matmul reads,
   * with ggml's reference quantizer), rows as wide as x. Reports nothing to the observer. */
  il_status (*rmsnorm_quant)(il_backend *, il_tensor y, il_tensor x, il_tensor g, float eps);
  /* matmul_multi(2, {h, up}, {w_gate, w_up}, NULL, x), then swiglu(h, up): the feed-forward
   * block's first half. up [n_tok x n_ff] may be left unwritten by a fused kernel. */
  il_status (*gate_up_swiglu)(il_backend *, il_tensor h, il_tensor up, il_tensor w_gate, il_tensor w_up, il_tensor x);
  /* matmul(tmp, w, x), then add(y, tmp): the residual add as the matmul's epilogue (the output
   * projection, ffn_down). tmp [n_tok x n_out] may be left unwritten by a fused kernel. */
  il_status (*matmul_add)(il_backend *, il_tensor y, il_tensor w, il_tensor x, il_tensor tmp);

  /* ---- sampling ---- */
  /* ids[t] (I32 [1 x n]) = the token il_sample_args picks from row t of logits (F32
   * [n x n_vocab]) with the uniform draw u[t] (F32 [1 x n], in [0, 1)). (optional: NULL where
   * the host samples) */
  il_status (*sample)(il_backend *, il_tensor ids, il_tensor logits, il_tensor u, const il_sample_args *a);

  /* ---- step capture (CUDA graphs) ---- */
  /* Between capture_begin and capture_end the ops run as called and may also be recorded as
   * one step; *out is the step, or NULL where the backend records nothing (cpu, sim: the caller
   * runs the ops again instead of replaying). A recording backend (cuda: one CUDA graph) runs
   * the ops when capture_end returns, and refuses transfers and syncs in between (a step holds
   * device work only). On entry *out is NULL or an earlier step this one replaces, which
   * capture_end takes over (cuda updates its graph in place where the kernels are the same);
   * out NULL abandons the capture: nothing recorded runs. An error from capture_begin or
   * capture_end (IL_ERR_UNSUPPORTED: the step cannot be recorded, saying why): nothing of the
   * step ran and the caller runs the ops again uncaptured. replay runs a recorded step again
   * (the tensors' contents as they are then); IL_ERR_UNSUPPORTED: the step names buffers the
   * backend has since moved (nothing ran; capture it again). step_free releases one (NULL is
   * ignored). (optional, all four: NULL where nothing is captured) */
  il_status (*capture_begin)(il_backend *);
  il_status (*capture_end)(il_backend *, il_step **out);
  il_status (*replay)(il_backend *, il_step *step);
  void (*step_free)(il_backend *, il_step *step);

  /* ---- transfers off the op order ---- */
  /* Starts copying bytes from host src into dst on the backend's copy stream and returns; src
   * must stay valid and unchanged until *done has completed (event_wait, or the backend's
   * sync). Ops queued after it do not wait for it unless event_wait says so. *done is freed
   * with event_free. cpu: the copy is done when it returns. (optional: NULL where every
   * upload is in order with the ops; use upload) */
  il_status (*upload_async)(il_backend *, il_tensor dst, const void *src, size_t bytes, il_event **done);
  /* The ops queued after this call (and the host, on return, for cpu and sim) wait for e.
   * Returns the copy's error, if it failed. */
  il_status (*event_wait)(il_backend *, il_event *e);

  /* ---- collectives ---- */
  /* Where t lives for a library that drives the device itself (NCCL's all-reduce for tensor
   * parallelism): its address in device memory, the stream the backend's ops run on (work
   * queued there is ordered with them) and the device's ordinal. (optional: NULL where the
   * backend's memory is not a CUDA device's; the all-reduce then goes through the host) */
  il_status (*native)(il_backend *, il_tensor t, void **ptr, void **stream, int *device);
} il_backend_ops;

struct il_backend {
  const il_backend_ops *ops;
  il_mem_space *space;     /* where its allocations are counted (the host's for cpu) */
  void *impl;
  il_op_observer observer; /* set by the caller between ops; zero: none */
};

/* ---- conveniences over the ops table ---- */

/* A buffer sized for rows x cols of type, as a dense tensor; IL_ERR_OOM as buffer_alloc. */
IL_NODISCARD il_status il_backend_tensor_new(il_backend *b, il_mem_category cat, int64_t rows, int64_t cols, il_dtype type,
                                const char *name, il_tensor *out);
/* Frees the tensor's buffer (for tensors made by il_backend_tensor_new) and clears it. */
void il_backend_tensor_free(il_backend *b, il_tensor *t);
/* A tensor over host memory: wrapped in place when the backend can read it (no copy, the
 * caller keeps the memory alive), else allocated under cat and uploaded. */
IL_NODISCARD il_status il_backend_tensor_from_host(il_backend *b, il_mem_category cat, const void *data, int64_t rows,
                                      int64_t cols, size_t stride, il_dtype type, const char *name, il_tensor *out);
/* Uploads n int32 values to the row-0 elements [0, n) of an I32 tensor. */
IL_NODISCARD il_status il_backend_upload_i32(il_backend *b, il_tensor dst, const int32_t *src, int64_t n);

#endif
