/* server/reqlog: one line per finished request, for stderr (serve's --log-format).
 *
 *   text  inferlab serve: request cmpl-3 POST /v1/completions 200 client=127.0.0.1:51230
 *         prompt=15 generated=3 cached=2 ttft_ms=12.3 queue_ms=0.1 prefill_ms=4.0 prefill_chunks=2
 *         first_decode_ms=8.2 tpot_ms=1.9 finish=length time_ms=20.1
 *   json  {"event":"request","id":"cmpl-3","method":"POST","path":"/v1/completions",
 *         "status":200,"client":"127.0.0.1:51230","prompt_tokens":15,"generated_tokens":3,
 *         "cached_tokens":2,"ttft_ms":12.3,"queue_ms":0.1,"prefill_ms":4.0,"prefill_chunks":2,
 *         "first_decode_ms":8.2,"tpot_ms":1.9,"finish_reason":"length","time_ms":20.1}
 *
 * (one line each). The token and timing fields are those of generation requests: prompt tokens
 * (per choice), tokens generated over all choices, prompt tokens found in the cache; TTFT from
 * the request's submission to the scheduler to its first token, in three parts that add up to it
 * (queue: waiting for a slot; prefill: the prompt chunks before the pass that returns the first
 * token's logits, and the steps between them; first decode: that pass and the sampling), TPOT the mean gap between a
 * choice's tokens over choices of two or more tokens; finish the choices' reasons (joined with
 * ',' when they differ). time_ms is from the request's headers to the end of its answer. A
 * path or method a client chose is escaped (text: %XX for bytes outside printable ASCII, space
 * and '%'; json: JSON escapes), so a line can never be forged or split.
 * Not for: metrics (server/metrics), the engine's log (core/log).
 */
#ifndef IL_SERVER_REQLOG_H
#define IL_SERVER_REQLOG_H

#include <stdbool.h>

#include "core/status.h"
#include "server/sbuf.h"

typedef enum { IL_REQLOG_TEXT, IL_REQLOG_JSON, IL_REQLOG_OFF } il_reqlog_format;

typedef struct {
  const char *id;      /* "cmpl-3", or NULL for a request that generated nothing */
  const char *method, *path, *client;
  int status;
  bool generation;     /* the fields below are set */
  int prompt_tokens, generated_tokens, cached_tokens;
  int drafted_tokens, accepted_tokens; /* --draft-model: written only when drafted_tokens > 0 */
  double ttft_ms;      /* < 0: no token */
  /* ttft_ms in parts (< 0: no token): submission to admission, admission to the start of the
   * forward pass that returned the first token, that pass to the token; the steps that carried
   * prompt tokens (chunked prefill), the last one included */
  double queue_ms, prefill_ms, first_decode_ms;
  int prefill_chunks;
  double tpot_ms;      /* < 0: no choice with two tokens */
  const char *finish;  /* "" when none finished */
  double time_ms;
} il_reqlog_entry;

/* "text", "json", "off" -> *out; IL_ERR_INVALID_ARG naming --log-format otherwise. */
il_status il_reqlog_parse(const char *name, il_reqlog_format *out);
/* Appends the line (with its newline) to b. */
void il_reqlog_write(il_sbuf *b, il_reqlog_format f, const il_reqlog_entry *e);

#endif
