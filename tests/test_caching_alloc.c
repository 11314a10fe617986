/* tests/test_caching_alloc: the caching allocator (memory/caching) over a fake device.
 *
 * The fake device hands out addresses that are never backed by memory (the allocator must not
 * touch segment memory), keeps its own tally of live segments and bytes, can refuse above a
 * budget, and can fail every call from the N-th on (fault injection). Checked:
 *   - 20,000 random alloc/free steps from a fixed seed, with every invariant checked after each
 *     step against an independent model: live blocks do not overlap and are exactly the ones
 *     the model holds (address, size, category, name); each segment's blocks tile it from 0 with
 *     no two free neighbours; reserved/allocated/requested/free/largest free/fragmentation/
 *     inactive split agree with sums over the snapshot, the device's tally and the model;
 *     per-category counters add up to the totals; allocated <= reserved <= cap;
 *   - freeing everything leaves one free block per segment; empty_cache returns them all;
 *   - fragmentation on a hand-computed pattern, best fit, the split rules of both pools;
 *   - OOM by capacity vs by fragmentation, retry after freeing the cache (cap and device),
 *     the no-cache mode, cap lowering, fault injection on the device and on host metadata;
 *   - the snapshot as JSON (python3 json) and as SVG (python3 xml.etree), names escaped;
 *   - four threads allocating at once.
 */
#include <pthread.h>
#include <stdbool.h>

#include "harness.h"
#include "memory/caching.h"
#include "lab/memmap.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

/* ---- the fake device --------------------------------------------------------------------- */

typedef struct {
  uintptr_t base;
  size_t size;
} seg_rec;

typedef struct {
  pthread_mutex_t mu;
  uintptr_t next;
  size_t budget;       /* 0 = none */
  long fail_from;      /* calls from this one (1-based) on fail; 0 = never */
  long calls, allocs, frees;
  size_t live_bytes;
  seg_rec live[4096];
  size_t n_live;
  int bad_frees;
} fake_dev;

static void dev_init(fake_dev *d, size_t budget) {
  memset(d, 0, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  d->next = (uintptr_t)1 << 40;
  d->budget = budget;
}

static il_status dev_alloc(void *ctx, size_t bytes, void **base) {
  fake_dev *d = ctx;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  il_status st = IL_OK;
  if (d->fail_from && d->calls >= d->fail_from) st = il_error(IL_ERR_OOM, "fake device: injected failure");
  else if (d->budget && d->live_bytes + bytes > d->budget) st = il_error(IL_ERR_OOM, "fake device: full");
  else if (d->n_live == sizeof d->live / sizeof d->live[0]) st = il_error(IL_ERR_OOM, "fake device: too many");
  if (st == IL_OK) {
    *base = (void *)d->next;
    d->live[d->n_live++] = (seg_rec){d->next, bytes};
    d->next += bytes + 4096;
    d->live_bytes += bytes;
    d->allocs++;
  }
  pthread_mutex_unlock(&d->mu);
  return st;
}

static void dev_free(void *ctx, void *base, size_t bytes) {
  fake_dev *d = ctx;
  pthread_mutex_lock(&d->mu);
  size_t i = 0;
  while (i < d->n_live && d->live[i].base != (uintptr_t)base) i++;
  if (i == d->n_live || d->live[i].size != bytes) {
    d->bad_frees++;
  } else {
    d->live[i] = d->live[--d->n_live];
    d->live_bytes -= bytes;
    d->frees++;
  }
  pthread_mutex_unlock(&d->mu);
}

static il_caching *make(fake_dev *d, size_t cap, bool no_cache) {
  il_caching_opts o = {.name = "fake", .cap = cap, .seg_alloc = dev_alloc, .seg_free = dev_free, .ctx = d,
                       .no_cache = no_cache};
  il_caching *a = NULL;
  IL_CHECK_OK(il_caching_new(&o, &a));
  return a;
}

/* ---- the independent model and the invariant check ---------------------------------------- */

typedef struct {
  il_caching_block *b;
  uintptr_t ptr;
  size_t size, requested;
  il_mem_category cat;
  char name[32];
} live_rec;

typedef struct {
  live_rec *v;
  size_t n, cap;
} model;

static void model_add(model *m, il_caching_block *b, size_t req, il_mem_category cat, const char *name) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 256;
    m->v = realloc(m->v, m->cap * sizeof *m->v);
  }
  live_rec *r = &m->v[m->n++];
  r->b = b;
  r->ptr = (uintptr_t)il_caching_block_ptr(b);
  r->size = il_caching_block_size(b);
  r->requested = req;
  r->cat = cat;
  snprintf(r->name, sizeof r->name, "%s", name);
}

static int cmp_ptr(const void *x, const void *y) {
  uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
  return a < b ? -1 : a > b;
}

static int cmp_live(const void *x, const void *y) {
  const live_rec *a = x, *b = y;
  return a->ptr < b->ptr ? -1 : a->ptr > b->ptr;
}

typedef struct {
  uintptr_t ptr;
  size_t size;
  const il_caching_snap_block *blk;
} snap_live;

