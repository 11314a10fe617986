/* server/api: OpenAI request validation, submission, and the event -> JSON writer. */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/timer.h"
#include "memory/mem.h"
#include "server/schema.h"

typedef struct il_api_choice {
  il_sbuf text;             /* not streaming: the whole text */
  il_sbuf lp[4];            /* not streaming, logprobs as JSON text without brackets: chat: lp[0] the
                               entries; completions: tokens, token_logprobs, top_logprobs, text_offset */
  il_finish_reason finish;
  bool role_sent;           /* streaming chat: the first delta carries the role */
  size_t offset;            /* completions: text offset of the next token */
  double t_first, t_last;   /* when its first and last tokens came (the request log) */
  int n_tok;
} il_api_choice;

static atomic_ullong il__next_rid = 1;

/* ---- errors ---- */

void il_api_error_set(il_api_error *e, int status, const char *type, const char *param, const char *code,
                      const char *fmt, ...) {
  e->status = status;
  e->type = type;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  e->param[il_utf8_cut(e->param, strlen(e->param))] = 0;
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof e->message) e->message[il_utf8_cut(e->message, strlen(e->message))] = 0;
}

void il_api_error_write(il_sbuf *b, const il_api_error *e) {
  il_sbuf_puts(b, "{\"error\":{\"message\":");
  il_sbuf_json_str(b, e->message, strlen(e->message));
  il_sbuf_puts(b, ",\"type\":");
  il_sbuf_json_str(b, e->type, strlen(e->type));
  il_sbuf_puts(b, ",\"param\":");
  if (e->param[0]) il_sbuf_json_str(b, e->param, strlen(e->param));
  else il_sbuf_puts(b, "null");
  il_sbuf_puts(b, ",\"code\":");
  if (e->code) il_sbuf_json_str(b, e->code, strlen(e->code));
  else il_sbuf_puts(b, "null");
  il_sbuf_puts(b, "}}");
}

#define IL__BAD(param, ...) (il_api_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__), false)
#define IL__OOM(what) (il_api_error_set(e, 500, "server_error", NULL, "out_of_memory", "out of memory %s", what), false)

/* A budget ran out: 413 naming the limit. */
static bool il__over(il_api_error *e, const il_budget *b, const char *what) {
  il_api_error_set(e, 413, "invalid_request_error", NULL, "request_too_large",
                   "%s needs more than the %zu bytes of server memory one request may hold (--max-request-memory)",
                   what, il_budget_limit(b));
  return false;
}

/* ---- setup ---- */

il_status il_api_init(il_api *api, il_engine *e, const char *model_id, const char *chat_template, int max_tokens,
                      const il_request_params *defaults, char *note, size_t note_cap) {
  memset(api, 0, sizeof *api);
  api->e = e;
  char how[128];
  IL_TRY(il_template_for_engine(e, chat_template, &api->tmpl, how, sizeof how));
  snprintf(note, note_cap, "chat template: %s (%s)", il_template_name(api->tmpl), how);
  if (model_id && *model_id) {
    snprintf(api->model_id, sizeof api->model_id, "%s", model_id);
  } else {
    const char *m = il_engine_config(e)->model, *slash = strrchr(m, '/');
    snprintf(api->model_id, sizeof api->model_id, "%.255s", slash ? slash + 1 : m);
  }
  api->max_tokens = max_tokens > 0 && max_tokens < il_engine_n_ctx(e) ? max_tokens : il_engine_n_ctx(e);
  api->defaults = *defaults;
  return il_grammar_vocab_new(il_engine_vocab(e), &api->gvocab);
}

void il_api_free(il_api *api) {
  il_grammar_vocab_free(api->gvocab);
  api->gvocab = NULL;
}

/* ---- parsing helpers: each returns false with e set ---- */

static bool il__parse_in(const char *body, size_t len, il_budget *b, json_t **out, il_api_error *e) {
  if (!body || !len) return IL__BAD(NULL, "the request has no body: send a JSON object");
  size_t bad = il_utf8_check(body, len);
  if (bad != len) {
    il_api_error_set(e, 400, "invalid_request_error", NULL, "invalid_utf8",
                     "the request body is not valid UTF-8 (byte %zu is 0x%02X)", bad, (unsigned char)body[bad]);
    return false;
  }
  json_error_t je;
  json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!j && il_budget_over(b)) return il__over(e, b, "parsing the request body");
  if (!j) {
    il_api_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                     "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    return false;
  }
  if (!json_is_object(j)) return IL__BAD(NULL, "the request body must be a JSON object");
  *out = j;
  return true;
}

/* Parses body into *out inside arena a (begun here, on budget b; the caller ends it after the
 * last use of *out; on failure it is ended here). */
static bool il__parse(const char *body, size_t len, il_jarena *a, il_budget *b, json_t **out, il_api_error *e) {
  *out = NULL;
  il_jarena_begin(a, b);
  if (!il__parse_in(body, len, b, out, e)) {
    il_jarena_end(a);
    return false;
  }
  return true;
}

/* Absent or null: keeps *out. */
static bool il__num(json_t *o, const char *key, double lo, double hi, double *out, il_api_error *e) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_number(v)) return IL__BAD(key, "'%s' must be a number", key);
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi)) return IL__BAD(key, "'%s' is %g; it must be in [%g, %g]", key, d, lo, hi);
  *out = d;
  return true;
}

static bool il__int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *present,
                    il_api_error *e) {
  json_t *v = json_object_get(o, key);
  if (present) *present = false;
  if (!v || json_is_null(v)) return true;
  if (!json_is_integer(v)) return IL__BAD(key, "'%s' must be an integer", key);
  long long d = json_integer_value(v);
  if (d < lo || d > hi) return IL__BAD(key, "'%s' is %lld; it must be in [%lld, %lld]", key, d, lo, hi);
  *out = d;
  if (present) *present = true;
  return true;
}

static bool il__bool(json_t *o, const char *key, bool *out, il_api_error *e) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_boolean(v)) return IL__BAD(key, "'%s' must be true or false", key);
  *out = json_is_true(v);
  return true;
}

static bool il__model(const il_api *api, json_t *o, il_api_error *e) {
  json_t *v = json_object_get(o, "model");
  if (!v || json_is_null(v)) return true;
  if (!json_is_string(v)) return IL__BAD("model", "'model' must be a string");
  if (strcmp(json_string_value(v), api->model_id)) {
    char clip[80];
    il_api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model '%s' does not exist; this server serves '%s' (GET /v1/models)",
                     il_utf8_clip(json_string_value(v), clip, sizeof clip), api->model_id);
    return false;
  }
  return true;
}

/* The text of a message's content: a string, or an array of {"type": "text", "text": ...}
 * parts, joined. *owned is set when the text had to be joined (free with il_mem_free). */
