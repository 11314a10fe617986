/* sys/membw: the read-bandwidth measurement. */
#include "sys/membw.h"

#include <stdint.h>

#include "sys/cpuid.h"
#include "sys/pool.h"
#include "core/timer.h"
#include "memory/mem.h"

typedef struct {
  const uint64_t *buf;
  size_t n;         /* uint64 words */
  uint64_t sums[64]; /* one per thread, so the sums are not optimised away */
} il__bw_task;

/* Slice [a, b) of thread ith, aligned down to `align` words. */
static void il__slice(const il__bw_task *t, int ith, int nth, size_t align, size_t *a, size_t *b) {
  *a = (t->n * (size_t)ith / (size_t)nth) & ~(align - 1);
  *b = (t->n * (size_t)(ith + 1) / (size_t)nth) & ~(align - 1);
}

static void il__bw_scalar(void *p, int ith, int nth) {
  il__bw_task *t = p;
  size_t a, b;
  il__slice(t, ith, nth, 8, &a, &b);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = a; i < b; i += 4) s0 += t->buf[i], s1 += t->buf[i + 1], s2 += t->buf[i + 2], s3 += t->buf[i + 3];
  t->sums[ith & 63] = s0 + s1 + s2 + s3;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* Four 64-byte loads per iteration into independent accumulators, and a software prefetch
 * 4 KiB ahead: the matmul kernels prefetch too, and without it one core's demand misses alone
 * do not keep enough lines in flight to reach the memory's rate. */
__attribute__((target("avx512f"))) static void il__bw_avx512(void *p, int ith, int nth) {
  il__bw_task *t = p;
  size_t a, b;
  il__slice(t, ith, nth, 32, &a, &b);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = a; i < b; i += 32) {
    _mm_prefetch((const char *)(t->buf + i) + 4096, _MM_HINT_T0);
    _mm_prefetch((const char *)(t->buf + i) + 4096 + 64, _MM_HINT_T0);
    _mm_prefetch((const char *)(t->buf + i) + 4096 + 128, _MM_HINT_T0);
    _mm_prefetch((const char *)(t->buf + i) + 4096 + 192, _MM_HINT_T0);
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(t->buf + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(t->buf + i + 8));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(t->buf + i + 16));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(t->buf + i + 24));
  }
  t->sums[ith & 63] = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

__attribute__((target("avx2"))) static void il__bw_avx2(void *p, int ith, int nth) {
  il__bw_task *t = p;
  size_t a, b;
  il__slice(t, ith, nth, 8, &a, &b);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  for (size_t i = a; i < b; i += 8) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(t->buf + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(t->buf + i + 4)));
  }
  s0 = _mm256_add_epi64(s0, s1);
  t->sums[ith & 63] = (uint64_t)(_mm256_extract_epi64(s0, 0) + _mm256_extract_epi64(s0, 1) +
                                 _mm256_extract_epi64(s0, 2) + _mm256_extract_epi64(s0, 3));
}
#endif

il_status il_membw_init(il_membw *m, size_t bytes) {
  if (bytes < ((size_t)64 << 20)) bytes = (size_t)64 << 20;
  m->bytes = bytes;
  m->buf = il_mem_alloc(IL_MEM_WORKSPACE, bytes, "bandwidth buffer");
  if (!m->buf) return IL_ERR_OOM;
  for (size_t i = 0; i < bytes / 8; i++) m->buf[i] = i; /* touch every page before timing */
  return IL_OK;
}

void il_membw_free(il_membw *m) {
  il_mem_free(m->buf);
  m->buf = NULL;
}

double il_membw_pass(il_membw *m, il_pool *pool) {
  il__bw_task t = {.buf = m->buf, .n = m->bytes / 8};
  il_pool_fn fn = il__bw_scalar;
#if defined(__x86_64__)
  if (il_cpu_isa_detected() >= IL_ISA_AVX2) fn = il__bw_avx2;
  if (il_cpu_isa_detected() >= IL_ISA_AVX512) fn = il__bw_avx512;
#endif
  double t0 = il_time_now();
  il_pool_run(pool, fn, &t);
  double dt = il_time_now() - t0;
  volatile uint64_t sink = 0;
  for (int i = 0; i < 64; i++) sink += t.sums[i];
  (void)sink;
  return dt > 0 ? (double)m->bytes / dt / 1e9 : 0;
}

il_status il_cpu_read_bandwidth(int n_threads, size_t bytes, int ms, double *gbps) {
  *gbps = 0;
  il_pool *pool = NULL;
  IL_TRY(il_pool_new(n_threads, &pool));
  il_membw m;
  il_status st = il_membw_init(&m, bytes);
  if (st != IL_OK) {
    il_pool_free(pool);
    return st;
  }
  double best = 0, start = il_time_now(), limit = (ms > 0 ? ms : 200) * 1e-3;
  int passes = 0;
  do {
    double g = il_membw_pass(&m, pool);
    if (g > best) best = g;
    passes++;
  } while (il_time_now() - start < limit || passes < 2);
  il_membw_free(&m);
  il_pool_free(pool);
  *gbps = best;
  return IL_OK;
}
