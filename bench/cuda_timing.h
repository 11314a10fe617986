/* bench/cuda_timing: what the CUDA benchmarks share: a call timed between two device events,
 * and the device-to-device copy rate they quote every figure against. The including file
 * defines CHECK (print and exit on a failed status) before including this. */
#ifndef IL_BENCH_CUDA_TIMING_H
#define IL_BENCH_CUDA_TIMING_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* Seconds per call of fn(arg), the mean of reps calls between two events, after a warm-up
 * call (JIT, cuBLAS heuristics, workspace). */
static double il_bench_timed(il_backend *b, void (*fn)(void *), void *arg, int reps) {
  const il_backend_ops *o = b->ops;
  il_event *e0, *e1;
  fn(arg);
  CHECK(o->sync(b));
  CHECK(o->event_record(b, &e0));
  for (int i = 0; i < reps; i++) fn(arg);
  CHECK(o->event_record(b, &e1));
  double s;
  CHECK(o->event_elapsed(b, e0, e1, &s));
  o->event_free(b, e0);
  o->event_free(b, e1);
  CHECK(o->sync(b));
  return s / reps;
}

typedef struct {
  il_backend *b;
  il_tensor dst, src;
} il_bench_copy_arg;

static void il_bench_do_copy(void *p) {
  il_bench_copy_arg *c = p;
  CHECK(c->b->ops->copy(c->b, c->dst, c->src));
}

/* The best of `rounds` device-to-device copies of n_floats F32 values, in GB/s (read + write). */
static double il_bench_copy_gbs(il_backend *b, int64_t n_floats, int rounds) {
  il_bench_copy_arg c = {.b = b};
  CHECK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, n_floats, IL_DTYPE_F32, "copy src", &c.src));
  CHECK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, n_floats, IL_DTYPE_F32, "copy dst", &c.dst));
  double best = 1e30;
  for (int i = 0; i < rounds; i++) {
    const double t = il_bench_timed(b, il_bench_do_copy, &c, 1);
    best = t < best ? t : best;
  }
  il_backend_tensor_free(b, &c.src);
  il_backend_tensor_free(b, &c.dst);
  return 2.0 * (double)n_floats * 4 / best / 1e9;
}

#endif
