/* bench/bench_cuda_mv3: the matvec tournament: every matvec kernel the CUDA backend has, on
 * every weight type, on Llama-3-8B and Llama-3.2-1B shapes, at 1, 2, 4 and 8 tokens; device
 * results against the host twin; the ceilings measured in the same run; and the dispatch table
 * the backend reads (IL_CUDA_MV_TABLE) filled with the fastest kernel that passed.
 *
 * Everything goes through the device seam: one backend is opened per kernel kind with
 * IL_CUDA_MATVEC=KIND (v1, v2, w4u1, w4u2, w8u2), so each measures what the engine would run.
 * 1. ceilings: a 1 GiB device-to-device copy (GB/s read + written, best of 5); a 16-byte-load
 *    read-only reduction (matvec v3 on 1 GiB of F32 weights at one token: every lane streams
 *    16-byte words into FMAs; GB/s read); the cost of one small matmul op (host work and launch,
 *    mean of 2000 back to back).
 * 2. check: each version 3 kernel on odd shapes (37 rows, partial chunks, padded rows are not
 *    used: the seam's tensors are dense) at 1, 3 and 8 tokens, and matmul_multi over three
 *    matrices sharing one input (the shared 8-bit activations): the downloaded y must equal
 *    mv3.cuh's host twin bit for bit. A kernel that differs anywhere is out of the tournament.
 * 3. tournament: q 4096x4096, k/v 1024x4096, gate 14336x4096, down 4096x14336 (8B) and
 *    2048x2048, 512x2048, 8192x2048, 2048x8192 (1B) per type, tokens 1/2/4/8, each kernel:
 *    seconds per matmul over weight sets rotated past L2 (enough copies of the matrix for 192 MiB,
 *    so each call reads DRAM), median of 3 timed runs; GB/s of weight bytes, % of the copy, the
 *    model's prediction (mv3_model.c) beside it.
 * 4. the table: per (type, shape class, tokens) the kernel with the least total time over the
 *    class's measured shapes among those that passed; classes without a measurement keep the
 *    model's choice. Written to --table-out.
 * Usage: bench_cuda_mv3 [--device cuda:N] [--quick] [--types f16,q4_0,...] [--table-out FILE]
 *                       [--json FILE] [--budget SECONDS (default 300)]
 *        bench_cuda_mv3 --model-table            the model's table (src/backend/cuda/mv_table.txt)
 *        bench_cuda_mv3 --rank TYPE ROWS COLS TOKENS   every kernel's predicted cost, best first
 * Exit codes: 0 done and every check passed; 1 a device result differs from its twin or a step
 * failed; 77 no CUDA device (prints why).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "backend/registry.h"
#include "core/jsonw.h"
#include "core/quant.h"
#include "core/timer.h"
}
#include "backend/cuda/mv3.cuh"
#include "backend/cuda/mv3.h"

#define CHECK(expr)                                                                                                  \
  do {                                                                                                               \
    il_status st__ = (expr);                                                                                         \
    if (st__ != IL_OK) {                                                                                             \
      fprintf(stderr, "bench_cuda_mv3: %s:%d: %s: %s\n", __FILE__, __LINE__, il_status_name(st__), il_error_detail()); \
      exit(1);                                                                                                       \
    }                                                                                                                \
  } while (0)

static il_backend *BK[IL__MV_N_KINDS]; /* one backend per kernel kind */
static bool quick;
static double t_start, budget = 300;
static il_jsonw J;
static FILE *json_f;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* Whether the comma-separated list names type t (case-insensitive). */
static bool listed(const char *list, il_dtype t) {
  const char *name = il_dtype_name(t);
  const size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncasecmp(p, name, n)) return true;
    p += len + (e ? 1 : 0);
  }
  return false;
}

static bool over_budget(void) { return il_time_now() - t_start > budget; }

/* Random weights of type t: real quantized rows for the check (every row its own), or one row
 * repeated with perturbed scales for the tournament (host time stays small for 8B shapes). */
