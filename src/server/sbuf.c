/* server/sbuf: growable buffer and JSON text writer. */
#include "server/sbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"

static bool il__grow(il_sbuf *b, size_t need) {
  if (b->oom) return false;
  if (need > ((size_t)-1) / 4 - b->len) {
    b->oom = true;
    return false;
  }
  if (b->len + need + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 512;
  while (cap < b->len + need + 1) cap *= 2;
  /* the new block is charged while the old one is still held (the copy holds both); when the
   * doubled size does not fit in the budget, the size needed may */
  if (b->budget && cap > il_budget_room(b->budget)) cap = (b->len + need + 1 + 4095) & ~(size_t)4095;
  if (!il_budget_take(b->budget, cap)) {
    b->oom = true;
    return false;
  }
  char *np = il_mem_alloc(IL_MEM_SERVER, cap, "server buffer");
  if (!np) {
    il_budget_give(b->budget, cap);
    b->oom = true;
    return false;
  }
  if (b->len) memcpy(np, b->p, b->len);
  il_mem_free(b->p);
  il_budget_give(b->budget, b->cap);
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
  if (n < 0) {
    b->oom = true;
    return;
  }
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

bool il_sbuf_reserve(il_sbuf *b, size_t n) { return il__grow(b, n); }

void il_sbuf_free(il_sbuf *b) {
  il_mem_free(b->p);
  il_budget_give(b->budget, b->cap);
  b->p = NULL;
  b->len = b->cap = 0;
  b->oom = false;
}

/* ---- UTF-8 ---- */

size_t il_utf8_seq(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t need;
  unsigned min;
  if (c >= 0xC2 && c <= 0xDF) need = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) need = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) need = 4, min = 0x10000;
  else return 0;
  if (n < need) return 0;
  unsigned cp = c & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return need;
}

size_t il_utf8_check(const char *s, size_t len) {
  for (size_t i = 0; i < len;) {
    size_t k = il_utf8_seq(s + i, len - i);
    if (!k) return i;
    i += k;
  }
  return len;
}

size_t il_utf8_cut(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  /* back over at most 3 continuation bytes to the lead byte of the last character */
  size_t i = n, back = 0;
  while (i > 0 && back < 3 && (u[i - 1] & 0xC0) == 0x80) i--, back++;
  if (i == 0) return n;
  const unsigned c = u[i - 1];
  const size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return want > back + 1 && c >= 0xC0 ? i - 1 : n; /* an incomplete last character is dropped */
}

const char *il_utf8_clip(const char *s, char *buf, size_t cap) {
  size_t n = strlen(s);
  if (n < cap) {
    memcpy(buf, s, n + 1);
    return buf;
  }
  n = il_utf8_cut(s, cap - 4);
  memcpy(buf, s, n);
  memcpy(buf + n, "...", 4);
  return buf;
}

/* ---- JSON text ---- */

void il_sbuf_json_str(il_sbuf *b, const char *s, size_t n) {
  il_sbuf_put(b, "\"", 1);
  il_sbuf_json_chars(b, s, n);
  il_sbuf_put(b, "\"", 1);
}

void il_sbuf_json_chars(il_sbuf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  if (!il__grow(b, n)) return;
  size_t run = 0; /* start of the bytes copied as they are */
  for (size_t i = 0; i < n;) {
    const unsigned char c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : il_utf8_seq(s + i, n - i);
    const bool plain = k > 1 || (k == 1 && c >= 0x20 && c != '"' && c != '\\' && c != 0x7F);
    if (plain) {
      i += k;
      continue;
    }
    il_sbuf_put(b, s + run, i - run);
    char esc[8];
    size_t el = 2;
    esc[0] = '\\';
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      default:
        if (k == 0) { /* not UTF-8: U+FFFD */
          memcpy(esc, "\xEF\xBF\xBD", 3);
          el = 3;
        } else {
          memcpy(esc, "\\u00", 4);
          esc[4] = hex[c >> 4];
          esc[5] = hex[c & 15];
          el = 6;
        }
    }
    il_sbuf_put(b, esc, el);
    i++;
    run = i;
  }
  il_sbuf_put(b, s + run, n - run);
}

void il_sbuf_json_float(il_sbuf *b, float v) {
  if (!isfinite(v)) {
    il_sbuf_puts(b, "-9999.0");
    return;
  }
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) { /* the shortest text that reads back as v */
    snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v) break;
  }
  il_sbuf_puts(b, buf);
}
