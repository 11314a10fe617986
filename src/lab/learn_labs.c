/* lab/learn_labs: the lessons that run the engine: the one change per concept (an engine
 * option of a baseline job), the runner that measures one run of one arm with lab/bench (device
 * memory by category from the device's allocator, utilization, latency, throughput, copies),
 * and the two kinds that measure quality: KL divergence and top-1 agreement against the f32
 * model (lab/eval), and an f16 overflow counted in the logits.
 * Jobs that must not fit (out of memory, offloading) are sized by the planner (lab/plan): the
 * fewest parallel sequences at which the job no longer fits this device, so the lesson shows its
 * effect on any sim size or GPU; a device too large for that is capped with --mem-limit.
 * See lab/learn_impl.h for the steps.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/registry.h"
#include "core/jsonw.h"
#include "engine/engine.h"
#include "engine/oom.h"
#include "format/gguf.h"
#include "lab/bench.h"
#include "lab/eval.h"
#include "lab/learn_impl.h"
#include "lab/plan.h"
#include "memory/mem.h"
#include "model/export.h"

/* ---- metrics ------------------------------------------------------------------------------ */

enum {
  EM_FITS, EM_LOAD, EM_TTFT, EM_TPOT, EM_TPOT_P99, EM_E2E, EM_PROMPT_TPS, EM_GEN_TPS, EM_GEN_TPS_SEQ, EM_REQ_S,
  EM_CPU_UTIL, EM_GPU_UTIL, EM_GEN_GFLOPS, EM_GEN_ROOF, EM_PROMPT_GFLOPS, EM_PROMPT_PEAK, EM_RESERVED, EM_WEIGHTS,
  EM_KV, EM_ACT, EM_WS, EM_FRAG, EM_UP_BYTES, EM_UPLOADS, EM_COUNT
};

static const il__learn_metric il__engine_metrics[EM_COUNT] = {
    {"fits", {"ran (1) or out of memory (0)", "lief (1) oder zu wenig Speicher (0)"}, "count", 1},
    {"load_s", {"load", "Laden"}, "s", -1},
    {"ttft_s", {"time to first token", "Zeit bis zum ersten Token"}, "s", -1},
    {"tpot_s", {"time per output token", "Zeit pro erzeugtem Token"}, "s", -1},
    {"tpot_p99_s", {"time per output token, p99", "Zeit pro erzeugtem Token, p99"}, "s", -1},
    {"e2e_s", {"end to end", "Gesamtzeit"}, "s", -1},
    {"prompt_tps", {"prompt tokens/s", "Prompt-Tokens/s"}, "tok/s", 1},
    {"gen_tps", {"generated tokens/s (all sequences)", "erzeugte Tokens/s (alle Sequenzen)"}, "tok/s", 1},
    {"gen_tps_seq", {"generated tokens/s per sequence", "erzeugte Tokens/s je Sequenz"}, "tok/s", 1},
    {"req_s", {"requests/s", "Anfragen/s"}, "req/s", 1},
    {"cpu_util", {"CPU utilization (of the threads)", "CPU-Auslastung (der Threads)"}, "fraction", 0},
    {"gpu_util", {"GPU utilization (NVML)", "GPU-Auslastung (NVML)"}, "percent", 0},
    {"gen_gflops", {"generation GFLOP/s", "Erzeugung GFLOP/s"}, "GFLOP/s", 1},
    {"gen_roofline_frac", {"generation: share of the read bandwidth", "Erzeugung: Anteil der Lesebandbreite"}, "fraction", 1},
    {"prompt_gflops", {"prompt GFLOP/s", "Prompt GFLOP/s"}, "GFLOP/s", 1},
    {"prompt_peak_frac", {"prompt: share of the compute peak", "Prompt: Anteil der Rechenspitze"}, "fraction", 1},
    {"reserved_bytes", {"device memory reserved (peak)", "reservierter Gerätespeicher (Spitze)"}, "bytes", -1},
    {"weights_bytes", {"weights on the device", "Gewichte auf dem Gerät"}, "bytes", -1},
    {"kv_bytes", {"KV cache", "KV-Cache"}, "bytes", -1},
    {"act_bytes", {"activations", "Aktivierungen"}, "bytes", -1},
    {"ws_bytes", {"workspace (attention)", "Arbeitsspeicher (Attention)"}, "bytes", -1},
    {"fragmentation", {"fragmentation", "Fragmentierung"}, "fraction", -1},
    {"upload_bytes", {"copied host -> device", "Host -> Gerät kopiert"}, "bytes", -1},
    {"uploads", {"host -> device copies", "Kopien Host -> Gerät"}, "count", -1},
};

/* One bench run's figures in the lesson's metrics. Device categories come from the device's
 * allocator (peak allocated); on cpu, from the host's counted peak per category. */
static void il__fill(const il_bench_result *r, double *v) {
  for (int m = 0; m < EM_COUNT; m++) v[m] = NAN;
  v[EM_FITS] = 1;
  const double *s = r->samples[0].v;
  v[EM_LOAD] = s[IL_BM_LOAD_S];
  v[EM_TTFT] = s[IL_BM_TTFT_S];
  v[EM_TPOT] = s[IL_BM_TPOT_S];
  v[EM_TPOT_P99] = r->tpot_steps.n ? r->tpot_steps.p99 : NAN;
  v[EM_E2E] = s[IL_BM_E2E_S];
  v[EM_PROMPT_TPS] = s[IL_BM_PROMPT_TPS];
  v[EM_GEN_TPS] = s[IL_BM_GEN_TPS];
  v[EM_GEN_TPS_SEQ] = s[IL_BM_GEN_TPS_SEQ];
  v[EM_REQ_S] = s[IL_BM_REQ_S];
  v[EM_CPU_UTIL] = s[IL_BM_CPU_UTIL];
  v[EM_GEN_GFLOPS] = s[IL_BM_GEN_GFLOPS];
  v[EM_GEN_ROOF] = s[IL_BM_GEN_ROOF];
  v[EM_PROMPT_GFLOPS] = s[IL_BM_PROMPT_GFLOPS];
  v[EM_PROMPT_PEAK] = s[IL_BM_PROMPT_PEAK];
  if (r->has_usage && r->usage.gpu_available && r->usage.n_gpus > 0) v[EM_GPU_UTIL] = r->usage.gpus[0].util_mean;
  static const int cats[4] = {IL_MEM_WEIGHTS, IL_MEM_KV, IL_MEM_ACTIVATIONS, IL_MEM_WORKSPACE};
  for (int i = 0; i < 4; i++)
    v[EM_WEIGHTS + i] = r->has_device ? (double)r->device_stats.cat[cats[i]].peak_allocated
                                      : (double)r->samples[0].mem_peak[cats[i]] + (double)r->samples[0].mem_mapped[cats[i]];
  v[EM_RESERVED] = r->has_device ? (double)r->device_stats.total.peak_reserved : s[IL_BM_MEM_PEAK];
  if (r->has_device) v[EM_FRAG] = r->device_stats.fragmentation;
  v[EM_UP_BYTES] = (double)r->transfers.upload_bytes;
  v[EM_UPLOADS] = (double)r->transfers.n_uploads;
}

