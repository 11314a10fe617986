/* backend/cuda/attention: the naive attention kernel, the reference every faster CUDA kernel
 * is compared with.
 *
 * One block of 128 threads per (token, head) item; a grid of at most IL__ATTN_GRID blocks walks
 * the items. For its item a block: copies q to shared memory; computes the score of every
 * position 0..pos[t] of the token's sequence (one thread per position, its key found through
 * the block table: cell = table[seq][p / block] * block + p % block) into its row of the
 * workspace; takes the maximum and the sum of exp(score - max) with block reductions; then
 * each thread forms some output dims as sum_p w_p v_p (neighbouring threads read neighbouring
 * V elements). KV cells are F32, F16, BF16 or Q8_0 (decode.cuh il__kv_elem: each element as the
 * CPU's kernels read it); arithmetic is F32. Sequence, position and block-table
 * entries are checked on the device; the first bad one goes to the fault record and the item
 * is skipped. With a sliding window (gemma3's local layers) every kernel starts at position
 * pos[t] - window + 1. Memory: workspace rows of n_ctx floats, one per resident block.
 * CPU reference: backend/cpu/cpu.c il__attn_worker.
 *
 * The memory-efficient kernel (il__cu_attn_memeff, "--attn memeff") keeps no score row: a block
 * of four warps takes one (token, head) item; each warp walks its quarter of the positions with
 * an online softmax (running max m, running sum l, and the output accumulated and rescaled by
 * exp(m_old - m_new) whenever the max grows), lane i owning dims i, i+32, ... of the head, so the
 * key and value rows are read with coalesced loads and the dot product is a warp reduction. The
 * four partial results are merged through shared memory at the end. No workspace; head_dim up
 * to 256. The default (listed first) since the first GPU run showed it matching the reference and
 * faster (cuda.c).
 */
#include <cuda_fp16.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"

#define IL__ATTN_THREADS 128
#define IL__ATTN_GRID 1024

/* Runs CALL(CT) for the cache's cell type; cudaErrorInvalidValue for a type without a reader. */
#define IL__FOR_KV_TYPE(t, CALL)                     \
  switch (t) {                                       \
  case IL_DTYPE_F32: CALL(IL_DTYPE_F32); break;      \
  case IL_DTYPE_F16: CALL(IL_DTYPE_F16); break;      \
  case IL_DTYPE_BF16: CALL(IL_DTYPE_BF16); break;    \
  case IL_DTYPE_Q8_0: CALL(IL_DTYPE_Q8_0); break;    \
  default: return cudaErrorInvalidValue;             \
  }

extern "C" int64_t il__cu_attn_naive_rows(int64_t n_items) { return n_items < IL__ATTN_GRID ? n_items : IL__ATTN_GRID; }

__device__ static float il__block_reduce(float v, bool is_max, float *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  __syncthreads(); /* sh may still be read from the previous reduction */
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  float r = sh[0];
  for (int w = 1; w < IL__ATTN_THREADS / 32; w++) r = is_max ? fmaxf(r, sh[w]) : r + sh[w];
  return r;
}

/* Element i of cell `cell` of a cache of type CT (an il_dtype). */
template <int CT>
__device__ static float il__kv_at(const void *base, size_t stride, int64_t cell, int64_t i) {
  return il__kv_elem<CT>((const uint8_t *)base + (size_t)cell * stride, i);
}

