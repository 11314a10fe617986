/* model/llama: the Llama-family transformer: hyperparameters, weights, and the batched
 * forward pass, written against the backend interface.
 *
 * A token's path: embedding lookup -> n_layer x { RMSNorm -> Q,K,V projections (+ biases for
 * qwen2) -> per-head RMSNorm of q and k (qwen3) -> RoPE -> store K,V -> grouped-query attention
 * -> output projection -> residual -> RMSNorm -> SwiGLU FFN -> residual } -> final RMSNorm ->
 * output head (the embedding matrix when output.weight is absent). Architectures differ only in
 * a row of the arch table (RoPE pairing, QKV biases, QK-norm, fused tensors), so adding one is
 * a table line plus its tensor names.
 *
 * Weights are borrowed: from the GGUF mapping, or from the built-in generator's buffers, both
 * owned by the model. 1-D tensors (norms, biases) are converted to F32 copies at load.
 * Implemented in three files: model/llama.c (architectures, hyperparameters, the model),
 * model/weights.c (binding, placement, --offload stream) and model/forward.c (the pass).
 * Not for: the KV cache layout or scheduling (engine/), tokenization (model/tokenizer).
 */
#ifndef IL_MODEL_LLAMA_H
#define IL_MODEL_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/status.h"
#include "format/gguf.h"

/* A weight matrix [n_out x n_in] in its storage type, in host memory (the mmap or a
 * model-owned buffer). Borrowed. */
typedef struct {
  const char *name;
  il_dtype type;
  int64_t n_in;      /* row length (GGUF ne[0]) */
  int64_t n_out;     /* rows (GGUF ne[1]) */
  size_t row_stride; /* bytes between rows */
  const void *data;
} il_weight;

typedef struct {
  char arch[32];       /* general.architecture: llama | mistral | qwen2 | qwen3 | phi3 | gemma3 */
  int32_t n_vocab;
  int32_t n_ctx_train; /* {arch}.context_length */
  int32_t n_embd;      /* {arch}.embedding_length */
  int32_t n_ff;        /* {arch}.feed_forward_length */
  int32_t n_layer;     /* {arch}.block_count */
  int32_t n_head;      /* {arch}.attention.head_count */
  int32_t n_head_kv;   /* {arch}.attention.head_count_kv (default n_head) */
  int32_t head_dim;    /* {arch}.attention.key_length (default n_embd / n_head) */
  int32_t n_rot;       /* {arch}.rope.dimension_count (default head_dim) */
  float norm_eps;      /* {arch}.attention.layer_norm_rms_epsilon */
  float rope_base;     /* {arch}.rope.freq_base (default 10000) */
  float rope_scale;    /* linear scaling factor: positions are divided by it (default 1) */
  il_rope_mode rope_mode;
  bool qkv_bias;
  bool qk_norm;        /* qwen3: q and k RMSNormed per head (attn_q_norm, attn_k_norm) before RoPE */
  bool fused;          /* phi3: q, k, v in one attn_qkv tensor, gate and up in one ffn_up of 2 n_ff rows */
  /* gemma3: the embedding scaled by sqrt(n_embd), the attention and FFN outputs RMSNormed
   * before their residual adds (post_attention_norm, post_ffw_norm), GeGLU for SwiGLU, and
   * layers that are local (sliding window, their own RoPE base) except every swa_pattern-th */
  bool gemma;
  int32_t swa;         /* {arch}.attention.sliding_window (0: none) */
  int32_t swa_pattern; /* layer l is global when l % swa_pattern == swa_pattern - 1 */
  float rope_base_local; /* RoPE base of the local layers (scale 1) */
  float attn_scale;    /* q . k multiplier (0: 1 / sqrt(head_dim)) */
  /* mixture of experts (0 experts: a dense FFN). Each token's FFN is the weighted sum of the
   * n_expert_used experts its router ranks highest (softmax over n_expert logits, top-k, the k
   * weights renormalized to sum 1 when expert_weights_norm), as llama.cpp runs mixtral. */
  int32_t n_expert;      /* {arch}.expert_count */
  int32_t n_expert_used; /* {arch}.expert_used_count */
  int32_t n_ff_exp;      /* an expert's FFN length: {arch}.expert_feed_forward_length (default n_ff) */
  bool expert_weights_norm; /* {arch}.expert_weights_norm (default true) */
} il_hparams;

