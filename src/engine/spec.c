/* engine/spec: speculative decoding. See spec.h. */
#include "engine/spec.h"

#include <limits.h>
#include <string.h>

#include "core/timer.h"
#include "engine/engine_impl.h"
#include "memory/mem.h"

il_status il_spec_check_vocab(const il_engine *target, const il_engine *draft) {
  const il_vocab *vt = target->vocab, *vd = draft->vocab;
  const char *mt = target->model->name, *md = draft->model->name;
  const int32_t nt = il_vocab_size(vt), nd = il_vocab_size(vd);
  if (nt != nd)
    return il_error(IL_ERR_INVALID_ARG,
                    "--draft-model %s: its vocabulary has %d tokens, the target %s's has %d (a draft needs the "
                    "target's vocabulary)", md, nd, mt, nt);
  const int32_t step = nt / 64 > 0 ? nt / 64 : 1;
  for (int32_t id = 0; id < nt; id = id < 16 ? id + 1 : (id + step < nt - 1 || id == nt - 1 ? id + step : nt - 1)) {
    size_t lt = 0, ld = 0;
    const char *tt = il_vocab_token_text(vt, id, &lt), *td = il_vocab_token_text(vd, id, &ld);
    if (lt != ld || (lt && memcmp(tt, td, lt)))
      return il_error(IL_ERR_INVALID_ARG,
                      "--draft-model %s: token %d is '%.*s' there and '%.*s' in the target %s (a draft needs the "
                      "target's vocabulary)", md, id, (int)(ld > 40 ? 40 : ld), td ? td : "", (int)(lt > 40 ? 40 : lt),
                      tt ? tt : "", mt);
  }
  return IL_OK;
}

bool il_spec_accept(il_sampler *s, int32_t n_vocab, const float *p, const float *q, int32_t d, float *scratch, int32_t *out) {
  const int32_t nv = n_vocab;
  const float u = il_sampler_uniform(s);
  if (q[d] > 0 && u * q[d] < p[d]) {
    *out = d;
    return true;
  }
  bool any = false;
  for (int32_t i = 0; i < nv; i++) {
    const float r = p[i] - q[i];
    scratch[i] = r > 0 ? r : 0;
    any |= r > 0;
  }
  /* p == q everywhere leaves nothing to draw from; a rejection then only follows rounding */
  *out = il_sampler_draw(s, any ? scratch : p);
  return false;
}

int32_t il_spec_propose(il_sampler *sd, bool greedy, const float *logits, float *q) {
  if (greedy) return il_sampler_sample(sd, logits);
  il_sampler_dist(sd, logits, q);
  return il_sampler_draw(sd, q);
}

void il_spec_draft_history(il_sampler *sd, const il_sampler_params *p, const int32_t *ctx, int32_t n) {
  if (p->repeat_penalty == 1.0f) return;
  const int32_t last_n = p->repeat_last_n;
  il_sampler_reset_history(sd);
  for (int32_t i = last_n > 0 && n > last_n ? n - last_n : 0; i < n; i++) il_sampler_accept(sd, ctx[i]);
}

int32_t il_spec_verify(il_sampler *st, bool greedy, int32_t n_vocab, const float *tl, const float *q, const int32_t *d,
                       int32_t k, float *pt, float *scratch, int32_t *out) {
  const size_t nv = (size_t)n_vocab;
  int32_t j = 0;
  for (; j < k; j++) {
    const float *lj = tl + (size_t)j * nv;
    int32_t tok;
    bool ok;
    if (greedy) {
      tok = il_sampler_sample(st, lj);
      ok = tok == d[j];
    } else {
      il_sampler_dist(st, lj, pt);
      ok = il_spec_accept(st, n_vocab, pt, q + (size_t)j * nv, d[j], scratch, &tok);
    }
    out[j] = tok;
    il_sampler_accept(st, tok);
    if (!ok) return j;
  }
  /* every drafted token accepted: one more from the target's last position */
  out[k] = il_sampler_sample(st, tl + (size_t)k * nv);
  il_sampler_accept(st, out[k]);
  return k;
}

int32_t il_spec_adapt(int32_t cur, int32_t k, int32_t j) {
  if (k <= 0) return cur;
  if (j == k && cur < IL_SPEC_ADAPTIVE_MAX) return cur + 1;
  if (j == 0 && cur > 1) return cur - 1;
  return cur;
}

typedef struct {
  il_engine *t, *d;
  int32_t nv;
  il_sampler *st, *sd; /* the target's sampler (the output's), the draft's */
  il_detok *detok;
  char *text;
  size_t text_cap;
  int32_t *ctx;        /* [n_ctx + 1]: prompt and accepted tokens */
  float *tl;           /* [(IL_SPEC_DRAFT_MAX + 1) * nv]: the target's logits of one step */
  float *dl;           /* [nv]: the draft's logits for its next proposal */
  float *q;            /* [IL_SPEC_DRAFT_MAX * nv]: the draft's distribution at each proposal */
  float *pt, *scratch; /* [nv] each */
  il_batch_entry *batch; /* [n_ctx + 1] */
} il__spec;

