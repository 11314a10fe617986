/* engine/graph: decode steps recorded once and replayed (CUDA graphs through the seam's
 * capture_begin / capture_end / replay), private to engine/.
 *
 * A pass is a decode step when every entry wants logits, no two entries share a sequence, and
 * the whole pass runs on one backend that records steps (no CPU layers, no second device, no
 * --offload stream, no MoE layer, no --check-numerics: each of those moves data through the
 * host inside the pass). Steps are grouped in buckets by batch size (1, 2, 3-4, 5-8, ...) and by
 * their output (the sampled ids, or the logits): a bucket's first step runs eagerly (it also
 * grows any workspace), its second is captured (and runs as one graph launch), the later ones
 * replay it; a step of another size in the same bucket is captured again over the bucket's step
 * (the backend updates its graph in place where the kernels are the same). A capture that
 * fails is said once (a warning through il_log) and the engine's decode steps run eagerly from
 * then on, with the same results; so do those of a backend whose capture records nothing (cpu,
 * sim), after the one step it ran as called.
 * Not for: how a backend records (backend/cuda/graph.c).
 */
#ifndef IL_ENGINE_GRAPH_H
#define IL_ENGINE_GRAPH_H

#include "engine/engine_impl.h"

/* Runs the pass of entries batch[0..n) as a decode step when it is one: *handled true, the
 * batch uploaded, the forward pass and (ids) the sample op into e->smp_ids run, *n_logits set.
 * *handled false (nothing done): the caller runs the pass itself. Errors are the pass's. */
il_status il__graph_pass(il_engine *e, const il_batch_entry *batch, int32_t n, bool ids, int32_t *n_logits,
                         bool *handled);
/* Frees the recorded steps (before the backend goes). */
void il__graph_free(il_engine *e);

#endif
