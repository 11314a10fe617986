/* tests/test_prefix_cache: the prefix cache across requests (engine/kvpages' block index, and
 * through the engine on builtin:tiny, cpu and sim).
 *
 * - chaining: a prompt's blocks are found only from its first block on (the same tokens after a
 *   different first block are a different prefix), the longest matching run in whole blocks;
 * - reference counts: a reused block is shared by every sequence holding it, and is evictable
 *   only when none does;
 * - least recently used: under pressure the blocks released longest ago go first, a prompt's
 *   last block before the blocks leading to it; a block a live sequence holds is never evicted,
 *   even when the pool runs out (the reserve fails with IL_ERR_OOM and nothing changes);
 * - an indexed block never changes: writing into it after a truncate copies it first;
 * - two sequences that computed the same prefix keep one indexed copy;
 * - logits of a request whose prefix comes from the cache are bit-identical to the same
 *   request computed from scratch on an engine without the cache (cpu and sim); `cuda`: the same
 *   on the CUDA backend (the fake module, or a device), within its F32 bound.
 */
#include <math.h>
#include <string.h>

/* white-box: reads the engine's KV pool (engine_impl.h), which the snapshot does not show */
#include "engine/engine_impl.h"
#include "engine/kvpages.h"
#include "harness.h"

#define BL 4

static void fill(int32_t *t, int n, int seed) {
  for (int i = 0; i < n; i++) t[i] = 1000 * seed + i;
}

/* Grows seq to n positions (the caller's tokens are not needed by kvpages itself). */
static void grow(il_kvpages *p, int seq, int n) {
  il_kvpages_copy cp;
  int nc = 0;
  if (il_kvpages_seq_len(p, seq) < 0) IL_CHECK_OK(il_kvpages_seq_add(p, seq));
  IL_CHECK_OK(il_kvpages_reserve(p, seq, n, &cp, &nc));
  IL_CHECK_INT(nc, 0);
}

static int32_t block_of(il_kvpages *p, int seq, int pos) {
  int64_t cell = -1;
  IL_CHECK_OK(il_kvpages_slot(p, seq, pos, &cell));
  return (int32_t)(cell / BL);
}