static std::vector<uint8_t> host_weights(il_dtype t, int64_t rows, int64_t cols, bool distinct) {
  const size_t rs = il_dtype_row_size(t, cols);
  std::vector<uint8_t> w(rs * (size_t)rows);
  std::vector<float> src((size_t)cols);
  for (int64_t r = 0; r < (distinct ? rows : 1); r++) {
    for (auto &v : src) v = frand();
    if (t == IL_DTYPE_F32) memcpy(&w[(size_t)r * rs], src.data(), rs);
    else CHECK(il_quantize_row(t, src.data(), &w[(size_t)r * rs], cols));
  }
  if (!distinct) {
    for (int64_t r = 1; r < rows; r++) memcpy(&w[(size_t)r * rs], w.data(), rs);
    const il_dtype_info *di = il_dtype_get(t);
    if (di->quantized)
      for (size_t blk = 1; blk < w.size() / di->size; blk++) {
        uint8_t *bp = &w[blk * di->size];
        const uint16_t d = il_f32_to_fp16(0.01f + 0.001f * frand());
        memcpy(t == IL_DTYPE_Q6_K ? bp + di->size - 2 : bp, &d, 2);
      }
  }
  return w;
}

static il_tensor up_weights(il_backend *b, const std::vector<uint8_t> &w, il_dtype t, int64_t rows, int64_t cols,
                            const char *name) {
  il_tensor W;
  CHECK(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, w.data(), rows, cols, il_dtype_row_size(t, cols), t, name, &W));
  return W;
}

/* ---- 1. ceilings ---- */

static double event_seconds(il_backend *b, il_event *a, il_event *e) {
  double s;
  CHECK(b->ops->event_elapsed(b, a, e, &s));
  b->ops->event_free(b, a);
  b->ops->event_free(b, e);
  return s;
}

static double ceilings(il_backend *b, double *read_gbs) {
  /* 1 GiB (256 MiB with --quick), or a quarter of a smaller device's free memory */
  size_t free_b = 0, total = 0;
  b->ops->memory(b, &free_b, &total);
  int64_t n = quick ? (256 << 20) / 4 : (1 << 30) / 4;
  while (n > (1 << 20) && (size_t)n * 4 * 4 > free_b) n /= 2;
  il_tensor src, dst;
  CHECK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, n, IL_DTYPE_F32, "copy src", &src));
  CHECK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, n, IL_DTYPE_F32, "copy dst", &dst));
  CHECK(b->ops->copy(b, dst, src));
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    il_event *e0, *e1;
    CHECK(b->ops->event_record(b, &e0));
    CHECK(b->ops->copy(b, dst, src));
    CHECK(b->ops->event_record(b, &e1));
    best = std::min(best, event_seconds(b, e0, e1));
  }
  const double copy = 2.0 * (double)n * 4 / best / 1e9;
  il_backend_tensor_free(b, &dst);
  /* the read ceiling: the same memory as 256 rows of F32 weights, one token */
  const int64_t cols = n / 256;
  il_tensor W = il_tensor_make(src.buf, 0, 256, cols, IL_DTYPE_F32, "read ceiling");
  il_tensor x, y;
  CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, cols, IL_DTYPE_F32, "x", &x));
  CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 256, IL_DTYPE_F32, "y", &y));
  CHECK(b->ops->matmul(b, y, W, x));
  best = 1e30;
  for (int i = 0; i < 5; i++) {
    il_event *e0, *e1;
    CHECK(b->ops->event_record(b, &e0));
    CHECK(b->ops->matmul(b, y, W, x));
    CHECK(b->ops->event_record(b, &e1));
    best = std::min(best, event_seconds(b, e0, e1));
  }
  *read_gbs = (double)n * 4 / best / 1e9;
  /* one small op, back to back */
  il_tensor ws, xs, ys;
  std::vector<float> h(32 * 32, 0.5f);
  CHECK(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, h.data(), 32, 32, 128, IL_DTYPE_F32, "tiny", &ws));
  CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 32, IL_DTYPE_F32, "x", &xs));
  CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 32, IL_DTYPE_F32, "y", &ys));
  CHECK(b->ops->sync(b));
  const int reps = 2000;
  const double t0 = il_time_now();
  for (int i = 0; i < reps; i++) CHECK(b->ops->matmul(b, ys, ws, xs));
  CHECK(b->ops->sync(b));
  const double per_op = (il_time_now() - t0) / reps;
  printf("ceilings: copy %.0f MiB %.1f GB/s (read + write, best of 5); 16-byte-load read (matvec v3 f32, %.0f MiB, 1 "
         "token) %.1f GB/s read (%.0f%% of the copy); one small matmul op %.2f us (host work + launch, mean of %d)\n",
         (double)n * 4 / (1 << 20), copy, (double)n * 4 / (1 << 20), *read_gbs, 100 * *read_gbs / copy, per_op * 1e6, reps);
  il_jsonw_key(&J, "ceilings");
  il_jsonw_obj(&J);
  il_jsonw_knum(&J, "copy_gb_per_s", copy);
  il_jsonw_knum(&J, "read_16b_gb_per_s", *read_gbs);
  il_jsonw_knum(&J, "small_op_us", per_op * 1e6);
  il_jsonw_obj_end(&J);
  il_backend_tensor_free(b, &ws), il_backend_tensor_free(b, &xs), il_backend_tensor_free(b, &ys);
  il_backend_tensor_free(b, &x), il_backend_tensor_free(b, &y), il_backend_tensor_free(b, &src);
  return copy;
}

