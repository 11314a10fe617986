/* bench/bench_alloc: the caching allocator (memory/caching) against malloc and against itself
 * without caching.
 *
 * Part 1, speed: alloc/free pairs per second. A window of 64 live allocations; each pair
 * frees the oldest and allocates the next size from a fixed-seed list, for two size mixes
 * ("small": 1 B - 64 KiB; "mixed": 60% up to 64 KiB, 25% up to 1 MiB, 12% 1-12 MiB, 3%
 * 12-40 MiB). Three contestants in the same run: malloc/free, the caching allocator over
 * malloc'd segments, and the same in no-cache mode (one malloc per request, the way a device
 * without a caching allocator pays cudaMalloc every time). Memory is never touched.
 *
 * Part 2, memory: a serving-like trace from a fixed seed. Sequences arrive (on average one
 * every 1/rate steps) with a prompt of mixed length (50% 16-256, 35% 256-1024, 15% 1024-4096
 * tokens) and an output of 16-512 tokens; at most 32 run at once, the rest queue. Admission
 * allocates the sequence's KV buffer ((prompt + output) x 32 KiB: Llama-3.2-1B's 16 layers x
 * 512 KV dims x K and V x f16). Each step processes up to 512 tokens (one per decoding
 * sequence, prompt chunks for the rest) and allocates three activation buffers sized from the
 * step (hidden: tokens x 8 KiB, FFN: tokens x 64 KiB, logits: sequences x 501 KiB), freed at
 * the end of the step; a finished sequence frees its KV. Weights are left out: they are
 * allocated once and never churn. The trace runs over a counting device that hands out
 * addresses without memory, so GiB-sized traces cost nothing; it is replayed with caching and
 * without, first with no cap, then with a cap of 1.1 x the peak allocated bytes (a KV that
 * does not fit makes its sequence wait; activations that do not fit skip the step).
 * Usage: bench_alloc [--iters N] [--steps N] [--seed S] [--rate R] [--svg PATH] [--json PATH]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/timer.h"
#include "memory/caching.h"
#include "lab/memmap.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ---- part 1: pairs per second ------------------------------------------------------------ */

static il_status malloc_seg_alloc(void *ctx, size_t bytes, void **base) {
  (void)ctx;
  *base = malloc(bytes);
  return *base ? IL_OK : il_error(IL_ERR_OOM, "malloc(%zu) failed", bytes);
}

static void malloc_seg_free(void *ctx, void *base, size_t bytes) {
  (void)ctx;
  (void)bytes;
  free(base);
}

#define WINDOW 64

static double run_malloc(const size_t *sizes, size_t n, long iters) {
  void *live[WINDOW] = {0};
  uintptr_t sink = 0;
  double t0 = il_time_now();
  for (long i = 0; i < iters; i++) {
    int k = (int)(i % WINDOW);
    free(live[k]);
    live[k] = malloc(sizes[(size_t)i % n]);
    sink ^= (uintptr_t)live[k];
  }
  double t = il_time_now() - t0;
  for (int k = 0; k < WINDOW; k++) free(live[k]);
  if (sink == 1) printf(" ");
  return t;
}

static double run_caching(const size_t *sizes, size_t n, long iters, bool no_cache, uint64_t *seg_allocs) {
  il_caching_opts o = {.name = "bench", .seg_alloc = malloc_seg_alloc, .seg_free = malloc_seg_free,
                       .no_cache = no_cache};
  il_caching *a;
  if (il_caching_new(&o, &a) != IL_OK) return -1;
  il_caching_block *live[WINDOW] = {0};
  double t0 = il_time_now();
  for (long i = 0; i < iters; i++) {
    int k = (int)(i % WINDOW);
    il_caching_free(a, live[k]);
    if (il_caching_alloc(a, IL_MEM_ACTIVATIONS, sizes[(size_t)i % n], "x", &live[k]) != IL_OK) {
      fprintf(stderr, "bench_alloc: %s\n", il_error_detail());
      live[k] = NULL;
    }
  }
  double t = il_time_now() - t0;
  for (int k = 0; k < WINDOW; k++) il_caching_free(a, live[k]);
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  *seg_allocs = st.total.segment_allocs;
  il_caching_destroy(a);
  return t;
}

