/* lab/sweep: lab names, points and cartesian products. See sweep.h. */
#include "lab/sweep.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"

typedef struct {
  const char *lab, *key;
} il__alias;

static const il__alias il__aliases[] = {
    {"batch", "n-seq"},
    {"parallel", "n-seq"}, /* llama-server's -np/--parallel: the flag's name in bench and experiment */
    {"gen", "n-predict"},
    {"ubatch", "batch"},
    {"prompt", "prompt"},
};

void il_sweep_point_defaults(il_sweep_point *p) {
  il_config_defaults(&p->cfg);
  p->gen = il_request_default_params().n_predict;
  p->prompt = 128;
}

const char *il_sweep_key(const char *name) {
  for (size_t i = 0; i < sizeof il__aliases / sizeof il__aliases[0]; i++)
    if (!strcmp(name, il__aliases[i].lab)) return il__aliases[i].key;
  const il_opt *o = il_config_find(name);
  if (!o || (o->request && strcmp(o->name, "n-predict"))) return NULL; /* nothing samples here */
  /* the engine's own names that the lab reads differently must be reached by their lab name */
  if (!strcmp(o->name, "batch") || !strcmp(o->name, "prompt")) return NULL;
  return o->name;
}

il_status il_sweep_set(il_sweep_point *p, const char *name, const char *value, const char *where) {
  const char *key = il_sweep_key(name);
  if (!key)
    return il_error(IL_ERR_INVALID_ARG, "%s: unknown option '%s' (engine options, or the lab's parallel (also batch), prompt, gen, ubatch)",
                    where, name);
  if (!strcmp(key, "prompt")) {
    long long v;
    IL_TRY(il_config_parse_int(value, 1, 1 << 22, where, &v));
    p->prompt = (int)v;
    return IL_OK;
  }
  if (!strcmp(key, "n-predict")) {
    const il_opt *o = il_config_find(key);
    long long v;
    IL_TRY(il_config_parse_int(value, (long long)o->min, (long long)o->max, where, &v));
    p->gen = (int)v;
    return IL_OK;
  }
  return il_config_set(&p->cfg, key, value, where);
}

void il_sweep_get(const il_sweep_point *p, const char *name, char *buf, size_t n) {
  const char *key = il_sweep_key(name);
  if (n) buf[0] = 0;
  if (!key) return;
  if (!strcmp(key, "prompt")) {
    snprintf(buf, n, "%d", p->prompt);
    return;
  }
  if (!strcmp(key, "n-predict")) {
    snprintf(buf, n, "%d", p->gen);
    return;
  }
  il_config_format(&p->cfg, NULL, il_config_find(key), buf, n);
}

void il_sweep_init(il_sweep *s) { memset(s, 0, sizeof *s); }

void il_sweep_free(il_sweep *s) {
  for (int a = 0; a < s->n_axes; a++)
    for (int i = 0; i < s->axes[a].n; i++) il_mem_free(s->axes[a].values[i]);
  memset(s, 0, sizeof *s);
}

size_t il_sweep_count(const il_sweep *s) {
  size_t n = 1;
  for (int a = 0; a < s->n_axes; a++) n *= (size_t)s->axes[a].n;
  return n;
}

