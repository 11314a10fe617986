/* tests/test_kvpages: the paged-KV block manager (engine/kvpages).
 *
 * A random walk of add / fork / grow / truncate / remove from a fixed seed against a model of
 * what each sequence holds: a simulated device array receives the copy-on-write copies and the
 * new tokens at their slots, and every live sequence must read back exactly its own tokens
 * through slot() after every step (so a write into a shared block would show up in the other
 * sequence). After every step: the internal check, reference counts equal the references in the
 * exported table, free + used = total, and the stats recomputed here. Plus: fork then write
 * gives one copy action, prefix sharing of 8 samples, out of blocks and too long sequences are
 * errors that change nothing. The walk again with the prefix cache on (blocks indexed, reused by
 * other sequences, evicted under pressure).
 */
#include "engine/kvpages.h"
#include "harness.h"

#define NB 48
#define BL 16
#define MB 12
#define NS 8
#define BPP 100

static uint64_t rng = 0x1234567ULL;
static int irand(int n) { return (int)((il_test_randf(&rng) + 1.0f) * 0.5f * (float)n) % n; }

static int32_t dev[NB * BL];      /* the simulated cache: one token per cell */
static int32_t want[NS][MB * BL]; /* what each sequence must read back */
static int32_t wlen[NS];          /* -1 = not live */
static int32_t next_tok = 1;

static void check_all(il_kvpages *p, const char *what) {
  il_status st = il_kvpages_check(p);
  if (st != IL_OK) fprintf(stderr, "%s: %s\n", what, il_error_detail());
  IL_CHECK_INT(st, IL_OK);
  int32_t table[NS * MB], refs[NB] = {0}, fill[NB] = {0};
  il_kvpages_export(p, table);
  int64_t logical = 0;
  int live = 0;
  for (int s = 0; s < NS; s++) {
    IL_CHECK_INT(il_kvpages_seq_len(p, s), wlen[s]);
    if (wlen[s] < 0) {
      for (int i = 0; i < MB; i++) IL_CHECK_INT(table[s * MB + i], -1);
      continue;
    }
    live++;
    logical += wlen[s];
    const int nb = (wlen[s] + BL - 1) / BL;
    for (int i = 0; i < MB; i++) {
      if (i >= nb) {
        IL_CHECK_INT(table[s * MB + i], -1);
        continue;
      }
      const int32_t b = table[s * MB + i];
      IL_CHECK(b >= 0 && b < NB);
      refs[b]++;
      const int f = wlen[s] - i * BL < BL ? wlen[s] - i * BL : BL;
      fill[b] = f > fill[b] ? f : fill[b];
    }
    int bad = 0;
    for (int32_t pos = 0; pos < wlen[s]; pos++) {
      int64_t cell = -1;
      if (il_kvpages_slot(p, s, pos, &cell) != IL_OK || cell != (int64_t)table[s * MB + pos / BL] * BL + pos % BL ||
          dev[cell] != want[s][pos])
        bad++;
    }
    if (bad) fprintf(stderr, "%s: sequence %d: %d positions read back wrong\n", what, s, bad);
    IL_CHECK_INT(bad, 0);
  }
  int used = 0, shared = 0;
  int64_t stored = 0;
  for (int b = 0; b < NB; b++) {
    IL_CHECK_INT(il_kvpages_refcount(p, b), refs[b]);
    used += refs[b] > 0;
    shared += refs[b] > 1;
    stored += fill[b];
  }
  {
    il_kvpages_stats s;
    il_kvpages_stats_get(p, 40, &s);
    IL_CHECK_INT(s.blocks_total, NB);
    IL_CHECK_INT(s.blocks_free + s.blocks_used, s.blocks_total);
    IL_CHECK_INT(s.blocks_used, used);
    IL_CHECK_INT(s.blocks_shared, shared);
    IL_CHECK_INT(s.seqs_live, live);
    IL_CHECK_INT(s.positions_logical, logical);
    IL_CHECK_INT(s.positions_stored, stored);
    IL_CHECK_INT(s.positions_waste, (int64_t)used * BL - stored);
    IL_CHECK(s.positions_waste >= 0 && s.positions_stored <= s.positions_logical);
    IL_CHECK_INT(s.bytes_reserved, (size_t)used * BL * BPP);
    IL_CHECK_INT(s.bytes_used + s.bytes_waste, s.bytes_reserved);
    IL_CHECK_INT(s.bytes_saved_by_sharing, (size_t)(logical - stored) * BPP);
    IL_CHECK_INT(s.bytes_pool, (size_t)NB * BL * BPP);
    int64_t fit = (NB - used) / 3; /* 40 positions = 3 blocks */
    if (fit > NS - live) fit = NS - live;
    IL_CHECK_INT(s.fit_seqs, fit);
  }
}

