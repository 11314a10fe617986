/* tests/test_sched: the continuous-batching scheduler on builtin:tiny.
 *
 * Batched equals alone: every request run among others (more requests than slots, chunked
 * prefill with a small step budget) gets exactly the tokens it gets when run alone, and a
 * request run alone gets exactly what il_engine_generate (the `run` loop) gives. Then stop
 * strings, max_tokens, n choices, cancellation, admission errors, prefix reuse, and that a
 * long prompt does not stall a running stream.
 */
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/sched.h"
#include "harness.h"
#include "memory/mem.h"

#define MAXTOK 256

typedef struct {
  int32_t tokens[IL_SCHED_MAX_N][MAXTOK];
  int32_t n_tokens[IL_SCHED_MAX_N];
  char text[IL_SCHED_MAX_N][4096];
  size_t text_len[IL_SCHED_MAX_N];
  il_finish_reason finish[IL_SCHED_MAX_N];
  int events_after_done;
  bool done;
  int32_t n_prompt, n_gen, n_cached;
  int32_t n_events;
  float last_logprob;
  int32_t last_n_top;
} result;

static void on_event(void *ud, const il_sched_event *ev) {
  result *r = ud;
  if (r->done) r->events_after_done++;
  r->n_events++;
  if (ev->done) {
    r->done = true;
    r->n_prompt = ev->n_prompt;
    r->n_gen = ev->n_gen;
    r->n_cached = ev->n_cached;
    return;
  }
  int c = ev->choice;
  if (ev->token >= 0 && r->n_tokens[c] < MAXTOK) r->tokens[c][r->n_tokens[c]++] = ev->token;
  if (ev->len && r->text_len[c] + ev->len < sizeof r->text[c]) {
    memcpy(r->text[c] + r->text_len[c], ev->text, ev->len);
    r->text_len[c] += ev->len;
  }
  if (ev->token >= 0) {
    r->last_logprob = ev->logprob;
    r->last_n_top = ev->n_top;
  }
  if (ev->finish != IL_FINISH_NONE) r->finish[c] = ev->finish;
}

static il_engine *open_engine(int n_seq) {
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.threads = 2;
  cfg.ctx = 256;
  cfg.n_seq = n_seq;
  cfg.batch = 64;
  il_engine *e = NULL;
  il_status st = il_engine_open(&cfg, &e);
  if (st != IL_OK) {
    fprintf(stderr, "engine: %s\n", il_error_detail());
    return NULL;
  }
  return e;
}

static void run_all(il_sched *s, result *rs, int n) {
  for (int guard = 0; guard < 100000; guard++) {
    bool work = false;
    IL_CHECK_OK(il_sched_step(s, &work));
    bool all = true;
    for (int i = 0; i < n; i++) all = all && rs[i].done;
    if (all) return;
  }
  IL_CHECK(!"requests did not finish");
}

static int32_t prompt_of(il_engine *e, int i, int32_t **out) {
  char text[512];
  int len = snprintf(text, sizeof text, "Once upon a time %d", i);
  for (int k = 0; k < i % 4; k++) len += snprintf(text + len, sizeof text - (size_t)len, " there was a dog %d", k);
  int32_t n = 0;
  if (il_engine_tokenize(e, text, true, true, out, &n) != IL_OK) return 0;
  return n;
}

static il_sched_params params(il_engine *e, uint64_t seed, int32_t max_tokens) {
  (void)e;
  il_sched_params p;
  const il_request_params rp = il_request_default_params();
  il_sched_params_from_request(&rp, &p);
  p.sampling.seed = seed;
  p.sampling.temp = 0.9f;
  p.max_tokens = max_tokens;
  return p;
}