#define BAD(...)                                                                         \
  do {                                                                                   \
    fprintf(stderr, "invariant (%s, step %ld): ", where, step);                          \
    fprintf(stderr, __VA_ARGS__);                                                        \
    fprintf(stderr, "\n");                                                               \
    il_snapshot_ok = false;                                                              \
    goto done;                                                                           \
  } while (0)

static bool il_snapshot_ok;

/* Checks every invariant; returns false (after printing the first broken one) on failure. */
static bool check(il_caching *a, fake_dev *d, model *m, size_t cap, const char *where, long step) {
  il_caching_snapshot s;
  il_snapshot_ok = true;
  snap_live *sl = NULL;
  if (il_caching_snapshot_take(a, &s) != IL_OK) {
    fprintf(stderr, "snapshot failed: %s\n", il_error_detail());
    return false;
  }
  const il_caching_stats *st = &s.stats;
  size_t reserved = 0, free_bytes = 0, inactive = 0, largest[IL_CACHING_POOL_COUNT] = {0}, allocated = 0;
  size_t requested = 0, n_alloc = 0;
  size_t cat_alloc[IL_MEM_CATEGORY_COUNT] = {0};
  sl = malloc((s.n_blocks + 1) * sizeof *sl);
  for (size_t i = 0; i < s.n_segments; i++) {
    const il_caching_snap_segment *g = &s.segments[i];
    reserved += g->size;
    size_t off = 0, seg_free = 0;
    bool prev_free = false;
    if (!g->n_blocks) BAD("segment %zu has no blocks", i);
    if (i && g->id <= s.segments[i - 1].id) BAD("segments not in creation order");
    for (size_t k = g->first_block; k < g->first_block + g->n_blocks; k++) {
      const il_caching_snap_block *b = &s.blocks[k];
      if (b->offset != off) BAD("segment %llu: block at %zu, expected %zu", (unsigned long long)g->id, b->offset, off);
      if (b->size == 0 || b->size % IL_CACHING_ROUND) BAD("block size %zu", b->size);
      off += b->size;
      if (b->allocated) {
        if (b->size < b->requested) BAD("block %zu < requested %zu", b->size, b->requested);
        sl[n_alloc++] = (snap_live){g->base + b->offset, b->size, b};
        allocated += b->size;
        requested += b->requested;
        cat_alloc[b->cat] += b->size;
        prev_free = false;
      } else {
        if (prev_free) BAD("two free neighbours in segment %llu at %zu", (unsigned long long)g->id, b->offset);
        prev_free = true;
        seg_free += b->size;
        if (b->size > largest[g->pool]) largest[g->pool] = b->size;
      }
    }
    if (off != g->size) BAD("segment %llu: blocks cover %zu of %zu", (unsigned long long)g->id, off, g->size);
    free_bytes += seg_free;
    if (g->n_blocks > 1) inactive += seg_free;
  }
  /* the device's own tally */
  if (reserved != d->live_bytes) BAD("reserved %zu, device holds %zu", reserved, d->live_bytes);
  if (s.n_segments != d->n_live) BAD("segments %zu, device holds %zu", s.n_segments, d->n_live);
  if (d->bad_frees) BAD("seg_free with a wrong base or size");
  if (st->total.segment_allocs != (uint64_t)d->allocs || st->total.segment_frees != (uint64_t)d->frees)
    BAD("segment allocs/frees %llu/%llu vs device %ld/%ld", (unsigned long long)st->total.segment_allocs,
        (unsigned long long)st->total.segment_frees, d->allocs, d->frees);
  /* stats against the snapshot sums */
  if (st->total.reserved != reserved) BAD("stats reserved %zu vs %zu", st->total.reserved, reserved);
  if (st->total.allocated != allocated) BAD("stats allocated %zu vs %zu", st->total.allocated, allocated);
  if (st->total.active != allocated) BAD("active %zu vs %zu", st->total.active, allocated);
  if (st->total.requested != requested) BAD("stats requested %zu vs %zu", st->total.requested, requested);
  if (st->free_bytes != free_bytes) BAD("free %zu vs %zu", st->free_bytes, free_bytes);
  if (st->total.inactive_split != inactive) BAD("inactive split %zu vs %zu", st->total.inactive_split, inactive);
  for (int p = 0; p < IL_CACHING_POOL_COUNT; p++)
    if (st->largest_free_pool[p] != largest[p]) BAD("largest free pool %d: %zu vs %zu", p, st->largest_free_pool[p], largest[p]);
  size_t lf = largest[0] > largest[1] ? largest[0] : largest[1];
  if (st->largest_free != lf) BAD("largest free %zu vs %zu", st->largest_free, lf);
  double frag = free_bytes ? 1.0 - (double)lf / (double)free_bytes : 0.0;
  if (fabs(st->fragmentation - frag) > 1e-12) BAD("fragmentation %g vs %g", st->fragmentation, frag);
  if (st->total.n_segments != s.n_segments || st->total.n_blocks != n_alloc) BAD("counts");
  if (st->total.segment_allocs - st->total.segment_frees != st->total.n_segments) BAD("segment allocs - frees");
  if (st->total.n_allocs - st->total.n_frees != st->total.n_blocks) BAD("allocs - frees");
  if (st->total.allocated > st->total.reserved) BAD("allocated > reserved");
  if (cap && st->total.reserved > cap) BAD("reserved %zu > cap %zu", st->total.reserved, cap);
  if (st->total.peak_reserved < st->total.reserved || st->total.peak_allocated < st->total.allocated) BAD("peaks");
  /* per category: adds up, and allocated matches the snapshot */
  il_caching_counts sum = {0};
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
    const il_caching_counts *k = &st->cat[c];
    if (k->allocated != cat_alloc[c]) BAD("category %d allocated %zu vs %zu", c, k->allocated, cat_alloc[c]);
    sum.reserved += k->reserved;
    sum.allocated += k->allocated;
    sum.requested += k->requested;
    sum.inactive_split += k->inactive_split;
    sum.n_blocks += k->n_blocks;
    sum.n_segments += k->n_segments;
    sum.n_allocs += k->n_allocs;
    sum.n_frees += k->n_frees;
    sum.segment_allocs += k->segment_allocs;
    sum.segment_frees += k->segment_frees;
    sum.retries += k->retries;
    sum.ooms += k->ooms;
  }
  if (sum.reserved != st->total.reserved || sum.allocated != st->total.allocated ||
      sum.requested != st->total.requested || sum.inactive_split != st->total.inactive_split ||
      sum.n_blocks != st->total.n_blocks || sum.n_segments != st->total.n_segments ||
      sum.n_allocs != st->total.n_allocs || sum.n_frees != st->total.n_frees ||
      sum.segment_allocs != st->total.segment_allocs || sum.segment_frees != st->total.segment_frees ||
      sum.retries != st->total.retries || sum.ooms != st->total.ooms)
    BAD("per-category counters do not add up to the totals");
  /* the live blocks are exactly the model's, and do not overlap */
  if (m) {
    if (n_alloc != m->n) BAD("%zu live blocks, model has %zu", n_alloc, m->n);
    qsort(sl, n_alloc, sizeof *sl, cmp_ptr);
    qsort(m->v, m->n, sizeof *m->v, cmp_live);
    for (size_t i = 0; i < n_alloc; i++) {
      const live_rec *r = &m->v[i];
      if (sl[i].ptr != r->ptr || sl[i].size != r->size || sl[i].blk->requested != r->requested ||
          sl[i].blk->cat != r->cat || strcmp(sl[i].blk->name, r->name) != 0)
        BAD("live block %zu differs from the model (%s)", i, r->name);
      if (r->size < (r->requested + IL_CACHING_ROUND - 1) / IL_CACHING_ROUND * IL_CACHING_ROUND)
        BAD("block smaller than the rounded request");
      if (i + 1 < n_alloc && sl[i].ptr + sl[i].size > sl[i + 1].ptr) BAD("live blocks overlap at %zu", i);
    }
  }