template <int CT>
__global__ void il__k_attn_naive(il__cu_attn a) {
  extern __shared__ float q_sh[]; /* head_dim floats */
  __shared__ float red[IL__ATTN_THREADS / 32];
  __shared__ int bad;
  const int64_t n_items = a.n_tok * a.n_heads, group = a.n_heads / a.n_kv_heads;
  float *scores = a.scores + (size_t)blockIdx.x * (size_t)a.n_ctx;
  for (int64_t it = blockIdx.x; it < n_items; it += gridDim.x) {
    const int64_t t = it / a.n_heads, h = it % a.n_heads, kvh = h / group;
    const int32_t seq = a.seq[t], pos = a.pos[t];
    if (threadIdx.x == 0) {
      bad = 0;
      if (seq < 0 || seq >= a.n_seq) {
        bad = 1;
        if (atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_SEQ) == 0)
          a.fault->launch = a.launch, a.fault->a = t, a.fault->b = seq, a.fault->c = a.n_seq;
      } else if (pos < 0 || pos >= a.n_ctx) {
        bad = 1;
        if (atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_POS) == 0)
          a.fault->launch = a.launch, a.fault->a = t, a.fault->b = pos, a.fault->c = a.n_ctx;
      }
    }
    __syncthreads();
    if (bad) {
      __syncthreads(); /* everyone has read `bad` before thread 0 resets it */
      continue;
    }
    const float *q = (const float *)((const uint8_t *)a.q + (size_t)t * a.q_stride) + h * a.head_dim;
    for (int64_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) q_sh[i] = q[i];
    __syncthreads();
    const int32_t *tab = a.table + (size_t)seq * (size_t)a.max_blocks;
    const int64_t koff = kvh * a.head_dim;
    const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0; /* the window's first */
    float mx = -INFINITY;
    for (int32_t p = lo + (int32_t)threadIdx.x; p <= pos; p += blockDim.x) {
      const int32_t blk = tab[p / a.block];
      const int64_t cell = (int64_t)blk * a.block + p % a.block;
      float sc = -INFINITY;
      if (blk < 0 || ((int64_t)blk + 1) * a.block > a.n_cells) {
        if (atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_BLOCK) == 0)
          a.fault->launch = a.launch, a.fault->a = seq, a.fault->b = blk, a.fault->c = a.n_cells;
      } else {
        float d = 0.0f;
        for (int64_t i = 0; i < a.head_dim; i++) d += q_sh[i] * il__kv_at<CT>(a.k, a.k_stride, cell, koff + i);
        sc = d * a.scale;
      }
      scores[p] = sc;
      mx = fmaxf(mx, sc);
    }
    mx = il__block_reduce(mx, true, red);
    float sum = 0.0f;
    for (int32_t p = lo + (int32_t)threadIdx.x; p <= pos; p += blockDim.x) {
      const float e = scores[p] == -INFINITY ? 0.0f : expf(scores[p] - mx);
      scores[p] = e;
      sum += e;
    }
    sum = il__block_reduce(sum, false, red);
    __syncthreads(); /* every weight is written before any thread reads them all */
    const float norm = sum > 0.0f ? 1.0f / sum : 0.0f;
    float *o = (float *)((uint8_t *)a.out + (size_t)t * a.out_stride) + h * a.head_dim;
    for (int64_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
      float acc = 0.0f;
      for (int32_t p = lo; p <= pos; p++) {
        const int32_t blk = tab[p / a.block];
        if (blk < 0 || ((int64_t)blk + 1) * a.block > a.n_cells) continue;
        const int64_t cell = (int64_t)blk * a.block + p % a.block;
        acc += scores[p] * norm * il__kv_at<CT>(a.v, a.v_stride, cell, koff + i);
      }
      o[i] = acc;
    }
    __syncthreads(); /* q_sh and scores are reused by the next item */
  }
}

extern "C" cudaError_t il__cu_attn_naive(cudaStream_t s, const il__cu_attn *a) {
  const int64_t n_items = a->n_tok * a->n_heads;
  if (n_items <= 0) return cudaSuccess;
  const unsigned grid = (unsigned)il__cu_attn_naive_rows(n_items);
  const size_t sh = (size_t)a->head_dim * sizeof(float);
#define IL__NAIVE(CT) il__k_attn_naive<CT><<<grid, IL__ATTN_THREADS, sh, s>>>(*a)
  IL__FOR_KV_TYPE(a->kv_type, IL__NAIVE);
#undef IL__NAIVE
  return cudaGetLastError();
}

/* ---- memeff ---- */

#define IL__ME_WARPS 4
#define IL__ME_DPL 8 /* head dims per lane: head_dim <= 256 */

