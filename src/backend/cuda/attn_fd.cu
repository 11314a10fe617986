/* backend/cuda/attn_fd: the flash-decoding kernels ("--attn flash" for decode steps).
 *
 * il__k_fd_split: grid (n_tok x S splits, n_kv_heads), IL__FD_THREADS threads; each CTA runs
 * attn_fd.cuh's steps for its (token, KV head, split) with a barrier between steps, and writes
 * the split's (m, l, o) for the group's query heads to the workspace. il__k_fd_combine: one CTA
 * per (token, head) merges the splits. The arithmetic is all in attn_fd.cuh, shared with the
 * host twin the tests run, so the two agree bit for bit.
 * CPU reference: backend/cpu/attn.c (naive), through tests/test_cuda_attn_twin.cpp.
 */
#include "backend/cuda/attn_fd.cuh"
#include "backend/cuda/attn_flash.h"

template <int CT, bool VEC>
__global__ void __launch_bounds__(IL__FD_THREADS) il__k_fd_split(il__cu_attn a, float *ws, int S) {
  extern __shared__ float il__fd_mem[];
  const int64_t t = blockIdx.x / S, kvh = blockIdx.y;
  const int s = (int)(blockIdx.x % S), tid = threadIdx.x;
  const int64_t G = (int)a.n_heads / (int)a.n_kv_heads, D = a.head_dim;
  const int T = il__fd_tile(D);
  int32_t seq, pos;
  if (!il__fd_token(a, t, &seq, &pos, tid == 0 && kvh == 0 && s == 0)) return; /* uniform over the CTA */
  il__fd_smem sh = il__fd_carve(il__fd_mem, G, D);
  float o[IL__FD_MAX_OUT];
#pragma unroll
  for (int k = 0; k < IL__FD_MAX_OUT; k++) o[k] = 0.0f;
  const float scale2 = il__mul(a.scale, 1.4426950408889634f);
  il__fd_begin(a, sh, t, kvh, tid);
  int32_t p0, p1;
  il__fd_range_at(a, pos, T, S, s, &p0, &p1);
  for (int32_t pt = p0; pt < p1; pt += T) {
    const int n = p1 - pt < T ? p1 - pt : T;
    __syncthreads(); /* the previous tile's readers are done */
    il__fd_table(a, sh, seq, pt, n, tid, nullptr);
    __syncthreads();
    il__fd_load<CT, VEC>(a, sh, kvh, pt, n, tid, nullptr);
    __syncthreads();
    il__fd_scores(a, sh, scale2, pt, n, tid);
    __syncthreads();
    il__fd_softmax(a, sh, n, tid);
    __syncthreads();
    il__fd_output(a, sh, n, tid, o);
  }
  __syncthreads();
  il__fd_store(a, sh, ws, t, kvh, S, s, tid, o);
}

__global__ void __launch_bounds__(128) il__k_fd_combine(il__cu_attn a, const float *ws, int S) {
  const int64_t t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  int32_t seq, pos;
  if (!il__fd_token(a, t, &seq, &pos, false)) return;
  il__fd_combine(a, ws, S, t, h, threadIdx.x, blockDim.x);
}

extern "C" bool il__cu_attn_fd_supports(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0 && head_dim <= 256 &&
         (n_heads / n_kv_heads) * head_dim <= (int64_t)IL__FD_THREADS * IL__FD_MAX_OUT;
}

extern "C" int il__cu_attn_fd_splits(int64_t n_tok, int64_t n_kv_heads, int64_t n_ctx, int64_t head_dim) {
  return il__fd_splits(n_tok, n_kv_heads, n_ctx, head_dim);
}

extern "C" size_t il__cu_attn_fd_workspace(int64_t n_tok, int64_t n_heads, int64_t head_dim, int splits) {
  return (size_t)n_tok * (size_t)n_heads * (size_t)splits * (size_t)il__fd_part(head_dim) * sizeof(float);
}

extern "C" cudaError_t il__cu_attn_fd(cudaStream_t st, const il__cu_attn *a, float *ws, int S) {
  if (a->n_tok <= 0) return cudaSuccess;
  if (!il__cu_attn_fd_supports(a->n_heads, a->n_kv_heads, a->head_dim) || S < 1 ||
      a->n_tok * S > 0x7fffffff || a->n_kv_heads > 65535 || a->n_tok * a->n_heads > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (a->kv_type == IL_DTYPE_Q8_0 && a->head_dim % 32) return cudaErrorInvalidValue;
  const dim3 grid((unsigned)(a->n_tok * S), (unsigned)a->n_kv_heads);
  const size_t sh = il__fd_smem_bytes(a->n_heads / a->n_kv_heads, a->head_dim);
  const bool vec = il__fd_vec_ok(*a);
#define IL__FD_GO(CT, V) il__k_fd_split<CT, V><<<grid, IL__FD_THREADS, sh, st>>>(*a, ws, S)
  switch (a->kv_type) {
  case IL_DTYPE_F32: if (vec) IL__FD_GO(IL_DTYPE_F32, true); else IL__FD_GO(IL_DTYPE_F32, false); break;
  case IL_DTYPE_F16: if (vec) IL__FD_GO(IL_DTYPE_F16, true); else IL__FD_GO(IL_DTYPE_F16, false); break;
  case IL_DTYPE_BF16: if (vec) IL__FD_GO(IL_DTYPE_BF16, true); else IL__FD_GO(IL_DTYPE_BF16, false); break;
  case IL_DTYPE_Q8_0: IL__FD_GO(IL_DTYPE_Q8_0, false); break;
  default: return cudaErrorInvalidValue;
  }
#undef IL__FD_GO
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  il__k_fd_combine<<<(unsigned)(a->n_tok * a->n_heads), 128, 0, st>>>(*a, ws, S);
  return cudaGetLastError();
}
