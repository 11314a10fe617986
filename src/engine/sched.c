/* engine/sched: admission, chunked prefill, per-choice sampling, stop strings, events. */
#include "engine/sched.h"
#include "core/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/timer.h"
#include "engine/engine_impl.h"
#include "engine/spec.h"
#include "memory/mem.h"

const double il_sched_buckets[IL_SCHED_NBUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

const char *il_finish_name(il_finish_reason r) {
  switch (r) {
    case IL_FINISH_STOP: return "stop";
    case IL_FINISH_LENGTH: return "length";
    case IL_FINISH_CANCELLED: return "cancelled";
    case IL_FINISH_ERROR: return "error";
    default: return "";
  }
}

typedef enum { IL__WAITING, IL__PREFILL, IL__DECODE, IL__DONE } il__state;

typedef struct il__req il__req;

typedef struct {
  il__req *req;
  int32_t index;
  il__state state;
  int32_t slot;      /* -1 while waiting */
  int32_t n_past;    /* cells of the slot that hold this choice's tokens */
  int32_t next;      /* DECODE: the sampled token to feed at n_past */
  int32_t n_gen;
  il_sampler *sampler;
  il_grammar_state *grammar; /* NULL: unconstrained */
  il_sampler *dsampler;      /* --draft-model: the draft's sampler (NULL: no drafting) */
  int32_t dcur;              /* the draft length (adaptive) */
  il_detok *detok;
  char *pending;     /* text held back because it may start a stop string */
  size_t pending_len;
  double t_first, t_last;
  il_finish_reason finish;
  int32_t spec_drafted, spec_accepted; /* this choice's drafted tokens, of them accepted */
} il__choice;

struct il__req {
  uint64_t id;
  il_sched_params p;
  int32_t *prompt, n_prompt, max_tokens;
  il_sched_fn fn;
  void *ud;
  il__choice *choices;
  int32_t n_done;
  int32_t n_cached;
  bool cancelled;    /* under the lock */
  bool admitted;
  double t_submit;
  /* time to first token in parts (il_sched_event): engine thread only */
  double t_admitted, t_first_step, t_first;
  int32_t prefill_chunks;
  uint64_t chunk_step; /* the last step counted in prefill_chunks */
  il__req *next;     /* all live requests, in arrival order */
};

struct il_sched {
  il_engine *e;
  il_sched_opts o;
  int32_t n_slots, n_ctx, n_vocab;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool started, stop;
  il__req *head, *tail; /* under mu: every live request */
  uint64_t next_id;
  int32_t n_waiting;    /* under mu: requests not admitted yet */
  il_sched_stats st;    /* under mu */
  /* engine-thread state */
  il__choice **slot_owner;  /* [n_slots] */
  int32_t *slot_tokens;     /* [n_slots x n_ctx]: the token in each cell */
  int32_t *slot_len;        /* [n_slots]: cells 0..len-1 are valid for slot_tokens */
  il_batch_entry *batch;    /* [step_tokens] */
  float *logits;            /* [n_slots x n_vocab] */
  char *piece;              /* detokenizer output */
  size_t piece_cap;
  int32_t *top_ids;
  float *top_lps;
  il__req **snap;           /* [snap_cap]: il__snapshot */
  bool *snap_cancel;
  /* speculative decoding (o.draft): per slot */
  int32_t kmax;             /* the longest draft */
  int32_t *dtok;            /* [n_slots x n_ctx]: the draft cache's tokens */
  int32_t *dlen;            /* [n_slots] */
  int32_t *dk;              /* [n_slots]: tokens drafted this step */
  int32_t *dd;              /* [n_slots x kmax]: them */
  float *dq;                /* [n_slots x kmax x n_vocab]: the draft's distributions */
  float *dl;                /* [n_slots x n_vocab]: the draft's logits */
  il_batch_entry *dbatch;   /* [step_tokens + n_slots] */
  float *pt, *scratch;      /* [n_vocab] */
  int32_t snap_cap;         /* waiting plus admitted requests: max_queue + 2 x slots */
  double step_t0;           /* the running step's forward pass started (TTFT parts) */
  uint64_t step_no;         /* steps built so far, the running one included */
};

void il_sched_params_from_request(const il_request_params *rp, il_sched_params *p) {
  memset(p, 0, sizeof *p);
  p->sampling = rp->sampling;
  p->n = 1;
  p->logprobs = -1;
  p->ignore_eos = rp->ignore_eos;
}

const il_engine *il_sched_engine(const il_sched *s) { return s->e; }

static void il__gauges_locked(il_sched *s);

il_status il_sched_new(il_engine *e, const il_sched_opts *opts, il_sched **out) {
  *out = NULL;
  /* checked before anything is allocated, so a refusal has nothing to undo */
  if (opts && opts->draft &&
      (opts->n_draft < 0 || opts->n_draft > IL_SPEC_DRAFT_MAX || !e->cfg.logits_all || opts->draft->n_seq < e->n_seq ||
       opts->draft->n_ctx < e->n_ctx))
    return il_error(IL_ERR_INVALID_ARG, "speculative decoding: --draft 0 to %d, the engine with logits_all, the draft "
                    "with as many sequences and as long a context", IL_SPEC_DRAFT_MAX);
  il_sched *s = il_mem_calloc(IL_MEM_SCHEDULER, sizeof *s, "scheduler");
  if (!s) return IL_ERR_OOM;
  s->e = e;
  s->o = opts ? *opts : (il_sched_opts){0};
  s->n_slots = e->n_seq;
  s->n_ctx = e->n_ctx;
  s->n_vocab = e->model->hp.n_vocab;
  if (s->o.max_queue <= 0) s->o.max_queue = 4 * s->n_slots;
  if (s->o.step_tokens <= 0) s->o.step_tokens = e->n_batch;
  if (s->o.step_tokens < s->n_slots) s->o.step_tokens = s->n_slots;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->next_id = 1;
  s->st.n_slots = s->n_slots;
  s->st.n_ctx = s->n_ctx;
  s->st.spec = s->o.draft != NULL;
  s->piece_cap = il_vocab_max_piece(e->vocab) + 8;
  const size_t ns = (size_t)s->n_slots, st = (size_t)s->o.step_tokens;
  s->slot_owner = il_mem_calloc(IL_MEM_SCHEDULER, sizeof *s->slot_owner * ns, "scheduler slots");
  s->slot_tokens = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns * (size_t)s->n_ctx, "scheduler slot tokens");
  s->slot_len = il_mem_calloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns, "scheduler slot lengths");
  s->batch = il_mem_alloc(IL_MEM_STAGING, sizeof *s->batch * (st + ns * (size_t)IL_SPEC_DRAFT_MAX), "scheduler batch");
  s->kmax = s->o.draft ? (s->o.n_draft > 0 ? s->o.n_draft : IL_SPEC_ADAPTIVE_MAX) : 0;
  const size_t nvz = (size_t)s->n_vocab, km = (size_t)s->kmax;
  s->logits = il_mem_alloc(IL_MEM_STAGING, sizeof(float) * ns * (km + 1) * nvz, "scheduler logits");
  if (s->o.draft) {
    s->dtok = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns * (size_t)s->n_ctx, "draft slot tokens");
    s->dlen = il_mem_calloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns, "draft slot lengths");
    s->dk = il_mem_calloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns, "draft lengths");
    s->dd = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(int32_t) * ns * km, "drafted tokens");
    s->dq = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * ns * km * nvz, "draft distributions");
    s->dl = il_mem_alloc(IL_MEM_STAGING, sizeof(float) * ns * nvz, "draft logits");
    s->dbatch = il_mem_alloc(IL_MEM_STAGING, sizeof *s->dbatch * (st + ns), "draft batch");
    s->pt = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * nvz, "target distribution");
    s->scratch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * nvz, "residual distribution");
  }
  const bool spec_ok = !s->o.draft || (s->dtok && s->dlen && s->dk && s->dd && s->dq && s->dl && s->dbatch && s->pt && s->scratch);
  s->piece = il_mem_alloc(IL_MEM_SCHEDULER, s->piece_cap, "scheduler piece");
  s->top_ids = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(int32_t) * IL_SCHED_MAX_TOP_LOGPROBS, "scheduler top ids");
  s->top_lps = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(float) * IL_SCHED_MAX_TOP_LOGPROBS, "scheduler top logprobs");
  s->snap_cap = s->o.max_queue + 2 * s->n_slots;
  s->snap = il_mem_alloc(IL_MEM_SCHEDULER, sizeof *s->snap * (size_t)s->snap_cap, "scheduler snapshot");
  s->snap_cancel = il_mem_alloc(IL_MEM_SCHEDULER, sizeof *s->snap_cancel * (size_t)s->snap_cap, "scheduler snapshot");
  if (!spec_ok || !s->snap || !s->snap_cancel || !s->slot_owner || !s->slot_tokens || !s->slot_len || !s->batch || !s->logits || !s->piece ||
      !s->top_ids || !s->top_lps) {
    il_sched_free(s);
    return IL_ERR_OOM;
  }
  il__gauges_locked(s); /* the block counts before the first step (no other thread yet) */
  *out = s;
  return IL_OK;
}

