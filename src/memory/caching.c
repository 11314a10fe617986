/* memory/caching: the caching allocator (see caching.h for the policy).
 *
 * Data structures, all host-side:
 *   - a segment record per device segment, in a list in creation order; its blocks form a
 *     doubly linked list by address (prev/next), which is what splitting and coalescing walk;
 *   - per pool, a treap (a binary search tree with random heap priorities, so its expected
 *     depth is O(log n)) of the free blocks keyed by (size, segment id, offset): best fit is
 *     the leftmost node with size >= the request, the largest free block the rightmost node;
 *   - block records come from chunks of 256 and are recycled through a spare list, so the
 *     hot path (a cached hit) allocates nothing from the host.
 * Counters are updated on every change, so stats are O(log n) to read (two tree maxima).
 */
#include "memory/caching.h"

#include <pthread.h>
#include <string.h>

struct il_caching_block {
  struct il__seg *seg;
  uint64_t seg_id;       /* seg->id, kept here so tree comparisons touch one record */
  size_t off, size;      /* bytes, in the segment */
  size_t requested;      /* what the caller asked for; 0 while free */
  il_caching_block *prev, *next; /* address neighbours in the segment; next links spares */
  il_caching_block *left, *right; /* free tree */
  uint32_t prio;
  bool allocated;
  uint8_t cat;
  char name[IL_CACHING_NAME_MAX];
};

typedef struct il__seg {
  void *base;
  size_t size;
  uint64_t id;
  il_caching_pool pool;
  il_mem_category cat;
  il_caching_block *first;
  size_t n_blocks;   /* blocks in the segment, free or not */
  size_t free_bytes; /* bytes in its free blocks */
  struct il__seg *prev, *next;
} il__seg;

#define IL__CHUNK 256
typedef struct il__chunk {
  struct il__chunk *next;
  il_caching_block blocks[IL__CHUNK];
} il__chunk;

struct il_caching {
  pthread_mutex_t mu;
  char name[32];
  il_caching_opts o;
  size_t cap;
  il__seg *seg_head, *seg_tail;
  uint64_t next_seg_id;
  il_caching_block *tree[IL_CACHING_POOL_COUNT];
  il_caching_block *spare;
  size_t n_spare;
  il__chunk *chunks;
  uint32_t rng;
  il_caching_counts total, cat[IL_MEM_CATEGORY_COUNT];
  bool has_oom;
  il_caching_oom last_oom;
};

static const char *const il__pool_names[IL_CACHING_POOL_COUNT] = {"small", "large"};
static const char *const il__cause_names[] = {"cap", "device", "host"};

/* ---- the free tree (treap) ------------------------------------------------------------ */

static bool il__key_less(const il_caching_block *x, const il_caching_block *y) {
  if (x->size != y->size) return x->size < y->size;
  if (x->seg_id != y->seg_id) return x->seg_id < y->seg_id;
  return x->off < y->off;
}

/* Splits t into keys < k (l) and keys >= k (r). */
static void il__split(il_caching_block *t, const il_caching_block *k, il_caching_block **l, il_caching_block **r) {
  if (!t) {
    *l = *r = NULL;
  } else if (il__key_less(t, k)) {
    il__split(t->right, k, &t->right, r);
    *l = t;
  } else {
    il__split(t->left, k, l, &t->left);
    *r = t;
  }
}

/* Joins two treaps where every key of l is below every key of r. */
static il_caching_block *il__merge(il_caching_block *l, il_caching_block *r) {
  if (!l) return r;
  if (!r) return l;
  if (l->prio > r->prio) {
    l->right = il__merge(l->right, r);
    return l;
  }
  r->left = il__merge(l, r->left);
  return r;
}

static void il__tree_insert(il_caching *a, il_caching_block *b) {
  il_caching_block **root = &a->tree[b->seg->pool], *l, *r;
  a->rng ^= a->rng << 13; /* xorshift32: deterministic, so runs are repeatable */
  a->rng ^= a->rng >> 17;
  a->rng ^= a->rng << 5;
  b->prio = a->rng;
  b->left = b->right = NULL;
  il__split(*root, b, &l, &r);
  *root = il__merge(il__merge(l, b), r);
}