static size_t mixed_size(uint64_t *rng) {
  uint64_t r = rng_next(rng) % 100, u = rng_next(rng);
  if (r < 60) return 1 + u % (64 * KiB);
  if (r < 85) return 64 * KiB + u % (960 * KiB);
  if (r < 97) return MiB + u % (11 * MiB);
  return 12 * MiB + u % (28 * MiB);
}

static void part_speed(long iters, uint64_t seed, il_jsonw *w) {
  enum { N = 1 << 14 };
  static size_t sizes[N];
  static const char *mixes[] = {"small", "mixed"};
  printf("alloc/free pairs per second (window %d, %ld pairs; ratio = pairs/s over malloc's)\n", WINDOW, iters);
  printf("  %-6s %-20s %14s %8s %14s\n", "sizes", "allocator", "pairs/s", "ratio", "segment allocs");
  if (w) {
    il_jsonw_key(w, "speed");
    il_jsonw_arr(w);
  }
  for (int m = 0; m < 2; m++) {
    uint64_t rng = seed;
    for (int i = 0; i < N; i++) sizes[i] = m == 0 ? 1 + rng_next(&rng) % (64 * KiB) : mixed_size(&rng);
    uint64_t segs_c = 0, segs_n = 0;
    run_caching(sizes, N, iters / 10, false, &segs_c); /* warm the heap */
    double tm = run_malloc(sizes, N, iters);
    double tc = run_caching(sizes, N, iters, false, &segs_c);
    double tn = run_caching(sizes, N, iters, true, &segs_n);
    const char *names[3] = {"malloc/free", "caching", "caching, no cache"};
    double ts[3] = {tm, tc, tn};
    long long segs[3] = {-1, (long long)segs_c, (long long)segs_n};
    for (int k = 0; k < 3; k++) {
      char sg[32] = "-";
      if (segs[k] >= 0) snprintf(sg, sizeof sg, "%lld", segs[k]);
      printf("  %-6s %-20s %14.0f %8.2f %14s\n", mixes[m], names[k], iters / ts[k], tm / ts[k], sg);
      if (w) {
        il_jsonw_obj(w);
        il_jsonw_kstr(w, "sizes", mixes[m]);
        il_jsonw_kstr(w, "allocator", names[k]);
        il_jsonw_knum(w, "pairs_per_second", iters / ts[k]);
        il_jsonw_knum(w, "ratio_vs_malloc", tm / ts[k]);
        if (segs[k] >= 0) il_jsonw_kint(w, "segment_allocs", segs[k]);
        il_jsonw_obj_end(w);
      }
    }
  }
  if (w) il_jsonw_arr_end(w);
}

/* ---- part 2: the serving trace ----------------------------------------------------------- */

typedef struct {
  size_t live, peak;
  uint64_t calls;
} count_dev;

static il_status count_alloc(void *ctx, size_t bytes, void **base) {
  count_dev *d = ctx;
  static uintptr_t next = (uintptr_t)1 << 40;
  *base = (void *)next;
  next += bytes + 4096;
  d->live += bytes;
  if (d->live > d->peak) d->peak = d->live;
  d->calls++;
  return IL_OK;
}

static void count_free(void *ctx, void *base, size_t bytes) {
  count_dev *d = ctx;
  (void)base;
  d->live -= bytes;
}

#define MAX_SEQ 32
#define STEP_TOKENS 512
#define KV_PER_TOKEN (32 * KiB)
#define HIDDEN_PER_TOKEN (8 * KiB)
#define FFN_PER_TOKEN (64 * KiB)
#define LOGITS_PER_SEQ ((size_t)128256 * 4)

typedef struct {
  int prompt, output, prefilled, generated;
  il_caching_block *kv;
  int id;
} seq;

