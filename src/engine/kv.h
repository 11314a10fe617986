/* engine/kv: the KV cache: per layer, K and V cells on the backend, and the block table that
 * maps (sequence, position) to a cell.
 *
 * The cache is the seam's one layout (backend/backend.h il_kv_view): cells [n_cells x kv_dim]
 * and cell(seq, pos) = table[seq][pos / block] * block + pos % block.
 *   contiguous  one block of n_ctx cells per sequence (table[seq] = seq): a sequence's history
 *               is one run; memory is reserved for every sequence's whole context.
 *   paged       a pool of blocks of `block` positions (engine/kvpages, vLLM's PagedAttention):
 *               a sequence takes blocks as it grows and gives them back when it shrinks or ends;
 *               fork shares a prefix (copy-on-write), so n samples of one prompt store it once.
 * The host keeps the table and computes each batch entry's slot, so the model uploads slots with
 * the batch and the device writes K/V there (kv_store) with no host access to cache memory; a
 * changed table is uploaded before the pass that needs it. Cells are F32 or F16 (--kv-type).
 * Writing position p of a sequence discards its positions from p on (as generation restarting
 * a sequence at 0 does).
 * Sliding-window layers (gemma3's local layers) read only a sequence's last `window` positions,
 * so with il_kv_opts.batch set they keep a ring of window + batch - 1 cells per sequence (a pass
 * stores up to batch positions of a sequence before its attention reads the window of the
 * first), as llama.cpp sizes its SWA cache (n_swa + n_ubatch), in both layouts: a position's cell
 * is seq * ring + pos % ring (il_kv_view.ring; a static table says the same), and the positions
 * that fell out of the window are overwritten. A ring cannot go back past its window: rewriting
 * or truncating a sequence to a position whose window was overwritten is IL_ERR_UNSUPPORTED
 * (il_kv_cache_seq_keep says how much of a sequence can be kept), and the prefix cache, whose
 * blocks would need every position, is refused.
 * Not for: attention itself (backend/), scheduling sequences (engine/engine).
 */
#ifndef IL_ENGINE_KV_H
#define IL_ENGINE_KV_H

#include "backend/backend.h"
#include "engine/kvpages.h"
#include "model/llama.h"

/* Backends one cache's layers may use: a --device list of up to 8 devices, and the CPU. */
#define IL_KV_TABLES 9

typedef struct {
  il_backend *backend;
  int32_t n_layer, n_seq, n_ctx, kv_dim;
  int32_t block, max_blocks, n_blocks; /* contiguous: block = n_ctx, max_blocks = 1, n_blocks = n_seq */
  il_dtype type;        /* cell type: F32 or F16 */
  bool paged;
  il_kvpages *pages;    /* paged only */
  int32_t n_tp;         /* tensor parallelism: the cells of every layer in n_tp shards of kv_dim
                           columns (each shard's KV heads), shard s on tp_b[s]; 1: one shard */
  il_tensor *k, *v;     /* [n_tp x n_layer] (shard s, layer l at s * n_layer + l), each
                           [n_blocks * block x kv_dim] */
  il_backend **layer_b; /* [n_tp x n_layer]: where each shard of each layer's cells lives */
  il_backend *const *opt_layer_b; /* the placement given at init (borrowed during init only) */
  il_backend *const *opt_tp_b;    /* the shards' devices given at init (the same) */
  il_backend *table_b[IL_KV_TABLES];
  il_tensor table[IL_KV_TABLES]; /* I32 [n_seq x max_blocks], one per backend the layers use */
  int32_t *host_table;  /* the same, on the host */
  bool table_dirty;     /* host_table changed since the last upload */
  int32_t *seq_len;     /* [n_seq]: positions written (contiguous: highest + 1) */
  il_kv_view *views;    /* [n_tp x n_layer], host memory: shard s's views from views + s * n_layer */
  int32_t ring;         /* positions a sliding-window layer keeps per sequence (0: no ring) */
  int32_t window;       /* their window */
  int32_t *ring_lo;     /* [n_seq]: the first position the rings still hold */
  uint8_t *ring_layer;  /* [n_layer]: 1 = the layer's cells are a ring of n_seq x ring cells */
  il_tensor ring_table[IL_KV_TABLES]; /* I32 [n_seq x ceil(n_ctx / ring)] on table_b[t], where
                                         that backend has ring layers (else buf == NULL) */
} il_kv_cache;

typedef struct {
  il_dtype type;        /* the cells: F32 (the struct's zero), F16, BF16 or Q8_0 */
  int32_t block;        /* 0: contiguous; else paged with this many positions per block */
  il_backend *const *layer_b; /* NULL: every layer on the cache's backend; else one per layer */
  int32_t batch;        /* the most positions one pass writes per sequence (the engine's batch): a
                           sliding-window layer then keeps window + batch - 1 positions per
                           sequence where that is below the context; 0: every layer keeps all */
  int32_t tp;           /* tensor parallelism (--tp): the cells in tp shards, shard s on tp_b[s]
                           (layer_b is then not read); the hparams given to init are a shard's
                           (n_head_kv / tp KV heads); 0 or 1: one shard */
  il_backend *const *tp_b;
} il_kv_opts;

