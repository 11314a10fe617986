/* backend/cuda/matvec3: matvec version 3, y = x W^T for 1 to 8 tokens, every weight type, at
 * the width of the memory system: 16-byte global loads, a warp instruction over 512 contiguous
 * bytes of a row, several loads in flight per lane, dp4a on 8-bit activations for quantized
 * weights. The per-lane arithmetic and the chunk geometry are mv3.cuh's, shared with the host
 * twin in tests/cuda/test_mv3.cpp, which the results must equal bit for bit.
 *
 * Kernel il__k_mv3<T, NT, W, U>: W warps per block, one row per warp; each warp walks its row
 * U chunks at a time: all of the U chunks' 16-byte loads are issued first (quantized types then
 * copy them to the warp's slot of shared memory and __syncwarp), then each chunk is multiplied
 * with the NT token rows, so 2-8 tokens read the weights once. No __syncthreads: warps are
 * independent, and a warp past the last row leaves at once.
 * CPU reference: backend/cpu/matmul_scalar.c (tests compare within the quantization tolerance);
 * exactness: the host twin.
 */
#include "backend/cuda/cuda.h"
#include "backend/cuda/mv3.cuh"
#include "backend/cuda/mv3.h"

/* The activation quantizer is version 2's (matvec_q8.cu): one 32-value block per warp, the CPU's
 * il__quant_block arithmetic, the same bits as the twin's il__mv3_quant_block (a max and an
 * integer sum do not depend on their order), in the same workspace layout. */
__global__ void il__k_quant_x(const float *__restrict__ x, int64_t n_in, int64_t n_blocks, int8_t *xq, float *xd,
                              int *xs);

/* Block bx of one matrix's grid: its W rows (il__k_mv3 and il__k_mv3_multi run it). */
template <int T, int NT, int W, int U>
__device__ __forceinline__ void il__mv3_block(unsigned bx, const uint8_t *__restrict__ w, size_t w_stride,
                                              int64_t n_out, int64_t n_in, const float *__restrict__ x,
                                              const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                              const int *__restrict__ xs, int n_tok, float *__restrict__ y, int64_t ldy,
                                              int epi) {
  constexpr bool Q = T != IL_DTYPE_F32 && T != IL_DTYPE_F16 && T != IL_DTYPE_BF16;
  constexpr int CB = T == IL_DTYPE_Q8_0   ? 32 * 34
                     : T == IL_DTYPE_Q4_0 ? 32 * 18
                     : T == IL_DTYPE_Q4_1 ? 32 * 20
                     : T == IL_DTYPE_Q4_K ? 4 * 144
                     : T == IL_DTYPE_Q5_K ? 4 * 176
                     : T == IL_DTYPE_Q6_K ? 8 * 210
                                          : 512;
  constexpr int LK = (CB / 16 + 31) / 32; /* loads per lane and chunk */
  __shared__ __align__(16) uint8_t sm[Q ? W * U * CB : 16];
  const int lane = threadIdx.x, warp = threadIdx.y;
  const int64_t row = il__mv3_row_of(bx, warp, W);
  if (row >= n_out) return; /* the whole warp leaves together */
  const uint4 *wr = (const uint4 *)(w + (size_t)row * w_stride);
  const int64_t rb = il__mv3_row_bytes(T, n_in), row_words = rb / 16, n_chunks = (rb + CB - 1) / CB;
  const int64_t nb = n_in / 32;
  il__mv3_act a[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) a[t] = il__mv3_act{xq + (size_t)t * (size_t)n_in, xd + t * nb, xs + t * nb};
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) acc[t] = 0.0f;
  for (int64_t c0 = 0; c0 < n_chunks; c0 += U) {
    uint4 r[U][LK];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int k = 0; k < LK; k++) {
        const int64_t wi = il__mv3_word(T, row_words, c0 + u, k, lane);
        r[u][k] = wi >= 0 ? __ldg(wr + wi) : make_uint4(0, 0, 0, 0);
      }
    if (Q) {
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int k = 0; k < LK; k++)
          if (il__mv3_word(T, row_words, c0 + u, k, lane) >= 0)
            ((uint4 *)(sm + (warp * U + u) * CB))[32 * k + lane] = r[u][k];
      __syncwarp();