typedef struct {
  size_t peak_reserved, peak_allocated, end_reserved, end_allocated;
  double end_fragmentation, max_fragmentation;
  uint64_t segment_allocs, segment_frees, retries, ooms;
  long finished, waits, skipped_steps;
  double seconds; /* in allocator calls */
} trace_result;

static int prompt_len(uint64_t *rng) {
  uint64_t r = rng_next(rng) % 100, u = rng_next(rng);
  if (r < 50) return 16 + (int)(u % 241);
  if (r < 85) return 256 + (int)(u % 769);
  return 1024 + (int)(u % 3073);
}

static trace_result replay(long steps, uint64_t seed, double rate, bool no_cache, size_t cap, const char *svg) {
  trace_result res = {0};
  count_dev dev = {0};
  il_caching_opts o = {.name = no_cache ? "trace-nocache" : "trace", .cap = cap, .seg_alloc = count_alloc,
                       .seg_free = count_free, .ctx = &dev, .no_cache = no_cache};
  il_caching *a;
  if (il_caching_new(&o, &a) != IL_OK) return res;
  uint64_t rng = seed;
  seq queue[4096];
  int nq = 0, qhead = 0, next_id = 0;
  seq run[MAX_SEQ];
  int nr = 0;
  double t_alloc = 0;
  char name[48];
  for (long step = 0; step < steps; step++) {
    /* arrivals: Bernoulli per step with mean `rate`; up to two per step */
    for (int k = 0; k < 2; k++) {
      if ((double)(rng_next(&rng) % 1000000) / 1e6 < rate / 2 && nq < 4096) {
        seq s = {.prompt = prompt_len(&rng), .output = 16 + (int)(rng_next(&rng) % 497), .id = next_id++};
        queue[(qhead + nq++) % 4096] = s;
      }
    }
    /* admission, first come first served: the KV buffer for prompt + output */
    while (nq && nr < MAX_SEQ) {
      seq *s = &queue[qhead];
      snprintf(name, sizeof name, "seq%d.kv", s->id);
      double t0 = il_time_now();
      il_status st = il_caching_alloc(a, IL_MEM_KV, (size_t)(s->prompt + s->output) * KV_PER_TOKEN, name, &s->kv);
      t_alloc += il_time_now() - t0;
      if (st != IL_OK) {
        res.waits++;
        break;
      }
      run[nr++] = *s;
      qhead = (qhead + 1) % 4096;
      nq--;
    }
    if (!nr) continue;
    /* the step's tokens: one per decoding sequence, prompt chunks from what is left */
    int tokens = 0, chunk[MAX_SEQ];
    for (int i = 0; i < nr; i++) {
      chunk[i] = run[i].prefilled == run[i].prompt ? 1 : 0;
      tokens += chunk[i];
    }
    for (int i = 0; i < nr && tokens < STEP_TOKENS; i++) {
      if (run[i].prefilled == run[i].prompt) continue;
      int c = run[i].prompt - run[i].prefilled;
      if (c > STEP_TOKENS - tokens) c = STEP_TOKENS - tokens;
      chunk[i] = c;
      tokens += c;
    }
    il_caching_block *act[3] = {0};
    size_t act_bytes[3] = {(size_t)tokens * HIDDEN_PER_TOKEN, (size_t)tokens * FFN_PER_TOKEN, (size_t)nr * LOGITS_PER_SEQ};
    static const char *act_names[3] = {"hidden", "ffn", "logits"};
    bool ok = true;
    double t0 = il_time_now();
    for (int k = 0; k < 3 && ok; k++) ok = il_caching_alloc(a, IL_MEM_ACTIVATIONS, act_bytes[k], act_names[k], &act[k]) == IL_OK;
    t_alloc += il_time_now() - t0;
    il_caching_stats st;
    il_caching_stats_get(a, &st);
    if (st.fragmentation > res.max_fragmentation) res.max_fragmentation = st.fragmentation;
    t0 = il_time_now();
    for (int k = 2; k >= 0; k--) il_caching_free(a, act[k]);
    t_alloc += il_time_now() - t0;
    if (!ok) {
      res.skipped_steps++;
      continue;
    }
    /* progress; finished sequences leave */
    for (int i = 0; i < nr;) {
      seq *s = &run[i];
      if (s->prefilled < s->prompt) {
        s->prefilled += chunk[i];
        if (s->prefilled == s->prompt) s->generated = 1; /* the last prompt chunk yields a token */
      } else {
        s->generated++;
      }
      if (s->generated >= s->output) {
        t0 = il_time_now();
        il_caching_free(a, s->kv);
        t_alloc += il_time_now() - t0;
        res.finished++;
        run[i] = run[--nr];
      } else {
        i++;
      }
    }
  }
  il_caching_stats st;
  il_caching_stats_get(a, &st);
  res.peak_reserved = st.total.peak_reserved;
  res.peak_allocated = st.total.peak_allocated;
  res.end_reserved = st.total.reserved;
  res.end_allocated = st.total.allocated;
  res.end_fragmentation = st.fragmentation;
  res.segment_allocs = st.total.segment_allocs;
  res.segment_frees = st.total.segment_frees;
  res.retries = st.total.retries;
  res.ooms = st.total.ooms;
  res.seconds = t_alloc;
  if (svg) {
    il_caching_snapshot snap;
    FILE *f = fopen(svg, "w");
    if (f && il_caching_snapshot_take(a, &snap) == IL_OK) {
      il_memmap_svg(&snap, f, "trace-map", 0);
      il_caching_snapshot_free(&snap);
    }
    if (f) fclose(f);
    if (!f) fprintf(stderr, "bench_alloc: cannot write %s\n", svg);
  }
  for (int i = 0; i < nr; i++) il_caching_free(a, run[i].kv);
  il_caching_destroy(a);
  return res;
}

