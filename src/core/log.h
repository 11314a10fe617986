/* core/log: where the library's notes go.
 *
 * Library code never prints: a note (the context was reduced to fit, a warning about an option,
 * a change --fit applied) is handed to the callback the caller set with il_log_set, which
 * decides where it goes (the CLI prints it to stderr prefixed "inferlab: "; a server may log
 * it). With no callback the note is dropped. The callback may be called from any thread that
 * runs library code; it must not call back into the library.
 * Not for: errors (they are values: il_status and il_error_detail), reports a command prints.
 */
#ifndef IL_CORE_LOG_H
#define IL_CORE_LOG_H

#include "inferlab.h" /* il_log_level, il_log_fn, il_log_set */

/* Formats a note and hands it to the callback. Can't fail (long notes are cut at 1 KiB). */
void il_log(il_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