/* Grows seq by n tokens the way an engine would: reserve, perform the copies, write. */
static il_status grow(il_kvpages *p, int s, int n, int *n_copies_out) {
  il_kvpages_copy cp[1];
  int nc = -1;
  il_status st = il_kvpages_reserve(p, s, wlen[s] + n, cp, &nc);
  if (n_copies_out) *n_copies_out = nc;
  if (st != IL_OK) return st;
  IL_CHECK(nc == 0 || nc == 1);
  if (nc == 1) {
    /* an indexed block its only holder copies before writing stays cached, unreferenced */
    IL_CHECK(il_kvpages_refcount(p, cp[0].src) >= (il_kvpages_prefix_enabled(p) ? 0 : 1));
    IL_CHECK_INT(il_kvpages_refcount(p, cp[0].dst), 1);
    IL_CHECK_INT(cp[0].n_pos, wlen[s] % BL);
    memcpy(dev + (size_t)cp[0].dst * BL, dev + (size_t)cp[0].src * BL, sizeof(int32_t) * (size_t)cp[0].n_pos);
  }
  for (int i = 0; i < n; i++) {
    int64_t cell;
    const int32_t pos = wlen[s] + i;
    IL_CHECK_OK(il_kvpages_slot(p, s, pos, &cell));
    dev[cell] = want[s][pos] = next_tok++;
  }
  wlen[s] += n;
  return IL_OK;
}

static int32_t rlen[NS]; /* positions of want[s] that record what sequence s wrote last */

/* pc: with the prefix cache: sequences index their blocks at random times and before they end,
 * and empty ones take a prefix of what another wrote (live or gone); every live sequence must
 * still read back exactly its own tokens, so an evicted block still held, or a cached block
 * written into, would show. */
static void test_random_walk(bool pc) {
  il_kvpages *p;
  IL_CHECK_OK(il_kvpages_new(NB, BL, MB, NS, BPP, &p));
  if (pc) IL_CHECK_OK(il_kvpages_prefix_enable(p));
  for (int s = 0; s < NS; s++) wlen[s] = -1, rlen[s] = 0;
  int n_oom = 0, n_copies = 0, n_forks = 0, n_hits = 0;
  for (int step = 0; step < 3000; step++) {
    const int op = irand(10), s = irand(NS), d = irand(NS);
    char what[64];
    snprintf(what, sizeof what, "step %d op %d seq %d", step, op, s);
    if (op == 0) {
      IL_CHECK_INT(il_kvpages_seq_add(p, s), wlen[s] < 0 ? IL_OK : IL_ERR_INVALID_ARG);
      if (wlen[s] < 0) wlen[s] = 0;
    } else if (op == 1 && irand(2)) {
      if (pc && wlen[s] >= 0) IL_CHECK_OK(il_kvpages_prefix_store(p, s, want[s], wlen[s]));
      IL_CHECK_INT(il_kvpages_seq_remove(p, s), wlen[s] >= 0 ? IL_OK : IL_ERR_NOT_FOUND);
      if (wlen[s] >= 0) rlen[s] = wlen[s];
      wlen[s] = -1;
    } else if (pc && op == 5 && wlen[s] > 0) {
      IL_CHECK_OK(il_kvpages_prefix_store(p, s, want[s], irand(wlen[s] + 1)));
    } else if (pc && op == 5 && s != d) {
      int32_t n = -1;
      const int32_t len_d = wlen[d] >= 0 ? wlen[d] : rlen[d];
      IL_CHECK_OK(il_kvpages_prefix_reuse(p, s, want[d], len_d, &n));
      IL_CHECK(n % BL == 0 && n <= len_d);
      memmove(want[s], want[d], sizeof(int32_t) * (size_t)n);
      wlen[s] = n;
      n_hits += n > 0;
    } else if (op == 2 || op == 3) {
      il_status st = il_kvpages_seq_fork(p, s, d);
      IL_CHECK_INT(st, wlen[s] < 0 ? IL_ERR_NOT_FOUND : wlen[d] >= 0 ? IL_ERR_INVALID_ARG : IL_OK);
      if (st == IL_OK) {
        wlen[d] = wlen[s];
        memcpy(want[d], want[s], sizeof want[s]);
        n_forks++;
      }
    } else if (op == 4) {
      if (wlen[s] < 0) continue;
      const int n = irand(wlen[s] + 1);
      IL_CHECK_OK(il_kvpages_seq_truncate(p, s, n));
      wlen[s] = n;
    } else if (wlen[s] >= 0) {
      const int n = 1 + irand(op >= 8 ? 80 : 7);
      const bool too_long = wlen[s] + n > MB * BL;
      int32_t before[NS * MB], after[NS * MB];
      il_kvpages_export(p, before);
      il_kvpages_stats s0, s1;
      il_kvpages_stats_get(p, 1, &s0);
      int nc;
      il_status st = grow(p, s, n, &nc);
      if (too_long) IL_CHECK_INT(st, IL_ERR_RANGE);
      if (st == IL_ERR_OOM || st == IL_ERR_RANGE) {
        n_oom += st == IL_ERR_OOM;
        il_kvpages_export(p, after);
        il_kvpages_stats_get(p, 1, &s1);
        IL_CHECK(memcmp(before, after, sizeof before) == 0);
        IL_CHECK_INT(s1.blocks_free, s0.blocks_free);
        IL_CHECK_INT(nc, 0);
      } else {
        IL_CHECK_OK(st);
        n_copies += nc;
      }
    }
    check_all(p, what);
  }
  il_kvpages_stats ks;
  il_kvpages_stats_get(p, 1, &ks);
  printf("random walk%s: %d forks, %d copy-on-write copies, %d out-of-blocks refusals, %d prefix hits, %llu "
         "evictions\n", pc ? " (prefix cache)" : "", n_forks, n_copies, n_oom, n_hits, (unsigned long long)ks.evictions);
  IL_CHECK(n_forks > 50 && n_copies > 10 && n_oom > 10); /* the walk reached every path */
  if (pc) IL_CHECK(n_hits > 20 && ks.evictions > 20);
  il_kvpages_free(p);
}

