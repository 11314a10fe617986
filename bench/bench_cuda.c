/* bench/bench_cuda: the CUDA backend against its rooflines, measured in the same run.
 *
 * Everything goes through the device seam (the registry's "cuda" backend: buffers, copy,
 * matmul, events), so it measures what the engine gets.
 * 1. Bandwidth roofline: a plain device-to-device copy of 1 GiB (the backend's copy op),
 *    best of 10; GB/s counts bytes read + written. The nominal figure from the memory clock and
 *    bus width is printed beside it.
 * 2. Generation (memory-bound): y = x W^T with 1 and 8 tokens per weight type on the matrices
 *    of one Llama-3-8B layer (q 4096x4096, k and v 1024x4096, o 4096x4096, gate and up
 *    14336x4096, down 4096x14336) plus the 128256x4096 output head; GB/s of weight bytes and
 *    the percentage of the copy's GB/s. From the per-layer time: the batch-1 tokens/s of the
 *    8B model (32 layers + head, attention left out) as an upper estimate.
 * 3. Prompts (compute-bound): 512 tokens on the same matrices through cuBLAS (F16, BF16; and
 *    the quantized types as dequantized F16 tiles); TFLOP/s against the tensor peak estimated
 *    from SMs x clock x dense FP16 FLOP/clock/SM for the architecture (sm_80: 2048, sm_90: 4096,
 *    sm_86/89: 1024; a table, printed as such).
 *    The first pass runs matvec version 1 (IL_CUDA_MATVEC=1) for every type; Q8_0, Q4_0 and
 *    Q4_1 are measured again with version 2 (dp4a on 8-bit activations) under
 *    "matmul_matvec_v2", and every type with the default dispatch (IL_CUDA_MATVEC=3: version 3
 *    by the table, IL_CUDA_MV_TABLE's when set) under "matmul_matvec_table".
 * 4. Attention: every kernel of the backend (naive, memeff) on Llama-3-8B heads (32 query heads,
 *    8 KV heads of 128, F32 cache) at 4k, 8k, 16k and 32k positions, for 1 query token (decode:
 *    GB/s of K and V read) and 64 (the end of a prompt chunk): milliseconds per call.
 * 5. The engine: builtin:1b (F16 and Q4_0 with matvec v1, Q4_0 with v2, both with the table) at
 *    batch 1, 8 and 32 sequences: a prompt (512 tokens at batch 1, 64 per sequence otherwise) and 128 generation
 *    steps of one token per sequence: tokens/s, and the weight bytes read per step against the
 *    copy roofline; then the device allocator's peak by category over the run, and GPU
 *    utilization, power and memory sampled by NVML every 50 ms during it.
 * --device sim:SIZE runs it all on the simulated GPU: a dry run of the program without a GPU.
 * Usage: bench_cuda [--device cuda:N|sim:SIZE] [--json FILE] [--quick] [--no-engine]
 *                   [--model builtin:NAME (default builtin:1b)] [--types f16,q4_0,...]
 * Exit codes: 0 done, 1 a measurement failed, 77 no CUDA device (prints why).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cudamod.h"
#include "backend/registry.h"
#include "core/jsonw.h"
#include "core/quant.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "probe/gpu_sampler.h"

static il_backend *B;
static const il_backend_ops *O;
static il_jsonw J;
static FILE *json_f;
static bool quick;
static const char *engine_model = "builtin:1b";

#define CHECK(expr)                                                                        \
  do {                                                                                     \
    il_status st__ = (expr);                                                               \
    if (st__ != IL_OK) {                                                                   \
      fprintf(stderr, "bench_cuda: %s:%d: %s: %s\n", __FILE__, __LINE__, il_status_name(st__), il_error_detail()); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)
#include "cuda_timing.h" /* after CHECK, which it uses */

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static double timed(void (*fn)(void *), void *arg, int reps) { return il_bench_timed(B, fn, arg, reps); }

/* ---- 1. copy ---- */

