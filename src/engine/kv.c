/* engine/kv: KV cache allocation, the block table, and sequence operations. */
#include "engine/kv.h"

#include <stdio.h>
#include <string.h>

static il_kv_opts il__opts(const il_kv_opts *o) {
  il_kv_opts d = {IL_DTYPE_F32, 0, NULL};
  if (o) d = *o;
  return d;
}

/* Blocks and block size for these sizes. */
static void il__layout(int32_t n_ctx, int32_t n_seq, const il_kv_opts *o, int32_t *block, int32_t *max_blocks,
                       int32_t *n_blocks) {
  if (o->block > 0) {
    *block = o->block;
    *max_blocks = (n_ctx + o->block - 1) / o->block;
    *n_blocks = *max_blocks * n_seq; /* the same capacity as contiguous; sequences share it */
  } else {
    *block = n_ctx;
    *max_blocks = 1;
    *n_blocks = n_seq;
  }
}

static bool il__kv_type_ok(il_dtype t) {
  return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16 || t == IL_DTYPE_Q8_0;
}

il_status il_kv_type_parse(const char *name, il_dtype *out) {
  if (!*name) name = "f16";
  if (!il_dtype_parse(name, out) || !il__kv_type_ok(*out))
    return il_error(IL_ERR_INVALID_ARG, "--kv-type: '%s' is not a KV cell type (f16, bf16, f32, q8_0)", name);
  return IL_OK;
}

size_t il_kv_cache_layer_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *op) {
  const il_kv_opts o = il__opts(op);
  int32_t block, max_blocks, n_blocks;
  il__layout(n_ctx, n_seq, &o, &block, &max_blocks, &n_blocks);
  const size_t row = il_tensor_row_bytes(o.type, (int64_t)hp->n_head_kv * hp->head_dim);
  return 2 * (size_t)n_blocks * (size_t)block * row;
}

size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *op) {
  const il_kv_opts o = il__opts(op);
  int32_t block, max_blocks, n_blocks;
  il__layout(n_ctx, n_seq, &o, &block, &max_blocks, &n_blocks);
  return (size_t)hp->n_layer * il_kv_cache_layer_bytes(hp, n_ctx, n_seq, op) +
         (size_t)n_seq * (size_t)max_blocks * sizeof(int32_t);
}

static il_status il__kv_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp) {
  const int64_t cells = (int64_t)kv->n_blocks * kv->block;
  const size_t n_table = (size_t)kv->n_seq * (size_t)kv->max_blocks;
  kv->k = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * (size_t)hp->n_layer, "kv tensors");
  kv->v = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * (size_t)hp->n_layer, "kv tensors");
  kv->views = il_mem_calloc(IL_MEM_OTHER, sizeof(il_kv_view) * (size_t)hp->n_layer, "kv views");
  kv->host_table = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n_table, "kv block table");
  kv->seq_len = il_mem_calloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)kv->n_seq, "kv sequence lengths");
  if (!kv->k || !kv->v || !kv->views || !kv->host_table || !kv->seq_len) return IL_ERR_OOM;
  if (kv->paged) {
    const size_t per_pos = 2 * (size_t)hp->n_layer * il_tensor_row_bytes(kv->type, kv->kv_dim);
    IL_TRY(il_kvpages_new(kv->n_blocks, kv->block, kv->max_blocks, kv->n_seq, per_pos, &kv->pages));
    il_kvpages_export(kv->pages, kv->host_table);
  } else {
    for (int32_t s = 0; s < kv->n_seq; s++) kv->host_table[s] = s; /* contiguous: block s is sequence s */
  }
  kv->layer_b = il_mem_alloc(IL_MEM_OTHER, sizeof(il_backend *) * (size_t)hp->n_layer, "kv placement");
  if (!kv->layer_b) return IL_ERR_OOM;
  for (int32_t l = 0; l < hp->n_layer; l++) {
    il_backend *lb = kv->layer_b[l] = kv->opt_layer_b && kv->opt_layer_b[l] ? kv->opt_layer_b[l] : b;
    int t = 0;
    while (t < IL_KV_TABLES && kv->table_b[t] && kv->table_b[t] != lb) t++;
    if (t == IL_KV_TABLES) return il_error(IL_ERR_UNSUPPORTED, "kv cache: layers on more than %d backends", IL_KV_TABLES);
    if (!kv->table_b[t]) {
      kv->table_b[t] = lb;
      IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, kv->n_seq, kv->max_blocks, IL_DTYPE_I32, "kv block table", &kv->table[t]));
    }
  }
  kv->table_dirty = true;
  IL_TRY(il_kv_cache_sync(kv));
  for (int32_t l = 0; l < hp->n_layer; l++) {
    il_backend *lb = kv->layer_b[l];
    int t = 0;
    while (kv->table_b[t] != lb) t++; /* there: every layer's backend has its table (above) */
    const il_tensor table = kv->table[t];
    char name[2][48];
    snprintf(name[0], sizeof name[0], "kv cache keys (layer %d)", l);
    snprintf(name[1], sizeof name[1], "kv cache values (layer %d)", l);
    IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, cells, kv->kv_dim, kv->type, name[0], &kv->k[l]));
    IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, cells, kv->kv_dim, kv->type, name[1], &kv->v[l]));
    kv->k[l].name = "kv cache keys";
    kv->v[l].name = "kv cache values";
    kv->views[l] = (il_kv_view){kv->k[l], kv->v[l], table, kv->block, kv->n_seq, kv->max_blocks, kv->n_ctx};
  }
  return IL_OK;
}

