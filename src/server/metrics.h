/* server/metrics: the Prometheus text exposition of /metrics.
 *
 * Names follow vLLM's where vLLM has the metric (vllm:num_requests_running becomes
 * inferlab_num_requests_running; the table in docs/serve.md lists each with its vLLM name):
 * requests running and waiting, finished requests by finish reason, prompt and generated
 * token counters, prefix-cache hits, TTFT / TPOT / end-to-end / queue-time histograms, KV cache
 * usage and blocks, host and device memory by category, device fragmentation, GPU utilization
 * from NVML when a sampler runs, and HTTP responses by status code.
 * Not for: collecting the numbers (engine/sched, memory/, probe/gpu_sampler do).
 */
#ifndef IL_SERVER_METRICS_H
#define IL_SERVER_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/sched.h"
#include "probe/gpu_sampler.h"
#include "server/sbuf.h"

typedef struct {
  int code;
  uint64_t count;
} il_http_count;

typedef struct {
  bool ready;                    /* the model is loaded */
  const il_sched_stats *sched;   /* NULL while loading */
  il_engine *engine;             /* NULL while loading */
  il_gpu_sampler *gpu;           /* NULL when NVML is absent */
  const il_http_count *http;
  int n_http;
  uint64_t connections_rejected; /* answered 429: too many connections */
  uint64_t dropped[3];           /* closed: header_timeout, body_timeout, evicted (server/guard.h) */
  int connections;               /* open now */
  size_t request_memory_limit;   /* --max-request-memory (the totals come from server/budget) */
  double uptime_seconds;
  const char *model_id;
} il_metrics_in;

/* Appends the whole exposition (text format 0.0.4) to b. Can't fail (b->oom on memory). */
void il_metrics_write(il_sbuf *b, const il_metrics_in *in);

#endif
