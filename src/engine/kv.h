/* engine/kv: the KV cache: per layer, K and V cells on the backend, and the block table that
 * maps (sequence, position) to a cell.
 *
 * The cache is the seam's one layout (backend/backend.h il_kv_view): cells [n_cells x kv_dim]
 * and cell(seq, pos) = table[seq][pos / block] * block + pos % block. Contiguous, today's only
 * mode, is one block of n_ctx cells per sequence (table[seq] = seq), so a sequence's history
 * is one run that attention streams through. The host keeps a copy of the table and computes
 * each batch entry's slot, so the model uploads slots with the batch and the device writes K/V
 * there (kv_store) with no host access to cache memory. Allocated once under the kv category.
 * Not for: attention itself (backend/), scheduling sequences (engine/engine).
 */
#ifndef IL_ENGINE_KV_H
#define IL_ENGINE_KV_H

#include "backend/backend.h"
#include "model/llama.h"

typedef struct {
  il_backend *backend;
  int32_t n_layer, n_seq, n_ctx, kv_dim;
  int32_t block, max_blocks;
  il_dtype type;        /* cell type (F32) */
  il_tensor *k, *v;     /* [n_layer], each [n_seq * n_ctx x kv_dim] */
  il_tensor table;      /* I32 [n_seq x max_blocks] on the backend */
  int32_t *host_table;  /* the same, on the host */
  il_kv_view *views;    /* [n_layer], host memory */
} il_kv_cache;

/* Bytes the cache needs on the backend for these sizes (cells and table). */
size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq);
/* Allocates the cache; IL_ERR_OOM with the memory report when it does not fit (nothing left
 * allocated). */
il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq);
void il_kv_cache_free(il_kv_cache *kv);
/* The cell of (seq, pos); both must be in range (the model checks entries first). */
static inline int32_t il_kv_cache_slot(const il_kv_cache *kv, int32_t seq, int32_t pos) {
  return kv->host_table[(size_t)seq * (size_t)kv->max_blocks + (size_t)(pos / kv->block)] * kv->block + pos % kv->block;
}

#endif
