/* server/schema: JSON Schema -> GBNF. See schema.h.
 *
 * Every schema node becomes one rule "sN ::= body" (written after the rules it uses, so a
 * body is built whole in a buffer of its own). Values consume the whitespace after them.
 * Objects with optional properties keep the written order and put commas only between the
 * properties present: with A_i = "properties i.. with none before" and B_i = "... with some
 * before", A_i ::= kv_i B_i+1 | A_i+1 and B_i ::= "," kv_i B_i+1 | B_i+1 (a required property
 * drops the second alternative); A_n+1 = B_n+1 = "".
 */
#include "server/schema.h"

#include "memory/mem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define IL__SCH_LIMIT 9999999999999999LL /* 16 digits: the integers the grammar can write */
#define IL__SCH_MAX_REFS 128
#define IL__SCH_MAX_DEPTH 64

static const char il__sch_common[] =
    "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "json-esc ::= \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "json-char ::= [^\"\\\\\\x00-\\x1f] | json-esc\n"
    "json-string ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]* (json-esc [^\"\\\\\\x00-\\x1f]*)* \"\\\"\" ws\n"
    "json-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "json-integer ::= json-int ws\n"
    "json-number ::= json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "json-boolean ::= (\"true\" | \"false\") ws\n"
    "json-null ::= \"null\" ws\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-object ::= \"{\" ws ( json-string \":\" ws json-value (\",\" ws json-string \":\" ws json-value)* )? \"}\" ws\n"
    "json-array ::= \"[\" ws ( json-value (\",\" ws json-value)* )? \"]\" ws\n";

typedef struct {
  il_sbuf *out;
  json_t *root;
  int next;
  struct {
    char ref[256];
    int id;
  } refs[IL__SCH_MAX_REFS];
  int n_refs;
  int depth;
} il__sch;

/* A GBNF literal of bytes s[0..n): quotes, backslashes and control bytes escaped; UTF-8 as is. */
static void il__lit(il_sbuf *b, const char *s, size_t n) {
  il_sbuf_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') il_sbuf_printf(b, "\\%c", c);
    else if (c < 0x20 || c == 0x7f) il_sbuf_printf(b, "\\x%02x", c);
    else il_sbuf_put(b, &s[i], 1);
  }
  il_sbuf_put(b, "\"", 1);
}

/* The JSON text of v (compact) as a GBNF literal followed by ws. */
static il_status il__json_lit(il_sbuf *b, json_t *v, const char *path) {
  char buf[4096];
  size_t n = json_dumpb(v, buf, sizeof buf, JSON_COMPACT | JSON_ENCODE_ANY);
  if (n == 0 || n > sizeof buf)
    return il_error(IL_ERR_UNSUPPORTED, "%s: a const or enum value longer than %zu bytes of JSON", path, sizeof buf);
  il__lit(b, buf, n);
  il_sbuf_puts(b, " ws");
  return IL_OK;
}

static il_status il__gen(il__sch *c, json_t *s, const char *path, int *id);

/* Writes "sN ::= body\n" and gives N. */
static il_status il__rule(il__sch *c, il_sbuf *body, int *id) {
  *id = c->next++;
  il_sbuf_printf(c->out, "s%d ::= ", *id);
  il_sbuf_put(c->out, body->p ? body->p : "\"\"", body->len ? body->len : 2);
  il_sbuf_put(c->out, "\n", 1);
  bool oom = body->oom || c->out->oom;
  il_sbuf_free(body);
  return oom ? il_error(IL_ERR_OOM, "response_format: the grammar does not fit in the request's memory (--max-request-memory)") : IL_OK;
}

static bool il__annotation(const char *k) {
  static const char *const ann[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                    "deprecated", "readOnly", "writeOnly", "strict", NULL};
  for (int i = 0; ann[i]; i++)
    if (!strcmp(k, ann[i])) return true;
  return false;
}

static bool il__known(const char *k) {
  static const char *const kw[] = {"type", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions",
                                   "properties", "required", "additionalProperties", "items", "minItems",
                                   "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
                                   "exclusiveMinimum", "exclusiveMaximum", NULL};
  for (int i = 0; kw[i]; i++)
    if (!strcmp(k, kw[i])) return true;
  return il__annotation(k);
}

/* A non-negative integer keyword; -1 when absent. */
static il_status il__count(json_t *s, const char *key, const char *path, long long *out) {
  *out = -1;
  json_t *v = json_object_get(s, key);
  if (!v) return IL_OK;
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return il_error(IL_ERR_INVALID_ARG, "%s.%s: must be a non-negative integer", path, key);
  *out = json_integer_value(v);
  if (*out > 1000)
    return il_error(IL_ERR_UNSUPPORTED, "%s.%s: %lld is above 1000, the largest repetition a grammar takes", path, key,
                    *out);
  return IL_OK;
}

/* ---- integer ranges as digit grammars ---- */

