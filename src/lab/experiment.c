/* lab/experiment: interleaved A/B runs, ratios with intervals, the evidence folder. See
 * experiment.h. */
#include "lab/experiment.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/env.h"
#include "core/jsonw.h"
#include "lab/report.h"
#include "memory/mem.h"

static const il_bench_metric_info il__cmd_metrics[] = {
    {"duration_s", "duration", "s", -1},
    {"cpu_s", "CPU time (user + sys)", "s", -1},
    {"peak_rss_bytes", "peak RSS", "bytes", -1},
    {"gpu_mem_peak_bytes", "peak GPU memory of the process", "bytes", -1},
    {"gpu_util_mean", "mean GPU utilization", "percent", 0},
    {"energy_j", "GPU energy", "J", -1},
};

void il_experiment_init(il_experiment *x) {
  memset(x, 0, sizeof *x);
  x->repeat = 5;
  il_bench_options_default(&x->bench);
  x->bench.reps = 1;
  x->bench.warmup = 1;
  x->watch.interval_ms = 200;
  x->level = 0.95;
  x->n_boot = 2000;
  x->seed = 42;
  x->min_effect = -1;
}

void il_experiment_free(il_experiment *x) {
  for (int a = 0; a < 2; a++) {
    il_mem_free(x->v[a]);
    x->v[a] = NULL;
    il_bench_result_free(&x->steps[a]);
  }
  if (x->samples) fclose(x->samples);
  x->samples = NULL;
}

il_status il_experiment_parse_change(const char *text, il_experiment_change *out) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text)
    return il_error(IL_ERR_INVALID_ARG, "--change '%s': expected KEY=VALUE (for example --change batch=8)", text);
  size_t kl = (size_t)(eq - text);
  if (kl >= sizeof out->name) return il_error(IL_ERR_INVALID_ARG, "--change '%s': key too long", text);
  if (strlen(eq + 1) >= sizeof out->value) return il_error(IL_ERR_INVALID_ARG, "--change '%s': value too long", text);
  memcpy(out->name, text, kl);
  out->name[kl] = 0;
  snprintf(out->value, sizeof out->value, "%s", eq + 1);
  return IL_OK;
}

/* The value an option takes effect with: "" for isa is the level in use (best detected, or
 * IL_ISA), 0 threads is one per online CPU; other options are what they say. */
static void il__effective(const il_sweep_point *p, const char *name, char *buf, size_t n) {
  il_sweep_get(p, name, buf, n);
  const char *key = il_sweep_key(name);
  if (!key) return;
  if (!strcmp(key, "isa") && !*buf) {
    il_env e;
    il_env_collect(&e, NULL, true);
    snprintf(buf, n, "%s", e.isa_used);
  } else if (!strcmp(key, "threads") && !strcmp(buf, "0")) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, n, "%ld", cpus > 0 ? cpus : 1);
  }
}

static void il__engine_metrics(il_experiment *x) {
  x->n_metrics = IL_BM_COUNT;
  for (int m = 0; m < IL_BM_COUNT; m++) x->metrics[m] = *il_bench_metric_info_of((il_bench_metric)m);
}

