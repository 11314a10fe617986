/* tests/test_backend_ops: every op of the device seam, on every backend present, against the
 * scalar CPU backend (ggml's test-backend-ops is the model).
 *
 * Backends under test: cpu with each kernel level this CPU runs (avx2, avx512), sim (the same
 * kernels on a separate budgeted space, reached only through upload/download), and cuda when
 * the module loads and a device is present (otherwise a SKIP (part) line says why). The oracle is
 * `cpu` opened with --isa scalar, whose matmul and attention are the plain-C references.
 * Each case builds host inputs from a fixed seed, uploads them, runs the op, downloads the
 * result and compares by normalized error sqrt(sum (a-b)^2 / sum b^2), with shapes that are
 * not multiples of the block or vector width. sim must equal cpu at the same level bit for bit.
 *
 * On cuda: get_rows equals the CPU (the decoders are the reference's arithmetic); matmul is
 * compared with the exact product instead of the CPU kernels, whose 8-bit activations differ
 * from the GPU's by design (gpu_mm_tol below: 1e-5 of the terms' magnitude for matvec, 2e-3 to
 * 1e-2 where cuBLAS rounds to 16 bits); rmsnorm, swiglu, add, rope, kv_store 1e-6 and attention
 * 1e-5 against the CPU, as on the CPU levels. The matmul tolerances were first written against
 * the CPU kernels with plain normalized error, and the fake module (tests/fakes, which runs the
 * glue on the host) showed why that fails: an output of 32 terms that cancels to near zero. Index
 * errors found on the device (a bad slot or position) come back at the op or at the next sync.
 */
#include "backend/registry.h"
#include "core/quant.h"
#include "harness.h"
#include "memory/mem.h"
#include "sys/cpuid.h"

typedef struct {
  const char *label;
  il_backend *b;
  bool gpu; /* cuda: its own arithmetic, compared with per-type tolerances */
} bk;

static bk backends[8];
static int n_backends;
static il_backend *ref;
static uint64_t rng = 7;

static void open_backend(const char *label, const char *spec, const char *isa) {
  il_backend_opts o = {.threads = 2, .isa = isa};
  il_backend *b = NULL;
  il_status st = il_backend_open(spec, &o, &b);
  if (st != IL_OK) {
    printf("SKIP (part): backend %s: %s\n", label, il_error_detail());
    return;
  }
  il_backend_info info;
  b->ops->info(b, &info);
  backends[n_backends++] = (bk){label, b, !strcmp(info.kind, "cuda")};
}

static bool env_on(const char *name, const char *value) {
  const char *v = getenv(name);
  return v && *v && (value ? !strcmp(v, value) : strcmp(v, "0") != 0);
}

/* How a GPU backend's matmul is judged (see the header): its own arithmetic differs from the
 * CPU kernels' by design (exact F32 activations, or 16-bit ones in cuBLAS), so it is compared
 * with the exact product of the dequantized weights and x, in double, and the error is
 * normalized by the magnitude of the terms (sqrt(sum_r (sum_k |w_rk x_k|)^2)), which stays
 * meaningful when an output cancels to near zero. Matvec (up to 8 tokens, or every batch with
 * IL_CUDA_NO_CUBLAS=1) sums F32 products: 1e-5. cuBLAS rounds x (and quantized weights) to
 * 16 bits: F32 1e-5, F16 and quantized 2e-3, BF16 1e-2. Matvec version 2 (the default;
 * IL_CUDA_MATVEC=1 selects version 1) quantizes the activations of Q8_0/Q4_0/Q4_1 exactly as
 * the CPU does, so those matvecs are compared with the CPU instead, at 1e-4 of the same
 * magnitude. */
static bool gpu_vs_cpu(il_dtype t, int64_t n_tok) {
  const bool matvec = n_tok <= 8 || env_on("IL_CUDA_NO_CUBLAS", NULL);
  return !env_on("IL_CUDA_MATVEC", "1") && matvec && (t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q4_0 || t == IL_DTYPE_Q4_1);
}

static double gpu_mm_tol(il_dtype t, int64_t n_tok) {
  if (gpu_vs_cpu(t, n_tok)) return 1e-4;
  if (n_tok <= 8 || env_on("IL_CUDA_NO_CUBLAS", NULL) || t == IL_DTYPE_F32) return 1e-5;
  return t == IL_DTYPE_BF16 ? 1e-2 : 2e-3;
}

/* Each GPU backend's output against want, normalized by mag. */
static void compare_gpu_exact(const char *op, il_dtype t, int64_t n_tok, float *const *outs, const double *exact,
                              const double *mag, size_t n) {
  for (int i = 0; i < n_backends; i++) {
    if (!backends[i].gpu) continue;
    double num = 0, den = 0;
    for (size_t k = 0; k < n; k++) {
      const double want = gpu_vs_cpu(t, n_tok) ? outs[0][k] : exact[k];
      num += (outs[i + 1][k] - want) * (outs[i + 1][k] - want);
      den += mag[k] * mag[k];
    }
    const double e = den > 0 ? sqrt(num / den) : sqrt(num), tol = gpu_mm_tol(t, n_tok);
    if (!(e <= tol))
      fprintf(stderr, "  %s %s [%lld tokens] on %s: error %.3g of the terms' magnitude > %.3g\n", op, il_dtype_name(t),
              (long long)n_tok, backends[i].label, e, tol);
    IL_CHECK(e <= tol);
  }
}

/* An op's status, or the deferred one from sync when the op itself was queued fine. */
static il_status run_sync(il_backend *b, il_status st) { return st != IL_OK ? st : b->ops->sync(b); }

