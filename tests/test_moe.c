/* tests/test_moe: mixture-of-experts on builtin:moe-tiny (mixtral-style llama) and
 * builtin:qwen3moe-tiny (qwen3's attention, 16 experts, 4 per token).
 *
 * Checks: il_moe_route against a plain reference (softmax in double, experts sorted by
 * probability, ties to the lower index, weights renormalized) on random logits of many sizes;
 * the engine's logits of a few tokens against a plain scalar forward written here (its own
 * loops, KV arrays, routing and experts, reading the built-in tensors by their GGUF names; no
 * code of src/model); logits with the experts on the CPU (--place exps=cpu) equal to all on the
 * device (sim) and to the cpu run, bit for bit; the hidden-row bytes moved around the experts
 * equal to what the routing implies (counted here from the batch sizes); the device's weight
 * bytes drop by exactly the expert stacks; qwen3moe-tiny exported to GGUF reads back with
 * qwen3moe's keys and llama.cpp's tensor names and the same logits; the planner offers
 * 'place exps=cpu' where only that fits; and --place exps=cpu on a dense model is an error
 * naming the flag.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "format/gguf.h"
#include "harness.h"
#include "lab/plan.h"
#include "model/export.h"
#include "model/llama.h"
#include "ref_ops.h"

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
static const int toks[N_TOK] = {1, 300, 301, 72, 101, 108, 111};

/* ---- a plain scalar forward of a MoE model (llama or qwen3moe attention) ---- */

/* RoPE of one head: llama pairs (2i, 2i+1), NeoX (qwen3moe) pairs (i, i + hd/2) */
static void rope(float *v, int hd, int pos, float base, bool neox) {
  for (int i = 0; i < hd / 2; i++) {
    const double th = pos * pow(base, -2.0 * i / hd), c = cos(th), s = sin(th);
    const int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
    const double x0 = v[a], x1 = v[b];
    v[a] = (float)(x0 * c - x1 * s);
    v[b] = (float)(x0 * s + x1 * c);
  }
}