static bool il__content(json_t *c, int i, const char **text, char **owned, il_api_error *e) {
  char param[48];
  snprintf(param, sizeof param, "messages[%d].content", i);
  *owned = NULL;
  if (!c || json_is_null(c)) {
    *text = "";
    return true;
  }
  if (json_is_string(c)) {
    *text = json_string_value(c);
    if (strlen(*text) != json_string_length(c)) return IL__BAD(param, "'%s' contains a NUL character", param);
    return true;
  }
  if (!json_is_array(c)) return IL__BAD(param, "'%s' must be a string or an array of text parts", param);
  il_sbuf b = {0};
  il_sbuf_puts(&b, "");
  for (size_t k = 0; k < json_array_size(c); k++) {
    json_t *p = json_array_get(c, k), *t = json_object_get(p, "type"), *x = json_object_get(p, "text");
    if (!json_is_object(p) || !json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(x)) {
      il_sbuf_free(&b);
      return IL__BAD(param, "'%s[%zu]': only {\"type\": \"text\", \"text\": ...} parts are supported", param, k);
    }
    il_sbuf_put(&b, json_string_value(x), json_string_length(x));
  }
  if (b.oom) {
    il_sbuf_free(&b);
    il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return false;
  }
  *text = *owned = b.p;
  return true;
}

/* messages -> the prompt text through the chat template (*text: il_mem, caller frees), and the
 * ranges of it that are message content (*lit: il_mem, caller frees; tokenized as text). */
static bool il__messages(const il_api *api, json_t *msgs, char **text, size_t *len, il_text_range **lit,
                         size_t *n_lit, il_api_error *e) {
  if (!json_is_array(msgs) || json_array_size(msgs) == 0)
    return IL__BAD("messages", "'messages' must be a non-empty array of {\"role\", \"content\"}");
  size_t n = json_array_size(msgs);
  if (n > 4096) return IL__BAD("messages", "'messages' has %zu entries; at most 4096", n);
  il_chat_msg *m = il_mem_calloc(IL_MEM_SERVER, sizeof *m * n, "chat messages");
  char **owned = il_mem_calloc(IL_MEM_SERVER, sizeof *owned * n, "chat messages");
  bool ok = m && owned;
  if (!ok) il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; ok && i < n; i++) {
    json_t *msg = json_array_get(msgs, i), *role = json_object_get(msg, "role");
    char param[40];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(msg)) ok = IL__BAD(param, "'%s' must be an object", param);
    else if (!json_is_string(role)) ok = IL__BAD(param, "'%s.role' must be a string", param);
    else {
      m[i].role = json_string_value(role);
      ok = il__content(json_object_get(msg, "content"), (int)i, &m[i].content, &owned[i], e);
    }
  }
  if (ok) {
    il_status st = il_template_render_parts(api->tmpl, m, (int)n, true, text, len, lit, n_lit);
    if (st == IL_ERR_INVALID_ARG) ok = IL__BAD("messages", "%s", il_error_detail());
    else if (st != IL_OK) {
      il_api_error_set(e, 500, "server_error", NULL, NULL, "%s", il_error_detail());
      ok = false;
    }
  }
  for (size_t i = 0; owned && i < n; i++) il_mem_free(owned[i]);
  il_mem_free(owned);
  il_mem_free(m);
  return ok;
}

/* Token arrays are charged to the request's budget while they live. */
static size_t il__tokens_bytes(size_t n) { return sizeof(int32_t) * (n + 1) + 64; }

static void il__tokens_free(il_budget *b, int32_t *tokens, int32_t n) {
  if (!tokens) return;
  il_mem_free(tokens);
  il_budget_give(b, il__tokens_bytes((size_t)n));
}

/* The tokenizer's scratch while it runs (memory/ category workspace, outside the budgets) is
 * about 50 bytes per byte of text (a 1 MiB prompt: ~55 MB peak on builtin:tiny), so texts of
 * IL__BIG_TEXT or more are tokenized at most IL__BIG_TOKENIZE at a time: ten concurrent 1 MiB
 * prompts then hold two of those at once, not ten (they would share the CPUs anyway). */
#define IL__BIG_TEXT ((size_t)64 << 10)
#define IL__BIG_TOKENIZE 2
static pthread_mutex_t il__gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t il__gate_cv = PTHREAD_COND_INITIALIZER;
static int il__gate_busy;

static bool il__tokenize(const il_api *api, il_budget *b, const char *text, size_t len, bool add_special,
                         bool parse_special, const il_text_range *lit, size_t n_lit, int32_t **tokens, int32_t *n,
                         il_api_error *e) {
  size_t nt = 0;
  const bool big = len >= IL__BIG_TEXT;
  if (big) {
    pthread_mutex_lock(&il__gate_mu);
    while (il__gate_busy >= IL__BIG_TOKENIZE) pthread_cond_wait(&il__gate_cv, &il__gate_mu);
    il__gate_busy++;
    pthread_mutex_unlock(&il__gate_mu);
  }
  il_status st = il_tokenize_literal_alloc(il_engine_vocab(api->e), text, len, add_special, parse_special, lit, n_lit, tokens, &nt);
  if (big) {
    pthread_mutex_lock(&il__gate_mu);
    il__gate_busy--;
    pthread_cond_signal(&il__gate_cv);
    pthread_mutex_unlock(&il__gate_mu);
  }
  if (st != IL_OK) {
    il_api_error_set(e, 500, "server_error", NULL, NULL, "tokenizer: %s", il_error_detail());
    return false;
  }
  if (nt > INT32_MAX || !il_budget_take(b, il__tokens_bytes(nt))) {
    il_mem_free(*tokens);
    *tokens = NULL;
    return il__over(e, b, "the prompt's tokens");
  }
  *n = (int32_t)nt;
  return true;
}

/* A chat's messages through the template and the tokenizer (content as text). */
static bool il__chat_tokens(const il_api *api, il_budget *b, json_t *msgs, bool add_special, int32_t **tokens,
                            int32_t *n, il_api_error *e) {
  char *text = NULL;
  size_t tl = 0, nl = 0;
  il_text_range *lit = NULL;
  if (!il__messages(api, msgs, &text, &tl, &lit, &nl, e)) return false;
  bool ok = il_budget_take(b, tl + 64) ? true : il__over(e, b, "the rendered chat");
  if (ok) {
    ok = il__tokenize(api, b, text, tl, add_special, true, lit, nl, tokens, n, e);
    il_budget_give(b, tl + 64);
  }
  il_mem_free(lit);
  il_mem_free(text);
  return ok;
}

/* The prompt of a completions request: a string, [string], or [token ids]. */
static bool il__prompt(const il_api *api, il_budget *b, json_t *p, int32_t **tokens, int32_t *n, il_api_error *e) {
  const il_request_params *rp = &api->defaults;
  if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
  if (json_is_string(p))
    return il__tokenize(api, b, json_string_value(p), json_string_length(p), !rp->no_bos, !rp->no_parse_special,
                        NULL, 0, tokens, n, e);
  if (!json_is_array(p) || json_array_size(p) == 0)
    return IL__BAD("prompt", "'prompt' must be a string or a non-empty array of token ids");
  size_t k = json_array_size(p);
  const int32_t nv = il_vocab_size(il_engine_vocab(api->e));
  for (size_t i = 0; i < k; i++) {
    json_t *t = json_array_get(p, i);
    if (json_is_string(t)) return IL__BAD("prompt", "'prompt': one prompt per request (an array of several strings was sent)");
    if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= nv)
      return IL__BAD("prompt", "'prompt[%zu]' must be a token id in [0, %d)", i, nv);
  }
  if (!il_budget_take(b, il__tokens_bytes(k))) return il__over(e, b, "the prompt's tokens");
  *tokens = il_mem_alloc(IL_MEM_SERVER, sizeof(int32_t) * k, "prompt tokens");
  if (!*tokens) {
    il_budget_give(b, il__tokens_bytes(k));
    il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return false;
  }
  for (size_t i = 0; i < k; i++) (*tokens)[i] = (int32_t)json_integer_value(json_array_get(p, i));
  *n = (int32_t)k;
  return true;
}