/* A MoE layer's FFN weights. The experts' GGUF tensors are 3-D [ne0 = in, ne1 = out, ne2 =
 * n_expert]; they are bound as one 2-D stack of n_expert * out rows, expert e's matrix being
 * rows [e * out, (e + 1) * out), so an expert is a row view of the stack. */
typedef struct {
  il_weight gate_inp;                   /* ffn_gate_inp: (n_embd -> n_expert), the router */
  il_weight gate_exps, up_exps;         /* ffn_{gate,up}_exps: n_expert x (n_embd -> n_ff_exp) */
  il_weight down_exps;                  /* ffn_down_exps: n_expert x (n_ff_exp -> n_embd) */
} il_layer_moe;

typedef struct {
  const float *attn_norm;               /* (n_embd) */
  il_weight wq, wk, wv, wo;             /* (n_embd -> n_head*head_dim), (n_embd -> kv_dim) x2, (n_head*head_dim -> n_embd) */
  const float *bq, *bk, *bv;            /* qwen2 biases, else NULL */
  const float *q_norm, *k_norm;         /* qwen3 per-head norms (head_dim), else NULL */
  const float *attn_post_norm, *ffn_post_norm; /* gemma3 (n_embd), else NULL */
  const float *ffn_norm;                /* (n_embd) */
  il_weight w_gate, w_up, w_down;       /* (n_embd -> n_ff) x2, (n_ff -> n_embd); absent in a MoE */
  il_layer_moe moe;                     /* MoE models: the router and the experts */
} il_layer;

typedef struct il_model {
  il_hparams hp;
  il_weight tok_embd;     /* (n_vocab rows of n_embd) */
  const float *out_norm;  /* (n_embd) */
  il_weight output;       /* (n_vocab rows of n_embd); == tok_embd when tied */
  bool tied_output;
  il_layer *layers;       /* [n_layer] */
  char name[128];
  il_dtype main_type;     /* the type of most 2-D weights, for display */
  uint64_t n_params;
  uint64_t weight_bytes;  /* bytes of all tensors */
  /* tensor table (borrowed names/data) the weights were bound from, for info/convert */
  const il_gguf_tensor *tensors;
  int64_t n_tensors;
  /* owners */
  il_gguf *gguf;          /* when loaded from a file */
  void **owned;           /* buffers to il_mem_free at close */
  int64_t n_owned, cap_owned;
} il_model;

/* Reads and validates hyperparameters from GGUF metadata. Missing or inconsistent values are
 * IL_ERR_FORMAT naming the key (e.g. "llama.attention.head_count_kv = 3 does not divide
 * llama.attention.head_count = 8"); unknown architectures IL_ERR_UNSUPPORTED. */
il_status il_hparams_from_gguf(const il_gguf *g, il_hparams *hp);
/* Checks a filled il_hparams for consistency (shared by GGUF and built-in models). */
il_status il_hparams_validate(const il_hparams *hp, const char *where);
/* Fills architecture-dependent fields (rope mode, biases) from hp->arch. */
il_status il_hparams_set_arch(il_hparams *hp, const char *arch);
/* The architectures il_hparams_set_arch knows, for messages and --help: "llama, mistral, ...". */
const char *il_arch_names(void);

/* Binds the model's weights by GGUF tensor name from a tensor table, checking every shape
 * and type (errors name the tensor). Takes ownership of nothing; 1-D tensors are copied to
 * F32 in model-owned buffers. Called by il_model_open and by the built-in generator. */
il_status il_model_bind(il_model *m, const il_gguf_tensor *tensors, int64_t n_tensors);

/* The matmul weights of layer l (q, k, v, o, gate, up, down) as shapes: rows, cols and type
 * (force: that type instead of the stored one; IL_DTYPE_COUNT: as stored), no buffer: what the
 * seam's reserve and reserve_bytes read. Writes IL_MODEL_LAYER_MATMULS tensors; returns that. */
