/* engine/kvpages: block pool, per-sequence block tables, reference counts and copy-on-write for
 * the paged KV cache (see kvpages.h).
 *
 * The free list is a stack (a block given back is the next one handed out: it is likely still
 * in a cache). Every operation checks everything it needs before it changes anything, so an
 * error leaves the state as it was. Costs: add/remove/fork/truncate O(blocks of the sequence),
 * reserve O(new blocks), slot O(1), stats O(n_seq x max_blocks + n_blocks).
 * Prefix cache: the index is a chained hash table over block ids (buckets, a next link per
 * block); unreferenced indexed blocks sit on a doubly linked list in release order, oldest at the
 * head, which is what eviction takes. A sequence gives its blocks back last block first, so a
 * prompt's tail is evicted before the blocks that lead to it (a chain is only reachable from its
 * first block). store/reuse O(positions).
 */
#include "engine/kvpages.h"

#include <string.h>

#include "memory/mem.h"

struct il_kvpages {
  int32_t n_blocks, block, max_blocks, n_seq;
  size_t bytes_per_pos;
  int32_t *ref;      /* [n_blocks] sequences referencing each block */
  int32_t *free_ids; /* [n_blocks] stack of free blocks, n_free on it */
  int32_t n_free;
  int32_t *table; /* [n_seq x max_blocks], -1 past a sequence's last block */
  int32_t *len;   /* [n_seq] positions, -1 = not live */
  int32_t n_live;
  int32_t *fill; /* [n_blocks] scratch for stats: positions held per block */
  /* prefix cache (NULL arrays while off) */
  bool pc;
  uint64_t *hash;    /* [n_blocks] chained hash of the prefix an indexed block ends */
  int32_t *parent;   /* [n_blocks] the indexed block before it in its prefix, -1 for the first */
  uint8_t *indexed;  /* [n_blocks] */
  int32_t *tok;      /* [n_blocks x block] the tokens of an indexed block */
  int32_t *bucket;   /* [n_buckets] first block of each hash chain, -1 = empty */
  int32_t *hnext;    /* [n_blocks] next block in the same bucket */
  uint32_t n_buckets; /* a power of two */
  int32_t *lru_prev, *lru_next; /* [n_blocks] the evictable list */
  int32_t lru_head, lru_tail, n_lru;
  int32_t n_indexed;
  uint64_t evictions;
};

static int32_t il__blocks_for(const il_kvpages *p, int64_t n_pos) { return (int32_t)((n_pos + p->block - 1) / p->block); }

il_status il_kvpages_new(int32_t n_blocks, int32_t block, int32_t max_blocks, int32_t n_seq, size_t bytes_per_pos,
                         il_kvpages **out) {
  *out = NULL;
  if (n_blocks <= 0 || block <= 0 || max_blocks <= 0 || n_seq <= 0)
    return il_error(IL_ERR_INVALID_ARG, "kvpages: n_blocks %d, block %d, max_blocks %d, n_seq %d must be positive",
                    n_blocks, block, max_blocks, n_seq);
  if ((int64_t)max_blocks * block > INT32_MAX || (int64_t)n_blocks * block > INT32_MAX)
    return il_error(IL_ERR_RANGE, "kvpages: %d blocks of %d positions overflow 32-bit positions", n_blocks, block);
  il_kvpages *p = il_mem_calloc(IL_MEM_OTHER, sizeof *p, "kv pages");
  if (!p) return IL_ERR_OOM;
  p->n_blocks = n_blocks;
  p->block = block;
  p->max_blocks = max_blocks;
  p->n_seq = n_seq;
  p->bytes_per_pos = bytes_per_pos;
  p->ref = il_mem_calloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)n_blocks, "kv pages refcounts");
  p->free_ids = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)n_blocks, "kv pages free list");
  p->table = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)n_seq * (size_t)max_blocks, "kv pages tables");
  p->len = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)n_seq, "kv pages lengths");
  p->fill = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)n_blocks, "kv pages stats scratch");
  if (!p->ref || !p->free_ids || !p->table || !p->len || !p->fill) {
    il_kvpages_free(p);
    return IL_ERR_OOM;
  }
  /* pushed in reverse so blocks are handed out 0, 1, 2, ... */
  for (int32_t b = 0; b < n_blocks; b++) p->free_ids[b] = n_blocks - 1 - b;
  p->n_free = n_blocks;
  for (size_t i = 0; i < (size_t)n_seq * (size_t)max_blocks; i++) p->table[i] = -1;
  for (int32_t s = 0; s < n_seq; s++) p->len[s] = -1;
  *out = p;
  return IL_OK;
}

