/* engine/kv: KV cache allocation, the block table, and sequence operations. */
#include "engine/kv.h"

#include <stdio.h>
#include <string.h>

static il_kv_opts il__opts(const il_kv_opts *o) {
  il_kv_opts d = {IL_DTYPE_F32, 0, NULL, 0, 1, NULL};
  if (o) d = *o;
  if (d.tp < 1) d.tp = 1;
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

int32_t il_kv_cache_ring(const il_hparams *hp, int32_t n_ctx, const il_kv_opts *op) {
  const il_kv_opts o = il__opts(op);
  if (hp->swa <= 0 || o.batch <= 0) return 0;
  bool local = false;
  for (int32_t l = 0; l < hp->n_layer && !local; l++) local = il_hparams_window(hp, l) > 0;
  const int64_t r = (int64_t)hp->swa + o.batch - 1;
  return local && r < n_ctx ? (int32_t)r : 0;
}

bool il_kv_cache_layer_ring(const il_hparams *hp, int32_t l, int32_t n_ctx, const il_kv_opts *o) {
  return il_hparams_window(hp, l) > 0 && il_kv_cache_ring(hp, n_ctx, o) > 0;
}

size_t il_kv_cache_layer_bytes(const il_hparams *hp, int32_t l, int32_t n_ctx, int32_t n_seq, const il_kv_opts *op) {
  const il_kv_opts o = il__opts(op);
  int32_t block, max_blocks, n_blocks;
  il__layout(n_ctx, n_seq, &o, &block, &max_blocks, &n_blocks);
  const size_t row = il_tensor_row_bytes(o.type, (int64_t)hp->n_head_kv * hp->head_dim);
  if (il_kv_cache_layer_ring(hp, l, n_ctx, &o)) return 2 * (size_t)n_seq * (size_t)il_kv_cache_ring(hp, n_ctx, &o) * row;
  return 2 * (size_t)n_blocks * (size_t)block * row;
}

/* Columns of the ring table: one per ring-sized stretch of the context. */
static int32_t il__ring_cols(int32_t n_ctx, int32_t ring) { return (n_ctx + ring - 1) / ring; }

size_t il_kv_cache_tables_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *op, bool local) {
  const il_kv_opts o = il__opts(op);
  int32_t block, max_blocks, n_blocks;
  il__layout(n_ctx, n_seq, &o, &block, &max_blocks, &n_blocks);
  const int32_t ring = il_kv_cache_ring(hp, n_ctx, &o);
  size_t n = (size_t)n_seq * (size_t)max_blocks * sizeof(int32_t);
  if (local && ring) n += (size_t)n_seq * (size_t)il__ring_cols(n_ctx, ring) * sizeof(int32_t);
  return n;
}

size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *op) {
  size_t n = 0;
  bool ring = false;
  for (int32_t l = 0; l < hp->n_layer; l++) {
    n += il_kv_cache_layer_bytes(hp, l, n_ctx, n_seq, op);
    ring = ring || il_kv_cache_layer_ring(hp, l, n_ctx, op);
  }
  return n + il_kv_cache_tables_bytes(hp, n_ctx, n_seq, op, ring);
}

/* The ring table of backend t: every entry of sequence s is s, so position pos of s is cell
 * s * ring + pos % ring. It never changes: uploaded once. */
static il_status il__ring_table(il_kv_cache *kv, int t) {
  const int32_t cols = il__ring_cols(kv->n_ctx, kv->ring);
  const size_t n = (size_t)kv->n_seq * (size_t)cols;
  IL_TRY(il_backend_tensor_new(kv->table_b[t], IL_MEM_KV, kv->n_seq, cols, IL_DTYPE_I32, "kv ring table",
                               &kv->ring_table[t]));
  int32_t *h = il_mem_alloc(IL_MEM_STAGING, sizeof(int32_t) * n, "kv ring table");
  if (!h) return IL_ERR_OOM;
  for (size_t i = 0; i < n; i++) h[i] = (int32_t)(i / (size_t)cols);
  const il_status st = kv->table_b[t]->ops->upload(kv->table_b[t], kv->ring_table[t], h, sizeof(int32_t) * n);
  il_mem_free(h);
  return st;
}

