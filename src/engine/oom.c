/* engine/oom: the out-of-memory report: the fixes it suggests, its text and JSON, the last one kept. */
#include "engine/oom.h"

#include <string.h>

#include <stdio.h>

#include "core/jsonw.h"
#include "core/text.h"
#include "engine/engine_impl.h"
#include "model/builtin.h"

static _Thread_local il_oom_report il__last;
static _Thread_local bool il__have;

void il__oom_report_set(const il_oom_report *r) {
  il__last = *r;
  il__have = true;
}

bool il_oom_report_last(il_oom_report *out) {
  if (il__have) *out = il__last;
  return il__have;
}

/* ---- the suggester: single option changes, each sized by the engine's own need ---- */

static void il__fix(il_oom_report *r, const char *opt, const char *value, size_t predicted, const char *effect) {
  if (r->n_fixes >= IL_OOM_MAX_FIXES) return;
  il_oom_fix *f = &r->fixes[r->n_fixes++];
  snprintf(f->option, sizeof f->option, "%s", opt);
  snprintf(f->value, sizeof f->value, "%s", value);
  f->predicted = predicted;
  snprintf(f->effect, sizeof f->effect, "%s", effect);
}

static bool il__has_fix(const il_oom_report *r, const char *opt) {
  for (int i = 0; i < r->n_fixes; i++)
    if (!strcmp(r->fixes[i].option, opt)) return true;
  return false;
}

/* Tries single changes, least loss first, and keeps those that fit the capacity. */
/* --device LIST: move layers off the device that ran out to a neighbour (the fewest that make
 * every device fit), else the balanced split (--split auto's), as explicit layer counts. */
static void il__suggest_split(const il_engine *e, const il__engine_shape *cur, il_oom_report *r) {
  const int nd = e->n_devs, k = r->dev;
  char v[64], eff[96];
  int32_t c[IL_BACKEND_LIST_MAX];
  il__engine_shape s = *cur;
  s.split = c;
  int best_n = 0, best_to = -1;
  size_t best_pred = 0;
  for (int dir = -1; dir <= 1; dir += 2) {
    const int to = k + dir;
    if (to < 0 || to >= nd) continue;
    for (int32_t n = 1; n <= cur->split[k] && (!best_n || n < best_n); n++) {
      memcpy(c, cur->split, sizeof c[0] * (size_t)nd);
      c[k] -= n, c[to] += n;
      size_t pred = 0;
      if (il__engine_fits(e, &s, r->capacity, k, &pred)) {
        best_n = n, best_to = to, best_pred = pred;
        break;
      }
    }
  }
  if (best_n) {
    memcpy(c, cur->split, sizeof c[0] * (size_t)nd);
    c[k] -= best_n, c[best_to] += best_n;
    il_split_format(c, nd, v, sizeof v);
    snprintf(eff, sizeof eff, "moves %d layer%s from device %d to device %d", best_n, best_n > 1 ? "s" : "", k + 1,
             best_to + 1);
    il__fix(r, e->gl_list ? "gpu-layers" : "split", v, best_pred, eff); /* the option that gave the counts */
    return;
  }
  il__engine_split_auto(e, cur, c);
  size_t pred = 0;
  if (memcmp(c, cur->split, sizeof c[0] * (size_t)nd) && il__engine_fits(e, &s, r->capacity, k, &pred)) {
    il_split_format(c, nd, v, sizeof v);
    il__fix(r, e->gl_list ? "gpu-layers" : "split", v, pred,
            "the split that balances each device's need against its size (--split auto)");
  }
}