/* Sampling and stopping parameters shared by both endpoints. */
static bool il__params(const il_api *api, json_t *o, bool chat, il_sched_params *p, bool *stream, bool *usage,
                       il_api_error *e) {
  il_sched_params_from_request(&api->defaults, p);
  double temp = p->sampling.temp, top_p = p->sampling.top_p, min_p = p->sampling.min_p,
         rp = p->sampling.repeat_penalty, pen = 0;
  long long v = 0;
  bool present = false;
  if (!il__num(o, "temperature", 0, 2, &temp, e) || !il__num(o, "top_p", 0, 1, &top_p, e) ||
      !il__num(o, "min_p", 0, 1, &min_p, e) || !il__num(o, "repeat_penalty", 0, 100, &rp, e))
    return false;
  if (top_p <= 0) return IL__BAD("top_p", "'top_p' must be greater than 0");
  if (rp <= 0) return IL__BAD("repeat_penalty", "'repeat_penalty' is %g; it must be in (0, 100] (1 = off)", rp);
  p->sampling.temp = (float)temp;
  p->sampling.top_p = (float)top_p;
  p->sampling.min_p = (float)min_p;
  p->sampling.repeat_penalty = (float)rp;
  if (!il__int(o, "top_k", 0, 1 << 30, &v, &present, e)) return false;
  if (present) p->sampling.top_k = (int32_t)v;
  for (int i = 0; i < 2; i++) {
    const char *k = i ? "frequency_penalty" : "presence_penalty";
    pen = 0;
    if (!il__num(o, k, -2, 2, &pen, e)) return false;
    if (pen != 0) return IL__BAD(k, "'%s' is not supported (use 0, or repeat_penalty)", k);
  }
  if (!il__int(o, "seed", INT64_MIN, INT64_MAX, &v, &present, e)) return false;
  p->sampling.seed = present ? (uint64_t)v
                             : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ atomic_fetch_add(&il__next_rid, 0) * 0xBF58476D1CE4E5B9ull;
  if (!il__int(o, "n", 1, IL_SCHED_MAX_N, &v, &present, e)) return false;
  if (present) p->n = (int32_t)v;
  /* max_tokens: 1..the server's limit */
  bool have_max = false;
  long long mt = 0;
  for (int i = 0; i < 2; i++) {
    const char *k = i ? "max_completion_tokens" : "max_tokens";
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) continue;
    if (!json_is_integer(x)) return IL__BAD(k, "'%s' must be an integer", k);
    mt = json_integer_value(x);
    if (mt < 1) return IL__BAD(k, "'%s' is %lld; it must be at least 1", k, mt);
    if (mt > api->max_tokens)
      return IL__BAD(k, "'%s' is %lld; this server allows at most %d (--max-tokens, the context)", k, mt,
                     api->max_tokens);
    have_max = true;
  }
  p->max_tokens = have_max ? (int32_t)mt : -1; /* -1: the default, resolved with the prompt length */
  /* stop: a string or up to 4 strings */
  json_t *stop = json_object_get(o, "stop");
  if (stop && !json_is_null(stop)) {
    json_t *one[1] = {stop};
    size_t n = json_is_string(stop) ? 1 : json_is_array(stop) ? json_array_size(stop) : 0;
    if (!json_is_string(stop) && !json_is_array(stop)) return IL__BAD("stop", "'stop' must be a string or an array of strings");
    if (n > IL_SCHED_MAX_STOP) return IL__BAD("stop", "'stop' has %zu strings; at most %d", n, IL_SCHED_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
      json_t *s = json_is_string(stop) ? one[0] : json_array_get(stop, i);
      if (!json_is_string(s)) return IL__BAD("stop", "'stop[%zu]' must be a string", i);
      size_t l = json_string_length(s);
      if (l == 0 || l >= IL_SCHED_MAX_STOP_LEN || strlen(json_string_value(s)) != l)
        return IL__BAD("stop", "'stop[%zu]' must have 1 to %d bytes and no NUL", i, IL_SCHED_MAX_STOP_LEN - 1);
      memcpy(p->stop[p->n_stop++], json_string_value(s), l + 1);
    }
  }
  *stream = false;
  *usage = false;
  if (!il__bool(o, "stream", stream, e)) return false;
  json_t *so = json_object_get(o, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so)) return IL__BAD("stream_options", "'stream_options' must be an object");
    if (!il__bool(so, "include_usage", usage, e)) return false;
  }
  /* logprobs: chat: a boolean plus top_logprobs; completions: the number of alternatives */
  if (chat) {
    bool lp = false;
    if (!il__bool(o, "logprobs", &lp, e) || !il__int(o, "top_logprobs", 0, IL_SCHED_MAX_TOP_LOGPROBS, &v, &present, e))
      return false;
    if (present && !lp) return IL__BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    p->logprobs = lp ? (present ? (int32_t)v : 0) : -1;
  } else {
    if (!il__int(o, "logprobs", 0, IL_SCHED_MAX_TOP_LOGPROBS, &v, &present, e)) return false;
    p->logprobs = present ? (int32_t)v : -1;
    bool echo = false;
    if (!il__bool(o, "echo", &echo, e)) return false;
    if (echo) return IL__BAD("echo", "'echo' is not supported");
    json_t *suffix = json_object_get(o, "suffix");
    if (suffix && !json_is_null(suffix) && !(json_is_string(suffix) && json_string_length(suffix) == 0))
      return IL__BAD("suffix", "'suffix' is not supported");
    if (!il__int(o, "best_of", 1, 1, &v, &present, e)) return false;
  }
  json_t *tools = json_object_get(o, "tools");
  /* function calling is not implemented: a request that asks for it is refused, never answered
   * as if it had not asked (an empty tools list or tool_choice "none" asks for nothing) */
  if (tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0))
    return IL__BAD("tools", "'tools' is not supported (this server does not call functions)");
  json_t *tc = json_object_get(o, "tool_choice");
  if (tc && !json_is_null(tc) && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none")))
    return IL__BAD("tool_choice", "'tool_choice' is not supported (only \"none\"; this server does not call functions)");
  static const char *const legacy[] = {"functions", "function_call"};
  for (int i = 0; i < 2; i++) {
    json_t *f = json_object_get(o, legacy[i]);
    if (f && !json_is_null(f) && !(i == 1 && json_is_string(f) && !strcmp(json_string_value(f), "none")))
      return IL__BAD(legacy[i], "'%s' is not supported (this server does not call functions)", legacy[i]);
  }
  json_t *bias = json_object_get(o, "logit_bias");
  if (bias && !json_is_null(bias) && !(json_is_object(bias) && json_object_size(bias) == 0))
    return IL__BAD("logit_bias", "'logit_bias' is not supported (use --ignore-eos to suppress end of generation)");
  return true;
}

/* response_format and grammar -> p->grammar (NULL for plain text), charged to b (*charge: the
 * bytes, given back when the stream ends). Runs last among the checks, so nothing else can
 * fail after it has compiled a grammar. */
