/* backend/cuda/gemm: the cuBLAS path of matmul, for prompts and batches (more than 8 tokens).
 *
 * Compute-bound work goes to cuBLAS (cublasGemmEx, which runs cuBLASLt kernels on tensor
 * cores for F16/BF16 inputs), always accumulating in F32 (CUBLAS_COMPUTE_32F):
 *   F32 weights   F32 x F32 (no TF32: the default math mode keeps F32 results)
 *   F16, BF16     x converted to the weight type, then F16/BF16 x F16/BF16
 *   quantized     x converted to F16 once; the weights are decoded to F16 in tiles of rows
 *                 (dequant.cu) into the workspace and multiplied tile by tile; the tile is
 *                 capped at 64 MiB so the workspace stays small next to the weights
 * Layout: inferlab's row-major W [n_out x n_in] is cuBLAS's column-major n_in x n_out, and
 * row-major x and y are column-major n_in x n_tok and n_out x n_tok, so y^T = op(W)^T x^T
 * is gemm(T, N, m = n_out, n = n_tok, k = n_in) with lda = W's row stride in elements.
 * llama.cpp's MMQ (int8 tensor-core mma on quantized blocks) is the alternative the issue
 * names for quantized weights; it is not written: dequantize + cuBLAS is the measured baseline.
 * Not for: generation (matvec.cu reads each weight byte once; cuBLAS would not).
 */
#include "backend/cuda/glue.h"

#define IL__TILE_BYTES ((size_t)64 << 20)

static size_t il__align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Rows of decoded weights per tile: at most 64 MiB of them. */
static int64_t il__tile_rows(int64_t n_out, int64_t n_in) {
  int64_t r = (int64_t)(IL__TILE_BYTES / ((size_t)n_in * 2));
  if (r < 1) r = 1;
  return r > n_out ? n_out : r;
}

size_t il__cu_gemm_work(const il_tensor *w, int64_t n_tok) {
  if (w->type == IL_DTYPE_F32) return 0; /* cuBLAS reads F32 operands as they are */
  const bool wide = w->type == IL_DTYPE_F16 || w->type == IL_DTYPE_BF16;
  return il__align((size_t)n_tok * (size_t)w->cols * 2) + (wide ? 0 : (size_t)il__tile_rows(w->rows, w->cols) * (size_t)w->cols * 2);
}

il_status il__cu_gemm(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  il__cu *c = il__cu_of(b);
  const char *nm = w.name ? w.name : "weights";
  const int64_t n_out = w.rows, n_in = w.cols, n_tok = x.rows;
  const int64_t ldy = y.rows > 1 ? (int64_t)(y.stride / 4) : y.cols;
  const bool f16w = w.type == IL_DTYPE_F16, bf16w = w.type == IL_DTYPE_BF16, f32w = w.type == IL_DTYPE_F32;
  const size_t esz = f32w ? 4 : 2;
  if ((f16w || bf16w || f32w) && (w.stride % esz || (w.rows > 1 && (int64_t)(w.stride / esz) < n_in)))
    return IL_ERR_UNSUPPORTED; /* a row stride cuBLAS cannot express: matvec takes it */
  if (bf16w && c->cc_major < 8) return IL_ERR_UNSUPPORTED; /* BF16 GEMMs need sm_80 */
  if (n_in > INT32_MAX || n_out > INT32_MAX || n_tok > INT32_MAX || ldy > INT32_MAX) return IL_ERR_UNSUPPORTED;
  const float one = 1.0f, zero = 0.0f;
  float *yp = (float *)((uint8_t *)y.buf->base + y.off);
  const void *wp = (const uint8_t *)w.buf->base + w.off;
  const float *xp = (const float *)((const uint8_t *)x.buf->base + x.off);
  if (f32w) {
    const int lda = w.rows > 1 ? (int)(w.stride / 4) : (int)n_in;
    IL_CUBLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_tok, (int)n_in, &one, wp,
                                    CUDA_R_32F, lda, xp, CUDA_R_32F, (int)n_in, &zero, yp, CUDA_R_32F, (int)ldy,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "matmul", nm);
    return IL_OK;
  }
  /* workspace: x in 16 bits, then (quantized weights) one tile of decoded rows */
  const size_t xh_bytes = il__align((size_t)n_tok * (size_t)n_in * 2);
  const int64_t tile_rows = f16w || bf16w ? 0 : il__tile_rows(n_out, n_in);
  void *ws;
  IL_TRY(il__cu_workspace(b, il__cu_gemm_work(&w, n_tok), &ws));
  void *xh = ws, *tile = (uint8_t *)ws + xh_bytes;
  IL_CUDA_CHECK(c, il__cu_convert(c->compute, xh, (size_t)n_in * 2, bf16w ? 2 : 1, xp,
                                  x.rows > 1 ? x.stride : (size_t)n_in * 4, 0, n_tok, n_in),
                "matmul", nm);
  const cudaDataType_t ht = bf16w ? CUDA_R_16BF : CUDA_R_16F;
  if (f16w || bf16w) {
    const int lda = w.rows > 1 ? (int)(w.stride / 2) : (int)n_in;
    IL_CUBLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_tok, (int)n_in, &one, wp, ht,
                                    lda, xh, ht, (int)n_in, &zero, yp, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT),
                    "matmul", nm);
    return IL_OK;
  }
  for (int64_t r0 = 0; r0 < n_out; r0 += tile_rows) {
    const int64_t rows = n_out - r0 < tile_rows ? n_out - r0 : tile_rows;
    IL_CUDA_CHECK(c, il__cu_dequant(c->compute, w.type, (const uint8_t *)wp + (size_t)r0 * w.stride, w.stride, rows, n_in,
                                    NULL, rows, tile, (size_t)n_in * 2, IL_DTYPE_F16, c->fault, 0),
                  "matmul", nm);
    IL_CUBLAS_CHECK(c, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n_tok, (int)n_in, &one, tile,
                                    CUDA_R_16F, (int)n_in, xh, CUDA_R_16F, (int)n_in, &zero, yp + r0, CUDA_R_32F, (int)ldy,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "matmul", nm);
  }
  return IL_OK;
}
