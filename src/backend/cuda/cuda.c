/* backend/cuda/cuda: the CUDA backend's ops table: device memory, transfers, ops, events.
 *
 * Memory: buffers come from the caching allocator (memory/caching.h, the same one sim uses)
 * over cudaMalloc/cudaFree segments: never managed memory, so a buffer is where the report says
 * it is. Each buffer is also counted per category in the backend's memory space ("cuda:0"),
 * which is what fault injection and the OOM report read. A refused cudaMalloc is IL_ERR_OOM
 * with the allocator's report (reserved, largest free block, fragmentation), recorded as the
 * thread's last OOM exactly as sim records it, so the engine's advice is the same on both.
 * Transfers and streams: see glue.h. Ops check their views on the host (types, shapes,
 * buffer bounds: the same checks and messages as the cpu backend), resolve them to device
 * pointers and call one launcher each (cuda.h). Index checks that need device data run in the
 * kernels and come back through the fault record at the next sync or download.
 * Every CUDA and cuBLAS call is checked (IL_CUDA_CHECK / IL_CUBLAS_CHECK): an error is a
 * value naming the device, op, tensor, call and file:line; nothing here exits.
 * Not for: kernels (the .cu files) or the cuBLAS path of matmul (gemm.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/glue.h"
#include "backend/cuda/attn_flash.h"
#include "backend/check.h"
#include "backend/dry.h"
#include "core/quant.h"
#include "core/timer.h"
#include "il_mv_table.h" /* il__mv_table_text: src/backend/cuda/mv_table.txt */

#ifndef IL_CUDA_ARCHS_TEXT
#define IL_CUDA_ARCHS_TEXT ""
#endif
#ifndef IL_CUDA_VERSION_TEXT
#define IL_CUDA_VERSION_TEXT ""
#endif

/* ---------------------------------------------------------------- errors */

il_status il__cu_fail(il__cu *c, cudaError_t e, const char *op, const char *what, const char *call, const char *file,
                      int line) {
  const char *name = cudaGetErrorName(e), *text = cudaGetErrorString(e);
  const char *dev = c ? c->spec : "cuda";
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky: clear it so the next call does not see it */
    if (c) il_mem_record_oom(c->space, IL_MEM_OTHER, 0, what ? what : op, "device", 0);
    return il_error(IL_ERR_OOM, "%s: %s%s%s%s: the device is out of memory (%s in %s at %s:%d)", dev, op,
                    what ? " '" : "", what ? what : "", what ? "'" : "", name, call, file, line);
  }
  return il_error(IL_ERR_DEVICE, "%s: %s%s%s%s: %s (%s) in %s at %s:%d", dev, op, what ? " '" : "", what ? what : "",
                  what ? "'" : "", name, text, call, file, line);
}

il_status il__cu_blas_fail(il__cu *c, cublasStatus_t e, const char *op, const char *what, const char *call,
                           const char *file, int line) {
  const char *dev = c ? c->spec : "cuda";
  if (e == CUBLAS_STATUS_ALLOC_FAILED) {
    if (c) il_mem_record_oom(c->space, IL_MEM_WORKSPACE, 0, "cuBLAS workspace", "device", 0);
    return il_error(IL_ERR_OOM, "%s: %s '%s': cuBLAS could not allocate its workspace (%s at %s:%d)", dev, op,
                    what ? what : "?", call, file, line);
  }
  return il_error(IL_ERR_DEVICE, "%s: %s '%s': %s (%s) in %s at %s:%d", dev, op, what ? what : "?",
                  cublasGetStatusName(e), cublasGetStatusString(e), call, file, line);
}

/* View checks: backend/check.h; il__aligned, il__ptr: glue.h. */

int il__note(il__cu *c, const char *op, const il_tensor *t) {
  c->launch++;
  snprintf(c->launch_what[c->launch % IL__CU_LAUNCH_RING], sizeof c->launch_what[0], "%s '%s'", op, il__nm(t));
  c->launch_rows[c->launch % IL__CU_LAUNCH_RING][0][0] = 0;
  c->launch_rows[c->launch % IL__CU_LAUNCH_RING][1][0] = 0;
  il__cu_capture_note(c, c->launch, c->launch_what[c->launch % IL__CU_LAUNCH_RING]);
  return c->launch;
}

/* kv_store's K and V rows tensors for launch id (a non-finite row is named by them). */
static void il__note_rows(il__cu *c, int id, const il_tensor *k, const il_tensor *v) {
  snprintf(c->launch_rows[id % IL__CU_LAUNCH_RING][0], sizeof c->launch_rows[0][0], "%s", il__nm(k));
  snprintf(c->launch_rows[id % IL__CU_LAUNCH_RING][1], sizeof c->launch_rows[0][0], "%s", il__nm(v));
}

/* After the compute stream synchronized with the fault record copied to fault_host: turns a
 * recorded fault into IL_ERR_RANGE and clears it. */
static il_status il__faults(il__cu *c) {
  il__cu_fault f = *c->fault_host;
  if (f.kind == IL__CU_FAULT_NONE) return IL_OK;
  memset(c->fault_host, 0, sizeof *c->fault_host);
  IL_CUDA_CHECK(c, cudaMemsetAsync(c->fault, 0, sizeof *c->fault, c->compute), "sync", "fault record");
  const char *what = il__cu_launch_name(c, f.launch);
  switch (f.kind) {
  case IL__CU_FAULT_ROW_ID:
    return il_error(IL_ERR_RANGE, "%s: %s: token id %lld of row %lld out of range [0, %lld) (found on the device)",
                    c->spec, what, f.b, f.a, f.c);
  case IL__CU_FAULT_SLOT:
    return il_error(IL_ERR_RANGE, "%s: %s: slot %lld of row %lld outside the %lld cells (found on the device)", c->spec,
                    what, f.b, f.a, f.c);
  case IL__CU_FAULT_SEQ:
    return il_error(IL_ERR_RANGE, "%s: %s: row %lld: sequence %lld outside [0, %lld) (found on the device)", c->spec,
                    what, f.a, f.b, f.c);
  case IL__CU_FAULT_POS:
    return il_error(IL_ERR_RANGE, "%s: %s: row %lld: position %lld outside the context of %lld (found on the device)",
                    c->spec, what, f.a, f.b, f.c);
  case IL__CU_FAULT_NONFINITE: {
    const char *rows = c->launch - f.launch < IL__CU_LAUNCH_RING ? c->launch_rows[f.launch % IL__CU_LAUNCH_RING][f.b ? 1 : 0]
                                                                 : "";
    return il_error(IL_ERR_FORMAT, "%s: %s: row %lld of '%s' into q8_0 cells: element %lld is not finite (found on the "
                    "device)", c->spec, what, f.a, *rows ? rows : "?", f.c);
  }
  default:
    return il_error(IL_ERR_RANGE, "%s: %s: sequence %lld: block-table entry %lld outside the %lld cells (found on the device)",
                    c->spec, what, f.a, f.b, f.c);
  }
}

/* ---------------------------------------------------------------- memory */

static il_status il__seg_alloc(void *ctx, size_t bytes, void **base) {
  il__cu *c = ctx;
  *base = NULL;
  if (c->dry) { /* addresses only: the caching allocator never touches segment memory */
    *base = (void *)c->next_fake;
    c->next_fake += (bytes + 4095) & ~(uintptr_t)4095;
    return IL_OK;
  }
  cudaError_t e = cudaMalloc(base, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    char sz[32];
    return il_error(IL_ERR_OOM, "cudaMalloc of %s on %s: out of device memory", il_mem_format_bytes(bytes, sz, sizeof sz),
                    c->spec);
  }
  if (e != cudaSuccess) return il__cu_fail(c, e, "cudaMalloc", "segment", "cudaMalloc(base, bytes)", __FILE__, __LINE__);
  return IL_OK;
}

/* cudaFree waits for the device; the allocator calls this only for segments it no longer
 * hands out (empty_cache, a retry after a refusal, destroy). */
static void il__seg_free(void *ctx, void *base, size_t bytes) {
  if (!((il__cu *)ctx)->dry) (void)cudaFree(base);
}

static il_status il__alloc(il_backend *b, il_mem_category cat, size_t bytes, const char *what, il_buffer **out) {
  il__cu *c = il__cu_of(b);
  *out = NULL;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "alloc", what);
  il_buffer *buf = il_mem_alloc(IL_MEM_OTHER, sizeof *buf, "buffer record");
  if (!buf) return IL_ERR_OOM;
  il_caching_block *blk = NULL;
  il_status st = il_caching_alloc(c->alloc, cat, bytes, what, &blk);
  if (st == IL_ERR_OOM) {
    il_caching_oom o;
    il_mem_record_oom(c->space, cat, bytes, what, c->cap ? "limit" : "device", 0);
    if (il_caching_last_oom(c->alloc, &o)) il_mem_record_oom_device(o.reserved, o.largest_free, o.fragmentation);
  }
  if (st == IL_OK) st = il_mem_space_reserve(c->space, cat, il_caching_block_size(blk), what);
  if (st != IL_OK) {
    il_caching_free(c->alloc, blk);
    il_mem_free(buf);
    return st;
  }
  *buf = (il_buffer){.base = il_caching_block_ptr(blk), .size = bytes, .owner = b, .cat = cat, .blk = blk};
  *out = buf;
  return IL_OK;
}

/* Frees at once: every later use of the memory is a later op on the same stream (uploads wait
 * for the compute stream first), so stream order keeps reuse safe. */
static void il__free(il_backend *b, il_buffer *buf) {
  if (!buf) return;
  il__cu *c = il__cu_of(b);
  il_mem_space_release(c->space, buf->cat, il_caching_block_size(buf->blk));
  il_caching_free(c->alloc, buf->blk);
  il_mem_free(buf);
}

il_status il__cu_workspace(il_backend *b, size_t bytes, void **out) {
  il__cu *c = il__cu_of(b);
  if (!c->ws || c->ws->size < bytes) {
    /* a recorded step names the old block: it is not replayed again (graph.c) */
    c->graph_gen++;
    il__cu_capture_break(c, "the matmul workspace grew");
    il__free(b, c->ws);
    c->ws = NULL;
    IL_TRY(il__alloc(b, IL_MEM_WORKSPACE, bytes, "cuda matmul workspace", &c->ws));
  }
  *out = c->ws->base;
  return IL_OK;
}

static void *il__host_ptr(il_backend *b, il_buffer *buf) { return NULL; }

static void il__memory(il_backend *b, size_t *free_b, size_t *total) {
  il__cu *c = il__cu_of(b);
  size_t f = 0, t = 0;
  if (c->dry) { /* a device of dry_size with the real fixed overhead; the allocator's cap binds */
    il_caching_stats st;
    il_caching_stats_get(c->alloc, &st);
    const size_t cap = c->cap; /* dry: size - fixed, or --mem-limit when smaller */
    *total = c->dry_size ? c->dry_size : c->total_mem;
    *free_b = cap > st.total.reserved ? cap - st.total.reserved : 0;
    return;
  }
  if (cudaSetDevice(c->dev) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) {
    (void)cudaGetLastError();
    f = 0, t = c->total_mem;
  }
  if (c->cap) { /* --mem-limit: the cap binds like a smaller device */
    il_caching_stats st;
    il_caching_stats_get(c->alloc, &st);
    const size_t left = c->cap > st.total.reserved ? c->cap - st.total.reserved : 0;
    if (left < f) f = left;
    if (c->cap < t) t = c->cap;
  }
  *free_b = f;
  *total = t;
}