static bool il__structured(const il_api *api, json_t *o, il_budget *b, int32_t n_choices, il_sched_params *p,
                           size_t *charge, il_api_error *e) {
  p->grammar = NULL;
  p->grammar_vocab = api->gvocab;
  *charge = 0;
  json_t *rf = json_object_get(o, "response_format"), *gr = json_object_get(o, "grammar");
  const char *kind = "text";
  json_t *schema = NULL;
  if (rf && !json_is_null(rf)) {
    json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t))
      return IL__BAD("response_format", "'response_format' must be an object with a string 'type'");
    kind = json_string_value(t);
    if (!strcmp(kind, "json_schema")) {
      json_t *js = json_object_get(rf, "json_schema");
      if (!json_is_object(js)) return IL__BAD("response_format", "'response_format.json_schema' must be an object");
      json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
      if (name && !json_is_string(name)) return IL__BAD("response_format", "'response_format.json_schema.name' must be a string");
      if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return IL__BAD("response_format", "'response_format.json_schema.strict' must be a boolean");
      schema = json_object_get(js, "schema");
      if (!schema) schema = json_true(); /* no schema: any JSON value (OpenAI: any JSON) */
      if (!json_is_object(schema) && !json_is_true(schema))
        return IL__BAD("response_format", "'response_format.json_schema.schema' must be an object");
    } else if (strcmp(kind, "json_object") && strcmp(kind, "text")) {
      return IL__BAD("response_format", "'response_format.type' is \"%.64s\"; one of \"text\", \"json_object\", "
                     "\"json_schema\"", kind);
    }
  }
  if (gr && !json_is_null(gr)) {
    if (!json_is_string(gr)) return IL__BAD("grammar", "'grammar' must be a string (GBNF)");
    if (strcmp(kind, "text")) return IL__BAD("grammar", "'grammar' and a JSON 'response_format' together: give one");
    if (json_string_length(gr) == 0) return true;
  } else if (!strcmp(kind, "text")) {
    return true;
  }
  il_sbuf gbnf = {.budget = b};
  il_status st = IL_OK;
  const char *param = gr && !json_is_null(gr) ? "grammar" : "response_format";
  if (!strcmp(param, "grammar")) il_sbuf_put(&gbnf, json_string_value(gr), json_string_length(gr));
  else if (!strcmp(kind, "json_object")) st = il_schema_any_gbnf(&gbnf);
  else st = il_schema_to_gbnf(schema, &gbnf);
  if (st == IL_OK && gbnf.oom) st = IL_ERR_OOM;
  if (st == IL_OK) st = il_grammar_parse(gbnf.p, gbnf.len, param, &p->grammar);
  il_sbuf_free(&gbnf);
  if (st == IL_OK) {
    *charge = il_grammar_bytes(p->grammar) + (size_t)n_choices * il_grammar_state_bytes();
    if (!il_budget_take(b, *charge)) {
      il_grammar_free(p->grammar);
      p->grammar = NULL;
      *charge = 0;
      return il__over(e, b, "the grammar and its matcher states");
    }
    return true;
  }
  if (st == IL_ERR_OOM || il_budget_over(b)) return il__over(e, b, "compiling the grammar");
  if (st == IL_ERR_FORMAT && strcmp(param, "grammar"))
    return IL__BAD(param, "the schema's grammar does not parse (a bug; please report it): %s", il_error_detail());
  return IL__BAD(param, "%s", il_error_detail());
}

/* ---- the stream: events -> JSON text ---- */

static void il__choice_free(il_api_choice *ch) {
  il_sbuf_free(&ch->text);
  for (int k = 0; k < 4; k++) il_sbuf_free(&ch->lp[k]);
}

static void il__body_free(il_api_stream *st) {
  for (int k = 0; st->body && k < st->n_body; k++) il_sbuf_free(&st->body[k]);
  il_mem_free(st->body);
  st->body = NULL;
  st->n_body = 0;
}

void il_api_stream_ref(il_api_stream *st) {
  pthread_mutex_lock(&st->mu);
  st->refs++;
  pthread_mutex_unlock(&st->mu);
}

void il_api_stream_log(il_api_stream *st, il_reqlog_entry *e, char *finish, size_t cap) {
  pthread_mutex_lock(&st->mu);
  e->id = st->rid;
  e->generation = true;
  e->prompt_tokens = st->n_prompt;
  e->generated_tokens = st->n_gen;
  e->cached_tokens = st->n_cached;
  e->drafted_tokens = st->n_drafted;
  e->accepted_tokens = st->n_accepted;
  double first = 0, tpot = 0;
  int n_tpot = 0;
  unsigned seen = 0;
  finish[0] = 0;
  for (int i = 0; i < st->n; i++) {
    const il_api_choice *ch = &st->ch[i];
    if (ch->n_tok && (!first || ch->t_first < first)) first = ch->t_first;
    if (ch->n_tok > 1) tpot += (ch->t_last - ch->t_first) / (ch->n_tok - 1), n_tpot++;
    /* each reason once, in the order the choices show them */
    if (ch->finish != IL_FINISH_NONE && !(seen & (1u << ch->finish))) {
      seen |= 1u << ch->finish;
      const size_t fl = strlen(finish);
      snprintf(finish + fl, cap - fl, fl ? ",%s" : "%s", il_finish_name(ch->finish));
    }
  }
  e->ttft_ms = first ? (first - st->t_submit) * 1e3 : -1;
  /* the parts from the same clock readings, so they add up to ttft_ms exactly: the queue from this
   * side's submission, the first decode to this side's first token */
  const bool parts = first && st->t_admitted > 0 && st->t_first_step > 0;
  e->queue_ms = parts ? (st->t_admitted - st->t_submit) * 1e3 : -1;
  e->prefill_ms = parts ? (st->t_first_step - st->t_admitted) * 1e3 : -1;
  e->first_decode_ms = parts ? (first - st->t_first_step) * 1e3 : -1;
  e->prefill_chunks = parts ? st->prefill_chunks : -1;
  e->tpot_ms = n_tpot ? tpot / n_tpot * 1e3 : -1;
  e->finish = finish;
  pthread_mutex_unlock(&st->mu);
}

void il_api_stream_unref(il_api_stream *st) {
  pthread_mutex_lock(&st->mu);
  int left = --st->refs;
  pthread_mutex_unlock(&st->mu);
  if (left) return;
  for (int i = 0; st->ch && i < st->n; i++) il__choice_free(&st->ch[i]);
  il_mem_free(st->ch);
  il__body_free(st);
  il_sbuf_free(&st->out);
  il_budget_give(st->budget, st->grammar_charge);
  il_budget_unref(st->budget);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  il_mem_free(st);
}

/* A token's text with control tokens shown, as the detokenizer gives it (may be half a
 * character). */
static size_t il__piece(const il_api *api, int32_t id, char *buf, size_t cap) {
  size_t n = il_vocab_token_piece(il_engine_vocab(api->e), id, true, buf, cap);
  return n > cap ? cap : n;
}

static void il__bytes(il_sbuf *b, const char *p, size_t n) {
  il_sbuf_puts(b, "[");
  for (size_t i = 0; i < n; i++) il_sbuf_printf(b, i ? ",%u" : "%u", (unsigned char)p[i]);
  il_sbuf_puts(b, "]");
}

