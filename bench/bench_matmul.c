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
 * 5. The int8 dot-product peak of this machine per ISA level (a tight loop of independent
 *    vpdpbusd zmm, vpdpbusd ymm (AVX-VNNI), or vpmaddubsw + vpmaddwd + vpaddd, on 1 thread and
 *    on all) and its F32 FMA peak (independent vfmadd231ps zmm or ymm: the limit of F16/BF16),
 *    and in the same run the batched matmul of one Llama-3.2-1B layer (512 tokens,
 *    and batches of 4, 8, 16, 32, 64) with the blocked GEMM and with the tile kernels it replaced
 *    (the same table without its GEMM entries), as GOPS (2 ops per multiply-add) and as a
 *    fraction of the peak of the level that runs it. The peak is the sum of each thread's rate
 *    over its own CPU time; 1-thread GEMM times are the thread's CPU time, multi-thread ones wall
 *    time (on a shared machine the latter are only as good as the machine is idle).
 * 6. With --repack, the same GEMV passes and batched matmuls from weights repacked once
 *    (il_cpu_matmul_pack, what `--repack` does at load), alternating with the plain ones: GB/s
 *    of the panels' bytes and % of the interleaved bandwidth for one token, GOPS for batches.
 * Usage: bench_matmul [--types f16,q4_0,...] [--no-gemm] [--no-levels] [--no-bw] [--passes N]
 *                     [--gemm-only] [--isa scalar|avx2|avx512] [--avx2-plain] [--bf16-act] [--repack]
 *                     [--gemv-tokens N]
 * --gemv-tokens N: the GEMV passes multiply N tokens at once (1-64; default 1), a batch of N
 *   sequences decoding together; below the type's GEMM threshold that runs the tile kernels.
 * --avx2-plain: the AVX2 table without AVX-VNNI, on a CPU that has AVX-VNNI.
 * --bf16-act: the GEMM's activations rounded to BF16 (what --dtype bf16 stores), so BF16 weights
 *   run vdpbf16ps on CPUs with AVX512_BF16, quoted against that instruction's peak.
 * Run it on an idle machine (`uptime` load < 0.5) and repeat: VMs are noisy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "sys/membw.h"
#include "sys/peak.h"
#include "core/quant.h"
#include "memory/mem.h"

static int gemv_tok = 1; /* --gemv-tokens */
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

/* Best of 5 passes (backend/cpu/membw: the widest loads the CPU has). */
static double measure_bw(il_pool *pool, il_membw *m) {
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double g = il_membw_pass(m, pool);
    if (g > best) best = g;
  }
  return best;
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
      if (il_quantize_row(t, f, pattern, n) != IL_OK) {
        fprintf(stderr, "bench_matmul: quantizing the %s pattern: %s\n", ti->name, il_error_detail());
        exit(1);
      }
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
  /* --repack: the same matrices repacked (NULL when the table has no panel layout for t) */
  uint8_t *pw[32][N_SHAPES];
  uint8_t *pout;
  size_t packed_bytes;
} model;

static int do_repack; /* --repack */

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
    for (int s = 0; s < N_SHAPES; s++) {
      il_mem_free(m->w[l][s]);
      il_mem_free(m->pw[l][s]);
    }
  il_mem_free(m->out);
  il_mem_free(m->pout);
}

static const il__kernels *mm_kernels; /* the level under test (default: the best) */
static il_isa mm_isa;
static int no_avxvnni; /* --avx2-plain */

/* y = x W^T with table k; packed: W's repacked copy (il_cpu_matmul_pack with k), or NULL. */
static void mm_k(il_pool *pool, const il__kernels *k, il_dtype t, const uint8_t *w, const uint8_t *packed, shape s,
                 const float *x, int64_t n_tok, float *y, void *work) {
  const il_cpu_mm_part part = {w, il_dtype_row_size(t, s.n_in), s.n_out, y, s.n_out, packed};
  il_status st = il_cpu_matmul_multi(pool, k, t, 1, &part, s.n_in, x, n_tok, work);
  if (st != IL_OK) {
    fprintf(stderr, "bench_matmul: %s: %s\n", il_status_name(st), il_error_detail());
    exit(1);
  }
}
static void mm(il_pool *pool, il_dtype t, const uint8_t *w, shape s, const float *x, int64_t n_tok, float *y,
               void *work) {
  mm_k(pool, mm_kernels, t, w, NULL, s, x, n_tok, y, work);
}