/* ---- sizes of the jobs -------------------------------------------------------------------- */

static bool il__is_cpu(const char *dev) { return !strcmp(dev, "cpu"); }

static int il__prompt(const il__learn *L) { return L->quick ? 32 : 128; }
static int il__gen(const il__learn *L) { return L->quick ? 8 : 32; }

/* The plan of p (ctx sized as bench sizes it). */
static il_status il__plan(const il_sweep_point *p, il_plan *out) {
  il_config c = p->cfg;
  if (c.ctx == 0) c.ctx = p->prompt + p->gen;
  return il_plan_run(&c, out);
}

/* Whether p opens on its device: one dry open on sim (what the planner does for each trial),
 * the planner on other devices. */
static il_status il__fits(const il_sweep_point *p, bool *fits) {
  il_config c = p->cfg;
  if (c.ctx == 0) c.ctx = p->prompt + p->gen;
  if (strncmp(c.device, "sim:", 4)) {
    il_plan plan;
    IL_TRY(il_plan_run(&c, &plan));
    *fits = plan.fits;
    return IL_OK;
  }
  char dev[sizeof c.device];
  snprintf(dev, sizeof dev, "%s", c.device);
  if ((size_t)snprintf(c.device, sizeof c.device, "%s,dry", dev) >= sizeof c.device)
    return il_error(IL_ERR_INVALID_ARG, "--device %s: too long", dev);
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  il_engine_free(e);
  *fits = st == IL_OK;
  if (st == IL_ERR_OOM) il_error_clear();
  return st == IL_ERR_OOM ? IL_OK : st;
}

/* The fewest parallel sequences (1, 2, 4, ... 256) at which p no longer fits its device at
 * ctx 1024, with the variant `change` still fitting; when the device is too large even for
 * that, a --mem-limit of three quarters of one sequence's need. Fills p and the facts. */
static il_status il__too_large(il__learn *L, il_sweep_point *p, const char *change_key, const char *change_val) {
  p->cfg.ctx = 1024;
  bool fits = true;
  for (int s = 1; s <= 256 && fits; s *= 2) {
    p->cfg.n_seq = s;
    IL_TRY(il__fits(p, &fits));
  }
  il_plan plan;
  IL_TRY(il__plan(p, &plan));
  if (plan.fits) {
    p->cfg.n_seq = 1;
    IL_TRY(il__plan(p, &plan));
    snprintf(p->cfg.mem_limit, sizeof p->cfg.mem_limit, "%zu", plan.peak_bytes / 4 * 3 - plan.fixed_bytes);
    il__learn_fact(L, "mem_limit", "%s", p->cfg.mem_limit);
    IL_TRY(il__plan(p, &plan));
  }
  if (change_key) {
    il_sweep_point v = *p;
    char where[64];
    snprintf(where, sizeof where, "--change %s", change_key);
    IL_TRY(il_sweep_set(&v, change_key, change_val, where));
    il_plan pv;
    IL_TRY(il__plan(&v, &pv));
    char b[32];
    il__learn_fmt("bytes", (double)pv.peak_bytes, b, sizeof b);
    il__learn_fact(L, "need_variant", "%s", b);
    il__learn_fact_yesno(L, "fits_variant", pv.fits);
    il__learn_fact(L, "layers_variant", "%d/%d", pv.n_dev_layers, pv.n_layers);
  }
  char b[32];
  il__learn_fmt("bytes", (double)plan.peak_bytes, b, sizeof b);
  il__learn_fact(L, "need", "%s", b);
  il__learn_fmt("bytes", (double)plan.capacity, b, sizeof b);
  il__learn_fact(L, "capacity", "%s", b);
  il__learn_fact(L, "n_seq", "%d", p->cfg.n_seq);
  il__learn_fact_yesno(L, "fits_baseline", plan.fits);
  return IL_OK;
}

static void il__focus(il__learn *L, const char *a, const char *b, const char *c) {
  L->n_focus = 0;
  const char *k[3] = {a, b, c};
  for (int i = 0; i < 3; i++)
    if (k[i]) L->focus[L->n_focus++] = k[i];
}

static void il__expect(il__learn *L, const char *key, int dir) {
  L->expect_key = key;
  L->expect_dir = dir;
}

/* ---- engine lessons: the baseline and the one change ------------------------------------- */

static il_status il__set(il_sweep_point *p, const char *name, const char *value) {
  char where[64];
  snprintf(where, sizeof where, "learn %s", name);
  return il_sweep_set(p, name, value, where);
}

/* Applies the change to the experiment: baseline = L->base, variant = base + L->change. */
static il_status il__apply(il__learn *L) {
  const char *ch[1] = {L->change};
  IL_TRY(il_experiment_set_changes(L->x, &L->base, ch, 1, false));
  il__learn_set_metrics(L, il__engine_metrics, EM_COUNT);
  return IL_OK;
}

/* The first fix of this job's out-of-memory report: the planner's (checked by a dry run) on a
 * device with a plan, else the engine's own report from a real open. */
