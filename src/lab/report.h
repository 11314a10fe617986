/* lab/report: how bench results are written: a table for people (like llama-bench's
 * markdown table), one JSON document with every raw sample, CSV with one row per
 * combination, JSON Lines with one line per repetition, and a self-contained HTML page with
 * inline SVG charts.
 *
 * All writers take the same il_report: the sweep (axis names and values), the results in
 * sweep order, the options, the environment and the command line. The JSON document's
 * schema (IL_REPORT_BENCH_SCHEMA, documented in docs/bench.md) only grows within a version.
 * The HTML is well-formed XHTML (every tag closed, text escaped, no entities but the five of
 * XML) so any XML parser reads it, and it references nothing outside itself.
 * Files: report_table.c, report_json.c (JSON and JSONL), report_csv.c, report_html.c.
 * Not for: measuring (lab/bench).
 */
#ifndef IL_LAB_REPORT_H
#define IL_LAB_REPORT_H

#include <stdio.h>

#include "core/status.h"
#include "lab/bench.h"
#include "lab/env.h"
#include "core/jsonw.h"
#include "lab/sweep.h"

#define IL_REPORT_BENCH_SCHEMA 1

typedef struct {
  const il_sweep *sweep;
  const il_bench_result *results; /* [n_results], in sweep order */
  int n_results;
  const il_bench_options *opt;
  const il_env *env;
  const char *command;            /* the command line, for the record */
} il_report;

/* The metrics the HTML report charts against the swept option, one <svg> each, in order;
 * then come two more charts: "latency-percentiles" and "memory". */
extern const il_bench_metric il_report_chart_metrics[];
extern const int il_report_n_chart_metrics;

/* Human table with a header naming model, environment and roofline, then per-combination
 * memory by category and the GPU view. IL_ERR_IO when writing fails. */
il_status il_report_table_write(const il_report *r, FILE *f);
/* The same table in three parts, so rows can be printed as each combination finishes:
 * begin (environment and column header; needs r->env, r->opt, r->sweep), one row per result
 * i (flushed), end (model line, percentiles, memory, notes; over r->n_results results). */
void il_report_table_begin(const il_report *r, FILE *f);
void il_report_table_row(const il_report *r, int i, FILE *f);
il_status il_report_table_end(const il_report *r, FILE *f);
/* The JSON document. IL_ERR_IO. */
il_status il_report_json_write(const il_report *r, FILE *f);
/* One line per repetition: {"label", the axis values, "rep", every metric, memory}. `arm`
 * (may be NULL) adds "arm": arm, as experiment's raw samples do. IL_ERR_IO. */
il_status il_report_jsonl_write(const il_report *r, const char *arm, FILE *f);
/* One JSON line for sample i of res (used by experiment for each run as it finishes). */
void il_report_jsonl_sample(const il_bench_result *res, int i, const char *arm, int run, FILE *f);
/* A header row and one row per combination. IL_ERR_IO. */
il_status il_report_csv_write(const il_report *r, FILE *f);
/* The HTML page. IL_ERR_IO. */
il_status il_report_html_write(const il_report *r, FILE *f);

/* Shared by the writers: the summary of metric m as "12.3 ± 0.4" in the metric's display
 * unit (ms for seconds, MiB for bytes, % for fractions). */
void il_report_format_metric(const il_stats_summary *s, il_bench_metric m, bool with_sd, char *buf, size_t n);
/* Display scale and unit of a metric: seconds -> (1e3, "ms"), bytes -> (1/2^20, "MiB"),
 * fractions -> (100, "%"), else (1, unit). */
double il_report_display_scale(il_bench_metric m, const char **unit);
/* Writes the config of a point as a JSON object of every engine option plus "prompt". */
void il_report_json_config(const il_sweep_point *p, il_jsonw *w);

#endif
