/* lab/bench: one measurement, done the same way every time.
 *
 * A point (lab/sweep) is measured as: open the engine (timed: load time), `warmup`
 * untimed repetitions, then `reps` timed repetitions on the same engine. One repetition is:
 *   prompt   batch sequences x prompt tokens in one il_engine_decode call (sequence s uses
 *            sequence id s, positions 0..prompt-1; synthetic token ids from a fixed seed);
 *            the time until every sequence has its first token's logits is the time to first
 *            token (TTFT);
 *   gen      gen decode steps, each one token for every sequence (greedy: the argmax of the
 *            previous logits), each step timed: time per output token (TPOT) samples;
 *   e2e      prompt + gen.
 * From those: prompt tokens/s (batch x prompt / TTFT), generated tokens/s per sequence
 * (gen / gen time) and aggregate (x batch), requests/s (batch / e2e); peak bytes per memory
 * category (il_mem_reset_peak before each repetition), peak RSS of the process (reset through
 * /proc/self/clear_refs where the kernel allows, else the process lifetime peak), CPU
 * utilization (user + sys CPU time / wall time / threads), and the roofline numbers:
 *   bytes per forward pass = every weight byte except an untied embedding table (of which a
 *   pass reads only a few rows); achieved bandwidth = bytes per pass x passes / time;
 *   FLOP/s = 2 x parameters x tokens / time; roofline fraction = achieved bandwidth / the
 *   machine's measured read bandwidth (il_bench_measure_roofline). On the bandwidth roof
 *   the FLOP/s a phase can attain is its arithmetic intensity x bandwidth, so the fraction is
 *   the same for bytes and FLOPs. KV-cache reads are not counted (small for short contexts).
 *   On the CPU (cpu and sim devices) the other roof is the compute peak of the instruction the
 *   kernels of the run's level are built on for the model's main weight type (sys/peak: int8
 *   dot products for quantized weights, F32 FMA for float ones), measured with the run's thread
 *   count; the peak fraction = FLOP/s / that peak. Whichever fraction is larger is the limit a
 *   phase runs against: generation of one sequence is bandwidth-bound, prompts and large
 *   batches compute-bound.
 * When the config's ctx is 0 the context is sized to prompt + gen, so the KV cache holds
 * exactly the workload.
 * With o->draft_model (speculative decoding) a repetition is instead one request through the
 * loop `run` uses (il_spec_generate with the draft, il_engine_generate without), one sequence,
 * greedy past end-of-text so exactly gen tokens come out; TTFT and the generation time are that
 * loop's phases, and the samples keep its counts (drafted, accepted, target passes).
 * Not for: printing (lab/report_*), sweeping (lab/sweep), comparing (lab/experiment).
 */
#ifndef IL_LAB_BENCH_H
#define IL_LAB_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"
#include "lab/stats.h"
#include "lab/sweep.h"
#include "lab/usage.h"
#include "memory/caching.h"
#include "memory/mem.h"
#include "sys/peak.h"