static void il__allocator_stats(il_backend *b, il_caching_stats *out) { il_caching_stats_get(il__cu_of(b)->alloc, out); }
static il_status il__snapshot(il_backend *b, il_caching_snapshot *out) {
  return il_caching_snapshot_take(il__cu_of(b)->alloc, out);
}
static size_t il__empty_cache(il_backend *b) { return il_caching_empty_cache(il__cu_of(b)->alloc); }

/* ---------------------------------------------------------------- transfers */

/* join: the ops queued after this upload wait for it (upload); false leaves that to
 * event_wait on the event the caller records on the copy stream (upload_async). */
static il_status il__upload_locked(il__cu *c, il_tensor dst, const void *src, size_t bytes, bool join) {
  if (bytes > dst.buf->size - dst.off)
    return il_error(IL_ERR_RANGE, "upload: %zu bytes into '%s' at offset %zu overrun its buffer of %zu bytes", bytes,
                    il__nm(&dst), dst.off, dst.buf->size);
  const double t0 = il_time_now();
  const char *nm = il__nm(&dst);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "upload", nm);
  /* the copy stream waits for the ops queued so far (they may still read this buffer) */
  IL_CUDA_CHECK(c, cudaEventRecord(c->join, c->compute), "upload", nm);
  IL_CUDA_CHECK(c, cudaStreamWaitEvent(c->copy, c->join, 0), "upload", nm);
  uint8_t *d = il__ptr(dst);
  for (size_t done = 0; done < bytes;) {
    const size_t n = bytes - done < IL__CU_STAGE_BYTES ? bytes - done : IL__CU_STAGE_BYTES;
    const int i = c->stage_next;
    if (c->stage_used[i]) IL_CUDA_CHECK(c, cudaEventSynchronize(c->stage_done[i]), "upload", nm);
    memcpy(c->stage[i], (const uint8_t *)src + done, n);
    IL_CUDA_CHECK(c, cudaMemcpyAsync(d + done, c->stage[i], n, cudaMemcpyHostToDevice, c->copy), "upload", nm);
    IL_CUDA_CHECK(c, cudaEventRecord(c->stage_done[i], c->copy), "upload", nm);
    c->stage_used[i] = true;
    c->stage_joined[i] = join;
    c->stage_next = 1 - i;
    done += n;
  }
  /* and the ops queued after this upload wait for it */
  if (join) {
    IL_CUDA_CHECK(c, cudaEventRecord(c->join, c->copy), "upload", nm);
    IL_CUDA_CHECK(c, cudaStreamWaitEvent(c->compute, c->join, 0), "upload", nm);
  }
  pthread_mutex_lock(&c->lock);
  c->xfer.upload_bytes += bytes;
  c->xfer.n_uploads++;
  c->xfer.upload_seconds += il_time_now() - t0;
  pthread_mutex_unlock(&c->lock);
  return IL_OK;
}

/* Waits for the compute stream, with the fault record copied back at its end. */
static il_status il__drain(il__cu *c, const char *op, const char *what) {
  IL_CUDA_CHECK(c, cudaMemcpyAsync(c->fault_host, c->fault, sizeof *c->fault, cudaMemcpyDeviceToHost, c->compute), op,
                what);
  IL_CUDA_CHECK(c, cudaStreamSynchronize(c->compute), op, what);
  return il__faults(c);
}

static il_status il__download_locked(il__cu *c, void *dst, il_tensor src, size_t bytes) {
  if (bytes > src.buf->size - src.off)
    return il_error(IL_ERR_RANGE, "download: %zu bytes from '%s' at offset %zu overrun its buffer of %zu bytes", bytes,
                    il__nm(&src), src.off, src.buf->size);
  const double t0 = il_time_now();
  const char *nm = il__nm(&src);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "download", nm);
  const uint8_t *s = il__ptr(src);
  size_t done = 0;
  do {
    const size_t n = bytes - done < IL__CU_STAGE_BYTES ? bytes - done : IL__CU_STAGE_BYTES;
    const int i = c->stage_next;
    if (c->stage_used[i]) IL_CUDA_CHECK(c, cudaEventSynchronize(c->stage_done[i]), "download", nm);
    c->stage_used[i] = false;
    if (n) IL_CUDA_CHECK(c, cudaMemcpyAsync(c->stage[i], s + done, n, cudaMemcpyDeviceToHost, c->compute), "download", nm);
    IL_TRY(il__drain(c, "download", nm));
    /* the compute stream waited for every joined upload before this drain: their staging is
     * free, and the next step's transfers need not wait on its event (no sync inside a step) */
    for (int j = 0; j < 2; j++)
      if (c->stage_joined[j]) c->stage_used[j] = c->stage_joined[j] = false;
    if (n) memcpy((uint8_t *)dst + done, c->stage[i], n);
    done += n;
  } while (done < bytes);
  pthread_mutex_lock(&c->lock);
  c->xfer.download_bytes += bytes;
  c->xfer.n_downloads++;
  c->xfer.download_seconds += il_time_now() - t0;
  pthread_mutex_unlock(&c->lock);
  return IL_OK;
}

/* Transfers may come from two host threads at once (the caller's and model offloading's copy
 * thread): each runs whole under xfer_lock. The streams keep the device-side order: an upload
 * waits for the ops queued before it, the ops queued after it wait for the upload. */
static il_status il__upload(il_backend *b, il_tensor dst, const void *src, size_t bytes) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__check(b, "upload", &dst, IL_DTYPE_COUNT));
  if (c->capturing) return il__cu_capture_refuse(c, "upload", il__nm(&dst));
  pthread_mutex_lock(&c->xfer_lock);
  il_status st = il__upload_locked(c, dst, src, bytes, true);
  pthread_mutex_unlock(&c->xfer_lock);
  return st;
}

static il_status il__download(il_backend *b, void *dst, il_tensor src, size_t bytes) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__check(b, "download", &src, IL_DTYPE_COUNT));
  if (c->capturing) return il__cu_capture_refuse(c, "download", il__nm(&src));
  pthread_mutex_lock(&c->xfer_lock);
  il_status st = il__download_locked(c, dst, src, bytes);
  pthread_mutex_unlock(&c->xfer_lock);
  return st;
}

static int il__half_kind(il_dtype t) { return t == IL_DTYPE_F16 ? 1 : t == IL_DTYPE_BF16 ? 2 : 0; }

static il_status il__copy(il_backend *b, il_tensor dst, il_tensor src) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__copy_check(b, &dst, &src));
  const size_t row = il_tensor_row_bytes(src.type, src.cols);
  if (!src.rows || !row) return IL_OK;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "copy", il__nm(&dst));
  if (dst.type != src.type) {
    IL_TRY(il__aligned("copy", &dst, il_tensor_row_bytes(dst.type, 1)));
    IL_TRY(il__aligned("copy", &src, il_tensor_row_bytes(src.type, 1)));
    IL_CUDA_CHECK(c, il__cu_convert(c->compute, il__ptr(dst), dst.stride, il__half_kind(dst.type), il__ptr(src), src.stride,
                                    il__half_kind(src.type), src.rows, src.cols),
                  "copy", il__nm(&dst));
    return IL_OK;
  }
  if (src.rows == 1)
    IL_CUDA_CHECK(c, cudaMemcpyAsync(il__ptr(dst), il__ptr(src), row, cudaMemcpyDeviceToDevice, c->compute), "copy",
                  il__nm(&dst));
  else
    IL_CUDA_CHECK(c, cudaMemcpy2DAsync(il__ptr(dst), dst.stride, il__ptr(src), src.stride, row, (size_t)src.rows,
                                       cudaMemcpyDeviceToDevice, c->compute),
                  "copy", il__nm(&dst));
  return IL_OK;
}

static il_status il__sync(il_backend *b) {
  il__cu *c = il__cu_of(b);
  if (c->capturing) return il__cu_capture_refuse(c, "sync", "the streams");
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "sync", NULL);
  IL_CUDA_CHECK(c, cudaStreamSynchronize(c->copy), "sync", NULL);
  return il__drain(c, "sync", NULL);
}

static void il__transfers(il_backend *b, il_transfer_stats *out) {
  il__cu *c = il__cu_of(b);
  pthread_mutex_lock(&c->lock);
  *out = c->xfer;
  pthread_mutex_unlock(&c->lock);
}

/* ---------------------------------------------------------------- capabilities */

static bool il__weight_type(il_dtype t) {
  switch (t) {
  case IL_DTYPE_F32: case IL_DTYPE_F16: case IL_DTYPE_BF16: case IL_DTYPE_Q8_0: case IL_DTYPE_Q4_0:
  case IL_DTYPE_Q4_1: case IL_DTYPE_Q4_K: case IL_DTYPE_Q5_K: case IL_DTYPE_Q6_K: case IL_DTYPE_Q5_0:
  case IL_DTYPE_Q5_1: case IL_DTYPE_IQ4_NL: return true;
  default: return false;
  }
}

/* 16-bit activations: every kernel but matmul's (matvec, cuBLAS) and attention's reads and
 * writes them itself (act.cuh); for those two the model widens the activations around the op. */
static bool il__supports(il_backend *b, il_op op, il_dtype wtype, il_dtype atype) {
  const bool half = atype == IL_DTYPE_F16 || atype == IL_DTYPE_BF16;
  if (atype != IL_DTYPE_F32 && !half) return false;
  switch (op) {
  case IL_OP_MATMUL: return !half && il__weight_type(wtype);
  case IL_OP_GET_ROWS: return il__weight_type(wtype);
  case IL_OP_KV_STORE: return il__kv_type_ok(wtype); /* the KV cache type */
  case IL_OP_ATTENTION: return !half && il__kv_type_ok(wtype);
  default: return true;
  }
}

/* cuBLAS's workspace: 32 MiB from Hopper (sm_90) on, 4 MiB before, as the cuBLAS reference
 * recommends for cublasSetWorkspace (PyTorch sizes it the same way). */
static size_t il__blas_ws_bytes(const il__cu *c) { return (size_t)(c->cc_major >= 9 ? 32 : 4) << 20; }

/* Quantized weight types: matvec versions 2 and 3 multiply them with 8-bit activations. */
static bool il__mv_quantized(il_dtype t) {
  return il__weight_type(t) && t != IL_DTYPE_F32 && t != IL_DTYPE_F16 && t != IL_DTYPE_BF16;
}