static void test_chain_refcount_lru(void) {
  il_kvpages *p = NULL;
  IL_CHECK_OK(il_kvpages_new(10, BL, 6, 3, 1, &p));
  IL_CHECK_OK(il_kvpages_prefix_enable(p));
  IL_CHECK(il_kvpages_prefix_enabled(p));
  int32_t a[24], b[24], c[24];
  fill(a, 24, 1), fill(b, 24, 2), fill(c, 24, 3);
  int32_t n = -1;

  /* a miss on an empty index; then seq 0 computes 14 positions of a: three full blocks indexed */
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 0, a, 14, &n));
  IL_CHECK_INT(n, 0);
  grow(p, 0, 14);
  IL_CHECK_OK(il_kvpages_prefix_store(p, 0, a, 14));
  int32_t ab[3];
  for (int i = 0; i < 3; i++) {
    ab[i] = block_of(p, 0, i * BL);
    IL_CHECK(il_kvpages_prefix_indexed(p, ab[i]));
  }
  IL_CHECK(!il_kvpages_prefix_indexed(p, block_of(p, 0, 12))); /* the partial block is not */
  il_kvpages_stats ks;
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_cached, 3);
  IL_CHECK_INT(ks.blocks_evictable, 0);
  IL_CHECK_INT(il_kvpages_prefix_store(p, 0, a, 15), IL_ERR_RANGE);

  /* seq 0 ends: its indexed blocks stay, evictable; the partial one is free */
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_cached, 3);
  IL_CHECK_INT(ks.blocks_evictable, 3);
  IL_CHECK_INT(ks.blocks_free, 10);
  IL_CHECK_OK(il_kvpages_check(p));

  /* the same tokens after a different first block: not this prefix */
  int32_t x[24];
  memcpy(x, a, sizeof x);
  x[0] = 7;
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 1, x, 20, &n));
  IL_CHECK_INT(n, 0);
  /* the first block matching, the second not: one block */
  memcpy(x, a, sizeof x);
  x[5] = 7;
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 1, x, 20, &n));
  IL_CHECK_INT(n, BL);
  IL_CHECK_OK(il_kvpages_seq_remove(p, 1));
  /* a longer prompt: the three blocks, the same cells seq 0 wrote */
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 1, a, 20, &n));
  IL_CHECK_INT(n, 3 * BL);
  for (int i = 0; i < 3; i++) IL_CHECK_INT(block_of(p, 1, i * BL), ab[i]);
  /* only whole blocks within n: 11 positions asked for, two blocks */
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 2, a, 11, &n));
  IL_CHECK_INT(n, 2 * BL);
  IL_CHECK_INT(il_kvpages_refcount(p, ab[0]), 2);
  IL_CHECK_INT(il_kvpages_refcount(p, ab[2]), 1);
  IL_CHECK_INT(il_kvpages_prefix_reuse(p, 1, a, 20, &n), IL_ERR_INVALID_ARG); /* holds positions */
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_evictable, 0);
  IL_CHECK_OK(il_kvpages_check(p));
  IL_CHECK_OK(il_kvpages_seq_remove(p, 2));
  IL_CHECK_INT(il_kvpages_refcount(p, ab[0]), 1);

  /* b and c computed and released, b first: 2 + 2 more evictable blocks; a still held by seq 1 */
  grow(p, 0, 8);
  IL_CHECK_OK(il_kvpages_prefix_store(p, 0, b, 8));
  const int32_t bb[2] = {block_of(p, 0, 0), block_of(p, 0, BL)};
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  grow(p, 0, 8);
  IL_CHECK_OK(il_kvpages_prefix_store(p, 0, c, 8));
  const int32_t cb[2] = {block_of(p, 0, 0), block_of(p, 0, BL)};
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_cached, 7);
  IL_CHECK_INT(ks.blocks_evictable, 4);
  IL_CHECK_INT(ks.blocks_free, 10 - 3); /* seq 1 holds a's three */
  /* pressure: a new sequence takes the 3 truly free blocks, then evicts b's last block, b's
   * first, then c's last, in that order; a's blocks are held and stay */
  IL_CHECK_OK(il_kvpages_seq_add(p, 2));
  grow(p, 2, 3 * BL);
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT((int)ks.evictions, 0);
  grow(p, 2, 4 * BL);
  IL_CHECK(!il_kvpages_prefix_indexed(p, bb[1]) && il_kvpages_prefix_indexed(p, bb[0]));
  IL_CHECK_INT(block_of(p, 2, 3 * BL), bb[1]);
  grow(p, 2, 6 * BL);
  IL_CHECK(!il_kvpages_prefix_indexed(p, bb[0]) && !il_kvpages_prefix_indexed(p, cb[1]));
  IL_CHECK(il_kvpages_prefix_indexed(p, cb[0]));
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT((int)ks.evictions, 3);
  /* c's first block is still found; b's chain is gone from its first block */
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 0, c, 8, &n));
  IL_CHECK_INT(n, BL);
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  IL_CHECK_OK(il_kvpages_prefix_reuse(p, 0, b, 8, &n));
  IL_CHECK_INT(n, 0);
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  /* every block is now held by seq 1 (3) or seq 2 (6), one evictable (c's first): growing seq 2
   * past it evicts that one, and past the pool fails without touching a held block */
  grow(p, 0, BL);
  IL_CHECK(!il_kvpages_prefix_indexed(p, cb[0]));
  il_kvpages_copy cp;
  int nc = 0;
  IL_CHECK_INT(il_kvpages_reserve(p, 0, 2 * BL, &cp, &nc), IL_ERR_OOM);
  for (int i = 0; i < 3; i++) {
    IL_CHECK(il_kvpages_prefix_indexed(p, ab[i]));
    IL_CHECK_INT(il_kvpages_refcount(p, ab[i]), 1);
    IL_CHECK_INT(block_of(p, 1, i * BL), ab[i]);
  }
  IL_CHECK_OK(il_kvpages_check(p));

  /* an indexed block never changes: truncating seq 1 into a's second block and writing copies it */
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  IL_CHECK_OK(il_kvpages_seq_truncate(p, 1, BL + 2));
  IL_CHECK_OK(il_kvpages_reserve(p, 1, BL + 3, &cp, &nc));
  IL_CHECK_INT(nc, 1);
  IL_CHECK_INT(cp.src, ab[1]);
  IL_CHECK_INT(cp.n_pos, 2);
  IL_CHECK(il_kvpages_prefix_indexed(p, ab[1]));
  IL_CHECK_INT(il_kvpages_refcount(p, ab[1]), 0); /* released: cached, evictable */
  IL_CHECK(block_of(p, 1, BL) != ab[1]);
  IL_CHECK_OK(il_kvpages_check(p));
  il_kvpages_free(p);
  printf("prefix index: chained lookup, shared reference counts, least recently released evicted first, held "
         "blocks never evicted, indexed blocks copied before a write\n");
}

