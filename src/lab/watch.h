/* lab/watch: run any command and report what `time` would plus the GPU view.
 *
 * il_watch_run runs the command through sys/spawn (PATH lookup like a shell), samples the child's
 * process tree with lab/usage while it runs, and reaps it with wait4, whose rusage gives the
 * exact peak RSS and CPU time of the child (and the descendants it waited for). The duration
 * runs from just before fork to the reap. SIGINT and SIGQUIT are ignored in the watcher while
 * the child runs (the child keeps the defaults), so Ctrl-C stops the job and its report is
 * still printed. A command that cannot be executed is reported like a shell would (126 not
 * executable, 127 not found), with the reason.
 * Used by `inferlab watch` and by `experiment --cmd`.
 * Not for: commands that need a terminal of their own for input (stdin is inherited, but
 * the progress line shares stderr).
 */
#ifndef IL_LAB_WATCH_H
#define IL_LAB_WATCH_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"
#include "lab/usage.h"

typedef struct {
  int interval_ms;      /* sampling interval; <= 0 = 200 */
  const char *nvml_lib; /* NULL = libnvidia-ml.so.1 */
  bool no_gpu;          /* skip NVML */
  const char *log_path; /* NULL: the child inherits stdout/stderr; else both go to this file */
  FILE *progress;       /* a live status line is drawn here (a terminal); NULL = none */
} il_watch_options;

typedef struct {
  char command[1024];   /* argv joined with spaces, for display */
  double seconds;
  int exit_status;      /* exit status when exited normally, else -1 */
  int term_signal;      /* signal that ended the child, 0 when none */
  bool exec_failed;     /* the command could not be executed */
  char exec_error[256]; /* why */
  long long peak_rss;   /* bytes, from wait4 (ru_maxrss) */
  double user_s, sys_s; /* CPU time of the child */
  il_usage_result usage;
} il_watch_result;

/* Runs argv[0] with argv (NULL-terminated) and fills r. A command that fails, crashes or
 * cannot be executed is a result, not an error. Errors: IL_ERR_INVALID_ARG for an empty argv,
 * IL_ERR_IO when the log file cannot be opened, IL_ERR_INTERNAL when fork fails, IL_ERR_OOM. */
il_status il_watch_run(const il_watch_options *o, char *const argv[], il_watch_result *r);
/* The exit code a watcher should return: the child's exit status, 128 + signal when it was
 * killed, 126/127 when it could not be executed (as shells do). */
int il_watch_exit_code(const il_watch_result *r);
/* The report for people. */
void il_watch_print(const il_watch_result *r, FILE *f);
/* One JSON document (schema_version 1; the keys are listed in docs/watch.md). IL_ERR_IO. */
il_status il_watch_json(const il_watch_result *r, FILE *f);

#endif
