/* model/tp: tensor parallelism (--tp N): every layer split across N devices, Megatron-LM's way.
 *
 * Shard s of N holds, of every layer: the rows of Q, K, V, gate and up that give its share of
 * the heads and of the FFN (query heads [s H/N, (s+1) H/N), KV heads [s Hkv/N, (s+1) Hkv/N),
 * FFN units [s F/N, (s+1) F/N): a column-parallel matmul, each shard's output its own), and the
 * matching columns of O and down (row-parallel: each shard's product is a partial sum of the
 * whole). The residual is replicated: every shard norms it, runs its heads' attention over its
 * own KV heads' cells and its FFN units, and after O and after down the partials are summed
 * across the shards (an all-reduce) and added to every shard's residual. Shard 0 also holds the
 * embedding and the output head: the first residual is broadcast from it, the logits are its.
 *
 * A shard is an il_model of its own: the model's hyperparameters with n_head, n_head_kv and n_ff
 * divided by N, and weights that are views of the model's rows (Q, K, V, gate, up, biases) or
 * copies of the block-aligned column ranges of O and down (packed, so a device holds 1/N of
 * them). Each shard is placed with il_model_dev_init on its device and runs in a forward state
 * of its own, so every backend op is the one-device op on a smaller matrix.
 *
 * The all-reduce: NCCL where every shard is a cuda device (backend `native`, NCCL loaded with
 * dlopen), else the host's fixed-order sum (backend/allreduce.h). The sum's order differs from
 * one device's dot product, so logits match one device within float rounding, not bitwise.
 *
 * Not for: MoE layers, --offload stream, gemma-style models whose KV heads do not divide (each
 * is refused with the reason), layer splits across devices (the placement; --split).
 */
#ifndef IL_MODEL_TP_H
#define IL_MODEL_TP_H

#include "backend/allreduce.h"
#include "model/llama.h"

#define IL_TP_MAX 8

typedef struct {
  int n;
  il_model shard[IL_TP_MAX]; /* the shards' models (hparams and weights as above) */
  il_layer *layers[IL_TP_MAX];
  void *packed[IL_TP_MAX];   /* shard s's packed columns of O and down, host memory */
  size_t packed_bytes[IL_TP_MAX];
  il_backend *b[IL_TP_MAX];
  il_model_dev *dev[IL_TP_MAX];     /* dev[0]: the caller's (embedding and output head too) */
  il_forward_state *st[IL_TP_MAX];  /* st[0]: the caller's */
  il_model_dev own_dev[IL_TP_MAX];  /* shards 1..n-1 */
  il_forward_state own_st[IL_TP_MAX];
  bool placed, stated;
  float *scratch;                   /* the host all-reduce's [2 x max_tokens x n_embd] */
  il_nccl nccl;                     /* every shard on a cuda device: NCCL's table and communicators */
  bool use_nccl;
  void *comms[IL_TP_MAX];
  uint64_t allreduces;              /* all-reduces run so far (two per layer per pass) */
  uint64_t allreduce_bytes;         /* bytes they moved, every device's sends and receives */
  uint64_t broadcast_bytes;         /* the embedding's rows sent from shard 0 to the others */
} il_model_tp;

/* Splits m into n shards (t->shard[0..n)); shapes: the weights are not read (the planner's dry
 * devices read none; m's matrices may then be stand-ins). IL_ERR_INVALID_ARG naming --tp where n does not
 * divide the heads, the KV heads or the FFN, or a shard's columns of O or down do not fall on the
 * weight type's blocks; IL_ERR_UNSUPPORTED for MoE models. n = 1 is one shard (the model's
 * shapes). Free with il_model_tp_free. */
IL_NODISCARD il_status il_model_tp_split(il_model_tp *t, const il_model *m, int n, bool shapes);
/* Places shard s on b[s]: shard 0 into dev0 with placement p0 (its embedding and output head
 * too; p0's layers must all be b[0]), shards 1.. into t's own devs, layers only. Opens NCCL and
 * its communicators when every b[s] is a cuda device. On failure nothing of t's is placed (dev0
 * is the caller's to free). */
IL_NODISCARD il_status il_model_tp_place(il_model_tp *t, il_backend *const *b, il_model_dev *dev0, const il_placement *p0);
/* The forward states: st0 (the caller's, over dev0) and one per further shard, as
 * il_forward_state_init, with kv the shards' views ([n x n_layer], shard s's at s * n_layer). */
IL_NODISCARD il_status il_model_tp_state(il_model_tp *t, il_forward_state *st0, il_dtype act_type, int32_t max_tokens,
                                         int32_t max_logits, const il_attn_kernel *(*attn_for)(void *ctx, il_backend *b),
                                         void *ctx, const il_kv_view *kv);
/* Frees what t owns (shards 1.. and their states, the packed columns, NCCL's communicators); not
 * dev0 or st0, which the caller frees before or after. */
void il_model_tp_free(il_model_tp *t);
/* Bytes of weights shard s places (its layers; shard 0's embedding and output head too). */
size_t il_model_tp_shard_bytes(const il_model_tp *t, int s);

/* il_model_forward across the shards: the same entries, slots and logits (rows 0.. of st[0]'s
 * output lane), kv as for il_model_tp_state. */
IL_NODISCARD il_status il_model_forward_tp(il_model_tp *t, const il_batch_entry *batch, int32_t n, const il_kv_view *kv,
                                           const int32_t *slots, int32_t *n_logits);

#endif