/* ---- 2. device == twin ---- */

static const il_dtype TYPES[] = {IL_DTYPE_F32,  IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                                 IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K};

/* The twin's y for n_tok rows of x against w (rows x cols), packed ldy = rows. */
static std::vector<float> twin(il_dtype t, const std::vector<uint8_t> &w, int64_t rows, int64_t cols,
                               const std::vector<float> &x, int n_tok) {
  std::vector<float> y((size_t)rows * n_tok);
  std::vector<int8_t> q((size_t)cols * n_tok + 16);
  int8_t *qa = (int8_t *)(((uintptr_t)q.data() + 15) & ~(uintptr_t)15);
  const int64_t nb = cols / 32;
  std::vector<float> d((size_t)(nb * n_tok + 1));
  std::vector<int> s((size_t)(nb * n_tok + 1));
  il__mv3_act a[IL__CU_MV_MAX_TOK];
  if (il__mv3_quantized(t))
    for (int k = 0; k < n_tok; k++) {
      il__mv3_quant_twin(x.data() + k * cols, cols, qa + k * cols, &d[(size_t)(k * nb)], &s[(size_t)(k * nb)]);
      a[k] = il__mv3_act{qa + k * cols, &d[(size_t)(k * nb)], &s[(size_t)(k * nb)]};
    }
  il__mv3_matvec_twin(t, w.data(), il_dtype_row_size(t, cols), rows, cols, x.data(), a, n_tok, y.data(), rows);
  return y;
}

static bool passed[IL__MV_N_KINDS][IL__MV_N_TYPES];