#pragma unroll
      for (int u = 0; u < U; u++)
        if (c0 + u < n_chunks) il__mv3_lane_quant<T, NT>(sm + (warp * U + u) * CB, c0 + u, lane, nb, a, n_tok, acc);
      __syncwarp(); /* the slot is rewritten by the next chunks */
    } else {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int64_t wi = il__mv3_word(T, row_words, c0 + u, 0, lane);
        if (wi >= 0) {
          const uint32_t wd[4] = {r[u][0].x, r[u][0].y, r[u][0].z, r[u][0].w};
          il__mv3_lane_float<T, NT>(wd, wi, x, n_in, n_tok, acc);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; t++) {
    float s = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s = il__add(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0 && t < n_tok) {
      float *yp = y + (size_t)t * (size_t)ldy + (size_t)row;
      *yp = epi == IL__MV3_STORE ? s : il__mv3_apply(epi, *yp, s);
    }
  }
}

template <int T, int NT, int W, int U>
__global__ void __launch_bounds__(32 * W, 1) il__k_mv3(const uint8_t *__restrict__ w, size_t w_stride, int64_t n_out,
                                                    int64_t n_in, const float *__restrict__ x,
                                                    const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                    const int *__restrict__ xs, int n_tok, float *__restrict__ y,
                                                    int64_t ldy, int epi) {
  il__mv3_block<T, NT, W, U>(blockIdx.x, w, w_stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi);
}

/* The matrices of one il__cu_mv3_multi launch and the first block of each in the grid. */
typedef struct {
  il__mv3_mat m[IL__MV3_MAX_MATS];
  unsigned block0[IL__MV3_MAX_MATS];
  int n;
  bool swiglu; /* two matrices of the same rows: gate then up, y = silu(gate . x) * (up . x) */
} il__mv3_set;

/* Q, K and V (any matrices of one type and width that read the same x) in one grid: block b
 * runs block b - block0[i] of matrix i, so each row is computed exactly as il__k_mv3 computes it. */
template <int T, int NT, int W, int U>
__global__ void __launch_bounds__(32 * W, 1) il__k_mv3_multi(il__mv3_set set, int64_t n_in, const float *__restrict__ x,
                                                          const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                          const int *__restrict__ xs, int n_tok) {
  if (set.swiglu) { /* the warp writes its gate row, then reads it back for the up row's epilogue */
    il__mv3_block<T, NT, W, U>(blockIdx.x, (const uint8_t *)set.m[0].w, set.m[0].stride, set.m[0].n_out, n_in, x, xq, xd,
                               xs, n_tok, set.m[0].y, set.m[0].ldy, IL__MV3_STORE);
    il__mv3_block<T, NT, W, U>(blockIdx.x, (const uint8_t *)set.m[1].w, set.m[1].stride, set.m[1].n_out, n_in, x, xq, xd,
                               xs, n_tok, set.m[0].y, set.m[0].ldy, IL__MV3_SWIGLU);
    return;
  }
  int i = 0;
  while (i + 1 < set.n && blockIdx.x >= set.block0[i + 1]) i++;
  const il__mv3_mat &m = set.m[i];
  il__mv3_block<T, NT, W, U>(blockIdx.x - set.block0[i], (const uint8_t *)m.w, m.stride, m.n_out, n_in, x, xq, xd, xs,
                             n_tok, m.y, m.ldy, IL__MV3_STORE);
}

extern "C" bool il__cu_mv3_eligible(il_dtype t, int64_t n_in, const void *w, size_t stride, int64_t n_rows) {
  return il__mv3_eligible(t, n_in, (uintptr_t)w, stride, n_rows);
}

/* xq: n_tok rows of n_in int8 at the start; then xd (n_tok x nb floats) at a 256-byte
 * boundary, then xs (n_tok x nb ints). */
