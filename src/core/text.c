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
