/* lab/eval: perplexity, KL divergence and top-1 agreement over a text (see eval.h). */
#include "lab/eval.h"

#include <math.h>
#include <string.h>

#include "core/timer.h"
#include "lab/stats.h"
#include "memory/mem.h"

double il_eval_log_softmax(const float *logits, int32_t n_vocab, int32_t tok) {
  float max_logit = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
  double sum_exp = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum_exp += expf(logits[i] - max_logit);
  return logits[tok] - max_logit - log(sum_exp);
}

static int32_t il__argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* KL(p_ref || p) of two logit rows, in nats. */
static double il__kl(const float *ref, const float *model, int32_t n) {
  float mr = ref[0], mm = model[0];
  for (int32_t i = 1; i < n; i++) {
    mr = ref[i] > mr ? ref[i] : mr;
    mm = model[i] > mm ? model[i] : mm;
  }
  double sr = 0, sm = 0;
  for (int32_t i = 0; i < n; i++) {
    sr += exp((double)ref[i] - mr);
    sm += exp((double)model[i] - mm);
  }
  const double lr = log(sr), lm = log(sm);
  double kl = 0;
  for (int32_t i = 0; i < n; i++) {
    const double lpr = (double)ref[i] - mr - lr, lpm = (double)model[i] - mm - lm;
    kl += exp(lpr) * (lpr - lpm);
  }
  return kl > 0 ? kl : 0; /* rounding can make an exact match a hair negative */
}

/* Runs one window through e: tokens w[0..n_ctx) at positions 0.., sequence 0, logits for
 * positions >= first into out [(n_ctx - first) x n_vocab]. */
static il_status il__window(il_engine *e, const int32_t *w, int32_t n_ctx, int32_t first, il_batch_entry *batch,
                            float *out) {
  for (int32_t k = 0; k < n_ctx; k++) batch[k] = (il_batch_entry){w[k], 0, k, k >= first};
  return il_engine_decode(e, batch, n_ctx, out);
}