template <int CT>
__global__ void il__k_attn_memeff(il__cu_attn a) {
  __shared__ float m_sh[IL__ME_WARPS], l_sh[IL__ME_WARPS];
  __shared__ float acc_sh[IL__ME_WARPS][32 * IL__ME_DPL];
  const int64_t it = blockIdx.x, group = a.n_heads / a.n_kv_heads;
  const int64_t t = it / a.n_heads, h = it % a.n_heads, kvh = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int32_t seq = a.seq[t], pos = a.pos[t];
  if (seq < 0 || seq >= a.n_seq) { /* every thread reads the same values: a uniform exit */
    if (threadIdx.x == 0 && atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_SEQ) == 0)
      a.fault->launch = a.launch, a.fault->a = t, a.fault->b = seq, a.fault->c = a.n_seq;
    return;
  }
  if (pos < 0 || pos >= a.n_ctx) {
    if (threadIdx.x == 0 && atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_POS) == 0)
      a.fault->launch = a.launch, a.fault->a = t, a.fault->b = pos, a.fault->c = a.n_ctx;
    return;
  }
  const int64_t hd = a.head_dim, koff = kvh * hd;
  const float *q = (const float *)((const uint8_t *)a.q + (size_t)t * a.q_stride) + h * hd;
  float qr[IL__ME_DPL], acc[IL__ME_DPL];
#pragma unroll
  for (int j = 0; j < IL__ME_DPL; j++) {
    const int64_t d = lane + 32 * j;
    qr[j] = d < hd ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int32_t *tab = a.table + (size_t)seq * (size_t)a.max_blocks;
  /* the positions from the window's first (0 without one) to pos, a quarter per warp */
  const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  const int32_t n_pos = pos + 1 - lo, per = (n_pos + IL__ME_WARPS - 1) / IL__ME_WARPS;
  const int32_t p0 = lo + warp * per, p1 = p0 + per < lo + n_pos ? p0 + per : lo + n_pos;
  float m = -INFINITY, l = 0.0f;
  for (int32_t p = p0; p < p1; p++) {
    const int32_t blk = tab[p / a.block];
    if (blk < 0 || ((int64_t)blk + 1) * a.block > a.n_cells) {
      if (lane == 0 && atomicCAS(&a.fault->kind, 0, IL__CU_FAULT_BLOCK) == 0)
        a.fault->launch = a.launch, a.fault->a = seq, a.fault->b = blk, a.fault->c = a.n_cells;
      continue;
    }
    const int64_t cell = (int64_t)blk * a.block + p % a.block;
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < IL__ME_DPL; j++) {
      const int64_t dd = lane + 32 * j;
      if (dd < hd) d += qr[j] * il__kv_at<CT>(a.k, a.k_stride, cell, koff + dd);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    const float s = d * a.scale, m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < IL__ME_DPL; j++) {
      const int64_t dd = lane + 32 * j;
      if (dd < hd) acc[j] = acc[j] * corr + e * il__kv_at<CT>(a.v, a.v_stride, cell, koff + dd);
    }
    m = m_new;
  }
  if (lane == 0) m_sh[warp] = m, l_sh[warp] = l;
#pragma unroll
  for (int j = 0; j < IL__ME_DPL; j++) acc_sh[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < IL__ME_WARPS; w++) mx = fmaxf(mx, m_sh[w]);
  float L = 0.0f, f[IL__ME_WARPS];
  for (int w = 0; w < IL__ME_WARPS; w++) {
    f[w] = m_sh[w] == -INFINITY ? 0.0f : expf(m_sh[w] - mx);
    L += l_sh[w] * f[w];
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  float *o = (float *)((uint8_t *)a.out + (size_t)t * a.out_stride) + h * hd;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < IL__ME_WARPS; w++) v += acc_sh[w][d] * f[w];
    o[d] = v * inv;
  }
}

extern "C" int64_t il__cu_attn_memeff_max_head_dim(void) { return 32 * IL__ME_DPL; }

extern "C" cudaError_t il__cu_attn_memeff(cudaStream_t s, const il__cu_attn *a) {
  const int64_t n_items = a->n_tok * a->n_heads;
  if (n_items <= 0) return cudaSuccess;
  if (n_items > 0x7fffffff || a->head_dim > 32 * IL__ME_DPL) return cudaErrorInvalidValue;
#define IL__MEMEFF(CT) il__k_attn_memeff<CT><<<(unsigned)n_items, 32 * IL__ME_WARPS, 0, s>>>(*a)
  IL__FOR_KV_TYPE(a->kv_type, IL__MEMEFF);
#undef IL__MEMEFF
  return cudaGetLastError();
}
