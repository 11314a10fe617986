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
 * (Q4_0: isum - 8 * sum(q_x); Q4_1: + m_w * d_x * sum(q_x)).
 * Chosen with IL_CUDA_MATVEC=2 until bench_cuda shows it beating version 1 (matvec.cu) on a GPU.
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
  const float magic = 12582912.0f;
  const int q = (int)__fsub_rn(__fadd_rn(__fmul_rn(v, id), magic), magic);
  xq[(size_t)t * (size_t)n_in + (size_t)b * 32 + lane] = (int8_t)q;
  int s = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) {
    xd[blk] = d;
    xs[blk] = s;
  }
}

__device__ __forceinline__ int il__w32(const uint8_t *p) { /* 4 bytes at a 2-aligned address */
  const uint16_t *h = (const uint16_t *)p;
  return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
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
    const uint8_t *blk = wr + (size_t)b * bs;
    const float dw = il__f16(il__ld16(blk));
    int wq[8];
    float mw = 0.0f;
    if (T == IL_DTYPE_Q8_0) {
#pragma unroll
      for (int k = 0; k < 8; k++) wq[k] = il__w32(blk + 2 + 4 * k);
    } else {
      const int qoff = T == IL_DTYPE_Q4_0 ? 2 : 4;
      if (T == IL_DTYPE_Q4_1) mw = il__f16(il__ld16(blk + 2));
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const int v = il__w32(blk + qoff + 4 * k);
        wq[k] = v & 0x0F0F0F0F;            /* elements 4k .. 4k+3 */
        wq[4 + k] = (v >> 4) & 0x0F0F0F0F; /* elements 16+4k .. */
      }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
      if (t < n_tok) {
        const int4 *xv = (const int4 *)(xq + (size_t)t * (size_t)n_in + (size_t)b * 32);
        const int4 x0 = xv[0], x1 = xv[1];
        int isum = 0;
        isum = __dp4a(wq[0], x0.x, isum);
        isum = __dp4a(wq[1], x0.y, isum);
        isum = __dp4a(wq[2], x0.z, isum);
        isum = __dp4a(wq[3], x0.w, isum);
        isum = __dp4a(wq[4], x1.x, isum);
        isum = __dp4a(wq[5], x1.y, isum);
        isum = __dp4a(wq[6], x1.z, isum);
        isum = __dp4a(wq[7], x1.w, isum);
        const float dx = xd[t * nb + b];
        const int sx = xs[t * nb + b];
        if (T == IL_DTYPE_Q4_0) isum -= 8 * sx;
        acc[t] += dw * dx * (float)isum;
        if (T == IL_DTYPE_Q4_1) acc[t] += mw * dx * (float)sx;
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
