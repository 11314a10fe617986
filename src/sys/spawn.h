/* sys/spawn: run a program as a child process and wait for it, with a deadline if asked.
 *
 * One way to start a command for the two places that do: doctor's probes (nvcc --version and
 * the like: an absolute path, no shell, stdin and stderr on /dev/null, stdout captured, killed
 * after a timeout) and watch (PATH lookup like a shell, the child's output inherited or in a
 * log file, Ctrl-C left to the child, a sampler started on the child's pid, rusage from wait4).
 * fork + exec; the child does only async-signal-safe calls. A program that cannot be executed
 * is reported through a close-on-exec pipe (exec_failed, exec_errno), as shells report 126/127.
 * The child is always reaped before il_spawn_run returns.
 * Not for: a shell command line (argv is run as given), interactive children, or more than one
 * child at a time.
 */
#ifndef IL_SYS_SPAWN_H
#define IL_SYS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "core/status.h"

typedef struct {
  bool search_path;       /* argv[0] is looked up in PATH (execvp); else it is a path */
  bool quiet;             /* stdin and stderr on /dev/null (stdout too unless captured or logged) */
  const char *log_path;   /* stdout and stderr to this file, created or truncated; NULL = inherited */
  char *capture;          /* stdout captured here, NUL-terminated, at most capture_cap - 1 bytes */
  size_t capture_cap;
  int timeout_ms;         /* > 0: the child is killed (SIGKILL) and reaped when it runs longer */
  bool ignore_interrupts; /* SIGINT and SIGQUIT ignored here while the child runs (it keeps its own) */
  void (*on_start)(void *ud, pid_t pid); /* called once the child runs (watch starts sampling) */
  void *ud;
} il_spawn_opts;

typedef struct {
  int exit_status;        /* when it exited normally, else -1 */
  int term_signal;        /* the signal that ended it, 0 when none */
  bool exec_failed;       /* argv[0] could not be executed: exec_errno says why */
  int exec_errno;
  bool timed_out;         /* killed at the deadline */
  size_t captured;        /* bytes in capture */
  double seconds;         /* from just before fork to the reap */
  struct rusage ru;       /* from wait4: the child and the descendants it waited for */
} il_spawn_result;

/* Runs argv (NULL-terminated, argv[0] not empty) as o says and fills r. A command that fails,
 * crashes, times out or cannot be executed is a result, not an error. Errors: IL_ERR_IO naming
 * log_path when it cannot be opened; IL_ERR_INTERNAL when pipe or fork fails. */
il_status il_spawn_run(char *const argv[], const il_spawn_opts *o, il_spawn_result *r);

#endif
