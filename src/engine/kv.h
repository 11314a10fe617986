/* engine/kv: the contiguous KV cache.
 *
 * For every layer, K and V hold n_seq sequences x n_ctx positions x kv_dim floats, so the
 * cell of (seq, pos) is at ((seq * n_ctx) + pos) * kv_dim: a sequence's history is one
 * contiguous run that attention streams through. Allocated once through the backend under the
 * kv category. Not for: paged layouts (a later module with the same view interface).
 */
#ifndef IL_ENGINE_KV_H
#define IL_ENGINE_KV_H

#include "backend/backend.h"
#include "model/llama.h"

typedef struct {
  il_backend *backend;
  int32_t n_layer, n_seq, n_ctx, kv_dim;
  float *k, *v;          /* [n_layer][n_seq][n_ctx][kv_dim] */
  il_kv_view *views;     /* [n_layer] */
} il_kv_cache;

/* Bytes the cache needs for these sizes. */
size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq);
/* Allocates the cache; IL_ERR_OOM with the memory report when it does not fit. */
il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq);
void il_kv_cache_free(il_kv_cache *kv);

#endif
