/* backend/cuda/rope: rotary position embedding in place, NORM (adjacent pairs) and NEOX
 * (halves) layouts, on the first n_rot dims of each head.
 *
 * One thread per (row, pair): it computes the pair's angle once, in double like the CPU
 * reference (backend/cpu/cpu.c il__rope_row: theta = pos / scale * base^(-i / n_rot), cos and
 * sin in double, then float), and rotates that pair in every head. The rotation avoids fused
 * multiply-add so it rounds as the reference does. x is F32, F16 or BF16 (act.cuh): each pair
 * read as F32 and its rotation stored rounded to x's type.
 */
#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"

template <int A>
__global__ void il__k_rope(void *x, size_t xs, int64_t rows, const int32_t *__restrict__ pos, int64_t n_heads,
                           int64_t head_dim, int64_t n_rot, float base, float scale, int mode) {
  const int64_t half = n_rot / 2;
  const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= rows * half) return;
  const int64_t t = id / half, i = 2 * (id % half);
  const float p = (float)pos[t] / scale;
  const double theta = (double)p * pow((double)base, -(double)i / (double)n_rot);
  const float cs = (float)cos(theta), sn = (float)sin(theta);
  uint8_t *row = (uint8_t *)x + (size_t)t * xs;
  const int64_t a = mode == 2 ? i / 2 : i, b = mode == 2 ? i / 2 + n_rot / 2 : i + 1;
  for (int64_t h = 0; h < n_heads; h++) {
    const int64_t o = h * head_dim;
    const float x0 = il__act_ld<A>(row, o + a), x1 = il__act_ld<A>(row, o + b);
    il__act_st<A>(row, o + a, __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)));
    il__act_st<A>(row, o + b, __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs)));
  }
}

extern "C" cudaError_t il__cu_rope(cudaStream_t s, void *x, size_t xs, il_dtype t, int64_t rows, const int32_t *pos, int64_t n_heads,
                                   int64_t head_dim, int64_t n_rot, float base, float scale, int mode) {
  const int64_t n = rows * (n_rot / 2);
  if (n <= 0) return cudaSuccess;
  IL__ACT_CASE(t, A,
               il__k_rope<A><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, xs, rows, pos, n_heads, head_dim, n_rot, base,
                                                                         scale, mode));
  return cudaGetLastError();
}
