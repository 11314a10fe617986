/* engine/graph: decode steps recorded once and replayed (the policy is in graph.h). */
#include "engine/graph.h"

#include <stdatomic.h>
#include <string.h>

#include "core/log.h"

/* The bucket of a batch of n: 1, 2, 3-4, 5-8, ... */
static int il__bucket(int32_t n) {
  int b = 0;
  while (b < IL__GRAPH_BUCKETS && ((int32_t)1 << b) < n) b++;
  return b;
}

static bool il__is_step(const il_engine *e, const il_batch_entry *batch, int32_t n) {
  il_backend *b = e->backend;
  const il_backend_ops *o = b->ops;
  if (e->graph_off || !o->capture_begin || !o->capture_end || !o->replay || !o->step_free) return false;
  if (e->fs.n_lanes != 1 || e->fs.lane[0].b != b || e->weights.out_b != b || e->n_devs != 1 || e->stream ||
      e->fs.numerics || e->model->hp.n_expert)
    return false;
  if (il__bucket(n) >= IL__GRAPH_BUCKETS) return false;
  for (int32_t i = 0; i < n; i++) {
    if (!batch[i].logits) return false;
    for (int32_t j = 0; j < i; j++)
      if (batch[j].seq == batch[i].seq) return false;
  }
  return true;
}

/* The step's device work: the forward pass and, for ids, the greedy sample op. */
static il_status il__step_ops(il_engine *e, const il_batch_entry *batch, int32_t n, int32_t n_logits, bool ids) {
  IL_TRY(il_model_forward_ops(&e->weights, &e->fs, batch, n, e->kv.views, n_logits));
  if (!ids) return IL_OK;
  il_backend *b = e->backend;
  il_forward_lane *lo = il_forward_lane_of(&e->fs, b);
  const il_sample_args greedy = {0, 0, 1};
  return b->ops->sample(b, e->smp_ids, il_tensor_rows(lo->logits, 0, n_logits), e->smp_u, &greedy);
}

/* Records and runs the step over the bucket's slot (whose step, if any, capture_end takes). On a
 * failure nothing ran: the caller runs the step eagerly. */
static il_status il__capture(il_engine *e, il__graph_slot *slot, const il_batch_entry *batch, int32_t n,
                             int32_t n_logits, bool ids) {
  il_backend *b = e->backend;
  il_step *s = slot->step;
  slot->step = NULL;
  il_status st = b->ops->capture_begin(b);
  if (st != IL_OK) {
    b->ops->step_free(b, s);
    return st;
  }
  st = il__step_ops(e, batch, n, n_logits, ids);
  if (st != IL_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", il_error_detail());
    (void)b->ops->capture_end(b, NULL); /* abandoned: nothing of it runs */
    b->ops->step_free(b, s);
    return il_error(st, "%s", why);
  }
  st = b->ops->capture_end(b, &s);
  if (st != IL_OK) return st;
  if (!s) { /* the ops ran as called and nothing was recorded (cpu, sim): nothing to replay */
    e->graph_off = true;
    return IL_OK;
  }
  slot->step = s;
  slot->n = n;
  e->graph_captures++;
  e->graph_recorded = true;
  return IL_OK;
}

il_status il__graph_pass(il_engine *e, const il_batch_entry *batch, int32_t n, bool ids, int32_t *n_logits,
                         bool *handled) {
  *handled = false;
  *n_logits = 0;
  e->graph_recorded = false;
  if (!il__is_step(e, batch, n)) return IL_OK;
  il_backend *b = e->backend;
  il__graph_slot *slot = &e->graph[ids][il__bucket(n)];
  IL_TRY(il_model_forward_upload(&e->weights, &e->fs, batch, n, e->kv.views, e->slots, n_logits));
  *handled = true;
  if (slot->step && slot->n == n) {
    il_status st = b->ops->replay(b, slot->step);
    if (st == IL_OK) {
      e->graph_replays++;
      e->graph_recorded = true;
      return IL_OK;
    }
    if (st != IL_ERR_UNSUPPORTED) return st;
    /* it names buffers the backend has since moved: recorded again below */
    b->ops->step_free(b, slot->step);
    slot->step = NULL;
  }
  if (slot->seen++ > 0 || slot->step) {
    il_status st = il__capture(e, slot, batch, n, *n_logits, ids);
    if (st == IL_OK) return IL_OK;
    static atomic_bool said; /* once per process: engines are opened per run of bench and experiment */
    if (!atomic_exchange(&said, true)) {
      il_log(IL_LOG_WARN, "warning: %s: a decode step could not be recorded as one graph (%s); decode steps run as "
                          "separate launches", e->info.name, il_error_detail());
    }
    e->graph_off = true;
    il_error_clear();
  }
  e->graph_eager++;
  return il__step_ops(e, batch, n, *n_logits, ids);
}

void il__graph_free(il_engine *e) {
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < IL__GRAPH_BUCKETS; i++) {
      if (e->graph[k][i].step) e->backend->ops->step_free(e->backend, e->graph[k][i].step);
      e->graph[k][i].step = NULL;
    }
}