/* One token's logprobs in the chat format: {"token", "logprob", "bytes", "top_logprobs"}. */
static void il__chat_lp(il_sbuf *b, const il_api *api, const il_sched_event *ev) {
  char buf[256];
  size_t n = il__piece(api, ev->token, buf, sizeof buf);
  il_sbuf_puts(b, "{\"token\":");
  il_sbuf_json_str(b, buf, n);
  il_sbuf_puts(b, ",\"logprob\":");
  il_sbuf_json_float(b, ev->logprob);
  il_sbuf_puts(b, ",\"bytes\":");
  il__bytes(b, buf, n);
  il_sbuf_puts(b, ",\"top_logprobs\":[");
  for (int i = 0; i < ev->n_top; i++) {
    n = il__piece(api, ev->top_ids[i], buf, sizeof buf);
    il_sbuf_puts(b, i ? ",{\"token\":" : "{\"token\":");
    il_sbuf_json_str(b, buf, n);
    il_sbuf_puts(b, ",\"logprob\":");
    il_sbuf_json_float(b, ev->top_logprobs[i]);
    il_sbuf_puts(b, ",\"bytes\":");
    il__bytes(b, buf, n);
    il_sbuf_puts(b, "}");
  }
  il_sbuf_puts(b, "]}");
}

/* The alternatives of one token in the completions format: {piece: logprob, ...}; a piece that
 * repeats (two tokens with the same text) keeps its first, most likely, entry. */
static void il__cmpl_top(il_sbuf *b, const il_api *api, const il_sched_event *ev) {
  char bufs[IL_SCHED_MAX_TOP_LOGPROBS][256];
  size_t lens[IL_SCHED_MAX_TOP_LOGPROBS];
  int k = 0;
  il_sbuf_puts(b, "{");
  for (int i = 0; i < ev->n_top && i < IL_SCHED_MAX_TOP_LOGPROBS; i++) {
    lens[k] = il__piece(api, ev->top_ids[i], bufs[k], sizeof bufs[k]);
    bool dup = false;
    for (int j = 0; j < k && !dup; j++) dup = lens[j] == lens[k] && !memcmp(bufs[j], bufs[k], lens[k]);
    if (dup) continue;
    if (k) il_sbuf_puts(b, ",");
    il_sbuf_json_str(b, bufs[k], lens[k]);
    il_sbuf_puts(b, ":");
    il_sbuf_json_float(b, ev->top_logprobs[i]);
    k++;
  }
  il_sbuf_puts(b, "}");
}

/* Appends one token to the four completions lists (each comma-separated, no brackets). */
static void il__cmpl_lp_add(il_sbuf lp[4], const il_api *api, const il_sched_event *ev, size_t offset) {
  char buf[256];
  size_t n = il__piece(api, ev->token, buf, sizeof buf);
  for (int k = 0; k < 4; k++)
    if (lp[k].len) il_sbuf_puts(&lp[k], ",");
  il_sbuf_json_str(&lp[0], buf, n);
  il_sbuf_json_float(&lp[1], ev->logprob);
  il__cmpl_top(&lp[2], api, ev);
  il_sbuf_printf(&lp[3], "%zu", offset);
}

static void il__cmpl_lp_write(il_sbuf *b, il_sbuf lp[4]) {
  static const char *const names[4] = {"{\"tokens\":[", "],\"token_logprobs\":[", "],\"top_logprobs\":[",
                                       "],\"text_offset\":["};
  for (int k = 0; k < 4; k++) {
    il_sbuf_puts(b, names[k]);
    il_sbuf_put(b, lp[k].p ? lp[k].p : "", lp[k].len);
    if (lp[k].oom) b->oom = true;
  }
  il_sbuf_puts(b, "]}");
}

static void il__usage(il_sbuf *b, const il_sched_event *ev) {
  il_sbuf_printf(b,
                 "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
                 (int)ev->n_prompt, (int)ev->n_gen, (int)(ev->n_prompt + ev->n_gen), (int)ev->n_cached);
}

/* {"id", "object", "created", "model", then the caller's fields and the closing brace. */
static void il__frame(il_sbuf *b, const il_api_stream *st, const char *object) {
  il_sbuf_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", st->rid, object,
                 st->created);
  il_sbuf_json_str(b, st->api->model_id, strlen(st->api->model_id));
}

static void il__reason(il_sbuf *b, il_finish_reason r) {
  if (r == IL_FINISH_NONE) il_sbuf_puts(b, "null");
  else il_sbuf_printf(b, "\"%s\"", il_finish_name(r));
}

/* Moves a finished chunk into the stream's output whole, or marks the output failed: a client
 * never reads half a chunk. */
static void il__emit_chunk(il_api_stream *st, il_sbuf *c) {
  if (c->oom) st->out.oom = true;
  else il_sbuf_put(&st->out, c->p, c->len);
  il_sbuf_free(c);
}

static void il__stream_event(il_api_stream *st, const il_sched_event *ev) {
  il_api_choice *ch = &st->ch[ev->choice];
  const bool lp = st->logprobs >= 0 && ev->token >= 0;
  if (!ev->len && !lp && ev->finish == IL_FINISH_NONE && (!st->chat || ch->role_sent)) return;
  il_sbuf chunk = {0}, *b = &chunk;
  il_sbuf_puts(b, "data: ");
  il__frame(b, st, st->chat ? "chat.completion.chunk" : "text_completion");
  il_sbuf_printf(b, ",\"choices\":[{\"index\":%d,", (int)ev->choice);
  if (st->chat) {
    il_sbuf_puts(b, "\"delta\":{");
    const bool content = ev->len || ev->finish == IL_FINISH_NONE;
    if (!ch->role_sent) il_sbuf_puts(b, content ? "\"role\":\"assistant\"," : "\"role\":\"assistant\"");
    ch->role_sent = true;
    if (content) {
      il_sbuf_puts(b, "\"content\":");
      il_sbuf_json_str(b, ev->text, ev->len);
    }
    il_sbuf_puts(b, "},\"logprobs\":");
    if (lp) {
      il_sbuf_puts(b, "{\"content\":[");
      il__chat_lp(b, st->api, ev);
      il_sbuf_puts(b, "]}");
    } else {
      il_sbuf_puts(b, "null");
    }
  } else {
    il_sbuf_puts(b, "\"text\":");
    il_sbuf_json_str(b, ev->text, ev->len);
    il_sbuf_puts(b, ",\"logprobs\":");
    if (lp) {
      il_sbuf one[4] = {{0}};
      il__cmpl_lp_add(one, st->api, ev, ch->offset);
      il__cmpl_lp_write(b, one);
      for (int k = 0; k < 4; k++) il_sbuf_free(&one[k]);
    } else {
      il_sbuf_puts(b, "null");
    }
    ch->offset += ev->len;
  }
  il_sbuf_puts(b, ",\"finish_reason\":");
  il__reason(b, ev->finish);
  il_sbuf_puts(b, "}]}\n\n");
  il__emit_chunk(st, b);
}

static bool il__choice_oom(const il_api_choice *ch) {
  return ch->text.oom || ch->lp[0].oom || ch->lp[1].oom || ch->lp[2].oom || ch->lp[3].oom;
}

