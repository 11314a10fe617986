/* backend/cuda/rope: rotary position embedding in place, NORM (adjacent pairs) and NEOX
 * (halves) layouts, on the first n_rot dims of each head.
 *
 * One thread per (row, pair): it computes the pair's angle once, in double like the CPU
 * reference (backend/cpu/cpu.c il__rope_row: theta = pos / scale * base^(-i / n_rot), cos and
 * sin in double, then float), and rotates that pair in every head. The rotation avoids fused
 * multiply-add so it rounds as the reference does.
 */
#include "backend/cuda/cuda.h"

__global__ void il__k_rope(float *x, size_t xs, int64_t rows, const int32_t *__restrict__ pos, int64_t n_heads,
                           int64_t head_dim, int64_t n_rot, float base, float scale, int mode) {
  const int64_t half = n_rot / 2;
  const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= rows * half) return;
  const int64_t t = id / half, i = 2 * (id % half);
  const float p = (float)pos[t] / scale;
  const double theta = (double)p * pow((double)base, -(double)i / (double)n_rot);
  const float cs = (float)cos(theta), sn = (float)sin(theta);
  float *row = (float *)((uint8_t *)x + (size_t)t * xs);
  const int64_t a = mode == 2 ? i / 2 : i, b = mode == 2 ? i / 2 + n_rot / 2 : i + 1;
  for (int64_t h = 0; h < n_heads; h++) {
    float *v = row + h * head_dim;
    const float x0 = v[a], x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
    v[b] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
  }
}

extern "C" cudaError_t il__cu_rope(cudaStream_t s, float *x, size_t xs, int64_t rows, const int32_t *pos, int64_t n_heads,
                                   int64_t head_dim, int64_t n_rot, float base, float scale, int mode) {
  const int64_t n = rows * (n_rot / 2);
  if (n <= 0) return cudaSuccess;
  il__k_rope<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, xs, rows, pos, n_heads, head_dim, n_rot, base, scale, mode);
  return cudaGetLastError();
}