#define IL_MODEL_LAYER_MATMULS 7
int il_model_layer_shapes(const il_model *m, int32_t l, il_dtype force, il_tensor *out);
/* The output head's weight as a shape, the same way. */
il_tensor il_model_output_shape(const il_model *m, il_dtype force);

/* Opens a GGUF model file (weights stay in the mmap). Free with il_model_free. */
il_status il_model_open_gguf(const char *path, il_model **out);
/* Releases everything the model owns. NULL is ignored. */
void il_model_free(il_model *m);
/* Hands a buffer (from il_mem_alloc) to the model, which frees it at il_model_free. The
 * model owns it even when this fails (IL_ERR_OOM): it is freed at once. */
il_status il_model_own(il_model *m, void *buf);


/* Where each component computes: the embedding lookup, each layer, and the output head (final
 * norm + logits). A model placed on one backend has every entry equal. */
typedef struct {
  il_backend *embd, *out;
  il_backend **layer; /* [n_layer] */
  bool stream;        /* model offloading: layers on a device that cannot read host memory keep
                         their weights in host memory and stream through two device slots */
  bool load_pipeline; /* layers uploaded to a device: a thread reads (faults in) the next layers'
                         mapped pages while the current one is copied (--load-pipeline) */
  il_backend *exps;   /* MoE: where every layer's experts compute (--place exps=cpu); NULL: with
                         their layer. The router stays with the layer. */
  bool layers_only;   /* the layers alone: no embedding or output head is placed (embd_b and
                         out_b NULL; tensor parallelism's shards past the first, model/tp.h) */
} il_placement;

/* The model's weights as tensors on their components' backends: read in place from host memory
 * where the backend can (cpu: no copy), else uploaded once at init under the weights category. */
typedef struct {
  il_tensor attn_norm, ffn_norm;      /* F32 [1 x n_embd] */
  il_tensor wq, wk, wv, wo;           /* storage type */
  il_tensor bq, bk, bv;               /* F32 biases (qwen2), else buf == NULL */
  il_tensor q_norm, k_norm;           /* F32 [1 x head_dim] (qwen3), else buf == NULL */
  il_tensor attn_post_norm, ffn_post_norm; /* F32 [1 x n_embd] (gemma3), else buf == NULL */
  il_tensor w_gate, w_up, w_down;
} il_layer_dev;

/* A MoE layer's weights as placed: the router on the layer's backend, the expert stacks on the
 * experts' backend (il_model_dev.exps_b). */
typedef struct {
  il_tensor gate_inp;                 /* [n_expert x n_embd] */
  il_tensor gate_exps, up_exps;       /* [n_expert * n_ff_exp x n_embd] */
  il_tensor down_exps;                /* [n_expert * n_embd x n_ff_exp] */
} il_moe_dev;

/* The tensors of one layer, described once: the GGUF name after "blk.N.", the shape, and the
 * fields that hold it in il_layer (host) and il_layer_dev (placed), in il_layer_dev's order.
 * Binding, placement, the stream slots and the size estimates walk this table. */
typedef enum { IL_DIM_EMBD, IL_DIM_Q, IL_DIM_KV, IL_DIM_FF, IL_DIM_HEAD } il_dim;

/* Which architectures have a tensor: every one, or those with a feature of il_hparams. */
typedef enum { IL_NEED_ALWAYS, IL_NEED_QKV_BIAS, IL_NEED_QK_NORM, IL_NEED_POST_NORM } il_need;
/* Whether hp's architecture has the tensors of `need`. */
bool il_hparams_has(const il_hparams *hp, il_need need);

typedef struct {
  const char *name;  /* "attn_q.weight" */
  const char *slot;  /* the stream slot's buffer: "slot attn_q" */
  il_dim in, out;    /* a matrix [out rows x in] (GGUF ne[0] = in); a vector of `in` */
  bool vector;       /* norms and biases: F32 copies made at load */
  il_need need;      /* vectors: the architectures that have it (the others may leave it out) */
  const char *fused; /* matrices: the tensor that holds it with its neighbours where hp->fused
                        ("attn_qkv.weight": q, k, v; "ffn_up.weight": gate, up), else NULL */
  size_t host;       /* offsetof(il_layer, ...): an il_weight, or a const float * for a vector */
  size_t dev;        /* offsetof(il_layer_dev, ...): an il_tensor */
} il_layer_tensor;

