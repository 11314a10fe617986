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

/* ---- a --device list: per device ---- */

#define IL__BIG ((size_t)1 << 40) /* a trial device that is never the one that runs out */

typedef struct {
  int n;
  il__simspec sp[IL_BACKEND_LIST_MAX];
} il__list;

/* cfg on the list's devices at sizes cap[k]: one dry open. keep: the engine, for its snapshot. */
static il_status il__dry_list(const il_config *base, const il__list *ls, const size_t *cap, il_plan *p, il_engine **keep) {
  il_config c = *base;
  size_t o = 0;
  c.device[0] = 0;
  for (int k = 0; k < ls->n; k++) {
    const il__simspec *sp = &ls->sp[k];
    int w = sp->cuda ? snprintf(c.device + o, sizeof c.device - o, "%s%s,dry=%zu", k ? "," : "", sp->head, cap[k])
                     : snprintf(c.device + o, sizeof c.device - o, "%ssim:%zu%s,dry", k ? "," : "", cap[k], sp->rest);
    if (w < 0 || (size_t)w >= sizeof c.device - o)
      return il_error(IL_ERR_INVALID_ARG, "--device: '%s' is too long to plan", base->device);
    o += (size_t)w;
  }
  if (ls->sp[0].cuda) c.mem_limit[0] = 0;
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  if (p) p->dry_runs++;
  if (st != IL_OK) return st;
  if (keep) *keep = e;
  else il_engine_free(e);
  return IL_OK;
}

/* The smallest size of device k on which pinned opens, the others large. */
static il_status il__dev_peak(const il_config *pinned, const il__list *ls, int k, il_plan *p, size_t *peak) {
  size_t cap[IL_BACKEND_LIST_MAX];
  for (int j = 0; j < ls->n; j++) cap[j] = IL__BIG;
  size_t hi = ls->sp[k].budget ? ls->sp[k].budget : (size_t)1 << 20;
  il_status st;
  for (;;) {
    cap[k] = hi;
    st = il__dry_list(pinned, ls, cap, p, NULL);
    if (st != IL_ERR_OOM) break;
    if (hi > ((size_t)1 << 44)) return il_error(IL_ERR_OOM, "plan: no device up to 16 TiB runs this configuration");
    hi *= 2;
  }
  IL_TRY(st);
  size_t lo = 0;
  while (hi - lo > 512 && hi - lo > hi / 4000) {
    cap[k] = lo + (hi - lo) / 2;
    st = il__dry_list(pinned, ls, cap, p, NULL);
    if (st == IL_OK) hi = cap[k];
    else if (st == IL_ERR_OOM) lo = cap[k];
    else return st;
  }
  *peak = hi;
  return IL_OK;
}

/* The split and context a config resolves to on the devices given, pinned, so trial devices of
 * other sizes measure the same configuration. */
static il_status il__pin_list(const il_config *cfg, const il__list *ls, il_plan *p, il_config *pinned, int32_t *counts,
                              il_oom_report *r, bool *fits) {
  size_t cap[IL_BACKEND_LIST_MAX];
  for (int k = 0; k < ls->n; k++) cap[k] = ls->sp[k].budget;
  il_engine *e = NULL;
  il_status st = il__dry_list(cfg, ls, cap, p, &e);
  if (st != IL_OK && st != IL_ERR_OOM) return st;
  *pinned = *cfg;
  *fits = st == IL_OK;
  if (*fits) {
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
    for (int k = 0; k < ls->n; k++) counts[k] = es.devs[k].n_layers;
    if (pinned->ctx <= 0) pinned->ctx = es.n_ctx;
    for (int k = 0; k < ls->n && p; k++) p->devs[k].reserved_bytes = es.devs[k].alloc.total.peak_reserved + es.devs[k].fixed_bytes;
    il_engine_free(e);
  } else {
    if (!il_oom_report_last(r) || r->n_devs != ls->n) return il_error(IL_ERR_OOM, "plan: out of memory before the split");
    for (int k = 0; k < ls->n; k++) counts[k] = r->devs[k].layers;
    if (pinned->ctx <= 0) pinned->ctx = r->n_ctx;
  }
  char v[64];
  il_split_format(counts, ls->n, v, sizeof v);
  /* else pinned already; --tp places every layer on every device */
  if (!strchr(pinned->gpu_layers, ',') && pinned->tp < 2) snprintf(pinned->split, sizeof pinned->split, "%s", v);
  if (!strcmp(pinned->gpu_layers, "auto")) { /* the count auto chose on the devices given */
    int32_t on = 0;
    for (int k = 0; k < ls->n; k++) on += counts[k];
    snprintf(pinned->gpu_layers, sizeof pinned->gpu_layers, "%d", on);
  }
  return IL_OK;
}

