/* server/sbuf: growable buffer. */
#include "server/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "memory/mem.h"

static bool il__grow(il_sbuf *b, size_t need) {
  if (b->oom) return false;
  if (b->len + need + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 512;
  while (cap < b->len + need + 1) cap *= 2;
  char *np = il_mem_alloc(IL_MEM_OTHER, cap, "server buffer");
  if (!np) {
    b->oom = true;
    return false;
  }
  if (b->len) memcpy(np, b->p, b->len);
  il_mem_free(b->p);
  b->p = np;
  b->cap = cap;
  return true;
}

void il_sbuf_put(il_sbuf *b, const void *s, size_t n) {
  if (!il__grow(b, n)) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void il_sbuf_puts(il_sbuf *b, const char *s) { il_sbuf_put(b, s, strlen(s)); }

void il_sbuf_printf(il_sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[512];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    il_sbuf_put(b, small, (size_t)n);
    return;
  }
  if (!il__grow(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void il_sbuf_consume(il_sbuf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
    return;
  }
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
  b->p[b->len] = 0;
}

void il_sbuf_free(il_sbuf *b) {
  il_mem_free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->oom = false;
}
