/* backend/cuda/glue: the state of one opened CUDA backend, shared by the module's C files
 * (cuda.c: memory, transfers, the ops; attn_ops.c: the attention kernels; gemm.c: the cuBLAS path
 * of matmul; graph.c: step capture).
 *
 * Streams: ops and downloads run in order on `compute`; uploads run on `copy` (pinned staging
 * buffers, so a caller's host memory may be reused as soon as upload returns), and the two
 * streams are joined by events in both directions at every upload, which keeps the seam's
 * "transfers in order with the ops" while leaving the copy stream ready for the offloading
 * work (prefetching layer l+1 while layer l computes).
 * Not for: the host side (backend/cudamod.h) or kernels (cuda.h).
 */
#ifndef IL_BACKEND_CUDA_GLUE_H
#define IL_BACKEND_CUDA_GLUE_H

#include <cublas_v2.h>
#include <pthread.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/mv3.h"
#include "backend/cudamod.h"

extern const il_cudamod_host *il__cu_host;
/* Keeps the host table when its ABI and size fit; else false with the reason in err. */
bool il__cu_host_accept(const il_cudamod_host *h, char *err, size_t nerr);

struct il_buffer {
  void *base; /* device address */
  size_t size;
  il_backend *owner; /* the backend that made it; the view checks refuse it on any other */
  il_mem_category cat;
  il_caching_block *blk;
};
#include "backend/check.h" /* the view checks read struct il_buffer, so after it */

#define IL__CU_STAGE_BYTES ((size_t)8 << 20) /* each of the two pinned staging buffers */
#define IL__CU_LAUNCH_RING 64                /* launches whose names a device fault can cite */

typedef struct {
  int dev;
  char spec[32];
  char device_name[96];
  int cc_major, cc_minor;
  size_t total_mem, cap;
  int binary_version, ptx_version; /* the kernel image chosen for this device */
  cudaStream_t compute, copy;
  cudaEvent_t stage_done[2];       /* the copy out of staging[i] has finished */
  cudaEvent_t join;                /* ordering between the two streams */
  bool stage_used[2];
  int stage_next;
  void *stage[2];                  /* pinned host, IL__CU_STAGE_BYTES each */
  cublasHandle_t blas;
  il_mem_space *space;
  il_caching *alloc;
  il__cu_fault *fault;             /* device */
  il__cu_fault *fault_host;        /* pinned mirror */
  unsigned long long *count;       /* device scratch [2] for count_nonfinite and value_stats */
  unsigned long long *count_host;  /* pinned [2] */
  il_buffer *ws;                   /* GEMM workspace (F16 tiles, converted activations) */
  il_buffer *blas_ws;              /* cuBLAS's workspace, ours so it is counted (cublasSetWorkspace) */
  il_buffer *act;                  /* reserve_act's F32 scratch: the F32 results of 16-bit ops that are
                                      reported to an observer or stored again (rope_kv_store's k) */
  int32_t act_rows;                /* rows of a chunk in it */
  bool dry;                        /* cuda:N,dry: the planner's device: the real device's facts and
                                      fixed overhead, the real allocator with no memory behind it */
  size_t dry_size;                 /* dry: the device size it stands for (0: the real one) */
  size_t fixed;                    /* device memory in use when it opened: context, cuBLAS, others */
  uintptr_t next_fake;             /* dry: the next segment's address (never dereferenced) */
  il__mv_table mv_table;           /* matvec kernel per (type, shape class, tokens): mv3_model.c's
                                      default, or the file IL_CUDA_MV_TABLE names */
  int mv_force;                    /* IL_CUDA_MATVEC: that kernel wherever it runs; -1: the table */
  bool no_blas;                    /* IL_CUDA_NO_CUBLAS=1: batches through matvec (test coverage) */
  int launch;                      /* id of the last launch that can fault */
  char launch_what[IL__CU_LAUNCH_RING][96];
  char launch_rows[IL__CU_LAUNCH_RING][2][64]; /* kv_store's K and V rows tensors ("" for other launches) */
  pthread_mutex_t lock;            /* transfer counters */
  pthread_mutex_t xfer_lock;       /* one transfer at a time: the staging buffers, stage_next and join
                                      are shared, and model offloading uploads from its copy thread
                                      while the caller's thread uploads batches and downloads logits */
  il_transfer_stats xfer;
  bool stage_joined[2];            /* staging[i]'s last copy was an upload the compute stream waits
                                      for: a drain of the compute stream finished it */
  /* step capture (graph.c) */
  bool no_graphs;                  /* IL_CUDA_GRAPHS=0: opened with a table without step capture */
  bool capturing;                  /* between capture_begin and capture_end */
  char cap_broken[160];            /* why the step being captured cannot be replayed ("": it can) */
  int cap_first, cap_n, cap_cap;   /* the step's first launch id, and its launch names so far */
  char (*cap_names)[96];
  uint64_t graph_gen;              /* bumped when a buffer a step may name moves (the workspace) */
  il_step *replayed;               /* the step launched last: its faults are named from it */
  uint64_t graph_launches, graph_updates, graph_instantiations;
} il__cu;

