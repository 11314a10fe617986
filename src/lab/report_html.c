/* lab/report_html: a single self-contained XHTML page with inline SVG charts.
 *
 * Charts, one <svg id="chart-KEY"> each: every metric of il_report_chart_metrics against the
 * swept option with the most values (one line per combination of the other swept options,
 * whiskers at ± one standard deviation; only when an option is swept: one point is not a
 * chart), "latency-percentiles" (p50/p90/p99 of the time per output token over every decode
 * step, per combination), "ttft-percentiles" (the same for the time to first token, on its own
 * axis) and "memory" (peak bytes per category as stacked bars per combination). The results
 * table scrolls inside its box and wraps its headers (units in them) so the page keeps its width. Colours, fonts and
 * layout are inline CSS; nothing is fetched, so the file can be mailed or archived.
 */
#include <math.h>
#include <string.h>

#include "lab/report.h"
#include "core/text.h"

#define IL__W 660
#define IL__H 330
#define IL__ML 72
#define IL__MR 16
#define IL__MT 34
#define IL__MB 86

static const char *const il__colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
#define IL__N_COLORS 10 /* one per memory category */
/* p50, p90, p99: the same three colours in every chart, light to dark */
static const char *const il__pct_colors[] = {"#9ecae1", "#4292c6", "#08306b"};
/* Width of one character of an x label (11px sans-serif), for fitting labels to their slot. */
#define IL__CHAR_W 6.5
#define IL__XLINES 3

static void il__esc(FILE *f, const char *s) { il_xml_escape(f, s, true); }

/* A "nice" axis maximum and tick step for values up to vmax. */
static double il__nice_step(double vmax, double *top) {
  if (!(vmax > 0) || !isfinite(vmax)) vmax = 1;
  double raw = vmax / 5, mag = pow(10, floor(log10(raw))), step;
  double r = raw / mag;
  step = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
  *top = ceil(vmax / step) * step;
  return step;
}

static void il__fmt_tick(char *buf, size_t n, double v) {
  if (v == 0) snprintf(buf, n, "0");
  else if (fabs(v) >= 1e4 || fabs(v) < 1e-3) snprintf(buf, n, "%.2g", v);
  else snprintf(buf, n, "%g", v);
}

/* Frame: svg open, title, y grid with ticks up to *top, axis label. Returns the y step. */
static void il__frame(FILE *f, const char *id, const char *title, const char *ylabel, double vmax, double *top) {
  double step = il__nice_step(vmax, top);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"chart-%s\" class=\"chart\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" role=\"img\">\n<title>",
          id, IL__W, IL__H, IL__W, IL__H);
  il__esc(f, title);
  fprintf(f, "</title>\n<text x=\"%d\" y=\"20\" class=\"ct\">", IL__W / 2);
  il__esc(f, title);
  fprintf(f, "</text>\n");
  int ph = IL__H - IL__MT - IL__MB;
  for (double v = 0; v <= *top * 1.0000001; v += step) {
    double y = IL__MT + ph - v / *top * ph;
    char t[32];
    il__fmt_tick(t, sizeof t, v);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>", IL__ML, y, IL__W - IL__MR, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%s</text>\n", IL__ML - 6, y + 4, t);
  }
  fprintf(f, "<text x=\"14\" y=\"%d\" class=\"yl\" transform=\"rotate(-90 14 %d)\">", IL__MT + ph / 2, IL__MT + ph / 2);
  il__esc(f, ylabel);
  fprintf(f, "</text>\n");
}

/* An x label centred at x in a slot `slot` px wide: split at spaces into lines that fit the slot
 * (at most IL__XLINES, the last cut with "..."), so neighbouring labels never overlap; the
 * whole label is the element's <title> (shown on hover). */
static void il__xlabel(FILE *f, double x, double slot, const char *text) {
  int fit = (int)(slot * 0.95 / IL__CHAR_W);
  if (fit < 3) fit = 3;
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xt\"><title>", x, IL__H - IL__MB + 16);
  il__esc(f, text);
  fputs("</title>", f);
  const char *p = text;
  for (int line = 0; *p && line < IL__XLINES; line++) {
    while (*p == ' ') p++;
    int n = (int)strlen(p);
    int take = n;
    if (n > fit) { /* break at the last space that fits, else cut the word */
      take = fit;
      for (int k = fit; k > 0; k--)
        if (p[k] == ' ') {
          take = k;
          break;
        }
    }
    const bool last = line == IL__XLINES - 1 && take < n;
    char buf[256];
    int w = take < (int)sizeof buf - 4 ? take : (int)sizeof buf - 4;
    if (last && w > 3) w = w - 3 > fit - 3 ? fit - 3 : w - 3;
    snprintf(buf, sizeof buf, "%.*s%s", w, p, last ? "..." : "");
    fprintf(f, "<tspan x=\"%.1f\" dy=\"%d\">", x, line ? 12 : 0);
    il__esc(f, buf);
    fputs("</tspan>", f);
    p += take;
  }
  fputs("</text>\n", f);
}

