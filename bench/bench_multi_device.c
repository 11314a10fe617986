/* bench/bench_multi_device: decode on 1, 2 and 4 simulated devices in a pipeline (--device
 * LIST), each behind a throttled link, at 1 and N streams.
 *
 * One engine per device count (builtin:1b by default, layers split evenly, every device
 * sim:SIZE,pcie=RATE), n-seq = the largest stream count. For each stream count S: a prompt of
 * P tokens per sequence in one batch, then G steps of S tokens (one per sequence, greedy ids
 * sampled on the last device), timed; the cache is emptied between stream counts. Printed per
 * row: generated tokens/s of all streams, the ratio to one device at the same S (same run),
 * and per generated token the residual bytes that crossed between devices (download + upload
 * of one n_embd row of f32 per boundary: expected 2 x 4 x n_embd x (devices - 1)) and all
 * host<->device bytes of the devices. Each row is the best of R repetitions.
 *
 * --micro-batches LIST runs each device count with each pipeline depth (--micro-batches of the
 * engine; 0 = one pass) and prints the prompt's tokens/s as well. --hbm RATE and --tflops N give
 * every device the sim's compute model (hbm=, tflops=: its matmuls take the longer of their
 * weight bytes and flops at those rates), so devices that compute at once overlap as GPUs
 * would though the sims share the host's cores; without them the sims' time is the CPU's.
 *
 * --tp runs each device count N > 1 as tensor parallelism (--tp N: every layer split across the
 * devices, each shard on a thread of its own, the partial sums added through the host after O
 * and down) instead of a layer split; the bytes column is then the sums' and the embedding
 * rows' bytes per generated token, expected 2 x n_layer x (2 x N x 4 x n_embd) for the sums
 * (each device's partial row down, the sum up to each) plus (N - 1) x 4 x n_embd.
 *
 * --cuda: the devices are cuda:0 .. cuda:N-1 (a machine with N GPUs) instead of sims (--size,
 * --pcie, --hbm and --tflops do not apply).
 *
 * usage: bench_multi_device [--model builtin:1b] [--wtype q4_0] [--devices 1,2,4] [--size 1GiB]
 *                           [--pcie 16GB/s] [--streams 1,16] [--prompt 16] [--gen 16] [--reps 3]
 *                           [--threads N] [--micro-batches 0] [--hbm RATE] [--tflops N] [--tp] [--cuda]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "model/llama.h"

#define MAX_S 64

static void die(const char *what, il_status st) {
  fprintf(stderr, "bench_multi_device: %s: %s: %s\n", what, il_status_name(st), il_error_detail());
  exit(1);
}

static uint64_t all_transfers(const il_engine *e) {
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
  if (es.n_devs <= 1) return es.transfers.upload_bytes + es.transfers.download_bytes;
  uint64_t t = 0;
  for (int k = 0; k < es.n_devs; k++) t += es.devs[k].transfers.upload_bytes + es.devs[k].transfers.download_bytes;
  return t;
}

static uint64_t residual(const il_engine *e) {
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
  return es.residual_bytes;
}

static uint64_t tp_bytes(const il_engine *e) {
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
  return es.tp_allreduce_bytes + es.tp_broadcast_bytes;
}

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  for (const char *p = s; *p && n < max;) {
    out[n++] = atoi(p);
    const char *c = strchr(p, ',');
    p = c ? c + 1 : p + strlen(p);
  }
  return n;
}

int main(int argc, char **argv) {
  const char *model = "builtin:1b", *wtype = "q4_0", *devs_s = "1,2,4", *size = "1GiB", *pcie = "16GB/s",
             *streams_s = "1,16", *mbs_s = "0", *hbm = NULL, *tflops = NULL;
  int prompt = 16, gen = 16, reps = 3, threads = 0;
  bool tp = false, cuda = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--wtype") && i + 1 < argc) wtype = argv[++i];
    else if (!strcmp(argv[i], "--devices") && i + 1 < argc) devs_s = argv[++i];
    else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = argv[++i];
    else if (!strcmp(argv[i], "--pcie") && i + 1 < argc) pcie = argv[++i];
    else if (!strcmp(argv[i], "--streams") && i + 1 < argc) streams_s = argv[++i];
    else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gen") && i + 1 < argc) gen = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--micro-batches") && i + 1 < argc) mbs_s = argv[++i];
    else if (!strcmp(argv[i], "--hbm") && i + 1 < argc) hbm = argv[++i];
    else if (!strcmp(argv[i], "--tflops") && i + 1 < argc) tflops = argv[++i];
    else if (!strcmp(argv[i], "--tp")) tp = true;
    else if (!strcmp(argv[i], "--cuda")) cuda = true;
    else {
      fprintf(stderr, "usage: %s [--model builtin:1b] [--wtype q4_0] [--devices 1,2,4] [--size 1GiB] [--pcie 16GB/s]\n"
                      "       [--streams 1,16] [--prompt 16] [--gen 16] [--reps 3] [--threads N]\n"
                      "       [--micro-batches 0,4] [--hbm 2GB/s] [--tflops 0.05] [--tp] [--cuda]\n", argv[0]);
      return 64;
    }
  }
  int ndev[8], streams[8], mbs[8];
  const int n_nd = parse_list(devs_s, ndev, 8), n_s = parse_list(streams_s, streams, 8);
  const int n_mb = tp ? (mbs[0] = 0, 1) : parse_list(mbs_s, mbs, 8); /* --tp: one pass, no pipeline */
  char extra[96] = "";
  if (hbm) snprintf(extra, sizeof extra, ",hbm=%s", hbm);
  if (tflops) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ",tflops=%s", tflops);
  int max_s = 1;
  for (int i = 0; i < n_s; i++) {
    if (streams[i] < 1 || streams[i] > MAX_S) {
      fprintf(stderr, "bench_multi_device: --streams: %d is not 1..%d\n", streams[i], MAX_S);
      return 64;
    }
    if (streams[i] > max_s) max_s = streams[i];
  }
  if (prompt < 1 || gen < 1 || reps < 1 || n_nd < 1 || n_s < 1) {
    fprintf(stderr, "bench_multi_device: --prompt, --gen, --reps and the lists must be at least 1\n");
    return 64;
  }
  double base[8] = {0}, pbase[8] = {0};
  if (cuda)
    printf("model %s (%s), prompt %d, %d generated tokens per stream, best of %d, devices cuda:0..\n\n", model, wtype,
           prompt, gen, reps);
  else
    printf("model %s (%s), prompt %d, %d generated tokens per stream, best of %d, each device sim:%s,pcie=%s%s\n\n", model,
           wtype, prompt, gen, reps, size, pcie, extra);
  printf("| devices | %s | streams | prompt tok/s | vs 1 device | gen tok/s | vs 1 device | %s bytes/token "
         "| expected | host<->device bytes/token |\n", tp ? "tp" : "micro-batches", tp ? "all-reduce + embedding" : "residual");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int d = 0; d < n_nd; d++)
    for (int m = 0; m < n_mb; m++) {
      il_config c;
      il_config_defaults(&c);
      snprintf(c.model, sizeof c.model, "%s", model);
      snprintf(c.wtype, sizeof c.wtype, "%s", wtype);
      size_t o = 0;
      for (int k = 0; k < ndev[d] && o < sizeof c.device; k++)
        o += cuda ? (size_t)snprintf(c.device + o, sizeof c.device - o, "%scuda:%d", k ? "," : "", k)
                  : (size_t)snprintf(c.device + o, sizeof c.device - o, "%ssim:%s,pcie=%s%s", k ? "," : "", size, pcie, extra);
      c.n_seq = max_s;
      c.ctx = ((prompt + gen + 63) / 64) * 64;
      c.batch = prompt * max_s;
      c.threads = threads;
      c.micro_batches = mbs[m];
      c.tp = tp && ndev[d] > 1 ? ndev[d] : 0;
      il_engine *e = NULL;
      il_status st = il_engine_open(&c, &e);
      if (st != IL_OK) die(c.device, st);
      const int n_embd = il_engine_model(e)->hp.n_embd, n_layer = il_engine_model(e)->hp.n_layer;
      il_batch_entry b[MAX_S * 64];
      int32_t ids[MAX_S * 64];
      for (int si = 0; si < n_s; si++) {
        const int S = streams[si];
        double best = 0, pbest = 0;
        uint64_t res_tok = 0, xfer_tok = 0;
        for (int r = 0; r < reps; r++) {
          for (int s = 0; s < max_s; s++)
            if ((st = il_engine_seq_remove(e, s)) != IL_OK) die("emptying the cache", st);
          int n = 0;
          for (int s = 0; s < S; s++)
            for (int p = 0; p < prompt && n < MAX_S * 64; p++)
              b[n++] = (il_batch_entry){1 + (s * 31 + p * 7) % 250, s, p, p == prompt - 1};
          const double pstart = il_time_now();
          if ((st = il_engine_decode_greedy(e, b, n, ids)) != IL_OK) die("prompt", st);
          const double ptps = (double)n / (il_time_now() - pstart);
          if (ptps > pbest) pbest = ptps;
          const uint64_t r0 = tp ? tp_bytes(e) : residual(e), t0 = all_transfers(e);
          const double start = il_time_now();
          for (int g = 0; g < gen; g++) {
            for (int s = 0; s < S; s++) b[s] = (il_batch_entry){ids[s] >= 0 ? ids[s] : 1, s, prompt + g, true};
            if ((st = il_engine_decode_greedy(e, b, S, ids)) != IL_OK) die("step", st);
          }
          const double secs = il_time_now() - start, tps = (double)S * gen / secs;
          if (tps > best) best = tps;
          res_tok = ((tp ? tp_bytes(e) : residual(e)) - r0) / ((uint64_t)S * (uint64_t)gen);
          xfer_tok = (all_transfers(e) - t0) / ((uint64_t)S * (uint64_t)gen);
        }
        if (d == 0 && m == 0) base[si] = best, pbase[si] = pbest;
        const uint64_t row = 4ull * (uint64_t)n_embd, N = (uint64_t)ndev[d];
        const uint64_t expect = tp ? (N > 1 ? 2ull * (uint64_t)n_layer * 2ull * N * row + (N - 1) * row : 0)
                                   : 2ull * row * (N - 1);
        printf("| %d | %d | %d | %.2f | %.2fx | %.2f | %.2fx | %llu | %llu | %llu |\n", ndev[d], tp ? c.tp : mbs[m], S,
               pbest, pbase[si] > 0 ? pbest / pbase[si] : 0, best, base[si] > 0 ? best / base[si] : 0,
               (unsigned long long)res_tok, (unsigned long long)expect, (unsigned long long)xfer_tok);
        fflush(stdout);
      }
      il_engine_free(e);
    }
  return 0;
}
