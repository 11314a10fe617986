/* tests/test_cuda_engine: the engine on a CUDA device against the CPU (test_sim's pattern).
 *
 * Needs the CUDA module and a device; otherwise it prints why and skips (exit 77).
 * - builtin:tiny in F32, F16, Q8_0, Q4_0 and Q4_1 (the types it can be generated in) gives the
 *   same logits on cuda as on cpu within a per-type bound (normalized error: F32 1e-4, F16 5e-3,
 *   quantized 5e-2, where the CPU's 8-bit activations differ from the GPU's F32 ones), over a
 *   12-token prompt (the cuBLAS path) and 3 single steps (matvec), and the same top token at
 *   most positions;
 * - only the batch and the logits cross the bus per pass, as on sim;
 * - a device capped too small by --mem-limit fails with IL_ERR_OOM and the engine's report,
 *   and its first fix makes the run fit;
 * - offloading on cuda as on sim (issue 15): --offload stream gives the all-device logits
 *   bitwise (the same kernels, weights through two slots); --gpu-layers 0..n and --place mixes
 *   of cuda and cpu give them within the F32 bound (the CPU's kernels sum in another order), and
 *   the residual crosses the bus exactly twice per change of backend per token;
 * - activations stored in f16 and bf16 (--dtype) give the CPU's logits with the same type within
 *   2e-3 and 1.6e-2 (a few steps of each type's precision);
 * - KV cells in bf16 and q8_0 (--kv-type) give the CPU's logits with the same cells within the
 *   F32 bound (the cells hold the same bytes; only the attention's summation order differs);
 * - plan on cuda: the dry run on cuda:N,dry=SIZE (the device's facts and measured fixed
 *   overhead, no memory behind the allocator) predicts the peak; a run capped at exactly that
 *   (--mem-limit = peak - fixed) opens and decodes a full batch through cuBLAS without growing
 *   past it (its scratch is reserved at open), and one capped 3% lower is refused at open;
 * - greedy generation samples on the device: one 4-byte id per step comes back, and the tokens
 *   equal a host argmax of the logits on the same engine;
 * - gemma3's sliding window on cuda: builtin:gemma3-tiny (window 24) over 70 positions at ctx 96,
 *   batch 16 (its local layers' cache a ring of 39), with each cuda attention kernel, gives the
 *   CPU's logits within the F32 bound.
 */
#include <string.h>

#include "backend/registry.h"
#include "engine/engine.h"
#include "engine/oom.h"
#include "engine/request.h"
#include "lab/plan.h"
#include "harness.h"

static void cfg(il_config *c, const char *device, const char *wtype) {
  il_config_defaults(c);
  c->ctx = 64;
  c->threads = 2;
  c->logits_all = true;
  snprintf(c->device, sizeof c->device, "%s", device);
  snprintf(c->wtype, sizeof c->wtype, "%s", wtype);
}

#define N_PROMPT 12
#define N_STEPS 3

static il_status decode(il_engine *e, float *out) {
  il_batch_entry b[N_PROMPT];
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  for (int i = 0; i < N_PROMPT; i++) b[i] = (il_batch_entry){1 + 37 * i % 500, 0, i, true};
  IL_TRY(il_engine_decode(e, b, N_PROMPT, out));
  for (int i = 0; i < N_STEPS; i++) {
    il_batch_entry one = {7 + 11 * i, 0, N_PROMPT + i, true};
    IL_TRY(il_engine_decode(e, &one, 1, out + (size_t)(N_PROMPT + i) * nv));
  }
  return IL_OK;
}

static int argmax(const float *v, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return (int)best;
}

static void test_logits(const char *wtype, double tol, int min_same) {
  il_config c;
  il_engine *cpu = NULL, *gpu = NULL;
  cfg(&c, "cpu", wtype);
  IL_CHECK_OK(il_engine_open(&c, &cpu));
  cfg(&c, "cuda", wtype);
  IL_CHECK_OK(il_engine_open(&c, &gpu));
  if (!cpu || !gpu) {
    il_engine_free(cpu);
    il_engine_free(gpu);
    return;
  }
  const size_t nv = (size_t)il_engine_model(cpu)->hp.n_vocab, n = (N_PROMPT + N_STEPS) * nv;
  float *a = calloc(n, 4), *b = calloc(n, 4);
  il_engine_snapshot s0, s1;
  IL_CHECK_OK(decode(cpu, a));
  il_engine_snapshot_get(gpu, IL_ENGINE_SNAP_ALL, &s0);
  IL_CHECK_OK(decode(gpu, b));
  il_engine_snapshot_get(gpu, IL_ENGINE_SNAP_ALL, &s1);
  const il_transfer_stats x0 = s0.transfers, x1 = s1.transfers;
  double num = 0, den = 0;
  int same_top = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)a[i] * a[i];
  for (int p = 0; p < N_PROMPT + N_STEPS; p++) same_top += argmax(a + p * nv, nv) == argmax(b + p * nv, nv);
  const double e = sqrt(num / den);
  printf("%-5s cpu vs cuda logits: normalized error %.3g (bound %.0e), same top token at %d/%d positions\n", wtype, e,
         tol, same_top, N_PROMPT + N_STEPS);
  IL_CHECK(e <= tol);
  IL_CHECK(same_top >= min_same);
  /* per pass: the batch up (4 int32 per entry), the logits down */
  IL_CHECK_INT(x1.download_bytes - x0.download_bytes, n * 4);
  IL_CHECK_INT(x1.upload_bytes - x0.upload_bytes, (N_PROMPT + N_STEPS) * 16);
  free(a), free(b);
  il_engine_free(cpu);
  il_engine_free(gpu);
}

