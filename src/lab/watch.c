/* lab/watch: fork/exec, sample, wait4, report. See watch.h. */
#include "lab/watch.h"

#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/text.h"
#include "core/timer.h"
#include "core/jsonw.h"
#include "memory/mem.h"

typedef struct {
  FILE *f;
  double t0;
} il__progress;

static void il__tick(void *ud, const il_usage_result *now) {
  il__progress *p = ud;
  char a[32], line[256];
  snprintf(line, sizeof line, "watch: %.1f s  rss %s", il_time_now() - p->t0,
           il_mem_format_bytes((size_t)(now->rss_peak > 0 ? now->rss_peak : 0), a, sizeof a));
  for (int i = 0; i < now->n_gpus; i++) {
    char b[32];
    il_appendf(line, sizeof line, "  gpu%d %s %d%%", now->gpus[i].index,
               il_mem_format_bytes((size_t)now->gpus[i].mem_peak, b, sizeof b), now->gpus[i].util_max);
  }
  fprintf(p->f, "\r%s\033[K", line);
  fflush(p->f);
}

il_status il_watch_run(const il_watch_options *o, char *const argv[], il_watch_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_status = -1;
  if (!argv || !argv[0] || !*argv[0]) return il_error(IL_ERR_INVALID_ARG, "watch: no command given");
  size_t used = 0;
  for (int i = 0; argv[i] && used < sizeof r->command - 1; i++) {
    int w = snprintf(r->command + used, sizeof r->command - used, "%s%s", i ? " " : "", argv[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  int log_fd = -1;
  if (o->log_path) {
    log_fd = open(o->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return il_error(IL_ERR_IO, "%s: cannot open the log file: %s", o->log_path, strerror(errno));
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    if (log_fd >= 0) close(log_fd);
    return il_error(IL_ERR_INTERNAL, "watch: pipe: %s", strerror(errno));
  }
  struct sigaction ign, old_int, old_quit;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  fflush(NULL);
  double t0 = il_time_now();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    close(pipefd[0]);
    close(pipefd[1]);
    if (log_fd >= 0) close(log_fd);
    return il_error(IL_ERR_INTERNAL, "watch: fork: %s", strerror(e));
  }
  if (pid == 0) {
    /* child: only async-signal-safe calls from here to exec */
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    execvp(argv[0], argv);
    int e = errno;
    ssize_t wr = write(pipefd[1], &e, sizeof e);
    (void)wr;
    _exit(e == ENOENT ? 127 : 126);
  }
  close(pipefd[1]);
  if (log_fd >= 0) close(log_fd);
  il__progress prog = {o->progress, t0};
  il_usage_options uo = {o->nvml_lib, o->no_gpu, o->interval_ms > 0 ? o->interval_ms : 200, pid,
                         o->progress ? il__tick : NULL, &prog};
  il_usage *u = NULL;
  il_status st = il_usage_start(&uo, &u);
  /* the pipe closes on a successful exec (CLOEXEC) or carries errno when exec failed */
  int child_errno = 0;
  ssize_t got;
  do got = read(pipefd[0], &child_errno, sizeof child_errno);
  while (got < 0 && errno == EINTR);
  close(pipefd[0]);
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  pid_t w;
  do w = wait4(pid, &status, 0, &ru);
  while (w < 0 && errno == EINTR);
  r->seconds = il_time_now() - t0;
  if (u) il_usage_stop(u, &r->usage);
  if (o->progress) {
    fprintf(o->progress, "\r\033[K");
    fflush(o->progress);
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGQUIT, &old_quit, NULL);
  if (st != IL_OK) return st;
  if (got == (ssize_t)sizeof child_errno) {
    r->exec_failed = true;
    snprintf(r->exec_error, sizeof r->exec_error, "%s: %s", argv[0], strerror(child_errno));
  }
  if (WIFEXITED(status)) r->exit_status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r->term_signal = WTERMSIG(status);
  r->peak_rss = ru.ru_maxrss >= 0 && ru.ru_maxrss <= LLONG_MAX / 1024 ? (long long)ru.ru_maxrss * 1024 : -1;
  r->user_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
  r->sys_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  return IL_OK;
}

int il_watch_exit_code(const il_watch_result *r) {
  if (r->term_signal) return 128 + r->term_signal;
  return r->exit_status >= 0 ? r->exit_status : 1;
}

void il_watch_print(const il_watch_result *r, FILE *f) {
  char a[32], b[32];
  fprintf(f, "command:       %s\n", r->command);
  if (r->exec_failed) fprintf(f, "exit:          could not run: %s (status %d)\n", r->exec_error, il_watch_exit_code(r));
  else if (r->term_signal) fprintf(f, "exit:          killed by signal %d (%s)\n", r->term_signal, strsignal(r->term_signal));
  else fprintf(f, "exit:          status %d\n", r->exit_status);
  fprintf(f, "duration:      %.3f s\n", r->seconds);
  fprintf(f, "cpu:           user %.3f s, sys %.3f s (%.0f%% of one core)\n", r->user_s, r->sys_s,
          r->seconds > 0 ? 100.0 * (r->user_s + r->sys_s) / r->seconds : 0.0);
  fprintf(f, "peak rss:      %s (wait4)", il_mem_format_bytes((size_t)r->peak_rss, a, sizeof a));
  if (r->usage.rss_peak >= 0)
    fprintf(f, "; sampled tree peak %s, mean %s", il_mem_format_bytes((size_t)r->usage.rss_peak, a, sizeof a),
            il_mem_format_bytes((size_t)r->usage.rss_mean, b, sizeof b));
  fprintf(f, "\nsamples:       %d\n", r->usage.n_samples);
  il_usage_print_gpu(&r->usage, f);
}

/* Writes key: s with every byte that is not part of valid UTF-8 (raw bytes of a non-UTF-8
 * argv, a name cut mid-character) replaced by U+FFFD, so the document is always valid JSON
 * text. s is at most a few KiB here (command lines, names, messages). */
static void il__kstr_utf8(il_jsonw *w, const char *key, const char *s) {
  if (!s) {
    il_jsonw_kstr(w, key, NULL);
    return;
  }
  char buf[3 * 1024 + 8];
  size_t o = 0, n = strlen(s);
  for (size_t i = 0; i < n && o + 4 < sizeof buf;) {
    size_t l = il_utf8_char_len(s + i, n - i);
    if (l) {
      memcpy(buf + o, s + i, l);
      o += l;
      i += l;
    } else {
      memcpy(buf + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  buf[o] = 0;
  il_jsonw_kstr(w, key, buf);
}

il_status il_watch_json(const il_watch_result *r, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "schema_version", 1);
  il_jsonw_kstr(&w, "tool", "inferlab watch");
  il__kstr_utf8(&w, "command", r->command);
  il_jsonw_kbool(&w, "exec_failed", r->exec_failed);
  il__kstr_utf8(&w, "exec_error", r->exec_failed ? r->exec_error : NULL);
  il_jsonw_key(&w, "exit_status");
  if (r->exit_status >= 0) il_jsonw_int(&w, r->exit_status);
  else il_jsonw_null(&w);
  il_jsonw_key(&w, "signal");
  if (r->term_signal) il_jsonw_int(&w, r->term_signal);
  else il_jsonw_null(&w);
  il_jsonw_kint(&w, "exit_code", il_watch_exit_code(r));
  il_jsonw_knum(&w, "seconds", r->seconds);
  il_jsonw_knum(&w, "user_seconds", r->user_s);
  il_jsonw_knum(&w, "sys_seconds", r->sys_s);
  il_jsonw_kint(&w, "peak_rss_bytes", r->peak_rss);
  il_jsonw_key(&w, "sampled_rss_peak_bytes");
  if (r->usage.rss_peak >= 0) il_jsonw_int(&w, r->usage.rss_peak);
  else il_jsonw_null(&w);
  il_jsonw_knum(&w, "sampled_rss_mean_bytes", r->usage.rss_peak >= 0 ? r->usage.rss_mean : (double)NAN);
  il_jsonw_kint(&w, "samples", r->usage.n_samples);
  il_jsonw_key(&w, "gpu");
  il_jsonw_obj(&w);
  il_jsonw_kbool(&w, "available", r->usage.gpu_available);
  il__kstr_utf8(&w, "reason", r->usage.gpu_available ? NULL : r->usage.gpu_reason);
  il__kstr_utf8(&w, "driver", r->usage.gpu_available ? r->usage.nvml_driver : NULL);
  il_jsonw_key(&w, "devices");
  il_jsonw_arr(&w);
  for (int i = 0; i < r->usage.n_gpus; i++) {
    const il_usage_gpu *g = &r->usage.gpus[i];
    il_jsonw_obj(&w);
    il_jsonw_kint(&w, "index", g->index);
    il__kstr_utf8(&w, "name", g->name);
    il_jsonw_knum(&w, "memory_total_bytes", g->mem_total >= 0 ? (double)g->mem_total : (double)NAN);
    il_jsonw_knum(&w, "memory_used_peak_bytes", g->mem_n ? (double)g->mem_peak : (double)NAN);
    il_jsonw_knum(&w, "memory_used_mean_bytes", g->mem_n ? g->mem_mean : (double)NAN);
    il_jsonw_knum(&w, "process_memory_peak_bytes", g->proc_known ? (double)g->proc_mem_peak : (double)NAN);
    il_jsonw_knum(&w, "process_memory_mean_bytes", g->proc_known ? g->proc_mem_mean : (double)NAN);
    il_jsonw_knum(&w, "utilization_mean_percent", g->util_n ? g->util_mean : (double)NAN);
    il_jsonw_knum(&w, "utilization_max_percent", g->util_n ? (double)g->util_max : (double)NAN);
    il_jsonw_knum(&w, "power_mean_watts", g->power_n ? g->power_mean_w : (double)NAN);
    il_jsonw_knum(&w, "energy_joules", g->energy_j >= 0 ? g->energy_j : (double)NAN);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_obj_end(&w);
  il_jsonw_obj_end(&w);
  return il_jsonw_finish(&w);
}
