/* model/strhash: an open-addressing index from byte strings to ids, for the vocabulary's token
 * texts and its BPE merges.
 *
 * The table holds ids only (-1 = empty slot); the strings stay where the caller keeps them, and
 * the caller compares while it probes, so a lookup builds nothing:
 *
 *   for (size_t i = il_strhash_start(h, hash); h->slot[i] >= 0; i = il_strhash_next(h, i))
 *     if (<the string of h->slot[i]> equals the key) return h->slot[i];
 *
 * FNV-1a hashes, linear probing, a power-of-two size at least twice the number of keys, so a
 * probe always ends at an empty slot. Built once, read-only after (no deletion).
 * Not for: anything that removes keys, or keys the caller does not keep.
 */
#ifndef IL_MODEL_STRHASH_H
#define IL_MODEL_STRHASH_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "memory/mem.h"

#define IL_STRHASH_FNV_BASIS 1469598103934665603ull

/* FNV-1a over bytes, continuing from h (start from IL_STRHASH_FNV_BASIS): a string hashed in
 * pieces has the hash of the whole. */
static inline uint64_t il_strhash_fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

typedef struct {
  int32_t *slot; /* [mask + 1] ids, -1 empty */
  size_t mask;
} il_strhash;

/* Allocates an empty table for up to n_keys keys, counted under cat as `what`. IL_ERR_OOM
 * (h is then empty, and il_strhash_free is still safe). */
il_status il_strhash_init(il_strhash *h, size_t n_keys, il_mem_category cat, const char *what);
/* Frees the slots; h is empty after. NULL slots are fine. */
void il_strhash_free(il_strhash *h);

/* The first slot to look at for `hash`, and the one after slot i. */
static inline size_t il_strhash_start(const il_strhash *h, uint64_t hash) { return (size_t)hash & h->mask; }
static inline size_t il_strhash_next(const il_strhash *h, size_t i) { return (i + 1) & h->mask; }

#endif
