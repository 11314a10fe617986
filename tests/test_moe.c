/* tests/test_moe: mixture-of-experts (mixtral-style llama) on builtin:moe-tiny.
 *
 * Checks: il_moe_route against a plain reference (softmax in double, experts sorted by
 * probability, ties to the lower index, weights renormalized) on random logits of many sizes;
 * logits with the experts on the CPU (--place exps=cpu) equal to all on the device (sim) and to
 * the cpu run, bit for bit; the hidden-row bytes moved around the experts equal to what the
 * routing implies (counted here from the batch sizes); the device's weight bytes drop by
 * exactly the expert stacks; the planner offers 'place exps=cpu' where only that fits; and
 * --place exps=cpu on a dense model is an error naming the flag.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "harness.h"
#include "lab/plan.h"
#include "model/llama.h"

static void ref_route(const float *lg, int ne, int k, bool norm, int *sel, double *w) {
  double p[512], mx = lg[0], sum = 0;
  int idx[512];
  for (int e = 1; e < ne; e++) mx = lg[e] > mx ? lg[e] : mx;
  for (int e = 0; e < ne; e++) sum += p[e] = exp((double)lg[e] - mx), idx[e] = e;
  for (int i = 1; i < ne; i++) /* insertion sort: probability down, index up */
    for (int j = i; j > 0 && p[idx[j]] > p[idx[j - 1]]; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1], idx[j - 1] = t;
    }
  double ws = 0;
  for (int r = 0; r < k; r++) sel[r] = idx[r], ws += w[r] = p[idx[r]] / sum;
  for (int r = 0; norm && r < k; r++) w[r] /= ws;
}

static void check_route(void) {
  uint64_t s = 7;
  const int nes[] = {2, 3, 8, 16, 60, 128}, ks[] = {1, 2, 4, 8};
  int bad_sel = 0;
  double max_err = 0;
  for (size_t a = 0; a < sizeof nes / sizeof nes[0]; a++)
    for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
      for (int norm = 0; norm < 2; norm++)
        for (int trial = 0; trial < 20 && ks[b] <= nes[a]; trial++) {
          float lg[128], w[8];
          int32_t sel[8];
          int rsel[8];
          double rw[8];
          for (int e = 0; e < nes[a]; e++) lg[e] = 4.0f * il_test_randf(&s);
          il_moe_route(lg, nes[a], ks[b], norm, sel, w);
          ref_route(lg, nes[a], ks[b], norm, rsel, rw);
          for (int r = 0; r < ks[b]; r++) {
            bad_sel += sel[r] != rsel[r];
            max_err = fmax(max_err, fabs(w[r] - rw[r]));
          }
        }
  printf("routing vs reference: %d different choices, max |weight - reference| = %.3g\n", bad_sel, max_err);
  IL_CHECK_INT(bad_sel, 0);
  IL_CHECK_NEAR(max_err, 0, 1e-6);
  /* equal logits: the lowest indices, equal weights */
  float eq[4] = {1, 1, 1, 1}, w[2];
  int32_t sel[2];
  il_moe_route(eq, 4, 2, true, sel, w);
  IL_CHECK_INT(sel[0], 0);
  IL_CHECK_INT(sel[1], 1);
  IL_CHECK_NEAR(w[0], 0.5, 1e-7);
}

enum { N_TOK = 7 };

/* builtin:moe-tiny on device with place; the logits of every position, the snapshot. */
static int run_engine(const char *device, const char *place, float *logits, il_engine_snapshot *es) {
  il_config cfg;
  il_config_defaults(&cfg);
  snprintf(cfg.model, sizeof cfg.model, "builtin:moe-tiny");
  snprintf(cfg.device, sizeof cfg.device, "%s", device);
  snprintf(cfg.place, sizeof cfg.place, "%s", place);
  snprintf(cfg.kv_type, sizeof cfg.kv_type, "f32");
  cfg.ctx = 64;
  cfg.threads = 2;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&cfg, &e));
  if (!e) return 0;
  const int toks[N_TOK] = {1, 300, 301, 72, 101, 108, 111};
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){toks[i], 0, i, true};
  const int nv = il_engine_model(e)->hp.n_vocab;
  IL_CHECK_OK(il_engine_decode(e, b, 5, logits)); /* a prompt of 5, then two single steps */
  IL_CHECK_OK(il_engine_decode(e, b + 5, 1, logits + 5 * (size_t)nv));
  IL_CHECK_OK(il_engine_decode(e, b + 6, 1, logits + 6 * (size_t)nv));
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, es);
  il_engine_free(e);
  return nv;
}