static size_t il__mv3_xd_off(int64_t n_in, int64_t n_tok) { return ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256; }

extern "C" size_t il__cu_mv3_work(int64_t n_in, int64_t n_tok) {
  return il__mv3_xd_off(n_in, n_tok) + (size_t)(n_in / 32) * (size_t)n_tok * 8 + 256;
}

extern "C" cudaError_t il__cu_mv3_quant(cudaStream_t s, const float *x, int64_t n_in, int64_t n_tok, void *work) {
  if (n_in % 32 || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK) return cudaErrorInvalidValue;
  const int64_t n_blocks = n_in / 32 * n_tok;
  int8_t *xq = (int8_t *)work;
  float *xd = (float *)((uint8_t *)work + il__mv3_xd_off(n_in, n_tok));
  int *xs = (int *)(xd + n_blocks);
  il__k_quant_x<<<(unsigned)((n_blocks + 3) / 4), dim3(32, 4), 0, s>>>(x, n_in, n_blocks, xq, xd, xs);
  return cudaGetLastError();
}

template <int T, int NT, int W, int U>
static void il__mv3_go(cudaStream_t s, const void *w, size_t stride, int64_t n_out, int64_t n_in, const float *x,
                       const int8_t *xq, const float *xd, const int *xs, int n_tok, float *y, int64_t ldy, int epi,
                       const il__mv3_set *set) {
  const dim3 block(32, W);
  if (set) {
    il__mv3_set g = *set;
    unsigned b = 0;
    for (int i = 0; i < (g.swiglu ? 1 : g.n); i++) g.block0[i] = b, b += (unsigned)il__mv3_blocks(g.m[i].n_out, W);
    il__k_mv3_multi<T, NT, W, U><<<b, block, 0, s>>>(g, n_in, x, xq, xd, xs, n_tok);
    return;
  }
  const dim3 grid((unsigned)il__mv3_blocks(n_out, W));
  il__k_mv3<T, NT, W, U><<<grid, block, 0, s>>>((const uint8_t *)w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi);
}

template <int T, int W, int U>
static void il__mv3_tok(cudaStream_t s, const void *w, size_t stride, int64_t n_out, int64_t n_in, const float *x,
                        const int8_t *xq, const float *xd, const int *xs, int n_tok, float *y, int64_t ldy, int epi,
                        const il__mv3_set *set) {
  if (n_tok == 1) il__mv3_go<T, 1, W, U>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set);
  else if (n_tok == 2) il__mv3_go<T, 2, W, U>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set);
  else if (n_tok <= 4) il__mv3_go<T, 4, W, U>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set);
  else il__mv3_go<T, 8, W, U>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set);
}

template <int T>
static cudaError_t il__mv3_kind(cudaStream_t s, il__mv_kind k, const void *w, size_t stride, int64_t n_out,
                                int64_t n_in, const float *x, const int8_t *xq, const float *xd, const int *xs,
                                int n_tok, float *y, int64_t ldy, int epi, const il__mv3_set *set) {
  switch (k) {
  case IL__MV_W4U1: il__mv3_tok<T, 4, 1>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set); break;
  case IL__MV_W4U2: il__mv3_tok<T, 4, 2>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set); break;
  case IL__MV_W8U2: il__mv3_tok<T, 8, 2>(s, w, stride, n_out, n_in, x, xq, xd, xs, n_tok, y, ldy, epi, set); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t il__cu_mv3(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                  int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                  float *y, int64_t ldy) {
  return il__cu_mv3_epi(s, k, t, w, stride, n_out, n_in, x, work, n_tok, y, ldy, IL__MV3_STORE);
}

static cudaError_t il__mv3_launch(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                  int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                  float *y, int64_t ldy, int epi, const il__mv3_set *set);

extern "C" cudaError_t il__cu_mv3_epi(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                      int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                      float *y, int64_t ldy, int epi) {
  return il__mv3_launch(s, k, t, w, stride, n_out, n_in, x, work, n_tok, y, ldy, epi, NULL);
}