il_status il_eval_text(il_engine *e, il_engine *ref, const char *text, const il_eval_params *p, il_eval_result *r) {
  memset(r, 0, sizeof *r);
  const double t0 = il_time_now();
  const int32_t n_ctx = p->n_ctx, nv = il_engine_model(e)->hp.n_vocab;
  if (n_ctx < 4) return il_error(IL_ERR_INVALID_ARG, "--ctx %d: a window needs at least 4 tokens", n_ctx);
  if (n_ctx > il_engine_n_ctx(e)) return il_error(IL_ERR_RANGE, "--ctx %d exceeds the model's context of %d", n_ctx, il_engine_n_ctx(e));
  if (ref && il_engine_model(ref)->hp.n_vocab != nv)
    return il_error(IL_ERR_INVALID_ARG, "--ref: vocabulary of %d tokens, the model has %d: the models must share a tokenizer",
                    il_engine_model(ref)->hp.n_vocab, nv);
  if (ref && n_ctx > il_engine_n_ctx(ref)) return il_error(IL_ERR_RANGE, "--ctx %d exceeds the reference's context of %d", n_ctx, il_engine_n_ctx(ref));
  const bool add_bos = il_vocab_add_bos(il_engine_vocab(e));
  const int32_t bos = il_vocab_bos(il_engine_vocab(e));
  int32_t *tokens = NULL, n_tok = 0;
  size_t n_sz = 0;
  IL_TRY(il_tokenize_alloc(il_engine_vocab(e), text, strlen(text), true, false, &tokens, &n_sz));
  n_tok = (int32_t)n_sz;
  r->n_tokens = n_tok;
  if (n_tok < 2 * n_ctx) {
    il_mem_free(tokens);
    return il_error(IL_ERR_INVALID_ARG, "the text has %d tokens; perplexity with --ctx %d needs at least %d (2 x ctx)",
                    n_tok, n_ctx, 2 * n_ctx);
  }
  int32_t n_chunk = n_tok / n_ctx;
  if (p->max_chunks > 0 && p->max_chunks < n_chunk) n_chunk = p->max_chunks;
  const int32_t first = n_ctx / 2, per = n_ctx - 1 - first, n_out = n_ctx - first;
  il_batch_entry *batch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *batch * (size_t)n_ctx, "eval batch");
  int32_t *w = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *w * (size_t)n_ctx, "eval window");
  float *lg = il_mem_alloc(IL_MEM_ACTIVATIONS, sizeof(float) * (size_t)nv * (size_t)n_out, "eval logits");
  float *lr = ref ? il_mem_alloc(IL_MEM_ACTIVATIONS, sizeof(float) * (size_t)nv * (size_t)n_out, "eval reference logits") : NULL;
  double *kls = ref ? il_mem_alloc(IL_MEM_WORKSPACE, sizeof(double) * (size_t)n_chunk * (size_t)per, "eval kl values") : NULL;
  il_status st = batch && w && lg && (!ref || (lr && kls)) ? IL_OK : IL_ERR_OOM;
  double nll = 0, nll2 = 0, ref_nll = 0;
  int64_t count = 0, same = 0;
  int32_t done = 0;
  r->n_chunk_planned = n_chunk;
  r->interrupted = false;
  for (int32_t c = 0; st == IL_OK && c < n_chunk; c++) {
    memcpy(w, tokens + (size_t)c * n_ctx, sizeof *w * (size_t)n_ctx);
    if (add_bos && bos >= 0) w[0] = bos;
    st = il__window(e, w, n_ctx, first, batch, lg);
    if (st == IL_OK && ref) st = il__window(ref, w, n_ctx, first, batch, lr);
    for (int32_t j = 0; st == IL_OK && j < per; j++) {
      const int32_t tok = tokens[(size_t)c * n_ctx + first + j + 1];
      const float *row = lg + (size_t)j * nv;
      const double v = -il_eval_log_softmax(row, nv, tok);
      nll += v;
      nll2 += v * v;
      if (ref) {
        const float *rrow = lr + (size_t)j * nv;
        ref_nll -= il_eval_log_softmax(rrow, nv, tok);
        kls[count] = il__kl(rrow, row, nv);
        same += il__argmax(rrow, nv) == il__argmax(row, nv);
      }
      count++;
    }
    if (st == IL_OK) done = c + 1;
    if (st == IL_OK && p->progress) p->progress(p->progress_ud, c + 1, n_chunk, exp(nll / (double)count));
    /* checked after a window, so a stopped evaluation has measured at least one */
    if (st == IL_OK && p->stop && *p->stop && c + 1 < n_chunk) {
      r->interrupted = true;
      break;
    }
  }
  if (st == IL_OK && count == 0) { /* interrupted before the first window: nothing measured */
    r->n_chunk = 0;
    r->n_scored = 0;
    r->nll = r->perplexity = r->perplexity_stderr = NAN;
    r->has_ref = false;
    r->seconds = il_time_now() - t0;
  } else if (st == IL_OK) {
    r->n_chunk = done;
    r->n_scored = count;
    r->nll = nll / (double)count;
    r->perplexity = exp(r->nll);
    const double var = nll2 / (double)count - r->nll * r->nll;
    r->perplexity_stderr = var > 0 && count > 1 ? r->perplexity * sqrt(var / (double)(count - 1)) : 0;
    if (ref) {
      r->has_ref = true;
      r->ref_perplexity = exp(ref_nll / (double)count);
      r->ppl_ratio = r->perplexity / r->ref_perplexity;
      r->top1 = (double)same / (double)count;
      r->kl_mean = il_stats_mean(kls, (int)count);
      il_stats_sort(kls, (int)count);
      r->kl_median = il_stats_percentile_sorted(kls, (int)count, 50);
      r->kl_p99 = il_stats_percentile_sorted(kls, (int)count, 99);
      r->kl_max = kls[count - 1];
    }
    r->seconds = il_time_now() - t0;
  }
  il_mem_free(tokens);
  il_mem_free(batch);
  il_mem_free(w);
  il_mem_free(lg);
  il_mem_free(lr);
  il_mem_free(kls);
  return st;
}