static int check_twins(const char *types) {
  int bad = 0, runs = 0;
  for (int ti = 0; ti < IL__MV_N_TYPES; ti++) {
    const il_dtype t = TYPES[ti];
    if (!listed(types, t)) continue;
    const int64_t cols = t == IL_DTYPE_Q6_K ? 6144 : t == IL_DTYPE_Q4_1 ? 1152 : t <= IL_DTYPE_F16 || t == IL_DTYPE_BF16 ? 2056 : 2304;
    const int64_t rows = 37;
    std::vector<uint8_t> w[3];
    for (auto &m : w) m = host_weights(t, rows, cols, true);
    std::vector<float> x((size_t)cols * 8);
    for (auto &v : x) v = frand();
    for (int k = IL__MV_FIRST_V3; k < IL__MV_N_KINDS; k++) {
      il_backend *b = BK[k];
      passed[k][ti] = true;
      il_tensor W[3], X, Y[3];
      for (int i = 0; i < 3; i++) W[i] = up_weights(b, w[i], t, rows, cols, "check w");
      CHECK(il_backend_tensor_from_host(b, IL_MEM_ACTIVATIONS, x.data(), 8, cols, (size_t)cols * 4, IL_DTYPE_F32, "x", &X));
      for (int i = 0; i < 3; i++) CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 8, rows, IL_DTYPE_F32, "y", &Y[i]));
      for (int n_tok : {1, 3, 8}) {
        const il_tensor xv = il_tensor_rows(X, 0, n_tok);
        il_tensor yv[3];
        for (int i = 0; i < 3; i++) yv[i] = il_tensor_rows(Y[i], 0, n_tok);
        /* matmul on the first matrix, matmul_multi over all three (one shared quantization) */
        for (int multi = 0; multi < 2; multi++) {
          if (multi) CHECK(b->ops->matmul_multi(b, 3, yv, W, NULL, xv));
          else CHECK(b->ops->matmul(b, yv[0], W[0], xv));
          for (int i = 0; i < (multi ? 3 : 1); i++) {
            std::vector<float> got((size_t)rows * n_tok);
            CHECK(b->ops->download(b, got.data(), yv[i], got.size() * 4));
            const std::vector<float> want = twin(t, w[i], rows, cols, x, n_tok);
            runs++;
            if (memcmp(got.data(), want.data(), got.size() * 4)) {
              size_t j = 0;
              while (got[j] == want[j] || (isnan(got[j]) && isnan(want[j]))) j++;
              printf("MISMATCH %s %s %s [%lld x %lld] %d tokens: y[%zu] = %.9g on the device, %.9g in the twin\n",
                     il__mv_kind_name((il__mv_kind)k), il_dtype_name(t), multi ? "matmul_multi" : "matmul", (long long)rows,
                     (long long)cols, n_tok, j, got[j], want[j]);
              bad++;
              passed[k][ti] = false;
            }
          }
        }
      }
      for (int i = 0; i < 3; i++) il_backend_tensor_free(b, &W[i]), il_backend_tensor_free(b, &Y[i]);
      il_backend_tensor_free(b, &X);
    }
  }
  printf("check: %d device results against the host twin, %d differ%s\n", runs, bad, bad ? "" : " (bit for bit equal)");
  il_jsonw_key(&J, "twin_check");
  il_jsonw_obj(&J);
  il_jsonw_kint(&J, "runs", runs);
  il_jsonw_kint(&J, "mismatches", bad);
  il_jsonw_obj_end(&J);
  /* versions 1 and 2 are checked against the CPU by test_backend_ops, not here */
  for (int ti = 0; ti < IL__MV_N_TYPES; ti++) passed[IL__MV_V1][ti] = passed[IL__MV_V2][ti] = true;
  return bad;
}

/* ---- 3. tournament ---- */

struct shp {
  const char *name;
  int64_t rows, cols;
};
static const shp SHAPES[] = {{"8b.q", 4096, 4096},   {"8b.kv", 1024, 4096},  {"8b.gate", 14336, 4096},
                             {"8b.down", 4096, 14336}, {"1b.q", 2048, 2048}, {"1b.kv", 512, 2048},
                             {"1b.gate", 8192, 2048},  {"1b.down", 2048, 8192}};
#define N_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

/* seconds per matmul [kind][type][shape][token bucket]; 0: not measured */
static double T[IL__MV_N_KINDS][IL__MV_N_TYPES][N_SHAPES][IL__MV_N_TOK];

static double time_kind(il_backend *b, const std::vector<uint8_t> &w, il_dtype t, const shp &s, int n_tok, int sets,
                        std::vector<il_tensor> &W, il_tensor X, il_tensor Y) {
  const il_tensor xv = il_tensor_rows(X, 0, n_tok), yv = il_tensor_rows(Y, 0, n_tok);
  for (int i = 0; i < sets; i++) CHECK(b->ops->matmul(b, yv, W[(size_t)i], xv)); /* warm-up */
  const int reps = std::max(sets, quick ? 8 : 20);
  double r[3];
  for (int k = 0; k < 3; k++) {
    il_event *e0, *e1;
    CHECK(b->ops->event_record(b, &e0));
    for (int i = 0; i < reps; i++) CHECK(b->ops->matmul(b, yv, W[(size_t)(i % sets)], xv));
    CHECK(b->ops->event_record(b, &e1));
    r[k] = event_seconds(b, e0, e1) / reps;
  }
  std::sort(r, r + 3);
  return r[1];
}