/* Numbers of exactly n digits between x and y (digit strings, x <= y). */
static void il__same_len(il_sbuf *b, const char *x, const char *y, int n) {
  if (n == 0) return;
  if (x[0] == y[0]) {
    il_sbuf_printf(b, "\"%c\" ", x[0]);
    il__same_len(b, x + 1, y + 1, n - 1);
    return;
  }
  bool xz = true, y9 = true;
  for (int i = 1; i < n; i++) xz = xz && x[i] == '0', y9 = y9 && y[i] == '9';
  char zeros[20], nines[20];
  memset(zeros, '0', sizeof zeros);
  memset(nines, '9', sizeof nines);
  il_sbuf_puts(b, "(");
  bool any = false;
  if (!xz) {
    il_sbuf_printf(b, "\"%c\" ", x[0]);
    il__same_len(b, x + 1, nines, n - 1);
    any = true;
  }
  char lo = xz ? x[0] : (char)(x[0] + 1), hi = y9 ? y[0] : (char)(y[0] - 1);
  if (lo <= hi) {
    il_sbuf_printf(b, "%s[%c-%c]", any ? " | " : "", lo, hi);
    if (n > 1) il_sbuf_printf(b, " [0-9]{%d}", n - 1);
    any = true;
  }
  if (!y9) {
    il_sbuf_printf(b, "%s\"%c\" ", any ? " | " : "", y[0]);
    il__same_len(b, zeros, y + 1, n - 1);
  }
  il_sbuf_puts(b, ") ");
}

static int il__ndigits(long long v) {
  int n = 1;
  while (v >= 10) v /= 10, n++;
  return n;
}

/* 0 <= a <= b: alternatives, without the enclosing group. */
static void il__pos_range(il_sbuf *b, long long a, long long bb) {
  bool first = true;
  long long p = 1;
  for (int d = 1; d <= il__ndigits(bb); d++, p *= 10) {
    long long lo = d == 1 ? 0 : p, hi = p * 10 - 1;
    if (lo < a) lo = a;
    if (hi > bb) hi = bb;
    if (lo > hi) continue;
    char x[24], y[24];
    snprintf(x, sizeof x, "%lld", lo);
    snprintf(y, sizeof y, "%lld", hi);
    il_sbuf_puts(b, first ? "(" : " | (");
    il__same_len(b, x, y, d);
    il_sbuf_puts(b, ")");
    first = false;
  }
}

static void il__int_range(il_sbuf *b, long long lo, long long hi) {
  il_sbuf_puts(b, "(");
  bool any = false;
  if (lo < 0) {
    long long nhi = hi < -1 ? hi : -1;
    il_sbuf_puts(b, "\"-\" (");
    il__pos_range(b, -nhi, -lo);
    il_sbuf_puts(b, ")");
    any = true;
  }
  if (hi >= 0) {
    if (any) il_sbuf_puts(b, " | ");
    il__pos_range(b, lo > 0 ? lo : 0, hi);
  }
  il_sbuf_puts(b, ")");
}

/* A bound keyword as an integer: *has false when absent. Non-integer values for integer
 * schemas round inward; for numbers they are unsupported. */
static il_status il__bound(json_t *s, const char *key, const char *path, bool integer, bool *has, long long *v) {
  *has = false;
  json_t *j = json_object_get(s, key);
  if (!j) return IL_OK;
  if (!json_is_number(j)) return il_error(IL_ERR_INVALID_ARG, "%s.%s: must be a number", path, key);
  double d = json_number_value(j);
  bool excl = strstr(key, "exclusive") != NULL, upper = strstr(key, "aximum") != NULL;
  if (!integer && (d != floor(d) || excl))
    return il_error(IL_ERR_UNSUPPORTED, "%s.%s: a number's bounds must be inclusive integers (minimum/maximum) in "
                    "this grammar subset", path, key);
  if (fabs(d) > (double)IL__SCH_LIMIT)
    return il_error(IL_ERR_UNSUPPORTED, "%s.%s: beyond the 16-digit integers the grammar writes", path, key);
  double r = upper ? floor(d) : ceil(d);
  if (excl && r == d) r += upper ? -1 : 1;
  *has = true;
  *v = (long long)r;
  return IL_OK;
}