/* Two sequences computing one prefix side by side: the second store keeps the first copy. */
static void test_duplicate_store(void) {
  il_kvpages *p = NULL;
  IL_CHECK_OK(il_kvpages_new(8, BL, 4, 2, 1, &p));
  IL_CHECK_OK(il_kvpages_prefix_enable(p));
  int32_t a[8];
  fill(a, 8, 4);
  grow(p, 0, 8), grow(p, 1, 8);
  IL_CHECK_OK(il_kvpages_prefix_store(p, 0, a, 8));
  IL_CHECK_OK(il_kvpages_prefix_store(p, 1, a, 8));
  IL_CHECK_OK(il_kvpages_prefix_store(p, 0, a, 8)); /* again: nothing new */
  il_kvpages_stats ks;
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_cached, 2);
  IL_CHECK(!il_kvpages_prefix_indexed(p, block_of(p, 1, 0)));
  IL_CHECK_OK(il_kvpages_seq_remove(p, 1));
  IL_CHECK_OK(il_kvpages_seq_remove(p, 0));
  il_kvpages_stats_get(p, 1, &ks);
  IL_CHECK_INT(ks.blocks_evictable, 2);
  IL_CHECK_OK(il_kvpages_check(p));
  /* the cache off: store and reuse do nothing */
  il_kvpages *q = NULL;
  IL_CHECK_OK(il_kvpages_new(8, BL, 4, 2, 1, &q));
  grow(q, 0, 8);
  IL_CHECK_OK(il_kvpages_prefix_store(q, 0, a, 8));
  IL_CHECK_OK(il_kvpages_seq_remove(q, 0));
  int32_t n = -1;
  IL_CHECK_OK(il_kvpages_prefix_reuse(q, 0, a, 8, &n));
  IL_CHECK_INT(n, 0);
  IL_CHECK_OK(il_kvpages_check(q));
  il_kvpages_free(q);
  il_kvpages_free(p);
}

static il_engine *open_engine(const char *device, bool prefix_cache) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 96, c.threads = 2, c.n_seq = 2, c.logits_all = true, c.kv_block = 16;
  c.no_prefix_cache = !prefix_cache;
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.kv, sizeof c.kv, "paged");
  snprintf(c.kv_type, sizeof c.kv_type, "f32");
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

/* Request A (50 tokens) computed and released; request B shares A's first 40 tokens and takes
 * its two full blocks (32 positions) from the cache in another sequence; B's logits at every
 * computed position equal B computed from scratch on an engine without the cache. */
