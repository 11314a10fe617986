/* backend/cudamod: the boundary between inferlab and its CUDA module (libinferlab-cuda.so).
 *
 * The CUDA backend is built as a separate shared object and loaded with dlopen, so the one
 * `inferlab` binary starts on machines without a driver or CUDA libraries. The module must not
 * carry a second copy of the inferlab library: the error detail is thread-local state and the
 * memory counters are process-wide, and a second copy would split both (an OOM recorded in the
 * module would be invisible to the engine's report). So the host hands the module a table of
 * the library functions it may call (il_cudamod_host) when it opens it, and the module hands
 * back a table of its own (il_cudamod_module). Nothing else crosses: the module exports one
 * symbol, IL_CUDAMOD_ENTRY, and is linked with hidden visibility and -Bsymbolic, so its
 * forwarding definitions of il_error, il_mem_alloc, ... (backend/cuda/host.c) never interpose
 * on the executable's and the executable's never on the module's.
 *
 * Both tables start with an ABI number and their size; members are only appended, and each
 * side refuses a peer with another ABI number, naming both numbers.
 *
 * The host side (cudamod.c, in the library) finds the module, in this order:
 *   1. $INFERLAB_CUDA_MODULE (a path; when set, nothing else is tried);
 *   2. the directory of the running executable (/proc/self/exe);
 *   3. the directory of the shared object holding this library, when it is one (dladdr);
 * and records every path it tried with the loader's dlerror() text, which `--device cuda` and
 * `doctor` print.
 * Not for: CUDA itself (backend/cuda/), choosing devices (engine/).
 */
#ifndef IL_BACKEND_CUDAMOD_H
#define IL_BACKEND_CUDAMOD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "memory/caching.h"
#include "memory/mem.h"

#define IL_CUDAMOD_ABI 2
#define IL_CUDAMOD_FILE "libinferlab-cuda.so"
#define IL_CUDAMOD_ENTRY "il_cudamod_entry_v1"

/* The library functions the module calls, in the host's one copy. */
typedef struct {
  uint32_t abi, size;
  /* core/status (the formatted variants: the module formats, the host records) */
  il_status (*error)(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  il_status (*error_wrap)(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  const char *(*error_detail)(void);
  /* core/dtype, backend/backend */
  const char *(*dtype_name)(uint32_t type_id);
  size_t (*tensor_row_bytes)(il_dtype type, int64_t cols);
  size_t (*tensor_span)(const il_tensor *t);
  /* memory/mem */
  void *(*mem_alloc)(il_mem_category cat, size_t bytes, const char *what);
  void *(*mem_calloc)(il_mem_category cat, size_t bytes, const char *what);
  void (*mem_free)(void *p);
  il_mem_space *(*mem_host)(void);
  il_mem_space *(*mem_space_new)(const char *name, size_t limit);
  void (*mem_space_free)(il_mem_space *space);
  il_status (*mem_space_reserve)(il_mem_space *space, il_mem_category cat, size_t bytes, const char *what);
  void (*mem_space_release)(il_mem_space *space, il_mem_category cat, size_t bytes);
  void (*mem_record_oom)(const il_mem_space *space, il_mem_category cat, size_t bytes, const char *what,
                         const char *why, size_t largest_free);
  void (*mem_record_oom_device)(size_t reserved, size_t largest_free, bool fragmentation);
  const char *(*mem_format_bytes)(size_t bytes, char *buf, size_t n);
  /* memory/caching */
  il_status (*caching_new)(const il_caching_opts *opts, il_caching **out);
  void (*caching_destroy)(il_caching *a);
  il_status (*caching_alloc)(il_caching *a, il_mem_category cat, size_t bytes, const char *name,
                             il_caching_block **out);
  void (*caching_free)(il_caching *a, il_caching_block *b);
  void *(*caching_block_ptr)(const il_caching_block *b);
  size_t (*caching_block_size)(const il_caching_block *b);
  size_t (*caching_empty_cache)(il_caching *a);
  void (*caching_stats_get)(il_caching *a, il_caching_stats *out);
  il_status (*caching_snapshot_take)(il_caching *a, il_caching_snapshot *out);
  bool (*caching_last_oom)(il_caching *a, il_caching_oom *out);
  /* core/quant: the CPU reference the module's self-test compares its decoders with */
  il_status (*dequantize_row)(il_dtype t, const void *src, float *dst, int64_t n);
  il_status (*quantize_row)(il_dtype t, const float *src, void *dst, int64_t n);
} il_cudamod_host;

/* One CUDA device as the module sees it. */
typedef struct {
  char name[96];
  int cc_major, cc_minor;
  size_t total_mem;
  bool sass;       /* the module holds SASS that runs on this compute capability */
  int ptx;         /* else the newest PTX it can JIT from (e.g. 90), or 0: no kernel image */
  int sm_count;            /* streaming multiprocessors */
  int clock_khz;           /* peak SM clock */
  int mem_clock_khz;       /* peak memory clock */
  int mem_bus_bits;        /* memory bus width */
} il_cudamod_device;

/* What the module offers. */
typedef struct {
  uint32_t abi, size;
  uint32_t ops_version;      /* IL_BACKEND_OPS_VERSION it was compiled with */
  const char *archs;         /* CUDA architectures compiled in: "80-real;86-real;89-real;90" */
  const char *cuda_version;  /* toolkit at build time: "13.0" */
  /* Opens "cuda" or "cuda:N". IL_ERR_UNSUPPORTED naming the reason (no driver, no device, no
   * kernel image for its compute capability), IL_ERR_INVALID_ARG for a bad spec, IL_ERR_OOM
   * when the context or staging buffers do not fit. Free with b->ops->destroy(b). */
  il_status (*open)(const char *spec, size_t mem_limit, il_backend **out);
  /* Fills up to max devices; returns their count, or -1 with why (the runtime's message) in
   * err when the runtime cannot count them (no driver). */
  int (*devices)(il_cudamod_device *out, int max, char *err, size_t nerr);
  /* CUDA runtime version the module runs (cudaRuntimeGetVersion: 13000 = 13.0), and the
   * driver's (cudaDriverGetVersion; 0 without a driver). */
  void (*versions)(int *runtime, int *driver);
  /* Host-side validation that needs no device: every weight decoder the kernels use, run
   * on the host, against the library's dequantize_row (bit for bit), for each weight type.
   * IL_OK, or IL_ERR_INTERNAL naming the type and element that differ. */
  il_status (*selftest)(void);
} il_cudamod_module;

typedef const il_cudamod_module *(*il_cudamod_entry_fn)(const il_cudamod_host *host, char *err, size_t nerr);

/* ---- host side (backend/cudamod.c) ---- */

/* The loaded module, loading it on first use (thread-safe); NULL when it cannot be loaded,
 * with the reason in il_cudamod_error(). */
const il_cudamod_module *il_cudamod_get(void);
/* Why the module did not load: the paths tried and each dlerror() text; "" when it loaded. */
const char *il_cudamod_error(void);
/* The path it was loaded from; "" when it did not load. */
const char *il_cudamod_path(void);

#endif