/* W's repacked copy for table k (what --repack does at load), NULL when k has no panel layout
 * for t; *bytes += its size. */
static uint8_t *repack(il_pool *pool, const il__kernels *k, il_dtype t, const uint8_t *w, shape s, size_t *bytes) {
  const size_t n = il_cpu_matmul_packed_size(k, t, s.n_out, s.n_in);
  if (!n) return NULL;
  uint8_t *p = xalloc(n, "repacked weights");
  if (il_cpu_matmul_pack(pool, k, t, w, il_dtype_row_size(t, s.n_in), s.n_out, s.n_in, p) != IL_OK) {
    fprintf(stderr, "bench_matmul: %s\n", il_error_detail());
    exit(1);
  }
  *bytes += n;
  return p;
}

/* One generation pass over the whole model (from the repacked copies with packed); per-shape
 * seconds accumulate into sec[]. */
static double gemv_pass(il_pool *pool, const model *m, const float *x, float *y, void *work, double sec[N_SHAPES + 1],
                        bool packed) {
  const double t0 = il_time_now();
  for (int l = 0; l < m->n_layers; l++)
    for (int s = 0; s < N_SHAPES; s++) {
      const double a = il_time_now();
      mm_k(pool, mm_kernels, m->t, m->w[l][s], packed ? m->pw[l][s] : NULL, layer_shapes[s], x, gemv_tok, y, work);
      sec[s] += il_time_now() - a;
    }
  const double a = il_time_now();
  mm_k(pool, mm_kernels, m->t, m->out, packed ? m->pout : NULL, out_shape, x, gemv_tok, y, work);
  sec[N_SHAPES] += il_time_now() - a;
  return il_time_now() - t0;
}

/* ---------------------------------------------------------------- int8 and FMA peaks */

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock for the GEMM figures: on one thread the calling thread's CPU time (the pool of 1
 * runs on the caller), so time the scheduler gives to other tenants of a shared machine is not
 * counted; on several threads wall time. */
static double bench_clock(const il_pool *pool) { return il_pool_size(pool) > 1 ? il_time_now() : thread_cpu_now(); }

/* GOPS of all the pool's threads on the instruction `kind` (sys/peak: the loops `inferlab
 * bench` quotes its runs against); 0 where it cannot run. */
static double measure_peak(il_pool *pool, int kind) {
  double g = 0;
  if (il_peak_measure(pool, (il_peak_kind)kind, &g) != IL_OK) il_error_clear();
  return g;
}

/* --bf16-act: the GEMM's activations are BF16 values (what --dtype bf16 stores), so BF16
 * weights take vdpbf16ps on CPUs with AVX512_BF16. */
static int bf16_act;

/* The peak that binds a level's GEMM for weights of type t (sys/peak), AVX2's plain sequence
 * with --avx2-plain. */
static int peak_kind_for(il_isa isa, il_dtype t) {
  const int k = il_peak_kind_for(isa, t, bf16_act ? IL_DTYPE_BF16 : IL_DTYPE_F32);
  return k == IL_PEAK_AVXVNNI && no_avxvnni ? IL_PEAK_AVX2 : k;
}

/* ---------------------------------------------------------------- batched GEMM vs peak */

static double time_layer(il_pool *pool, const il__kernels *k, il_dtype t, uint8_t *const w[N_SHAPES],
                         uint8_t *const pw[N_SHAPES], const float *x, int64_t nt, float *y, void *work) {
  const double t0 = bench_clock(pool);
  for (int s = 0; s < N_SHAPES; s++) mm_k(pool, k, t, w[s], pw ? pw[s] : NULL, layer_shapes[s], x, nt, y, work);
  return bench_clock(pool) - t0;
}

/* One layer's matmuls at several batch sizes, GEMM and tile kernels alternating (best of
 * `reps` each), on 1 thread and on all. */