#define IL_LAYER_TENSORS 16
extern const il_layer_tensor il_layer_tensors[IL_LAYER_TENSORS];
/* The sliding window of layer l: hp->swa on gemma3's local layers (a token sees its last swa
 * positions), 0 on every other layer (it sees all of them). */
int32_t il_hparams_window(const il_hparams *hp, int32_t l);
/* RoPE base and linear scale of layer l: gemma3's local layers have their own base and no
 * scaling; every other layer has rope_base and rope_scale. */
void il_hparams_rope(const il_hparams *hp, int32_t l, float *base, float *scale);
/* The length a dimension has in this model (n_embd, n_head * head_dim, n_head_kv * head_dim, n_ff,
 * head_dim). */
int64_t il_hparams_dim(const il_hparams *hp, il_dim d);

#define IL_MODEL_STREAMS 8 /* devices with streamed layers: a --device list's */

typedef struct {
  const il_model *model;
  il_backend *embd_b, *out_b;           /* as placed */
  /* --offload stream: two device slots, each holding one layer's weights; the next layer is
   * copied into the other slot on the backend's copy stream (upload_async) while this one
   * computes */
  bool stream;
  struct il_stream_dev {                /* per device whose layers stream (a --device list: each) */
    il_backend *b;
    il_layer_dev slot[2];
    int32_t slot_layer[2];                /* the layer each slot holds (-1: none) */
    il_event *slot_ev[2][IL_LAYER_TENSORS]; /* the copies into each slot still to wait for */
  } streams[IL_MODEL_STREAMS];
  int n_streams;
  uint64_t streamed_bytes;              /* weight bytes copied into the slots so far */
  il_backend **layer_b;                 /* [n_layer], owned copy of the placement */
  il_tensor tok_embd, out_norm, output; /* output shares tok_embd's buffer when tied and co-located */
  bool output_shared;
  il_layer_dev *layers;                 /* [n_layer] */
  il_moe_dev *moe;                      /* [n_layer] for a MoE model, else NULL */
  il_backend *exps_b;                   /* the experts' backend (NULL: each layer's own) */
  size_t uploaded_bytes;                /* bytes copied to devices (0 when read in place) */
  double pipeline_seconds;              /* --load-pipeline: the reading thread's time, overlapped */
  size_t released_bytes;                /* file-mapped weight pages released (cpu --repack) */
} il_model_dev;

/* Places the model's weights as p says (NULL: everything on b). On failure (IL_ERR_OOM from a
 * device) nothing is left allocated. Free with il_model_dev_free before the model or the
 * backends. */
il_status il_model_dev_init(il_model_dev *d, const il_model *m, il_backend *b, const il_placement *p);
/* Seconds the load pipeline's thread spent reading pages during the last il_model_dev_init
 * (0 without --load-pipeline or when it did not run). */
double il_model_dev_pipeline_seconds(const il_model_dev *d);
void il_model_dev_free(il_model_dev *d);
/* The weights of layer l on its backend, ready for the forward pass: d->layers[l], or with
 * --offload stream the slot that holds it (copied in now if it was not prefetched; the copy of
 * layer l+1 into the other slot is started). Errors: the copy's, "offload stream: ...". */
il_status il_model_dev_layer(il_model_dev *d, int32_t l, const il_layer_dev **out);
/* Waits for a weight copy in flight (--offload stream); its error, if any. */
il_status il_model_dev_sync(il_model_dev *d);
/* Bytes il_model_dev_init allocates on a backend that cannot read host memory: the whole model
 * (everything on one device), and each component. */
