/* bench/bench_cuda_attn: the CUDA backend's attention kernels at decode and prefill shapes,
 * against the copy ceiling and the memeff kernel measured in the same run.
 *
 * Everything goes through the device seam (the registry's "cuda" backend: buffers, copy, the
 * backend's attention kernel entries, events), so it measures what the engine gets.
 * 1. Ceiling: a device-to-device copy of 1 GiB (256 MiB with --quick), best of 10 (3); GB/s of
 *    bytes read + written.
 * 2. Decode: Llama-3-8B heads (32 query heads, 8 KV heads of 128), one query token per sequence
 *    at 512, 4096 and 32768 positions, 1 and 8 sequences, cache contiguous and paged (blocks of
 *    16 positions handed out in a shuffled order): milliseconds per call of flash and memeff,
 *    GB/s of K and V bytes read (each byte once per call), that figure as % of the copy, the
 *    speed-up of flash over memeff, and the largest difference between their outputs.
 * 3. Prefill: 4096 query tokens of one sequence at positions 0..4095 (causal), head 128, paged:
 *    milliseconds, TFLOP/s (4 x head x heads x the sum of attended positions: QK^T and PV), the
 *    speed-up, the largest difference.
 * Each timing is the mean of N calls between two events after one warm-up call.
 * --device sim:SIZE runs it on the simulated GPU (the CPU's kernels): a dry run of the program
 * on a machine without a GPU, whose figures are the CPU's.
 * Usage: bench_cuda_attn [--device cuda:N|sim:SIZE] [--kv f16|f32|bf16|q8_0] [--json FILE] [--quick]
 * Exit codes: 0 done, 1 a measurement failed, 64 a bad option, 77 no CUDA device (prints why).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/registry.h"
#include "core/jsonw.h"
#include "core/quant.h"

static il_backend *B;
static const il_backend_ops *O;
static il_jsonw J;
static bool quick;
static il_dtype kv_type = IL_DTYPE_F16;

#define CHECK(expr)                                                                                           \
  do {                                                                                                        \
    il_status st__ = (expr);                                                                                  \
    if (st__ != IL_OK) {                                                                                      \
      fprintf(stderr, "bench_cuda_attn: %s:%d: %s: %s\n", __FILE__, __LINE__, il_status_name(st__),           \
              il_error_detail());                                                                             \
      exit(1);                                                                                                \
    }                                                                                                         \
  } while (0)
#include "cuda_timing.h" /* after CHECK, which it uses */

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static double timed(void (*fn)(void *), void *arg, int reps) { return il_bench_timed(B, fn, arg, reps); }

static double bench_copy(void) {
  const int64_t n = quick ? (256 << 20) / 4 : (1 << 30) / 4;
  const double gbs = il_bench_copy_gbs(B, n, quick ? 3 : 10);
  printf("copy: %.0f MiB device-to-device: %.1f GB/s (read + write), best of %d\n", (double)n * 4 / (1 << 20), gbs,
         quick ? 3 : 10);
  il_jsonw_key(&J, "copy_gb_per_s");
  il_jsonw_num(&J, gbs);
  return gbs;
}

/* ---- one attention problem on the device ---- */

enum { H = 32, KH = 8, HD = 128 };

typedef struct {
  il_tensor K, V, Q, Out, S, P, TB;
  il_kv_view kv;
  int64_t n_tok;
  int32_t n_seq, n_ctx;
  double kv_bytes; /* K and V bytes one call reads (each position of each token's sequence once) */
  double flops;    /* 4 x HD x H x attended positions */
} problem;

