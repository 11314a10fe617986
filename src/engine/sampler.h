/* engine/sampler: turns logits into the next token.
 *
 * The chain, in llama.cpp's default order: repetition penalty over the last repeat_last_n
 * tokens -> top-k -> top-p -> min-p -> temperature -> draw from a seeded generator. A
 * temperature of 0 is greedy (argmax after the penalty). The same seed and settings give the
 * same tokens on every run and machine (the generator is a fixed 64-bit PCG-style LCG and the
 * sort is total: ties broken by token id).
 * Not for: grammar constraints or logit biases.
 */
#ifndef IL_ENGINE_SAMPLER_H
#define IL_ENGINE_SAMPLER_H

#include <stdint.h>

#include "core/status.h"

/* il_sampler_params and il_sampler_new/free/accept/sample are public (inferlab.h). Beyond what
 * that header says: NaN logits are never picked while a number is present (NaN orders below
 * -Inf); when the largest logit is not finite the result is the first in the order (+Inf, else
 * the lowest id). The engine refuses non-finite logits before sampling (il_logits_check_finite),
 * so this rule only protects direct callers. */

/* IL_ERR_RANGE naming the position, the first token and how many logits of logits[n] are NaN
 * or infinite; IL_OK when all are finite. */
il_status il_logits_check_finite(const float *logits, int32_t n, int32_t pos);

#endif