static il_status il__oom_fix(il__learn *L, char *key, size_t kn, char *val, size_t vn) {
  const il_sweep_point *p = &L->base;
  if (!il__is_cpu(L->device)) {
    il_plan plan;
    IL_TRY(il__plan(p, &plan));
    if (plan.fits || plan.n_fixes < 1) return il_error(IL_ERR_INTERNAL, "the lesson's job fits %s: no fix to show", L->device);
    snprintf(key, kn, "%s", plan.fixes[0].option);
    snprintf(val, vn, "%s", plan.fixes[0].value);
    char b[32];
    il__learn_fmt("bytes", (double)plan.fixes[0].peak_bytes, b, sizeof b);
    il__learn_fact(L, "fix_need", "%s", b);
    il__learn_fact(L, "fix_effect", "%s", plan.fixes[0].effect);
  } else {
    il_config c = p->cfg;
    if (c.ctx == 0) c.ctx = p->prompt + p->gen;
    il_engine *e = NULL;
    il_status st = il_engine_open(&c, &e);
    il_engine_free(e);
    il_oom_report rep;
    if (st != IL_ERR_OOM || !il_oom_report_last(&rep) || rep.n_fixes < 1)
      return il_error(IL_ERR_INTERNAL, "the lesson's job did not run out of memory on %s", L->device);
    il_error_clear();
    snprintf(key, kn, "%s", rep.fixes[0].option);
    snprintf(val, vn, "%s", rep.fixes[0].value);
    char b[32];
    il__learn_fmt("bytes", (double)rep.fixes[0].predicted, b, sizeof b);
    il__learn_fact(L, "fix_need", "%s", b);
    il__learn_fact(L, "fix_effect", "%s", rep.fixes[0].effect);
    il__learn_fmt("bytes", (double)rep.capacity, b, sizeof b);
    il__learn_fact(L, "capacity", "%s", b);
    il__learn_fmt("bytes", (double)rep.need_total, b, sizeof b);
    il__learn_fact(L, "need", "%s", b);
  }
  /* the report names engine options; the lab says ubatch for the engine's batch */
  il__learn_fact(L, "fix_option", "--%s", key);
  il__learn_fact(L, "fix_value", "%s", val);
  if (!strcmp(key, "batch")) snprintf(key, kn, "ubatch");
  return IL_OK;
}

static il_status il__engine_define(il__learn *L) {
  il_sweep_point *b = &L->base;
  il_sweep_point_defaults(b);
  const char *slug = L->c->slug;
  const bool cpu = il__is_cpu(L->device);
  b->prompt = il__prompt(L);
  b->gen = il__gen(L);
  IL_TRY(il__set(b, "device", L->device));
  IL_TRY(il__set(b, "model", "builtin:tiny"));
  /* --quick is for CI: one thread, because on a loaded machine a pool's threads wait for each
   * other at every op (the throughput lesson changes the thread count itself) */
  if (L->quick && strcmp(slug, "throughput")) IL_TRY(il__set(b, "threads", "1"));
  L->change[0] = 0;
  /* the lessons whose change needs a separate device memory: not on the host */
  const char *needs_device[] = {"model-offloading", "cpu-offloading", "vae-offloading"};
  for (size_t i = 0; i < sizeof needs_device / sizeof needs_device[0]; i++)
    if (cpu && !strcmp(slug, needs_device[i])) {
      L->skipped = true;
      snprintf(L->reason, sizeof L->reason,
               "--device cpu: the host is where offloaded parts go, so there is nothing to offload from; run it on "
               "--device sim:SIZE or cuda");
      return IL_OK;
    }
  if (!strcmp(slug, "gpu-compute")) {
    IL_TRY(il__set(b, "device", "cpu"));
    snprintf(L->change, sizeof L->change, "device=%s", cpu ? IL_LEARN_DEFAULT_DEVICE : L->device);
    il__focus(L, "upload_bytes", "gen_tps", "prompt_tps");
    il__expect(L, "upload_bytes", +1);
  } else if (!strcmp(slug, "cuda")) {
    if (cpu) IL_TRY(il__set(b, "device", IL_LEARN_DEFAULT_DEVICE));
    snprintf(L->change, sizeof L->change, "ubatch=1");
    il__focus(L, "uploads", "ttft_s", "prompt_tps");
    il__expect(L, "uploads", +1);
  } else if (!strcmp(slug, "cuda-out-of-memory")) {
    if (cpu) {
      IL_TRY(il__set(b, "mem-limit", "16MiB"));
      IL_TRY(il__set(b, "ctx", "1024"));
      IL_TRY(il__set(b, "batch", "8"));
      il__learn_fact(L, "n_seq", "8");
    } else {
      IL_TRY(il__too_large(L, b, NULL, NULL));
    }
    char key[32], val[32];
    IL_TRY(il__oom_fix(L, key, sizeof key, val, sizeof val));
    snprintf(L->change, sizeof L->change, "%s=%s", key, val);
    il__focus(L, "fits", "reserved_bytes", NULL);
    il__expect(L, "fits", +1);
  } else if (!strcmp(slug, "model-offloading") || !strcmp(slug, "cpu-offloading")) {
    const bool stream = !strcmp(slug, "model-offloading");
    IL_TRY(il__too_large(L, b, stream ? "offload" : "gpu-layers", stream ? "stream" : "auto"));
    snprintf(L->change, sizeof L->change, "%s", stream ? "offload=stream" : "gpu-layers=auto");
    il__focus(L, "fits", "weights_bytes", stream ? "upload_bytes" : "gen_tps");
    il__expect(L, "fits", +1);
  } else if (!strcmp(slug, "vae-offloading")) {
    snprintf(L->change, sizeof L->change, "place=token_embd=cpu,output=cpu");
    il__focus(L, "weights_bytes", "gen_tps", NULL);
    il__expect(L, "weights_bytes", -1);
  } else if (!strcmp(slug, "attention-slicing") || !strcmp(slug, "memory-efficient-attention") ||
             !strcmp(slug, "flashattention") || !strcmp(slug, "xformers")) {
    b->prompt = L->quick ? 256 : 1024; /* flash's tile table (~125 KiB) outweighs naive's T x T scores below ~180 tokens */
    b->gen = L->quick ? 2 : 8;
    const bool dispatch = !strcmp(slug, "xformers");
    IL_TRY(il__set(b, "attn", dispatch ? "auto" : "naive"));
    const char *to = dispatch ? "naive" : !strcmp(slug, "attention-slicing") ? "sliced" : !strcmp(slug, "flashattention") ? "flash" : "memeff";
    snprintf(L->change, sizeof L->change, "attn=%s", to);
    il__focus(L, "ws_bytes", "prompt_tps", "ttft_s");
    il__expect(L, "ws_bytes", dispatch ? +1 : -1);
  } else if (!strcmp(slug, "mixed-precision") || !strcmp(slug, "int8") || !strcmp(slug, "int4")) {
    const char *from = !strcmp(slug, "mixed-precision") ? "f32" : !strcmp(slug, "int8") ? "f16" : "q8_0";
    const char *to = !strcmp(slug, "mixed-precision") ? "f16" : !strcmp(slug, "int8") ? "q8_0" : "q4_0";
    IL_TRY(il__set(b, "wtype", from));
    snprintf(L->change, sizeof L->change, "wtype=%s", to);
    il__focus(L, "weights_bytes", "gen_tps", "prompt_tps");
    il__expect(L, "weights_bytes", -1);
  } else if (!strcmp(slug, "fp32")) {
    IL_TRY(il__set(b, "kv-type", "f16"));
    IL_TRY(il__set(b, "ctx", "1024"));
    snprintf(L->change, sizeof L->change, "kv-type=f32");
    il__focus(L, "kv_bytes", "tpot_s", NULL);
    il__expect(L, "kv_bytes", +1);
  } else if (!strcmp(slug, "fp16")) {
    IL_TRY(il__set(b, "dtype", "f32"));
    snprintf(L->change, sizeof L->change, "dtype=f16");
    il__focus(L, "act_bytes", "prompt_tps", "tpot_s");
    il__expect(L, "act_bytes", -1);
  } else if (!strcmp(slug, "tensor-core")) {
    if (!strncmp(L->device, "cuda", 4)) {
      IL_TRY(il__set(b, "wtype", "f32"));
      snprintf(L->change, sizeof L->change, "wtype=f16");
    } else {
      const char *best = il_backend_cpu_isa_default();
      if (!strcmp(best, "scalar")) {
        L->skipped = true;
        snprintf(L->reason, sizeof L->reason, "this CPU (or IL_ISA) gives no SIMD kernels: there is no matrix unit to compare with");
        return IL_OK;
      }
      IL_TRY(il__set(b, "isa", "scalar"));
      snprintf(L->change, sizeof L->change, "isa=%s", best);
      L->x->bench.peaks = il_mem_calloc(IL_MEM_OTHER, sizeof *L->x->bench.peaks, "learn peaks");
      if (!L->x->bench.peaks) return IL_ERR_OOM;
    }
    b->prompt = L->quick ? 64 : 256;
    il__focus(L, "prompt_tps", "prompt_gflops", "prompt_peak_frac");
    il__expect(L, "prompt_tps", +1);
  } else if (!strcmp(slug, "batch-size") || !strcmp(slug, "gpu-utilization")) {
    snprintf(L->change, sizeof L->change, "batch=8");
    if (!strcmp(slug, "batch-size")) {
      il__focus(L, "gen_tps", "gen_tps_seq", "kv_bytes");
      il__expect(L, "gen_tps", +1);
    } else {
      il__focus(L, strncmp(L->device, "cuda", 4) ? "cpu_util" : "gpu_util", "gen_gflops", "gen_roofline_frac");
      il__expect(L, "gen_gflops", +1);
      L->x->bench.sample_usage = true;
      L->x->bench.no_gpu = false;
      int threads = L->quick ? 1 : (int)sysconf(_SC_NPROCESSORS_ONLN); /* the threads the runs use */
      if (il_bench_measure_roofline(threads > 0 ? threads : 1, L->quick ? 100 : 300, &L->x->bench.roofline_gbps) != IL_OK) {
        L->x->bench.roofline_gbps = 0;
        il_error_clear();
      }
      il__learn_fact(L, "read_bandwidth", "%.1f GB/s", L->x->bench.roofline_gbps);
    }
  } else if (!strcmp(slug, "inference-latency")) {
    snprintf(L->change, sizeof L->change, "prompt=%d", L->quick ? 128 : 512);
    il__focus(L, "ttft_s", "tpot_s", "tpot_p99_s");
    il__expect(L, "ttft_s", +1);
  } else if (!strcmp(slug, "throughput")) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 1) {
      IL_TRY(il__set(b, "threads", "1"));
      snprintf(L->change, sizeof L->change, "threads=%ld", cpus);
      il__focus(L, "prompt_tps", "gen_tps", "cpu_util");
      il__expect(L, "prompt_tps", +1);
    } else {
      snprintf(L->change, sizeof L->change, "batch=4");
      il__focus(L, "gen_tps", "req_s", "tpot_s");
      il__expect(L, "gen_tps", +1);
    }
  } else {
    return il_error(IL_ERR_INTERNAL, "no engine lab for '%s'", slug);
  }
  return il__apply(L);
}

