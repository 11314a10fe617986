/* lab/usage: samples what a running job uses, in a background thread: resident memory of a
 * process tree (/proc) and, when NVML loads, per-GPU memory, utilization and power, plus the
 * GPU memory that processes of that tree hold.
 *
 * `watch` samples the command it started (the tree below the child pid); `bench` samples
 * itself. Aggregates are kept as the samples arrive (peak, mean, max; energy integrated from
 * power with the trapezoid rule, because the NVML table has no energy counter), so a long job
 * costs no memory. One sample is taken when sampling starts and one when it stops, so even a
 * job shorter than the interval has two. When NVML cannot be used the result says why
 * ("NVML not loaded: libnvidia-ml.so.1: cannot open shared object file ...") instead of
 * failing: the CPU-side numbers are still worth having.
 * Not for: one-off device facts (probe/nvml's snapshot, doctor).
 */
#ifndef IL_LAB_USAGE_H
#define IL_LAB_USAGE_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "core/status.h"
#include "probe/nvml.h"

typedef struct {
  int index;
  char name[96];
  long long mem_total;            /* bytes, -1 unknown */
  int mem_n;                      /* samples with a memory reading */
  long long mem_peak;             /* device memory used, bytes (all processes) */
  double mem_mean;
  bool proc_known;                /* NVML listed compute processes */
  long long proc_mem_peak;        /* bytes held by the sampled process tree on this device */
  double proc_mem_mean;
  int util_n;
  double util_mean;               /* percent */
  int util_max;                   /* percent, -1 unknown */
  int power_n;
  double power_mean_w;
  double energy_j;                /* integrated from power samples; -1 unknown */
} il_usage_gpu;

typedef struct {
  int n_samples;
  double seconds;                 /* from start to stop */
  long long rss_peak;             /* sampled RSS of the process tree, bytes; -1 unknown */
  double rss_mean;
  bool gpu_available;             /* NVML loaded, initialized and listed devices */
  char gpu_reason[640];           /* why not, when !gpu_available */
  char nvml_driver[80];
  int n_gpus;
  il_usage_gpu gpus[IL_NVML_MAX_DEVICES];
  /* a start seen from outside, seconds from the sampling's start (-1: not seen): */
  double first_output_s;          /* the output file (options.output_path) first held a byte */
  long long rss_first;            /* the tree's RSS at the first sample, bytes */
  double rss_t50, rss_t90;        /* RSS first at 50% / 90% of its growth to the peak */
  long long gpu_first, gpu_grown; /* GPU memory (the tree's where NVML lists processes, else the devices') at the
                                     first sample, and its growth to the peak, bytes; -1 without NVML */
  double gpu_t_first, gpu_t90;    /* GPU memory first above the first sample's, and at 90% of its growth */
} il_usage_result;

typedef struct il_usage il_usage;

/* Called from the sampling thread after each sample with the aggregates so far. */
typedef void (*il_usage_tick_fn)(void *ud, const il_usage_result *now);

typedef struct {
  const char *nvml_lib; /* NULL = libnvidia-ml.so.1 */
  bool no_gpu;          /* do not load NVML (reason "GPU sampling off") */
  int interval_ms;      /* >= 1; 200 is the lab's default */
  pid_t root;           /* process tree to sample; 0 = this process */
  il_usage_tick_fn tick; /* optional */
  void *tick_ud;
  const char *output_path; /* optional: the file the job writes its output to; its first byte is timed */
} il_usage_options;

/* Loads NVML (recording why not), takes the first sample and starts the thread. *out is
 * freed by il_usage_stop. IL_ERR_OOM, or IL_ERR_INTERNAL when the thread cannot start. */
il_status il_usage_start(const il_usage_options *o, il_usage **out);
/* Takes a last sample, stops the thread, fills *out, unloads NVML and frees u. */
void il_usage_stop(il_usage *u, il_usage_result *out);

/* Resident set size of pid and all its descendants, bytes (-1 when pid is gone). */
long long il_usage_tree_rss(pid_t pid);
/* Lists pid and its descendants (from /proc/<pid>/stat parent links), at most max; returns
 * the count. */
int il_usage_tree_pids(pid_t pid, pid_t *out, int max);
/* Writes the GPU part of r in a few lines for people ("GPU: no GPU (NVML not loaded: ...)"
 * or one line per device). */
void il_usage_print_gpu(const il_usage_result *r, FILE *f);

#endif