/* One launch of kernel k over one matrix (set NULL) or over the matrices of set (w, stride,
 * n_out, y and ldy then come from set's first matrix for the checks). */
static cudaError_t il__mv3_launch(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                  int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                  float *y, int64_t ldy, int epi, const il__mv3_set *set) {
  if (epi < IL__MV3_STORE || epi > IL__MV3_SWIGLU) return cudaErrorInvalidValue;
  if (n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || n_out < 1 || n_out > (int64_t)0x7fffffff ||
      !il__mv3_eligible(t, n_in, (uintptr_t)w, stride, n_out) || (il__mv3_quantized(t) && !work))
    return cudaErrorInvalidValue;
  const int8_t *xq = (const int8_t *)work;
  const float *xd = work ? (const float *)((const uint8_t *)work + il__mv3_xd_off(n_in, n_tok)) : NULL;
  const int *xs = work ? (const int *)(xd + n_in / 32 * n_tok) : NULL;
  /* version 3's types only (il__mv3_row_bytes): no kernel is instantiated for the decoder-only
   * types (Q5_0, Q5_1, IQ4_NL), which stay on version 1 */
#define IL__MV3(T) \
  case T: return il__mv3_kind<T>(s, k, w, stride, n_out, n_in, x, xq, xd, xs, (int)n_tok, y, ldy, epi, set)
  switch (t) {
    IL__MV3(IL_DTYPE_F32);
    IL__MV3(IL_DTYPE_F16);
    IL__MV3(IL_DTYPE_BF16);
    IL__MV3(IL_DTYPE_Q8_0);
    IL__MV3(IL_DTYPE_Q4_0);
    IL__MV3(IL_DTYPE_Q4_1);
    IL__MV3(IL_DTYPE_Q4_K);
    IL__MV3(IL_DTYPE_Q5_K);
    IL__MV3(IL_DTYPE_Q6_K);
  default: return cudaErrorInvalidValue;
  }
#undef IL__MV3
}

static cudaError_t il__mv3_set_launch(cudaStream_t s, il__mv_kind k, il_dtype t, int n, const il__mv3_mat *m,
                                      int64_t n_in, const float *x, const void *work, int64_t n_tok, bool swiglu) {
  if (n < 1 || n > IL__MV3_MAX_MATS) return cudaErrorInvalidValue;
  il__mv3_set set = {};
  set.n = n;
  set.swiglu = swiglu;
  int64_t blocks = 0;
  for (int i = 0; i < n; i++) {
    set.m[i] = m[i];
    if (m[i].n_out < 1 || m[i].n_out > (int64_t)0x7fffffff || !il__mv3_eligible(t, n_in, (uintptr_t)m[i].w, m[i].stride, m[i].n_out))
      return cudaErrorInvalidValue;
    blocks += m[i].n_out; /* a block holds at least one row */
  }
  if (blocks > (int64_t)0x7fffffff) return cudaErrorInvalidValue;
  return il__mv3_launch(s, k, t, m[0].w, m[0].stride, m[0].n_out, n_in, x, work, n_tok, m[0].y, m[0].ldy, IL__MV3_STORE, &set);
}

extern "C" cudaError_t il__cu_mv3_multi(cudaStream_t s, il__mv_kind k, il_dtype t, int n, const il__mv3_mat *m,
                                        int64_t n_in, const float *x, const void *work, int64_t n_tok) {
  return il__mv3_set_launch(s, k, t, n, m, n_in, x, work, n_tok, false);
}

extern "C" cudaError_t il__cu_mv3_gate_up(cudaStream_t s, il__mv_kind k, il_dtype t, const il__mv3_mat *gate,
                                          const void *w_up, size_t up_stride, int64_t n_in, const float *x,
                                          const void *work, int64_t n_tok) {
  const il__mv3_mat m[2] = {*gate, {w_up, up_stride, gate->n_out, gate->y, gate->ldy}};
  return il__mv3_set_launch(s, k, t, 2, m, n_in, x, work, n_tok, true);
}