/* The matmul workspace for passes of max_tokens rows over w[0..n), and whether cuBLAS runs. */
static size_t il__reserve_plan(const il__cu *c, int32_t max_tokens, const il_tensor *w, int n, bool *uses_blas) {
  const int64_t mv_tok = max_tokens < IL__CU_MV_MAX_TOK ? max_tokens : IL__CU_MV_MAX_TOK;
  size_t need = 0;
  bool gemm = false;
  for (int i = 0; i < n; i++) {
    if (!w[i].rows || !w[i].cols) continue;
    size_t k = 0;
    if (max_tokens > IL__CU_MV_MAX_TOK && !c->no_blas) {
      k = il__cu_gemm_work(&w[i], max_tokens);
      gemm = true;
    }
    if (il__mv_quantized(w[i].type) && w[i].cols % 32 == 0) {
      /* versions 2 and 3: the 8-bit activations of one group of tokens */
      size_t m = il__cu_matvec_q8_work(w[i].cols, mv_tok);
      if (il__cu_mv3_work(w[i].cols, mv_tok) > m) m = il__cu_mv3_work(w[i].cols, mv_tok);
      if (m > k) k = m;
    }
    if (k > need) need = k;
  }
  *uses_blas = gemm;
  return need;
}

static size_t il__reserve_bytes(il_backend *b, int32_t max_tokens, const il_tensor *w, int n) {
  const il__cu *c = il__cu_of(b);
  bool blas = false;
  const size_t ws = il__reserve_plan(c, max_tokens, w, n, &blas);
  return ws + (blas && !c->blas_ws ? il__blas_ws_bytes(c) : 0);
}

static il_status il__reserve(il_backend *b, int32_t max_tokens, const il_tensor *w, int n) {
  il__cu *c = il__cu_of(b);
  bool gemm = false;
  const size_t need = il__reserve_plan(c, max_tokens, w, n, &gemm);
  void *ws;
  if (need) IL_TRY(il__cu_workspace(b, need, &ws));
  if (gemm && !c->blas_ws) {
    const size_t bytes = il__blas_ws_bytes(c);
    IL_TRY(il__alloc(b, IL_MEM_WORKSPACE, bytes, "cuBLAS workspace", &c->blas_ws));
    if (!c->dry) IL_CUBLAS_CHECK(c, cublasSetWorkspace(c->blas, c->blas_ws->base, bytes), "reserve", "cuBLAS workspace");
  }
  return IL_OK;
}

static void il__info(il_backend *b, il_backend_info *out) {
  il__cu *c = il__cu_of(b);
  memset(out, 0, sizeof *out);
  char mem[32];
  snprintf(out->kind, sizeof out->kind, "cuda");
  snprintf(out->name, sizeof out->name, "%s", c->spec);
  snprintf(out->device, sizeof out->device, "%s, sm_%d%d, %s, kernels %s %d", c->device_name, c->cc_major, c->cc_minor,
           il_mem_format_bytes(c->total_mem, mem, sizeof mem), c->binary_version ? "SASS" : "PTX",
           c->binary_version ? c->binary_version : c->ptx_version);
  out->threads = 0;
  out->host_visible = false;
  out->dry = c->dry;
}

/* ---------------------------------------------------------------- matmul */

static il_status il__mm_check(il_backend *b, const il_tensor *y, const il_tensor *w, const il_tensor *x) {
  IL_TRY(il__check(b, "matmul", w, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "matmul", x, IL_DTYPE_F32));
  IL_TRY(il__check(b, "matmul", y, IL_DTYPE_F32));
  IL_TRY(il__dense("matmul", x));
  if (!il__weight_type(w->type))
    return il_error(IL_ERR_UNSUPPORTED, "matmul '%s': no CUDA kernel for %s weights", il__nm(w), il_dtype_name(w->type));
  if (x->cols != w->cols || y->rows != x->rows || y->cols != w->rows || (y->stride % 4 && y->rows > 1))
    return il_error(IL_ERR_INVALID_ARG, "matmul '%s' [%lld x %lld]: input [%lld x %lld] and output [%lld x %lld] do not fit",
                    il__nm(w), (long long)w->rows, (long long)w->cols, (long long)x->rows, (long long)x->cols,
                    (long long)y->rows, (long long)y->cols);
  IL_TRY(il__aligned("matmul", w, 2));
  IL_TRY(il__aligned("matmul", x, 4));
  return il__aligned("matmul", y, 4);
}

static int64_t il__ldy(const il_tensor *y) { return y->rows > 1 ? (int64_t)(y->stride / 4) : y->cols; }

/* The matvec kernel for w at nt tokens: the dispatch table's (or IL_CUDA_MATVEC's) choice, then
 * version 2 where version 3 cannot load the rows in 16-byte words, then version 1 where version
 * 2 does not run the type. */
static il__mv_kind il__mv_pick(const il__cu *c, const il_tensor *w, int64_t nt) {
  il__mv_kind k = IL__MV_V1;
  if (c->mv_force >= 0) k = (il__mv_kind)c->mv_force;
  else {
    const int ti = il__mv_type_index(w->type);
    if (ti >= 0) k = (il__mv_kind)c->mv_table.kind[ti][il__mv_class(w->type, w->rows, w->cols)][il__mv_tok_bucket(nt)];
  }
  if (k >= IL__MV_FIRST_V3 && !il__cu_mv3_eligible(w->type, w->cols, il__ptr(*w), w->stride, w->rows)) k = IL__MV_V2;
  if (k == IL__MV_V2 && !(il__cu_matvec_q8_supports(w->type) && w->cols % 32 == 0)) k = IL__MV_V1;
  return k;
}

/* Tokens [t0, t0 + nt) of y[i] = x w[i]^T for the n matrices in one version-3 launch (after
 * one quantization of x for quantized weights): where every matrix is of one type, has rows
 * version 3 can load, and has rows (Q, K and V of a layer; gate and up). The kernel is the
 * largest matrix's pick: a row's result does not depend on the kernel's warps or chunks, so
 * the bits are those of one launch per matrix. IL_ERR_UNSUPPORTED (nothing launched): run them
 * one by one. */
static il_status il__mv_run_one_launch(il_backend *b, int n, const il_tensor *y, const il_tensor *w, const float *xp,
                                       int64_t n_in, int64_t t0, int64_t nt, void *work) {
  il__cu *c = il__cu_of(b);
  il__mv3_mat m[IL__MV3_MAX_MATS];
  int big = 0;
  for (int i = 0; i < n; i++) {
    if (w[i].type != w[0].type || !w[i].rows || il__mv_pick(c, &w[i], nt) < IL__MV_FIRST_V3) return IL_ERR_UNSUPPORTED;
    if (w[i].rows > w[big].rows) big = i;
    const int64_t ldy = il__ldy(&y[i]);
    m[i] = (il__mv3_mat){il__ptr(w[i]), w[i].stride, w[i].rows, (float *)il__ptr(y[i]) + t0 * ldy, ldy};
  }
  const il__mv_kind k = il__mv_pick(c, &w[big], nt);
  const char *nm = il__nm(&w[0]);
  if (il__mv_quantized(w[0].type)) IL_CUDA_CHECK(c, il__cu_mv3_quant(c->compute, xp, n_in, nt, work), "matmul", nm);
  IL_CUDA_CHECK(c, il__cu_mv3_multi(c->compute, k, w[0].type, n, m, n_in, xp, work, nt), "matmul", nm);
  return IL_OK;
}

/* y[i] = x w[i]^T for i < n through matvec, 8 tokens at a time (views checked). Version 3 on
 * quantized weights quantizes each group of x once, for every matrix of the group (matmul_multi:
 * Q/K/V, gate/up); version 2 quantizes for itself (into the same workspace). */
static il_status il__mv_run(il_backend *b, int n, const il_tensor *y, const il_tensor *w, il_tensor x) {
  il__cu *c = il__cu_of(b);
  const int64_t g = x.rows < IL__CU_MV_MAX_TOK ? x.rows : IL__CU_MV_MAX_TOK;
  size_t need = 0;
  for (int i = 0; i < n; i++)
    if (il__mv_quantized(w[i].type) && w[i].cols % 32 == 0) {
      const size_t m2 = il__cu_matvec_q8_work(w[i].cols, g), m3 = il__cu_mv3_work(w[i].cols, g);
      const size_t m = m2 > m3 ? m2 : m3;
      if (m > need) need = m;
    }
  void *work = NULL;
  if (need) IL_TRY(il__cu_workspace(b, need, &work));
  for (int64_t t0 = 0; t0 < x.rows; t0 += IL__CU_MV_MAX_TOK) {
    const int64_t nt = x.rows - t0 < IL__CU_MV_MAX_TOK ? x.rows - t0 : IL__CU_MV_MAX_TOK;
    const float *xp = (const float *)il__ptr(x) + t0 * x.cols;
    if (n >= 2 && n <= IL__MV3_MAX_MATS) {
      il_status st = il__mv_run_one_launch(b, n, y, w, xp, x.cols, t0, nt, work);
      if (st != IL_ERR_UNSUPPORTED) {
        IL_TRY(st);
        continue;
      }
    }
    bool quantized = false; /* work holds this group's 8-bit activations */
    for (int i = 0; i < n; i++) {
      if (!w[i].rows) continue;
      const int64_t ldy = il__ldy(&y[i]);
      float *yp = (float *)il__ptr(y[i]) + t0 * ldy;
      const il__mv_kind k = il__mv_pick(c, &w[i], nt);
      const char *nm = il__nm(&w[i]);
      if (k == IL__MV_V1) {
        IL_CUDA_CHECK(c, il__cu_matvec(c->compute, w[i].type, il__ptr(w[i]), w[i].stride, w[i].rows, w[i].cols, xp, nt, yp,
                                       ldy),
                      "matmul", nm);
      } else if (k == IL__MV_V2) {
        IL_CUDA_CHECK(c, il__cu_matvec_q8(c->compute, w[i].type, il__ptr(w[i]), w[i].stride, w[i].rows, w[i].cols, xp, nt,
                                          yp, ldy, work),
                      "matmul", nm);
        quantized = false; /* its own layout of the same values: not relied on */
      } else {
        if (il__mv_quantized(w[i].type) && !quantized) {
          IL_CUDA_CHECK(c, il__cu_mv3_quant(c->compute, xp, w[i].cols, nt, work), "matmul", nm);
          quantized = true;
        }
        IL_CUDA_CHECK(c, il__cu_mv3(c->compute, k, w[i].type, il__ptr(w[i]), w[i].stride, w[i].rows, w[i].cols, xp, work,
                                    nt, yp, ldy),
                      "matmul", nm);
      }
    }
  }
  return IL_OK;
}

/* Generation (up to 8 tokens) reads the weights once in matvec; a batch goes to cuBLAS, or
 * to matvec in groups of 8 tokens where cuBLAS cannot take the operands (or IL_CUDA_NO_CUBLAS=1
 * in the environment asks for it: gpu-check runs the op test that way too, so the fallback is
 * tested). Which matvec: il__mv_pick. */
static il_status il__matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__mm_check(b, &y, &w, &x));
  if (!x.rows || !w.rows) return IL_OK;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "matmul", il__nm(&w));
  if (x.rows > IL__CU_MV_MAX_TOK && !c->no_blas) {
    il_status st = il__cu_gemm(b, y, w, x);
    if (st != IL_ERR_UNSUPPORTED) return st;
  }
  return il__mv_run(b, 1, &y, &w, x);
}

