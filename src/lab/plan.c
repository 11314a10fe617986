/* lab/plan: dry runs of the engine, bisection for the smallest device, checked fixes. */
#include "lab/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/units.h"
#include "backend/registry.h"
#include "engine/engine.h"

/* The device planned for: a sim:SIZE (its size is the budget) or a CUDA device (its memory, or
 * its fixed overhead + --mem-limit when that is smaller). Trial devices of other sizes are dry
 * versions of it: sim:CAP[,pcie=,ctx=],dry or cuda:N,dry=CAP, the real device's facts and
 * measured fixed overhead with no memory behind the allocator. */
typedef struct {
  bool cuda;
  char head[32]; /* cuda: "cuda:N" */
  char rest[64]; /* sim: the spec's options after the size (pcie=, ctx=), without dry */
  size_t budget;
} il__simspec;

/* CUDA: the device's size and fixed overhead, read from a dry open (nothing is allocated). */
static il_status il__cuda_budget(const il_config *cfg, il__simspec *s) {
  char spec[48];
  snprintf(spec, sizeof spec, "%s,dry", s->head);
  il_backend_opts bo = {0};
  il_backend *b = NULL;
  IL_TRY(il_backend_open(spec, &bo, &b));
  size_t free_b = 0, total = 0;
  b->ops->memory(b, &free_b, &total);
  b->ops->destroy(b);
  s->budget = total;
  size_t limit = 0;
  if (cfg->mem_limit[0] && !il_parse_bytes(cfg->mem_limit, &limit))
    return il_error(IL_ERR_INVALID_ARG, "--mem-limit '%s': %s", cfg->mem_limit, il_parse_bytes_why(cfg->mem_limit));
  if (limit && total - free_b + limit < total) s->budget = total - free_b + limit;
  return IL_OK;
}

static il_status il__parse(const char *spec, il__simspec *s) {
  memset(s, 0, sizeof *s);
  if (!strcmp(spec, "cuda") || !strncmp(spec, "cuda:", 5)) {
    if (strchr(spec, ',') || strlen(spec) >= sizeof s->head)
      return il_error(IL_ERR_INVALID_ARG, "plan: --device %s: give cuda or cuda:N (the planner adds its own options)", spec);
    s->cuda = true;
    snprintf(s->head, sizeof s->head, "%s", spec);
    return IL_OK;
  }
  if (strncmp(spec, "sim:", 4))
    return il_error(IL_ERR_UNSUPPORTED, "plan: --device %s: the planner sizes sim:SIZE and cuda[:N] devices (the host "
                                        "is not a budgeted device)", spec);
  char buf[128];
  snprintf(buf, sizeof buf, "%s", spec + 4);
  char *save = NULL;
  int i = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), i++) {
    if (i == 0) {
      const bool ok = il_parse_bytes(t, &s->budget);
      if (!ok || !s->budget)
        return il_error(IL_ERR_INVALID_ARG, "--device %s: device size '%s': %s", spec, t,
                        ok ? "zero bytes" : il_parse_bytes_why(t));
    } else if (strcmp(t, "dry")) {
      /* checked here, in the user's words: the trial devices' specs (sim:BYTES,...,dry) are
       * the planner's own and would echo back in the backend's message */
      double rate;
      size_t ctx;
      if (!strncmp(t, "pcie=", 5) && !il_parse_rate(t + 5, &rate))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s' is not a transfer rate (e.g. pcie=16GB/s, 900MiB/s)%s%s",
                        spec, t, il_units_ambiguous(t + 5) ? ": " : "",
                        il_units_ambiguous(t + 5) ? il_units_ambiguous(t + 5) : "");
      if (!strncmp(t, "ctx=", 4) && !il_parse_bytes(t + 4, &ctx))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s': %s", spec, t, il_parse_bytes_why(t + 4));
      if (strncmp(t, "pcie=", 5) && strncmp(t, "ctx=", 4))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: unknown option '%s' (pcie=RATE, ctx=SIZE)", spec, t);
      size_t n = strlen(s->rest);
      snprintf(s->rest + n, sizeof s->rest - n, ",%s", t);
    }
  }
  return IL_OK;
}

