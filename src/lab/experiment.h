/* lab/experiment: the one-change method as code. A baseline and a variant that differs in
 * exactly one option run the same workload, interleaved A B B A ..., so slow drift on a
 * noisy machine (thermal limits, other jobs) hits both arms alike; every metric's change is
 * reported as the ratio variant/baseline with a 95% bootstrap confidence interval
 * (lab/stats) and called significant when the interval excludes 1.
 *
 * Two kinds of arm runner: the engine (each run opens the engine afresh, warms up and measures
 * one repetition with lab/bench, so load time and memory peaks are per run), and a foreign
 * command (`--cmd 'python gen.py --slicing {}' --values off,on`: {} is replaced by the arm's
 * value, the command runs under /bin/sh -c through lab/watch, metrics are duration, CPU time,
 * peak RSS and the GPU view).
 * The evidence folder (OUT/<UTC stamp>-<change>/) holds: env.json (the doctor --json
 * document, or the short lab/env description when doctor fails), baseline.conf and
 * variant.conf (il_config_write; `--config baseline.conf` is the rollback), or baseline.cmd
 * and variant.cmd for commands, samples.jsonl (one line per run, written as runs finish),
 * logs/ (command output), command.txt, summary.txt and summary.json.
 * Not for: sweeps of many values (bench).
 */
#ifndef IL_LAB_EXPERIMENT_H
#define IL_LAB_EXPERIMENT_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"
#include "lab/bench.h"
#include "lab/stats.h"
#include "lab/sweep.h"
#include "lab/watch.h"

#define IL_EXP_MAX_CHANGES 16
#define IL_EXP_MAX_METRICS 24
/* Successful runs per arm a verdict needs: with fewer, the bootstrap interval is (nearly) zero
 * wide and would call any difference significant; the verdict is "too few runs" instead. */
#define IL_EXP_MIN_RUNS 3
/* Default minimum practical effect of memory metrics (bytes): peaks repeat to the byte, so the
 * interval is zero wide and a 0.4% difference would be "significant"; under 1% it is "same". */
#define IL_EXP_MIN_EFFECT_MEM 0.01

typedef struct {
  char name[48];                /* lab name as given: "batch" */
  char value[IL_CONFIG_STR_MAX];
} il_experiment_change;

typedef struct {
  /* what is compared */
  bool is_cmd;
  il_sweep_point baseline, variant;
  int n_changes;
  il_experiment_change changes[IL_EXP_MAX_CHANGES];
  char cmd[4096];               /* template with {} */
  char cmd_a[4352], cmd_b[4352]; /* expanded */
  char value_a[256], value_b[256];
  /* how */
  int repeat;                   /* runs per arm */
  il_bench_options bench;       /* reps is forced to 1; warmup per run */
  il_watch_options watch;
  double level;                 /* confidence level, 0.95 */
  int n_boot;                   /* 2000 */
  uint64_t seed;                /* bootstrap seed */
  /* smallest relative change a verdict calls better/worse (0.01 = 1%); a significant change
   * under it is "same". < 0 (the default) = per metric: IL_EXP_MIN_EFFECT_MEM for memory
   * metrics (deterministic, so any byte is "significant"), 0 for the rest */
  double min_effect;
  FILE *progress;               /* status line per run, or NULL */
  /* may be NULL; non-zero (a SIGINT handler sets it) ends the experiment before the next run,
   * as does a --cmd run ended by SIGINT (Ctrl-C reaches the command too): interrupted is set
   * and the summary is of the runs done */
  volatile sig_atomic_t *stop;
  bool interrupted;
  const char *command_line;     /* for command.txt */
  char *const *environ_list;    /* for the doctor snapshot */
  /* results */
  char dir[2048];               /* the evidence folder ("" = none: nothing is written) */
  FILE *samples;                /* dir/samples.jsonl while running */
  int n_metrics;
  il_bench_metric_info metrics[IL_EXP_MAX_METRICS];
  int n_runs[2];
  double *v[2];                 /* [run * IL_EXP_MAX_METRICS + metric], owned */
  int failures[2];              /* command runs with a non-zero exit, engine runs that failed: not samples */
  char first_error[2][1024];       /* the first failure's message per arm */
  il_bench_result steps[2];     /* engine mode: every run's samples and decode steps per arm */
} il_experiment;

