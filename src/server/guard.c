/* server/guard: header and body deadlines by total time, eviction of idle connections. */
#include "server/guard.h"

#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include "core/timer.h"
#include "memory/mem.h"

typedef struct {
  int fd;          /* -1: the slot is free */
  il_guard_phase phase;
  double since;    /* when the phase began */
  bool dropped;    /* shut down already: counted once */
} il__entry;

struct il_guard {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool stop;
  il__entry *e;
  int cap, soft_limit, open, active;
  int dropping;      /* shut down, not yet removed */
  double timeout[2]; /* headers, body */
  uint64_t dropped[IL_GUARD_DROP_COUNT];
};

const char *il_guard_drop_name(il_guard_drop why) {
  static const char *const names[IL_GUARD_DROP_COUNT] = {"header_timeout", "body_timeout", "evicted"};
  return why < IL_GUARD_DROP_COUNT ? names[why] : "?";
}

/* With g->mu held. */
static void il__drop(il_guard *g, il__entry *x, il_guard_drop why) {
  if (x->dropped) return;
  x->dropped = true;
  g->dropping++;
  shutdown(x->fd, SHUT_RDWR); /* the library's thread sees the client leave and closes it */
  g->dropped[why]++;
}

/* Every 100 ms: the deadlines. A connection past one is shut down once. */
static void *il__watch(void *arg) {
  il_guard *g = arg;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    const double now = il_time_now();
    for (int i = 0; i < g->cap; i++) {
      il__entry *x = &g->e[i];
      if (x->fd < 0 || x->dropped || x->phase == IL_GUARD_BUSY) continue;
      if (now - x->since > g->timeout[x->phase])
        il__drop(g, x, x->phase == IL_GUARD_HEADERS ? IL_GUARD_DROP_HEADER_TIMEOUT : IL_GUARD_DROP_BODY_TIMEOUT);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

il_status il_guard_new(int cap, int soft_limit, double header_timeout, double body_timeout, il_guard **out) {
  *out = NULL;
  if (cap <= 0 || soft_limit <= 0 || !(header_timeout > 0) || !(body_timeout > 0))
    return il_error(IL_ERR_INVALID_ARG, "connection guard: cap %d, limit %d, timeouts %g s and %g s must be positive",
                    cap, soft_limit, header_timeout, body_timeout);
  il_guard *g = il_mem_calloc(IL_MEM_SERVER, sizeof *g, "connection guard");
  if (!g) return IL_ERR_OOM;
  g->e = il_mem_alloc(IL_MEM_SERVER, sizeof *g->e * (size_t)cap, "connection guard");
  if (!g->e) {
    il_mem_free(g);
    return IL_ERR_OOM;
  }
  for (int i = 0; i < cap; i++) g->e[i].fd = -1;
  g->cap = cap;
  g->soft_limit = soft_limit;
  g->timeout[IL_GUARD_HEADERS] = header_timeout;
  g->timeout[IL_GUARD_BODY] = body_timeout;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  if (pthread_create(&g->thread, NULL, il__watch, g)) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    il_mem_free(g->e);
    il_mem_free(g);
    return il_error(IL_ERR_INTERNAL, "connection guard: cannot start its thread");
  }
  *out = g;
  return IL_OK;
}

void il_guard_free(il_guard *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  il_mem_free(g->e);
  il_mem_free(g);
}

int il_guard_add(il_guard *g, int fd) {
  pthread_mutex_lock(&g->mu);
  int slot = -1, oldest = -1;
  for (int i = 0; i < g->cap; i++) {
    il__entry *x = &g->e[i];
    if (x->fd < 0) {
      if (slot < 0) slot = i;
    } else if (x->phase == IL_GUARD_HEADERS && !x->dropped && (oldest < 0 || x->since < g->e[oldest].since)) {
      oldest = i;
    }
  }
  /* connections already shut down do not count: they are on their way out */
  if (g->open - g->dropping >= g->soft_limit && oldest >= 0) il__drop(g, &g->e[oldest], IL_GUARD_DROP_EVICTED);
  if (slot >= 0) {
    g->e[slot] = (il__entry){.fd = fd, .phase = IL_GUARD_HEADERS, .since = il_time_now()};
    g->open++;
  }
  pthread_mutex_unlock(&g->mu);
  return slot;
}

void il_guard_set_phase(il_guard *g, int slot, il_guard_phase phase) {
  if (slot < 0 || slot >= g->cap) return;
  pthread_mutex_lock(&g->mu);
  il__entry *x = &g->e[slot];
  if (x->fd >= 0) {
    g->active += (phase != IL_GUARD_HEADERS) - (x->phase != IL_GUARD_HEADERS);
    x->phase = phase;
    x->since = il_time_now();
  }
  pthread_mutex_unlock(&g->mu);
}

void il_guard_remove(il_guard *g, int slot) {
  if (slot < 0 || slot >= g->cap) return;
  pthread_mutex_lock(&g->mu);
  il__entry *x = &g->e[slot];
  if (x->fd >= 0) {
    g->active -= x->phase != IL_GUARD_HEADERS;
    g->dropping -= x->dropped;
    g->open--;
    x->fd = -1;
  }
  pthread_mutex_unlock(&g->mu);
}

int il_guard_active(il_guard *g) {
  pthread_mutex_lock(&g->mu);
  int n = g->active;
  pthread_mutex_unlock(&g->mu);
  return n;
}

uint64_t il_guard_dropped(il_guard *g, il_guard_drop why) {
  if (why >= IL_GUARD_DROP_COUNT) return 0;
  pthread_mutex_lock(&g->mu);
  uint64_t n = g->dropped[why];
  pthread_mutex_unlock(&g->mu);
  return n;
}