/* n_seq sequences of n_ctx positions; tokens: the last `per` positions of each sequence. */
static problem make(int32_t n_seq, int32_t n_ctx, int32_t per, bool paged) {
  problem p;
  memset(&p, 0, sizeof p);
  const int32_t block = paged ? 16 : n_ctx, max_blocks = n_ctx / block, nb = n_seq * max_blocks;
  const int64_t cells = (int64_t)nb * block, C = KH * HD;
  const size_t row = il_dtype_row_size(kv_type, C);
  uint8_t *h = malloc((size_t)cells * row);
  float *x = malloc((size_t)C * 4);
  if (!h || !x) {
    fprintf(stderr, "bench_cuda_attn: out of host memory for %lld cells\n", (long long)cells);
    exit(1);
  }
  for (int side = 0; side < 2; side++) {
    for (int64_t c = 0; c < cells; c++) {
      for (int64_t i = 0; i < C; i++) x[i] = frand();
      uint8_t *d = h + (size_t)c * row;
      if (kv_type == IL_DTYPE_F32) memcpy(d, x, (size_t)C * 4);
      else if (kv_type == IL_DTYPE_F16 || kv_type == IL_DTYPE_BF16)
        for (int64_t i = 0; i < C; i++) {
          const uint16_t v = kv_type == IL_DTYPE_F16 ? il_f32_to_fp16(x[i]) : il_f32_to_bf16(x[i]);
          memcpy(d + 2 * i, &v, 2);
        }
      else CHECK(il_quantize_row(kv_type, x, d, C));
    }
    il_tensor *t = side ? &p.V : &p.K;
    CHECK(il_backend_tensor_new(B, IL_MEM_KV, cells, C, kv_type, side ? "v" : "k", t));
    CHECK(O->upload(B, *t, h, il_tensor_span(t)));
  }
  free(h), free(x);
  int32_t *table = malloc((size_t)nb * 4);
  for (int32_t i = 0; i < nb; i++) table[i] = i;
  for (int32_t i = nb - 1; paged && i > 0; i--) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const int32_t j = (int32_t)(rng % (uint64_t)(i + 1)), t = table[i];
    table[i] = table[j], table[j] = t;
  }
  CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, n_seq, max_blocks, IL_DTYPE_I32, "table", &p.TB));
  CHECK(O->upload(B, p.TB, table, (size_t)nb * 4));
  free(table);
  p.n_tok = (int64_t)n_seq * per, p.n_seq = n_seq, p.n_ctx = n_ctx;
  float *q = malloc((size_t)(p.n_tok * H * HD) * 4);
  for (int64_t i = 0; i < p.n_tok * H * HD; i++) q[i] = frand();
  CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, p.n_tok, H * HD, IL_DTYPE_F32, "q", &p.Q));
  CHECK(O->upload(B, p.Q, q, il_tensor_span(&p.Q)));
  free(q);
  CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, p.n_tok, H * HD, IL_DTYPE_F32, "out", &p.Out));
  int32_t *sp = malloc((size_t)p.n_tok * 8);
  for (int64_t t = 0; t < p.n_tok; t++) {
    sp[t] = (int32_t)(t / per);
    sp[p.n_tok + t] = n_ctx - per + (int32_t)(t % per);
    p.kv_bytes += (double)(sp[p.n_tok + t] + 1) * (double)row * 2;
    p.flops += 4.0 * HD * H * (double)(sp[p.n_tok + t] + 1);
  }
  if (per > 1) p.kv_bytes = (double)n_seq * n_ctx * (double)row * 2; /* a prompt reads its cache at least once */
  CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 1, p.n_tok, IL_DTYPE_I32, "seq", &p.S));
  CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 1, p.n_tok, IL_DTYPE_I32, "pos", &p.P));
  CHECK(O->upload(B, p.S, sp, (size_t)p.n_tok * 4));
  CHECK(O->upload(B, p.P, sp + p.n_tok, (size_t)p.n_tok * 4));
  free(sp);
  p.kv = (il_kv_view){p.K, p.V, p.TB, block, n_seq, max_blocks, n_ctx, 0};
  return p;
}

static void drop(problem *p) {
  il_tensor *all[] = {&p->K, &p->V, &p->Q, &p->Out, &p->S, &p->P, &p->TB};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) il_backend_tensor_free(B, all[i]);
  O->empty_cache(B);
}