static il_status il__gen_numeric(il__sch *c, json_t *s, const char *path, bool integer, int *id) {
  bool h[4];
  long long v[4];
  static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
  for (int i = 0; i < 4; i++) IL_TRY(il__bound(s, keys[i], path, integer, &h[i], &v[i]));
  long long lo = -IL__SCH_LIMIT, hi = IL__SCH_LIMIT;
  if (h[0]) lo = v[0];
  if (h[1] && v[1] > lo) lo = v[1];
  if (h[2]) hi = v[2];
  if (h[3] && v[3] < hi) hi = v[3];
  il_sbuf body = {.budget = c->out->budget};
  if (!h[0] && !h[1] && !h[2] && !h[3]) {
    il_sbuf_puts(&body, integer ? "json-integer" : "json-number");
    return il__rule(c, &body, id);
  }
  if (lo > hi) return il_error(IL_ERR_INVALID_ARG, "%s: minimum %lld is above maximum %lld: no value fits", path, lo, hi);
  il_sbuf_puts(&body, "(");
  il__int_range(&body, lo, hi);
  if (!integer) {
    /* k.digits lies in [k, k+1) for k >= 0 and in (-k-1, -k] for -k.digits */
    long long plo = lo > 0 ? lo : 0;
    if (plo <= hi - 1) {
      il_sbuf_puts(&body, " | (");
      il__pos_range(&body, plo, hi - 1);
      il_sbuf_puts(&body, ") \".\" [0-9]{1,16}");
    }
    if (lo <= -1 && hi >= 0) il_sbuf_puts(&body, " | \"-0.\" [0-9]{1,16}");
    long long klo = -hi > 1 ? -hi : 1, khi = -lo - 1;
    if (klo <= khi) {
      il_sbuf_puts(&body, " | \"-\" (");
      il__pos_range(&body, klo, khi);
      il_sbuf_puts(&body, ") \".\" [0-9]{1,16}");
    }
  }
  il_sbuf_puts(&body, ") ws");
  return il__rule(c, &body, id);
}

/* ---- patterns: a regex subset ---- */

typedef struct {
  const char *s;
  size_t pos, len;
  const char *path;
  il_status st;
} il__re;

static il_status il__re_err(il__re *r, const char *what) {
  if (r->st == IL_OK)
    r->st = il_error(IL_ERR_UNSUPPORTED, "%s.pattern: %s at offset %zu of \"%s\" (the subset: literals, classes, "
                     ". ( ) (?: ) | * + ? {m,n}, \\d \\w \\s)", r->path, what, r->pos, r->s);
  return r->st;
}

/* The ranges a class escape stands for; false when c is not one. */
static bool il__re_class_escape(il_sbuf *b, char c, bool *neg) {
  *neg = c == 'D' || c == 'W' || c == 'S';
  switch (c) {
    case 'd': case 'D': il_sbuf_puts(b, "0-9"); return true;
    case 'w': case 'W': il_sbuf_puts(b, "a-zA-Z0-9_"); return true;
    case 's': case 'S': il_sbuf_puts(b, " "); return true; /* a tab would need a JSON escape */
    default: return false;
  }
}

/* One character of a class in GBNF class syntax. Quotes, backslashes and control characters
 * are left out: inside a JSON string they would need escapes, and a narrower class still
 * matches the pattern. */
static void il__re_class_char(il_sbuf *b, unsigned char c) {
  if (c == ']' || c == '[' || c == '-' || c == '^') il_sbuf_printf(b, "\\%c", c);
  else il_sbuf_put(b, &c, 1);
}

static bool il__re_alt(il__re *r, il_sbuf *b);

static bool il__re_bad_char(unsigned char c) { return c == '"' || c == '\\' || c < 0x20 || c == 0x7f; }

