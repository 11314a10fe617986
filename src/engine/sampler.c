/* engine/sampler: penalty, top-k, top-p, min-p, temperature, seeded draw. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"

typedef struct {
  float logit;
  int32_t id;
} il__cand;

struct il_sampler {
  il_sampler_params p;
  int32_t n_vocab;
  uint64_t rng;
  il__cand *cand;
  float *prob;
  int32_t *hist; /* ring of the last repeat_last_n tokens */
  int32_t hist_n, hist_pos;
  il_grammar_state *grammar; /* borrowed; NULL: unconstrained */
  uint8_t *allowed;          /* [n_vocab bits]: the grammar's mask of this step */
  float *masked;             /* [n_vocab]: the logits with the disallowed ones at -Inf */
  il_status status;
  int32_t *kept; /* il_sampler_dist: where the chain reports how many candidates it kept */
};

il_status il_sampler_new(const il_sampler_params *p, int32_t n_vocab, il_sampler **out) {
  *out = NULL;
  il_sampler *s = il_mem_calloc(IL_MEM_WORKSPACE, sizeof *s, "sampler");
  if (!s) return IL_ERR_OOM;
  s->p = *p;
  s->n_vocab = n_vocab;
  s->rng = p->seed * 6364136223846793005ull + 1442695040888963407ull;
  s->cand = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(il__cand) * (size_t)n_vocab, "sampler candidates");
  s->prob = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * (size_t)n_vocab, "sampler probabilities");
  int32_t hn = p->repeat_last_n > 0 ? p->repeat_last_n : 1;
  s->hist = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)hn, "sampler history");
  if (!s->cand || !s->prob || !s->hist) {
    il_sampler_free(s);
    return IL_ERR_OOM;
  }
  *out = s;
  return IL_OK;
}

void il_sampler_free(il_sampler *s) {
  if (!s) return;
  il_mem_free(s->cand);
  il_mem_free(s->prob);
  il_mem_free(s->hist);
  il_mem_free(s->allowed);
  il_mem_free(s->masked);
  il_mem_free(s);
}

il_status il_sampler_set_grammar(il_sampler *s, il_grammar_state *gs) {
  s->grammar = gs;
  s->status = IL_OK;
  if (gs && !s->masked) {
    s->allowed = il_mem_alloc(IL_MEM_WORKSPACE, ((size_t)s->n_vocab + 7) / 8, "grammar mask");
    s->masked = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * (size_t)s->n_vocab, "masked logits");
    if (!s->allowed || !s->masked) {
      il_mem_free(s->allowed);
      il_mem_free(s->masked);
      s->allowed = NULL;
      s->masked = NULL;
      s->grammar = NULL;
      return IL_ERR_OOM;
    }
  }
  return IL_OK;
}

il_status il_sampler_status(const il_sampler *s) { return s->status; }

bool il_sampler_grammar_finished(const il_sampler *s) { return s->grammar && il_grammar_state_finished(s->grammar); }

void il_sampler_accept(il_sampler *s, int32_t token) {
  if (s->p.repeat_last_n <= 0) return;
  s->hist[s->hist_pos] = token;
  s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
  if (s->hist_n < s->p.repeat_last_n) s->hist_n++;
}

/* Descending by logit, NaN after every number, ties by ascending id: a total order even with
 * NaN, so the quickselect's scans stop inside the array and results never depend on the sort
 * algorithm. */