/* the scheduler, alone and batched, against the run loop */
static void test_batched_equals_alone(void) {
  enum { N = 10 };
  il_engine *e = open_engine(4);
  IL_CHECK(e != NULL);
  if (!e) return;
  static result alone[N], batched[N];
  memset(alone, 0, sizeof alone);
  memset(batched, 0, sizeof batched);
  int32_t *prompts[N];
  int32_t n_prompts[N];
  for (int i = 0; i < N; i++) n_prompts[i] = prompt_of(e, i, &prompts[i]);

  il_sched *s = NULL;
  il_sched_opts o = {.max_queue = 32, .step_tokens = 8};
  IL_CHECK_OK(il_sched_new(e, &o, &s));
  for (int i = 0; i < N; i++) {
    il_sched_params p = params(e, 100 + (uint64_t)i, 20 + i);
    IL_CHECK_OK(il_sched_submit(s, prompts[i], n_prompts[i], &p, on_event, &alone[i], NULL));
    run_all(s, &alone[i], 1);
  }
  for (int i = 0; i < N; i++) {
    il_sched_params p = params(e, 100 + (uint64_t)i, 20 + i);
    IL_CHECK_OK(il_sched_submit(s, prompts[i], n_prompts[i], &p, on_event, &batched[i], NULL));
  }
  il_sched_stats st;
  il_sched_stats_get(s, &st);
  IL_CHECK_INT(st.waiting, N);
  run_all(s, batched, N);
  for (int i = 0; i < N; i++) {
    IL_CHECK_INT(batched[i].n_tokens[0], alone[i].n_tokens[0]);
    IL_CHECK(memcmp(batched[i].tokens[0], alone[i].tokens[0], sizeof(int32_t) * (size_t)alone[i].n_tokens[0]) == 0);
    IL_CHECK_INT(batched[i].text_len[0], alone[i].text_len[0]);
    IL_CHECK(alone[i].finish[0] == IL_FINISH_LENGTH || alone[i].finish[0] == IL_FINISH_STOP);
    IL_CHECK_INT(batched[i].finish[0], alone[i].finish[0]);
    IL_CHECK_INT(batched[i].n_prompt, n_prompts[i]);
    IL_CHECK_INT(batched[i].events_after_done, 0);
  }
  IL_CHECK_INT(alone[3].n_tokens[0] <= 23, 1);
  il_sched_stats_get(s, &st);
  IL_CHECK_INT(st.waiting, 0);
  IL_CHECK_INT(st.running, 0);
  IL_CHECK_INT(st.slots_used, 0);
  IL_CHECK_INT(st.requests_finished, 2 * N);
  IL_CHECK_INT(st.ttft.n, 2 * N);
  IL_CHECK(st.prompt_tokens_cached > 0); /* the second round found its prompts in the slots */

  il_sched_free(s);
  for (int i = 0; i < N; i++) il_mem_free(prompts[i]);
  il_engine_free(e);
}

static bool gen_collect(void *ud, int32_t token, const char *text, size_t len) {
  result *r = ud;
  (void)text;
  (void)len;
  if (token >= 0) r->tokens[0][r->n_tokens[0]++] = token;
  return true;
}

static void test_matches_run_loop(void) {
  il_engine *e = open_engine(2);
  if (!e) return;
  int32_t *prompt = NULL;
  int32_t n = prompt_of(e, 5, &prompt);
  il_sched *s = NULL;
  IL_CHECK_OK(il_sched_new(e, NULL, &s));
  static result a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  il_sched_params p = params(e, 7, 30);
  p.ignore_eos = true;
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &a, NULL));
  run_all(s, &a, 1);
  il_sched_free(s);
  il_gen_stats gs;
  il_request_params rp = il_request_default_params();
  rp.sampling = p.sampling;
  rp.n_predict = 30;
  rp.ignore_eos = true;
  IL_CHECK_OK(il_engine_generate(e, prompt, n, &rp, gen_collect, &b, &gs));
  IL_CHECK_INT(a.n_tokens[0], 30);
  IL_CHECK_INT(b.n_tokens[0], 30);
  IL_CHECK(memcmp(a.tokens[0], b.tokens[0], sizeof(int32_t) * 30) == 0);
  IL_CHECK_INT(a.finish[0], IL_FINISH_LENGTH);
  il_mem_free(prompt);
  il_engine_free(e);
}

