/* backend/cuda/matvec: y = x W^T for generation (1 to 8 tokens), every weight type.
 *
 * Generation is bound by memory bandwidth: every weight byte is read once per token, and
 * nothing else is large. One warp owns one output row; its 32 lanes take consecutive 32-element
 * units of the row (decode.cuh), so a warp's loads sweep one contiguous stretch of the row, and
 * each decoded unit is multiplied with the same stretch of up to 8 token rows before the next
 * unit is read: with 8 tokens the weights are still read once. The partial sums meet in a
 * warp shuffle reduction; lane 0 writes the outputs. Four warps per block.
 * Accumulation is in F32, on the exact F32 activations (the CPU kernels quantize activations
 * to 8 bits for quantized weights; that is why test_backend_ops compares the two with a
 * per-type tolerance rather than bit for bit).
 * CPU reference: backend/cpu/matmul.c's scalar kernels; validation: test_backend_ops on cuda.
 */
#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"

#define IL__MV_WARPS 4

template <int T, int NT>
__global__ void il__k_matvec(const uint8_t *__restrict__ w, size_t w_stride, int64_t n_out, int64_t n_in,
                             const float *__restrict__ x, int64_t n_tok, float *__restrict__ y, int64_t ldy) {
  const int64_t row = (int64_t)blockIdx.x * IL__MV_WARPS + threadIdx.y;
  if (row >= n_out) return; /* the whole warp leaves together */
  const uint8_t *wr = w + (size_t)row * w_stride;
  const int lane = threadIdx.x;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) acc[t] = 0.0f;
  const int64_t n_units = il__n_units(n_in);
  for (int64_t u = lane; u < n_units; u += 32) {
    float v[32];
    const int n = il__unit<T>(wr, u, n_in, v);
#pragma unroll
    for (int t = 0; t < NT; t++) {
      if (t < n_tok) {
        const float *xt = x + (size_t)t * (size_t)n_in + (size_t)u * 32;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++)
          if (j < n) s += v[j] * xt[j];
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; t++) {
    float s = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && t < n_tok) y[(size_t)t * (size_t)ldy + (size_t)row] = s;
  }
}

template <int T>
static cudaError_t il__launch(cudaStream_t s, const void *w, size_t w_stride, int64_t n_out, int64_t n_in,
                              const float *x, int64_t n_tok, float *y, int64_t ldy) {
  const dim3 block(32, IL__MV_WARPS);
  const dim3 grid((unsigned)((n_out + IL__MV_WARPS - 1) / IL__MV_WARPS));
  if (n_tok == 1)
    il__k_matvec<T, 1><<<grid, block, 0, s>>>((const uint8_t *)w, w_stride, n_out, n_in, x, 1, y, ldy);
  else
    il__k_matvec<T, IL__CU_MV_MAX_TOK><<<grid, block, 0, s>>>((const uint8_t *)w, w_stride, n_out, n_in, x, n_tok, y, ldy);
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_matvec(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out,
                                     int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy) {
  if (n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || n_out < 1 || n_out > (int64_t)0x7fffffff * IL__MV_WARPS)
    return cudaErrorInvalidValue;
#define IL__MV(T) return il__launch<T>(s, w, w_stride, n_out, n_in, x, n_tok, y, ldy)
  IL__FOR_TYPE(t, IL__MV)
#undef IL__MV
  return cudaErrorInvalidValue;
}

/* Used at open: does this module hold a kernel image for the current device? */
extern "C" cudaError_t il__cu_probe_image(int *binary, int *ptx) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, il__k_matvec<IL_DTYPE_F32, 1>);
  *binary = e == cudaSuccess ? a.binaryVersion : 0;
  *ptx = e == cudaSuccess ? a.ptxVersion : 0;
  return e;
}
