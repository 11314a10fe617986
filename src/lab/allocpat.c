/* lab/allocpat: the fragmentation lesson's allocation pattern on a device. See allocpat.h. */
#include "lab/allocpat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/registry.h"
#include "memory/caching.h"
#include "lab/memmap.h"

#define IL__MIB ((size_t)1 << 20)
#define IL__N 10

bool il_allocpat_parse(const char *name, il_allocpat_kind *out) {
  if (!strcmp(name, "steady")) *out = IL_ALLOCPAT_STEADY;
  else if (!strcmp(name, "fragmenting")) *out = IL_ALLOCPAT_FRAGMENTING;
  else return false;
  return true;
}

const char *il_allocpat_name(il_allocpat_kind k) { return k == IL_ALLOCPAT_STEADY ? "steady" : "fragmenting"; }

void il_allocpat_result_free(il_allocpat_result *r) {
  free(r->svg); /* from open_memstream */
  r->svg = NULL;
}

il_status il_allocpat_run(const char *device, size_t mem_limit, il_allocpat_kind k, il_allocpat_result *r) {
  memset(r, 0, sizeof *r);
  il_backend_opts bo = {0};
  bo.mem_limit = mem_limit;
  il_backend *b = NULL;
  IL_TRY(il_backend_open(device, &bo, &b));
  il_status st = IL_OK;
  if (!b->ops->allocator_stats || !b->ops->allocator_snapshot) {
    b->ops->destroy(b);
    return il_error(IL_ERR_UNSUPPORTED, "%s has no caching allocator to fragment (use a sim or cuda device)", device);
  }
  size_t free_b = 0, total = 0;
  b->ops->memory(b, &free_b, &total);
  r->capacity = mem_limit && mem_limit < free_b ? mem_limit : free_b;
  r->block = 2 * IL__MIB;
  r->n_blocks = IL__N;
  if (r->capacity < 28 * IL__MIB) {
    b->ops->destroy(b);
    return il_error(IL_ERR_RANGE, "%s: %zu MiB free, the pattern needs at least 28 MiB", device, r->capacity / IL__MIB);
  }
  il_buffer *bufs[IL__N] = {0};
  for (int i = 0; i < IL__N && st == IL_OK; i++) {
    char what[32];
    snprintf(what, sizeof what, "sequence %d kv", i);
    st = b->ops->buffer_alloc(b, IL_MEM_KV, r->block, what, &bufs[i]);
  }
  if (st == IL_OK) {
    for (int i = 0; i < IL__N; i++)
      if (k == IL_ALLOCPAT_STEADY || i % 2 == 0) {
        b->ops->buffer_free(b, bufs[i]);
        bufs[i] = NULL;
        r->n_freed++;
      }
    il_caching_stats s;
    b->ops->allocator_stats(b, &s);
    r->reserved = s.total.reserved;
    r->allocated = s.total.allocated;
    r->free_bytes = s.free_bytes;
    r->largest_free = s.largest_free;
    r->fragmentation = s.fragmentation;
    r->segments = s.total.n_segments;
    il_caching_snapshot snap;
    if (b->ops->allocator_snapshot(b, &snap) == IL_OK) {
      size_t len = 0;
      FILE *mf = open_memstream(&r->svg, &len);
      if (mf) {
        if (il_memmap_svg(&snap, mf, k == IL_ALLOCPAT_STEADY ? "map-steady" : "map-fragmenting", 0) != IL_OK)
          il_error_clear();
        fclose(mf);
      }
      il_caching_snapshot_free(&snap);
    }
    /* the long sequence: just more than the room outside the first segment */
    size_t outside = r->capacity > r->reserved ? r->capacity - r->reserved : 0;
    r->big = (outside + 2 * IL__MIB + IL__MIB - 1) / (2 * IL__MIB) * (2 * IL__MIB);
    if (r->big < 10 * IL__MIB) r->big = 10 * IL__MIB;
    il_buffer *big = NULL;
    il_status bst = b->ops->buffer_alloc(b, IL_MEM_KV, r->big, "long sequence kv", &big);
    r->big_ok = bst == IL_OK;
    if (!r->big_ok) {
      snprintf(r->big_error, sizeof r->big_error, "%s", il_error_detail());
      il_caching_stats s2;
      b->ops->allocator_stats(b, &s2);
      r->big_fragmentation = bst == IL_ERR_OOM && s2.free_bytes + (r->capacity - s2.total.reserved) >= r->big &&
                             strstr(r->big_error, "fragmentation") != NULL;
      il_error_clear();
    }
    b->ops->buffer_free(b, big);
  }
  for (int i = 0; i < IL__N; i++) b->ops->buffer_free(b, bufs[i]);
  b->ops->destroy(b);
  if (st != IL_OK) il_allocpat_result_free(r);
  return st;
}