static void il__collect_event(il_api_stream *st, const il_sched_event *ev) {
  il_api_choice *ch = &st->ch[ev->choice];
  if (st->logprobs >= 0 && ev->token >= 0) {
    if (st->chat) {
      if (ch->lp[0].len) il_sbuf_puts(&ch->lp[0], ",");
      il__chat_lp(&ch->lp[0], st->api, ev);
    } else {
      il__cmpl_lp_add(ch->lp, st->api, ev, ch->offset);
    }
  }
  /* kept as escaped JSON string content: the body is sent from these buffers as they are
   * (the scheduler's event text is whole UTF-8 characters, so escaping per event is escaping
   * the whole) */
  il_sbuf_json_chars(&ch->text, ev->text, ev->len);
  ch->offset += ev->len;
}

/* The non-streaming body as segments sent one after another without being copied together:
 * short glue text written here, and each choice's text and logprob buffers moved in. */
#define IL__MAX_SEGS (2 + IL_SCHED_MAX_N * 12) /* a choice: at most 11 (text, 4 lists, glue between) */

static il_sbuf *il__seg_glue(il_api_stream *st) {
  if (st->glue_open) return &st->body[st->n_body - 1];
  il_sbuf *g = &st->body[st->n_body++];
  *g = (il_sbuf){.budget = st->budget};
  st->glue_open = true;
  return g;
}

static void il__seg_move(il_api_stream *st, il_sbuf *from) {
  if (from->oom) st->body_oom = true;
  if (!from->len) {
    il_sbuf_free(from);
    return;
  }
  st->body[st->n_body++] = *from;
  *from = (il_sbuf){.budget = st->budget};
  st->glue_open = false;
}

static void il__body(il_api_stream *st, const il_sched_event *ev) {
  st->body = il_mem_calloc(IL_MEM_SERVER, sizeof *st->body * IL__MAX_SEGS, "response segments");
  if (!st->body) {
    st->body_oom = true;
    return;
  }
  il__frame(il__seg_glue(st), st, st->chat ? "chat.completion" : "text_completion");
  il_sbuf_puts(il__seg_glue(st), ",\"choices\":[");
  for (int i = 0; i < st->n; i++) {
    il_api_choice *ch = &st->ch[i];
    il_sbuf *g = il__seg_glue(st);
    il_sbuf_printf(g, i ? ",{\"index\":%d," : "{\"index\":%d,", i);
    il_sbuf_puts(g, st->chat ? "\"message\":{\"role\":\"assistant\",\"content\":\"" : "\"text\":\"");
    il__seg_move(st, &ch->text);
    g = il__seg_glue(st);
    il_sbuf_puts(g, st->chat ? "\"},\"logprobs\":" : "\",\"logprobs\":");
    if (st->logprobs < 0) {
      il_sbuf_puts(g, "null");
    } else if (st->chat) {
      il_sbuf_puts(g, "{\"content\":[");
      il__seg_move(st, &ch->lp[0]);
      il_sbuf_puts(il__seg_glue(st), "]}");
    } else {
      static const char *const names[4] = {"{\"tokens\":[", "],\"token_logprobs\":[", "],\"top_logprobs\":[",
                                           "],\"text_offset\":["};
      for (int k = 0; k < 4; k++) {
        il_sbuf_puts(il__seg_glue(st), names[k]);
        il__seg_move(st, &ch->lp[k]);
      }
      il_sbuf_puts(il__seg_glue(st), "]}");
    }
    g = il__seg_glue(st);
    il_sbuf_puts(g, ",\"finish_reason\":");
    il__reason(g, ch->finish);
    il_sbuf_puts(g, "}");
    il__choice_free(ch);
  }
  il_sbuf *g = il__seg_glue(st);
  il_sbuf_puts(g, "],\"usage\":");
  il__usage(g, ev);
  il_sbuf_puts(g, "}");
  for (int k = 0; k < st->n_body; k++)
    if (st->body[k].oom) st->body_oom = true;
}

/* A failure the client must hear about instead of the body: whatever was built is dropped. */
static void il__fail_body(il_api_stream *st, const il_api_error *e) {
  for (int i = 0; i < st->n; i++) il__choice_free(&st->ch[i]);
  il__body_free(st);
  il_sbuf_free(&st->out);
  st->status = e->status;
  il_api_error_write(&st->out, e);
}

static void il__final(il_api_stream *st, const il_sched_event *ev) {
  if (st->stream) {
    if (st->failed) return; /* the stream ends without [DONE]: the client knows it is incomplete */
    il_sbuf c = {0};
    if (st->include_usage) {
      il_sbuf_puts(&c, "data: ");
      il__frame(&c, st, st->chat ? "chat.completion.chunk" : "text_completion");
      il_sbuf_puts(&c, ",\"choices\":[],\"usage\":");
      il__usage(&c, ev);
      il_sbuf_puts(&c, "}\n\n");
    }
    il_sbuf_puts(&c, "data: [DONE]\n\n");
    il__emit_chunk(st, &c);
    return;
  }
  il_finish_reason worst = IL_FINISH_NONE;
  for (int i = 0; i < st->n; i++)
    if (st->ch[i].finish == IL_FINISH_ERROR || st->ch[i].finish == IL_FINISH_CANCELLED) worst = st->ch[i].finish;
  il_api_error e;
  if (st->failed && il_budget_over(st->budget)) {
    il__over(&e, st->budget, "the response");
    e.code = "response_too_large";
  } else if (st->failed) {
    il_api_error_set(&e, 500, "server_error", NULL, "out_of_memory", "out of memory building the response");
  } else if (st->client_gone) {
    il_api_error_set(&e, 499, "invalid_request_error", NULL, "client_closed", "the client closed the connection");
  } else if (worst != IL_FINISH_NONE) {
    if (worst == IL_FINISH_ERROR) il_api_error_set(&e, 500, "server_error", NULL, "engine_error", "the engine failed while generating");
    else il_api_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
  } else {
    st->status = 200;
    il__body(st, ev);
    if (!st->body_oom) return;
    if (il_budget_over(st->budget)) {
      il__over(&e, st->budget, "the response");
      e.code = "response_too_large";
    } else {
      il_api_error_set(&e, 500, "server_error", NULL, "out_of_memory", "out of memory building the response");
    }
  }
  il__fail_body(st, &e);
}

/* The scheduler's callback (engine thread). A write that fails ends the request: it is
 * cancelled, and its answer is an error, never a partial body. */
static void il__on_event(void *ud, const il_sched_event *ev) {
  il_api_stream *st = ud;
  pthread_mutex_lock(&st->mu);
  if (!ev->done && ev->token >= 0) {
    il_api_choice *ch = &st->ch[ev->choice];
    ch->t_last = il_time_now();
    if (!ch->n_tok++) ch->t_first = ch->t_last;
  }
  if (ev->done) {
    st->n_prompt = ev->n_prompt;
    st->n_gen = ev->n_gen;
    st->n_cached = ev->n_cached;
    st->n_drafted = ev->n_drafted;
    st->n_accepted = ev->n_accepted;
    st->t_admitted = ev->t_admitted;
    st->t_first_step = ev->t_first_step;
    st->prefill_chunks = ev->prefill_chunks;
    il__final(st, ev);
    st->done = true;
  } else if (!st->failed) {
    if (ev->finish != IL_FINISH_NONE) st->ch[ev->choice].finish = ev->finish;
    if (st->stream) il__stream_event(st, ev);
    else il__collect_event(st, ev);
    if (st->out.oom || il__choice_oom(&st->ch[ev->choice])) {
      st->failed = true;
      il_sched_cancel(st->api->sched, st->id);
    }
  }
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  if (ev->done) il_api_stream_unref(st);
}