static void test_fork_and_share(void) {
  il_kvpages *p;
  IL_CHECK_OK(il_kvpages_new(64, 16, 16, 8, 1000, &p));
  IL_CHECK_OK(il_kvpages_seq_add(p, 0));
  il_kvpages_copy cp[1];
  int nc = -1;
  IL_CHECK_OK(il_kvpages_reserve(p, 0, 100, cp, &nc)); /* 7 blocks, the last holds 4 */
  IL_CHECK_INT(nc, 0);
  for (int d = 1; d < 8; d++) IL_CHECK_OK(il_kvpages_seq_fork(p, 0, d));
  il_kvpages_stats s;
  il_kvpages_stats_get(p, 100, &s);
  IL_CHECK_INT(s.blocks_used, 7);
  IL_CHECK_INT(s.blocks_shared, 7);
  IL_CHECK_INT(s.positions_logical, 800);
  IL_CHECK_INT(s.positions_stored, 100);
  IL_CHECK_INT(s.bytes_saved_by_sharing, 700 * 1000);
  IL_CHECK_INT(s.positions_waste, 12);
  IL_CHECK_INT(s.fit_seqs, 0); /* 57 blocks free, but all 8 ids are taken */
  int64_t last;
  IL_CHECK_OK(il_kvpages_slot(p, 0, 99, &last));
  const int32_t shared_last = (int32_t)(last / 16);
  IL_CHECK_INT(il_kvpages_refcount(p, shared_last), 8);
  /* each sample writes its first token: 7 copies, the last writer owns the block alone */
  int copies = 0;
  for (int d = 1; d < 8; d++) {
    IL_CHECK_OK(il_kvpages_reserve(p, d, 101, cp, &nc));
    IL_CHECK_INT(nc, 1);
    IL_CHECK_INT(cp[0].src, shared_last);
    IL_CHECK_INT(cp[0].n_pos, 4);
    copies += nc;
  }
  IL_CHECK_OK(il_kvpages_reserve(p, 0, 101, cp, &nc));
  IL_CHECK_INT(nc, 0);
  IL_CHECK_INT(copies, 7);
  IL_CHECK_INT(il_kvpages_refcount(p, shared_last), 1);
  il_kvpages_stats_get(p, 100, &s);
  IL_CHECK_INT(s.blocks_used, 14);
  IL_CHECK_INT(s.blocks_shared, 6);
  IL_CHECK_INT(s.positions_stored, 96 + 8 * 5);
  /* a fork at a block boundary never copies */
  IL_CHECK_OK(il_kvpages_seq_remove(p, 7));
  IL_CHECK_OK(il_kvpages_seq_truncate(p, 0, 96));
  IL_CHECK_OK(il_kvpages_seq_fork(p, 0, 7));
  IL_CHECK_OK(il_kvpages_reserve(p, 7, 97, cp, &nc));
  IL_CHECK_INT(nc, 0);
  /* a shared block needs a copy list */
  IL_CHECK_OK(il_kvpages_seq_remove(p, 6));
  IL_CHECK_OK(il_kvpages_seq_fork(p, 7, 6));
  IL_CHECK_INT(il_kvpages_reserve(p, 6, 98, NULL, NULL), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_kvpages_check(p));
  /* remove everything: the pool is whole again */
  for (int d = 0; d < 8; d++) IL_CHECK_OK(il_kvpages_seq_remove(p, d));
  il_kvpages_stats_get(p, 100, &s);
  IL_CHECK_INT(s.blocks_free, 64);
  IL_CHECK_INT(s.fit_seqs, 8);
  IL_CHECK_OK(il_kvpages_check(p));
  il_kvpages_free(p);
}

