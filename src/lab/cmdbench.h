/* lab/cmdbench: `bench --cmd`: a foreign command's start and run, timed the same way every time.
 *
 * The command runs under /bin/sh -c, --warmup times untimed and then -r times, each through
 * lab/watch (its process tree sampled; its stdout and stderr into a temporary file, whose first
 * byte is its first output). Per run: the wall time from fork to reap, the first output, the
 * moment its RSS reached 90% of its growth and (with NVML) its GPU memory 90% of its growth,
 * all seconds since it started and, except the wall time, to the sampling interval; its peak RSS
 * (wait4's) and CPU time. The summary gives min, median and max of each over the runs that
 * exited 0; a run that failed is counted and named, not a sample. These are the phases of a
 * start that can be seen from outside (`watch` prints them for one run): inferlab's own
 * timeline (`run`'s startup lines) is the inside view.
 * Not for: inferlab's own models (bench's engine mode), comparing two commands (experiment --cmd).
 */
#ifndef IL_LAB_CMDBENCH_H
#define IL_LAB_CMDBENCH_H

#include <signal.h>
#include <stdio.h>

#include "core/status.h"
#include "lab/watch.h"

#define IL_CMDBENCH_MAX_RUNS 1000

/* The metrics, in print order. */
enum { IL_CMDB_WALL, IL_CMDB_FIRST_OUTPUT, IL_CMDB_RSS90, IL_CMDB_GPU90, IL_CMDB_PEAK_RSS, IL_CMDB_CPU, IL_CMDB_N };

typedef struct {
  double v[IL_CMDB_N]; /* NaN: not seen in this run */
  int exit_code;       /* as a shell reports it (lab/watch) */
} il_cmdbench_sample;

typedef struct {
  char command[1024];
  int reps, warmup;
  int n;                       /* runs measured (reps, or fewer after Ctrl-C) */
  il_cmdbench_sample *runs;    /* [reps] */
  int failures;                /* runs that did not exit 0 */
  int first_failure_code;      /* the first failed run's exit code */
  int first_failure_run;
  bool interrupted;            /* Ctrl-C: the runs so far are the result */
  bool gpu_available;
  char gpu_reason[640];
  int interval_ms;
} il_cmdbench;

/* Called before each run: rep < 0 for a warm-up, else the timed run's index. */
typedef void (*il_cmdbench_progress_fn)(void *ud, int rep, int reps);

/* Runs cmd as above. stop: set from a SIGINT handler; checked between runs (the command gets
 * the Ctrl-C itself, and a run it ended is not a sample). IL_ERR_INVALID_ARG for an empty cmd or
 * reps outside 1..IL_CMDBENCH_MAX_RUNS; IL_ERR_IO when no temporary file can be made; IL_ERR_OOM.
 * Free with il_cmdbench_free. */
IL_NODISCARD il_status il_cmdbench_run(const char *cmd, int reps, int warmup, const il_watch_options *wo,
                                       volatile sig_atomic_t *stop, il_cmdbench_progress_fn progress, void *ud,
                                       il_cmdbench *out);
void il_cmdbench_free(il_cmdbench *b);
/* The table for people: one line per metric, min / median / max over the runs that exited 0. */
void il_cmdbench_print(const il_cmdbench *b, FILE *f);
/* One JSON document: the command, every run's figures, the summary (docs/bench.md). IL_ERR_IO. */
IL_NODISCARD il_status il_cmdbench_json(const il_cmdbench *b, FILE *f);

#endif