/* ---- engine lessons: runs ----------------------------------------------------------------- */

static il_status il__write_svg(il__learn *L, const char *name, const char *svg) {
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, name, &st);
  if (!f) return st;
  fputs(svg, f);
  return fclose(f) == 0 ? IL_OK : il_error(IL_ERR_OUTPUT, "%s/%s: write failed", L->x->dir, name);
}

static il_status il__engine_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  il__learn *L = ud;
  if (il__learn_stopped(L)) return il_error(IL_ERR_INTERNAL, "interrupted by Ctrl-C");
  il_bench_result r;
  memset(&r, 0, sizeof r);
  il_bench_options o = x->bench;
  o.reps = 1;
  il_status st = il_bench_run(arm ? &x->variant : &x->baseline, &o, &r);
  for (int m = 0; m < x->n_metrics; m++) vals[m] = NAN;
  const char *an = arm ? "variant" : "baseline";
  if (st == IL_OK) {
    il__fill(&r, vals);
    il__learn_log(L, "run %d %s: ok, %s %.6g", run, an, L->focus[0], vals[il__learn_metric_index(L, L->focus[0])]);
    if (r.memory_map_svg && !L->map_written[arm]) {
      char name[64];
      snprintf(name, sizeof name, "memory-map-%s.svg", an);
      if (il__write_svg(L, name, r.memory_map_svg) == IL_OK) L->map_written[arm] = true;
    }
  } else if (st == IL_ERR_OOM) {
    /* out of memory is what the lessons about memory measure: a sample with fits = 0 */
    vals[EM_FITS] = 0;
    il__learn_log(L, "run %d %s: out of memory", run, an);
  } else {
    if (!x->failures[arm]) snprintf(x->first_error[arm], sizeof x->first_error[arm], "%s", r.error);
    x->failures[arm]++;
    il__learn_log(L, "run %d %s: failed: %s", run, an, r.error);
  }
  il__learn_sample_line(L, arm, run, vals);
  il_bench_result_free(&r);
  return IL_OK;
}

static void il__say_memory(il__learn *L, const double *v) {
  char w[24], kv[24], act[24], ws[24], res[24], cu[24];
  il__learn_fmt("bytes", v[EM_WEIGHTS], w, sizeof w);
  il__learn_fmt("bytes", v[EM_KV], kv, sizeof kv);
  il__learn_fmt("bytes", v[EM_ACT], act, sizeof act);
  il__learn_fmt("bytes", v[EM_WS], ws, sizeof ws);
  il__learn_fmt("bytes", v[EM_RESERVED], res, sizeof res);
  il__learn_fmt("fraction", v[EM_CPU_UTIL], cu, sizeof cu);
  il__learn_say(L, "   %s: %s %s, kv %s, %s %s, %s %s (%s %s); %s %s", il__learn_ui(L, "device_memory"), il__learn_ui(L, "weights"), w,
                kv, il__learn_ui(L, "activations"), act, il__learn_ui(L, "workspace"), ws, il__learn_ui(L, "reserved"), res,
                il__learn_ui(L, "cpu_util"), cu);
  il__learn_fact(L, "base_weights", "%s", w);
  il__learn_fact(L, "base_kv", "%s", kv);
  il__learn_fact(L, "base_act", "%s", act);
  il__learn_fact(L, "base_ws", "%s", ws);
}