done:
  free(sl);
  il_caching_snapshot_free(&s);
  if (il_snapshot_ok) il_test_passed++;
  else il_test_failed++;
  return il_snapshot_ok;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t random_size(uint64_t *rng) {
  uint64_t r = rng_next(rng) % 100, u = rng_next(rng);
  if (r < 60) return 1 + u % (64 * KiB);
  if (r < 85) return 64 * KiB + u % (960 * KiB);
  if (r < 97) return MiB + u % (11 * MiB);
  return 12 * MiB + u % (28 * MiB);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_random_invariants(void) {
  fake_dev d;
  dev_init(&d, 0);
  const size_t cap = 400 * MiB;
  il_caching *a = make(&d, cap, false);
  model m = {0};
  uint64_t rng = 0x5eed1234abcdULL;
  long ooms = 0, steps = 20000;
  bool ok = true;
  for (long step = 0; step < steps && ok; step++) {
    bool do_alloc = m.n < 40 || (m.n < 160 && rng_next(&rng) % 100 < 55);
    if (do_alloc) {
      size_t bytes = random_size(&rng);
      il_mem_category cat = (il_mem_category)(rng_next(&rng) % IL_MEM_CATEGORY_COUNT);
      char name[32];
      snprintf(name, sizeof name, "t%ld", step);
      il_caching_block *b;
      il_status st = il_caching_alloc(a, cat, bytes, name, &b);
      if (st == IL_OK) {
        model_add(&m, b, bytes, cat, name);
      } else {
        ooms++;
        il_caching_oom r;
        IL_CHECK(st == IL_ERR_OOM && il_caching_last_oom(a, &r) && r.requested == bytes);
        IL_CHECK(r.cause == IL_CACHING_OOM_CAP && r.headroom < r.rounded);
      }
    } else {
      size_t i = rng_next(&rng) % m.n;
      il_caching_free(a, m.v[i].b);
      m.v[i] = m.v[--m.n];
    }
    if (step % 5000 == 4999) il_caching_empty_cache(a);
    ok = check(a, &d, &m, cap, "random", step);
  }
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  printf("random: %ld steps, %llu segment allocs, %llu retries, %ld OOMs, peak reserved %.1f MiB, "
         "peak allocated %.1f MiB\n",
         steps, (unsigned long long)st.total.segment_allocs, (unsigned long long)st.total.retries, ooms,
         st.total.peak_reserved / (double)MiB, st.total.peak_allocated / (double)MiB);
  IL_CHECK_INT(st.total.ooms, ooms);
  IL_CHECK(st.total.segment_allocs > 10);
  IL_CHECK(st.total.peak_reserved <= cap);
  /* free everything: coalescing leaves exactly one free block per segment */
  while (m.n) il_caching_free(a, m.v[--m.n].b);
  il_caching_snapshot s;
  IL_CHECK_OK(il_caching_snapshot_take(a, &s));
  IL_CHECK(s.n_segments > 0);
  IL_CHECK_INT(s.n_blocks, s.n_segments);
  for (size_t i = 0; i < s.n_segments; i++) {
    IL_CHECK_INT(s.segments[i].n_blocks, 1);
    IL_CHECK(!s.blocks[s.segments[i].first_block].allocated);
  }
  IL_CHECK_INT(s.stats.total.allocated, 0);
  IL_CHECK_INT(s.stats.total.inactive_split, 0);
  IL_CHECK_INT(s.stats.free_bytes, s.stats.total.reserved);
  il_caching_snapshot_free(&s);
  check(a, &d, &m, cap, "all freed", steps);
  size_t released = il_caching_empty_cache(a);
  IL_CHECK(released > 0);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.reserved, 0);
  IL_CHECK_INT(d.live_bytes, 0);
  IL_CHECK_INT(st.total.segment_allocs, st.total.segment_frees);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
  free(m.v);
}

