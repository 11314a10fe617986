/* cli/args: flag parsing shared by all commands. */
#include "cli/args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "memory/mem.h"

static const il_cli_flag *il__find_flag(const il_cli_flag *flags, int n, const char *name, char short_flag) {
  for (int i = 0; i < n; i++)
    if ((name && !strcmp(flags[i].name, name)) || (short_flag && flags[i].short_flag == short_flag)) return &flags[i];
  return NULL;
}

size_t il_cli_edit_distance(const char *a, const char *b) {
  /* Levenshtein distance with adjacent transpositions counted as one edit (optimal string
   * alignment), over at most 63 bytes of each: enough for option and command names */
  enum { L = 64 };
  size_t n = strlen(a), m = strlen(b);
  if (n >= L) n = L - 1;
  if (m >= L) m = L - 1;
  size_t d[L][L];
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

/* Keeps cand in *best when it is nearer to word than what *best holds. A candidate that starts
 * the word, or that the word starts, of at least 3 letters (--temperature for --temp, --thr
 * for --threads) counts as one edit away. */
static void il__consider(const char *word, const char *cand, const char **best, size_t *best_d) {
  if (!cand || !*cand) return;
  size_t d = il_cli_edit_distance(word, cand);
  const size_t lw = strlen(word), lc = strlen(cand);
  if (d > 1 && lw >= 3 && lc >= 3 && !strncmp(word, cand, lw < lc ? lw : lc)) d = 1;
  if (d < *best_d) {
    *best_d = d;
    *best = cand;
  }
}

/* A typo is at most a third of the word's letters away (one for short words). */
static const char *il__near_enough(const char *word, const char *best, size_t best_d) {
  size_t limit = strlen(word) / 3;
  if (limit < 1) limit = 1;
  return best && best_d <= limit ? best : NULL;
}

const char *il_cli_suggest(const char *word, const char *const *cands, int n) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (int i = 0; i < n; i++) il__consider(word, cands[i], &best, &best_d);
  return il__near_enough(word, best, best_d);
}

/* The flag or engine option nearest to the unknown long option `name`, or NULL. */
static const char *il__suggest_option(const char *name, const il_cli_flag *flags, int n_flags, const il_config *cfg,
                                      const il_request_opts *req) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (int i = 0; i < n_flags; i++) il__consider(name, flags[i].name, &best, &best_d);
  for (const il_opt *o = cfg ? il_config_options() : NULL; o && o->name; o++)
    if (!o->request || req) il__consider(name, o->name, &best, &best_d);
  if (cfg) il__consider(name, "config", &best, &best_d);
  return il__near_enough(name, best, best_d);
}

/* Old spellings kept working, each printing a note once: one flag, one meaning across the
 * commands (docs/cli.md, "One flag, one meaning"). */
static const struct {
  const char *cmd, *old, *now, *why;
} il__renamed[] = {
    {"bench", "reps", "repetitions", "-r/--repetitions, as llama-bench spells it"},
    {"experiment", "repeat", "repetitions", "-r/--repetitions, as bench and llama-bench spell it"},
    {"bench", "batch", "parallel", "--parallel (parallel sequences, llama-server's -np); --batch is tokens per forward pass in run, chat, serve and plan"},
    {"experiment", "batch", "parallel", "--parallel (parallel sequences, llama-server's -np); --batch is tokens per forward pass in run, chat, serve and plan"},
    {"experiment", "out", "output", "-o/--output, as in bench"},
};

/* The current name of a renamed long option of cmd (noting the change on stderr), or name. */
static const char *il__current_name(const char *cmd, const char *name) {
  for (size_t i = 0; i < sizeof il__renamed / sizeof il__renamed[0]; i++)
    if (!strcmp(cmd, il__renamed[i].cmd) && !strcmp(name, il__renamed[i].old)) {
      fprintf(stderr, "inferlab %s: note: --%s is the old spelling of %s; it still works\n", cmd, name, il__renamed[i].why);
      return il__renamed[i].now;
    }
  return name;
}