size_t il_model_dev_bytes(const il_model *m);
size_t il_model_embd_bytes(const il_model *m);  /* token_embd */
size_t il_model_out_bytes(const il_model *m);   /* output_norm and output (token_embd again when tied) */
size_t il_model_layer_bytes(const il_model *m, int l);   /* its tensors, the experts excepted */
size_t il_model_exps_bytes(const il_model *m, int l);    /* its experts (0 for a dense layer) */
/* Layer l's bytes with its matrices in `type` (IL_DTYPE_COUNT: as stored), the experts excepted,
 * from its shapes (a tensor-parallel shard's too); *n_tensors: how many tensors (buffers). */
size_t il_model_layer_bytes_as(const il_model *m, int l, il_dtype type, size_t *n_tensors);
/* The expert matmuls' shapes of layer l (the router and one expert's gate, up and down), the
 * way il_model_layer_shapes gives them; writes IL_MODEL_MOE_MATMULS, or 0 for a dense layer. */
#define IL_MODEL_MOE_MATMULS 4
int il_model_moe_shapes(const il_model *m, int32_t l, il_dtype force, il_tensor *out);

/* The I32 [1 x n] views of a pass's batch upload (one buffer: ids, then positions, sequences and
 * KV slots, and with sliding-window layers their ring slots, n entries each). */
typedef struct {
  il_tensor ids, pos, seq, slots;
  il_tensor ring_slots; /* models with sliding-window layers: their cells in a ring view (il_kv_view.ring) */
} il_batch_views;

/* One backend's share of the activation buffers, stored at the state's act_type (F32, F16 or
 * BF16; logits always F32). */
typedef struct {
  il_backend *b;
  il_tensor x, xb, xo;           /* [max_tokens x n_embd] */
  il_tensor q, att;              /* [max_tokens x n_head*head_dim] (lanes with layers) */
  il_tensor k, v;                /* [max_tokens x kv_dim] */
  il_tensor hb, hb2;             /* [max_tokens x n_ff] */
  il_tensor logits;              /* F32 [max_logits x n_vocab] (the output's lane) */
  il_tensor wide;                /* 16-bit act_type where the backend refuses some op on it: F32
                                  * [1 x chunk * widest op], the F32 copies such an op computes
                                  * on, one chunk of rows at a time */
  uint32_t take;                 /* the ops (1 << il_op) the backend computes on act_type itself
                                  * (supports(); all on an F32 lane): they run on the buffers */
  bool reserved;                 /* its reserve_act scratch is this lane's (16-bit, some op taken) */
  il_tensor batch;               /* I32 [1 x 4*max_tokens]: ids, positions, sequences, KV slots
                                  * (5*: and ring slots, with sliding-window layers) */
  const il_attn_kernel *attn;    /* chosen by the engine for this backend */
  il_tensor attn_ws;             /* its workspace (category workspace) */
  bool has_layers, has_output;
  /* MoE: the router's F32 logits [max_tokens x n_expert] (lanes with layers); an expert's input
   * rows, its gate/up and its output [max_tokens x n_embd | n_ff_exp] (the experts' lane) */
  il_tensor moe_logits, moe_x, moe_h, moe_h2, moe_y;
  bool has_exps;
} il_forward_lane;

#define IL_MAX_LANES 9 /* a --device list of up to 8 devices, and the CPU */

/* What the numerics observer found in the op results it saw: inf/nan counted in what the
 * stored type keeps, and the largest magnitude before rounding. Owned by whoever installs the
 * observer (the engine); the first place is kept until the owner resets the record
 * (il_numerics_reset). The names point at the ops' static names. */
typedef struct {
  int32_t layer;                 /* the layer of the ops now running (the forward pass sets it) */
  int32_t bad_layer;             /* first layer where inf/nan appeared (-1: none; n_layer: the output head) */
  const char *bad_block;         /* the op (the output view's name), or "output" for the logits */
  int64_t bad_count;
  float max_abs;                 /* largest finite magnitude seen before rounding */
  int32_t max_abs_layer;
  const char *max_abs_op;
  int64_t observed[IL_OP_COUNT]; /* op results checked, per op (a chunked op: once per chunk) */
} il_numerics;

/* No inf/nan seen, no magnitude yet. */
void il_numerics_reset(il_numerics *r);
/* The observer (backend.h: il_op_observer) with ctx an il_numerics: y's largest magnitude, then
 * y rounded to `stored` and its inf/nan counted, so the first op that made them is named. */