static il_status il__add_bias(il_backend *b, il_tensor y, il_tensor bias);

/* Generation: the matrices that read the same x share its 8-bit activations (il__mv_run). */
static il_status il__matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, const il_tensor *bias,
                                  il_tensor x) {
  il__cu *c = il__cu_of(b);
  if (x.rows > IL__CU_MV_MAX_TOK && !c->no_blas) {
    for (int i = 0; i < n; i++) IL_TRY(il__matmul(b, y[i], w[i], x));
  } else {
    for (int i = 0; i < n; i++) IL_TRY(il__mm_check(b, &y[i], &w[i], &x));
    if (x.rows && n >= 1) {
      IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "matmul", il__nm(&w[0]));
      IL_TRY(il__mv_run(b, n, y, w, x));
    }
  }
  for (int i = 0; i < n; i++) {
    if (bias && bias[i].buf) IL_TRY(il__add_bias(b, y[i], bias[i]));
    IL_TRY(il__observe(b, IL_OP_MATMUL, y[i], y[i].type));
  }
  return IL_OK;
}

/* ---------------------------------------------------------------- the other ops */

/* Activations are F32, F16 or BF16: the kernels load and store them (act.cuh). An op with a
 * 16-bit output runs on it directly, except (1) with an observer, which must see the F32 result
 * before narrowing (backend.h): the op then computes into reserve_act's F32 scratch chunk by
 * chunk, reports it and narrows it with copy's conversion, the same bits; and (2) rope_kv_store
 * storing k into cells of another type than k's, from k's rotated F32 values. */

static size_t il__esz(const il_tensor *t) { return il_tensor_row_bytes(t->type, 1); }

/* Entries [r0, r0 + n) of an I32 vector (ids, positions, slots). */
static il_tensor il__ids_at(il_tensor t, int64_t r0, int64_t n) {
  t.off += (size_t)r0 * 4;
  t.cols = n;
  t.stride = (size_t)n * 4;
  return t;
}

/* F32 scratch for rows x t's columns at *used bytes into reserve_act's buffer (named as t). */
static il_status il__act_tmp(il_backend *b, const il_tensor *t, int64_t rows, size_t *used, il_tensor *out) {
  il__cu *c = il__cu_of(b);
  const size_t bytes = (size_t)rows * (size_t)t->cols * 4;
  if (!c->act || *used + bytes > c->act->size)
    return il_error(IL_ERR_INVALID_ARG, "'%s' is %s: %s (%lld rows of %lld columns)", il__nm(t), il_dtype_name(t->type),
                    c->act ? "the op's f32 copies do not fit the scratch of reserve_act"
                           : "its f32 result needs the scratch of reserve_act first",
                    (long long)rows, (long long)t->cols);
  *out = (il_tensor){c->act, *used, (size_t)t->cols * 4, rows, t->cols, IL_DTYPE_F32, t->name};
  *used += bytes;
  return IL_OK;
}

/* dst = src converted between F32 and F16/BF16 (views checked). */
static il_status il__convert(il__cu *c, const char *op, il_tensor dst, il_tensor src) {
  IL_CUDA_CHECK(c, il__cu_convert(c->compute, il__ptr(dst), dst.stride, il__half_kind(dst.type), il__ptr(src), src.stride,
                                  il__half_kind(src.type), src.rows, src.cols),
                op, il__nm(&dst));
  return IL_OK;
}

/* One single-output op, its output y given apart from its other arguments so that it can be
 * run into F32 scratch (il__ew_run). */
typedef struct {
  il_op op;
  const char *name;    /* for messages: "rmsnorm" */
  bool in_place;       /* y is also an input (rope, scale, swiglu, geglu, add, add_bias) */
  il_tensor x, w, aux; /* rmsnorm: x, g in w; binary ops: x; get_rows: w and ids in aux; add_bias: bias in w;
                          rope: positions in aux */
  float s;             /* rmsnorm's eps, scale's factor */
  const il_rope_params *rp;
} il__ew;

/* e on rows [r0, r0 + y.rows) of its arguments, written to y. */
static il_status il__ew_launch(il_backend *b, const il__ew *e, il_tensor y, int64_t r0) {
  il__cu *c = il__cu_of(b);
  const int64_t n = y.rows * y.cols;
  const il_tensor x = il_tensor_rows(e->x, r0, y.rows);
  const char *nm = il__nm(&y);
  switch (e->op) {
  case IL_OP_RMSNORM:
    IL_CUDA_CHECK(c, il__cu_rmsnorm(c->compute, il__ptr(y), y.stride, y.type, il__ptr(x), x.stride, x.type, il__ptr(e->w),
                                    y.rows, y.cols, e->s),
                  "rmsnorm", il__nm(&e->x));
    return IL_OK;
  case IL_OP_GET_ROWS: {
    const int id = il__note(c, "get_rows from", &e->w);
    IL_CUDA_CHECK(c, il__cu_dequant(c->compute, e->w.type, il__ptr(e->w), e->w.stride, e->w.rows, e->w.cols,
                                    il__ptr(il__ids_at(e->aux, r0, y.rows)), y.rows, il__ptr(y),
                                    y.rows > 1 ? y.stride : il_tensor_row_bytes(y.type, y.cols), y.type, c->fault, id),
                  "get_rows", il__nm(&e->w));
    return IL_OK;
  }
  case IL_OP_ROPE: {
    const il_rope_params *p = e->rp;
    IL_CUDA_CHECK(c, il__cu_rope(c->compute, il__ptr(y), y.stride, y.type, y.rows, il__ptr(il__ids_at(e->aux, r0, y.rows)),
                                 p->n_heads, p->head_dim, p->n_rot, p->base, p->scale > 0 ? p->scale : 1.0f, (int)p->mode),
                  "rope", nm);
    return IL_OK;
  }
  case IL_OP_SCALE: IL_CUDA_CHECK(c, il__cu_scale(c->compute, il__ptr(y), y.type, e->s, n), "scale", nm); return IL_OK;
  case IL_OP_SWIGLU:
    IL_CUDA_CHECK(c, il__cu_swiglu(c->compute, il__ptr(y), y.type, il__ptr(x), x.type, n), "swiglu", nm);
    return IL_OK;
  case IL_OP_GEGLU:
    IL_CUDA_CHECK(c, il__cu_geglu(c->compute, il__ptr(y), y.type, il__ptr(x), x.type, n), "geglu", nm);
    return IL_OK;
  case IL_OP_ADD:
    if (e->w.buf) { /* add_bias */
      IL_CUDA_CHECK(c, il__cu_add_bias(c->compute, il__ptr(y), y.stride, y.type, y.rows, y.cols, il__ptr(e->w)), "add_bias",
                    nm);
      return IL_OK;
    }
    IL_CUDA_CHECK(c, il__cu_add(c->compute, il__ptr(y), y.type, il__ptr(x), x.type, n), "add", nm);
    return IL_OK;
  default: return il_error(IL_ERR_INTERNAL, "cuda: %s is not a single-output op", e->name);
  }
}

/* Runs e into y (views checked): on y itself, or, for a 16-bit y with an observer, chunk by
 * chunk into F32 scratch (widened from y first when y is also an input), reported, narrowed. An
 * F32 y is reported by the op table's wrapper. */
static il_status il__ew_run(il_backend *b, const il__ew *e, il_tensor y) {
  il__cu *c = il__cu_of(b);
  if (!y.rows || !y.cols) return IL_OK;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), e->name, il__nm(&y));
  if (!il__half(y.type) || !b->observer.fn) return il__ew_launch(b, e, y, 0);
  const int64_t step = c->act_rows > 0 ? c->act_rows : y.rows;
  for (int64_t r0 = 0; r0 < y.rows; r0 += step) {
    const int64_t rows = y.rows - r0 < step ? y.rows - r0 : step;
    const il_tensor yr = il_tensor_rows(y, r0, rows);
    il_tensor t;
    size_t used = 0;
    IL_TRY(il__act_tmp(b, &y, rows, &used, &t));
    if (e->in_place) IL_TRY(il__convert(c, e->name, t, yr));
    IL_TRY(il__ew_launch(b, e, t, r0));
    IL_TRY(il__observe(b, e->op, t, y.type));
    IL_TRY(il__convert(c, e->name, yr, t));
  }
  return IL_OK;
}

static il_status il__get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor ids) {
  IL_TRY(il__get_rows_check(b, &y, &w, &ids, true));
  if (!il__weight_type(w.type))
    return il_error(IL_ERR_UNSUPPORTED, "get_rows '%s': no CUDA decoder for %s", il__nm(&w), il_dtype_name(w.type));
  IL_TRY(il__aligned("get_rows", &w, 2));
  IL_TRY(il__aligned("get_rows", &y, il__esz(&y)));
  IL_TRY(il__aligned("get_rows", &ids, 4));
  const il__ew e = {.op = IL_OP_GET_ROWS, .name = "get_rows", .x = y, .w = w, .aux = ids};
  return il__ew_run(b, &e, y);
}

static il_status il__rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  IL_TRY(il__rmsnorm_check(b, &y, &x, &g, true));
  IL_TRY(il__aligned("rmsnorm", &y, il__esz(&y)));
  IL_TRY(il__aligned("rmsnorm", &x, il__esz(&x)));
  IL_TRY(il__aligned("rmsnorm", &g, 4));
  const il__ew e = {.op = IL_OP_RMSNORM, .name = "rmsnorm", .x = x, .w = g, .s = eps};
  return il__ew_run(b, &e, y);
}

static il_status il__rope(il_backend *b, il_tensor x, il_tensor pos, const il_rope_params *p) {
  IL_TRY(il__rope_check(b, &x, &pos, p, true));
  IL_TRY(il__aligned("rope", &x, il__esz(&x)));
  IL_TRY(il__aligned("rope", &pos, 4));
  const il__ew e = {.op = IL_OP_ROPE, .name = "rope", .in_place = true, .x = x, .aux = pos, .rp = p};
  return il__ew_run(b, &e, x);
}

/* What the store kernels need beyond il__kv_store_check: q8_0 cells take rows of whole 32-value
 * blocks; rows, cells and slots aligned to their elements on the device. */
static il_status il__kv_rows_check(const char *op, const il_kv_view *kv, const il_tensor *k, const il_tensor *v,
                                   const il_tensor *slots) {
  if (kv->k.type == IL_DTYPE_Q8_0 && k->cols % 32)
    return il_error(IL_ERR_UNSUPPORTED, "kv_store: q8_0 cells need rows of a multiple of 32 values, not %lld",
                    (long long)k->cols);
  IL_TRY(il__aligned(op, slots, 4));
  IL_TRY(il__aligned(op, k, il__esz(k)));
  IL_TRY(il__aligned(op, v, il__esz(v)));
  IL_TRY(il__aligned(op, &kv->k, kv->k.type == IL_DTYPE_F32 ? 1 : 2));
  return il__aligned(op, &kv->v, kv->v.type == IL_DTYPE_F32 ? 1 : 2);
}