/* Eight 256 KiB blocks fill one 2 MiB small segment; freeing 0, 2, 4, 6 leaves 1 MiB free in
 * four 256 KiB holes (fragmentation 1 - 256/1024 = 0.75); freeing 1 joins 0-2 into one
 * 768 KiB hole (1 - 768/1280 = 0.4). */
static void test_fragmentation_pattern(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 0, false);
  il_caching_block *b[8];
  for (int i = 0; i < 8; i++) IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 256 * KiB, "kv", &b[i]));
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.n_segments, 1);
  IL_CHECK_INT(st.total.reserved, 2 * MiB);
  IL_CHECK_INT(st.free_bytes, 0);
  IL_CHECK_NEAR(st.fragmentation, 0.0, 0);
  uintptr_t base = (uintptr_t)il_caching_block_ptr(b[0]);
  for (int i = 0; i < 8; i++) IL_CHECK_INT((uintptr_t)il_caching_block_ptr(b[i]) - base, (size_t)i * 256 * KiB);
  for (int i = 0; i < 8; i += 2) il_caching_free(a, b[i]);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.free_bytes, MiB);
  IL_CHECK_INT(st.largest_free, 256 * KiB);
  IL_CHECK_NEAR(st.fragmentation, 0.75, 1e-12);
  IL_CHECK_INT(st.total.inactive_split, MiB);
  il_caching_free(a, b[1]);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.free_bytes, 1280 * KiB);
  IL_CHECK_INT(st.largest_free, 768 * KiB);
  IL_CHECK_NEAR(st.fragmentation, 0.4, 1e-12);
  /* best fit: 200 KiB goes to the first 256 KiB hole (offset 1 MiB), not the 768 KiB one */
  il_caching_block *x, *y;
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_ACTIVATIONS, 200 * KiB, "x", &x));
  IL_CHECK_INT((uintptr_t)il_caching_block_ptr(x) - base, MiB);
  IL_CHECK_INT(il_caching_block_size(x), 200 * KiB);
  /* 512 KiB goes to the 768 KiB hole at offset 0 */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_ACTIVATIONS, 512 * KiB, "y", &y));
  IL_CHECK_INT((uintptr_t)il_caching_block_ptr(y) - base, 0);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.n_segments, 1);
  IL_CHECK_INT(st.total.segment_allocs, 1);
  check(a, &d, NULL, 0, "pattern", 0);
  il_caching_free(a, x);
  il_caching_free(a, y);
  for (int i = 3; i < 8; i += 2) il_caching_free(a, b[i]);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.largest_free, 2 * MiB);
  IL_CHECK_NEAR(st.fragmentation, 0.0, 0);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

