/* lab/report_csv: one row per combination. Columns: label, sweep_<name> per swept axis, model,
 * model_type, params, threads, batch, prompt, gen, n_ctx, reps, status, error, then for every
 * metric <key>_mean, <key>_stddev, <key>_p50, <key>_p90, <key>_p99 (raw units: seconds,
 * bytes, fractions), tpot_step_p50/p90/p99, and mem_<category>_peak_bytes (max over
 * repetitions, mapped bytes included). Fields are quoted per RFC 4180 when needed. */
#include <math.h>
#include <string.h>

#include "lab/report.h"

static void il__field(FILE *f, const char *s, bool first) {
  if (!first) fputc(',', f);
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void il__num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, ",%.9g", v);
  else fputc(',', f);
}

il_status il_report_csv_write(const il_report *r, FILE *f) {
  il__field(f, "label", true);
  for (int a = 0; r->sweep && a < r->sweep->n_axes; a++) {
    char name[64];
    snprintf(name, sizeof name, "sweep_%s", r->sweep->axes[a].name);
    il__field(f, name, false);
  }
  const char *fixed[] = {"model", "model_type", "params", "threads", "batch", "prompt", "gen", "n_ctx", "reps", "status", "error"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) il__field(f, fixed[i], false);
  const char *stat[] = {"mean", "stddev", "p50", "p90", "p99"};
  for (int m = 0; m < IL_BM_COUNT; m++)
    for (int s = 0; s < 5; s++) fprintf(f, ",%s_%s", il_bench_metric_info_of((il_bench_metric)m)->key, stat[s]);
  fprintf(f, ",tpot_step_p50,tpot_step_p90,tpot_step_p99");
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) fprintf(f, ",mem_%s_peak_bytes", il_mem_category_name((il_mem_category)c));
  fputc('\n', f);
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    il__field(f, res->label, true);
    for (int a = 0; r->sweep && a < r->sweep->n_axes; a++) {
      char v[IL_CONFIG_STR_MAX];
      il_sweep_get(&res->point, r->sweep->axes[a].name, v, sizeof v);
      il__field(f, v, false);
    }
    il__field(f, res->model, false);
    il__field(f, res->model_type, false);
    fprintf(f, ",%llu,%d,%d,%d,%d,%d,%d", (unsigned long long)res->n_params, res->threads, res->batch, res->prompt,
            res->gen, res->n_ctx, res->n_samples);
    il__field(f, res->status == IL_OK ? "ok" : il_status_name(res->status), false);
    il__field(f, res->status == IL_OK ? "" : res->error, false);
    for (int m = 0; m < IL_BM_COUNT; m++) {
      const il_stats_summary *s = &res->sum[m];
      il__num(f, s->mean);
      il__num(f, s->stddev);
      il__num(f, s->p50);
      il__num(f, s->p90);
      il__num(f, s->p99);
    }
    il__num(f, res->tpot_steps.p50);
    il__num(f, res->tpot_steps.p90);
    il__num(f, res->tpot_steps.p99);
    for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
      size_t peak = 0;
      for (int s = 0; s < res->n_samples; s++) {
        size_t v = res->samples[s].mem_peak[c] + res->samples[s].mem_mapped[c];
        if (v > peak) peak = v;
      }
      fprintf(f, ",%zu", peak);
    }
    fputc('\n', f);
  }
  if (ferror(f)) return il_error(IL_ERR_IO, "writing CSV failed");
  return IL_OK;
}
