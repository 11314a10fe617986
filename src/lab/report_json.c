/* lab/report_json: the bench JSON document (schema IL_REPORT_BENCH_SCHEMA) and JSON Lines.
 *
 * Document: {schema_version, tool, command, environment{...}, options{reps, warmup, seed,
 * roofline_gbps}, axes[{name, key, values[]}], metrics[{key, label, unit, better}],
 * results[{label, point{axis: value}, config{every engine option, prompt}, status, error,
 * model{name, type, params, weight_bytes, bytes_per_pass}, threads, n_ctx, n_batch, batch,
 * prompt, gen, rss_resettable, compute_peak_gops (null: none), compute_peak (its instruction),
 * summary{metric: {n, mean, stddev, min, max, p50, p90, p99}},
 * tpot_steps{...}, memory_peak_bytes{category: max over repetitions}, memory_mapped_bytes{},
 * usage{...} | null, samples[{metric: value, memory_peak_bytes{...}}], step_seconds[]}]}.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/report.h"

void il_report_json_config(const il_sweep_point *p, il_jsonw *w) {
  il_jsonw_obj(w);
  char buf[IL_CONFIG_STR_MAX + 8];
  for (const il_opt *o = il_config_options(); o->name; o++) {
    if (o->request) continue; /* of those only n-predict applies: below */
    il_config_format(&p->cfg, NULL, o, buf, sizeof buf);
    il_jsonw_key(w, o->name);
    if (o->kind == IL_OPT_STR) il_jsonw_str(w, buf);
    else if (o->kind == IL_OPT_BOOL) il_jsonw_bool(w, *((const bool *)((const char *)&p->cfg + o->offset)));
    else il_jsonw_num(w, strtod(buf, NULL));
  }
  il_jsonw_kint(w, "n-predict", p->gen);
  il_jsonw_kint(w, "prompt", p->prompt);
  il_jsonw_obj_end(w);
}

static void il__summary(il_jsonw *w, const il_stats_summary *s) {
  il_jsonw_obj(w);
  il_jsonw_kint(w, "n", s->n);
  il_jsonw_knum(w, "mean", s->mean);
  il_jsonw_knum(w, "stddev", s->stddev);
  il_jsonw_knum(w, "min", s->min);
  il_jsonw_knum(w, "max", s->max);
  il_jsonw_knum(w, "p50", s->p50);
  il_jsonw_knum(w, "p90", s->p90);
  il_jsonw_knum(w, "p99", s->p99);
  il_jsonw_obj_end(w);
}

static void il__mem(il_jsonw *w, const size_t *bytes) {
  il_jsonw_obj(w);
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) il_jsonw_kint(w, il_mem_category_name((il_mem_category)c), (long long)bytes[c]);
  il_jsonw_obj_end(w);
}

static void il__usage(il_jsonw *w, const il_usage_result *u) {
  il_jsonw_obj(w);
  il_jsonw_kint(w, "samples", u->n_samples);
  il_jsonw_knum(w, "sampled_rss_peak_bytes", u->rss_peak >= 0 ? (double)u->rss_peak : (double)NAN);
  il_jsonw_kbool(w, "gpu_available", u->gpu_available);
  il_jsonw_kstr(w, "gpu_reason", u->gpu_available ? NULL : u->gpu_reason);
  il_jsonw_key(w, "gpus");
  il_jsonw_arr(w);
  for (int i = 0; i < u->n_gpus; i++) {
    const il_usage_gpu *g = &u->gpus[i];
    il_jsonw_obj(w);
    il_jsonw_kint(w, "index", g->index);
    il_jsonw_kstr(w, "name", g->name);
    il_jsonw_knum(w, "memory_used_peak_bytes", g->mem_n ? (double)g->mem_peak : (double)NAN);
    il_jsonw_knum(w, "memory_used_mean_bytes", g->mem_n ? g->mem_mean : (double)NAN);
    il_jsonw_knum(w, "process_memory_peak_bytes", g->proc_known ? (double)g->proc_mem_peak : (double)NAN);
    il_jsonw_knum(w, "utilization_mean_percent", g->util_n ? g->util_mean : (double)NAN);
    il_jsonw_knum(w, "utilization_max_percent", g->util_n ? (double)g->util_max : (double)NAN);
    il_jsonw_knum(w, "energy_joules", g->energy_j >= 0 ? g->energy_j : (double)NAN);
    il_jsonw_obj_end(w);
  }
  il_jsonw_arr_end(w);
  il_jsonw_obj_end(w);
}

