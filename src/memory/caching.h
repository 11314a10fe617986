/* memory/caching: a caching allocator for device memory spaces (sim now, cuda next).
 *
 * The device hands it a raw segment allocator (two function pointers: sim passes functions
 * over its private budget, cuda passes cudaMalloc/cudaFree). Segment memory is never
 * dereferenced: every piece of metadata (blocks, free lists, names) lives in host structures,
 * so device memory need not be host-visible. The design follows PyTorch's
 * CUDACachingAllocator:
 *
 *   - requests are rounded up to 512 bytes; a request of at most 1 MiB goes to the small pool,
 *     whose segments are 2 MiB; a larger request goes to the large pool, whose segments are
 *     20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise. When the
 *     byte cap (or the device) refuses that segment, one of exactly the rounded request is
 *     tried (PyTorch does not; under a tight cap this is what lets the last bytes be used);
 *   - a request takes the best-fitting free block of its pool (smallest size that fits, then
 *     oldest segment, then lowest offset), kept in a size-ordered balanced tree per pool
 *     (O(log n) insert, remove and search); a block is split when the rest is at least 512
 *     bytes (small pool) or more than 1 MiB (large pool), otherwise the caller gets the whole
 *     block and `allocated` counts all of it;
 *   - a freed block merges with free neighbours in its segment and stays cached for reuse;
 *     segments go back to the device only through il_caching_empty_cache, or when a new
 *     segment cannot be had: then every fully free segment is returned and the segment is
 *     asked for once more (a "retry"), and if that fails too the request fails with
 *     IL_ERR_OOM and a report (il_caching_last_oom);
 *   - reserved bytes (the sum of the segments) never exceed the cap, except after the cap
 *     was lowered below what was already reserved (il_caching_set_cap).
 *
 * Every allocation records a category (il_mem_category) and a name (copied, truncated to
 * IL_CACHING_NAME_MAX - 1 bytes). Stats in total and per category can be read at any time;
 * a snapshot lists segments and blocks (lab/memmap writes it as JSON or draws it as an SVG map).
 * One mutex per allocator makes every call thread-safe.
 * Host metadata (the allocator, segment records, block records in chunks of 256) is
 * allocated with il_mem_alloc under IL_MEM_OTHER, so il_mem_fail_after reaches it too.
 * Not for: host buffers (il_mem_alloc), or deciding what to do about an OOM (the device and
 * engine build the user-facing report and the suggested change from il_caching_oom).
 */
#ifndef IL_MEMORY_CACHING_H
#define IL_MEMORY_CACHING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "memory/mem.h"

#define IL_CACHING_ROUND ((size_t)512)                /* request granularity, bytes */
#define IL_CACHING_SMALL_MAX ((size_t)1 << 20)        /* largest small-pool request */
#define IL_CACHING_SMALL_SEGMENT ((size_t)2 << 20)    /* small-pool segment */
#define IL_CACHING_LARGE_SEGMENT ((size_t)20 << 20)   /* segment for 1-10 MiB requests */
#define IL_CACHING_MIN_LARGE_ALLOC ((size_t)10 << 20) /* from here: segment = request */
#define IL_CACHING_ROUND_LARGE ((size_t)2 << 20)      /* rounding of those segments */
#define IL_CACHING_NAME_MAX 48                        /* bytes kept of a name, with NUL */

typedef enum { IL_CACHING_POOL_SMALL, IL_CACHING_POOL_LARGE, IL_CACHING_POOL_COUNT } il_caching_pool;

typedef struct il_caching il_caching;             /* one allocator over one device space */
typedef struct il_caching_block il_caching_block; /* one allocation handed out */