static il_status il__plan_list(const il_config *cfg, il_plan *p, char items[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX], int n) {
  il__list ls = {.n = n};
  for (int k = 0; k < n; k++) {
    IL_TRY(il__parse(items[k], &ls.sp[k]));
    if (ls.sp[k].cuda) IL_TRY(il__cuda_budget(cfg, &ls.sp[k]));
    if (ls.sp[k].cuda != ls.sp[0].cuda)
      return il_error(IL_ERR_UNSUPPORTED, "plan: --device %s: plan a list of sim devices or of cuda devices", cfg->device);
  }
  snprintf(p->device, sizeof p->device, "%s", cfg->device);
  p->n_devs = n;
  p->tp = cfg->tp;
  p->ran_out = -1;
  il_config pinned;
  int32_t counts[IL_BACKEND_LIST_MAX];
  il_oom_report r;
  bool fits = false;
  IL_TRY(il__pin_list(cfg, &ls, p, &pinned, counts, &r, &fits));
  il_split_format(counts, n, p->split, sizeof p->split);
  if (!fits) p->ran_out = r.dev;
  p->ctx_from = cfg->ctx > 0 ? IL_OOM_CTX_GIVEN : IL_OOM_CTX_DEFAULT;
  size_t peaks[IL_BACKEND_LIST_MAX];
  p->fits = true;
  for (int k = 0; k < n; k++) {
    il_plan_dev *d = &p->devs[k];
    snprintf(d->device, sizeof d->device, "%s", items[k]);
    d->capacity = ls.sp[k].budget;
    d->n_layers = counts[k];
    IL_TRY(il__dev_peak(&pinned, &ls, k, p, &peaks[k]));
    d->peak_bytes = peaks[k];
    d->fits = d->peak_bytes <= d->capacity;
    d->margin = ((double)d->capacity - (double)d->peak_bytes) / (double)d->capacity;
    if (!d->fits) d->reserved_bytes = 0;
    p->fits &= d->fits;
  }
  /* the categories of each device at its peak: every device at its own peak at once */
  il_engine *e = NULL;
  IL_TRY(il__dry_list(&pinned, &ls, peaks, p, &e));
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  p->n_layers = es.n_layer, p->n_dev_layers = es.n_dev_layers;
  p->n_ctx = es.n_ctx, p->n_batch = es.n_batch, p->n_seq = es.n_seq;
  p->margin = 1;
  for (int k = 0; k < n; k++) {
    il_plan_dev *d = &p->devs[k];
    for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++) d->by_cat[i] = es.devs[k].alloc.cat[i].peak_allocated;
    d->fixed_bytes = es.devs[k].fixed_bytes;
    d->space_peak_bytes = es.devs[k].mem.total_peak;
    d->by_cat[IL_MEM_OTHER] += d->fixed_bytes;
    if (!es.devs[k].alloc.total.peak_reserved) { /* a device between others with no layers holds nothing */
      d->peak_bytes = d->fixed_bytes;
      d->fits = true;
      d->margin = ((double)d->capacity - (double)d->peak_bytes) / (double)d->capacity;
    }
    p->capacity += d->capacity, p->peak_bytes += d->peak_bytes, p->fixed_bytes += d->fixed_bytes;
    p->reserved_bytes += d->reserved_bytes;
    for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++) p->by_cat[i] += d->by_cat[i];
    if (d->margin < p->margin) p->margin = d->margin;
  }
  il_engine_free(e);
  if (p->fits) return IL_OK;
  p->reserved_bytes = 0;
  for (int i = 0; i < r.n_fixes && p->n_fixes < IL_OOM_MAX_FIXES; i++) {
    if (strcmp(r.fixes[i].option, "convert") == 0) continue;
    /* the engine's figures count allocated bytes; the allocator may need a little more
     * (segment rounding): walk a number down until a dry run on the devices given fits */
    char value[32];
    snprintf(value, sizeof value, "%s", r.fixes[i].value);
    il_config c, cp;
    int32_t cc[IL_BACKEND_LIST_MAX];
    il_oom_report r2;
    bool ok = false;
    for (int step = 0; step < 24 && !ok; step++) {
      c = *cfg;
      if (il_oom_fix_apply(&r, r.fixes[i].option, value, &c) != IL_OK) break;
      bool f = false;
      if (il__pin_list(&c, &ls, NULL, &cp, cc, &r2, &f) != IL_OK) break;
      p->dry_runs++;
      if (f) {
        ok = true;
        break;
      }
      char *end;
      long v = strtol(value, &end, 10);
      if (*end || end == value) break; /* a type or a split: no smaller step */
      v /= 2;
      if (v < 1) break;
      snprintf(value, sizeof value, "%ld", v);
    }
    if (!ok) continue;
    size_t peak = 0;
    if (il__dev_peak(&cp, &ls, r.dev, p, &peak) != IL_OK) continue;
    il_plan_fix *fx = &p->fixes[p->n_fixes++];
    snprintf(fx->option, sizeof fx->option, "%s", r.fixes[i].option);
    snprintf(fx->value, sizeof fx->value, "%s", value);
    snprintf(fx->effect, sizeof fx->effect, "%s", r.fixes[i].effect);
    fx->peak_bytes = peak;
  }
  return IL_OK;
}