static void il__sample_fields(il_jsonw *w, const il_bench_sample *s, bool spec) {
  for (int m = 0; m < IL_BM_COUNT; m++) il_jsonw_knum(w, il_bench_metric_info_of((il_bench_metric)m)->key, s->v[m]);
  if (spec) { /* the generate loop's own counts and the phase's time, which the figures divide */
    il_jsonw_kint(w, "gen_tokens", (long long)s->gen_tokens);
    il_jsonw_knum(w, "gen_s", s->gen_s);
    il_jsonw_kint(w, "drafted", (long long)s->drafted);
    il_jsonw_kint(w, "accepted", (long long)s->accepted);
    il_jsonw_kint(w, "target_passes", (long long)s->passes);
  }
  il_jsonw_key(w, "memory_peak_bytes");
  il__mem(w, s->mem_peak);
  il_jsonw_key(w, "memory_mapped_bytes");
  il__mem(w, s->mem_mapped);
}

static void il__point(il_jsonw *w, const il_sweep *sw, const il_sweep_point *p) {
  il_jsonw_obj(w);
  for (int a = 0; sw && a < sw->n_axes; a++) {
    char v[IL_CONFIG_STR_MAX];
    il_sweep_get(p, sw->axes[a].name, v, sizeof v);
    il_jsonw_kstr(w, sw->axes[a].name, v);
  }
  il_jsonw_obj_end(w);
}

