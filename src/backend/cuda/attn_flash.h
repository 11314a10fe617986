/* backend/cuda/attn_flash: the launchers of the flash attention kernels ("--attn flash").
 *
 *   attn_fd.cu  il__cu_attn_fd     flash-decoding: (token, KV head, context split) CTAs, each
 *                                  reading its K/V tiles once for the group's query heads, then
 *                                  a log-sum-exp combine of the splits (attn_fd.cuh)
 *   attn_fa.cu  il__cu_attn_fa     FlashAttention-2 style prefill: mma.sync m16n8k16 f16 tiles
 *                                  over the block table, causal tile skipping (sm_80+; attn_fa.cuh)
 *
 * Both take il__cu_attn (cuda.h) and report bad sequences, positions and block-table entries
 * through its fault record, as the naive kernel does. The fake module (tests/fakes) implements
 * them with the host twins of the same headers.
 */
#ifndef IL_BACKEND_CUDA_ATTN_FLASH_H
#define IL_BACKEND_CUDA_ATTN_FLASH_H

#include "backend/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when flash-decoding takes these heads: G * head_dim <= 2048, head_dim <= 256. */
bool il__cu_attn_fd_supports(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim);
/* Context splits for a call of n_tok tokens (1..32). */
int il__cu_attn_fd_splits(int64_t n_tok, int64_t n_kv_heads, int64_t n_ctx, int64_t head_dim);
/* Workspace bytes for n_tok tokens and `splits` splits (the partial m, l and outputs). */
size_t il__cu_attn_fd_workspace(int64_t n_tok, int64_t n_heads, int64_t head_dim, int splits);
/* Launches the split kernel and the combine; ws holds il__cu_attn_fd_workspace(..., S) bytes. */
cudaError_t il__cu_attn_fd(cudaStream_t s, const il__cu_attn *a, float *ws, int S);

/* True when the prefill kernel reads these cells (F32, F16, Q8_0) and head size (32, 64, 128). */
bool il__cu_attn_fa_supports(il_dtype kv_type, int64_t head_dim);
/* Fewest query tokens of a call worth the prefill kernel (fewer go to flash-decoding). */
int64_t il__cu_attn_fa_min_tokens(void);
/* Launches the prefill kernel (sm_80+ only: the caller checks). No workspace. F16/F32 cells
 * need every K/V row of a head at a 16-byte boundary (cudaErrorInvalidValue otherwise). */
cudaError_t il__cu_attn_fa(cudaStream_t s, const il__cu_attn *a);

#ifdef __cplusplus
}
#endif

#endif
