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

/* X(name, value, message) */
#define IL_STATUS_TABLE(X)                                                              \
  X(OK, 0, "success")                                                                   \
  X(ERR_INVALID_ARG, 1, "invalid argument")                                             \
  X(ERR_IO, 2, "input/output error")                                                    \
  X(ERR_FORMAT, 3, "malformed input file")                                              \
  X(ERR_UNSUPPORTED, 4, "unsupported feature or type")                                  \
  X(ERR_OOM, 5, "out of memory")                                                        \
  X(ERR_NOT_FOUND, 6, "not found")                                                      \
  X(ERR_RANGE, 7, "value out of range")                                                 \
  X(ERR_DEVICE, 8, "device error")                                                      \
  X(ERR_INTERNAL, 9, "internal error")                                                  \
  X(ERR_OUTPUT, 10, "cannot write the output file")                                    \
  X(ERR_BUSY, 11, "busy: try again later")

typedef enum {
#define IL__STATUS_ENUM(name, value, msg) IL_##name = value,
  IL_STATUS_TABLE(IL__STATUS_ENUM)
#undef IL__STATUS_ENUM
} il_status;

/* "IL_ERR_FORMAT"-style name of a code; "IL_UNKNOWN" for values outside the table. */
const char *il_status_name(il_status s);
/* One-line default message for a code. Never NULL. */
const char *il_status_message(il_status s);

/* Records a printf-formatted detail for this thread and returns `code`, so a failure site
 * reads `return il_error(IL_ERR_FORMAT, "%s: offset %zu: ...", path, off);`. The detail
 * replaces any earlier one. Can't fail (long messages are truncated). */
il_status il_error(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current detail with more context ("loading model.gguf: " + detail). */
il_status il_error_wrap(il_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The detail recorded last on this thread, or "" when none. Borrowed; valid until the next
 * il_error on this thread. */
const char *il_error_detail(void);
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