/* Writes one atom; true when it can match the empty string (a group that can). */
static bool il__re_atom(il__re *r, il_sbuf *b) {
  bool nullable = false;
  unsigned char c = (unsigned char)r->s[r->pos];
  if (c == '(') {
    r->pos++;
    if (r->pos + 1 < r->len && r->s[r->pos] == '?') {
      if (r->s[r->pos + 1] != ':') {
        il__re_err(r, "lookaround and named groups are not supported");
        return false;
      }
      r->pos += 2;
    }
    il_sbuf_puts(b, "(");
    nullable = il__re_alt(r, b);
    if (r->pos >= r->len || r->s[r->pos] != ')') {
      il__re_err(r, "unclosed group");
      return false;
    }
    r->pos++;
    il_sbuf_puts(b, ")");
  } else if (c == '[') {
    r->pos++;
    bool neg = r->pos < r->len && r->s[r->pos] == '^';
    if (neg) r->pos++;
    il_sbuf_puts(b, neg ? "[^\"\\\\\\x00-\\x1f" : "[");
    size_t start = b->len;
    bool first = true;
    while (r->pos < r->len && (r->s[r->pos] != ']' || first)) {
      first = false;
      unsigned char lo = (unsigned char)r->s[r->pos++];
      if (lo == '\\') {
        if (r->pos >= r->len) {
          il__re_err(r, "unfinished escape");
          return false;
        }
        char e = r->s[r->pos++];
        bool eneg;
        il_sbuf tmp = {0};
        if (il__re_class_escape(&tmp, e, &eneg)) {
          il_sbuf_free(&tmp);
          if (eneg) {
            il__re_err(r, "\\D, \\W or \\S inside a class");
            return false;
          }
          il__re_class_escape(b, e, &eneg);
          continue;
        }
        if (e == 'n' || e == 't' || e == 'r' || e == 'b' || (e >= '0' && e <= '9') || (e >= 'a' && e <= 'z')) {
          il__re_err(r, "this escape inside a class is not supported");
          return false;
        }
        lo = (unsigned char)e;
      }
      unsigned char hi = lo;
      if (r->pos + 1 < r->len && r->s[r->pos] == '-' && r->s[r->pos + 1] != ']') {
        r->pos++;
        hi = (unsigned char)r->s[r->pos++];
        if (hi == '\\') {
          if (r->pos >= r->len) {
            il__re_err(r, "unfinished escape");
            return false;
          }
          hi = (unsigned char)r->s[r->pos++];
        }
        if (hi < lo) {
          il__re_err(r, "a range whose end is below its start");
          return false;
        }
      }
      if (lo >= 0x80 || hi >= 0x80) {
        il__re_err(r, "non-ASCII characters in a class");
        return false;
      }
      if (neg) {
        il__re_class_char(b, lo);
        if (hi != lo) il_sbuf_puts(b, "-"), il__re_class_char(b, hi);
        continue;
      }
      /* the range minus quote, backslash and control characters */
      for (unsigned x = lo; x <= hi;) {
        while (x <= hi && il__re_bad_char((unsigned char)x)) x++;
        if (x > hi) break;
        unsigned y = x;
        while (y + 1 <= hi && !il__re_bad_char((unsigned char)(y + 1))) y++;
        il__re_class_char(b, (unsigned char)x);
        if (y != x) il_sbuf_puts(b, "-"), il__re_class_char(b, (unsigned char)y);
        x = y + 1;
      }
    }
    if (r->pos >= r->len) {
      il__re_err(r, "unclosed class");
      return false;
    }
    r->pos++;
    if (!neg && b->len == start) {
      il__re_err(r, "a class with only quotes, backslashes or control characters");
      return false;
    }
    il_sbuf_puts(b, "]");
  } else if (c == '.') {
    r->pos++;
    il_sbuf_puts(b, "[^\"\\\\\\x00-\\x1f]");
  } else if (c == '\\') {
    r->pos++;
    if (r->pos >= r->len) {
      il__re_err(r, "unfinished escape");
      return false;
    }
    char e = r->s[r->pos];
    bool neg;
    il_sbuf tmp = {0};
    bool cls = il__re_class_escape(&tmp, e, &neg);
    il_sbuf_free(&tmp);
    if (cls) {
      r->pos++;
      il_sbuf_puts(b, neg ? "[^\"\\\\\\x00-\\x1f" : "[");
      il__re_class_escape(b, e, &neg);
      il_sbuf_puts(b, "]");
      return false;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || il__re_bad_char((unsigned char)e)) {
      il__re_err(r, "this escape is not supported");
      return false;
    }
    r->pos++;
    il__lit(b, &e, 1);
  } else if (c == '^' || c == '$') {
    il__re_err(r, "an anchor inside the pattern (only at its ends)");
  } else if (c == '*' || c == '+' || c == '?' || c == '{') {
    il__re_err(r, "a quantifier with nothing before it");
  } else if (il__re_bad_char(c)) {
    il__re_err(r, "a quote, backslash or control character (it would need a JSON escape)");
  } else {
    /* one UTF-8 character */
    size_t n = il_utf8_seq(r->s + r->pos, r->len - r->pos);
    if (n == 0) {
      il__re_err(r, "invalid UTF-8");
      return false;
    }
    il__lit(b, r->s + r->pos, n);
    r->pos += n;
  }
  return nullable;
}

/* Writes a sequence; true when all of it can match the empty string. A part that can, under
 * an unbounded repetition, would make the grammar left-recursive: refused. */