static double bench_copy(void) {
  const int64_t n = quick ? (256 << 20) / 4 : (1 << 30) / 4;
  const double gbs = il_bench_copy_gbs(B, n, quick ? 3 : 10);
  printf("copy: %.0f MiB device-to-device: %.1f GB/s (read + write), best of %d\n", (double)n * 4 / (1 << 20), gbs,
         quick ? 3 : 10);
  il_jsonw_key(&J, "copy");
  il_jsonw_obj(&J);
  il_jsonw_kint(&J, "bytes", n * 4);
  il_jsonw_knum(&J, "gb_per_s", gbs);
  il_jsonw_obj_end(&J);
  return gbs;
}

/* ---- weights ---- */

typedef struct {
  const char *name;
  int64_t rows, cols;
} shape;

/* One Llama-3-8B layer and the output head. */
static const shape L8B[] = {{"q", 4096, 4096},     {"k", 1024, 4096},    {"v", 1024, 4096}, {"o", 4096, 4096},
                            {"gate", 14336, 4096}, {"up", 14336, 4096}, {"down", 4096, 14336}};
static const shape HEAD8B = {"output", 128256, 4096};

/* Random weights of type t with sane scales (K-quants: random bytes, scales set), uploaded. */
static il_tensor make_weights(il_dtype t, int64_t rows, int64_t cols, const char *name) {
  const size_t rs = il_dtype_row_size(t, cols);
  const il_dtype_info *di = il_dtype_get(t);
  uint8_t *w = malloc(rs * (size_t)rows);
  float *src = malloc((size_t)cols * sizeof(float));
  if (!w || !src) {
    fprintf(stderr, "bench_cuda: host out of memory for %s\n", name);
    exit(1);
  }
  /* one quantized row repeated with perturbed scales: host time stays small for 1 GB of weights */
  for (int64_t k = 0; k < cols; k++) src[k] = frand();
  if (il_quantize_row(t, src, w, cols) != IL_OK)
    for (size_t k = 0; k < rs; k++) w[k] = (uint8_t)(frand() * 127 + 128);
  for (int64_t r = 1; r < rows; r++) memcpy(w + (size_t)r * rs, w, rs);
  if (di->quantized)
    for (size_t blk = 0; blk < rs * (size_t)rows / di->size; blk++) {
      uint8_t *bp = w + blk * di->size;
      uint16_t d = il_f32_to_fp16(0.01f + 0.001f * frand()), dm = il_f32_to_fp16(0.002f);
      if (t == IL_DTYPE_Q6_K) memcpy(bp + di->size - 2, &d, 2);
      else {
        memcpy(bp, &d, 2);
        if (t == IL_DTYPE_Q4_1 || t == IL_DTYPE_Q4_K || t == IL_DTYPE_Q5_K) memcpy(bp + 2, &dm, 2);
      }
    }
  il_tensor W;
  CHECK(il_backend_tensor_from_host(B, IL_MEM_WEIGHTS, w, rows, cols, rs, t, name, &W));
  free(w), free(src);
  return W;
}

typedef struct {
  il_tensor *w;
  int n;
  il_tensor x, y;
  int64_t n_tok;
} mm_arg;

static void do_mm(void *p) {
  mm_arg *a = p;
  for (int i = 0; i < a->n; i++) {
    il_tensor x = il_tensor_rows(a->x, 0, a->n_tok), y = il_tensor_make(a->y.buf, 0, a->n_tok, a->w[i].rows, IL_DTYPE_F32, "y");
    x.cols = a->w[i].cols;
    x.stride = (size_t)x.cols * 4;
    CHECK(O->matmul(B, y, a->w[i], x));
  }
}

static double tensor_peak(const il_cudamod_device *d) {
  const int cc = d->cc_major * 10 + d->cc_minor;
  const double per_sm = cc >= 90 ? 4096 : cc == 80 ? 2048 : 1024;
  return (double)d->sm_count * d->clock_khz * 1e3 * per_sm;
}

