/* engine/oom: formatting and keeping the out-of-memory report. */
#include "engine/oom.h"

#include <string.h>

#include "core/jsonw.h"
#include "core/text.h"

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

size_t il_oom_need_total(const il_oom_need *n) { return n->weights + n->kv + n->activations + n->workspace + n->fixed; }

void il_oom_report_text(const il_oom_report *r, char *buf, size_t n) {
  char a[32], b[32], c[32], d[32];
  const il_mem_oom *f = &r->failure;
  buf[0] = 0;
  il_appendf(buf, n, "out of memory on %s: cannot allocate %s for %s (%s)\n", r->device,
             il_mem_format_bytes(f->requested, a, sizeof a), f->what, il_mem_category_name(f->cat));
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
  il_appendf(buf, n, "  this run needs %s: weights %s, kv %s, activations %s",
             il_mem_format_bytes(r->need_total, a, sizeof a), il_mem_format_bytes(r->need.weights, b, sizeof b),
             il_mem_format_bytes(r->need.kv, c, sizeof c), il_mem_format_bytes(r->need.activations, d, sizeof d));
  il_appendf(buf, n, ", attention workspace %s", il_mem_format_bytes(r->need.workspace, a, sizeof a));
  il_appendf(buf, n, ", device overhead %s\n", il_mem_format_bytes(r->need.fixed, a, sizeof a));
  if (r->n_fixes == 0) {
    il_appendf(buf, n, "  fix: no single option change makes it fit; use a smaller model or a larger device");
    return;
  }
  const il_oom_fix *x = &r->fixes[0];
  il_appendf(buf, n, "  fix: --%s %s -> needs %s of %s (%s)", x->option, x->value,
             il_mem_format_bytes(x->predicted, a, sizeof a), il_mem_format_bytes(r->capacity, b, sizeof b), x->effect);
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
  il_jsonw_key(&w, "need");
  il_jsonw_obj(&w);
  const struct {
    const char *k;
    size_t v;
  } need[] = {{"weights", r->need.weights},     {"kv", r->need.kv},       {"activations", r->need.activations},
              {"workspace", r->need.workspace}, {"fixed", r->need.fixed}, {"total", r->need_total}};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) il_jsonw_key(&w, need[i].k), il_jsonw_int(&w, (long long)need[i].v);
  il_jsonw_obj_end(&w);
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