il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq,
                           const il_kv_opts *op) {
  memset(kv, 0, sizeof *kv);
  const il_kv_opts o = il__opts(op);
  if (!il__kv_type_ok(o.type))
    return il_error(IL_ERR_UNSUPPORTED, "--kv-type %s: the cache holds f32, f16, bf16 or q8_0 cells",
                    il_dtype_name(o.type));
  if (o.type == IL_DTYPE_Q8_0 && hp->head_dim % 32)
    return il_error(IL_ERR_UNSUPPORTED, "--kv-type q8_0: head_dim %d is not a multiple of 32, the q8_0 block",
                    (int)hp->head_dim);
  if (!b->ops->supports(b, IL_OP_ATTENTION, o.type, IL_DTYPE_F32))
    return il_error(IL_ERR_UNSUPPORTED, "--kv-type %s: this device's attention kernels cannot read it",
                    il_dtype_name(o.type));
  if (o.block < 0 || o.block > n_ctx)
    return il_error(IL_ERR_INVALID_ARG, "--kv-block %d: must be 1..%d (the context)", o.block, n_ctx);
  if (n_ctx <= 0 || n_seq <= 0 || (int64_t)n_ctx * n_seq > INT32_MAX)
    return il_error(IL_ERR_INVALID_ARG, "kv cache: --ctx %d x --n-seq %d cells: must be 1..%d", n_ctx, n_seq, INT32_MAX);
  kv->backend = b;
  kv->n_layer = hp->n_layer;
  kv->n_seq = n_seq;
  kv->n_ctx = n_ctx;
  kv->kv_dim = hp->n_head_kv * hp->head_dim;
  kv->type = o.type;
  kv->paged = o.block > 0;
  kv->opt_layer_b = o.layer_b;
  il__layout(n_ctx, n_seq, &o, &kv->block, &kv->max_blocks, &kv->n_blocks);
  il_status st = il__kv_init(kv, b, hp);
  if (st != IL_OK) il_kv_cache_free(kv);
  return st;
}

void il_kv_cache_free(il_kv_cache *kv) {
  if (!kv->backend) return;
  for (int32_t l = 0; kv->layer_b && l < kv->n_layer; l++) {
    if (kv->k) il_backend_tensor_free(kv->layer_b[l], &kv->k[l]);
    if (kv->v) il_backend_tensor_free(kv->layer_b[l], &kv->v[l]);
  }
  for (int t = 0; t < IL_KV_TABLES; t++)
    if (kv->table_b[t]) il_backend_tensor_free(kv->table_b[t], &kv->table[t]);
  il_mem_free(kv->layer_b);
  il_kvpages_free(kv->pages);
  il_mem_free(kv->k);
  il_mem_free(kv->v);
  il_mem_free(kv->views);
  il_mem_free(kv->host_table);
  il_mem_free(kv->seq_len);
  memset(kv, 0, sizeof *kv);
}