static void il__suggest(const il_engine *e, const il__engine_shape *cur, il_oom_report *r) {
  const size_t cap = r->capacity;
  const bool list = (cur->split || e->tp.n > 1) && e->n_devs > 1;
  char v[32];
  if (list && e->tp.n < 2) il__suggest_split(e, cur, r); /* --tp: no layers to move */
  il__engine_shape s = *cur;
  /* 1. smaller forward passes: only prompt-processing speed changes */
  for (s.n_batch = cur->n_batch / 2; s.n_batch >= 1; s.n_batch /= 2) {
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred)) {
      snprintf(v, sizeof v, "%d", s.n_batch);
      il__fix(r, "batch", v, pred, "prompts are processed in smaller passes (slower prompt)");
      break;
    }
    if (s.n_batch == 1) break;
  }
  /* 2. half-precision KV cells (what llama.cpp and vLLM keep by default) */
  s = *cur;
  if (cur->kv.type == IL_DTYPE_F32) {
    s.kv.type = IL_DTYPE_F16;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred)) il__fix(r, "kv-type", "f16", pred, "KV cache in f16 (logits within about 1e-3)");
  }
  /* 2b. bf16 activations (f32's range, so no overflow; a little precision) */
  s = *cur;
  if (cur->act_type == IL_DTYPE_F32) {
    s.act_type = IL_DTYPE_BF16;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred))
      il__fix(r, "dtype", "bf16", pred, "activations stored in bf16 (logits within about 1e-2)");
  }
  /* 3. fewer sequences in the cache */
  s = *cur;
  for (s.n_seq = cur->n_seq / 2; s.n_seq >= 1 && cur->n_seq > 1; s.n_seq /= 2) {
    if (s.n_batch > s.n_seq * s.n_ctx) s.n_batch = s.n_seq * s.n_ctx;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred)) {
      snprintf(v, sizeof v, "%d", s.n_seq);
      il__fix(r, "n-seq", v, pred, "fewer sequences decoded at once");
      break;
    }
    if (s.n_seq == 1) break;
  }
  /* 4. a shorter context */
  s = *cur;
  for (s.n_ctx = cur->n_ctx / 2; s.n_ctx >= 64; s.n_ctx /= 2) {
    if (s.n_batch > s.n_seq * s.n_ctx) s.n_batch = s.n_seq * s.n_ctx;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred)) {
      snprintf(v, sizeof v, "%d", s.n_ctx);
      il__fix(r, "ctx", v, pred, "shorter context per sequence");
      break;
    }
  }
  /* 4b. a MoE's experts on the CPU (llama.cpp's --cpu-moe): attention and the routers stay on
   * the device, only the experts' weights leave it */
  s = *cur;
  if (!e->info.host_visible && e->model->hp.n_expert && cur->exps_dev) {
    s.exps_dev = false;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred))
      il__fix(r, "place", "exps=cpu", pred,
              "experts on cpu fits: attention and routers on the device, the experts' FFNs on the CPU (slower)");
  }
  /* 5. fewer layers on the device, the rest on the CPU (--gpu-layers): the largest count that fits */
  if (!list && !e->info.host_visible) {
    const int32_t L = e->model->hp.n_layer;
    uint8_t *mask = il_mem_calloc(IL_MEM_OTHER, (size_t)L + 1, "placement mask");
    for (int32_t k = L - 1; mask && k >= 0; k--) {
      s = *cur;
      memset(mask, 0, (size_t)L);
      memset(mask, 1, (size_t)k);
      s.layer_dev = mask;
      s.embd_dev = false;
      s.out_dev = false;
      size_t pred = 0;
      if (il__engine_fits(e, &s, cap, r->dev, &pred)) {
        snprintf(v, sizeof v, "%d", k);
        il__fix(r, "gpu-layers", v, pred, "the other layers run on the CPU (slower)");
        break;
      }
    }
    il_mem_free(mask);
  }
  /* 5b. q8_0 KV cells (half of f16, llama.cpp's -ctk/-ctv q8_0): a quality loss, so after the
   * changes that only cost speed or capacity, where no kv-type fix came first and the device's
   * attention kernels read them */
  s = *cur;
  if (cur->kv.type != IL_DTYPE_Q8_0 && e->model->hp.head_dim % 32 == 0 &&
      e->backend->ops->supports(e->backend, IL_OP_ATTENTION, IL_DTYPE_Q8_0, IL_DTYPE_F32) &&
      !il__has_fix(r, "kv-type")) {
    s.kv.type = IL_DTYPE_Q8_0;
    size_t pred = 0;
    if (il__engine_fits(e, &s, cap, r->dev, &pred))
      il__fix(r, "kv-type", "q8_0", pred, "KV cache in q8_0 (quality loss: measure it with eval)");
  }
  /* 6. lower-precision weights (only where the weights are on the device) */
  if (!e->info.host_visible) {
    const il_dtype lower[] = {IL_DTYPE_Q8_0, IL_DTYPE_Q4_0};
    const bool builtin = il_builtin_is(e->cfg.model);
    for (size_t i = 0; i < 2; i++) {
      s = *cur;
      s.wtype = lower[i];
      il_oom_need n = il__engine_need(e, &s), now = il__engine_need(e, cur);
      if (n.weights >= now.weights) continue;
      size_t pred = 0;
      if (il__engine_fits(e, &s, cap, r->dev, &pred)) {
        il__fix(r, builtin ? "wtype" : "convert", il_dtype_name(lower[i]), pred,
                builtin ? "lower-precision weights: quality loss, measure it with experiment"
                        : "convert the model with 'inferlab convert --type' (quality loss)");
        break;
      }
    }
  }
}