/* X(enum, key, label, unit, better): better +1 = higher is better, -1 = lower, 0 = neither. */
#define IL_BENCH_METRICS(X)                                                        \
  X(LOAD_S, "load_s", "load", "s", -1)                                             \
  X(TTFT_S, "ttft_s", "time to first token", "s", -1)                              \
  X(TPOT_S, "tpot_s", "time per output token", "s", -1)                            \
  X(E2E_S, "e2e_s", "end to end", "s", -1)                                         \
  X(PROMPT_TPS, "prompt_tps", "prompt tokens/s", "tok/s", 1)                       \
  X(GEN_TPS, "gen_tps", "generated tokens/s (all sequences)", "tok/s", 1)          \
  X(GEN_TPS_SEQ, "gen_tps_seq", "generated tokens/s per sequence", "tok/s", 1)     \
  X(REQ_S, "req_s", "requests/s", "req/s", 1)                                      \
  X(CPU_UTIL, "cpu_util", "CPU utilization (of threads)", "fraction", 0)           \
  X(PEAK_RSS, "peak_rss_bytes", "peak RSS", "bytes", -1)                           \
  X(MEM_PEAK, "mem_peak_bytes", "peak counted memory", "bytes", -1)                \
  X(GEN_GBPS, "gen_gbps", "generation bandwidth", "GB/s", 1)                       \
  X(GEN_ROOF, "gen_roofline_frac", "generation roofline fraction", "fraction", 1)  \
  X(GEN_GFLOPS, "gen_gflops", "generation GFLOP/s", "GFLOP/s", 1)                  \
  X(PROMPT_GBPS, "prompt_gbps", "prompt bandwidth", "GB/s", 1)                     \
  X(PROMPT_ROOF, "prompt_roofline_frac", "prompt roofline fraction", "fraction", 1) \
  X(PROMPT_GFLOPS, "prompt_gflops", "prompt GFLOP/s", "GFLOP/s", 1)               \
  X(GEN_PEAK, "gen_peak_frac", "generation fraction of the compute peak", "fraction", 1) \
  X(PROMPT_PEAK, "prompt_peak_frac", "prompt fraction of the compute peak", "fraction", 1) \
  X(SPEC_ACCEPT, "spec_accept_rate", "speculative: drafted tokens accepted", "fraction", 1) \
  X(SPEC_TPP, "spec_tokens_per_pass", "speculative: tokens per target pass", "tok/pass", 1) \
  X(SPEC_SPEEDUP, "spec_speedup", "speculative: generated tokens/s against no drafting", "x", 1)

typedef enum {
#define IL__BM_ENUM(e, key, label, unit, better) IL_BM_##e,
  IL_BENCH_METRICS(IL__BM_ENUM)
#undef IL__BM_ENUM
      IL_BM_COUNT
} il_bench_metric;

typedef struct {
  const char *key, *label, *unit;
  int better;
} il_bench_metric_info;

/* Facts of metric m. Never NULL for m < IL_BM_COUNT. */
const il_bench_metric_info *il_bench_metric_info_of(il_bench_metric m);
/* The metric with this key, or -1. */
int il_bench_metric_find(const char *key);

/* One timed repetition. Metrics that could not be computed (no roofline measured, gen 0) are
 * NaN. */
typedef struct {
  double v[IL_BM_COUNT];
  size_t mem_peak[IL_MEM_CATEGORY_COUNT];   /* bytes, this repetition */
  size_t mem_mapped[IL_MEM_CATEGORY_COUNT]; /* borrowed from a mapping (GGUF weights) */
  /* generation through the engine's generate loop (a --draft-model bench): its own counts and
   * the generation phase's wall time, the figures the tokens/s and speculative metrics divide */
  int64_t gen_tokens, drafted, accepted, passes;
  double gen_s;
} il_bench_sample;

/* Compute peaks measured so far (GOPS; 0 = not yet), kept by the caller across points so each
 * instruction and thread count is measured once. */
#define IL_BENCH_PEAK_THREADS 256
typedef struct {
  double gops[IL_PEAK_KINDS][IL_BENCH_PEAK_THREADS + 1];
} il_bench_peaks;

typedef struct {
  int reps;            /* timed repetitions (>= 1) */
  int warmup;          /* untimed repetitions first (>= 0) */
  double roofline_gbps; /* measured read bandwidth; 0 = unknown (roofline metrics NaN) */
  il_bench_peaks *peaks; /* NULL: no compute peak (peak metrics NaN) */
  uint64_t seed;       /* synthetic prompt tokens */
  bool sample_usage;   /* run lab/usage during the point (GPU view, sampled RSS) */
  const char *nvml_lib;
  bool no_gpu;
  bool no_prediction;  /* skip the planner's prediction on sim (predicted_* stay 0): a caller that
                        * plans its points itself saves the dry runs */
  int interval_ms;
  /* speculative decoding (a --draft-model bench): when draft_model is set, generation runs
   * through the loop `run` uses (il_spec_generate, or il_engine_generate for draft -1) at
   * temperature 0 past end-of-text, one sequence, so the rows with and without a draft measure
   * the same tokens the same way. draft: -1 no drafting, 0 adaptive, 1..IL_SPEC_DRAFT_MAX. */
  const char *draft_model;
  int draft;
  /* optional: called after each repetition (warm-up ones with rep < 0) */
  void (*progress)(void *ud, int rep, int reps);
  void *progress_ud;
} il_bench_options;