/* Rows are activations (K and V of one type); cells F32, F16, BF16 or Q8_0 (--kv-type),
 * converted on the way in. */
static il_status il__kv_store(il_backend *b, const il_kv_view *kv, il_tensor k, il_tensor v, il_tensor slots) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__kv_store_check(b, kv, &k, &v, &slots, il__kv_type_ok(kv->k.type), true));
  if (k.type != v.type)
    return il_error(IL_ERR_UNSUPPORTED, "kv_store: rows '%s' are %s and '%s' %s; the kernel stores rows of one type",
                    il__nm(&k), il_dtype_name(k.type), il__nm(&v), il_dtype_name(v.type));
  IL_TRY(il__kv_rows_check("kv_store", kv, &k, &v, &slots));
  if (!k.rows) return IL_OK;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "kv_store", il__nm(&kv->k));
  const int id = il__note(c, "kv_store into", &kv->k);
  /* a q8_0 row that cannot be quantized is named by its rows tensor, as on the CPU */
  il__note_rows(c, id, &k, &v);
  IL_CUDA_CHECK(c, il__cu_kv_store(c->compute, il__ptr(kv->k), kv->k.stride, il__ptr(kv->v), kv->v.stride, kv->k.rows,
                                   kv->k.type, il__ptr(k), k.stride, il__ptr(v), v.stride, k.type, k.cols, il__ptr(slots),
                                   k.rows, c->fault, id),
                "kv_store", il__nm(&kv->k));
  return IL_OK;
}

/* rope(k) then kv_store, k stored from its rotated F32 values: in place where the cells are of
 * k's own type (rounding once to it is the same bits), else through F32 scratch. */
static il_status il__rope_k_store(il_backend *b, il_tensor k, il_tensor v, il_tensor pos, const il_rope_params *rk,
                                  const il_kv_view *kv, il_tensor slots) {
  il__cu *c = il__cu_of(b);
  if ((!il__half(k.type) && !il__half(v.type)) || (k.type == v.type && kv->k.type == k.type)) {
    const il_op_observer o = b->observer; /* rope_kv_store reports q only */
    b->observer = (il_op_observer){0};
    const il_status st = il__rope(b, k, pos, rk);
    b->observer = o;
    IL_TRY(st);
    return il__kv_store(b, kv, k, v, slots);
  }
  IL_TRY(il__rope_check(b, &k, &pos, rk, true));
  IL_TRY(il__check_act(b, "rope_kv_store", &v, true));
  IL_TRY(il__same_shape("rope_kv_store", &v, &k));
  IL_TRY(il__aligned("rope_kv_store", &k, il__esz(&k)));
  IL_TRY(il__aligned("rope_kv_store", &v, il__esz(&v)));
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "rope_kv_store", il__nm(&k));
  const int64_t step = c->act_rows > 0 ? c->act_rows : k.rows;
  for (int64_t r0 = 0; r0 < k.rows; r0 += step) {
    const int64_t rows = k.rows - r0 < step ? k.rows - r0 : step;
    il_tensor kk = il_tensor_rows(k, r0, rows), vv = il_tensor_rows(v, r0, rows);
    size_t used = 0;
    const il_tensor ks = kk, vs = vv;
    if (il__half(k.type)) {
      IL_TRY(il__act_tmp(b, &k, rows, &used, &kk));
      IL_TRY(il__convert(c, "rope_kv_store", kk, ks));
    }
    if (il__half(v.type)) {
      IL_TRY(il__act_tmp(b, &v, rows, &used, &vv));
      IL_TRY(il__convert(c, "rope_kv_store", vv, vs));
    }
    const il_tensor at = il__ids_at(pos, r0, rows);
    IL_TRY(il__rope(b, kk, at, rk));
    IL_TRY(il__kv_store(b, kv, kk, vv, il__ids_at(slots, r0, rows)));
  }
  return IL_OK;
}

/* The shared elementwise checks, and element alignment on the device. */
static il_status il__cu_elementwise_check(il_backend *b, const char *op, const il_tensor *y, const il_tensor *x) {
  IL_TRY(il__elementwise_check(b, op, y, x, true));
  IL_TRY(il__aligned(op, y, il__esz(y)));
  return il__aligned(op, x, il__esz(x));
}

static il_status il__binary(il_backend *b, il_op op, const char *nm, il_tensor y, il_tensor x) {
  IL_TRY(il__cu_elementwise_check(b, nm, &y, &x));
  const il__ew e = {.op = op, .name = nm, .in_place = true, .x = x};
  return il__ew_run(b, &e, y);
}

static il_status il__swiglu(il_backend *b, il_tensor gate, il_tensor up) { return il__binary(b, IL_OP_SWIGLU, "swiglu", gate, up); }
static il_status il__geglu(il_backend *b, il_tensor gate, il_tensor up) { return il__binary(b, IL_OP_GEGLU, "geglu", gate, up); }
static il_status il__add(il_backend *b, il_tensor y, il_tensor x) { return il__binary(b, IL_OP_ADD, "add", y, x); }

static il_status il__scale(il_backend *b, il_tensor x, float s) {
  IL_TRY(il__cu_elementwise_check(b, "scale", &x, &x));
  const il__ew e = {.op = IL_OP_SCALE, .name = "scale", .in_place = true, .x = x, .s = s};
  return il__ew_run(b, &e, x);
}

static il_status il__add_bias(il_backend *b, il_tensor y, il_tensor bias) {
  IL_TRY(il__add_bias_check(b, &y, &bias, true));
  IL_TRY(il__aligned("add_bias", &y, il__esz(&y)));
  IL_TRY(il__aligned("add_bias", &bias, 4));
  const il__ew e = {.op = IL_OP_ADD, .name = "add_bias", .in_place = true, .x = y, .w = bias};
  return il__ew_run(b, &e, y);
}

/* reserve_act: the F32 scratch of il__ew_run and il__rope_k_store, chunks of `rows` rows. */
static il_status il__reserve_act(il_backend *b, il_dtype atype, int32_t rows, int64_t cols) {
  il__cu *c = il__cu_of(b);
  if (c->act) il__free(b, c->act);
  c->act = NULL;
  c->act_rows = 0;
  if (rows <= 0) return IL_OK;
  IL_TRY(il__reserve_act_check(atype, rows, cols));
  IL_TRY(il__alloc(b, IL_MEM_ACTIVATIONS, (size_t)rows * (size_t)cols * 4, "activations: f32 chunk", &c->act));
  c->act_rows = rows;
  return IL_OK;
}

/* Synchronous: the count is the answer the caller waits for. */
static il_status il__count_nonfinite(il_backend *b, il_tensor x, int64_t *out) {
  il__cu *c = il__cu_of(b);
  *out = 0;
  IL_TRY(il__check(b, "count_nonfinite", &x, IL_DTYPE_F32));
  IL_TRY(il__aligned("count_nonfinite", &x, 4));
  const char *nm = il__nm(&x);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "count_nonfinite", nm);
  IL_CUDA_CHECK(c, cudaMemsetAsync(c->count, 0, sizeof *c->count, c->compute), "count_nonfinite", nm);
  IL_CUDA_CHECK(c, il__cu_count_nonfinite(c->compute, il__ptr(x), x.stride, x.rows, x.cols, c->count), "count_nonfinite", nm);
  IL_CUDA_CHECK(c, cudaMemcpyAsync(c->count_host, c->count, sizeof *c->count, cudaMemcpyDeviceToHost, c->compute),
                "count_nonfinite", nm);
  IL_TRY(il__drain(c, "count_nonfinite", nm));
  *out = (int64_t)*c->count_host;
  return IL_OK;
}

/* Activations stored at F16/BF16 precision between ops (--dtype): F32 values rounded in place. */
static il_status il__round_to(il_backend *b, il_tensor x, il_dtype type) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__check(b, "round_to", &x, IL_DTYPE_F32));
  if (type == IL_DTYPE_F32) return IL_OK;
  if (type != IL_DTYPE_F16 && type != IL_DTYPE_BF16)
    return il_error(IL_ERR_UNSUPPORTED, "round_to: activations are f32, f16 or bf16, not %s", il_dtype_name(type));
  IL_TRY(il__aligned("round_to", &x, 4));
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "round_to", il__nm(&x));
  IL_CUDA_CHECK(c, il__cu_round_to(c->compute, il__ptr(x), x.stride, x.rows, x.cols, type == IL_DTYPE_BF16), "round_to",
                il__nm(&x));
  return IL_OK;
}

/* Synchronous, like count_nonfinite: the numbers are what the caller waits for. */
static il_status il__value_stats(il_backend *b, il_tensor x, int64_t *nonfinite, float *absmax) {
  il__cu *c = il__cu_of(b);
  *nonfinite = 0, *absmax = 0;
  IL_TRY(il__check(b, "value_stats", &x, IL_DTYPE_F32));
  IL_TRY(il__aligned("value_stats", &x, 4));
  const char *nm = il__nm(&x);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "value_stats", nm);
  IL_CUDA_CHECK(c, cudaMemsetAsync(c->count, 0, 2 * sizeof *c->count, c->compute), "value_stats", nm);
  IL_CUDA_CHECK(c, il__cu_value_stats(c->compute, il__ptr(x), x.stride, x.rows, x.cols, c->count), "value_stats", nm);
  IL_CUDA_CHECK(c, cudaMemcpyAsync(c->count_host, c->count, 2 * sizeof *c->count, cudaMemcpyDeviceToHost, c->compute),
                "value_stats", nm);
  IL_TRY(il__drain(c, "value_stats", nm));
  *nonfinite = (int64_t)c->count_host[0];
  const uint32_t bits = (uint32_t)c->count_host[1];
  memcpy(absmax, &bits, 4);
  return IL_OK;
}

/* ---------------------------------------------------------------- events */

struct il_event {
  cudaEvent_t e;
  bool copy; /* recorded on the copy stream by upload_async */
};

static il_status il__event_record(il_backend *b, il_event **out) {
  il__cu *c = il__cu_of(b);
  *out = NULL;
  il_event *ev = il_mem_alloc(IL_MEM_OTHER, sizeof *ev, "event");
  if (!ev) return IL_ERR_OOM;
  ev->copy = false;
  cudaError_t e = cudaSetDevice(c->dev);
  if (e == cudaSuccess) e = cudaEventCreate(&ev->e);
  if (e == cudaSuccess) {
    e = cudaEventRecord(ev->e, c->compute);
    if (e != cudaSuccess) (void)cudaEventDestroy(ev->e);
  }
  if (e != cudaSuccess) {
    il_mem_free(ev);
    return il__cu_fail(c, e, "event_record", NULL, "cudaEventCreate/cudaEventRecord", __FILE__, __LINE__);
  }
  *out = ev;
  return IL_OK;
}

static il_status il__event_elapsed(il_backend *b, il_event *a, il_event *e, double *seconds) {
  il__cu *c = il__cu_of(b);
  *seconds = 0;
  float ms = 0;
  IL_CUDA_CHECK(c, cudaEventSynchronize(e->e), "event_elapsed", NULL);
  IL_CUDA_CHECK(c, cudaEventElapsedTime(&ms, a->e, e->e), "event_elapsed", NULL);
  *seconds = ms * 1e-3;
  return IL_OK;
}