/* A tensor on b holding host data (uploaded). */
static il_tensor put(il_backend *b, const void *data, int64_t rows, int64_t cols, il_dtype t, const char *name) {
  il_tensor x;
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, rows, cols, t, name, &x));
  if (x.buf && data) IL_CHECK_OK(b->ops->upload(b, x, data, il_tensor_span(&x)));
  return x;
}

static void get(il_backend *b, il_tensor x, void *out) { IL_CHECK_OK(b->ops->download(b, out, x, il_tensor_span(&x))); }

static double nerr(const float *a, const float *r, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - r[i];
    num += d * d;
    den += (double)r[i] * r[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static float *randv(size_t n, float scale) {
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) v[i] = il_test_randf(&rng) * scale;
  return v;
}

/* Compares every backend's output with the reference's; sim vs its cpu twin must be exact;
 * a GPU backend is held to gpu_tol (negative: skipped here). */
static void compare_gpu(const char *op, float *const *outs, size_t n, double tol0, double gpu_tol) {
  for (int i = 0; i < n_backends; i++) {
    if (backends[i].gpu && gpu_tol < 0) continue; /* judged elsewhere */
    double e = nerr(outs[i + 1], outs[0], n);
    /* the same kernels on another memory space or thread count: bit for bit */
    const double tol = backends[i].gpu ? gpu_tol : strstr(backends[i].label, "scalar") ? 0 : tol0;
    if (!(e <= tol)) fprintf(stderr, "  %s on %s: normalized error %.3g > %.3g\n", op, backends[i].label, e, tol);
    IL_CHECK(e <= tol);
  }
}

static void compare(const char *op, float *const *outs, size_t n, double tol0) { compare_gpu(op, outs, n, tol0, tol0); }

#define FOR_ALL(...)                                                                          \
  for (int bi = -1; bi < n_backends; bi++) {                                                   \
    il_backend *b = bi < 0 ? ref : backends[bi].b;                                             \
    float *out = outs[bi + 1];                                                                 \
    __VA_ARGS__                                                                                \
  }

/* ---- matmul, matmul_multi and get_rows over every weight type ---- */

static void test_matmul(void) {
  const il_dtype types[] = {IL_DTYPE_F32,  IL_DTYPE_F16,  IL_DTYPE_BF16, IL_DTYPE_Q8_0, IL_DTYPE_Q4_0,
                            IL_DTYPE_Q4_1, IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K, IL_DTYPE_Q5_0,
                            IL_DTYPE_Q5_1, IL_DTYPE_IQ4_NL};
  const int64_t shapes[][3] = {{32, 1, 1}, {64, 7, 3}, {96, 33, 5}, {256, 17, 1}, {512, 65, 9}, {768, 5, 2}};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    const il_dtype t = types[ti];
    int cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
      const int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
      if (n_in % (int64_t)il_dtype_get(t)->blck) continue;
      const size_t rs = il_dtype_row_size(t, n_in);
      uint8_t *w = malloc(rs * (size_t)n_out);
      float *src = randv((size_t)n_in, 1.0f);
      for (int64_t r = 0; r < n_out; r++) {
        for (int64_t k = 0; k < n_in; k++) src[k] = il_test_randf(&rng);
        if (il_quantize_row(t, src, w + (size_t)r * rs, n_in) != IL_OK) { /* K-quants: random bytes, sane scales */
          for (size_t k = 0; k < rs; k++) w[(size_t)r * rs + k] = (uint8_t)(il_test_randf(&rng) * 127 + 128);
          for (size_t blk = 0; blk < rs / il_dtype_get(t)->size; blk++) {
            uint8_t *bp = w + (size_t)r * rs + blk * il_dtype_get(t)->size;
            uint16_t d = il_f32_to_fp16(0.01f), dm = il_f32_to_fp16(0.002f);
            if (t == IL_DTYPE_Q6_K) memcpy(bp + il_dtype_get(t)->size - 2, &d, 2);
            else memcpy(bp, &d, 2), memcpy(bp + 2, &dm, 2);
          }
        }
      }
      float *x = randv((size_t)(n_in * n_tok), 2.0f);
      /* the exact product and the magnitude of its terms, for GPU backends */
      /* [0, ny): matmul; [ny, 3 ny): matmul_multi's [n_tok x 2 n_out] */
      double *exact = calloc((size_t)(3 * n_out * n_tok), sizeof(double)), *mag = calloc((size_t)(3 * n_out * n_tok), sizeof(double));
      float *wrow = malloc((size_t)n_in * 4);
      for (int64_t r = 0; r < n_out; r++) {
        IL_CHECK_OK(il_dequantize_row(t, w + (size_t)r * rs, wrow, n_in));
        for (int64_t tk = 0; tk < n_tok; tk++) {
          double sum = 0, m = 0;
          for (int64_t k = 0; k < n_in; k++) sum += (double)wrow[k] * x[tk * n_in + k], m += fabs((double)wrow[k] * x[tk * n_in + k]);
          exact[tk * n_out + r] = sum, mag[tk * n_out + r] = m;
          /* matmul_multi's layout: [n_tok x 2 n_out], both halves the same product */
          exact[n_out * n_tok + tk * 2 * n_out + r] = exact[n_out * n_tok + tk * 2 * n_out + n_out + r] = sum;
          mag[n_out * n_tok + tk * 2 * n_out + r] = mag[n_out * n_tok + tk * 2 * n_out + n_out + r] = m;
        }
      }
      free(wrow);
      int32_t ids[9];
      for (int i = 0; i < 9; i++) ids[i] = (int32_t)((i * 5 + 3) % n_out);
      const size_t ny = (size_t)(n_out * n_tok), nm = 2 * ny, ng = (size_t)(n_tok * n_in);
      float *outs[9], *multi[9], *rows[9];
      for (int i = 0; i <= n_backends; i++) outs[i] = calloc(ny, 4), multi[i] = calloc(nm, 4), rows[i] = calloc(ng, 4);
      FOR_ALL({
        il_tensor W, X, Y, Y2[2], IDS, G;
        IL_CHECK_OK(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, w, n_out, n_in, rs, t, "w", &W));
        X = put(b, x, n_tok, n_in, IL_DTYPE_F32, "x");
        Y = put(b, NULL, n_tok, n_out, IL_DTYPE_F32, "y");
        IL_CHECK_OK(b->ops->matmul(b, Y, W, X));
        get(b, Y, out);
        /* two weights sharing x, outputs side by side in one buffer with a row stride */
        il_tensor YY = put(b, NULL, n_tok, 2 * n_out, IL_DTYPE_F32, "yy");
        Y2[0] = YY, Y2[0].cols = n_out;
        Y2[1] = Y2[0], Y2[1].off += (size_t)n_out * 4;
        const il_tensor ws[2] = {W, W};
        IL_CHECK_OK(b->ops->matmul_multi(b, 2, Y2, ws, X));
        get(b, YY, multi[bi + 1]);
        IDS = put(b, ids, 1, n_tok, IL_DTYPE_I32, "ids");
        G = put(b, NULL, n_tok, n_in, IL_DTYPE_F32, "rows");
        IL_CHECK_OK(b->ops->get_rows(b, G, W, IDS));
        get(b, G, rows[bi + 1]);
        il_tensor *all[] = {&W, &X, &Y, &YY, &IDS, &G};
        for (size_t k = 0; k < 6; k++) il_backend_tensor_free(b, all[k]);
      });
      /* SIMD levels read the same quantized activations as scalar: float rounding only */
      compare_gpu("matmul", outs, ny, 1e-5, -1);
      compare_gpu("matmul_multi", multi, nm, 1e-5, -1);
      compare_gpu_exact("matmul", t, n_tok, outs, exact, mag, ny);
      compare_gpu_exact("matmul_multi", t, n_tok, multi, exact + ny, mag + ny, nm);
      free(exact), free(mag);
      compare("get_rows", rows, ng, 0);
      for (int i = 1; i <= n_backends; i++) IL_CHECK(nerr(multi[i], multi[i], nm) == 0);
      for (int i = 0; i <= n_backends; i++) free(outs[i]), free(multi[i]), free(rows[i]);
      free(w), free(src), free(x);
      cases++;
    }
    printf("matmul/matmul_multi/get_rows %-5s %d shapes on %d backends\n", il_dtype_name(t), cases, n_backends);
  }
}