il_status il_numerics_observe(void *ctx, il_backend *b, il_op op, il_tensor y, il_dtype stored);

/* Activation buffers on every backend the placement uses, for batches of up to max_tokens
 * entries of which at most max_logits want logits; the host staging of one batch (one upload
 * per backend per pass) and of the residual where it crosses from one backend to the next. */
typedef struct {
  int32_t max_tokens, max_logits;
  il_forward_lane lane[IL_MAX_LANES];
  int n_lanes;
  int32_t *host_batch;           /* [4 (5) x max_tokens], as a lane's batch */
  float *staging;                /* [max_tokens x n_embd]: the residual between backends */
  int32_t attn_slice;            /* rows per slice for kernels that slice (0 = theirs) */
  uint64_t bytes_moved;          /* residual bytes downloaded + uploaded between backends so far */
  uint64_t passes, pipelined_passes; /* forward passes so far, those of them run as a pipeline */
  /* Mixed precision: activations are stored at act_type between ops. With F16 or BF16 each op
   * runs on chunks of `chunk` rows widened to F32 (compute and accumulation stay F32) and its
   * results are narrowed back: by the backend (in its reserve_act scratch, or in its kernels)
   * for the ops it takes 16-bit tensors of (lane.take), else by the pass in the lane's `wide`
   * scratch; with F32 chunk =
   * max_tokens and the ops read and write the buffers themselves. */
  il_dtype act_type;
  int32_t chunk;
  /* Numerics check (off: NULL): where the caller wants it, an observer of every op's result
   * (il_numerics_observe, installed on the lanes' backends for each pass) writes what it finds
   * into the caller's record; the forward pass itself computes none of it and only says which
   * layer's ops are running. */
  il_numerics *numerics;
  /* MoE routing on the host (forward.c, il__moe): the router's logits, each token's k experts
   * and weights, the normed rows and the experts' outputs per (token, rank) in F32 */
  float *moe_logits;             /* [max_tokens x n_expert] */
  int32_t *moe_sel;              /* [max_tokens x n_expert_used] */
  int32_t *moe_slot;             /* [max_tokens]: the (token, rank) of each row gathered for an expert */
  float *moe_w;                  /* [max_tokens x n_expert_used] */
  void *moe_rows;                /* [max_tokens x n_embd] at act_type: normed rows, then gathered */
  float *moe_out;                /* [max_tokens x n_expert_used x n_embd] */
  uint64_t expert_bytes;         /* hidden-row bytes downloaded + uploaded for the experts so far */
} il_forward_state;

/* llama.cpp's mixtral routing for one token: softmax over the n_expert logits, the k largest
 * probabilities (ties to the lower index), renormalized to sum 1 when norm. Writes sel[k], w[k]
 * in rank order. Cannot fail; 1 <= k <= n_expert. */
void il_moe_route(const float *logits, int32_t n_expert, int32_t k, bool norm, int32_t *sel, float *w);

/* Rows an op computes at once with activations of act_type for batches of max_tokens: all of
 * them for F32; for F16/BF16 a quarter, at least 16 and at most 256. Smaller chunks need less
 * F32 scratch but cost time where a matmul prepares its weights per call (the CPU GEMM packs
 * panels per call: docs/precision.md has the cost per chunk size). */
int32_t il_forward_chunk_rows(il_dtype act_type, int32_t max_tokens);
/* The ops (a mask of 1 << il_op) backend b computes on activations of act_type itself
 * (supports(); every op for F32); the pass widens the activations of the others. kv_type: the
 * KV cells (kv_store's and attention's type). */
uint32_t il_forward_take(il_backend *b, il_dtype act_type, il_dtype kv_type);
/* How many F32 chunk scratches a lane on b holds with activations of act_type: the pass's
 * (`wide`, where b does not take every op) and b's own (reserve_act, where it takes some): 0,
 * 1 or 2. b NULL: a backend that takes every op with its own scratch (cpu, sim). */
