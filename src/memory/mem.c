/* memory/mem: counted host allocation and memory spaces. */
#include "memory/mem.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct il_mem_space {
  char name[32];
  _Atomic size_t current[IL_MEM_CATEGORY_COUNT];
  _Atomic size_t peak[IL_MEM_CATEGORY_COUNT];
  _Atomic size_t mapped[IL_MEM_CATEGORY_COUNT];
  _Atomic size_t total_current;
  _Atomic size_t total_peak;
  _Atomic size_t limit;
  _Atomic uint64_t n_allocs;
  _Atomic uint64_t n_failed;
};

static il_mem_space il__host = {.name = "host"};
static _Atomic long il__fail_countdown = 0;

/* Header in front of every host block; 64 bytes keeps the payload 64-byte aligned. */
typedef struct {
  size_t bytes;
  uint32_t cat;
  uint32_t magic;
  char pad[48];
} il__hdr;
static_assert(sizeof(il__hdr) == 64, "header keeps 64-byte alignment");
#define IL__MAGIC 0x4d454d31u

static const char *const il__cat_names[IL_MEM_CATEGORY_COUNT] = {
    "weights", "kv", "activations", "workspace", "staging", "model", "tokenizer", "scheduler", "server", "other"};

const char *il_mem_category_name(il_mem_category c) {
  return (unsigned)c < IL_MEM_CATEGORY_COUNT ? il__cat_names[c] : "?";
}

il_mem_space *il_mem_host(void) { return &il__host; }

const char *il_mem_format_bytes(size_t bytes, char *buf, size_t n) {
  double v = (double)bytes;
  if (bytes >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", v / (1ull << 30));
  else if (bytes >= (1ull << 20)) snprintf(buf, n, "%.1f MiB", v / (1ull << 20));
  else if (bytes >= (1ull << 10)) snprintf(buf, n, "%.1f KiB", v / (1ull << 10));
  else snprintf(buf, n, "%zu B", bytes);
  return buf;
}

static void il__update_peak(_Atomic size_t *peak, size_t value) {
  size_t old = atomic_load(peak);
  while (value > old && !atomic_compare_exchange_weak(peak, &old, value)) {
  }
}

static bool il__inject_failure(void) {
  long c = atomic_load(&il__fail_countdown);
  while (c > 0) {
    if (atomic_compare_exchange_weak(&il__fail_countdown, &c, c - 1)) return c == 1;
  }
  return false;
}

static _Thread_local il_mem_oom il__last_oom;
static _Thread_local bool il__have_oom;

void il_mem_record_oom(const il_mem_space *s, il_mem_category cat, size_t bytes, const char *what, const char *why,
                       size_t largest_free) {
  unsigned long serial = il__last_oom.serial + 1;
  memset(&il__last_oom, 0, sizeof il__last_oom);
  snprintf(il__last_oom.space, sizeof il__last_oom.space, "%s", s->name);
  il__last_oom.space_id = s;
  snprintf(il__last_oom.what, sizeof il__last_oom.what, "%s", what ? what : "buffer");
  snprintf(il__last_oom.why, sizeof il__last_oom.why, "%s", why);
  il__last_oom.cat = cat;
  il__last_oom.requested = bytes;
  il_mem_space_stats(s, &il__last_oom.stats);
  il__last_oom.largest_free = largest_free;
  il__last_oom.serial = serial;
  il__have_oom = true;
}

void il_mem_record_oom_device(size_t reserved, size_t largest_free, bool fragmentation) {
  il__last_oom.reserved = reserved;
  il__last_oom.largest_free = largest_free;
  il__last_oom.fragmentation = fragmentation;
}

bool il_mem_last_oom(il_mem_oom *out) {
  if (!il__have_oom) return false;
  *out = il__last_oom;
  return true;
}

/* `why` says which limit was hit: "malloc", "limit" (the space's budget) or "injected". */
static il_status il__oom(il_mem_space *s, il_mem_category cat, size_t bytes, const char *what,
                         const char *why) {
  char req[32], used[1024];
  atomic_fetch_add(&s->n_failed, 1);
  size_t limit = atomic_load(&s->limit), cur = atomic_load(&s->total_current);
  il_mem_record_oom(s, cat, bytes, what, why, limit > cur ? limit - cur : 0);
  il_mem_space_report(s, used, sizeof used);
  return il_error(IL_ERR_OOM, "cannot allocate %s for %s (%s) in %s (%s); in use:\n%s",
                  il_mem_format_bytes(bytes, req, sizeof req), what ? what : "buffer",
                  il_mem_category_name(cat), s->name, why, used);
}

il_status il_mem_space_reserve(il_mem_space *s, il_mem_category cat, size_t bytes, const char *what) {
  if ((unsigned)cat >= IL_MEM_CATEGORY_COUNT) cat = IL_MEM_OTHER;
  if (il__inject_failure()) return il__oom(s, cat, bytes, what, "injected");
  size_t limit = atomic_load(&s->limit);
  size_t total = atomic_fetch_add(&s->total_current, bytes) + bytes;
  if (limit && total > limit) {
    atomic_fetch_sub(&s->total_current, bytes);
    return il__oom(s, cat, bytes, what, "limit");
  }
  size_t cur = atomic_fetch_add(&s->current[cat], bytes) + bytes;
  il__update_peak(&s->peak[cat], cur);
  il__update_peak(&s->total_peak, total);
  atomic_fetch_add(&s->n_allocs, 1);
  return IL_OK;
}

void il_mem_space_release(il_mem_space *s, il_mem_category cat, size_t bytes) {
  if ((unsigned)cat >= IL_MEM_CATEGORY_COUNT) cat = IL_MEM_OTHER;
  atomic_fetch_sub(&s->current[cat], bytes);
  atomic_fetch_sub(&s->total_current, bytes);
}

il_mem_space *il_mem_space_new(const char *name, size_t limit) {
  il_mem_space *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  snprintf(s->name, sizeof s->name, "%s", name);
  atomic_store(&s->limit, limit);
  return s;
}

void il_mem_space_free(il_mem_space *s) {
  if (s && s != &il__host) free(s);
}

void il_mem_space_stats(const il_mem_space *s, il_mem_stats *out) {
  memset(out, 0, sizeof *out);
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
    out->current[c] = atomic_load(&s->current[c]);
    out->peak[c] = atomic_load(&s->peak[c]);
    out->mapped[c] = atomic_load(&s->mapped[c]);
  }
  out->total_current = atomic_load(&s->total_current);
  out->total_peak = atomic_load(&s->total_peak);
  out->limit = atomic_load(&s->limit);
  out->n_allocs = atomic_load(&s->n_allocs);
  out->n_failed = atomic_load(&s->n_failed);
}

