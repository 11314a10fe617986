/* engine/grammar: GBNF parser, pushdown matcher and the vocabulary trie. See grammar.h.
 *
 * Rule table: el[] holds every rule's elements, rule r starting at rule_start[r]:
 *   CHARS  matches one code point in ranges rg[a .. a+n) (neg: outside them; neg with n = 0 is
 *          `.`); star: zero or more of them, looping in place
 *   REF    the rule a
 *   ALT    ends an alternative; the next one follows
 *   END    ends the last alternative
 * A stack's top is (pos, parent): pos the CHARS element to match next in the current frame,
 * parent the frame to return to (pos of the element after the REF that entered this one). The
 * empty stack (pos -1) has matched the whole grammar.
 */
#include "engine/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"

enum { IL__G_END, IL__G_ALT, IL__G_REF, IL__G_CHARS };

typedef struct {
  uint8_t kind, neg, star;
  int32_t a, n;
} il__gel;

typedef struct {
  uint32_t lo, hi;
} il__grange;

struct il_grammar {
  il__gel *el;
  il__grange *rg;
  int32_t *rule_start;
  int32_t n_el, n_rg, n_rules, root;
  size_t bytes;
};

/* ---- growable arrays (memory/ has no realloc) ---- */

typedef struct {
  void *p;
  int32_t n, cap;
} il__vec;

static bool il__vec_grow(il__vec *v, size_t elsize, int32_t need) {
  if (need <= v->cap) return true;
  int32_t cap = v->cap ? v->cap * 2 : 16;
  while (cap < need) cap *= 2;
  void *p = il_mem_alloc(IL_MEM_OTHER, elsize * (size_t)cap, "grammar table");
  if (!p) return false;
  if (v->n) memcpy(p, v->p, elsize * (size_t)v->n);
  il_mem_free(v->p);
  v->p = p;
  v->cap = cap;
  return true;
}

/* ---- parser ---- */

typedef struct {
  const char *name; /* into the source; NULL for a rule made for a group or repetition */
  int32_t name_len;
  size_t def_pos, use_pos; /* where it was defined / first used (SIZE_MAX: not yet) */
  il__vec els;             /* il__gel */
} il__prule;

typedef struct {
  const char *src, *what;
  size_t len, pos;
  il__vec rules; /* il__prule */
  il__vec rg;    /* il__grange */
  il_status err;
} il__gparser;

static il_status il__perr(il__gparser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static il_status il__perr(il__gparser *p, size_t at, const char *fmt, ...) {
  if (p->err != IL_OK) return p->err;
  int line = 1, col = 1;
  for (size_t i = 0; i < at && i < p->len; i++) {
    if (p->src[i] == '\n') line++, col = 1;
    else if (((unsigned char)p->src[i] & 0xC0) != 0x80) col++;
  }
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->err = il_error(IL_ERR_FORMAT, "%s:%d:%d: %s", p->what, line, col, msg);
  return p->err;
}

static il__prule *il__rule(il__gparser *p, int32_t id) { return &((il__prule *)p->rules.p)[id]; }

static int32_t il__rule_new(il__gparser *p, const char *name, int32_t name_len, size_t at) {
  if (!il__vec_grow(&p->rules, sizeof(il__prule), p->rules.n + 1)) {
    p->err = IL_ERR_OOM;
    return -1;
  }
  il__prule *r = &((il__prule *)p->rules.p)[p->rules.n];
  memset(r, 0, sizeof *r);
  r->name = name;
  r->name_len = name_len;
  r->def_pos = name ? SIZE_MAX : at;
  r->use_pos = name ? SIZE_MAX : at;
  return p->rules.n++;
}

static int32_t il__symbol(il__gparser *p, const char *name, int32_t n, size_t at) {
  for (int32_t i = 0; i < p->rules.n; i++) {
    il__prule *r = il__rule(p, i);
    if (r->name && r->name_len == n && !memcmp(r->name, name, (size_t)n)) return i;
  }
  return il__rule_new(p, name, n, at);
}

static bool il__emit(il__gparser *p, int32_t rule, il__gel e) {
  il__vec *v = &il__rule(p, rule)->els;
  if (!il__vec_grow(v, sizeof(il__gel), v->n + 1)) {
    p->err = IL_ERR_OOM;
    return false;
  }
  ((il__gel *)v->p)[v->n++] = e;
  return true;
}

static bool il__range(il__gparser *p, uint32_t lo, uint32_t hi) {
  if (!il__vec_grow(&p->rg, sizeof(il__grange), p->rg.n + 1)) {
    p->err = IL_ERR_OOM;
    return false;
  }
  ((il__grange *)p->rg.p)[p->rg.n++] = (il__grange){lo, hi};
  return true;
}

static bool il__word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void il__space(il__gparser *p, bool newline_ok) {
  while (p->pos < p->len) {
    char c = p->src[p->pos];
    if (c == ' ' || c == '\t') p->pos++;
    else if (c == '#') {
      while (p->pos < p->len && p->src[p->pos] != '\n') p->pos++;
    } else if (newline_ok && (c == '\n' || c == '\r')) p->pos++;
    else break;
  }
}

/* One UTF-8 character of the source; -1 (error set) on invalid UTF-8. */
static int64_t il__src_char(il__gparser *p) {
  const unsigned char *s = (const unsigned char *)p->src + p->pos;
  size_t left = p->len - p->pos;
  unsigned c = s[0];
  int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
  if (n < 0 || (size_t)n + 1 > left) {
    il__perr(p, p->pos, "invalid UTF-8");
    return -1;
  }
  uint32_t v = n == 0 ? c : c & (0x3Fu >> n);
  for (int i = 1; i <= n; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      il__perr(p, p->pos, "invalid UTF-8");
      return -1;
    }
    v = v << 6 | (s[i] & 0x3F);
  }
  p->pos += (size_t)n + 1;
  return v;
}