int il_cli_parse(const char *cmd, int argc, char **argv, il_config *cfg, il_request_opts *req, const il_cli_flag *flags,
                 int n_flags, const char **pos, int max_pos, int *n_pos) {
  *n_pos = 0;
  /* a config file may hold request options (experiment writes n-predict) and still configure a
   * command that does not generate: they are read into a scratch copy there */
  static il_request_opts scratch;
  il_request_opts *file_req = req ? req : &scratch;
  /* pass 1: --config FILE */
  for (int i = 1; cfg && i < argc; i++) {
    if (!strcmp(argv[i], "--")) break;
    const char *file = NULL;
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 >= argc) return il_cli_usage_error(cmd, "--config needs a file");
      file = argv[++i];
    } else if (!strncmp(argv[i], "--config=", 9)) {
      file = argv[i] + 9;
    }
    if (file) {
      il_status st = il_config_load(cfg, file_req, file);
      if (st != IL_OK) return il_cli_fail(cmd, st);
    }
  }
  /* pass 2: everything else, in order */
  bool only_pos = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_pos || a[0] != '-' || a[1] == 0) {
      if (*n_pos >= max_pos) return il_cli_usage_error(cmd, "unexpected argument '%s'", a);
      pos[(*n_pos)++] = a;
      continue;
    }
    if (!strcmp(a, "--")) {
      only_pos = true;
      continue;
    }
    char name[128];
    const char *inline_val = NULL;
    char short_flag = 0;
    if (a[1] == '-') {
      const char *eq = strchr(a + 2, '=');
      size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
      if (len >= sizeof name) return il_cli_usage_error(cmd, "unknown option '%s'", a);
      memcpy(name, a + 2, len);
      name[len] = 0;
      if (eq) inline_val = eq + 1;
      const char *now = il__current_name(cmd, name);
      if (now != name) snprintf(name, sizeof name, "%s", now);
    } else if (!strcmp(a, "-ngl")) { /* llama.cpp's spelling of --gpu-layers */
      snprintf(name, sizeof name, "gpu-layers");
    } else {
      if (a[2] != 0) return il_cli_usage_error(cmd, "unknown option '%s' (short options take a separate value)", a);
      short_flag = a[1];
      name[0] = 0;
    }
    if (cfg && !strcmp(name, "config")) {
      if (!inline_val) i++;
      continue;
    }
    const il_cli_flag *f = il__find_flag(flags, n_flags, short_flag ? NULL : name, short_flag);
    if (f) {
      if (f->set) *f->set = true;
      if (!f->has_arg) {
        if (inline_val) return il_cli_usage_error(cmd, "--%s takes no value", f->name);
        continue;
      }
      if (!inline_val) {
        if (i + 1 >= argc) return il_cli_usage_error(cmd, "--%s needs a value", f->name);
        inline_val = argv[++i];
      }
      *f->value = inline_val;
      continue;
    }
    const il_opt *o = cfg ? (short_flag ? il_config_find_short(short_flag) : il_config_find(name)) : NULL;
    if (!o && cfg && !short_flag && !inline_val) { /* --mmap: the default of the boolean --no-mmap */
      char neg[sizeof name + 3];
      snprintf(neg, sizeof neg, "no-%s", name);
      const il_opt *n = il_config_find(neg);
      if (n && n->kind == IL_OPT_BOOL && !n->request) {
        il_status st = il_config_apply(cfg, req, n->name, "false", a);
        if (st != IL_OK) return il_cli_usage_error(cmd, "%s", il_error_detail());
        continue;
      }
    }
    if (!o) {
      const char *near = short_flag ? NULL : il__suggest_option(name, flags, n_flags, cfg, req);
      if (near) return il_cli_usage_error(cmd, "unknown option '%s'; did you mean '--%s'?", a, near);
      return il_cli_usage_error(cmd, "unknown option '%s'", a);
    }
    if (o->request && !req)
      return il_cli_usage_error(cmd, "--%s is a generation option; '%s' does not generate text", o->name, cmd);
    char where[160];
    snprintf(where, sizeof where, "--%s", o->name);
    if (o->kind == IL_OPT_BOOL && !inline_val) {
      inline_val = "true";
    } else if (!inline_val) {
      if (i + 1 >= argc) return il_cli_usage_error(cmd, "--%s needs a value", o->name);
      inline_val = argv[++i];
    }
    il_status st = il_config_apply(cfg, req, o->name, inline_val, where);
    if (st != IL_OK) return il_cli_usage_error(cmd, "%s", il_error_detail());
  }
  return 0;
}