static bool il__re_seq(il__re *r, il_sbuf *b) {
  bool all_nullable = true;
  while (r->st == IL_OK && r->pos < r->len && r->s[r->pos] != '|' && r->s[r->pos] != ')') {
    if (r->s[r->pos] == '$' && r->pos + 1 == r->len) {
      r->pos++;
      break;
    }
    il_sbuf_puts(b, "(");
    bool an = il__re_atom(r, b);
    il_sbuf_puts(b, ")");
    if (r->st != IL_OK) break;
    char q = r->pos < r->len ? r->s[r->pos] : 0;
    bool unbounded = q == '*' || q == '+', empty_atom = an;
    if (q == '*' || q == '?') an = true;
    if (q == '*' || q == '+' || q == '?') {
      il_sbuf_put(b, &q, 1);
      r->pos++;
    } else if (q == '{') {
      /* {m}, {m,} or {m,n}, m <= n <= 1000 (what a grammar takes), written back normalized */
      long m = -1, n = -1;
      size_t i = r->pos + 1;
      for (; i < r->len && r->s[i] >= '0' && r->s[i] <= '9' && m <= 1000; i++) m = (m < 0 ? 0 : m * 10) + (r->s[i] - '0');
      bool comma = i < r->len && r->s[i] == ',';
      if (comma)
        for (i++; i < r->len && r->s[i] >= '0' && r->s[i] <= '9' && n <= 1000; i++) n = (n < 0 ? 0 : n * 10) + (r->s[i] - '0');
      else n = m;
      if (m < 0 || i >= r->len || r->s[i] != '}' || m > 1000 || n > 1000 || (n >= 0 && n < m)) {
        il__re_err(r, "a {m,n} quantifier that is not {m}, {m,} or {m,n} with m <= n <= 1000");
        return false;
      }
      if (n < 0) il_sbuf_printf(b, "{%ld,}", m);
      else il_sbuf_printf(b, "{%ld,%ld}", m, n);
      r->pos = i + 1;
      unbounded = n < 0;
      if (m == 0) an = true;
    }
    if (unbounded && empty_atom) {
      /* (a?)* matches what a* does, but as written it repeats a part that can be empty */
      il__re_err(r, "a repeated part that can match nothing (write (a?)* as a*)");
      break;
    }
    all_nullable = all_nullable && an;
    if (r->pos < r->len && r->s[r->pos] == '?') r->pos++; /* lazy: the same language */
    il_sbuf_puts(b, " ");
  }
  return all_nullable;
}

static bool il__re_alt(il__re *r, il_sbuf *b) {
  il_sbuf_puts(b, "(\"\" ");
  bool nullable = il__re_seq(r, b);
  while (r->st == IL_OK && r->pos < r->len && r->s[r->pos] == '|') {
    r->pos++;
    il_sbuf_puts(b, ") | (\"\" ");
    nullable = il__re_seq(r, b) || nullable;
  }
  il_sbuf_puts(b, ")");
  return nullable;
}

static il_status il__gen_string(il__sch *c, json_t *s, const char *path, int *id) {
  long long mn, mx;
  IL_TRY(il__count(s, "minLength", path, &mn));
  IL_TRY(il__count(s, "maxLength", path, &mx));
  json_t *pat = json_object_get(s, "pattern");
  il_sbuf body = {.budget = c->out->budget};
  if (pat) {
    if (!json_is_string(pat)) return il_error(IL_ERR_INVALID_ARG, "%s.pattern: must be a string", path);
    if (mn >= 0 || mx >= 0)
      return il_error(IL_ERR_UNSUPPORTED, "%s: pattern together with minLength/maxLength (put the length in the "
                      "pattern)", path);
    il__re r = {json_string_value(pat), 0, json_string_length(pat), path, IL_OK};
    if (r.len && r.s[0] == '^') r.pos = 1;
    il_sbuf_puts(&body, "\"\\\"\" (");
    il__re_alt(&r, &body);
    if (r.st == IL_OK && r.pos < r.len) il__re_err(&r, "an unmatched )");
    if (r.st != IL_OK) {
      il_sbuf_free(&body);
      return r.st;
    }
    il_sbuf_puts(&body, ") \"\\\"\" ws");
    return il__rule(c, &body, id);
  }
  if (mn < 0 && mx < 0) {
    il_sbuf_puts(&body, "json-string");
    return il__rule(c, &body, id);
  }
  if (mn < 0) mn = 0;
  if (mx >= 0 && mx < mn)
    return il_error(IL_ERR_INVALID_ARG, "%s: maxLength %lld is below minLength %lld", path, mx, mn);
  if (mx < 0) il_sbuf_printf(&body, "\"\\\"\" json-char{%lld,} \"\\\"\" ws", mn);
  else il_sbuf_printf(&body, "\"\\\"\" json-char{%lld,%lld} \"\\\"\" ws", mn, mx);
  return il__rule(c, &body, id);
}

static il_status il__gen_array(il__sch *c, json_t *s, const char *path, int *id) {
  long long mn, mx;
  IL_TRY(il__count(s, "minItems", path, &mn));
  IL_TRY(il__count(s, "maxItems", path, &mx));
  if (mn < 0) mn = 0;
  if (mx >= 0 && mx < mn) return il_error(IL_ERR_INVALID_ARG, "%s: maxItems %lld is below minItems %lld", path, mx, mn);
  json_t *items = json_object_get(s, "items");
  char item[32] = "json-value";
  if (items) {
    char p[512];
    snprintf(p, sizeof p, "%s.items", path);
    int iid;
    IL_TRY(il__gen(c, items, p, &iid));
    snprintf(item, sizeof item, "s%d", iid);
  }
  il_sbuf body = {.budget = c->out->budget};
  il_sbuf_puts(&body, "\"[\" ws ");
  if (mx == 0) {
    il_sbuf_puts(&body, "\"]\" ws");
    return il__rule(c, &body, id);
  }
  if (mn == 0) il_sbuf_puts(&body, "(");
  il_sbuf_printf(&body, "%s (\",\" ws %s)", item, item);
  long long lo = mn > 0 ? mn - 1 : 0;
  if (mx < 0) il_sbuf_printf(&body, "{%lld,}", lo);
  else il_sbuf_printf(&body, "{%lld,%lld}", lo, mx - 1);
  if (mn == 0) il_sbuf_puts(&body, ")?");
  il_sbuf_puts(&body, " \"]\" ws");
  return il__rule(c, &body, id);
}