il_status il_experiment_set_changes(il_experiment *x, const il_sweep_point *base, const char *const *changes,
                                    int n_changes, bool allow_multi) {
  if (n_changes < 1)
    return il_error(IL_ERR_INVALID_ARG, "no --change given: name the one option the variant changes (--change KEY=VALUE)");
  if (n_changes > 1 && !allow_multi)
    return il_error(IL_ERR_INVALID_ARG,
                    "%d --change options given (%s and %s%s): an experiment changes exactly one option, so a "
                    "difference can be traced to it; run one experiment per change, or pass --allow-multi to "
                    "change them together on purpose",
                    n_changes, changes[0], changes[1], n_changes > 2 ? ", ..." : "");
  if (n_changes > IL_EXP_MAX_CHANGES)
    return il_error(IL_ERR_INVALID_ARG, "%d --change options: at most %d", n_changes, IL_EXP_MAX_CHANGES);
  x->is_cmd = false;
  x->baseline = *base;
  x->variant = *base;
  x->n_changes = 0;
  for (int i = 0; i < n_changes; i++) {
    il_experiment_change c;
    IL_TRY(il_experiment_parse_change(changes[i], &c));
    const char *key = il_sweep_key(c.name);
    for (int j = 0; j < x->n_changes; j++)
      if (key && !strcmp(il_sweep_key(x->changes[j].name), key))
        return il_error(IL_ERR_INVALID_ARG, "--change %s: %s is already changed by --change %s=%s", changes[i], c.name,
                        x->changes[j].name, x->changes[j].value);
    char where[128];
    snprintf(where, sizeof where, "--change %s", c.name);
    IL_TRY(il_sweep_set(&x->variant, c.name, c.value, where));
    char before[IL_CONFIG_STR_MAX], after[IL_CONFIG_STR_MAX];
    il_sweep_get(&x->baseline, c.name, before, sizeof before);
    il_sweep_get(&x->variant, c.name, after, sizeof after);
    if (!strcmp(before, after))
      return il_error(IL_ERR_INVALID_ARG,
                      "--change %s: the baseline already has %s = %s, so both arms would be the same; set the "
                      "baseline with --%s (or --config) and the variant with --change",
                      changes[i], c.name, before, c.name);
    char eff_before[IL_CONFIG_STR_MAX], eff_after[IL_CONFIG_STR_MAX];
    il__effective(&x->baseline, c.name, eff_before, sizeof eff_before);
    il__effective(&x->variant, c.name, eff_after, sizeof eff_after);
    if (!strcmp(eff_before, eff_after))
      return il_error(IL_ERR_INVALID_ARG,
                      "--change %s: the baseline's %s = %s%s already runs as %s, so both arms would be the same; "
                      "set the baseline with --%s and the variant with --change",
                      changes[i], c.name, *before ? "" : "\"\"", before, eff_before, c.name);
    x->changes[x->n_changes++] = c;
  }
  il__engine_metrics(x);
  return IL_OK;
}

static il_status il__expand(const char *tmpl, const char *value, char *out, size_t n) {
  size_t used = 0;
  for (const char *p = tmpl; *p;) {
    const char *piece = p;
    size_t len = 1;
    if (p[0] == '{' && p[1] == '}') {
      piece = value;
      len = strlen(value);
      p += 2;
    } else {
      p++;
    }
    if (used + len >= n) return il_error(IL_ERR_INVALID_ARG, "--cmd: the expanded command is longer than %zu bytes", n - 1);
    memcpy(out + used, piece, len);
    used += len;
  }
  out[used] = 0;
  return IL_OK;
}

il_status il_experiment_set_command(il_experiment *x, const char *cmd, const char *values) {
  if (!strstr(cmd, "{}"))
    return il_error(IL_ERR_INVALID_ARG, "--cmd '%s': put {} where the value goes (e.g. --cmd 'python gen.py --slicing {}')",
                    cmd);
  if (!values) return il_error(IL_ERR_INVALID_ARG, "--cmd needs --values BASELINE,VARIANT");
  const char *comma = strchr(values, ',');
  if (!comma || strchr(comma + 1, ','))
    return il_error(IL_ERR_INVALID_ARG,
                    "--values '%s': give exactly two values, baseline first (one change means two arms)", values);
  size_t la = (size_t)(comma - values), lb = strlen(comma + 1);
  if (!la || !lb) return il_error(IL_ERR_INVALID_ARG, "--values '%s': a value is empty", values);
  if (la >= sizeof x->value_a || lb >= sizeof x->value_b)
    return il_error(IL_ERR_INVALID_ARG, "--values '%s': value too long", values);
  if (strlen(cmd) >= sizeof x->cmd) return il_error(IL_ERR_INVALID_ARG, "--cmd: longer than %zu bytes", sizeof x->cmd - 1);
  memcpy(x->value_a, values, la);
  x->value_a[la] = 0;
  snprintf(x->value_b, sizeof x->value_b, "%s", comma + 1);
  if (!strcmp(x->value_a, x->value_b))
    return il_error(IL_ERR_INVALID_ARG, "--values '%s': both arms would run the same command", values);
  snprintf(x->cmd, sizeof x->cmd, "%s", cmd);
  IL_TRY(il__expand(cmd, x->value_a, x->cmd_a, sizeof x->cmd_a));
  IL_TRY(il__expand(cmd, x->value_b, x->cmd_b, sizeof x->cmd_b));
  x->is_cmd = true;
  x->n_metrics = (int)(sizeof il__cmd_metrics / sizeof il__cmd_metrics[0]);
  memcpy(x->metrics, il__cmd_metrics, sizeof il__cmd_metrics);
  return IL_OK;
}

