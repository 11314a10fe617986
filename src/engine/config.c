/* engine/config: option table, validation, config files. */
#include "engine/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/request.h"
#include "memory/mem.h"

#define IL__O(field) offsetof(il_config, field), sizeof(((il_config *)0)->field)
/* request options: offsets into il_request_opts (the `request` flag ends their rows) */
#define IL__R(field) offsetof(il_request_opts, field), sizeof(((il_request_opts *)0)->field)

static const il_opt il__options[] = {
    {"model", 'm', IL_OPT_STR, IL__O(model), 0, 0, "GGUF file or builtin:tiny | builtin:1b | builtin:moe-tiny", false, false},
    {"wtype", 0, IL_OPT_STR, IL__O(wtype), 0, 0, "weight type of a built-in model (f32 f16 bf16 q8_0 q4_0 q4_1)", false, false},
    {"threads", 't', IL_OPT_INT, IL__O(threads), 0, 1024, "CPU threads (0 = one per core)", false, false},
    {"ctx", 'c', IL_OPT_INT, IL__O(ctx), 0, 1 << 22, "context length per sequence (0 = the model's)", false, false},
    {"batch", 'b', IL_OPT_INT, IL__O(batch), 1, 1 << 16, "max tokens per forward pass", false, false},
    {"n-seq", 0, IL_OPT_INT, IL__O(n_seq), 1, 4096, "sequences held in the KV cache", false, false},
    {"seed", 's', IL_OPT_U64, IL__R(p.sampling.seed), 0, 0, "sampling seed", false, true},
    {"temp", 0, IL_OPT_FLOAT, IL__R(p.sampling.temp), 0, 100, "temperature (0 = greedy)", false, true},
    {"top-k", 0, IL_OPT_INT, IL__R(p.sampling.top_k), 0, 1 << 30, "keep the k most likely tokens (0 = off)", false, true},
    {"top-p", 0, IL_OPT_FLOAT, IL__R(p.sampling.top_p), 0, 1, "nucleus sampling mass (1 = off)", false, true},
    {"min-p", 0, IL_OPT_FLOAT, IL__R(p.sampling.min_p), 0, 1, "drop tokens below min-p x the top probability (0 = off)", false, true},
    {"repeat-penalty", 0, IL_OPT_FLOAT, IL__R(p.sampling.repeat_penalty), 0, 100, "penalty for recent tokens (1 = off)", true, true},
    {"repeat-last-n", 0, IL_OPT_INT, IL__R(p.sampling.repeat_last_n), 0, 1 << 20, "how many recent tokens are penalised", false, true},
    {"n-predict", 'n', IL_OPT_INT, IL__R(p.n_predict), -1, 1 << 30, "tokens to generate (-1 = until end or context full)", false, true},
    {"prompt", 'p', IL_OPT_STR, IL__R(prompt), 0, 0, "prompt text", false, true},
    {"no-bos", 0, IL_OPT_BOOL, IL__R(p.no_bos), 0, 1, "do not add BOS before the prompt", false, true},
    {"no-parse-special", 0, IL_OPT_BOOL, IL__R(p.no_parse_special), 0, 1, "read control-token text in the prompt as plain text", false, true},
    {"ignore-eos", 0, IL_OPT_BOOL, IL__R(p.ignore_eos), 0, 1, "keep generating after end-of-generation tokens", false, true},
    {"isa", 0, IL_OPT_STR, IL__O(isa), 0, 0, "CPU kernel level: scalar | avx2 | avx512 [best detected]", false, false},
    {"repack", 0, IL_OPT_BOOL, IL__O(repack), 0, 1, "CPU: keep matmul weights in the blocked GEMM's layout, made at load (batches faster)", false, false},
    {"device", 0, IL_OPT_STR, IL__O(device), 0, 0,
     "cpu | sim:SIZE[,pcie=RATE][,ctx=SIZE][,hbm=RATE][,tflops=N] | cuda[:N], or a comma list of them: the layers split across the devices in order",
     false, false},
    {"split", 0, IL_OPT_STR, IL__O(split), 0, 0,
     "a --device list's share of the layers, one ratio per device (3,1), or auto: the split that balances each device's whole need against its size; default: proportional to each device's size",
     false, false},
    {"micro-batches", 0, IL_OPT_INT, IL__O(micro_batches), 0, 64,
     "a --device list: cut each forward pass into N micro-batches that the devices run as a pipeline, the first device on the next while the second runs this one (0 or 1 = one pass)",
     false, false},
    {"tp", 0, IL_OPT_INT, IL__O(tp), 0, 8,
     "tensor parallelism: every layer split across the N devices of --device (heads, KV heads and FFN shared out; a sum across the devices after each block); 0 or 1 = off",
     false, false},
    {"mem-limit", 0, IL_OPT_STR, IL__O(mem_limit), 0, 0, "most bytes the device's allocator may reserve (e.g. 2GiB)", false, false},
    {"attn", 0, IL_OPT_STR, IL__O(attn), 0, 0, "attention kernel: auto | flash | memeff | sliced | naive", false, false},
    {"attn-slice", 0, IL_OPT_INT, IL__O(attn_slice), 0, 1 << 20, "sliced attention: query rows per slice (0 = 32)", false, false},
    {"kv-type", 0, IL_OPT_STR, IL__O(kv_type), 0, 0, "KV cache cell type: f16 | bf16 | f32 | q8_0", false, false},
    {"dtype", 0, IL_OPT_STR, IL__O(dtype), 0, 0, "activation type between ops: f32 | f16 | bf16 (accumulation stays f32)", false, false},
    {"check-numerics", 0, IL_OPT_BOOL, IL__O(check_numerics), 0, 1, "count inf/nan after every op; name the first layer and op", false, false},
    {"kv", 0, IL_OPT_STR, IL__O(kv), 0, 0, "KV cache layout: contiguous | paged", false, false},
    {"kv-block", 0, IL_OPT_INT, IL__O(kv_block), 1, 1 << 16, "paged KV cache: positions per block", false, false},
    {"no-prefix-cache", 0, IL_OPT_BOOL, IL__O(no_prefix_cache), 0, 1, "paged KV cache: do not keep finished requests' prompt blocks for reuse (the cache is on by default with --kv paged)", false, false},
    {"gpu-layers", 0, IL_OPT_STR, IL__O(gpu_layers), 0, 0, "layers on the device (alias -ngl): all | auto | N, or with a --device list N or auto (shared out as --split says) or one count per device (2,3); the rest on the CPU", false, false},
    {"offload", 0, IL_OPT_STR, IL__O(offload), 0, 0, "none | stream: weights stay in host memory and stream through two device slots", false, false},
    {"fit", 0, IL_OPT_BOOL, IL__O(fit), 0, 1, "when the run does not fit the device, apply the planner's first fix and say so", false, false},
    {"place", 0, IL_OPT_STR, IL__O(place), 0, 0, "components on the CPU or device: token_embd=cpu,output=cpu,blk.0-3=cpu; exps=cpu: a MoE's experts; with a --device list blk.N=K: layer N on the K-th device (the split moves)", false, false},
    {"no-mmap", 0, IL_OPT_BOOL, IL__O(no_mmap), 0, 1, "copy the weights into memory of the process at load (copy-on-write of the file's pages, read() where the kernel lacks it), not through a file mapping on first use (--mmap: the default)", false, false},
    {"direct-io", 0, IL_OPT_BOOL, IL__O(direct_io), 0, 1, "read the weights into memory at load as --no-mmap does, with O_DIRECT requests past the page cache (buffered where the filesystem refuses)", false, false},
    {"mlock", 0, IL_OPT_BOOL, IL__O(mlock), 0, 1, "lock the weights in memory so they are never paged out (reads them all at load)", false, false},
    {"preload", 0, IL_OPT_BOOL, IL__O(preload), 0, 1, "read every weight page and run one warm-up pass before the engine is ready", false, false},
    {"load-pipeline", 0, IL_OPT_BOOL, IL__O(load_pipeline), 0, 1, "device backends: read the weights on threads while the previous layer uploads (mmap: its pages; --no-mmap: the file's read itself)", false, false},
    {NULL, 0, 0, 0, 0, 0, 0, NULL, false, false},
};