/* logits of the prompt + steps with the given placement options (NULL: all on the device) */
static il_engine *open_placed(const char *gpu_layers, const char *place, const char *offload) {
  il_config c;
  cfg(&c, "cuda", "f32");
  if (gpu_layers) snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", gpu_layers);
  if (place) snprintf(c.place, sizeof c.place, "%s", place);
  if (offload) snprintf(c.offload, sizeof c.offload, "%s", offload);
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

static double nerr(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)a[i] * a[i];
  return sqrt(num / den);
}

static void test_offload(void) {
  il_engine *ref = open_placed(NULL, NULL, NULL);
  if (!ref) return;
  const size_t nv = (size_t)il_engine_model(ref)->hp.n_vocab, n = (N_PROMPT + N_STEPS) * nv;
  const int32_t n_layer = il_engine_model(ref)->hp.n_layer, n_embd = il_engine_model(ref)->hp.n_embd;
  float *a = calloc(n, 4), *b = calloc(n, 4);
  IL_CHECK_OK(decode(ref, a));
  il_engine_free(ref);

  il_engine *e = open_placed(NULL, NULL, "stream");
  if (e) {
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    IL_CHECK(es.stream);
    IL_CHECK_OK(decode(e, b));
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    const int same = memcmp(a, b, n * 4) == 0;
    printf("cuda --offload stream: logits %s all-device (normalized error %.3g); %.1f MiB streamed\n",
           same ? "equal" : "DIFFER FROM", nerr(a, b, n), (double)es.streamed_bytes / (1 << 20));
    IL_CHECK(same);
    IL_CHECK(es.streamed_bytes > 0);
    il_engine_free(e);
  }
  const struct {
    const char *ngl, *place;
    int changes; /* changes of backend along the token's path: embd -> layers -> output; each
                    moves the residual down and up (-ngl 0: everything on the CPU, none) */
  } mixes[] = {
      {"0", NULL, 0},     {"1", NULL, 2}, {"2", NULL, 2}, {"3", NULL, 2},
      {NULL, "token_embd=cpu,output=cpu", 2}, {NULL, "blk.1-2=cpu", 2},
  };
  for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
    e = open_placed(mixes[k].ngl, mixes[k].place, NULL);
    if (!e) continue;
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    IL_CHECK(es.split);
    IL_CHECK_OK(decode(e, b));
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    const double err = nerr(a, b, n);
    /* tokens that cross: the prompt once, then each step */
    const uint64_t want = (uint64_t)mixes[k].changes * 2 * (N_PROMPT + N_STEPS) * (uint64_t)n_embd * 4;
    printf("cuda -ngl %s --place %s: %d/%d layers on cuda, normalized error %.3g, residual moved %llu B (want %llu)\n",
           mixes[k].ngl ? mixes[k].ngl : "all", mixes[k].place ? mixes[k].place : "-", es.n_dev_layers, n_layer, err,
           (unsigned long long)es.residual_bytes, (unsigned long long)want);
    IL_CHECK(err <= 1e-4);
    IL_CHECK_INT(es.residual_bytes, want);
    il_engine_free(e);
  }
  free(a), free(b);
}

/* KV cells (--kv-type) and activations (--dtype) of other types: cpu and cuda with the same
 * types agree within bound. */