static void bench_types(const char *types, double copy_gbs, const il_cudamod_device *dev, const char *key) {
  const double peak = tensor_peak(dev);
  printf("\n%s: generation and prompt matmuls on Llama-3-8B shapes (one layer: q k v o gate up down; output head apart)\n",
         key);
  printf("%-6s %12s %10s %8s %12s %10s %12s %12s %9s\n", "type", "layer MiB", "1 tok GB/s", "% copy", "8 tok GB/s",
         "head GB/s", "8B tok/s est", "512 TFLOP/s", "% peak");
  il_jsonw_key(&J, key);
  il_jsonw_arr(&J);
  char list[256];
  snprintf(list, sizeof list, "%s", types);
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    il_dtype t;
    if (!il_dtype_parse(tok, &t)) {
      fprintf(stderr, "bench_cuda: --types: '%s' is not a type\n", tok);
      exit(1);
    }
    il_tensor w[7];
    size_t layer_bytes = 0;
    for (int i = 0; i < 7; i++) {
      w[i] = make_weights(t, L8B[i].rows, L8B[i].cols, L8B[i].name);
      layer_bytes += il_tensor_span(&w[i]);
    }
    il_tensor head = make_weights(t, HEAD8B.rows, HEAD8B.cols, "output");
    il_tensor x, y;
    const int64_t T = 512;
    float *xh = malloc((size_t)T * 14336 * 4);
    for (size_t i = 0; i < (size_t)T * 14336; i++) xh[i] = frand();
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, T, 14336, IL_DTYPE_F32, "x", &x));
    CHECK(O->upload(B, x, xh, il_tensor_span(&x)));
    free(xh);
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, T, 128256, IL_DTYPE_F32, "y", &y));
    mm_arg a1 = {w, 7, x, y, 1}, a8 = {w, 7, x, y, 8}, ah = {&head, 1, x, y, 1}, ap = {w, 7, x, y, T};
    const int reps = quick ? 3 : 10;
    const double t1 = timed(do_mm, &a1, reps), t8 = timed(do_mm, &a8, reps), th = timed(do_mm, &ah, reps);
    const double tp = timed(do_mm, &ap, quick ? 1 : 3);
    double flops = 0;
    for (int i = 0; i < 7; i++) flops += 2.0 * (double)T * (double)L8B[i].rows * (double)L8B[i].cols;
    const double g1 = (double)layer_bytes / t1 / 1e9, g8 = (double)layer_bytes / t8 / 1e9;
    const double gh = (double)il_tensor_span(&head) / th / 1e9, tf = flops / tp / 1e12;
    const double tok_s = 1.0 / (32 * t1 + th);
    printf("%-6s %12.1f %10.1f %7.1f%% %12.1f %10.1f %12.1f %12.1f %8.1f%%\n", il_dtype_name(t),
           (double)layer_bytes / (1 << 20), g1, 100 * g1 / copy_gbs, g8, gh, tok_s, tf, peak > 0 ? 100 * tf * 1e12 / peak : 0);
    il_jsonw_obj(&J);
    il_jsonw_kstr(&J, "type", il_dtype_name(t));
    il_jsonw_kint(&J, "layer_bytes", (long long)layer_bytes);
    il_jsonw_knum(&J, "gen1_gb_per_s", g1);
    il_jsonw_knum(&J, "gen1_pct_copy", 100 * g1 / copy_gbs);
    il_jsonw_knum(&J, "gen8_gb_per_s", g8);
    il_jsonw_knum(&J, "head_gb_per_s", gh);
    il_jsonw_knum(&J, "llama8b_batch1_tok_per_s_estimate", tok_s);
    il_jsonw_knum(&J, "prompt512_tflops", tf);
    il_jsonw_knum(&J, "prompt512_pct_peak", peak > 0 ? 100 * tf * 1e12 / peak : 0);
    il_jsonw_obj_end(&J);
    fflush(stdout);
    for (int i = 0; i < 7; i++) il_backend_tensor_free(B, &w[i]);
    il_backend_tensor_free(B, &head);
    il_backend_tensor_free(B, &x);
    il_backend_tensor_free(B, &y);
    O->empty_cache(B);
  }
  il_jsonw_arr_end(&J);
  printf("(tensor peak estimate %.0f TFLOP/s: %d SMs x %.2f GHz x %s FLOP/clock/SM for sm_%d%d, dense FP16)\n", peak / 1e12,
         dev->sm_count, dev->clock_khz / 1e6, dev->cc_major * 10 + dev->cc_minor >= 90 ? "4096" : dev->cc_major * 10 + dev->cc_minor == 80 ? "2048" : "1024",
         dev->cc_major, dev->cc_minor);
}