static_assert(sizeof il__options / sizeof il__options[0] <= 65, "il_config.given has a bit per option");

void il_config_defaults(il_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model, sizeof c->model, "builtin:tiny");
  c->batch = 512;
  c->n_seq = 1;
  snprintf(c->device, sizeof c->device, "cpu");
  snprintf(c->attn, sizeof c->attn, "auto");
  snprintf(c->kv_type, sizeof c->kv_type, "f16");
  snprintf(c->dtype, sizeof c->dtype, "f32");
  snprintf(c->kv, sizeof c->kv, "contiguous");
  c->kv_block = 16;
  snprintf(c->gpu_layers, sizeof c->gpu_layers, "all");
  snprintf(c->offload, sizeof c->offload, "none");
}

const il_opt *il_config_options(void) { return il__options; }

const il_opt *il_config_find(const char *name) {
  for (const il_opt *o = il__options; o->name; o++) {
    if (!strcmp(o->name, name)) return o;
    /* accept underscores in config files: repeat_penalty == repeat-penalty */
    size_t n = strlen(o->name);
    if (strlen(name) == n) {
      size_t i = 0;
      while (i < n && (name[i] == o->name[i] || (name[i] == '_' && o->name[i] == '-'))) i++;
      if (i == n) return o;
    }
  }
  return NULL;
}