/* ---- elementwise, norm, rope, kv_store, copy, count_nonfinite ---- */

static void test_small_ops(void) {
  const int64_t shapes[][2] = {{1, 1}, {3, 17}, {5, 64}, {2, 333}, {33, 128}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t R = shapes[si][0], C = shapes[si][1];
    const size_t n = (size_t)(R * C);
    float *a = randv(n, 3.0f), *c = randv(n, 1.0f), *g = randv((size_t)C, 1.0f);
    float *outs[9];
    for (int i = 0; i <= n_backends; i++) outs[i] = calloc(4 * n + (size_t)C, 4);
    FOR_ALL({
      il_tensor A = put(b, a, R, C, IL_DTYPE_F32, "a"), Cc = put(b, c, R, C, IL_DTYPE_F32, "c");
      il_tensor G = put(b, g, 1, C, IL_DTYPE_F32, "g"), Y = put(b, NULL, R, C, IL_DTYPE_F32, "y");
      IL_CHECK_OK(b->ops->rmsnorm(b, Y, A, G, 1e-5f));
      get(b, Y, out);
      IL_CHECK_OK(b->ops->copy(b, Y, A));
      IL_CHECK_OK(b->ops->swiglu(b, Y, Cc));
      get(b, Y, out + n);
      IL_CHECK_OK(b->ops->copy(b, Y, A));
      IL_CHECK_OK(b->ops->add(b, Y, Cc));
      IL_CHECK_OK(b->ops->add_bias(b, Y, G));
      get(b, Y, out + 2 * n);
      IL_CHECK_OK(b->ops->rmsnorm(b, A, A, G, 1e-5f)); /* in place */
      get(b, A, out + 3 * n);
      il_tensor *all[] = {&A, &Cc, &G, &Y};
      for (size_t k = 0; k < 4; k++) il_backend_tensor_free(b, all[k]);
    });
    compare("rmsnorm/swiglu/add/add_bias", outs, 4 * n, 1e-6);
    for (int i = 0; i <= n_backends; i++) free(outs[i]);
    free(a), free(c), free(g);
  }
  /* count_nonfinite: exact counts everywhere */
  float v[37];
  for (int i = 0; i < 37; i++) v[i] = (float)i;
  v[3] = INFINITY, v[20] = -INFINITY, v[36] = NAN;
  for (int bi = -1; bi < n_backends; bi++) {
    il_backend *b = bi < 0 ? ref : backends[bi].b;
    il_tensor X = put(b, v, 1, 37, IL_DTYPE_F32, "x");
    int64_t nf = -1;
    IL_CHECK_OK(b->ops->count_nonfinite(b, X, &nf));
    IL_CHECK_INT(nf, 3);
    il_backend_tensor_free(b, &X);
  }
  /* round_to (F16 overflows to inf past 65504; BF16 keeps the range) and value_stats: exact */
  float big[40];
  for (int i = 0; i < 40; i++) big[i] = (i - 20) * 3777.123f + 0.1f * (float)i;
  big[5] = NAN, big[6] = INFINITY;
  float rounded[2][10][40];
  int64_t nf[10];
  float amax[10];
  for (int bi = -1; bi < n_backends; bi++) {
    il_backend *b = bi < 0 ? ref : backends[bi].b;
    for (int k = 0; k < 2; k++) {
      il_tensor X = put(b, big, 2, 20, IL_DTYPE_F32, "x");
      IL_CHECK_OK(b->ops->round_to(b, X, k ? IL_DTYPE_BF16 : IL_DTYPE_F16));
      get(b, X, rounded[k][bi + 1]);
      if (k == 0) IL_CHECK_OK(b->ops->value_stats(b, X, &nf[bi + 1], &amax[bi + 1]));
      il_backend_tensor_free(b, &X);
    }
    int differ = 0; /* equal values, or NaN on both sides (NaN payloads differ between devices) */
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < 40; i++) {
        const float a = rounded[k][bi + 1][i], r = rounded[k][0][i];
        differ += !(a == r || (isnan(a) && isnan(r)));
      }
    IL_CHECK_INT(differ, 0);
    IL_CHECK_INT(nf[bi + 1], nf[0]);
    IL_CHECK(amax[bi + 1] == amax[0]);
  }
  IL_CHECK(nf[0] >= 3); /* NaN, inf, and F16 overflows */
  printf("rmsnorm, swiglu, add, add_bias, copy, count_nonfinite, round_to, value_stats: %zu shapes\n",
         sizeof shapes / sizeof shapes[0]);
}