il_status il_report_json_write(const il_report *r, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "schema_version", IL_REPORT_BENCH_SCHEMA);
  il_jsonw_kstr(&w, "tool", "inferlab bench");
  il_jsonw_kstr(&w, "command", r->command);
  il_jsonw_key(&w, "environment");
  if (r->env) il_env_json(r->env, &w);
  else il_jsonw_null(&w);
  il_jsonw_key(&w, "options");
  il_jsonw_obj(&w);
  if (r->opt) {
    il_jsonw_kint(&w, "reps", r->opt->reps);
    il_jsonw_kint(&w, "warmup", r->opt->warmup);
    il_jsonw_kint(&w, "seed", (long long)r->opt->seed);
    il_jsonw_knum(&w, "roofline_gbps", r->opt->roofline_gbps > 0 ? r->opt->roofline_gbps : (double)NAN);
  }
  il_jsonw_obj_end(&w);
  il_jsonw_key(&w, "axes");
  il_jsonw_arr(&w);
  for (int a = 0; r->sweep && a < r->sweep->n_axes; a++) {
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "name", r->sweep->axes[a].name);
    il_jsonw_kstr(&w, "key", il_sweep_key(r->sweep->axes[a].name));
    il_jsonw_key(&w, "values");
    il_jsonw_arr(&w);
    for (int i = 0; i < r->sweep->axes[a].n; i++) il_jsonw_str(&w, r->sweep->axes[a].values[i]);
    il_jsonw_arr_end(&w);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_key(&w, "metrics");
  il_jsonw_arr(&w);
  for (int m = 0; m < IL_BM_COUNT; m++) {
    const il_bench_metric_info *mi = il_bench_metric_info_of((il_bench_metric)m);
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "key", mi->key);
    il_jsonw_kstr(&w, "label", mi->label);
    il_jsonw_kstr(&w, "unit", mi->unit);
    il_jsonw_kint(&w, "better", mi->better);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_key(&w, "results");
  il_jsonw_arr(&w);
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "label", res->label);
    il_jsonw_key(&w, "point");
    il__point(&w, r->sweep, &res->point);
    il_jsonw_key(&w, "config");
    il_report_json_config(&res->point, &w);
    il_jsonw_kstr(&w, "status", res->status == IL_OK ? "ok" : il_status_name(res->status));
    il_jsonw_kstr(&w, "error", res->status == IL_OK ? NULL : res->error);
    il_jsonw_key(&w, "model");
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "name", res->model);
    il_jsonw_kstr(&w, "type", res->model_type);
    il_jsonw_kint(&w, "params", (long long)res->n_params);
    il_jsonw_kint(&w, "weight_bytes", (long long)res->weight_bytes);
    il_jsonw_kint(&w, "bytes_per_pass", (long long)res->bytes_per_pass);
    il_jsonw_obj_end(&w);
    il_jsonw_kint(&w, "threads", res->threads);
    il_jsonw_kint(&w, "n_ctx", res->n_ctx);
    il_jsonw_kint(&w, "n_batch", res->n_batch);
    il_jsonw_kint(&w, "batch", res->batch);
    il_jsonw_kint(&w, "prompt", res->prompt);
    il_jsonw_kint(&w, "gen", res->gen);
    il_jsonw_kbool(&w, "rss_resettable", res->rss_resettable);
    il_jsonw_knum(&w, "compute_peak_gops", res->peak_gops > 0 ? res->peak_gops : (double)NAN);
    il_jsonw_kstr(&w, "compute_peak", res->peak_name);
    if (res->spec) { /* a --draft-model bench: the row's drafting and the row its speed-up is against */
      il_jsonw_key(&w, "speculative");
      il_jsonw_obj(&w);
      il_jsonw_kstr(&w, "draft_model", res->draft >= 0 ? res->draft_name : NULL);
      il_jsonw_kint(&w, "draft", res->draft);
      il_jsonw_kstr(&w, "draft_length", res->draft < 0 ? "none" : res->draft == 0 ? "adaptive" : "fixed");
      il_jsonw_kint(&w, "baseline_result", res->baseline);
      il_jsonw_obj_end(&w);
    }
    if (res->has_device) { /* the device's allocator after the run, and the planner's prediction */
      il_jsonw_key(&w, "device");
      il_jsonw_obj(&w);
      il_jsonw_kstr(&w, "name", res->device);
      il_jsonw_kint(&w, "peak_reserved_bytes", (long long)res->device_stats.total.peak_reserved);
      il_jsonw_kint(&w, "peak_allocated_bytes", (long long)res->device_stats.total.peak_allocated);
      il_jsonw_kint(&w, "predicted_reserved_bytes", (long long)res->predicted_reserved);
      il_jsonw_kint(&w, "predicted_min_device_bytes", (long long)res->predicted_min);
      il_jsonw_key(&w, "fragmentation");
      il_jsonw_num(&w, res->device_stats.fragmentation);
      il_jsonw_obj_end(&w);
    }
    if (res->startup.last > 0) {
      il_jsonw_key(&w, "startup");
      il_startup_json(&res->startup, &w);
    }
    il_jsonw_key(&w, "summary");
    il_jsonw_obj(&w);
    for (int m = 0; m < IL_BM_COUNT; m++) {
      il_jsonw_key(&w, il_bench_metric_info_of((il_bench_metric)m)->key);
      il__summary(&w, &res->sum[m]);
    }
    il_jsonw_obj_end(&w);
    il_jsonw_key(&w, "tpot_steps");
    il__summary(&w, &res->tpot_steps);
    size_t peak[IL_MEM_CATEGORY_COUNT] = {0}, mapped[IL_MEM_CATEGORY_COUNT] = {0};
    for (int s = 0; s < res->n_samples; s++)
      for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
        if (res->samples[s].mem_peak[c] > peak[c]) peak[c] = res->samples[s].mem_peak[c];
        if (res->samples[s].mem_mapped[c] > mapped[c]) mapped[c] = res->samples[s].mem_mapped[c];
      }
    il_jsonw_key(&w, "memory_peak_bytes");
    il__mem(&w, peak);
    il_jsonw_key(&w, "memory_mapped_bytes");
    il__mem(&w, mapped);
    il_jsonw_key(&w, "usage");
    if (res->has_usage) il__usage(&w, &res->usage);
    else il_jsonw_null(&w);
    il_jsonw_key(&w, "samples");
    il_jsonw_arr(&w);
    for (int s = 0; s < res->n_samples; s++) {
      il_jsonw_obj(&w);
      il__sample_fields(&w, &res->samples[s], res->spec);
      il_jsonw_obj_end(&w);
    }
    il_jsonw_arr_end(&w);
    il_jsonw_key(&w, "step_seconds");
    il_jsonw_arr(&w);
    for (int s = 0; s < res->n_steps; s++) il_jsonw_num(&w, res->step_s[s]);
    il_jsonw_arr_end(&w);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_obj_end(&w);
  return il_jsonw_finish(&w);
}

void il_report_jsonl_sample(const il_bench_result *res, int i, const char *arm, int run, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, false);
  il_jsonw_obj(&w);
  if (arm) {
    il_jsonw_kstr(&w, "arm", arm);
    il_jsonw_kint(&w, "run", run);
  }
  il_jsonw_kstr(&w, "label", res->label);
  il_jsonw_kint(&w, "rep", i);
  il_jsonw_kint(&w, "batch", res->batch);
  il_jsonw_kint(&w, "prompt", res->prompt);
  il_jsonw_kint(&w, "gen", res->gen);
  il_jsonw_kint(&w, "threads", res->threads);
  il__sample_fields(&w, &res->samples[i], res->spec);
  il_jsonw_obj_end(&w);
  fputc('\n', f);
}

il_status il_report_jsonl_write(const il_report *r, const char *arm, FILE *f) {
  for (int k = 0; k < r->n_results; k++)
    for (int i = 0; i < r->results[k].n_samples; i++) il_report_jsonl_sample(&r->results[k], i, arm, k, f);
  if (ferror(f)) return il_error(IL_ERR_IO, "writing JSON lines failed");
  return IL_OK;
}