il_status il_plan_run(const il_config *cfg, il_plan *p) {
  memset(p, 0, sizeof *p);
  char items[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX];
  int n_items = 0;
  IL_TRY(il_backend_list_parse(cfg->device, items, &n_items));
  if (n_items > 1) return il__plan_list(cfg, p, items, n_items);
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

static void il__print_list(const il_plan *p, FILE *f) {
  char a[32];
  int w = 19;
  for (int k = 0; k < p->n_devs; k++)
    if ((int)strlen(p->devs[k].device) + 2 > w) w = (int)strlen(p->devs[k].device) + 2;
  if (p->tp > 1)
    fprintf(f, "devices: %d, tensor parallel (--tp %d): 1/%d of every layer on each, token_embd and output on the first\n",
            p->n_devs, p->tp, p->tp);
  else
    fprintf(f, "devices: %d, layers on each %s (--split %s planned)\n", p->n_devs, p->split, p->split);
  fprintf(f, "run: ctx %d, batch %d, %d sequence(s), %d/%d layers on the devices%s\n", p->n_ctx, p->n_batch, p->n_seq,
          p->n_dev_layers, p->n_layers, p->n_dev_layers < p->n_layers ? " (the rest on the CPU)" : "");
  if (p->ctx_from != IL_OOM_CTX_GIVEN)
    fprintf(f, "     ctx %d is %s; run sizes it for its prompt and -n instead (give --ctx to plan that)\n", p->n_ctx,
            il_oom_ctx_from_name(p->ctx_from));
  fprintf(f, "\n%-14s", "per device");
  for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*s", w, p->devs[k].device);
  fprintf(f, "\n%-14s", "layers");
  for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*d", w, p->devs[k].n_layers);
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++) {
    bool any = false;
    for (int k = 0; k < p->n_devs; k++) any |= p->devs[k].by_cat[i] != 0;
    if (!any) continue;
    fprintf(f, "\n%-14s", il_mem_category_name((il_mem_category)i));
    for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*s", w, il_mem_format_bytes(p->devs[k].by_cat[i], a, sizeof a));
  }
  fprintf(f, "\n%-14s", "peak");
  for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*s", w, il_mem_format_bytes(p->devs[k].peak_bytes, a, sizeof a));
  fprintf(f, "\n%-14s", "blocks peak");
  for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*s", w, il_mem_format_bytes(p->devs[k].space_peak_bytes, a, sizeof a));
  fprintf(f, "\n%-14s", "capacity");
  for (int k = 0; k < p->n_devs; k++) fprintf(f, " %*s", w, il_mem_format_bytes(p->devs[k].capacity, a, sizeof a));
  fprintf(f, "\n%-14s", "fits");
  for (int k = 0; k < p->n_devs; k++) {
    char cell[48];
    const il_plan_dev *d = &p->devs[k];
    if (d->fits) snprintf(cell, sizeof cell, "yes, %.1f%%", 100 * d->margin);
    else snprintf(cell, sizeof cell, "no, %s short", il_mem_format_bytes(d->peak_bytes - d->capacity, a, sizeof a));
    fprintf(f, " %*s", w, cell);
  }
  fprintf(f, "\n\npeak: the smallest size of each device that runs it (the others large), fixed overhead included\n"
             "blocks peak: what its memory space counts there at most (the allocator's blocks, not its segments' empty tails)\n");
  if (p->fits) {
    fprintf(f, "fits: yes on every device, smallest margin %.1f%%\n", 100 * p->margin);
  } else {
    fprintf(f, "fits: no: %s runs out first (device %d)\n", p->devs[p->ran_out >= 0 ? p->ran_out : 0].device,
            (p->ran_out >= 0 ? p->ran_out : 0) + 1);
    if (!p->n_fixes) fprintf(f, "no single option change makes it fit; use a smaller model or larger devices\n");
    for (int i = 0; i < p->n_fixes; i++)
      fprintf(f, "%s --%s %s  -> peak %s on device %d (%s)\n", i ? "or: " : "fix:", p->fixes[i].option,
              p->fixes[i].value, il_mem_format_bytes(p->fixes[i].peak_bytes, a, sizeof a), p->ran_out + 1,
              p->fixes[i].effect);
  }
  fprintf(f, "(%d dry runs of the engine)\n", p->dry_runs);
}

