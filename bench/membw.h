/* bench/membw: measured host memory read bandwidth, the roofline the benchmarks divide by.
 *
 * A STREAM-style read: each thread sums its own slice of a buffer much larger than the caches,
 * with independent accumulators, best of several passes. The result is what this machine can
 * read from DRAM right now, measured in the same run as the benchmark it normalises.
 * Header-only so each benchmark program can include it.
 */
#ifndef IL_BENCH_MEMBW_H
#define IL_BENCH_MEMBW_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

typedef struct {
  const uint64_t *p;
  size_t n;
  uint64_t sum;
} il__bw_slice;

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t il__bw_sum_avx2(const uint64_t *p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 12)));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  uint64_t out[4];
  _mm256_storeu_si256((__m256i *)out, a);
  uint64_t s = out[0] + out[1] + out[2] + out[3];
  for (; i < n; i++) s += p[i];
  return s;
}
#endif

static void *il__bw_worker(void *arg) {
  il__bw_slice *s = arg;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    s->sum = il__bw_sum_avx2(s->p, s->n);
    return NULL;
  }
#endif
  uint64_t a = 0, b = 0;
  for (size_t i = 0; i + 1 < s->n; i += 2) a += s->p[i], b += s->p[i + 1];
  s->sum = a + b;
  return NULL;
}

/* Best read bandwidth in bytes/s over `passes` passes of `bytes` with n_threads threads.
 * Returns 0 when the buffer cannot be allocated. */
static double il_bench_read_bandwidth(int n_threads, size_t bytes, int passes) {
  uint64_t *buf = aligned_alloc(64, bytes);
  if (!buf) return 0;
  size_t n = bytes / 8;
  for (size_t i = 0; i < n; i++) buf[i] = i;
  double best = 0;
  pthread_t th[64];
  il__bw_slice sl[64];
  if (n_threads > 64) n_threads = 64;
  size_t per = (n / (size_t)n_threads) & ~(size_t)15;
  for (int p = 0; p < passes; p++) {
    double t0 = il_time_now();
    for (int t = 0; t < n_threads; t++) {
      sl[t] = (il__bw_slice){buf + (size_t)t * per, per, 0};
      if (t) pthread_create(&th[t], NULL, il__bw_worker, &sl[t]);
    }
    il__bw_worker(&sl[0]);
    for (int t = 1; t < n_threads; t++) pthread_join(th[t], NULL);
    double dt = il_time_now() - t0;
    volatile uint64_t sink = 0;
    for (int t = 0; t < n_threads; t++) sink += sl[t].sum;
    (void)sink;
    double bw = (double)(per * (size_t)n_threads * 8) / dt;
    if (bw > best) best = bw;
  }
  free(buf);
  return best;
}

#endif
