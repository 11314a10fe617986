/* lab/learn_impl: what the lesson driver (lab/learn.c) and the labs (lab/learn_labs.c: the
 * engine, quality and numerics kinds; lab/learn_machine.c: the machine and pattern kinds)
 * share. A lab kind is a table of steps the driver calls in order:
 *   define    choose the baseline and the one change, the metrics, what to show and expect
 *             (no output, nothing written); may mark the lesson skipped on this device
 *   files     after the evidence folder exists: write what the commands refer to (trees)
 *   before    step 1: print the state before and measure the baseline once
 *   change    step 2: print the change
 *   run       the experiment's runner: one run of one arm
 *   after     after the runs: facts that need them, extra evidence, extra lines of step 3
 *   rollback  write rollback.sh and the command into L->rollback
 * Internal to lab/.
 */
#ifndef IL_LAB_LEARN_IMPL_H
#define IL_LAB_LEARN_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include "lab/experiment.h"
#include "lab/learn.h"
#include "lab/machine.h"

typedef struct {
  const char *key;
  const char *label[IL_LEARN_LANGS];
  const char *unit; /* s, bytes, fraction, percent, count, tok/s, req/s, GFLOP/s, nats, "" */
  int better;       /* +1 higher is better, -1 lower, 0 neither */
} il__learn_metric;

typedef struct {
  char key[32];
  char value[320];
  bool yesno; /* value "1"/"0", shown as yes/no in the lesson's language */
} il__learn_factrec;

#define IL__LEARN_MAX_FACTS 64
#define IL__LEARN_MAX_FILES 48

typedef struct il__learn il__learn;

typedef struct {
  il_status (*define)(il__learn *L);
  il_status (*files)(il__learn *L);
  il_status (*before)(il__learn *L);
  void (*change)(il__learn *L);
  il_experiment_run_fn run;
  il_status (*after)(il__learn *L);
  il_status (*rollback)(il__learn *L);
} il__learn_kind_ops;

struct il__learn {
  const il_learn_concept *c;
  const il_learn_options *o;
  il_learn_lang lang;
  FILE *out;             /* NULL with --json */
  il_learn_text text;
  bool quick;
  char device[64];       /* the lesson's device: o->device or the default */
  il_experiment *x;
  const il__learn_kind_ops *ops;
  const il__learn_metric *metrics;
  int n_metrics;
  /* engine, quality, numerics */
  il_sweep_point base;
  char change[320];      /* "dtype=f16" */
  char model_path[2048]; /* a model file the lab made (numerics) */
  struct il_engine *ref; /* the f32 reference the quality figures are measured against, opened once (owned) */
  struct il_engine *qeng[8]; /* the models measured against it, one per weight type, opened once (owned) */
  char qtype[8][16];
  /* machine */
  const il_machine_scenario *scen;
  char tree[2][2300];    /* baseline, variant */
  /* pattern */
  size_t pattern_cap;
  /* what the lesson shows and expects */
  const char *focus[4];
  int n_focus;
  const char *expect_key;
  int expect_dir;        /* -1 the variant's value is smaller, +1 larger, 0 nothing expected */
  il__learn_factrec facts[IL__LEARN_MAX_FACTS];
  int n_facts;
  /* evidence */
  char parent[2048];
  char *logbuf;          /* log lines until the folder exists */
  size_t loglen, logcap;
  FILE *log;
  char files[IL__LEARN_MAX_FILES][64];
  int n_files;
  char rollback[4400];
  /* results */
  bool skipped, interrupted, failed;
  char reason[512];
  il_experiment_effect eff[IL_EXP_MAX_METRICS];
  bool have_eff;
  bool map_written[2];
};

const il__learn_kind_ops *il__learn_ops_engine(void);
const il__learn_kind_ops *il__learn_ops_quality(void);
const il__learn_kind_ops *il__learn_ops_numerics(void);
const il__learn_kind_ops *il__learn_ops_machine(void);
const il__learn_kind_ops *il__learn_ops_pattern(void);

/* ---- driver helpers the labs use (lab/learn.c) ---- */
/* Prints to the lesson's output (not with --json) and logs the line. */
void il__learn_say(il__learn *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A timestamped line in log.txt only. */
void il__learn_log(il__learn *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void il__learn_fact(il__learn *L, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void il__learn_fact_yesno(il__learn *L, const char *key, bool v);
const char *il__learn_fact_get(const il__learn *L, const char *key);
/* A UI string of the lesson's language. */
const char *il__learn_ui(const il__learn *L, const char *key);
/* Formats v in the unit's way ("6.0 MiB", "12.345 ms", "45.0%", "1234 tok/s"). */
void il__learn_fmt(const char *unit, double v, char *buf, size_t n);
/* Records an evidence file (name relative to the folder) for the list and the completeness check. */
void il__learn_file(il__learn *L, const char *name);
/* Opens DIR/name for writing (recorded as evidence); NULL with the error recorded. */
FILE *il__learn_open(il__learn *L, const char *name, il_status *st);
/* The metric's index in L->metrics, or -1. */
int il__learn_metric_index(const il__learn *L, const char *key);
/* The stop flag was raised (Ctrl-C). */
bool il__learn_stopped(const il__learn *L);
/* Writes one samples.jsonl line: arm, run, the metric values. */
void il__learn_sample_line(il__learn *L, int arm, int run, const double *vals);
/* The lesson's metric label in its language. */
const char *il__learn_label(const il__learn *L, int m);
/* The real machine's doctor facts (one doctor run per process): driver and build summaries. */
void il__learn_machine_facts(il__learn *L, const char **driver, const char **build, const char **device);
/* Fills the experiment's metric table from L->metrics. */
void il__learn_set_metrics(il__learn *L, const il__learn_metric *m, int n);

#endif