/* --kv-type's value as a cell type ("" is f16, the default); IL_ERR_INVALID_ARG naming the
 * option and the accepted names otherwise. */
il_status il_kv_type_parse(const char *name, il_dtype *out);

/* Bytes the cache needs for these sizes (cells and tables), all layers on one backend; layer l's
 * cells; the tables of one backend (with local: the ring table its sliding-window layers read
 * too, when they have a ring). */
size_t il_kv_cache_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *o);
size_t il_kv_cache_layer_bytes(const il_hparams *hp, int32_t l, int32_t n_ctx, int32_t n_seq, const il_kv_opts *o);
size_t il_kv_cache_tables_bytes(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *o, bool local);
/* Positions a sliding-window layer keeps per sequence for these sizes (0: none has a ring). */
int32_t il_kv_cache_ring(const il_hparams *hp, int32_t n_ctx, const il_kv_opts *o);
/* Whether layer l's cells are a ring for these sizes. */
bool il_kv_cache_layer_ring(const il_hparams *hp, int32_t l, int32_t n_ctx, const il_kv_opts *o);
/* Allocates the cache; IL_ERR_OOM with the memory report when it does not fit (nothing left
 * allocated), IL_ERR_UNSUPPORTED for a cell type the backend's kernels cannot read. */
il_status il_kv_cache_init(il_kv_cache *kv, il_backend *b, const il_hparams *hp, int32_t n_ctx, int32_t n_seq,
                           const il_kv_opts *o);
void il_kv_cache_free(il_kv_cache *kv);

/* Makes position pos of seq writable (paged: takes blocks, copies a shared block first) and
 * gives its cell. IL_ERR_RANGE outside the cache; IL_ERR_OOM when the pool has no free block. */
il_status il_kv_cache_prepare(il_kv_cache *kv, int32_t seq, int32_t pos, int32_t *slot);
/* Uploads the block table when it changed. */
il_status il_kv_cache_sync(il_kv_cache *kv);

/* Sequence operations (a server's requests come and go; n samples share a prompt). */
/* Forgets a sequence: its blocks return to the pool (contiguous: nothing to free). */
il_status il_kv_cache_seq_remove(il_kv_cache *kv, int32_t seq);
/* Keeps the first n_pos positions. */
il_status il_kv_cache_seq_truncate(il_kv_cache *kv, int32_t seq, int32_t n_pos);
/* dst becomes a copy of src's positions: paged shares the blocks (copy-on-write); contiguous
 * copies the cells on the device. */
il_status il_kv_cache_seq_fork(il_kv_cache *kv, int32_t src, int32_t dst);
/* Positions held by seq (0 when empty). */
int32_t il_kv_cache_seq_len(const il_kv_cache *kv, int32_t seq);
/* How many of seq's first n positions can be kept and continued from: n when its window is still
 * in every ring (always without one), else 0 (the sequence must start again). */
int32_t il_kv_cache_seq_keep(const il_kv_cache *kv, int32_t seq, int32_t n);

/* Prefix cache across sequences (paged only; engine/kvpages.h). enable: IL_ERR_UNSUPPORTED on a
 * contiguous cache, IL_ERR_OOM. store indexes seq's full blocks within its first n positions,
 * whose tokens are tokens[0..n). reuse empties seq, then makes it hold the longest cached
 * prefix of tokens[0..n) in whole blocks; *n_pos = positions held (0 when the cache is off). */
il_status il_kv_cache_prefix_enable(il_kv_cache *kv);
bool il_kv_cache_prefix_enabled(const il_kv_cache *kv);
il_status il_kv_cache_prefix_store(il_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);
il_status il_kv_cache_prefix_reuse(il_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n, int32_t *n_pos);

/* Occupancy: bytes reserved by the cache, bytes of live tokens, internal waste, shared blocks,
 * and how many more sequences of fit_len positions would fit. */
typedef struct {
  size_t bytes_reserved, bytes_used, bytes_waste, bytes_shared_saved;
  int32_t blocks_total, blocks_free, blocks_shared;
  int64_t fit_seqs;
  int32_t blocks_cached, blocks_evictable; /* prefix cache: indexed blocks, of which unreferenced (free) */
  size_t bytes_cached;                     /* blocks_cached x block x bytes per position */
  uint64_t evictions;
} il_kv_cache_stats;
void il_kv_cache_stats_get(const il_kv_cache *kv, int64_t fit_len, il_kv_cache_stats *out);

#endif
