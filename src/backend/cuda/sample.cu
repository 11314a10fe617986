/* backend/cuda/sample: the sample op's kernel (il__cu_sample, cuda.h). One CTA per row: its
 * threads find the argmax and any non-finite logit in a strided scan and a shared-memory tree;
 * with a temperature, thread 0 then walks the row as the host twin does (sample.cuh), which is
 * correct at any size but costs one scan of the row per candidate walked: greedy is the case
 * made fast, the engine samples on the device only then.
 */
#include "backend/cuda/cuda.h"
#include "backend/cuda/sample.cuh"

#define IL__SMP_THREADS 256 /* test_cuda_sample runs this tree on the host at the same width */

__global__ void il__k_sample(int32_t *ids, const float *logits, size_t ls, int64_t cols, const float *u, float temp,
                             int32_t top_k, float top_p) {
  __shared__ float sv[IL__SMP_THREADS];
  __shared__ int64_t si[IL__SMP_THREADS];
  __shared__ int bad[IL__SMP_THREADS];
  const int64_t row = blockIdx.x;
  const float *l = (const float *)((const char *)logits + (size_t)row * ls);
  const int t = threadIdx.x;
  float bv;
  int64_t bi;
  int nf;
  il__cu_smp_lane(l, cols, t, IL__SMP_THREADS, &bv, &bi, &nf); /* in registers, then shared */
  sv[t] = bv, si[t] = bi, bad[t] = nf;
  __syncthreads();
  for (int s = IL__SMP_THREADS / 2; s > 0; s >>= 1) {
    if (t < s) il__cu_smp_join(&sv[t], &si[t], &bad[t], sv[t + s], si[t + s], bad[t + s]);
    __syncthreads();
  }
  if (t == 0) ids[row] = bad[0] ? -1 : temp > 0 ? il__cu_smp_row(l, cols, u[row], temp, top_k, top_p, si[0]) : (int32_t)si[0];
}

extern "C" cudaError_t il__cu_sample(cudaStream_t s, int32_t *ids, const float *logits, size_t ls, int64_t rows,
                                     int64_t cols, const float *u, float temp, int32_t top_k, float top_p) {
  if (rows < 1 || rows > 0x7fffffff || cols < 1) return cudaErrorInvalidValue;
  il__k_sample<<<(unsigned)rows, IL__SMP_THREADS, 0, s>>>(ids, logits, ls, cols, u, temp, top_k, top_p);
  return cudaGetLastError();
}