static il_status il__kv_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp) {
  const int64_t cells = (int64_t)kv->n_blocks * kv->block;
  const size_t n_table = (size_t)kv->n_seq * (size_t)kv->max_blocks, n_inst = (size_t)kv->n_tp * (size_t)hp->n_layer;
  kv->k = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * n_inst, "kv tensors");
  kv->v = il_mem_calloc(IL_MEM_OTHER, sizeof(il_tensor) * n_inst, "kv tensors");
  kv->views = il_mem_calloc(IL_MEM_OTHER, sizeof(il_kv_view) * n_inst, "kv views");
  kv->host_table = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n_table, "kv block table");
  kv->seq_len = il_mem_calloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)kv->n_seq, "kv sequence lengths");
  kv->ring_lo = il_mem_calloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)kv->n_seq, "kv ring starts");
  kv->ring_layer = il_mem_calloc(IL_MEM_OTHER, (size_t)hp->n_layer, "kv ring layers");
  if (!kv->k || !kv->v || !kv->views || !kv->host_table || !kv->seq_len || !kv->ring_lo || !kv->ring_layer)
    return IL_ERR_OOM;
  int32_t n_ring = 0;
  for (int32_t l = 0; kv->ring && l < hp->n_layer; l++) n_ring += kv->ring_layer[l] = il_hparams_window(hp, l) > 0;
  if (kv->paged) {
    /* the pool holds the layers without a ring, every shard's cells of a position */
    const size_t per_pos = 2 * (size_t)(hp->n_layer - n_ring) * (size_t)kv->n_tp * il_tensor_row_bytes(kv->type, kv->kv_dim);
    IL_TRY(il_kvpages_new(kv->n_blocks, kv->block, kv->max_blocks, kv->n_seq, per_pos, &kv->pages));
    il_kvpages_export(kv->pages, kv->host_table);
  } else {
    for (int32_t s = 0; s < kv->n_seq; s++) kv->host_table[s] = s; /* contiguous: block s is sequence s */
  }
  kv->layer_b = il_mem_alloc(IL_MEM_OTHER, sizeof(il_backend *) * n_inst, "kv placement");
  if (!kv->layer_b) return IL_ERR_OOM;
  for (size_t i = 0; i < n_inst; i++) {
    const int32_t l = (int32_t)(i % (size_t)hp->n_layer), sh = (int32_t)(i / (size_t)hp->n_layer);
    il_backend *lb = kv->layer_b[i] = kv->n_tp > 1 ? kv->opt_tp_b[sh]
                                      : kv->opt_layer_b && kv->opt_layer_b[l] ? kv->opt_layer_b[l] : b;
    int t = 0;
    while (t < IL_KV_TABLES && kv->table_b[t] && kv->table_b[t] != lb) t++;
    if (t == IL_KV_TABLES) return il_error(IL_ERR_UNSUPPORTED, "kv cache: layers on more than %d backends", IL_KV_TABLES);
    if (!kv->table_b[t]) {
      kv->table_b[t] = lb;
      IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, kv->n_seq, kv->max_blocks, IL_DTYPE_I32, "kv block table", &kv->table[t]));
    }
    if (kv->ring_layer[l] && !kv->ring_table[t].buf) IL_TRY(il__ring_table(kv, t));
  }
  kv->table_dirty = true;
  IL_TRY(il_kv_cache_sync(kv));
  for (size_t i = 0; i < n_inst; i++) {
    const int32_t l = (int32_t)(i % (size_t)hp->n_layer);
    il_backend *lb = kv->layer_b[i];
    int t = 0;
    while (kv->table_b[t] != lb) t++; /* there: every layer's backend has its table (above) */
    const bool ring = kv->ring_layer[l];
    char name[2][48];
    snprintf(name[0], sizeof name[0], "kv cache keys (layer %d)", l);
    snprintf(name[1], sizeof name[1], "kv cache values (layer %d)", l);
    const int64_t n_cells = ring ? (int64_t)kv->n_seq * kv->ring : cells;
    IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, n_cells, kv->kv_dim, kv->type, name[0], &kv->k[i]));
    IL_TRY(il_backend_tensor_new(lb, IL_MEM_KV, n_cells, kv->kv_dim, kv->type, name[1], &kv->v[i]));
    kv->k[i].name = "kv cache keys";
    kv->v[i].name = "kv cache values";
    kv->views[i] = ring ? (il_kv_view){kv->k[i], kv->v[i], kv->ring_table[t], kv->ring, kv->n_seq,
                                       il__ring_cols(kv->n_ctx, kv->ring), kv->n_ctx, kv->ring}
                        : (il_kv_view){kv->k[i], kv->v[i], kv->table[t], kv->block, kv->n_seq, kv->max_blocks, kv->n_ctx, 0};
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
  kv->n_tp = o.tp;
  kv->opt_tp_b = o.tp_b;
  if (kv->n_tp > 1 && !o.tp_b) return il_error(IL_ERR_INVALID_ARG, "kv cache: %d shards without their devices", kv->n_tp);
  kv->ring = il_kv_cache_ring(hp, n_ctx, &o);
  kv->window = hp->swa;
  il__layout(n_ctx, n_seq, &o, &kv->block, &kv->max_blocks, &kv->n_blocks);
  il_status st = il__kv_init(kv, b, hp);
  if (st != IL_OK) il_kv_cache_free(kv);
  return st;
}