static void il__spec_free(il__spec *s) {
  il_sampler_free(s->st);
  il_sampler_free(s->sd);
  il_detok_free(s->detok);
  il_mem_free(s->text);
  il_mem_free(s->ctx);
  il_mem_free(s->tl);
  il_mem_free(s->dl);
  il_mem_free(s->q);
  il_mem_free(s->pt);
  il_mem_free(s->scratch);
  il_mem_free(s->batch);
}

/* Decodes entries batch[0, n) on e and checks the logits written (n_out rows) are finite. */
static il_status il__spec_decode(il_engine *e, const il_batch_entry *batch, int32_t n, float *logits, int32_t n_out,
                                 int32_t nv) {
  IL_TRY(il_engine_decode(e, batch, n, logits));
  for (int32_t i = 0; i < n_out; i++)
    IL_TRY(il_logits_check_finite(logits + (size_t)i * nv, nv, batch[n - n_out + i].pos));
  return IL_OK;
}

/* Prefill: the prompt but its last token into sequence 0 of e (the last one opens the first
 * step's batch). */
static il_status il__spec_prefill(il_engine *e, il_batch_entry *batch, const int32_t *ids, int32_t n) {
  IL_TRY(il_engine_seq_remove(e, 0));
  if (n <= 1) return IL_OK;
  for (int32_t i = 0; i < n - 1; i++) batch[i] = (il_batch_entry){ids[i], 0, i, false};
  return il_engine_decode(e, batch, n - 1, NULL);
}

