/* lab/report_table: the bench table for people, and helpers the other writers share. */
#include <math.h>
#include <string.h>

#include "lab/report.h"

const il_bench_metric il_report_chart_metrics[] = {IL_BM_GEN_TPS, IL_BM_PROMPT_TPS, IL_BM_TTFT_S, IL_BM_TPOT_S,
                                                   IL_BM_E2E_S,   IL_BM_REQ_S,      IL_BM_CPU_UTIL, IL_BM_GEN_ROOF};
const int il_report_n_chart_metrics = (int)(sizeof il_report_chart_metrics / sizeof il_report_chart_metrics[0]);

double il_report_display_scale(il_bench_metric m, const char **unit) {
  const char *u = il_bench_metric_info_of(m)->unit;
  if (!strcmp(u, "s")) {
    *unit = "ms";
    return 1e3;
  }
  if (!strcmp(u, "bytes")) {
    *unit = "MiB";
    return 1.0 / (1024.0 * 1024.0);
  }
  if (!strcmp(u, "fraction")) {
    *unit = "%";
    return 100;
  }
  *unit = u;
  return 1;
}

void il_report_format_metric(const il_stats_summary *s, il_bench_metric m, bool with_sd, char *buf, size_t n) {
  if (s->n == 0 || isnan(s->mean)) {
    snprintf(buf, n, "-");
    return;
  }
  const char *unit;
  double k = il_report_display_scale(m, &unit);
  double v = s->mean * k, sd = s->stddev * k;
  int prec = fabs(v) >= 100 ? 1 : fabs(v) >= 1 ? 2 : 3;
  /* no "± 0.00": one measurement, a value measured once per combination and repeated in every
   * sample (load time), or a spread below the printed precision has no spread to show */
  char sdt[32];
  snprintf(sdt, sizeof sdt, "%.*f", prec, sd);
  /* judged on the printed digits: 0.005 may print as "0.00" or "0.01" */
  const bool shows = strspn(sdt, "0.") != strlen(sdt);
  if (with_sd && s->n > 1 && shows) snprintf(buf, n, "%.*f ± %s", prec, v, sdt);
  else snprintf(buf, n, "%.*f", prec, v);
}

/* The axes that get their own column: batch, prompt, gen, threads always; others when swept. */
static bool il__is_fixed_col(const char *name) {
  return !strcmp(name, "batch") || !strcmp(name, "prompt") || !strcmp(name, "gen") || !strcmp(name, "threads");
}

static const il_bench_metric il__table_metrics[] = {
    IL_BM_TTFT_S, IL_BM_TPOT_S,   IL_BM_E2E_S,    IL_BM_PROMPT_TPS, IL_BM_GEN_TPS,
    IL_BM_GEN_TPS_SEQ, IL_BM_REQ_S, IL_BM_CPU_UTIL, IL_BM_GEN_ROOF,  IL_BM_PROMPT_PEAK};

static const char *il__short_label(il_bench_metric m) {
  switch (m) {
    case IL_BM_TTFT_S: return "TTFT ms";
    case IL_BM_TPOT_S: return "TPOT ms";
    case IL_BM_E2E_S: return "e2e ms";
    case IL_BM_PROMPT_TPS: return "prompt t/s";
    case IL_BM_GEN_TPS: return "gen t/s";
    case IL_BM_GEN_TPS_SEQ: return "gen t/s/seq";
    case IL_BM_REQ_S: return "req/s";
    case IL_BM_CPU_UTIL: return "CPU %";
    case IL_BM_GEN_ROOF: return "gen roof %";
    case IL_BM_PROMPT_PEAK: return "prompt peak %";
    default: return il_bench_metric_info_of(m)->key;
  }
}

