/* server/reqlog: the request log line, text or JSON. */
#include "server/reqlog.h"

#include <string.h>

il_status il_reqlog_parse(const char *name, il_reqlog_format *out) {
  static const char *const names[] = {"text", "json", "off"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(name, names[i])) {
      *out = (il_reqlog_format)i;
      return IL_OK;
    }
  return il_error(IL_ERR_INVALID_ARG, "--log-format: '%s' is not text, json or off", name);
}

/* Text fields: printable ASCII as it is, the rest (space, '%', controls, bytes >= 0x7f) as %XX. */
static void il__text_field(il_sbuf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  if (!s || !*s) {
    il_sbuf_puts(b, "-");
    return;
  }
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p > 0x20 && *p < 0x7f && *p != '%') {
      il_sbuf_put(b, p, 1);
    } else {
      char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
      il_sbuf_put(b, e, 3);
    }
  }
}

static void il__json_field(il_sbuf *b, const char *key, const char *s) {
  il_sbuf_printf(b, ",\"%s\":", key);
  if (s) il_sbuf_json_str(b, s, strlen(s));
  else il_sbuf_puts(b, "null");
}

static void il__json_ms(il_sbuf *b, const char *key, double v) {
  if (v < 0) il_sbuf_printf(b, ",\"%s\":null", key);
  else il_sbuf_printf(b, ",\"%s\":%.3f", key, v);
}

void il_reqlog_write(il_sbuf *b, il_reqlog_format f, const il_reqlog_entry *e) {
  if (f == IL_REQLOG_OFF) return;
  if (f == IL_REQLOG_JSON) {
    il_sbuf_puts(b, "{\"event\":\"request\"");
    il__json_field(b, "id", e->id);
    il__json_field(b, "method", e->method);
    il__json_field(b, "path", e->path);
    il_sbuf_printf(b, ",\"status\":%d", e->status);
    il__json_field(b, "client", e->client);
    if (e->generation) {
      il_sbuf_printf(b, ",\"prompt_tokens\":%d,\"generated_tokens\":%d,\"cached_tokens\":%d", e->prompt_tokens,
                     e->generated_tokens, e->cached_tokens);
      if (e->drafted_tokens > 0) /* speculative decoding */
        il_sbuf_printf(b, ",\"drafted_tokens\":%d,\"accepted_tokens\":%d", e->drafted_tokens, e->accepted_tokens);
      il__json_ms(b, "ttft_ms", e->ttft_ms);
      il__json_ms(b, "queue_ms", e->queue_ms);
      il__json_ms(b, "prefill_ms", e->prefill_ms);
      if (e->prefill_chunks >= 0) il_sbuf_printf(b, ",\"prefill_chunks\":%d", e->prefill_chunks);
      else il_sbuf_puts(b, ",\"prefill_chunks\":null");
      il__json_ms(b, "first_decode_ms", e->first_decode_ms);
      il__json_ms(b, "tpot_ms", e->tpot_ms);
      il__json_field(b, "finish_reason", e->finish && *e->finish ? e->finish : NULL);
    }
    il__json_ms(b, "time_ms", e->time_ms);
    il_sbuf_puts(b, "}\n");
    return;
  }
  il_sbuf_puts(b, "inferlab serve: request ");
  if (e->id) {
    il__text_field(b, e->id);
    il_sbuf_puts(b, " ");
  }
  il__text_field(b, e->method);
  il_sbuf_puts(b, " ");
  il__text_field(b, e->path);
  il_sbuf_printf(b, " %d client=", e->status);
  il__text_field(b, e->client);
  if (e->generation) {
    il_sbuf_printf(b, " prompt=%d generated=%d cached=%d", e->prompt_tokens, e->generated_tokens, e->cached_tokens);
    if (e->drafted_tokens > 0) /* speculative decoding */
      il_sbuf_printf(b, " drafted=%d accepted=%d", e->drafted_tokens, e->accepted_tokens);
    if (e->ttft_ms >= 0) il_sbuf_printf(b, " ttft_ms=%.1f", e->ttft_ms);
    else il_sbuf_puts(b, " ttft_ms=-");
    if (e->prefill_chunks >= 0)
      il_sbuf_printf(b, " queue_ms=%.1f prefill_ms=%.1f prefill_chunks=%d first_decode_ms=%.1f", e->queue_ms,
                     e->prefill_ms, e->prefill_chunks, e->first_decode_ms);
    else il_sbuf_puts(b, " queue_ms=- prefill_ms=- prefill_chunks=- first_decode_ms=-");
    if (e->tpot_ms >= 0) il_sbuf_printf(b, " tpot_ms=%.2f", e->tpot_ms);
    else il_sbuf_puts(b, " tpot_ms=-");
    il_sbuf_puts(b, " finish=");
    il__text_field(b, e->finish);
  }
  il_sbuf_printf(b, " time_ms=%.1f\n", e->time_ms);
}
