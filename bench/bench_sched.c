/* bench/bench_sched: the continuous-batching scheduler without HTTP.
 *
 * For each concurrency C (default 1, 4, 16, 32): C requests arrive at once, each with its own
 * prompt (--prompt tokens) and --gen generated tokens (end of generation ignored), on an engine
 * with C sequence slots; the scheduler is stepped on this thread until all finish. Reported:
 * aggregate generated tokens/s (all generated tokens / wall time), p50 and p99 TTFT (arrival to
 * first token) and TPOT (mean gap between a request's tokens), and steps. Then the same C
 * requests run one after another through the same scheduler (the serial baseline), so the
 * batching speed-up is a ratio measured in the same run.
 * Usage: bench_sched [-m MODEL] [-t THREADS] [--conc 1,4,16,32] [--prompt N] [--gen N]
 *                    [--step-tokens N] [--json PATH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "engine/engine.h"
#include "engine/sched.h"
#include "memory/mem.h"

#define MAXC 256

typedef struct {
  double t_submit, t_first, t_last;
  int n;
  bool done;
} req;

static void on_event(void *ud, const il_sched_event *ev) {
  req *r = ud;
  if (ev->done) {
    r->done = true;
    return;
  }
  if (ev->token < 0) return;
  double now = il_time_now();
  if (!r->n) r->t_first = now;
  r->t_last = now;
  r->n++;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  int i = (int)(p * (n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

typedef struct {
  double tok_s, ttft50, ttft99, tpot50, tpot99, wall;
  uint64_t steps;
} result;

/* Runs C requests; serial: one at a time. */
static il_status run(il_engine *e, int c, int n_prompt, int n_gen, int step_tokens, bool serial, result *out) {
  il_sched *s = NULL;
  il_sched_opts o = {.max_queue = MAXC, .step_tokens = step_tokens};
  IL_TRY(il_sched_new(e, &o, &s));
  static req rs[MAXC];
  memset(rs, 0, sizeof rs);
  int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
  il_status st = prompt ? IL_OK : IL_ERR_OOM;
  double t0 = il_time_now();
  for (int i = 0; st == IL_OK && i < c; i++) {
    /* a different prompt per request: no prefix is shared */
    for (int k = 0; k < n_prompt; k++) prompt[k] = 1 + (int32_t)((i * 7919 + k * 104729) % (il_engine_model(e)->hp.n_vocab - 1));
    il_sched_params p;
    const il_request_params rp = il_request_default_params();
    il_sched_params_from_request(&rp, &p);
    p.max_tokens = n_gen;
    p.ignore_eos = true;
    p.sampling.seed = (uint64_t)i;
    rs[i].t_submit = il_time_now();
    st = il_sched_submit(s, prompt, n_prompt, &p, on_event, &rs[i], NULL);
    while (st == IL_OK && serial && !rs[i].done) st = il_sched_step(s, NULL);
  }
  for (bool all = false; st == IL_OK && !all;) {
    st = il_sched_step(s, NULL);
    all = true;
    for (int i = 0; i < c; i++) all = all && rs[i].done;
  }
  double wall = il_time_now() - t0;
  il_sched_stats ss;
  il_sched_stats_get(s, &ss);
  il_sched_free(s);
  free(prompt);
  IL_TRY(st);
  double ttft[MAXC], tpot[MAXC];
  long total = 0;
  for (int i = 0; i < c; i++) {
    ttft[i] = rs[i].t_first - rs[i].t_submit;
    tpot[i] = rs[i].n > 1 ? (rs[i].t_last - rs[i].t_first) / (rs[i].n - 1) : 0;
    total += rs[i].n;
  }
  *out = (result){total / wall, pct(ttft, c, 0.5), pct(ttft, c, 0.99), pct(tpot, c, 0.5), pct(tpot, c, 0.99), wall,
                  ss.steps};
  return IL_OK;
}

int main(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  const char *conc = "1,4,16,32", *json = NULL;
  int n_prompt = 64, n_gen = 64, step_tokens = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_sched: %s needs a value\n", a);
      return 64;
    }
    if (!strcmp(a, "-m")) snprintf(cfg.model, sizeof cfg.model, "%s", v);
    else if (!strcmp(a, "-t")) cfg.threads = atoi(v);
    else if (!strcmp(a, "--conc")) conc = v;
    else if (!strcmp(a, "--prompt")) n_prompt = atoi(v);
    else if (!strcmp(a, "--gen")) n_gen = atoi(v);
    else if (!strcmp(a, "--step-tokens")) step_tokens = atoi(v);
    else if (!strcmp(a, "--json")) json = v;
    else if (!strcmp(a, "--wtype")) snprintf(cfg.wtype, sizeof cfg.wtype, "%s", v);
    else {
      fprintf(stderr, "bench_sched: unknown option %s\n", a);
      return 64;
    }
    i++;
  }
  int cs[16], nc = 0;
  for (const char *p = conc; *p && nc < 16; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p)) {
    cs[nc] = atoi(p);
    if (cs[nc] < 1 || cs[nc] > MAXC) {
      fprintf(stderr, "bench_sched: --conc: %d not in [1, %d]\n", cs[nc], MAXC);
      return 64;
    }
    nc++;
  }
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"model\": \"%s\", \"prompt\": %d, \"gen\": %d, \"rows\": [", cfg.model, n_prompt, n_gen);
  printf("model %s, prompt %d tokens, %d generated per request, threads %d\n", cfg.model, n_prompt, n_gen, cfg.threads);
  printf("%5s  %12s %12s %9s  %10s %10s %10s %10s  %7s\n", "conc", "batched t/s", "serial t/s", "speed-up",
         "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "steps");
  for (int k = 0; k < nc; k++) {
    cfg.n_seq = cs[k];
    cfg.ctx = n_prompt + n_gen + 8;
    il_engine *e = NULL;
    il_status st = il_engine_open(&cfg, &e);
    result b, s;
    if (st == IL_OK) st = run(e, cs[k], n_prompt, n_gen, step_tokens, false, &b);
    if (st == IL_OK) st = run(e, cs[k], n_prompt, n_gen, step_tokens, true, &s);
    il_engine_free(e);
    if (st != IL_OK) {
      fprintf(stderr, "bench_sched: %s\n", il_error_detail());
      return 1;
    }
    printf("%5d  %12.1f %12.1f %8.2fx  %8.1fms %8.1fms %8.2fms %8.2fms  %7llu\n", cs[k], b.tok_s, s.tok_s,
           b.tok_s / s.tok_s, b.ttft50 * 1e3, b.ttft99 * 1e3, b.tpot50 * 1e3, b.tpot99 * 1e3,
           (unsigned long long)b.steps);
    if (jf)
      fprintf(jf, "%s{\"conc\": %d, \"tok_s\": %.3f, \"serial_tok_s\": %.3f, \"ttft_p50\": %.6f, \"ttft_p99\": %.6f, "
                  "\"tpot_p50\": %.6f, \"tpot_p99\": %.6f}", k ? ", " : "", cs[k], b.tok_s, s.tok_s, b.ttft50,
              b.ttft99, b.tpot50, b.tpot99);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  return 0;
}
