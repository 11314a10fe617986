/* core/text: see text.h. */
#include "core/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

size_t il_appendf(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strnlen(buf, cap);
  if (len >= cap) return len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  return len + (n > 0 ? (size_t)n : 0);
}

size_t il_utf8_char_len(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!len || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
  if (c == 0xED && s[1] > 0x9F) return 0; /* surrogate */
  if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
  if (c == 0xF4 && s[1] > 0x8F) return 0; /* past U+10FFFF */
  return len;
}

void il_xml_escape(FILE *f, const char *s, bool keep_lines) {
  for (; *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&#39;", f); break;
      default:
        if ((unsigned char)*s < 0x20 && !(keep_lines && (*s == '\n' || *s == '\t'))) fputc(' ', f);
        else fputc(*s, f);
    }
  }
}