/* copy between F32 and F16/BF16 (16-bit activations): the narrowed bits equal core/dtype.h's
 * conversions on every backend (round to nearest even, F16 overflow to inf, subnormals; a NaN
 * may carry another payload), widening is exact, rows of different strides, odd widths; other
 * type pairs are refused by name. */
static void test_convert(void) {
  enum { R = 3, C = 37, PAD = 5 };
  float v[R * C];
  for (int i = 0; i < R * C; i++) v[i] = (float)((i * 7919) % 2001 - 1000) * 0.37f * powf(2.0f, (float)(i % 23 - 11));
  v[1] = 65504.0f, v[2] = 65520.0f, v[3] = -70000.0f, v[4] = 5.9604645e-8f, v[5] = 2.9802322e-8f, v[6] = 1e-6f;
  v[7] = INFINITY, v[8] = NAN, v[9] = -0.0f, v[12] = 3.0e38f;
  v[10] = 1.00048828125f, v[11] = 1.00146484375f; /* F16 ties: to even down, to even up */
  v[13] = 1.00390625f, v[14] = 1.01171875f;       /* BF16 ties: the same */
  const il_dtype half[2] = {IL_DTYPE_F16, IL_DTYPE_BF16};
  for (int h = 0; h < 2; h++) {
    uint16_t want[R * C];
    float back[R * C];
    for (int i = 0; i < R * C; i++) {
      want[i] = h ? il_f32_to_bf16(v[i]) : il_f32_to_fp16(v[i]);
      back[i] = h ? il_bf16_to_f32(want[i]) : il_fp16_to_f32(want[i]);
    }
    for (int bi = -1; bi < n_backends; bi++) {
      il_backend *b = bi < 0 ? ref : backends[bi].b;
      const char *label = bi < 0 ? "reference" : backends[bi].label;
      il_tensor X = put(b, v, R, C, IL_DTYPE_F32, "x"), H = put(b, NULL, R, C + PAD, half[h], "h16"),
                W = put(b, NULL, R, C + PAD, IL_DTYPE_F32, "wide");
      il_tensor Hv = H, Wv = W; /* views of C columns in rows of C + PAD */
      Hv.cols = Wv.cols = C;
      IL_CHECK_OK(run_sync(b, b->ops->copy(b, Hv, X)));
      IL_CHECK_OK(run_sync(b, b->ops->copy(b, Wv, Hv)));
      uint16_t got[R * (C + PAD)];
      float wide[R * (C + PAD)];
      get(b, H, got);
      get(b, W, wide);
      int bad = 0;
      for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
          const int i = r * C + c, j = r * (C + PAD) + c;
          const bool nan = isnan(back[i]);
          const bool bits_ok = got[j] == want[i] || (nan && isnan(h ? il_bf16_to_f32(got[j]) : il_fp16_to_f32(got[j])));
          const bool wide_ok = nan ? isnan(wide[j]) : memcmp(&wide[j], &back[i], 4) == 0;
          if (!bits_ok || !wide_ok) {
            if (bad++ < 3)
              fprintf(stderr, "  copy f32 <-> %s on %s: element %d (%g): bits %04x want %04x, back %g want %g\n",
                      il_dtype_name(half[h]), label, i, (double)v[i], got[j], want[i], (double)wide[j], (double)back[i]);
          }
        }
      IL_CHECK_INT(bad, 0);
      if (h == 0) { /* F16 -> BF16 and a block type are not conversions copy makes */
        il_tensor B = put(b, NULL, R, C + PAD, IL_DTYPE_BF16, "b16");
        B.cols = C;
        IL_CHECK_INT(b->ops->copy(b, B, Hv), IL_ERR_UNSUPPORTED);
        IL_CHECK(strstr(il_error_detail(), "h16") && strstr(il_error_detail(), "b16"));
        il_backend_tensor_free(b, &B);
      }
      il_tensor *all[] = {&X, &H, &W};
      for (size_t k = 0; k < 3; k++) il_backend_tensor_free(b, all[k]);
    }
  }
  printf("copy f32 <-> f16 / bf16: bit-exact on %d backends\n", n_backends + 1);
}

