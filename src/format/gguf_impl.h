/* format/gguf_impl: what the GGUF reader (gguf.c) and writer (gguf_writer.c) share.
 *
 * Format constants, the size and name of each value type, the checked arithmetic and the name
 * hash both use, and the reader's value validator, which the writer runs over raw values it is
 * handed so that it never writes a value the reader would reject.
 * Not for: anyone but gguf.c and gguf_writer.c (everyone else has gguf.h and gguf_writer.h).
 */
#ifndef IL_FORMAT_GGUF_IMPL_H
#define IL_FORMAT_GGUF_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"
#include "format/gguf.h"
#include "memory/mem.h"

#define IL__GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define IL__GGUF_MAX_KEY 65535u    /* longest key (and tensor name) accepted */

/* Bytes of one value of a fixed-size type; 0 for STRING and ARRAY. type < IL_GGUF_TYPE_COUNT. */
static inline uint32_t il__gguf_value_size(uint32_t type) {
  static const uint32_t size[IL_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return size[type];
}

/* FNV-1a of s[0..n): the hash of the key and tensor-name indexes. */
static inline uint64_t il__gguf_hash(const char *s, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static inline bool il__gguf_is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static inline uint64_t il__gguf_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Checked a * b for the size arithmetic; false on overflow. */
static inline bool il__gguf_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (a && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}

/* Grows *arr (elements of `elem` bytes, capacity *cap) to hold at least `need` elements,
 * doubling, through il_mem_alloc. Returns IL_ERR_OOM with the allocator's detail. */
static inline il_status il__gguf_grow(void **arr, uint64_t *cap, uint64_t need, size_t elem,
                                      const char *what) {
  if (need <= *cap) return IL_OK;
  uint64_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void *p = il_mem_alloc(IL_MEM_MODEL, (size_t)(ncap * elem), what);
  if (!p) return IL_ERR_OOM;
  if (*arr) {
    memcpy(p, *arr, (size_t)(*cap * elem));
    il_mem_free(*arr);
  }
  *arr = p;
  *cap = ncap;
  return IL_OK;
}

/* Validates value[0..size) as one serialized value of `type` (as it follows the type field in
 * a file) with the reader's own parser, and sets *end to the bytes that value takes (which the
 * caller compares with size). Errors: IL_ERR_FORMAT naming `field` and the offset in value,
 * IL_ERR_OOM. Borrows value only for the call. */
il_status il__gguf_check_value(uint32_t type, const void *value, size_t size, const char *field,
                               uint64_t *end);

#endif
