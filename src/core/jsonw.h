/* core/jsonw: a small streaming JSON writer, shared by the doctor's report and the lab's
 * documents (bench --json, --jsonl, experiment summaries, watch --json).
 *
 * The writer tracks nesting so commas and (optional) indentation are always right; strings are
 * escaped per RFC 8259 (quote, backslash, control characters as \u00XX; bytes >= 0x80 pass
 * through, so valid UTF-8 stays valid); numbers that are not finite are written as null, so a
 * metric that could not be measured never produces invalid JSON.
 * Not for: reading JSON.
 */
#ifndef IL_CORE_JSONW_H
#define IL_CORE_JSONW_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"

#define IL_JSONW_MAX_DEPTH 32

typedef struct {
  FILE *f;
  bool pretty;              /* newlines and two-space indentation; false = one line */
  int depth;
  bool has_items[IL_JSONW_MAX_DEPTH];
  bool after_key;
} il_jsonw;

/* Starts a document on f (borrowed). Can't fail. */
void il_jsonw_init(il_jsonw *w, FILE *f, bool pretty);
void il_jsonw_obj(il_jsonw *w);     /* { */
void il_jsonw_obj_end(il_jsonw *w); /* } */
void il_jsonw_arr(il_jsonw *w);     /* [ */
void il_jsonw_arr_end(il_jsonw *w); /* ] */
/* An object key; the next value call is its value. */
void il_jsonw_key(il_jsonw *w, const char *key);
void il_jsonw_str(il_jsonw *w, const char *s); /* NULL writes null */
void il_jsonw_num(il_jsonw *w, double v);      /* %.12g; NaN and infinities write null */
void il_jsonw_int(il_jsonw *w, long long v);
void il_jsonw_bool(il_jsonw *w, bool v);
void il_jsonw_null(il_jsonw *w);
/* Embeds an already valid JSON value (e.g. the doctor report) verbatim, trailing whitespace
 * removed. The caller vouches for its validity. */
void il_jsonw_raw(il_jsonw *w, const char *json);
/* Key + value shorthands. */
void il_jsonw_kstr(il_jsonw *w, const char *key, const char *s);
void il_jsonw_knum(il_jsonw *w, const char *key, double v);
void il_jsonw_kint(il_jsonw *w, const char *key, long long v);
void il_jsonw_kbool(il_jsonw *w, const char *key, bool v);
/* Ends the document with a newline. IL_ERR_IO when any write failed (ferror). */
IL_NODISCARD il_status il_jsonw_finish(il_jsonw *w);

/* Writes s as a JSON string literal (with quotes) to f. */
void il_jsonw_escape(FILE *f, const char *s);

#endif