/* One dry open of cfg on sim:cap. On success fills the figures of p that a run measures. */
static il_status il__dry(const il_config *base, const il__simspec *sp, size_t cap, il_plan *p, il_engine **keep) {
  il_config c = *base;
  int w = sp->cuda ? snprintf(c.device, sizeof c.device, "%s,dry=%zu", sp->head, cap)
                   : snprintf(c.device, sizeof c.device, "sim:%zu%.*s,dry", cap, (int)(sizeof c.device - 32), sp->rest);
  if (sp->cuda) c.mem_limit[0] = 0; /* the trial's size is the limit (il__cuda_budget took --mem-limit in) */
  if (w < 0 || (size_t)w >= sizeof c.device) return il_error(IL_ERR_INVALID_ARG, "--device: '%s' is too long", base->device);
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  if (p) p->dry_runs++;
  if (st != IL_OK) return st;
  if (p) {
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    const il_caching_stats *cs = &es.alloc;
    p->fixed_bytes = es.fixed_bytes;
    p->reserved_bytes = cs->total.peak_reserved + es.fixed_bytes;
    for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++) p->by_cat[i] = cs->cat[i].peak_allocated;
    p->by_cat[IL_MEM_OTHER] += es.fixed_bytes;
    p->n_layers = es.n_layer;
    p->n_dev_layers = es.n_dev_layers;
    p->n_ctx = es.n_ctx, p->n_batch = es.n_batch, p->n_seq = es.n_seq;
  }
  if (keep) *keep = e;
  else il_engine_free(e);
  return IL_OK;
}

/* The smallest cap in (lo, hi] on which cfg opens, given that hi does, to 512 bytes or 0.025%. */
static il_status il__bisect(const il_config *cfg, const il__simspec *sp, size_t lo, size_t hi, il_plan *p, size_t *out) {
  while (hi - lo > 512 && hi - lo > hi / 4000) {
    size_t mid = lo + (hi - lo) / 2;
    il_status st = il__dry(cfg, sp, mid, p, NULL);
    if (st == IL_OK) hi = mid;
    else if (st == IL_ERR_OOM) lo = mid;
    else return st;
  }
  *out = hi;
  return IL_OK;
}

/* The placement auto chose, pinned, so smaller trial devices measure the same configuration. */
static void il__pin(il_config *c, const il_plan *p) {
  if (!strcmp(c->gpu_layers, "auto")) snprintf(c->gpu_layers, sizeof c->gpu_layers, "%d", p->n_dev_layers);
  if (c->ctx <= 0) c->ctx = p->n_ctx;
}

/* Peak of cfg: the smallest device on which it opens (searching upward from `from` when needed). */
static il_status il__peak(const il_config *cfg, const il__simspec *sp, size_t from, il_plan *p, size_t *peak) {
  size_t hi = from;
  il_status st;
  while ((st = il__dry(cfg, sp, hi, p, NULL)) == IL_ERR_OOM) {
    if (hi > ((size_t)1 << 44)) return il_error(IL_ERR_OOM, "plan: no device up to 16 TiB runs this configuration");
    hi *= 2;
  }
  IL_TRY(st);
  return il__bisect(cfg, sp, hi / 2 < from ? 0 : hi / 2, hi, p, peak);
}

