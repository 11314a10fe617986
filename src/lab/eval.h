/* lab/eval: perplexity over a text, and how far a model's next-token distributions are from a
 * reference model's (KL divergence, top-1 agreement): quantization error for a whole model.
 *
 * Perplexity follows llama.cpp's llama-perplexity (tools/perplexity, the default path):
 *   tokens = tokenize(text, with BOS when the vocabulary adds one, control text as text);
 *   at least 2 x n_ctx tokens are needed; n_chunk = n_tokens / n_ctx windows, non-overlapping;
 *   window c holds tokens[c*n_ctx .. (c+1)*n_ctx), fresh KV cache, and its first token is
 *   replaced by BOS (when the vocabulary adds BOS);
 *   only the second half is scored: the logits at positions first = n_ctx/2 .. n_ctx-2 predict
 *   the tokens at first+1 .. n_ctx-1, i.e. n_ctx - 1 - n_ctx/2 tokens per window;
 *   nll of a token = -(logit[tok] - max - log(sum exp(logit - max))) (float logits, double sum);
 *   perplexity = exp(sum nll / count).
 * With a reference model the same windows go through both, and for every scored position
 * KL(ref || model) = sum_i p_ref(i) (log p_ref(i) - log p(i)) (llama.cpp's --kl-divergence with
 * the reference as base), and top-1 agreement = argmax equal.
 * Not for: loading models (engine/), printing (cli/eval).
 */
#ifndef IL_LAB_EVAL_H
#define IL_LAB_EVAL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

typedef void (*il_eval_progress_fn)(void *ud, int chunk_done, int n_chunk, double ppl_so_far);

typedef struct {
  int32_t n_ctx;       /* window length (>= 4) */
  int32_t max_chunks;  /* 0 = all */
  il_eval_progress_fn progress; /* may be NULL */
  void *progress_ud;
  /* may be NULL; when it becomes non-zero (a SIGINT handler sets it) the evaluation ends after
   * the window being measured (the first one always completes), with the result of the
   * windows done (interrupted set) */
  volatile sig_atomic_t *stop;
} il_eval_params;

typedef struct {
  int32_t n_tokens;    /* tokens of the text, BOS included */
  int32_t n_chunk;     /* windows evaluated */
  int32_t n_chunk_planned; /* windows the text (and max_chunks) gives */
  bool interrupted;    /* *stop ended it early: the figures are of the n_chunk windows done */
  int64_t n_scored;    /* tokens scored */
  double nll;          /* mean negative log-likelihood (nats) */
  double perplexity;
  double perplexity_stderr; /* llama.cpp's estimate: ppl * sd(nll) / sqrt(n - 1) */
  /* with a reference (has_ref) */
  bool has_ref;
  double ref_perplexity;
  double ppl_ratio;    /* perplexity / ref_perplexity */
  double kl_mean, kl_median, kl_p99, kl_max;
  double top1;         /* fraction of scored positions whose argmax agrees */
  double seconds;
} il_eval_result;

/* Evaluates text with engine e (and ref when not NULL; both need the same vocabulary size and
 * contexts of at least n_ctx). Errors: IL_ERR_INVALID_ARG when the text is shorter than
 * 2 x n_ctx tokens or the vocabularies differ (naming both sizes), IL_ERR_RANGE when n_ctx
 * exceeds an engine's context, IL_ERR_OOM. */
il_status il_eval_text(il_engine *e, il_engine *ref, const char *text, const il_eval_params *p, il_eval_result *r);

/* The log-softmax of one logit row at tok, computed as llama.cpp's perplexity does. */
double il_eval_log_softmax(const float *logits, int32_t n_vocab, int32_t tok);

#endif