/* ---- 4. attention ---- */

typedef struct {
  const il_attn_kernel *k;
  il_attn_args a;
  il_tensor ws;
} attn_arg;
static void do_attn(void *p) {
  attn_arg *x = p;
  CHECK(x->k->run(B, &x->a, x->ws));
}

static void bench_attention(void) {
  const int64_t H = 32, KH = 8, hd = 128;
  int nk = 0;
  const il_attn_kernel *ks = O->attn_kernels(B, &nk);
  printf("\nattention, Llama-3-8B heads (32 x 128, 8 KV heads), F32 cache: ms per call\n%-8s %6s", "ctx", "tokens");
  for (int i = 0; i < nk; i++) printf(" %12s", ks[i].name);
  printf(" %16s\n", "decode KV GB/s");
  il_jsonw_key(&J, "attention");
  il_jsonw_arr(&J);
  const int ctxs[] = {4096, 8192, 16384, 32768};
  for (size_t ci = 0; ci < (quick ? 2 : sizeof ctxs / sizeof ctxs[0]); ci++) {
    const int32_t n_ctx = ctxs[ci];
    il_tensor K, V, Q, Out, S, P, TB;
    float *h = malloc((size_t)n_ctx * KH * hd * 4);
    for (size_t i = 0; i < (size_t)n_ctx * KH * hd; i++) h[i] = frand();
    CHECK(il_backend_tensor_new(B, IL_MEM_KV, n_ctx, KH * hd, IL_DTYPE_F32, "k", &K));
    CHECK(il_backend_tensor_new(B, IL_MEM_KV, n_ctx, KH * hd, IL_DTYPE_F32, "v", &V));
    CHECK(O->upload(B, K, h, il_tensor_span(&K)));
    CHECK(O->upload(B, V, h, il_tensor_span(&V)));
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 64, H * hd, IL_DTYPE_F32, "q", &Q));
    CHECK(O->upload(B, Q, h, il_tensor_span(&Q)));
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 64, H * hd, IL_DTYPE_F32, "out", &Out));
    int32_t seq[64], pos[64], table[1] = {0};
    for (int t = 0; t < 64; t++) seq[t] = 0, pos[t] = n_ctx - 64 + t;
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 1, 64, IL_DTYPE_I32, "seq", &S));
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 1, 64, IL_DTYPE_I32, "pos", &P));
    CHECK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, 1, 1, IL_DTYPE_I32, "table", &TB));
    CHECK(O->upload(B, S, seq, sizeof seq));
    CHECK(O->upload(B, TB, table, sizeof table));
    free(h);
    il_kv_view kv = {K, V, TB, n_ctx, 1, 1, n_ctx, 0};
    for (int T = 1; T <= 64; T *= 64) {
      int32_t p1[64];
      for (int t = 0; t < T; t++) p1[t] = T == 1 ? n_ctx - 1 : pos[t];
      CHECK(O->upload(B, P, p1, (size_t)T * 4));
      printf("%-8d %6d", n_ctx, T);
      il_jsonw_obj(&J);
      il_jsonw_kint(&J, "ctx", n_ctx);
      il_jsonw_kint(&J, "tokens", T);
      double best = 1e30;
      for (int i = 0; i < nk; i++) {
        attn_arg x = {&ks[i], {il_tensor_rows(Out, 0, T), il_tensor_rows(Q, 0, T), S, P, &kv, H, KH, hd, 0.088f, 0, 0}, {0}};
        if (ks[i].why_not(B, &x.a)) {
          printf(" %12s", "n/a");
          continue;
        }
        const size_t wsz = ks[i].workspace(B, &x.a);
        if (wsz) CHECK(il_backend_tensor_new(B, IL_MEM_WORKSPACE, 1, (int64_t)(wsz + 3) / 4, IL_DTYPE_F32, "attention ws", &x.ws));
        const double t = timed(do_attn, &x, quick ? 2 : 5);
        if (t < best) best = t;
        il_backend_tensor_free(B, &x.ws);
        printf(" %12.3f", t * 1e3);
        il_jsonw_knum(&J, ks[i].name, t * 1e3);
      }
      const double gbs = T == 1 ? 2.0 * (double)n_ctx * KH * hd * 4 / best / 1e9 : 0;
      if (T == 1) printf(" %16.1f", gbs);
      printf("\n");
      il_jsonw_obj_end(&J);
    }
    il_tensor *all[] = {&K, &V, &Q, &Out, &S, &P, &TB};
    for (size_t i = 0; i < 7; i++) il_backend_tensor_free(B, all[i]);
    O->empty_cache(B);
  }
  il_jsonw_arr_end(&J);
}