static il_status il__gen_object(il__sch *c, json_t *s, const char *path, int *id) {
  json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
  if (props && !json_is_object(props)) return il_error(IL_ERR_INVALID_ARG, "%s.properties: must be an object", path);
  if (req && !json_is_array(req)) return il_error(IL_ERR_INVALID_ARG, "%s.required: must be an array", path);
  size_t i;
  json_t *rv;
  json_array_foreach(req, i, rv) {
    if (!json_is_string(rv)) return il_error(IL_ERR_INVALID_ARG, "%s.required[%zu]: must be a string", path, i);
    if (!props || !json_object_get(props, json_string_value(rv)))
      return il_error(IL_ERR_UNSUPPORTED, "%s.required[%zu]: '%s' has no schema in properties", path, i,
                      json_string_value(rv));
  }
  size_t n = props ? json_object_size(props) : 0;
  il_sbuf body = {.budget = c->out->budget};
  if (n == 0) {
    il_sbuf_puts(&body, "\"{\" ws \"}\" ws");
    return il__rule(c, &body, id);
  }
  /* kv rules first, in the written order (jansson keeps insertion order) */
  int kv[256];
  bool required[256];
  if (n > 256) return il_error(IL_ERR_UNSUPPORTED, "%s.properties: more than 256 properties", path);
  const char *key;
  json_t *ps;
  size_t k = 0;
  json_object_foreach(props, key, ps) {
    char p[512];
    snprintf(p, sizeof p, "%s.properties.%s", path, key);
    int vid;
    IL_TRY(il__gen(c, ps, p, &vid));
    il_sbuf kb = {.budget = c->out->budget};
    char kj[600];
    json_t *ks = json_string(key);
    size_t kl = ks ? json_dumpb(ks, kj, sizeof kj, JSON_ENCODE_ANY) : 0;
    json_decref(ks);
    if (kl == 0 || kl > sizeof kj) return il_error(IL_ERR_UNSUPPORTED, "%s: a property name over 512 bytes", p);
    il__lit(&kb, kj, kl);
    il_sbuf_printf(&kb, " ws \":\" ws s%d", vid);
    IL_TRY(il__rule(c, &kb, &kv[k]));
    required[k] = false;
    json_array_foreach(req, i, rv) required[k] = required[k] || !strcmp(json_string_value(rv), key);
    k++;
  }
  /* A_i and B_i from the last property to the first */
  int a_next = -1, b_next = -1; /* -1: the empty rest */
  for (size_t j = n; j-- > 0;) {
    il_sbuf ab = {.budget = c->out->budget}, bb = {.budget = c->out->budget};
    char bn[24] = "\"\"", an[24] = "\"\"";
    if (b_next >= 0) snprintf(bn, sizeof bn, "s%d", b_next);
    if (a_next >= 0) snprintf(an, sizeof an, "s%d", a_next);
    il_sbuf_printf(&bb, "\",\" ws s%d %s", kv[j], bn);
    if (!required[j]) il_sbuf_printf(&bb, " | %s", bn);
    il_sbuf_printf(&ab, "s%d %s", kv[j], bn);
    if (!required[j]) il_sbuf_printf(&ab, " | %s", an);
    int bid, aid;
    IL_TRY(il__rule(c, &bb, &bid));
    IL_TRY(il__rule(c, &ab, &aid));
    a_next = aid;
    b_next = bid;
  }
  il_sbuf_printf(&body, "\"{\" ws s%d \"}\" ws", a_next);
  return il__rule(c, &body, id);
}

static il_status il__gen_type(il__sch *c, json_t *s, const char *type, const char *path, int *id) {
  il_sbuf body = {.budget = c->out->budget};
  if (!strcmp(type, "object")) return il__gen_object(c, s, path, id);
  if (!strcmp(type, "array")) return il__gen_array(c, s, path, id);
  if (!strcmp(type, "string")) return il__gen_string(c, s, path, id);
  if (!strcmp(type, "integer")) return il__gen_numeric(c, s, path, true, id);
  if (!strcmp(type, "number")) return il__gen_numeric(c, s, path, false, id);
  if (!strcmp(type, "boolean")) il_sbuf_puts(&body, "json-boolean");
  else if (!strcmp(type, "null")) il_sbuf_puts(&body, "json-null");
  else return il_error(IL_ERR_INVALID_ARG, "%s.type: unknown type \"%s\"", path, type);
  return il__rule(c, &body, id);
}