static il_status il__engine_before(il__learn *L) {
  const char *drv, *build, *dev;
  il__learn_machine_facts(L, &drv, &build, &dev);
  il__learn_say(L, "%s", il__learn_ui(L, "step1"));
  il__learn_say(L, "   %s: %s\n   %s: %s; %s", il__learn_ui(L, "this_machine"), drv, il__learn_ui(L, "build"), build, dev);
  il__learn_fact(L, "driver", "%s", drv);
  const il_sweep_point *p = &L->x->baseline;
  const il_config *c = &p->cfg;
  il__learn_say(L, "   %s: %s, %s, wtype %s, dtype %s, kv-type %s, attn %s, %d %s, prompt %d, gen %d, ctx %d, %d %s%s%s",
                il__learn_ui(L, "baseline_job"), c->model, c->device, c->wtype[0] ? c->wtype : "f32", c->dtype[0] ? c->dtype : "f32",
                c->kv_type, c->attn, c->n_seq, il__learn_ui(L, "sequences"), p->prompt, p->gen, c->ctx ? c->ctx : p->prompt + p->gen,
                c->batch, il__learn_ui(L, "per_pass"), c->mem_limit[0] ? ", mem-limit " : "", c->mem_limit);
  il__learn_fact(L, "device", "%s", c->device);
  il__learn_fact(L, "batch", "%d", c->n_seq);
  /* the baseline once: what the state before is */
  il_bench_result r;
  memset(&r, 0, sizeof r);
  il_bench_options o = L->x->bench;
  o.reps = 1;
  o.warmup = 0;
  il_status st = il_bench_run(p, &o, &r);
  if (st == IL_OK) {
    double v[EM_COUNT];
    il__fill(&r, v);
    il__say_memory(L, v);
    il__learn_fact(L, "attn_baseline", "%s", r.attn);
    il__learn_fact(L, "attn_why", "%s", r.attn_why[0] ? r.attn_why : "-");
  } else if (st == IL_ERR_OOM) {
    /* the engine's whole report (bench keeps only its first 512 bytes) */
    char *text = il_mem_alloc(IL_MEM_OTHER, 8192, "learn oom report");
    il_oom_report rep;
    const bool have = il_oom_report_last(&rep);
    if (text) {
      if (have) il_oom_report_text(&rep, text, 8192);
      else snprintf(text, 8192, "%s", r.error);
      char *ind = il_mem_alloc(IL_MEM_OTHER, 12288, "learn oom report");
      if (ind) {
        size_t k = 0;
        for (const char *q = text; *q && k + 8 < 12288; q++) {
          ind[k++] = *q;
          if (*q == '\n') ind[k++] = ' ', ind[k++] = ' ', ind[k++] = ' ';
        }
        ind[k] = 0;
        il__learn_say(L, "   %s", ind);
        il_mem_free(ind);
      }
      il_status fst = IL_OK;
      FILE *f = il__learn_open(L, "oom-report.txt", &fst);
      if (f) {
        fprintf(f, "%s\n", text);
        fclose(f);
      }
      il_mem_free(text);
    }
    if (have) {
      il__learn_fact(L, "oom_cause", "%s", rep.fragmentation ? "fragmentation" : "capacity");
      il__learn_fact(L, "oom_what", "%s", rep.failure.what);
    }
  } else {
    il__learn_say(L, "   %s", r.error);
  }
  il_bench_result_free(&r);
  il_error_clear();
  if (!il__is_cpu(c->device)) {
    /* what the planner predicts for each arm, kept as evidence */
    for (int a = 0; a < 2; a++) {
      il_plan plan;
      if (il__plan(a ? &L->x->variant : &L->x->baseline, &plan) != IL_OK) {
        il_error_clear();
        continue;
      }
      il_status fst = IL_OK;
      FILE *f = il__learn_open(L, a ? "plan-variant.json" : "plan-baseline.json", &fst);
      if (f) {
        il_plan_json(&plan, f);
        fclose(f);
      }
      char b[32];
      il__learn_fmt("bytes", (double)plan.peak_bytes, b, sizeof b);
      il__learn_fact(L, a ? "plan_variant" : "plan_baseline", "%s", b);
    }
  }
  return IL_OK;
}

static void il__engine_change(il__learn *L) {
  il_experiment *x = L->x;
  char before[IL_CONFIG_STR_MAX];
  il_sweep_get(&x->baseline, x->changes[0].name, before, sizeof before);
  il__learn_say(L, "%s\n   %s: %s -> %s (%s)", il__learn_ui(L, "step2"), x->changes[0].name, before[0] ? before : "\"\"",
                x->changes[0].value, il__learn_ui(L, "nothing_else"));
  il__learn_fact(L, "option", "%s", x->changes[0].name);
  il__learn_fact(L, "from", "%s", before[0] ? before : "\"\"");
  il__learn_fact(L, "to", "%s", x->changes[0].value);
}

/* The attention kernel and the placement each arm ran with, once (facts for the quick check). */
static void il__arm_facts(il__learn *L) {
  il_bench_options o = L->x->bench;
  o.reps = 1;
  o.warmup = 0;
  il_bench_result r;
  memset(&r, 0, sizeof r);
  if (il_bench_run(&L->x->variant, &o, &r) == IL_OK) il__learn_fact(L, "attn_variant", "%s", r.attn);
  il_bench_result_free(&r);
  il_error_clear();
}

/* ---- quality ------------------------------------------------------------------------------ */

/* The lesson's own text, the one corpus every build has: the sections joined. */
static void il__corpus(const il__learn *L, char *buf, size_t n) {
  snprintf(buf, n, "%s\n%s\n%s\n%s\n%s\n%s\n", L->text.line, L->text.what, L->text.where, L->text.failure, L->text.check,
           L->text.name);
}

typedef struct {
  double kl_mean, kl_p99, top1, ppl_ratio, weights;
} il__quality;

/* KL(f32 || wtype) and top-1 agreement of builtin:tiny over the lesson's text, on the CPU (the
 * same numbers on every device: sim and cpu compute the same bits). */
