/* sys/pool: spin-then-sleep worker pool with a sense-reversing barrier. */
#include "sys/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "memory/mem.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IL__PAUSE() _mm_pause()
#else
#define IL__PAUSE() ((void)0)
#endif

#define IL__SPIN_ROUNDS 20000 /* idle worker: rounds of spinning before it sleeps */
#define IL__PAUSE_ROUNDS 1024 /* then yield the core: another thread of ours may need it */

/* One round of a spin-wait: pause while the wait is short, then give the core away, so an
 * oversubscribed machine (a compile next to us, CI running tests in parallel) still makes
 * progress instead of spinning against the thread it waits for. */
static inline void il__spin(int *rounds) {
  if (++*rounds < IL__PAUSE_ROUNDS) IL__PAUSE();
  else sched_yield();
}

struct il_pool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic unsigned long gen; /* bumped once per task */
  _Atomic int pending;       /* workers still running the current task */
  _Atomic int stop;
  il_pool_fn fn;
  void *ctx;
  /* barrier */
  _Atomic int bar_count;
  _Atomic int bar_sense;
};

typedef struct {
  il_pool *pool;
  int ith;
} il__worker_arg;

static void *il__worker(void *p) {
  il__worker_arg *arg = p;
  il_pool *pool = arg->pool;
  int ith = arg->ith;
  il_mem_free(arg);
  unsigned long seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&pool->gen, memory_order_acquire) == seen) {
      if (spins < IL__SPIN_ROUNDS) {
        il__spin(&spins);
        continue;
      }
      pthread_mutex_lock(&pool->mu);
      while (atomic_load(&pool->gen) == seen) pthread_cond_wait(&pool->cv, &pool->mu);
      pthread_mutex_unlock(&pool->mu);
    }
    seen = atomic_load(&pool->gen);
    if (atomic_load(&pool->stop)) return NULL;
    pool->fn(pool->ctx, ith, pool->n);
    atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
  }
}

int il_pool_default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

il_status il_pool_new(int n_threads, il_pool **out) {
  *out = NULL;
  if (n_threads <= 0) n_threads = il_pool_default_threads();
  il_pool *pool = il_mem_calloc(IL_MEM_OTHER, sizeof *pool, "thread pool");
  if (!pool) return IL_ERR_OOM;
  pool->n = n_threads;
  pthread_mutex_init(&pool->mu, NULL);
  pthread_cond_init(&pool->cv, NULL);
  pool->threads = il_mem_calloc(IL_MEM_OTHER, sizeof(pthread_t) * (size_t)n_threads, "thread pool");
  if (!pool->threads) {
    il_mem_free(pool);
    return IL_ERR_OOM;
  }
  for (int i = 1; i < n_threads; i++) {
    il__worker_arg *arg = il_mem_alloc(IL_MEM_OTHER, sizeof *arg, "thread pool");
    if (arg) *arg = (il__worker_arg){pool, i};
    if (!arg || pthread_create(&pool->threads[i], NULL, il__worker, arg) != 0) {
      il_mem_free(arg);
      pool->n = i; /* join the ones that started */
      il_pool_free(pool);
      return arg ? il_error(IL_ERR_INTERNAL, "thread pool: cannot start thread %d of %d", i, n_threads) : IL_ERR_OOM;
    }
  }
  *out = pool;
  return IL_OK;
}

void il_pool_free(il_pool *pool) {
  if (!pool) return;
  atomic_store(&pool->stop, 1);
  pthread_mutex_lock(&pool->mu);
  atomic_fetch_add(&pool->gen, 1);
  pthread_cond_broadcast(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
  pthread_mutex_destroy(&pool->mu);
  pthread_cond_destroy(&pool->cv);
  il_mem_free(pool->threads);
  il_mem_free(pool);
}

int il_pool_size(const il_pool *pool) { return pool->n; }

void il_pool_run(il_pool *pool, il_pool_fn fn, void *ctx) {
  if (pool->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  pool->fn = fn;
  pool->ctx = ctx;
  atomic_store(&pool->pending, pool->n - 1);
  pthread_mutex_lock(&pool->mu);
  atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
  pthread_cond_broadcast(&pool->cv);
  pthread_mutex_unlock(&pool->mu);
  fn(ctx, 0, pool->n);
  int spins = 0;
  while (atomic_load_explicit(&pool->pending, memory_order_acquire) != 0) il__spin(&spins);
}

void il_pool_barrier(il_pool *pool) {
  if (pool->n == 1) return;
  int sense = atomic_load_explicit(&pool->bar_sense, memory_order_relaxed);
  if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == pool->n - 1) {
    atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->bar_sense, !sense, memory_order_release);
  } else {
    int spins = 0;
    while (atomic_load_explicit(&pool->bar_sense, memory_order_acquire) == sense) il__spin(&spins);
  }
}
