/* server/server: the OpenAI-compatible HTTP server over the scheduler.
 *
 * HTTP is libmicrohttpd's (a thread per connection; streaming responses block in their
 * reader until the engine thread has produced the next bytes), parsing JSON is jansson's (in
 * a per-request arena charged to the request's budget, server/budget.h), responses are JSON
 * text written directly (server/sbuf.h). The server listens before the model is loaded, so
 * /health answers 503 while loading; il_server_attach hands it an open engine, creates the
 * scheduler and starts the engine thread. Endpoints:
 *
 *   POST /v1/chat/completions, /v1/completions   (stream with server-sent events or not)
 *   GET  /v1/models, /v1/models/ID
 *   POST /v1/tokenize, /v1/detokenize             (also without /v1)
 *   GET  /health, /metrics, /                      (/ is the chat page)
 *
 * Every error is an OpenAI-style body {"error": {"message", "type", "param", "code"}} with
 * the status that fits: 400 malformed JSON, wrong types, invalid UTF-8, bad values; 401 a
 * missing or wrong API key; 403 a Host or Origin that is not allowed (server/access.h); 404 unknown model or path; 405 wrong method; 413 a body over
 * max_body, or a request that needs more than max_request_memory (its body, parsed JSON, tokens
 * and response: server/budget.h); 415 a POST body not declared application/json; 429 too many
 * requests in progress; 503 loading or the queue full
 * (with Retry-After).
 * Not for: TLS (put a reverse proxy in front), scheduling (engine/sched).
 */
#ifndef IL_SERVER_SERVER_H
#define IL_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"
#include "engine/sched.h"
#include "server/reqlog.h"

typedef struct {
  char host[64];          /* address to bind: 127.0.0.1 (default), 0.0.0.0, ::1, ... */
  int port;               /* 0: any free port (il_server_port says which) */
  const char *api_key;    /* NULL: no authentication; else copied (server/access.h: never empty) */
  const char *allowed_hosts; /* --allowed-hosts: comma-separated names beyond the defaults (NULL: none) */
  const char *cors_origins;  /* --cors-origins: comma-separated origins whose pages may call (NULL: none) */
  size_t max_body;        /* bytes per request body (default 1 MiB) */
  size_t max_request_memory; /* bytes one request may make the server hold (0: 16 x max_body) */
  int max_connections;    /* requests in progress before 429; idle connections beyond it are
                             closed oldest first (default 64) */
  double header_timeout;  /* seconds a request's headers may take in all (0: 30) */
  double body_timeout;    /* seconds its body may take in all (0: 60) */
  il_reqlog_format log_format; /* one line per finished request on stderr (server/reqlog.h) */
  int max_tokens;         /* most max_tokens a request may ask (0: the context) */
  il_request_params defaults; /* what a request leaves out: sampling, no-bos, no-parse-special,
                                 ignore-eos, and n_predict as max_tokens (-1: until the context is full) */
  char model_id[256];     /* the name /v1/models lists and requests must use */
  char chat_template[32]; /* --chat-template ("" = the model's) */
  const char *nvml_path;  /* NULL: libnvidia-ml.so.1 (GPU metrics only when it loads) */
  il_sched_opts sched;
} il_server_opts;

typedef struct il_server il_server;

/* Defaults above. Can't fail. */
void il_server_opts_defaults(il_server_opts *o);
/* Binds and starts serving (/health 503 until attached). Errors: IL_ERR_INVALID_ARG (bad
 * host, an empty or unusable API key), IL_ERR_IO (cannot bind: the detail says why), IL_ERR_OOM. *out owned by the caller,
 * released with il_server_stop. */
il_status il_server_start(const il_server_opts *o, il_server **out);
/* The port listened on. */
int il_server_port(const il_server *s);
/* Serves engine e (borrowed: it must outlive il_server_stop). Errors: IL_ERR_INVALID_ARG
 * (--chat-template unknown), IL_ERR_OOM. */
il_status il_server_attach(il_server *s, il_engine *e);
/* il_server_attach with the scheduler's options replaced by *so (what is known only once the
 * engines are open: the draft model of speculative decoding, borrowed like e). */
il_status il_server_attach_opts(il_server *s, il_engine *e, const il_sched_opts *so);
/* One line saying which chat template is used and why. */
const char *il_server_template_note(const il_server *s);
/* Refuses new requests, ends running ones ("cancelled"), stops the threads, frees s (not the
 * engine). NULL is ignored. */
void il_server_stop(il_server *s);

#endif
