/* lab/stats: the statistics every lab report uses, on plain arrays of doubles.
 *
 * Summaries (mean, sample standard deviation, min, max, p50/p90/p99) and a confidence interval
 * for the ratio of two means, which is how `experiment` reports a change ("tokens/s x1.23
 * [1.15, 1.31]"). Percentiles use linear interpolation between closest ranks (numpy's default,
 * "type 7"): p = 50 of {1, 2, 3, 4} is 2.5. The ratio interval is a percentile bootstrap: both
 * samples are resampled independently with replacement n_boot times from a fixed seed (so the
 * same data always gives the same interval) and the interval is the central `level` mass of
 * the resampled ratios mean(b)/mean(a). A change is significant when that interval excludes 1.
 * The bootstrap assumes nothing about the shape of the distributions (latencies are skewed),
 * which is why it was chosen over a Welch/delta-method interval; tests compare the two on
 * well-behaved data.
 * Not for: anything that needs to stream (every function sees the whole sample).
 */
#ifndef IL_LAB_STATS_H
#define IL_LAB_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

typedef struct {
  int n;
  double mean, stddev; /* stddev: sample (n - 1) standard deviation; 0 when n == 1 */
  double min, max;
  double p50, p90, p99;
} il_stats_summary;

/* Mean of x[0..n). NaN when n == 0. Can't fail. */
double il_stats_mean(const double *x, int n);
/* Sample standard deviation (divides by n - 1). 0 when n == 1, NaN when n == 0. */
double il_stats_stddev(const double *x, int n);
/* Percentile p in [0, 100] of an ascending array (linear interpolation). NaN when n == 0. */
double il_stats_percentile_sorted(const double *sorted, int n, double p);
/* Sorts x in place, ascending. */
void il_stats_sort(double *x, int n);
/* Fills s from x (not modified; a sorted copy is made). With n == 0 every field but n is NaN.
 * IL_ERR_OOM when the copy cannot be allocated. */
il_status il_stats_summarize(const double *x, int n, il_stats_summary *s);

typedef struct {
  double ratio;      /* mean(b) / mean(a); NaN when mean(a) == 0 or a sample is empty */
  double lo, hi;     /* confidence interval of the ratio */
  double level;      /* e.g. 0.95 */
  bool significant;  /* the interval excludes 1 */
} il_stats_ratio;

/* Percentile-bootstrap interval for mean(b)/mean(a) (see the top of this file). n_boot
 * resamples (>= 100 recommended; 2000 is the lab's default), seed fixes the generator.
 * IL_ERR_INVALID_ARG for level outside (0, 1) or n_boot < 1; IL_ERR_OOM. Empty samples or a
 * zero mean give NaN fields and significant = false, not an error. */
il_status il_stats_ratio_ci(const double *a, int na, const double *b, int nb, double level, int n_boot,
                            uint64_t seed, il_stats_ratio *out);

/* The lab's seeded generator (splitmix64): next 64-bit value. */
uint64_t il_stats_rand(uint64_t *state);

#endif
