/* engine/request: one generation on an engine. See request.h. */
#include "engine/request.h"

#include <stdio.h>
#include <string.h>

#include "core/timer.h"
#include "engine/engine_impl.h"
#include "memory/mem.h"

struct il_request {
  il_engine *e;
  il_request_params p;
  il_sampler *sampler;
  il_detok *detok;
  float *logits;     /* [n_vocab]: the logits the next token is sampled from */
  char *text;        /* [text_cap]: the text returned by the last il_request_next */
  size_t text_cap;
  int32_t pos;       /* position of the next token to sample */
  int32_t pending;   /* sampled but not yet decoded (-1: none) */
  int32_t picked;    /* the token the device sampled from the last decode's logits (-1: none;
                        r->logits holds them instead) */
  bool grammar;      /* a grammar constrains the sampler */
  bool done;
  il_gen_stats stats;
};

il_request_params il_request_default_params(void) {
  return (il_request_params){
      .sampling = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                   .repeat_last_n = 64, .seed = 42},
      .n_predict = 128,
  };
}

void il_request_opts_defaults(il_request_opts *r) {
  memset(r, 0, sizeof *r);
  r->p = il_request_default_params();
}

/* After non-finite logits from entries [0, n): runs them again with the numerics check on (the
 * same KV cells are written with the same values) and adds where the inf/nan first appeared
 * to the error. Returns `err`. */
static il_status il__locate_nonfinite(il_engine *e, const il_batch_entry *batch, int32_t n, il_status err) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", il_error_detail());
  il_numerics *const was = e->fs.numerics;
  il_numerics found;
  il_numerics_reset(&found);
  e->fs.numerics = &found;
  il_status st = il_engine_decode(e, batch, n, NULL);
  e->fs.numerics = was;
  if (st != IL_OK || found.bad_layer < 0) return il_error(err, "%s", msg);
  const char *hint = e->fs.act_type == IL_DTYPE_F16
                         ? " (f16 activations overflow beyond 65504: --dtype bf16 keeps f32's range)"
                         : "";
  if (found.bad_layer >= e->model->hp.n_layer)
    return il_error(err, "%s; the layers' outputs were finite: the output head (%s) produced them%s", msg,
                    found.bad_block, hint);
  return il_error(err, "%s; the first non-finite values (%lld) appear at %s of layer %d (blk.%d)%s", msg,
                  (long long)found.bad_count, found.bad_block, found.bad_layer, found.bad_layer, hint);
}

/* Decodes entries and checks that their logits are finite, naming the op that broke them. */
static il_status il__decode_checked(il_request *r, const il_batch_entry *batch, int32_t n) {
  il_status st = il_engine_decode(r->e, batch, n, r->logits);
  if (st == IL_OK) st = il_logits_check_finite(r->logits, r->e->model->hp.n_vocab, batch[n - 1].pos);
  if (st == IL_ERR_RANGE) st = il__locate_nonfinite(r->e, batch, n, st);
  return st;
}

il_status il_request_new_tokens(il_engine *e, const int32_t *ids, int32_t n, const il_request_params *p,
                                il_request **out) {
  *out = NULL;
  if (n <= 0) return il_error(IL_ERR_INVALID_ARG, "prompt: no tokens (empty prompt and no BOS)");
  if (n >= e->n_ctx)
    return il_error(IL_ERR_RANGE, "prompt: %d tokens do not fit the context of %d (raise --ctx)", n, e->n_ctx);
  const int32_t nv = e->model->hp.n_vocab;
  il_request *r = il_mem_calloc(IL_MEM_SCHEDULER, sizeof *r, "request");
  if (!r) return IL_ERR_OOM;
  r->e = e;
  r->p = *p;
  r->pending = -1;
  r->picked = -1;
  /* room for the longest piece, so a push never leaves text queued (pieces can be longer than
   * any fixed buffer) */
  r->text_cap = il_vocab_max_piece(e->vocab) + 8;
  r->text = il_mem_alloc(IL_MEM_WORKSPACE, r->text_cap, "detokenized text");
  r->logits = il_mem_alloc(IL_MEM_STAGING, sizeof(float) * (size_t)nv, "sampling logits");
  il_batch_entry *batch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *batch * (size_t)n, "prompt batch");
  il_status st = r->text && r->logits && batch ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) st = il_sampler_new(&p->sampling, nv, &r->sampler);
  /* the caller shows the prompt as typed: the text continues it */
  if (st == IL_OK) st = il_detok_new(e->vocab, false, ids, (size_t)n, &r->detok);
  if (st == IL_OK) st = il_engine_seq_remove(e, 0);
  if (st == IL_OK) {
    for (int32_t i = 0; i < n; i++) {
      batch[i] = (il_batch_entry){ids[i], 0, i, i == n - 1};
      il_sampler_accept(r->sampler, ids[i]);
    }
    double t0 = il_time_now();
    st = il__decode_checked(r, batch, n);
    r->stats.prompt_seconds = il_time_now() - t0;
    r->stats.n_prompt = n;
    r->pos = n;
  }
  il_mem_free(batch);
  if (st != IL_OK) {
    il_request_free(r);
    return st;
  }
  *out = r;
  return IL_OK;
}