typedef struct {
  const char *name; /* the space, for messages: "sim", "cuda:0"; copied (31 bytes kept) */
  size_t cap;       /* most bytes it may reserve; 0 = no cap (the device alone says no) */
  /* Reserves `bytes` of device memory at *base. Fails with any status (IL_ERR_OOM when the
   * device is full); the allocator then frees cached segments and asks once more. */
  il_status (*seg_alloc)(void *ctx, size_t bytes, void **base);
  /* Returns a segment from seg_alloc with its size. Can't fail. */
  void (*seg_free)(void *ctx, void *base, size_t bytes);
  void *ctx; /* borrowed; passed to both */
  /* No caching (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING): every request gets a segment of
   * exactly its rounded size, and a free returns that segment at once. A baseline for the
   * benchmark and for tracking down a misuse; everything else behaves the same. */
  bool no_cache;
} il_caching_opts;

/* Byte and event counters. In il_caching_stats they come once in total and once per
 * category. A segment belongs to the category of the request that made it be allocated, so
 * `reserved`, `inactive_split`, `segment_allocs/frees` and `n_segments` of a category count
 * the segments that category's requests created (other categories' blocks may live in
 * them); the other counters count that category's own requests. Per-category values add up
 * to the totals, except the peaks (the total's peak is the peak of the sum). */
typedef struct {
  size_t reserved;       /* bytes in segments held from the device */
  size_t allocated;      /* bytes in blocks handed out: rounded, plus remainders too small to split */
  size_t requested;      /* bytes the callers asked for */
  size_t active;         /* bytes in blocks in use: equals allocated, because a free takes effect
                          * at once (PyTorch's active also holds blocks freed while a stream still
                          * uses them; stream-ordered frees do not exist here yet) */
  size_t inactive_split; /* free bytes in segments that hold more than one block: cached memory
                          * that only a request fitting the hole can use */
  size_t peak_reserved, peak_allocated;
  uint64_t n_blocks;   /* live allocations */
  uint64_t n_segments; /* live segments */
  uint64_t n_allocs, n_frees;             /* successful il_caching_alloc calls; il_caching_free calls */
  uint64_t segment_allocs, segment_frees; /* seg_alloc successes; seg_free calls */
  uint64_t retries;                       /* requests that freed the cache and asked again */
  uint64_t ooms;                          /* requests that failed with IL_ERR_OOM */
} il_caching_counts;

typedef struct {
  il_caching_counts total;
  il_caching_counts cat[IL_MEM_CATEGORY_COUNT];
  size_t cap;                                /* 0 = none */
  size_t free_bytes;                         /* cached: reserved - allocated */
  size_t largest_free;                       /* largest cached free block, either pool */
  size_t largest_free_pool[IL_CACHING_POOL_COUNT];
  double fragmentation;                      /* 1 - largest_free / free_bytes; 0 when nothing is free */
} il_caching_stats;

typedef enum {
  IL_CACHING_OOM_CAP,    /* the cap left too little room for a segment */
  IL_CACHING_OOM_DEVICE, /* seg_alloc refused (device full, or an injected fault) */
  IL_CACHING_OOM_HOST,   /* host memory for the metadata ran out */
} il_caching_oom_cause;

/* Everything needed to explain one failed request, taken after the retry. */
typedef struct {
  char space[32];
  size_t requested;         /* bytes asked for */
  size_t rounded;           /* after rounding: the block it needed */
  size_t segment;           /* the smallest segment it asked the cap or device for */
  il_mem_category cat;
  char name[IL_CACHING_NAME_MAX];
  il_caching_pool pool;
  il_caching_oom_cause cause;
  il_status device_status;  /* what seg_alloc returned (IL_OK unless cause is DEVICE) */
  char device_detail[256];  /* its il_error_detail, copied */
  size_t cap;               /* 0 = none */
  size_t reserved, allocated;
  size_t headroom;          /* cap - reserved: what could still be reserved; 0 without a cap */
  size_t free;              /* headroom + cached free bytes */
  size_t largest_free;      /* largest single piece this request could use: a cached block of its
                             * pool, or the headroom */
  bool fragmentation;       /* free >= rounded but largest_free < rounded: the bytes exist, only
                             * not in one piece, so the cause is fragmentation, not capacity */
  bool retried;             /* cached segments were returned and the segment asked for again */
  il_caching_stats stats;   /* at the moment of failure */
} il_caching_oom;