const il_opt *il_config_find_short(char c) {
  for (const il_opt *o = il__options; o->name; o++)
    if (o->short_flag && o->short_flag == c) return o;
  return NULL;
}

il_status il_config_parse_int(const char *text, long long min, long long max, const char *where, long long *out) {
  const char *p = text;
  if (*p == '-') p++;
  if (!isdigit((unsigned char)*p))
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is not an integer", where, text);
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is not an integer", where, text);
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 10); /* base 10: "010" is ten, not octal eight */
  if (errno == ERANGE || v < min || v > max)
    return il_error(IL_ERR_INVALID_ARG, "%s: %s is out of range [%lld, %lld]", where, text, min, max);
  *out = v;
  return IL_OK;
}

il_config *il_config_new(void) {
  il_config *c = il_mem_alloc(IL_MEM_OTHER, sizeof *c, "config");
  if (c) il_config_defaults(c);
  return c;
}

void il_config_free(il_config *c) { il_mem_free(c); }

il_status il_config_set(il_config *c, const char *name, const char *value, const char *where) {
  return il_config_apply(c, NULL, name, value, where);
}

il_status il_config_get(const il_config *c, const char *name, char *buf, size_t n) {
  const il_opt *o = il_config_find(name);
  if (n) buf[0] = 0;
  if (!o) return il_error(IL_ERR_INVALID_ARG, "unknown option '%s'", name);
  if (o->request) return il_error(IL_ERR_INVALID_ARG, "'%s' is a per-request option, not an engine option", name);
  il_config_format(c, NULL, o, buf, n);
  return IL_OK;
}

