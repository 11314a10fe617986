/* server/access: who may talk to the server: the API key, the Host and Origin a request names.
 *
 * API key: compared whole, in time that depends only on the length of the key presented (never
 * on where it differs, nor on the real key's contents); any length up to IL_ACCESS_KEY_MAX (a
 * longer one could not travel in a request's headers). An empty key, or one with control
 * characters or surrounding spaces (which a header cannot carry as they are), is refused when
 * the server starts, naming the flag.
 *
 * Host (DNS rebinding: a web page whose name resolves to 127.0.0.1 reaches a local server with
 * its own name in Host): a request is served when its Host is localhost, 127.0.0.1, [::1], the
 * address the server listens on, any IP address when it listens on every interface (0.0.0.0 or
 * ::; an address literal cannot be rebound), or a name given in --allowed-hosts (exact, or
 * ".example.com" for a domain and its subdomains; "*" allows every Host). No Host (HTTP/1.0)
 * is allowed: browsers always send one.
 *
 * Origin (a page in the user's browser posting to the server): a request without Origin
 * (curl, SDKs) or from the server's own origin (the chat page: Origin's host:port is the Host)
 * is served; any other origin only when --cors-origins lists it ("*" for all), and then the
 * response carries Access-Control-Allow-Origin and a preflight (OPTIONS) is answered.
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

typedef struct il_access il_access;

/* The rules for a server listening on host (as --host gives it), with the comma-separated
 * lists allowed_hosts and cors_origins (NULL or "" for none). Errors: IL_ERR_INVALID_ARG naming
 * the flag and the entry, IL_ERR_OOM. Free with il_access_free. */
il_status il_access_new(const char *host, const char *allowed_hosts, const char *cors_origins, il_access **out);
void il_access_free(il_access *a);

/* Host header (NULL: absent) allowed. */
bool il_access_host_ok(const il_access *a, const char *host);
/* Origin header (NULL: absent) allowed for a request whose Host is host; *cors is set when the
 * response must carry Access-Control-Allow-Origin (an allowed foreign origin). */
bool il_access_origin_ok(const il_access *a, const char *origin, const char *host, bool *cors);
/* The hosts allowed by default, for messages: "localhost, 127.0.0.1, [::1]" and the address. */
const char *il_access_hosts_note(const il_access *a);

#endif