/* Legend entry i (its place) in colour `fill`. */
static void il__legend_fill(FILE *f, int i, const char *fill, const char *name) {
  int x = IL__ML + (i % 4) * 150, y = IL__H - 18 + (i / 4) * 12;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" class=\"lg\">", x,
          y - 9, fill, x + 14, y);
  il__esc(f, name);
  fprintf(f, "</text>\n");
}

static void il__legend(FILE *f, int i, const char *name) { il__legend_fill(f, i, il__colors[i % IL__N_COLORS], name); }

/* Index of result i's value on axis a (results are in sweep order, last axis fastest). */
static int il__axis_index(const il_sweep *s, int i, int a) {
  int rest = i;
  for (int k = s->n_axes - 1; k > a; k--) rest /= s->axes[k].n;
  return rest % s->axes[a].n;
}

/* The series of result i: the combination of the other axes' values. */
static int il__series_of(const il_sweep *s, int i, int main_axis) {
  int id = 0;
  for (int a = 0; a < s->n_axes; a++) {
    if (a == main_axis) continue;
    id = id * s->axes[a].n + il__axis_index(s, i, a);
  }
  return id;
}

static void il__series_name(const il_sweep *s, const il_bench_result *res, int main_axis, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (int a = 0; a < s->n_axes && used < n; a++) {
    if (a == main_axis || s->axes[a].n < 2) continue;
    char v[128];
    il_sweep_get(&res->point, s->axes[a].name, v, sizeof v);
    int w = snprintf(buf + used, n - used, "%s%s=%s", used ? " " : "", s->axes[a].name, v);
    if (w > 0) used += (size_t)w;
  }
}

static void il__metric_chart(FILE *f, const il_report *r, il_bench_metric m) {
  const il_bench_metric_info *mi = il_bench_metric_info_of(m);
  const char *unit;
  double k = il_report_display_scale(m, &unit);
  int ma = r->sweep ? il_sweep_main_axis(r->sweep) : -1;
  int n_x = ma >= 0 ? r->sweep->axes[ma].n : r->n_results;
  double vmax = 0;
  for (int i = 0; i < r->n_results; i++) {
    const il_stats_summary *s = &r->results[i].sum[m];
    if (r->results[i].status == IL_OK && s->n && isfinite(s->mean)) {
      double v = (s->mean + (isfinite(s->stddev) ? s->stddev : 0)) * k;
      if (v > vmax) vmax = v;
    }
  }
  double top;
  char title[160], ylabel[64];
  snprintf(title, sizeof title, "%s vs %s", mi->label, ma >= 0 ? r->sweep->axes[ma].name : "run");
  snprintf(ylabel, sizeof ylabel, "%s", unit); /* the title names the metric */
  il__frame(f, mi->key, title, ylabel, vmax, &top);
  int pw = IL__W - IL__ML - IL__MR, ph = IL__H - IL__MT - IL__MB;
  double dx = (double)pw / (n_x > 0 ? n_x : 1);
  for (int x = 0; x < n_x; x++) {
    const char *lbl = ma >= 0 ? r->sweep->axes[ma].values[x] : (*r->results[x].label ? r->results[x].label : "all");
    il__xlabel(f, IL__ML + dx * (x + 0.5), dx, lbl);
  }
  int n_series = r->n_results / (n_x > 0 ? n_x : 1);
  if (n_series < 1) n_series = 1;
  for (int sidx = 0; sidx < n_series; sidx++) {
    const char *color = il__colors[sidx % IL__N_COLORS];
    char name[256] = "";
    bool started = false;
    fprintf(f, "<polyline class=\"ln\" stroke=\"%s\" points=\"", color);
    for (int i = 0; i < r->n_results; i++) {
      if ((ma >= 0 ? il__series_of(r->sweep, i, ma) : 0) != sidx) continue;
      const il_stats_summary *s = &r->results[i].sum[m];
      if (r->results[i].status != IL_OK || !s->n || !isfinite(s->mean)) continue;
      int x = ma >= 0 ? il__axis_index(r->sweep, i, ma) : i;
      fprintf(f, "%s%.1f,%.1f", started ? " " : "", IL__ML + dx * (x + 0.5), IL__MT + ph - s->mean * k / top * ph);
      started = true;
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->n_results; i++) {
      if ((ma >= 0 ? il__series_of(r->sweep, i, ma) : 0) != sidx) continue;
      if (!*name && ma >= 0) il__series_name(r->sweep, &r->results[i], ma, name, sizeof name);
      const il_stats_summary *s = &r->results[i].sum[m];
      if (r->results[i].status != IL_OK || !s->n || !isfinite(s->mean)) continue;
      int x = ma >= 0 ? il__axis_index(r->sweep, i, ma) : i;
      double cx = IL__ML + dx * (x + 0.5), cy = IL__MT + ph - s->mean * k / top * ph;
      double sd = isfinite(s->stddev) ? s->stddev * k / top * ph : 0;
      if (sd > 0.5)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" class=\"wh\"/>", cx, cy - sd, cx,
                cy + sd > IL__MT + ph ? IL__MT + ph : cy + sd, color);
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%.4g %s</title></circle>\n", cx, cy, color,
              s->mean * k, unit);
    }
    il__legend(f, sidx, *name ? name : mi->label);
  }
  fprintf(f, "</svg>\n");
}