/* The upload as upload does it (through the pinned staging buffers, so src may change as soon
 * as this returns), but the compute stream does not wait for it: *done, recorded on the copy
 * stream after the last chunk, is what event_wait makes the ops wait for. The copy stream
 * still waits for the ops queued before it, as every upload does (they may read dst). */
static il_status il__upload_async(il_backend *b, il_tensor dst, const void *src, size_t bytes, il_event **done) {
  il__cu *c = il__cu_of(b);
  *done = NULL;
  IL_TRY(il__check(b, "upload_async", &dst, IL_DTYPE_COUNT));
  il_event *ev = il_mem_alloc(IL_MEM_OTHER, sizeof *ev, "upload event");
  if (!ev) return IL_ERR_OOM;
  ev->copy = true;
  pthread_mutex_lock(&c->xfer_lock);
  il_status st = il__upload_locked(c, dst, src, bytes, false);
  cudaError_t e = cudaSuccess;
  if (st == IL_OK) e = cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
  if (st == IL_OK && e == cudaSuccess) {
    e = cudaEventRecord(ev->e, c->copy);
    if (e != cudaSuccess) (void)cudaEventDestroy(ev->e);
  }
  pthread_mutex_unlock(&c->xfer_lock);
  if (st == IL_OK && e != cudaSuccess)
    st = il__cu_fail(c, e, "upload_async", il__nm(&dst), "cudaEventCreate/cudaEventRecord", __FILE__, __LINE__);
  if (st != IL_OK) {
    il_mem_free(ev);
    return st;
  }
  *done = ev;
  return IL_OK;
}

/* The compute stream waits for e on the device; the host does not wait. */
static il_status il__event_wait(il_backend *b, il_event *e) {
  il__cu *c = il__cu_of(b);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "event_wait", NULL);
  IL_CUDA_CHECK(c, cudaStreamWaitEvent(c->compute, e->e, 0), "event_wait", NULL);
  return IL_OK;
}

/* NCCL's view of t: the device address, the compute stream, the ordinal. A dry device (the
 * planner's) has no memory behind its addresses. */
static il_status il__native(il_backend *b, il_tensor t, void **ptr, void **stream, int *device) {
  il__cu *c = il__cu_of(b);
  if (c->dry) return il_error(IL_ERR_UNSUPPORTED, "cuda:%d,dry: no device memory for a collective", c->dev);
  IL_TRY(il__check(b, "native", &t, IL_DTYPE_COUNT));
  *ptr = il__ptr(t);
  *stream = (void *)c->compute;
  *device = c->dev;
  return IL_OK;
}

static void il__event_free(il_backend *b, il_event *e) {
  if (!e) return;
  if (e->copy) (void)cudaEventSynchronize(e->e); /* its staging copy may still be in flight */
  (void)cudaEventDestroy(e->e);
  il_mem_free(e);
}

/* ---------------------------------------------------------------- lifetime */

static void il__destroy(il_backend *b) {
  if (!b) return;
  il__cu *c = il__cu_of(b);
  if (c) {
    /* an open that failed on a bad ordinal left nothing on a device: no cudaSetDevice then
     * (compute-sanitizer reports that call's error) */
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) == cudaSuccess && c->dev >= 0 && c->dev < n_dev) (void)cudaSetDevice(c->dev);
    if (c->compute) (void)cudaStreamSynchronize(c->compute);
    if (c->copy) (void)cudaStreamSynchronize(c->copy);
    if (c->ws) il__free(b, c->ws);
    if (c->act) il__free(b, c->act);
    if (c->blas_ws) il__free(b, c->blas_ws);
    if (c->blas) (void)cublasDestroy(c->blas);
    il_caching_destroy(c->alloc);
    for (int i = 0; i < 2; i++) {
      if (c->stage_done[i]) (void)cudaEventDestroy(c->stage_done[i]);
      if (c->stage[i]) {
        (void)cudaFreeHost(c->stage[i]);
        il_mem_space_release(il_mem_host(), IL_MEM_STAGING, IL__CU_STAGE_BYTES);
      }
    }
    if (c->join) (void)cudaEventDestroy(c->join);
    if (c->fault) (void)cudaFree(c->fault);
    if (c->count) (void)cudaFree(c->count);
    if (c->fault_host) (void)cudaFreeHost(c->fault_host);
    if (c->compute) (void)cudaStreamDestroy(c->compute);
    if (c->copy) (void)cudaStreamDestroy(c->copy);
    if (c->space) il_mem_space_free(c->space);
    il_mem_free(c->cap_names);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->xfer_lock);
    il_mem_free(c);
  }
  il_mem_free(b);
}

/* The ops as the table lists them: each reports its output to the caller's observer
 * (backend.h; the numerics check). */
/* An F32 output is reported here; a 16-bit one by il__ew_run, before it is narrowed. */
static il_status il__observe_f32(il_backend *b, il_op op, il_tensor y) {
  return y.type == IL_DTYPE_F32 ? il__observe(b, op, y, y.type) : IL_OK;
}
static il_status il__t_get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor ids) {
  IL_TRY(il__get_rows(b, y, w, ids));
  return il__observe_f32(b, IL_OP_GET_ROWS, y);
}
static il_status il__t_matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  IL_TRY(il__matmul(b, y, w, x));
  return il__observe(b, IL_OP_MATMUL, y, y.type);
}
static il_status il__t_rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  IL_TRY(il__rmsnorm(b, y, x, g, eps));
  return il__observe_f32(b, IL_OP_RMSNORM, y);
}
static il_status il__t_rope(il_backend *b, il_tensor x, il_tensor pos, const il_rope_params *p) {
  IL_TRY(il__rope(b, x, pos, p));
  return il__observe_f32(b, IL_OP_ROPE, x);
}
static il__cu_rope_p il__rope_p(const il_rope_params *p) {
  return (il__cu_rope_p){p->n_heads, p->head_dim, p->n_rot, p->base, p->scale > 0 ? p->scale : 1.0f, (int)p->mode};
}

/* rope(q), rope(k) and kv_store as one launch (il__cu_rope_kv_store), the views checked as
 * each op checks them. k keeps its rotated values where the composition (il__rope_k_store)
 * rotates it in place. k's row fits the kernel's shared memory (IL__CU_RKV_MAX_COLS). */
static il_status il__rope_kv_store1(il_backend *b, il_tensor q, il_tensor k, il_tensor v, il_tensor pos,
                                    const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv,
                                    il_tensor slots) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__rope_check(b, &q, &pos, rq, true));
  IL_TRY(il__rope_check(b, &k, &pos, rk, true));
  IL_TRY(il__kv_store_check(b, kv, &k, &v, &slots, il__kv_type_ok(kv->k.type), true));
  IL_TRY(il__kv_rows_check("rope_kv_store", kv, &k, &v, &slots));
  IL_TRY(il__aligned("rope_kv_store", &q, il__esz(&q)));
  IL_TRY(il__aligned("rope_kv_store", &pos, 4));
  if (!k.rows) return IL_OK;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "rope_kv_store", il__nm(&k));
  const int id = il__note(c, "kv_store into", &kv->k);
  il__note_rows(c, id, &k, &v);
  const il__cu_rkv a = {
      .q = il__ptr(q), .k = il__ptr(k), .v = il__ptr(v), .qs = q.stride, .ks = k.stride, .vs = v.stride,
      .qt = q.type, .kt = k.type, .vt = v.type, .cells = kv->k.type, .rq = il__rope_p(rq), .rk = il__rope_p(rk),
      .cols = k.cols, .n = k.rows, .n_cells = kv->k.rows,
      .k_back = (!il__half(k.type) && !il__half(v.type)) || (k.type == v.type && kv->k.type == k.type),
      .kc = il__ptr(kv->k), .vc = il__ptr(kv->v), .kcs = kv->k.stride, .vcs = kv->v.stride, .pos = il__ptr(pos),
      .slots = il__ptr(slots)};
  IL_CUDA_CHECK(c, il__cu_rope_kv_store(c->compute, &a, c->fault, id), "rope_kv_store", il__nm(&kv->k));
  return IL_OK;
}

/* One launch, unless an observer must see 16-bit q in F32 (il__observe_f32's scratch) or k's
 * row is wider than the kernel's shared memory: then the composition of rope, rope and
 * kv_store (k rotated in place, or in F32 scratch: il__rope_k_store). */
static il_status il__t_rope_kv_store(il_backend *b, il_tensor q, il_tensor k, il_tensor v, il_tensor pos,
                                     const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv,
                                     il_tensor slots) {
  if ((!b->observer.fn || !il__half(q.type)) && k.cols <= IL__CU_RKV_MAX_COLS) {
    IL_TRY(il__rope_kv_store1(b, q, k, v, pos, rq, rk, kv, slots));
    return il__observe_f32(b, IL_OP_ROPE, q);
  }
  IL_TRY(il__rope(b, q, pos, rq));
  IL_TRY(il__rope_k_store(b, k, v, pos, rk, kv, slots));
  return il__observe_f32(b, IL_OP_ROPE, q);
}
static il_status il__t_swiglu(il_backend *b, il_tensor gate, il_tensor up) {
  IL_TRY(il__swiglu(b, gate, up));
  return il__observe_f32(b, IL_OP_SWIGLU, gate);
}
static il_status il__t_geglu(il_backend *b, il_tensor gate, il_tensor up) {
  IL_TRY(il__geglu(b, gate, up));
  return il__observe_f32(b, IL_OP_GEGLU, gate);
}
static il_status il__t_scale(il_backend *b, il_tensor x, float s) {
  IL_TRY(il__scale(b, x, s));
  return il__observe_f32(b, IL_OP_SCALE, x);
}
static il_status il__t_add(il_backend *b, il_tensor y, il_tensor x) {
  IL_TRY(il__add(b, y, x));
  return il__observe_f32(b, IL_OP_ADD, y);
}
static il_status il__t_add_bias(il_backend *b, il_tensor y, il_tensor bias) {
  IL_TRY(il__add_bias(b, y, bias));
  return il__observe_f32(b, IL_OP_ADD, y);
}

/* Asynchronous, as the ops are: the ids are read back by a download (4 bytes a row). */
static il_status il__sample(il_backend *b, il_tensor ids, il_tensor logits, il_tensor u, const il_sample_args *a) {
  il__cu *c = il__cu_of(b);
  IL_TRY(il__sample_check(b, &ids, &logits, &u));
  IL_TRY(il__aligned("sample", &logits, 4));
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "sample", il__nm(&logits));
  IL_CUDA_CHECK(c, il__cu_sample(c->compute, il__ptr(ids), il__ptr(logits), logits.stride, logits.rows, logits.cols,
                                 il__ptr(u), a->temperature, a->top_k, a->top_p), "sample", il__nm(&logits));
  return IL_OK;
}

