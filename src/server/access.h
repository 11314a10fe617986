/* server/access: who may talk to the server: the API key.
 *
 * API key: compared whole, in time that depends only on the length of the key presented (never
 * on where it differs, nor on the real key's contents); any length up to IL_ACCESS_KEY_MAX (a
 * longer one could not travel in a request's headers). An empty key, or one with control
 * characters or surrounding spaces (which a header cannot carry as they are), is refused when
 * the server starts, naming the flag.
 *
 * Not for: TLS or users (a reverse proxy does that).
 */
#ifndef IL_SERVER_ACCESS_H
#define IL_SERVER_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define IL_ACCESS_KEY_MAX 8192

/* IL_OK, or IL_ERR_INVALID_ARG naming flag ("--api-key", "--api-key-file F") and what is wrong. */
il_status il_access_key_check(const char *key, const char *flag);
/* The whole of got[0..gl) equals want[0..wl) (wl > 0), in time depending on gl only. */
bool il_access_key_equal(const char *want, size_t wl, const char *got, size_t gl);

#endif