il_status il_plan_run(const il_config *cfg, il_plan *p) {
  memset(p, 0, sizeof *p);
  il__simspec sp;
  IL_TRY(il__parse(cfg->device, &sp));
  if (sp.cuda) IL_TRY(il__cuda_budget(cfg, &sp));
  snprintf(p->device, sizeof p->device, "%s", cfg->device);
  p->capacity = sp.budget;
  il_status st = il__dry(cfg, &sp, sp.budget, p, NULL);
  if (st != IL_OK && st != IL_ERR_OOM) return st;
  p->fits = st == IL_OK;
  il_oom_report r; /* the report of the device given (later trials on other sizes make their own) */
  const bool have = !p->fits && il_oom_report_last(&r);
  p->ctx_from = cfg->ctx > 0 ? IL_OOM_CTX_GIVEN : have ? r.ctx_from : IL_OOM_CTX_DEFAULT;
  if (p->fits) {
    /* the figures of the run on the device given; then the smallest device for the same run */
    const il_plan at_cap = *p;
    il_config pinned = *cfg;
    il__pin(&pinned, p);
    size_t allocated = 0; /* nothing smaller than what is allocated (fixed overhead included) can work */
    for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++) allocated += p->by_cat[i];
    il_plan scratch = {0};
    size_t peak = 0;
    IL_TRY(il__bisect(&pinned, &sp, allocated > 0 ? allocated - 1 : 0, sp.budget, &scratch, &peak));
    *p = at_cap;
    p->dry_runs += scratch.dry_runs;
    p->peak_bytes = peak;
  } else {
    /* how big a device this configuration needs as it is, at the context the report assumed
     * (the default context would be sized anew on every trial device) */
    il_config at_ctx = *cfg;
    if (have && r.ctx_from == IL_OOM_CTX_DEFAULT) at_ctx.ctx = r.n_ctx;
    il_plan need = *p;
    IL_TRY(il__peak(&at_ctx, &sp, sp.budget, &need, &p->peak_bytes));
    p->dry_runs = need.dry_runs;
    memcpy(p->by_cat, need.by_cat, sizeof p->by_cat);
    p->n_layers = need.n_layers, p->n_dev_layers = need.n_dev_layers;
    p->n_ctx = need.n_ctx, p->n_batch = need.n_batch, p->n_seq = need.n_seq;
    p->ctx_from = at_ctx.ctx > 0 && cfg->ctx <= 0 ? IL_OOM_CTX_DEFAULT : p->ctx_from;
    p->fixed_bytes = need.fixed_bytes;
    p->reserved_bytes = 0;
    for (int i = 0; have && i < r.n_fixes; i++) {
      if (strcmp(r.fixes[i].option, "convert") == 0) continue; /* a GGUF conversion is not an option change */
      /* the engine's figure counts allocated bytes; the caching allocator may need a little
       * more (segment rounding), so walk the value down until a dry run really fits */
      char value[32];
      snprintf(value, sizeof value, "%s", r.fixes[i].value);
      il_config c;
      bool ok = false;
      for (int step = 0; step < 24 && !ok; step++) {
        c = *cfg;
        if (il_oom_fix_apply(&r, r.fixes[i].option, value, &c) != IL_OK) break;
        il_plan trial = {0};
        il_status ts = il__dry(&c, &sp, sp.budget, &trial, NULL);
        p->dry_runs += trial.dry_runs;
        if (ts == IL_OK) {
          ok = true;
          il__pin(&c, &trial);
          break;
        }
        if (ts != IL_ERR_OOM) break;
        char *end;
        long v = strtol(value, &end, 10);
        if (*end || end == value) break; /* a type: no smaller step */
        if (!strcmp(r.fixes[i].option, "gpu-layers")) v -= 1;
        else v /= 2;
        if (v < (strcmp(r.fixes[i].option, "gpu-layers") ? 1 : 0)) break;
        snprintf(value, sizeof value, "%ld", v);
      }
      if (!ok) continue;
      size_t peak = 0;
      if (il__bisect(&c, &sp, 0, sp.budget, NULL, &peak) != IL_OK) continue;
      il_plan_fix *fx = &p->fixes[p->n_fixes++];
      snprintf(fx->option, sizeof fx->option, "%s", r.fixes[i].option);
      snprintf(fx->value, sizeof fx->value, "%s", value);
      snprintf(fx->effect, sizeof fx->effect, "%s", r.fixes[i].effect);
      fx->peak_bytes = peak;
    }
  }
  p->margin = ((double)p->capacity - (double)p->peak_bytes) / (double)p->capacity;
  return IL_OK;
}

