/* backend/cuda/dequant: weight rows decoded to activations, F32, F16 or BF16 (get_rows: the
 * embedding gather, narrowed with round to nearest even as act.cuh does) or to F16 (the tiles
 * cuBLAS multiplies for quantized prompt GEMMs).
 *
 * One thread per 32-element unit of an output row (decode.cuh): thread i of a block of 256
 * takes unit i of a row, so neighbouring threads read neighbouring bytes of one weight row.
 * get_rows reads the row ids on the device; an id outside the matrix is written to the fault
 * record and its row is left alone (sync then reports IL_ERR_RANGE with the id).
 * CPU reference: core/quant.c il_dequantize_row; get_rows on cuda equals cpu bit for bit.
 */
#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"

template <int T, int O>
__global__ void il__k_dequant(const uint8_t *__restrict__ w, size_t w_stride, int64_t w_rows, int64_t n_in,
                              const int32_t *__restrict__ ids, int64_t n, uint8_t *__restrict__ out,
                              size_t out_stride, il__cu_fault *fault, int launch) {
  const int64_t n_units = il__n_units(n_in);
  const int64_t r = blockIdx.y;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n_units; u += (int64_t)gridDim.x * blockDim.x) {
    int64_t src = r;
    if (ids) {
      src = ids[r];
      if (src < 0 || src >= w_rows) {
        if (u == 0 && atomicCAS(&fault->kind, 0, IL__CU_FAULT_ROW_ID) == 0) {
          fault->launch = launch;
          fault->a = r;
          fault->b = src;
          fault->c = w_rows;
        }
        return;
      }
    }
    float v[32];
    const int cnt = il__unit<T>(w + (size_t)src * w_stride, u, n_in, v);
    uint8_t *o = out + (size_t)r * out_stride;
    for (int j = 0; j < cnt; j++) il__act_st<O>(o, u * 32 + j, v[j]);
  }
}

extern "C" cudaError_t il__cu_dequant(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t w_rows,
                                      int64_t n_in, const int32_t *ids, int64_t n, void *out, size_t out_stride,
                                      il_dtype out_type, il__cu_fault *fault, int launch) {
  if (n < 1 || n > 65535 * 1024 || n_in < 1) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int64_t n_units = il__n_units(n_in);
  const unsigned bx = (unsigned)((n_units + 255) / 256 < 65535 ? (n_units + 255) / 256 : 65535);
  /* gridDim.y is at most 65535: longer lists go in slices */
  for (int64_t r0 = 0; r0 < n; r0 += 65535) {
    const int64_t rows = n - r0 < 65535 ? n - r0 : 65535;
    const dim3 grid(bx, (unsigned)rows);
    const uint8_t *wp = (const uint8_t *)w;
    const int32_t *ip = ids ? ids + r0 : NULL;
    uint8_t *op = (uint8_t *)out + (size_t)r0 * out_stride;
    /* without ids the rows themselves move */
    if (!ids) wp += (size_t)r0 * w_stride;
#define IL__DQ(T) IL__ACT_CASE(out_type, O, il__k_dequant<T, O><<<grid, 256, 0, s>>>(wp, w_stride, w_rows, n_in, ip, rows, op, out_stride, fault, launch))
    switch (t) {
    case IL_DTYPE_F32: IL__DQ(IL_DTYPE_F32); break;
    case IL_DTYPE_F16: IL__DQ(IL_DTYPE_F16); break;
    case IL_DTYPE_BF16: IL__DQ(IL_DTYPE_BF16); break;
    case IL_DTYPE_Q8_0: IL__DQ(IL_DTYPE_Q8_0); break;
    case IL_DTYPE_Q4_0: IL__DQ(IL_DTYPE_Q4_0); break;
    case IL_DTYPE_Q4_1: IL__DQ(IL_DTYPE_Q4_1); break;
    case IL_DTYPE_Q4_K: IL__DQ(IL_DTYPE_Q4_K); break;
    case IL_DTYPE_Q5_K: IL__DQ(IL_DTYPE_Q5_K); break;
    case IL_DTYPE_Q6_K: IL__DQ(IL_DTYPE_Q6_K); break;
    case IL_DTYPE_Q5_0: IL__DQ(IL_DTYPE_Q5_0); break;
    case IL_DTYPE_Q5_1: IL__DQ(IL_DTYPE_Q5_1); break;
    case IL_DTYPE_IQ4_NL: IL__DQ(IL_DTYPE_IQ4_NL); break;
    default: return cudaErrorInvalidValue;
    }
#undef IL__DQ
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