/* ---- requests ---- */

static void il__req_free(il__req *r) {
  if (!r) return;
  if (r->choices)
    for (int32_t i = 0; i < r->p.n; i++) {
      il_sampler_free(r->choices[i].sampler);
      il_sampler_free(r->choices[i].dsampler);
      il_grammar_state_free(r->choices[i].grammar);
      il_detok_free(r->choices[i].detok);
      il_mem_free(r->choices[i].pending);
    }
  il_mem_free(r->choices);
  il_mem_free(r->prompt);
  il_grammar_free(r->p.grammar);
  il_mem_free(r);
}

static il_status il__submit_check(il_sched *s, int32_t n_prompt, const il_sched_params *p);
static il_status il__submit(il_sched *s, il__req *r, const int32_t *prompt, int32_t n_prompt, const il_sched_params *p,
                            il_sched_fn fn, void *ud, uint64_t *id);

il_status il_sched_submit(il_sched *s, const int32_t *prompt, int32_t n_prompt, const il_sched_params *p,
                          il_sched_fn fn, void *ud, uint64_t *id) {
  il_status vst = il__submit_check(s, n_prompt, p);
  if (vst != IL_OK) {
    il_grammar_free(p->grammar); /* owned from here on, also when refused */
    return vst;
  }
  il__req *r = il_mem_calloc(IL_MEM_SCHEDULER, sizeof *r, "request");
  if (!r) {
    il_grammar_free(p->grammar);
    return IL_ERR_OOM;
  }
  return il__submit(s, r, prompt, n_prompt, p, fn, ud, id);
}

static il_status il__submit_check(il_sched *s, int32_t n_prompt, const il_sched_params *p) {
  if (n_prompt <= 0) return il_error(IL_ERR_INVALID_ARG, "prompt: no tokens");
  if (p->grammar && !p->grammar_vocab) return il_error(IL_ERR_INVALID_ARG, "grammar: no vocabulary index");
  if (p->n < 1 || p->n > IL_SCHED_MAX_N)
    return il_error(IL_ERR_INVALID_ARG, "n: %d is out of range [1, %d]", p->n, IL_SCHED_MAX_N);
  if (p->max_tokens < 0) return il_error(IL_ERR_INVALID_ARG, "max_tokens: %d must be at least 1", p->max_tokens);
  if (p->n_stop < 0 || p->n_stop > IL_SCHED_MAX_STOP)
    return il_error(IL_ERR_INVALID_ARG, "stop: at most %d strings", IL_SCHED_MAX_STOP);
  if (p->logprobs > IL_SCHED_MAX_TOP_LOGPROBS)
    return il_error(IL_ERR_INVALID_ARG, "logprobs: %d is more than %d", p->logprobs, IL_SCHED_MAX_TOP_LOGPROBS);
  if (n_prompt >= s->n_ctx)
    return il_error(IL_ERR_INVALID_ARG,
                    "the prompt has %d tokens, but the context is %d per sequence (leave room for at least one "
                    "generated token)", n_prompt, s->n_ctx);
  if (p->max_tokens > 0 && (int64_t)n_prompt + p->max_tokens > s->n_ctx)
    return il_error(IL_ERR_INVALID_ARG,
                    "prompt (%d tokens) + max_tokens (%d) = %d is more than the context of %d tokens per sequence; "
                    "lower max_tokens to at most %d", n_prompt, p->max_tokens, n_prompt + p->max_tokens, s->n_ctx,
                    s->n_ctx - n_prompt);
  return IL_OK;
}