/* p50/p90/p99 bars per combination of one latency: the time per output token over every
 * decode step (ttft = false) or the time to first token (ttft = true). Two charts, because a
 * first token often takes a hundred times one step: on a shared axis TPOT would be flat. */
static void il__percentile_chart(FILE *f, const il_report *r, bool ttft) {
  double vmax = 0;
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    if (res->status != IL_OK) continue;
    if (!ttft && res->tpot_steps.n && res->tpot_steps.p99 * 1e3 > vmax) vmax = res->tpot_steps.p99 * 1e3;
    if (ttft && res->sum[IL_BM_TTFT_S].n && res->sum[IL_BM_TTFT_S].p99 * 1e3 > vmax) vmax = res->sum[IL_BM_TTFT_S].p99 * 1e3;
  }
  double top;
  il__frame(f, ttft ? "ttft-percentiles" : "latency-percentiles",
            ttft ? "time to first token: p50, p90, p99 over repetitions"
                 : "time per output token: p50, p90, p99 over every decode step",
            "ms", vmax, &top);
  int pw = IL__W - IL__ML - IL__MR, ph = IL__H - IL__MT - IL__MB;
  int n = r->n_results > 0 ? r->n_results : 1;
  double gw = (double)pw / n, bw = gw * 0.6 / 3;
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    il__xlabel(f, IL__ML + gw * (i + 0.5), gw, *res->label ? res->label : "all");
    if (res->status != IL_OK) continue;
    double vals[3] = {res->tpot_steps.p50, res->tpot_steps.p90, res->tpot_steps.p99};
    if (ttft) {
      vals[0] = res->sum[IL_BM_TTFT_S].p50;
      vals[1] = res->sum[IL_BM_TTFT_S].p90;
      vals[2] = res->sum[IL_BM_TTFT_S].p99;
    }
    for (int b = 0; b < 3; b++) {
      double v = vals[b] * 1e3;
      if (!isfinite(v)) continue;
      double h = v / top * ph, x = IL__ML + gw * i + gw * 0.2 + bw * b;
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%.4g ms</title></rect>\n", x,
              IL__MT + ph - h, bw * 0.9, h, il__pct_colors[b], v);
    }
  }
  const char *names[3] = {"p50", "p90", "p99"};
  for (int b = 0; b < 3; b++) il__legend_fill(f, b, il__pct_colors[b], names[b]);
  fprintf(f, "</svg>\n");
}