static void test_stop_n_cancel_admission(void) {
  il_engine *e = open_engine(2);
  if (!e) return;
  int32_t *prompt = NULL;
  int32_t n = prompt_of(e, 1, &prompt);
  il_sched *s = NULL;
  il_sched_opts o = {.max_queue = 2, .step_tokens = 0};
  IL_CHECK_OK(il_sched_new(e, &o, &s));
  static result full, cut;
  memset(&full, 0, sizeof full);
  memset(&cut, 0, sizeof cut);

  /* stop strings: a stop string taken from the middle of the full text ends the text there */
  il_sched_params p = params(e, 11, 40);
  p.ignore_eos = true;
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &full, NULL));
  run_all(s, &full, 1);
  IL_CHECK_INT(full.finish[0], IL_FINISH_LENGTH);
  IL_CHECK_INT(full.n_gen, 40);
  IL_CHECK(full.text_len[0] > 12);
  if (full.text_len[0] > 12) {
    size_t at = full.text_len[0] / 2;
    p.n_stop = 2;
    snprintf(p.stop[0], sizeof p.stop[0], "%s", "\x01never");
    memcpy(p.stop[1], full.text[0] + at, 3);
    p.stop[1][3] = 0;
    IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &cut, NULL));
    run_all(s, &cut, 1);
    IL_CHECK_INT(cut.finish[0], IL_FINISH_STOP);
    const char *first = strstr(full.text[0], p.stop[1]);
    size_t expect = first ? (size_t)(first - full.text[0]) : 0;
    IL_CHECK_INT(cut.text_len[0], expect);
    IL_CHECK(memcmp(cut.text[0], full.text[0], expect) == 0);
    IL_CHECK(cut.n_cached == n - 1); /* same prompt, same slot: all but the last token reused */
  }

  /* n choices: choice i == a single request with seed + i; logprobs */
  static result multi, single[3];
  memset(&multi, 0, sizeof multi);
  memset(single, 0, sizeof single);
  p = params(e, 50, 10);
  p.ignore_eos = true;
  p.n = 3;
  p.logprobs = 2;
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &multi, NULL));
  run_all(s, &multi, 1);
  IL_CHECK(multi.last_logprob <= 0 && multi.last_logprob > -100);
  IL_CHECK_INT(multi.last_n_top, 2);
  IL_CHECK_INT(multi.n_gen, 30);
  for (int i = 0; i < 3; i++) {
    il_sched_params q = params(e, 50 + (uint64_t)i, 10);
    q.ignore_eos = true;
    IL_CHECK_OK(il_sched_submit(s, prompt, n, &q, on_event, &single[i], NULL));
    run_all(s, &single[i], 1);
    IL_CHECK_INT(multi.n_tokens[i], 10);
    IL_CHECK(memcmp(multi.tokens[i], single[i].tokens[0], sizeof(int32_t) * 10) == 0);
  }

  /* cancellation frees the slot at the next step */
  static result long_r, waiting_r;
  memset(&long_r, 0, sizeof long_r);
  memset(&waiting_r, 0, sizeof waiting_r);
  p = params(e, 3, 0);
  p.ignore_eos = true;
  uint64_t id = 0, id2 = 0;
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &long_r, &id));
  for (int i = 0; i < 5; i++) IL_CHECK_OK(il_sched_step(s, NULL));
  il_sched_stats st;
  il_sched_stats_get(s, &st);
  IL_CHECK_INT(st.slots_used, 1);
  IL_CHECK_INT(st.running, 1);
  il_sched_cancel(s, id);
  IL_CHECK_OK(il_sched_step(s, NULL));
  IL_CHECK(long_r.done);
  IL_CHECK_INT(long_r.finish[0], IL_FINISH_CANCELLED);
  il_sched_stats_get(s, &st);
  IL_CHECK_INT(st.slots_used, 0);
  IL_CHECK_INT(st.finished[IL_FINISH_CANCELLED], 1);
  il_sched_cancel(s, id); /* again: ignored */

  /* admission: too long for the context, empty, queue full */
  p = params(e, 3, 250);
  IL_CHECK_INT(il_sched_submit(s, prompt, n, &p, on_event, &waiting_r, NULL), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "max_tokens");
  IL_CHECK_INT(il_sched_submit(s, prompt, 0, &p, on_event, &waiting_r, NULL), IL_ERR_INVALID_ARG);
  p = params(e, 3, 5);
  static result q[3];
  memset(q, 0, sizeof q);
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &q[0], NULL));
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &q[1], &id2));
  IL_CHECK_INT(il_sched_submit(s, prompt, n, &p, on_event, &q[2], NULL), IL_ERR_BUSY);
  il_sched_cancel(s, id2); /* cancelled while waiting */
  run_all(s, q, 2);
  IL_CHECK_INT(q[1].finish[0], IL_FINISH_CANCELLED);
  IL_CHECK_INT(q[0].n_gen >= 1, 1);
  il_sched_stats_get(s, &st);
  IL_CHECK_INT(st.rejected_busy, 1);
  IL_CHECK_INT(st.waiting, 0);

  /* freeing with a request left: it ends with "cancelled" */
  static result left;
  memset(&left, 0, sizeof left);
  IL_CHECK_OK(il_sched_submit(s, prompt, n, &p, on_event, &left, NULL));
  il_sched_free(s);
  IL_CHECK(left.done);
  IL_CHECK_INT(left.finish[0], IL_FINISH_CANCELLED);
  il_mem_free(prompt);
  il_engine_free(e);
}

/* a long prompt arriving while a stream decodes is prefilled in chunks: the stream gets a
 * token at every step */