static int64_t il__hex(il__gparser *p, int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; i++) {
    if (p->pos >= p->len) return il__perr(p, p->pos, "expected a hex digit, found the end"), -1;
    char c = p->src[p->pos];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return il__perr(p, p->pos, "expected a hex digit"), -1;
    v = v << 4 | (uint32_t)d;
    p->pos++;
  }
  if (v > 0x10FFFF) return il__perr(p, p->pos, "code point beyond U+10FFFF"), -1;
  return v;
}

/* A character of a literal or class, escapes decoded; -1 on error. */
static int64_t il__char(il__gparser *p) {
  if (p->pos >= p->len) return il__perr(p, p->pos, "unexpected end of grammar"), -1;
  if (p->src[p->pos] != '\\') return il__src_char(p);
  size_t at = p->pos++;
  if (p->pos >= p->len) return il__perr(p, at, "unfinished escape"), -1;
  char c = p->src[p->pos++];
  switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return c;
    case 'x': return il__hex(p, 2);
    case 'u': return il__hex(p, 4);
    case 'U': return il__hex(p, 8);
    default: {
      char s[2] = {c, 0};
      return il__perr(p, at, "unknown escape \\%s", s), -1;
    }
  }
}

static bool il__parse_alternates(il__gparser *p, int32_t rule, bool nested);

/* Repeats the symbol out[from ..) of `rule` min..max times (max -1: unbounded). */
static bool il__repeat(il__gparser *p, int32_t rule, int32_t from, int32_t min, int32_t max, size_t at) {
  il__vec *v = &il__rule(p, rule)->els;
  int32_t len = v->n - from;
  bool single_chars = len == 1 && ((il__gel *)v->p)[from].kind == IL__G_CHARS && !((il__gel *)v->p)[from].star;
  if (single_chars && max < 0) {
    /* x{m,}: m copies, then x* looping in place */
    il__gel sym = ((il__gel *)v->p)[from];
    v->n = from;
    for (int32_t i = 0; i < min; i++)
      if (!il__emit(p, rule, sym)) return false;
    sym.star = 1;
    return il__emit(p, rule, sym);
  }
  /* the symbol moves into a rule of its own, S ::= symbol (il__rule_new may move the rules:
   * `v` is not used after it) */
  int32_t s = il__rule_new(p, NULL, 0, at);
  if (s < 0) return false;
  for (int32_t i = 0; i < len; i++)
    if (!il__emit(p, s, ((il__gel *)il__rule(p, rule)->els.p)[from + i])) return false;
  if (!il__emit(p, s, (il__gel){.kind = IL__G_END})) return false;
  il__rule(p, rule)->els.n = from;
  for (int32_t i = 0; i < min; i++)
    if (!il__emit(p, rule, (il__gel){.kind = IL__G_REF, .a = s})) return false;
  if (max == min) return true;
  int32_t tail;
  if (max < 0) {
    /* T ::= S T | (empty) */
    tail = il__rule_new(p, NULL, 0, at);
    if (tail < 0) return false;
    if (!il__emit(p, tail, (il__gel){.kind = IL__G_REF, .a = s}) ||
        !il__emit(p, tail, (il__gel){.kind = IL__G_REF, .a = tail}) || !il__emit(p, tail, (il__gel){.kind = IL__G_ALT}) ||
        !il__emit(p, tail, (il__gel){.kind = IL__G_END}))
      return false;
  } else {
    /* T1 ::= S | ;  Tk ::= S T(k-1) | (empty): up to max - min more */
    tail = -1;
    for (int32_t k = 1; k <= max - min; k++) {
      int32_t t = il__rule_new(p, NULL, 0, at);
      if (t < 0 || !il__emit(p, t, (il__gel){.kind = IL__G_REF, .a = s})) return false;
      if (tail >= 0 && !il__emit(p, t, (il__gel){.kind = IL__G_REF, .a = tail})) return false;
      if (!il__emit(p, t, (il__gel){.kind = IL__G_ALT}) || !il__emit(p, t, (il__gel){.kind = IL__G_END})) return false;
      tail = t;
    }
  }
  return il__emit(p, rule, (il__gel){.kind = IL__G_REF, .a = tail});
}

static int32_t il__number(il__gparser *p) {
  size_t at = p->pos;
  long v = 0;
  if (p->pos >= p->len || p->src[p->pos] < '0' || p->src[p->pos] > '9')
    return il__perr(p, at, "expected a number"), -1;
  while (p->pos < p->len && p->src[p->pos] >= '0' && p->src[p->pos] <= '9') {
    v = v * 10 + (p->src[p->pos++] - '0');
    if (v > IL_GRAMMAR_MAX_REPEAT) return il__perr(p, at, "repetition count above 1000"), -1;
  }
  return (int32_t)v;
}