static void il__memory_chart(FILE *f, const il_report *r) {
  const double mib = 1024.0 * 1024.0;
  double vmax = 0;
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    double tot = 0;
    for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
      size_t peak = 0;
      for (int s = 0; s < res->n_samples; s++) {
        size_t v = res->samples[s].mem_peak[c] + res->samples[s].mem_mapped[c];
        if (v > peak) peak = v;
      }
      tot += (double)peak / mib;
    }
    if (tot > vmax) vmax = tot;
  }
  double top;
  il__frame(f, "memory", "peak memory by category (stacked)", "MiB", vmax, &top);
  int pw = IL__W - IL__ML - IL__MR, ph = IL__H - IL__MT - IL__MB;
  int n = r->n_results > 0 ? r->n_results : 1;
  double gw = (double)pw / n;
  bool used[IL_MEM_CATEGORY_COUNT] = {false};
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    il__xlabel(f, IL__ML + gw * (i + 0.5), gw, *res->label ? res->label : "all");
    double base = 0;
    for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
      size_t peak = 0;
      for (int s = 0; s < res->n_samples; s++) {
        size_t v = res->samples[s].mem_peak[c] + res->samples[s].mem_mapped[c];
        if (v > peak) peak = v;
      }
      double v = (double)peak / mib;
      if (v <= 0) continue;
      used[c] = true;
      double h = v / top * ph, y = IL__MT + ph - (base + v) / top * ph;
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s %.2f MiB</title></rect>\n",
              IL__ML + gw * i + gw * 0.2, y, gw * 0.6, h, il__colors[c], il_mem_category_name((il_mem_category)c), v);
      base += v;
    }
  }
  /* the categories that hold bytes, in two rows of four at most for the usual runs */
  for (int c = 0, i = 0; c < IL_MEM_CATEGORY_COUNT; c++)
    if (used[c]) il__legend_fill(f, i++, il__colors[c % IL__N_COLORS], il_mem_category_name((il_mem_category)c));
  fprintf(f, "</svg>\n");
}

static void il__td(FILE *f, const char *s) {
  fputs("<td>", f);
  il__esc(f, s);
  fputs("</td>", f);
}

