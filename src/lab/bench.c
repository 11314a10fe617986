/* lab/bench: one point measured: load, warm-up, repetitions. See bench.h. */
#include "lab/bench.h"
#include "lab/plan.h"
#include "lab/memmap.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sys/membw.h"
#include "core/timer.h"
#include "probe/host.h"

static const il_bench_metric_info il__metrics[IL_BM_COUNT] = {
#define IL__BM_INFO(e, key, label, unit, better) {key, label, unit, better},
    IL_BENCH_METRICS(IL__BM_INFO)
#undef IL__BM_INFO
};

const il_bench_metric_info *il_bench_metric_info_of(il_bench_metric m) { return &il__metrics[m]; }

int il_bench_metric_find(const char *key) {
  for (int i = 0; i < IL_BM_COUNT; i++)
    if (!strcmp(il__metrics[i].key, key)) return i;
  return -1;
}

void il_bench_options_default(il_bench_options *o) {
  memset(o, 0, sizeof *o);
  o->reps = 5;
  o->warmup = 1;
  o->seed = 1234;
  o->interval_ms = 200;
}

void il_bench_result_free(il_bench_result *r) {
  free(r->memory_map_svg); /* from open_memstream */
  r->memory_map_svg = NULL;
  il_mem_free(r->samples);
  il_mem_free(r->step_s);
  r->samples = NULL;
  r->step_s = NULL;
  r->n_samples = r->n_steps = 0;
}

/* ---- process facts ----------------------------------------------------------------------- */

/* Resets the kernel's peak RSS (VmHWM) of this process; false when not allowed. */
static bool il__reset_peak_rss(void) {
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

/* VmHWM in bytes, or the getrusage lifetime peak when /proc is unreadable. */
static double il__peak_rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) {
      kb = atoll(line + 6);
      break;
    }
  if (f) fclose(f);
  if (kb < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kb = ru.ru_maxrss;
  }
  return (double)kb * 1024.0;
}

static double il__cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

/* ---- roofline ----------------------------------------------------------------------------- */

il_status il_bench_measure_roofline(int threads, int ms, double *gbps) {
  return il_cpu_read_bandwidth(threads < 1 ? 1 : threads, IL_MEMBW_DEFAULT_BYTES, ms, gbps);
}

/* ---- compute peak ------------------------------------------------------------------------ */

/* The compute peak of the engine's CPU kernels (cpu and sim devices) for the model's main weight
 * type, at the run's thread count, from the cache or measured now. 0 where there is none. */
static void il__peak_for(const il_engine *e, il_bench_peaks *peaks, il_bench_result *r) {
  il_isa isa;
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
  const il_backend_info *info = &es.device;
  if (!peaks || (strcmp(info->kind, "cpu") && strcmp(info->kind, "sim")) || !il_isa_parse(info->isa, &isa)) return;
  const int kind = il_peak_kind_for(isa, il_engine_model(e)->main_type, es.act_type);
  const int nth = info->threads > 0 ? info->threads : 1;
  if (kind < 0 || !il_peak_available((il_peak_kind)kind)) return;
  double *cached = nth <= IL_BENCH_PEAK_THREADS ? &peaks->gops[kind][nth] : NULL;
  if (!cached || *cached <= 0) {
    il_pool *pool = NULL;
    double g = 0;
    if (il_pool_new(nth, &pool) == IL_OK && il_peak_measure(pool, (il_peak_kind)kind, &g) == IL_OK && cached) *cached = g;
    il_pool_free(pool);
    il_error_clear();
    r->peak_gops = g;
  } else {
    r->peak_gops = *cached;
  }
  if (r->peak_gops > 0) snprintf(r->peak_name, sizeof r->peak_name, "%s", il_peak_name((il_peak_kind)kind));
}

/* ---- one repetition ----------------------------------------------------------------------- */

static int32_t il__argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

typedef struct {
  il_engine *e;
  int batch, prompt, gen;
  int32_t n_batch;         /* the engine's tokens per pass */
  double load_seconds;
  il_batch_entry *entries; /* [batch * prompt] */
  float *logits;           /* [batch * n_vocab] */
  int32_t *next;           /* [batch] */
} il__work;