void il_experiment_order(int repeat, char *order) {
  /* A B B A A B B A ...: each arm runs first in half the pairs, so a drift, or what one run
   * leaves warm for the next, favours neither arm */
  for (int i = 0; i < repeat; i++) {
    order[2 * i] = i % 2 ? 'B' : 'A';
    order[2 * i + 1] = i % 2 ? 'A' : 'B';
  }
  order[repeat > 0 ? 2 * repeat : 0] = 0;
}

/* ---- built-in runners ------------------------------------------------------------------- */

static il_status il__run_engine(void *ud, il_experiment *x, int arm, int run, double *vals) {
  (void)ud;
  il_bench_result r;
  memset(&r, 0, sizeof r);
  il_bench_options o = x->bench;
  o.reps = 1;
  il_status st = il_bench_run(arm ? &x->variant : &x->baseline, &o, &r);
  if (st == IL_OK) {
    for (int m = 0; m < IL_BM_COUNT; m++) vals[m] = r.samples[0].v[m];
    if (x->samples) il_report_jsonl_sample(&r, 0, arm ? "variant" : "baseline", run, x->samples);
    st = il_bench_result_append(&x->steps[arm], &r);
    if (st == IL_OK && !x->steps[arm].model[0]) {
      snprintf(x->steps[arm].model, sizeof x->steps[arm].model, "%s", r.model);
      x->steps[arm].threads = r.threads;
    }
  } else {
    /* a failed run is not a sample: it is counted, its first message kept, and the experiment
     * goes on (the verdict needs enough successful runs on both arms) */
    if (!x->failures[arm] && !x->first_error[arm][0])
      snprintf(x->first_error[arm], sizeof x->first_error[arm], "%s", *r.error ? r.error : il_error_detail());
    x->failures[arm]++;
    for (int m = 0; m < x->n_metrics; m++) vals[m] = NAN;
    st = IL_OK;
  }
  il_bench_result_free(&r);
  return st;
}

static il_status il__run_cmd(void *ud, il_experiment *x, int arm, int run, double *vals) {
  (void)ud;
  char log[2300];
  il_watch_options wo = x->watch;
  wo.progress = NULL;
  wo.log_path = NULL;
  if (*x->dir) {
    snprintf(log, sizeof log, "%s/logs/run-%03d-%s.log", x->dir, run, arm ? "variant" : "baseline");
    wo.log_path = log;
  }
  char *argv[] = {"/bin/sh", "-c", arm ? x->cmd_b : x->cmd_a, NULL};
  il_watch_result r;
  IL_TRY(il_watch_run(&wo, argv, &r));
  /* Ctrl-C went to the command too (killed by it, or a shell's 130 for it): not a sample, the end */
  if (r.term_signal == SIGINT || il_watch_exit_code(&r) == 130) {
    x->interrupted = true;
    return IL_OK;
  }
  bool failed = il_watch_exit_code(&r) != 0;
  if (failed) {
    if (!x->failures[arm])
      snprintf(x->first_error[arm], sizeof x->first_error[arm], "run %d exited with %d", run, il_watch_exit_code(&r));
    x->failures[arm]++;
  }
  vals[0] = r.seconds;
  vals[1] = r.user_s + r.sys_s;
  vals[2] = (double)r.peak_rss;
  vals[3] = vals[4] = vals[5] = NAN;
  if (r.usage.gpu_available) {
    double mem = 0, util = 0, energy = 0;
    bool have_energy = false;
    for (int i = 0; i < r.usage.n_gpus; i++) {
      const il_usage_gpu *g = &r.usage.gpus[i];
      mem += g->proc_known ? (double)g->proc_mem_peak : (double)g->mem_peak;
      util += g->util_n ? g->util_mean : 0;
      if (g->energy_j >= 0) {
        energy += g->energy_j;
        have_energy = true;
      }
    }
    vals[3] = mem;
    vals[4] = util / r.usage.n_gpus;
    if (have_energy) vals[5] = energy;
  }
  double logged[IL_EXP_MAX_METRICS];
  memcpy(logged, vals, sizeof logged);
  if (failed) /* the evidence keeps the failed run's numbers; the analysis does not use them */
    for (int m = 0; m < x->n_metrics; m++) vals[m] = NAN;
  if (x->samples) {
    il_jsonw w;
    il_jsonw_init(&w, x->samples, false);
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "arm", arm ? "variant" : "baseline");
    il_jsonw_kint(&w, "run", run);
    il_jsonw_kstr(&w, "command", r.command);
    il_jsonw_kint(&w, "exit_code", il_watch_exit_code(&r));
    for (int m = 0; m < x->n_metrics; m++) il_jsonw_knum(&w, x->metrics[m].key, logged[m]);
    il_jsonw_kstr(&w, "gpu_reason", r.usage.gpu_available ? NULL : r.usage.gpu_reason);
    /* the start seen from outside (watch's startup line): null where not seen */
    const il_usage_result *u = &r.usage;
    il_jsonw_knum(&w, "first_output_seconds", u->first_output_s >= 0 ? u->first_output_s : (double)NAN);
    il_jsonw_knum(&w, "rss_90_seconds", u->rss_t90 >= 0 ? u->rss_t90 : (double)NAN);
    il_jsonw_knum(&w, "gpu_memory_90_seconds", u->gpu_t90 >= 0 ? u->gpu_t90 : (double)NAN);
    il_jsonw_obj_end(&w);
    fputc('\n', x->samples);
    fflush(x->samples);
  }
  return IL_OK;
}