/* "#/$defs/NAME" (or definitions) -> its rule, generated on first use (recursion allowed). */
static il_status il__gen_ref(il__sch *c, const char *ref, const char *path, int *id) {
  for (int i = 0; i < c->n_refs; i++)
    if (!strcmp(c->refs[i].ref, ref)) {
      *id = c->refs[i].id;
      return IL_OK;
    }
  const char *name = NULL, *where = NULL;
  if (!strncmp(ref, "#/$defs/", 8)) name = ref + 8, where = "$defs";
  else if (!strncmp(ref, "#/definitions/", 14)) name = ref + 14, where = "definitions";
  if (!name || strchr(name, '/') || strchr(name, '~'))
    return il_error(IL_ERR_UNSUPPORTED, "%s.$ref: \"%s\": only \"#/$defs/NAME\" and \"#/definitions/NAME\" refer", path,
                    ref);
  json_t *def = json_object_get(json_object_get(c->root, where), name);
  if (!def) return il_error(IL_ERR_INVALID_ARG, "%s.$ref: \"%s\" is not defined", path, ref);
  if (c->n_refs == IL__SCH_MAX_REFS || strlen(ref) >= sizeof c->refs[0].ref)
    return il_error(IL_ERR_UNSUPPORTED, "%s.$ref: more than %d definitions", path, IL__SCH_MAX_REFS);
  /* the rule's number is fixed before its body exists, so a recursive use finds it */
  int slot = c->n_refs++;
  snprintf(c->refs[slot].ref, sizeof c->refs[slot].ref, "%s", ref);
  c->refs[slot].id = c->next++;
  char p[512];
  snprintf(p, sizeof p, "$.%s.%s", where, name);
  int did;
  IL_TRY(il__gen(c, def, p, &did));
  il_sbuf_printf(c->out, "s%d ::= s%d\n", c->refs[slot].id, did);
  *id = c->refs[slot].id;
  return c->out->oom ? IL_ERR_OOM : IL_OK;
}

/* The JSON value v is of one of the types `type` names (a string or a list). */
static bool il__type_allows(json_t *type, json_t *v) {
  size_t n = json_is_array(type) ? json_array_size(type) : 1;
  for (size_t i = 0; i < n; i++) {
    json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
    const char *k = json_is_string(t) ? json_string_value(t) : "";
    if ((!strcmp(k, "object") && json_is_object(v)) || (!strcmp(k, "array") && json_is_array(v)) ||
        (!strcmp(k, "string") && json_is_string(v)) || (!strcmp(k, "boolean") && json_is_boolean(v)) ||
        (!strcmp(k, "null") && json_is_null(v)) || (!strcmp(k, "number") && json_is_number(v)) ||
        (!strcmp(k, "integer") && (json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v))))))
      return true;
  }
  return false;
}