void il_cli_print_options(FILE *f, const char *names) {
  for (const il_opt *o = il_config_options(); o->name; o++) {
    if (names) {
      const char *p = strstr(names, o->name);
      size_t l = strlen(o->name);
      bool hit = false;
      while (p && !hit) {
        hit = (p == names || p[-1] == ',') && (p[l] == 0 || p[l] == ',');
        p = strstr(p + 1, o->name);
      }
      if (!hit) continue;
    }
    char flag[64];
    /* N a whole number, X any number, S a word or text */
    const char *arg = o->kind == IL_OPT_BOOL ? "" : o->kind == IL_OPT_STR ? " S" : o->kind == IL_OPT_FLOAT ? " X" : " N";
    if (o->short_flag) snprintf(flag, sizeof flag, "-%c, --%s%s", o->short_flag, o->name, arg);
    else snprintf(flag, sizeof flag, "    --%s%s", o->name, arg);
    il_config cfg;
    il_config_defaults(&cfg);
    il_request_opts req; /* only the fixed-size part is read: the prompt's default is "" */
    req.p = il_request_default_params();
    req.prompt[0] = 0;
    char dflt[64], range[64] = "";
    il_config_format(&cfg, &req, o, dflt, sizeof dflt);
    /* the default as it would be typed, then the accepted range where it tells something (a
     * bound like 1073741824 is the parser's, not advice): one format, [DEFAULT; MIN..MAX] */
    const bool told = o->max <= 1e6;
    if (o->kind == IL_OPT_INT && told)
      snprintf(range, sizeof range, "; %lld..%lld", (long long)o->min, (long long)o->max);
    else if (o->kind == IL_OPT_FLOAT && told)
      snprintf(range, sizeof range, "; %s%g..%g", o->min_open ? "above " : "", o->min, o->max);
    fprintf(f, "  %-24s %s%s%s%s%s\n", flag, o->help, *dflt && o->kind != IL_OPT_BOOL ? " [" : "",
            o->kind != IL_OPT_BOOL ? dflt : "", range, *dflt && o->kind != IL_OPT_BOOL ? "]" : "");
  }
  fprintf(f, "  %-24s %s\n", "    --config FILE", "read options from 'key = value' lines; flags override it");
}

void il_cli_print_memory(FILE *f) {
  il_mem_stats st;
  il_mem_stats_get(&st);
  char a[32];
  fprintf(f, "memory (peak):");
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
    if (!st.peak[c] && !st.mapped[c]) continue;
    fprintf(f, " %s %s", il_mem_category_name((il_mem_category)c), il_mem_format_bytes(st.peak[c], a, sizeof a));
    if (st.mapped[c]) fprintf(f, " (+%s mapped)", il_mem_format_bytes(st.mapped[c], a, sizeof a));
    fprintf(f, ",");
  }
  fprintf(f, " total %s\n", il_mem_format_bytes(st.total_peak, a, sizeof a));
}

il_status il_cli_read_all(FILE *f, const char *name, char **out, size_t *n) {
  *out = NULL;
  size_t cap = 1 << 16, len = 0;
  char *b = il_mem_alloc(IL_MEM_OTHER, cap, "input text");
  while (b) {
    if (len + 1 >= cap) { /* one byte stays free for the terminating NUL */
      char *nb = il_mem_alloc(IL_MEM_OTHER, cap * 2, "input text");
      if (nb) memcpy(nb, b, len);
      il_mem_free(b);
      b = nb;
      cap *= 2;
      if (!b) break;
    }
    size_t r = fread(b + len, 1, cap - 1 - len, f);
    len += r;
    if (r == 0) {
      if (ferror(f)) {
        il_mem_free(b);
        return il_error(IL_ERR_IO, "%s: read error", name);
      }
      break;
    }
  }
  if (!b) return IL_ERR_OOM;
  b[len] = 0;
  *n = len;
  *out = b;
  return IL_OK;
}

int il_cli_parse_duration_ms(const char *text, int min_ms, bool *bare) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || !(v > 0) || !isfinite(v)) return -1; /* also NaN */
  double ms;
  if (!strcmp(end, "ms")) ms = v;
  else if (!strcmp(end, "s") || !*end) ms = v * 1000.0;
  else return -1;
  if (bare) *bare = !*end;
  if (ms < min_ms || ms > 3600e3) return -1; /* checked before the conversion to int */
  return (int)(ms + 0.5);
}
