/* bench/bench_attn: time and workspace of each CPU attention kernel (backend/cpu/attn) on a
 * Llama-sized head configuration (32 query heads, 8 KV heads of 128: Llama-3-8B's attention).
 *
 * For each context length T: one sequence whose cache holds T positions (random K/V: f32, f16, bf16 or q8_0,
 * contiguous or paged with a shuffled block table), and two shapes:
 *   prefill  T_q = T_k = T (every row attends to its causal prefix). Above --full-max only the
 *            last --rows query rows are timed (positions T-rows..T-1: the most expensive rows
 *            of the prompt, each against 0..pos), and the table says so.
 *   decode   T_q = 1 at position T-1.
 * Each kernel runs with exactly its reported workspace (allocated under the workspace category,
 * touched before timing). The four kernels run in rounds (naive, sliced, memeff, flash, again)
 * until 4 x --budget seconds are spent (at least one round, at most 2000), so a change of load
 * on a shared machine hits all of them; each kernel's best time is reported. Every output is
 * compared with naive's (max |diff|).
 * Prints markdown tables: ms per kernel, flash's speed-up over naive, workspace per kernel and
 * flash's workspace over naive's.
 * Usage: bench_attn [--threads N] [--contexts 512,1024,...] [--kv f32|f16|bf16|q8_0] [--block N]
 *                   [--full-max N] [--rows N] [--budget S] [--phase prefill|decode|both]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/matmul.h"
#include "core/quant.h"
#include "core/timer.h"
#include "memory/mem.h"

#define N_HEADS 32
#define N_KV 8
#define HD 128

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)(rng_state >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static void *xalloc(il_mem_category cat, size_t n, const char *what) {
  void *p = il_mem_alloc(cat, n ? n : 1, what);
  if (!p) {
    fprintf(stderr, "bench_attn: %s\n", il_error_detail());
    exit(1);
  }
  return p;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_attn [options]\n"
          "  --threads N        worker threads (default: all cores)\n"
          "  --contexts LIST    context lengths (default 512,1024,2048,4096,8192,16384)\n"
          "  --kv TYPE          K/V cache type: f32 (default), f16, bf16, q8_0\n"
          "  --block N          paged cache with N positions per block, shuffled (default 0: contiguous)\n"
          "  --full-max N       longest context whose whole prefill is timed (default 4096)\n"
          "  --rows N           query rows timed above --full-max: the last N (default 256)\n"
          "  --budget S         seconds of repetitions per kernel and shape (default 0.3)\n"
          "  --phase P          prefill, decode or both (default both)\n"
          "  --help             this text\n");
}

typedef struct {
  double ms;
  size_t ws;
  double diff;
} il_result;

static const char *human(size_t b, char *buf) {
  if (b >= (size_t)1 << 30) snprintf(buf, 32, "%.2f GiB", (double)b / (1 << 30));
  else if (b >= (size_t)1 << 20) snprintf(buf, 32, "%.1f MiB", (double)b / (1 << 20));
  else snprintf(buf, 32, "%.1f KiB", (double)b / 1024);
  return buf;
}

int main(int argc, char **argv) {
  int threads = 0, full_max = 4096, rows = 256, block = 0, phases = 3; /* bit 0 prefill, bit 1 decode */
  double budget = 0.3;
  il_dtype kvt = IL_DTYPE_F32;
  int ctx[16] = {512, 1024, 2048, 4096, 8192, 16384}, n_ctx = 6;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--threads") && v) threads = atoi(v), i++;
    else if (!strcmp(a, "--full-max") && v) full_max = atoi(v), i++;
    else if (!strcmp(a, "--rows") && v) rows = atoi(v), i++;
    else if (!strcmp(a, "--block") && v) block = atoi(v), i++;
    else if (!strcmp(a, "--budget") && v) budget = atof(v), i++;
    else if (!strcmp(a, "--phase") && v) {
      phases = !strcmp(v, "prefill") ? 1 : !strcmp(v, "decode") ? 2 : !strcmp(v, "both") ? 3 : 0;
      if (!phases) {
        fprintf(stderr, "bench_attn: --phase %s: expected prefill, decode or both\n", v);
        return 2;
      }
      i++;
    }
    else if (!strcmp(a, "--kv") && v) {
      if (!strcmp(v, "f32")) kvt = IL_DTYPE_F32;
      else if (!strcmp(v, "f16")) kvt = IL_DTYPE_F16;
      else if (!strcmp(v, "bf16")) kvt = IL_DTYPE_BF16;
      else if (!strcmp(v, "q8_0")) kvt = IL_DTYPE_Q8_0;
      else {
        fprintf(stderr, "bench_attn: --kv %s: expected f32, f16, bf16 or q8_0\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--contexts") && v) {
      n_ctx = 0;
      for (const char *p = v; *p && n_ctx < 16;) {
        ctx[n_ctx++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
      }
      i++;
    } else {
      fprintf(stderr, "bench_attn: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  for (int c = 0; c < n_ctx; c++)
    if (ctx[c] < 1) {
      fprintf(stderr, "bench_attn: --contexts: %d is not a positive length\n", ctx[c]);
      return 2;
    }
  if (rows < 1 || block < 0 || budget < 0) {
    fprintf(stderr, "bench_attn: --rows must be >= 1, --block >= 0, --budget >= 0\n");
    return 2;
  }
  il_pool *pool;
  if (il_pool_new(threads, &pool) != IL_OK) {
    fprintf(stderr, "bench_attn: %s\n", il_error_detail());
    return 1;
  }
  const int nth = il_pool_size(pool);
  int nk;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&nk);
  const int order[4] = {3, 2, 1, 0}; /* naive sliced memeff flash */
  printf("# bench_attn: %d query / %d KV heads of %d, KV %s, %s cache, %d threads, isa %s\n\n", N_HEADS, N_KV, HD,
         il_dtype_name(kvt), block ? "paged" : "contiguous", nth, il__attn_isa_for(il_cpu_isa_best())->name);
  il_result res[2][16][4];
  int timed_rows[16];
  for (int ci = 0; ci < n_ctx; ci++) {
    const int T = ctx[ci];
    const int bl = block ? block : T, nb = (T + bl - 1) / bl;
    const size_t stride = il_dtype_row_size(kvt, (int64_t)N_KV * HD);
    const int64_t n_cells = (int64_t)nb * bl;
    char *k = xalloc(IL_MEM_KV, stride * (size_t)n_cells, "bench K"), *v = xalloc(IL_MEM_KV, stride * (size_t)n_cells, "bench V");
    float *rk = xalloc(IL_MEM_OTHER, sizeof(float) * N_KV * HD, "bench row"),
          *rv = xalloc(IL_MEM_OTHER, sizeof(float) * N_KV * HD, "bench row");
    for (int64_t c = 0; c < n_cells; c++) {
      for (int i = 0; i < N_KV * HD; i++) {
        rk[i] = frand();
        rv[i] = frand();
      }
      if (il_quantize_row(kvt, rk, k + (size_t)c * stride, (int64_t)N_KV * HD) != IL_OK ||
          il_quantize_row(kvt, rv, v + (size_t)c * stride, (int64_t)N_KV * HD) != IL_OK) {
        fprintf(stderr, "bench_attn: %s\n", il_error_detail());
        return 1;
      }
    }
    il_mem_free(rk);
    il_mem_free(rv);
    int32_t *table = xalloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)nb, "block table");
    for (int b = 0; b < nb; b++) table[b] = b;
    for (int b = nb - 1; b > 0 && block; b--) {
      int j = (int)((frand() + 1.0f) * 0.5f * (float)(b + 1)) % (b + 1), x = table[b];
      table[b] = table[j];
      table[j] = x;
    }
    for (int ph = 0; ph < 2; ph++) {
      if (!(phases >> ph & 1)) continue;
      const int nq = ph == 1 ? 1 : T <= full_max ? T : (rows < T ? rows : T);
      if (ph == 0) timed_rows[ci] = nq;
      const size_t qn = (size_t)nq * N_HEADS * HD;
      float *q = xalloc(IL_MEM_ACTIVATIONS, qn * sizeof(float), "bench q");
      float *ref = xalloc(IL_MEM_ACTIVATIONS, qn * sizeof(float), "bench ref");
      float *out = xalloc(IL_MEM_ACTIVATIONS, qn * sizeof(float), "bench out");
      int32_t *seq = xalloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)nq, "seq"),
              *pos = xalloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)nq, "pos");
      for (size_t i = 0; i < qn; i++) q[i] = frand();
      for (int t = 0; t < nq; t++) {
        seq[t] = 0;
        pos[t] = T - nq + t;
      }
      il_cpu_attn_args a = {.isa = il_cpu_isa_best(), .out = ref, .q = q, .seq = seq, .pos = pos, .n_tok = nq, .k = k, .v = v,
                            .kv_type = kvt, .kv_row_stride = stride, .n_cells = n_cells, .block_table = table,
                            .block = bl, .max_blocks = nb, .n_seq = 1, .n_heads = N_HEADS, .n_kv_heads = N_KV,
                            .head_dim = HD, .scale = 0.08838834764831845f, .slice = 0};
      /* Rounds of all four kernels in turn, so a load change on the machine hits them alike;
       * each kernel's best round counts. */
      void *w[4];
      for (int oi = 0; oi < 4; oi++) {
        il_result *r = &res[ph][ci][oi];
        r->ws = ks[order[oi]].workspace(&a, nth);
        w[oi] = xalloc(IL_MEM_WORKSPACE, r->ws, "attention workspace");
        memset(w[oi], 0, r->ws);
        r->ms = 1e30;
        r->diff = 0;
      }
      double spent = 0;
      for (int round = 0; round < 2000 && (round == 0 || spent < budget * 4); round++) {
        for (int oi = 0; oi < 4; oi++) {
          const il_cpu_attn_kernel *kn = &ks[order[oi]];
          il_result *r = &res[ph][ci][oi];
          a.out = oi == 0 ? ref : out;
          const double t0 = il_time_now();
          il_status st = kn->run(pool, &a, w[oi], r->ws);
          const double dt = il_time_now() - t0;
          if (st != IL_OK) {
            fprintf(stderr, "bench_attn: %s: %s\n", kn->name, il_error_detail());
            return 1;
          }
          spent += dt;
          if (dt * 1e3 < r->ms) r->ms = dt * 1e3;
          if (round == 0 && oi > 0)
            for (size_t i = 0; i < qn; i++) {
              double d = out[i] > ref[i] ? out[i] - ref[i] : ref[i] - out[i];
              if (!(d <= r->diff)) r->diff = d;
            }
        }
      }
      for (int oi = 0; oi < 4; oi++) {
        il_mem_free(w[oi]);
        fprintf(stderr, "  %6d %-7s %-6s %10.3f ms\n", T, ph ? "decode" : "prefill", ks[order[oi]].name,
                res[ph][ci][oi].ms);
      }
      il_mem_free(q);
      il_mem_free(ref);
      il_mem_free(out);
      il_mem_free(seq);
      il_mem_free(pos);
    }
    il_mem_free(k);
    il_mem_free(v);
    il_mem_free(table);
  }
  for (int ph = 0; ph < 2; ph++) {
    if (!(phases >> ph & 1)) continue;
    printf("## %s\n\n", ph ? "decode (T_q = 1)" : "prefill (T_q = T_k; rows timed in the second column)");
    printf("| context | rows | naive ms | sliced ms | memeff ms | flash ms | flash speed-up | naive ws | sliced ws | "
           "memeff ws | flash ws | flash ws / naive ws | max diff vs naive |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int ci = 0; ci < n_ctx; ci++) {
      il_result *r = res[ph][ci];
      char b[4][32];
      double dmax = 0;
      for (int oi = 1; oi < 4; oi++) dmax = r[oi].diff > dmax ? r[oi].diff : dmax;
      const double wr = (double)r[3].ws / (double)r[0].ws;
      char ratio[32];
      if (wr < 1) snprintf(ratio, sizeof ratio, 1 / wr < 10 ? "1/%.1f" : "1/%.0f", 1 / wr);
      else snprintf(ratio, sizeof ratio, "%.2f", wr);
      printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.2fx | %s | %s | %s | %s | %s | %.1e |\n", ctx[ci],
             ph ? 1 : timed_rows[ci], r[0].ms, r[1].ms, r[2].ms, r[3].ms, r[0].ms / r[3].ms, human(r[0].ws, b[0]),
             human(r[1].ws, b[1]), human(r[2].ws, b[2]), human(r[3].ws, b[3]), ratio, dmax);
    }
    printf("\n");
  }
  il_pool_free(pool);
  return 0;
}