il_status il_experiment_run(il_experiment *x, il_experiment_run_fn fn, void *ud) {
  if (!fn) fn = x->is_cmd ? il__run_cmd : il__run_engine;
  if (x->repeat < 1) return il_error(IL_ERR_INVALID_ARG, "--repeat %d: at least 1", x->repeat);
  for (int a = 0; a < 2; a++) {
    il_mem_free(x->v[a]);
    x->v[a] = il_mem_alloc(IL_MEM_OTHER, sizeof(double) * IL_EXP_MAX_METRICS * (size_t)x->repeat, "experiment samples");
    if (!x->v[a]) return IL_ERR_OOM;
    x->n_runs[a] = 0;
  }
  char *order = il_mem_alloc(IL_MEM_OTHER, (size_t)(2 * x->repeat + 1), "experiment order");
  if (!order) return IL_ERR_OOM;
  il_experiment_order(x->repeat, order);
  il_status st = IL_OK;
  x->interrupted = false;
  for (int i = 0; order[i] && st == IL_OK; i++) {
    if (x->stop && *x->stop) x->interrupted = true;
    if (x->interrupted) break;
    int arm = order[i] == 'B';
    if (x->progress) {
      fprintf(x->progress, "\rexperiment: run %d/%d (%s)\033[K", i + 1, 2 * x->repeat, arm ? "variant" : "baseline");
      fflush(x->progress);
    }
    double *vals = x->v[arm] + (size_t)x->n_runs[arm] * IL_EXP_MAX_METRICS;
    for (int m = 0; m < IL_EXP_MAX_METRICS; m++) vals[m] = NAN;
    st = fn(ud, x, arm, i / 2, vals);
    if (st == IL_OK && !x->interrupted) x->n_runs[arm]++;
  }
  if (x->progress) {
    fprintf(x->progress, "\r\033[K");
    fflush(x->progress);
  }
  il_mem_free(order);
  if (x->samples) fflush(x->samples);
  return st;
}

/* ---- analysis ----------------------------------------------------------------------------- */

double il_experiment_min_effect_of(const il_experiment *x, int m) {
  if (x->min_effect >= 0) return x->min_effect;
  return !strcmp(x->metrics[m].unit, "bytes") ? IL_EXP_MIN_EFFECT_MEM : 0;
}

il_status il_experiment_effect_of(const il_experiment *x, int m, il_experiment_effect *out) {
  memset(out, 0, sizeof *out);
  out->metric = &x->metrics[m];
  out->min_effect = il_experiment_min_effect_of(x, m);
  double *col[2];
  int n[2] = {0, 0};
  for (int a = 0; a < 2; a++) {
    col[a] = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(double) * (size_t)(x->n_runs[a] + 1), "experiment column");
    if (!col[a]) {
      il_mem_free(col[0]);
      return IL_ERR_OOM;
    }
    for (int r = 0; r < x->n_runs[a]; r++) {
      double v = x->v[a][(size_t)r * IL_EXP_MAX_METRICS + (size_t)m];
      if (isfinite(v)) col[a][n[a]++] = v;
    }
  }
  il_status st = il_stats_summarize(col[0], n[0], &out->a);
  if (st == IL_OK) st = il_stats_summarize(col[1], n[1], &out->b);
  if (st == IL_OK) st = il_stats_ratio_ci(col[0], n[0], col[1], n[1], x->level, x->n_boot, x->seed, &out->ratio);
  il_mem_free(col[0]);
  il_mem_free(col[1]);
  if (st != IL_OK) return st;
  if (n[0] < IL_EXP_MIN_RUNS || n[1] < IL_EXP_MIN_RUNS) out->verdict = n[0] && n[1] ? "too few runs" : "n/a";
  else if (isnan(out->ratio.ratio) || isnan(out->ratio.lo)) out->verdict = "n/a";
  else if (!out->ratio.significant) out->verdict = "no significant change";
  else if (fabs(out->ratio.ratio - 1) < out->min_effect) out->verdict = "same";
  else if (out->metric->better == 0) out->verdict = "changed";
  else out->verdict = (out->ratio.ratio > 1) == (out->metric->better > 0) ? "better" : "worse";
  return IL_OK;
}