static int il__cand_cmp(const void *a, const void *b) {
  const il__cand *x = a, *y = b;
  bool xn = isnan(x->logit), yn = isnan(y->logit);
  if (xn != yn) return xn ? 1 : -1;
  if (!xn && x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static float il__uniform(il_sampler *s) {
  s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((s->rng >> 40) & 0xffffff) / 16777216.0f;
}

/* Moves the k best candidates to the front (unordered), by quickselect: O(n). */
static void il__select_top(il__cand *c, int32_t n, int32_t k) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    il__cand pivot = c[(lo + hi) / 2];
    int32_t i = lo, j = hi;
    while (i <= j) {
      while (il__cand_cmp(&c[i], &pivot) < 0) i++;
      while (il__cand_cmp(&c[j], &pivot) > 0) j--;
      if (i <= j) {
        il__cand t = c[i];
        c[i] = c[j];
        c[j] = t;
        i++;
        j--;
      }
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else break;
  }
}

il_status il_logits_check_finite(const float *logits, int32_t n, int32_t pos) {
  for (int32_t i = 0; i < n; i++)
    if (!isfinite(logits[i])) {
      int32_t bad = 0;
      for (int32_t j = i; j < n; j++) bad += !isfinite(logits[j]);
      return il_error(IL_ERR_RANGE,
                      "position %d: the model produced %d non-finite logit%s (first: token %d = %s); the "
                      "weights hold NaN/Inf or the computation overflowed, so no token can be sampled",
                      pos, bad, bad == 1 ? "" : "s", i, isnan(logits[i]) ? "NaN" : logits[i] > 0 ? "+Inf" : "-Inf");
    }
  return IL_OK;
}

/* Greedy over the raw logits in the candidates' order (il__cand_cmp): the largest number, the
 * lowest id among equals, NaN only when all are (then id 0). Skips building the candidate
 * array: at stories260K's pace (512 logits, 20k tokens/s) that copy and the comparator's NaN
 * tests were 2% of a token. */
static int32_t il__argmax(const float *logits, int32_t n) {
  int32_t best = -1;
  float bv = 0;
  for (int32_t i = 0; i < n; i++)
    if (!isnan(logits[i]) && (best < 0 || logits[i] > bv)) best = i, bv = logits[i];
  return best < 0 ? 0 : best;
}

static int32_t il__sample_chain(il_sampler *s, const float *logits, int32_t n_allowed);

/* Under a grammar: the mask, the chain over the masked logits, the grammar advanced. A failure
 * is kept in s->status and ends the generation with EOS. */
static int32_t il__sample_grammar(il_sampler *s, const float *logits) {
  const int32_t eos = il_grammar_vocab_eos(il_grammar_state_vocab(s->grammar));
  int32_t n_allowed = 0;
  il_status st = il_grammar_state_mask(s->grammar, s->allowed, &n_allowed);
  if (st == IL_OK && n_allowed == 0)
    st = il_error(IL_ERR_UNSUPPORTED, "grammar: no token of the vocabulary can continue the grammar here");
  if (st != IL_OK) {
    s->status = st;
    return eos;
  }
  for (int32_t i = 0; i < s->n_vocab; i++)
    s->masked[i] = s->allowed[i >> 3] >> (i & 7) & 1 ? logits[i] : -INFINITY;
  int32_t tok = il__sample_chain(s, s->masked, n_allowed);
  if (!(s->allowed[tok >> 3] >> (tok & 7) & 1)) {
    /* only NaN among the allowed logits (a direct caller's; the engine refuses them) */
    for (tok = 0; !(s->allowed[tok >> 3] >> (tok & 7) & 1); tok++) {}
  }
  st = il_grammar_state_accept_token(s->grammar, tok);
  if (st != IL_OK) {
    s->status = st;
    return eos;
  }
  return tok;
}

int32_t il_sampler_sample(il_sampler *s, const float *logits) {
  if (s->grammar) return il__sample_grammar(s, logits);
  return il__sample_chain(s, logits, s->n_vocab);
}

/* The chain; only the n_allowed best-ordered candidates can be drawn (the rest are -Inf). */
static int32_t il__sample_chain(il_sampler *s, const float *logits, int32_t n_allowed) {
  const il_sampler_params *p = &s->p;
  int32_t n = s->n_vocab;
  if (p->temp <= 0 && p->repeat_penalty == 1.0f) return il__argmax(logits, n);
  for (int32_t i = 0; i < n; i++) s->cand[i] = (il__cand){logits[i], i};
  if (p->repeat_penalty != 1.0f) {
    for (int32_t h = 0; h < s->hist_n; h++) {
      int32_t t = s->hist[h];
      if (t < 0 || t >= n) continue;
      /* each distinct token is penalised once, however often it occurs */
      bool seen = false;
      for (int32_t g = 0; g < h && !seen; g++) seen = s->hist[g] == t;
      if (seen) continue;
      float *l = &s->cand[t].logit;
      *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
    }
  }
  if (p->temp <= 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
      if (il__cand_cmp(&s->cand[i], &s->cand[best]) < 0) best = i;
    return s->cand[best].id;
  }
  if (p->top_k > 0 && p->top_k < n) {
    il__select_top(s->cand, n, p->top_k);
    n = p->top_k;
  }
  qsort(s->cand, (size_t)n, sizeof *s->cand, il__cand_cmp);
  if (n > n_allowed) n = n_allowed;
  /* probabilities at temperature 1 for the top-p / min-p cuts */
  float mx = s->cand[0].logit;
  /* Non-finite logits (the engine refuses them before sampling; this keeps a direct caller
   * safe): with no finite maximum, or a +Inf one, the draw is the first candidate. NaN
   * candidates sort last and get probability 0. */
  if (!isfinite(mx)) {
    if (s->kept) *s->kept = 1;
    return s->cand[0].id;
  }
  for (int32_t i = 0; i < n; i++)
    if (isnan(s->cand[i].logit)) s->cand[i].logit = -INFINITY;
  double sum = 0;
  for (int32_t i = 0; i < n; i++) sum += s->prob[i] = expf(s->cand[i].logit - mx);
  if (p->top_p < 1.0f) {
    double cum = 0;
    int32_t keep = n;
    for (int32_t i = 0; i < n; i++) {
      cum += s->prob[i] / sum;
      if (cum >= p->top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p->min_p > 0) {
    int32_t keep = 1;
    while (keep < n && s->prob[keep] >= p->min_p * s->prob[0]) keep++;
    n = keep;
  }
  sum = 0;
  for (int32_t i = 0; i < n; i++) sum += s->prob[i] = expf((s->cand[i].logit - mx) / p->temp);
  if (s->kept) *s->kept = n;
  double r = il__uniform(s) * sum, acc = 0;
  for (int32_t i = 0; i < n; i++) {
    acc += s->prob[i];
    if (r < acc) return s->cand[i].id;
  }
  return s->cand[n - 1].id;
}

void il_sampler_dist(il_sampler *s, const float *logits, float *prob) {
  const int32_t n = s->n_vocab;
  memset(prob, 0, sizeof(float) * (size_t)n);
  if (s->p.temp <= 0) {
    prob[il__sample_chain(s, logits, n)] = 1.0f;
    return;
  }
  /* the chain with a draw that records its candidates: il__sample_chain leaves the kept
   * candidates in s->cand[0..kept) with their tempered weights in s->prob; the draw it makes
   * is thrown away, so the generator is saved and restored around it */
  const uint64_t rng = s->rng;
  int32_t kept = 0;
  s->kept = &kept;
  (void)il__sample_chain(s, logits, n);
  s->kept = NULL;
  s->rng = rng;
  if (kept <= 1) {
    prob[s->cand[0].id] = 1.0f;
    return;
  }
  double sum = 0;
  for (int32_t i = 0; i < kept; i++) sum += s->prob[i];
  for (int32_t i = 0; i < kept; i++) prob[s->cand[i].id] = (float)(s->prob[i] / sum);
}

int32_t il_sampler_draw(il_sampler *s, const float *prob) {
  double sum = 0;
  int32_t first = -1;
  for (int32_t i = 0; i < s->n_vocab; i++)
    if (prob[i] > 0) {
      sum += prob[i];
      if (first < 0) first = i;
    }
  if (first < 0) return 0;
  const double r = il__uniform(s) * sum;
  if (!(sum > 0) || !isfinite(sum)) return first;
  double acc = 0;
  int32_t last = first;
  for (int32_t i = first; i < s->n_vocab; i++)
    if (prob[i] > 0) {
      acc += prob[i];
      last = i;
      if (r < acc) return i;
    }
  return last;
}

float il_sampler_uniform(il_sampler *s) { return il__uniform(s); }

void il_sampler_reset_history(il_sampler *s) { s->hist_n = 0, s->hist_pos = 0; }