/* rope against the formula (angles in double, as the backend computes them), through the
 * backends' cache of the last position's angles: calls at one position in a row (a decode
 * step's q and k), the same position with another base, and a batch whose first position
 * comes back in later rows among others. */
static void test_rope_cache(void) {
  enum { T = 4, H = 3, HD = 16 };
  const int32_t calls[][T] = {{7, 7, 7, 7}, {7, 7, 7, 7}, {7, 7, 7, 7}, {8, 7, 8, 300}, {8, 8, 0, 8}};
  const float bases[] = {10000.0f, 10000.0f, 500000.0f, 10000.0f, 10000.0f};
  const int ncalls = (int)(sizeof calls / sizeof calls[0]);
  float *x = randv(T * H * HD, 1.0f), want[T * H * HD], got[T * H * HD];
  for (int bi = -1; bi < n_backends; bi++) {
    il_backend *b = bi < 0 ? ref : backends[bi].b;
    for (int ci = 0; ci < ncalls; ci++) {
      const il_rope_params p = {H, HD, 12, bases[ci], 2.0f, ci % 2 ? IL_ROPE_NEOX : IL_ROPE_NORM};
      for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
          const float *v = x + (t * H + h) * HD;
          float *w = want + (t * H + h) * HD;
          memcpy(w, v, HD * sizeof(float));
          for (int i = 0; i < p.n_rot; i += 2) {
            const double th = (double)((float)calls[ci][t] / p.scale) * pow((double)p.base, -(double)i / (double)p.n_rot);
            const int a = p.mode == IL_ROPE_NEOX ? i / 2 : i, c = p.mode == IL_ROPE_NEOX ? i / 2 + (int)p.n_rot / 2 : i + 1;
            w[a] = v[a] * (float)cos(th) - v[c] * (float)sin(th);
            w[c] = v[a] * (float)sin(th) + v[c] * (float)cos(th);
          }
        }
      il_tensor X = put(b, x, T, H * HD, IL_DTYPE_F32, "x"), P = put(b, calls[ci], 1, T, IL_DTYPE_I32, "pos");
      IL_CHECK_OK(b->ops->rope(b, X, P, &p));
      get(b, X, got);
      for (int k = 0; k < T * H * HD; k++) IL_CHECK_NEAR(got[k], want[k], 1e-6);
      il_backend_tensor_free(b, &X), il_backend_tensor_free(b, &P);
    }
  }
  free(x);
  printf("rope against the formula through the angle cache: %d calls on %d backends\n", ncalls, n_backends + 1);
}

static void test_rope_kv(void) {
  const struct {
    int64_t heads, hd, rot;
    il_rope_mode mode;
  } cs[] = {{4, 16, 16, IL_ROPE_NORM}, {3, 80, 64, IL_ROPE_NEOX}, {2, 128, 128, IL_ROPE_NORM}};
  for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
    const int64_t T = 7, C = cs[ci].heads * cs[ci].hd, cells = 20;
    float *x = randv((size_t)(T * C), 1.0f);
    int32_t pos[7] = {0, 1, 2, 100, 5000, 3, 9}, slots[7] = {19, 0, 4, 5, 6, 13, 1};
    const il_rope_params p = {cs[ci].heads, cs[ci].hd, cs[ci].rot, 10000.0f, 1.0f, cs[ci].mode};
    float *outs[9];
    const size_t n = (size_t)(T * C) + 3 * (size_t)(cells * C);
    for (int i = 0; i <= n_backends; i++) outs[i] = calloc(n, 4);
    FOR_ALL({
      il_tensor X = put(b, x, T, C, IL_DTYPE_F32, "x"), P = put(b, pos, 1, T, IL_DTYPE_I32, "pos");
      il_tensor S = put(b, slots, 1, T, IL_DTYPE_I32, "slots");
      il_tensor K = put(b, NULL, cells, C, IL_DTYPE_F32, "k cells"), V = put(b, NULL, cells, C, IL_DTYPE_F32, "v cells");
      float *zero = calloc((size_t)(cells * C), 4);
      IL_CHECK_OK(b->ops->upload(b, K, zero, il_tensor_span(&K)));
      IL_CHECK_OK(b->ops->upload(b, V, zero, il_tensor_span(&V)));
      free(zero);
      IL_CHECK_OK(b->ops->rope(b, X, P, &p));
      get(b, X, out);
      il_kv_view kv = {.k = K, .v = V, .block = cells, .n_seq = 1, .max_blocks = 1, .n_ctx = (int32_t)cells};
      il_tensor Xv = put(b, x, T, C, IL_DTYPE_F32, "v rows");
      IL_CHECK_OK(b->ops->kv_store(b, &kv, X, Xv, S));
      get(b, K, out + T * C);
      get(b, V, out + T * C + cells * C);
      /* F16 cells: rows converted on the way in */
      il_tensor K16 = put(b, NULL, cells, C, IL_DTYPE_F16, "k cells f16"), V16 = put(b, NULL, cells, C, IL_DTYPE_F16, "v cells f16");
      uint16_t *z16 = calloc((size_t)(cells * C), 2), *k16 = calloc((size_t)(cells * C), 2);
      IL_CHECK_OK(b->ops->upload(b, K16, z16, il_tensor_span(&K16)));
      IL_CHECK_OK(b->ops->upload(b, V16, z16, il_tensor_span(&V16)));
      il_kv_view kv16 = {.k = K16, .v = V16, .block = cells, .n_seq = 1, .max_blocks = 1, .n_ctx = (int32_t)cells};
      IL_CHECK_OK(b->ops->kv_store(b, &kv16, X, Xv, S));
      get(b, K16, k16);
      float *o16 = out + T * C + 2 * cells * C;
      for (int64_t i = 0; i < cells * C; i++) o16[i] = il_fp16_to_f32(k16[i]);
      free(z16), free(k16);
      il_backend_tensor_free(b, &K16), il_backend_tensor_free(b, &V16);
      int32_t bad = (int32_t)cells;
      IL_CHECK_OK(b->ops->upload(b, S, &bad, 4));
      IL_CHECK_INT(run_sync(b, b->ops->kv_store(b, &kv, X, Xv, S)), IL_ERR_RANGE); /* a slot outside the cells */
      IL_CHECK(strstr(il_error_detail(), "slot") != NULL);
      il_tensor *all[] = {&X, &P, &S, &K, &V, &Xv};
      for (size_t k = 0; k < 6; k++) il_backend_tensor_free(b, all[k]);
    });
    compare("rope/kv_store", outs, n, 1e-6);
    for (int i = 0; i <= n_backends; i++) free(outs[i]);
    free(x);
  }
  printf("rope (norm, neox, partial) and kv_store at slots (f32 and f16 cells): %zu shapes\n", sizeof cs / sizeof cs[0]);
}

