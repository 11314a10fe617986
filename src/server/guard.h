/* server/guard: connections that never come to the point lose their place.
 *
 * Every open connection is registered with its socket and its phase: waiting for a request's
 * headers (a new connection, or a kept-alive one between requests), receiving a body, or busy
 * (being answered). A watchdog thread closes (shutdown(2), which the HTTP library sees as the
 * client leaving) a connection whose headers have not all arrived within header_timeout of the
 * phase's start, or whose body has not within body_timeout: total time, like nginx's
 * client_header_timeout, so a client sending one byte every few seconds (slowloris) is cut as
 * surely as a silent one. And when a connection arrives while soft_limit are open, the oldest
 * one still waiting for headers is closed to make room, so idle sockets can never lock out a
 * request (/health and /metrics included) for longer than it takes to send its headers.
 * Counters of connections closed, by reason, are for /metrics.
 *
 * The socket stays the caller's (libmicrohttpd's): the guard only shuts it down, under its
 * lock, between add and remove, and the caller closes it only after remove.
 * Not for: HTTP itself, request limits (server/server.c).
 */
#ifndef IL_SERVER_GUARD_H
#define IL_SERVER_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef enum { IL_GUARD_HEADERS, IL_GUARD_BODY, IL_GUARD_BUSY } il_guard_phase;

typedef enum {
  IL_GUARD_DROP_HEADER_TIMEOUT, /* headers not complete within header_timeout */
  IL_GUARD_DROP_BODY_TIMEOUT,   /* body not complete within body_timeout */
  IL_GUARD_DROP_EVICTED,        /* waiting for headers, the oldest, when soft_limit were open */
  IL_GUARD_DROP_COUNT
} il_guard_drop;

typedef struct il_guard il_guard;

/* A guard for at most cap connections, and starts its thread. Timeouts in seconds (> 0).
 * Errors: IL_ERR_INVALID_ARG, IL_ERR_OOM, IL_ERR_INTERNAL (no thread). */
il_status il_guard_new(int cap, int soft_limit, double header_timeout, double body_timeout, il_guard **out);
/* Stops the thread and frees g. NULL is ignored. */
void il_guard_free(il_guard *g);

/* Registers a new connection (phase headers) on socket fd; the slot to name it by, or -1 when
 * cap are registered (the caller closes it). May evict the oldest connection waiting for
 * headers (see above). Thread-safe, as are the others. */
int il_guard_add(il_guard *g, int fd);
void il_guard_set_phase(il_guard *g, int slot, il_guard_phase phase);
void il_guard_remove(il_guard *g, int slot);

/* Connections receiving a body or being answered. */
int il_guard_active(il_guard *g);
uint64_t il_guard_dropped(il_guard *g, il_guard_drop why);
/* "header_timeout", "body_timeout", "evicted". */
const char *il_guard_drop_name(il_guard_drop why);

#endif