void il_plan_print(const il_plan *p, FILE *f) {
  char a[32], b[32], c[32];
  if (p->n_devs > 1) {
    il__print_list(p, f);
    return;
  }
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
  if (p->n_devs > 1) {
    il_jsonw_key(&w, "split"), il_jsonw_str(&w, p->tp > 1 ? "" : p->split);
    il_jsonw_key(&w, "tp"), il_jsonw_int(&w, p->tp > 1 ? p->tp : 1);
    il_jsonw_key(&w, "ran_out"), il_jsonw_int(&w, p->ran_out);
    il_jsonw_key(&w, "devices");
    il_jsonw_arr(&w);
    for (int k = 0; k < p->n_devs; k++) {
      const il_plan_dev *d = &p->devs[k];
      il_jsonw_obj(&w);
      il_jsonw_key(&w, "device"), il_jsonw_str(&w, d->device);
      il_jsonw_key(&w, "layers"), il_jsonw_int(&w, d->n_layers);
      il_jsonw_key(&w, "capacity_bytes"), il_jsonw_int(&w, (long long)d->capacity);
      il_jsonw_key(&w, "peak_bytes"), il_jsonw_int(&w, (long long)d->peak_bytes);
      il_jsonw_key(&w, "reserved_bytes"), il_jsonw_int(&w, (long long)d->reserved_bytes);
      il_jsonw_key(&w, "space_peak_bytes"), il_jsonw_int(&w, (long long)d->space_peak_bytes);
      il_jsonw_key(&w, "fixed_bytes"), il_jsonw_int(&w, (long long)d->fixed_bytes);
      il_jsonw_key(&w, "fits"), il_jsonw_bool(&w, d->fits);
      il_jsonw_key(&w, "margin"), il_jsonw_num(&w, d->margin);
      il_jsonw_key(&w, "by_category");
      il_jsonw_obj(&w);
      for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
        il_jsonw_key(&w, il_mem_category_name((il_mem_category)i)), il_jsonw_int(&w, (long long)d->by_cat[i]);
      il_jsonw_obj_end(&w);
      il_jsonw_obj_end(&w);
    }
    il_jsonw_arr_end(&w);
  }
  il_jsonw_key(&w, "dry_runs"), il_jsonw_int(&w, p->dry_runs);
  il_jsonw_obj_end(&w);
  fputc('\n', f);
}