static bool il__parse_sequence(il__gparser *p, int32_t rule, bool nested) {
  int32_t last = -1; /* start of the last symbol in the rule's elements */
  for (;;) {
    if (p->pos >= p->len) return true;
    char c = p->src[p->pos];
    size_t at = p->pos;
    il__vec *v = &il__rule(p, rule)->els;
    if (c == '"') {
      p->pos++;
      last = v->n;
      while (p->pos < p->len && p->src[p->pos] != '"') {
        if (p->src[p->pos] == '\n') return il__perr(p, p->pos, "newline inside a literal (write \\n)"), false;
        int64_t ch = il__char(p);
        if (ch < 0) return false;
        int32_t r = p->rg.n;
        if (!il__range(p, (uint32_t)ch, (uint32_t)ch) || !il__emit(p, rule, (il__gel){.kind = IL__G_CHARS, .a = r, .n = 1}))
          return false;
      }
      if (p->pos >= p->len) return il__perr(p, at, "unterminated literal"), false;
      p->pos++;
      if (il__rule(p, rule)->els.n == last) last = -1; /* "" matches nothing */
    } else if (c == '[') {
      p->pos++;
      il__gel e = {.kind = IL__G_CHARS, .a = p->rg.n};
      if (p->pos < p->len && p->src[p->pos] == '^') e.neg = 1, p->pos++;
      while (p->pos < p->len && p->src[p->pos] != ']') {
        if (p->src[p->pos] == '\n') return il__perr(p, p->pos, "newline inside a character class"), false;
        int64_t lo = il__char(p), hi = lo;
        if (lo < 0) return false;
        if (p->pos + 1 < p->len && p->src[p->pos] == '-' && p->src[p->pos + 1] != ']') {
          p->pos++;
          size_t hat = p->pos;
          if (p->src[hat] == '\n') return il__perr(p, hat, "newline inside a character class"), false;
          hi = il__char(p);
          if (hi < 0) return false;
          if (hi < lo) return il__perr(p, hat, "range end below its start"), false;
        }
        if (!il__range(p, (uint32_t)lo, (uint32_t)hi)) return false;
      }
      if (p->pos >= p->len) return il__perr(p, at, "unterminated character class"), false;
      p->pos++;
      e.n = p->rg.n - e.a;
      if (e.n == 0 && !e.neg) return il__perr(p, at, "empty character class [] matches nothing"), false;
      last = il__rule(p, rule)->els.n;
      if (!il__emit(p, rule, e)) return false;
    } else if (c == '.') {
      p->pos++;
      last = v->n;
      if (!il__emit(p, rule, (il__gel){.kind = IL__G_CHARS, .neg = 1, .a = p->rg.n, .n = 0})) return false;
    } else if (il__word(c)) {
      size_t s = p->pos;
      while (p->pos < p->len && il__word(p->src[p->pos])) p->pos++;
      int32_t id = il__symbol(p, p->src + s, (int32_t)(p->pos - s), s);
      if (id < 0) return false;
      if (il__rule(p, id)->use_pos == SIZE_MAX) il__rule(p, id)->use_pos = s;
      last = il__rule(p, rule)->els.n;
      if (!il__emit(p, rule, (il__gel){.kind = IL__G_REF, .a = id})) return false;
    } else if (c == '(') {
      p->pos++;
      il__space(p, true);
      int32_t sub = il__rule_new(p, NULL, 0, at);
      if (sub < 0 || !il__parse_alternates(p, sub, true)) return false;
      if (p->pos >= p->len || p->src[p->pos] != ')')
        return il__perr(p, at, "this '(' is not closed (expected ')' at line end or before %s)",
                        p->pos >= p->len ? "the end of the grammar" : "what follows"), false;
      p->pos++;
      last = il__rule(p, rule)->els.n;
      if (!il__emit(p, rule, (il__gel){.kind = IL__G_REF, .a = sub})) return false;
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last < 0) return il__perr(p, at, "'%s' repeats nothing (no symbol before it)", (char[2]){c, 0}), false;
      p->pos++;
      int32_t min = 0, max = -1;
      if (c == '+') min = 1;
      else if (c == '?') max = 1;
      else if (c == '{') {
        il__space(p, nested);
        if ((min = il__number(p)) < 0) return false;
        il__space(p, nested);
        max = min;
        if (p->pos < p->len && p->src[p->pos] == ',') {
          p->pos++;
          il__space(p, nested);
          max = -1;
          if (p->pos < p->len && p->src[p->pos] != '}' && (max = il__number(p)) < 0) return false;
          il__space(p, nested);
        }
        if (p->pos >= p->len || p->src[p->pos] != '}') return il__perr(p, p->pos, "expected '}'"), false;
        p->pos++;
        if (max >= 0 && max < min) return il__perr(p, at, "repetition {m,n} with n below m"), false;
      }
      if (!il__repeat(p, rule, last, min, max, at)) return false;
      last = -1;
    } else {
      return true;
    }
    il__space(p, nested);
  }
}

static bool il__parse_alternates(il__gparser *p, int32_t rule, bool nested) {
  if (!il__parse_sequence(p, rule, nested)) return false;
  while (p->pos < p->len && p->src[p->pos] == '|') {
    p->pos++;
    if (!il__emit(p, rule, (il__gel){.kind = IL__G_ALT})) return false;
    il__space(p, true);
    if (!il__parse_sequence(p, rule, nested)) return false;
  }
  return il__emit(p, rule, (il__gel){.kind = IL__G_END});
}