il_status il_spec_generate(il_engine *target, il_engine *draft, const int32_t *prompt, int32_t n_prompt,
                           const il_request_params *p, int32_t n_draft, il_token_fn fn, void *ud,
                           il_gen_stats *stats, il_spec_stats *ss) {
  memset(stats, 0, sizeof *stats);
  memset(ss, 0, sizeof *ss);
  if (n_draft < 0 || n_draft > IL_SPEC_DRAFT_MAX)
    return il_error(IL_ERR_INVALID_ARG, "--draft %d: give 1 to %d (0: adaptive)", n_draft, IL_SPEC_DRAFT_MAX);
  if (!target->cfg.logits_all)
    return il_error(IL_ERR_INVALID_ARG, "speculative decoding: the target engine was opened without logits_all");
  if (n_prompt <= 0) return il_error(IL_ERR_INVALID_ARG, "prompt: no tokens (empty prompt and no BOS)");
  const int32_t n_ctx = target->n_ctx < draft->n_ctx ? target->n_ctx : draft->n_ctx;
  if (n_prompt >= n_ctx)
    return il_error(IL_ERR_RANGE, "prompt: %d tokens do not fit the context of %d (raise --ctx)", n_prompt, n_ctx);
  IL_TRY(il_spec_check_vocab(target, draft));
  il__spec s = {.t = target, .d = draft, .nv = target->model->hp.n_vocab};
  const size_t nv = (size_t)s.nv;
  s.text_cap = il_vocab_max_piece(target->vocab) + 8;
  s.text = il_mem_alloc(IL_MEM_WORKSPACE, s.text_cap, "detokenized text");
  s.ctx = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * ((size_t)n_ctx + 1), "speculative context");
  s.batch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(il_batch_entry) * ((size_t)n_ctx + 1), "speculative batch");
  s.tl = il_mem_alloc(IL_MEM_STAGING, sizeof(float) * nv * (IL_SPEC_DRAFT_MAX + 1), "verification logits");
  s.dl = il_mem_alloc(IL_MEM_STAGING, sizeof(float) * nv, "draft logits");
  s.q = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * nv * IL_SPEC_DRAFT_MAX, "draft distributions");
  s.pt = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * nv, "target distribution");
  s.scratch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * nv, "residual distribution");
  il_status st = s.text && s.ctx && s.batch && s.tl && s.dl && s.q && s.pt && s.scratch ? IL_OK : IL_ERR_OOM;
  if (st == IL_OK) st = il_sampler_new(&p->sampling, s.nv, &s.st);
  if (st == IL_OK) {
    il_sampler_params dp = p->sampling;
    dp.seed ^= 0x9e3779b97f4a7c15ull; /* the draft's draws independent of the target's */
    st = il_sampler_new(&dp, s.nv, &s.sd);
  }
  if (st == IL_OK) st = il_detok_new(target->vocab, false, prompt, (size_t)n_prompt, &s.detok);
  const double t0 = il_time_now();
  if (st == IL_OK) st = il__spec_prefill(target, s.batch, prompt, n_prompt);
  if (st == IL_OK) st = il__spec_prefill(draft, s.batch, prompt, n_prompt);
  stats->prompt_seconds = il_time_now() - t0;
  stats->n_prompt = n_prompt;
  if (st != IL_OK) {
    il__spec_free(&s);
    return st;
  }
  for (int32_t i = 0; i < n_prompt; i++) {
    s.ctx[i] = prompt[i];
    il_sampler_accept(s.st, prompt[i]);
    il_sampler_accept(s.sd, prompt[i]);
  }
  const bool greedy = p->sampling.temp <= 0;
  int32_t n = n_prompt;       /* tokens in the context; the target's cache holds n - 1 of them */
  int32_t dn = n_prompt - 1;  /* positions the draft's cache holds */
  int32_t cur = n_draft > 0 ? n_draft : IL_SPEC_ADAPTIVE_START;
  bool done = false;
  const double g0 = il_time_now();
  while (!done && n <= n_ctx) {
    const int32_t remaining = p->n_predict >= 0 ? p->n_predict - stats->n_gen : INT32_MAX;
    if (remaining <= 0) break;
    int32_t k = cur;
    if (k > n_ctx - n) k = n_ctx - n;
    if (k > remaining - 1) k = remaining - 1;
    if (k < 0) k = 0;
    int32_t d[IL_SPEC_DRAFT_MAX];
    if (k > 0) {
      /* the draft catches up on the accepted tokens it has not seen, then proposes */
      int32_t nb = 0;
      for (int32_t i = dn; i < n; i++) s.batch[nb++] = (il_batch_entry){s.ctx[i], 0, i, i == n - 1};
      il_spec_draft_history(s.sd, &p->sampling, s.ctx, n);
      st = il__spec_decode(draft, s.batch, nb, s.dl, 1, s.nv);
      dn = n;
      for (int32_t i = 0; st == IL_OK && i < k; i++) {
        d[i] = il_spec_propose(s.sd, greedy, s.dl, s.q + (size_t)i * nv);
        il_sampler_accept(s.sd, d[i]);
        if (i < k - 1) {
          il_batch_entry one = {d[i], 0, n + i, true};
          st = il__spec_decode(draft, &one, 1, s.dl, 1, s.nv);
          dn++;
        }
      }
      if (st != IL_OK) break;
    }
    /* one pass of the target over the last accepted token and the k drafted ones */
    s.batch[0] = (il_batch_entry){s.ctx[n - 1], 0, n - 1, true};
    for (int32_t i = 0; i < k; i++) s.batch[1 + i] = (il_batch_entry){d[i], 0, n + i, true};
    st = il__spec_decode(target, s.batch, k + 1, s.tl, k + 1, s.nv);
    if (st != IL_OK) break;
    ss->steps++;
    ss->drafted += k;
    if (k > 0) ss->n_draft_last = k;
    int32_t out[IL_SPEC_DRAFT_MAX + 1];
    const int32_t j = il_spec_verify(s.st, greedy, s.nv, s.tl, s.q, d, k, s.pt, s.scratch, out), n_out = j + 1;
    ss->accepted += j;
    const int32_t n_old = n;
    for (int32_t i = 0; i < n_out && !done; i++) {
      const int32_t tok = out[i];
      stats->n_gen++;
      if (il_vocab_is_eog(target->vocab, tok) && !p->ignore_eos) {
        stats->stopped_eog = true;
        done = true;
        break;
      }
      s.ctx[n++] = tok;
      il_startup_first_token(&target->startup);
      const size_t len = il_detok_push(s.detok, tok, s.text, s.text_cap);
      if (fn && !fn(ud, tok, s.text, len)) done = true;
      if (p->n_predict >= 0 && stats->n_gen >= p->n_predict) done = true;
    }
    /* cut the cells past the accepted tokens: the target keeps n - 1 (the last opens the next
     * batch), the draft what it computed of the accepted ones */
    st = il_engine_seq_truncate(target, 0, n - 1);
    int32_t dkeep = dn < n_old + j ? dn : n_old + j;
    if (dkeep > n) dkeep = n;
    if (st == IL_OK && dkeep < dn) st = il_engine_seq_truncate(draft, 0, dkeep);
    dn = dkeep;
    if (st != IL_OK) break;
    if (n_draft == 0) cur = il_spec_adapt(cur, k, j);
  }
  stats->gen_seconds = il_time_now() - g0;
  if (st == IL_OK && fn) {
    const size_t len = il_detok_flush(s.detok, s.text, s.text_cap);
    if (len) fn(ud, -1, s.text, len);
  }
  il__spec_free(&s);
  return st;
}