static il_status il__kl(il__learn *L, const char *wtype, il__quality *q) {
  char *text = il_mem_alloc(IL_MEM_OTHER, 65536, "learn corpus");
  if (!text) return IL_ERR_OOM;
  il__corpus(L, text, 65536);
  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "builtin:tiny");
  snprintf(c.device, sizeof c.device, "cpu");
  c.ctx = 64;
  c.batch = 64;
  if (L->quick) c.threads = 1;
  il_config cr = c;
  snprintf(c.wtype, sizeof c.wtype, "%s", wtype);
  /* each weight type's model is generated once per lesson: the measurement is the evaluation,
   * not the load */
  il_engine *e = NULL;
  int slot = -1;
  for (int i = 0; i < 8 && slot < 0; i++)
    if (L->qeng[i] && !strcmp(L->qtype[i], wtype)) slot = i;
  for (int i = 0; i < 8 && slot < 0; i++)
    if (!L->qeng[i]) slot = i;
  il_status st = IL_OK;
  if (slot < 0) st = il_error(IL_ERR_INTERNAL, "more than 8 weight types in one lesson");
  else if (!L->qeng[slot]) {
    st = il_engine_open(&c, &L->qeng[slot]);
    if (st == IL_OK) snprintf(L->qtype[slot], sizeof L->qtype[slot], "%s", wtype);
  }
  if (st == IL_OK) e = L->qeng[slot];
  /* the reference is the same for every measurement: opened once per lesson (each window
   * rewrites positions 0.. of sequence 0, so the engines carry nothing from one text to the next) */
  if (st == IL_OK && !L->ref) st = il_engine_open(&cr, &L->ref);
  il_engine *ref = L->ref;
  il_eval_result r;
  if (st == IL_OK) {
    il_eval_params p = {64, L->quick ? 1 : 6, NULL, NULL, NULL};
    st = il_eval_text(e, ref, text, &p, &r);
  }
  if (st == IL_OK) {
    q->kl_mean = r.kl_mean;
    q->kl_p99 = r.kl_p99;
    q->top1 = r.top1;
    q->ppl_ratio = r.ppl_ratio;
    q->weights = (double)il_engine_model(e)->weight_bytes;
  }
  il_mem_free(text);
  return st;
}

static il_status il__engine_after(il__learn *L) {
  const char *slug = L->c->slug;
  if (!strcmp(slug, "xformers") || !strcmp(slug, "attention-slicing") || !strcmp(slug, "memory-efficient-attention") ||
      !strcmp(slug, "flashattention"))
    il__arm_facts(L);
  if (!strcmp(slug, "mixed-precision") || !strcmp(slug, "int8") || !strcmp(slug, "int4")) {
    /* what the smaller weights cost in quality, against the f32 model */
    for (int a = 0; a < 2; a++) {
      char w[IL_CONFIG_STR_MAX];
      il_sweep_get(a ? &L->x->variant : &L->x->baseline, "wtype", w, sizeof w);
      il__quality q;
      IL_TRY(il__kl(L, w, &q));
      il__learn_fact(L, a ? "kl_variant" : "kl_baseline", "%.4g", q.kl_mean);
      il__learn_fact(L, a ? "top1_variant" : "top1_baseline", "%.1f%%", q.top1 * 100);
    }
    il__learn_say(L, "   KL(f32 || %s) = %s nats, top-1 %s;  KL(f32 || %s) = %s nats, top-1 %s", il__learn_fact_get(L, "from"),
                  il__learn_fact_get(L, "kl_baseline"), il__learn_fact_get(L, "top1_baseline"), il__learn_fact_get(L, "to"),
                  il__learn_fact_get(L, "kl_variant"), il__learn_fact_get(L, "top1_variant"));
  }
  if (!strcmp(slug, "gpu-utilization")) {
    int m = il__learn_metric_index(L, "gpu_util");
    const il_experiment_effect *e = m >= 0 ? &L->eff[m] : NULL;
    if (e && L->have_eff && e->a.n && e->b.n) il__learn_fact(L, "gpu_util", "%.1f%% -> %.1f%%", e->a.mean, e->b.mean);
    else il__learn_fact(L, "gpu_util", "-");
  }
  if (!strcmp(slug, "batch-size")) {
    /* the curves: throughput and latency per batch, one run each, and the largest batch that fits */
    il_status fst = IL_OK;
    FILE *f = il__learn_open(L, "curve.jsonl", &fst);
    if (!f) return fst;
    il__learn_say(L, "   %s", il__learn_ui(L, "curve"));
    for (int bsz = 1; bsz <= (L->quick ? 8 : 16) && !il__learn_stopped(L); bsz *= 2) {
      il_sweep_point p = L->x->baseline;
      p.cfg.n_seq = bsz;
      il_bench_options o = L->x->bench;
      o.reps = 1;
      il_bench_result r;
      memset(&r, 0, sizeof r);
      if (il_bench_run(&p, &o, &r) == IL_OK) {
        double v[EM_COUNT];
        il__fill(&r, v);
        char t[24];
        il__learn_fmt("s", v[EM_TPOT], t, sizeof t);
        il__learn_say(L, "   %5d  %10.1f  %10.1f   %s", bsz, v[EM_GEN_TPS], v[EM_GEN_TPS_SEQ], t);
        fprintf(f, "{\"batch\":%d,\"gen_tps\":%.6g,\"gen_tps_seq\":%.6g,\"tpot_s\":%.6g,\"kv_bytes\":%.0f}\n", bsz, v[EM_GEN_TPS],
                v[EM_GEN_TPS_SEQ], v[EM_TPOT], v[EM_KV]);
      }
      il_bench_result_free(&r);
      il_error_clear();
    }
    fclose(f);
    if (!il__is_cpu(L->x->baseline.cfg.device)) {
      /* the largest batch the device holds, by the planner: doubling, then bisection */
      il_sweep_point p = L->x->baseline;
      int lo = 0, hi = 0;
      bool fits = false;
      for (int s = 1; s <= 65536; s *= 2) {
        p.cfg.n_seq = s;
        if (il__fits(&p, &fits) != IL_OK) break;
        if (!fits) {
          hi = s;
          break;
        }
        lo = s;
      }
      while (hi && hi - lo > 1) {
        p.cfg.n_seq = (lo + hi) / 2;
        if (il__fits(&p, &fits) != IL_OK) break;
        if (fits) lo = p.cfg.n_seq;
        else hi = p.cfg.n_seq;
      }
      il_error_clear();
      il__learn_fact(L, "largest_batch", "%d", lo);
      il__learn_say(L, "   %s, %s: %d", il__learn_ui(L, "largest_batch"), L->x->baseline.cfg.device, lo);
    } else {
      il__learn_fact(L, "largest_batch", "%s", "-");
    }
  }
  if (L->x->bench.peaks) {
    il_mem_free(L->x->bench.peaks);
    L->x->bench.peaks = NULL;
  }
  return IL_OK;
}

