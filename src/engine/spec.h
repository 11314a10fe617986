/* engine/spec: speculative decoding: a small draft model proposes tokens, the target model
 * checks them all in one batched pass.
 *
 * Each step the draft proposes n tokens one at a time (greedy at temperature 0, else drawn
 * from its sampler's distribution q); the target decodes the last accepted token and the n
 * drafted ones in one il_engine_decode call with logits for every entry, which gives its
 * distribution p at each of the n + 1 positions. Greedy: a drafted token is accepted while it
 * equals the target's own greedy pick, and the first mismatch is replaced by that pick, so the
 * output is the one plain decoding gives. Temperature > 0: the standard rejection rule (Leviathan
 * et al. 2023, Chen et al. 2023): accept token d with probability min(1, p(d) / q(d)); on the
 * first rejection draw from max(0, p - q) normalized; after n acceptances draw one more token
 * from p. p and q are the samplers' filtered distributions (penalty, top-k, top-p, min-p and
 * temperature applied to both), so the output follows the target's sampler exactly. The KV cells
 * past the last accepted token are cut from both models (il_engine_seq_truncate).
 * The draft length: a fixed n, or adaptive: start at 4, one more after a step whose drafted
 * tokens were all accepted, one fewer after a step where none was, between 1 and 8.
 * The pieces of a step (proposal, draft history, verification, the adaptive length) are
 * functions of their own, used both here for one sequence and by engine/sched for every slot of
 * a continuous batch, so both follow one rule.
 * Not for: grammars, the batch of many sequences itself (engine/sched drives it).
 */
#ifndef IL_ENGINE_SPEC_H
#define IL_ENGINE_SPEC_H

#include "engine/request.h"

#define IL_SPEC_DRAFT_MAX 16   /* the longest --draft */
#define IL_SPEC_ADAPTIVE_START 4
#define IL_SPEC_ADAPTIVE_MAX 8

/* What drafting did in one generation. */
typedef struct {
  int64_t drafted;  /* tokens the draft proposed */
  int64_t accepted; /* of them, accepted by the target */
  int64_t steps;    /* batched target passes (one per step) */
  int32_t n_draft_last; /* the draft length of the last step */
} il_spec_stats;

/* IL_OK when draft's vocabulary can stand in for target's: the same size and the same text for
 * a spread of token ids (the first 16, then every 1/64th of the vocabulary, and the last).
 * IL_ERR_INVALID_ARG naming both models and the first token that differs otherwise. */
il_status il_spec_check_vocab(const il_engine *target, const il_engine *draft);

/* One speculative step's verdict on drafted token d at one position, from the target's
 * distribution p and the draft's q (both [n_vocab]; scratch too), drawing from s: *out = d when accepted
 * (returns true), else a token drawn from norm(max(0, p - q)) (returns false). */
bool il_spec_accept(il_sampler *s, int32_t n_vocab, const float *p, const float *q, int32_t d, float *scratch, int32_t *out);

/* The draft's proposal from its logits: greedy pick, or a draw from its sampler's distribution,
 * which is written to q ([n_vocab]; untouched when greedy). The caller accepts the token into sd. */
int32_t il_spec_propose(il_sampler *sd, bool greedy, const float *logits, float *q);

/* Before a step's proposals: with a repeat penalty, the draft's penalty history becomes the
 * accepted context ctx[0, n) (its rejected proposals and the target's picks of the last step
 * are not in it); without one, nothing to do. */
void il_spec_draft_history(il_sampler *sd, const il_sampler_params *p, const int32_t *ctx, int32_t n);

/* Verifies k drafted tokens d[0, k) from the target's logits rows tl ([(k + 1) x n_vocab], row
 * i: the distribution after the i-th entry of the pass) and the draft's distributions q
 * ([k x n_vocab], temperature > 0 only), drawing with and accepting each output token into st.
 * Writes the output tokens to out ([k + 1]): the accepted drafted ones, then the target's
 * correction (first rejection) or its next token (all accepted). Returns the number accepted
 * (out holds that plus one). pt, scratch: [n_vocab] work space. */
int32_t il_spec_verify(il_sampler *st, bool greedy, int32_t n_vocab, const float *tl, const float *q, const int32_t *d,
                       int32_t k, float *pt, float *scratch, int32_t *out);

/* The adaptive draft length after a step that drafted k tokens and had j accepted: one more when
 * all were (up to IL_SPEC_ADAPTIVE_MAX), one fewer when none was (down to 1). */
int32_t il_spec_adapt(int32_t cur, int32_t k, int32_t j);

/* il_engine_generate with draft proposing for target (both in sequence 0; target opened with
 * cfg.logits_all so a pass can return every drafted position's logits). n_draft: 1 to
 * IL_SPEC_DRAFT_MAX, or 0 for the adaptive length. Not with a grammar. *stats and *ss are
 * filled even on failure. IL_ERR_INVALID_ARG: vocabularies differ, target without logits_all,
 * n_draft out of range. */
il_status il_spec_generate(il_engine *target, il_engine *draft, const int32_t *prompt, int32_t n_prompt,
                           const il_request_params *p, int32_t n_draft, il_token_fn fn, void *ud,
                           il_gen_stats *stats, il_spec_stats *ss);

#endif
