/* core/units: sizes and rates as users type them: "2GiB", "300MiB", "1.5GB", "4096",
 * "16GB/s".
 *
 * Binary suffixes (KiB MiB GiB TiB) are powers of 1024, decimal ones (KB MB GB TB) powers of
 * 1000, no suffix or "B" bytes; case-insensitive; no spaces, no negative values.
 * A bare k, M, G or T is refused: tools read it both ways (ls -h and Kubernetes binary, disks
 * decimal), so "256m" would silently be 256 MB for one user and 256 MiB for another.
 * Not for: printing sizes (memory/mem's il_mem_format_bytes).
 */
#ifndef IL_CORE_UNITS_H
#define IL_CORE_UNITS_H

#include <stdbool.h>
#include <stddef.h>

/* Parses a byte size; false for anything malformed, negative, or above SIZE_MAX. */
bool il_parse_bytes(const char *text, size_t *out);
/* Why il_parse_bytes (or il_parse_rate) refused text, for the caller's message: "'m' is
 * ambiguous: write MiB ... or MB ..." or "not a size (e.g. ...)". The string is static
 * (per thread); never NULL. */
const char *il_parse_bytes_why(const char *text);
/* The "'m' is ambiguous: ..." sentence when text (a size or a rate) ends in a bare k/M/G/T
 * after a digit, else NULL. Static (per thread). */
const char *il_units_ambiguous(const char *text);
/* Parses a rate in bytes per second: a size followed by "/s" ("16GB/s", "500MiB/s"). */
bool il_parse_rate(const char *text, double *bytes_per_s);

#endif
