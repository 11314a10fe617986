/* backend/registry: opens a backend by name.
 *
 *   cpu                       host memory, SIMD kernels, a thread pool
 *   sim:SIZE[,pcie=RATE][,ctx=SIZE]
 *                             the simulated GPU: CPU kernels, buffers in a separate space of
 *                             SIZE bytes ("4GiB"), counted host<->device copies optionally
 *                             throttled to RATE ("16GB/s"), and a fixed context overhead
 *                             (default 0) standing for a CUDA context and library workspaces
 *   cuda[:N]                  NVIDIA GPU N (default 0), from the CUDA module when it is built
 * Layers above backend/ open backends only through here and learn their facts from
 * ops->info, so none of them includes backend/cpu.
 * Not for: choosing what runs where (engine/).
 */
#ifndef IL_BACKEND_REGISTRY_H
#define IL_BACKEND_REGISTRY_H

#include "backend/backend.h"

typedef struct {
  int threads;      /* host threads for CPU kernels (cpu and sim); 0 = one per core */
  const char *isa;  /* CPU kernel level: NULL/"" best, or scalar | avx2 | avx512 */
  size_t mem_limit; /* device allocators reserve at most this (0 = the device's size) */
  bool repack;      /* cpu: keep GEMM-capable weights in the panel layout (--repack) */
} il_backend_opts;

/* Opens the backend `spec` names. IL_ERR_INVALID_ARG naming the part of the spec that is
 * wrong; IL_ERR_UNSUPPORTED for a backend this build or machine lacks, with the reason. Free
 * with b->ops->destroy(b). */
il_status il_backend_open(const char *spec, const il_backend_opts *opts, il_backend **out);

/* A --device list: several devices in one process, the model's layers split across them in
 * order. Items are separated by commas, and since a sim spec holds commas of its own
 * (sim:1GiB,pcie=1GB/s) a new item starts only at a comma followed by a device name: cpu, sim
 * or cuda, then ':', ',' or the end. "sim:24GiB,pcie=16GB/s,sim:8GiB" is two devices. */
#define IL_BACKEND_LIST_MAX 8
#define IL_BACKEND_SPEC_MAX 128
/* Splits spec into its *n items (1 for a single device). IL_ERR_INVALID_ARG naming --device
 * for an empty item, more than IL_BACKEND_LIST_MAX items or an item longer than
 * IL_BACKEND_SPEC_MAX - 1; the items themselves are checked when opened. */
il_status il_backend_list_parse(const char *spec, char item[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX], int *n);

/* CPU kernel levels compiled into this binary ("scalar,avx2,avx512"), and the one cpu and sim
 * backends use by default (the best detected and compiled, lowered by IL_ISA in the
 * environment). */
const char *il_backend_cpu_isa_compiled(void);
const char *il_backend_cpu_isa_default(void);

/* Why `cuda` cannot be opened in this build, or NULL when it can be tried. */
const char *il_backend_cuda_unavailable(void);

#endif