static il_status il__engine_rollback(il__learn *L) {
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, "rollback.sh", &st);
  if (!f) return st;
  fprintf(f,
          "#!/bin/sh\n# Rollback: runs the baseline configuration of this lesson again, exactly as it was (every engine\n"
          "# option is in baseline.conf); extra arguments go to bench (--json shows the configuration it ran).\n"
          "exec '%s' bench --config '%s/baseline.conf' --prompt %d \"$@\"\n",
          L->o->exe ? L->o->exe : "inferlab", L->x->dir, L->x->baseline.prompt);
  if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s/rollback.sh: write failed", L->x->dir);
  char path[2400];
  snprintf(path, sizeof path, "%s/rollback.sh", L->x->dir);
  chmod(path, 0755);
  snprintf(L->rollback, sizeof L->rollback, "sh %s/rollback.sh   (= inferlab bench --config %s/baseline.conf --prompt %d)",
           L->x->dir, L->x->dir, L->x->baseline.prompt);
  return IL_OK;
}

static const il__learn_kind_ops il__engine_ops = {il__engine_define, NULL, il__engine_before, il__engine_change,
                                                  il__engine_run, il__engine_after, il__engine_rollback};

const il__learn_kind_ops *il__learn_ops_engine(void) { return &il__engine_ops; }

/* ---- the quality kind: KL and top-1 against f32, per weight type --------------------------- */

enum { QM_KL, QM_KL_P99, QM_TOP1, QM_PPL_RATIO, QM_WEIGHTS, QM_COUNT };

static const il__learn_metric il__quality_metrics[QM_COUNT] = {
    {"kl_mean", {"KL(f32 || model), mean", "KL(f32 || Modell), Mittel"}, "nats", -1},
    {"kl_p99", {"KL(f32 || model), p99", "KL(f32 || Modell), p99"}, "nats", -1},
    {"top1", {"top-1 agreement with f32", "Top-1-Übereinstimmung mit f32"}, "fraction", 1},
    {"ppl_ratio", {"perplexity / f32's", "Perplexität / die von f32"}, "", -1},
    {"weights_bytes", {"weight bytes", "Gewichts-Bytes"}, "bytes", -1},
};

static il_status il__quality_define(il__learn *L) {
  il_sweep_point *b = &L->base;
  il_sweep_point_defaults(b);
  IL_TRY(il__set(b, "model", "builtin:tiny"));
  IL_TRY(il__set(b, "device", "cpu"));
  IL_TRY(il__set(b, "wtype", "q8_0"));
  if (L->quick) IL_TRY(il__set(b, "threads", "1"));
  b->prompt = il__prompt(L);
  b->gen = il__gen(L);
  snprintf(L->change, sizeof L->change, "wtype=q4_0");
  const char *ch[1] = {L->change};
  IL_TRY(il_experiment_set_changes(L->x, b, ch, 1, false));
  il__learn_set_metrics(L, il__quality_metrics, QM_COUNT);
  il__focus(L, "kl_mean", "top1", "weights_bytes");
  il__expect(L, "kl_mean", +1);
  return IL_OK;
}

static il_status il__quality_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  il__learn *L = ud;
  if (il__learn_stopped(L)) return il_error(IL_ERR_INTERNAL, "interrupted by Ctrl-C");
  char w[IL_CONFIG_STR_MAX];
  il_sweep_get(arm ? &x->variant : &x->baseline, "wtype", w, sizeof w);
  il__quality q;
  IL_TRY(il__kl(L, w, &q));
  vals[QM_KL] = q.kl_mean;
  vals[QM_KL_P99] = q.kl_p99;
  vals[QM_TOP1] = q.top1;
  vals[QM_PPL_RATIO] = q.ppl_ratio;
  vals[QM_WEIGHTS] = q.weights;
  il__learn_log(L, "run %d %s (%s): KL %.6f, top-1 %.4f", run, arm ? "variant" : "baseline", w, q.kl_mean, q.top1);
  il__learn_sample_line(L, arm, run, vals);
  return IL_OK;
}

static il_status il__quality_before(il__learn *L) {
  il__learn_say(L, "%s", il__learn_ui(L, "step1"));
  il__learn_say(L, "   %s", il__learn_ui(L, "reference"));
  /* the table the concept is about: every type against the same reference */
  static const char *const types[] = {"f16", "q8_0", "q6_k", "q4_k", "q4_0"};
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, "quality.jsonl", &st);
  if (!f) return st;
  il__learn_say(L, "   type    KL mean      top-1    weights");
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    il__quality q;
    st = il__kl(L, types[i], &q);
    if (st != IL_OK) break;
    char w[24], key[32];
    il__learn_fmt("bytes", q.weights, w, sizeof w);
    il__learn_say(L, "   %-6s %9.4g   %7.1f%%   %s", types[i], q.kl_mean, q.top1 * 100, w);
    fprintf(f, "{\"type\":\"%s\",\"kl_mean\":%.9g,\"kl_p99\":%.9g,\"top1\":%.9g,\"ppl_ratio\":%.9g,\"weight_bytes\":%.0f}\n", types[i],
            q.kl_mean, q.kl_p99, q.top1, q.ppl_ratio, q.weights);
    snprintf(key, sizeof key, "kl_%s", types[i]);
    il__learn_fact(L, key, "%.4g", q.kl_mean);
    snprintf(key, sizeof key, "top1_%s", types[i]);
    il__learn_fact(L, key, "%.1f%%", q.top1 * 100);
  }
  fclose(f);
  return st;
}

static il_status il__no_after(il__learn *L) {
  (void)L;
  return IL_OK;
}

static const il__learn_kind_ops il__quality_ops = {il__quality_define, NULL, il__quality_before, il__engine_change,
                                                   il__quality_run, il__no_after, il__engine_rollback};

const il__learn_kind_ops *il__learn_ops_quality(void) { return &il__quality_ops; }

/* ---- the numerics kind: an activation beyond f16's range ----------------------------------- */

enum { NM_NONFINITE, NM_FINITE, NM_MAX_ABS, NM_COUNT };