/* Runs one repetition; fills s (when not NULL) and step_s[0..gen) (when not NULL). */
static il_status il__once(il__work *w, uint64_t seed, double roof, const il_bench_result *r, il_bench_sample *s,
                          double *step_s) {
  const double peak = r->peak_gops;
  il_engine *e = w->e;
  const int32_t nv = il_engine_model(e)->hp.n_vocab;
  const int B = w->batch, P = w->prompt, G = w->gen;
  uint64_t rng = seed;
  for (int q = 0; q < B; q++)
    for (int i = 0; i < P; i++)
      w->entries[q * P + i] = (il_batch_entry){(int32_t)(il_stats_rand(&rng) % (uint64_t)nv), q, i, i == P - 1};
  bool rss_reset = il__reset_peak_rss();
  (void)rss_reset;
  il_mem_reset_peak();
  double cpu0 = il__cpu_seconds(), t0 = il_time_now();
  IL_TRY(il_engine_decode(e, w->entries, B * P, w->logits));
  for (int q = 0; q < B; q++) w->next[q] = il__argmax(w->logits + (size_t)q * (size_t)nv, nv);
  double t1 = il_time_now();
  for (int g = 0; g < G; g++) {
    for (int q = 0; q < B; q++) w->entries[q] = (il_batch_entry){w->next[q], q, P + g, true};
    double ts = il_time_now();
    IL_TRY(il_engine_decode(e, w->entries, B, w->logits));
    for (int q = 0; q < B; q++) w->next[q] = il__argmax(w->logits + (size_t)q * (size_t)nv, nv);
    if (step_s) step_s[g] = il_time_now() - ts;
  }
  double t2 = il_time_now(), cpu1 = il__cpu_seconds();
  if (!s) return IL_OK;
  double prompt_s = t1 - t0, gen_s = t2 - t1, e2e = t2 - t0;
  double *v = s->v;
  for (int m = 0; m < IL_BM_COUNT; m++) v[m] = NAN;
  v[IL_BM_LOAD_S] = w->load_seconds;
  v[IL_BM_TTFT_S] = prompt_s;
  v[IL_BM_E2E_S] = e2e;
  v[IL_BM_PROMPT_TPS] = prompt_s > 0 ? (double)B * P / prompt_s : NAN;
  v[IL_BM_REQ_S] = e2e > 0 ? B / e2e : NAN;
  if (G > 0) {
    v[IL_BM_TPOT_S] = gen_s / G;
    v[IL_BM_GEN_TPS_SEQ] = gen_s > 0 ? G / gen_s : NAN;
    v[IL_BM_GEN_TPS] = gen_s > 0 ? (double)B * G / gen_s : NAN;
  }
  v[IL_BM_CPU_UTIL] = e2e > 0 ? (cpu1 - cpu0) / e2e / (r->threads > 0 ? r->threads : 1) : NAN;
  v[IL_BM_PEAK_RSS] = il__peak_rss();
  il_mem_stats ms;
  il_mem_stats_get(&ms);
  memcpy(s->mem_peak, ms.peak, sizeof s->mem_peak);
  memcpy(s->mem_mapped, ms.mapped, sizeof s->mem_mapped);
  double total = 0;
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) total += (double)ms.peak[c] + (double)ms.mapped[c];
  v[IL_BM_MEM_PEAK] = total;
  double bytes = (double)r->bytes_per_pass, params = (double)r->n_params;
  if (G > 0 && gen_s > 0) {
    v[IL_BM_GEN_GBPS] = bytes * G / gen_s / 1e9;
    v[IL_BM_GEN_GFLOPS] = 2.0 * params * B * G / gen_s / 1e9;
    if (roof > 0) v[IL_BM_GEN_ROOF] = v[IL_BM_GEN_GBPS] / roof;
    if (peak > 0) v[IL_BM_GEN_PEAK] = v[IL_BM_GEN_GFLOPS] / peak;
  }
  if (prompt_s > 0) {
    double passes = ceil((double)B * P / (w->n_batch > 0 ? w->n_batch : 1));
    v[IL_BM_PROMPT_GBPS] = bytes * passes / prompt_s / 1e9;
    v[IL_BM_PROMPT_GFLOPS] = 2.0 * params * B * P / prompt_s / 1e9;
    if (roof > 0) v[IL_BM_PROMPT_ROOF] = v[IL_BM_PROMPT_GBPS] / roof;
    if (peak > 0) v[IL_BM_PROMPT_PEAK] = v[IL_BM_PROMPT_GFLOPS] / peak;
  }
  return IL_OK;
}

/* ---- summaries ---------------------------------------------------------------------------- */