int il_forward_lane_scratches(il_backend *b, il_dtype act_type, il_dtype kv_type);
/* Bytes of one lane's activation buffers on b (NULL: as il_forward_lane_scratches) for these
 * sizes with activations of act_type and KV cells of kv_type: what il_forward_state_init
 * allocates on that backend under IL_MEM_ACTIVATIONS, both chunk scratches included, attention
 * workspace excluded. */
size_t il_forward_lane_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits, bool layers,
                             bool output, il_backend *b, il_dtype kv_type);
/* All lanes of a single-backend placement on b. */
size_t il_forward_state_bytes(const il_hparams *hp, il_dtype act_type, int32_t max_tokens, int32_t max_logits,
                              il_backend *b, il_dtype kv_type);
/* Allocates the lanes of d's placement and the workspace of the attention kernel each lane's
 * backend uses (attn_for(backend) -> kernel, chosen by the engine) for batches of max_tokens
 * over the caches kv (one view per layer, on that layer's backend). On failure nothing is left
 * allocated. */
il_status il_forward_state_init(il_forward_state *st, const il_model_dev *d, il_dtype act_type, int32_t max_tokens,
                                int32_t max_logits,
                                const il_attn_kernel *(*attn_for)(void *ctx, il_backend *b), void *ctx,
                                const il_kv_view *kv);
void il_forward_state_free(il_forward_state *st);
/* The lane of backend b, or NULL. */
il_forward_lane *il_forward_lane_of(il_forward_state *st, il_backend *b);
/* The views of a batch of n entries in lane ln's batch buffer. */
il_batch_views il_forward_batch_views(const il_forward_lane *ln, int32_t n);
/* The attention arguments of a batch of n tokens (views into lane ln) over one layer's cache. */
il_attn_args il_forward_attn_args(const il_model *m, const il_forward_lane *ln, int32_t n, const il_kv_view *kv);

/* Runs the batch: stores each entry's K and V at KV cell slots[i] of every layer (kv[layer]; a
 * layer whose view is a ring, il_kv_view.ring, at seq * ring + pos % ring instead) and writes logits [n_vocab] for every entry with .logits set, in batch order, to rows 0.. of
 * the output lane's logits; *n_logits is set to their count (at most st->max_logits). Entries
 * attend to positions 0..pos of their own sequence, so earlier positions must already be in the
 * cache or earlier in the same batch. 1 <= n <= st->max_tokens. Where consecutive components
 * sit on different backends the residual moves through host staging (counted in bytes_moved).
 * d is not const: with --offload stream the forward pass refills its layer slots. */
il_status il_model_forward(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                           const il_kv_view *kv, const int32_t *slots, int32_t *n_logits);

/* il_model_forward in two halves, for a caller that records the ops as one device step
 * (engine/graph.c): _upload checks the entries and uploads them to every lane (*n_logits as
 * above); _ops then runs the pass on what was uploaded, with no transfer or sync of its own when
 * there is one lane and no MoE layer, and reports nothing to an observer (the caller runs it
 * without --check-numerics). n and n_logits must be those of the upload. */
il_status il_model_forward_upload(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                                  const il_kv_view *kv, const int32_t *slots, int32_t *n_logits);
il_status il_model_forward_ops(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                               const il_kv_view *kv, int32_t n_logits);

/* il_model_forward as a pipeline (--micro-batches): the batch cut into n_mb micro-batches of
 * consecutive entries, each stage (a run of consecutive components on one backend) on its own
 * thread, so the devices of a layer split work on different micro-batches at once. Same
 * results and cache contents as il_model_forward, logits in batch order. Runs as one
 * il_model_forward where there is nothing to overlap (n_mb < 2, one stage) or where the pass
 * shares host state between stages (--check-numerics, MoE layers, --offload stream, a backend
 * holding two stages). */
il_status il_model_forward_pipelined(il_model_dev *d, il_forward_state *st, const il_batch_entry *batch, int32_t n,
                                     const il_kv_view *kv, const int32_t *slots, int32_t n_mb, int32_t *n_logits);
/* The pipeline's stages under d's placement: 0 where a backend would hold two of them. */
int il_model_pipeline_stages(const il_model_dev *d);

#endif