il_status il_request_new(il_engine *e, const char *prompt, const il_request_params *p, il_request **out) {
  *out = NULL;
  int32_t *ids = NULL, n = 0;
  IL_TRY(il_engine_tokenize(e, prompt, !p->no_bos, !p->no_parse_special, &ids, &n));
  il_status st = il_request_new_tokens(e, ids, n, p, out);
  il_mem_free(ids);
  return st;
}

/* Ends the request: hands back what the detokenizer still holds (an incomplete UTF-8 tail). */
static il_status il__request_end(il_request *r, int32_t *token, const char **text, size_t *len) {
  r->done = true;
  *token = -1;
  *text = r->text;
  *len = il_detok_flush(r->detok, r->text, r->text_cap);
  return IL_OK;
}

il_status il_request_next(il_request *r, int32_t *token, const char **text, size_t *len) {
  *token = -1;
  *text = r->text;
  *len = 0;
  if (r->done) return il__request_end(r, token, text, len);
  const il_request_params *p = &r->p;
  if (p->n_predict >= 0 && r->stats.n_gen >= p->n_predict) return il__request_end(r, token, text, len);
  const double t0 = il_time_now();
  /* greedy with nothing else in the chain: the device picks the token and only its id comes
   * back (il_sampler_sample would take the same argmax of the same logits) */
  const il_sampler_params *sp = &p->sampling;
  const bool on_device = sp->temp <= 0 && sp->repeat_penalty == 1.0f && !r->grammar && il_engine_samples_on_device(r->e);
  if (r->pending >= 0) {
    il_batch_entry one = {r->pending, 0, r->pos - 1, true};
    r->pending = -1;
    il_status st = IL_OK;
    if (on_device) st = il_engine_decode_greedy(r->e, &one, 1, &r->picked);
    /* -1: non-finite logits; decoding again downloads them, so the error names them */
    if (!on_device || (st == IL_OK && r->picked < 0)) st = il__decode_checked(r, &one, 1);
    if (st != IL_OK) {
      r->stats.gen_seconds += il_time_now() - t0;
      return st;
    }
  }
  /* the token for position pos is sampled from the logits of pos - 1, so the last one the
   * context allows is pos == n_ctx: it is returned but not decoded (as llama2.c does) */
  if (r->pos > r->e->n_ctx) return il__request_end(r, token, text, len);
  int32_t tok = r->picked >= 0 ? r->picked : il_sampler_sample(r->sampler, r->logits);
  r->picked = -1;
  il_status sst = il_sampler_status(r->sampler);
  if (sst != IL_OK) {
    r->done = true;
    return sst;
  }
  il_sampler_accept(r->sampler, tok);
  r->stats.n_gen++;
  /* one interval per call, decode and sampling together: adding it after each would count
   * the decode twice */
  r->stats.gen_seconds += il_time_now() - t0;
  if (il_vocab_is_eog(r->e->vocab, tok) && (!p->ignore_eos || il_sampler_grammar_finished(r->sampler))) {
    r->stats.stopped_eog = true;
    return il__request_end(r, token, text, len);
  }
  *token = tok;
  *len = il_detok_push(r->detok, tok, r->text, r->text_cap);
  if (r->pos < r->e->n_ctx) r->pending = tok;
  else r->done = true; /* the next call only flushes */
  r->pos++;
  return IL_OK;
}

il_status il_request_set_grammar(il_request *r, il_grammar_state *gs) {
  IL_TRY(il_sampler_set_grammar(r->sampler, gs));
  r->grammar = gs != NULL;
  return IL_OK;
}

int32_t il_request_n_prompt(const il_request *r) { return r->stats.n_prompt; }
int32_t il_request_n_generated(const il_request *r) { return r->stats.n_gen; }
void il_request_stats(const il_request *r, il_gen_stats *out) { *out = r->stats; }

void il_request_free(il_request *r) {
  if (!r) return;
  il_sampler_free(r->sampler);
  il_detok_free(r->detok);
  il_mem_free(r->logits);
  il_mem_free(r->text);
  il_mem_free(r);
}

il_status il_engine_generate(il_engine *e, const int32_t *prompt, int32_t n_prompt, const il_request_params *p,
                             il_token_fn fn, void *ud, il_gen_stats *stats) {
  memset(stats, 0, sizeof *stats);
  il_request *r;
  IL_TRY(il_request_new_tokens(e, prompt, n_prompt, p, &r));
  il_status st;
  int32_t tok;
  const char *text;
  size_t len;
  while ((st = il_request_next(r, &tok, &text, &len)) == IL_OK) {
    if (tok < 0) {
      if (len && fn) fn(ud, -1, text, len);
      break;
    }
    il_startup_first_token(&e->startup);
    if (fn && !fn(ud, tok, text, len)) break;
  }
  il_request_stats(r, stats);
  il_request_free(r);
  return st;
}
