/* model/strhash: allocating and freeing the index (see strhash.h for probing). */
#include "model/strhash.h"

#include <string.h>

il_status il_strhash_init(il_strhash *h, size_t n_keys, il_mem_category cat, const char *what) {
  size_t cap = 16;
  while (cap < n_keys * 2) cap <<= 1;
  h->mask = 0;
  h->slot = il_mem_alloc(cat, cap * sizeof *h->slot, what);
  if (!h->slot) return IL_ERR_OOM;
  memset(h->slot, 0xff, cap * sizeof *h->slot);
  h->mask = cap - 1;
  return IL_OK;
}

void il_strhash_free(il_strhash *h) {
  il_mem_free(h->slot);
  h->slot = NULL;
  h->mask = 0;
}
