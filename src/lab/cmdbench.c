/* lab/cmdbench: a foreign command run and timed N times (cmdbench.h). */
#include "lab/cmdbench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/jsonw.h"
#include "lab/stats.h"
#include "memory/mem.h"

static const struct {
  const char *key, *label;
  bool bytes;
} il__metric[IL_CMDB_N] = {
    {"wall_seconds", "wall time", false},
    {"first_output_seconds", "first output", false},
    {"rss_90_seconds", "RSS at 90% of its growth", false},
    {"gpu_memory_90_seconds", "GPU memory at 90% of its growth", false},
    {"peak_rss_bytes", "peak RSS", true},
    {"cpu_seconds", "CPU time (user + sys)", false},
};

/* One run's figures from watch's result. */
static il_cmdbench_sample il__sample(const il_watch_result *r) {
  const il_usage_result *u = &r->usage;
  il_cmdbench_sample s = {.exit_code = il_watch_exit_code(r)};
  s.v[IL_CMDB_WALL] = r->seconds;
  s.v[IL_CMDB_FIRST_OUTPUT] = u->first_output_s >= 0 ? u->first_output_s : NAN;
  s.v[IL_CMDB_RSS90] = u->rss_t90 >= 0 ? u->rss_t90 : NAN;
  s.v[IL_CMDB_GPU90] = u->gpu_t90 >= 0 ? u->gpu_t90 : NAN;
  s.v[IL_CMDB_PEAK_RSS] = r->peak_rss > 0 ? (double)r->peak_rss : NAN;
  s.v[IL_CMDB_CPU] = r->user_s + r->sys_s;
  return s;
}