il_status il_kv_cache_sync(il_kv_cache *kv) {
  if (!kv->table_dirty) return IL_OK;
  for (int t = 0; t < IL_KV_TABLES && kv->table_b[t]; t++)
    IL_TRY(kv->table_b[t]->ops->upload(kv->table_b[t], kv->table[t], kv->host_table,
                                       sizeof(int32_t) * (size_t)kv->n_seq * (size_t)kv->max_blocks));
  kv->table_dirty = false;
  return IL_OK;
}

/* Copies cells [src0, src0 + n) to [dst0, dst0 + n) in every layer's K and V, on the device. */
static il_status il__copy_cells(il_kv_cache *kv, int64_t src0, int64_t dst0, int64_t n) {
  for (int32_t l = 0; l < kv->n_layer && n > 0; l++) {
    il_backend *b = kv->layer_b[l];
    IL_TRY(b->ops->copy(b, il_tensor_rows(kv->k[l], dst0, n), il_tensor_rows(kv->k[l], src0, n)));
    IL_TRY(b->ops->copy(b, il_tensor_rows(kv->v[l], dst0, n), il_tensor_rows(kv->v[l], src0, n)));
  }
  return IL_OK;
}

static il_status il__seq_check(const il_kv_cache *kv, int32_t seq) {
  if (seq < 0 || seq >= kv->n_seq) return il_error(IL_ERR_RANGE, "kv cache: sequence %d outside [0, %d)", seq, kv->n_seq);
  return IL_OK;
}

il_status il_kv_cache_prepare(il_kv_cache *kv, int32_t seq, int32_t pos, int32_t *slot) {
  IL_TRY(il__seq_check(kv, seq));
  if (pos < 0 || pos >= kv->n_ctx)
    return il_error(IL_ERR_RANGE, "kv cache: position %d outside the context of %d", pos, kv->n_ctx);
  if (!kv->paged) {
    kv->seq_len[seq] = pos + 1;
    *slot = seq * kv->n_ctx + pos;
    return IL_OK;
  }
  int32_t len = il_kvpages_seq_len(kv->pages, seq);
  if (len < 0) {
    IL_TRY(il_kvpages_seq_add(kv->pages, seq));
    len = 0;
  }
  if (pos < len) IL_TRY(il_kvpages_seq_truncate(kv->pages, seq, pos)); /* rewriting: later positions go */
  il_kvpages_copy cp;
  int n_cp = 0;
  IL_TRY(il_kvpages_reserve(kv->pages, seq, pos + 1, &cp, &n_cp));
  if (n_cp) IL_TRY(il__copy_cells(kv, (int64_t)cp.src * kv->block, (int64_t)cp.dst * kv->block, cp.n_pos));
  if (pos + 1 != len || n_cp) {
    il_kvpages_export(kv->pages, kv->host_table);
    kv->table_dirty = true;
  }
  kv->seq_len[seq] = pos + 1;
  int64_t cell;
  IL_TRY(il_kvpages_slot(kv->pages, seq, pos, &cell));
  *slot = (int32_t)cell;
  return IL_OK;
}

il_status il_kv_cache_seq_remove(il_kv_cache *kv, int32_t seq) {
  IL_TRY(il__seq_check(kv, seq));
  kv->seq_len[seq] = 0;
  if (!kv->paged || il_kvpages_seq_len(kv->pages, seq) < 0) return IL_OK;
  IL_TRY(il_kvpages_seq_remove(kv->pages, seq));
  il_kvpages_export(kv->pages, kv->host_table);
  kv->table_dirty = true;
  return IL_OK;
}

il_status il_kv_cache_seq_truncate(il_kv_cache *kv, int32_t seq, int32_t n_pos) {
  IL_TRY(il__seq_check(kv, seq));
  if (n_pos < 0 || n_pos > kv->seq_len[seq])
    return il_error(IL_ERR_RANGE, "kv cache: truncate sequence %d of %d positions to %d", seq, kv->seq_len[seq], n_pos);
  kv->seq_len[seq] = n_pos;
  if (!kv->paged) return IL_OK;
  IL_TRY(il_kvpages_seq_truncate(kv->pages, seq, n_pos));
  il_kvpages_export(kv->pages, kv->host_table);
  kv->table_dirty = true;
  return IL_OK;
}