/* The environment lines and the column header: everything known before the first result. */
void il_report_table_begin(const il_report *r, FILE *f) {
  if (r->env)
    fprintf(f, "env:   %s; %d CPUs; kernels %s (detected %s); %s build; %s\n", *r->env->cpu ? r->env->cpu : "unknown CPU",
            r->env->logical_cpus, r->env->isa_used, r->env->isa_detected, r->env->build, r->env->gpu);
  if (r->opt) {
    fprintf(f, "run:   %d repetition%s after %d warm-up; mean ± stddev; ", r->opt->reps, r->opt->reps == 1 ? "" : "s",
            r->opt->warmup);
    if (r->opt->roofline_gbps > 0) fprintf(f, "roofline: %.1f GB/s measured read bandwidth\n", r->opt->roofline_gbps);
    else fprintf(f, "roofline: not measured\n");
  }
  fprintf(f, "\n");
  const char *fixed[] = {"batch", "prompt", "gen", "threads"};
  fprintf(f, "|");
  for (int c = 0; c < 4; c++) fprintf(f, " %s |", fixed[c]);
  for (int a2 = 0; r->sweep && a2 < r->sweep->n_axes; a2++)
    if (!il__is_fixed_col(r->sweep->axes[a2].name) && r->sweep->axes[a2].n > 1) fprintf(f, " %s |", r->sweep->axes[a2].name);
  int nm = (int)(sizeof il__table_metrics / sizeof il__table_metrics[0]);
  for (int m = 0; m < nm; m++) fprintf(f, " %s |", il__short_label(il__table_metrics[m]));
  const bool spec = r->opt && r->opt->draft_model;
  if (spec) fprintf(f, " draft | accept %% | tok/pass | speed-up |");
  fprintf(f, "\n|");
  for (int c = 0; c < 4; c++) fprintf(f, " ---: |");
  for (int a2 = 0; r->sweep && a2 < r->sweep->n_axes; a2++)
    if (!il__is_fixed_col(r->sweep->axes[a2].name) && r->sweep->axes[a2].n > 1) fprintf(f, " --- |");
  for (int m = 0; m < nm; m++) fprintf(f, " ---: |");
  if (spec) fprintf(f, " ---: | ---: | ---: | ---: |");
  fprintf(f, "\n");
  fflush(f);
}

/* One combination's row, written (and flushed) as soon as it is measured. */
void il_report_table_row(const il_report *r, int i, FILE *f) {
  int nm = (int)(sizeof il__table_metrics / sizeof il__table_metrics[0]);
  const il_bench_result *res = &r->results[i];
  fprintf(f, "| %d | %d | %d | %d |", res->point.cfg.n_seq, res->point.prompt, res->point.gen,
          res->threads ? res->threads : res->point.cfg.threads);
  for (int a2 = 0; r->sweep && a2 < r->sweep->n_axes; a2++) {
    if (il__is_fixed_col(r->sweep->axes[a2].name) || r->sweep->axes[a2].n < 2) continue;
    char v[256];
    il_sweep_get(&res->point, r->sweep->axes[a2].name, v, sizeof v);
    fprintf(f, " %s |", v);
  }
  if (res->status != IL_OK) {
    /* one table row: the error's first line, without the cell separator; a longer report
     * (the OOM report's device, cause and fix lines) is on stderr and in --json whole */
    const char *e = res->error;
    size_t n = strcspn(e, "\n");
    fputs(" error: ", f);
    for (size_t k = 0; k < n; k++) fputc(e[k] == '|' ? '/' : e[k], f);
    fprintf(f, "%s |\n", e[n] ? " (the whole report is on stderr)" : "");
    fflush(f);
    return;
  }
  for (int m = 0; m < nm; m++) {
    char v[64];
    il_report_format_metric(&res->sum[il__table_metrics[m]], il__table_metrics[m], true, v, sizeof v);
    fprintf(f, " %s |", v);
  }
  if (res->spec) {
    /* the draft length (none: the row the speed-up is against), then the speculative figures */
    if (res->draft < 0) fprintf(f, " none |");
    else if (res->draft == 0) fprintf(f, " adaptive |");
    else fprintf(f, " %d |", res->draft);
    const il_bench_metric sm[] = {IL_BM_SPEC_ACCEPT, IL_BM_SPEC_TPP, IL_BM_SPEC_SPEEDUP};
    for (int m = 0; m < 3; m++) {
      char v[64];
      il_report_format_metric(&res->sum[sm[m]], sm[m], true, v, sizeof v);
      fprintf(f, " %s |", v);
    }
  }
  fprintf(f, "\n");
  fflush(f);
}

il_status il_report_table_write(const il_report *r, FILE *f) {
  il_report_table_begin(r, f);
  for (int i = 0; i < r->n_results; i++) il_report_table_row(r, i, f);
  return il_report_table_end(r, f);
}

/* Which roof each phase of a combination runs against: the larger of its fractions of the read
 * bandwidth and of the compute peak (when both were measured). */
static void il__limits(const il_bench_result *res, const char *lbl, FILE *f) {
  if (res->peak_gops <= 0) return;
  const struct {
    const char *phase;
    il_bench_metric roof, peak;
  } ph[2] = {{"prompt", IL_BM_PROMPT_ROOF, IL_BM_PROMPT_PEAK}, {"generation", IL_BM_GEN_ROOF, IL_BM_GEN_PEAK}};
  fprintf(f, "%s: compute peak %.0f GOPS (%s, %d thread%s)", lbl, res->peak_gops, res->peak_name, res->threads,
          res->threads == 1 ? "" : "s");
  for (int i = 0; i < 2; i++) {
    const double roof = res->sum[ph[i].roof].mean, peak = res->sum[ph[i].peak].mean;
    if (isnan(peak)) continue;
    if (isnan(roof)) fprintf(f, "; %s at %.0f%% of it", ph[i].phase, 100 * peak);
    else if (peak < 0.5 && roof < 0.5) /* neither limit is what holds it back */
      fprintf(f, "; %s below both limits (%.0f%% of the peak, %.0f%% of the read bandwidth: overheads, not a roof)",
              ph[i].phase, 100 * peak, 100 * roof);
    else
      fprintf(f, "; %s %s-bound (%.0f%% of the peak, %.0f%% of the read bandwidth)", ph[i].phase,
              peak >= roof ? "compute" : "bandwidth", 100 * peak, 100 * roof);
  }
  fprintf(f, "\n");
}

