/* backend/cuda/norm: RMSNorm, one block of 256 threads per row.
 *
 * The sum of squares is accumulated in double, as the CPU reference does (backend/cpu/cpu.c
 * il__norm_row), so the scale is the same float in nearly every row; the products are plain
 * float multiplications in the reference's order. y may be x: each thread reads its elements
 * before the reduction and writes them after it. x and y are F32, F16 or BF16 (act.cuh), each its
 * own type: read as F32, the result stored rounded to y's.
 */
#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"

#define IL__NORM_THREADS 256

template <int Y, int X>
__global__ void il__k_rmsnorm(void *y, size_t ys, const void *x, size_t xs, const float *__restrict__ g, int64_t cols,
                              float eps) {
  __shared__ double part[IL__NORM_THREADS / 32];
  const uint8_t *xr = (const uint8_t *)x + (size_t)blockIdx.x * xs;
  uint8_t *yr = (uint8_t *)y + (size_t)blockIdx.x * ys;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = il__act_ld<X>(xr, i);
    ss += (double)v * v;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  double tot = 0;
  for (int w = 0; w < IL__NORM_THREADS / 32; w++) tot += part[w];
  const float scale = (float)(1.0 / sqrt(tot / (double)cols + eps));
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    il__act_st<Y>(yr, i, __fmul_rn(__fmul_rn(il__act_ld<X>(xr, i), scale), g[i]));
}

extern "C" cudaError_t il__cu_rmsnorm(cudaStream_t s, void *y, size_t ys, il_dtype yt, const void *x, size_t xs,
                                      il_dtype xt, const float *g, int64_t rows, int64_t cols, float eps) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  IL__ACT_CASE(yt, Y, IL__ACT_CASE(xt, X, il__k_rmsnorm<Y, X><<<(unsigned)rows, IL__NORM_THREADS, 0, s>>>(y, ys, x, xs, g, cols, eps)));
  return cudaGetLastError();
}