void il_kvpages_free(il_kvpages *p) {
  if (!p) return;
  il_mem_free(p->ref);
  il_mem_free(p->free_ids);
  il_mem_free(p->table);
  il_mem_free(p->len);
  il_mem_free(p->fill);
  il_mem_free(p->hash);
  il_mem_free(p->parent);
  il_mem_free(p->indexed);
  il_mem_free(p->tok);
  il_mem_free(p->bucket);
  il_mem_free(p->hnext);
  il_mem_free(p->lru_prev);
  il_mem_free(p->lru_next);
  il_mem_free(p);
}

static il_status il__live(const il_kvpages *p, int32_t seq, const char *op) {
  if (seq < 0 || seq >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages %s: sequence %d outside 0..%d", op, seq, p->n_seq - 1);
  if (p->len[seq] < 0) return il_error(IL_ERR_NOT_FOUND, "kvpages %s: sequence %d is not live", op, seq);
  return IL_OK;
}

static int32_t *il__row(const il_kvpages *p, int32_t seq) { return p->table + (size_t)seq * (size_t)p->max_blocks; }

/* ---- prefix index and evictable list ---- */

static uint64_t il__hash(uint64_t h, const int32_t *t, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    h ^= (uint32_t)t[i];
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}
#define IL__HASH_ROOT 0xcbf29ce484222325ull

static void il__lru_unlink(il_kvpages *p, int32_t b) {
  const int32_t a = p->lru_prev[b], c = p->lru_next[b];
  if (a >= 0) p->lru_next[a] = c;
  else p->lru_head = c;
  if (c >= 0) p->lru_prev[c] = a;
  else p->lru_tail = a;
  p->lru_prev[b] = p->lru_next[b] = -1;
  p->n_lru--;
}

static void il__lru_push(il_kvpages *p, int32_t b) {
  p->lru_prev[b] = p->lru_tail;
  p->lru_next[b] = -1;
  if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
  else p->lru_head = b;
  p->lru_tail = b;
  p->n_lru++;
}

static void il__index_remove(il_kvpages *p, int32_t b) {
  int32_t *at = &p->bucket[p->hash[b] & (p->n_buckets - 1)];
  while (*at != b) at = &p->hnext[*at];
  *at = p->hnext[b];
  p->indexed[b] = 0;
  p->n_indexed--;
}

static void il__index_insert(il_kvpages *p, int32_t b, uint64_t h, int32_t parent, const int32_t *t) {
  p->hash[b] = h;
  p->parent[b] = parent;
  memcpy(p->tok + (size_t)b * (size_t)p->block, t, sizeof(int32_t) * (size_t)p->block);
  int32_t *head = &p->bucket[h & (p->n_buckets - 1)];
  p->hnext[b] = *head;
  *head = b;
  p->indexed[b] = 1;
  p->n_indexed++;
}

/* The indexed block ending prefix hash h after block `parent` with tokens t, or -1. */
static int32_t il__index_find(const il_kvpages *p, uint64_t h, int32_t parent, const int32_t *t) {
  for (int32_t b = p->bucket[h & (p->n_buckets - 1)]; b >= 0; b = p->hnext[b])
    if (p->hash[b] == h && p->parent[b] == parent &&
        !memcmp(p->tok + (size_t)b * (size_t)p->block, t, sizeof(int32_t) * (size_t)p->block))
      return b;
  return -1;
}

static void il__unref(il_kvpages *p, int32_t b) {
  if (--p->ref[b] > 0) return;
  if (p->pc && p->indexed[b]) il__lru_push(p, b);
  else p->free_ids[p->n_free++] = b;
}

/* A block for new data: a free one, else the least recently released indexed one (evicted).
 * The caller has checked that n_free + n_lru > 0. */
static int32_t il__alloc(il_kvpages *p) {
  int32_t b;
  if (p->n_free > 0) {
    b = p->free_ids[--p->n_free];
  } else {
    b = p->lru_head;
    il__lru_unlink(p, b);
    il__index_remove(p, b);
    p->evictions++;
  }
  p->ref[b] = 1;
  return b;
}

il_status il_kvpages_prefix_enable(il_kvpages *p) {
  if (p->pc) return IL_OK;
  uint32_t nb = 1;
  while (nb < 2u * (uint32_t)p->n_blocks && nb < (1u << 30)) nb <<= 1;
  const size_t n = (size_t)p->n_blocks;
  p->hash = il_mem_alloc(IL_MEM_OTHER, sizeof(uint64_t) * n, "prefix cache hashes");
  p->parent = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n, "prefix cache parents");
  p->indexed = il_mem_calloc(IL_MEM_OTHER, n, "prefix cache flags");
  p->tok = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n * (size_t)p->block, "prefix cache tokens");
  p->bucket = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * nb, "prefix cache buckets");
  p->hnext = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n, "prefix cache chains");
  p->lru_prev = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n, "prefix cache lru");
  p->lru_next = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * n, "prefix cache lru");
  if (!p->hash || !p->parent || !p->indexed || !p->tok || !p->bucket || !p->hnext || !p->lru_prev || !p->lru_next) {
    void *a[] = {p->hash, p->parent, p->indexed, p->tok, p->bucket, p->hnext, p->lru_prev, p->lru_next};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) il_mem_free(a[i]);
    p->hash = NULL, p->parent = NULL, p->indexed = NULL, p->tok = NULL;
    p->bucket = NULL, p->hnext = NULL, p->lru_prev = NULL, p->lru_next = NULL;
    return IL_ERR_OOM;
  }
  p->n_buckets = nb;
  for (uint32_t i = 0; i < nb; i++) p->bucket[i] = -1;
  for (size_t i = 0; i < n; i++) p->hnext[i] = p->lru_prev[i] = p->lru_next[i] = -1;
  p->lru_head = p->lru_tail = -1;
  p->pc = true;
  return IL_OK;
}