/* ---------------------------------------------------------------- fused ops
 * matmul_add and gate_up_swiglu as version-3 matvec launches whose epilogue does the add or the
 * SwiGLU (il__mv3_epi): generation (up to 8 tokens) on F32 activations with every matrix on
 * version 3. Anything else, and any call with an observer installed (it sees the composition's
 * outputs), runs the composition of the ops. */

static bool il__fusable(il_backend *b, const il_tensor *w, const il_tensor *x, const il_tensor *y) {
  const il__cu *c = il__cu_of(b);
  return !b->observer.fn && x->type == IL_DTYPE_F32 && y->type == IL_DTYPE_F32 && x->rows >= 1 &&
         x->rows <= IL__CU_MV_MAX_TOK && il__mv_pick(c, w, x->rows) >= IL__MV_FIRST_V3 &&
         (!il__mv_quantized(w->type) || w->cols % 32 == 0);
}

/* Makes the device current and, where any of w[0..n) is quantized, quantizes x once into the
 * workspace for the version-3 matvecs that read it (*work; NULL where every matrix is float). */
static il_status il__mv3_prepare_x(il_backend *b, int n, const il_tensor *w, il_tensor x, void **work) {
  il__cu *c = il__cu_of(b);
  *work = NULL;
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "matmul", il__nm(&w[0]));
  for (int i = 0; i < n; i++)
    if (il__mv_quantized(w[i].type)) {
      IL_TRY(il__cu_workspace(b, il__cu_mv3_work(x.cols, x.rows), work));
      IL_CUDA_CHECK(c, il__cu_mv3_quant(c->compute, il__ptr(x), x.cols, x.rows, *work), "matmul", il__nm(&w[i]));
      return IL_OK;
    }
  return IL_OK;
}

/* y[i] (epilogue epi[i]) from w[i] x, i < n, the matrices read one quantization of x (views checked). */
static il_status il__mv_epi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, il_tensor x, const int *epi) {
  il__cu *c = il__cu_of(b);
  void *work;
  IL_TRY(il__mv3_prepare_x(b, n, w, x, &work));
  for (int i = 0; i < n; i++)
    IL_CUDA_CHECK(c, il__cu_mv3_epi(c->compute, il__mv_pick(c, &w[i], x.rows), w[i].type, il__ptr(w[i]), w[i].stride,
                                    w[i].rows, w[i].cols, il__ptr(x), work, x.rows, il__ptr(y[i]), il__ldy(&y[i]), epi[i]),
                  "matmul", il__nm(&w[i]));
  return IL_OK;
}

static il_status il__matmul_add(il_backend *b, il_tensor y, il_tensor w, il_tensor x, il_tensor tmp) {
  if (!il__fusable(b, &w, &x, &y)) {
    IL_TRY(il__t_matmul(b, tmp, w, x));
    return il__t_add(b, y, tmp);
  }
  IL_TRY(il__mm_check(b, &y, &w, &x));
  const int epi = IL__MV3_ADD;
  return il__mv_epi(b, 1, &y, &w, x, &epi);
}

static il_status il__gate_up_swiglu(il_backend *b, il_tensor h, il_tensor up, il_tensor w_gate, il_tensor w_up,
                                    il_tensor x) {
  if (!il__fusable(b, &w_gate, &x, &h) || !il__fusable(b, &w_up, &x, &h) || w_gate.rows != w_up.rows ||
      up.rows != h.rows || up.cols != h.cols) {
    const il_tensor y[2] = {h, up}, w[2] = {w_gate, w_up};
    IL_TRY(il__matmul_multi(b, 2, y, w, NULL, x));
    return il__t_swiglu(b, h, up);
  }
  IL_TRY(il__mm_check(b, &h, &w_gate, &x));
  IL_TRY(il__mm_check(b, &h, &w_up, &x));
  if (w_gate.type == w_up.type) { /* one launch: a warp computes a row of both (il__cu_mv3_gate_up) */
    il__cu *c = il__cu_of(b);
    void *work;
    IL_TRY(il__mv3_prepare_x(b, 1, &w_gate, x, &work));
    const il__mv3_mat g = {il__ptr(w_gate), w_gate.stride, w_gate.rows, il__ptr(h), il__ldy(&h)};
    IL_CUDA_CHECK(c, il__cu_mv3_gate_up(c->compute, il__mv_pick(c, &w_gate, x.rows), w_gate.type, &g, il__ptr(w_up),
                                        w_up.stride, w_gate.cols, il__ptr(x), work, x.rows),
                  "matmul", il__nm(&w_up));
    return IL_OK;
  }
  const il_tensor y[2] = {h, h}, w[2] = {w_gate, w_up};
  const int epi[2] = {IL__MV3_STORE, IL__MV3_SWIGLU}; /* h = gate . x, then h = silu(h) * (up . x) */
  return il__mv_epi(b, 2, y, w, x, epi);
}

static const il_backend_ops il__cuda_ops = {
    .version = IL_BACKEND_OPS_VERSION,
    .buffer_alloc = il__alloc,
    .buffer_free = il__free,
    .buffer_wrap_host = NULL,
    .host_ptr = il__host_ptr,
    .memory = il__memory,
    .upload = il__upload,
    .download = il__download,
    .copy = il__copy,
    .sync = il__sync,
    .supports = il__supports,
    .attn_kernels = il__cu_attn_kernels,
    .info = il__info,
    .get_rows = il__t_get_rows,
    .matmul = il__t_matmul,
    .matmul_multi = il__matmul_multi,
    .rmsnorm = il__t_rmsnorm,
    .rope = il__t_rope,
    .kv_store = il__kv_store,
    .rope_kv_store = il__t_rope_kv_store,
    .swiglu = il__t_swiglu,
    .geglu = il__t_geglu,
    .scale = il__t_scale,
    .add = il__t_add,
    .add_bias = il__t_add_bias,
    .count_nonfinite = il__count_nonfinite,
    .event_record = il__event_record,
    .event_elapsed = il__event_elapsed,
    .event_free = il__event_free,
    .upload_async = il__upload_async,
    .event_wait = il__event_wait,
    .native = il__native,
    .destroy = il__destroy,
    .transfers = il__transfers,
    .allocator_stats = il__allocator_stats,
    .allocator_snapshot = il__snapshot,
    .empty_cache = il__empty_cache,
    .round_to = il__round_to,
    .value_stats = il__value_stats,
    .reserve = il__reserve,
    .reserve_bytes = il__reserve_bytes,
    .reserve_act = il__reserve_act,
    .sample = il__sample,
    .gate_up_swiglu = il__gate_up_swiglu,
    .matmul_add = il__matmul_add,
    .capture_begin = il__cu_capture_begin,
    .capture_end = il__cu_capture_end,
    .replay = il__cu_replay,
    .step_free = il__cu_step_free,
};

/* The planner's dry device: the real device's facts, its allocator with nothing behind it, and
 * every op refused (backend/dry). */
/* A table without step capture: callers launch every op themselves. */
static void il__no_capture(il_backend_ops *o) {
  o->capture_begin = NULL;
  o->capture_end = NULL;
  o->replay = NULL;
  o->step_free = NULL;
}

static il_backend_ops il__cuda_dry;
static void il__cuda_dry_init(void) {
  il__cuda_dry = il__cuda_ops;
  il_backend_dry_ops(&il__cuda_dry);
  il__no_capture(&il__cuda_dry); /* nothing runs, so nothing is captured */
}
static const il_backend_ops *il__cuda_dry_ops(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, il__cuda_dry_init);
  return &il__cuda_dry;
}

/* IL_CUDA_GRAPHS=0: the table without step capture. */
static il_backend_ops il__cuda_eager;
static void il__cuda_eager_init(void) {
  il__cuda_eager = il__cuda_ops;
  il__no_capture(&il__cuda_eager);
}
static const il_backend_ops *il__cuda_eager_ops(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, il__cuda_eager_init);
  return &il__cuda_eager;
}

/* "cuda[:N][,dry[=SIZE]]": dry is the planner's device (its size: the real one, or SIZE bytes). */
static il_status il__parse_spec(const char *spec, int *dev, bool *dry, size_t *dry_size) {
  *dev = 0;
  *dry = false;
  *dry_size = 0;
  const char *comma = strchr(spec, ',');
  const size_t head = comma ? (size_t)(comma - spec) : strlen(spec);
  if (comma) {
    const char *o = comma + 1;
    char *end = NULL;
    if (!strcmp(o, "dry")) {
      *dry = true;
    } else if (!strncmp(o, "dry=", 4) && o[4] >= '0' && o[4] <= '9') {
      unsigned long long v = strtoull(o + 4, &end, 10);
      if (*end || !v) return il_error(IL_ERR_INVALID_ARG, "'%s': dry=SIZE takes a size in bytes", spec);
      *dry = true;
      *dry_size = (size_t)v;
    } else {
      return il_error(IL_ERR_INVALID_ARG, "'%s': unknown option '%s' (cuda[:N] takes none; the planner adds dry)", spec, o);
    }
  }
  if (head == 4 && !strncmp(spec, "cuda", 4)) return IL_OK;
  char num[16];
  if (head <= 5 || head - 5 >= sizeof num || strncmp(spec, "cuda:", 5))
    return il_error(IL_ERR_INVALID_ARG, "'%s' is not a CUDA device (cuda or cuda:N with N a device index)", spec);
  memcpy(num, spec + 5, head - 5);
  num[head - 5] = 0;
  char *end = NULL;
  long v = strtol(num, &end, 10);
  if (*end || v < 0 || v > 255)
    return il_error(IL_ERR_INVALID_ARG, "'%s' is not a CUDA device (cuda or cuda:N with N a device index)", spec);
  *dev = (int)v;
  return IL_OK;
}

/* The matvec dispatch: mv3_model.c's ranking, then the committed table (mv_table.txt, compiled
 * in: the model's ranking until a device measures one), then the entries of the file
 * IL_CUDA_MV_TABLE names (what scripts/gpu-check.sh measured), and IL_CUDA_MATVEC: 1 (version 1
 * everywhere), 2 (version 2 where it runs, else 1: the dispatch before version 3), a version 3
 * kernel name (w4u1, w4u2, w8u2: that one wherever the rows allow), or 3 (the table). */