static void test_logits_equal(const char *device) {
  il_engine *e = open_engine(device, true), *ref = open_engine(device, false);
  if (!e || !ref) return;
  IL_CHECK(il_kv_cache_prefix_enabled(&e->kv));
  IL_CHECK(!il_kv_cache_prefix_enabled(&ref->kv));
  const size_t nv = (size_t)e->model->hp.n_vocab;
  int32_t a[50], b[60];
  for (int i = 0; i < 50; i++) a[i] = 1 + (i * 37) % 400;
  memcpy(b, a, sizeof(int32_t) * 40);
  for (int i = 40; i < 60; i++) b[i] = 3 + (i * 53) % 400;
  il_batch_entry batch[60];
  for (int i = 0; i < 50; i++) batch[i] = (il_batch_entry){a[i], 0, i, false};
  IL_CHECK_OK(il_engine_decode(e, batch, 50, NULL));
  IL_CHECK_OK(il_kv_cache_prefix_store(&e->kv, 0, a, 50));
  IL_CHECK_OK(il_engine_seq_remove(e, 0));
  int32_t n = -1;
  IL_CHECK_OK(il_kv_cache_prefix_reuse(&e->kv, 1, b, 59, &n));
  IL_CHECK_INT(n, 32);
  IL_CHECK_INT(il_kv_cache_seq_len(&e->kv, 1), 32);
  float *got = calloc(60 * nv, 4), *want = calloc(60 * nv, 4);
  for (int i = 32; i < 60; i++) batch[i - 32] = (il_batch_entry){b[i], 1, i, true};
  IL_CHECK_OK(il_engine_decode(e, batch, 28, got));
  for (int i = 0; i < 60; i++) batch[i] = (il_batch_entry){b[i], 0, i, true};
  IL_CHECK_OK(il_engine_decode(ref, batch, 60, want));
  /* cpu and sim: bit for bit. cuda: its GEMMs may sum a 50-row pass (A, whose cells B reuses)
   * in another order than B's 60-row one, so within the F32 bound of tests/test_cuda_engine */
  const bool bitwise = memcmp(got, want + 32 * nv, 28 * nv * 4) == 0;
  if (strncmp(device, "cuda", 4)) {
    IL_CHECK(bitwise);
  } else {
    double num = 0, den = 0;
    for (size_t i = 0; i < 28 * nv; i++) {
      const double d = (double)got[i] - want[32 * nv + i];
      num += d * d, den += (double)want[32 * nv + i] * want[32 * nv + i];
    }
    printf("prefix cache (%s): normalized error %.3g against the run from scratch (%s)\n", device, sqrt(num / den),
           bitwise ? "bit-identical" : "not bit-identical");
    IL_CHECK(sqrt(num / den) < 1e-4);
  }
  /* a miss gives the scratch logits too: nothing reused for a different first block */
  IL_CHECK_OK(il_engine_seq_remove(e, 1));
  b[0] ^= 1;
  IL_CHECK_OK(il_kv_cache_prefix_reuse(&e->kv, 1, b, 59, &n));
  IL_CHECK_INT(n, 0);
  il_kv_cache_stats ks;
  il_kv_cache_stats_get(&e->kv, 1, &ks);
  IL_CHECK_INT(ks.blocks_cached, 3); /* A's three full blocks */
  IL_CHECK(ks.bytes_cached > 0);
  printf("prefix cache (%s): 32 of 60 prompt positions from the cache, 28 logits rows %s a run from scratch\n",
         device, bitwise ? "bit-identical to" : "within 1e-4 of");
  free(got), free(want);
  il_engine_free(e);
  il_engine_free(ref);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) { /* test_prefix_cache_fakecuda, test_prefix_cache_cuda */
    il_backend *b = il_test_open_cuda_or_skip(); /* exits 77 without a module or a device */
    b->ops->destroy(b);
    test_logits_equal("cuda");
    return il_test_finish();
  }
  test_chain_refcount_lru();
  test_duplicate_store();
  test_logits_equal("cpu");
  test_logits_equal("sim:64MiB");
  return il_test_finish();
}