il_status il_kv_cache_seq_fork(il_kv_cache *kv, int32_t src, int32_t dst) {
  IL_TRY(il__seq_check(kv, src));
  IL_TRY(il__seq_check(kv, dst));
  if (src == dst) return il_error(IL_ERR_INVALID_ARG, "kv cache: fork of sequence %d onto itself", src);
  const int32_t n = kv->seq_len[src];
  if (!kv->paged) {
    IL_TRY(il__copy_cells(kv, (int64_t)src * kv->n_ctx, (int64_t)dst * kv->n_ctx, n));
  } else {
    if (il_kvpages_seq_len(kv->pages, dst) >= 0) IL_TRY(il_kvpages_seq_remove(kv->pages, dst));
    if (il_kvpages_seq_len(kv->pages, src) < 0) IL_TRY(il_kvpages_seq_add(kv->pages, src));
    IL_TRY(il_kvpages_seq_fork(kv->pages, src, dst));
    il_kvpages_export(kv->pages, kv->host_table);
    kv->table_dirty = true;
  }
  kv->seq_len[dst] = n;
  return IL_OK;
}

int32_t il_kv_cache_seq_len(const il_kv_cache *kv, int32_t seq) {
  return seq >= 0 && seq < kv->n_seq ? kv->seq_len[seq] : 0;
}

il_status il_kv_cache_prefix_enable(il_kv_cache *kv) {
  if (!kv->paged) return il_error(IL_ERR_UNSUPPORTED, "prefix cache: needs --kv paged (the cache is contiguous)");
  return il_kvpages_prefix_enable(kv->pages);
}

bool il_kv_cache_prefix_enabled(const il_kv_cache *kv) { return kv->paged && il_kvpages_prefix_enabled(kv->pages); }

il_status il_kv_cache_prefix_store(il_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n) {
  if (!il_kv_cache_prefix_enabled(kv)) return IL_OK;
  IL_TRY(il__seq_check(kv, seq));
  if (il_kvpages_seq_len(kv->pages, seq) < 0) return IL_OK; /* nothing written */
  return il_kvpages_prefix_store(kv->pages, seq, tokens, n);
}

il_status il_kv_cache_prefix_reuse(il_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n, int32_t *n_pos) {
  *n_pos = 0;
  if (!il_kv_cache_prefix_enabled(kv)) return IL_OK;
  IL_TRY(il_kv_cache_seq_remove(kv, seq));
  IL_TRY(il_kvpages_prefix_reuse(kv->pages, seq, tokens, n, n_pos));
  kv->seq_len[seq] = *n_pos;
  il_kvpages_export(kv->pages, kv->host_table);
  kv->table_dirty = true;
  return IL_OK;
}

void il_kv_cache_stats_get(const il_kv_cache *kv, int64_t fit_len, il_kv_cache_stats *out) {
  memset(out, 0, sizeof *out);
  const size_t per_pos = 2 * (size_t)kv->n_layer * il_tensor_row_bytes(kv->type, kv->kv_dim);
  if (fit_len < 1) fit_len = 1;
  if (kv->paged) {
    il_kvpages_stats ps;
    il_kvpages_stats_get(kv->pages, fit_len, &ps);
    out->bytes_reserved = ps.bytes_pool;
    out->bytes_used = ps.bytes_used;
    out->bytes_waste = ps.bytes_waste + (ps.bytes_pool - ps.bytes_reserved);
    out->bytes_shared_saved = ps.bytes_saved_by_sharing;
    out->blocks_total = ps.blocks_total;
    out->blocks_free = ps.blocks_free;
    out->blocks_shared = ps.blocks_shared;
    out->fit_seqs = ps.fit_seqs;
    out->blocks_cached = ps.blocks_cached;
    out->blocks_evictable = ps.blocks_evictable;
    out->bytes_cached = (size_t)ps.blocks_cached * (size_t)ps.block * per_pos;
    out->evictions = ps.evictions;
    return;
  }
  int64_t used = 0, free_seqs = 0;
  for (int32_t s = 0; s < kv->n_seq; s++) {
    used += kv->seq_len[s];
    free_seqs += kv->seq_len[s] == 0;
  }
  out->bytes_reserved = (size_t)kv->n_seq * (size_t)kv->n_ctx * per_pos;
  out->bytes_used = (size_t)used * per_pos;
  out->bytes_waste = out->bytes_reserved - out->bytes_used;
  out->blocks_total = kv->n_seq;
  out->blocks_free = (int32_t)free_seqs;
  out->fit_seqs = fit_len <= kv->n_ctx ? free_seqs : 0;
}
