/* bench/bench_matmul: how close the CPU matmul kernels get to the memory-bandwidth roofline.
 *
 * 1. Read bandwidth: a STREAM-like sum over a 1 GiB buffer (8-byte, 32-byte and 64-byte loads;
 *    the widest reads ~30% more), 1 thread and all threads, best of several passes. This is
 *    the roofline for generation; it is measured again before every GEMV pass, and each type
 *    is compared with the best of those interleaved passes (the VM's bandwidth drifts).
 * 2. GEMV (one token) per weight type on the matrices of Llama-3.2-1B-shaped layers (q, k, v,
 *    o: 2048x2048 / 512x2048; gate, up 8192x2048; down 2048x8192) repeated for as many layers
 *    as fit in ~1 GiB, plus the 32000x2048 output matrix, so caches cannot hold the weights.
 *    Prints achieved GB/s of weight bytes and the percentage of the measured bandwidth, per
 *    shape and for the whole pass.
 * 3. GEMM (512 tokens) on one layer: GFLOP/s and time per token against the GEMV time per
 *    token on the same layer.
 * 4. Each SIMD level against scalar on one 2048x2048 matrix (1 thread).
 * Usage: bench_matmul [--types f16,q4_0,...] [--no-gemm] [--no-levels] [--no-bw] [--passes N]
 * Run it on an idle machine (`uptime` load < 0.5) and repeat: VMs are noisy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "core/quant.h"
#include "memory/mem.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)(rng_state >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static void *xalloc(size_t n, const char *what) {
  void *p = il_mem_alloc(IL_MEM_OTHER, n, what);
  if (!p) {
    fprintf(stderr, "bench_matmul: %s\n", il_error_detail());
    exit(1);
  }
  return p;
}

/* ---------------------------------------------------------------- bandwidth */

typedef struct {
  const uint64_t *buf;
  size_t n;
  uint64_t sums[64];
} bw_task;

static void bw_run(void *p, int ith, int nth) {
  bw_task *t = p;
  const size_t a = t->n * (size_t)ith / (size_t)nth, b = t->n * (size_t)(ith + 1) / (size_t)nth;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (size_t i = a; i + 8 <= b; i += 8) {
    s0 += t->buf[i];
    s1 += t->buf[i + 1];
    s2 += t->buf[i + 2];
    s3 += t->buf[i + 3];
    s4 += t->buf[i + 4];
    s5 += t->buf[i + 5];
    s6 += t->buf[i + 6];
    s7 += t->buf[i + 7];
  }
  t->sums[ith & 63] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same sum with 64-byte loads: a plain 8-byte-load loop under-reports the bandwidth a
 * vector kernel can reach by ~30% on Sapphire Rapids, so the roofline is the better of both. */
__attribute__((target("avx512f"))) static void bw_run512(void *p, int ith, int nth) {
  bw_task *t = p;
  const size_t a = (t->n * (size_t)ith / (size_t)nth) & ~(size_t)15, b = (t->n * (size_t)(ith + 1) / (size_t)nth) & ~(size_t)15;
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  for (size_t i = a; i < b; i += 16) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(t->buf + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(t->buf + i + 8));
  }
  t->sums[ith & 63] = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(s0, s1));
}
__attribute__((target("avx2"))) static void bw_run256(void *p, int ith, int nth) {
  bw_task *t = p;
  const size_t a = (t->n * (size_t)ith / (size_t)nth) & ~(size_t)7, b = (t->n * (size_t)(ith + 1) / (size_t)nth) & ~(size_t)7;
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  for (size_t i = a; i < b; i += 8) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(t->buf + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(t->buf + i + 4)));
  }
  s0 = _mm256_add_epi64(s0, s1);
  t->sums[ith & 63] = (uint64_t)(_mm256_extract_epi64(s0, 0) + _mm256_extract_epi64(s0, 1) + _mm256_extract_epi64(s0, 2) +
                                 _mm256_extract_epi64(s0, 3));
}
#endif