static bool il__parse_rules(il__gparser *p) {
  il__space(p, true);
  while (p->pos < p->len) {
    size_t at = p->pos;
    if (!il__word(p->src[p->pos])) return il__perr(p, at, "expected a rule name"), false;
    while (p->pos < p->len && il__word(p->src[p->pos])) p->pos++;
    int32_t id = il__symbol(p, p->src + at, (int32_t)(p->pos - at), at);
    if (id < 0) return false;
    il__prule *r = il__rule(p, id);
    if (r->def_pos != SIZE_MAX) {
      char name[80];
      snprintf(name, sizeof name, "%.*s", r->name_len > 60 ? 60 : r->name_len, r->name);
      return il__perr(p, at, "rule '%s' is defined twice", name), false;
    }
    r->def_pos = at;
    il__space(p, false);
    if (p->len - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3))
      return il__perr(p, p->pos, "expected '::=' after the rule name"), false;
    p->pos += 3;
    il__space(p, true);
    if (!il__parse_alternates(p, id, false)) return false;
    if (p->pos < p->len && p->src[p->pos] != '\n' && p->src[p->pos] != '\r') {
      char s[8];
      snprintf(s, sizeof s, "%c", p->src[p->pos]);
      return il__perr(p, p->pos, "unexpected '%s' (expected a symbol, '|' or the end of the line)", s), false;
    }
    il__space(p, true);
  }
  return true;
}

/* ---- checks: undefined rules, root, left recursion ---- */

/* nullable[r]: rule r can match the empty string (a fixed point over the rule table). */
static void il__nullable(const il_grammar *g, bool *nullable) {
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < g->n_rules; r++) {
      if (nullable[r]) continue;
      bool alt_ok = true;
      for (int32_t i = g->rule_start[r];; i++) {
        const il__gel *e = &g->el[i];
        if (e->kind == IL__G_ALT || e->kind == IL__G_END) {
          if (alt_ok) {
            nullable[r] = changed = true;
            break;
          }
          if (e->kind == IL__G_END) break;
          alt_ok = true;
        } else if (e->kind == IL__G_CHARS) alt_ok = alt_ok && e->star;
        else alt_ok = alt_ok && nullable[e->a];
      }
    }
  }
}

/* Depth-first over "r can start with rule x without consuming"; color 1 on the path. */
static int32_t il__left_cycle(const il_grammar *g, const bool *nullable, uint8_t *color, int32_t r) {
  color[r] = 1;
  bool lead = true;
  for (int32_t i = g->rule_start[r];; i++) {
    const il__gel *e = &g->el[i];
    if (e->kind == IL__G_ALT || e->kind == IL__G_END) {
      if (e->kind == IL__G_END) break;
      lead = true;
      continue;
    }
    if (!lead) continue;
    if (e->kind == IL__G_CHARS) {
      lead = e->star;
      continue;
    }
    if (color[e->a] == 1) return e->a;
    if (color[e->a] == 0) {
      int32_t c = il__left_cycle(g, nullable, color, e->a);
      if (c >= 0) return c;
    }
    lead = nullable[e->a];
  }
  color[r] = 2;
  return -1;
}

static void il__parser_free(il__gparser *p) {
  for (int32_t i = 0; i < p->rules.n; i++) il_mem_free(il__rule(p, i)->els.p);
  il_mem_free(p->rules.p);
  il_mem_free(p->rg.p);
}

il_status il_grammar_parse(const char *text, size_t len, const char *what, il_grammar **out) {
  *out = NULL;
  il__gparser p = {.src = text, .len = len, .what = what ? what : "grammar"};
  if (!il__parse_rules(&p)) {
    il__parser_free(&p);
    return p.err;
  }
  int32_t root = -1;
  for (int32_t i = 0; i < p.rules.n; i++) {
    il__prule *r = il__rule(&p, i);
    char name[80];
    snprintf(name, sizeof name, "%.*s", r->name_len > 60 ? 60 : r->name_len, r->name ? r->name : "");
    if (r->def_pos == SIZE_MAX) {
      il__perr(&p, r->use_pos, "undefined rule '%s'", name);
      il__parser_free(&p);
      return p.err;
    }
    if (r->name && r->name_len == 4 && !memcmp(r->name, "root", 4)) root = i;
  }
  if (root < 0) {
    il__perr(&p, 0, "no rule named 'root' (the start rule)");
    il__parser_free(&p);
    return p.err;
  }
  il_grammar *g = il_mem_calloc(IL_MEM_OTHER, sizeof *g, "grammar");
  int32_t n_el = 0;
  for (int32_t i = 0; i < p.rules.n; i++) n_el += il__rule(&p, i)->els.n;
  if (g) {
    g->n_rules = p.rules.n;
    g->n_el = n_el;
    g->n_rg = p.rg.n;
    g->root = root;
    g->bytes = sizeof *g + sizeof(il__gel) * (size_t)n_el + sizeof(il__grange) * (size_t)(p.rg.n + 1) +
               sizeof(int32_t) * (size_t)p.rules.n;
    g->el = il_mem_alloc(IL_MEM_OTHER, sizeof(il__gel) * (size_t)n_el, "grammar elements");
    g->rg = il_mem_alloc(IL_MEM_OTHER, sizeof(il__grange) * (size_t)(p.rg.n + 1), "grammar ranges");
    g->rule_start = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)p.rules.n, "grammar rules");
  }
  if (!g || !g->el || !g->rg || !g->rule_start) {
    il_grammar_free(g);
    il__parser_free(&p);
    return IL_ERR_OOM;
  }
  if (p.rg.n) memcpy(g->rg, p.rg.p, sizeof(il__grange) * (size_t)p.rg.n);
  for (int32_t i = 0, at = 0; i < p.rules.n; i++) {
    il__prule *r = il__rule(&p, i);
    g->rule_start[i] = at;
    memcpy(g->el + at, r->els.p, sizeof(il__gel) * (size_t)r->els.n);
    at += r->els.n;
  }
  bool *nullable = il_mem_calloc(IL_MEM_OTHER, (size_t)g->n_rules, "grammar check");
  uint8_t *color = il_mem_calloc(IL_MEM_OTHER, (size_t)g->n_rules, "grammar check");
  il_status st = nullable && color ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) {
    il__nullable(g, nullable);
    for (int32_t r = 0; r < g->n_rules && st == IL_OK; r++) {
      if (color[r]) continue;
      int32_t c = il__left_cycle(g, nullable, color, r);
      if (c < 0) continue;
      il__prule *pr = il__rule(&p, c);
      char name[80];
      if (pr->name) snprintf(name, sizeof name, "rule '%.*s'", pr->name_len > 60 ? 60 : pr->name_len, pr->name);
      else snprintf(name, sizeof name, "the group or repetition here");
      char msg[160];
      snprintf(msg, sizeof msg, "%s is left-recursive (it can reach itself without consuming a character)", name);
      st = il__perr(&p, pr->name ? pr->def_pos : pr->use_pos, "%s", msg);
    }
  }
  il_mem_free(nullable);
  il_mem_free(color);
  il__parser_free(&p);
  if (st != IL_OK) {
    il_grammar_free(g);
    return st;
  }
  *out = g;
  return IL_OK;
}