/* Rounding and the split rule of each pool. */
static void test_sizes_and_split(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 0, false);
  il_caching_block *t, *l, *h, *z;
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_OTHER, 0, NULL, &z));
  IL_CHECK_INT(il_caching_block_size(z), 512);
  IL_CHECK_INT(il_caching_block_requested(z), 1);
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_OTHER, 513, "t", &t));
  IL_CHECK_INT(il_caching_block_size(t), 1024);
  IL_CHECK_INT(d.live_bytes, 2 * MiB); /* one small segment for both */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WEIGHTS, 1536 * KiB, "l", &l));
  IL_CHECK_INT(d.live_bytes, 22 * MiB); /* a 1-10 MiB request takes a 20 MiB segment */
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.largest_free_pool[IL_CACHING_POOL_LARGE], 20 * MiB - 1536 * KiB);
  il_caching_free(a, l);
  /* 19 MiB (>= 10 MiB) would get a 20 MiB segment; the cached 20 MiB block fits, and the
   * 1 MiB rest is not split off in the large pool (not more than 1 MiB) */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WEIGHTS, 19 * MiB, "h", &h));
  IL_CHECK_INT(il_caching_block_size(h), 20 * MiB);
  IL_CHECK_INT(il_caching_block_requested(h), 19 * MiB);
  IL_CHECK_INT(d.live_bytes, 22 * MiB);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.allocated, 20 * MiB + 1024 + 512);
  IL_CHECK_INT(st.cat[IL_MEM_WEIGHTS].requested, 19 * MiB);
  IL_CHECK_INT(st.cat[IL_MEM_OTHER].reserved, 2 * MiB);
  IL_CHECK_INT(st.cat[IL_MEM_WEIGHTS].reserved, 20 * MiB);
  /* 25 MiB: a segment of the request rounded to 2 MiB */
  il_caching_block *g;
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 25 * MiB + 1, "g", &g));
  IL_CHECK_INT(d.live_bytes, 22 * MiB + 26 * MiB);
  IL_CHECK_INT(il_caching_block_size(g), 26 * MiB); /* rest 1 MiB - 512: not split off */
  IL_CHECK_INT(il_caching_block_requested(g), 25 * MiB + 1);
  check(a, &d, NULL, 0, "sizes", 0);
  il_caching_free(a, g);
  il_caching_free(a, h);
  il_caching_free(a, t);
  il_caching_free(a, z);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

/* Cap 4 MiB, eight 512 KiB blocks in two small segments, every other one freed: 2 MiB free
 * in 512 KiB pieces. 1 MiB fails by fragmentation; 3 MiB by capacity. */
static void test_oom_kinds(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 4 * MiB, false);
  il_caching_block *b[8], *x = NULL;
  for (int i = 0; i < 8; i++) IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 512 * KiB, "seq", &b[i]));
  IL_CHECK_INT(d.live_bytes, 4 * MiB);
  for (int i = 0; i < 8; i += 2) il_caching_free(a, b[i]);
  il_status st = il_caching_alloc(a, IL_MEM_ACTIVATIONS, MiB, "blk.0.ffn", &x);
  IL_CHECK_INT(st, IL_ERR_OOM);
  IL_CHECK(x == NULL);
  IL_CHECK_CONTAINS(il_error_detail(), "blk.0.ffn (activations) in fake (fragmentation)");
  il_caching_oom r;
  IL_CHECK(il_caching_last_oom(a, &r));
  IL_CHECK_INT(r.requested, MiB);
  IL_CHECK_INT(r.rounded, MiB);
  IL_CHECK_INT(r.cat, IL_MEM_ACTIVATIONS);
  IL_CHECK_STR(r.name, "blk.0.ffn");
  IL_CHECK_STR(r.space, "fake");
  IL_CHECK_INT(r.cause, IL_CACHING_OOM_CAP);
  IL_CHECK_INT(r.cap, 4 * MiB);
  IL_CHECK_INT(r.reserved, 4 * MiB);
  IL_CHECK_INT(r.allocated, 2 * MiB);
  IL_CHECK_INT(r.headroom, 0);
  IL_CHECK_INT(r.free, 2 * MiB);
  IL_CHECK_INT(r.largest_free, 512 * KiB);
  IL_CHECK(r.fragmentation);
  IL_CHECK(!r.retried);
  IL_CHECK_INT(r.segment, MiB);
  IL_CHECK_INT(r.stats.total.ooms, 1);
  IL_CHECK_INT(r.stats.cat[IL_MEM_ACTIVATIONS].ooms, 1);
  st = il_caching_alloc(a, IL_MEM_WEIGHTS, 3 * MiB, "blk.1.w", &x);
  IL_CHECK_INT(st, IL_ERR_OOM);
  IL_CHECK_CONTAINS(il_error_detail(), "(cap)");
  IL_CHECK(il_caching_last_oom(a, &r));
  IL_CHECK(!r.fragmentation);
  IL_CHECK_INT(r.free, 2 * MiB);
  IL_CHECK_INT(r.pool, IL_CACHING_POOL_LARGE);
  il_caching_stats s;
  il_caching_stats_get(a, &s);
  IL_CHECK_INT(s.total.ooms, 2);
  IL_CHECK_INT(s.total.retries, 0);
  check(a, &d, NULL, 4 * MiB, "oom", 0);
  for (int i = 1; i < 8; i += 2) il_caching_free(a, b[i]);
  /* everything cached: now the 3 MiB request frees both cached segments and retries */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WEIGHTS, 3 * MiB, "blk.1.w", &x));
  il_caching_stats_get(a, &s);
  IL_CHECK_INT(s.total.retries, 1);
  IL_CHECK_INT(s.cat[IL_MEM_WEIGHTS].retries, 1);
  IL_CHECK_INT(s.total.segment_frees, 2);
  IL_CHECK_INT(s.total.reserved, 3 * MiB); /* the 20 MiB segment does not fit the cap: exact size */
  check(a, &d, NULL, 4 * MiB, "retry", 0);
  il_caching_free(a, x);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