void il_plan_print(const il_plan *p, FILE *f) {
  char a[32], b[32], c[32];
  fprintf(f, "device %s: %s\n", p->device, il_mem_format_bytes(p->capacity, a, sizeof a));
  fprintf(f, "run: ctx %d, batch %d, %d sequence(s), %d/%d layers on the device\n", p->n_ctx, p->n_batch, p->n_seq,
          p->n_dev_layers, p->n_layers);
  if (p->ctx_from != IL_OOM_CTX_GIVEN) /* run sizes its own context: say which one this is */
    fprintf(f, "     ctx %d is %s; run sizes it for its prompt and -n instead (give --ctx to plan that)\n", p->n_ctx,
            il_oom_ctx_from_name(p->ctx_from));
  fprintf(f, "\n%-14s %12s\n", "category", "at peak");
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
    if (p->by_cat[i]) fprintf(f, "%-14s %12s\n", il_mem_category_name((il_mem_category)i), il_mem_format_bytes(p->by_cat[i], a, sizeof a));
  fprintf(f, "\npeak: %s (the smallest device that runs it, %s fixed overhead included)\n",
          il_mem_format_bytes(p->peak_bytes, a, sizeof a), il_mem_format_bytes(p->fixed_bytes, b, sizeof b));
  if (p->fits) {
    fprintf(f, "fits: yes, margin %.1f%% (%s free at the peak); the allocator reserves %s on this device\n",
            100 * p->margin, il_mem_format_bytes(p->capacity - p->peak_bytes, b, sizeof b),
            il_mem_format_bytes(p->reserved_bytes, c, sizeof c));
  } else {
    fprintf(f, "fits: no, %s short\n", il_mem_format_bytes(p->peak_bytes - p->capacity, b, sizeof b));
    if (!p->n_fixes) fprintf(f, "no single option change makes it fit; use a smaller model or a larger device\n");
    for (int i = 0; i < p->n_fixes; i++)
      fprintf(f, "%s --%s %s  -> peak %s (%s)\n", i ? "or: " : "fix:", p->fixes[i].option, p->fixes[i].value,
              il_mem_format_bytes(p->fixes[i].peak_bytes, a, sizeof a), p->fixes[i].effect);
  }
  fprintf(f, "(%d dry runs of the engine)\n", p->dry_runs);
}

void il_plan_json(const il_plan *p, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_key(&w, "device"), il_jsonw_str(&w, p->device);
  il_jsonw_key(&w, "capacity_bytes"), il_jsonw_int(&w, (long long)p->capacity);
  il_jsonw_key(&w, "peak_bytes"), il_jsonw_int(&w, (long long)p->peak_bytes);
  il_jsonw_key(&w, "reserved_bytes"), il_jsonw_int(&w, (long long)p->reserved_bytes);
  il_jsonw_key(&w, "fixed_bytes"), il_jsonw_int(&w, (long long)p->fixed_bytes);
  il_jsonw_key(&w, "fits"), il_jsonw_bool(&w, p->fits);
  il_jsonw_key(&w, "margin"), il_jsonw_num(&w, p->margin);
  il_jsonw_key(&w, "n_ctx"), il_jsonw_int(&w, p->n_ctx);
  il_jsonw_key(&w, "ctx_from"), il_jsonw_str(&w, p->ctx_from == IL_OOM_CTX_GIVEN ? "given" : "default");
  il_jsonw_key(&w, "n_batch"), il_jsonw_int(&w, p->n_batch);
  il_jsonw_key(&w, "n_seq"), il_jsonw_int(&w, p->n_seq);
  il_jsonw_key(&w, "layers"), il_jsonw_int(&w, p->n_layers);
  il_jsonw_key(&w, "device_layers"), il_jsonw_int(&w, p->n_dev_layers);
  il_jsonw_key(&w, "by_category");
  il_jsonw_obj(&w);
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
    il_jsonw_key(&w, il_mem_category_name((il_mem_category)i)), il_jsonw_int(&w, (long long)p->by_cat[i]);
  il_jsonw_obj_end(&w);
  il_jsonw_key(&w, "fixes");
  il_jsonw_arr(&w);
  for (int i = 0; i < p->n_fixes; i++) {
    il_jsonw_obj(&w);
    il_jsonw_key(&w, "option"), il_jsonw_str(&w, p->fixes[i].option);
    il_jsonw_key(&w, "value"), il_jsonw_str(&w, p->fixes[i].value);
    il_jsonw_key(&w, "peak_bytes"), il_jsonw_int(&w, (long long)p->fixes[i].peak_bytes);
    il_jsonw_key(&w, "effect"), il_jsonw_str(&w, p->fixes[i].effect);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_key(&w, "dry_runs"), il_jsonw_int(&w, p->dry_runs);
  il_jsonw_obj_end(&w);
  fputc('\n', f);
}