/* Creates an allocator. opts is copied (the name too); seg_alloc and seg_free are required.
 * IL_ERR_INVALID_ARG without them, IL_ERR_OOM when the host is out of memory. Destroy with
 * il_caching_destroy. */
IL_NODISCARD il_status il_caching_new(const il_caching_opts *opts, il_caching **out);
/* Returns every segment to the device (blocks still handed out become invalid: the caller
 * should have freed them) and frees the metadata. NULL is ignored. */
void il_caching_destroy(il_caching *a);

/* Allocates `bytes` (0 is taken as 1) for category `cat`, named `name` (copied; may be NULL).
 * On success *out is the block (owned by the allocator until il_caching_free). On failure
 * returns IL_ERR_OOM with a detail like mem.c's ("cannot allocate 3.0 MiB for blk.0 (kv) in
 * sim (fragmentation): ...") and records il_caching_last_oom; nothing else changes except
 * that cached segments may have been returned. */
IL_NODISCARD il_status il_caching_alloc(il_caching *a, il_mem_category cat, size_t bytes, const char *name,
                           il_caching_block **out);
/* Gives a block back: it merges with free neighbours and stays cached (no_cache: its segment
 * goes back to the device). NULL is ignored; freeing twice is a programmer error. */
void il_caching_free(il_caching *a, il_caching_block *b);

/* The block's device address (segment base + offset; never dereferenced here), its usable
 * size (>= the request) and the size asked for. Valid until il_caching_free. */
void *il_caching_block_ptr(const il_caching_block *b);
size_t il_caching_block_size(const il_caching_block *b);
size_t il_caching_block_requested(const il_caching_block *b);

/* Returns every fully free cached segment to the device. Returns the bytes released. */
size_t il_caching_empty_cache(il_caching *a);
/* Sets the cap (0 = none). A cap below what is reserved releases fully free segments; blocks
 * in use are never moved, so reserved may stay above the cap until they are freed (no new
 * segment is taken meanwhile). */
void il_caching_set_cap(il_caching *a, size_t cap);
/* Consistent copy of every counter, taken under the lock. Can't fail. */
void il_caching_stats_get(il_caching *a, il_caching_stats *out);
/* Peaks restart from the current values. */
void il_caching_reset_peak(il_caching *a);
/* The report of the most recent failed request; false when none failed yet. */
bool il_caching_last_oom(il_caching *a, il_caching_oom *out);
/* The space name given at creation. Borrowed. */
const char *il_caching_name(const il_caching *a);
/* "small" or "large". */
const char *il_caching_pool_name(il_caching_pool p);

/* ---- snapshot ---------------------------------------------------------------------- */

typedef struct {
  size_t offset, size; /* in the segment, bytes */
  size_t requested;    /* 0 for a free block */
  bool allocated;
  il_mem_category cat; /* meaningful when allocated */
  char name[IL_CACHING_NAME_MAX];
} il_caching_snap_block;

typedef struct {
  uint64_t id;         /* 1, 2, ... in creation order */
  uintptr_t base;      /* device address, for matching with device-side tools */
  size_t size;
  il_caching_pool pool;
  il_mem_category cat; /* the category whose request created it */
  size_t first_block, n_blocks; /* its blocks in il_caching_snapshot.blocks, by offset */
} il_caching_snap_segment;

typedef struct {
  char space[32];
  il_caching_snap_segment *segments; /* [n_segments], in creation order */
  size_t n_segments;
  il_caching_snap_block *blocks;     /* [n_blocks] */
  size_t n_blocks;
  il_caching_stats stats;
} il_caching_snapshot;

/* Copies segments, blocks and stats under the lock. The arrays are host memory from
 * il_mem_alloc (IL_MEM_OTHER); release with il_caching_snapshot_free. IL_ERR_OOM when the
 * host is out of memory (out is then empty). */
IL_NODISCARD il_status il_caching_snapshot_take(il_caching *a, il_caching_snapshot *out);
/* Frees the arrays; the struct may be reused. Can't fail. */
void il_caching_snapshot_free(il_caching_snapshot *s);
/* Its reports (JSON, SVG memory map): lab/memmap.h. */

#endif