static void tournament(const char *types, double copy) {
  const il__mv_hw hw = il__mv_hw_h200();
  printf("\ntournament: seconds per matmul over weight sets rotated past L2; GB/s of weights; %% of the copy; the "
         "model's prediction\n%-5s %-8s %3s %-5s %10s %9s %7s %10s\n", "type", "shape", "tok", "kind", "us", "GB/s", "%copy",
         "model us");
  il_jsonw_key(&J, "tournament");
  il_jsonw_arr(&J);
  for (int ti = 0; ti < IL__MV_N_TYPES && !over_budget(); ti++) {
    const il_dtype t = TYPES[ti];
    if (!listed(types, t)) continue;
    for (int si = 0; si < N_SHAPES && !over_budget(); si++) {
      const shp &s = SHAPES[si];
      if (quick && si % 4 == 3) continue;
      const std::vector<uint8_t> w = host_weights(t, s.rows, s.cols, false);
      const double bytes = (double)w.size();
      const int sets = (int)std::min(64.0, std::max(2.0, ceil(192.0 * (1 << 20) / bytes)));
      std::vector<float> x((size_t)s.cols * 8);
      for (auto &v : x) v = frand();
      for (int k = 0; k < IL__MV_N_KINDS && !over_budget(); k++) {
        if (!il__mv_kind_runs((il__mv_kind)k, t) || !passed[k][ti]) continue;
        il_backend *b = BK[k];
        std::vector<il_tensor> W((size_t)sets);
        for (auto &m : W) m = up_weights(b, w, t, s.rows, s.cols, s.name);
        il_tensor X, Y;
        CHECK(il_backend_tensor_from_host(b, IL_MEM_ACTIVATIONS, x.data(), 8, s.cols, (size_t)s.cols * 4, IL_DTYPE_F32, "x",
                                          &X));
        CHECK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 8, s.rows, IL_DTYPE_F32, "y", &Y));
        for (int tb = 0; tb < IL__MV_N_TOK; tb++) {
          const int n_tok = il__mv_tok_of_bucket(tb);
          const double sec = time_kind(b, w, t, s, n_tok, sets, W, X, Y);
          T[k][ti][si][tb] = sec;
          il__mv_cost c;
          il__mv_model(&hw, (il__mv_kind)k, t, s.rows, s.cols, n_tok, false, &c);
          const double gbs = bytes / sec / 1e9;
          printf("%-5s %-8s %3d %-5s %10.2f %9.1f %6.1f%% %10.2f\n", il_dtype_name(t), s.name, n_tok,
                 il__mv_kind_name((il__mv_kind)k), sec * 1e6, gbs, 100 * gbs / copy, c.seconds * 1e6);
          il_jsonw_obj(&J);
          il_jsonw_kstr(&J, "type", il_dtype_name(t));
          il_jsonw_kstr(&J, "shape", s.name);
          il_jsonw_kint(&J, "tokens", n_tok);
          il_jsonw_kstr(&J, "kind", il__mv_kind_name((il__mv_kind)k));
          il_jsonw_knum(&J, "us", sec * 1e6);
          il_jsonw_knum(&J, "gb_per_s", gbs);
          il_jsonw_knum(&J, "model_us", c.seconds * 1e6);
          il_jsonw_obj_end(&J);
        }
        fflush(stdout);
        for (auto &m : W) il_backend_tensor_free(b, &m);
        il_backend_tensor_free(b, &X), il_backend_tensor_free(b, &Y);
      }
    }
  }
  il_jsonw_arr_end(&J);
  if (over_budget()) printf("(the --budget of %.0f s ran out: the rest is not measured; its classes keep the model's choice)\n", budget);
}