il_status il_sweep_add(il_sweep *s, const il_sweep_point *base, const char *name, const char *list, const char *where) {
  const char *key = il_sweep_key(name);
  if (!key) {
    il_sweep_point scratch = *base;
    return il_sweep_set(&scratch, name, "", where); /* the unknown-name message */
  }
  for (int a = 0; a < s->n_axes; a++) {
    const char *other = il_sweep_key(s->axes[a].name);
    if (other && !strcmp(other, key))
      return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is already swept as --%s; give one list", where, name,
                      s->axes[a].name);
  }
  if (s->n_axes >= IL_SWEEP_MAX_AXES)
    return il_error(IL_ERR_INVALID_ARG, "%s: more than %d swept options", where, IL_SWEEP_MAX_AXES);
  if (strlen(name) >= sizeof s->axes[0].name) return il_error(IL_ERR_INVALID_ARG, "%s: name too long", where);
  il_sweep_axis ax;
  memset(&ax, 0, sizeof ax);
  snprintf(ax.name, sizeof ax.name, "%s", name);
  il_status st = IL_OK;
  const char *p = list;
  /* a list whose values hold commas of their own (a --device list, --split ratios, per-device
   * --gpu-layers) is swept with ';' between the values; without one, a --device value's sim
   * options (pcie=, ctx=) stay with their device */
  const char sep = strchr(list, ';') ? ';' : ',';
  const bool device = !strcmp(key, "device");
  for (;;) {
    const char *comma = strchr(p, sep);
    while (comma && sep == ',' && device && (!strncmp(comma + 1, "ctx=", 4) || !strncmp(comma + 1, "pcie=", 5)))
      comma = strchr(comma + 1, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    while (len && isspace((unsigned char)*p)) p++, len--;
    while (len && isspace((unsigned char)p[len - 1])) len--;
    if (!len) {
      st = il_error(IL_ERR_INVALID_ARG, "%s: empty item in the list '%s'", where, list);
      break;
    }
    if (ax.n >= IL_SWEEP_MAX_VALUES) {
      st = il_error(IL_ERR_INVALID_ARG, "%s: more than %d values", where, IL_SWEEP_MAX_VALUES);
      break;
    }
    char *v = il_mem_alloc(IL_MEM_OTHER, len + 1, "sweep value");
    if (!v) {
      st = IL_ERR_OOM;
      break;
    }
    memcpy(v, p, len);
    v[len] = 0;
    ax.values[ax.n++] = v;
    il_sweep_point scratch = *base;
    st = il_sweep_set(&scratch, name, v, where);
    if (st != IL_OK) break;
    if (!comma) break;
    p = comma + 1;
  }
  if (st == IL_OK && il_sweep_count(s) * (size_t)ax.n > IL_SWEEP_MAX_COMBINATIONS)
    st = il_error(IL_ERR_INVALID_ARG, "%s: the sweep would have %zu combinations (at most %d)", where,
                  il_sweep_count(s) * (size_t)ax.n, IL_SWEEP_MAX_COMBINATIONS);
  if (st != IL_OK) {
    for (int i = 0; i < ax.n; i++) il_mem_free(ax.values[i]);
    return st;
  }
  s->axes[s->n_axes++] = ax;
  return IL_OK;
}

il_status il_sweep_point_at(const il_sweep *s, const il_sweep_point *base, size_t index, il_sweep_point *out,
                            char *label, size_t label_n) {
  *out = *base;
  if (label && label_n) label[0] = 0;
  size_t used = 0;
  /* decompose index with the last axis varying fastest */
  size_t idx[IL_SWEEP_MAX_AXES];
  size_t rest = index;
  for (int a = s->n_axes - 1; a >= 0; a--) {
    idx[a] = rest % (size_t)s->axes[a].n;
    rest /= (size_t)s->axes[a].n;
  }
  if (rest) return il_error(IL_ERR_INVALID_ARG, "sweep: combination %zu of %zu does not exist", index, il_sweep_count(s));
  for (int a = 0; a < s->n_axes; a++) {
    const il_sweep_axis *ax = &s->axes[a];
    char where[96];
    snprintf(where, sizeof where, "--%s", ax->name);
    IL_TRY(il_sweep_set(out, ax->name, ax->values[idx[a]], where));
    if (label && ax->n > 1 && used < label_n) {
      int w = snprintf(label + used, label_n - used, "%s%s=%s", used ? " " : "", ax->name, ax->values[idx[a]]);
      if (w > 0) used += (size_t)w;
      if (used >= label_n) used = label_n - 1;
    }
  }
  return IL_OK;
}

int il_sweep_main_axis(const il_sweep *s) {
  int best = -1;
  for (int a = 0; a < s->n_axes; a++)
    if (s->axes[a].n > 1 && (best < 0 || s->axes[a].n > s->axes[best].n)) best = a;
  return best;
}
