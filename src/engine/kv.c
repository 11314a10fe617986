/* engine/kv: KV cache allocation and the block table. */
#include "engine/kv.h"

#include <stdio.h>
#include <string.h>

size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq) {
  return 2 * (size_t)hp->n_layer * (size_t)n_seq * (size_t)n_ctx * (size_t)hp->n_head_kv * (size_t)hp->head_dim *
             sizeof(float) +
         (size_t)n_seq * sizeof(int32_t);
}

static il_status il__kv_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp) {
  const int64_t cells = (int64_t)kv->n_seq * kv->n_ctx;
  kv->k = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * (size_t)hp->n_layer, "kv tensors");
  kv->v = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * (size_t)hp->n_layer, "kv tensors");
  kv->views = il_mem_calloc(IL_MEM_OTHER, sizeof(il_kv_view) * (size_t)hp->n_layer, "kv views");
  kv->host_table = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)kv->n_seq * (size_t)kv->max_blocks, "kv block table");
  if (!kv->k || !kv->v || !kv->views || !kv->host_table) return IL_ERR_OOM;
  for (int32_t s = 0; s < kv->n_seq; s++) kv->host_table[s] = s; /* contiguous: block s is sequence s */
  IL_TRY(il_backend_tensor_new(b, IL_MEM_KV, kv->n_seq, kv->max_blocks, IL_DTYPE_I32, "kv block table", &kv->table));
  IL_TRY(b->ops->upload(b, kv->table, kv->host_table, sizeof(int32_t) * (size_t)kv->n_seq * (size_t)kv->max_blocks));
  for (int32_t l = 0; l < hp->n_layer; l++) {
    char name[2][48];
    snprintf(name[0], sizeof name[0], "kv cache keys (layer %d)", l);
    snprintf(name[1], sizeof name[1], "kv cache values (layer %d)", l);
    IL_TRY(il_backend_tensor_new(b, IL_MEM_KV, cells, kv->kv_dim, kv->type, name[0], &kv->k[l]));
    IL_TRY(il_backend_tensor_new(b, IL_MEM_KV, cells, kv->kv_dim, kv->type, name[1], &kv->v[l]));
    kv->k[l].name = "kv cache keys";
    kv->v[l].name = "kv cache values";
    kv->views[l] = (il_kv_view){kv->k[l], kv->v[l], kv->table, kv->block, kv->n_seq, kv->max_blocks, kv->n_ctx};
  }
  return IL_OK;
}

il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq) {
  memset(kv, 0, sizeof *kv);
  kv->backend = b;
  kv->n_layer = hp->n_layer;
  kv->n_seq = n_seq;
  kv->n_ctx = n_ctx;
  kv->kv_dim = hp->n_head_kv * hp->head_dim;
  kv->block = n_ctx;
  kv->max_blocks = 1;
  kv->type = IL_DTYPE_F32;
  il_status st = il__kv_init(kv, b, hp);
  if (st != IL_OK) il_kv_cache_free(kv);
  return st;
}

void il_kv_cache_free(il_kv_cache *kv) {
  if (!kv->backend) return;
  for (int32_t l = 0; l < kv->n_layer; l++) {
    if (kv->k) il_backend_tensor_free(kv->backend, &kv->k[l]);
    if (kv->v) il_backend_tensor_free(kv->backend, &kv->v[l]);
  }
  il_backend_tensor_free(kv->backend, &kv->table);
  il_mem_free(kv->k);
  il_mem_free(kv->v);
  il_mem_free(kv->views);
  il_mem_free(kv->host_table);
  memset(kv, 0, sizeof *kv);
}