il_status il_cmdbench_run(const char *cmd, int reps, int warmup, const il_watch_options *wo,
                          volatile sig_atomic_t *stop, il_cmdbench_progress_fn progress, void *ud, il_cmdbench *out) {
  memset(out, 0, sizeof *out);
  if (!cmd || !*cmd) return il_error(IL_ERR_INVALID_ARG, "bench --cmd: the command is empty");
  if (strlen(cmd) >= sizeof out->command)
    return il_error(IL_ERR_INVALID_ARG, "bench --cmd: the command is %zu bytes; at most %zu", strlen(cmd),
                    sizeof out->command - 1);
  if (reps < 1 || reps > IL_CMDBENCH_MAX_RUNS)
    return il_error(IL_ERR_INVALID_ARG, "bench --cmd: -r %d: 1 to %d runs", reps, IL_CMDBENCH_MAX_RUNS);
  if (warmup < 0) warmup = 0;
  snprintf(out->command, sizeof out->command, "%s", cmd);
  out->reps = reps, out->warmup = warmup;
  out->interval_ms = wo && wo->interval_ms > 0 ? wo->interval_ms : 200;
  out->first_failure_run = -1;
  out->runs = il_mem_calloc(IL_MEM_OTHER, sizeof *out->runs * (size_t)reps, "bench --cmd runs");
  if (!out->runs) return IL_ERR_OOM;
  const char *tmp = getenv("TMPDIR");
  char log[1024];
  snprintf(log, sizeof log, "%s/inferlab-bench-cmd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  const int fd = mkstemp(log);
  if (fd < 0) return il_error(IL_ERR_IO, "bench --cmd: cannot make a temporary file for the command's output in %s", log);
  close(fd);
  il_watch_options o = wo ? *wo : (il_watch_options){0};
  o.log_path = log;
  o.progress = NULL;
  il_status st = IL_OK;
  for (int i = -warmup; i < reps && st == IL_OK; i++) {
    if (stop && *stop) {
      out->interrupted = true;
      break;
    }
    if (progress) progress(ud, i < 0 ? -1 : i, reps);
    char *argv[] = {"/bin/sh", "-c", out->command, NULL};
    il_watch_result r;
    st = il_watch_run(&o, argv, &r);
    if (st != IL_OK) break;
    if (i == -warmup || i == 0) {
      out->gpu_available = r.usage.gpu_available;
      snprintf(out->gpu_reason, sizeof out->gpu_reason, "%s", r.usage.gpu_reason);
    }
    /* Ctrl-C reached the command too (killed by it, or a shell's 130): not a sample, the end */
    if ((stop && *stop) || il_watch_exit_code(&r) == 130) {
      out->interrupted = true;
      break;
    }
    if (i < 0) continue;
    out->runs[out->n++] = il__sample(&r);
    if (out->runs[out->n - 1].exit_code != 0 && out->failures++ == 0) {
      out->first_failure_code = out->runs[out->n - 1].exit_code;
      out->first_failure_run = i;
    }
  }
  unlink(log);
  return st;
}

void il_cmdbench_free(il_cmdbench *b) {
  il_mem_free(b->runs);
  b->runs = NULL;
}

/* Metric m over the runs that exited 0 and saw it. */
static il_status il__summary(const il_cmdbench *b, int m, il_stats_summary *s) {
  double v[IL_CMDBENCH_MAX_RUNS];
  int n = 0;
  for (int i = 0; i < b->n; i++)
    if (b->runs[i].exit_code == 0 && !isnan(b->runs[i].v[m])) v[n++] = b->runs[i].v[m];
  return il_stats_summarize(v, n, s);
}

static void il__fmt(double v, bool bytes, char *buf, size_t n) {
  if (isnan(v)) snprintf(buf, n, "-");
  else if (bytes) il_mem_format_bytes((size_t)v, buf, n);
  else snprintf(buf, n, "%.3f s", v);
}

void il_cmdbench_print(const il_cmdbench *b, FILE *f) {
  fprintf(f, "command: %s\n", b->command);
  fprintf(f, "runs: %d timed (%d warm-up first)%s, %d failed%s; its output went to a temporary file\n", b->n, b->warmup,
          b->interrupted ? ", stopped by Ctrl-C" : "", b->failures, b->failures ? " (not samples)" : "");
  if (b->failures)
    fprintf(f, "  first failure: run %d exited with %d\n", b->first_failure_run + 1, b->first_failure_code);
  fprintf(f, "\n%-34s %12s %12s %12s %6s\n", "metric", "min", "median", "max", "runs");
  for (int m = 0; m < IL_CMDB_N; m++) {
    il_stats_summary s;
    if (il__summary(b, m, &s) != IL_OK) continue;
    char lo[32], mid[32], hi[32];
    il__fmt(s.min, il__metric[m].bytes, lo, sizeof lo);
    il__fmt(s.p50, il__metric[m].bytes, mid, sizeof mid);
    il__fmt(s.max, il__metric[m].bytes, hi, sizeof hi);
    fprintf(f, "%-34s %12s %12s %12s %6d\n", il__metric[m].label, lo, mid, hi, s.n);
  }
  fprintf(f, "\nseconds since the command started; all but the wall time are seen in samples every %d ms\n",
          b->interval_ms);
  if (!b->gpu_available) fprintf(f, "GPU memory: not sampled (%s)\n", b->gpu_reason);
}

il_status il_cmdbench_json(const il_cmdbench *b, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "schema_version", 1);
  il_jsonw_kstr(&w, "command", b->command);
  il_jsonw_kint(&w, "repetitions", b->reps);
  il_jsonw_kint(&w, "warmup", b->warmup);
  il_jsonw_kint(&w, "interval_ms", b->interval_ms);
  il_jsonw_kbool(&w, "interrupted", b->interrupted);
  il_jsonw_kint(&w, "failures", b->failures);
  il_jsonw_kstr(&w, "gpu_reason", b->gpu_available ? NULL : b->gpu_reason);
  il_jsonw_key(&w, "runs");
  il_jsonw_arr(&w);
  for (int i = 0; i < b->n; i++) {
    il_jsonw_obj(&w);
    il_jsonw_kint(&w, "exit_code", b->runs[i].exit_code);
    for (int m = 0; m < IL_CMDB_N; m++) il_jsonw_knum(&w, il__metric[m].key, b->runs[i].v[m]);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_key(&w, "summary");
  il_jsonw_obj(&w);
  for (int m = 0; m < IL_CMDB_N; m++) {
    il_stats_summary s;
    if (il__summary(b, m, &s) != IL_OK) continue;
    il_jsonw_key(&w, il__metric[m].key);
    il_jsonw_obj(&w);
    il_jsonw_kint(&w, "n", s.n);
    il_jsonw_knum(&w, "min", s.min);
    il_jsonw_knum(&w, "median", s.p50);
    il_jsonw_knum(&w, "max", s.max);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_obj_end(&w);
  il_jsonw_obj_end(&w);
  fputc('\n', f);
  return ferror(f) ? il_error(IL_ERR_IO, "bench --cmd: the JSON could not be written") : IL_OK;
}