/* ---- 4. the table ---- */

static void write_table(const char *path, const char *device) {
  il__mv_table tab;
  il__mv_table_default(&tab);
  int agree = 0, decided = 0;
  for (int ti = 0; ti < IL__MV_N_TYPES; ti++)
    for (int c = 0; c < IL__MV_N_CLASSES; c++)
      for (int tb = 0; tb < IL__MV_N_TOK; tb++) {
        int best = -1;
        double bt = 0;
        for (int k = 0; k < IL__MV_N_KINDS; k++) {
          double sum = 0;
          int n = 0, want = 0;
          for (int si = 0; si < N_SHAPES; si++) {
            if (il__mv_class(TYPES[ti], SHAPES[si].rows, SHAPES[si].cols) != c) continue;
            want++;
            if (T[k][ti][si][tb] > 0) sum += T[k][ti][si][tb], n++;
          }
          if (!want || n < want) continue; /* every measured shape of the class, or nothing */
          if (best < 0 || sum < bt) best = k, bt = sum;
        }
        if (best < 0) continue;
        decided++;
        agree += tab.kind[ti][c][tb] == best;
        tab.kind[ti][c][tb] = (uint8_t)best;
      }
  static char text[32768];
  time_t now = time(NULL);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  int n = snprintf(text, sizeof text, "# source: bench_cuda_mv3 on %s, %s: %d entries measured (the model ranked %d of "
                   "them the same), the rest the model's\n", device, when, decided, agree);
  il__mv_table_format(&tab, text + n, sizeof text - (size_t)n);
  printf("\ntable: %d (type, class, tokens) entries measured; the model's ranking agreed on %d\n", decided, agree);
  if (path) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
      fprintf(stderr, "bench_cuda_mv3: --table-out %s: cannot write it\n", path);
      exit(1);
    }
    printf("table written to %s (IL_CUDA_MV_TABLE=%s makes the backend use it)\n", path, path);
  }
}

/* --model-table: the model's ranking as a table file (what src/backend/cuda/mv_table.txt holds
 * until a device measures one); no device needed. */
static int print_model_table(void) {
  il__mv_table tab;
  il__mv_table_default(&tab);
  static char text[32768];
  il__mv_table_format(&tab, text, sizeof text);
  printf("# source: model (mv3_model.c: H200 calibration); scripts/gpu-check.sh measures the replacement\n%s", text);
  return 0;
}

/* --rank TYPE ROWS COLS TOKENS: every kernel's predicted cost, best first; no device needed. */
static int rank(const char *type, const char *rows, const char *cols, const char *toks) {
  il_dtype t;
  const int64_t r = atoll(rows), c = atoll(cols), n = atoll(toks);
  if (!il_dtype_parse(type, &t) || il__mv_type_index(t) < 0 || r < 1 || c < 1 || n < 1 || n > 8) {
    fprintf(stderr, "bench_cuda_mv3: --rank TYPE ROWS COLS TOKENS: '%s %s %s %s' is not a weight type, two positive "
            "sizes and 1-8 tokens\n", type, rows, cols, toks);
    return 2;
  }
  const il__mv_hw hw = il__mv_hw_h200();
  std::vector<std::pair<double, int>> order;
  il__mv_cost cost[IL__MV_N_KINDS];
  for (int k = 0; k < IL__MV_N_KINDS; k++)
    if (il__mv_model(&hw, (il__mv_kind)k, t, r, c, n, false, &cost[k])) order.push_back({cost[k].seconds, k});
  std::sort(order.begin(), order.end());
  printf("%s [%lld x %lld], %lld tokens (model: 132 SMs, 1.98 GHz, 4224 GB/s copy, 3.5 us a launch; class %s)\n",
         il_dtype_name(t), (long long)r, (long long)c, (long long)n, il__mv_class_name(il__mv_class(t, r, c)));
  printf("%-5s %10s %9s %10s %10s %10s %8s %9s\n", "kind", "us", "GB/s", "DRAM us", "L1 us", "launch us", "launches",
         "L1 lines");
  for (auto &o : order) {
    const il__mv_cost &q = cost[o.second];
    printf("%-5s %10.2f %9.1f %10.2f %10.2f %10.2f %8d %9.0f\n", il__mv_kind_name((il__mv_kind)o.second), q.seconds * 1e6,
           q.weight_bytes / q.seconds / 1e9, q.t_dram * 1e6, q.t_l1 * 1e6, q.t_launch * 1e6, q.launches, q.line_visits);
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_cuda_mv3 [--device cuda:N] [--quick] [--types f16,q4_0,...] [--table-out FILE]\n"
             "                      [--json FILE] [--budget SECONDS (default 300)]\n"
             "       bench_cuda_mv3 --model-table | --rank TYPE ROWS COLS TOKENS   (the model alone, no device)\n"
             "The matvec tournament of the CUDA backend: ceilings, device vs host twin, every kernel x type x\n"
             "shape x 1/2/4/8 tokens, and the dispatch table of the fastest passing kernel.\n"
             "Exit codes: 0 done and every check passed, 1 a check or step failed, 2 bad arguments, 77 no CUDA device.\n");
}