void il_kv_cache_free(il_kv_cache *kv) {
  if (!kv->backend) return;
  for (int32_t i = 0; kv->layer_b && i < kv->n_layer * kv->n_tp; i++) {
    if (kv->k) il_backend_tensor_free(kv->layer_b[i], &kv->k[i]);
    if (kv->v) il_backend_tensor_free(kv->layer_b[i], &kv->v[i]);
  }
  for (int t = 0; t < IL_KV_TABLES; t++)
    if (kv->table_b[t]) {
      il_backend_tensor_free(kv->table_b[t], &kv->table[t]);
      if (kv->ring_table[t].buf) il_backend_tensor_free(kv->table_b[t], &kv->ring_table[t]);
    }
  il_mem_free(kv->layer_b);
  il_kvpages_free(kv->pages);
  il_mem_free(kv->k);
  il_mem_free(kv->v);
  il_mem_free(kv->views);
  il_mem_free(kv->host_table);
  il_mem_free(kv->seq_len);
  il_mem_free(kv->ring_lo);
  il_mem_free(kv->ring_layer);
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

/* Copies cells [src0, src0 + n) to [dst0, dst0 + n) in the K and V of every layer with a ring
 * (ring) or without one, on the device. */
static il_status il__copy_cells(il_kv_cache *kv, bool ring, int64_t src0, int64_t dst0, int64_t n) {
  for (int32_t i = 0; i < kv->n_layer * kv->n_tp && n > 0; i++) {
    if (kv->ring_layer[i % kv->n_layer] != ring) continue;
    il_backend *b = kv->layer_b[i];
    IL_TRY(b->ops->copy(b, il_tensor_rows(kv->k[i], dst0, n), il_tensor_rows(kv->k[i], src0, n)));
    IL_TRY(b->ops->copy(b, il_tensor_rows(kv->v[i], dst0, n), il_tensor_rows(kv->v[i], src0, n)));
  }
  return IL_OK;
}

static il_status il__seq_check(const il_kv_cache *kv, int32_t seq) {
  if (seq < 0 || seq >= kv->n_seq) return il_error(IL_ERR_RANGE, "kv cache: sequence %d outside [0, %d)", seq, kv->n_seq);
  return IL_OK;
}

/* Whether seq can continue at position n: the window before n, [n - window + 1, n), is still
 * in the rings (positions from ring_lo on are). */
static bool il__ring_keeps(const il_kv_cache *kv, int32_t seq, int32_t n) {
  return !kv->ring || n == 0 || n - kv->window + 1 >= kv->ring_lo[seq];
}

static il_status il__ring_check(const il_kv_cache *kv, int32_t seq, int32_t n, const char *what) {
  if (il__ring_keeps(kv, seq, n)) return IL_OK;
  return il_error(IL_ERR_UNSUPPORTED,
                  "kv cache: %s sequence %d at position %d: its sliding-window layers keep the last %d positions "
                  "(window %d + batch - 1), and positions before %d are overwritten; start it again at 0",
                  what, seq, n, kv->ring, kv->window, kv->ring_lo[seq]);
}

int32_t il_kv_cache_seq_keep(const il_kv_cache *kv, int32_t seq, int32_t n) {
  if (seq < 0 || seq >= kv->n_seq) return 0;
  return il__ring_keeps(kv, seq, n) ? n : 0;
}

/* Position pos of seq is written: the rings lose position pos - ring. */
static void il__ring_wrote(il_kv_cache *kv, int32_t seq, int32_t pos) {
  if (!kv->ring) return;
  if (pos == 0) kv->ring_lo[seq] = 0;
  else if (pos + 1 - kv->ring > kv->ring_lo[seq]) kv->ring_lo[seq] = pos + 1 - kv->ring;
}

il_status il_kv_cache_prepare(il_kv_cache *kv, int32_t seq, int32_t pos, int32_t *slot) {
  IL_TRY(il__seq_check(kv, seq));
  if (pos < 0 || pos >= kv->n_ctx)
    return il_error(IL_ERR_RANGE, "kv cache: position %d outside the context of %d", pos, kv->n_ctx);
  if (pos < kv->seq_len[seq]) IL_TRY(il__ring_check(kv, seq, pos, "rewriting"));
  il__ring_wrote(kv, seq, pos);
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
  if (n_cp) IL_TRY(il__copy_cells(kv, false, (int64_t)cp.src * kv->block, (int64_t)cp.dst * kv->block, cp.n_pos));
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
  if (kv->ring) kv->ring_lo[seq] = 0;
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
  if (n_pos < kv->seq_len[seq]) IL_TRY(il__ring_check(kv, seq, n_pos, "truncating"));
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
  if (kv->ring) { /* the rings are copied whole: they hold the window wherever the sequence is */
    IL_TRY(il__copy_cells(kv, true, (int64_t)src * kv->ring, (int64_t)dst * kv->ring, n ? kv->ring : 0));
    kv->ring_lo[dst] = kv->ring_lo[src];
  }
  if (!kv->paged) {
    IL_TRY(il__copy_cells(kv, false, (int64_t)src * kv->n_ctx, (int64_t)dst * kv->n_ctx, n));
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
  if (kv->ring)
    return il_error(IL_ERR_UNSUPPORTED, "prefix cache: the sliding-window layers keep only the last %d positions of a "
                                        "sequence (a ring), so a cached prefix's cells are not all there",
                    kv->ring);
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
  int32_t n_ring = 0;
  for (int32_t l = 0; kv->ring && l < kv->n_layer; l++) n_ring += kv->ring_layer[l];
  const size_t row2 = 2 * (size_t)kv->n_tp * il_tensor_row_bytes(kv->type, kv->kv_dim), per_pos = (size_t)(kv->n_layer - n_ring) * row2,
               ring_pos = (size_t)n_ring * row2;
  /* the rings: n_seq x ring positions reserved, a sequence's last `ring` positions in use */
  int64_t ring_used = 0;
  for (int32_t s = 0; n_ring && s < kv->n_seq; s++) ring_used += kv->seq_len[s] < kv->ring ? kv->seq_len[s] : kv->ring;
  const size_t ring_reserved = (size_t)kv->n_seq * (size_t)kv->ring * ring_pos, ring_bytes = (size_t)ring_used * ring_pos;
  if (fit_len < 1) fit_len = 1;
  if (kv->paged) {
    il_kvpages_stats ps;
    il_kvpages_stats_get(kv->pages, fit_len, &ps);
    out->bytes_reserved = ps.bytes_pool + ring_reserved;
    out->bytes_used = ps.bytes_used + ring_bytes;
    out->bytes_waste = ps.bytes_waste + (ps.bytes_pool - ps.bytes_reserved) + (ring_reserved - ring_bytes);
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
  out->bytes_reserved = (size_t)kv->n_seq * (size_t)kv->n_ctx * per_pos + ring_reserved;
  out->bytes_used = (size_t)used * per_pos + ring_bytes;
  out->bytes_waste = out->bytes_reserved - out->bytes_used;
  out->blocks_total = kv->n_seq;
  out->blocks_free = (int32_t)free_seqs;
  out->fit_seqs = fit_len <= kv->n_ctx ? free_seqs : 0;
}