/* ---- evidence folder ---------------------------------------------------------------------- */

static il_status il__mkdirs(const char *path) {
  char buf[2048];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return il_error(IL_ERR_OUTPUT, "%s: cannot create the directory: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST)
    return il_error(IL_ERR_OUTPUT, "%s: cannot create the directory: %s", buf, strerror(errno));
  return IL_OK;
}

static FILE *il__open_in(const il_experiment *x, const char *name, il_status *st) {
  char path[2300];
  snprintf(path, sizeof path, "%s/%s", x->dir, name);
  FILE *f = fopen(path, "w");
  if (!f) *st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
  return f;
}

/* "batch-8", "threads-4+batch-8", "cmd-off-on": the folder name after the stamp */
static void il__change_slug(const il_experiment *x, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  if (x->is_cmd) snprintf(buf, n, "cmd-%.40s-%.40s", x->value_a, x->value_b);
  for (int i = 0; !x->is_cmd && i < x->n_changes && used < n; i++) {
    int w = snprintf(buf + used, n - used, "%s%s-%s", i ? "+" : "", x->changes[i].name, x->changes[i].value);
    if (w > 0) used += (size_t)w;
  }
  for (char *p = buf; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '+' ||
          *p == '.' || *p == '_'))
      *p = '_';
  if (strlen(buf) > 60) buf[60] = 0;
}

static il_status il__write_conf(const il_experiment *x, const char *name, const il_sweep_point *p, const char *arm) {
  il_status st = IL_OK;
  FILE *f = il__open_in(x, name, &st);
  if (!f) return st;
  fprintf(f, "# inferlab experiment %s: the complete engine configuration of this arm.\n", arm);
  fprintf(f, "# Reproduce or roll back with: inferlab bench --config %s/%s --prompt %d\n", x->dir, name, p->prompt);
  fprintf(f, "# workload: prompt = %d tokens per sequence (bench --prompt), batch = n-seq, gen = n-predict\n",
          p->prompt);
  il_config_write(&p->cfg, NULL, f);
  fprintf(f, "n-predict = %d\n", p->gen); /* the one request option a measurement uses */
  if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s/%s: write failed", x->dir, name);
  return IL_OK;
}