il_status il_config_apply(il_config *c, il_request_opts *r, const char *name, const char *value, const char *where) {
  const il_opt *o = il_config_find(name);
  if (!o) return il_error(IL_ERR_INVALID_ARG, "%s: unknown option '%s'", where, name);
  if (o->request && !r)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is a per-request option, not an engine option (set it on the request)",
                    where, o->name);
  char *field = (o->request ? (char *)r : (char *)c) + o->offset;
  char *end = NULL;
  errno = 0;
  switch (o->kind) {
    case IL_OPT_INT: {
      long long v;
      IL_TRY(il_config_parse_int(value, (long long)o->min, (long long)o->max, where, &v));
      *(int *)field = (int)v;
      break;
    }
    case IL_OPT_U64: {
      /* digits only: no sign (strtoull would wrap " -1"), no spaces, base 10 ("010" is ten) */
      if (!*value || strspn(value, "0123456789") != strlen(value))
        return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is not an unsigned decimal integer", where, value);
      unsigned long long v = strtoull(value, &end, 10);
      if (errno == ERANGE)
        return il_error(IL_ERR_INVALID_ARG, "%s: %s is out of range [0, %llu]", where, value, (unsigned long long)UINT64_MAX);
      *(uint64_t *)field = (uint64_t)v;
      break;
    }
    case IL_OPT_FLOAT: {
      double v = strtod(value, &end);
      if (end == value || *end || errno || !isfinite(v))
        return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is not a number", where, value);
      if (v < o->min || v > o->max || (o->min_open && v == o->min))
        return il_error(IL_ERR_INVALID_ARG, "%s: %g is out of range %c%g, %g]", where, v, o->min_open ? '(' : '[',
                        o->min, o->max);
      *(float *)field = (float)v;
      break;
    }
    case IL_OPT_STR:
      if (strlen(value) >= o->size)
        return il_error(IL_ERR_INVALID_ARG, "%s: value is longer than %zu bytes", where, o->size - 1);
      memcpy(field, value, strlen(value) + 1);
      break;
    case IL_OPT_BOOL:
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on") || !strcmp(value, "yes"))
        *(bool *)field = true;
      else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off") || !strcmp(value, "no"))
        *(bool *)field = false;
      else
        return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is not a boolean (true/false)", where, value);
      break;
  }
  if (!o->request) c->given |= (uint64_t)1 << (o - il__options);
  return IL_OK;
}

bool il_config_given(const il_config *c, const char *name) {
  const il_opt *o = il_config_find(name);
  return o && !o->request && (c->given >> (o - il__options) & 1);
}

static char *il__trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

/* Unquotes a "..." value in place: \" \\ \n \r \t are the escapes il_config_write uses; anything
 * else after a backslash, a missing closing quote or text after it is an error. */
static il_status il__unquote(char *value, const char *where) {
  char *r = value + 1, *w = value;
  for (;; r++) {
    if (!*r) return il_error(IL_ERR_INVALID_ARG, "%s: the quoted value has no closing '\"'", where);
    if (*r == '"') break;
    if (*r != '\\') {
      *w++ = *r;
      continue;
    }
    switch (*++r) {
      case '"': *w++ = '"'; break;
      case '\\': *w++ = '\\'; break;
      case 'n': *w++ = '\n'; break;
      case 'r': *w++ = '\r'; break;
      case 't': *w++ = '\t'; break;
      default:
        return il_error(IL_ERR_INVALID_ARG, "%s: unknown escape '\\%c' in a quoted value (use \\\\ for a backslash)",
                        where, *r ? *r : '0');
    }
  }
  if (r[1]) return il_error(IL_ERR_INVALID_ARG, "%s: text after the closing quote: '%.20s'", where, r + 1);
  *w = 0;
  return IL_OK;
}