static void bench_gemm(il_pool *pool1, il_pool *pooln, const il__kernels *k, il_isa isa, const il_dtype *types,
                       int n_types, const float *x, float *y, void *work, int reps) {
  il__kernels tiles = *k;
  memset(tiles.gemm, 0, sizeof tiles.gemm);
  printf("\nbatched matmul, one layer (q,k,v,o,gate,up,down), %s kernels; tiles = the same table without\n"
         "the GEMM; 1T figures from the thread's CPU time, %dT from wall time\n",
         il_isa_name(isa), il_pool_size(pooln));
  const int64_t toks[] = {512, 1, 4, 16, 32, 48, 64};
  int kind = -1;
  double peak[2] = {0};
  for (int ti = 0; ti < n_types; ti++) {
    const il_dtype t = types[ti];
    if (!k->gemm[t]) continue;
    if (peak_kind_for(isa, t) != kind) { /* measured just before the types it binds */
      kind = peak_kind_for(isa, t);
      peak[0] = peak[1] = 0;
      if (kind >= 0 && il_peak_available((il_peak_kind)kind)) {
        peak[0] = measure_peak(pool1, kind);
        peak[1] = measure_peak(pooln, kind);
      }
      printf(" GOPS (2 ops per multiply-add) and %% of the %s peak: 1T %.0f, %dT %.0f GOPS\n", il_peak_name((il_peak_kind)kind),
             peak[0], il_pool_size(pooln), peak[1]);
    }
    uint8_t *w[N_SHAPES], *pw[N_SHAPES] = {0};
    double ops1 = 0;
    size_t pbytes = 0;
    for (int s = 0; s < N_SHAPES; s++) {
      w[s] = xalloc(mat_bytes(t, layer_shapes[s]), "weights");
      fill_weights(t, w[s], mat_bytes(t, layer_shapes[s]));
      if (do_repack) pw[s] = repack(pooln, k, t, w[s], layer_shapes[s], &pbytes);
      ops1 += 2.0 * (double)layer_shapes[s].n_out * (double)layer_shapes[s].n_in;
    }
    const bool rp = pw[0] != NULL;
    for (int pi = 0; pi < 2; pi++) {
      il_pool *pool = pi == 0 ? pool1 : pooln;
      for (size_t bi = 0; bi < sizeof toks / sizeof *toks; bi++) {
        const int64_t nt = toks[bi];
        double best_g = 1e30, best_t = 1e30, best_p = 1e30;
        time_layer(pool, k, t, w, NULL, x, nt, y, work);
        for (int r = 0; r < reps; r++) {
          const double a = time_layer(pool, &tiles, t, w, NULL, x, nt, y, work);
          const double b = time_layer(pool, k, t, w, NULL, x, nt, y, work);
          const double c = rp ? time_layer(pool, k, t, w, pw, x, nt, y, work) : 1e30;
          if (a < best_t) best_t = a;
          if (b < best_g) best_g = b;
          if (c < best_p) best_p = c;
        }
        const double gg = ops1 * (double)nt / best_g / 1e9, gt = ops1 * (double)nt / best_t / 1e9;
        printf("  %-5s %dT %3lld tok: GEMM %7.1f GOPS (%4.1f%% of peak, %.3f ms/token)  tiles %7.1f GOPS (%4.1f%%)  %.2fx",
               il_dtype_name(t), il_pool_size(pool), (long long)nt, gg, peak[pi] > 0 ? 100 * gg / peak[pi] : 0,
               best_g / (double)nt * 1e3, gt, peak[pi] > 0 ? 100 * gt / peak[pi] : 0, best_t / best_g);
        if (rp) {
          const double gp = ops1 * (double)nt / best_p / 1e9;
          printf("  repacked %7.1f GOPS (%4.1f%%) %.2fx of the faster", gp, peak[pi] > 0 ? 100 * gp / peak[pi] : 0,
                 (best_g < best_t ? best_g : best_t) / best_p);
        }
        printf("\n");
      }
    }
    for (int s = 0; s < N_SHAPES; s++) {
      il_mem_free(w[s]);
      il_mem_free(pw[s]);
    }
  }
}

