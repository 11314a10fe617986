/* engine/sched: continuous batching: many requests share one engine, one step at a time.
 *
 * A request is a prompt (tokens), sampling parameters with a seed, max_tokens, stop strings and
 * n choices. Each choice occupies one sequence slot of the engine (n_seq = --parallel) while it
 * runs. Every step:
 *   1. cancelled requests finish (finish reason "cancelled") and free their slots;
 *   2. waiting choices are admitted, first come first served, into free slots;
 *   3. one batch is built: one token for every choice that is generating, then prompt chunks of
 *      the choices still prefilling, until the per-step token budget is spent (chunked
 *      prefill: a long prompt is spread over several steps so running streams keep decoding);
 *   4. the engine decodes the batch (one il_engine_decode: prefill and decode are the same
 *      call), and each choice whose last entry wanted logits samples its next token with its
 *      own sampler, detokenizes it, checks stop strings and reports an event.
 *
 * Prefix cache (--kv paged, unless --no-prefix-cache): a choice's full prompt blocks are
 * indexed once its prompt is decoded and again when it finishes; its slot then gives its blocks
 * back, the indexed ones staying in the pool until a new block is needed and none is free
 * (engine/kvpages.h: least recently released first, never a block a running choice holds). A new
 * choice takes any free slot and starts prefill after the longest cached prefix in whole blocks,
 * whichever slot computed it. Without the prefix cache:
 * Prefix reuse: a freed slot keeps its KV cells, so a new choice placed in the slot whose last
 * tokens share the longest prefix with its prompt starts prefill after that prefix (same
 * slot only: the cache is contiguous, one block of n_ctx cells per sequence). Sharing one
 * prefix between several live sequences needs the paged KV cache's fork; its hook is
 * il__sched_prefix_lookup in sched.c, the one place that decides where a prompt starts.
 *
 * Admission control: prompt + max_tokens larger than the context is IL_ERR_INVALID_ARG (the
 * server's 400) at submit time; when more than max_queue requests wait, submit is IL_ERR_BUSY
 * (503 with Retry-After). All buffers are allocated by il_engine_open and il_sched_new, so an
 * admitted request never meets an out-of-memory in flight.
 *
 * Threads: one thread runs the steps (il_sched_start, or the caller with il_sched_step); any
 * thread may submit and cancel. Event callbacks run on the stepping thread without the
 * scheduler's lock held; they must not block for long and must not call il_sched_step.
 * Not for: HTTP, JSON or chat templates (server/).
 */
#ifndef IL_ENGINE_SCHED_H
#define IL_ENGINE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/grammar.h"

#define IL_SCHED_MAX_STOP 4          /* stop strings per request (OpenAI's limit) */
#define IL_SCHED_MAX_STOP_LEN 256    /* bytes per stop string */
#define IL_SCHED_MAX_N 16            /* choices per request */
#define IL_SCHED_MAX_TOP_LOGPROBS 20

typedef enum {
  IL_FINISH_NONE,      /* still running */
  IL_FINISH_STOP,      /* end-of-generation token or a stop string */
  IL_FINISH_LENGTH,    /* max_tokens or the context reached */
  IL_FINISH_CANCELLED, /* il_sched_cancel (client gone) or the scheduler shut down */
  IL_FINISH_ERROR,     /* the engine failed (device error): the step's status says why */
  IL_FINISH_COUNT
} il_finish_reason;

/* "stop", "length", "cancelled", "error" ("" for NONE). */
const char *il_finish_name(il_finish_reason r);

typedef struct {
  il_sampler_params sampling; /* choice i samples with seed sampling.seed + i */
  int32_t max_tokens;         /* 1.. ; 0 = until the context is full */
  char stop[IL_SCHED_MAX_STOP][IL_SCHED_MAX_STOP_LEN];
  int32_t n_stop;
  int32_t n;                  /* choices, 1..IL_SCHED_MAX_N */
  int32_t logprobs;           /* -1: none; 0..20: the chosen token's logprob and this many alternatives */
  bool ignore_eos;
  /* Structured output (engine/grammar): every choice's tokens follow this grammar. The
   * scheduler owns it from il_sched_submit on (freed with the request, or at once when submit
   * fails); each choice gets a state of its own. grammar_vocab is borrowed and must outlive the
   * scheduler. NULL: unconstrained. */
  il_grammar *grammar;
  const il_grammar_vocab *grammar_vocab;
} il_sched_params;

/* Defaults from request options (temp, top-k, top-p, min-p, penalties, seed, ignore-eos), n = 1,
 * max_tokens = 0, no stop strings, no logprobs. Can't fail. */
void il_sched_params_from_request(const il_request_params *rp, il_sched_params *p);

typedef struct {
  int32_t choice;          /* 0..n-1; -1 in the request's final event */
  int32_t token;           /* the sampled token, or -1 (no token: end of generation, final) */
  const char *text;        /* bytes ready for the client (stop strings cut, UTF-8 complete) */
  size_t len;
  float logprob;           /* log-probability of token (temperature 1), when logprobs >= 0 */
  int32_t n_top;           /* alternatives, most likely first */
  const int32_t *top_ids;
  const float *top_logprobs;
  il_finish_reason finish; /* set on the choice's last event */
  /* final event only (choice == -1): the request is over, ud is never used again */
  bool done;
  int32_t n_prompt;        /* prompt tokens (per choice) */
  int32_t n_gen;           /* generated tokens over all choices */
  int32_t n_cached;        /* prompt tokens reused from the cache (first choice) */
  int32_t n_drafted, n_accepted; /* --draft-model: tokens drafted over all choices, of them accepted */
  /* The request's time to first token in parts (final event only; il_time_now clock, 0 when it
   * never got there): admitted = its first choice took a slot; first_step = the start of the
   * forward pass that returned its first token's logits; prefill_chunks = the steps that
   * carried its prompt tokens up to that one (chunked prefill), that one included. */
  double t_admitted, t_first_step;
  int32_t prefill_chunks;
} il_sched_event;