bool il_kvpages_prefix_enabled(const il_kvpages *p) { return p->pc; }

bool il_kvpages_prefix_indexed(const il_kvpages *p, int32_t b) {
  return p->pc && b >= 0 && b < p->n_blocks && p->indexed[b];
}

il_status il_kvpages_seq_add(il_kvpages *p, int32_t seq) {
  if (seq < 0 || seq >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages add: sequence %d outside 0..%d", seq, p->n_seq - 1);
  if (p->len[seq] >= 0) return il_error(IL_ERR_INVALID_ARG, "kvpages add: sequence %d is live already", seq);
  p->len[seq] = 0;
  p->n_live++;
  return IL_OK;
}

/* Drops the blocks of seq from index nb on, last first (see the eviction order above). */
static void il__drop_from(il_kvpages *p, int32_t seq, int32_t nb) {
  int32_t *row = il__row(p, seq), end = nb;
  while (end < p->max_blocks && row[end] >= 0) end++;
  for (int32_t i = end - 1; i >= nb; i--) {
    il__unref(p, row[i]);
    row[i] = -1;
  }
}

il_status il_kvpages_seq_remove(il_kvpages *p, int32_t seq) {
  IL_TRY(il__live(p, seq, "remove"));
  il__drop_from(p, seq, 0);
  p->len[seq] = -1;
  p->n_live--;
  return IL_OK;
}

il_status il_kvpages_seq_truncate(il_kvpages *p, int32_t seq, int32_t n_pos) {
  IL_TRY(il__live(p, seq, "truncate"));
  if (n_pos < 0 || n_pos > p->len[seq])
    return il_error(IL_ERR_RANGE, "kvpages truncate: sequence %d: %d positions outside 0..%d", seq, n_pos, p->len[seq]);
  il__drop_from(p, seq, il__blocks_for(p, n_pos));
  p->len[seq] = n_pos;
  return IL_OK;
}

il_status il_kvpages_seq_fork(il_kvpages *p, int32_t src, int32_t dst) {
  IL_TRY(il__live(p, src, "fork"));
  if (dst < 0 || dst >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages fork: sequence %d outside 0..%d", dst, p->n_seq - 1);
  if (p->len[dst] >= 0) return il_error(IL_ERR_INVALID_ARG, "kvpages fork %d -> %d: %d is live already", src, dst, dst);
  const int32_t *a = il__row(p, src);
  int32_t *b = il__row(p, dst);
  for (int32_t i = 0; i < p->max_blocks && a[i] >= 0; i++) {
    b[i] = a[i];
    p->ref[a[i]]++;
  }
  p->len[dst] = p->len[src];
  p->n_live++;
  return IL_OK;
}

il_status il_kvpages_reserve(il_kvpages *p, int32_t seq, int32_t n_pos, il_kvpages_copy *copies, int *n_copies) {
  if (n_copies) *n_copies = 0;
  IL_TRY(il__live(p, seq, "reserve"));
  const int32_t len = p->len[seq];
  if (n_pos <= len) return IL_OK;
  const int32_t have = il__blocks_for(p, len), need = il__blocks_for(p, n_pos);
  if (need > p->max_blocks)
    return il_error(IL_ERR_RANGE, "kvpages reserve: sequence %d: %d positions need %d blocks of %d, more than max_blocks %d",
                    seq, n_pos, need, p->block, p->max_blocks);
  int32_t *row = il__row(p, seq);
  /* the first new position lands in the last, partly filled block: copy it if shared, or if
   * the prefix cache indexes it (an indexed block never changes) */
  const bool cow = len % p->block != 0 && (p->ref[row[have - 1]] > 1 || (p->pc && p->indexed[row[have - 1]]));
  const int32_t fresh = need - have + (cow ? 1 : 0);
  if (fresh > p->n_free + p->n_lru)
    return il_error(IL_ERR_OOM,
                    "kvpages reserve: sequence %d: growing from %d to %d positions needs %d new blocks of %d positions%s; "
                    "%d of %d free",
                    seq, len, n_pos, fresh, p->block, cow ? " (one a copy of a shared block)" : "",
                    p->n_free + p->n_lru, p->n_blocks);
  if (cow && !copies)
    return il_error(IL_ERR_INVALID_ARG, "kvpages reserve: sequence %d must copy a shared block but no copy list was given",
                    seq);
  if (cow) {
    const int32_t old = row[have - 1], nb = il__alloc(p); /* old is referenced: never evicted here */
    il__unref(p, old); /* reaches 0 only for an indexed block: it stays cached */
    row[have - 1] = nb;
    copies[0] = (il_kvpages_copy){old, nb, len % p->block};
    *n_copies = 1;
  }
  for (int32_t i = have; i < need; i++) row[i] = il__alloc(p);
  p->len[seq] = n_pos;
  return IL_OK;
}

il_status il_kvpages_prefix_store(il_kvpages *p, int32_t seq, const int32_t *tokens, int32_t n) {
  IL_TRY(il__live(p, seq, "prefix store"));
  if (n < 0 || n > p->len[seq])
    return il_error(IL_ERR_RANGE, "kvpages prefix store: sequence %d: %d positions outside 0..%d", seq, n, p->len[seq]);
  if (!p->pc) return IL_OK;
  const int32_t *row = il__row(p, seq);
  uint64_t h = IL__HASH_ROOT;
  int32_t prev = -1;
  for (int32_t i = 0; i < n / p->block; i++) {
    const int32_t *t = tokens + (size_t)i * (size_t)p->block, b = row[i];
    h = il__hash(h, t, p->block);
    if (p->indexed[b]) {
      prev = b;
      continue;
    }
    const int32_t d = il__index_find(p, h, prev, t);
    if (d >= 0) { /* the same prefix computed by another sequence: keep that copy only */
      prev = d;
      continue;
    }
    il__index_insert(p, b, h, prev, t);
    prev = b;
  }
  return IL_OK;
}

il_status il_kvpages_prefix_reuse(il_kvpages *p, int32_t seq, const int32_t *tokens, int32_t n, int32_t *n_pos) {
  *n_pos = 0;
  if (seq < 0 || seq >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages prefix reuse: sequence %d outside 0..%d", seq, p->n_seq - 1);
  if (p->len[seq] > 0)
    return il_error(IL_ERR_INVALID_ARG, "kvpages prefix reuse: sequence %d holds %d positions already", seq, p->len[seq]);
  if (!p->pc) return IL_OK;
  if (p->len[seq] < 0) IL_TRY(il_kvpages_seq_add(p, seq));
  int32_t *row = il__row(p, seq), k = 0, prev = -1;
  const int32_t nb = n / p->block < p->max_blocks ? n / p->block : p->max_blocks;
  uint64_t h = IL__HASH_ROOT;
  for (; k < nb; k++) {
    const int32_t *t = tokens + (size_t)k * (size_t)p->block;
    h = il__hash(h, t, p->block);
    const int32_t b = il__index_find(p, h, prev, t);
    if (b < 0) break;
    if (p->ref[b] == 0) il__lru_unlink(p, b);
    p->ref[b]++;
    row[k] = b;
    prev = b;
  }
  p->len[seq] = k * p->block;
  *n_pos = p->len[seq];
  return IL_OK;
}

il_status il_kvpages_slot(const il_kvpages *p, int32_t seq, int32_t pos, int64_t *cell) {
  IL_TRY(il__live(p, seq, "slot"));
  if (pos < 0 || pos >= p->len[seq])
    return il_error(IL_ERR_RANGE, "kvpages slot: sequence %d: position %d outside 0..%d", seq, pos, p->len[seq] - 1);
  *cell = (int64_t)il__row(p, seq)[pos / p->block] * p->block + pos % p->block;
  return IL_OK;
}

int32_t il_kvpages_seq_len(const il_kvpages *p, int32_t seq) {
  return seq >= 0 && seq < p->n_seq ? p->len[seq] : -1;
}

int32_t il_kvpages_refcount(const il_kvpages *p, int32_t b) { return b >= 0 && b < p->n_blocks ? p->ref[b] : -1; }

void il_kvpages_export(const il_kvpages *p, int32_t *table) {
  memcpy(table, p->table, sizeof(int32_t) * (size_t)p->n_seq * (size_t)p->max_blocks);
}

void il_kvpages_stats_get(const il_kvpages *p, int64_t fit_len, il_kvpages_stats *o) {
  memset(o, 0, sizeof *o);
  o->block = p->block;
  o->blocks_total = p->n_blocks;
  o->blocks_free = p->n_free + p->n_lru;
  o->blocks_used = p->n_blocks - o->blocks_free;
  o->blocks_cached = p->n_indexed;
  o->blocks_evictable = p->n_lru;
  o->evictions = p->evictions;
  o->seqs_live = p->n_live;
  o->seqs_max = p->n_seq;
  for (int32_t b = 0; b < p->n_blocks; b++) o->blocks_shared += p->ref[b] > 1;
  /* positions stored: per block, the most any of its sequences fills it (a shared block once) */
  memset(p->fill, 0, sizeof(int32_t) * (size_t)p->n_blocks);
  for (int32_t s = 0; s < p->n_seq; s++) {
    if (p->len[s] < 0) continue;
    o->positions_logical += p->len[s];
    const int32_t *row = il__row(p, s);
    for (int32_t i = 0; i < il__blocks_for(p, p->len[s]); i++) {
      const int32_t f = p->len[s] - i * p->block < p->block ? p->len[s] - i * p->block : p->block;
      if (f > p->fill[row[i]]) p->fill[row[i]] = f;
    }
  }
  for (int32_t b = 0; b < p->n_blocks; b++) o->positions_stored += p->fill[b];
  o->positions_waste = (int64_t)o->blocks_used * p->block - o->positions_stored;
  const size_t bp = p->bytes_per_pos;
  o->bytes_pool = (size_t)p->n_blocks * (size_t)p->block * bp;
  o->bytes_reserved = (size_t)o->blocks_used * (size_t)p->block * bp;
  o->bytes_used = (size_t)o->positions_stored * bp;
  o->bytes_waste = (size_t)o->positions_waste * bp;
  o->bytes_saved_by_sharing = (size_t)(o->positions_logical - o->positions_stored) * bp;
  o->waste_ratio = o->bytes_reserved ? (double)o->bytes_waste / (double)o->bytes_reserved : 0;
  o->fit_len = fit_len < 1 ? 1 : fit_len;
  const int64_t per = il__blocks_for(p, o->fit_len);
  o->fit_seqs = per > p->max_blocks ? 0 : (p->n_free + p->n_lru) / per;
  if (o->fit_seqs > p->n_seq - p->n_live) o->fit_seqs = p->n_seq - p->n_live;
}

il_status il_kvpages_check(const il_kvpages *p) {
  int32_t *count = il_mem_calloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)p->n_blocks, "kv pages check");
  if (!count) return IL_ERR_OOM;
  il_status st = IL_OK;
  int32_t live = 0;
  for (int32_t s = 0; s < p->n_seq && st == IL_OK; s++) {
    const int32_t *row = il__row(p, s);
    const int32_t nb = p->len[s] < 0 ? 0 : il__blocks_for(p, p->len[s]);
    live += p->len[s] >= 0;
    for (int32_t i = 0; i < p->max_blocks && st == IL_OK; i++) {
      if (i < nb && (row[i] < 0 || row[i] >= p->n_blocks))
        st = il_error(IL_ERR_INTERNAL, "kvpages: sequence %d block %d = %d outside the pool", s, i, row[i]);
      else if (i >= nb && row[i] != -1)
        st = il_error(IL_ERR_INTERNAL, "kvpages: sequence %d entry %d = %d past its %d blocks", s, i, row[i], nb);
      else if (i < nb) count[row[i]]++;
    }
  }
  if (st == IL_OK && live != p->n_live)
    st = il_error(IL_ERR_INTERNAL, "kvpages: %d live sequences counted, %d recorded", live, p->n_live);
  int32_t zero = 0;
  for (int32_t b = 0; b < p->n_blocks && st == IL_OK; b++) {
    if (count[b] != p->ref[b])
      st = il_error(IL_ERR_INTERNAL, "kvpages: block %d referenced %d times, refcount %d", b, count[b], p->ref[b]);
    zero += count[b] == 0;
  }
  if (st == IL_OK && zero != p->n_free + p->n_lru)
    st = il_error(IL_ERR_INTERNAL, "kvpages: %d unreferenced blocks, %d free + %d evictable", zero, p->n_free, p->n_lru);
  for (int32_t i = 0; i < p->n_free && st == IL_OK; i++) {
    const int32_t b = p->free_ids[i];
    if (b < 0 || b >= p->n_blocks || p->ref[b] != 0 || count[b]-- != 0 || (p->pc && p->indexed[b]))
      st = il_error(IL_ERR_INTERNAL, "kvpages: free list entry %d (block %d) is in use, indexed or listed twice", i, b);
  }
  int32_t n_lru = 0;
  for (int32_t b = p->pc ? p->lru_head : -1; b >= 0 && st == IL_OK; b = p->lru_next[b], n_lru++)
    if (p->ref[b] != 0 || !p->indexed[b] || count[b]-- != 0 || n_lru > p->n_blocks)
      st = il_error(IL_ERR_INTERNAL, "kvpages: evictable block %d is referenced, unindexed or listed twice", b);
  if (st == IL_OK && n_lru != p->n_lru)
    st = il_error(IL_ERR_INTERNAL, "kvpages: %d blocks on the evictable list, %d recorded", n_lru, p->n_lru);
  int32_t n_idx = 0;
  for (uint32_t k = 0; p->pc && k < p->n_buckets && st == IL_OK; k++)
    for (int32_t b = p->bucket[k]; b >= 0 && st == IL_OK; b = p->hnext[b], n_idx++)
      if (!p->indexed[b] || (p->hash[b] & (p->n_buckets - 1)) != k || n_idx > p->n_blocks)
        st = il_error(IL_ERR_INTERNAL, "kvpages: block %d in index bucket %u is not indexed there", b, k);
  if (st == IL_OK && n_idx != p->n_indexed)
    st = il_error(IL_ERR_INTERNAL, "kvpages: %d blocks in the index, %d recorded", n_idx, p->n_indexed);
  il_mem_free(count);
  return st;
}
