/* core/jsonw: streaming JSON writer. See jsonw.h. */
#include "core/jsonw.h"

#include <math.h>
#include <string.h>

void il_jsonw_init(il_jsonw *w, FILE *f, bool pretty) {
  memset(w, 0, sizeof *w);
  w->f = f;
  w->pretty = pretty;
}

static void il__newline(il_jsonw *w) {
  if (!w->pretty) return;
  fputc('\n', w->f);
  for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
}

/* Separator before a value or key at the current level. */
static void il__before_value(il_jsonw *w) {
  if (w->after_key) {
    w->after_key = false;
    return;
  }
  if (w->depth > 0) {
    if (w->has_items[w->depth]) fputc(',', w->f);
    w->has_items[w->depth] = true;
    il__newline(w);
  }
}

static void il__open(il_jsonw *w, char c) {
  il__before_value(w);
  fputc(c, w->f);
  if (w->depth + 1 < IL_JSONW_MAX_DEPTH) w->depth++;
  w->has_items[w->depth] = false;
}

static void il__close(il_jsonw *w, char c) {
  bool had = w->has_items[w->depth];
  if (w->depth > 0) w->depth--;
  if (had) il__newline(w);
  fputc(c, w->f);
}

void il_jsonw_obj(il_jsonw *w) { il__open(w, '{'); }
void il_jsonw_obj_end(il_jsonw *w) { il__close(w, '}'); }
void il_jsonw_arr(il_jsonw *w) { il__open(w, '['); }
void il_jsonw_arr_end(il_jsonw *w) { il__close(w, ']'); }

void il_jsonw_escape(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
  }
  fputc('"', f);
}

void il_jsonw_key(il_jsonw *w, const char *key) {
  il__before_value(w);
  il_jsonw_escape(w->f, key);
  fputs(w->pretty ? ": " : ":", w->f);
  w->after_key = true;
}

void il_jsonw_str(il_jsonw *w, const char *s) {
  il__before_value(w);
  if (s) il_jsonw_escape(w->f, s);
  else fputs("null", w->f);
}

void il_jsonw_num(il_jsonw *w, double v) {
  il__before_value(w);
  if (isfinite(v)) fprintf(w->f, "%.12g", v);
  else fputs("null", w->f);
}

void il_jsonw_int(il_jsonw *w, long long v) {
  il__before_value(w);
  fprintf(w->f, "%lld", v);
}

void il_jsonw_bool(il_jsonw *w, bool v) {
  il__before_value(w);
  fputs(v ? "true" : "false", w->f);
}

void il_jsonw_null(il_jsonw *w) {
  il__before_value(w);
  fputs("null", w->f);
}

void il_jsonw_raw(il_jsonw *w, const char *json) {
  il__before_value(w);
  size_t n = strlen(json);
  while (n > 0 && (json[n - 1] == '\n' || json[n - 1] == ' ' || json[n - 1] == '\r' || json[n - 1] == '\t')) n--;
  fwrite(json, 1, n, w->f);
}

void il_jsonw_kstr(il_jsonw *w, const char *key, const char *s) {
  il_jsonw_key(w, key);
  il_jsonw_str(w, s);
}
void il_jsonw_knum(il_jsonw *w, const char *key, double v) {
  il_jsonw_key(w, key);
  il_jsonw_num(w, v);
}
void il_jsonw_kint(il_jsonw *w, const char *key, long long v) {
  il_jsonw_key(w, key);
  il_jsonw_int(w, v);
}
void il_jsonw_kbool(il_jsonw *w, const char *key, bool v) {
  il_jsonw_key(w, key);
  il_jsonw_bool(w, v);
}

il_status il_jsonw_finish(il_jsonw *w) {
  fputc('\n', w->f);
  if (ferror(w->f)) return il_error(IL_ERR_IO, "writing JSON output failed");
  return IL_OK;
}
