/* engine/engine_impl: the engine's state, private to engine/ (engine.c, request.c, sched.c).
 *
 * Everything outside engine/ goes through the functions of inferlab.h and engine/engine.h:
 * the accessors, il_engine_snapshot_get for reports. White-box tests of the engine include
 * this header too; nothing else may.
 * Not for: callers' views of an engine (il_engine_snapshot).
 */
#ifndef IL_ENGINE_ENGINE_IMPL_H
#define IL_ENGINE_ENGINE_IMPL_H

#include "backend/registry.h"
#include "engine/engine.h"
#include "engine/kv.h"
#include "engine/oom.h"
#include "model/tp.h"

/* One bucket of recorded decode steps (engine/graph.h). */
#define IL__GRAPH_BUCKETS 12 /* batch sizes 1, 2, 3-4, ..., 1025-2048 */
typedef struct {
  il_step *step; /* the bucket's recorded step, NULL: none yet */
  int32_t n;     /* the batch size it was recorded at */
  int32_t seen;  /* decode steps of the bucket run so far */
} il__graph_slot;

struct il_engine {
  il_config cfg;
  il_backend *backend;    /* the device (--device), the first of a device list */
  il_backend *devs[IL_BACKEND_LIST_MAX]; /* a --device list's devices in order; devs[0] = backend */
  int n_devs;
  int32_t split_n[IL_BACKEND_LIST_MAX];  /* a list: layers on each device, in order (from --split) */
  size_t dev_fixed[IL_BACKEND_LIST_MAX]; /* a list: each device's memory in use before the engine allocated */
  int32_t gl_counts[IL_BACKEND_LIST_MAX]; /* --gpu-layers A,B,...: the layers of each device of a list */
  bool gl_list;                          /* --gpu-layers gave one count per device */
  il_backend *host;       /* where components placed on the CPU run: a cpu backend, or the device
                             itself when it is the CPU */
  il_backend_info info;   /* the device's facts (kind, threads, kernel level) */
  uint8_t *layer_dev;     /* [n_layer]: 1 = on the device */
  il_backend **layer_b;   /* [n_layer]: the backend of each layer */
  bool embd_dev, out_dev, auto_layers;
  bool exps_dev;          /* MoE: experts with their layers (default); false: --place exps=cpu */
  bool auto_retry;        /* auto's first choice did not open: this is a smaller count */
  bool stream;            /* --offload stream */
  int32_t n_dev_layers;
  il_model *model;        /* host side: metadata, tokenizer data, weights in the mmap */
  il_model_dev weights;   /* the weights as the backend reads them */
  il_vocab *vocab;
  il_kv_cache kv;
  il_kv_opts kv_opts;     /* cell type and layout from the config */
  il_dtype act_type;      /* --dtype: activations stored at f32, f16 or bf16 */
  il_forward_state fs;
  il_model_tp tp;         /* --tp: the shards (tp.n > 1; shard 0 is weights and fs) */
  il_numerics numerics;   /* what the numerics observer found (--check-numerics; fs.numerics points here) */
  const il_attn_kernel *attn; /* the attention kernel in use */
  char attn_why[256];     /* why auto skipped the kernels before it ("" when none were) */
  int32_t *slots;         /* host: KV cell of each entry of a pass [n_batch] */
  il_tensor smp_ids, smp_u; /* on the output's backend, [1 x n_logits_max] each: the ids and draws
                               of il_engine_decode_greedy (made at its first call) */
  int32_t n_ctx, n_seq, n_batch, n_logits_max;
  size_t fixed_bytes;     /* device memory in use before the engine allocated (context overhead) */
  double load_seconds;
  il_startup startup;     /* the open's timeline (engine/startup.h) */
  bool ctx_capped;        /* the context was reduced to fit memory */
  bool ctx_sized;         /* n_ctx is final (the default context is sized after the weights load) */
  il__graph_slot graph[2][IL__GRAPH_BUCKETS]; /* recorded decode steps: [1] ending in sampled ids,
                                                 [0] in logits (engine/graph.h) */
  bool graph_off;         /* a capture failed, or the backend records nothing: decode steps run eagerly */
  bool graph_recorded;    /* the last pass ran as a recorded step (a graph launch) */
  uint64_t graph_captures, graph_replays, graph_eager; /* decode steps by how they ran */
};


/* One configuration the engine could run: what the sizing below and the OOM fixes vary. */
typedef struct {
  int32_t n_ctx, n_seq, n_batch;
  il_dtype wtype;         /* IL_DTYPE_COUNT: as loaded */
  il_kv_opts kv;
  const uint8_t *layer_dev; /* [n_layer] 1 = on the device */
  bool embd_dev, out_dev;
  bool exps_dev;            /* MoE experts with their layers (false: on the CPU) */
  bool stream;              /* --offload stream: device layers take two slots, not their weights */
  il_dtype act_type;        /* --dtype */
  const int32_t *split;     /* a --device list: layers on each device, in order (NULL: one device) */
} il__engine_shape;

/* Tokens per pass: the config's, at most every cell of the cache. */
int32_t il__batch_for(int32_t batch, int32_t n_ctx, int32_t n_seq);
/* Rows of logits a pass of n_batch entries over n_seq sequences keeps. */
int32_t il__n_logits(const il_engine *e, int32_t n_batch, int32_t n_seq);
/* What the device holds for configuration s: the numbers the allocations use (engine.c). */
il_oom_need il__engine_need(const il_engine *e, const il__engine_shape *s);
/* What device k of a --device list holds for configuration s (s->split gives its layers; the
 * embedding is on the first device, the output head on the last): the same numbers the
 * allocations use, with that device's backend and fixed overhead. */
il_oom_need il__engine_need_dev(const il_engine *e, const il__engine_shape *s, int k);
/* Whether configuration s fits: its need on every device of a list within that device's size
 * (one device: within `cap`). *need_k: the need on device k (one device: the whole need). */
bool il__engine_fits(const il_engine *e, const il__engine_shape *s, size_t cap, int k, size_t *need_k);
/* A device's size as its memory op gives it. */
size_t il__device_total(il_backend *b);
/* The split --split auto chooses for configuration s: the layer counts, in order, that make the
 * largest ratio of a device's need to its size as small as it can be (each device's whole
 * need: weights, KV, activations, workspace and fixed overhead). Writes e->n_devs counts. */
void il__engine_split_auto(const il_engine *e, const il__engine_shape *s, int32_t *counts);
/* The context the engine gives a run whose config leaves it to the engine: the model's
 * training context capped at 4096, halved (not below 256) while the KV cache of s's placement
 * takes more than half of `available` bytes. *capped: it was halved. */
int32_t il__engine_default_ctx(const il_engine *e, size_t available, bool *capped);
/* The same for a --device list: halved while the KV cache of some device's layers (counts[k]
 * of them) takes more than half of available[k], the bytes that device has beside its weights. */
int32_t il__engine_default_ctx_list(const il_engine *e, const int32_t *counts, const size_t *available, bool *capped);
/* After an allocation of configuration cur failed: builds the out-of-memory report (engine/
 * oom.c: cause, need, the fixes), keeps it for il_oom_report_last and returns IL_ERR_OOM with
 * its text as the error detail. */
il_status il__oom_fail(il_engine *e, const il__engine_shape *cur);
#endif