/* One pass of the widest loop the CPU can run (for measurements interleaved with GEMV passes). */
static double measure_bw_once(il_pool *pool, const uint64_t *buf, size_t bytes) {
  bw_task t = {.buf = buf, .n = bytes / 8};
  il_pool_fn fn = bw_run;
#if defined(__x86_64__)
  if (il_cpu_isa_detected() >= IL_ISA_AVX2) fn = bw_run256;
  if (il_cpu_isa_detected() >= IL_ISA_AVX512) fn = bw_run512;
#endif
  double t0 = now();
  il_pool_run(pool, fn, &t);
  return (double)bytes / (now() - t0) / 1e9;
}

/* Best of 5 passes of each loop the CPU can run. */
static double measure_bw(il_pool *pool, const uint64_t *buf, size_t bytes) {
  bw_task t = {.buf = buf, .n = bytes / 8};
  il_pool_fn fns[3] = {bw_run, NULL, NULL};
#if defined(__x86_64__)
  if (il_cpu_isa_detected() >= IL_ISA_AVX2) fns[1] = bw_run256;
  if (il_cpu_isa_detected() >= IL_ISA_AVX512) fns[2] = bw_run512;
#endif
  double best = 0;
  for (int f = 0; f < 3; f++) {
    if (!fns[f]) continue;
    for (int rep = 0; rep < 5; rep++) {
      double t0 = now();
      il_pool_run(pool, fns[f], &t);
      double dt = now() - t0;
      if (bytes / dt > best) best = (double)bytes / dt;
    }
  }
  return best / 1e9;
}

/* ---------------------------------------------------------------- model-shaped weights */

typedef struct {
  const char *name;
  int64_t n_out, n_in;
} shape;

static const shape layer_shapes[] = {
    {"q 2048x2048", 2048, 2048},  {"k 512x2048", 512, 2048},     {"v 512x2048", 512, 2048},
    {"o 2048x2048", 2048, 2048},  {"gate 8192x2048", 8192, 2048}, {"up 8192x2048", 8192, 2048},
    {"down 2048x8192", 2048, 8192},
};
#define N_SHAPES 7
static const shape out_shape = {"out 32000x2048", 32000, 2048};

/* Fills a buffer with valid data of type t by tiling a 1 MiB pattern (quantized random floats,
 * or random bytes with fixed scales for the K-quants), so fp16 scales are normal numbers. */
static void fill_weights(il_dtype t, uint8_t *dst, size_t bytes) {
  static uint8_t pattern[1 << 20];
  static il_dtype pattern_type = IL_DTYPE_COUNT;
  const il_dtype_info *ti = il_dtype_get(t);
  const int64_t n = 1 << 18; /* elements in the pattern: whole blocks for every type */
  const size_t pbytes = il_dtype_row_size(t, n);
  if (pattern_type != t) {
    if (il_quantize_supported(t)) {
      float *f = xalloc(sizeof(float) * (size_t)n, "pattern");
      for (int64_t i = 0; i < n; i++) f[i] = frand();
      il_quantize_row(t, f, pattern, n);
      il_mem_free(f);
    } else {
      for (size_t i = 0; i < pbytes; i++) pattern[i] = (uint8_t)(frand() * 127 + 128);
      const uint16_t d = il_f32_to_fp16(0.01f), dm = il_f32_to_fp16(0.002f);
      for (size_t b = 0; b < pbytes / ti->size; b++) {
        uint8_t *blk = pattern + b * ti->size;
        if (t == IL_DTYPE_Q6_K) memcpy(blk + offsetof(il_block_q6_K, d), &d, 2);
        else {
          memcpy(blk, &d, 2);
          memcpy(blk + 2, &dm, 2);
        }
      }
    }
    pattern_type = t;
  }
  for (size_t o = 0; o < bytes; o += pbytes) memcpy(dst + o, pattern, bytes - o < pbytes ? bytes - o : pbytes);
}