static il_status il__mv_setup(il__cu *c) {
  il__mv_table_default(&c->mv_table);
  char err[256];
  if (il__mv_table_parse(il__mv_table_text, &c->mv_table, err, sizeof err))
    return il_error(IL_ERR_INTERNAL, "the module's matvec table (src/backend/cuda/mv_table.txt): %s", err);
  c->mv_force = -1;
  const char *mv = getenv("IL_CUDA_MATVEC");
  if (mv && *mv && strcmp(mv, "3")) {
    if (!strcmp(mv, "1")) c->mv_force = IL__MV_V1;
    else if (!strcmp(mv, "2")) c->mv_force = IL__MV_V2;
    for (int k = IL__MV_FIRST_V3; k < IL__MV_N_KINDS; k++)
      if (!strcmp(mv, il__mv_kind_name((il__mv_kind)k))) c->mv_force = k;
    if (c->mv_force < 0)
      return il_error(IL_ERR_INVALID_ARG, "IL_CUDA_MATVEC='%s': expected 1, 2, 3 (the dispatch table) or a version 3 "
                      "kernel (w4u1, w4u2, w8u2)", mv);
  }
  const char *path = getenv("IL_CUDA_MV_TABLE");
  if (!path || !*path) return IL_OK;
  FILE *f = fopen(path, "rb");
  if (!f) return il_error(IL_ERR_IO, "IL_CUDA_MV_TABLE=%s: cannot open it", path);
  char text[32768];
  const size_t n = fread(text, 1, sizeof text - 1, f);
  const bool more = fgetc(f) != EOF;
  fclose(f);
  if (more) return il_error(IL_ERR_FORMAT, "IL_CUDA_MV_TABLE=%s: larger than %zu bytes", path, sizeof text - 1);
  text[n] = 0;
  if (il__mv_table_parse(text, &c->mv_table, err, sizeof err))
    return il_error(IL_ERR_FORMAT, "IL_CUDA_MV_TABLE=%s: %s", path, err);
  return IL_OK;
}

/* The rest of open, on c already zeroed and attached to b; b is destroyed by the caller on error. */
static il_status il__open_device(il__cu *c, size_t mem_limit) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return il_error(IL_ERR_UNSUPPORTED, "no usable CUDA driver: cudaGetDeviceCount says %s (%s); run 'inferlab doctor'",
                    cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (n == 0) return il_error(IL_ERR_UNSUPPORTED, "no CUDA device is visible (check CUDA_VISIBLE_DEVICES; run 'inferlab doctor')");
  if (c->dev >= n)
    return il_error(IL_ERR_INVALID_ARG, "device %d does not exist: %d CUDA device%s visible (0..%d)", c->dev, n,
                    n == 1 ? " is" : "s are", n - 1);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "open", NULL);
  struct cudaDeviceProp prop;
  IL_CUDA_CHECK(c, cudaGetDeviceProperties(&prop, c->dev), "open", NULL);
  snprintf(c->device_name, sizeof c->device_name, "%.95s", prop.name);
  c->cc_major = prop.major;
  c->cc_minor = prop.minor;
  c->total_mem = prop.totalGlobalMem;
  e = il__cu_probe_image(&c->binary_version, &c->ptx_version);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
    (void)cudaGetLastError();
    return il_error(IL_ERR_UNSUPPORTED, "%s (sm_%d%d) has no kernel image in this module (compiled for %s): rebuild with "
                    "-DIL_CUDA_ARCHS=\"%d%d\"", c->device_name, c->cc_major, c->cc_minor, IL_CUDA_ARCHS_TEXT, c->cc_major,
                    c->cc_minor);
  }
  if (e != cudaSuccess) return il__cu_fail(c, e, "open", NULL, "cudaFuncGetAttributes", __FILE__, __LINE__);
  IL_CUDA_CHECK(c, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking), "open", "compute stream");
  IL_CUDA_CHECK(c, cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking), "open", "copy stream");
  IL_CUDA_CHECK(c, cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming), "open", "events");
  for (int i = 0; i < 2; i++) {
    IL_CUDA_CHECK(c, cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming), "open", "events");
    IL_TRY(il_mem_space_reserve(il_mem_host(), IL_MEM_STAGING, IL__CU_STAGE_BYTES, "cuda pinned staging"));
    e = cudaHostAlloc(&c->stage[i], IL__CU_STAGE_BYTES, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      c->stage[i] = NULL;
      il_mem_space_release(il_mem_host(), IL_MEM_STAGING, IL__CU_STAGE_BYTES);
      return il__cu_fail(c, e, "open", "pinned staging", "cudaHostAlloc", __FILE__, __LINE__);
    }
  }
  IL_CUDA_CHECK(c, cudaMalloc((void **)&c->fault, sizeof *c->fault), "open", "fault record");
  IL_CUDA_CHECK(c, cudaMemset(c->fault, 0, sizeof *c->fault), "open", "fault record");
  IL_CUDA_CHECK(c, cudaMalloc((void **)&c->count, 2 * sizeof *c->count), "open", "counter");
  /* one pinned page holds the fault mirror and the counter */
  void *page = NULL;
  IL_CUDA_CHECK(c, cudaHostAlloc(&page, 256, cudaHostAllocDefault), "open", "pinned fault record");
  memset(page, 0, 256);
  c->fault_host = page;
  c->count_host = (unsigned long long *)((uint8_t *)page + 128);
  IL_CUBLAS_CHECK(c, cublasCreate(&c->blas), "open", "cuBLAS handle");
  IL_CUBLAS_CHECK(c, cublasSetStream(c->blas, c->compute), "open", "cuBLAS handle");
  IL_TRY(il__mv_setup(c));
  const char *nb = getenv("IL_CUDA_NO_CUBLAS");
  c->no_blas = nb && *nb && strcmp(nb, "0");
  /* what the context, cuBLAS, the records above and other processes hold: measured, not assumed */
  size_t f = 0, t = 0;
  IL_CUDA_CHECK(c, cudaMemGetInfo(&f, &t), "open", "memory info");
  c->fixed = t > f ? t - f : 0;
  c->cap = mem_limit;
  if (c->dry) { /* a device of dry_size (default: this one) with this fixed overhead */
    const size_t size = c->dry_size ? c->dry_size : c->total_mem;
    size_t cap = size > c->fixed ? size - c->fixed : 1; /* 1 byte: nothing fits (0 would mean no cap) */
    if (mem_limit && mem_limit < cap) cap = mem_limit;
    c->cap = cap;
    c->next_fake = (uintptr_t)1 << 40;
  }
  c->space = il_mem_space_new(c->spec, c->cap);
  if (!c->space) return IL_ERR_OOM;
  il_caching_opts co = {.name = c->spec, .cap = c->cap, .seg_alloc = il__seg_alloc, .seg_free = il__seg_free, .ctx = c};
  return il_caching_new(&co, &c->alloc);
}

static il_status il__open(const char *spec, size_t mem_limit, il_backend **out) {
  *out = NULL;
  int dev;
  bool dry;
  size_t dry_size;
  IL_TRY(il__parse_spec(spec, &dev, &dry, &dry_size));
  il_backend *b = il_mem_calloc(IL_MEM_OTHER, sizeof *b, "cuda backend");
  il__cu *c = il_mem_calloc(IL_MEM_OTHER, sizeof *c, "cuda backend");
  if (!b || !c) {
    il_mem_free(b);
    il_mem_free(c);
    return IL_ERR_OOM;
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->xfer_lock, NULL);
  c->dev = dev;
  c->dry = dry;
  c->dry_size = dry_size;
  snprintf(c->spec, sizeof c->spec, "cuda:%d%s", dev, dry ? ",dry" : "");
  const char *ng = getenv("IL_CUDA_GRAPHS"); /* 0: steps are not recorded (eager launches, for comparison) */
  c->no_graphs = ng && !strcmp(ng, "0");
  *b = (il_backend){.ops = dry ? il__cuda_dry_ops() : c->no_graphs ? il__cuda_eager_ops() : &il__cuda_ops, .impl = c};
  il_status st = il__open_device(c, mem_limit);
  if (st != IL_OK) {
    il__destroy(b);
    return st;
  }
  b->space = c->space;
  *out = b;
  return IL_OK;
}

/* ---------------------------------------------------------------- the module's table */

/* Whether the compiled list (IL_CUDA_ARCHS_TEXT: "80-real,86-real,90") has SASS for cc, or
 * else the newest PTX at or below it; the rule doctor applies too. */
static void il__image_for(int cc, bool *sass, int *ptx) {
  *sass = false;
  *ptx = 0;
  const char *p = IL_CUDA_ARCHS_TEXT;
  while (*p) {
    char *end;
    long a = strtol(p, &end, 10);
    if (end == p) {
      p++;
      continue;
    }
    while (*end >= 'a' && *end <= 'z') end++;
    bool real = !strncmp(end, "-real", 5), virt = !strncmp(end, "-virtual", 8);
    if (!virt && a / 10 == cc / 10 && a <= cc) *sass = true;
    if (!real && a <= cc && a > *ptx) *ptx = (int)a;
    p = end;
  }
}

static int il__devices(il_cudamod_device *out, int max, char *err, size_t nerr) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, nerr, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
  }
  for (int i = 0; i < n && i < max; i++) {
    struct cudaDeviceProp prop;
    il_cudamod_device *d = &out[i];
    memset(d, 0, sizeof *d);
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(d->name, sizeof d->name, "(device %d: properties unavailable)", i);
      continue;
    }
    snprintf(d->name, sizeof d->name, "%.95s", prop.name);
    d->cc_major = prop.major;
    d->cc_minor = prop.minor;
    d->total_mem = prop.totalGlobalMem;
    il__image_for(prop.major * 10 + prop.minor, &d->sass, &d->ptx);
    d->sm_count = prop.multiProcessorCount;
    d->mem_bus_bits = prop.memoryBusWidth;
    if (cudaDeviceGetAttribute(&d->clock_khz, cudaDevAttrClockRate, i) != cudaSuccess) d->clock_khz = 0;
    if (cudaDeviceGetAttribute(&d->mem_clock_khz, cudaDevAttrMemoryClockRate, i) != cudaSuccess) d->mem_clock_khz = 0;
    (void)cudaGetLastError();
  }
  return n;
}

static void il__versions(int *runtime, int *driver) {
  *runtime = *driver = 0;
  if (cudaRuntimeGetVersion(runtime) != cudaSuccess) *runtime = 0;
  if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
  (void)cudaGetLastError();
}

static int il__ref(il_dtype t, const void *src, float *dst, int64_t n) { return il_dequantize_row(t, src, dst, n) != IL_OK; }
static int il__qref(il_dtype t, const float *src, void *dst, int64_t n) { return il_quantize_row(t, src, dst, n) != IL_OK; }

static il_status il__selftest(void) {
  char err[256] = "";
  if (il__cu_selftest(il__ref, il__qref, err, sizeof err))
    return il_error(IL_ERR_INTERNAL, "cuda module self-test: %s", err);
  return IL_OK;
}

static const il_cudamod_module il__module = {
    .abi = IL_CUDAMOD_ABI,
    .size = sizeof(il_cudamod_module),
    .ops_version = IL_BACKEND_OPS_VERSION,
    .archs = IL_CUDA_ARCHS_TEXT,
    .cuda_version = IL_CUDA_VERSION_TEXT,
    .open = il__open,
    .devices = il__devices,
    .versions = il__versions,
    .selftest = il__selftest,
};

/* the module's one exported symbol (IL_CUDAMOD_ENTRY), of type il_cudamod_entry_fn */
__attribute__((visibility("default"))) const il_cudamod_module *il_cudamod_entry_v1(const il_cudamod_host *host,
                                                                                     char *err, size_t nerr);
__attribute__((visibility("default"))) const il_cudamod_module *il_cudamod_entry_v1(const il_cudamod_host *host,
                                                                                     char *err, size_t nerr) {
  if (!il__cu_host_accept(host, err, nerr)) return NULL;
  return &il__module;
}