/* ---- endpoints ---- */

bool il_api_generate(const il_api *api, bool chat, const char *body, size_t len, il_budget *b, il_api_stream **out,
                     il_api_error *e) {
  *out = NULL;
  json_t *o = NULL;
  il_jarena arena;
  if (!il__parse(body, len, &arena, b, &o, e)) return false;
  static const il_sched_params zero;
  il_sched_params p = zero;
  size_t grammar_charge = 0;
  bool stream = false, usage = false, ok = il__model(api, o, e) && il__params(api, o, chat, &p, &stream, &usage, e);
  int32_t *tokens = NULL, n = 0;
  if (ok && chat) {
    ok = il__chat_tokens(api, b, json_object_get(o, "messages"), !api->defaults.no_bos, &tokens, &n, e);
  } else if (ok) {
    json_t *pr = json_object_get(o, "prompt");
    ok = pr ? il__prompt(api, b, pr, &tokens, &n, e) : IL__BAD("prompt", "'prompt' is required");
  }
  if (ok) ok = il__structured(api, o, b, p.n, &p, &grammar_charge, e);
  json_decref(o);
  il_jarena_end(&arena); /* the request's JSON is gone from here on */
  if (ok && n == 0) ok = IL__BAD(chat ? "messages" : "prompt", "the prompt has no tokens");
  if (ok && n >= il_engine_n_ctx(api->e)) {
    il_api_error_set(e, 400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                     "the prompt has %d tokens; this model's context is %d tokens per sequence", n, il_engine_n_ctx(api->e));
    ok = false;
  }
  if (ok && p.max_tokens < 0) {
    int32_t room = il_engine_n_ctx(api->e) - n;
    int32_t d = api->defaults.n_predict > 0 ? api->defaults.n_predict : room;
    p.max_tokens = d < room ? d : room;
  }
  /* a whole response with logprobs is held until it is sent: refuse one that cannot fit before
   * computing it (a stream sends as it goes) */
  if (ok && !stream && p.logprobs >= 0) {
    const unsigned long long entries = (unsigned long long)p.n * (unsigned long long)p.max_tokens * (1ull + (unsigned)p.logprobs),
                             most = il_budget_limit(b) / IL_API_LOGPROB_BYTES;
    if (entries > most) {
      il_api_error_set(e, 400, "invalid_request_error", chat ? "top_logprobs" : "logprobs", "response_too_large",
                       "n (%d) x max_tokens (%d) x (1 + %s %d) = %llu logprob entries; one response holds at most %llu "
                       "(--max-request-memory %zu at %d bytes each): ask for fewer, or stream",
                       (int)p.n, (int)p.max_tokens, chat ? "top_logprobs" : "logprobs", (int)p.logprobs, entries, most,
                       il_budget_limit(b), IL_API_LOGPROB_BYTES);
      ok = false;
    }
  }
  il_api_stream *st = NULL;
  if (!ok) {
    il_grammar_free(p.grammar);
    il_budget_give(b, grammar_charge);
  }
  if (ok) {
    st = il_mem_calloc(IL_MEM_SERVER, sizeof *st, "response stream");
    il_api_choice *ch = il_mem_calloc(IL_MEM_SERVER, sizeof *ch * (size_t)p.n, "response choices");
    if (!st || !ch) {
      il_mem_free(st);
      il_mem_free(ch);
      il__tokens_free(b, tokens, n);
      il_grammar_free(p.grammar);
      il_budget_give(b, grammar_charge);
      return IL__OOM("starting the response");
    }
    st->grammar_charge = grammar_charge;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    st->refs = 2;
    st->budget = il_budget_ref(b);
    st->out.budget = b;
    for (int32_t i = 0; i < p.n; i++) {
      ch[i].text.budget = b;
      for (int k = 0; k < 4; k++) ch[i].lp[k].budget = b;
    }
    st->stream = stream;
    st->include_usage = usage;
    st->api = api;
    st->chat = chat;
    st->logprobs = p.logprobs;
    st->n = p.n;
    st->ch = ch;
    st->created = (long long)time(NULL);
    snprintf(st->rid, sizeof st->rid, "%s-%llu", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&il__next_rid, 1));
    st->t_submit = il_time_now();
    il_status s = il_sched_submit(api->sched, tokens, n, &p, il__on_event, st, &st->id);
    if (s != IL_OK) {
      ok = false;
      if (s == IL_ERR_BUSY) il_api_error_set(e, 503, "server_error", NULL, "server_busy", "%s; try again shortly", il_error_detail());
      else if (s == IL_ERR_INVALID_ARG)
        il_api_error_set(e, 400, "invalid_request_error", "max_tokens",
                         strstr(il_error_detail(), "context") ? "context_length_exceeded" : NULL, "%s", il_error_detail());
      else il_api_error_set(e, 500, "server_error", NULL, NULL, "%s", il_error_detail());
      st->refs = 1;
      il_api_stream_unref(st);
      st = NULL;
    }
  }
  il__tokens_free(b, tokens, n);
  *out = st;
  return ok;
}

/* out complete: true; else it is freed and e says why (its budget, or out of memory). */
static bool il__done(il_sbuf *out, il_api_error *e) {
  if (!out->oom) return true;
  il_sbuf_free(out);
  if (il_budget_over(out->budget)) {
    il__over(e, out->budget, "the response");
    e->code = "response_too_large";
    return false;
  }
  return IL__OOM("building the response");
}

bool il_api_models(const il_api *api, const char *id, il_sbuf *out, il_api_error *e) {
  if (!api->e) {
    il_api_error_set(e, 503, "server_error", NULL, "loading", "the model is loading; try again shortly");
    return false;
  }
  if (id && strcmp(id, api->model_id)) {
    char clip[80];
    il_api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model '%s' does not exist; this server serves '%s'", il_utf8_clip(id, clip, sizeof clip),
                     api->model_id);
    return false;
  }
  if (!id) il_sbuf_puts(out, "{\"object\":\"list\",\"data\":[");
  il_sbuf_puts(out, "{\"id\":");
  il_sbuf_json_str(out, api->model_id, strlen(api->model_id));
  il_sbuf_printf(out, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"inferlab\",\"max_model_len\":%d",
                 (long long)time(NULL), (int)il_engine_n_ctx(api->e));
  /* what a request that leaves a field out gets (serve's command line), so a client such as
   * the chat page shows the server's defaults instead of its own; max_tokens null = until the
   * end of generation or the context is full */
  const il_request_params *d = &api->defaults;
  il_sbuf_puts(out, ",\"inferlab_defaults\":{\"max_tokens\":");
  if (d->n_predict > 0) il_sbuf_printf(out, "%d", (int)d->n_predict);
  else il_sbuf_puts(out, "null");
  il_sbuf_printf(out, ",\"temperature\":%.6g,\"top_k\":%d,\"top_p\":%.6g,\"min_p\":%.6g}}", (double)d->sampling.temp,
                 (int)d->sampling.top_k, (double)d->sampling.top_p, (double)d->sampling.min_p);
  if (!id) il_sbuf_puts(out, "]}");
  return il__done(out, e);
}

