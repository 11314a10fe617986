/* server/sbuf: a growable byte buffer for response bodies and event streams.
 *
 * Memory comes from memory/ (category other), so what the server holds for its clients shows
 * in the host accounting and in /metrics. A failed growth sets oom and drops later writes, so
 * callers check once at the end.
 * Not for: anything that must survive a failed allocation silently (check oom).
 */
#ifndef IL_SERVER_SBUF_H
#define IL_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *p;     /* NUL-terminated when len > 0 */
  size_t len, cap;
  bool oom;
} il_sbuf;

void il_sbuf_put(il_sbuf *b, const void *s, size_t n);
void il_sbuf_puts(il_sbuf *b, const char *s);
void il_sbuf_printf(il_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void il_sbuf_consume(il_sbuf *b, size_t n);
void il_sbuf_free(il_sbuf *b);

#endif
