/* engine/kvpages: block pool, per-sequence block tables, reference counts and copy-on-write for
 * the paged KV cache (see kvpages.h).
 *
 * The free list is a stack (a block given back is the next one handed out: it is likely still
 * in a cache). Every operation checks everything it needs before it changes anything, so an
 * error leaves the state as it was. Costs: add/remove/fork/truncate O(blocks of the sequence),
 * reserve O(new blocks), slot O(1), stats O(n_seq x max_blocks + n_blocks).
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
  il_mem_free(p);
}

static il_status il__live(const il_kvpages *p, int32_t seq, const char *op) {
  if (seq < 0 || seq >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages %s: sequence %d outside 0..%d", op, seq, p->n_seq - 1);
  if (p->len[seq] < 0) return il_error(IL_ERR_NOT_FOUND, "kvpages %s: sequence %d is not live", op, seq);
  return IL_OK;
}

static int32_t *il__row(const il_kvpages *p, int32_t seq) { return p->table + (size_t)seq * (size_t)p->max_blocks; }

static void il__unref(il_kvpages *p, int32_t b) {
  if (--p->ref[b] == 0) p->free_ids[p->n_free++] = b;
}

static int32_t il__alloc(il_kvpages *p) {
  const int32_t b = p->free_ids[--p->n_free];
  p->ref[b] = 1;
  return b;
}

il_status il_kvpages_seq_add(il_kvpages *p, int32_t seq) {
  if (seq < 0 || seq >= p->n_seq)
    return il_error(IL_ERR_RANGE, "kvpages add: sequence %d outside 0..%d", seq, p->n_seq - 1);
  if (p->len[seq] >= 0) return il_error(IL_ERR_INVALID_ARG, "kvpages add: sequence %d is live already", seq);
  p->len[seq] = 0;
  p->n_live++;
  return IL_OK;
}

/* Drops the blocks of seq from index nb on. */
static void il__drop_from(il_kvpages *p, int32_t seq, int32_t nb) {
  int32_t *row = il__row(p, seq);
  for (int32_t i = nb; i < p->max_blocks && row[i] >= 0; i++) {
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
  /* the first new position lands in the last, partly filled block: copy it if shared */
  const bool cow = len % p->block != 0 && p->ref[row[have - 1]] > 1;
  const int32_t fresh = need - have + (cow ? 1 : 0);
  if (fresh > p->n_free)
    return il_error(IL_ERR_OOM,
                    "kvpages reserve: sequence %d: growing from %d to %d positions needs %d new blocks of %d positions%s; "
                    "%d of %d free",
                    seq, len, n_pos, fresh, p->block, cow ? " (one a copy of a shared block)" : "", p->n_free,
                    p->n_blocks);
  if (cow && !copies)
    return il_error(IL_ERR_INVALID_ARG, "kvpages reserve: sequence %d must copy a shared block but no copy list was given",
                    seq);
  if (cow) {
    const int32_t old = row[have - 1], nb = il__alloc(p);
    p->ref[old]--; /* still referenced by the other sequences: never reaches 0 here */
    row[have - 1] = nb;
    copies[0] = (il_kvpages_copy){old, nb, len % p->block};
    *n_copies = 1;
  }
  for (int32_t i = have; i < need; i++) row[i] = il__alloc(p);
  p->len[seq] = n_pos;
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
  o->blocks_free = p->n_free;
  o->blocks_used = p->n_blocks - p->n_free;
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
  o->fit_seqs = per > p->max_blocks ? 0 : p->n_free / per;
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
  if (st == IL_OK && zero != p->n_free)
    st = il_error(IL_ERR_INTERNAL, "kvpages: %d unreferenced blocks, %d on the free list", zero, p->n_free);
  for (int32_t i = 0; i < p->n_free && st == IL_OK; i++) {
    const int32_t b = p->free_ids[i];
    if (b < 0 || b >= p->n_blocks || p->ref[b] != 0 || count[b]-- != 0)
      st = il_error(IL_ERR_INTERNAL, "kvpages: free list entry %d (block %d) is in use or listed twice", i, b);
  }
  il_mem_free(count);
  return st;
}
