/* backend/cuda/norm: RMSNorm, one block of 256 threads per row.
 *
 * The sum of squares is accumulated in double, as the CPU reference does (backend/cpu/cpu.c
 * il__norm_row), so the scale is the same float in nearly every row; the products are plain
 * float multiplications in the reference's order. y may be x: each thread reads its elements
 * before the reduction and writes them after it.
 */
#include "backend/cuda/cuda.h"

#define IL__NORM_THREADS 256

__global__ void il__k_rmsnorm(float *y, size_t ys, const float *x, size_t xs, const float *__restrict__ g, int64_t cols,
                              float eps) {
  __shared__ double part[IL__NORM_THREADS / 32];
  const float *xr = (const float *)((const uint8_t *)x + (size_t)blockIdx.x * xs);
  float *yr = (float *)((uint8_t *)y + (size_t)blockIdx.x * ys);
  double ss = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += (double)xr[i] * xr[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  double tot = 0;
  for (int w = 0; w < IL__NORM_THREADS / 32; w++) tot += part[w];
  const float scale = (float)(1.0 / sqrt(tot / (double)cols + eps));
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), g[i]);
}

extern "C" cudaError_t il__cu_rmsnorm(cudaStream_t s, float *y, size_t ys, const float *x, size_t xs, const float *g,
                                      int64_t rows, int64_t cols, float eps) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  il__k_rmsnorm<<<(unsigned)rows, IL__NORM_THREADS, 0, s>>>(y, ys, x, xs, g, cols, eps);
  return cudaGetLastError();
}