il_status il_experiment_prepare_dir(il_experiment *x, const char *out_parent) {
  char stamp[32], slug[96];
  il_env_stamp(stamp, sizeof stamp);
  il__change_slug(x, slug, sizeof slug);
  const char *parent = out_parent && *out_parent ? out_parent : "runs";
  size_t pl = strlen(parent);
  while (pl > 1 && parent[pl - 1] == '/') pl--;
  snprintf(x->dir, sizeof x->dir, "%.*s/%s-%s", (int)pl, parent, stamp, slug);
  /* two experiments in the same second get distinct folders */
  struct stat sb;
  for (int k = 2; stat(x->dir, &sb) == 0 && k < 100; k++)
    snprintf(x->dir, sizeof x->dir, "%.*s/%s-%s-%d", (int)pl, parent, stamp, slug, k);
  IL_TRY(il__mkdirs(x->dir));
  il_status st = IL_OK;
  /* environment snapshot */
  FILE *f = il__open_in(x, "env.json", &st);
  if (!f) return st;
  if (il_env_doctor_json(f, x->environ_list) != IL_OK) {
    /* doctor could not run: keep the short description so the folder is still complete */
    char reason[300];
    snprintf(reason, sizeof reason, "%s", il_error_detail());
    fclose(f);
    f = il__open_in(x, "env.json", &st); /* start the file again */
    if (!f) return st;
    il_env e;
    il_env_collect(&e, x->watch.nvml_lib ? x->watch.nvml_lib : x->bench.nvml_lib, x->bench.no_gpu);
    il_jsonw w;
    il_jsonw_init(&w, f, true);
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "doctor_error", reason);
    il_jsonw_key(&w, "environment");
    il_env_json(&e, &w);
    il_jsonw_obj_end(&w);
    if (il_jsonw_finish(&w) != IL_OK) {
      fclose(f);
      return il_error(IL_ERR_OUTPUT, "%s/env.json: write failed", x->dir);
    }
  }
  if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s/env.json: write failed", x->dir);
  if (x->is_cmd) {
    const char *names[2] = {"baseline.cmd", "variant.cmd"};
    const char *cmds[2] = {x->cmd_a, x->cmd_b};
    for (int a = 0; a < 2; a++) {
      f = il__open_in(x, names[a], &st);
      if (!f) return st;
      fprintf(f, "%s\n", cmds[a]);
      fclose(f);
    }
    char logs[2300];
    snprintf(logs, sizeof logs, "%s/logs", x->dir);
    IL_TRY(il__mkdirs(logs));
  } else {
    IL_TRY(il__write_conf(x, "baseline.conf", &x->baseline, "baseline"));
    IL_TRY(il__write_conf(x, "variant.conf", &x->variant, "variant"));
  }
  f = il__open_in(x, "command.txt", &st);
  if (!f) return st;
  fprintf(f, "%s\n", x->command_line ? x->command_line : "");
  fclose(f);
  x->samples = il__open_in(x, "samples.jsonl", &st);
  return x->samples ? IL_OK : st;
}

static void il__fmt(const il_bench_metric_info *mi, double v, char *buf, size_t n) {
  if (!isfinite(v)) {
    snprintf(buf, n, "-");
    return;
  }
  if (!strcmp(mi->unit, "s")) snprintf(buf, n, "%.3f ms", v * 1e3);
  else if (!strcmp(mi->unit, "bytes")) snprintf(buf, n, "%.1f MiB", v / (1024.0 * 1024.0));
  else if (!strcmp(mi->unit, "fraction")) snprintf(buf, n, "%.1f%%", v * 100);
  else if (fabs(v) >= 1000) snprintf(buf, n, "%.0f %s", v, mi->unit); /* 13140 tok/s, not 1.314e+04 */
  else snprintf(buf, n, "%.4g %s", v, mi->unit);
}