static void test_types(const char *kv_type, const char *dtype, double bound) {
  il_config c;
  il_engine *cpu = NULL, *gpu = NULL;
  for (int i = 0; i < 2; i++) {
    cfg(&c, i ? "cuda" : "cpu", "f32");
    snprintf(c.kv_type, sizeof c.kv_type, "%s", kv_type);
    snprintf(c.dtype, sizeof c.dtype, "%s", dtype);
    IL_CHECK_OK(il_engine_open(&c, i ? &gpu : &cpu));
  }
  if (cpu && gpu) {
    const size_t nv = (size_t)il_engine_model(cpu)->hp.n_vocab, n = (N_PROMPT + N_STEPS) * nv;
    float *a = calloc(n, 4), *b = calloc(n, 4);
    IL_CHECK_OK(decode(cpu, a));
    IL_CHECK_OK(decode(gpu, b));
    const double e = nerr(a, b, n);
    printf("kv %-5s dtype %-4s cpu vs cuda logits: normalized error %.3g (bound %.0e)\n", kv_type, dtype, e, bound);
    IL_CHECK(e <= bound);
    free(a), free(b);
  }
  il_engine_free(cpu);
  il_engine_free(gpu);
}

static void test_plan(const char *wtype) {
  il_config c;
  cfg(&c, "cuda", wtype);
  c.ctx = 256;
  c.batch = 64;
  c.logits_all = false;
  il_plan p;
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(p.fits);
  if (!p.fits) return;
  const size_t cap = p.peak_bytes - p.fixed_bytes;
  printf("plan %s on %s: peak %zu B (fixed %zu B, workspace %zu B), %d dry runs\n", wtype, p.device, p.peak_bytes,
         p.fixed_bytes, p.by_cat[IL_MEM_WORKSPACE], p.dry_runs);
  IL_CHECK(p.by_cat[IL_MEM_WORKSPACE] > 0);
  snprintf(c.mem_limit, sizeof c.mem_limit, "%zu", cap);
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  if (e) {
    il_batch_entry b[64];
    for (int i = 0; i < 64; i++) b[i] = (il_batch_entry){1 + 37 * i % 500, 0, i, i == 63};
    float *logits = calloc((size_t)il_engine_model(e)->hp.n_vocab, 4);
    IL_CHECK_OK(il_engine_decode(e, b, 64, logits));
    il_batch_entry one = {5, 0, 64, true};
    IL_CHECK_OK(il_engine_decode(e, &one, 1, logits));
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
    const il_caching_stats cs = es.alloc;
    printf("  run capped at %zu B: reserved peak %zu B (%.2f%% of the prediction)\n", cap, cs.total.peak_reserved,
           100.0 * (double)cs.total.peak_reserved / (double)cap);
    IL_CHECK(cs.total.peak_reserved <= cap);
    IL_CHECK((double)cs.total.peak_reserved >= 0.97 * (double)cap);
    free(logits);
    il_engine_free(e);
  }
  snprintf(c.mem_limit, sizeof c.mem_limit, "%zu", cap / 100 * 97);
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_OOM);
  if (e) il_engine_free(e);
}

static void test_oom(void) {
  il_config c;
  cfg(&c, "cuda", "f32");
  c.ctx = 2048;
  c.batch = 512;
  snprintf(c.mem_limit, sizeof c.mem_limit, "20MiB");
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  IL_CHECK_INT(st, IL_ERR_OOM);
  if (st != IL_ERR_OOM) {
    il_engine_free(e);
    return;
  }
  IL_CHECK_CONTAINS(il_error_detail(), "cuda:0");
  il_oom_report r;
  IL_CHECK(il_oom_report_last(&r));
  IL_CHECK(r.n_fixes >= 1);
  if (r.n_fixes < 1) return;
  printf("cuda capped at 20MiB: needs %zu of %zu; fix --%s %s\n", r.need_total, r.capacity, r.fixes[0].option,
         r.fixes[0].value);
  IL_CHECK_OK(il_config_set(&c, r.fixes[0].option, r.fixes[0].value, "fix"));
  IL_CHECK_OK(il_engine_open(&c, &e));
  il_engine_free(e);
}

/* Greedy generation samples on the device (issue 31): each step after the first brings back one
 * 4-byte id, not the logits, and the tokens are those a host argmax of the downloaded logits
 * picks on the same engine, step for step. A sampling chain (temperature) keeps the logits
 * download. */