/* The device (not a cap) says no: cached segments are returned and the request retried. */
static void test_retry_device(void) {
  fake_dev d;
  dev_init(&d, 24 * MiB);
  il_caching *a = make(&d, 0, false);
  il_caching_block *p, *q, *r;
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 2 * MiB, "p", &p)); /* 20 MiB segment */
  il_caching_free(a, p);
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 12 * MiB, "q", &q)); /* fits in the cached 20 MiB */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 512 * KiB, "r", &r)); /* 2 MiB small segment */
  il_caching_free(a, q);
  il_caching_block *big;
  /* 22 MiB: the device has 2 MiB left; freeing the cached 20 MiB segment makes room */
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WEIGHTS, 22 * MiB, "big", &big));
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.retries, 1);
  IL_CHECK_INT(st.total.reserved, 24 * MiB);
  il_caching_block *more;
  IL_CHECK_INT(il_caching_alloc(a, IL_MEM_WEIGHTS, 4 * MiB, "more", &more), IL_ERR_OOM);
  il_caching_oom o;
  IL_CHECK(il_caching_last_oom(a, &o));
  IL_CHECK_INT(o.cause, IL_CACHING_OOM_DEVICE);
  IL_CHECK_INT(o.device_status, IL_ERR_OOM);
  IL_CHECK_STR(o.device_detail, "fake device: full");
  IL_CHECK_INT(o.segment, 4 * MiB); /* 20 MiB first, then the exact size */
  IL_CHECK(!o.retried);             /* nothing cached to free */
  IL_CHECK_CONTAINS(il_error_detail(), "device: fake device: full");
  check(a, &d, NULL, 0, "device", 0);
  il_caching_free(a, big);
  il_caching_free(a, r);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

static void test_empty_cache_peak_cap(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 0, false);
  il_caching_block *b[6];
  for (int i = 0; i < 6; i++) IL_CHECK_OK(il_caching_alloc(a, IL_MEM_STAGING, (size_t)(i + 1) * 3 * MiB, "s", &b[i]));
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  size_t peak = st.total.reserved;
  IL_CHECK_INT(st.total.peak_reserved, peak);
  il_caching_free(a, b[0]);
  il_caching_free(a, b[5]);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.reserved, peak); /* cached, not returned */
  size_t released = il_caching_empty_cache(a);
  il_caching_stats_get(a, &st);
  IL_CHECK(released > 0);
  IL_CHECK_INT(st.total.reserved, peak - released);
  IL_CHECK_INT(d.live_bytes, st.total.reserved);
  IL_CHECK_INT(st.total.peak_reserved, peak);
  il_caching_reset_peak(a);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.peak_reserved, st.total.reserved);
  IL_CHECK_INT(st.cat[IL_MEM_STAGING].peak_allocated, st.cat[IL_MEM_STAGING].allocated);
  /* lowering the cap below reserved releases cached segments, then refuses new ones */
  il_caching_free(a, b[1]);
  il_caching_set_cap(a, 1);
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.cap, 1);
  IL_CHECK_INT(st.free_bytes, st.total.reserved - st.total.allocated);
  il_caching_block *x;
  IL_CHECK_INT(il_caching_alloc(a, IL_MEM_STAGING, 30 * MiB, "x", &x), IL_ERR_OOM);
  il_caching_oom o;
  IL_CHECK(il_caching_last_oom(a, &o));
  IL_CHECK_INT(o.headroom, 0);
  check(a, &d, NULL, 0, "cap", 0);
  il_caching_set_cap(a, 0);
  for (int i = 2; i < 5; i++) il_caching_free(a, b[i]);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

static void test_no_cache(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 0, true);
  il_caching_block *b[4];
  for (int i = 0; i < 4; i++) IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 1000 + (size_t)i * MiB, "n", &b[i]));
  IL_CHECK_INT(d.n_live, 4);
  IL_CHECK_INT(d.live_bytes, 1024 + (MiB + 1024) + (2 * MiB + 1024) + (3 * MiB + 1024));
  il_caching_free(a, b[2]);
  IL_CHECK_INT(d.n_live, 3);
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.free_bytes, 0);
  IL_CHECK_INT(st.total.segment_frees, 1);
  check(a, &d, NULL, 0, "no-cache", 0);
  il_caching_free(a, b[0]);
  il_caching_free(a, b[1]);
  il_caching_free(a, b[3]);
  IL_CHECK_INT(d.n_live, 0);
  il_caching_destroy(a);
}

/* A fixed script of allocations and frees, with the device failing every call from the n-th
 * on: each failure is IL_ERR_OOM with cause "device", state stays consistent, nothing leaks. */
