/* core/units: sizes and rates as users type them: "2GiB", "300MiB", "1.5GB", "4096",
 * "16GB/s".
 *
 * Binary suffixes (KiB MiB GiB TiB) are powers of 1024, decimal ones (KB MB GB TB, also k M
 * G T) powers of 1000, no suffix or "B" bytes; case-insensitive; no spaces, no negative values.
 * Not for: printing sizes (memory/mem's il_mem_format_bytes).
 */
#ifndef IL_CORE_UNITS_H
#define IL_CORE_UNITS_H

#include <stdbool.h>
#include <stddef.h>

/* Parses a byte size; false for anything malformed, negative, or above SIZE_MAX. */
bool il_parse_bytes(const char *text, size_t *out);
/* Parses a rate in bytes per second: a size followed by "/s" ("16GB/s", "500MiB/s"). */
bool il_parse_rate(const char *text, double *bytes_per_s);

#endif