/* Called on the stepping thread. Borrowed pointers are valid during the call only. */
typedef void (*il_sched_fn)(void *ud, const il_sched_event *ev);

typedef struct {
  int32_t max_queue;   /* requests allowed to wait for a slot; more is IL_ERR_BUSY (0: 4 x slots) */
  int32_t step_tokens; /* tokens per step (0: the engine's batch size); at least one per slot */
  /* Speculative decoding (engine/spec.h): draft (borrowed, NULL: none) opened with the engine's
   * n_seq and n_ctx and the same vocabulary, the engine with cfg.logits_all. Each decoding choice
   * without a grammar drafts n_draft tokens (0: adaptive) and the engine verifies every slot's
   * in the step's one pass; rejected cells are cut from both caches. */
  il_engine *draft;
  int32_t n_draft;
} il_sched_opts;

#define IL_SCHED_NBUCKETS 14
/* Upper bounds of the latency histograms, seconds (the last bucket is +Inf, implicit). */
extern const double il_sched_buckets[IL_SCHED_NBUCKETS];

typedef struct {
  uint64_t count[IL_SCHED_NBUCKETS + 1]; /* per bucket, not cumulative; last = above all bounds */
  uint64_t n;
  double sum;
} il_sched_hist;

typedef struct {
  int32_t n_slots, n_ctx;
  int32_t running;               /* requests with at least one choice in a slot */
  int32_t waiting;               /* requests not yet admitted */
  int32_t slots_used;
  bool kv_paged;                 /* --kv paged: the three below are the page pool's */
  int32_t kv_block, kv_blocks_total, kv_blocks_free; /* positions per block, blocks (contiguous: one a slot) */
  int64_t kv_cells_used;         /* positions holding live tokens, over all busy slots */
  uint64_t finished[IL_FINISH_COUNT]; /* choices, by finish reason */
  uint64_t requests_finished;
  uint64_t prompt_tokens;        /* prompt tokens of admitted choices (cached ones included) */
  uint64_t prompt_tokens_cached; /* ... of which reused from a slot's cells */
  uint64_t prefix_forks;         /* admissions that took a longer prefix from another slot (fork) */
  bool prefix_cache;             /* --kv paged without --no-prefix-cache: the four below are its */
  int32_t prefix_cache_blocks;   /* blocks indexed (held by a request or not) */
  int32_t prefix_cache_blocks_evictable; /* ... of which no request holds (free for eviction) */
  size_t prefix_cache_bytes;     /* K/V bytes of the indexed blocks */
  uint64_t prefix_cache_evictions; /* indexed blocks reused for new data */
  uint64_t prompt_tokens_computed;
  uint64_t gen_tokens;
  uint64_t steps;
  uint64_t rejected_busy, rejected_invalid;
  double busy_seconds;           /* time spent in il_engine_decode */
  bool spec;                     /* a draft model drafts: the four below are its */
  uint64_t spec_drafted, spec_accepted; /* --draft-model: tokens drafted, of them accepted */
  uint64_t spec_verified;        /* choice-steps that verified drafted tokens (each gives accepted + 1) */
  double spec_draft_seconds;     /* time spent in the draft's decodes */
  il_sched_hist ttft, tpot, e2e, queue;
  /* Time to first token per request, in parts (once per request that got a token): submit to
   * admission, admission to the start of the forward pass that returned the first token, that
   * pass to the token; the whole, and admission to the token (vLLM's prefill time). */
  il_sched_hist req_queue, req_prefill, req_first_decode, req_ttft, req_admit_to_first;
} il_sched_stats;

typedef struct il_sched il_sched;

/* Creates a scheduler over an open engine (borrowed: it must outlive the scheduler and is used
 * only by the stepping thread from now on). Slots = e->n_seq. Errors: IL_ERR_OOM. */
il_status il_sched_new(il_engine *e, const il_sched_opts *opts, il_sched **out);
/* Stops the thread (if started), finishes every request left with "cancelled" (their callbacks
 * run, on the caller's thread) and frees everything. NULL is ignored. */
void il_sched_free(il_sched *s);

/* Queues a request; the prompt and params are copied. *id (may be NULL) identifies it for
 * il_sched_cancel. Errors (nothing is queued and fn is never called):
 * IL_ERR_INVALID_ARG (empty prompt, prompt + max_tokens over the context, bad params; the
 * detail says which), IL_ERR_BUSY (the queue is full), IL_ERR_OOM. */
il_status il_sched_submit(il_sched *s, const int32_t *prompt, int32_t n_prompt, const il_sched_params *p,
                          il_sched_fn fn, void *ud, uint64_t *id);
/* Asks for request id to end: at the next step its choices finish with "cancelled" and their
 * slots are free. Unknown or finished ids are ignored. Can't fail. */
void il_sched_cancel(il_sched *s, uint64_t id);

/* Runs one step on the calling thread. *did_work (may be NULL) is false when there was nothing
 * to do. A device error finishes the choices of that batch with IL_FINISH_ERROR and is
 * returned; the scheduler stays usable. */
il_status il_sched_step(il_sched *s, bool *did_work);
/* Runs steps on a thread of its own until il_sched_stop; it sleeps while idle. */
il_status il_sched_start(il_sched *s);
void il_sched_stop(il_sched *s);

/* A consistent copy of the counters. Can't fail. */
void il_sched_stats_get(il_sched *s, il_sched_stats *out);
const il_engine *il_sched_engine(const il_sched *s);

#endif