static void il__summary_text(il_experiment *x, const il_experiment_effect *eff, FILE *f) {
  if (x->is_cmd) {
    fprintf(f, "experiment: command '%s' with {} = %s (baseline) vs %s (variant)\n", x->cmd, x->value_a, x->value_b);
  } else {
    fprintf(f, "experiment: ");
    for (int i = 0; i < x->n_changes; i++) {
      char before[IL_CONFIG_STR_MAX];
      il_sweep_get(&x->baseline, x->changes[i].name, before, sizeof before);
      char ran_as[IL_CONFIG_STR_MAX];
      il__effective(&x->baseline, x->changes[i].name, ran_as, sizeof ran_as);
      /* a default that stands for something (threads 0, isa "") with what it ran as */
      if (strcmp(ran_as, before))
        fprintf(f, "%s%s %s (%s here) -> %s", i ? ", " : "", x->changes[i].name, *before ? before : "\"\"", ran_as,
                x->changes[i].value);
      else fprintf(f, "%s%s %s -> %s", i ? ", " : "", x->changes[i].name, before, x->changes[i].value);
    }
    fprintf(f, "\nworkload:   %s, batch %d, prompt %d, gen %d, threads %d\n", x->baseline.cfg.model,
            x->baseline.cfg.n_seq, x->baseline.prompt, x->baseline.gen, x->steps[0].threads);
  }
  fprintf(f, "runs:       %d per arm, interleaved A B B A ...; %d warm-up per run; failures: baseline %d, variant %d\n",
          x->repeat, x->is_cmd ? 0 : x->bench.warmup, x->failures[0], x->failures[1]);
  if (x->interrupted)
    fprintf(f, "            interrupted (Ctrl-C) after %d of %d runs: baseline %d, variant %d; the figures are of those\n",
            x->n_runs[0] + x->n_runs[1], 2 * x->repeat, x->n_runs[0], x->n_runs[1]);
  for (int a = 0; a < 2; a++)
    if (x->failures[a])
      fprintf(f, "            %s failed %d of %d runs (not counted as samples); first: %s\n", a ? "variant" : "baseline",
              x->failures[a], x->n_runs[a], x->first_error[a]);
  int ok_runs[2];
  for (int a = 0; a < 2; a++) ok_runs[a] = x->n_runs[a] - x->failures[a];
  if (ok_runs[0] < IL_EXP_MIN_RUNS || ok_runs[1] < IL_EXP_MIN_RUNS)
    fprintf(f, "            too few runs for a verdict: a bootstrap interval needs at least %d successful runs per arm "
               "(baseline %d, variant %d); raise --repeat\n",
            IL_EXP_MIN_RUNS, ok_runs[0], ok_runs[1]);
  fprintf(f, "ratios:     variant / baseline of the means, %.0f%% bootstrap interval (%d resamples, seed %llu)\n\n",
          x->level * 100, x->n_boot, (unsigned long long)x->seed);
  fprintf(f, "%-36s %14s %14s %8s %20s  %s\n", "metric", "baseline", "variant", "ratio", "interval", "verdict");
  int n_same = 0;
  for (int m = 0; m < x->n_metrics; m++) {
    const il_experiment_effect *e = &eff[m];
    if (e->a.n == 0 && e->b.n == 0) continue;
    char a[32], b[32], ci[48], ratio[24];
    il__fmt(e->metric, e->a.mean, a, sizeof a);
    il__fmt(e->metric, e->b.mean, b, sizeof b);
    if (isfinite(e->ratio.ratio)) snprintf(ratio, sizeof ratio, "x%.3f", e->ratio.ratio);
    else snprintf(ratio, sizeof ratio, "-");
    if (isfinite(e->ratio.lo) && strcmp(e->verdict, "too few runs"))
      snprintf(ci, sizeof ci, "[%.3f, %.3f]", e->ratio.lo, e->ratio.hi);
    else snprintf(ci, sizeof ci, "-");
    fprintf(f, "%-36s %14s %14s %8s %20s  %s\n", e->metric->label, a, b, ratio, ci, e->verdict);
    if (!strcmp(e->verdict, "same")) n_same++;
  }
  if (n_same) {
    if (x->min_effect >= 0)
      fprintf(f, "\nsame:       beyond the noise but under the minimum effect of %g%% (--min-effect)\n", x->min_effect * 100);
    else
      fprintf(f, "\nsame:       beyond the noise but under the minimum effect (%g%% for memory; set with --min-effect PCT)\n",
              IL_EXP_MIN_EFFECT_MEM * 100);
  }
  if (*x->dir) {
    fprintf(f, "\nevidence:   %s/\n", x->dir);
    if (x->is_cmd) fprintf(f, "rollback:   sh -c \"$(cat %s/baseline.cmd)\"\n", x->dir);
    else fprintf(f, "rollback:   inferlab bench --config %s/baseline.conf --prompt %d\n", x->dir, x->baseline.prompt);
  }
}