static void print_trace(const char *label, const trace_result *r, il_jsonw *w) {
  double mib = (double)MiB;
  printf("  %-22s %9.1f %9.1f %6.3f %9.1f %9.1f %6.1f%% %6.1f%% %8llu %8llu %6llu %5llu %7ld %6ld %6ld %8.2f\n", label,
         r->peak_reserved / mib, r->peak_allocated / mib, (double)r->peak_reserved / (double)r->peak_allocated,
         r->end_reserved / mib, r->end_allocated / mib, r->end_fragmentation * 100, r->max_fragmentation * 100,
         (unsigned long long)r->segment_allocs, (unsigned long long)r->segment_frees, (unsigned long long)r->retries,
         (unsigned long long)r->ooms, r->finished, r->waits, r->skipped_steps, r->seconds * 1e3);
  if (w) {
    il_jsonw_obj(w);
    il_jsonw_kstr(w, "run", label);
    il_jsonw_kint(w, "peak_reserved", (long long)r->peak_reserved);
    il_jsonw_kint(w, "peak_allocated", (long long)r->peak_allocated);
    il_jsonw_kint(w, "end_reserved", (long long)r->end_reserved);
    il_jsonw_kint(w, "end_allocated", (long long)r->end_allocated);
    il_jsonw_knum(w, "end_fragmentation", r->end_fragmentation);
    il_jsonw_knum(w, "max_fragmentation", r->max_fragmentation);
    il_jsonw_kint(w, "segment_allocs", (long long)r->segment_allocs);
    il_jsonw_kint(w, "segment_frees", (long long)r->segment_frees);
    il_jsonw_kint(w, "retries", (long long)r->retries);
    il_jsonw_kint(w, "ooms", (long long)r->ooms);
    il_jsonw_kint(w, "finished", r->finished);
    il_jsonw_kint(w, "kv_waits", r->waits);
    il_jsonw_kint(w, "skipped_steps", r->skipped_steps);
    il_jsonw_knum(w, "allocator_seconds", r->seconds);
    il_jsonw_obj_end(w);
  }
}

