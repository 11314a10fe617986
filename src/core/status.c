/* core/status: the status table and the thread-local error detail. */
#include "core/status.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char il__detail[1024];

const char *il_status_name(il_status s) {
  switch (s) {
#define IL__NAME(name, value, msg) case IL_##name: return "IL_" #name;
    IL_STATUS_TABLE(IL__NAME)
#undef IL__NAME
  }
  return "IL_UNKNOWN";
}

const char *il_status_message(il_status s) {
  switch (s) {
#define IL__MSG(name, value, msg) case IL_##name: return msg;
    IL_STATUS_TABLE(IL__MSG)
#undef IL__MSG
  }
  return "unknown status";
}

il_status il_error(il_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(il__detail, sizeof il__detail, fmt, ap);
  va_end(ap);
  return code;
}

il_status il_error_wrap(il_status code, const char *fmt, ...) {
  char prefix[256], old[sizeof il__detail - sizeof prefix];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t n = strnlen(il__detail, sizeof old - 1);
  memcpy(old, il__detail, n);
  old[n] = 0;
  size_t p = strlen(prefix);
  memcpy(il__detail, prefix, p);
  memcpy(il__detail + p, old, n + 1);
  return code;
}

const char *il_error_detail(void) { return il__detail; }

void il_error_clear(void) { il__detail[0] = 0; }
