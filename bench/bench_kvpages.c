/* bench/bench_kvpages: memory of a contiguous vs a paged KV cache (engine/kvpages) on a replayed
 * request trace, and what prefix sharing saves.
 *
 * 1. Replay: --requests requests (default 200) with random prompt and output lengths and random
 *    arrival steps (fixed seed) are served under the same KV memory budget by
 *      contiguous  each admitted sequence reserves --ctx positions up front (one region per
 *                  sequence sized for its maximum context);
 *      paged       blocks of --block positions, taken as the sequence grows (kvpages_reserve);
 *                  a request is admitted when the blocks of its final length fit next to the
 *                  final lengths of the running ones (so no sequence is ever preempted).
 *    Each step every running sequence generates one token; a finished one is removed and its
 *    memory returns. Per step the waste (reserved but not holding a live token, over reserved)
 *    is sampled; the table gives its mean over the steps, the peak, the steps to serve every
 *    request, and the mean and peak number of sequences running at once.
 * 2. Sharing: --samples samples (default 8) of one --prompt-token prompt (default 1000) generate
 *    --gen tokens each (default 200): blocks with fork (copy-on-write) vs each sample storing its
 *    own copy of the prompt.
 * Bytes assume Llama-3.2-1B's cache: 16 layers x K and V x 8 KV heads x 64 x f16 = 32 KiB per
 * position. Usage: bench_kvpages [--requests N] [--ctx N] [--block N] [--budget-mib N]
 *                               [--samples N] [--prompt N] [--gen N] [--seed N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kvpages.h"

#define BPP ((size_t)16 * 2 * 8 * 64 * 2)

typedef struct {
  int arrive, prompt, gen;
  int start, len, done; /* start: step admitted (-1 = waiting); len: positions now */
} il_req;

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}
static int uniform(int lo, int hi) { return lo + (int)(next_u32() % (uint32_t)(hi - lo + 1)); }

static void usage(FILE *f) {
  fprintf(f, "usage: bench_kvpages [options]\n"
             "  --requests N    requests in the replayed trace (default 200)\n"
             "  --ctx N         maximum context per sequence (default 4096)\n"
             "  --block N       positions per block of the paged cache (default 16)\n"
             "  --budget-mib N  KV memory budget for both caches, MiB (default 2048)\n"
             "  --samples N     samples of one prompt in the sharing test (default 8)\n"
             "  --prompt N      prompt tokens in the sharing test (default 1000)\n"
             "  --gen N         tokens each sample generates (default 200)\n"
             "  --seed N        trace seed (default fixed)\n"
             "  --help          this text\n");
}

typedef struct {
  long steps, sampled, seq_steps; /* sampled: steps with a sequence running */
  int peak_seqs;
  double waste_sum, waste_peak;
  size_t peak_reserved;
} il_replay;

static void fail(const char *what, il_status st) {
  fprintf(stderr, "bench_kvpages: %s: %s: %s\n", what, il_status_name(st), il_error_detail());
  exit(1);
}

/* paged = 0: contiguous (ctx positions per sequence). */
static il_replay replay(il_req *rq, int n, int ctx, int block, size_t budget, int paged) {
  for (int i = 0; i < n; i++) rq[i].start = -1, rq[i].len = 0, rq[i].done = 0;
  const int n_blocks = (int)(budget / (BPP * (size_t)block));
  const int max_seq = paged ? n : (int)(budget / (BPP * (size_t)ctx));
  il_kvpages *p = NULL;
  il_status st = il_kvpages_new(paged ? n_blocks : 1, block, (ctx + block - 1) / block, n, BPP, &p);
  if (st != IL_OK) fail("kvpages_new", st);
  il_replay r = {0};
  int finished = 0, running = 0;
  long committed = 0; /* paged: blocks of the final lengths of the running sequences */
  long step = 0;
  for (; finished < n; step++) {
    /* admit arrivals in order while they fit */
    for (int i = 0; i < n; i++) {
      il_req *q = &rq[i];
      if (q->start >= 0 || q->arrive > step) continue;
      const long need = (q->prompt + q->gen + block - 1) / block;
      if (paged ? committed + need > n_blocks : running >= max_seq) break;
      q->start = (int)step;
      running++;
      if (paged) {
        committed += need;
        if ((st = il_kvpages_seq_add(p, i)) != IL_OK) fail("seq_add", st);
        if ((st = il_kvpages_reserve(p, i, q->prompt, NULL, NULL)) != IL_OK) fail("reserve prompt", st);
      }
      q->len = q->prompt;
    }
    /* one generated token per running sequence; finished ones leave */
    for (int i = 0; i < n; i++) {
      il_req *q = &rq[i];
      if (q->start < 0 || q->done) continue;
      if (q->len == q->prompt + q->gen) {
        q->done = 1;
        running--;
        finished++;
        if (paged) {
          committed -= (q->prompt + q->gen + block - 1) / block;
          if ((st = il_kvpages_seq_remove(p, i)) != IL_OK) fail("seq_remove", st);
        }
        continue;
      }
      q->len++;
      if (paged && (st = il_kvpages_reserve(p, i, q->len, NULL, NULL)) != IL_OK) fail("reserve", st);
    }
    if (running == 0) continue;
    size_t reserved, used = 0;
    if (paged) {
      il_kvpages_stats s;
      il_kvpages_stats_get(p, 1, &s);
      reserved = s.bytes_reserved;
      used = s.bytes_used;
    } else {
      reserved = (size_t)running * (size_t)ctx * BPP;
      for (int i = 0; i < n; i++)
        if (rq[i].start >= 0 && !rq[i].done) used += (size_t)rq[i].len * BPP;
    }
    const double w = reserved ? 1.0 - (double)used / (double)reserved : 0;
    r.sampled++;
    r.seq_steps += running;
    r.waste_sum += w;
    if (w > r.waste_peak) r.waste_peak = w;
    if (running > r.peak_seqs) r.peak_seqs = running;
    if (reserved > r.peak_reserved) r.peak_reserved = reserved;
  }
  r.steps = step;
  il_kvpages_free(p);
  return r;
}