int main(int argc, char **argv) {
  const char *device = "cuda", *types = "f32,f16,bf16,q8_0,q4_0,q4_1,q4_K,q5_K,q6_K", *table_out = NULL, *json = NULL;
  for (int i = 1; i < argc; i++) {
    const bool more = i + 1 < argc;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--model-table")) return print_model_table();
    else if (!strcmp(argv[i], "--rank") && i + 4 < argc) return rank(argv[i + 1], argv[i + 2], argv[i + 3], argv[i + 4]);
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--device") && more) device = argv[++i];
    else if (!strcmp(argv[i], "--types") && more) types = argv[++i];
    else if (!strcmp(argv[i], "--table-out") && more) table_out = argv[++i];
    else if (!strcmp(argv[i], "--json") && more) json = argv[++i];
    else if (!strcmp(argv[i], "--budget") && more) budget = atof(argv[++i]);
    else {
      fprintf(stderr, "bench_cuda_mv3: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  t_start = il_time_now();
  for (int k = 0; k < IL__MV_N_KINDS; k++) {
    /* IL_CUDA_MATVEC takes 1 and 2 for versions 1 and 2, the kernel names for version 3 */
    setenv("IL_CUDA_MATVEC", k == IL__MV_V1 ? "1" : k == IL__MV_V2 ? "2" : il__mv_kind_name((il__mv_kind)k), 1);
    il_backend_opts o = {};
    if (il_backend_open(device, &o, &BK[k]) != IL_OK) {
      printf("SKIP: --device %s: %s\n", device, il_error_detail());
      return 77;
    }
  }
  unsetenv("IL_CUDA_MATVEC");
  il_backend_info info;
  BK[IL__MV_W8U2]->ops->info(BK[IL__MV_W8U2], &info);
  printf("device: %s\n", info.device);
  json_f = json ? fopen(json, "w") : NULL;
  if (json && !json_f) {
    fprintf(stderr, "bench_cuda_mv3: --json %s: cannot write it\n", json);
    return 1;
  }
  il_jsonw_init(&J, json_f ? json_f : fopen("/dev/null", "w"), true);
  il_jsonw_obj(&J);
  il_jsonw_kstr(&J, "device", info.device);
  double read_gbs;
  const double copy = ceilings(BK[IL__MV_W8U2], &read_gbs);
  int bad = check_twins(types);
  tournament(types, copy);
  write_table(table_out, info.device);
  il_jsonw_obj_end(&J);
  if (il_jsonw_finish(&J) != IL_OK) {
    fprintf(stderr, "bench_cuda_mv3: writing the JSON report failed\n");
    bad = 1;
  }
  if (json_f) fclose(json_f);
  for (int k = 0; k < IL__MV_N_KINDS; k++) BK[k]->ops->destroy(BK[k]);
  printf("bench_cuda_mv3: %.0f s\n", il_time_now() - t_start);
  return bad ? 1 : 0;
}
