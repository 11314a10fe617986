/* server/sbuf: a growable byte buffer for request bodies, responses and event streams, and the
 * JSON text writer the responses are built with.
 *
 * Memory comes from memory/ (category other), so what the server holds for its clients shows
 * in the host accounting and in /metrics; a buffer with a budget (server/budget.h) charges its
 * capacity to it first. A failed growth (out of memory, or the budget spent) sets oom and drops
 * later writes, so callers check once at the end and never send a partial body.
 *
 * Responses are written as JSON text directly (il_sbuf_json_*), not built as a tree and then
 * dumped: a token's logprobs take their text's size, not a few hundred bytes of nodes, and no
 * step can fail unnoticed. Strings are escaped as JSON requires; bytes that are not valid UTF-8
 * (half a character in a token, a client's %FF) become U+FFFD, so the text is always valid.
 * Not for: parsing (jansson does that).
 */
#ifndef IL_SERVER_SBUF_H
#define IL_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "server/budget.h"

typedef struct {
  char *p;     /* NUL-terminated when len > 0 */
  size_t len, cap;
  bool oom;
  il_budget *budget; /* borrowed, must outlive the bytes; NULL: uncharged */
} il_sbuf;

void il_sbuf_put(il_sbuf *b, const void *s, size_t n);
void il_sbuf_puts(il_sbuf *b, const char *s);
void il_sbuf_printf(il_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void il_sbuf_consume(il_sbuf *b, size_t n);
/* Makes room for n more bytes now, so writes up to that size cannot fail later. */
bool il_sbuf_reserve(il_sbuf *b, size_t n);
/* Frees the bytes and gives their charge back; the budget pointer stays. */
void il_sbuf_free(il_sbuf *b);

/* A JSON string: '"', s[0..n) escaped, '"'; invalid UTF-8 bytes become U+FFFD. */
void il_sbuf_json_str(il_sbuf *b, const char *s, size_t n);
/* The same without the quotes (a string written in parts). */
void il_sbuf_json_chars(il_sbuf *b, const char *s, size_t n);
/* A JSON number for a float (a log-probability): the shortest text that reads back as the same
 * float; not finite: -9999.0 (OpenAI's value for a log-probability of minus infinity). */
void il_sbuf_json_float(il_sbuf *b, float v);

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when s[0..n) does not start with one. */
size_t il_utf8_seq(const char *s, size_t n);
/* Index of the first byte that is not part of valid UTF-8 (len when all valid). */
size_t il_utf8_check(const char *s, size_t len);
/* The longest prefix of s[0..n) that does not end inside a character: n, or less when the last
 * bytes are an incomplete sequence (a cut made by a byte limit). */
size_t il_utf8_cut(const char *s, size_t n);
/* s shortened for quoting in a message: at most cap - 4 bytes, cut at a character boundary, with
 * "..." when shortened; written to buf (cap >= 8), which is returned. */
const char *il_utf8_clip(const char *s, char *buf, size_t cap);

#endif
