/* server/api: OpenAI request validation, submission, and the event -> JSON writer. */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "memory/mem.h"

typedef struct il_api_choice {
  il_sbuf text;             /* not streaming: the whole text */
  json_t *lp;               /* not streaming: logprobs being collected */
  il_finish_reason finish;
  bool role_sent;           /* streaming chat: the first delta carries the role */
  size_t offset;            /* completions: text offset of the next token */
} il_api_choice;

static atomic_ullong il__next_rid = 1;

/* ---- errors ---- */

void il_api_error_set(il_api_error *e, int status, const char *type, const char *param, const char *code,
                      const char *fmt, ...) {
  e->status = status;
  e->type = type;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}

json_t *il_api_error_json(const il_api_error *e) {
  json_t *err = json_object();
  if (!err) return NULL;
  json_object_set_new(err, "message", json_stringn_nocheck(e->message, strlen(e->message)));
  json_object_set_new(err, "type", json_string(e->type));
  json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
  json_object_set_new(err, "code", e->code ? json_string(e->code) : json_null());
  return json_pack("{s:o}", "error", err);
}

#define IL__BAD(param, ...) (il_api_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__), false)

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when the bytes there are not one. */
static size_t il__utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t need;
  unsigned min;
  if (c >= 0xC2 && c <= 0xDF) need = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) need = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) need = 4, min = 0x10000;
  else return 0;
  if (n < need) return 0;
  unsigned cp = c & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return need;
}

size_t il_api_utf8_check(const char *s, size_t len) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t k = il__utf8_seq(u + i, len - i);
    if (!k) return i;
    i += k;
  }
  return len;
}

/* A JSON string of bytes that may not be valid UTF-8 (a token can be half a character):
 * invalid bytes become U+FFFD. */
static json_t *il__jstr(const char *s, size_t n) {
  if (!s || !n) return json_string("");
  if (il_api_utf8_check(s, n) == n) return json_stringn(s, n);
  il_sbuf b = {0};
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = il__utf8_seq(u + i, n - i);
    if (k) il_sbuf_put(&b, s + i, k), i += k;
    else il_sbuf_puts(&b, "\xEF\xBF\xBD"), i++;
  }
  json_t *j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.len);
  il_sbuf_free(&b);
  return j;
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
    const char *m = e->cfg.model, *slash = strrchr(m, '/');
    snprintf(api->model_id, sizeof api->model_id, "%.255s", slash ? slash + 1 : m);
  }
  api->max_tokens = max_tokens > 0 && max_tokens < e->n_ctx ? max_tokens : e->n_ctx;
  api->defaults = *defaults;
  return IL_OK;
}

/* ---- parsing helpers: each returns false with e set ---- */

static bool il__parse(const char *body, size_t len, json_t **out, il_api_error *e) {
  *out = NULL;
  if (!body || !len) return IL__BAD(NULL, "the request has no body: send a JSON object");
  size_t bad = il_api_utf8_check(body, len);
  if (bad != len) {
    il_api_error_set(e, 400, "invalid_request_error", NULL, "invalid_utf8",
                     "the request body is not valid UTF-8 (byte %zu is 0x%02X)", bad, (unsigned char)body[bad]);
    return false;
  }
  json_error_t je;
  json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!j) {
    il_api_error_set(e, 400, "invalid_request_error", NULL, "invalid_json",
                     "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    return false;
  }
  if (!json_is_object(j)) {
    json_decref(j);
    return IL__BAD(NULL, "the request body must be a JSON object");
  }
  *out = j;
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
    il_api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model '%s' does not exist; this server serves '%s' (GET /v1/models)", json_string_value(v),
                     api->model_id);
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
  il_chat_msg *m = il_mem_calloc(IL_MEM_OTHER, sizeof *m * n, "chat messages");
  char **owned = il_mem_calloc(IL_MEM_OTHER, sizeof *owned * n, "chat messages");
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

static bool il__tokenize(const il_api *api, const char *text, size_t len, bool add_special, bool parse_special,
                         const il_text_range *lit, size_t n_lit, int32_t **tokens, int32_t *n, il_api_error *e) {
  size_t nt = 0;
  il_status st = il_tokenize_literal_alloc(api->e->vocab, text, len, add_special, parse_special, lit, n_lit, tokens, &nt);
  if (st != IL_OK) {
    il_api_error_set(e, 500, "server_error", NULL, NULL, "tokenizer: %s", il_error_detail());
    return false;
  }
  *n = (int32_t)nt;
  return true;
}