il_status il_experiment_write_summary(il_experiment *x, FILE *show) {
  il_experiment_effect eff[IL_EXP_MAX_METRICS];
  for (int m = 0; m < x->n_metrics; m++) IL_TRY(il_experiment_effect_of(x, m, &eff[m]));
  if (show) il__summary_text(x, eff, show);
  if (!*x->dir) return IL_OK;
  il_status st = IL_OK;
  FILE *f = il__open_in(x, "summary.txt", &st);
  if (!f) return st;
  il__summary_text(x, eff, f);
  fclose(f);
  f = il__open_in(x, "summary.json", &st);
  if (!f) return st;
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "schema_version", 1);
  il_jsonw_kstr(&w, "tool", "inferlab experiment");
  il_jsonw_kstr(&w, "mode", x->is_cmd ? "command" : "engine");
  il_jsonw_key(&w, "changes");
  il_jsonw_arr(&w);
  for (int i = 0; i < x->n_changes; i++) {
    char before[IL_CONFIG_STR_MAX];
    il_sweep_get(&x->baseline, x->changes[i].name, before, sizeof before);
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "name", x->changes[i].name);
    il_jsonw_kstr(&w, "key", il_sweep_key(x->changes[i].name));
    il_jsonw_kstr(&w, "baseline", before);
    il_jsonw_kstr(&w, "variant", x->changes[i].value);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  if (x->is_cmd) {
    il_jsonw_kstr(&w, "command_template", x->cmd);
    il_jsonw_kstr(&w, "baseline_command", x->cmd_a);
    il_jsonw_kstr(&w, "variant_command", x->cmd_b);
  } else {
    il_jsonw_key(&w, "baseline_config");
    il_report_json_config(&x->baseline, &w);
    il_jsonw_key(&w, "variant_config");
    il_report_json_config(&x->variant, &w);
  }
  il_jsonw_kint(&w, "repeat", x->repeat);
  il_jsonw_kbool(&w, "interrupted", x->interrupted);
  il_jsonw_key(&w, "runs_done");
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "baseline", x->n_runs[0]);
  il_jsonw_kint(&w, "variant", x->n_runs[1]);
  il_jsonw_obj_end(&w);
  il_jsonw_kstr(&w, "order", "ABBA");
  il_jsonw_kint(&w, "warmup_per_run", x->is_cmd ? 0 : x->bench.warmup);
  il_jsonw_key(&w, "failures");
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "baseline", x->failures[0]);
  il_jsonw_kint(&w, "variant", x->failures[1]);
  il_jsonw_obj_end(&w);
  il_jsonw_knum(&w, "level", x->level);
  il_jsonw_kint(&w, "bootstrap_resamples", x->n_boot);
  il_jsonw_kint(&w, "bootstrap_seed", (long long)x->seed);
  il_jsonw_key(&w, "metrics");
  il_jsonw_arr(&w);
  for (int m = 0; m < x->n_metrics; m++) {
    const il_experiment_effect *e = &eff[m];
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "key", e->metric->key);
    il_jsonw_kstr(&w, "label", e->metric->label);
    il_jsonw_kstr(&w, "unit", e->metric->unit);
    il_jsonw_kint(&w, "better", e->metric->better);
    const il_stats_summary *s2[2] = {&e->a, &e->b};
    const char *names[2] = {"baseline", "variant"};
    for (int a = 0; a < 2; a++) {
      il_jsonw_key(&w, names[a]);
      il_jsonw_obj(&w);
      il_jsonw_kint(&w, "n", s2[a]->n);
      il_jsonw_knum(&w, "mean", s2[a]->mean);
      il_jsonw_knum(&w, "stddev", s2[a]->stddev);
      il_jsonw_knum(&w, "p50", s2[a]->p50);
      il_jsonw_knum(&w, "p90", s2[a]->p90);
      il_jsonw_knum(&w, "p99", s2[a]->p99);
      il_jsonw_obj_end(&w);
    }
    il_jsonw_knum(&w, "ratio", e->ratio.ratio);
    il_jsonw_knum(&w, "ci_low", e->ratio.lo);
    il_jsonw_knum(&w, "ci_high", e->ratio.hi);
    il_jsonw_kbool(&w, "significant", e->ratio.significant);
    il_jsonw_knum(&w, "min_effect", e->min_effect);
    il_jsonw_kstr(&w, "verdict", e->verdict);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_obj_end(&w);
  st = il_jsonw_finish(&w);
  if (fclose(f) != 0 && st == IL_OK) st = il_error(IL_ERR_OUTPUT, "%s/summary.json: write failed", x->dir);
  return st;
}

il_status il_experiment_show(const char *dir, FILE *out) {
  char path[2300];
  snprintf(path, sizeof path, "%s/summary.txt", dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    /* a folder whose experiment never got to its summary (killed): say what it holds */
    snprintf(path, sizeof path, "%s/samples.jsonl", dir);
    FILE *s = fopen(path, "r");
    if (!s)
      return il_error(IL_ERR_NOT_FOUND, "%s: not an experiment folder (no summary.txt, no samples.jsonl: %s)", dir,
                      strerror(errno));
    int lines = 0;
    for (int c; (c = fgetc(s)) != EOF;) lines += c == '\n';
    fclose(s);
    fprintf(out, "%s: the experiment did not finish (no summary.txt); samples.jsonl holds %d run%s\n", dir, lines,
            lines == 1 ? "" : "s");
  }
  char buf[4096];
  size_t n;
  while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, out);
  if (f) fclose(f);
  fprintf(out, "\nfiles in %s:", dir);
  const char *files[] = {"env.json", "baseline.conf", "variant.conf", "baseline.cmd", "variant.cmd", "samples.jsonl",
                         "summary.json", "command.txt"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (access(path, R_OK) == 0) fprintf(out, " %s", files[i]);
  }
  fprintf(out, "\n");
  return IL_OK;
}
