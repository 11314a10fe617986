/* engine/kv: contiguous KV cache allocation. */
#include "engine/kv.h"

#include <string.h>

size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq) {
  return 2 * (size_t)hp->n_layer * (size_t)n_seq * (size_t)n_ctx * (size_t)hp->n_head_kv * (size_t)hp->head_dim *
         sizeof(float);
}

il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq) {
  memset(kv, 0, sizeof *kv);
  kv->backend = b;
  kv->n_layer = hp->n_layer;
  kv->n_seq = n_seq;
  kv->n_ctx = n_ctx;
  kv->kv_dim = hp->n_head_kv * hp->head_dim;
  size_t half = il_kv_cache_bytes(hp, n_ctx, n_seq) / 2;
  il_status st = b->alloc(b, IL_MEM_KV, half, "kv cache (keys)", (void **)&kv->k);
  if (st == IL_OK) st = b->alloc(b, IL_MEM_KV, half, "kv cache (values)", (void **)&kv->v);
  if (st == IL_OK)
    st = b->alloc(b, IL_MEM_OTHER, sizeof(il_kv_view) * (size_t)hp->n_layer, "kv views", (void **)&kv->views);
  if (st != IL_OK) {
    il_kv_cache_free(kv);
    return st;
  }
  size_t per_layer = (size_t)n_seq * (size_t)n_ctx * (size_t)kv->kv_dim;
  for (int32_t l = 0; l < hp->n_layer; l++)
    kv->views[l] = (il_kv_view){kv->k + l * per_layer, kv->v + l * per_layer, n_seq, n_ctx, kv->kv_dim};
  return IL_OK;
}

void il_kv_cache_free(il_kv_cache *kv) {
  if (!kv->backend) return;
  if (kv->k) kv->backend->free(kv->backend, kv->k);
  if (kv->v) kv->backend->free(kv->backend, kv->v);
  if (kv->views) kv->backend->free(kv->backend, kv->views);
  memset(kv, 0, sizeof *kv);
}