il_status il_config_load(il_config *c, il_request_opts *r, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return il_error(IL_ERR_IO, "%s: cannot open config file: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return il_error(IL_ERR_IO, "%s: is a directory, not a config file", path);
  }
  /* the longest value (a quoted prompt with every byte escaped) plus its key */
  const size_t max_line = 2 * IL_REQUEST_PROMPT_MAX + 1024;
  char *line = NULL, where[1100];
  size_t cap = 0;
  int lineno = 0;
  il_status st = IL_OK;
  ssize_t got;
  /* getline gives the true length, so a NUL byte cannot hide the rest of a line (or a whole
   * over-long line) from the checks below */
  while (st == IL_OK && (got = getline(&line, &cap, f)) >= 0) {
    lineno++;
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    size_t n = (size_t)got;
    if (n > max_line) {
      st = il_error(IL_ERR_INVALID_ARG, "%s: line is longer than %zu bytes", where, max_line);
      break;
    }
    const char *nul = memchr(line, 0, n);
    if (nul) {
      st = il_error(IL_ERR_INVALID_ARG, "%s: NUL byte at column %zu (a config file is text)", where,
                    (size_t)(nul - line) + 1);
      break;
    }
    char *s = il__trim(line);
    if (!*s || *s == '#') continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      st = il_error(IL_ERR_INVALID_ARG, "%s: expected 'key = value'", where);
      break;
    }
    *eq = 0;
    char *key = il__trim(s), *value = il__trim(eq + 1);
    if (value[0] == '"') st = il__unquote(value, where);
    if (st == IL_OK) st = il_config_apply(c, r, key, value, where);
  }
  if (st == IL_OK && ferror(f)) st = il_error(IL_ERR_IO, "%s: read error after line %d", path, lineno);
  free(line); /* allocated by getline (libc), not through memory/ */
  fclose(f);
  return st;
}

void il_config_format(const il_config *c, const il_request_opts *r, const il_opt *o, char *buf, size_t n) {
  if (n) buf[0] = 0;
  if (o->request && !r) return;
  const char *field = (o->request ? (const char *)r : (const char *)c) + o->offset;
  switch (o->kind) {
    case IL_OPT_INT: snprintf(buf, n, "%d", *(const int *)field); break;
    case IL_OPT_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case IL_OPT_FLOAT: { /* the shortest text that reads back as the same float: 0.8, not 0.800000012 */
      const float v = *(const float *)field;
      for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
      }
      break;
    }
    case IL_OPT_STR: snprintf(buf, n, "%s", field); break;
    case IL_OPT_BOOL: snprintf(buf, n, "%s", *(const bool *)field ? "true" : "false"); break;
  }
}

void il_config_write(const il_config *c, const il_request_opts *r, FILE *f) {
  /* engine options first, then the request's: the order of the table within each group */
  for (int pass = 0; pass < 2; pass++) {
    for (const il_opt *o = il__options; o->name; o++) {
      if (o->request != (pass == 1) || (o->request && !r)) continue;
      if (o->kind != IL_OPT_STR) {
        char buf[64];
        il_config_format(c, r, o, buf, sizeof buf);
        fprintf(f, "%s = %s\n", o->name, buf);
        continue;
      }
      /* quoted, with the escapes il_config_load reads back, so any value round-trips */
      const char *field = (o->request ? (const char *)r : (const char *)c) + o->offset;
      fprintf(f, "%s = \"", o->name);
      for (const char *p = field; p < field + o->size && *p; p++) {
        switch (*p) {
          case '"': fputs("\\\"", f); break;
          case '\\': fputs("\\\\", f); break;
          case '\n': fputs("\\n", f); break;
          case '\r': fputs("\\r", f); break;
          case '\t': fputs("\\t", f); break;
          default: fputc(*p, f);
        }
      }
      fputs("\"\n", f);
    }
  }
}

il_status il_config_act_type(const char *name, il_dtype *out) {
  if (!*name || !strcmp(name, "f32")) *out = IL_DTYPE_F32;
  else if (!strcmp(name, "f16")) *out = IL_DTYPE_F16;
  else if (!strcmp(name, "bf16")) *out = IL_DTYPE_BF16;
  else return il_error(IL_ERR_INVALID_ARG, "--dtype: '%s' is not an activation type (f32, f16, bf16)", name);
  return IL_OK;
}