static void check_placement(void) {
  const size_t nv = 512, n = N_TOK * nv;
  float *cpu = calloc(n, 4), *dev = calloc(n, 4), *exps = calloc(n, 4);
  il_engine_snapshot s_cpu, s_dev, s_exps;
  IL_CHECK_INT(run_engine("cpu", "", cpu, &s_cpu), 512);
  IL_CHECK_INT(run_engine("sim:256MiB", "", dev, &s_dev), 512);
  IL_CHECK_INT(run_engine("sim:256MiB", "exps=cpu", exps, &s_exps), 512);
  IL_CHECK(memcmp(cpu, dev, n * 4) == 0);
  IL_CHECK(memcmp(dev, exps, n * 4) == 0);
  IL_CHECK(s_dev.exps_dev && !s_exps.exps_dev && s_exps.n_expert == 8);
  /* per layer and pass of t tokens: t normed rows down, each of the t*k (token, expert) rows
   * up to its expert and back, t weighted sums up; F32 rows of 256 */
  const uint64_t rb = 256 * 4, k = 2, L = 4, t_all = 5 + 1 + 1;
  const uint64_t want = L * rb * t_all * (2 + 2 * k);
  printf("hidden rows around the experts: %llu bytes (from the batch sizes: %llu)\n",
         (unsigned long long)s_exps.expert_bytes, (unsigned long long)want);
  IL_CHECK(s_exps.expert_bytes == want && s_dev.expert_bytes == want && s_cpu.expert_bytes == want);
  /* the device holds the expert stacks only without exps=cpu: 4 layers x 3 stacks of 8 x 256 x 256 F32 */
  const size_t stacks = 4 * 3 * (size_t)8 * 256 * 256 * 4;
  const size_t wd = s_dev.mem.current[IL_MEM_WEIGHTS], we = s_exps.mem.current[IL_MEM_WEIGHTS];
  printf("device weights: %zu bytes all on device, %zu with exps=cpu (stacks %zu)\n", wd, we, stacks);
  IL_CHECK(wd - we == stacks);
  free(cpu), free(dev), free(exps);
}

static void check_plan(void) {
  il_config cfg;
  il_config_defaults(&cfg);
  snprintf(cfg.model, sizeof cfg.model, "builtin:moe-tiny");
  snprintf(cfg.device, sizeof cfg.device, "sim:1GiB");
  cfg.ctx = 256;
  il_plan all, cpu;
  IL_CHECK_OK(il_plan_run(&cfg, &all));
  snprintf(cfg.place, sizeof cfg.place, "exps=cpu");
  IL_CHECK_OK(il_plan_run(&cfg, &cpu));
  printf("plan peaks: %zu all on device, %zu experts on cpu\n", all.peak_bytes, cpu.peak_bytes);
  IL_CHECK(all.peak_bytes > cpu.peak_bytes + (size_t)24 * 1000 * 1000); /* 24 MiB of stacks leave */
  /* a device between the two: only the experts on the CPU fit, and the planner says so */
  cfg.place[0] = 0;
  snprintf(cfg.device, sizeof cfg.device, "sim:%zuKiB", (all.peak_bytes + cpu.peak_bytes) / 2 / 1024);
  il_plan mid;
  IL_CHECK_OK(il_plan_run(&cfg, &mid));
  IL_CHECK(!mid.fits);
  bool offered = false;
  for (int i = 0; i < mid.n_fixes; i++)
    offered |= !strcmp(mid.fixes[i].option, "place") && !strcmp(mid.fixes[i].value, "exps=cpu");
  IL_CHECK(offered);
}

static void check_dense_error(void) {
  il_config cfg;
  il_config_defaults(&cfg);
  snprintf(cfg.place, sizeof cfg.place, "exps=cpu");
  il_engine *e = NULL;
  IL_CHECK(il_engine_open(&cfg, &e) == IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--place");
  il_engine_free(e);
}

int main(void) {
  check_route();
  check_placement();
  check_plan();
  check_dense_error();
  return il_test_finish();
}