/* Logits of toks[0..n) at every position into out [n x vocab]. */
static void ref_forward(const il_model *m, int n, float *out) {
  const il_hparams *hp = &m->hp;
  const int dim = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, qd = nh * hd, kvd = nkv * hd;
  const int ne = hp->n_expert, k = hp->n_expert_used, ff = hp->n_ff_exp, L = hp->n_layer, V = hp->n_vocab;
  const bool neox = hp->rope_mode == IL_ROPE_NEOX, qk_norm = lt(m, 0, "attn_q_norm.weight") != NULL;
  float *kc = calloc((size_t)L * n * kvd, 4), *vc = calloc((size_t)L * n * kvd, 4);
  float *x = calloc(dim, 4), *xb = calloc(dim, 4), *q = calloc(qd, 4), *att = calloc(qd, 4), *o = calloc(dim, 4);
  float *lg = calloc(ne, 4), *g = calloc(ff, 4), *u = calloc(ff, 4), *y = calloc(dim, 4), *sc = calloc(n, 4);
  for (int t = 0; t < n; t++) {
    memcpy(x, tensor(m, "token_embd.weight") + (size_t)toks[t] * dim, 4 * (size_t)dim);
    for (int l = 0; l < L; l++) {
      float *kt = kc + ((size_t)l * n + t) * kvd, *vt = vc + ((size_t)l * n + t) * kvd;
      rmsnorm(xb, x, lt(m, l, "attn_norm.weight"), dim, hp->norm_eps);
      matvec(lt(m, l, "attn_q.weight"), xb, q, dim, qd);
      matvec(lt(m, l, "attn_k.weight"), xb, kt, dim, kvd);
      matvec(lt(m, l, "attn_v.weight"), xb, vt, dim, kvd);
      for (int h = 0; h < nh; h++) {
        if (qk_norm) rmsnorm(q + h * hd, q + h * hd, lt(m, l, "attn_q_norm.weight"), hd, hp->norm_eps);
        rope(q + h * hd, hd, t, hp->rope_base, neox);
      }
      for (int h = 0; h < nkv; h++) {
        if (qk_norm) rmsnorm(kt + h * hd, kt + h * hd, lt(m, l, "attn_k_norm.weight"), hd, hp->norm_eps);
        rope(kt + h * hd, hd, t, hp->rope_base, neox);
      }
      for (int h = 0; h < nh; h++) { /* grouped-query: head h reads kv head h / (nh / nkv) */
        const int kh = h / (nh / nkv);
        double mx = -1e300, sum = 0;
        for (int p = 0; p <= t; p++) {
          double d = 0;
          for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * kc[((size_t)l * n + p) * kvd + kh * hd + i];
          sc[p] = (float)(d / sqrt((double)hd));
          mx = sc[p] > mx ? sc[p] : mx;
        }
        for (int p = 0; p <= t; p++) sum += sc[p] = (float)exp(sc[p] - mx);
        for (int i = 0; i < hd; i++) {
          double a = 0;
          for (int p = 0; p <= t; p++) a += sc[p] * (double)vc[((size_t)l * n + p) * kvd + kh * hd + i];
          att[h * hd + i] = (float)(a / sum);
        }
      }
      matvec(lt(m, l, "attn_output.weight"), att, o, qd, dim);
      for (int i = 0; i < dim; i++) x[i] += o[i];
      /* the experts: router softmax, the k most probable, renormalized, their SwiGLUs summed */
      rmsnorm(xb, x, lt(m, l, "ffn_norm.weight"), dim, hp->norm_eps);
      matvec(lt(m, l, "ffn_gate_inp.weight"), xb, lg, dim, ne);
      int sel[64];
      double w[64];
      ref_route(lg, ne, k, hp->expert_weights_norm, sel, w);
      memset(o, 0, 4 * (size_t)dim);
      for (int r = 0; r < k; r++) {
        const int e = sel[r];
        matvec(lt(m, l, "ffn_gate_exps.weight") + (size_t)e * ff * dim, xb, g, dim, ff);
        matvec(lt(m, l, "ffn_up_exps.weight") + (size_t)e * ff * dim, xb, u, dim, ff);
        for (int i = 0; i < ff; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        matvec(lt(m, l, "ffn_down_exps.weight") + (size_t)e * dim * ff, g, y, ff, dim);
        for (int i = 0; i < dim; i++) o[i] += (float)(w[r] * y[i]);
      }
      for (int i = 0; i < dim; i++) x[i] += o[i];
    }
    rmsnorm(xb, x, tensor(m, "output_norm.weight"), dim, hp->norm_eps);
    const float *head = tensor(m, "output.weight");
    matvec(head ? head : tensor(m, "token_embd.weight"), xb, out + (size_t)t * V, dim, V);
  }
  free(kc), free(vc), free(x), free(xb), free(q), free(att), free(o), free(lg), free(g), free(u), free(y), free(sc);
}

/* model on device with place; the logits of every position, the snapshot; the model's
 * reference logits into ref when not NULL. */
static int run_engine_ref(const char *model, const char *device, const char *place, float *logits, il_engine_snapshot *es,
                          float *ref) {
  il_config cfg;
  il_config_defaults(&cfg);
  snprintf(cfg.model, sizeof cfg.model, "%s", model);
  snprintf(cfg.device, sizeof cfg.device, "%s", device);
  snprintf(cfg.place, sizeof cfg.place, "%s", place);
  snprintf(cfg.kv_type, sizeof cfg.kv_type, "f32");
  cfg.ctx = 64;
  cfg.threads = 2;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&cfg, &e));
  if (!e) return 0;
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){toks[i], 0, i, true};
  const int nv = il_engine_model(e)->hp.n_vocab;
  IL_CHECK_OK(il_engine_decode(e, b, 5, logits)); /* a prompt of 5, then two single steps */
  IL_CHECK_OK(il_engine_decode(e, b + 5, 1, logits + 5 * (size_t)nv));
  IL_CHECK_OK(il_engine_decode(e, b + 6, 1, logits + 6 * (size_t)nv));
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, es);
  if (ref) ref_forward(il_engine_model(e), N_TOK, ref);
  il_engine_free(e);
  return nv;
}

static int run_engine(const char *device, const char *place, float *logits, il_engine_snapshot *es) {
  return run_engine_ref("builtin:moe-tiny", device, place, logits, es, NULL);
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

static double max_abs(const float *a, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i]));
  return d;
}