const char *il_mem_space_name(const il_mem_space *s) { return s->name; }

void il_mem_space_set_limit(il_mem_space *s, size_t limit) { atomic_store(&s->limit, limit); }

void il_mem_space_reset_peak(il_mem_space *s) {
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) atomic_store(&s->peak[c], atomic_load(&s->current[c]));
  atomic_store(&s->total_peak, atomic_load(&s->total_current));
}

void il_mem_space_note_mapped(il_mem_space *s, il_mem_category cat, int64_t delta) {
  if ((unsigned)cat >= IL_MEM_CATEGORY_COUNT) cat = IL_MEM_OTHER;
  atomic_fetch_add(&s->mapped[cat], (size_t)delta);
}

void il_mem_space_report(const il_mem_space *s, char *buf, size_t n) {
  il_mem_stats st;
  il_mem_space_stats(s, &st);
  size_t off = 0;
  buf[0] = 0;
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT && off < n; c++) {
    if (!st.peak[c] && !st.mapped[c]) continue;
    char a[32], b[32], m[32];
    int w = snprintf(buf + off, n - off, "  %-12s %10s (peak %s)%s%s\n", il__cat_names[c],
                     il_mem_format_bytes(st.current[c], a, sizeof a),
                     il_mem_format_bytes(st.peak[c], b, sizeof b), st.mapped[c] ? ", mapped " : "",
                     st.mapped[c] ? il_mem_format_bytes(st.mapped[c], m, sizeof m) : "");
    if (w < 0) break;
    off += (size_t)w;
  }
  if (off < n) {
    char a[32], b[32], l[32];
    snprintf(buf + off, n - off, "  %-12s %10s (peak %s)%s%s\n", "total",
             il_mem_format_bytes(st.total_current, a, sizeof a),
             il_mem_format_bytes(st.total_peak, b, sizeof b), st.limit ? ", limit " : "",
             st.limit ? il_mem_format_bytes(st.limit, l, sizeof l) : "");
  }
}

void *il_mem_alloc(il_mem_category cat, size_t bytes, const char *what) {
  if (bytes > SIZE_MAX - 2 * sizeof(il__hdr)) {
    il__oom(&il__host, cat, bytes, what, "overflow");
    return NULL;
  }
  if (il_mem_space_reserve(&il__host, cat, bytes, what) != IL_OK) return NULL;
  size_t total = (sizeof(il__hdr) + bytes + 63) & ~(size_t)63;
  il__hdr *h = aligned_alloc(64, total);
  if (!h) {
    il_mem_space_release(&il__host, cat, bytes);
    il__oom(&il__host, cat, bytes, what, "malloc");
    return NULL;
  }
  h->bytes = bytes;
  h->cat = (uint32_t)cat;
  h->magic = IL__MAGIC;
  return h + 1;
}

void *il_mem_calloc(il_mem_category cat, size_t bytes, const char *what) {
  void *p = il_mem_alloc(cat, bytes, what);
  if (p) memset(p, 0, bytes);
  return p;
}

void il_mem_free(void *p) {
  if (!p) return;
  il__hdr *h = (il__hdr *)p - 1;
  IL_ASSERT(h->magic == IL__MAGIC);
  h->magic = 0;
  il_mem_space_release(&il__host, (il_mem_category)h->cat, h->bytes);
  free(h);
}

void il_mem_stats_get(il_mem_stats *out) { il_mem_space_stats(&il__host, out); }
void il_mem_reset_peak(void) { il_mem_space_reset_peak(&il__host); }
void il_mem_set_limit(size_t bytes) { il_mem_space_set_limit(&il__host, bytes); }
void il_mem_note_mapped(il_mem_category cat, int64_t delta) { il_mem_space_note_mapped(&il__host, cat, delta); }
void il_mem_fail_after(long n) { atomic_store(&il__fail_countdown, n > 0 ? n : 0); }
