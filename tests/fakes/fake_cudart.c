/* tests/fakes/fake_cudart: a host-memory stand-in for the parts of the CUDA runtime and cuBLAS
 * the CUDA backend's glue calls, so the module's C code (src/backend/cuda/cuda.c, gemm.c, host.c)
 * runs end to end on a machine without a GPU.
 *
 * It is linked, with fake_cuda_kernels.cpp (host versions of the kernel launchers), into a
 * second module, libinferlab-cuda-fake.so, that test_backend_ops and test_cuda_engine load
 * through INFERLAB_CUDA_MODULE (CTest entries *_fakecuda). What that checks: the glue's view
 * checks, pointer and stride arithmetic, the staging loops of upload/download, stream and event
 * bookkeeping, the fault record's path to IL_ERR_RANGE, the caching allocator on "device"
 * memory, the OOM path, and the cuBLAS argument mapping (cublasGemmEx here is a plain
 * column-major GEMM written from cuBLAS's documented semantics, so a wrong transpose, leading
 * dimension or offset gives wrong numbers). What it cannot check: the real kernels, real
 * asynchrony, or anything the hardware does.
 * "Device" memory is host memory from malloc; streams run everything at once. One device of
 * 1 GiB named "inferlab fake GPU", compute capability 9.0, or FAKE_CUDA_DEVICES of them (up to
 * 8, sharing the 1 GiB: for tensor parallelism's NCCL path with tests/fakes/fake_nccl);
 * FAKE_CUDA_FAIL_MALLOC_OVER (bytes) makes larger cudaMalloc calls fail with
 * cudaErrorMemoryAllocation.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "fake_graph.h"

#define FAKE_TOTAL ((size_t)1 << 30)

static _Atomic size_t fake_used;
static __thread cudaError_t fake_last;

static cudaError_t fake_ret(cudaError_t e) {
  if (e != cudaSuccess) fake_last = e;
  return e;
}

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  case cudaErrorGraphExecUpdateFailure: return "cudaErrorGraphExecUpdateFailure";
  default: return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  default: return "fake CUDA error";
  }
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = fake_last;
  fake_last = cudaSuccess;
  return e;
}

/* A header in front of each allocation keeps its size for cudaFree's accounting. */
cudaError_t cudaMalloc(void **p, size_t n) {
  const char *lim = getenv("FAKE_CUDA_FAIL_MALLOC_OVER");
  *p = NULL;
  if ((lim && n > (size_t)strtoull(lim, NULL, 10)) || fake_used + n > FAKE_TOTAL) return fake_ret(cudaErrorMemoryAllocation);
  uint8_t *b = aligned_alloc(256, 256 + ((n + 255) & ~(size_t)255));
  if (!b) return fake_ret(cudaErrorMemoryAllocation);
  memcpy(b, &n, sizeof n);
  memset(b + 256, 0xA5, n); /* device memory starts as garbage, not zeros */
  fake_used += n;
  *p = b + 256;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  uint8_t *b = (uint8_t *)p - 256;
  size_t n;
  memcpy(&n, b, sizeof n);
  fake_used -= n;
  free(b);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : fake_ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

static int fake_devices(void) {
  const char *n = getenv("FAKE_CUDA_DEVICES");
  const int v = n ? atoi(n) : 1;
  return v < 1 ? 1 : v > 8 ? 8 : v;
}

cudaError_t cudaSetDevice(int d) { return d >= 0 && d < fake_devices() ? cudaSuccess : fake_ret(cudaErrorInvalidValue); }

cudaError_t cudaGetDeviceCount(int *n) {
  *n = fake_devices();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int d) {
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "inferlab fake GPU");
  prop->major = 9;
  prop->minor = 0;
  prop->totalGlobalMem = FAKE_TOTAL;
  prop->multiProcessorCount = 2;
  prop->memoryBusWidth = 64;
  return d >= 0 && d < fake_devices() ? cudaSuccess : fake_ret(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  *v = 1000000;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
  *t = FAKE_TOTAL;
  *f = FAKE_TOTAL - fake_used;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

/* Streams run everything at once (or record it: fake_graph.h); a stream is a token holding its
 * number in creation order (the cuda backend creates its compute stream first, its copy stream
 * second). With FAKE_CUDA_TRACE=FILE, copies, syncs, event records and stream waits are appended
 * to FILE as "h2d sS BYTES", "d2h sS BYTES", "sync sS", "esync eE", "record eE sS", "wait sS eE"
 * (test_cuda_glue reads which stream did what; fake_graph.h lists the kernel and graph lines). */
static int fake_streams, fake_events;

void fake_trace(const char *fmt, ...) {
  const char *path = getenv("FAKE_CUDA_TRACE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

int fake_stream_no(cudaStream_t s) { return s ? *(unsigned char *)(void *)s : -1; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  *s = (cudaStream_t)malloc(1);
  if (*s) *(unsigned char *)(void *)*s = (unsigned char)fake_streams++;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  free((void *)s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  fake_trace("sync s%d", fake_stream_no(s));
  return cudaSuccess;
}
typedef struct {
  double t;
  int id;
} fake_event;

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  fake_trace("wait s%d e%d", fake_stream_no(s), ((fake_event *)(void *)e)->id);
  return cudaSuccess;
}

static double fake_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = (cudaEvent_t)calloc(1, sizeof(fake_event));
  if (*e) ((fake_event *)(void *)*e)->id = fake_events++;
  return *e ? cudaSuccess : fake_ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) { return cudaEventCreate(e); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free((void *)e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  ((fake_event *)(void *)e)->t = fake_now();
  fake_trace("record e%d s%d", ((fake_event *)(void *)e)->id, fake_stream_no(s));
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  fake_trace("esync e%d", ((fake_event *)(void *)e)->id);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = (float)((((fake_event *)(void *)b)->t - ((fake_event *)(void *)a)->t) * 1e3);
  return cudaSuccess;
}

/* A copy or memset as a graph node: its arguments by value. */
typedef struct {
  void *d;
  const void *s;
  size_t dp, sp, w, h;
  int v;
} fake_copy;

static cudaError_t fake_copy_run(void *ctx) {
  const fake_copy *c = ctx;
  for (size_t r = 0; r < c->h; r++) memmove((uint8_t *)c->d + r * c->dp, (const uint8_t *)c->s + r * c->sp, c->w);
  return cudaSuccess;
}

static cudaError_t fake_memset_run(void *ctx) {
  const fake_copy *c = ctx;
  memset(c->d, c->v, c->w);
  return cudaSuccess;
}

static const char *fake_kind(enum cudaMemcpyKind k) {
  return k == cudaMemcpyHostToDevice ? "h2d" : k == cudaMemcpyDeviceToHost ? "d2h" : "d2d";
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
  fake_copy c = {d, s, n, n, n, 1, 0};
  if (fake_graph_capture(st, fake_kind(k), fake_copy_run, &c, sizeof c)) return cudaSuccess;
  fake_trace("%s s%d %zu", fake_kind(k), fake_stream_no(st), n);
  return fake_copy_run(&c);
}

cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k,
                              cudaStream_t st) {
  if (w > dp || w > sp) return fake_ret(cudaErrorInvalidValue); /* cudaErrorInvalidPitchValue in the real one */
  fake_copy c = {d, s, dp, sp, w, h, 0};
  if (fake_graph_capture(st, fake_kind(k), fake_copy_run, &c, sizeof c)) return cudaSuccess;
  fake_trace("%s s%d %zu", fake_kind(k), fake_stream_no(st), w * h);
  return fake_copy_run(&c);
}

cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t s) {
  fake_copy c = {d, NULL, 0, 0, n, 1, v};
  if (fake_graph_capture(s, "memset", fake_memset_run, &c, sizeof c)) return cudaSuccess;
  return fake_memset_run(&c);
}

cudaError_t cudaMemset(void *d, int v, size_t n) {
  memset(d, v, n);
  return cudaSuccess;
}

/* ---- cuBLAS ---- */

/* A handle holds the stream its calls are queued on (cublasSetStream). */
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = (cublasHandle_t)calloc(1, sizeof(cudaStream_t));
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  free((void *)h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  memcpy((void *)h, &s, sizeof s);
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusName(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE"; }
const char *cublasGetStatusString(cublasStatus_t s) { return "fake cuBLAS status"; }

static float fake_elem(const void *p, cudaDataType t, size_t i) {
  uint16_t h;
  switch (t) {
  case CUDA_R_32F: return ((const float *)p)[i];
  case CUDA_R_16F: memcpy(&h, (const uint8_t *)p + 2 * i, 2); return il_fp16_to_f32(h);
  case CUDA_R_16BF: memcpy(&h, (const uint8_t *)p + 2 * i, 2); return il_bf16_to_f32(h);
  default: return NAN;
  }
}

/* One GEMM's arguments by value (alpha and beta read when it is queued, as cuBLAS's host
 * pointer mode does). */
typedef struct {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  float al, be;
  const void *A, *B;
  void *C;
  cudaDataType at, bt;
} fake_gemm;

static cudaError_t fake_gemm_run(void *ctx) {
  const fake_gemm *g = ctx;
  for (int j = 0; j < g->n; j++)
    for (int i = 0; i < g->m; i++) {
      double s = 0;
      for (int l = 0; l < g->k; l++) {
        const size_t ai = g->ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * g->lda : (size_t)l + (size_t)i * g->lda;
        const size_t bi = g->tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * g->ldb : (size_t)j + (size_t)l * g->ldb;
        s += (double)fake_elem(g->A, g->at, ai) * fake_elem(g->B, g->bt, bi);
      }
      float *c = (float *)g->C + (size_t)i + (size_t)j * g->ldc;
      *c = (float)(g->al * s + (g->be != 0 ? g->be * *c : 0));
    }
  return cudaSuccess;
}

/* C = alpha op(A) op(B) + beta C, column-major: op(A) is m x k, op(B) k x n, C m x n. */
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
  if (ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F || m < 0 || n < 0 || k < 0 || ldc < m ||
      lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
    return CUBLAS_STATUS_INVALID_VALUE;
  fake_gemm g = {ta, tb, m, n, k, lda, ldb, ldc, *(const float *)alpha, *(const float *)beta, A, B, C, at, bt};
  cudaStream_t st;
  memcpy(&st, (const void *)handle, sizeof st);
  if (!fake_graph_capture(st, "gemm", fake_gemm_run, &g, sizeof g)) {
    fake_trace("launch gemm s%d", fake_stream_no(st));
    (void)fake_gemm_run(&g);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *w, size_t n) { return w && n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE; }