static void test_errors(void) {
  il_kvpages *p = (il_kvpages *)1;
  IL_CHECK_INT(il_kvpages_new(0, 16, 4, 2, 1, &p), IL_ERR_INVALID_ARG);
  IL_CHECK(p == NULL);
  IL_CHECK_OK(il_kvpages_new(4, 16, 8, 2, 1, &p));
  IL_CHECK_OK(il_kvpages_seq_add(p, 0));
  il_kvpages_copy cp[1];
  int nc;
  IL_CHECK_INT(il_kvpages_reserve(p, 0, 70, cp, &nc), IL_ERR_OOM);
  IL_CHECK_CONTAINS(il_error_detail(), "sequence 0");
  IL_CHECK_CONTAINS(il_error_detail(), "needs 5 new blocks of 16 positions");
  IL_CHECK_CONTAINS(il_error_detail(), "4 of 4 free");
  IL_CHECK_INT(il_kvpages_seq_len(p, 0), 0);
  IL_CHECK_INT(il_kvpages_reserve(p, 0, 200, cp, &nc), IL_ERR_RANGE);
  IL_CHECK_CONTAINS(il_error_detail(), "more than max_blocks 8");
  IL_CHECK_OK(il_kvpages_reserve(p, 0, 64, cp, &nc));
  IL_CHECK_INT(il_kvpages_reserve(p, 0, 65, cp, &nc), IL_ERR_OOM);
  IL_CHECK_INT(il_kvpages_seq_add(p, 2), IL_ERR_RANGE);
  IL_CHECK_INT(il_kvpages_seq_add(p, 0), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_kvpages_seq_remove(p, 1), IL_ERR_NOT_FOUND);
  IL_CHECK_INT(il_kvpages_seq_truncate(p, 0, 65), IL_ERR_RANGE);
  IL_CHECK_INT(il_kvpages_seq_fork(p, 0, 0), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_kvpages_seq_fork(p, 1, 0), IL_ERR_NOT_FOUND);
  int64_t cell;
  IL_CHECK_INT(il_kvpages_slot(p, 0, 64, &cell), IL_ERR_RANGE);
  IL_CHECK_INT(il_kvpages_slot(p, 1, 0, &cell), IL_ERR_NOT_FOUND);
  IL_CHECK_INT(il_kvpages_refcount(p, 4), -1);
  /* a fork of a full pool still works (no block moves) and its first write is refused */
  IL_CHECK_OK(il_kvpages_seq_truncate(p, 0, 60));
  IL_CHECK_OK(il_kvpages_seq_fork(p, 0, 1));
  IL_CHECK_INT(il_kvpages_reserve(p, 1, 61, cp, &nc), IL_ERR_OOM);
  IL_CHECK_CONTAINS(il_error_detail(), "one a copy of a shared block");
  IL_CHECK_OK(il_kvpages_check(p));
  il_kvpages_free(p);
  il_kvpages_free(NULL);
}

int main(void) {
  test_errors();
  test_fork_and_share();
  test_random_walk(false);
  test_random_walk(true);
  return il_test_finish();
}