static inline il__cu *il__cu_of(il_backend *b) { return (il__cu *)b->impl; }

static inline void *il__ptr(il_tensor t) { return (uint8_t *)t.buf->base + t.off; }

/* F32 rows must be float-aligned on the device (the other view checks: backend/check.h). */
static inline il_status il__aligned(const char *op, const il_tensor *t, size_t a) {
  if (((uintptr_t)t->buf->base + t->off) % a || (t->rows > 1 && t->stride % a))
    return il_error(IL_ERR_UNSUPPORTED, "%s: '%s' at offset %zu, stride %zu is not %zu-byte aligned", op,
                    il__nm(t), t->off, t->stride, a);
  return IL_OK;
}

/* The KV cell types this backend stores and its attention kernels read. */
static inline bool il__kv_type_ok(il_dtype t) {
  return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16 || t == IL_DTYPE_Q8_0;
}

/* Names a launch that can fault, so a fault found later can say which op and tensor it was;
 * returns the launch's id. */
int il__note(il__cu *c, const char *op, const il_tensor *t);

/* The attention kernels of the seam's attn_kernels op (attn_ops.c). */
const il_attn_kernel *il__cu_attn_kernels(il_backend *b, int *n);

/* Turns a failed CUDA call into an error value naming the device, the op, the tensor, the
 * call and file:line. cudaErrorMemoryAllocation becomes IL_ERR_OOM and is recorded as the
 * thread's last OOM in the backend's space; everything else is IL_ERR_DEVICE. */
il_status il__cu_fail(il__cu *c, cudaError_t e, const char *op, const char *what, const char *call, const char *file,
                      int line);
il_status il__cu_blas_fail(il__cu *c, cublasStatus_t e, const char *op, const char *what, const char *call,
                           const char *file, int line);

#define IL_CUDA_CHECK(c, call, op, what)                                               \
  do {                                                                                 \
    cudaError_t il__e = (call);                                                        \
    if (il__e != cudaSuccess) return il__cu_fail((c), il__e, (op), (what), #call, __FILE__, __LINE__); \
  } while (0)

#define IL_CUBLAS_CHECK(c, call, op, what)                                             \
  do {                                                                                 \
    cublasStatus_t il__e = (call);                                                     \
    if (il__e != CUBLAS_STATUS_SUCCESS)                                                \
      return il__cu_blas_fail((c), il__e, (op), (what), #call, __FILE__, __LINE__);    \
  } while (0)

/* Step capture (graph.c). capture_note records launch id's name into the step being captured;
 * capture_break marks that step unusable (first reason kept); capture_refuse is the error of a
 * transfer or sync asked for while capturing (and breaks the step); launch_name names launch id
 * for a fault message. The other four are the ops of the same names. */
void il__cu_capture_note(il__cu *c, int id, const char *what);
void il__cu_capture_break(il__cu *c, const char *why);
il_status il__cu_capture_refuse(il__cu *c, const char *op, const char *what);
const char *il__cu_launch_name(const il__cu *c, int id);
il_status il__cu_capture_begin(il_backend *b);
il_status il__cu_capture_end(il_backend *b, il_step **out);
il_status il__cu_replay(il_backend *b, il_step *s);
void il__cu_step_free(il_backend *b, il_step *s);

/* A device workspace of at least `bytes` (grown through the caching allocator under
 * IL_MEM_WORKSPACE; the old one is freed in stream order). */
il_status il__cu_workspace(il_backend *b, size_t bytes, void **out);

/* The cuBLAS path of matmul: y = x W^T for n_tok > IL__CU_MV_MAX_TOK. Returns
 * IL_ERR_UNSUPPORTED (nothing launched) when cuBLAS cannot take these operands (BF16 before
 * sm_80, a row stride that is not a whole number of elements); the caller then runs matvec. */
il_status il__cu_gemm(il_backend *b, il_tensor y, il_tensor w, il_tensor x);
/* Workspace bytes il__cu_gemm needs for n_tok rows of x against w (0 for F32 weights). */
size_t il__cu_gemm_work(const il_tensor *w, int64_t n_tok);

#endif
