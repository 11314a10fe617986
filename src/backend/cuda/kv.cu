/* backend/cuda/kv: kv_store, rows of K and V written to their cells at slots (the paged
 * layout's slot mapping; a contiguous cache is the same with one block per sequence).
 *
 * The rows are F32 (the activations); the cells F32 or F16. One block per row: it reads its
 * slot and writes the K and V rows: F32 cells as 4-byte words when every address and stride
 * allows it (else byte by byte), F16 cells converted with round to nearest even (as the CPU's
 * il_f32_to_fp16). A slot outside the cells is written to the fault record and the row is
 * skipped. CPU reference: backend/cpu/cpu.c il__cpu_kv_store.
 */
#include <cuda_fp16.h>

#include "backend/cuda/cuda.h"

template <typename W>
__global__ void il__k_kv_store(uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells, const uint8_t *k,
                               size_t ks, const uint8_t *v, size_t vs, size_t row_bytes, const int32_t *slots,
                               il__cu_fault *fault, int launch) {
  const int64_t i = blockIdx.x;
  const int64_t slot = slots[i];
  if (slot < 0 || slot >= n_cells) {
    if (threadIdx.x == 0 && atomicCAS(&fault->kind, 0, IL__CU_FAULT_SLOT) == 0) {
      fault->launch = launch;
      fault->a = i;
      fault->b = slot;
      fault->c = n_cells;
    }
    return;
  }
  const size_t nw = row_bytes / sizeof(W);
  W *kd = (W *)(kc + (size_t)slot * kcs), *vd = (W *)(vc + (size_t)slot * vcs);
  const W *kr = (const W *)(k + (size_t)i * ks), *vr = (const W *)(v + (size_t)i * vs);
  for (size_t j = threadIdx.x; j < nw; j += blockDim.x) {
    kd[j] = kr[j];
    vd[j] = vr[j];
  }
}

__global__ void il__k_kv_store_f16(uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells, const uint8_t *k,
                                   size_t ks, const uint8_t *v, size_t vs, int64_t cols, const int32_t *slots,
                                   il__cu_fault *fault, int launch) {
  const int64_t i = blockIdx.x;
  const int64_t slot = slots[i];
  if (slot < 0 || slot >= n_cells) {
    if (threadIdx.x == 0 && atomicCAS(&fault->kind, 0, IL__CU_FAULT_SLOT) == 0) {
      fault->launch = launch;
      fault->a = i;
      fault->b = slot;
      fault->c = n_cells;
    }
    return;
  }
  __half *kd = (__half *)(kc + (size_t)slot * kcs), *vd = (__half *)(vc + (size_t)slot * vcs);
  const float *kr = (const float *)(k + (size_t)i * ks), *vr = (const float *)(v + (size_t)i * vs);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    kd[j] = __float2half_rn(kr[j]);
    vd[j] = __float2half_rn(vr[j]);
  }
}

extern "C" cudaError_t il__cu_kv_store(cudaStream_t s, uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells,
                                       bool f16_cells, const uint8_t *k, size_t ks, const uint8_t *v, size_t vs,
                                       int64_t cols, const int32_t *slots, int64_t n, il__cu_fault *fault, int launch) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  if (f16_cells) {
    il__k_kv_store_f16<<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, cols, slots, fault, launch);
    return cudaGetLastError();
  }
  const size_t row_bytes = (size_t)cols * 4;
  const uintptr_t all = (uintptr_t)kc | (uintptr_t)vc | (uintptr_t)k | (uintptr_t)v | kcs | vcs | ks | vs | row_bytes;
  if (all % 4 == 0)
    il__k_kv_store<uint32_t><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, row_bytes, slots, fault, launch);
  else
    il__k_kv_store<uint8_t><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, row_bytes, slots, fault, launch);
  return cudaGetLastError();
}