void il_grammar_free(il_grammar *g) {
  if (!g) return;
  il_mem_free(g->el);
  il_mem_free(g->rg);
  il_mem_free(g->rule_start);
  il_mem_free(g);
}

size_t il_grammar_bytes(const il_grammar *g) { return g->bytes; }
int32_t il_grammar_n_rules(const il_grammar *g) { return g->n_rules; }

/* ---- vocabulary trie ---- */

typedef struct {
  int32_t child, n_child; /* children: node[child .. child + n_child), ascending by byte */
  int32_t tok, n_tok;     /* tokens whose bytes end here: ids[tok .. tok + n_tok) */
  uint8_t byte;
} il__tnode;

struct il_grammar_vocab {
  int32_t n_vocab, eos, n_nodes, n_ids, n_eog;
  il__tnode *node; /* node[0] is the root (no byte) */
  int32_t *ids;    /* token ids sorted by their bytes */
  int32_t *eog;    /* end-of-generation tokens */
  char *blob;      /* every token's bytes: blob[off[id] .. off[id] + len[id]) */
  size_t *off;
  uint16_t *len;
  size_t bytes;
};

typedef struct {
  const char *blob;
  const size_t *off;
  const uint16_t *len;
} il__tsort;

static int il__tcmp_r(const void *a, const void *b, void *ctx) {
  const il__tsort *t = ctx;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  size_t lx = t->len[x], ly = t->len[y];
  int c = memcmp(t->blob + t->off[x], t->blob + t->off[y], lx < ly ? lx : ly);
  if (c) return c;
  if (lx != ly) return lx < ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Builds node `at` from ids[lo..hi), which share their first `depth` bytes. */
static void il__trie_build(il_grammar_vocab *tv, const il__tsort *t, int32_t at, int32_t lo, int32_t hi, int32_t depth,
                           int32_t *next) {
  il__tnode *nd = &tv->node[at];
  int32_t i = lo;
  while (i < hi && t->len[tv->ids[i]] == depth) i++;
  nd->tok = lo;
  nd->n_tok = i - lo;
  int32_t groups = 0;
  for (int32_t j = i; j < hi; j++)
    if (j == i || t->blob[t->off[tv->ids[j]] + depth] != t->blob[t->off[tv->ids[j - 1]] + depth]) groups++;
  nd->child = *next;
  nd->n_child = groups;
  *next += groups;
  int32_t c = tv->node[at].child;
  for (int32_t j = i; j < hi; c++) {
    uint8_t b = (uint8_t)t->blob[t->off[tv->ids[j]] + depth];
    int32_t k = j;
    while (k < hi && (uint8_t)t->blob[t->off[tv->ids[k]] + depth] == b) k++;
    tv->node[c].byte = b;
    il__trie_build(tv, t, c, j, k, depth + 1, next);
    j = k;
  }
}

il_status il_grammar_vocab_new(const il_vocab *v, il_grammar_vocab **out) {
  *out = NULL;
  const int32_t n = il_vocab_size(v);
  il_grammar_vocab *tv = il_mem_calloc(IL_MEM_WORKSPACE, sizeof *tv, "grammar vocabulary");
  if (!tv) return IL_ERR_OOM;
  tv->n_vocab = n;
  tv->eos = il_vocab_eos(v);
  size_t total = 0;
  char piece[1024];
  for (int32_t i = 0; i < n; i++) {
    size_t k = il_vocab_token_piece(v, i, false, piece, sizeof piece);
    if (k <= sizeof piece && !il_vocab_is_eog(v, i)) total += k;
  }
  size_t *off = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(size_t) * (size_t)n, "grammar trie build");
  uint16_t *len = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(uint16_t) * (size_t)n, "grammar trie build");
  char *blob = il_mem_alloc(IL_MEM_WORKSPACE, total + 1, "grammar trie build");
  tv->ids = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)n, "grammar trie ids");
  tv->eog = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)n, "grammar trie eog");
  il_status st = off && len && blob && tv->ids && tv->eog ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) {
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
      size_t k = il_vocab_token_piece(v, i, false, piece, sizeof piece);
      off[i] = at;
      len[i] = 0;
      if (il_vocab_is_eog(v, i)) {
        tv->eog[tv->n_eog++] = i;
        continue;
      }
      if (k == 0 || k > sizeof piece) continue; /* no bytes (control, unknown) or absurdly long */
      memcpy(blob + at, piece, k);
      len[i] = (uint16_t)k;
      tv->ids[tv->n_ids++] = i;
      at += k;
    }
    il__tsort t = {blob, off, len};
    qsort_r(tv->ids, (size_t)tv->n_ids, sizeof(int32_t), il__tcmp_r, &t);
    /* nodes: the root plus one per distinct prefix (each token adds what it does not share
     * with the one sorted before it) */
    int64_t nodes = 1;
    for (int32_t i = 0; i < tv->n_ids; i++) {
      int32_t x = tv->ids[i];
      size_t l = 0;
      if (i > 0) {
        int32_t y = tv->ids[i - 1];
        size_t m = len[x] < len[y] ? len[x] : len[y];
        while (l < m && blob[off[x] + l] == blob[off[y] + l]) l++;
      }
      nodes += len[x] - (int64_t)l;
    }
    tv->n_nodes = (int32_t)nodes;
    tv->node = il_mem_calloc(IL_MEM_WORKSPACE, sizeof(il__tnode) * (size_t)nodes, "grammar trie");
    if (!tv->node) st = IL_ERR_OOM;
    else {
      int32_t next = 1;
      il__trie_build(tv, &t, 0, 0, tv->n_ids, 0, &next);
    }
  }
  tv->off = off;
  tv->len = len;
  tv->blob = blob;
  if (st != IL_OK) {
    il_grammar_vocab_free(tv);
    return st;
  }
  tv->bytes = sizeof *tv + sizeof(il__tnode) * (size_t)tv->n_nodes + (2 * sizeof(int32_t) + sizeof(size_t) + 2) * (size_t)n +
              total;
  *out = tv;
  return IL_OK;
}