typedef struct {
  const il_attn_kernel *k;
  il_attn_args a;
  il_tensor ws;
} attn_arg;
static void do_attn(void *p) {
  attn_arg *x = p;
  CHECK(x->k->run(B, &x->a, x->ws));
}

static const il_attn_kernel *kernel(const char *name) {
  int n = 0;
  const il_attn_kernel *ks = O->attn_kernels(B, &n);
  for (int i = 0; i < n; i++)
    if (!strcmp(ks[i].name, name)) return &ks[i];
  return NULL;
}

/* Seconds per call of kernel `name` on p (negative: the kernel is absent or refuses the shape),
 * its output downloaded to out. */
static double run(problem *p, const char *name, float *out, int reps) {
  const il_attn_kernel *k = kernel(name);
  attn_arg x = {k, {p->Out, p->Q, p->S, p->P, &p->kv, H, KH, HD, 1.0f / sqrtf((float)HD), 0, 0}, {0}};
  if (!k || k->why_not(B, &x.a)) return -1;
  const size_t wsz = k->workspace(B, &x.a);
  if (wsz) CHECK(il_backend_tensor_new(B, IL_MEM_WORKSPACE, 1, (int64_t)(wsz + 3) / 4, IL_DTYPE_F32, "attention ws", &x.ws));
  const double t = timed(do_attn, &x, reps);
  il_backend_tensor_free(B, &x.ws);
  CHECK(O->download(B, out, p->Out, il_tensor_span(&p->Out)));
  return t;
}

static double max_diff(const float *a, const float *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)b[i]);
    e = d > e || d != d ? d : e;
  }
  return e;
}

/* One row of the table: flash and memeff on p. decode: GB/s of K/V; else TFLOP/s. */
static void row(problem *p, const char *layout, double copy_gbs, bool decode, int reps) {
  const size_t n = (size_t)(p->n_tok * H * HD);
  float *fo = malloc(n * 4), *mo = malloc(n * 4);
  const double tf = run(p, "flash", fo, reps), tm = run(p, "memeff", mo, reps);
  const double diff = tf > 0 && tm > 0 ? max_diff(fo, mo, n) : NAN;
  const double rate = tf > 0 ? (decode ? p->kv_bytes / tf / 1e9 : p->flops / tf / 1e12) : NAN;
  const double mrate = tm > 0 ? (decode ? p->kv_bytes / tm / 1e9 : p->flops / tm / 1e12) : NAN;
  char pct[16] = "";
  if (decode) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * rate / copy_gbs);
  printf("%-7d %-10s %6lld %10.3f %10.3f %10.*f %10.*f %8s %8.2fx %10.2g\n", p->n_ctx, layout, (long long)p->n_tok,
         tf * 1e3, tm * 1e3, decode ? 1 : 3, rate, decode ? 1 : 3, mrate, pct, tm / tf, diff);
  il_jsonw_obj(&J);
  il_jsonw_kint(&J, "ctx", p->n_ctx);
  il_jsonw_kstr(&J, "layout", layout);
  il_jsonw_kint(&J, "tokens", p->n_tok);
  il_jsonw_kint(&J, "sequences", p->n_seq);
  il_jsonw_knum(&J, "flash_ms", tf * 1e3);
  il_jsonw_knum(&J, "memeff_ms", tm * 1e3);
  il_jsonw_knum(&J, decode ? "flash_kv_gb_per_s" : "flash_tflops", rate);
  il_jsonw_knum(&J, decode ? "memeff_kv_gb_per_s" : "memeff_tflops", mrate);
  if (decode) il_jsonw_knum(&J, "flash_pct_of_copy", 100.0 * rate / copy_gbs);
  il_jsonw_knum(&J, "max_diff_flash_memeff", diff);
  il_jsonw_obj_end(&J);
  free(fo), free(mo);
}