int main(int argc, char **argv) {
  int n = 200, ctx = 4096, block = 16, budget_mib = 2048, samples = 8, prompt = 1000, gen = 200;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int *dst = !strcmp(a, "--requests") ? &n : !strcmp(a, "--ctx") ? &ctx : !strcmp(a, "--block") ? &block
             : !strcmp(a, "--budget-mib") ? &budget_mib : !strcmp(a, "--samples") ? &samples
             : !strcmp(a, "--prompt") ? &prompt : !strcmp(a, "--gen") ? &gen : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--seed") && v) {
      rng = strtoull(v, NULL, 10) | 1;
      i++;
    } else if (dst && v && atoi(v) > 0) {
      *dst = atoi(v);
      i++;
    } else {
      fprintf(stderr, "bench_kvpages: unknown option or non-positive value: '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (ctx < 32 || (size_t)budget_mib << 20 < (size_t)ctx * BPP) {
    fprintf(stderr, "bench_kvpages: --ctx must be >= 32 and one context (%zu MiB) must fit in --budget-mib\n",
            ((size_t)ctx * BPP) >> 20);
    return 2;
  }
  const size_t budget = (size_t)budget_mib << 20;
  il_req *rq = calloc((size_t)n, sizeof *rq);
  int t = 0;
  for (int i = 0; i < n; i++) {
    t += uniform(0, 6); /* about one arrival every 3 steps */
    rq[i].arrive = t;
    rq[i].prompt = uniform(16, ctx / 2);
    rq[i].gen = uniform(16, ctx / 8);
  }
  printf("# bench_kvpages: %d requests (prompts 16..%d, outputs 16..%d tokens, arrivals every 0..6 steps), "
         "context %d, KV budget %d MiB, %zu KiB per position\n\n",
         n, ctx / 2, ctx / 8, ctx, budget_mib, BPP >> 10);
  printf("| cache | steps to serve all | mean seqs running | peak seqs | mean waste | peak waste | peak reserved |\n");
  printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (int paged = 0; paged < 2; paged++) {
    il_replay r = replay(rq, n, ctx, block, budget, paged);
    char name[32];
    snprintf(name, sizeof name, paged ? "paged (block %d)" : "contiguous", block);
    printf("| %s | %ld | %.1f | %d | %.1f%% | %.1f%% | %.0f MiB |\n", name, r.steps, (double)r.seq_steps / (double)r.sampled,
           r.peak_seqs, 100.0 * r.waste_sum / (double)r.sampled, 100.0 * r.waste_peak, (double)r.peak_reserved / (1 << 20));
  }
  /* sharing */
  const int total = prompt + gen, nb = (total + block - 1) / block;
  il_kvpages *p;
  il_status st = il_kvpages_new(nb * samples, block, nb, samples, BPP, &p);
  if (st != IL_OK) fail("kvpages_new", st);
  if ((st = il_kvpages_seq_add(p, 0)) != IL_OK || (st = il_kvpages_reserve(p, 0, prompt, NULL, NULL)) != IL_OK)
    fail("prompt", st);
  for (int s = 1; s < samples; s++)
    if ((st = il_kvpages_seq_fork(p, 0, s)) != IL_OK) fail("fork", st);
  int copies = 0;
  for (int g = 1; g <= gen; g++)
    for (int s = 0; s < samples; s++) {
      il_kvpages_copy cp[1];
      int nc;
      if ((st = il_kvpages_reserve(p, s, prompt + g, cp, &nc)) != IL_OK) fail("sample", st);
      copies += nc;
    }
  il_kvpages_stats sh;
  il_kvpages_stats_get(p, 1, &sh);
  const size_t own = (size_t)samples * (size_t)nb * (size_t)block * BPP;
  printf("\n%d samples of a %d-token prompt, %d tokens each: shared %d blocks (%.0f MiB, %d copy-on-write copies), "
         "unshared %d blocks (%.0f MiB): sharing saves %.1f%%\n",
         samples, prompt, gen, sh.blocks_used, (double)sh.bytes_reserved / (1 << 20), copies, samples * nb,
         (double)own / (1 << 20), 100.0 * (1.0 - (double)sh.bytes_reserved / (double)own));
  il_kvpages_free(p);
  free(rq);
  return 0;
}