static void test_device_greedy(void) {
  enum { NP = 5, NG = 12 };
  il_config c;
  cfg(&c, "cuda", "f32");
  c.logits_all = false;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  if (!e) return;
  IL_CHECK(il_engine_samples_on_device(e));
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  const int32_t prompt[NP] = {1, 45, 300, 7, 99};
  /* the host path: the logits down every step, the argmax here */
  int32_t want[NG];
  float *l = calloc(nv, 4);
  il_batch_entry b[NP];
  for (int i = 0; i < NP; i++) b[i] = (il_batch_entry){prompt[i], 0, i, i == NP - 1};
  IL_CHECK_OK(il_engine_seq_remove(e, 0));
  IL_CHECK_OK(il_engine_decode(e, b, NP, l));
  for (int g = 0; g < NG; g++) {
    want[g] = argmax(l, nv);
    il_batch_entry one = {want[g], 0, NP + g, true};
    if (g + 1 < NG) IL_CHECK_OK(il_engine_decode(e, &one, 1, l));
  }
  /* the request: the device's argmax */
  il_request_params p = il_request_default_params();
  p.sampling.temp = 0;
  p.sampling.repeat_penalty = 1;
  p.n_predict = NG;
  p.ignore_eos = true;
  il_request *r = NULL;
  IL_CHECK_OK(il_request_new_tokens(e, prompt, NP, &p, &r));
  int n_steps = 0;
  for (int g = 0; r && g < NG; g++) {
    il_engine_snapshot s0, s1;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &s0);
    int32_t tok;
    const char *text;
    size_t len;
    IL_CHECK_OK(il_request_next(r, &tok, &text, &len));
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &s1);
    IL_CHECK_INT(tok, want[g]);
    if (g > 0) { /* the first token comes from the prompt's logits, already here */
      IL_CHECK_INT(s1.transfers.download_bytes - s0.transfers.download_bytes, 4);
      n_steps++;
    }
  }
  il_request_free(r);
  /* temperature: the host's chain, so the whole logits row comes back per step */
  p.sampling.temp = 0.8f;
  IL_CHECK_OK(il_request_new_tokens(e, prompt, NP, &p, &r));
  for (int g = 0; r && g < 3; g++) {
    il_engine_snapshot s0, s1;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &s0);
    int32_t tok;
    const char *text;
    size_t len;
    IL_CHECK_OK(il_request_next(r, &tok, &text, &len));
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &s1);
    if (g > 0) IL_CHECK_INT(s1.transfers.download_bytes - s0.transfers.download_bytes, (int64_t)(nv * 4));
  }
  il_request_free(r);
  printf("greedy on the device: %d steps of 4 bytes down each, the host argmax's tokens\n", n_steps);
  free(l);
  il_engine_free(e);
}

/* gemma3-tiny past its window: every cuda kernel applies it (cells in the ring of a local layer) */
static void test_window(void) {
  enum { N = 70 };
  const char *kernels[] = {"naive", "memeff", "flash"};
  float *ref = NULL;
  size_t n = 0;
  for (int k = -1; k < 3; k++) {
    il_config c;
    cfg(&c, k < 0 ? "cpu" : "cuda", "");
    snprintf(c.model, sizeof c.model, "builtin:gemma3-tiny");
    snprintf(c.kv_type, sizeof c.kv_type, "f32");
    c.ctx = 96;
    c.batch = 16;
    if (k >= 0) snprintf(c.attn, sizeof c.attn, "%s", kernels[k]);
    il_engine *e = NULL;
    IL_CHECK_OK(il_engine_open(&c, &e));
    if (!e) continue;
    const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
    n = N * nv;
    float *out = calloc(n, 4);
    il_batch_entry b[N];
    for (int i = 0; i < N; i++) b[i] = (il_batch_entry){1 + 37 * i % 500, 0, i, true};
    IL_CHECK_OK(il_engine_decode(e, b, N - 2, out)); /* passes of 16, then two single steps */
    IL_CHECK_OK(il_engine_decode(e, b + N - 2, 1, out + (N - 2) * nv));
    IL_CHECK_OK(il_engine_decode(e, b + N - 1, 1, out + (N - 1) * nv));
    if (k < 0) {
      ref = out;
    } else {
      const double d = nerr(ref, out, n);
      printf("gemma3-tiny, window 24, %d positions: cpu vs cuda --attn %s: normalized error %.3g\n", N, kernels[k], d);
      IL_CHECK(d <= 1e-4);
      free(out);
    }
    il_engine_free(e);
  }
  free(ref);
}

int main(void) {
  il_backend *b = il_test_open_cuda_or_skip();
  b->ops->destroy(b);
  const int all = N_PROMPT + N_STEPS;
  test_logits("f32", 1e-4, all - 1);
  test_logits("f16", 5e-3, all - 2);
  /* random weights leave near-ties among the top logits: a quantized run may swap some */
  test_logits("q8_0", 5e-2, all / 2);
  test_logits("q4_0", 5e-2, all / 2);
  test_logits("q4_1", 5e-2, all / 2);
  test_oom();
  test_offload();
  test_types("bf16", "f32", 1e-4);
  test_types("q8_0", "f32", 1e-4);
  /* 16-bit activations: where the two sides' F32 sums differ in the last bits, a value may round
   * to the neighbouring 16-bit number on one side only, a step of 2^-11 (f16) or 2^-8 (bf16)
   * relative, which later layers carry on: bounds of 4 such steps */
  test_types("f32", "f16", 2e-3);
  test_types("f32", "bf16", 1.6e-2);
  test_plan("f32");
  test_plan("q8_0");
  test_device_greedy();
  test_window();
  return il_test_finish();
}