/* q8_0 cells: every backend whose attention reads them stores exactly the bytes of ggml's
 * reference quantizer; a non-finite row is refused by name, not stored. */
static void test_kv_q8(void) {
  const int64_t T = 5, C = 2 * 64, cells = 8;
  float *x = randv((size_t)(T * C), 3.0f);
  int32_t slots[5] = {7, 0, 3, 4, 1};
  const size_t row = il_dtype_row_size(IL_DTYPE_Q8_0, C);
  uint8_t *want = calloc(row, 1), *got = malloc(row * (size_t)cells);
  int n_run = 0;
  float *outs[9] = {0};
  FOR_ALL({
    (void)out;
    if (!b->ops->supports(b, IL_OP_ATTENTION, IL_DTYPE_Q8_0, IL_DTYPE_F32)) {
      printf("kv_store q8_0: %s does not read q8_0 cells (skipped)\n", bi < 0 ? "reference" : backends[bi].label);
      continue;
    }
    n_run++;
    il_tensor X = put(b, x, T, C, IL_DTYPE_F32, "k rows"), S = put(b, slots, 1, T, IL_DTYPE_I32, "slots");
    il_tensor K = put(b, NULL, cells, C, IL_DTYPE_Q8_0, "k cells q8"), V = put(b, NULL, cells, C, IL_DTYPE_Q8_0, "v cells q8");
    il_kv_view kv = {.k = K, .v = V, .block = cells, .n_seq = 1, .max_blocks = 1, .n_ctx = (int32_t)cells};
    IL_CHECK_OK(run_sync(b, b->ops->kv_store(b, &kv, X, X, S)));
    IL_CHECK_OK(b->ops->download(b, got, K, il_tensor_span(&K)));
    for (int64_t t = 0; t < T; t++) {
      IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q8_0, x + t * C, want, C));
      IL_CHECK(memcmp(got + (size_t)slots[t] * K.stride, want, row) == 0);
    }
    float *bad = malloc(sizeof(float) * (size_t)(T * C));
    memcpy(bad, x, sizeof(float) * (size_t)(T * C));
    bad[3 * C + 70] = NAN;
    il_tensor Xb = put(b, bad, T, C, IL_DTYPE_F32, "nan rows");
    IL_CHECK_INT(run_sync(b, b->ops->kv_store(b, &kv, X, Xb, S)), IL_ERR_FORMAT);
    IL_CHECK(strstr(il_error_detail(), "row 3 of 'nan rows'") != NULL);
    free(bad);
    il_tensor *all[] = {&X, &S, &K, &V, &Xb};
    for (size_t k = 0; k < 5; k++) il_backend_tensor_free(b, all[k]);
  });
  IL_CHECK(n_run >= 2); /* the reference cpu and sim */
  printf("kv_store into q8_0 cells: bytes of the reference quantizer on %d backends; a nan row refused\n", n_run);
  free(x), free(want), free(got);
}

/* ---- attention: every kernel of every backend against the reference's first kernel ---- */