il_status il_bench_summarize(il_bench_result *r) {
  double *col = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *col * (size_t)(r->n_samples > 0 ? r->n_samples : 1),
                             "bench summary column");
  if (!col) return IL_ERR_OOM;
  il_status st = IL_OK;
  for (int m = 0; m < IL_BM_COUNT && st == IL_OK; m++) {
    int n = 0;
    for (int i = 0; i < r->n_samples; i++)
      if (!isnan(r->samples[i].v[m])) col[n++] = r->samples[i].v[m];
    st = il_stats_summarize(col, n, &r->sum[m]);
  }
  il_mem_free(col);
  if (st == IL_OK) st = il_stats_summarize(r->step_s, r->n_steps, &r->tpot_steps);
  return st;
}

il_status il_bench_result_append(il_bench_result *dst, const il_bench_result *src) {
  size_t ns = (size_t)(dst->n_samples + src->n_samples), nt = (size_t)(dst->n_steps + src->n_steps);
  il_bench_sample *s = il_mem_alloc(IL_MEM_OTHER, sizeof *s * (ns ? ns : 1), "bench samples");
  double *t = il_mem_alloc(IL_MEM_OTHER, sizeof *t * (nt ? nt : 1), "bench steps");
  if (!s || !t) {
    il_mem_free(s);
    il_mem_free(t);
    return IL_ERR_OOM;
  }
  if (dst->n_samples) memcpy(s, dst->samples, sizeof *s * (size_t)dst->n_samples);
  if (src->n_samples) memcpy(s + dst->n_samples, src->samples, sizeof *s * (size_t)src->n_samples);
  if (dst->n_steps) memcpy(t, dst->step_s, sizeof *t * (size_t)dst->n_steps);
  if (src->n_steps) memcpy(t + dst->n_steps, src->step_s, sizeof *t * (size_t)src->n_steps);
  il_mem_free(dst->samples);
  il_mem_free(dst->step_s);
  dst->samples = s;
  dst->step_s = t;
  dst->n_samples = (int)ns;
  dst->n_steps = (int)nt;
  return IL_OK;
}

/* ---- a point ------------------------------------------------------------------------------ */

static il_status il__fail(il_bench_result *r, il_status st) {
  r->status = st;
  const char *d = il_error_detail();
  snprintf(r->error, sizeof r->error, "%s", d && *d ? d : il_status_message(st));
  return st;
}