/* After the table: the model, percentiles and memory per combination, notes. */
il_status il_report_table_end(const il_report *r, FILE *f) {
  const il_bench_result *first = NULL;
  for (int i = 0; i < r->n_results && !first; i++)
    if (r->results[i].status == IL_OK) first = &r->results[i];
  char a[32], b[32];
  fprintf(f, "\n");
  int ctx_lo = first ? first->n_ctx : 0, ctx_hi = ctx_lo;
  for (int i = 0; i < r->n_results; i++)
    if (r->results[i].status == IL_OK) {
      if (r->results[i].n_ctx < ctx_lo) ctx_lo = r->results[i].n_ctx;
      if (r->results[i].n_ctx > ctx_hi) ctx_hi = r->results[i].n_ctx;
    }
  if (first && ctx_lo == ctx_hi)
    fprintf(f, "model: %s (%s, %.1fM params, %s weights), ctx %d\n", first->model, first->model_type,
            (double)first->n_params / 1e6, il_mem_format_bytes(first->weight_bytes, a, sizeof a), first->n_ctx);
  else if (first) /* each combination's own (prompt + gen unless --ctx is given) */
    fprintf(f, "model: %s (%s, %.1fM params, %s weights), ctx %d to %d by combination\n", first->model,
            first->model_type, (double)first->n_params / 1e6, il_mem_format_bytes(first->weight_bytes, a, sizeof a),
            ctx_lo, ctx_hi);
  /* latency percentiles and memory per combination */
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    if (res->status != IL_OK) continue;
    char lbl[300];
    snprintf(lbl, sizeof lbl, "%s", *res->label ? res->label : "all");
    if (res->tpot_steps.n)
      fprintf(f, "%s: TPOT p50 %.3f p90 %.3f p99 %.3f ms over %d steps; TTFT p50 %.3f p99 %.3f ms\n", lbl,
              res->tpot_steps.p50 * 1e3, res->tpot_steps.p90 * 1e3, res->tpot_steps.p99 * 1e3, res->tpot_steps.n,
              res->sum[IL_BM_TTFT_S].p50 * 1e3, res->sum[IL_BM_TTFT_S].p99 * 1e3);
    fprintf(f, "%s: peak memory", lbl);
    for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
      size_t peak = 0, mapped = 0;
      for (int s = 0; s < res->n_samples; s++) {
        if (res->samples[s].mem_peak[c] > peak) peak = res->samples[s].mem_peak[c];
        if (res->samples[s].mem_mapped[c] > mapped) mapped = res->samples[s].mem_mapped[c];
      }
      if (!peak && !mapped) continue;
      fprintf(f, " %s %s", il_mem_category_name((il_mem_category)c), il_mem_format_bytes(peak + mapped, a, sizeof a));
      if (mapped) fprintf(f, " (mapped)");
      fprintf(f, ",");
    }
    fprintf(f, " rss %s%s", il_mem_format_bytes((size_t)res->sum[IL_BM_PEAK_RSS].max, b, sizeof b),
            res->rss_resettable ? "" : " (process lifetime)");
    if (res->spec && res->draft >= 0) /* two models' passes: no one roof to quote against */
      fprintf(f, "; draft %s beside the model (no bandwidth or FLOP/s figures)\n", res->draft_name);
    else
      fprintf(f, "; gen %.2f GB/s, %.2f GFLOP/s; prompt %.2f GFLOP/s\n", res->sum[IL_BM_GEN_GBPS].mean,
              res->sum[IL_BM_GEN_GFLOPS].mean, res->sum[IL_BM_PROMPT_GFLOPS].mean);
    il__limits(res, lbl, f);
  }
  for (int i = 0; i < r->n_results; i++)
    if (r->results[i].status == IL_OK && r->results[i].sum[IL_BM_GEN_ROOF].mean > 1) {
      fprintf(f, "note: a roofline fraction above 100%% means the weights (%s) are served from the CPU caches,\n"
                 "      so the measured DRAM read bandwidth is not what limits this model\n",
              il_mem_format_bytes(r->results[i].bytes_per_pass, a, sizeof a));
      break;
    }
  if (first && first->has_usage) il_usage_print_gpu(&first->usage, f);
  if (ferror(f)) return il_error(IL_ERR_IO, "writing the bench table failed");
  return IL_OK;
}