il_status il_report_html_write(const il_report *r, FILE *f) {
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE html>\n"
             "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"UTF-8\"/>\n"
             "<title>inferlab bench report</title>\n<style>\n"
             "body{font-family:sans-serif;margin:24px;color:#222}\n"
             "table{border-collapse:collapse;font-size:13px;margin:8px 0 16px 0}\n"
             ".tw{max-width:100%%;overflow-x:auto;margin:8px 0 16px 0}\n.tw table{margin:0}\n"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
             ".tw td{white-space:nowrap}\n.tw th{white-space:normal;min-width:5em;max-width:8em;vertical-align:bottom}\n"
             "th{background:#f0f0f0}\n.chart{margin:8px 8px 8px 0;border:1px solid #ddd;background:#fff;width:calc(50%% - 12px);min-width:420px;height:auto}\n"
             ".grid{stroke:#e4e4e4;stroke-width:1}\n.ln{fill:none;stroke-width:2}\n.wh{stroke-width:1.5}\n"
             ".ct{font-size:14px;text-anchor:middle;font-weight:bold}\n.yt{font-size:11px;text-anchor:end}\n"
             ".xt{font-size:11px;text-anchor:middle}\n.yl{font-size:12px;text-anchor:middle}\n.lg{font-size:11px}\n"
             "code{background:#f4f4f4;padding:1px 4px}\n</style>\n</head>\n<body>\n<h1>inferlab bench</h1>\n");
  if (r->command) {
    fputs("<p>command: <code>", f);
    il__esc(f, r->command);
    fputs("</code></p>\n", f);
  }
  if (r->env) {
    const il_env *e = r->env;
    char ram[32];
    fputs("<h2>environment</h2>\n<table>\n", f);
    const char *rows[][2] = {{"time (UTC)", e->time_utc}, {"host", e->hostname},    {"inferlab", e->version},
                             {"build", e->build},         {"CPU", e->cpu},          {"kernels used", e->isa_used},
                             {"detected", e->isa_detected}, {"kernel", e->kernel}, {"GPU", e->gpu}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      fputs("<tr><th>", f);
      il__esc(f, rows[i][0]);
      fputs("</th>", f);
      il__td(f, rows[i][1]);
      fputs("</tr>\n", f);
    }
    fprintf(f, "<tr><th>logical CPUs</th><td>%d</td></tr>\n<tr><th>RAM</th><td>%s</td></tr>\n", e->logical_cpus,
            e->ram_bytes >= 0 ? il_mem_format_bytes((size_t)e->ram_bytes, ram, sizeof ram) : "unknown");
    if (r->opt) {
      if (r->opt->roofline_gbps > 0)
        fprintf(f, "<tr><th>roofline</th><td>%.2f GB/s read bandwidth (measured)</td></tr>\n", r->opt->roofline_gbps);
      else
        fprintf(f, "<tr><th>roofline</th><td>not measured</td></tr>\n");
      fprintf(f, "<tr><th>repetitions</th><td>%d after %d warm-up</td></tr>\n", r->opt->reps, r->opt->warmup);
    }
    fputs("</table>\n", f);
  }
  fputs("<h2>results</h2>\n<div class=\"tw\"><table>\n<tr><th>combination</th><th>model</th><th>batch</th><th>prompt</th><th>gen</th>"
        "<th>threads</th>",
        f);
  for (int m = 0; m < IL_BM_COUNT; m++) {
    const char *unit;
    il_report_display_scale((il_bench_metric)m, &unit);
    fputs("<th>", f);
    il__esc(f, il_bench_metric_info_of((il_bench_metric)m)->label);
    fputs(" (", f);
    il__esc(f, unit);
    fputs(")</th>", f);
  }
  fputs("</tr>\n", f);
  for (int i = 0; i < r->n_results; i++) {
    const il_bench_result *res = &r->results[i];
    char buf[64];
    fputs("<tr>", f);
    il__td(f, *res->label ? res->label : "all");
    il__td(f, res->model);
    fprintf(f, "<td>%d</td><td>%d</td><td>%d</td><td>%d</td>", res->batch, res->prompt, res->gen, res->threads);
    if (res->status != IL_OK) {
      fprintf(f, "<td colspan=\"%d\">error: ", IL_BM_COUNT);
      il__esc(f, res->error);
      fputs("</td></tr>\n", f);
      continue;
    }
    for (int m = 0; m < IL_BM_COUNT; m++) {
      il_report_format_metric(&res->sum[m], (il_bench_metric)m, true, buf, sizeof buf);
      il__td(f, buf);
    }
    fputs("</tr>\n", f);
  }
  fputs("</table></div>\n<h2>charts</h2>\n<div>\n", f);
  /* a metric against the swept option needs two values of it: with no sweep the table says it all */
  int ma = r->sweep ? il_sweep_main_axis(r->sweep) : -1;
  bool swept = ma >= 0 ? r->sweep->axes[ma].n > 1 : r->n_results > 1;
  for (int c = 0; swept && c < il_report_n_chart_metrics; c++) il__metric_chart(f, r, il_report_chart_metrics[c]);
  il__percentile_chart(f, r, false);
  il__percentile_chart(f, r, true);
  il__memory_chart(f, r);
  fputs("</div>\n", f);
  /* the device's memory map after each combination (blocks by category; free space hatched) */
  bool any_map = false;
  for (int i = 0; i < r->n_results; i++) any_map |= r->results[i].memory_map_svg != NULL;
  if (any_map) {
    fputs("<h2>device memory</h2>\n<div class=\"tw\"><table>\n<tr><th>combination</th><th>device</th>"
          "<th>peak reserved</th><th>predicted by plan</th><th>smallest device (plan)</th><th>peak allocated</th>"
          "<th>fragmentation at the end</th><th>device allocations</th></tr>\n",
          f);
    for (int i = 0; i < r->n_results; i++) {
      const il_bench_result *res = &r->results[i];
      if (!res->has_device) continue;
      char a[32], b[32], c[32];
      fputs("<tr>", f);
      il__td(f, *res->label ? res->label : "all");
      il__td(f, res->device);
      snprintf(c, sizeof c, "%.1f%%", 100 * res->device_stats.fragmentation);
      char d[32], e2[32];
      il__td(f, il_mem_format_bytes(res->device_stats.total.peak_reserved, a, sizeof a));
      il__td(f, res->predicted_reserved ? il_mem_format_bytes(res->predicted_reserved, d, sizeof d) : "-");
      il__td(f, res->predicted_min ? il_mem_format_bytes(res->predicted_min, e2, sizeof e2) : "-");
      il__td(f, il_mem_format_bytes(res->device_stats.total.peak_allocated, b, sizeof b));
      il__td(f, c);
      fprintf(f, "<td>%llu</td></tr>\n", (unsigned long long)res->device_stats.total.segment_allocs);
    }
    fputs("</table></div>\n", f);
    for (int i = 0; i < r->n_results; i++) {
      const il_bench_result *res = &r->results[i];
      if (!res->memory_map_svg) continue;
      fputs("<h3>memory map: ", f);
      il__esc(f, *res->label ? res->label : "all");
      fputs("</h3>\n<div>", f);
      fputs(res->memory_map_svg, f);
      fputs("</div>\n", f);
    }
  }
  fputs("<p>Generated by inferlab bench; every number above is also in <code>--json</code> with its raw "
        "samples.</p>\n</body>\n</html>\n",
        f);
  if (ferror(f)) return il_error(IL_ERR_IO, "writing the HTML report failed");
  return IL_OK;
}
