/* engine/kvpages: the paged KV cache's bookkeeping (vLLM's PagedAttention block manager), on
 * the host.
 *
 * The cache is a pool of n_blocks blocks of `block` positions each (the caller owns the K/V
 * buffers: cell = block_id * block + offset, n_blocks * block cells). Each sequence has a block
 * table that grows one block at a time as its length grows and gives its blocks back to the
 * pool when it shrinks or ends, so memory is never fragmented: any free block serves any
 * sequence. seq_fork shares all blocks of a sequence with a new one (reference counts); the
 * first write into a shared, partly filled block copies it (copy-on-write): reserve returns the
 * "copy block a to b" actions the caller performs on the device before writing. A shared prefix
 * (a system prompt, n samples of one prompt) is stored once.
 * Sequence ids are 0..n_seq-1 and index the exported table [n_seq x max_blocks], whose unused
 * entries (past a sequence's last block, and whole rows of absent sequences) are -1.
 * Prefix cache (vLLM's automatic prefix caching, after il_kvpages_prefix_enable): full blocks
 * are indexed by a chained hash of the token prefix they end (hash of the previous block's hash
 * and this block's tokens). A block nobody references any more stays in the pool, indexed, on a
 * least-recently-released list, and is evicted (unindexed, handed out) only when the free list
 * is empty; a referenced block is never evicted. A lookup walks the prompt block by block and
 * compares each candidate's tokens and parent block, so a hash collision can never hand out
 * another prefix's cells. An indexed block is immutable: a write into it copies it first.
 * Not thread-safe: one scheduler thread owns it. Not for: K/V data, attention (backend/).
 */
#ifndef IL_ENGINE_KVPAGES_H
#define IL_ENGINE_KVPAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct il_kvpages il_kvpages;

typedef struct {
  int32_t src, dst; /* copy positions [0, n_pos) of block src into block dst (every layer, K and V) */
  int32_t n_pos;
} il_kvpages_copy;

typedef struct {
  int32_t block, blocks_total, blocks_free, blocks_used; /* used = referenced by a sequence */
  int32_t blocks_shared;                                 /* referenced by more than one sequence */
  int32_t blocks_cached;    /* prefix cache: indexed blocks (referenced or not) */
  int32_t blocks_evictable; /* ... of which referenced by no sequence (counted in blocks_free) */
  uint64_t evictions;       /* indexed blocks handed out for new data since the pool was made */
  int32_t seqs_live, seqs_max;
  int64_t positions_logical; /* sum of sequence lengths (a shared prefix counts once per sequence) */
  int64_t positions_stored;  /* positions held in used blocks, a shared block counted once */
  int64_t positions_waste;   /* internal waste: blocks_used * block - positions_stored */
  size_t bytes_pool;         /* blocks_total * block * bytes_per_pos */
  size_t bytes_reserved;     /* blocks_used * block * bytes_per_pos */
  size_t bytes_used;         /* positions_stored * bytes_per_pos: the live tokens */
  size_t bytes_waste;        /* positions_waste * bytes_per_pos */
  size_t bytes_saved_by_sharing; /* (positions_logical - positions_stored) * bytes_per_pos */
  double waste_ratio;        /* bytes_waste / bytes_reserved (0 when nothing is reserved) */
  int64_t fit_len, fit_seqs; /* how many more sequences of fit_len positions fit (free blocks and ids) */
} il_kvpages_stats;

/* A pool of n_blocks blocks of `block` positions, for sequences 0..n_seq-1 of at most
 * max_blocks blocks each; bytes_per_pos (K and V of every layer for one position) only scales
 * the byte figures of il_kvpages_stats. Returns IL_ERR_INVALID_ARG for non-positive sizes,
 * IL_ERR_OOM when the metadata cannot be allocated (memory/, category other); *out is NULL then.
 * Free with il_kvpages_free. */
il_status il_kvpages_new(int32_t n_blocks, int32_t block, int32_t max_blocks, int32_t n_seq, size_t bytes_per_pos,
                         il_kvpages **out);
/* NULL is ignored. */
void il_kvpages_free(il_kvpages *p);

/* Starts an empty sequence. IL_ERR_RANGE for an id outside 0..n_seq-1, IL_ERR_INVALID_ARG when
 * it is live already. */