il_status il__oom_fail(il_engine *e, const il__engine_shape *cur_in) {
  il_oom_report r;
  memset(&r, 0, sizeof r);
  if (!il_mem_last_oom(&r.failure)) return IL_ERR_OOM;
  il__engine_shape cur = *cur_in;
  const bool list = (cur.split || e->tp.n > 1) && e->n_devs > 1;
  il_backend *ran_out = e->backend;
  if (list) { /* the device whose space refused (the host's, for a cpu item, is none of theirs) */
    r.n_devs = e->n_devs;
    for (int k = 0; k < e->n_devs; k++)
      if (r.failure.space_id == e->devs[k]->space) r.dev = k, ran_out = e->devs[k];
  }
  il_backend_info info;
  ran_out->ops->info(ran_out, &info);
  snprintf(r.device, sizeof r.device, "%s", info.name);
  size_t free_b = 0;
  ran_out->ops->memory(ran_out, &free_b, &r.capacity);
  if (info.host_visible) r.capacity = free_b + r.failure.stats.total_current; /* host: what is available */
  const il_config *cfg = &e->cfg;
  r.ctx_from = cfg->ctx <= 0 ? IL_OOM_CTX_DEFAULT : cfg->ctx_is_hint ? IL_OOM_CTX_SIZED : IL_OOM_CTX_GIVEN;
  if (r.ctx_from == IL_OOM_CTX_DEFAULT && !e->ctx_sized) {
    /* the weights did not fit, so the engine never sized the default context: size it as it
     * would have, from what the device (each device of a list) has left beside the weights, so
     * that the need and the fixes are those of the context the run would get */
    bool capped = false;
    if (list && e->tp.n > 1) { /* every device holds a shard of every layer's cache */
      size_t least = SIZE_MAX;
      for (int k = 0; k < e->n_devs; k++) {
        il_oom_need w = il__engine_need_dev(e, &cur, k);
        const size_t used = w.weights + w.fixed, cap = il__device_total(e->devs[k]), a = cap > used ? cap - used : 0;
        least = a < least ? a : least;
      }
      cur.n_ctx = il__engine_default_ctx(e, least, &capped);
    } else if (list) {
      size_t avail[IL_BACKEND_LIST_MAX];
      for (int k = 0; k < e->n_devs; k++) {
        il_oom_need w = il__engine_need_dev(e, &cur, k);
        const size_t used = w.weights + w.fixed, cap = il__device_total(e->devs[k]);
        avail[k] = cap > used ? cap - used : 0;
      }
      cur.n_ctx = il__engine_default_ctx_list(e, cur.split, avail, &capped);
    } else {
      il_oom_need w = il__engine_need(e, &cur);
      const size_t used = w.weights + w.fixed;
      cur.n_ctx = il__engine_default_ctx(e, r.capacity > used ? r.capacity - used : 0, &capped);
    }
    cur.n_batch = il__batch_for(cfg->batch, cur.n_ctx, cur.n_seq);
  }
  r.n_ctx = cur.n_ctx;
  r.need = list ? il__engine_need_dev(e, &cur, r.dev) : il__engine_need(e, &cur);
  r.need_total = il_oom_need_total(&r.need);
  for (int k = 0; list && k < e->n_devs; k++) {
    il_backend_info di;
    e->devs[k]->ops->info(e->devs[k], &di);
    snprintf(r.devs[k].name, sizeof r.devs[k].name, "%s", di.name);
    r.devs[k].layers = e->tp.n > 1 ? e->model->hp.n_layer : cur.split[k];
    r.devs[k].capacity = il__device_total(e->devs[k]);
    il_oom_need n = il__engine_need_dev(e, &cur, k);
    r.devs[k].need = il_oom_need_total(&n);
  }
  /* the allocator calls it fragmentation when its cached free bytes would hold the request in
   * all but no block does; that is the cause only when the run as a whole fits the device */
  r.fragmentation = r.failure.fragmentation && r.need_total <= r.capacity;
  il__suggest(e, &cur, &r);
  il__oom_report_set(&r);
  char text[4096];
  il_oom_report_text(&r, text, sizeof text);
  return il_error(IL_ERR_OOM, "%s", text);
}

il_status il_oom_fix_apply(const il_oom_report *r, const char *option, const char *value, il_config *c) {
  IL_TRY(il_config_set(c, option, value, "--fit"));
  if (r->ctx_from == IL_OOM_CTX_DEFAULT && strcmp(option, "ctx")) {
    c->ctx = r->n_ctx; /* the context the fix was predicted at: the default would be sized anew */
  }
  return IL_OK;
}

