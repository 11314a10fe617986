/* engine/sampler: turns logits into the next token.
 *
 * The chain, in llama.cpp's default order: repetition penalty over the last repeat_last_n
 * tokens -> top-k -> top-p -> min-p -> temperature -> draw from a seeded generator. A
 * temperature of 0 is greedy (argmax after the penalty). The same seed and settings give the
 * same tokens on every run and machine (the generator is a fixed 64-bit PCG-style LCG and the
 * sort is total: ties broken by token id).
 * A grammar (engine/grammar) constrains it: before the chain, the tokens the grammar does not
 * allow get a logit of -Inf, so every setting above picks among the allowed ones only, and the
 * token drawn advances the grammar's state.
 * Not for: logit biases.
 */
#ifndef IL_ENGINE_SAMPLER_H
#define IL_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/grammar.h"

/* il_sampler_params and il_sampler_new/free/accept/sample are public (inferlab.h). Beyond what
 * that header says: NaN logits are never picked while a number is present (NaN orders below
 * -Inf); when the largest logit is not finite the result is the first in the order (+Inf, else
 * the lowest id). The engine refuses non-finite logits before sampling (il_logits_check_finite),
 * so this rule only protects direct callers. */

/* IL_ERR_RANGE naming the position, the first token and how many logits of logits[n] are NaN
 * or infinite; IL_OK when all are finite. */
il_status il_logits_check_finite(const float *logits, int32_t n, int32_t pos);

/* Constrains s to grammar state gs (borrowed: it must outlive its use here; NULL lifts the
 * constraint). From now on il_sampler_sample masks the logits with il_grammar_state_mask and
 * advances gs by the token it returns. IL_ERR_OOM (the masked logits' buffer). */
il_status il_sampler_set_grammar(il_sampler *s, il_grammar_state *gs);
/* IL_OK, or why the last il_sampler_sample under a grammar could not follow it (the grammar's
 * work space ran out, or no token of the vocabulary can continue it); that sample returned the
 * vocabulary's EOS, and the caller ends the generation with this status. */
il_status il_sampler_status(const il_sampler *s);
/* Under a grammar that nothing but the end can follow: callers stop at EOS then even with
 * ignore_eos (every further token would be EOS again). False without a grammar. */
bool il_sampler_grammar_finished(const il_sampler *s);

/* Speculative decoding (engine/spec) needs the distribution a draw comes from, not just the
 * draw. il_sampler_dist writes to prob[n_vocab] the probabilities il_sampler_sample would draw
 * from for these logits (penalty, top-k, top-p, min-p and temperature applied; 0 outside the
 * kept set; summing to 1), one-hot on the greedy token at temperature 0. Ignores a grammar.
 * il_sampler_draw picks from prob[n_vocab] (weights >= 0, any positive sum; the first positive
 * one when the sum is 0 or not finite) with s's generator; il_sampler_uniform is the next value
 * of that generator in [0, 1). */
void il_sampler_dist(il_sampler *s, const float *logits, float *prob);
int32_t il_sampler_draw(il_sampler *s, const float *prob);
float il_sampler_uniform(il_sampler *s);
/* Forgets the penalty history (il_sampler_accept starts it again). Can't fail. */
void il_sampler_reset_history(il_sampler *s);

#endif