/* /v1/tokenize's body, made from the tokens while it is read: a stage of at most ~10 KiB is
 * refilled item by item (one id, or one piece: at most 256 bytes, 1.5 KiB escaped), so the body
 * never exists whole and no allocation happens once it has started. */
struct il_api_gen {
  const il_api *api;
  il_budget *budget;
  int32_t *tokens, n;
  bool pieces;
  int phase;     /* 0 start, 1 ids, 2 between, 3 pieces, 4 end, 5 done */
  int32_t i;
  il_sbuf stage;
  size_t pos;
};

#define IL__GEN_STAGE ((size_t)16 << 10)
#define IL__GEN_FILL ((size_t)8 << 10)

static void il__gen_fill(il_api_gen *g) {
  il_sbuf *b = &g->stage;
  char buf[256];
  while (b->len < IL__GEN_FILL && g->phase < 5) {
    switch (g->phase) {
      case 0:
        il_sbuf_puts(b, "{\"tokens\":[");
        g->phase = 1;
        g->i = 0;
        break;
      case 1:
        if (g->i < g->n) {
          il_sbuf_printf(b, g->i ? ",%d" : "%d", (int)g->tokens[g->i]);
          g->i++;
        } else {
          il_sbuf_printf(b, "],\"count\":%d,\"max_model_len\":%d", (int)g->n, (int)il_engine_n_ctx(g->api->e));
          g->phase = g->pieces ? 2 : 4;
        }
        break;
      case 2:
        il_sbuf_puts(b, ",\"pieces\":[");
        g->phase = 3;
        g->i = 0;
        break;
      case 3:
        if (g->i < g->n) {
          if (g->i) il_sbuf_puts(b, ",");
          il_sbuf_json_str(b, buf, il__piece(g->api, g->tokens[g->i], buf, sizeof buf));
          g->i++;
        } else {
          il_sbuf_puts(b, "]");
          g->phase = 4;
        }
        break;
      default:
        il_sbuf_puts(b, "}");
        g->phase = 5;
    }
  }
}

size_t il_api_gen_read(il_api_gen *g, char *buf, size_t max) {
  if (g->pos == g->stage.len) {
    il_sbuf_consume(&g->stage, g->stage.len);
    g->pos = 0;
    il__gen_fill(g);
    if (g->stage.oom) return 0; /* cannot happen: the stage was reserved for the largest fill */
  }
  size_t n = g->stage.len - g->pos;
  if (n > max) n = max;
  memcpy(buf, g->stage.p + g->pos, n);
  g->pos += n;
  return n;
}

void il_api_gen_free(il_api_gen *g) {
  if (!g) return;
  il_sbuf_free(&g->stage);
  il__tokens_free(g->budget, g->tokens, g->n);
  il_budget_unref(g->budget);
  il_mem_free(g);
}

bool il_api_tokenize(const il_api *api, const char *body, size_t len, il_budget *b, il_api_gen **out, size_t *size,
                     il_api_error *e) {
  *out = NULL;
  *size = 0;
  json_t *o = NULL;
  il_jarena arena;
  if (!il__parse(body, len, &arena, b, &o, e)) return false;
  bool add_special = true, pieces = false;
  bool ok = il__model(api, o, e) && il__bool(o, "add_special", &add_special, e) && il__bool(o, "with_pieces", &pieces, e);
  int32_t *tokens = NULL, n = 0;
  json_t *msgs = json_object_get(o, "messages"), *pr = json_object_get(o, "prompt");
  if (!pr) pr = json_object_get(o, "content");
  if (ok && msgs) {
    ok = il__chat_tokens(api, b, msgs, add_special, &tokens, &n, e);
  } else if (ok) {
    if (!json_is_string(pr)) ok = IL__BAD("prompt", "'prompt' must be a string (or send 'messages')");
    else ok = il__tokenize(api, b, json_string_value(pr), json_string_length(pr), add_special,
                           !api->defaults.no_parse_special, NULL, 0, &tokens, &n, e);
  }
  json_decref(o);
  il_jarena_end(&arena);
  if (!ok) return false;
  il_api_gen *g = il_mem_calloc(IL_MEM_SERVER, sizeof *g, "tokenize response");
  if (!g) {
    il__tokens_free(b, tokens, n);
    return IL__OOM("starting the response");
  }
  *g = (il_api_gen){.api = api, .budget = il_budget_ref(b), .tokens = tokens, .n = n, .pieces = pieces};
  g->stage.budget = b;
  if (!il_sbuf_reserve(&g->stage, IL__GEN_STAGE)) {
    bool over = il_budget_over(b);
    il_api_gen_free(g);
    return over ? il__over(e, b, "the response") : IL__OOM("starting the response");
  }
  /* the exact length first (Content-Length), by making the body once and dropping it */
  char sink[4096];
  size_t total = 0, k;
  while ((k = il_api_gen_read(g, sink, sizeof sink))) total += k;
  il_sbuf_consume(&g->stage, g->stage.len);
  g->pos = 0;
  g->phase = 0;
  *out = g;
  *size = total;
  return true;
}

bool il_api_detokenize(const il_api *api, const char *body, size_t len, il_budget *b, il_sbuf *out, il_api_error *e) {
  json_t *o = NULL;
  il_jarena arena;
  if (!il__parse(body, len, &arena, b, &o, e)) return false;
  json_t *t = json_object_get(o, "tokens");
  bool ok = il__model(api, o, e);
  const int32_t nv = il_vocab_size(il_engine_vocab(api->e));
  if (ok && !json_is_array(t)) ok = IL__BAD("tokens", "'tokens' must be an array of token ids");
  size_t n = ok ? json_array_size(t) : 0;
  if (ok && !il_budget_take(b, il__tokens_bytes(n))) ok = il__over(e, b, "the token ids");
  int32_t *ids = ok ? il_mem_alloc(IL_MEM_SERVER, sizeof(int32_t) * (n ? n : 1), "detokenize ids") : NULL;
  if (ok && !ids) {
    il_budget_give(b, il__tokens_bytes(n));
    ok = IL__OOM("reading the token ids");
  }
  for (size_t i = 0; ok && i < n; i++) {
    json_t *x = json_array_get(t, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= nv)
      ok = IL__BAD("tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, nv);
    else ids[i] = (int32_t)json_integer_value(x);
  }
  json_decref(o);
  il_jarena_end(&arena);
  if (ok) {
    size_t need = il_detokenize(il_engine_vocab(api->e), ids, n, false, NULL, 0);
    char *text = il_budget_take(b, need + 64) ? il_mem_alloc(IL_MEM_SERVER, need + 1, "detokenized text") : NULL;
    if (!text && il_budget_over(b)) {
      ok = il__over(e, b, "the detokenized text");
    } else if (!text) {
      il_budget_give(b, need + 64);
      ok = IL__OOM("detokenizing");
    } else {
      il_detokenize(il_engine_vocab(api->e), ids, n, false, text, need);
      il_sbuf_puts(out, "{\"prompt\":");
      il_sbuf_json_str(out, text, need);
      il_sbuf_puts(out, "}");
      il_mem_free(text);
      il_budget_give(b, need + 64);
      ok = il__done(out, e);
    }
  }
  if (ids) il__tokens_free(b, ids, (int32_t)n);
  return ok;
}