static void test_fault_injection(void) {
  static const size_t sizes[] = {100 * KiB, 3 * MiB, 700 * KiB, 15 * MiB, 2 * MiB, 40 * KiB, 33 * MiB, 1 * MiB};
  int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
  long calls = 0; /* device calls the script makes without faults: n = 0 measures them */
  for (long n = 0; n <= calls; n++) {
    fake_dev d;
    dev_init(&d, 0);
    d.fail_from = n;
    il_caching *a = make(&d, 0, false);
    il_caching_block *live[64];
    int nl = 0, fails = 0;
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < n_sizes; i++) {
        il_caching_block *b;
        il_status st = il_caching_alloc(a, (il_mem_category)(i % IL_MEM_CATEGORY_COUNT), sizes[i], "f", &b);
        if (st == IL_OK) {
          live[nl++] = b;
        } else {
          fails++;
          il_caching_oom o;
          IL_CHECK_INT(st, IL_ERR_OOM);
          IL_CHECK(il_caching_last_oom(a, &o) && o.cause == IL_CACHING_OOM_DEVICE);
        }
      }
      for (int i = 0; i < nl; i += 2) { /* free every other live block */
        il_caching_free(a, live[i]);
        live[i] = live[--nl];
      }
      check(a, &d, NULL, 0, "fault", n);
    }
    if (n == 0) calls = d.calls;
    IL_CHECK(n == 0 ? fails == 0 : fails > 0);
    il_caching_stats st;
    il_caching_stats_get(a, &st);
    IL_CHECK_INT(st.total.ooms, fails);
    while (nl) il_caching_free(a, live[--nl]);
    il_caching_destroy(a);
    IL_CHECK_INT(d.n_live, 0);
    IL_CHECK_INT(d.bad_frees, 0);
  }
  /* host metadata: the allocator itself, the block records and the segment records */
  for (long n = 1; n <= 5; n++) {
    fake_dev d;
    dev_init(&d, 0);
    il_caching_opts o = {.name = "fake", .seg_alloc = dev_alloc, .seg_free = dev_free, .ctx = &d};
    il_caching *a = NULL;
    il_mem_fail_after(n);
    il_status st = il_caching_new(&o, &a);
    il_caching_block *b = NULL, *c = NULL;
    if (st == IL_OK) st = il_caching_alloc(a, IL_MEM_KV, 4 * KiB, "h", &b);
    if (st == IL_OK) st = il_caching_alloc(a, IL_MEM_KV, 4 * MiB, "h2", &c);
    il_mem_fail_after(0);
    if (n <= 4) { /* allocator, block records, two segment records */
      IL_CHECK_INT(st, IL_ERR_OOM);
      if (a) {
        il_caching_oom r;
        IL_CHECK(il_caching_last_oom(a, &r) && r.cause == IL_CACHING_OOM_HOST);
      }
    } else {
      IL_CHECK_OK(st);
    }
    if (a) {
      check(a, &d, NULL, 0, "host fault", n);
      il_caching_free(a, b);
      il_caching_free(a, c);
      il_caching_destroy(a);
    }
    IL_CHECK_INT(d.n_live, 0);
  }
  il_caching *none = NULL;
  il_caching_opts bad = {.name = "x"};
  IL_CHECK_INT(il_caching_new(&bad, &none), IL_ERR_INVALID_ARG);
  IL_CHECK(none == NULL);
}

static const char *py_check =
    "import json, sys, xml.etree.ElementTree as ET\n"
    "kind, path, nseg, nblk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])\n"
    "if kind == 'json':\n"
    "    d = json.load(open(path, encoding='utf-8'))\n"
    "    segs = d['segments']\n"
    "    assert len(segs) == nseg, len(segs)\n"
    "    assert sum(len(s['blocks']) for s in segs) == nblk\n"
    "    for s in segs:\n"
    "        assert sum(b['size'] for b in s['blocks']) == s['size']\n"
    "    names = [b['name'] for s in segs for b in s['blocks'] if b['allocated']]\n"
    "    assert 'a<b>&\"c\\'' in names, names\n"
    "    t = d['stats']['total']\n"
    "    assert t['reserved'] == sum(s['size'] for s in segs)\n"
    "    assert 0 <= d['stats']['fragmentation'] < 1 and 'kv' in d['stats']['categories']\n"
    "else:\n"
    "    root = ET.parse(path).getroot()\n"
    "    ns = '{http://www.w3.org/2000/svg}'\n"
    "    assert root.tag == ns + 'svg', root.tag\n"
    "    rects = [r for r in root.iter(ns + 'rect') if r.find(ns + 'title') is not None]\n"
    "    assert len(rects) == nblk, (len(rects), nblk)\n"
    "    titles = ' '.join(r.find(ns + 'title').text for r in rects)\n"
    "    assert 'a<b>&\"c\\'' in titles and 'free' in titles\n"
    "print('OK')\n";