/* ---- 5. the engine on builtin:1b ---- */

/* Prompt of P tokens (batch 1) or 64 tokens per sequence (batches), then G steps of one token per
 * sequence; one engine holds 32 sequences and serves every batch size. */
static void bench_engine(const char *device, const char *wtype, double copy_gbs, const char *variant) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "%s", engine_model);
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.wtype, sizeof c.wtype, "%s", wtype);
  c.ctx = 1024;
  c.batch = 512;
  c.n_seq = 32;
  double t0 = il_time_now();
  il_engine *e = NULL;
  CHECK(il_engine_open(&c, &e));
  const double t_open = il_time_now() - t0;
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  const int vm = (int)nv - 1; /* token ids 1 .. n_vocab-1 */
  float *logits = malloc(nv * 4 * 32);
  il_batch_entry *b = malloc(sizeof *b * 32 * 512);
  const double bytes = (double)il_model_dev_bytes(il_engine_model(e));
  /* NVML sampling over this engine's runs (device 0 as NVML numbers it: one-GPU machines) */
  il_gpu_sampler *gs = NULL;
  if (il_gpu_sampler_start(NULL, 50, &gs) != IL_OK) {
    printf("  (NVML sampling unavailable: %s)\n", il_error_detail());
    gs = NULL;
  }
  const int batches[] = {1, 8, 32};
  for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
    const int nb = batches[bi], per = nb == 1 ? (quick ? 128 : 512) : 64, G = quick ? 32 : 128;
    int n = 0;
    for (int s = 0; s < nb; s++)
      for (int i = 0; i < per; i++) b[n++] = (il_batch_entry){1 + ((s * 31 + i) * 7919) % vm, s, i, i == per - 1};
    double t_prompt = 0;
    for (int pass = 0; pass < 2; pass++) { /* a warm-up pass, then the measured one at the same positions */
      t0 = il_time_now();
      for (int o = 0; o < n; o += 512) CHECK(il_engine_decode(e, b + o, n - o < 512 ? n - o : 512, logits));
      t_prompt = il_time_now() - t0;
    }
    t0 = il_time_now();
    for (int i = 0; i < G; i++) {
      for (int s = 0; s < nb; s++) b[s] = (il_batch_entry){1 + ((i + s) * 104729) % vm, s, per + i, true};
      CHECK(il_engine_decode(e, b, nb, logits));
    }
    const double t_gen = il_time_now() - t0;
    const double gbs = bytes / (t_gen / G) / 1e9;
    printf("%s %-5s %-10s batch %2d: prompt %d: %.0f tok/s; generation %d x %d: %.1f tok/s (%.2f ms/step, %.0f GB/s of "
           "weights, %.0f%% of copy); open %.1f s\n",
           engine_model, wtype, variant, nb, n, n / t_prompt, nb, G, nb * G / t_gen, 1e3 * t_gen / G, gbs, 100 * gbs / copy_gbs, t_open);
    il_jsonw_obj(&J);
    il_jsonw_kstr(&J, "model", engine_model);
    il_jsonw_kstr(&J, "wtype", wtype);
    il_jsonw_kstr(&J, "variant", variant);
    il_jsonw_kint(&J, "batch", nb);
    il_jsonw_knum(&J, "prompt_tokens", n);
    il_jsonw_knum(&J, "prompt_tok_per_s", n / t_prompt);
    il_jsonw_knum(&J, "gen_steps", G);
    il_jsonw_knum(&J, "gen_tok_per_s", nb * G / t_gen);
    il_jsonw_knum(&J, "gen_ms_per_step", 1e3 * t_gen / G);
    il_jsonw_knum(&J, "gen_weight_gb_per_s", gbs);
    il_jsonw_knum(&J, "gen_pct_copy", 100 * gbs / copy_gbs);
    il_jsonw_obj_end(&J);
    fflush(stdout);
  }
  if (gs) {
    il_gpu_sampler_stats st;
    il_gpu_sampler_stats_get(gs, &st);
    printf("  NVML over these runs: %llu samples, GPU utilization mean %.0f%% peak %d%%, power peak %.0f W, memory used peak %.2f GiB\n",
           (unsigned long long)st.samples, st.util_gpu_mean[0], st.util_gpu_peak[0], st.power_mw_peak[0] / 1e3,
           (double)st.mem_used_peak[0] / (1 << 30));
    il_jsonw_obj(&J);
    il_jsonw_kstr(&J, "model", engine_model);
    il_jsonw_kstr(&J, "wtype", wtype);
    il_jsonw_kstr(&J, "variant", variant);
    il_jsonw_kint(&J, "nvml_samples", (long long)st.samples);
    il_jsonw_knum(&J, "util_gpu_mean", st.util_gpu_mean[0]);
    il_jsonw_kint(&J, "util_gpu_peak", st.util_gpu_peak[0]);
    il_jsonw_kint(&J, "power_mw_peak", st.power_mw_peak[0]);
    il_jsonw_kint(&J, "mem_used_peak", st.mem_used_peak[0]);
    il_jsonw_obj_end(&J);
    il_gpu_sampler_stop(gs);
  }
  /* peak device memory by category over the whole run, from the device allocator */
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  if (es.has_allocator) {
    const il_caching_stats cs = es.alloc;
    char buf[32];
    printf("  device peak: reserved %s;", il_mem_format_bytes(cs.total.peak_reserved, buf, sizeof buf));
    il_jsonw_obj(&J);
    il_jsonw_kstr(&J, "model", engine_model);
    il_jsonw_kstr(&J, "wtype", wtype);
    il_jsonw_kstr(&J, "variant", variant);
    il_jsonw_kint(&J, "peak_reserved", (long long)cs.total.peak_reserved);
    il_jsonw_key(&J, "peak_allocated_by_category");
    il_jsonw_obj(&J);
    for (int k = 0; k < IL_MEM_CATEGORY_COUNT; k++) {
      if (!cs.cat[k].peak_allocated) continue;
      printf(" %s %s", il_mem_category_name((il_mem_category)k), il_mem_format_bytes(cs.cat[k].peak_allocated, buf, sizeof buf));
      il_jsonw_kint(&J, il_mem_category_name((il_mem_category)k), (long long)cs.cat[k].peak_allocated);
    }
    il_jsonw_obj_end(&J);
    il_jsonw_obj_end(&J);
    printf("\n");
  }
  free(b), free(logits);
  il_engine_free(e);
}