const char *il_oom_ctx_from_name(il_oom_ctx_from f) {
  switch (f) {
  case IL_OOM_CTX_GIVEN: return "given with --ctx";
  case IL_OOM_CTX_SIZED: return "sized for the prompt and the tokens to generate";
  default: return "the model's default context, sized to the device";
  }
}

/* ---- text and JSON ---- */

size_t il_oom_need_total(const il_oom_need *n) { return n->weights + n->kv + n->activations + n->workspace + n->fixed; }

void il_oom_report_text(const il_oom_report *r, char *buf, size_t n) {
  char a[32], b[32], c[32], d[32];
  const il_mem_oom *f = &r->failure;
  buf[0] = 0;
  il_appendf(buf, n, "out of memory on %s", r->device);
  if (r->n_devs > 1) il_appendf(buf, n, " (device %d of %d, %d layers)", r->dev + 1, r->n_devs, r->devs[r->dev].layers);
  il_appendf(buf, n, ": cannot allocate %s for %s (%s)\n", il_mem_format_bytes(f->requested, a, sizeof a), f->what,
             il_mem_category_name(f->cat));
  const size_t used = f->stats.total_current;
  if (f->reserved) { /* a caching allocator: what it holds from the device, and what is handed out */
    const size_t held = f->reserved + r->need.fixed, free_b = r->capacity > held ? r->capacity - held : 0;
    il_appendf(buf, n, "  device: %s total, %s reserved (%s allocated), %s free",
               il_mem_format_bytes(r->capacity, a, sizeof a), il_mem_format_bytes(held, b, sizeof b),
               il_mem_format_bytes(used, c, sizeof c), il_mem_format_bytes(free_b, d, sizeof d));
  } else {
    const size_t free_b = f->stats.limit > used ? f->stats.limit - used : 0;
    il_appendf(buf, n, "  device: %s total, %s in use, %s free", il_mem_format_bytes(r->capacity, a, sizeof a),
               il_mem_format_bytes(used, b, sizeof b), il_mem_format_bytes(free_b, c, sizeof c));
  }
  if (f->largest_free) il_appendf(buf, n, ", largest free block %s", il_mem_format_bytes(f->largest_free, d, sizeof d));
  il_appendf(buf, n, "\n  in use by category:");
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
    if (f->stats.current[i]) il_appendf(buf, n, " %s %s", il_mem_category_name((il_mem_category)i),
                                        il_mem_format_bytes(f->stats.current[i], a, sizeof a));
  il_appendf(buf, n, "\n  cause: %s\n",
             r->fragmentation ? "fragmentation: enough bytes are free, but no single free block is large enough"
                              : (strcmp(f->why, "injected") ? "capacity: this run needs more than the device holds"
                                                            : "an injected failure (test)"));
  il_appendf(buf, n, "  this run needs %s at ctx %d (%s): weights %s, kv %s, activations %s",
             il_mem_format_bytes(r->need_total, a, sizeof a), r->n_ctx, il_oom_ctx_from_name(r->ctx_from), il_mem_format_bytes(r->need.weights, b, sizeof b),
             il_mem_format_bytes(r->need.kv, c, sizeof c), il_mem_format_bytes(r->need.activations, d, sizeof d));
  il_appendf(buf, n, ", attention workspace %s", il_mem_format_bytes(r->need.workspace, a, sizeof a));
  il_appendf(buf, n, ", device overhead %s\n", il_mem_format_bytes(r->need.fixed, a, sizeof a));
  for (int k = 0; k < r->n_devs && r->n_devs > 1; k++)
    il_appendf(buf, n, "  %s device %d %s: %d layers, needs %s of %s%s\n", k ? "   " : "per", k + 1, r->devs[k].name,
               r->devs[k].layers, il_mem_format_bytes(r->devs[k].need, a, sizeof a),
               il_mem_format_bytes(r->devs[k].capacity, b, sizeof b), r->devs[k].need > r->devs[k].capacity ? " (over)" : "");
  if (r->n_fixes == 0) {
    il_appendf(buf, n, "  fix: no single option change makes it fit; use a smaller model or a larger device");
    return;
  }
  const il_oom_fix *x = &r->fixes[0];
  il_appendf(buf, n, "  fix: --%s %s -> needs %s of %s%s%s (%s)", x->option, x->value,
             il_mem_format_bytes(x->predicted, a, sizeof a), il_mem_format_bytes(r->capacity, b, sizeof b),
             r->n_devs > 1 ? " on " : "", r->n_devs > 1 ? r->device : "", x->effect);
  for (int i = 1; i < r->n_fixes; i++) {
    x = &r->fixes[i];
    il_appendf(buf, n, "\n  or:  --%s %s -> needs %s (%s)", x->option, x->value,
               il_mem_format_bytes(x->predicted, a, sizeof a), x->effect);
  }
}