/* The prompt of a completions request: a string, [string], or [token ids]. */
static bool il__prompt(const il_api *api, json_t *p, int32_t **tokens, int32_t *n, il_api_error *e) {
  const il_request_params *rp = &api->defaults;
  if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
  if (json_is_string(p))
    return il__tokenize(api, json_string_value(p), json_string_length(p), !rp->no_bos, !rp->no_parse_special, NULL,
                        0, tokens, n, e);
  if (!json_is_array(p) || json_array_size(p) == 0)
    return IL__BAD("prompt", "'prompt' must be a string or a non-empty array of token ids");
  size_t k = json_array_size(p);
  const int32_t nv = il_vocab_size(api->e->vocab);
  for (size_t i = 0; i < k; i++) {
    json_t *t = json_array_get(p, i);
    if (json_is_string(t)) return IL__BAD("prompt", "'prompt': one prompt per request (an array of several strings was sent)");
    if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= nv)
      return IL__BAD("prompt", "'prompt[%zu]' must be a token id in [0, %d)", i, nv);
  }
  *tokens = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * k, "prompt tokens");
  if (!*tokens) {
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
  json_t *rf = json_object_get(o, "response_format"), *tools = json_object_get(o, "tools");
  if (rf && !json_is_null(rf)) {
    json_t *t = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(t) || strcmp(json_string_value(t), "text"))
      return IL__BAD("response_format", "only {\"type\": \"text\"} is supported");
  }
  if (json_is_array(tools) && json_array_size(tools)) return IL__BAD("tools", "tools are not supported");
  json_t *bias = json_object_get(o, "logit_bias");
  if (bias && !json_is_null(bias) && !(json_is_object(bias) && json_object_size(bias) == 0))
    return IL__BAD("logit_bias", "'logit_bias' is not supported (use --ignore-eos to suppress end of generation)");
  return true;
}

/* ---- the stream: events -> JSON ---- */

void il_api_stream_unref(il_api_stream *st) {
  pthread_mutex_lock(&st->mu);
  int left = --st->refs;
  pthread_mutex_unlock(&st->mu);
  if (left) return;
  for (int i = 0; st->ch && i < st->n; i++) {
    il_sbuf_free(&st->ch[i].text);
    json_decref(st->ch[i].lp);
  }
  il_mem_free(st->ch);
  il_sbuf_free(&st->out);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  il_mem_free(st);
}

static json_t *il__piece(const il_api *api, int32_t id, json_t **bytes) {
  char buf[256];
  size_t n = il_vocab_token_piece(api->e->vocab, id, true, buf, sizeof buf);
  if (n > sizeof buf) n = sizeof buf;
  if (bytes) {
    *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
  }
  return il__jstr(buf, n);
}

/* One token's logprobs in the chat format: {"token", "logprob", "bytes", "top_logprobs"}. */
static json_t *il__chat_lp(const il_api *api, const il_sched_event *ev) {
  json_t *bytes = NULL, *tok = il__piece(api, ev->token, &bytes), *top = json_array();
  for (int i = 0; i < ev->n_top; i++) {
    json_t *b = NULL, *t = il__piece(api, ev->top_ids[i], &b);
    json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", t, "logprob", (double)ev->top_logprobs[i], "bytes", b));
  }
  return json_pack("{s:o,s:f,s:o,s:o}", "token", tok, "logprob", (double)ev->logprob, "bytes", bytes, "top_logprobs", top);
}

/* Appends one token to completions-style logprobs {"tokens", "token_logprobs", "top_logprobs",
 * "text_offset"}. */