static void test_snapshot_files(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 64 * MiB, false);
  il_caching_block *b[6];
  const char *long_name = "blk.12.attn_output.weight.\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                          "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_KV, 300 * KiB, "a<b>&\"c'", &b[0]));
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WEIGHTS, 5 * MiB, long_name, &b[1]));
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_ACTIVATIONS, 100 * KiB, "act\n\ttab", &b[2]));
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_WORKSPACE, 12 * MiB, "ws", &b[3]));
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_STAGING, 700 * KiB, NULL, &b[4]));
  IL_CHECK_OK(il_caching_alloc(a, IL_MEM_OTHER, 2 * MiB, "other", &b[5]));
  il_caching_free(a, b[2]);
  il_caching_snapshot s;
  IL_CHECK_OK(il_caching_snapshot_take(a, &s));
  /* the long name is cut at a character boundary */
  size_t nl = 0;
  for (size_t i = 0; i < s.n_blocks; i++)
    if (s.blocks[i].allocated && s.blocks[i].cat == IL_MEM_WEIGHTS) nl = strlen(s.blocks[i].name);
  IL_CHECK(nl > 40 && nl < IL_CACHING_NAME_MAX);
  IL_CHECK((nl - strlen("blk.12.attn_output.weight.")) % 2 == 0);
  const char *dir = il_test_tmpdir();
  char jpath[512], spath[512], cmd[4096];
  snprintf(jpath, sizeof jpath, "%s/snap.json", dir);
  snprintf(spath, sizeof spath, "%s/map.svg", dir);
  FILE *f = fopen(jpath, "w");
  IL_CHECK(f != NULL);
  if (f) {
    IL_CHECK_OK(il_memmap_write_json(&s, f, true));
    fclose(f);
  }
  f = fopen(spath, "w");
  IL_CHECK(f != NULL);
  if (f) {
    IL_CHECK_OK(il_memmap_svg(&s, f, "map 1", 0));
    fclose(f);
  }
  if (system("python3 -c 'import json, xml.etree.ElementTree' 2>/dev/null") != 0) {
    printf("note: python3 not found; JSON and SVG not parsed\n");
  } else {
    char pypath[512], out[256];
    snprintf(pypath, sizeof pypath, "%s/check.py", dir);
    f = fopen(pypath, "w");
    if (f) {
      fputs(py_check, f);
      fclose(f);
    }
    snprintf(cmd, sizeof cmd, "python3 '%s' json '%s' %zu %zu 2>&1", pypath, jpath, s.n_segments, s.n_blocks);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK(strncmp(out, "OK", 2) == 0);
    if (strncmp(out, "OK", 2) != 0) fprintf(stderr, "json check: %s\n", out);
    snprintf(cmd, sizeof cmd, "python3 '%s' svg '%s' %zu %zu 2>&1", pypath, spath, s.n_segments, s.n_blocks);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK(strncmp(out, "OK", 2) == 0);
    if (strncmp(out, "OK", 2) != 0) fprintf(stderr, "svg check: %s\n", out);
    /* max_rows: one segment drawn, the rest announced */
    f = fopen(spath, "w");
    if (f) {
      IL_CHECK_OK(il_memmap_svg(&s, f, "m2", 1));
      fclose(f);
    }
    char *text = il_test_read_file(spath, NULL), want[64];
    snprintf(want, sizeof want, "... and %zu more segment", s.n_segments - 1);
    IL_CHECK(s.n_segments >= 2);
    IL_CHECK(text && strstr(text, want) != NULL);
    free(text);
    snprintf(cmd, sizeof cmd, "python3 -c \"import xml.etree.ElementTree as E; E.parse('%s'); print('OK')\"", spath);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    IL_CHECK_INT(system(cmd), 0);
  }
  il_caching_snapshot_free(&s);
  for (int i = 0; i < 6; i++)
    if (i != 2) il_caching_free(a, b[i]);
  /* an empty allocator still draws a valid map */
  IL_CHECK_INT(il_caching_empty_cache(a) > 0, 1);
  IL_CHECK_OK(il_caching_snapshot_take(a, &s));
  IL_CHECK_INT(s.n_segments, 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  IL_CHECK_OK(il_memmap_svg(&s, m, NULL, 0));
  fclose(m);
  IL_CHECK_CONTAINS(buf, "no segments reserved");
  free(buf);
  il_caching_snapshot_free(&s);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

typedef struct {
  il_caching *a;
  uint64_t seed;
  int errors;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *t = p;
  il_caching_block *live[32] = {0};
  for (int i = 0; i < 4000; i++) {
    int k = (int)(rng_next(&t->seed) % 32);
    if (live[k]) {
      il_caching_free(t->a, live[k]);
      live[k] = NULL;
    } else if (il_caching_alloc(t->a, IL_MEM_ACTIVATIONS, random_size(&t->seed), "thr", &live[k]) != IL_OK) {
      t->errors++;
    }
  }
  for (int k = 0; k < 32; k++) il_caching_free(t->a, live[k]);
  return NULL;
}

static void test_threads(void) {
  fake_dev d;
  dev_init(&d, 0);
  il_caching *a = make(&d, 0, false);
  pthread_t th[4];
  thread_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thread_arg){a, 0x1234567ULL * (uint64_t)(i + 1), 0};
    pthread_create(&th[i], NULL, thread_main, &args[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    IL_CHECK_INT(args[i].errors, 0);
  }
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  IL_CHECK_INT(st.total.allocated, 0);
  IL_CHECK_INT(st.total.n_blocks, 0);
  IL_CHECK_INT(st.total.n_allocs, st.total.n_frees);
  check(a, &d, NULL, 0, "threads", 0);
  il_caching_destroy(a);
  IL_CHECK_INT(d.n_live, 0);
}

int main(void) {
  test_fragmentation_pattern();
  test_sizes_and_split();
  test_oom_kinds();
  test_retry_device();
  test_empty_cache_peak_cap();
  test_no_cache();
  test_fault_injection();
  test_snapshot_files();
  test_threads();
  test_random_invariants();
  return il_test_finish();
}
