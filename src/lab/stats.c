/* lab/stats: summaries and the bootstrap ratio interval. See stats.h. */
#include "lab/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"

double il_stats_mean(const double *x, int n) {
  if (n <= 0) return NAN;
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i];
  return s / n;
}

double il_stats_stddev(const double *x, int n) {
  if (n <= 0) return NAN;
  if (n == 1) return 0;
  double m = il_stats_mean(x, n), s = 0;
  for (int i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
  return sqrt(s / (n - 1));
}

double il_stats_percentile_sorted(const double *sorted, int n, double p) {
  if (n <= 0) return NAN;
  if (p <= 0) return sorted[0];
  if (p >= 100) return sorted[n - 1];
  double rank = p / 100.0 * (n - 1);
  int lo = (int)floor(rank);
  if (lo >= n - 1) return sorted[n - 1];
  double frac = rank - lo;
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static int il__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

void il_stats_sort(double *x, int n) {
  if (n > 1) qsort(x, (size_t)n, sizeof *x, il__cmp_double);
}

il_status il_stats_summarize(const double *x, int n, il_stats_summary *s) {
  s->n = n;
  if (n <= 0) {
    s->mean = s->stddev = s->min = s->max = s->p50 = s->p90 = s->p99 = NAN;
    return IL_OK;
  }
  double *c = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *c * (size_t)n, "statistics copy");
  if (!c) return IL_ERR_OOM;
  memcpy(c, x, sizeof *c * (size_t)n);
  il_stats_sort(c, n);
  s->mean = il_stats_mean(c, n);
  s->stddev = il_stats_stddev(c, n);
  s->min = c[0];
  s->max = c[n - 1];
  s->p50 = il_stats_percentile_sorted(c, n, 50);
  s->p90 = il_stats_percentile_sorted(c, n, 90);
  s->p99 = il_stats_percentile_sorted(c, n, 99);
  il_mem_free(c);
  return IL_OK;
}

uint64_t il_stats_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Mean of n draws with replacement from x. */
static double il__resample_mean(const double *x, int n, uint64_t *rng) {
  double s = 0;
  for (int i = 0; i < n; i++) s += x[il_stats_rand(rng) % (uint64_t)n];
  return s / n;
}

il_status il_stats_ratio_ci(const double *a, int na, const double *b, int nb, double level, int n_boot,
                            uint64_t seed, il_stats_ratio *out) {
  if (!(level > 0 && level < 1))
    return il_error(IL_ERR_INVALID_ARG, "confidence level %g: must be between 0 and 1", level);
  if (n_boot < 1) return il_error(IL_ERR_INVALID_ARG, "bootstrap resamples %d: must be at least 1", n_boot);
  out->level = level;
  out->ratio = out->lo = out->hi = NAN;
  out->significant = false;
  if (na <= 0 || nb <= 0) return IL_OK;
  double ma = il_stats_mean(a, na), mb = il_stats_mean(b, nb);
  if (ma == 0 || !isfinite(ma) || !isfinite(mb)) return IL_OK;
  out->ratio = mb / ma;
  double *r = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *r * (size_t)n_boot, "bootstrap ratios");
  if (!r) return IL_ERR_OOM;
  uint64_t rng = seed;
  int k = 0;
  for (int i = 0; i < n_boot; i++) {
    double ra = il__resample_mean(a, na, &rng), rb = il__resample_mean(b, nb, &rng);
    if (ra != 0) r[k++] = rb / ra; /* a resample of all zeros has no ratio; it is left out */
  }
  if (k > 0) {
    il_stats_sort(r, k);
    out->lo = il_stats_percentile_sorted(r, k, 100 * (1 - level) / 2);
    out->hi = il_stats_percentile_sorted(r, k, 100 * (1 + level) / 2);
    out->significant = out->lo > 1 || out->hi < 1;
  }
  il_mem_free(r);
  return IL_OK;
}