void il_grammar_vocab_free(il_grammar_vocab *tv) {
  if (!tv) return;
  il_mem_free(tv->node);
  il_mem_free(tv->ids);
  il_mem_free(tv->eog);
  il_mem_free(tv->off);
  il_mem_free(tv->len);
  il_mem_free(tv->blob);
  il_mem_free(tv);
}

size_t il_grammar_vocab_bytes(const il_grammar_vocab *tv) { return tv->bytes; }
int32_t il_grammar_vocab_nodes(const il_grammar_vocab *tv) { return tv->n_nodes; }
int32_t il_grammar_vocab_eos(const il_grammar_vocab *tv) { return tv->eos; }

/* ---- matcher ---- */

typedef struct il__gnode {
  int32_t pos;
  const struct il__gnode *parent;
} il__gnode;

typedef il__gnode il__gstack; /* a stack top: (pos, parent); pos -1: the empty stack */

typedef struct {
  char *base;
  size_t off, cap;
} il__arena;

typedef struct {
  il__gstack *st;
  int32_t n;
  uint32_t cp_val; /* an incomplete UTF-8 character: its bits so far */
  int8_t cp_left;  /* ... and the continuation bytes still to come */
  int8_t cp_total; /* ... of how many after the lead byte (1..3) */
} il__gset;

struct il_grammar_state {
  const il_grammar *g;
  const il_grammar_vocab *tv;
  il__arena live[2], work;
  int cur; /* live[cur] holds set */
  il__gset set;
  bool overflow;
  char *mem; /* the three arenas, one allocation */
};

static void *il__aalloc(il_grammar_state *s, il__arena *a, size_t n) {
  n = (n + 7) & ~(size_t)7;
  if (a->cap - a->off < n) {
    s->overflow = true;
    return NULL;
  }
  void *p = a->base + a->off;
  a->off += n;
  return p;
}

static bool il__stack_eq(const il__gstack *x, const il__gstack *y) {
  if (x->pos != y->pos) return false;
  const il__gnode *a = x->parent, *b = y->parent;
  while (a != b) {
    if (!a || !b || a->pos != b->pos) return false;
    a = a->parent;
    b = b->parent;
  }
  return true;
}


#define IL__MAX_STACKS 512 /* stacks in one set; more is a grammar too ambiguous to match */

typedef struct {
  il__gstack st[IL__MAX_STACKS];
  int32_t n;
} il__gbuild;

static void il__add(il_grammar_state *s, il__gbuild *b, int32_t pos, const il__gnode *parent) {
  il__gstack t = {pos, parent};
  for (int32_t i = 0; i < b->n; i++)
    if (il__stack_eq(&b->st[i], &t)) return;
  if (b->n == IL__MAX_STACKS) {
    s->overflow = true;
    return;
  }
  b->st[b->n++] = t;
}

/* Adds every stack reachable from (pos, parent) without consuming: CHARS tops or the empty
 * stack. Frames for entered rules are allocated in a. */
static void il__expand(il_grammar_state *s, il__arena *a, il__gbuild *b, int32_t pos, const il__gnode *parent,
                       int depth) {
  const il_grammar *g = s->g;
  if (depth > 2048 || s->overflow) {
    s->overflow = true;
    return;
  }
  for (;;) {
    if (pos < 0) {
      il__add(s, b, -1, NULL);
      return;
    }
    const il__gel *e = &g->el[pos];
    if (e->kind == IL__G_END || e->kind == IL__G_ALT) {
      if (!parent) {
        il__add(s, b, -1, NULL);
        return;
      }
      pos = parent->pos;
      parent = parent->parent;
      continue;
    }
    if (e->kind == IL__G_CHARS) {
      il__add(s, b, pos, parent);
      if (!e->star) return;
      pos++;
      continue;
    }
    /* REF: one frame to come back to, then each alternative of the rule */
    il__gnode *ret = il__aalloc(s, a, sizeof *ret);
    if (!ret) return;
    ret->pos = pos + 1;
    ret->parent = parent;
    int32_t i = g->rule_start[e->a];
    for (;;) {
      il__expand(s, a, b, i, ret, depth + 1);
      while (g->el[i].kind != IL__G_ALT && g->el[i].kind != IL__G_END) i++;
      if (g->el[i].kind == IL__G_END) break;
      i++;
    }
    return;
  }
}