static il_status il__submit(il_sched *s, il__req *r, const int32_t *prompt, int32_t n_prompt, const il_sched_params *p,
                            il_sched_fn fn, void *ud, uint64_t *id) {
  r->p = *p;
  for (int32_t i = 0; i < r->p.n_stop; i++) r->p.stop[i][IL_SCHED_MAX_STOP_LEN - 1] = 0;
  r->n_prompt = n_prompt;
  r->max_tokens = p->max_tokens > 0 ? p->max_tokens : s->n_ctx - n_prompt;
  r->fn = fn;
  r->ud = ud;
  r->prompt = il_mem_alloc(IL_MEM_SCHEDULER, sizeof(int32_t) * (size_t)n_prompt, "request prompt");
  r->choices = il_mem_calloc(IL_MEM_SCHEDULER, sizeof *r->choices * (size_t)p->n, "request choices");
  il_status st = r->prompt && r->choices ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) memcpy(r->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
  size_t max_stop = 0;
  for (int32_t i = 0; i < r->p.n_stop; i++)
    if (strlen(r->p.stop[i]) > max_stop) max_stop = strlen(r->p.stop[i]);
  for (int32_t i = 0; st == IL_OK && i < p->n; i++) {
    il__choice *c = &r->choices[i];
    c->req = r;
    c->index = i;
    c->slot = -1;
    il_sampler_params sp = p->sampling;
    sp.seed += (uint64_t)i;
    st = il_sampler_new(&sp, s->n_vocab, &c->sampler);
    if (st == IL_OK && p->grammar) st = il_grammar_state_new(p->grammar, p->grammar_vocab, &c->grammar);
    if (st == IL_OK && c->grammar) st = il_sampler_set_grammar(c->sampler, c->grammar);
    if (st == IL_OK && s->o.draft && !p->grammar) { /* a grammar-constrained choice does not draft */
      il_sampler_params dp = sp;
      dp.seed ^= 0x9e3779b97f4a7c15ull; /* the draft's draws independent of the target's */
      st = il_sampler_new(&dp, s->n_vocab, &c->dsampler);
      c->dcur = s->o.n_draft > 0 ? s->o.n_draft : IL_SPEC_ADAPTIVE_START;
    }
    /* the text continues the prompt the client holds: its first piece keeps its leading space
     * (SentencePiece's marker), as llama.cpp's server and `run` print it */
    if (st == IL_OK) st = il_detok_new(s->e->vocab, false, prompt, (size_t)n_prompt, &c->detok);
    /* pending holds at most a stop string's length plus one detokenizer output */
    if (st == IL_OK && !(c->pending = il_mem_alloc(IL_MEM_SCHEDULER, max_stop + s->piece_cap + 1, "stop buffer")))
      st = IL_ERR_OOM;
  }
  if (st != IL_OK) {
    il__req_free(r);
    return st;
  }
  r->t_submit = il_time_now();
  pthread_mutex_lock(&s->mu);
  if (s->n_waiting >= s->o.max_queue) {
    s->st.rejected_busy++;
    int32_t q = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    il__req_free(r);
    return il_error(IL_ERR_BUSY, "all %d sequence slots are busy and %d requests are already waiting (--max-queue)",
                    s->n_slots, q);
  }
  r->id = s->next_id++;
  if (s->tail) s->tail->next = r;
  else s->head = r;
  s->tail = r;
  s->n_waiting++;
  s->st.waiting = s->n_waiting;
  if (id) *id = r->id;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return IL_OK;
}