static void test_attention(void) {
  const struct {
    int64_t heads, kv_heads, hd;
    int n_seq, n_ctx;
  } cs[] = {{4, 4, 16, 1, 40}, {8, 2, 64, 2, 33}, {6, 3, 80, 3, 50}, {8, 8, 128, 1, 129}};
  for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
    const int64_t H = cs[ci].heads, KH = cs[ci].kv_heads, hd = cs[ci].hd, cells = (int64_t)cs[ci].n_seq * cs[ci].n_ctx;
    const int T = 9;
    float *q = randv((size_t)(T * H * hd), 1.0f), *k = randv((size_t)(cells * KH * hd), 1.0f),
          *v = randv((size_t)(cells * KH * hd), 1.0f);
    int32_t seq[9], pos[9], table[3];
    for (int t = 0; t < T; t++) seq[t] = t % cs[ci].n_seq, pos[t] = (t * 7 + 3) % cs[ci].n_ctx;
    pos[0] = 0, pos[T - 1] = cs[ci].n_ctx - 1;
    for (int s = 0; s < cs[ci].n_seq; s++) table[s] = cs[ci].n_seq - 1 - s; /* sequences in reverse cell order */
    const size_t n = (size_t)(T * H * hd);
    float *want = calloc(n, 4), *got = calloc(n, 4);
    for (int bi = -1; bi < n_backends; bi++) {
      il_backend *b = bi < 0 ? ref : backends[bi].b;
      il_tensor Q = put(b, q, T, H * hd, IL_DTYPE_F32, "q"), O = put(b, NULL, T, H * hd, IL_DTYPE_F32, "out");
      il_tensor K = put(b, k, cells, KH * hd, IL_DTYPE_F32, "k"), V = put(b, v, cells, KH * hd, IL_DTYPE_F32, "v");
      il_tensor S = put(b, seq, 1, T, IL_DTYPE_I32, "seq"), P = put(b, pos, 1, T, IL_DTYPE_I32, "pos");
      il_tensor TB = put(b, table, cs[ci].n_seq, 1, IL_DTYPE_I32, "table");
      il_kv_view kv = {K, V, TB, cs[ci].n_ctx, cs[ci].n_seq, 1, cs[ci].n_ctx};
      il_attn_args a = {O, Q, S, P, &kv, H, KH, hd, 1.0f / sqrtf((float)hd), 0};
      int nk = 0;
      const il_attn_kernel *ks = b->ops->attn_kernels(b, &nk);
      IL_CHECK(nk >= 1);
      for (int ki = 0; ki < nk; ki++) {
        if (ks[ki].why_not(b, &a)) continue;
        /* sliced: also in slices of 4 rows, so the 9 rows take three slices, the last one short */
        const int n_slices = bi >= 0 && !strcmp(ks[ki].name, "sliced") ? 2 : 1;
        for (int sl = 0; sl < n_slices; sl++) {
          a.slice = sl ? 4 : 0;
          il_tensor W = {0};
          size_t wsz = ks[ki].workspace(b, &a);
          if (wsz) IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, (int64_t)(wsz + 3) / 4, IL_DTYPE_F32, "ws", &W));
          memset(got, 0, n * 4); /* out starts at zero: each kernel must write every row itself */
          IL_CHECK_OK(b->ops->upload(b, O, got, n * 4));
          IL_CHECK_OK(ks[ki].run(b, &a, W));
          il_backend_tensor_free(b, &W);
          get(b, O, bi < 0 ? want : got);
          if (bi >= 0) {
            double e = nerr(got, want, n);
            if (!(e <= 1e-5))
              fprintf(stderr, "  attention %s (slice %d) on %s: normalized error %.3g\n", ks[ki].name, a.slice,
                      backends[bi].label, e);
            IL_CHECK(e <= 1e-5);
          }
        }
        a.slice = 0;
        if (bi < 0) break; /* the reference: its first usable kernel */
      }
      int32_t far = cs[ci].n_ctx; /* a position past the context is an error, not a read */
      IL_CHECK_OK(b->ops->upload(b, P, &far, 4));
      il_tensor W = {0};
      size_t wsz = ks[0].workspace(b, &a);
      if (wsz) IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_WORKSPACE, 1, (int64_t)(wsz + 3) / 4, IL_DTYPE_F32, "ws", &W));
      IL_CHECK_INT(run_sync(b, ks[0].run(b, &a, W)), IL_ERR_RANGE);
      IL_CHECK_OK(b->ops->sync(b)); /* the fault was reported once and cleared */
      il_backend_tensor_free(b, &W);
      il_tensor *all[] = {&Q, &O, &K, &V, &S, &P, &TB};
      for (size_t j = 0; j < 7; j++) il_backend_tensor_free(b, all[j]);
    }
    free(q), free(k), free(v), free(want), free(got);
  }
  printf("attention: %zu shapes (GQA 1/4/2/1, several sequences, head sizes 16-128)\n", sizeof cs / sizeof cs[0]);
}

/* ---- the seam's guarantees ---- */