static il_status il__gen(il__sch *c, json_t *s, const char *path, int *id) {
  if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
    il_sbuf body = {.budget = c->out->budget};
    il_sbuf_puts(&body, "json-value");
    return il__rule(c, &body, id);
  }
  if (!json_is_object(s)) return il_error(IL_ERR_UNSUPPORTED, "%s: a schema must be an object (or true)", path);
  if (c->depth >= IL__SCH_MAX_DEPTH) return il_error(IL_ERR_UNSUPPORTED, "%s: nested deeper than %d", path, IL__SCH_MAX_DEPTH);
  const char *key;
  json_t *v;
  size_t siblings = 0;
  json_object_foreach(s, key, v) {
    if (!il__known(key)) return il_error(IL_ERR_UNSUPPORTED, "%s.%s: unsupported keyword '%s'", path, key, key);
    if (!il__annotation(key) && strcmp(key, "$defs") && strcmp(key, "definitions")) siblings++;
  }
  c->depth++;
  il_status st;
  json_t *ref = json_object_get(s, "$ref"), *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
  json_t *any = json_object_get(s, "anyOf");
  const char *anyname = "anyOf";
  if (!any) any = json_object_get(s, "oneOf"), anyname = "oneOf";
  json_t *type = json_object_get(s, "type");
  if (ref || cst || en || any) {
    const char *which = ref ? "$ref" : cst ? "const" : en ? "enum" : anyname;
    /* beside const or enum a type is checked against the values (below); any other sibling
     * (a type beside anyOf or $ref too) would constrain what the grammar writes */
    if (siblings > (size_t)(1 + (type != NULL && (cst || en)))) {
      c->depth--;
      return il_error(IL_ERR_UNSUPPORTED, "%s: '%s' with other constraining keywords beside it", path, which);
    }
  }
  if ((cst || en) && type) {
    /* a value the type excludes would be written and then fail validation */
    json_t *one[1] = {cst};
    size_t nv = cst ? 1 : json_is_array(en) ? json_array_size(en) : 0;
    for (size_t i = 0; i < nv; i++) {
      json_t *val = cst ? one[0] : json_array_get(en, i);
      if (!il__type_allows(type, val)) {
        c->depth--;
        return il_error(IL_ERR_INVALID_ARG, "%s.%s%s: a value that 'type' does not allow", path, cst ? "const" : "enum",
                        cst ? "" : "[]");
      }
    }
  }
  il_sbuf body = {.budget = c->out->budget};
  if (ref) {
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    st = json_is_string(ref) ? il__gen_ref(c, json_string_value(ref), p, id)
                             : il_error(IL_ERR_INVALID_ARG, "%s.$ref: must be a string", path);
  } else if (cst) {
    st = il__json_lit(&body, cst, path);
    if (st == IL_OK) st = il__rule(c, &body, id);
  } else if (en) {
    if (!json_is_array(en) || json_array_size(en) == 0) st = il_error(IL_ERR_INVALID_ARG, "%s.enum: must be a non-empty array", path);
    else {
      size_t i;
      json_t *e;
      st = IL_OK;
      json_array_foreach(en, i, e) {
        if (i) il_sbuf_puts(&body, " | ");
        if (st == IL_OK) st = il__json_lit(&body, e, path);
      }
      if (st == IL_OK) st = il__rule(c, &body, id);
    }
  } else if (any) {
    if (!json_is_array(any) || json_array_size(any) == 0)
      st = il_error(IL_ERR_INVALID_ARG, "%s.%s: must be a non-empty array", path, anyname);
    else {
      size_t i;
      json_t *e;
      st = IL_OK;
      json_array_foreach(any, i, e) {
        char p[512];
        snprintf(p, sizeof p, "%s.%s[%zu]", path, anyname, i);
        int aid;
        if (st == IL_OK) st = il__gen(c, e, p, &aid);
        if (st == IL_OK) il_sbuf_printf(&body, "%ss%d", i ? " | " : "", aid);
      }
      if (st == IL_OK) st = il__rule(c, &body, id);
    }
  } else if (json_is_string(type)) {
    st = il__gen_type(c, s, json_string_value(type), path, id);
  } else if (json_is_array(type)) {
    size_t i;
    json_t *t;
    st = json_array_size(type) ? IL_OK : il_error(IL_ERR_INVALID_ARG, "%s.type: an empty list", path);
    json_array_foreach(type, i, t) {
      int tid;
      if (st == IL_OK && !json_is_string(t)) st = il_error(IL_ERR_INVALID_ARG, "%s.type[%zu]: must be a string", path, i);
      if (st == IL_OK) st = il__gen_type(c, s, json_string_value(t), path, &tid);
      if (st == IL_OK) il_sbuf_printf(&body, "%ss%d", i ? " | " : "", tid);
    }
    if (st == IL_OK) st = il__rule(c, &body, id);
  } else if (type) {
    st = il_error(IL_ERR_INVALID_ARG, "%s.type: must be a string or a list of strings", path);
  } else if (json_object_get(s, "properties") || json_object_get(s, "required")) {
    st = il__gen_object(c, s, path, id);
  } else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) {
    st = il__gen_array(c, s, path, id);
  } else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "pattern")) {
    /* without a type these hold for strings only; writing a string that meets them is valid */
    st = il__gen_string(c, s, path, id);
  } else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
             json_object_get(s, "exclusiveMaximum")) {
    st = il__gen_numeric(c, s, path, false, id);
  } else {
    il_sbuf_puts(&body, "json-value");
    st = il__rule(c, &body, id);
  }
  il_sbuf_free(&body);
  c->depth--;
  return st;
}

il_status il_schema_to_gbnf(json_t *schema, il_sbuf *out) {
  static il__sch zero;
  il__sch *c = il_mem_alloc(IL_MEM_OTHER, sizeof *c, "schema converter");
  if (!c) return IL_ERR_OOM;
  *c = zero;
  c->out = out;
  c->root = schema;
  il_sbuf_puts(out, il__sch_common);
  int id = 0;
  il_status st = il__gen(c, schema, "$", &id);
  if (st == IL_OK) il_sbuf_printf(out, "root ::= s%d\n", id);
  il_mem_free(c);
  if (st == IL_OK && out->oom)
    st = il_error(IL_ERR_OOM, "response_format: the grammar does not fit in the request's memory (--max-request-memory)");
  return st;
}

il_status il_schema_any_gbnf(il_sbuf *out) {
  il_sbuf_puts(out, il__sch_common);
  il_sbuf_puts(out, "root ::= json-object\n");
  return out->oom ? il_error(IL_ERR_OOM, "response_format: the grammar does not fit in the request's memory") : IL_OK;
}

il_status il_schema_text_to_gbnf(const char *text, size_t len, const char *what, il_sbuf *out) {
  json_error_t je;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!j) return il_error(IL_ERR_FORMAT, "%s:%d:%d: not JSON: %s", what, je.line, je.column, je.text);
  il_status st = il_schema_to_gbnf(j, out);
  json_decref(j);
  return st;
}
