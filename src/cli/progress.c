/* cli/progress: an elapsed-time line on a terminal while one long step runs (loading or
 * generating builtin:1b, converting), so no command sits silent for more than a second.
 * Quiet when stderr is not a terminal. A helper thread prints; the caller only starts and
 * stops it. */
#include "cli/progress.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

static struct {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool running, stop, printed;
  char what[160];
  double t0, delay;
} il__tick = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *il__ticker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&il__tick.mu);
  while (!il__tick.stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 250 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&il__tick.cv, &il__tick.mu, &ts);
    double dt = il_time_now() - il__tick.t0;
    if (il__tick.stop || dt < il__tick.delay) continue; /* short steps print nothing */
    fprintf(stderr, "\r%s ... %.1f s\033[K", il__tick.what, dt);
    fflush(stderr);
    il__tick.printed = true;
  }
  pthread_mutex_unlock(&il__tick.mu);
  return NULL;
}

static struct {
  bool on;
  struct sigaction old_int, old_term;
} il__guard;

static void il__guard_on_signal(int sig) {
  static const char erase[] = "\r\033[K";
  ssize_t w = write(STDERR_FILENO, erase, sizeof erase - 1);
  (void)w;
  signal(sig, SIG_DFL); /* then die of it, as the default would have */
  raise(sig);
}

void il_cli_progress_guard_begin(void) {
  if (il__guard.on || !isatty(STDERR_FILENO)) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = il__guard_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  /* only where the signal would end the process: a command's own handler stays */
  sigaction(SIGINT, NULL, &il__guard.old_int);
  sigaction(SIGTERM, NULL, &il__guard.old_term);
  if (il__guard.old_int.sa_handler == SIG_DFL) sigaction(SIGINT, &sa, NULL);
  if (il__guard.old_term.sa_handler == SIG_DFL) sigaction(SIGTERM, &sa, NULL);
  il__guard.on = true;
}

void il_cli_progress_guard_end(void) {
  if (!il__guard.on) return;
  struct sigaction now;
  sigaction(SIGINT, NULL, &now);
  if (now.sa_handler == il__guard_on_signal) sigaction(SIGINT, &il__guard.old_int, NULL);
  sigaction(SIGTERM, NULL, &now);
  if (now.sa_handler == il__guard_on_signal) sigaction(SIGTERM, &il__guard.old_term, NULL);
  il__guard.on = false;
}

void il_cli_progress_start(const char *fmt, ...) {
  if (il__tick.running || !isatty(2)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(il__tick.what, sizeof il__tick.what, fmt, ap);
  va_end(ap);
  il__tick.t0 = il_time_now();
  il__tick.stop = il__tick.printed = false;
  /* INFERLAB_PROGRESS_DELAY_MS: how long a step runs before the line appears (default 1000;
   * 0 prints at once, which the tests use) */
  const char *d = getenv("INFERLAB_PROGRESS_DELAY_MS");
  il__tick.delay = d && *d ? atof(d) / 1000.0 : 1.0;
  if (!(il__tick.delay >= 0) || il__tick.delay > 3600) il__tick.delay = 1.0;
  if (il__tick.delay == 0) {
    fprintf(stderr, "\r%s ...\033[K", il__tick.what);
    fflush(stderr);
    il__tick.printed = true;
  }
  il__tick.running = pthread_create(&il__tick.thread, NULL, il__ticker, NULL) == 0;
  il_cli_progress_guard_begin();
}

void il_cli_progress_update(const char *fmt, ...) {
  if (!il__tick.running) return;
  pthread_mutex_lock(&il__tick.mu);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(il__tick.what, sizeof il__tick.what, fmt, ap);
  va_end(ap);
  if (il__tick.delay == 0) { /* the tests' mode: every text is seen, not only the one a tick catches */
    fprintf(stderr, "\r%s ...\033[K", il__tick.what);
    fflush(stderr);
    il__tick.printed = true;
  }
  pthread_mutex_unlock(&il__tick.mu);
}

void il_cli_progress_stop(void) {
  if (!il__tick.running) return;
  pthread_mutex_lock(&il__tick.mu);
  il__tick.stop = true;
  pthread_cond_signal(&il__tick.cv);
  pthread_mutex_unlock(&il__tick.mu);
  pthread_join(il__tick.thread, NULL);
  il__tick.running = false;
  il_cli_progress_guard_end();
  if (il__tick.printed) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
  }
}