typedef struct {
  int tokens;
} counter;
static void on_count(void *ud, const il_sched_event *ev) {
  if (ev->token >= 0) ((counter *)ud)->tokens++;
}
/* A request whose prompt extends a live stream's prompt takes that prefix by a fork of the other
 * slot (paged: shared blocks; contiguous: copied cells) and computes only the rest; its tokens
 * equal those of the same request on a fresh engine. */
static void test_prefix_fork(const char *kv, bool no_prefix_cache) {
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.threads = 2, cfg.ctx = 256, cfg.n_seq = 3, cfg.batch = 64;
  cfg.no_prefix_cache = no_prefix_cache;
  snprintf(cfg.kv, sizeof cfg.kv, "%s", kv);
  il_engine *e = NULL, *fresh = NULL;
  IL_CHECK_OK(il_engine_open(&cfg, &e));
  IL_CHECK_OK(il_engine_open(&cfg, &fresh));
  if (!e || !fresh) return;
  int32_t pa[64], pb[70];
  for (int i = 0; i < 64; i++) pa[i] = pb[i] = 1 + (i * 37) % 300;
  for (int i = 64; i < 70; i++) pb[i] = 7 + i;
  il_sched *s = NULL, *s2 = NULL;
  il_sched_opts o = {.max_queue = 8, .step_tokens = 64};
  IL_CHECK_OK(il_sched_new(e, &o, &s));
  IL_CHECK_OK(il_sched_new(fresh, &o, &s2));
  static result ra, rb, rb_alone;
  memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb), memset(&rb_alone, 0, sizeof rb_alone);
  il_sched_params p = params(e, 11, 40);
  p.ignore_eos = true;
  IL_CHECK_OK(il_sched_submit(s, pa, 64, &p, on_event, &ra, NULL));
  for (int i = 0; i < 3; i++) IL_CHECK_OK(il_sched_step(s, NULL)); /* A's prompt is in, A decodes */
  il_sched_params q = params(e, 12, 12);
  q.ignore_eos = true;
  IL_CHECK_OK(il_sched_submit(s, pb, 70, &q, on_event, &rb, NULL));
  run_all(s, &rb, 1);
  run_all(s, &ra, 1);
  il_sched_stats st;
  il_sched_stats_get(s, &st);
  /* the prefix cache (paged, by default) finds A's indexed blocks instead of forking its slot */
  const bool pc = !strcmp(kv, "paged") && !no_prefix_cache;
  IL_CHECK_INT(st.prefix_cache, pc);
  IL_CHECK(pc ? st.prefix_forks == 0 && st.prefix_cache_blocks >= 4 : st.prefix_forks >= 1);
  IL_CHECK_INT(rb.n_cached, 64);
  IL_CHECK_OK(il_sched_submit(s2, pb, 70, &q, on_event, &rb_alone, NULL));
  run_all(s2, &rb_alone, 1);
  IL_CHECK_INT(rb.n_tokens[0], rb_alone.n_tokens[0]);
  IL_CHECK(memcmp(rb.tokens[0], rb_alone.tokens[0], sizeof(int32_t) * (size_t)rb_alone.n_tokens[0]) == 0);
  /* the stream it was forked from goes on unharmed (copy-on-write of its last, shared block) */
  static result ra_alone;
  memset(&ra_alone, 0, sizeof ra_alone);
  IL_CHECK_OK(il_sched_submit(s2, pa, 64, &p, on_event, &ra_alone, NULL));
  run_all(s2, &ra_alone, 1);
  IL_CHECK_INT(ra.n_tokens[0], ra_alone.n_tokens[0]);
  IL_CHECK(memcmp(ra.tokens[0], ra_alone.tokens[0], sizeof(int32_t) * (size_t)ra_alone.n_tokens[0]) == 0);
  printf("prefix fork (%s kv%s): the second request reused %d of its 70 prompt tokens from the live stream (%s); tokens "
         "equal a fresh run\n", kv, no_prefix_cache ? ", --no-prefix-cache" : "", rb.n_cached, pc ? "prefix cache" : "fork");
  il_sched_free(s);
  il_sched_free(s2);
  il_engine_free(e);
  il_engine_free(fresh);
}

