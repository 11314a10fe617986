/* core/log: the note callback. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static il_log_fn il__fn;
static void *il__ud;

void il_log_set(il_log_fn fn, void *ud) {
  il__fn = fn;
  il__ud = ud;
}

void il_log(il_log_level level, const char *fmt, ...) {
  if (!il__fn) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  il__fn(il__ud, level, msg);
}
