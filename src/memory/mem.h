/* memory/mem: every byte the engine owns, counted by category.
 *
 * Host allocations go through il_mem_alloc with a category; each allocation carries a small
 * header with its size and category so il_mem_free keeps the counters exact. Current and peak
 * bytes per category (and in total) can be read at any time, from any thread. Memory the
 * engine does not own but uses (weights borrowed from an mmap) is reported separately as
 * "mapped" so a run's footprint is complete without double counting.
 *
 * Out of memory (malloc failure, a byte limit set with il_mem_set_limit, or a fault injected
 * with il_mem_fail_after) returns NULL with an IL_ERR_OOM detail naming what was requested and
 * the bytes in use per category. Nothing here aborts.
 * Not for: device memory spaces of other backends (they keep their own il_mem_space with the
 * same counters, see il_mem_space_*).
 */
#ifndef IL_MEMORY_MEM_H
#define IL_MEMORY_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"


/* A counted memory space: the host has one; simulated or real devices have their own. All
 * counters are updated atomically. */
typedef struct il_mem_space il_mem_space;

/* The host space used by il_mem_alloc. Never NULL; lives for the whole process. */
il_mem_space *il_mem_host(void);

/* Reserves `bytes` in `space` for `cat` (checks the limit and fault injection). On failure
 * returns IL_ERR_OOM with a report naming `what`; the counters are unchanged. */
IL_NODISCARD il_status il_mem_space_reserve(il_mem_space *space, il_mem_category cat, size_t bytes, const char *what);
/* Returns bytes reserved earlier. Can't fail. */
void il_mem_space_release(il_mem_space *space, il_mem_category cat, size_t bytes);
/* Creates a device space with a name ("sim", "cuda:0") and a byte limit (0 = none). Free with
 * il_mem_space_free. Returns NULL only when the host is out of memory. */
il_mem_space *il_mem_space_new(const char *name, size_t limit);
void il_mem_space_free(il_mem_space *space);
void il_mem_space_stats(const il_mem_space *space, il_mem_stats *out);
const char *il_mem_space_name(const il_mem_space *space);
void il_mem_space_set_limit(il_mem_space *space, size_t limit);
void il_mem_space_reset_peak(il_mem_space *space);
/* Adds (or with negative delta removes) bytes borrowed from a mapping. */
void il_mem_space_note_mapped(il_mem_space *space, il_mem_category cat, int64_t delta);
/* Writes a one-line-per-category report "weights  12.3 MiB (peak 12.3 MiB)" into buf. */
void il_mem_space_report(const il_mem_space *space, char *buf, size_t n);

/* Host allocation: 64-byte aligned, counted under `cat`. Returns NULL with an IL_ERR_OOM
 * detail on failure. `what` names the buffer in that detail ("kv cache", "logits"). The caller
 * owns the block and releases it with il_mem_free. */
void *il_mem_alloc(il_mem_category cat, size_t bytes, const char *what);
/* Same, zero-filled. */
void *il_mem_calloc(il_mem_category cat, size_t bytes, const char *what);
/* Frees a block from il_mem_alloc/il_mem_calloc; NULL is ignored. */
void il_mem_free(void *p);
/* Host-space shorthands. */
void il_mem_stats_get(il_mem_stats *out);
void il_mem_reset_peak(void);
void il_mem_set_limit(size_t bytes);
void il_mem_note_mapped(il_mem_category cat, int64_t delta);

/* Fault injection for tests: the n-th counted reservation from now (1 = the next one), in any
 * space, fails with IL_ERR_OOM. n <= 0 disables. */
void il_mem_fail_after(long n);

/* The facts of the last allocation failure on this thread: which space, what was asked for,
 * and the space's counters at that moment. */
typedef struct {
  char space[32];
  const il_mem_space *space_id; /* the space itself (devices of one kind share a name); compare only */
  char what[96];
  char why[16];          /* "limit" (the space's budget), "malloc", "injected", "overflow" */
  il_mem_category cat;
  size_t requested;
  il_mem_stats stats;    /* of the space, at the failure */
  size_t largest_free;   /* largest block the space could still hand out (0 = unknown) */
  size_t reserved;       /* bytes a device allocator held from the device (0 = no such layer) */
  bool fragmentation;    /* a device allocator found the bytes free, but not in one block */
  unsigned long serial;  /* increases with every recorded failure on this thread */
} il_mem_oom;

/* Copies the last failure recorded on this thread; false when there was none. */
bool il_mem_last_oom(il_mem_oom *out);
/* Records a failure (memory/ does this itself; device allocators in backend/ call it for
 * failures they find, with the largest free block they know). */
void il_mem_record_oom(const il_mem_space *space, il_mem_category cat, size_t bytes, const char *what,
                       const char *why, size_t largest_free);
/* Adds what a device allocator knows to the failure just recorded on this thread. */
void il_mem_record_oom_device(size_t reserved, size_t largest_free, bool fragmentation);

/* Formats a byte count as "1.50 GiB" / "12.0 MiB" / "512 B" into buf (>= 16 bytes). */
const char *il_mem_format_bytes(size_t bytes, char *buf, size_t n);

#endif
