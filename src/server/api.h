/* server/api: the OpenAI API's request and response bodies, independent of the HTTP library.
 *
 * il_api_generate validates a /v1/chat/completions or /v1/completions body (JSON through
 * jansson: wrong types, out-of-range values, unknown model, invalid UTF-8 each get a 400/404
 * with the parameter named), renders chat messages with the chat template, tokenizes, and
 * submits the request to the scheduler with an il_api_stream as the event target. The engine
 * thread then writes the response into the stream: server-sent events ("data: {chunk}\n\n",
 * "data: [DONE]") when streaming, else the whole JSON body when the request is done.
 * Responses are JSON text written as they are built (server/sbuf.h): a step that fails marks
 * the buffer, and the request answers an error instead of a partial 200. Error messages are
 * valid UTF-8 whatever the client sent: a message cut at its size limit is cut at a character
 * boundary, quoted client strings are clipped (il_utf8_clip), invalid bytes become U+FFFD.
 *
 * Memory: every request comes with a budget (server/budget.h) that its parsed JSON (an arena
 * scope), prompt tokens and response buffers are charged to; running out is a 413 naming
 * --max-request-memory, never an unbounded allocation. A non-streaming request asking for
 * logprobs is checked before it runs: n x max_tokens x (1 + top_logprobs) entries at
 * IL_API_LOGPROB_BYTES each must fit in the budget. /v1/tokenize's body is produced while it is
 * sent (il_api_gen: the tokens and a 16 KiB stage, not a body of ~15 bytes per token).
 * Structured output: response_format {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"}} (server/schema turns the schema into GBNF), or
 * llama-server's "grammar" (GBNF text), compiled once per request: the grammar text, the
 * parsed grammar and each choice's matcher state are charged to the request's budget. A schema
 * keyword outside the subset is a 400 naming it and its JSON path (param response_format).
 * Not for: sockets, connection limits or authentication (server/server.c).
 */
#ifndef IL_SERVER_API_H
#define IL_SERVER_API_H

#include <pthread.h>
#include <stdbool.h>

#include "engine/grammar.h"
#include "engine/sched.h"
#include "server/reqlog.h"
#include "server/sbuf.h"
#include "server/template.h"

/* What one logprob entry (a token or an alternative) is reckoned to take while a response is
 * held, for the check before a request runs: the chat format's text is ~55 bytes an entry on
 * builtin:tiny, and the buffers holding it grow by doubling (measured peak ~1.5x the text). */
#define IL_API_LOGPROB_BYTES 128

typedef struct {
  int status;         /* HTTP status */
  const char *type;   /* "invalid_request_error", "server_error", ... */
  char param[64];     /* the offending parameter ("" = none) */
  const char *code;   /* machine-readable code or NULL */
  char message[512];
} il_api_error;

