/* core/loadsink: the process's load listener (core/loadsink.h). */
#include "core/loadsink.h"

#include <stdatomic.h>

static _Atomic(il_load_mapped_fn) il__mapped;
static _Atomic(il_load_converted_fn) il__converted;

void il_load_listen(il_load_mapped_fn mapped, il_load_converted_fn converted) {
  atomic_store(&il__mapped, mapped);
  atomic_store(&il__converted, converted);
}

void il_load_mapped(const char *path, const void *map, size_t size) {
  il_load_mapped_fn f = atomic_load(&il__mapped);
  if (f) f(path, map, size);
}

void il_load_converted(double seconds, uint64_t bytes) {
  il_load_converted_fn f = atomic_load(&il__converted);
  if (f) f(seconds, bytes);
}

static _Atomic(il_load_wait_fn) il__wait;

void il_load_listen_wait(il_load_wait_fn wait) { atomic_store(&il__wait, wait); }

il_status il_load_wait(const void *p, size_t n) {
  il_load_wait_fn f = atomic_load(&il__wait);
  return f ? f(p, n) : IL_OK;
}

static _Atomic(il_load_backed_fn) il__backed;

void il_load_listen_backed(il_load_backed_fn backed) { atomic_store(&il__backed, backed); }

void il_load_backed(double seconds, uint64_t bytes) {
  il_load_backed_fn f = atomic_load(&il__backed);
  if (f) f(seconds, bytes);
}