static void usage(void) {
  printf("usage: bench_alloc [--iters N] [--steps N] [--seed S] [--rate R] [--svg PATH] [--json PATH]\n"
         "  --iters N   alloc/free pairs per contestant (default 1000000)\n"
         "  --steps N   steps of the serving trace (default 20000)\n"
         "  --seed S    seed of sizes and trace (default 42)\n"
         "  --rate R    mean arrivals per step (default 0.08)\n"
         "  --svg PATH  memory map of the caching allocator at the end of the uncapped trace\n"
         "  --json PATH every figure as one JSON document\n");
}

int main(int argc, char **argv) {
  long iters = 1000000, steps = 20000;
  uint64_t seed = 42;
  double rate = 0.08;
  const char *svg = NULL, *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage();
      return 0;
    } else if (v && !strcmp(argv[i], "--iters")) iters = atol(v), i++;
    else if (v && !strcmp(argv[i], "--steps")) steps = atol(v), i++;
    else if (v && !strcmp(argv[i], "--seed")) seed = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(argv[i], "--rate")) rate = atof(v), i++;
    else if (v && !strcmp(argv[i], "--svg")) svg = v, i++;
    else if (v && !strcmp(argv[i], "--json")) json = v, i++;
    else {
      fprintf(stderr, "bench_alloc: unknown or incomplete option '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  if (iters < WINDOW || steps < 1 || !(rate > 0 && rate <= 2) || !seed) {
    fprintf(stderr, "bench_alloc: need --iters >= %d, --steps >= 1, 0 < --rate <= 2, --seed != 0\n", WINDOW);
    return 2;
  }
  FILE *jf = NULL;
  il_jsonw jw, *w = NULL;
  if (json) {
    jf = fopen(json, "w");
    if (!jf) {
      fprintf(stderr, "bench_alloc: cannot write %s\n", json);
      return 1;
    }
    il_jsonw_init(&jw, jf, true);
    w = &jw;
    il_jsonw_obj(w);
    il_jsonw_kint(w, "iters", iters);
    il_jsonw_kint(w, "steps", steps);
    il_jsonw_kint(w, "seed", (long long)seed);
    il_jsonw_knum(w, "rate", rate);
  }
  part_speed(iters, seed, w);

  printf("\nserving-like trace: %ld steps, %.3f arrivals/step, seed %llu (MiB; frag = fragmentation; "
         "alloc ms = time in allocator calls)\n",
         steps, rate, (unsigned long long)seed);
  printf("  %-22s %9s %9s %6s %9s %9s %7s %7s %8s %8s %6s %5s %7s %6s %6s %8s\n", "run", "peak res", "peak all",
         "ratio", "end res", "end all", "frag", "max frg", "seg allc", "seg free", "retry", "oom", "done",
         "waits", "skips", "alloc ms");
  if (w) {
    il_jsonw_key(w, "trace");
    il_jsonw_arr(w);
  }
  trace_result c = replay(steps, seed, rate, false, 0, svg);
  trace_result n = replay(steps, seed, rate, true, 0, NULL);
  print_trace("caching", &c, w);
  print_trace("no cache", &n, w);
  size_t cap = (size_t)(1.1 * (double)n.peak_allocated);
  char label[64];
  snprintf(label, sizeof label, "caching, cap %.0f MiB", cap / (double)MiB);
  trace_result cc = replay(steps, seed, rate, false, cap, NULL);
  print_trace(label, &cc, w);
  snprintf(label, sizeof label, "no cache, cap %.0f MiB", cap / (double)MiB);
  trace_result nc = replay(steps, seed, rate, true, cap, NULL);
  print_trace(label, &nc, w);
  if (w) {
    il_jsonw_arr_end(w);
    il_jsonw_obj_end(w);
    il_status st = il_jsonw_finish(w);
    if (fclose(jf) != 0 || st != IL_OK) {
      fprintf(stderr, "bench_alloc: writing %s failed\n", json);
      return 1;
    }
  }
  return 0;
}