/* The engine's logits on the CPU against the scalar forward. */
static void check_reference(const char *model) {
  const size_t nv = 512, n = N_TOK * nv;
  float *cpu = calloc(n, 4), *ref = calloc(n, 4);
  il_engine_snapshot es;
  IL_CHECK_INT(run_engine_ref(model, "cpu", "", cpu, &es, ref), 512);
  const double d = max_diff(cpu, ref, n), sc = max_abs(ref, n);
  printf("%s: %d positions, cpu vs the scalar forward: max |d| = %.3g (logits up to %.3g)\n", model, N_TOK, d, sc);
  IL_CHECK(sc > 0.1);
  IL_CHECK_NEAR(d, 0, 2e-5); /* measured 2.6e-6: F32 sums in another order */
  free(cpu), free(ref);
}

/* qwen3moe-tiny: exps=cpu, sim and cpu agree bit for bit; the hidden-row bytes (k = 4); the
 * exported file has qwen3moe's keys and tensor names and gives the same logits. */
static void check_qwen3moe(void) {
  const char *model = "builtin:qwen3moe-tiny";
  const size_t nv = 512, n = N_TOK * nv;
  float *cpu = calloc(n, 4), *dev = calloc(n, 4), *exps = calloc(n, 4), *file = calloc(n, 4);
  il_engine_snapshot s_cpu, s_dev, s_exps, s_file;
  IL_CHECK_INT(run_engine_ref(model, "cpu", "", cpu, &s_cpu, NULL), 512);
  IL_CHECK_INT(run_engine_ref(model, "sim:256MiB", "", dev, &s_dev, NULL), 512);
  IL_CHECK_INT(run_engine_ref(model, "sim:256MiB", "exps=cpu", exps, &s_exps, NULL), 512);
  IL_CHECK(memcmp(cpu, dev, n * 4) == 0);
  IL_CHECK(memcmp(dev, exps, n * 4) == 0);
  IL_CHECK(s_exps.n_expert == 16);
  const uint64_t want = 4 * 256 * 4 * (uint64_t)N_TOK * (2 + 2 * 4);
  IL_CHECK(s_exps.expert_bytes == want);
  const size_t stacks = 4 * 3 * (size_t)16 * 256 * 128 * 4;
  IL_CHECK(s_dev.mem.current[IL_MEM_WEIGHTS] - s_exps.mem.current[IL_MEM_WEIGHTS] == stacks);
  char path[256];
  snprintf(path, sizeof path, "/tmp/test_moe_%d_qwen3moe.gguf", (int)getpid());
  il_export_stats xs;
  IL_CHECK_OK(il_export_gguf(model, IL_DTYPE_F32, path, 2, NULL, &xs));
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(path, &g));
  if (g) {
    il_gguf_str s = {0};
    IL_CHECK_OK(il_gguf_get_str(g, "general.architecture", &s));
    IL_CHECK(s.len == 8 && !memcmp(s.ptr, "qwen3moe", 8));
    const char *keys[] = {"qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"};
    const int64_t vals[] = {16, 4, 128};
    for (int i = 0; i < 3; i++) {
      int64_t v = 0;
      IL_CHECK_OK(il_gguf_get_i64(g, keys[i], &v));
      IL_CHECK_INT(v, vals[i]);
    }
    int found = 0;
    const char *names[] = {"blk.3.ffn_gate_inp.weight", "blk.3.ffn_gate_exps.weight", "blk.3.ffn_up_exps.weight",
                           "blk.3.ffn_down_exps.weight", "blk.3.attn_q_norm.weight", "blk.3.attn_k_norm.weight"};
    for (int64_t i = 0; i < il_gguf_tensor_count(g); i++)
      for (int j = 0; j < 6; j++) found += !strcmp(il_gguf_tensor_at(g, i)->name, names[j]);
    IL_CHECK_INT(found, 6);
    il_gguf_close(g);
  }
  IL_CHECK_INT(run_engine_ref(path, "cpu", "", file, &s_file, NULL), 512);
  IL_CHECK(memcmp(cpu, file, n * 4) == 0);
  unlink(path);
  printf("%s: sim, exps=cpu, cpu and its exported GGUF give the same logits; %llu hidden-row bytes\n", model,
         (unsigned long long)s_exps.expert_bytes);
  free(cpu), free(dev), free(exps), free(file);
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
  check_reference("builtin:moe-tiny");
  check_reference("builtin:qwen3moe-tiny");
  check_qwen3moe();
  check_placement();
  check_plan();
  check_dense_error();
  return il_test_finish();
}