static void test_chunked_prefill(void) {
  il_engine *e = open_engine(2);
  if (!e) return;
  int32_t *p1 = NULL;
  int32_t n1 = prompt_of(e, 0, &p1);
  int32_t big[200];
  for (int i = 0; i < 200; i++) big[i] = 1 + (i * 7) % (il_engine_model(e)->hp.n_vocab - 1);
  il_sched *s = NULL;
  il_sched_opts o = {.max_queue = 4, .step_tokens = 16};
  IL_CHECK_OK(il_sched_new(e, &o, &s));
  counter a = {0}, b = {0};
  il_sched_params p = params(e, 1, 40);
  p.ignore_eos = true;
  IL_CHECK_OK(il_sched_submit(s, p1, n1, &p, on_count, &a, NULL));
  while (a.tokens < 2) IL_CHECK_OK(il_sched_step(s, NULL));
  p.max_tokens = 10;
  IL_CHECK_OK(il_sched_submit(s, big, 200, &p, on_count, &b, NULL));
  int before = a.tokens;
  for (int i = 0; i < 10; i++) IL_CHECK_OK(il_sched_step(s, NULL));
  IL_CHECK_INT(a.tokens - before, 10); /* one token per step while the 200-token prompt is prefilled */
  IL_CHECK_INT(b.tokens, 0);           /* 10 steps x 15 tokens < 200: still prefilling */
  il_sched_free(s);
  il_mem_free(p1);
  il_engine_free(e);
}

/* The host memory categories a user reads: opening the engine counts the model's tables under
 * model and the vocabulary under tokenizer; the scheduler's slots and a request under
 * scheduler; each goes back to where it was when its owner is freed. */
static void test_categories(void) {
  const char *names[IL_MEM_CATEGORY_COUNT];
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
    names[c] = il_mem_category_name((il_mem_category)c);
    for (int d = 0; d < c; d++) IL_CHECK(strcmp(names[c], names[d]) != 0);
  }
  IL_CHECK_STR(names[IL_MEM_TOKENIZER], "tokenizer");
  IL_CHECK_STR(names[IL_MEM_SCHEDULER], "scheduler");
  IL_CHECK_STR(names[IL_MEM_SERVER], "server");
  IL_CHECK_STR(names[IL_MEM_MODEL], "model");
  il_mem_stats m0, m1, m2, m3;
  il_mem_stats_get(&m0);
  il_engine *e = open_engine(2);
  if (!e) return;
  il_mem_stats_get(&m1);
  IL_CHECK(m1.current[IL_MEM_MODEL] > m0.current[IL_MEM_MODEL]);
  IL_CHECK(m1.current[IL_MEM_TOKENIZER] > m0.current[IL_MEM_TOKENIZER]);
  IL_CHECK_INT(m1.current[IL_MEM_SCHEDULER], m0.current[IL_MEM_SCHEDULER]);
  IL_CHECK_INT(m1.current[IL_MEM_SERVER], m0.current[IL_MEM_SERVER]);
  il_sched *s = NULL;
  IL_CHECK_OK(il_sched_new(e, NULL, &s));
  il_mem_stats_get(&m2);
  IL_CHECK(m2.current[IL_MEM_SCHEDULER] > m1.current[IL_MEM_SCHEDULER]);
  printf("categories: model %zu B, tokenizer %zu B after open; scheduler %zu B after il_sched_new\n",
         m1.current[IL_MEM_MODEL] - m0.current[IL_MEM_MODEL], m1.current[IL_MEM_TOKENIZER] - m0.current[IL_MEM_TOKENIZER],
         m2.current[IL_MEM_SCHEDULER] - m1.current[IL_MEM_SCHEDULER]);
  il_sched_free(s);
  il_engine_free(e);
  il_mem_stats_get(&m3);
  IL_CHECK_INT(m3.current[IL_MEM_MODEL], m0.current[IL_MEM_MODEL]);
  IL_CHECK_INT(m3.current[IL_MEM_TOKENIZER], m0.current[IL_MEM_TOKENIZER]);
  IL_CHECK_INT(m3.current[IL_MEM_SCHEDULER], m0.current[IL_MEM_SCHEDULER]);
}

int main(void) {
  test_categories();
  test_batched_equals_alone();
  test_matches_run_loop();
  test_stop_n_cancel_admission();
  test_chunked_prefill();
  test_prefix_fork("paged", false);
  test_prefix_fork("paged", true);
  test_prefix_fork("contiguous", false);
  il_mem_stats ms;
  il_mem_stats_get(&ms);
  IL_CHECK_INT(ms.current[IL_MEM_OTHER] + ms.current[IL_MEM_SCHEDULER] + ms.current[IL_MEM_TOKENIZER] +
                   ms.current[IL_MEM_STAGING] + ms.current[IL_MEM_WORKSPACE],
               0);
  return il_test_finish();
}