static void il__cmpl_lp_add(const il_api *api, json_t *lp, const il_sched_event *ev, size_t offset) {
  json_t *top = json_object();
  for (int i = 0; i < ev->n_top; i++) {
    json_t *t = il__piece(api, ev->top_ids[i], NULL);
    if (json_is_string(t)) json_object_set_new(top, json_string_value(t), json_real(ev->top_logprobs[i]));
    json_decref(t);
  }
  json_array_append_new(json_object_get(lp, "tokens"), il__piece(api, ev->token, NULL));
  json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(ev->logprob));
  json_array_append_new(json_object_get(lp, "top_logprobs"), top);
  json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *il__cmpl_lp_new(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *il__usage(const il_sched_event *ev) {
  return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", ev->n_prompt, "completion_tokens", ev->n_gen,
                   "total_tokens", ev->n_prompt + ev->n_gen, "prompt_tokens_details", "cached_tokens", ev->n_cached);
}

static json_t *il__frame(const il_api_stream *st, const char *object) {
  return json_pack("{s:s,s:s,s:I,s:s}", "id", st->rid, "object", object, "created", (json_int_t)st->created, "model",
                   st->api->model_id);
}

static void il__sse(il_api_stream *st, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!s) {
    st->out.oom = true;
    return;
  }
  il_sbuf_puts(&st->out, "data: ");
  il_sbuf_puts(&st->out, s);
  il_sbuf_puts(&st->out, "\n\n");
  il_mem_free(s);
}

static const char *il__reason(il_finish_reason r) { return r == IL_FINISH_NONE ? NULL : il_finish_name(r); }

static void il__stream_event(il_api_stream *st, const il_sched_event *ev) {
  il_api_choice *ch = &st->ch[ev->choice];
  const bool lp = st->logprobs >= 0 && ev->token >= 0;
  if (!ev->len && !lp && ev->finish == IL_FINISH_NONE && (!st->chat || ch->role_sent)) return;
  json_t *c = json_pack("{s:i}", "index", ev->choice);
  if (st->chat) {
    json_t *delta = json_object();
    if (!ch->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
    ch->role_sent = true;
    if (ev->len || ev->finish == IL_FINISH_NONE) json_object_set_new(delta, "content", il__jstr(ev->text, ev->len));
    json_object_set_new(c, "delta", delta);
    json_object_set_new(c, "logprobs", lp ? json_pack("{s:[o]}", "content", il__chat_lp(st->api, ev)) : json_null());
  } else {
    json_object_set_new(c, "text", il__jstr(ev->text, ev->len));
    json_t *l = json_null();
    if (lp) {
      l = il__cmpl_lp_new();
      il__cmpl_lp_add(st->api, l, ev, ch->offset);
    }
    json_object_set_new(c, "logprobs", l);
    ch->offset += ev->len;
  }
  const char *r = il__reason(ev->finish);
  json_object_set_new(c, "finish_reason", r ? json_string(r) : json_null());
  json_t *f = il__frame(st, st->chat ? "chat.completion.chunk" : "text_completion");
  json_object_set_new(f, "choices", json_pack("[o]", c));
  il__sse(st, f);
}

static void il__collect_event(il_api_stream *st, const il_sched_event *ev) {
  il_api_choice *ch = &st->ch[ev->choice];
  if (st->logprobs >= 0 && ev->token >= 0) {
    if (!ch->lp) ch->lp = st->chat ? json_array() : il__cmpl_lp_new();
    if (st->chat) json_array_append_new(ch->lp, il__chat_lp(st->api, ev));
    else il__cmpl_lp_add(st->api, ch->lp, ev, ch->text.len);
  }
  il_sbuf_put(&ch->text, ev->text, ev->len);
}

static void il__final(il_api_stream *st, const il_sched_event *ev) {
  if (st->stream) {
    if (st->include_usage) {
      json_t *f = il__frame(st, st->chat ? "chat.completion.chunk" : "text_completion");
      json_object_set_new(f, "choices", json_array());
      json_object_set_new(f, "usage", il__usage(ev));
      il__sse(st, f);
    }
    il_sbuf_puts(&st->out, "data: [DONE]\n\n");
    return;
  }
  il_finish_reason worst = IL_FINISH_NONE;
  for (int i = 0; i < st->n; i++)
    if (st->ch[i].finish == IL_FINISH_ERROR || st->ch[i].finish == IL_FINISH_CANCELLED) worst = st->ch[i].finish;
  json_t *body;
  if (worst != IL_FINISH_NONE) {
    il_api_error e;
    if (worst == IL_FINISH_ERROR) il_api_error_set(&e, 500, "server_error", NULL, "engine_error", "the engine failed while generating");
    else il_api_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    st->status = e.status;
    body = il_api_error_json(&e);
  } else {
    st->status = 200;
    json_t *choices = json_array();
    for (int i = 0; i < st->n; i++) {
      il_api_choice *ch = &st->ch[i];
      json_t *text = il__jstr(ch->text.p ? ch->text.p : "", ch->text.len), *lp = ch->lp ? json_incref(ch->lp) : json_null();
      if (st->logprobs >= 0 && !ch->lp) lp = st->chat ? json_array() : il__cmpl_lp_new();
      json_t *c = st->chat ? json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", i, "message", "role", "assistant",
                                       "content", text, "logprobs", st->chat && st->logprobs >= 0 ? json_pack("{s:o}", "content", lp) : lp,
                                       "finish_reason", il_finish_name(ch->finish))
                           : json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text, "logprobs", lp, "finish_reason",
                                       il_finish_name(ch->finish));
      json_array_append_new(choices, c);
    }
    body = il__frame(st, st->chat ? "chat.completion" : "text_completion");
    json_object_set_new(body, "choices", choices);
    json_object_set_new(body, "usage", il__usage(ev));
  }
  char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!s) st->out.oom = true;
  else il_sbuf_puts(&st->out, s);
  il_mem_free(s);
}

