/* tests/fakes/fake_cuda_attn: the flash attention launchers (backend/cuda/attn_flash.h) for the
 * fake module: the kernels' own host twins (attn_fd.cuh; attn_fa.cuh's tile loop over emulated
 * mma.sync and ldmatrix), so the glue's `flash` path runs end to
 * end in CI with the arithmetic the device runs. Compiled by the host C++ compiler.
 */
#include <cuda_runtime.h> /* __host__, __device__ for a host compiler */

#include "fake_graph.h"

#include "backend/cuda/attn_fa.cuh"
#include "backend/cuda/attn_flash.h"

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

extern "C" cudaError_t il__cu_attn_fd(cudaStream_t s, const il__cu_attn *a, float *ws, int S) {
  const il__cu_attn ax = *a; /* a node keeps its own copy */
  FAKE_LAUNCH(s, "attn_fd", il__cu_attn_fd(s, &ax, ws, S));
  if (a->n_tok <= 0) return cudaSuccess;
  if (!il__cu_attn_fd_supports(a->n_heads, a->n_kv_heads, a->head_dim) || S < 1) return cudaErrorInvalidValue;
  if (a->kv_type == IL_DTYPE_Q8_0 && a->head_dim % 32) return cudaErrorInvalidValue;
  return il__fd_call_host(*a, ws, S, nullptr) ? cudaSuccess : cudaErrorInvalidValue;
}

extern "C" bool il__cu_attn_fa_supports(il_dtype kv_type, int64_t head_dim) {
  return il__fa_head_ok(head_dim) && il__fa_type_ok(kv_type);
}

extern "C" int64_t il__cu_attn_fa_min_tokens(void) { return IL__FA_MIN_TOK; }

extern "C" cudaError_t il__cu_attn_fa(cudaStream_t s, const il__cu_attn *a) {
  const il__cu_attn ax = *a; /* a node keeps its own copy */
  FAKE_LAUNCH(s, "attn_fa", il__cu_attn_fa(s, &ax));
  if (a->n_tok <= 0) return cudaSuccess;
  if (!il__cu_attn_fa_supports(a->kv_type, a->head_dim)) return cudaErrorInvalidValue;
  if (a->kv_type != IL_DTYPE_Q8_0 && !il__fd_vec_ok(*a)) return cudaErrorInvalidValue; /* as the device launcher */
  return il__fa_call_host(*a) ? cudaSuccess : cudaErrorInvalidValue;
}