void il_sched_cancel(il_sched *s, uint64_t id) {
  pthread_mutex_lock(&s->mu);
  for (il__req *r = s->head; r; r = r->next)
    if (r->id == id) {
      r->cancelled = true;
      pthread_cond_signal(&s->cv);
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

/* ---- histograms ---- */

static void il__hist_add(il_sched_hist *h, double v) {
  int i = 0;
  while (i < IL_SCHED_NBUCKETS && v > il_sched_buckets[i]) i++;
  h->count[i]++;
  h->n++;
  h->sum += v;
}

/* ---- gauges ---- */

/* Recomputes running, slots in use and live KV cells. Engine thread, with mu held: called
 * whenever a choice or request ends, so a client that has its answer never reads a gauge that
 * still counts it. */
static void il__gauges_locked(il_sched *s) {
  int32_t used = 0, running = 0;
  int64_t cells = 0;
  for (int32_t i = 0; i < s->n_slots; i++)
    if (s->slot_owner[i]) {
      used++;
      cells += s->slot_owner[i]->n_past;
    }
  for (il__req *r = s->head; r; r = r->next) running += r->admitted && r->n_done < r->p.n;
  s->st.slots_used = used;
  s->st.running = running;
  s->st.kv_cells_used = cells;
  s->st.kv_paged = s->e->kv.paged;
  s->st.kv_block = s->e->kv.paged ? s->e->kv.block : s->n_ctx;
  s->st.kv_blocks_total = s->n_slots;
  s->st.kv_blocks_free = s->n_slots - used;
  if (s->e->kv.paged) { /* the pool's pages: a finished slot's cached prefix still holds its own */
    il_kv_cache_stats ks;
    il_kv_cache_stats_get(&s->e->kv, 1, &ks);
    s->st.kv_blocks_total = ks.blocks_total;
    s->st.kv_blocks_free = ks.blocks_free;
    s->st.prefix_cache = il_kv_cache_prefix_enabled(&s->e->kv);
    s->st.prefix_cache_blocks = ks.blocks_cached;
    s->st.prefix_cache_blocks_evictable = ks.blocks_evictable;
    s->st.prefix_cache_bytes = ks.bytes_cached;
    s->st.prefix_cache_evictions = ks.evictions;
  }
}

/* ---- finishing ---- */

static void il__emit(il__choice *c, int32_t token, const char *text, size_t len, float lp, int32_t n_top,
                     const int32_t *ids, const float *lps) {
  il_sched_event ev = {.choice = c->index, .token = token, .text = text, .len = len, .logprob = lp,
                       .n_top = n_top, .top_ids = ids, .top_logprobs = lps, .finish = c->finish};
  c->req->fn(c->req->ud, &ev);
}

/* Prefix cache: indexes the full blocks of the slot's first n cells, then gives the slot's
 * blocks back to the pool, where the indexed ones stay until evicted. A failure only loses the
 * reuse, never the request: the error is logged and cleared. */
static void il__prefix_release(il_sched *s, int32_t slot, int32_t n) {
  const int32_t *t = s->slot_tokens + (size_t)slot * (size_t)s->n_ctx;
  il_status st = il_kv_cache_prefix_store(&s->e->kv, slot, t, n);
  if (st == IL_OK) st = il_engine_seq_remove(s->e, slot);
  if (st != IL_OK) {
    il_log(IL_LOG_WARN, "prefix cache: slot %d: %s", slot, il_error_detail());
    il_error_clear();
  }
  s->slot_len[slot] = 0;
}

/* Frees the choice's slot (its cells stay valid for prefix reuse: in the slot, or indexed in the
 * prefix cache) and sends its last event. */
static void il__finish_choice(il_sched *s, il__choice *c, il_finish_reason why, const char *text, size_t len) {
  if (c->state == IL__DONE) return;
  if (c->slot >= 0) {
    s->slot_owner[c->slot] = NULL;
    s->slot_len[c->slot] = c->n_past;
    /* after a device error nothing new is indexed: the cells of the failed pass are suspect */
    if (il_kv_cache_prefix_enabled(&s->e->kv)) il__prefix_release(s, c->slot, why == IL_FINISH_ERROR ? 0 : c->n_past);
  }
  c->state = IL__DONE;
  c->finish = why;
  il__emit(c, -1, text, len, 0, 0, NULL, NULL);
  il__req *r = c->req;
  r->n_done++;
  double now = il_time_now();
  pthread_mutex_lock(&s->mu);
  s->st.finished[why]++;
  if (c->n_gen > 1) il__hist_add(&s->st.tpot, (c->t_last - c->t_first) / (c->n_gen - 1));
  if (!r->admitted) {
    /* cancelled while waiting */
    r->admitted = true;
    s->n_waiting--;
    s->st.waiting = s->n_waiting;
  }
  if (r->n_done == r->p.n) {
    s->st.requests_finished++;
    il__hist_add(&s->st.e2e, now - r->t_submit);
  }
  il__gauges_locked(s);
  pthread_mutex_unlock(&s->mu);
}

/* After every choice of r is done: the final event, then r leaves the list and is freed. */
static void il__retire(il_sched *s, il__req *r) {
  int32_t n_gen = 0;
  for (int32_t i = 0; i < r->p.n; i++) n_gen += r->choices[i].n_gen;
  il_sched_event ev = {.choice = -1, .token = -1, .done = true, .n_prompt = r->n_prompt, .n_gen = n_gen,
                       .n_cached = r->n_cached, .t_admitted = r->t_admitted, .t_first_step = r->t_first ? r->t_first_step : 0,
                       .prefill_chunks = r->prefill_chunks};
  for (int32_t i = 0; i < r->p.n; i++) ev.n_drafted += r->choices[i].spec_drafted, ev.n_accepted += r->choices[i].spec_accepted;
  r->fn(r->ud, &ev);
  pthread_mutex_lock(&s->mu);
  il__req **pp = &s->head, *prev = NULL;
  while (*pp && *pp != r) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp) {
    *pp = r->next;
    if (s->tail == r) s->tail = prev;
  }
  pthread_mutex_unlock(&s->mu);
  il__req_free(r);
}

/* ---- text: detokenizer output through the stop-string filter ---- */

/* Appends piece to the choice's pending text and emits what can no longer be part of a stop
 * string. Returns true when a stop string matched (the text before it was emitted). */
static bool il__text(il_sched *s, il__choice *c, int32_t token, const char *piece, size_t n, float lp, int32_t n_top,
                     bool final) {
  const il__req *r = c->req;
  memcpy(c->pending + c->pending_len, piece, n);
  c->pending_len += n;
  size_t len = c->pending_len, emit = len, cut = len;
  bool matched = false;
  for (int32_t i = 0; i < r->p.n_stop; i++) {
    const char *st = r->p.stop[i];
    size_t sl = strlen(st);
    if (!sl) continue;
    for (size_t at = 0; at + sl <= len; at++)
      if (!memcmp(c->pending + at, st, sl)) {
        if (at < cut) cut = at;
        matched = true;
        break;
      }
  }
  if (matched) {
    emit = cut;
  } else if (!final) {
    /* hold back the longest tail that is a proper prefix of a stop string */
    for (int32_t i = 0; i < r->p.n_stop; i++) {
      size_t sl = strlen(r->p.stop[i]);
      for (size_t k = sl - 1 < len ? sl - 1 : len; k > 0; k--)
        if (!memcmp(c->pending + len - k, r->p.stop[i], k)) {
          if (len - k < emit) emit = len - k;
          break;
        }
    }
  }
  if (token >= 0 || emit) il__emit(c, token, c->pending, emit, lp, n_top, s->top_ids, s->top_lps);
  memmove(c->pending, c->pending + emit, len - emit);
  c->pending_len = len - emit;
  if (matched) c->pending_len = 0;
  return matched;
}

/* Log-softmax of the chosen token and the n_top best (temperature 1, raw logits). */
static float il__logprobs(il_sched *s, const float *l, int32_t tok, int32_t n_top) {
  float mx = l[0];
  for (int32_t i = 1; i < s->n_vocab; i++)
    if (l[i] > mx) mx = l[i];
  double sum = 0;
  for (int32_t i = 0; i < s->n_vocab; i++) sum += exp((double)(l[i] - mx));
  const float lse = mx + (float)log(sum);
  int32_t k = 0;
  for (int32_t i = 0; i < s->n_vocab && n_top > 0; i++) {
    if (k == n_top && l[i] <= l[s->top_ids[k - 1]]) continue;
    int32_t j = k < n_top ? k++ : k - 1;
    while (j > 0 && l[s->top_ids[j - 1]] < l[i]) {
      s->top_ids[j] = s->top_ids[j - 1];
      j--;
    }
    s->top_ids[j] = i;
  }
  for (int32_t i = 0; i < k; i++) s->top_lps[i] = l[s->top_ids[i]] - lse;
  return l[tok] - lse;
}

/* The request's first token: its time to first token in parts (once per request). */
static void il__ttft_parts_locked(il_sched *s, il__req *r, double now) {
  r->t_first = now;
  r->t_first_step = s->step_t0;
  il__hist_add(&s->st.req_queue, r->t_admitted - r->t_submit);
  il__hist_add(&s->st.req_prefill, r->t_first_step - r->t_admitted);
  il__hist_add(&s->st.req_first_decode, now - r->t_first_step);
  il__hist_add(&s->st.req_ttft, now - r->t_submit);
  il__hist_add(&s->st.req_admit_to_first, now - r->t_admitted);
}

static void il__took(il_sched *s, il__choice *c, int32_t tok, const float *row, double now);

/* One sampled token for choice c from its logits row. */
static void il__sampled(il_sched *s, il__choice *c, const float *row, double now) {
  il__req *r = c->req;
  int32_t tok = il_sampler_sample(c->sampler, row);
  if (il_sampler_status(c->sampler) != IL_OK) {
    /* the grammar cannot go on (its work space, or no token continues it) */
    il_log(IL_LOG_WARN, "request %llu: %s", (unsigned long long)r->id, il_error_detail());
    il__finish_choice(s, c, IL_FINISH_ERROR, NULL, 0);
    return;
  }
  il_sampler_accept(c->sampler, tok);
  il__took(s, c, tok, row, now);
}

/* Token tok (drawn from row and accepted into the sampler) for choice c: counted, detokenized,
 * checked against end of generation, stop strings and the limits; then the next to feed, or the
 * choice finishes. */
static void il__took(il_sched *s, il__choice *c, int32_t tok, const float *row, double now) {
  il__req *r = c->req;
  c->n_gen++;
  if (c->n_gen == 1) {
    c->t_first = now;
    pthread_mutex_lock(&s->mu);
    il__hist_add(&s->st.ttft, now - r->t_submit);
    if (!r->t_first) il__ttft_parts_locked(s, r, now);
    pthread_mutex_unlock(&s->mu);
  }
  c->t_last = now;
  pthread_mutex_lock(&s->mu);
  s->st.gen_tokens++;
  pthread_mutex_unlock(&s->mu);
  if (il_vocab_is_eog(s->e->vocab, tok) && (!r->p.ignore_eos || il_sampler_grammar_finished(c->sampler))) {
    /* what the detokenizer still holds goes out; the choice stops either way */
    size_t n = il_detok_flush(c->detok, s->piece, s->piece_cap);
    il__text(s, c, -1, s->piece, n, 0, 0, true);
    il__finish_choice(s, c, IL_FINISH_STOP, NULL, 0);
    return;
  }
  float lp = 0;
  int32_t n_top = 0;
  if (r->p.logprobs >= 0) {
    n_top = r->p.logprobs;
    lp = il__logprobs(s, row, tok, n_top);
  }
  size_t n = il_detok_push(c->detok, tok, s->piece, s->piece_cap);
  if (il__text(s, c, tok, s->piece, n, lp, n_top, false)) {
    il__finish_choice(s, c, IL_FINISH_STOP, NULL, 0);
    return;
  }
  if (c->n_gen >= r->max_tokens || c->n_past >= s->n_ctx) {
    n = il_detok_flush(c->detok, s->piece, s->piece_cap);
    bool stop = il__text(s, c, -1, s->piece, n, 0, 0, true);
    il__finish_choice(s, c, stop ? IL_FINISH_STOP : IL_FINISH_LENGTH, NULL, 0);
    return;
  }
  c->next = tok;
  c->state = IL__DECODE;
}

/* ---- admission ---- */

/* Where a prompt starts in slot `slot`: the number of leading prompt tokens whose cells the slot
 * still holds (at most n_prompt - 1: the last prompt token is always decoded for its logits).
 * il__admit asks it of every slot: its own (the cells are already there) and the others (the
 * prefix is forked into the chosen slot). */
static int32_t il__sched_prefix_lookup(const il_sched *s, int32_t slot, const int32_t *prompt, int32_t n_prompt) {
  const int32_t *t = s->slot_tokens + (size_t)slot * (size_t)s->n_ctx;
  int32_t n = s->slot_len[slot] < n_prompt - 1 ? s->slot_len[slot] : n_prompt - 1, k = 0;
  while (k < n && t[k] == prompt[k]) k++;
  return il_kv_cache_seq_keep(&s->e->kv, slot, k); /* 0 where a sliding-window ring lost the window before k */
}

/* Prefix cache: the first free slot, holding the longest cached prefix of the prompt in whole
 * blocks (at most n_prompt - 1 positions), wherever it was computed. */
static void il__admit_cached(il_sched *s, const il__req *r, int32_t *slot, int32_t *k) {
  int32_t i = 0;
  while (s->slot_owner[i]) i++;
  *slot = i;
  *k = 0;
  if (il_kv_cache_prefix_reuse(&s->e->kv, i, r->prompt, r->n_prompt - 1, k) != IL_OK) {
    il_log(IL_LOG_WARN, "prefix cache: slot %d: %s", i, il_error_detail());
    il_error_clear();
    *k = 0;
    if (il_engine_seq_remove(s->e, i) != IL_OK) { /* a free slot's id is in range: not expected */
      il_log(IL_LOG_WARN, "prefix cache: slot %d: clearing it: %s", i, il_error_detail());
      il_error_clear();
    }
  }
  memcpy(s->slot_tokens + (size_t)i * (size_t)s->n_ctx, r->prompt, sizeof(int32_t) * (size_t)*k);
}

/* Without the prefix cache: the free slot whose own cells share the longest prefix with the
 * prompt, extended by a fork from another slot that shares more. */
static void il__admit_slots(il_sched *s, const il__req *r, int32_t *slot, int32_t *k_out) {
  int32_t best = -1, best_k = -1;
  for (int32_t i = 0; i < s->n_slots; i++) {
    if (s->slot_owner[i]) continue;
    int32_t k = il__sched_prefix_lookup(s, i, r->prompt, r->n_prompt);
    if (k > best_k) {
      best = i;
      best_k = k;
    }
  }
  /* A longer prefix in another slot (a live stream, or a freed slot not chosen: n samples of one
   * prompt, a shared system prompt): fork its cells into the chosen slot and keep the common
   * part. Paged cache: the blocks are shared, copy-on-write; contiguous: copied on the device.
   * Positions below a slot's slot_len are in the cache (admission runs between decodes). */
  int32_t src = -1, src_k = best_k;
  for (int32_t j = 0; j < s->n_slots; j++) {
    if (j == best) continue;
    const int32_t k = il__sched_prefix_lookup(s, j, r->prompt, r->n_prompt);
    if (k > src_k) src = j, src_k = k;
  }
  if (src >= 0) {
    if (il_engine_seq_fork(s->e, src, best) == IL_OK && il_engine_seq_truncate(s->e, best, src_k) == IL_OK) {
      memcpy(s->slot_tokens + (size_t)best * (size_t)s->n_ctx, s->slot_tokens + (size_t)src * (size_t)s->n_ctx,
             sizeof(int32_t) * (size_t)src_k);
      best_k = src_k;
      pthread_mutex_lock(&s->mu);
      s->st.prefix_forks++;
      pthread_mutex_unlock(&s->mu);
    } else {
      il_error_clear(); /* the slot's own prefix (best_k) still holds: prefill the rest */
    }
  }
  *slot = best;
  *k_out = best_k;
}

static void il__admit(il_sched *s, il__choice *c) {
  il__req *r = c->req;
  int32_t best = -1, best_k = -1;
  if (il_kv_cache_prefix_enabled(&s->e->kv)) il__admit_cached(s, r, &best, &best_k);
  else il__admit_slots(s, r, &best, &best_k);
  c->slot = best;
  c->n_past = best_k;
  c->state = IL__PREFILL;
  s->slot_owner[best] = c;
  s->slot_len[best] = best_k;
  for (int32_t i = 0; i < r->n_prompt; i++) il_sampler_accept(c->sampler, r->prompt[i]);
  if (c->index == 0) r->n_cached = best_k;
  double now = il_time_now();
  pthread_mutex_lock(&s->mu);
  if (!r->admitted) {
    r->admitted = true;
    r->t_admitted = now;
    s->n_waiting--;
    s->st.waiting = s->n_waiting;
    il__hist_add(&s->st.queue, now - r->t_submit);
  }
  s->st.prompt_tokens += (uint64_t)r->n_prompt;
  s->st.prompt_tokens_cached += (uint64_t)best_k;
  il__gauges_locked(s);
  pthread_mutex_unlock(&s->mu);
}

/* ---- speculative decoding (engine/spec.h) ---- */

/* Drafts for every decoding choice with a draft sampler: the draft catches up on the slot's
 * context it does not hold (one batch over all slots; its cells past the common prefix are cut
 * first), then proposes one token per slot per round, k rounds. s->dk[slot] = tokens drafted (0:
 * this step decodes plainly). A draft failure only turns drafting off for the step. */
static void il__draft(il_sched *s) {
  const size_t nv = (size_t)s->n_vocab, nc = (size_t)s->n_ctx, km = (size_t)s->kmax;
  int32_t n = 0, n_dec = 0, n_want = 0, room = s->o.step_tokens;
  for (int32_t i = 0; i < s->n_slots; i++) {
    s->dk[i] = 0;
    n_dec += s->slot_owner[i] && s->slot_owner[i]->state == IL__DECODE;
  }
  const double t0 = il_time_now();
  il_status st = IL_OK;
  /* the drafted entries come out of the step's budget: at most an equal share per choice */
  const int32_t share = n_dec > 0 ? (s->o.step_tokens - n_dec) / n_dec : 0;
  for (int32_t i = 0; i < s->n_slots && st == IL_OK; i++) {
    il__choice *c = s->slot_owner[i];
    if (!c || c->state != IL__DECODE || !c->dsampler) continue;
    int32_t k = c->dcur;
    const int32_t left = c->req->max_tokens - c->n_gen - 1, ctx_left = s->n_ctx - c->n_past - 1;
    if (k > left) k = left;
    if (k > ctx_left) k = ctx_left;
    if (k > share) k = share;
    if (k > s->kmax) k = s->kmax;
    if (k <= 0) continue;
    int32_t *t = s->slot_tokens + (size_t)i * nc, *dt = s->dtok + (size_t)i * nc;
    t[c->n_past] = c->next; /* the context: the slot's cells and the token to feed */
    int32_t common = 0;
    while (common < s->dlen[i] && common < c->n_past && dt[common] == t[common]) common++;
    if (common < s->dlen[i]) st = il_engine_seq_truncate(s->o.draft, i, common);
    const int32_t need = c->n_past + 1 - common;
    if (st != IL_OK || need > room) { /* catching up does not fit this step: plain decode */
      s->dlen[i] = st == IL_OK ? common : 0;
      continue;
    }
    for (int32_t pos = common; pos <= c->n_past; pos++) {
      s->dbatch[n++] = (il_batch_entry){t[pos], i, pos, pos == c->n_past};
      dt[pos] = t[pos];
    }
    room -= need;
    s->dlen[i] = c->n_past + 1;
    s->dk[i] = k;
    n_want++;
  }
  if (st == IL_OK && n > 0) st = il_engine_decode(s->o.draft, s->dbatch, n, s->dl);
  /* proposals, round by round: round r's logits rows are the slots drafting more than r
   * tokens, in slot order (the catch-up's for r = 0, the previous round's entries after) */
  for (int32_t round = 0; st == IL_OK && n_want > 0; round++) {
    int32_t row = 0, nb = 0;
    for (int32_t i = 0; i < s->n_slots; i++) {
      il__choice *c = s->slot_owner[i];
      if (s->dk[i] <= round) continue;
      const bool greedy = c->req->p.sampling.temp <= 0;
      if (round == 0)
        il_spec_draft_history(c->dsampler, &c->req->p.sampling, s->slot_tokens + (size_t)i * nc, c->n_past + 1);
      const int32_t d = il_spec_propose(c->dsampler, greedy, s->dl + (size_t)row++ * nv,
                                        s->dq + ((size_t)i * km + (size_t)round) * nv);
      il_sampler_accept(c->dsampler, d);
      s->dd[(size_t)i * km + (size_t)round] = d;
      if (round + 1 < s->dk[i]) {
        const int32_t pos = c->n_past + 1 + round;
        s->dbatch[nb++] = (il_batch_entry){d, i, pos, true};
        s->dtok[(size_t)i * nc + (size_t)pos] = d;
        s->dlen[i] = pos + 1;
      }
    }
    if (nb == 0) break;
    st = il_engine_decode(s->o.draft, s->dbatch, nb, s->dl);
  }
  if (st != IL_OK) {
    il_log(IL_LOG_WARN, "draft model: %s (this step decodes without drafting)", il_error_detail());
    il_error_clear();
    for (int32_t i = 0; i < s->n_slots; i++) s->dk[i] = 0, s->dlen[i] = 0;
    for (int32_t i = 0; i < s->n_slots; i++)
      if (il_engine_seq_remove(s->o.draft, i) != IL_OK) il_error_clear();
  }
  pthread_mutex_lock(&s->mu);
  s->st.spec_draft_seconds += il_time_now() - t0;
  pthread_mutex_unlock(&s->mu);
}

/* The step's pass returned rows[0, k] for choice c (its fed token and its k drafted ones, at
 * n_past..n_past + k): the accepted tokens and the target's next go out one by one as plain
 * decoding would give them, the cells past the accepted ones are cut. */
static void il__verify(il_sched *s, il__choice *c, const float *rows, double now) {
  const int32_t slot = c->slot, k = s->dk[slot], n0 = c->n_past - 1; /* the fed token's position */
  const size_t nc = (size_t)s->n_ctx, km = (size_t)s->kmax;
  const int32_t *d = s->dd + (size_t)slot * km;
  int32_t out[IL_SPEC_DRAFT_MAX + 1];
  const bool greedy = c->req->p.sampling.temp <= 0;
  const int32_t j = il_spec_verify(c->sampler, greedy, s->n_vocab, rows, s->dq + (size_t)slot * km * (size_t)s->n_vocab,
                                   d, k, s->pt, s->scratch, out);
  if (s->o.n_draft == 0) c->dcur = il_spec_adapt(c->dcur, k, j);
  pthread_mutex_lock(&s->mu);
  s->st.spec_drafted += (uint64_t)k;
  s->st.spec_accepted += (uint64_t)j;
  s->st.spec_verified++;
  pthread_mutex_unlock(&s->mu);
  c->spec_drafted += k;
  c->spec_accepted += j;
  /* the cache holds the fed token and d[0, j); the rest is cut */
  if (il_engine_seq_truncate(s->e, slot, n0 + 1 + j) != IL_OK) {
    il_log(IL_LOG_WARN, "request %llu: %s", (unsigned long long)c->req->id, il_error_detail());
    il__finish_choice(s, c, IL_FINISH_ERROR, NULL, 0);
    return;
  }
  for (int32_t i = 0; i <= j; i++) {
    if (i > 0) { /* d[i - 1] is in the cache at n0 + i */
      s->slot_tokens[(size_t)slot * nc + (size_t)(n0 + i)] = d[i - 1];
      c->n_past = n0 + 1 + i;
      s->slot_len[slot] = c->n_past;
    }
    il__took(s, c, out[i], rows + (size_t)i * (size_t)s->n_vocab, now);
    if (c->state == IL__DONE) break;
  }
  /* a choice that ended early leaves no cell past what it counted (the slot may be reused) */
  if (c->state == IL__DONE && !il_kv_cache_prefix_enabled(&s->e->kv) &&
      il_engine_seq_truncate(s->e, slot, c->n_past) != IL_OK)
    il_error_clear();
}

/* ---- the step ---- */

/* The live requests, in arrival order, copied under the lock: only this thread removes
 * requests, so the pointers stay valid until it retires them. */
static int32_t il__snapshot(il_sched *s) {
  int32_t n = 0;
  pthread_mutex_lock(&s->mu);
  for (il__req *r = s->head; r && n < s->snap_cap; r = r->next) {
    s->snap[n] = r;
    s->snap_cancel[n++] = r->cancelled;
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

il_status il_sched_step(il_sched *s, bool *did_work) {
  if (did_work) *did_work = false;
  /* 1. cancellations */
  int32_t nr = il__snapshot(s);
  for (int32_t k = 0; k < nr; k++) {
    if (!s->snap_cancel[k]) continue;
    il__req *r = s->snap[k];
    for (int32_t i = 0; i < r->p.n; i++) il__finish_choice(s, &r->choices[i], IL_FINISH_CANCELLED, NULL, 0);
    il__retire(s, r);
    if (did_work) *did_work = true;
  }
  /* 2. admission, first come first served */
  nr = il__snapshot(s);
  int32_t free_slots = 0;
  for (int32_t i = 0; i < s->n_slots; i++) free_slots += s->slot_owner[i] == NULL;
  for (int32_t k = 0; k < nr && free_slots > 0; k++) {
    il__req *r = s->snap[k];
    for (int32_t i = 0; i < r->p.n && free_slots > 0; i++)
      if (r->choices[i].state == IL__WAITING) {
        il__admit(s, &r->choices[i]);
        free_slots--;
        if (did_work) *did_work = true;
      }
  }
  /* 3. the batch: decode tokens first (each with its drafted ones), then prompt chunks within
   * the budget */
  int32_t n = 0, budget = s->o.step_tokens;
  if (s->o.draft) il__draft(s);
  for (int32_t i = 0; i < s->n_slots; i++) {
    il__choice *c = s->slot_owner[i];
    if (!c || c->state != IL__DECODE) continue;
    s->batch[n++] = (il_batch_entry){c->next, c->slot, c->n_past, true};
    for (int32_t j = 0; s->o.draft && j < s->dk[i]; j++)
      s->batch[n++] = (il_batch_entry){s->dd[(size_t)i * (size_t)s->kmax + (size_t)j], c->slot, c->n_past + 1 + j, true};
  }
  budget -= n;
  s->step_no++;
  int32_t n_prefill_tokens = 0;
  for (int32_t k = 0; k < nr && budget > 0; k++)
    for (int32_t ci = 0; ci < s->snap[k]->p.n && budget > 0; ci++) {
      il__req *r = s->snap[k];
      il__choice *c = &r->choices[ci];
      if (c->state != IL__PREFILL) continue;
      int32_t left = r->n_prompt - c->n_past, take = left < budget ? left : budget;
      for (int32_t j = 0; j < take; j++) {
        int32_t pos = c->n_past + j;
        bool last = pos == r->n_prompt - 1;
        s->batch[n++] = (il_batch_entry){r->prompt[pos], c->slot, pos, last};
      }
      budget -= take;
      n_prefill_tokens += take;
      if (take > 0 && !r->t_first && r->chunk_step != s->step_no) r->prefill_chunks++, r->chunk_step = s->step_no;
    }
  if (n == 0) return IL_OK; /* nothing in a slot has work */
  if (did_work) *did_work = true;
  /* 4. decode, then advance every entry's choice and sample where logits came back */
  double t0 = il_time_now();
  s->step_t0 = t0;
  il_status st = il_engine_decode(s->e, s->batch, n, s->logits);
  double t1 = il_time_now();
  pthread_mutex_lock(&s->mu);
  s->st.steps++;
  s->st.busy_seconds += t1 - t0;
  s->st.prompt_tokens_computed += (uint64_t)n_prefill_tokens;
  pthread_mutex_unlock(&s->mu);
  int32_t row = 0;
  for (int32_t i = 0; i < n; i++) {
    const il_batch_entry *be = &s->batch[i];
    il__choice *c = s->slot_owner[be->seq];
    if (!c) continue;
    if (st != IL_OK) {
      il__finish_choice(s, c, IL_FINISH_ERROR, NULL, 0);
      continue;
    }
    s->slot_tokens[(size_t)be->seq * (size_t)s->n_ctx + (size_t)be->pos] = be->token;
    c->n_past = be->pos + 1;
    s->slot_len[be->seq] = c->n_past;
    if (be->logits) {
      /* the prompt is in the cache: index it now, so requests admitted while this one runs
       * share its blocks (the slot's tokens up to here are written, entries run in order) */
      if (c->state == IL__PREFILL && il_kv_cache_prefix_enabled(&s->e->kv) &&
          il_kv_cache_prefix_store(&s->e->kv, be->seq, s->slot_tokens + (size_t)be->seq * (size_t)s->n_ctx,
                                   c->n_past) != IL_OK) {
        il_log(IL_LOG_WARN, "prefix cache: slot %d: %s", be->seq, il_error_detail());
        il_error_clear();
      }
      if (c->state == IL__DECODE && s->o.draft && s->dk[be->seq] > 0) {
        const int32_t k = s->dk[be->seq];
        il__verify(s, c, s->logits + (size_t)row * (size_t)s->n_vocab, t1);
        i += k; /* the drafted entries are this choice's */
        row += k + 1;
        continue;
      }
      il__sampled(s, c, s->logits + (size_t)row * (size_t)s->n_vocab, t1);
      row++;
    }
  }
  /* 5. retire finished requests; refresh the gauges */
  for (int32_t k = 0; k < nr; k++)
    if (s->snap[k]->n_done == s->snap[k]->p.n) il__retire(s, s->snap[k]);
  pthread_mutex_lock(&s->mu);
  il__gauges_locked(s);
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* ---- the thread ---- */

static void *il__sched_main(void *arg) {
  il_sched *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop) break;
    bool work = false;
    il_status st = il_sched_step(s, &work);
    if (st != IL_OK) il_log(IL_LOG_WARN, "scheduler step failed: %s", il_error_detail());
    if (work) continue;
    pthread_mutex_lock(&s->mu);
    bool pending = false;
    for (il__req *r = s->head; r && !pending; r = r->next) pending = !r->admitted || r->cancelled;
    /* nothing runs: sleep until a submit or cancel (or a stop) signals */
    if (!s->stop && !pending) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
  }
  return NULL;
}

il_status il_sched_start(il_sched *s) {
  if (s->started) return IL_OK;
  s->stop = false;
  if (pthread_create(&s->thread, NULL, il__sched_main, s))
    return il_error(IL_ERR_INTERNAL, "scheduler: cannot start its thread");
  s->started = true;
  return IL_OK;
}

void il_sched_stop(il_sched *s) {
  if (!s->started) return;
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  s->started = false;
}

void il_sched_stats_get(il_sched *s, il_sched_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->st;
  pthread_mutex_unlock(&s->mu);
}

void il_sched_free(il_sched *s) {
  if (!s) return;
  il_sched_stop(s);
  while (s->head) {
    il__req *r = s->head;
    for (int32_t i = 0; r->choices && i < r->p.n; i++) il__finish_choice(s, &r->choices[i], IL_FINISH_CANCELLED, NULL, 0);
    il__retire(s, r);
  }
  il_mem_free(s->slot_owner);
  il_mem_free(s->slot_tokens);
  il_mem_free(s->slot_len);
  il_mem_free(s->batch);
  il_mem_free(s->logits);
  il_mem_free(s->piece);
  il_mem_free(s->top_ids);
  il_mem_free(s->top_lps);
  il_mem_free(s->snap);
  il_mem_free(s->snap_cancel);
  il_mem_free(s->dtok);
  il_mem_free(s->dlen);
  il_mem_free(s->dk);
  il_mem_free(s->dd);
  il_mem_free(s->dq);
  il_mem_free(s->dl);
  il_mem_free(s->dbatch);
  il_mem_free(s->pt);
  il_mem_free(s->scratch);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  il_mem_free(s);
}