int main(int argc, char **argv) {
  mm_isa = il_cpu_isa_best();
  mm_kernels = il_cpu_isa_kernels(mm_isa);
  il_dtype types[16] = {IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                        IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K,
                        IL_DTYPE_Q5_0, IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
  int n_types = 11, passes = 5, do_gemm = 1, do_levels = 1, do_bw = 1, gemm_only = 0;
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
    else if (!strcmp(argv[i], "--gemm-only")) gemm_only = 1;
    else if (!strcmp(argv[i], "--bf16-act")) bf16_act = 1;
    else if (!strcmp(argv[i], "--repack")) do_repack = 1;
    else if (!strcmp(argv[i], "--gemv-tokens") && i + 1 < argc) {
      char *end;
      const long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 64) {
        fprintf(stderr, "bench_matmul: --gemv-tokens %s: expected a whole number from 1 to 64\n", argv[i]);
        return 2;
      }
      gemv_tok = (int)v;
    }
    else if (!strcmp(argv[i], "--avx2-plain") && il__matmul_avx2.compiled && il_cpu_isa_kernels(IL_ISA_AVX2)) {
      mm_isa = IL_ISA_AVX2; /* the AVX2 table without AVX-VNNI, on a CPU that has it */
      mm_kernels = &il__matmul_avx2;
      no_avxvnni = 1;
    }
    else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      il_isa isa;
      if (!il_isa_parse(argv[++i], &isa) || !il_cpu_isa_kernels(isa)) {
        fprintf(stderr, "bench_matmul: --isa %s: not available here\n", argv[i]);
        return 2;
      }
      mm_isa = isa;
      mm_kernels = il_cpu_isa_kernels(isa);
    }
    else {
      fprintf(stderr, "usage: bench_matmul [--types f16,q4_0,...] [--passes N] [--no-gemm] [--no-levels] [--no-bw]\n"
                      "                    [--gemm-only] [--isa scalar|avx2|avx512] [--avx2-plain] [--bf16-act] [--repack]\n"
                      "                    [--gemv-tokens 1..64]\n");
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
  printf("isa %s (compiled %s), %d threads, loadavg %s\n", il_isa_name(mm_isa), il_cpu_isa_compiled(), nth, load);
  if (gemm_only) {
    printf("int8 dot-product and F32 FMA peaks of this machine, GOPS (2 ops per multiply-add):\n");
    for (int kind = 0; kind < IL_PEAK_KINDS; kind++)
      if (il_peak_available((il_peak_kind)kind))
        printf("  %-38s 1T %7.0f  %dT %7.0f\n", il_peak_name((il_peak_kind)kind), measure_peak(pool1, kind), nth,
               measure_peak(pooln, kind));
    float *gx = xalloc(sizeof(float) * 8192 * 512, "activations");
    for (size_t i = 0; i < 8192 * 512; i++) gx[i] = bf16_act ? il_bf16_to_f32(il_f32_to_bf16(frand())) : frand();
    if (bf16_act) printf("activations rounded to BF16 (--bf16-act)\n");
    float *gy = xalloc(sizeof(float) * 8192 * 512, "outputs");
    size_t gw = 0;
    for (int i = 0; i < n_types; i++) {
      const size_t a = il_cpu_matmul_work_size(types[i], 8192, 512, nth);
      if (a > gw) gw = a;
    }
    void *gwork = xalloc(gw + 64, "workspace");
    bench_gemm(pool1, pooln, mm_kernels, mm_isa, types, n_types, gx, gy, gwork, passes);
    il_mem_free(gwork);
    il_mem_free(gy);
    il_mem_free(gx);
    il_pool_free(pool1);
    il_pool_free(pooln);
    return 0;
  }

  /* The roofline is the best bandwidth seen during the whole run: measured at the start and
   * again before each type, because on a shared VM the available bandwidth drifts. */
  double bw1 = 0, bwn = 0;
  il_membw bw = {0};
  if (do_bw) {
    if (il_membw_init(&bw, (size_t)1 << 30) != IL_OK) return 1;
    bw1 = measure_bw(pool1, &bw);
    bwn = measure_bw(pooln, &bw);
    printf("read bandwidth (1 GiB sum, best of 5): 1 thread %.2f GB/s, %d threads %.2f GB/s\n\n", bw1, nth, bwn);
  }
  double res[16][2] = {{0}}, local[16][2] = {{0}};

  float *x = xalloc(sizeof(float) * 8192 * 512, "activations");
  for (size_t i = 0; i < 8192 * 512; i++) x[i] = frand();
  float *y = xalloc(sizeof(float) * 32000 * 512, "outputs");
  size_t wsz = 0;
  for (int i = 0; i < n_types; i++) {
    size_t a = il_cpu_matmul_work_size(types[i], 8192, 512, nth);
    if (a > wsz) wsz = a;
  }
  void *work = xalloc(wsz + 64, "workspace");

  printf("GEMV (%d token%s), weights in DRAM; GB/s of weight bytes and %% of measured read bandwidth\n", gemv_tok,
         gemv_tok > 1 ? "s: a decode batch" : "");
  for (int ti = 0; ti < n_types; ti++) {
    const il_dtype t = types[ti];
    model m;
    model_build(&m, t, (size_t)1 << 30, 32);
    printf("%-5s %d layers + output = %.0f MB\n", il_dtype_name(t), m.n_layers, (double)m.total_bytes / 1e6);
    if (do_repack) {
      for (int l = 0; l < m.n_layers; l++)
        for (int s = 0; s < N_SHAPES; s++) m.pw[l][s] = repack(pooln, mm_kernels, t, m.w[l][s], layer_shapes[s], &m.packed_bytes);
      m.pout = repack(pooln, mm_kernels, t, m.out, out_shape, &m.packed_bytes);
      if (m.pout) printf("  repacked (--repack): %.0f MB of panels, %.3fx the GGUF bytes\n", (double)m.packed_bytes / 1e6,
                         (double)m.packed_bytes / (double)m.total_bytes);
      else printf("  repacked (--repack): no panel layout for %s on this table\n", il_dtype_name(t));
    }
    for (int pi = 0; pi < 2; pi++) {
      il_pool *pool = pi == 0 ? pool1 : pooln;
      double best = 1e30, best_p = 1e30, sec[N_SHAPES + 1] = {0}, tmp[N_SHAPES + 1];
      gemv_pass(pool, &m, x, y, work, tmp, false); /* warm-up */
      if (m.pout) gemv_pass(pool, &m, x, y, work, tmp, true);
      for (int p = 0; p < passes; p++) {
        if (bw.buf) { /* a bandwidth pass right before each GEMV pass: both see the same neighbours */
          const double b = il_membw_pass(&bw, pool);
          if (b > local[ti][pi]) local[ti][pi] = b;
        }
        memset(tmp, 0, sizeof tmp);
        double dt = gemv_pass(pool, &m, x, y, work, tmp, false);
        if (dt < best) {
          best = dt;
          memcpy(sec, tmp, sizeof sec);
        }
        if (m.pout) { /* the repacked pass right after: same neighbours again */
          double ps[N_SHAPES + 1] = {0};
          dt = gemv_pass(pool, &m, x, y, work, ps, true);
          if (dt < best_p) best_p = dt;
        }
      }
      const double gbs = (double)m.total_bytes / best / 1e9, bwl = local[ti][pi];
      res[ti][pi] = gbs;
      if (pi == 0 && bwl > bw1) bw1 = bwl;
      if (pi == 1 && bwl > bwn) bwn = bwl;
      printf("  %dT: pass %.1f ms, %.2f GB/s", il_pool_size(pool), best * 1e3, gbs);
      if (bwl > 0) printf(" = %.1f%% of %.2f (best of the interleaved bandwidth passes)", 100 * gbs / bwl, bwl);
      printf("   per shape:");
      for (int s = 0; s <= N_SHAPES; s++) {
        const shape sh = s < N_SHAPES ? layer_shapes[s] : out_shape;
        const double b = (double)mat_bytes(t, sh) * (s < N_SHAPES ? m.n_layers : 1);
        printf(" %s %.1f", sh.name, b / sec[s] / 1e9);
      }
      printf("\n");
      if (m.pout) {
        const double gp = (double)m.packed_bytes / best_p / 1e9;
        printf("  %dT repacked: pass %.1f ms (%.2fx the plain pass's speed), %.2f GB/s of panel bytes", il_pool_size(pool),
               best_p * 1e3, best / best_p, gp);
        if (bwl > 0) printf(" = %.1f%% of %.2f", 100 * gp / bwl, bwl);
        printf("\n");
      }
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
          double t0 = il_time_now();
          for (int s = 0; s < N_SHAPES; s++) mm(pool, t, m.w[0][s], layer_shapes[s], x, nt, y, work);
          double dt = il_time_now() - t0;
          if (dt < best) best = dt;
        }
        for (int p = 0; p < passes; p++) {
          double t0 = il_time_now();
          for (int l = 0; l < m.n_layers; l++)
            for (int s = 0; s < N_SHAPES; s++) mm(pool, t, m.w[l][s], layer_shapes[s], x, 1, y, work);
          double dt = (il_time_now() - t0) / m.n_layers;
          if (dt < best1) best1 = dt;
        }
        printf("  %dT GEMM 512 tok: %.1f GFLOP/s, %.3f ms/token/layer vs GEMV %.3f ms (%.1fx)\n", il_pool_size(pool),
               flops / best / 1e9, best / nt * 1e3, best1 * 1e3, best1 / (best / nt));
      }
    }
    model_free(&m);
  }

  if (bw.buf) {
    printf("\nsummary: GEMV GB/s, %% of the best bandwidth seen in this run (1T %.2f, %dT %.2f GB/s) and %% of the\n"
           "best bandwidth of the passes interleaved with that type's GEMV passes (local; the VM's\n"
           "bandwidth drifts with other tenants, so local is the fairer pairing)\n",
           bw1, nth, bwn);
    for (int ti = 0; ti < n_types; ti++)
      printf("  %-5s 1T %6.2f GB/s %5.1f%% (local %5.1f%%)   %dT %6.2f GB/s %5.1f%% (local %5.1f%%)\n",
             il_dtype_name(types[ti]), res[ti][0], 100 * res[ti][0] / bw1, 100 * res[ti][0] / local[ti][0], nth,
             res[ti][1], 100 * res[ti][1] / bwn, 100 * res[ti][1] / local[ti][1]);
    il_membw_free(&bw);
  }

  if (do_levels) {
    printf("\nSIMD levels vs scalar, 2048x2048 GEMV, 1 thread (weights in L3/DRAM, 50 runs)\n");
    const il_isa det = il_cpu_isa_best();
    for (int ti = 0; ti < n_types; ti++) {
      const il_dtype t = types[ti];
      const shape s = {"2048x2048", 2048, 2048};
      uint8_t *w = xalloc(mat_bytes(t, s), "weights");
      fill_weights(t, w, mat_bytes(t, s));
      printf("  %-5s", il_dtype_name(t));
      double base = 0;
      for (int l = 0; l <= (int)det; l++) {
        mm_kernels = il_cpu_isa_kernels((il_isa)l);
        const int runs = l == 0 ? 5 : 50;
        mm(pool1, t, w, s, x, 1, y, work);
        double t0 = il_time_now();
        for (int r = 0; r < runs; r++) mm(pool1, t, w, s, x, 1, y, work);
        const double dt = (il_time_now() - t0) / runs;
        if (l == 0) base = dt;
        printf("  %s %.3f ms (%.2f GB/s, %.1fx)", il_isa_name((il_isa)l), dt * 1e3, (double)mat_bytes(t, s) / dt / 1e9,
               base / dt);
      }
      mm_kernels = il_cpu_isa_kernels(il_cpu_isa_best());
      printf("\n");
      il_mem_free(w);
    }
  }
  if (do_gemm) bench_gemm(pool1, pooln, mm_kernels, mm_isa, types, n_types, x, y, work, passes);
  il_mem_free(work);
  il_mem_free(x);
  il_mem_free(y);
  il_pool_free(pool1);
  il_pool_free(pooln);
  return 0;
}