static bool il__chars_match(const il_grammar *g, const il__gel *e, uint32_t cp) {
  bool in = false;
  for (int32_t i = 0; i < e->n && !in; i++) in = cp >= g->rg[e->a + i].lo && cp <= g->rg[e->a + i].hi;
  return in != (e->neg != 0);
}

/* Some code point in [lo, hi] may match e (for a negated class: not all of them are excluded
 * by one range; close enough to prune, exact once the character is complete). */
static bool il__chars_match_any(const il_grammar *g, const il__gel *e, uint32_t lo, uint32_t hi) {
  for (int32_t i = 0; i < e->n; i++) {
    const il__grange *r = &g->rg[e->a + i];
    if (e->neg ? (r->lo <= lo && r->hi >= hi) : (r->lo <= hi && r->hi >= lo)) return !e->neg;
  }
  return e->neg;
}

/* Advances `in` by one byte into *out (its entries and frames allocated in a). Returns false
 * when nothing can take the byte, or when a is full (then s->overflow). */
static bool il__step(il_grammar_state *s, il__arena *a, const il__gset *in, uint8_t byte, il__gset *out) {
  const il_grammar *g = s->g;
  /* the smallest code point of each length: shorter ones are overlong encodings, refused */
  static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
  uint32_t cp;
  int n = 0, total;
  if (in->cp_left == 0) {
    n = byte < 0x80 ? 0 : (byte & 0xE0) == 0xC0 ? 1 : (byte & 0xF0) == 0xE0 ? 2 : (byte & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || byte == 0xC0 || byte == 0xC1 || byte > 0xF4) return false;
    cp = n == 0 ? byte : byte & (0x3Fu >> n);
    total = n;
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    cp = in->cp_val << 6 | (byte & 0x3F);
    n = in->cp_left - 1;
    total = in->cp_total;
  }
  if (n > 0) {
    /* a character begun: the set stays, if some stack can take a character starting so */
    *out = *in;
    out->cp_val = cp;
    out->cp_left = (int8_t)n;
    out->cp_total = (int8_t)total;
    uint32_t lo = cp << (6 * n), hi = lo | ((1u << (6 * n)) - 1);
    if (lo < min_cp[total]) lo = min_cp[total];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false;
    for (int32_t i = 0; i < in->n; i++)
      if (in->st[i].pos >= 0 && il__chars_match_any(g, &g->el[in->st[i].pos], lo, hi)) return true;
    return false;
  }
  if (cp < min_cp[total] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  il__gbuild b;
  b.n = 0;
  for (int32_t i = 0; i < in->n && !s->overflow; i++) {
    const il__gstack *t = &in->st[i];
    if (t->pos < 0) continue;
    const il__gel *e = &g->el[t->pos];
    if (!il__chars_match(g, e, cp)) continue;
    /* a starred class stays on top and its frames are shared: nothing is allocated */
    il__expand(s, a, &b, e->star ? t->pos : t->pos + 1, t->parent, 0);
  }
  if (s->overflow || b.n == 0) return false;
  il__gstack *st = il__aalloc(s, a, sizeof(il__gstack) * (size_t)b.n);
  if (!st) return false;
  memcpy(st, b.st, sizeof(il__gstack) * (size_t)b.n);
  *out = (il__gset){st, b.n, 0, 0, 0};
  return true;
}

/* Copies set `in` (with its frames) into arena a, which is reset first. */
static bool il__compact(il_grammar_state *s, il__arena *a, const il__gset *in, il__gset *out) {
  a->off = 0;
  il__gstack *st = il__aalloc(s, a, sizeof(il__gstack) * (size_t)(in->n ? in->n : 1));
  if (!st) return false;
  for (int32_t i = 0; i < in->n; i++) {
    st[i].pos = in->st[i].pos;
    il__gnode *prev = NULL;
    st[i].parent = NULL;
    for (const il__gnode *src = in->st[i].parent; src; src = src->parent) {
      il__gnode *nd = il__aalloc(s, a, sizeof *nd);
      if (!nd) return false;
      nd->pos = src->pos;
      nd->parent = NULL;
      if (prev) prev->parent = nd;
      else st[i].parent = nd;
      prev = nd;
    }
  }
  *out = (il__gset){st, in->n, in->cp_val, in->cp_left, in->cp_total};
  return true;
}

static il_status il__overflow(void) {
  return il_error(IL_ERR_RANGE, "grammar: the stacks of one step need more than the %u KiB work space (the "
                  "grammar is too ambiguous: many alternatives that match the same text)",
                  IL_GRAMMAR_STATE_ARENA >> 10);
}

size_t il_grammar_state_bytes(void) { return sizeof(il_grammar_state) + 3 * (size_t)IL_GRAMMAR_STATE_ARENA; }

il_status il_grammar_state_new(const il_grammar *g, const il_grammar_vocab *tv, il_grammar_state **out) {
  *out = NULL;
  il_grammar_state *s = il_mem_calloc(IL_MEM_WORKSPACE, sizeof *s, "grammar state");
  if (!s) return IL_ERR_OOM;
  s->mem = il_mem_alloc(IL_MEM_WORKSPACE, 3 * (size_t)IL_GRAMMAR_STATE_ARENA, "grammar stacks");
  if (!s->mem) {
    il_mem_free(s);
    return IL_ERR_OOM;
  }
  s->g = g;
  s->tv = tv;
  for (int i = 0; i < 3; i++) {
    il__arena *a = i < 2 ? &s->live[i] : &s->work;
    *a = (il__arena){s->mem + (size_t)i * IL_GRAMMAR_STATE_ARENA, 0, IL_GRAMMAR_STATE_ARENA};
  }
  /* the start: the root rule entered with no frame to return to */
  il__gbuild b;
  b.n = 0;
  int32_t i = g->rule_start[g->root];
  for (;;) {
    il__expand(s, &s->live[0], &b, i, NULL, 0);
    while (g->el[i].kind != IL__G_ALT && g->el[i].kind != IL__G_END) i++;
    if (g->el[i].kind == IL__G_END) break;
    i++;
  }
  il__gstack *st = s->overflow ? NULL : il__aalloc(s, &s->live[0], sizeof(il__gstack) * (size_t)b.n);
  if (!st) {
    il_grammar_state_free(s);
    return il__overflow();
  }
  memcpy(st, b.st, sizeof(il__gstack) * (size_t)b.n);
  s->set = (il__gset){st, b.n, 0, 0, 0};
  *out = s;
  return IL_OK;
}

const il_grammar_vocab *il_grammar_state_vocab(const il_grammar_state *s) { return s->tv; }

void il_grammar_state_free(il_grammar_state *s) {
  if (!s) return;
  il_mem_free(s->mem);
  il_mem_free(s);
}

il_status il_grammar_state_accept_bytes(il_grammar_state *s, const char *bytes, size_t n) {
  if (n == 0) return IL_OK;
  s->work.off = 0;
  il__gset cur = s->set, next;
  for (size_t i = 0; i < n; i++) {
    if (!il__step(s, &s->work, &cur, (uint8_t)bytes[i], &next)) {
      if (s->overflow) {
        s->overflow = false;
        return il__overflow();
      }
      return il_error(IL_ERR_INVALID_ARG, "grammar: byte %zu (0x%02x) of the text is not allowed here", i,
                      (unsigned)(uint8_t)bytes[i]);
    }
    cur = next;
  }
  int other = 1 - s->cur;
  if (!il__compact(s, &s->live[other], &cur, &s->set)) {
    s->overflow = false;
    return il__overflow();
  }
  s->cur = other;
  return IL_OK;
}

bool il_grammar_state_accepting(const il_grammar_state *s) {
  if (s->set.cp_left) return false;
  for (int32_t i = 0; i < s->set.n; i++)
    if (s->set.st[i].pos < 0) return true;
  return false;
}

bool il_grammar_state_finished(const il_grammar_state *s) {
  return il_grammar_state_accepting(s) && s->set.n == 1;
}

static bool il__is_eog(const il_grammar_vocab *tv, int32_t tok) {
  for (int32_t i = 0; i < tv->n_eog; i++)
    if (tv->eog[i] == tok) return true;
  return false;
}

il_status il_grammar_state_accept_token(il_grammar_state *s, int32_t tok) {
  const il_grammar_vocab *tv = s->tv;
  if (tok < 0 || tok >= tv->n_vocab) return il_error(IL_ERR_INVALID_ARG, "grammar: token %d out of range", tok);
  if (il__is_eog(tv, tok)) {
    if (il_grammar_state_accepting(s)) return IL_OK;
    return il_error(IL_ERR_INVALID_ARG, "grammar: end of generation (token %d) before the grammar is complete", tok);
  }
  if (tv->len[tok] == 0) return il_error(IL_ERR_INVALID_ARG, "grammar: token %d has no bytes and is never allowed", tok);
  return il_grammar_state_accept_bytes(s, tv->blob + tv->off[tok], tv->len[tok]);
}

/* The hot path: depth-first over the trie, one il__step per node visited; a node no stack can
 * take prunes its whole subtree. */
static void il__mask_walk(il_grammar_state *s, const il__tnode *nd, const il__gset *set, uint8_t *allowed,
                          int32_t *count) {
  const il_grammar_vocab *tv = s->tv;
  for (int32_t k = 0; k < nd->n_child && !s->overflow; k++) {
    const il__tnode *c = &tv->node[nd->child + k];
    size_t mark = s->work.off;
    il__gset next;
    if (il__step(s, &s->work, set, c->byte, &next)) {
      for (int32_t t = 0; t < c->n_tok; t++) {
        int32_t id = tv->ids[c->tok + t];
        allowed[id >> 3] |= (uint8_t)(1u << (id & 7));
      }
      *count += c->n_tok;
      if (c->n_child) il__mask_walk(s, c, &next, allowed, count);
    }
    s->work.off = mark;
  }
}

il_status il_grammar_state_mask(il_grammar_state *s, uint8_t *allowed, int32_t *n_allowed) {
  const il_grammar_vocab *tv = s->tv;
  memset(allowed, 0, ((size_t)tv->n_vocab + 7) / 8);
  int32_t count = 0;
  if (il_grammar_state_accepting(s))
    for (int32_t i = 0; i < tv->n_eog; i++) {
      allowed[tv->eog[i] >> 3] |= (uint8_t)(1u << (tv->eog[i] & 7));
      count++;
    }
  s->work.off = 0;
  il__mask_walk(s, &tv->node[0], &s->set, allowed, &count);
  *n_allowed = count;
  if (s->overflow) {
    s->overflow = false;
    return il__overflow();
  }
  return IL_OK;
}
