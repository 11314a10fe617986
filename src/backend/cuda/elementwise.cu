/* backend/cuda/elementwise: SwiGLU, residual add, bias add, the inf/nan count and value
 * statistics, rounding activations to F16/BF16 (--dtype), and the conversions between F32 and
 * F16/BF16 (copy's, for 16-bit activations; the GEMM's, for cuBLAS's 16-bit operands).
 *
 * Grid-stride loops over the elements; each op is a few instructions per element and bound
 * by memory. SwiGLU, GeGLU, scale, add and add_bias are templated on their activations' types
 * (act.cuh: F32, F16 or BF16, loaded as F32 and stored rounded to nearest even). SwiGLU is g / (1 + expf(-g)) * u like the CPU reference (expf differs from glibc's
 * by an ulp or two: the op test's tolerance is 1e-6 normalized).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"

static unsigned il__blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return (unsigned)(b < 65535 * 16 ? b : 65535 * 16);
}

template <int G, int U>
__global__ void il__k_swiglu(void *g, const void *__restrict__ u, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float x = il__act_ld<G>(g, i);
    il__act_st<G>(g, i, x / (1.0f + expf(-x)) * il__act_ld<U>(u, i));
  }
}

template <int G, int U>
__global__ void il__k_geglu(void *g, const void *__restrict__ u, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float x = il__act_ld<G>(g, i);
    il__act_st<G>(g, i, 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * il__act_ld<U>(u, i));
  }
}

template <int A>
__global__ void il__k_scale(void *x, float s, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    il__act_st<A>(x, i, il__act_ld<A>(x, i) * s);
}

template <int Y, int X>
__global__ void il__k_add(void *y, const void *__restrict__ x, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    il__act_st<Y>(y, i, il__act_ld<Y>(y, i) + il__act_ld<X>(x, i));
}

template <int A>
__global__ void il__k_add_bias(void *y, size_t ys, int64_t rows, int64_t cols, const float *__restrict__ b) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    void *row = (uint8_t *)y + (size_t)r * ys;
    il__act_st<A>(row, c, il__act_ld<A>(row, c) + b[c]);
  }
}

__global__ void il__k_nonfinite(const float *x, size_t xs, int64_t rows, int64_t cols, unsigned long long *count) {
  const int64_t n = rows * cols;
  unsigned long long mine = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = ((const float *)((const uint8_t *)x + (size_t)(i / cols) * xs))[i % cols];
    mine += !isfinite(v);
  }
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, o);
  if ((threadIdx.x & 31) == 0 && mine) atomicAdd(count, mine);
}

__global__ void il__k_round_to(float *x, size_t xs, int64_t rows, int64_t cols, bool bf16) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float *p = (float *)((uint8_t *)x + (size_t)(i / cols) * xs) + i % cols;
    *p = bf16 ? __bfloat162float(__float2bfloat16_rn(*p)) : __half2float(__float2half_rn(*p));
  }
}

/* stats[0]: inf/nan count; stats[1]: bits of the largest finite |x| */
__global__ void il__k_value_stats(const float *x, size_t xs, int64_t rows, int64_t cols, unsigned long long *stats) {
  const int64_t n = rows * cols;
  unsigned long long bad = 0;
  unsigned int mx = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = ((const float *)((const uint8_t *)x + (size_t)(i / cols) * xs))[i % cols];
    if (!isfinite(v)) bad++;
    else mx = max(mx, __float_as_uint(fabsf(v)));
  }
  for (int o = 16; o > 0; o >>= 1) {
    bad += __shfl_xor_sync(0xffffffffu, bad, o);
    mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  if ((threadIdx.x & 31) == 0) {
    if (bad) atomicAdd(&stats[0], bad);
    if (mx) atomicMax(&stats[1], (unsigned long long)mx);
  }
}

__global__ void il__k_convert(void *dst, size_t ds, int dk, const void *src, size_t ss, int sk, int64_t rows,
                              int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const uint8_t *sr = (const uint8_t *)src + (size_t)r * ss;
    uint8_t *dr = (uint8_t *)dst + (size_t)r * ds;
    if (sk == 0) {
      const float v = ((const float *)sr)[c];
      if (dk == 2) ((__nv_bfloat16 *)dr)[c] = __float2bfloat16_rn(v);
      else ((__half *)dr)[c] = __float2half_rn(v);
    } else {
      ((float *)dr)[c] = sk == 2 ? __bfloat162float(((const __nv_bfloat16 *)sr)[c]) : __half2float(((const __half *)sr)[c]);
    }
  }
}

extern "C" cudaError_t il__cu_convert(cudaStream_t s, void *dst, size_t ds, int dst_kind, const void *src, size_t ss,
                                      int src_kind, int64_t rows, int64_t cols) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_convert<<<il__blocks(rows * cols), 256, 0, s>>>(dst, ds, dst_kind, src, ss, src_kind, rows, cols);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_round_to(cudaStream_t s, float *x, size_t xs, int64_t rows, int64_t cols, bool bf16) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_round_to<<<il__blocks(rows * cols), 256, 0, s>>>(x, xs, rows, cols, bf16);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_value_stats(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                          unsigned long long *stats) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_value_stats<<<il__blocks(rows * cols), 256, 0, s>>>(x, xs, rows, cols, stats);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_swiglu(cudaStream_t s, void *gate, il_dtype gt, const void *up, il_dtype ut, int64_t n) {
  if (n <= 0) return cudaSuccess;
  IL__ACT_CASE(gt, G, IL__ACT_CASE(ut, U, il__k_swiglu<G, U><<<il__blocks(n), 256, 0, s>>>(gate, up, n)));
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_geglu(cudaStream_t s, void *gate, il_dtype gt, const void *up, il_dtype ut, int64_t n) {
  if (n <= 0) return cudaSuccess;
  IL__ACT_CASE(gt, G, IL__ACT_CASE(ut, U, il__k_geglu<G, U><<<il__blocks(n), 256, 0, s>>>(gate, up, n)));
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_scale(cudaStream_t s, void *x, il_dtype t, float v, int64_t n) {
  if (n <= 0) return cudaSuccess;
  IL__ACT_CASE(t, A, il__k_scale<A><<<il__blocks(n), 256, 0, s>>>(x, v, n));
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_add(cudaStream_t s, void *y, il_dtype yt, const void *x, il_dtype xt, int64_t n) {
  if (n <= 0) return cudaSuccess;
  IL__ACT_CASE(yt, Y, IL__ACT_CASE(xt, X, il__k_add<Y, X><<<il__blocks(n), 256, 0, s>>>(y, x, n)));
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_add_bias(cudaStream_t s, void *y, size_t ys, il_dtype t, int64_t rows, int64_t cols,
                                       const float *bias) {
  if (rows * cols <= 0) return cudaSuccess;
  IL__ACT_CASE(t, A, il__k_add_bias<A><<<il__blocks(rows * cols), 256, 0, s>>>(y, ys, rows, cols, bias));
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_count_nonfinite(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                              unsigned long long *count) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_nonfinite<<<il__blocks(rows * cols), 256, 0, s>>>(x, xs, rows, cols, count);
  return cudaGetLastError();
}