il_status il_kvpages_seq_add(il_kvpages *p, int32_t seq);
/* Ends a sequence; its blocks go back to the pool unless another sequence shares them.
 * IL_ERR_NOT_FOUND when it is not live. */
il_status il_kvpages_seq_remove(il_kvpages *p, int32_t seq);
/* Shortens a sequence to n_pos positions (n_pos <= its length), giving back blocks past the
 * new last one. IL_ERR_RANGE when n_pos is negative or longer than the sequence. */
il_status il_kvpages_seq_truncate(il_kvpages *p, int32_t seq, int32_t n_pos);
/* dst becomes a copy of src sharing all its blocks (reference counts + 1); no data moves.
 * dst must not be live. Can't run out of blocks. */
il_status il_kvpages_seq_fork(il_kvpages *p, int32_t src, int32_t dst);
/* Grows a sequence to n_pos positions (no-op when it is that long already), so the caller may
 * write positions [old length, n_pos). When the first written position falls in a shared block,
 * that block is replaced by a fresh copy: the action is written to copies[0] and *n_copies = 1
 * (else 0); perform it before writing. copies must hold one entry (n_copies may be NULL only
 * when copies is NULL too, which then refuses any copy with IL_ERR_INVALID_ARG).
 * Out of blocks: IL_ERR_OOM naming the sequence, the blocks needed and the blocks free; longer
 * than max_blocks: IL_ERR_RANGE. On any error nothing changes. */
il_status il_kvpages_reserve(il_kvpages *p, int32_t seq, int32_t n_pos, il_kvpages_copy *copies, int *n_copies);
/* Cell of (seq, pos) for pos < the sequence's length. IL_ERR_NOT_FOUND / IL_ERR_RANGE else. */
il_status il_kvpages_slot(const il_kvpages *p, int32_t seq, int32_t pos, int64_t *cell);
/* Length of a live sequence, or -1. */
int32_t il_kvpages_seq_len(const il_kvpages *p, int32_t seq);
/* Reference count of a block (0 = free), or -1 outside the pool. */
int32_t il_kvpages_refcount(const il_kvpages *p, int32_t block_id);
/* Writes the block table, int32 [n_seq x max_blocks], unused entries -1, for upload. */
void il_kvpages_export(const il_kvpages *p, int32_t *table);
/* Fills *out; fit_len (>= 1) is the sequence length asked about in fit_seqs. Can't fail. */
void il_kvpages_stats_get(const il_kvpages *p, int64_t fit_len, il_kvpages_stats *out);
/* Turns the prefix cache on (allocates the index: IL_ERR_OOM, nothing changes). Idempotent. */
il_status il_kvpages_prefix_enable(il_kvpages *p);
bool il_kvpages_prefix_enabled(const il_kvpages *p);
/* Indexes the full blocks of live sequence seq that lie within its first n positions, whose
 * tokens are tokens[0..n) (the caller's record of what it wrote). Blocks indexed already are
 * skipped; a block whose prefix another block holds already stays unindexed (freed when
 * released). No-op when the cache is off. IL_ERR_NOT_FOUND / IL_ERR_RANGE for a bad sequence
 * or n above its length. Can't run out of memory. */
il_status il_kvpages_prefix_store(il_kvpages *p, int32_t seq, const int32_t *tokens, int32_t n);
/* Makes the empty (or absent) sequence seq hold the longest run of indexed blocks matching
 * tokens[0..n) from position 0, whole blocks only; *n_pos = positions now held (0 on a miss or
 * when the cache is off). The blocks are shared (reference counts + 1). IL_ERR_INVALID_ARG when
 * seq holds positions already; IL_ERR_RANGE for an id outside 0..n_seq-1. */
il_status il_kvpages_prefix_reuse(il_kvpages *p, int32_t seq, const int32_t *tokens, int32_t n, int32_t *n_pos);
/* Whether block_id is indexed (for tests). */
bool il_kvpages_prefix_indexed(const il_kvpages *p, int32_t block_id);

/* Internal consistency (reference counts match the tables, free list and evictable list match
 * the counts, the index holds exactly the indexed blocks).
 * IL_ERR_INTERNAL with the first mismatch. For tests. */
il_status il_kvpages_check(const il_kvpages *p);

#endif