typedef struct {
  il_dtype t;
  int n_layers;
  uint8_t *w[32][N_SHAPES];
  uint8_t *out;
  size_t layer_bytes, total_bytes;
} model;

static size_t mat_bytes(il_dtype t, shape s) { return il_dtype_row_size(t, s.n_in) * (size_t)s.n_out; }

static void model_build(model *m, il_dtype t, size_t budget, int max_layers) {
  memset(m, 0, sizeof *m);
  m->t = t;
  for (int s = 0; s < N_SHAPES; s++) m->layer_bytes += mat_bytes(t, layer_shapes[s]);
  const size_t outb = mat_bytes(t, out_shape);
  m->n_layers = budget > outb ? (int)((budget - outb) / m->layer_bytes) : 1;
  if (m->n_layers < 1) m->n_layers = 1;
  if (m->n_layers > max_layers) m->n_layers = max_layers;
  for (int l = 0; l < m->n_layers; l++)
    for (int s = 0; s < N_SHAPES; s++) {
      m->w[l][s] = xalloc(mat_bytes(t, layer_shapes[s]), "weights");
      fill_weights(t, m->w[l][s], mat_bytes(t, layer_shapes[s]));
    }
  m->out = xalloc(outb, "output weights");
  fill_weights(t, m->out, outb);
  m->total_bytes = m->layer_bytes * (size_t)m->n_layers + outb;
}

static void model_free(model *m) {
  for (int l = 0; l < m->n_layers; l++)
    for (int s = 0; s < N_SHAPES; s++) il_mem_free(m->w[l][s]);
  il_mem_free(m->out);
}

static void mm(il_pool *pool, il_dtype t, const uint8_t *w, shape s, const float *x, int64_t n_tok, float *y,
               void *work) {
  il_status st = il_cpu_matmul(pool, t, w, il_dtype_row_size(t, s.n_in), s.n_out, s.n_in, x, n_tok, y, s.n_out, work);
  if (st != IL_OK) {
    fprintf(stderr, "bench_matmul: %s: %s\n", il_status_name(st), il_error_detail());
    exit(1);
  }
}

/* One generation pass over the whole model; per-shape seconds accumulate into sec[]. */
static double gemv_pass(il_pool *pool, const model *m, const float *x, float *y, void *work, double sec[N_SHAPES + 1]) {
  const double t0 = now();
  for (int l = 0; l < m->n_layers; l++)
    for (int s = 0; s < N_SHAPES; s++) {
      const double a = now();
      mm(pool, m->t, m->w[l][s], layer_shapes[s], x, 1, y, work);
      sec[s] += now() - a;
    }
  const double a = now();
  mm(pool, m->t, m->out, out_shape, x, 1, y, work);
  sec[N_SHAPES] += now() - a;
  return now() - t0;
}

