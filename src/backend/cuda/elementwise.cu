/* backend/cuda/elementwise: SwiGLU, residual add, bias add, the inf/nan count and value
 * statistics, rounding activations to F16/BF16 (--dtype), and the conversions between F32 and
 * F16/BF16 (copy's, for 16-bit activations; the GEMM's, for cuBLAS's 16-bit operands).
 *
 * Grid-stride loops over the elements; each op is a few instructions per element and bound
 * by memory. SwiGLU is g / (1 + expf(-g)) * u like the CPU reference (expf differs from glibc's
 * by an ulp or two: the op test's tolerance is 1e-6 normalized).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda.h"

static unsigned il__blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return (unsigned)(b < 65535 * 16 ? b : 65535 * 16);
}

__global__ void il__k_swiglu(float *g, const float *__restrict__ u, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float x = g[i];
    g[i] = x / (1.0f + expf(-x)) * u[i];
  }
}

__global__ void il__k_geglu(float *g, const float *__restrict__ u, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
  }
}

__global__ void il__k_scale(float *x, float s, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

__global__ void il__k_add(float *y, const float *__restrict__ x, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

__global__ void il__k_add_bias(float *y, size_t ys, int64_t rows, int64_t cols, const float *__restrict__ b) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float *row = (float *)((uint8_t *)y + (size_t)r * ys);
    row[c] += b[c];
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

extern "C" cudaError_t il__cu_swiglu(cudaStream_t s, float *gate, const float *up, int64_t n) {
  if (n <= 0) return cudaSuccess;
  il__k_swiglu<<<il__blocks(n), 256, 0, s>>>(gate, up, n);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_geglu(cudaStream_t s, float *gate, const float *up, int64_t n) {
  if (n <= 0) return cudaSuccess;
  il__k_geglu<<<il__blocks(n), 256, 0, s>>>(gate, up, n);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_scale(cudaStream_t s, float *x, float v, int64_t n) {
  if (n <= 0) return cudaSuccess;
  il__k_scale<<<il__blocks(n), 256, 0, s>>>(x, v, n);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_add(cudaStream_t s, float *y, const float *x, int64_t n) {
  if (n <= 0) return cudaSuccess;
  il__k_add<<<il__blocks(n), 256, 0, s>>>(y, x, n);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_add_bias(cudaStream_t s, float *y, size_t ys, int64_t rows, int64_t cols, const float *bias) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_add_bias<<<il__blocks(rows * cols), 256, 0, s>>>(y, ys, rows, cols, bias);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_count_nonfinite(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                              unsigned long long *count) {
  if (rows * cols <= 0) return cudaSuccess;
  il__k_nonfinite<<<il__blocks(rows * cols), 256, 0, s>>>(x, xs, rows, cols, count);
  return cudaGetLastError();
}