static void il__tree_remove(il_caching *a, il_caching_block *b) {
  il_caching_block **p = &a->tree[b->seg->pool];
  while (*p != b) {
    IL_ASSERT(*p != NULL); /* a free block is always in its pool's tree */
    p = il__key_less(b, *p) ? &(*p)->left : &(*p)->right;
  }
  *p = il__merge(b->left, b->right);
  b->left = b->right = NULL;
}

/* Best fit: the smallest free block of at least `size` (ties: oldest segment, lowest offset). */
static il_caching_block *il__tree_lower_bound(il_caching_block *t, size_t size) {
  il_caching_block *best = NULL;
  while (t) {
    if (t->size >= size) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

static size_t il__tree_max(const il_caching_block *t) {
  if (!t) return 0;
  while (t->right) t = t->right;
  return t->size;
}

/* ---- block records ---------------------------------------------------------------------- */

/* Makes sure at least n records are spare (a request needs one for a new segment and one for
 * a split remainder). IL_ERR_OOM when the host is out of memory. */
static il_status il__reserve_records(il_caching *a, size_t n) {
  while (a->n_spare < n) {
    il__chunk *c = il_mem_alloc(IL_MEM_OTHER, sizeof *c, "caching allocator block records");
    if (!c) return IL_ERR_OOM;
    c->next = a->chunks;
    a->chunks = c;
    for (int i = 0; i < IL__CHUNK; i++) {
      c->blocks[i].next = a->spare;
      a->spare = &c->blocks[i];
    }
    a->n_spare += IL__CHUNK;
  }
  return IL_OK;
}

static il_caching_block *il__record_get(il_caching *a) {
  il_caching_block *b = a->spare;
  IL_ASSERT(b != NULL); /* il__reserve_records ran first */
  a->spare = b->next;
  a->n_spare--;
  memset(b, 0, sizeof *b);
  return b;
}

static void il__record_put(il_caching *a, il_caching_block *b) {
  b->next = a->spare;
  a->spare = b;
  a->n_spare++;
}

/* ---- counters ------------------------------------------------------------------------- */

static size_t il__seg_inactive(const il__seg *s) { return s->n_blocks > 1 ? s->free_bytes : 0; }

/* Before a segment's blocks change its inactive-split share is taken out, after it is put
 * back, so the counter stays exact without a scan. */
static void il__inactive_sub(il_caching *a, const il__seg *s) {
  size_t v = il__seg_inactive(s);
  a->total.inactive_split -= v;
  a->cat[s->cat].inactive_split -= v;
}
static void il__inactive_add(il_caching *a, const il__seg *s) {
  size_t v = il__seg_inactive(s);
  a->total.inactive_split += v;
  a->cat[s->cat].inactive_split += v;
}

static void il__peak(il_caching_counts *c) {
  if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
  if (c->allocated > c->peak_allocated) c->peak_allocated = c->allocated;
}

static void il__count_segment(il_caching *a, const il__seg *s, bool add) {
  il_caching_counts *cs[2] = {&a->total, &a->cat[s->cat]};
  for (int i = 0; i < 2; i++) {
    if (add) {
      cs[i]->reserved += s->size;
      cs[i]->n_segments++;
      cs[i]->segment_allocs++;
      il__peak(cs[i]);
    } else {
      cs[i]->reserved -= s->size;
      cs[i]->n_segments--;
      cs[i]->segment_frees++;
    }
  }
}

static void il__count_block(il_caching *a, const il_caching_block *b, bool add) {
  il_caching_counts *cs[2] = {&a->total, &a->cat[b->cat]};
  for (int i = 0; i < 2; i++) {
    if (add) {
      cs[i]->allocated += b->size;
      cs[i]->active += b->size;
      cs[i]->requested += b->requested;
      cs[i]->n_blocks++;
      cs[i]->n_allocs++;
      il__peak(cs[i]);
    } else {
      cs[i]->allocated -= b->size;
      cs[i]->active -= b->size;
      cs[i]->requested -= b->requested;
      cs[i]->n_blocks--;
      cs[i]->n_frees++;
    }
  }
}

static void il__stats_locked(il_caching *a, il_caching_stats *out) {
  out->total = a->total;
  memcpy(out->cat, a->cat, sizeof out->cat);
  out->cap = a->cap;
  out->free_bytes = a->total.reserved - a->total.allocated;
  out->largest_free = 0;
  for (int p = 0; p < IL_CACHING_POOL_COUNT; p++) {
    out->largest_free_pool[p] = il__tree_max(a->tree[p]);
    if (out->largest_free_pool[p] > out->largest_free) out->largest_free = out->largest_free_pool[p];
  }
  out->fragmentation = out->free_bytes ? 1.0 - (double)out->largest_free / (double)out->free_bytes : 0.0;
}

/* ---- segments ------------------------------------------------------------------------- */

/* The segment a request of `rounded` bytes asks for first (PyTorch's sizes). */
static size_t il__segment_size(size_t rounded) {
  if (rounded <= IL_CACHING_SMALL_MAX) return IL_CACHING_SMALL_SEGMENT;
  if (rounded < IL_CACHING_MIN_LARGE_ALLOC) return IL_CACHING_LARGE_SEGMENT;
  return (rounded + IL_CACHING_ROUND_LARGE - 1) / IL_CACHING_ROUND_LARGE * IL_CACHING_ROUND_LARGE;
}

/* Why the last segment attempt failed, for the OOM report. */
typedef struct {
  il_caching_oom_cause cause;
  size_t segment;
  il_status device_status;
  char device_detail[256];
} il__seg_fail;

/* Gets a new segment for a request of `rounded` bytes: the preferred size, then (if smaller)
 * exactly `rounded`. On success the segment is linked at the tail with one free block that
 * is in no tree; the caller takes it. IL_ERR_OOM with *why filled otherwise. Needs one spare
 * record. */
static il_status il__segment_new(il_caching *a, il_caching_pool pool, il_mem_category cat, size_t rounded,
                                 il__seg **out, il__seg_fail *why) {
  size_t sizes[2] = {a->o.no_cache ? rounded : il__segment_size(rounded), rounded};
  int n = sizes[1] < sizes[0] ? 2 : 1;
  for (int i = 0; i < n; i++) {
    size_t sz = sizes[i];
    why->segment = sz;
    if (a->cap && (a->total.reserved > a->cap || sz > a->cap - a->total.reserved)) {
      why->cause = IL_CACHING_OOM_CAP;
      continue;
    }
    il__seg *s = il_mem_alloc(IL_MEM_OTHER, sizeof *s, "caching allocator segment record");
    if (!s) {
      why->cause = IL_CACHING_OOM_HOST;
      return IL_ERR_OOM;
    }
    void *base = NULL;
    il_status st = a->o.seg_alloc(a->o.ctx, sz, &base);
    if (st != IL_OK) {
      why->cause = IL_CACHING_OOM_DEVICE;
      why->device_status = st;
      snprintf(why->device_detail, sizeof why->device_detail, "%s", il_error_detail());
      il_mem_free(s);
      continue;
    }
    memset(s, 0, sizeof *s);
    s->base = base;
    s->size = sz;
    s->id = ++a->next_seg_id;
    s->pool = pool;
    s->cat = cat;
    s->prev = a->seg_tail;
    if (a->seg_tail) a->seg_tail->next = s;
    else a->seg_head = s;
    a->seg_tail = s;
    il_caching_block *b = il__record_get(a);
    b->seg = s;
    b->seg_id = s->id;
    b->size = sz;
    s->first = b;
    s->n_blocks = 1;
    s->free_bytes = sz;
    il__count_segment(a, s, true);
    *out = s;
    return IL_OK;
  }
  return IL_ERR_OOM;
}

/* Returns a fully free segment (its one block must already be out of the tree). */
static void il__segment_release(il_caching *a, il__seg *s) {
  il__count_segment(a, s, false);
  if (s->prev) s->prev->next = s->next;
  else a->seg_head = s->next;
  if (s->next) s->next->prev = s->prev;
  else a->seg_tail = s->prev;
  a->o.seg_free(a->o.ctx, s->base, s->size);
  il__record_put(a, s->first);
  il_mem_free(s);
}

static size_t il__release_free_segments(il_caching *a) {
  size_t bytes = 0;
  for (il__seg *s = a->seg_head, *next; s; s = next) {
    next = s->next;
    if (s->n_blocks == 1 && !s->first->allocated) {
      il__tree_remove(a, s->first);
      bytes += s->size;
      il__segment_release(a, s);
    }
  }
  return bytes;
}

/* ---- public API ----------------------------------------------------------------------- */

il_status il_caching_new(const il_caching_opts *opts, il_caching **out) {
  *out = NULL;
  if (!opts || !opts->seg_alloc || !opts->seg_free)
    return il_error(IL_ERR_INVALID_ARG, "caching allocator %s: seg_alloc and seg_free are required",
                    opts && opts->name ? opts->name : "(unnamed)");
  il_caching *a = il_mem_calloc(IL_MEM_OTHER, sizeof *a, "caching allocator");
  if (!a) return IL_ERR_OOM;
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    il_mem_free(a);
    return il_error(IL_ERR_INTERNAL, "caching allocator: pthread_mutex_init failed");
  }
  a->o = *opts;
  snprintf(a->name, sizeof a->name, "%s", opts->name ? opts->name : "device");
  a->o.name = a->name;
  a->cap = opts->cap;
  a->rng = 0x9e3779b9u;
  *out = a;
  return IL_OK;
}

void il_caching_destroy(il_caching *a) {
  if (!a) return;
  for (il__seg *s = a->seg_head, *next; s; s = next) {
    next = s->next;
    a->o.seg_free(a->o.ctx, s->base, s->size);
    il_mem_free(s);
  }
  for (il__chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    il_mem_free(c);
  }
  pthread_mutex_destroy(&a->mu);
  il_mem_free(a);
}

/* Copies a name, cutting at a UTF-8 character boundary so a truncated name stays valid text
 * in JSON and XML. */
static void il__copy_name(char *dst, const char *src) {
  if (!src) {
    dst[0] = 0;
    return;
  }
  size_t n = strnlen(src, IL_CACHING_NAME_MAX);
  if (n == IL_CACHING_NAME_MAX) {
    n = IL_CACHING_NAME_MAX - 1;
    while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
  }
  memcpy(dst, src, n);
  dst[n] = 0;
}

static il_status il__oom(il_caching *a, il_mem_category cat, size_t bytes, size_t rounded, const char *name,
                         il_caching_pool pool, const il__seg_fail *why, bool retried) {
  a->total.ooms++;
  a->cat[cat].ooms++;
  il_caching_oom *r = &a->last_oom;
  memset(r, 0, sizeof *r);
  a->has_oom = true;
  snprintf(r->space, sizeof r->space, "%s", a->name);
  r->requested = bytes;
  r->rounded = rounded;
  r->segment = why->segment;
  r->cat = cat;
  il__copy_name(r->name, name);
  r->pool = pool;
  r->cause = why->cause;
  r->device_status = why->cause == IL_CACHING_OOM_DEVICE ? why->device_status : IL_OK;
  if (why->cause == IL_CACHING_OOM_DEVICE) snprintf(r->device_detail, sizeof r->device_detail, "%s", why->device_detail);
  r->cap = a->cap;
  r->reserved = a->total.reserved;
  r->allocated = a->total.allocated;
  r->headroom = a->cap && a->cap > r->reserved ? a->cap - r->reserved : 0;
  r->free = r->headroom + (r->reserved - r->allocated);
  size_t cached = il__tree_max(a->tree[pool]);
  r->largest_free = cached > r->headroom ? cached : r->headroom;
  r->fragmentation = r->free >= rounded && r->largest_free < rounded;
  r->retried = retried;
  il__stats_locked(a, &r->stats);

  char req[32], res[32], capb[32], al[32], fr[32], lf[32];
  il_mem_format_bytes(bytes, req, sizeof req);
  il_mem_format_bytes(r->reserved, res, sizeof res);
  il_mem_format_bytes(r->cap, capb, sizeof capb);
  il_mem_format_bytes(r->allocated, al, sizeof al);
  il_mem_format_bytes(r->free, fr, sizeof fr);
  il_mem_format_bytes(r->largest_free, lf, sizeof lf);
  return il_error(IL_ERR_OOM,
                  "cannot allocate %s for %s (%s) in %s (%s): reserved %s%s%s, allocated %s, free %s, "
                  "largest free block %s%s%s",
                  req, r->name[0] ? r->name : "buffer", il_mem_category_name(cat), a->name,
                  r->fragmentation ? "fragmentation" : il__cause_names[r->cause], res, r->cap ? " of cap " : "",
                  r->cap ? capb : "", al, fr, lf, r->device_detail[0] ? "; device: " : "", r->device_detail);
}

il_status il_caching_alloc(il_caching *a, il_mem_category cat, size_t bytes, const char *name,
                           il_caching_block **out) {
  *out = NULL;
  if ((unsigned)cat >= IL_MEM_CATEGORY_COUNT) cat = IL_MEM_OTHER;
  if (bytes == 0) bytes = 1;
  pthread_mutex_lock(&a->mu);
  il__seg_fail why = {.cause = IL_CACHING_OOM_HOST};
  bool retried = false;
  size_t rounded;
  il_caching_pool pool;
  if (bytes > SIZE_MAX / 2) { /* no segment size computation may overflow below */
    rounded = bytes;
    pool = IL_CACHING_POOL_LARGE;
    why.cause = a->cap ? IL_CACHING_OOM_CAP : IL_CACHING_OOM_DEVICE;
    why.segment = bytes;
    why.device_status = IL_ERR_OOM;
    snprintf(why.device_detail, sizeof why.device_detail, "request larger than half the address space");
    il_status st = il__oom(a, cat, bytes, rounded, name, pool, &why, false);
    pthread_mutex_unlock(&a->mu);
    return st;
  }
  rounded = (bytes + IL_CACHING_ROUND - 1) / IL_CACHING_ROUND * IL_CACHING_ROUND;
  pool = rounded <= IL_CACHING_SMALL_MAX ? IL_CACHING_POOL_SMALL : IL_CACHING_POOL_LARGE;
  if (il__reserve_records(a, 2) != IL_OK) {
    why.segment = rounded;
    il_status st = il__oom(a, cat, bytes, rounded, name, pool, &why, false);
    pthread_mutex_unlock(&a->mu);
    return st;
  }

  il_caching_block *b = a->o.no_cache ? NULL : il__tree_lower_bound(a->tree[pool], rounded);
  il__seg *s;
  if (b) {
    il__tree_remove(a, b);
    s = b->seg;
  } else {
    il_status st = il__segment_new(a, pool, cat, rounded, &s, &why);
    if (st != IL_OK && why.cause != IL_CACHING_OOM_HOST && il__release_free_segments(a) > 0) {
      retried = true;
      a->total.retries++;
      a->cat[cat].retries++;
      st = il__segment_new(a, pool, cat, rounded, &s, &why);
    }
    if (st != IL_OK) {
      st = il__oom(a, cat, bytes, rounded, name, pool, &why, retried);
      pthread_mutex_unlock(&a->mu);
      return st;
    }
    b = s->first;
  }

  il__inactive_sub(a, s);
  size_t rest = b->size - rounded;
  if (pool == IL_CACHING_POOL_SMALL ? rest >= IL_CACHING_ROUND : rest > IL_CACHING_SMALL_MAX) {
    il_caching_block *r = il__record_get(a);
    r->seg = s;
    r->seg_id = s->id;
    r->off = b->off + rounded;
    r->size = rest;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    s->n_blocks++;
    il__tree_insert(a, r);
  }
  b->allocated = true;
  b->requested = bytes;
  b->cat = (uint8_t)cat;
  il__copy_name(b->name, name);
  s->free_bytes -= b->size;
  il__inactive_add(a, s);
  il__count_block(a, b, true);
  pthread_mutex_unlock(&a->mu);
  *out = b;
  return IL_OK;
}

void il_caching_free(il_caching *a, il_caching_block *b) {
  if (!b) return;
  pthread_mutex_lock(&a->mu);
  IL_ASSERT(b->allocated); /* a block freed twice */
  il__seg *s = b->seg;
  il__count_block(a, b, false);
  il__inactive_sub(a, s);
  b->allocated = false;
  b->requested = 0;
  b->name[0] = 0;
  s->free_bytes += b->size;
  il_caching_block *p = b->prev, *n = b->next;
  if (p && !p->allocated) { /* merge into the free block before */
    il__tree_remove(a, p);
    p->size += b->size;
    p->next = n;
    if (n) n->prev = p;
    il__record_put(a, b);
    s->n_blocks--;
    b = p;
  }
  if (n && !n->allocated) { /* absorb the free block after */
    il__tree_remove(a, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    il__record_put(a, n);
    s->n_blocks--;
  }
  if (a->o.no_cache && s->n_blocks == 1) {
    il__segment_release(a, s); /* its inactive share is 0: one block */
  } else {
    il__tree_insert(a, b);
    il__inactive_add(a, s);
  }
  pthread_mutex_unlock(&a->mu);
}

void *il_caching_block_ptr(const il_caching_block *b) { return (char *)b->seg->base + b->off; }
size_t il_caching_block_size(const il_caching_block *b) { return b->size; }
size_t il_caching_block_requested(const il_caching_block *b) { return b->requested; }

size_t il_caching_empty_cache(il_caching *a) {
  pthread_mutex_lock(&a->mu);
  size_t n = il__release_free_segments(a);
  pthread_mutex_unlock(&a->mu);
  return n;
}

void il_caching_set_cap(il_caching *a, size_t cap) {
  pthread_mutex_lock(&a->mu);
  a->cap = cap;
  if (cap && a->total.reserved > cap) il__release_free_segments(a);
  pthread_mutex_unlock(&a->mu);
}

void il_caching_stats_get(il_caching *a, il_caching_stats *out) {
  pthread_mutex_lock(&a->mu);
  il__stats_locked(a, out);
  pthread_mutex_unlock(&a->mu);
}

void il_caching_reset_peak(il_caching *a) {
  pthread_mutex_lock(&a->mu);
  il_caching_counts *cs[1 + IL_MEM_CATEGORY_COUNT] = {&a->total};
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) cs[1 + c] = &a->cat[c];
  for (int i = 0; i < 1 + IL_MEM_CATEGORY_COUNT; i++) {
    cs[i]->peak_reserved = cs[i]->reserved;
    cs[i]->peak_allocated = cs[i]->allocated;
  }
  pthread_mutex_unlock(&a->mu);
}

bool il_caching_last_oom(il_caching *a, il_caching_oom *out) {
  pthread_mutex_lock(&a->mu);
  bool has = a->has_oom;
  if (has) *out = a->last_oom;
  pthread_mutex_unlock(&a->mu);
  return has;
}

const char *il_caching_name(const il_caching *a) { return a->name; }
const char *il_caching_pool_name(il_caching_pool p) { return p < IL_CACHING_POOL_COUNT ? il__pool_names[p] : "?"; }

/* ---- snapshot ------------------------------------------------------------------------- */

il_status il_caching_snapshot_take(il_caching *a, il_caching_snapshot *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&a->mu);
  size_t ns = 0, nb = 0;
  for (il__seg *s = a->seg_head; s; s = s->next) {
    ns++;
    nb += s->n_blocks;
  }
  snprintf(out->space, sizeof out->space, "%s", a->name);
  out->segments = il_mem_alloc(IL_MEM_OTHER, (ns ? ns : 1) * sizeof *out->segments, "memory snapshot segments");
  out->blocks = il_mem_alloc(IL_MEM_OTHER, (nb ? nb : 1) * sizeof *out->blocks, "memory snapshot blocks");
  if (!out->segments || !out->blocks) {
    pthread_mutex_unlock(&a->mu);
    il_caching_snapshot_free(out);
    return IL_ERR_OOM;
  }
  size_t i = 0, j = 0;
  for (il__seg *s = a->seg_head; s; s = s->next, i++) {
    il_caching_snap_segment *g = &out->segments[i];
    g->id = s->id;
    g->base = (uintptr_t)s->base;
    g->size = s->size;
    g->pool = s->pool;
    g->cat = s->cat;
    g->first_block = j;
    for (il_caching_block *b = s->first; b; b = b->next, j++) {
      il_caching_snap_block *k = &out->blocks[j];
      k->offset = b->off;
      k->size = b->size;
      k->requested = b->requested;
      k->allocated = b->allocated;
      k->cat = (il_mem_category)b->cat;
      memcpy(k->name, b->name, sizeof k->name);
    }
    g->n_blocks = j - g->first_block;
  }
  out->n_segments = ns;
  out->n_blocks = nb;
  il__stats_locked(a, &out->stats);
  pthread_mutex_unlock(&a->mu);
  return IL_OK;
}

void il_caching_snapshot_free(il_caching_snapshot *s) {
  il_mem_free(s->segments);
  il_mem_free(s->blocks);
  memset(s, 0, sizeof *s);
}
