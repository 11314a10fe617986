/* lab/allocpat: an allocation pattern run on a device's caching allocator, for the VRAM
 * fragmentation lesson of `inferlab learn`.
 *
 * The story is a server's KV buffers: ten sequences are admitted, each with a KV buffer of
 * 2 MiB (category kv), which fill one 20 MiB segment of the large pool back to back. Then
 *   steady       all ten finish, so the segment is one free block again;
 *   fragmenting  every other one finishes (0, 2, 4, 6, 8), so five 2 MiB holes sit between
 *                the five buffers still in use.
 * Then one long sequence asks for one buffer of `big` bytes: the device's free room outside
 * the segment plus 2 MiB (at least 10 MiB, so it takes a segment of its own size). After the
 * steady pattern it fits in the cached free segment; after the fragmenting one the free bytes
 * (the holes plus the room outside) are more than it asks for, but no single piece is large
 * enough, so it fails with out of memory caused by fragmentation (the allocator's own
 * report says so). The figures are the allocator's (memory/caching): fragmentation = 1 -
 * largest free block / free bytes, taken before the long request.
 * The device is opened through backend/registry with a cap (mem_limit, 0 = its size); it must
 * hold at least 28 MiB so the pattern fits.
 * Not for: the engine's own allocations (lab/bench measures those).
 */
#ifndef IL_LAB_ALLOCPAT_H
#define IL_LAB_ALLOCPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum { IL_ALLOCPAT_STEADY, IL_ALLOCPAT_FRAGMENTING } il_allocpat_kind;

typedef struct {
  size_t capacity;       /* bytes the allocator may reserve (the cap, or the device's size) */
  size_t block;          /* one sequence's KV buffer */
  int n_blocks, n_freed; /* admitted, finished before the long request */
  /* before the long request */
  size_t reserved, allocated, free_bytes, largest_free;
  double fragmentation;
  uint64_t segments;
  /* the long request */
  size_t big;
  bool big_ok;
  bool big_fragmentation; /* it failed although enough bytes were free: the allocator's verdict */
  char big_error[512];    /* the allocator's message when it failed */
  char *svg;              /* the memory map before the long request (owned; free with free()), or NULL */
} il_allocpat_result;

/* Parses "steady" / "fragmenting". False for anything else. */
bool il_allocpat_parse(const char *name, il_allocpat_kind *out);
const char *il_allocpat_name(il_allocpat_kind k);

/* Runs pattern k on `device` ("sim:32MiB", "cuda:0") capped at mem_limit bytes (0 = none).
 * The long request failing is a result (big_ok false), not an error. Errors: il_backend_open's
 * (IL_ERR_INVALID_ARG, IL_ERR_UNSUPPORTED), IL_ERR_UNSUPPORTED for a device without a caching
 * allocator (cpu), IL_ERR_RANGE when the device holds less than 28 MiB, IL_ERR_OOM when the
 * pattern's own buffers do not fit. r->svg is freed by il_allocpat_result_free. */
il_status il_allocpat_run(const char *device, size_t mem_limit, il_allocpat_kind k, il_allocpat_result *r);
void il_allocpat_result_free(il_allocpat_result *r);

#endif