/* The scheduler's callback (engine thread). */
static void il__on_event(void *ud, const il_sched_event *ev) {
  il_api_stream *st = ud;
  pthread_mutex_lock(&st->mu);
  if (ev->done) {
    il__final(st, ev);
    st->done = true;
  } else {
    if (ev->finish != IL_FINISH_NONE) st->ch[ev->choice].finish = ev->finish;
    if (st->stream) il__stream_event(st, ev);
    else il__collect_event(st, ev);
  }
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  if (ev->done) il_api_stream_unref(st);
}

/* ---- endpoints ---- */

bool il_api_generate(const il_api *api, bool chat, const char *body, size_t len, il_api_stream **out, il_api_error *e) {
  *out = NULL;
  json_t *o = NULL;
  if (!il__parse(body, len, &o, e)) return false;
  il_sched_params p;
  bool stream = false, usage = false, ok = il__model(api, o, e) && il__params(api, o, chat, &p, &stream, &usage, e);
  int32_t *tokens = NULL, n = 0;
  if (ok && chat) {
    char *text = NULL;
    size_t tl = 0, nl = 0;
    il_text_range *lit = NULL;
    ok = il__messages(api, json_object_get(o, "messages"), &text, &tl, &lit, &nl, e) &&
         il__tokenize(api, text, tl, !api->defaults.no_bos, true, lit, nl, &tokens, &n, e);
    il_mem_free(lit);
    il_mem_free(text);
  } else if (ok) {
    json_t *pr = json_object_get(o, "prompt");
    ok = pr ? il__prompt(api, pr, &tokens, &n, e) : IL__BAD("prompt", "'prompt' is required");
  }
  json_decref(o);
  if (ok && n == 0) ok = IL__BAD(chat ? "messages" : "prompt", "the prompt has no tokens");
  if (ok && n >= api->e->n_ctx) {
    il_api_error_set(e, 400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                     "the prompt has %d tokens; this model's context is %d tokens per sequence", n, api->e->n_ctx);
    ok = false;
  }
  if (ok && p.max_tokens < 0) {
    int32_t room = api->e->n_ctx - n;
    int32_t d = api->defaults.n_predict > 0 ? api->defaults.n_predict : room;
    p.max_tokens = d < room ? d : room;
  }
  il_api_stream *st = NULL;
  if (ok) {
    st = il_mem_calloc(IL_MEM_OTHER, sizeof *st, "response stream");
    il_api_choice *ch = il_mem_calloc(IL_MEM_OTHER, sizeof *ch * (size_t)p.n, "response choices");
    if (!st || !ch) {
      il_mem_free(st);
      il_mem_free(ch);
      il_mem_free(tokens);
      il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
      return false;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    st->refs = 2;
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
  il_mem_free(tokens);
  *out = st;
  return ok;
}

bool il_api_models(const il_api *api, const char *id, json_t **out, il_api_error *e) {
  *out = NULL;
  if (!api->e) {
    il_api_error_set(e, 503, "server_error", NULL, "loading", "the model is loading; try again shortly");
    return false;
  }
  json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", api->model_id, "object", "model", "created",
                        (json_int_t)time(NULL), "owned_by", "inferlab", "max_model_len", api->e->n_ctx);
  if (id) {
    if (strcmp(id, api->model_id)) {
      json_decref(m);
      il_api_error_set(e, 404, "invalid_request_error", "model", "model_not_found",
                       "the model '%s' does not exist; this server serves '%s'", id, api->model_id);
      return false;
    }
    *out = m;
    return true;
  }
  *out = json_pack("{s:s,s:[o]}", "object", "list", "data", m);
  return true;
}

bool il_api_tokenize(const il_api *api, const char *body, size_t len, json_t **out, il_api_error *e) {
  *out = NULL;
  json_t *o = NULL;
  if (!il__parse(body, len, &o, e)) return false;
  bool add_special = true, pieces = false;
  bool ok = il__model(api, o, e) && il__bool(o, "add_special", &add_special, e) && il__bool(o, "with_pieces", &pieces, e);
  int32_t *tokens = NULL, n = 0;
  json_t *msgs = json_object_get(o, "messages"), *pr = json_object_get(o, "prompt");
  if (!pr) pr = json_object_get(o, "content");
  if (ok && msgs) {
    char *text = NULL;
    size_t tl = 0, nl = 0;
    il_text_range *lit = NULL;
    ok = il__messages(api, msgs, &text, &tl, &lit, &nl, e) &&
         il__tokenize(api, text, tl, add_special, true, lit, nl, &tokens, &n, e);
    il_mem_free(lit);
    il_mem_free(text);
  } else if (ok) {
    if (!json_is_string(pr)) ok = IL__BAD("prompt", "'prompt' must be a string (or send 'messages')");
    else ok = il__tokenize(api, json_string_value(pr), json_string_length(pr), add_special,
                           !api->defaults.no_parse_special, NULL, 0, &tokens, &n, e);
  }
  json_decref(o);
  if (!ok) return false;
  json_t *ids = json_array(), *pc = pieces ? json_array() : NULL;
  for (int32_t i = 0; i < n; i++) {
    json_array_append_new(ids, json_integer(tokens[i]));
    if (pc) json_array_append_new(pc, il__piece(api, tokens[i], NULL));
  }
  il_mem_free(tokens);
  *out = json_pack("{s:o,s:i,s:i}", "tokens", ids, "count", n, "max_model_len", api->e->n_ctx);
  if (pc) json_object_set_new(*out, "pieces", pc);
  return true;
}

bool il_api_detokenize(const il_api *api, const char *body, size_t len, json_t **out, il_api_error *e) {
  *out = NULL;
  json_t *o = NULL;
  if (!il__parse(body, len, &o, e)) return false;
  json_t *t = json_object_get(o, "tokens");
  bool ok = il__model(api, o, e);
  const int32_t nv = il_vocab_size(api->e->vocab);
  if (ok && !json_is_array(t)) ok = IL__BAD("tokens", "'tokens' must be an array of token ids");
  size_t n = ok ? json_array_size(t) : 0;
  int32_t *ids = ok ? il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (n ? n : 1), "detokenize ids") : NULL;
  if (ok && !ids) {
    il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    ok = false;
  }
  for (size_t i = 0; ok && i < n; i++) {
    json_t *x = json_array_get(t, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= nv)
      ok = IL__BAD("tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, nv);
    else ids[i] = (int32_t)json_integer_value(x);
  }
  json_decref(o);
  if (ok) {
    size_t need = il_detokenize(api->e->vocab, ids, n, false, NULL, 0);
    char *text = il_mem_alloc(IL_MEM_OTHER, need + 1, "detokenized text");
    if (!text) {
      il_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
      ok = false;
    } else {
      il_detokenize(api->e->vocab, ids, n, false, text, need);
      *out = json_pack("{s:o}", "prompt", il__jstr(text, need));
      il_mem_free(text);
    }
  }
  il_mem_free(ids);
  return ok;
}
