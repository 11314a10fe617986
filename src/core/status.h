/* core/status: error values for the whole library.
 *
 * Every fallible function returns il_status. The code says what kind of failure it was; the
 * detail (which file, byte offset, tensor name, flag) is recorded in a thread-local message by
 * il_error() at the place the failure is found, and read back with il_error_detail(). One
 * X-macro table gives codes, names and default messages, so they cannot drift apart.
 * Not for: logging, or programmer errors (those are IL_ASSERT).
 */
#ifndef IL_CORE_STATUS_H
#define IL_CORE_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#include "inferlab.h" /* il_status and its table, il_status_name, il_status_message, il_error_detail */



/* Records a printf-formatted detail for this thread and returns `code`, so a failure site
 * reads `return il_error(IL_ERR_FORMAT, "%s: offset %zu: ...", path, off);`. The detail
 * replaces any earlier one. Can't fail (long messages are truncated). Not IL_NODISCARD: a site
 * may record the detail and return another value after cleaning up. */
il_status il_error(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current detail with more context ("loading model.gguf: " + detail). */
il_status il_error_wrap(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void il_error_clear(void);

/* Programmer errors only: prints file:line and aborts. Never for bad input. */
#define IL_ASSERT(cond)                                                                 \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);      \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

#define IL_TRY(expr)                                                                    \
  do {                                                                                  \
    il_status il__s = (expr);                                                           \
    if (il__s != IL_OK) return il__s;                                                   \
  } while (0)

#endif
