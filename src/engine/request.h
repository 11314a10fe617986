/* engine/request: one generation (prompt -> tokens) on an engine, and the per-request options.
 *
 * A request is what one user asks of an engine that is already open: the prompt, how to sample
 * (il_sampler_params), how many tokens, whether to add BOS, parse control tokens or stop at
 * end of generation. These options are not engine options (il_config): the lab copies configs
 * into every sweep point and bench result, and a server holds one engine for many requests.
 * il_request_opts is the form the option table and config files fill (the prompt text
 * included), il_request_params (inferlab.h) the form a program passes.
 *
 * il_request_new runs the prompt in sequence 0; each il_request_next samples one token and
 * returns its text; the token is decoded lazily at the start of the following call, so a
 * caller that stops after n tokens never pays for an (n+1)-th forward pass. il_engine_generate
 * (the `run` loop) is this loop with a callback.
 * Not for: many requests at once (engine/sched: continuous batching), chat templates.
 */
#ifndef IL_ENGINE_REQUEST_H
#define IL_ENGINE_REQUEST_H

#include "engine/grammar.h"
#include "inferlab.h"

#define IL_REQUEST_PROMPT_MAX 65536 /* bytes of prompt text, NUL included */

/* Per-request options as the option table sees them (engine/config.c: the entries marked
 * request), with room for the prompt text. 64 KiB: keep it out of structs that are copied. */
typedef struct il_request_opts {
  il_request_params p;
  char prompt[IL_REQUEST_PROMPT_MAX];
} il_request_opts;

/* Fills p with il_request_default_params() and an empty prompt. Can't fail. */
void il_request_opts_defaults(il_request_opts *r);

/* il_request_new for a prompt already tokenized (ids[n], n >= 1, copied). */
il_status il_request_new_tokens(il_engine *e, const int32_t *ids, int32_t n, const il_request_params *p,
                                il_request **out);

/* Constrains the tokens r samples from now on to grammar state gs (borrowed, made with a
 * vocabulary index of r's engine; it must outlive r): see il_sampler_set_grammar. A grammar
 * that cannot go on ends il_request_next with the sampler's status. IL_ERR_OOM. */
il_status il_request_set_grammar(il_request *r, il_grammar_state *gs);

/* Timing and outcome of a request so far. */
typedef struct {
  int32_t n_prompt, n_gen;
  double prompt_seconds, gen_seconds;
  bool stopped_eog; /* ended on an end-of-generation token */
} il_gen_stats;
void il_request_stats(const il_request *r, il_gen_stats *out);

/* Called with each generated token and its text (possibly empty while a UTF-8 character is
 * incomplete), and once with token -1 for text still queued at the end. Return false to stop. */
typedef bool (*il_token_fn)(void *ud, int32_t token, const char *text, size_t len);

/* The `run` loop: a request for the tokenized prompt in sequence 0, each token handed to fn.
 * *stats is filled even on failure. */
il_status il_engine_generate(il_engine *e, const int32_t *prompt, int32_t n_prompt, const il_request_params *p,
                             il_token_fn fn, void *ud, il_gen_stats *stats);

#endif
