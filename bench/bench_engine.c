/* bench/bench_engine: end-to-end prompt processing and generation speed on builtin:1b,
 * against the memory-bandwidth roofline measured in the same run.
 *
 * For each type (F16, Q8_0, Q4_0 by default) it exports builtin:1b to a GGUF file (the real
 * load path: weights are read from the mmap), then for 1 thread and all threads measures
 *   pp: one forward pass over a 512-token prompt  -> prompt tokens/s
 *   tg: 128 single-token steps after a short prompt -> generated tokens/s
 * and prints tg against the roofline: tg tokens/s x bytes of weights read per token (every
 * tensor except token_embd, of which one row is read) / measured read bandwidth. The
 * bandwidth is measured (backend/cpu/membw) right before each tg repetition with the same
 * thread count, and the best such pass is the roofline, so both see the same neighbours on a
 * shared machine.
 *
 * usage: bench_engine [--types f16,q8_0,q4_0] [--threads 1,2] [--pp 512] [--tg 128]
 *                     [--reps 3] [--dir /tmp] [--keep] [--dtype f32|f16|bf16]
 * --dtype: the activations' storage type (engine --dtype); bf16 with BF16 weights is the
 * vdpbf16ps GEMM on CPUs with AVX512_BF16.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"
#include "sys/membw.h"
#include "sys/pool.h"
#include "engine/config.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "memory/mem.h"
#include "model/export.h"

static uint64_t il__bytes_per_token(const il_model *m) {
  uint64_t b = 0;
  for (int64_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, "token_embd.weight") != 0) b += m->tensors[i].nbytes;
  return b;
}

/* A failed decode would time nothing: stop with the reason. */
static void il__decode(il_engine *e, const il_batch_entry *b, int32_t n, float *logits) {
  il_status st = il_engine_decode(e, b, n, logits);
  if (st != IL_OK) {
    fprintf(stderr, "bench_engine: decode of %d entries: %s: %s\n", (int)n, il_status_name(st), il_error_detail());
    exit(1);
  }
}

int main(int argc, char **argv) {
  const char *types = "f16,q8_0,q4_0", *threads_list = NULL, *dir = "/tmp", *dtype = "f32";
  int pp = 512, tg = 128, reps = 3, keep = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_list = argv[++i];
    else if (!strcmp(argv[i], "--pp") && i + 1 < argc) pp = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tg") && i + 1 < argc) tg = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--keep")) keep = 1;
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--types f16,q8_0,q4_0] [--threads 1,2] [--pp 512] [--tg 128] [--reps 3] [--dir D] [--keep]\n"
                      "       [--dtype f32|f16|bf16]\n", argv[0]);
      return 64;
    }
  }
  int all = il_pool_default_threads();
  int thr[8], n_thr = 0;
  if (threads_list) {
    for (const char *p = threads_list; *p && n_thr < 8;) {
      thr[n_thr++] = atoi(p);
      p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
  } else {
    thr[n_thr++] = 1;
    if (all > 1) thr[n_thr++] = all;
  }
  il_dtype act;
  if (il_config_act_type(dtype, &act) != IL_OK) {
    fprintf(stderr, "bench_engine: %s\n", il_error_detail());
    return 64;
  }
  printf("cpu: %s kernels, %d cores, activations %s\n", il_backend_cpu_isa_default(), all, il_dtype_name(act));
  il_membw bw;
  if (il_membw_init(&bw, (size_t)1 << 30) != IL_OK) {
    fprintf(stderr, "bench_engine: %s\n", il_error_detail());
    return 1;
  }
  il_pool *bw_pool[8] = {0};
  for (int t = 0; t < n_thr; t++)
    if (il_pool_new(thr[t], &bw_pool[t]) != IL_OK) return 1;
  printf("\n| type | threads | pp%d tok/s | tg%d tok/s | weights/token | tg GB/s | read GB/s | roofline tok/s | %% of roofline |\n",
         pp, tg);
  printf("|---|---|---|---|---|---|---|---|---|\n");
  char tlist[256];
  snprintf(tlist, sizeof tlist, "%s", types);
  for (char *ty = strtok(tlist, ","); ty; ty = strtok(NULL, ",")) {
    il_dtype type;
    if (!il_dtype_parse(ty, &type)) {
      fprintf(stderr, "unknown type %s\n", ty);
      return 64;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/inferlab-bench-1b-%s.gguf", dir, ty);
    if (access(path, R_OK) != 0) {
      il_export_stats es;
      double t0 = il_time_now();
      il_status st = il_export_gguf("builtin:1b", type, path, 0, stderr, &es);
      if (st != IL_OK) {
        fprintf(stderr, "export %s: %s\n", ty, il_error_detail());
        return 1;
      }
      fprintf(stderr, "exported builtin:1b as %s in %.1f s\n", ty, il_time_now() - t0);
    }
    for (int t = 0; t < n_thr; t++) {
      il_config cfg;
      il_config_defaults(&cfg);
      snprintf(cfg.model, sizeof cfg.model, "%s", path);
      cfg.threads = thr[t];
      cfg.ctx = pp + tg + 16;
      cfg.batch = pp;
      snprintf(cfg.dtype, sizeof cfg.dtype, "%s", dtype);
      il_engine *e = NULL;
      if (il_engine_open(&cfg, &e) != IL_OK) {
        fprintf(stderr, "open %s: %s\n", path, il_error_detail());
        return 1;
      }
      const int32_t nv = il_engine_model(e)->hp.n_vocab;
      il_batch_entry *b = malloc(sizeof *b * (size_t)pp);
      float *logits = malloc(sizeof(float) * (size_t)nv);
      for (int i = 0; i < pp; i++) b[i] = (il_batch_entry){3 + (i * 7919) % (nv - 3), 0, i, i == pp - 1};
      /* warm-up: touches every weight page once */
      il__decode(e, b, 8, NULL);
      double best_pp = 0, best_tg = 0, best_bw = 0;
      for (int r = 0; r < reps; r++) {
        double t0 = il_time_now();
        il__decode(e, b, pp, logits);
        double dt = il_time_now() - t0;
        if (pp / dt > best_pp) best_pp = pp / dt;
        double g = il_membw_pass(&bw, bw_pool[t]);
        if (g > best_bw) best_bw = g;
        t0 = il_time_now();
        for (int i = 0; i < tg; i++) {
          il_batch_entry one = {3 + (i * 31) % (nv - 3), 0, 8 + i, true};
          il__decode(e, &one, 1, logits);
        }
        dt = il_time_now() - t0;
        if (tg / dt > best_tg) best_tg = tg / dt;
      }
      uint64_t bpt = il__bytes_per_token(il_engine_model(e));
      double roof = best_bw * 1e9 / (double)bpt;
      printf("| %s | %d | %.1f | %.2f | %.0f MB | %.2f | %.2f | %.2f | %.0f%% |\n", ty, thr[t], best_pp, best_tg,
             (double)bpt / 1e6, best_tg * (double)bpt / 1e9, best_bw, roof, 100.0 * best_tg / roof);
      fflush(stdout);
      free(b);
      free(logits);
      il_engine_free(e);
    }
    if (!keep) remove(path);
  }
  for (int t = 0; t < n_thr; t++) il_pool_free(bw_pool[t]);
  il_membw_free(&bw);
  return 0;
}