static const il__learn_metric il__numerics_metrics[NM_COUNT] = {
    {"nonfinite_logits", {"non-finite logits (inf/nan)", "nicht endliche Logits (inf/nan)"}, "count", -1},
    {"finite", {"all logits finite (1) or not (0)", "alle Logits endlich (1) oder nicht (0)"}, "count", 1},
    {"max_abs", {"largest |activation| before rounding", "größte |Aktivierung| vor dem Runden"}, "", 0},
};

/* builtin:tiny as an f32 GGUF with blk.1.ffn_down.weight x 1e5: its activations pass 65504. */
static il_status il__hot_model(il__learn *L) {
  snprintf(L->model_path, sizeof L->model_path, "%.2000s/hot-tiny-f32.gguf", L->parent);
  il_export_stats es;
  memset(&es, 0, sizeof es);
  IL_TRY(il_export_gguf("builtin:tiny", IL_DTYPE_F32, L->model_path, 0, NULL, &es));
  il_gguf *g = NULL;
  IL_TRY(il_gguf_open(L->model_path, &g));
  const il_gguf_tensor *t = il_gguf_find_tensor(g, "blk.1.ffn_down.weight");
  const long off = t ? (long)(il_gguf_data_offset(g) + t->offset) : -1;
  const size_t n = t ? (size_t)(t->ne[0] * t->ne[1]) : 0;
  il_gguf_close(g);
  if (off < 0) return il_error(IL_ERR_INTERNAL, "%s: no blk.1.ffn_down.weight", L->model_path);
  FILE *f = fopen(L->model_path, "r+b");
  float *v = il_mem_alloc(IL_MEM_STAGING, n * sizeof *v, "hot model tensor");
  bool ok = f && v && fseek(f, off, SEEK_SET) == 0 && fread(v, sizeof *v, n, f) == n;
  for (size_t i = 0; ok && i < n; i++) v[i] *= 1e5f;
  ok = ok && fseek(f, off, SEEK_SET) == 0 && fwrite(v, sizeof *v, n, f) == n;
  il_mem_free(v);
  if (f && fclose(f) != 0) ok = false;
  return ok ? IL_OK : il_error(IL_ERR_OUTPUT, "%s: could not scale blk.1.ffn_down.weight", L->model_path);
}

static il_status il__numerics_define(il__learn *L) {
  char mk[2100];
  snprintf(mk, sizeof mk, "%s", L->parent);
  for (char *p = mk + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(mk, 0755);
      *p = '/';
    }
  mkdir(mk, 0755);
  IL_TRY(il__hot_model(L));
  il_sweep_point *b = &L->base;
  il_sweep_point_defaults(b);
  IL_TRY(il__set(b, "model", L->model_path));
  IL_TRY(il__set(b, "device", L->device));
  IL_TRY(il__set(b, "dtype", "f16"));
  IL_TRY(il__set(b, "check-numerics", "true"));
  if (L->quick) IL_TRY(il__set(b, "threads", "1"));
  b->prompt = 6;
  b->gen = 1;
  snprintf(L->change, sizeof L->change, "dtype=bf16");
  const char *ch[1] = {L->change};
  IL_TRY(il_experiment_set_changes(L->x, b, ch, 1, false));
  il__learn_set_metrics(L, il__numerics_metrics, NM_COUNT);
  il__focus(L, "nonfinite_logits", "finite", NULL);
  il__expect(L, "nonfinite_logits", -1);
  return IL_OK;
}

/* A 6-token prompt through the engine with the numerics check on: how many of the last
 * position's logits are inf/nan, and where the first non-finite value appeared. */
static il_status il__numerics_probe(il__learn *L, const il_sweep_point *p, double *vals, char *where, size_t wn) {
  il_config c = p->cfg;
  c.ctx = 16;
  il_engine *e = NULL;
  IL_TRY(il_engine_open(&c, &e));
  const int32_t nv = il_engine_model(e)->hp.n_vocab;
  float *lg = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *lg * (size_t)nv, "learn logits");
  il_batch_entry b[6];
  for (int i = 0; i < 6; i++) b[i] = (il_batch_entry){(int32_t)(3 + 17 * i) % nv, 0, i, i == 5};
  il_status st = lg ? il_engine_decode(e, b, 6, lg) : IL_ERR_OOM;
  if (st == IL_OK) {
    int bad = 0;
    for (int32_t i = 0; i < nv; i++) bad += !isfinite(lg[i]);
    vals[NM_NONFINITE] = bad;
    vals[NM_FINITE] = bad == 0;
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    vals[NM_MAX_ABS] = es.max_abs;
    if (es.bad_layer >= 0) snprintf(where, wn, "%s of layer %d", es.bad_block[0] ? es.bad_block : "?", es.bad_layer);
    else snprintf(where, wn, "-");
  }
  il_mem_free(lg);
  il_engine_free(e);
  return st;
}

static il_status il__numerics_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  il__learn *L = ud;
  if (il__learn_stopped(L)) return il_error(IL_ERR_INTERNAL, "interrupted by Ctrl-C");
  char where[128];
  IL_TRY(il__numerics_probe(L, arm ? &x->variant : &x->baseline, vals, where, sizeof where));
  il__learn_log(L, "run %d %s: %.0f non-finite logits, first at %s", run, arm ? "variant" : "baseline", vals[NM_NONFINITE], where);
  il__learn_sample_line(L, arm, run, vals);
  return IL_OK;
}

static il_status il__numerics_before(il__learn *L) {
  const char *drv, *build, *dev;
  il__learn_machine_facts(L, &drv, &build, &dev);
  il__learn_say(L, "%s\n   %s: %s", il__learn_ui(L, "step1"), il__learn_ui(L, "this_machine"), drv);
  double v[NM_COUNT];
  char where[128];
  IL_TRY(il__numerics_probe(L, &L->x->baseline, v, where, sizeof where));
  il__learn_say(L, "   %s: %s (%s): %.0f %s, %s %s; %s %.4g", il__learn_ui(L, "baseline_job"), il__learn_ui(L, "hot_model"),
                L->model_path, v[NM_NONFINITE], il__learn_ui(L, "nonfinite"), il__learn_ui(L, "first_at"), where,
                il__learn_ui(L, "largest_act"), v[NM_MAX_ABS]);
  il__learn_fact(L, "where", "%s", where);
  il__learn_fact(L, "max_abs", "%.4g", v[NM_MAX_ABS]);
  il__learn_fact(L, "model", "%s", L->model_path);
  return IL_OK;
}

static const il__learn_kind_ops il__numerics_ops = {il__numerics_define, NULL, il__numerics_before, il__engine_change,
                                                    il__numerics_run, il__no_after, il__engine_rollback};

const il__learn_kind_ops *il__learn_ops_numerics(void) { return &il__numerics_ops; }
