/* server/metrics: Prometheus text for the scheduler, memory, GPU and HTTP counters. */
#include "server/metrics.h"

#include <string.h>

#include "memory/mem.h"
#include "server/budget.h"

static void il__head(il_sbuf *b, const char *name, const char *type, const char *help) {
  il_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void il__metric(il_sbuf *b, const char *name, const char *type, const char *help, double v) {
  il__head(b, name, type, help);
  il_sbuf_printf(b, "%s %.17g\n", name, v);
}

static void il__hist(il_sbuf *b, const char *name, const char *help, const il_sched_hist *h, const char *model) {
  il__head(b, name, "histogram", help);
  uint64_t cum = 0;
  for (int i = 0; i < IL_SCHED_NBUCKETS; i++) {
    cum += h->count[i];
    il_sbuf_printf(b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", name, model, il_sched_buckets[i],
                   (unsigned long long)cum);
  }
  cum += h->count[IL_SCHED_NBUCKETS];
  il_sbuf_printf(b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", name, model, (unsigned long long)cum);
  il_sbuf_printf(b, "%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
  il_sbuf_printf(b, "%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->n);
}

/* The series the Kubernetes Gateway API Inference Extension's endpoint picker reads from a
 * model server (its vLLM defaults: queue depth and KV-cache usage; deploy/k8s, docs/deploy.md),
 * under vLLM's own names beside the inferlab_ ones, so the picker and an autoscaler on queue
 * depth need no per-server flags. The values are the inferlab_ series' (same snapshot). */
static void il__vllm_names(il_sbuf *b, const il_sched_stats *s, const char *m) {
  const double cells = (double)s->n_slots * (double)s->n_ctx, kv = cells > 0 ? (double)s->kv_cells_used / cells : 0.0;
  il__head(b, "vllm:num_requests_waiting", "gauge", "= inferlab_num_requests_waiting (vLLM's name)");
  il_sbuf_printf(b, "vllm:num_requests_waiting{model_name=\"%s\"} %d\n", m, s->waiting);
  il__head(b, "vllm:num_requests_running", "gauge", "= inferlab_num_requests_running (vLLM's name)");
  il_sbuf_printf(b, "vllm:num_requests_running{model_name=\"%s\"} %d\n", m, s->running);
  il__head(b, "vllm:kv_cache_usage_perc", "gauge", "= inferlab_kv_cache_usage_perc (vLLM's name, 0 to 1)");
  il_sbuf_printf(b, "vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6f\n", m, kv);
  il__head(b, "vllm:gpu_cache_usage_perc", "gauge", "= inferlab_kv_cache_usage_perc (vLLM's older name, 0 to 1)");
  il_sbuf_printf(b, "vllm:gpu_cache_usage_perc{model_name=\"%s\"} %.6f\n", m, kv);
}

/* Time to first token per request in parts (engine/sched.h): queue + prefill + first decode =
 * the request's TTFT, each counted once per request that got a token. vLLM's names go in the HELP
 * text as elsewhere (promtool refuses colons); vLLM's prefill time runs from admission to the first
 * token, so it is its own histogram here (prefill + first decode), as is its per-request TTFT. */
/* Speculative decoding (--draft-model): drafted and accepted tokens, vLLM's counter names beside
 * (vllm:spec_decode_*), the acceptance rate and the tokens each verification gave a choice
 * (accepted + 1: the most a step's pass can save over plain decoding, before the draft's cost). */
static void il__spec_metrics(il_sbuf *b, const il_sched_stats *s, const char *m) {
  static const char *const names[4][2] = {
      {"inferlab_spec_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"},
      {"inferlab_spec_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"},
      {"inferlab_spec_verifications_total", "vllm:spec_decode_num_drafts_total"},
      {NULL, NULL}};
  const uint64_t v[3] = {s->spec_drafted, s->spec_accepted, s->spec_verified};
  static const char *const help[3] = {"tokens the draft model proposed", "drafted tokens the target accepted",
                                      "choice-steps that verified drafted tokens"};
  for (int i = 0; names[i][0]; i++)
    for (int k = 0; k < 2; k++) {
      il__head(b, names[i][k], "counter", help[i]);
      il_sbuf_printf(b, "%s{model_name=\"%s\"} %llu\n", names[i][k], m, (unsigned long long)v[i]);
    }
  il__head(b, "inferlab_spec_acceptance_rate", "gauge", "accepted / drafted tokens since start (0 before any)");
  il_sbuf_printf(b, "inferlab_spec_acceptance_rate{model_name=\"%s\"} %.6f\n", m,
                 s->spec_drafted ? (double)s->spec_accepted / (double)s->spec_drafted : 0.0);
  il__head(b, "inferlab_spec_tokens_per_verification", "gauge",
           "tokens a verification gives a choice, (accepted + verifications) / verifications (1: no gain)");
  il_sbuf_printf(b, "inferlab_spec_tokens_per_verification{model_name=\"%s\"} %.6f\n", m,
                 s->spec_verified ? (double)(s->spec_accepted + s->spec_verified) / (double)s->spec_verified : 0.0);
  il__head(b, "inferlab_spec_draft_seconds_total", "counter", "seconds spent in the draft model's forward passes");
  il_sbuf_printf(b, "inferlab_spec_draft_seconds_total{model_name=\"%s\"} %.9g\n", m, s->spec_draft_seconds);
}

static void il__ttft_parts(il_sbuf *b, const il_sched_stats *s, const char *m) {
  il__hist(b, "inferlab_request_queue_seconds", "per request: submission to admission into a slot (TTFT part 1)",
           &s->req_queue, m);
  il__hist(b, "inferlab_request_prefill_seconds",
           "per request: admission to the start of the forward pass that returns its first token (TTFT part 2: the "
           "earlier prefill chunks and the steps between them)", &s->req_prefill, m);
  il__hist(b, "inferlab_request_first_decode_seconds",
           "per request: the forward pass that returns its first token, and the sampling (TTFT part 3)",
           &s->req_first_decode, m);
  il__hist(b, "inferlab_request_time_to_first_token_seconds",
           "per request: submission to its first token, parts 1+2+3 (vllm:time_to_first_token_seconds)", &s->req_ttft, m);
  il__hist(b, "inferlab_request_prefill_time_seconds",
           "per request: admission to its first token, parts 2+3 (vllm:request_prefill_time_seconds)",
           &s->req_admit_to_first, m);
}

void il_metrics_write(il_sbuf *b, const il_metrics_in *in) {
  const char *m = in->model_id ? in->model_id : "";
  il__metric(b, "inferlab_ready", "gauge", "1 when the model is loaded and requests are served (/health 200)",
             in->ready ? 1 : 0);
  il__metric(b, "inferlab_uptime_seconds", "gauge", "seconds since the server started", in->uptime_seconds);
  il__metric(b, "inferlab_http_connections", "gauge", "HTTP connections open now", in->connections);
  il__metric(b, "inferlab_http_connections_rejected_total", "counter",
             "requests answered 429 because --max-connections were in progress", (double)in->connections_rejected);
  static const char *const why[3] = {"header_timeout", "body_timeout", "evicted"};
  il__head(b, "inferlab_http_connections_dropped_total", "counter",
           "connections closed by the server: headers or body not complete in time (--header-timeout, "
           "--body-timeout), or idle while --max-connections were open (evicted, oldest first)");
  for (int i = 0; i < 3; i++)
    il_sbuf_printf(b, "inferlab_http_connections_dropped_total{reason=\"%s\"} %llu\n", why[i],
                   (unsigned long long)in->dropped[i]);
  size_t held = 0, peak = 0;
  uint64_t over = 0;
  il_budget_totals(&held, &peak, &over);
  il__metric(b, "inferlab_http_request_memory_bytes", "gauge",
             "bytes requests in flight hold now: bodies, parsed JSON, tokens, responses (--max-request-memory each)",
             (double)held);
  il__metric(b, "inferlab_http_request_memory_peak_bytes", "gauge", "peak of inferlab_http_request_memory_bytes",
             (double)peak);
  il__metric(b, "inferlab_http_request_memory_limit_bytes", "gauge", "bytes one request may hold (--max-request-memory)",
             (double)in->request_memory_limit);
  il__metric(b, "inferlab_http_requests_over_memory_total", "counter",
             "requests that needed more than --max-request-memory (answered 413, or a stream ended)", (double)over);
  il__head(b, "inferlab_http_responses_total", "counter", "HTTP responses by status code");
  for (int i = 0; i < in->n_http; i++)
    il_sbuf_printf(b, "inferlab_http_responses_total{code=\"%d\"} %llu\n", in->http[i].code,
                   (unsigned long long)in->http[i].count);

  il_mem_stats ms;
  il_mem_stats_get(&ms);
  il__head(b, "inferlab_host_memory_bytes", "gauge", "host bytes the process allocated through memory/, by category");
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++)
    il_sbuf_printf(b, "inferlab_host_memory_bytes{category=\"%s\"} %zu\n", il_mem_category_name((il_mem_category)c),
                   ms.current[c]);
  il__head(b, "inferlab_host_memory_mapped_bytes", "gauge", "host bytes mapped from files (weights), by category");
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++)
    if (ms.mapped[c])
      il_sbuf_printf(b, "inferlab_host_memory_mapped_bytes{category=\"%s\"} %zu\n",
                     il_mem_category_name((il_mem_category)c), ms.mapped[c]);
  il__metric(b, "inferlab_host_memory_peak_bytes", "gauge", "peak host bytes allocated through memory/",
             (double)ms.total_peak);

  il_engine_snapshot es;
  if (in->engine) il_engine_snapshot_get(in->engine, IL_ENGINE_SNAP_MEMORY, &es);
  if (in->engine && !es.device.host_visible && es.has_allocator) {
    const il_caching_stats cs = es.alloc;
    const char *dev = es.device.name;
    il__head(b, "inferlab_device_memory_allocated_bytes", "gauge", "device bytes in use, by category");
    for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++)
      il_sbuf_printf(b, "inferlab_device_memory_allocated_bytes{device=\"%s\",category=\"%s\"} %zu\n", dev,
                     il_mem_category_name((il_mem_category)c), cs.cat[c].allocated);
    il__head(b, "inferlab_device_memory_reserved_bytes", "gauge", "device bytes the caching allocator holds");
    il_sbuf_printf(b, "inferlab_device_memory_reserved_bytes{device=\"%s\"} %zu\n", dev, cs.total.reserved);
    il__head(b, "inferlab_device_memory_fragmentation_ratio", "gauge",
             "1 - largest free cached block / free cached bytes (0: none free or one block)");
    il_sbuf_printf(b, "inferlab_device_memory_fragmentation_ratio{device=\"%s\"} %.6f\n", dev, cs.fragmentation);
  }
  if (in->engine) { /* the open's timeline (engine/startup): constant once ready */
    const il_startup *su = il_engine_startup(in->engine);
    il__head(b, "inferlab_startup_phase_seconds", "gauge", "seconds each startup phase took (docs/startup.md)");
    for (int p = 0; p < IL_STARTUP_COUNT; p++)
      if (su->phase[p].end > 0)
        il_sbuf_printf(b, "inferlab_startup_phase_seconds{phase=\"%s\"} %.9g\n", il_startup_phase_name((il_startup_phase_id)p),
                       su->phase[p].seconds);
    il__metric(b, "inferlab_startup_seconds", "gauge", "seconds from the process's start (or the open) to ready",
               il_startup_total(su));
  }
  if (in->gpu) {
    il_sample_set ss;
    il_gpu_sampler_read(in->gpu, &ss);
    il__head(b, "inferlab_gpu_utilization_ratio", "gauge", "GPU busy fraction over NVML's last sample period");
    for (int i = 0; i < ss.n_devices; i++)
      if (ss.dev[i].util_gpu >= 0)
        il_sbuf_printf(b, "inferlab_gpu_utilization_ratio{gpu=\"%d\"} %.2f\n", ss.dev[i].index, ss.dev[i].util_gpu / 100.0);
    il__head(b, "inferlab_gpu_memory_used_bytes", "gauge", "GPU memory in use (all processes), from NVML");
    for (int i = 0; i < ss.n_devices; i++)
      if (ss.dev[i].mem_used >= 0)
        il_sbuf_printf(b, "inferlab_gpu_memory_used_bytes{gpu=\"%d\"} %lld\n", ss.dev[i].index, ss.dev[i].mem_used);
  }

  const il_sched_stats *s = in->sched;
  if (!s) return;
  il__vllm_names(b, s, m);
  if (s->spec) il__spec_metrics(b, s, m);
  il__head(b, "inferlab_num_requests_running", "gauge", "requests in sequence slots (vllm:num_requests_running)");
  il_sbuf_printf(b, "inferlab_num_requests_running{model_name=\"%s\"} %d\n", m, s->running);
  il__head(b, "inferlab_num_requests_waiting", "gauge", "requests waiting for a slot (vllm:num_requests_waiting)");
  il_sbuf_printf(b, "inferlab_num_requests_waiting{model_name=\"%s\"} %d\n", m, s->waiting);
  il__head(b, "inferlab_request_success_total", "counter",
           "finished choices by finish reason (vllm:request_success_total)");
  for (int r = IL_FINISH_STOP; r < IL_FINISH_COUNT; r++)
    il_sbuf_printf(b, "inferlab_request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n", m,
                   il_finish_name((il_finish_reason)r), (unsigned long long)s->finished[r]);
  il__head(b, "inferlab_requests_rejected_total", "counter", "requests refused at admission, by reason");
  il_sbuf_printf(b, "inferlab_requests_rejected_total{model_name=\"%s\",reason=\"queue_full\"} %llu\n", m,
                 (unsigned long long)s->rejected_busy);
  il__head(b, "inferlab_prompt_tokens_total", "counter", "prompt tokens of admitted requests (vllm:prompt_tokens_total)");
  il_sbuf_printf(b, "inferlab_prompt_tokens_total{model_name=\"%s\"} %llu\n", m, (unsigned long long)s->prompt_tokens);
  il__head(b, "inferlab_generation_tokens_total", "counter", "generated tokens (vllm:generation_tokens_total)");
  il_sbuf_printf(b, "inferlab_generation_tokens_total{model_name=\"%s\"} %llu\n", m, (unsigned long long)s->gen_tokens);
  il__head(b, "inferlab_prefix_cache_queries_total", "counter", "prompt tokens looked up in the cache (vllm:prefix_cache_queries)");
  il_sbuf_printf(b, "inferlab_prefix_cache_queries_total{model_name=\"%s\"} %llu\n", m, (unsigned long long)s->prompt_tokens);
  il__head(b, "inferlab_prefix_cache_hits_total", "counter", "prompt tokens found in the cache (vllm:prefix_cache_hits)");
  il_sbuf_printf(b, "inferlab_prefix_cache_hits_total{model_name=\"%s\"} %llu\n", m,
                 (unsigned long long)s->prompt_tokens_cached);
  il__head(b, "inferlab_prefix_cache_hit_rate", "gauge",
           "prefix cache hits / queries since start, 0 before any query (vllm:gpu_prefix_cache_hit_rate)");
  il_sbuf_printf(b, "inferlab_prefix_cache_hit_rate{model_name=\"%s\"} %.6f\n", m,
                 s->prompt_tokens ? (double)s->prompt_tokens_cached / (double)s->prompt_tokens : 0.0);
  il__head(b, "inferlab_prefix_cache_enabled", "gauge",
           "1: the prefix cache across requests is on (--kv paged without --no-prefix-cache); 0: reuse is per slot");
  il_sbuf_printf(b, "inferlab_prefix_cache_enabled{model_name=\"%s\"} %d\n", m, s->prefix_cache ? 1 : 0);
  if (s->prefix_cache) {
    il__head(b, "inferlab_prefix_cache_blocks", "gauge",
             "KV blocks indexed by the prefix cache: held by a running request, or evictable (held by none)");
    il_sbuf_printf(b, "inferlab_prefix_cache_blocks{model_name=\"%s\",state=\"held\"} %d\n", m,
                   s->prefix_cache_blocks - s->prefix_cache_blocks_evictable);
    il_sbuf_printf(b, "inferlab_prefix_cache_blocks{model_name=\"%s\",state=\"evictable\"} %d\n", m,
                   s->prefix_cache_blocks_evictable);
    il__head(b, "inferlab_prefix_cache_bytes", "gauge", "K/V bytes of the blocks the prefix cache indexes");
    il_sbuf_printf(b, "inferlab_prefix_cache_bytes{model_name=\"%s\"} %zu\n", m, s->prefix_cache_bytes);
    il__head(b, "inferlab_prefix_cache_evictions_total", "counter",
             "indexed blocks evicted (least recently released first) to make room for new tokens");
    il_sbuf_printf(b, "inferlab_prefix_cache_evictions_total{model_name=\"%s\"} %llu\n", m,
                   (unsigned long long)s->prefix_cache_evictions);
  }
  const double cells = (double)s->n_slots * (double)s->n_ctx;
  il__head(b, "inferlab_kv_cache_usage_perc", "gauge", "fraction of KV cells holding live tokens (vllm:kv_cache_usage_perc)");
  il_sbuf_printf(b, "inferlab_kv_cache_usage_perc{model_name=\"%s\"} %.6f\n", m, cells > 0 ? (double)s->kv_cells_used / cells : 0.0);
  il__head(b, "inferlab_kv_cache_blocks", "gauge",
           "KV cache blocks by state (--kv paged: the pool's pages; used = held by a slot, a finished slot's cached prefix "
           "counted as used without the prefix cache and as free (evictable) with it; "
           "contiguous: one block of ctx cells per sequence slot)");
  il_sbuf_printf(b, "inferlab_kv_cache_blocks{model_name=\"%s\",state=\"used\"} %d\n", m,
                 s->kv_blocks_total - s->kv_blocks_free);
  il_sbuf_printf(b, "inferlab_kv_cache_blocks{model_name=\"%s\",state=\"free\"} %d\n", m, s->kv_blocks_free);
  il__head(b, "inferlab_kv_cache_block_size", "gauge", "cells per KV cache block");
  il_sbuf_printf(b, "inferlab_kv_cache_block_size{model_name=\"%s\"} %d\n", m, s->kv_block);
  il__head(b, "inferlab_engine_steps_total", "counter", "scheduler steps that ran a batch");
  il_sbuf_printf(b, "inferlab_engine_steps_total{model_name=\"%s\"} %llu\n", m, (unsigned long long)s->steps);
  il__head(b, "inferlab_engine_busy_seconds_total", "counter", "seconds spent in forward passes");
  il_sbuf_printf(b, "inferlab_engine_busy_seconds_total{model_name=\"%s\"} %.9g\n", m, s->busy_seconds);
  il__hist(b, "inferlab_time_to_first_token_seconds", "time from arrival to the first generated token (vllm:time_to_first_token_seconds)", &s->ttft, m);
  il__hist(b, "inferlab_time_per_output_token_seconds", "mean time between generated tokens of a choice (vllm:time_per_output_token_seconds)", &s->tpot, m);
  il__hist(b, "inferlab_e2e_request_latency_seconds", "time from arrival to the last token (vllm:e2e_request_latency_seconds)", &s->e2e, m);
  il__hist(b, "inferlab_request_queue_time_seconds", "time from arrival to admission into a slot (vllm:request_queue_time_seconds)", &s->queue, m);
  il__ttft_parts(b, s, m);
}