/* Defaults: repeat 5, warm-up 1, level 0.95, 2000 resamples, seed 42. Can't fail. */
void il_experiment_init(il_experiment *x);
/* Splits "key=value". IL_ERR_INVALID_ARG naming the text when there is no '=' or no key. */
il_status il_experiment_parse_change(const char *text, il_experiment_change *out);
/* Engine mode: baseline = base; variant = base with every change applied. Refuses (with a
 * message saying why) more than one change unless allow_multi, an unknown option or bad
 * value, and a change that leaves the variant equal to the baseline, literally or in effect
 * (isa=avx2 when the baseline's default already uses avx2; threads=N when 0 means N CPUs).
 * IL_ERR_INVALID_ARG. */
il_status il_experiment_set_changes(il_experiment *x, const il_sweep_point *base, const char *const *changes,
                                    int n_changes, bool allow_multi);
/* Command mode: a template with {} and a comma list of exactly two values (baseline first,
 * then variant: one change means two arms). IL_ERR_INVALID_ARG otherwise. */
il_status il_experiment_set_command(il_experiment *x, const char *cmd, const char *values);
/* The interleaving: order[2 * repeat] = 'A', 'B', 'A', 'B', ..., NUL-terminated. */
void il_experiment_order(int repeat, char *order);

/* One run of arm (0 = baseline, 1 = variant), writing x->n_metrics values into vals (NaN for
 * unknown). Returning an error stops the experiment. */
typedef il_status (*il_experiment_run_fn)(void *ud, il_experiment *x, int arm, int run, double *vals);

/* Runs 2 x repeat runs in il_experiment_order, calling fn (NULL = the built-in runner for the
 * mode) and storing the values. The metrics must be set (il_experiment_set_changes / _command
 * set them; a custom fn may set its own before). IL_ERR_OOM or fn's error. */
il_status il_experiment_run(il_experiment *x, il_experiment_run_fn fn, void *ud);

typedef struct {
  const il_bench_metric_info *metric;
  il_stats_summary a, b;
  il_stats_ratio ratio;
  double min_effect;            /* the minimum practical effect applied (relative) */
  const char *verdict;          /* "better", "worse", "changed" (neutral metric), "no significant change",
                                 * "same" (significant, but |ratio - 1| under min_effect),
                                 * "too few runs" (under IL_EXP_MIN_RUNS successful runs on an arm), "n/a" */
} il_experiment_effect;

/* The minimum practical effect of metric m: x->min_effect when >= 0, else the per-metric
 * default (IL_EXP_MIN_EFFECT_MEM for metrics in bytes, 0 otherwise). Can't fail. */
double il_experiment_min_effect_of(const il_experiment *x, int m);

/* Effect of metric m. IL_ERR_OOM. */
il_status il_experiment_effect_of(const il_experiment *x, int m, il_experiment_effect *out);
/* Creates the evidence folder under out_parent (NULL = "runs") and writes env.json,
 * baseline/variant files and command.txt; x->dir receives the folder. IL_ERR_OUTPUT naming the
 * path. */
il_status il_experiment_prepare_dir(il_experiment *x, const char *out_parent);
/* Writes summary.txt and summary.json into x->dir and the text summary to `show` (may be
 * NULL). IL_ERR_OUTPUT / IL_ERR_OOM. */
il_status il_experiment_write_summary(il_experiment *x, FILE *show);
/* Prints DIR/summary.txt to f. IL_ERR_NOT_FOUND when DIR is not an evidence folder. */
il_status il_experiment_show(const char *dir, FILE *f);
void il_experiment_free(il_experiment *x);

#endif
