/* sys/spawn: fork, exec, capture, deadline, reap (see spawn.h). */
#include "sys/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

/* The child, from fork to exec: async-signal-safe calls only. */
static void il__child(char *const argv[], const il_spawn_opts *o, int log_fd, int out_fd, int err_pipe,
                      const struct sigaction *old_int, const struct sigaction *old_quit) {
  if (o->ignore_interrupts) {
    sigaction(SIGINT, old_int, NULL);
    sigaction(SIGQUIT, old_quit, NULL);
  }
  if (o->quiet) {
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      if (log_fd < 0) dup2(nul, 2);
      if (log_fd < 0 && out_fd < 0) dup2(nul, 1);
    }
  }
  if (log_fd >= 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
  }
  if (out_fd >= 0) dup2(out_fd, 1);
  if (o->search_path) execvp(argv[0], argv);
  else execv(argv[0], argv);
  int e = errno;
  ssize_t wr = write(err_pipe, &e, sizeof e);
  (void)wr;
  _exit(e == ENOENT ? 127 : 126);
}

/* Reads the child's stdout into o->capture until EOF or the deadline (0: none). */
static void il__capture(int fd, const il_spawn_opts *o, double deadline, il_spawn_result *r) {
  size_t got = 0;
  for (;;) {
    int wait_ms = -1;
    if (deadline > 0) {
      wait_ms = (int)((deadline - il_time_now()) * 1000.0);
      if (wait_ms <= 0) {
        r->timed_out = true;
        break;
      }
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      r->timed_out = pr == 0;
      break;
    }
    char tmp[1024];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t room = o->capture_cap - 1 - got, take = (size_t)n < room ? (size_t)n : room;
    memcpy(o->capture + got, tmp, take);
    got += take;
  }
  o->capture[got] = 0;
  r->captured = got;
}

/* Waits until the child exits or the deadline passes (then r->timed_out). */
static void il__wait_deadline(pid_t pid, double deadline, il_spawn_result *r) {
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    /* WNOWAIT: left waitable, so that wait4 below reaps it with its rusage */
    int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if ((w == 0 && si.si_pid == pid) || (w < 0 && errno != EINTR)) return;
    if (il_time_now() >= deadline) {
      r->timed_out = true;
      return;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

il_status il_spawn_run(char *const argv[], const il_spawn_opts *o, il_spawn_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_status = -1;
  if (o->capture) o->capture[0] = 0;
  int log_fd = -1, out[2] = {-1, -1}, err_pipe[2];
  if (o->log_path) {
    log_fd = open(o->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return il_error(IL_ERR_IO, "%s: cannot open the log file: %s", o->log_path, strerror(errno));
  }
  const bool capture = o->capture && o->capture_cap > 0;
  if (pipe2(err_pipe, O_CLOEXEC) != 0 || (capture && pipe2(out, O_CLOEXEC) != 0)) {
    int e = errno;
    if (log_fd >= 0) close(log_fd);
    return il_error(IL_ERR_INTERNAL, "%s: pipe: %s", argv[0], strerror(e));
  }
  struct sigaction ign, old_int, old_quit;
  memset(&old_int, 0, sizeof old_int);
  memset(&old_quit, 0, sizeof old_quit);
  if (o->ignore_interrupts) {
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
  }
  fflush(NULL);
  const double t0 = il_time_now(), deadline = o->timeout_ms > 0 ? t0 + o->timeout_ms / 1000.0 : 0;
  pid_t pid = fork();
  if (pid == 0) il__child(argv, o, log_fd, out[1], err_pipe[1], &old_int, &old_quit);
  const int fork_errno = errno;
  close(err_pipe[1]);
  if (out[1] >= 0) close(out[1]);
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) {
    close(err_pipe[0]);
    if (out[0] >= 0) close(out[0]);
    if (o->ignore_interrupts) {
      sigaction(SIGINT, &old_int, NULL);
      sigaction(SIGQUIT, &old_quit, NULL);
    }
    return il_error(IL_ERR_INTERNAL, "%s: fork: %s", argv[0], strerror(fork_errno));
  }
  if (o->on_start) o->on_start(o->ud, pid);
  /* the pipe closes on a successful exec (CLOEXEC) or carries errno when exec failed */
  ssize_t got;
  do got = read(err_pipe[0], &r->exec_errno, sizeof r->exec_errno);
  while (got < 0 && errno == EINTR);
  close(err_pipe[0]);
  r->exec_failed = got == (ssize_t)sizeof r->exec_errno;
  if (!r->exec_failed) r->exec_errno = 0;
  if (capture) il__capture(out[0], o, deadline, r);
  else if (deadline > 0) il__wait_deadline(pid, deadline, r);
  if (out[0] >= 0) close(out[0]);
  if (r->timed_out) kill(pid, SIGKILL);
  int status = 0;
  pid_t w;
  do w = wait4(pid, &status, 0, &r->ru);
  while (w < 0 && errno == EINTR);
  r->seconds = il_time_now() - t0;
  if (o->ignore_interrupts) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
  }
  if (WIFEXITED(status)) r->exit_status = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r->term_signal = WTERMSIG(status);
  return IL_OK;
}