int main(int argc, char **argv) {
  const char *device = "cuda:0", *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--kv") && i + 1 < argc) {
      const char *t = argv[++i];
      if (!strcmp(t, "f16")) kv_type = IL_DTYPE_F16;
      else if (!strcmp(t, "f32")) kv_type = IL_DTYPE_F32;
      else if (!strcmp(t, "bf16")) kv_type = IL_DTYPE_BF16;
      else if (!strcmp(t, "q8_0")) kv_type = IL_DTYPE_Q8_0;
      else {
        fprintf(stderr, "bench_cuda_attn: --kv '%s': expected f16, f32, bf16 or q8_0\n", t);
        return 64;
      }
    } else {
      fprintf(strcmp(argv[i], "--help") ? stderr : stdout,
              "usage: bench_cuda_attn [--device cuda:N|sim:SIZE] [--kv f16|f32|bf16|q8_0] [--json FILE] [--quick]\n"
              "decode (512/4k/32k positions, 1 and 8 sequences, contiguous and paged) and prefill (4096 tokens)\n"
              "attention of Llama-3-8B heads: flash and memeff beside the copy ceiling, in one run.\n");
      return strcmp(argv[i], "--help") ? 64 : 0;
    }
  }
  const bool sim = !strncmp(device, "sim", 3);
  const char *why = sim ? NULL : il_backend_cuda_unavailable();
  if (why) {
    printf("SKIP: cuda: %s\n", why);
    return 77;
  }
  if (il_backend_open(device, NULL, &B) != IL_OK) {
    printf("SKIP: %s\n", il_error_detail());
    return 77;
  }
  O = B->ops;
  FILE *sink = json ? fopen(json, "w") : fopen("/dev/null", "w");
  if (!sink) {
    fprintf(stderr, "bench_cuda_attn: cannot write %s\n", json ? json : "/dev/null");
    return 1;
  }
  il_jsonw_init(&J, sink, true);
  il_jsonw_obj(&J);
  il_backend_info info;
  O->info(B, &info);
  printf("device: %s; KV cells %s; heads 32 x 128, 8 KV heads\n", info.device, il_dtype_name(kv_type));
  il_jsonw_kstr(&J, "device", info.device);
  il_jsonw_kstr(&J, "kv_type", il_dtype_name(kv_type));
  const double copy_gbs = bench_copy();
  const int reps = quick ? 2 : 10;
  printf("\n%-7s %-10s %6s %10s %10s %10s %10s %8s %9s %10s\n", "ctx", "layout", "tokens", "flash ms", "memeff ms",
         "flash GB/s", "memeff GB/s", "% copy", "speed-up", "max diff");
  il_jsonw_key(&J, "decode");
  il_jsonw_arr(&J);
  const int32_t ctxs[] = {512, 4096, 32768};
  for (size_t ci = 0; ci < (quick ? 2 : 3); ci++)
    for (int seqs = 1; seqs <= 8; seqs *= 8)
      for (int paged = 0; paged < 2; paged++) {
        problem p = make(seqs, ctxs[ci], 1, paged);
        row(&p, paged ? "paged/16" : "contiguous", copy_gbs, true, reps);
        drop(&p);
      }
  il_jsonw_arr_end(&J);
  printf("\n%-7s %-10s %6s %10s %10s %10s %10s %8s %9s %10s\n", "ctx", "layout", "tokens", "flash ms", "memeff ms",
         "flash TF/s", "memeff TF/s", "", "speed-up", "max diff");
  il_jsonw_key(&J, "prefill");
  il_jsonw_arr(&J);
  {
    const int32_t n = quick ? 512 : 4096;
    problem p = make(1, n, n, true);
    row(&p, "paged/16", copy_gbs, false, quick ? 1 : 3);
    drop(&p);
  }
  il_jsonw_arr_end(&J);
  il_jsonw_obj_end(&J);
  fclose(sink);
  O->destroy(B);
  return 0;
}