void il_oom_report_json(const il_oom_report *r, FILE *f) {
  const il_mem_oom *o = &r->failure;
  il_jsonw w;
  il_jsonw_init(&w, f, false);
  il_jsonw_obj(&w);
  il_jsonw_key(&w, "error"), il_jsonw_str(&w, "out_of_memory");
  il_jsonw_key(&w, "device"), il_jsonw_str(&w, r->device);
  il_jsonw_key(&w, "requested_bytes"), il_jsonw_int(&w, (long long)o->requested);
  il_jsonw_key(&w, "what"), il_jsonw_str(&w, o->what);
  il_jsonw_key(&w, "category"), il_jsonw_str(&w, il_mem_category_name(o->cat));
  il_jsonw_key(&w, "capacity_bytes"), il_jsonw_int(&w, (long long)r->capacity);
  il_jsonw_key(&w, "in_use_bytes"), il_jsonw_int(&w, (long long)o->stats.total_current);
  il_jsonw_key(&w, "reserved_bytes"), il_jsonw_int(&w, (long long)(o->reserved + r->need.fixed));
  il_jsonw_key(&w, "largest_free_block_bytes"), il_jsonw_int(&w, (long long)o->largest_free);
  il_jsonw_key(&w, "in_use_by_category");
  il_jsonw_obj(&w);
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
    il_jsonw_key(&w, il_mem_category_name((il_mem_category)i)), il_jsonw_int(&w, (long long)o->stats.current[i]);
  il_jsonw_obj_end(&w);
  il_jsonw_key(&w, "cause"), il_jsonw_str(&w, r->fragmentation ? "fragmentation" : "capacity");
  il_jsonw_key(&w, "n_ctx"), il_jsonw_int(&w, r->n_ctx);
  il_jsonw_key(&w, "ctx_from"), il_jsonw_str(&w, r->ctx_from == IL_OOM_CTX_GIVEN   ? "given"
                                                 : r->ctx_from == IL_OOM_CTX_SIZED ? "sized"
                                                                                   : "default");
  il_jsonw_key(&w, "need");
  il_jsonw_obj(&w);
  const struct {
    const char *k;
    size_t v;
  } need[] = {{"weights", r->need.weights},     {"kv", r->need.kv},       {"activations", r->need.activations},
              {"workspace", r->need.workspace}, {"fixed", r->need.fixed}, {"total", r->need_total}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) il_jsonw_key(&w, need[i].k), il_jsonw_int(&w, (long long)need[i].v);
  il_jsonw_obj_end(&w);
  if (r->n_devs > 1) {
    il_jsonw_key(&w, "device_index"), il_jsonw_int(&w, r->dev);
    il_jsonw_key(&w, "devices");
    il_jsonw_arr(&w);
    for (int k = 0; k < r->n_devs; k++) {
      il_jsonw_obj(&w);
      il_jsonw_key(&w, "device"), il_jsonw_str(&w, r->devs[k].name);
      il_jsonw_key(&w, "layers"), il_jsonw_int(&w, r->devs[k].layers);
      il_jsonw_key(&w, "capacity_bytes"), il_jsonw_int(&w, (long long)r->devs[k].capacity);
      il_jsonw_key(&w, "need_bytes"), il_jsonw_int(&w, (long long)r->devs[k].need);
      il_jsonw_obj_end(&w);
    }
    il_jsonw_arr_end(&w);
  }
  il_jsonw_key(&w, "fixes");
  il_jsonw_arr(&w);
  for (int i = 0; i < r->n_fixes; i++) {
    const il_oom_fix *x = &r->fixes[i];
    il_jsonw_obj(&w);
    il_jsonw_key(&w, "option"), il_jsonw_str(&w, x->option);
    il_jsonw_key(&w, "value"), il_jsonw_str(&w, x->value);
    il_jsonw_key(&w, "predicted_bytes"), il_jsonw_int(&w, (long long)x->predicted);
    il_jsonw_key(&w, "effect"), il_jsonw_str(&w, x->effect);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_obj_end(&w);
  fputc('\n', f);
}