il_status il_bench_run(const il_sweep_point *p, const il_bench_options *o, il_bench_result *r) {
  char label[sizeof r->label];
  snprintf(label, sizeof label, "%s", r->label);
  memset(r, 0, sizeof *r);
  snprintf(r->label, sizeof r->label, "%s", label);
  r->point = *p;
  r->batch = p->cfg.n_seq;
  r->prompt = p->prompt;
  r->gen = p->gen;
  for (int m = 0; m < IL_BM_COUNT; m++) il_stats_summarize(NULL, 0, &r->sum[m]);
  il_stats_summarize(NULL, 0, &r->tpot_steps);
  if (o->reps < 1) return il__fail(r, il_error(IL_ERR_INVALID_ARG, "-r %d: at least one repetition", o->reps));
  if (r->gen < 0)
    return il__fail(r, il_error(IL_ERR_INVALID_ARG, "--gen %d: bench needs a token count >= 0", r->gen));
  if (r->prompt < 1) return il__fail(r, il_error(IL_ERR_INVALID_ARG, "--prompt %d: at least one token", r->prompt));
  il_config cfg = p->cfg;
  if (cfg.ctx == 0) cfg.ctx = r->prompt + r->gen;
  else if (cfg.ctx < r->prompt + r->gen)
    return il__fail(r, il_error(IL_ERR_INVALID_ARG, "--ctx %d is smaller than --prompt %d + --gen %d", cfg.ctx,
                                r->prompt, r->gen));

  il_usage *u = NULL;
  if (o->sample_usage) {
    il_usage_options uo = {o->nvml_lib, o->no_gpu, o->interval_ms, 0, NULL, NULL, NULL};
    il_status ust = il_usage_start(&uo, &u);
    if (ust != IL_OK) return il__fail(r, ust);
  }
  if (!strncmp(cfg.device, "sim:", 4) && !o->no_prediction) {
    /* the planner's prediction for this exact combination, beside what the run will measure */
    il_plan plan;
    if (il_plan_run(&cfg, &plan) == IL_OK && plan.fits) {
      r->predicted_reserved = plan.reserved_bytes;
      r->predicted_min = plan.peak_bytes;
    }
    il_error_clear();
  }
  il__work w;
  memset(&w, 0, sizeof w);
  il_mem_reset_peak();
  il_status st = il_engine_open(&cfg, &w.e);
  if (st == IL_OK) {
    il_engine_snapshot es;
    il_engine_snapshot_get(w.e, IL_ENGINE_SNAP_ALL, &es);
    const il_model *m = il_engine_model(w.e);
    snprintf(r->model, sizeof r->model, "%s", m->name);
    snprintf(r->model_type, sizeof r->model_type, "%s", il_dtype_name(m->main_type));
    r->n_params = m->n_params;
    r->weight_bytes = m->weight_bytes;
    uint64_t embd = (uint64_t)m->tok_embd.n_out * (uint64_t)m->tok_embd.row_stride;
    r->bytes_per_pass = m->tied_output || embd >= m->weight_bytes ? m->weight_bytes : m->weight_bytes - embd;
    r->startup = *il_engine_startup(w.e);
    r->threads = es.device.threads;
    r->n_ctx = es.n_ctx;
    r->n_batch = es.n_batch;
    w.n_batch = es.n_batch;
    w.load_seconds = es.load_seconds;
    r->rss_resettable = il__reset_peak_rss();
    il__peak_for(w.e, o->peaks, r);
    w.batch = r->batch;
    w.prompt = r->prompt;
    w.gen = r->gen;
    size_t nv = (size_t)m->hp.n_vocab, nb = (size_t)r->batch;
    w.entries = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *w.entries * nb * (size_t)r->prompt, "bench batch");
    w.logits = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *w.logits * nb * nv, "bench logits");
    w.next = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *w.next * nb, "bench tokens");
    r->samples = il_mem_calloc(IL_MEM_OTHER, sizeof *r->samples * (size_t)o->reps, "bench samples");
    r->step_s = il_mem_alloc(IL_MEM_OTHER, sizeof *r->step_s * (size_t)(o->reps * (r->gen > 0 ? r->gen : 1)),
                             "bench steps");
    if (!w.entries || !w.logits || !w.next || !r->samples || !r->step_s) st = IL_ERR_OOM;
    for (int i = 0; st == IL_OK && i < o->warmup; i++) {
      st = il__once(&w, o->seed, o->roofline_gbps, r, NULL, NULL);
      if (o->progress) o->progress(o->progress_ud, -1 - i, o->reps);
    }
    for (int i = 0; st == IL_OK && i < o->reps; i++) {
      /* the same tokens every repetition: the repetitions measure the same work */
      st = il__once(&w, o->seed, o->roofline_gbps, r, &r->samples[i], r->step_s + (size_t)i * (size_t)r->gen);
      if (st == IL_OK) {
        r->n_samples++;
        r->n_steps += r->gen;
      }
      if (o->progress) o->progress(o->progress_ud, i, o->reps);
    }
  }
  if (st != IL_OK) il__fail(r, st);
  il_engine_snapshot es;
  if (st == IL_OK && w.e) {
    il_engine_snapshot_get(w.e, IL_ENGINE_SNAP_ALL, &es);
    snprintf(r->attn, sizeof r->attn, "%s", es.attn);
    snprintf(r->attn_why, sizeof r->attn_why, "%s", es.attn_why);
    r->transfers = es.transfers;
  }
  if (st == IL_OK && w.e && es.has_allocator) {
    /* a device with a caching allocator: its figures and its memory map, as the run left them */
    r->has_device = true;
    snprintf(r->device, sizeof r->device, "%s", es.device.name);
    r->device_stats = es.alloc;
    il_caching_snapshot snap;
    if (il_engine_memory_map(w.e, &snap) != IL_OK) {
      il_error_clear();
    } else {
      size_t len = 0;
      FILE *mf = open_memstream(&r->memory_map_svg, &len);
      char id[32];
      snprintf(id, sizeof id, "memmap-%u", (unsigned)(r->batch * 1000 + r->prompt + r->gen));
      if (mf) {
        if (il_memmap_svg(&snap, mf, id, 24) != IL_OK) il_error_clear();
        fclose(mf);
      }
      il_caching_snapshot_free(&snap);
    }
  }
  il_mem_free(w.entries);
  il_mem_free(w.logits);
  il_mem_free(w.next);
  il_engine_free(w.e);
  if (u) {
    il_usage_stop(u, &r->usage);
    r->has_usage = true;
  }
  if (st == IL_OK) {
    st = il_bench_summarize(r);
    if (st != IL_OK) il__fail(r, st);
  }
  return st;
}
