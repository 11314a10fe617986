/* backend/cuda/matvec_q8: matvec version 2 for Q8_0, Q4_0 and Q4_1 weights: integer dot
 * products (dp4a) on activations quantized to 8 bits, as the CPU kernels and llama.cpp's MMVQ do.
 *
 * Step 1 (il__k_quant_x): each block of 32 activations becomes 32 int8 values, a float scale
 * and the int sum of the values, exactly as backend/cpu/matmul.c il__quant_block computes them
 * (d = amax / 127, q = round-half-even(x / d) by the 1.5 * 2^23 trick, without fused
 * multiply-add), so both backends multiply the same integers and the result differs from the
 * CPU's only in the order of the float sums (the op test holds it to 1e-4, not 2e-2).
 * Step 2 (il__k_matvec_q8): one warp per output row, lane i takes blocks i, i+32, ... of the
 * row: it loads the block's weight bytes once, as 16-bit words (blocks are 18, 20 or 34 bytes:
 * only 2-byte alignment is known), builds 4-byte words and runs dp4a against each token's
 * 8-bit activations (two 16-byte loads per block and token), then y += d_w * d_x * isum
 * (Q4_0: isum - 8 * sum(q_x); Q4_1: + m_w * d_x * sum(q_x)). The per-block arithmetic
 * (il__block_words, il__block_dot in decode.cuh) is __host__ __device__ and checked on the host by
 * selftest.cu against the reference dequantizer.
 * The default for those types: bench_cuda measures it several times faster than version 1
 * (matvec.cu) (docs/cuda.md#current-figures); IL_CUDA_MATVEC=1 keeps version 1.
 */
#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"

#define IL__Q8_WARPS 4

/* xq: n_tok rows of n_in int8; xd: n_tok x nb floats; xs: n_tok x nb int32 sums. */
__global__ void il__k_quant_x(const float *__restrict__ x, int64_t n_in, int64_t n_blocks, int8_t *xq, float *xd,
                              int *xs) {
  const int64_t blk = (int64_t)blockIdx.x * IL__Q8_WARPS + threadIdx.y; /* over n_tok * nb */
  if (blk >= n_blocks) return;
  const int64_t nb = n_in / 32, t = blk / nb, b = blk % nb;
  const int lane = threadIdx.x;
  const float v = x[(size_t)t * (size_t)n_in + (size_t)b * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = il__quant_one(v, id);
  xq[(size_t)t * (size_t)n_in + (size_t)b * 32 + lane] = (int8_t)q;
  int s = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) {
    xd[blk] = d;
    xs[blk] = s;
  }
}

template <int T, int NT>
__global__ void il__k_matvec_q8(const uint8_t *__restrict__ w, size_t w_stride, int64_t n_out, int64_t n_in,
                                const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                const int *__restrict__ xs, int64_t n_tok, float *__restrict__ y, int64_t ldy) {
  const int64_t row = (int64_t)blockIdx.x * IL__Q8_WARPS + threadIdx.y;
  if (row >= n_out) return;
  const int lane = threadIdx.x;
  const int64_t nb = n_in / 32;
  const size_t bs = T == IL_DTYPE_Q8_0 ? sizeof(il_block_q8_0) : T == IL_DTYPE_Q4_0 ? sizeof(il_block_q4_0)
                                                                                     : sizeof(il_block_q4_1);
  const uint8_t *wr = w + (size_t)row * w_stride;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) acc[t] = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) {
    int wq[8];
    float mw;
    const float dw = il__block_words<T>(wr + (size_t)b * bs, wq, &mw);
#pragma unroll
    for (int t = 0; t < NT; t++) {
      if (t < n_tok) {
        const int4 *xv = (const int4 *)(xq + (size_t)t * (size_t)n_in + (size_t)b * 32);
        const int4 x0 = xv[0], x1 = xv[1];
        const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        acc[t] += il__block_dot<T>(wq, dw, mw, xw, xd[t * nb + b], xs[t * nb + b]);
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

extern "C" bool il__cu_matvec_q8_supports(il_dtype t) {
  return t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q4_0 || t == IL_DTYPE_Q4_1;
}

extern "C" size_t il__cu_matvec_q8_work(int64_t n_in, int64_t n_tok) {
  const size_t nb = (size_t)(n_in / 32) * (size_t)n_tok;
  return ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256 + nb * 8 + 256;
}

template <int T>
static void il__launch_q8(cudaStream_t s, dim3 grid, dim3 block, const void *w, size_t w_stride, int64_t n_out,
                          int64_t n_in, const int8_t *xq, const float *xd, const int *xs, int64_t n_tok, float *y,
                          int64_t ldy) {
  if (n_tok == 1)
    il__k_matvec_q8<T, 1><<<grid, block, 0, s>>>((const uint8_t *)w, w_stride, n_out, n_in, xq, xd, xs, 1, y, ldy);
  else
    il__k_matvec_q8<T, IL__CU_MV_MAX_TOK><<<grid, block, 0, s>>>((const uint8_t *)w, w_stride, n_out, n_in, xq, xd, xs,
                                                                 n_tok, y, ldy);
}

extern "C" cudaError_t il__cu_matvec_q8(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out,
                                        int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy, void *work) {
  if (!il__cu_matvec_q8_supports(t) || n_in % 32 || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || n_out < 1)
    return cudaErrorInvalidValue;
  const int64_t nb = n_in / 32, n_blocks = nb * n_tok;
  int8_t *xq = (int8_t *)work;
  float *xd = (float *)((uint8_t *)work + ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256);
  int *xs = (int *)(xd + n_blocks);
  const dim3 block(32, IL__Q8_WARPS);
  il__k_quant_x<<<(unsigned)((n_blocks + IL__Q8_WARPS - 1) / IL__Q8_WARPS), block, 0, s>>>(x, n_in, n_blocks, xq, xd, xs);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((n_out + IL__Q8_WARPS - 1) / IL__Q8_WARPS));
  if (t == IL_DTYPE_Q8_0) il__launch_q8<IL_DTYPE_Q8_0>(s, grid, block, w, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  else if (t == IL_DTYPE_Q4_0)
    il__launch_q8<IL_DTYPE_Q4_0>(s, grid, block, w, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  else il__launch_q8<IL_DTYPE_Q4_1>(s, grid, block, w, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  return cudaGetLastError();
}