/* Fills e; the message is cut at a character boundary when it is longer than its buffer. */
void il_api_error_set(il_api_error *e, int status, const char *type, const char *param, const char *code,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Appends {"error": {"message", "type", "param", "code"}} to b (b->oom on failure). */
void il_api_error_write(il_sbuf *b, const il_api_error *e);

typedef struct {
  il_engine *e;            /* borrowed */
  il_sched *sched;         /* owned by the server */
  il_template_kind tmpl;
  char model_id[256];
  int max_tokens;          /* limit on a request's max_tokens (0: the context) */
  il_request_params defaults; /* what a request leaves out (n_predict <= 0: until the context is full) */
  il_grammar_vocab *gvocab;   /* the vocabulary as a trie, for response_format and grammar (owned) */
} il_api;

/* Fills api for engine e (sched left NULL), with the vocabulary index structured output uses.
 * model_id "" = the model file's base name or the builtin:NAME. note gets the template line.
 * Errors: --chat-template unknown, IL_ERR_OOM. Release with il_api_free. */
il_status il_api_init(il_api *api, il_engine *e, const char *model_id, const char *chat_template, int max_tokens,
                      const il_request_params *defaults, char *note, size_t note_cap);
/* Frees what il_api_init allocated (after the scheduler is gone). */
void il_api_free(il_api *api);

struct il_server;

/* One request's output, shared by the engine thread (writes) and the connection (reads). */
typedef struct il_api_stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;                /* the scheduler's and the connection's */
  bool done;               /* the request's final event arrived */
  bool stream;
  int status;              /* non-streaming: HTTP status of out */
  uint64_t id;             /* the scheduler's request id */
  struct il_server *srv;
  il_budget *budget;       /* the request's (a reference): out and the choices are charged to it */
  il_sbuf out;             /* bytes to send (non-streaming: an error body) */
  size_t out_pos;
  il_sbuf *body;           /* non-streaming 200: the body, n_body segments sent in order (il_mem) */
  int n_body;
  bool glue_open, body_oom;
  bool failed;             /* a write failed: the request is cancelled and answers an error */
  bool client_gone;        /* non-streaming: the client closed the connection; cancelled (499 in the log) */
  double t_submit;         /* the request log's figures: submitted, and the final event's counts */
  int32_t n_prompt, n_gen, n_cached;
  int32_t n_drafted, n_accepted; /* --draft-model: the request's drafted tokens, of them accepted */
  double t_admitted, t_first_step; /* the final event's TTFT parts (engine/sched.h) */
  int32_t prefill_chunks;
  size_t grammar_charge;   /* bytes of the request's grammar charged to budget (given back at the end) */
  /* how to write events */
  const il_api *api;
  bool chat, include_usage;
  int logprobs;            /* -1 none; else alternatives per token */
  int n;
  char rid[48];
  long long created;
  struct il_api_choice *ch;
} il_api_stream;

/* One more reference (the connection's, for the request log). */
void il_api_stream_ref(il_api_stream *st);
/* Drops one reference; the last frees the stream. */
void il_api_stream_unref(il_api_stream *st);
/* The request log's generation fields of st into e; finish (cap bytes) holds its reasons. */
void il_api_stream_log(il_api_stream *st, il_reqlog_entry *e, char *finish, size_t cap);

/* Parses, validates and submits a generation request, charging budget b (borrowed; the stream
 * takes a reference). On success *out holds a stream with two references (the scheduler's,
 * dropped at its final event, and the caller's). On failure returns false with e filled;
 * nothing is left allocated. */
bool il_api_generate(const il_api *api, bool chat, const char *body, size_t len, il_budget *b, il_api_stream **out,
                     il_api_error *e);
/* GET /v1/models (id NULL) or /v1/models/ID: the 200 body into *out (empty on entry, its budget
 * set by the caller; on failure freed, and e filled). */
bool il_api_models(const il_api *api, const char *id, il_sbuf *out, il_api_error *e);
/* POST /v1/detokenize: {"tokens": [ids]} -> {"prompt": TEXT}, into *out as il_api_models. */
bool il_api_detokenize(const il_api *api, const char *body, size_t len, il_budget *b, il_sbuf *out, il_api_error *e);

/* A response body produced as it is read. */
typedef struct il_api_gen il_api_gen;
/* POST /v1/tokenize: {"prompt": TEXT} or {"messages": [...]}, "add_special" (default true),
 * "with_pieces". Answers {"tokens", "count", "max_model_len"[, "pieces"]}: on success *out is
 * the body's generator (free with il_api_gen_free), *size its exact length in bytes. */
bool il_api_tokenize(const il_api *api, const char *body, size_t len, il_budget *b, il_api_gen **out, size_t *size,
                     il_api_error *e);
/* Copies the next bytes of the body, at most max, into buf; 0 at the end. Can't fail: the body
 * is made from what the generator already holds. */
size_t il_api_gen_read(il_api_gen *g, char *buf, size_t max);
/* NULL is ignored. */
void il_api_gen_free(il_api_gen *g);

#endif