static void test_seam(void) {
  for (int i = 0; i < n_backends; i++) {
    il_backend *b = backends[i].b;
    il_backend_info info;
    b->ops->info(b, &info);
    IL_CHECK_INT(b->ops->version, IL_BACKEND_OPS_VERSION);
    il_tensor t = put(b, NULL, 4, 4, IL_DTYPE_F32, "t");
    if (!strcmp(info.kind, "sim") || !strcmp(info.kind, "cuda")) {
      IL_CHECK(b->ops->host_ptr(b, t.buf) == NULL); /* device memory is not host memory */
      IL_CHECK(b->ops->buffer_wrap_host == NULL);
      il_transfer_stats xs;
      b->ops->transfers(b, &xs);
      IL_CHECK(xs.upload_bytes > 0 && xs.download_bytes > 0);
    } else {
      IL_CHECK(b->ops->host_ptr(b, t.buf) != NULL);
    }
    /* a view past its buffer is refused with the tensor's name */
    il_tensor past = t;
    past.rows = 5;
    float junk[20];
    IL_CHECK_INT(b->ops->download(b, junk, past, sizeof junk), IL_ERR_RANGE);
    IL_CHECK_INT(b->ops->add(b, past, past), IL_ERR_RANGE);
    IL_CHECK(strstr(il_error_detail(), "'t'") != NULL);
    /* wrong activation type */
    il_tensor ids = put(b, NULL, 1, 4, IL_DTYPE_I32, "ids");
    IL_CHECK_INT(b->ops->swiglu(b, ids, ids), IL_ERR_UNSUPPORTED);
    il_backend_tensor_free(b, &ids);
    il_backend_tensor_free(b, &t);
  }
  /* registry errors name the spec */
  il_backend *b = NULL;
  IL_CHECK_INT(il_backend_open("sim:lots", NULL, &b), IL_ERR_INVALID_ARG);
  IL_CHECK(strstr(il_error_detail(), "lots") != NULL);
  IL_CHECK_INT(il_backend_open("sim:1GiB,pcie=fast", NULL, &b), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_backend_open("sim:1MiB,ctx=2MiB", NULL, &b), IL_ERR_OOM);
  IL_CHECK_INT(il_backend_open("tpu", NULL, &b), IL_ERR_INVALID_ARG);
  IL_CHECK(b == NULL);
  bool have_gpu = false;
  for (int i = 0; i < n_backends; i++) have_gpu = have_gpu || backends[i].gpu;
  if (!have_gpu) { /* no module or no device: an error that says why, never a backend */
    IL_CHECK_INT(il_backend_open("cuda:0", NULL, &b), IL_ERR_UNSUPPORTED);
    IL_CHECK(strstr(il_error_detail(), "cuda:0") != NULL);
    IL_CHECK(b == NULL);
  } else {
    IL_CHECK_INT(il_backend_open("cuda:x", NULL, &b), IL_ERR_INVALID_ARG);
    IL_CHECK_INT(il_backend_open("cuda:255", NULL, &b), IL_ERR_INVALID_ARG);
    IL_CHECK(b == NULL);
    /* the allocator's cap on the real device: the same OOM report as sim's */
    il_backend_opts lim = {.mem_limit = 4 << 20};
    IL_CHECK_OK(il_backend_open("cuda:0", &lim, &b));
    if (b) {
      il_tensor ok, big;
      IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_KV, 1, 262144, IL_DTYPE_F32, "fits", &ok));
      IL_CHECK_INT(il_backend_tensor_new(b, IL_MEM_KV, 1, 1 << 20, IL_DTYPE_F32, "too big", &big), IL_ERR_OOM);
      il_mem_oom o;
      IL_CHECK(il_mem_last_oom(&o));
      IL_CHECK_STR(o.what, "too big");
      size_t fr, tot;
      b->ops->memory(b, &fr, &tot);
      IL_CHECK_INT(tot, 4 << 20);
      il_backend_tensor_free(b, &ok);
      b->ops->destroy(b);
      b = NULL;
    }
  }
  /* sim: the budget is hard */
  IL_CHECK_OK(il_backend_open("sim:1MiB", NULL, &b));
  il_tensor big;
  IL_CHECK_INT(il_backend_tensor_new(b, IL_MEM_KV, 1, 300000, IL_DTYPE_F32, "too big", &big), IL_ERR_OOM);
  il_mem_oom o;
  IL_CHECK(il_mem_last_oom(&o));
  IL_CHECK_STR(o.what, "too big");
  IL_CHECK_INT(o.requested, 1200000);
  IL_CHECK(!o.fragmentation);
  size_t fr, tot;
  b->ops->memory(b, &fr, &tot);
  IL_CHECK_INT(tot, 1 << 20);
  IL_CHECK_INT(fr, 1 << 20);
  b->ops->destroy(b);
  /* fragmentation: 2 MiB free in 512 KiB holes, a 1 MiB request fails and says why */
  IL_CHECK_OK(il_backend_open("sim:4MiB", NULL, &b));
  il_tensor blk[8];
  for (int i = 0; i < 8; i++) IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_KV, 1, 131072, IL_DTYPE_F32, "kv block", &blk[i]));
  for (int i = 0; i < 8; i += 2) il_backend_tensor_free(b, &blk[i]);
  IL_CHECK_INT(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 262144, IL_DTYPE_F32, "one MiB", &big), IL_ERR_OOM);
  IL_CHECK(il_mem_last_oom(&o) && o.fragmentation);
  IL_CHECK_INT(o.largest_free, 524288);
  il_caching_stats cs;
  b->ops->allocator_stats(b, &cs);
  IL_CHECK_NEAR(cs.fragmentation, 0.75, 1e-9); /* 1 - 512 KiB / 2 MiB */
  for (int i = 1; i < 8; i += 2) il_backend_tensor_free(b, &blk[i]);
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 262144, IL_DTYPE_F32, "one MiB", &big));
  il_backend_tensor_free(b, &big);
  b->ops->destroy(b);
}

int main(void) {
  il_backend_opts o = {.threads = 2, .isa = "scalar"};
  IL_CHECK_OK(il_backend_open("cpu", &o, &ref));
  if (!ref) return il_test_finish();
  const il_isa best = il_cpu_isa_detected();
  {
    il_backend_opts o1 = {.threads = 1, .isa = "scalar"};
    il_backend *b = NULL;
    IL_CHECK_OK(il_backend_open("cpu", &o1, &b));
    if (b) backends[n_backends++] = (bk){"cpu scalar 1 thread", b, false};
  }
  if (best >= IL_ISA_AVX2) open_backend("cpu avx2", "cpu", "avx2");
  else printf("SKIP (part): no AVX2 on this CPU\n");
  if (best >= IL_ISA_AVX512) open_backend("cpu avx512", "cpu", "avx512");
  else printf("SKIP (part): no AVX-512 on this CPU: its kernels are not checked here\n");
  open_backend("sim (best level)", "sim:512MiB", NULL);
  open_backend("sim scalar", "sim:256MiB,pcie=64GB/s", "scalar");
  if (il_backend_cuda_unavailable()) printf("SKIP (part): cuda: %s\n", il_backend_cuda_unavailable());
  else open_backend("cuda", "cuda:0", NULL);
  test_small_ops();
  test_convert();
  test_rope_kv();
  test_rope_cache();
  test_kv_q8();
  test_attention();
  test_matmul();
  test_seam(); /* last: it checks the transfers the others made */
  for (int i = 0; i < n_backends; i++) backends[i].b->ops->destroy(backends[i].b);
  ref->ops->destroy(ref);
  return il_test_finish();
}