typedef struct {
  il_sweep_point point;   /* what was asked (ctx as given) */
  char label[256];        /* "batch=4 threads=2" (swept axes), may be "" */
  il_status status;       /* IL_OK, or why this point failed (then error is set) */
  char error[1024];
  /* what ran */
  char model[128];
  char model_type[16];
  uint64_t n_params, weight_bytes, bytes_per_pass;
  int threads, n_ctx, n_batch, batch, prompt, gen;
  bool rss_resettable;    /* peak RSS is per repetition (else process lifetime) */
  double peak_gops;       /* the compute peak the run is quoted against (0: none: not a CPU, scalar, not asked) */
  char peak_name[48];     /* its instruction, "vpdpbusd zmm (AVX-512 VNNI)" */
  /* samples */
  int n_samples;
  il_bench_sample *samples; /* [n_samples], owned */
  int n_steps;
  double *step_s;           /* [n_steps] every decode step's seconds over all repetitions, owned */
  il_stats_summary sum[IL_BM_COUNT];
  il_stats_summary tpot_steps; /* over every step: the percentiles of TPOT */
  il_usage_result usage;
  bool has_usage;
  /* the device (when it is not the host): its allocator's figures after the run, and its memory
   * map as an SVG element (owned; NULL when the device has no allocator snapshot) */
  char device[64];
  bool has_device;
  il_caching_stats device_stats;
  size_t predicted_reserved; /* lab/plan's dry run: what the allocator will reserve on this device */
  size_t predicted_min;      /* and the smallest device that runs the combination (0: not planned) */
  char *memory_map_svg;
  /* what the engine chose and moved (any device): the attention kernel and why auto skipped the
   * ones before it, and the host<->device traffic of the whole run, load included (zero on cpu) */
  char attn[32];
  char attn_why[256];
  il_transfer_stats transfers;
  il_startup startup;      /* the open's timeline (engine/startup) */
  /* a --draft-model bench: the draft (its model's name; "" without one), the length asked
   * (o->draft) and the row the speed-up is against (-1: none yet) */
  bool spec;
  char draft_name[128];
  int draft;
  int baseline;
} il_bench_result;

/* Fills defaults: 5 reps, 1 warm-up, seed 1234, no usage sampling, interval 200 ms. */
void il_bench_options_default(il_bench_options *o);

/* Measures point p into r (r is overwritten; free with il_bench_result_free even on error).
 * Engine failures (model not found, OOM, a context too small for prompt + gen) are returned
 * and also recorded in r->status / r->error so a sweep can go on. IL_ERR_INVALID_ARG for
 * reps < 1 or gen < 0 (n-predict -1 has no meaning here). */
il_status il_bench_run(const il_sweep_point *p, const il_bench_options *o, il_bench_result *r);
/* Recomputes r->sum and r->tpot_steps from the samples (after samples were added by hand,
 * as experiment does). IL_ERR_OOM. */
il_status il_bench_summarize(il_bench_result *r);
/* Appends the samples and steps of src to dst (same point, another run). IL_ERR_OOM. */
il_status il_bench_result_append(il_bench_result *dst, const il_bench_result *src);
void il_bench_result_free(il_bench_result *r);
/* The speed-up of r against base (the same point without drafting, measured in the same run):
 * each sample's generated tokens/s over base's mean, summarized into r->sum (base against
 * itself gives a mean of 1). Nothing when either failed. IL_ERR_OOM. */
il_status il_bench_speedup(il_bench_result *r, const il_bench_result *base);

/* Read bandwidth of this machine with `threads` threads reading at once (GB/s, 1e9 B/s):
 * probe/host's measurement run on each thread with its own 64 MiB buffer, summed. This is the
 * roof the roofline fractions divide by. IL_ERR_OOM, IL_ERR_INTERNAL (threads). */
il_status il_bench_measure_roofline(int threads, int ms, double *gbps);

#endif