int main(int argc, char **argv) {
  const char *device = "cuda:0", *json = NULL, *types = "f16,bf16,q8_0,q4_0,q4_1,q4_k,q5_k,q6_k";
  bool engine = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--no-engine")) engine = false;
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) engine_model = argv[++i];
    else {
      fprintf(strcmp(argv[i], "--help") ? stderr : stdout,
              "usage: bench_cuda [--device cuda:N|sim:SIZE] [--json FILE] [--quick] [--no-engine]\n"
              "                  [--model builtin:NAME] [--types f16,q4_0,...]\n");
      return strcmp(argv[i], "--help") ? 64 : 0;
    }
  }
  /* --device sim:SIZE runs the same code on the simulated GPU (CPU kernels): a dry run of this
   * program on a machine without a GPU; its figures are the CPU's, not a GPU's. */
  const bool sim = !strncmp(device, "sim", 3);
  const char *why = sim ? NULL : il_backend_cuda_unavailable();
  if (why) {
    printf("SKIP: cuda: %s\n", why);
    return 77;
  }
  setenv("IL_CUDA_MATVEC", "1", 1); /* the first pass: version 1 for every type (above) */
  if (il_backend_open(device, NULL, &B) != IL_OK) {
    printf("SKIP: %s\n", il_error_detail());
    return 77;
  }
  O = B->ops;
  il_cudamod_device devs[16];
  memset(devs, 0, sizeof devs);
  const il_cudamod_device *d = &devs[0];
  if (!sim) {
    char err[256] = "";
    const int nd = il_cudamod_get()->devices(devs, 16, err, sizeof err);
    const int di = strchr(device, ':') ? atoi(strchr(device, ':') + 1) : 0;
    if (nd <= di) {
      fprintf(stderr, "bench_cuda: device %d not listed: %s\n", di, err);
      return 1;
    }
    d = &devs[di];
  }
  json_f = json ? fopen(json, "w") : NULL;
  if (json && !json_f) {
    fprintf(stderr, "bench_cuda: cannot write %s\n", json);
    return 1;
  }
  FILE *sink = json_f ? json_f : fopen("/dev/null", "w");
  if (!sink) {
    fprintf(stderr, "bench_cuda: cannot open /dev/null\n");
    return 1;
  }
  il_jsonw_init(&J, sink, true);
  il_jsonw_obj(&J);
  const double nominal = 2.0 * d->mem_clock_khz * 1e3 * d->mem_bus_bits / 8 / 1e9;
  il_backend_info info;
  O->info(B, &info);
  printf("device: %s; %d SMs, %.2f GHz; memory %d-bit at %.2f GHz: %.0f GB/s nominal\n", info.device, d->sm_count,
         d->clock_khz / 1e6, d->mem_bus_bits, d->mem_clock_khz / 1e6, nominal);
  il_jsonw_key(&J, "device");
  il_jsonw_obj(&J);
  il_jsonw_kstr(&J, "name", d->name);
  il_jsonw_kint(&J, "cc", d->cc_major * 10 + d->cc_minor);
  il_jsonw_kint(&J, "sm_count", d->sm_count);
  il_jsonw_kint(&J, "clock_khz", d->clock_khz);
  il_jsonw_knum(&J, "nominal_gb_per_s", nominal);
  il_jsonw_knum(&J, "tensor_peak_tflops_estimate", tensor_peak(d) / 1e12);
  il_jsonw_obj_end(&J);
  const double copy_gbs = bench_copy();
  bench_types(types, copy_gbs, d, "matmul");
  bench_attention();
  B->ops->destroy(B);
  B = NULL;
  /* matvec version 2 (dp4a on 8-bit activations) for the types it covers, on a second backend */
  if (!sim) {
    setenv("IL_CUDA_MATVEC", "2", 1);
    CHECK(il_backend_open(device, NULL, &B));
    O = B->ops;
    bench_types("q8_0,q4_0,q4_1", copy_gbs, d, "matmul_matvec_v2");
    B->ops->destroy(B);
    B = NULL;
    /* and the default dispatch (matvec version 3 by the table; IL_CUDA_MV_TABLE's when set) */
    setenv("IL_CUDA_MATVEC", "3", 1);
    CHECK(il_backend_open(device, NULL, &B));
    O = B->ops;
    bench_types(types, copy_gbs, d, "matmul_matvec_table");
    B->ops->destroy(B);
    B = NULL;
    setenv("IL_CUDA_MATVEC", "1", 1);
  }
  il_jsonw_key(&J, "engine");
  il_jsonw_arr(&J);
  if (engine) {
    printf("\n");
    bench_engine(device, "f16", copy_gbs, "");
    bench_engine(device, "q4_0", copy_gbs, "matvec v1");
    if (!sim) {
      setenv("IL_CUDA_MATVEC", "2", 1);
      bench_engine(device, "q4_0", copy_gbs, "matvec v2");
      setenv("IL_CUDA_MATVEC", "3", 1);
      bench_engine(device, "f16", copy_gbs, "matvec table");
      bench_engine(device, "q4_0", copy_gbs, "matvec table");
      setenv("IL_CUDA_MATVEC", "1", 1);
    }
  }
  il_jsonw_arr_end(&J);
  il_jsonw_obj_end(&J);
  il_status st = il_jsonw_finish(&J);
  fclose(sink);
  return st == IL_OK ? 0 : 1;
}