int main(int argc, char **argv) {
  il_dtype types[16] = {IL_DTYPE_F16, IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                        IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q6_K};
  int n_types = 7, passes = 5, do_gemm = 1, do_levels = 1, do_bw = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--types") && i + 1 < argc) {
      n_types = 0;
      char *list = argv[++i];
      for (char *tok = strtok(list, ","); tok && n_types < 16; tok = strtok(NULL, ","))
        if (!il_dtype_parse(tok, &types[n_types++])) {
          fprintf(stderr, "bench_matmul: unknown type '%s'\n", tok);
          return 2;
        }
    } else if (!strcmp(argv[i], "--passes") && i + 1 < argc) passes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-gemm")) do_gemm = 0;
    else if (!strcmp(argv[i], "--no-levels")) do_levels = 0;
    else if (!strcmp(argv[i], "--no-bw")) do_bw = 0;
    else {
      fprintf(stderr, "usage: bench_matmul [--types f16,q4_0,...] [--passes N] [--no-gemm] [--no-levels] [--no-bw]\n");
      return 2;
    }
  }
  FILE *lf = fopen("/proc/loadavg", "r");
  char load[64] = "?";
  if (lf) {
    if (!fgets(load, sizeof load, lf)) strcpy(load, "?");
    fclose(lf);
    load[strcspn(load, "\n")] = 0;
  }
  const int nth = il_pool_default_threads();
  il_pool *pool1, *pooln;
  if (il_pool_new(1, &pool1) != IL_OK || il_pool_new(nth, &pooln) != IL_OK) return 1;
  printf("isa %s (compiled %s), %d threads, loadavg %s\n", il_isa_name(il_cpu_isa()), il_cpu_isa_compiled(), nth, load);

  /* The roofline is the best bandwidth seen during the whole run: measured at the start and
   * again before each type, because on a shared VM the available bandwidth drifts. */
  double bw1 = 0, bwn = 0;
  const size_t bw_bytes = (size_t)1 << 30;
  uint64_t *bw_buf = NULL;
  if (do_bw) {
    bw_buf = xalloc(bw_bytes, "bandwidth buffer");
    for (size_t i = 0; i < bw_bytes / 8; i++) bw_buf[i] = i;
    bw1 = measure_bw(pool1, bw_buf, bw_bytes);
    bwn = measure_bw(pooln, bw_buf, bw_bytes);
    printf("read bandwidth (1 GiB sum, best of 5): 1 thread %.2f GB/s, %d threads %.2f GB/s\n\n", bw1, nth, bwn);
  }
  double res[16][2] = {{0}}, local[16][2] = {{0}};

  float *x = xalloc(sizeof(float) * 8192 * 512, "activations");
  for (size_t i = 0; i < 8192 * 512; i++) x[i] = frand();
  float *y = xalloc(sizeof(float) * 32000 * 512, "outputs");
  size_t wsz = 0;
  for (int i = 0; i < n_types; i++) {
    size_t a = il_cpu_matmul_work_size(types[i], 8192, 512);
    if (a > wsz) wsz = a;
  }
  void *work = xalloc(wsz + 64, "workspace");

  printf("GEMV (1 token), weights in DRAM; GB/s of weight bytes and %% of measured read bandwidth\n");
  for (int ti = 0; ti < n_types; ti++) {
    const il_dtype t = types[ti];
    model m;
    model_build(&m, t, (size_t)1 << 30, 32);
    printf("%-5s %d layers + output = %.0f MB\n", il_dtype_name(t), m.n_layers, (double)m.total_bytes / 1e6);
    for (int pi = 0; pi < 2; pi++) {
      il_pool *pool = pi == 0 ? pool1 : pooln;
      double best = 1e30, sec[N_SHAPES + 1] = {0}, tmp[N_SHAPES + 1];
      gemv_pass(pool, &m, x, y, work, tmp); /* warm-up */
      for (int p = 0; p < passes; p++) {
        if (bw_buf) { /* a bandwidth pass right before each GEMV pass: both see the same neighbours */
          const double b = measure_bw_once(pool, bw_buf, bw_bytes);
          if (b > local[ti][pi]) local[ti][pi] = b;
        }
        memset(tmp, 0, sizeof tmp);
        double dt = gemv_pass(pool, &m, x, y, work, tmp);
        if (dt < best) {
          best = dt;
          memcpy(sec, tmp, sizeof sec);
        }
      }
      const double gbs = (double)m.total_bytes / best / 1e9, bw = local[ti][pi];
      res[ti][pi] = gbs;
      if (pi == 0 && bw > bw1) bw1 = bw;
      if (pi == 1 && bw > bwn) bwn = bw;
      printf("  %dT: pass %.1f ms, %.2f GB/s", il_pool_size(pool), best * 1e3, gbs);
      if (bw > 0) printf(" = %.1f%% of %.2f (best of the interleaved bandwidth passes)", 100 * gbs / bw, bw);
      printf("   per shape:");
      for (int s = 0; s <= N_SHAPES; s++) {
        const shape sh = s < N_SHAPES ? layer_shapes[s] : out_shape;
        const double b = (double)mat_bytes(t, sh) * (s < N_SHAPES ? m.n_layers : 1);
        printf(" %s %.1f", sh.name, b / sec[s] / 1e9);
      }
      printf("\n");
    }
    if (do_gemm) {
      /* one layer, 512 tokens vs 1 token */
      const int64_t nt = 512;
      double flops = 0;
      for (int s = 0; s < N_SHAPES; s++) flops += 2.0 * (double)layer_shapes[s].n_out * (double)layer_shapes[s].n_in * nt;
      for (int pi = 0; pi < 2; pi++) {
        il_pool *pool = pi == 0 ? pool1 : pooln;
        double best = 1e30, best1 = 1e30;
        for (int p = 0; p < 3; p++) {
          double t0 = now();
          for (int s = 0; s < N_SHAPES; s++) mm(pool, t, m.w[0][s], layer_shapes[s], x, nt, y, work);
          double dt = now() - t0;
          if (dt < best) best = dt;
        }
        for (int p = 0; p < passes; p++) {
          double t0 = now();
          for (int l = 0; l < m.n_layers; l++)
            for (int s = 0; s < N_SHAPES; s++) mm(pool, t, m.w[l][s], layer_shapes[s], x, 1, y, work);
          double dt = (now() - t0) / m.n_layers;
          if (dt < best1) best1 = dt;
        }
        printf("  %dT GEMM 512 tok: %.1f GFLOP/s, %.3f ms/token/layer vs GEMV %.3f ms (%.1fx)\n", il_pool_size(pool),
               flops / best / 1e9, best / nt * 1e3, best1 * 1e3, best1 / (best / nt));
      }
    }
    model_free(&m);
  }

  if (bw_buf) {
    printf("\nsummary: GEMV GB/s, %% of the best bandwidth seen in this run (1T %.2f, %dT %.2f GB/s) and %% of the\n"
           "best bandwidth of the passes interleaved with that type's GEMV passes (local; the VM's\n"
           "bandwidth drifts with other tenants, so local is the fairer pairing)\n",
           bw1, nth, bwn);
    for (int ti = 0; ti < n_types; ti++)
      printf("  %-5s 1T %6.2f GB/s %5.1f%% (local %5.1f%%)   %dT %6.2f GB/s %5.1f%% (local %5.1f%%)\n",
             il_dtype_name(types[ti]), res[ti][0], 100 * res[ti][0] / bw1, 100 * res[ti][0] / local[ti][0], nth,
             res[ti][1], 100 * res[ti][1] / bwn, 100 * res[ti][1] / local[ti][1]);
    il_mem_free(bw_buf);
  }

  if (do_levels) {
    printf("\nSIMD levels vs scalar, 2048x2048 GEMV, 1 thread (weights in L3/DRAM, 50 runs)\n");
    const il_isa det = il_cpu_isa_detected();
    for (int ti = 0; ti < n_types; ti++) {
      const il_dtype t = types[ti];
      const shape s = {"2048x2048", 2048, 2048};
      uint8_t *w = xalloc(mat_bytes(t, s), "weights");
      fill_weights(t, w, mat_bytes(t, s));
      printf("  %-5s", il_dtype_name(t));
      double base = 0;
      for (int l = 0; l <= (int)det; l++) {
        il_cpu_set_isa((il_isa)l);
        const int runs = l == 0 ? 5 : 50;
        mm(pool1, t, w, s, x, 1, y, work);
        double t0 = now();
        for (int r = 0; r < runs; r++) mm(pool1, t, w, s, x, 1, y, work);
        const double dt = (now() - t0) / runs;
        if (l == 0) base = dt;
        printf("  %s %.3f ms (%.2f GB/s, %.1fx)", il_isa_name((il_isa)l), dt * 1e3, (double)mat_bytes(t, s) / dt / 1e9,
               base / dt);
      }
      il_cpu_set_isa(det);
      printf("\n");
      il_mem_free(w);
    }
  }
  il_mem_free(work);
  il_mem_free(x);
  il_mem_free(y);
  il_pool_free(pool1);
  il_pool_free(pooln);
  return 0;
}
