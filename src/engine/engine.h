/* engine/engine: the run loop: model + backend + KV cache + sampler, from one il_config.
 *
 * il_engine_open loads the model (a GGUF file or builtin:NAME), creates the backend, sizes the
 * context (the config's, else the model's training context capped at 4096, then halved until
 * the KV cache fits in half of the available memory, with a note on stderr) and allocates the
 * KV cache and activations. il_engine_decode runs any number of (seq, pos, token) entries,
 * split into forward passes of at most cfg.batch entries; prompt processing and generation are
 * the same call; il_engine_snapshot_get copies out what reports show. The engine's struct is
 * private to engine/ (engine_impl.h); the `run` loop is il_engine_generate (engine/request.h).
 * Not for: argument parsing (cli/) or measurement reports (lab/).
 */
#ifndef IL_ENGINE_ENGINE_H
#define IL_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/registry.h"
#include "engine/config.h"
#include "engine/sampler.h"
#include "engine/startup.h"
#include "memory/caching.h"
#include "memory/mem.h"
#include "model/llama.h"
#include "model/tokenizer.h"

/* What an open engine is doing, for reports (run's summary, bench results, the planner, the
 * server's /metrics): placement, sizes, attention kernel, bytes moved, numerics and the device
 * allocator's counters, copied out so that nothing outside engine/ reads struct il_engine. */
typedef struct {
  il_backend_info device;  /* the device's facts (kind, name, threads, kernel level, host_visible) */
  double load_seconds;     /* il_engine_open: model load, placement and allocation */
  /* sizes */
  int32_t n_ctx, n_seq, n_batch, n_logits_max;
  bool ctx_capped;         /* the default context was reduced to fit memory */
  /* placement */
  int32_t n_layer, n_dev_layers;
  bool embd_dev, out_dev;  /* token_embd / output head on the device */
  bool split;              /* some components run on a CPU backend beside the device */
  bool stream;             /* --offload stream: layer weights copied through two device slots */
  uint64_t streamed_bytes; /* weight bytes copied into those slots so far */
  /* attention and KV cache */
  char attn[32];           /* the attention kernel in use */
  char attn_why[256];      /* why auto skipped the kernels before it ("" when none were) */
  bool kv_paged;
  int32_t kv_block;        /* paged: positions per block */
  il_dtype kv_type, act_type;
  /* bytes moved */
  uint64_t residual_bytes; /* residual downloaded + uploaded between backends so far */
  int32_t micro_batches;   /* --micro-batches */
  int pipeline_stages;     /* the stages a pipelined pass runs (0: a backend would hold two) */
  uint64_t pipelined_passes, passes; /* passes run as a pipeline, passes in all, so far */
  int32_t n_expert;        /* MoE: experts per layer (0: dense) */
  bool exps_dev;           /* MoE: experts with their layers (false: --place exps=cpu) */
  uint64_t expert_bytes;   /* MoE: hidden rows downloaded + uploaded around the experts so far */
  il_transfer_stats transfers; /* host<->device copies (zero on cpu) */
  /* numerics (--check-numerics): the first inf/nan, else the largest magnitude */
  bool check_numerics;
  int32_t bad_layer;       /* -1: none; n_layer: the output head */
  char bad_block[32];
  int64_t bad_count;
  float max_abs;
  int32_t max_abs_layer;
  char max_abs_op[32];
  /* device memory */
  bool has_allocator;      /* the device has a caching allocator: alloc is filled */
  il_caching_stats alloc;
  il_mem_stats mem;        /* the device space's counters by category (the host's for cpu) */
  size_t fixed_bytes;      /* device memory in use before the engine allocated (context overhead) */
  /* a --device list (n_devs > 1): each device's facts, layers and counters, in list order;
   * devs[0] is `device` above */
  int32_t n_devs;
  struct {
    il_backend_info device;
    int32_t n_layers;        /* layers placed on it */
    bool has_allocator;
    il_caching_stats alloc;
    il_mem_stats mem;        /* its memory space's counters by category (peaks: what it held at most) */
    size_t fixed_bytes;      /* its memory in use before the engine allocated (context overhead) */
    il_transfer_stats transfers; /* IL_ENGINE_SNAP_ALL only */
  } devs[IL_BACKEND_LIST_MAX];
  /* --tp: every layer split across the devs (tp > 1); the sums after each block */
  int32_t tp;
  bool tp_nccl;              /* the sums run through NCCL on the devices (else through the host) */
  uint64_t tp_allreduces;    /* IL_ENGINE_SNAP_ALL: all-reduces so far (two per layer per pass) */
  uint64_t tp_allreduce_bytes; /* their bytes, every device's sends and receives */
  uint64_t tp_broadcast_bytes; /* the embedding rows sent from the first device to the others */
} il_engine_snapshot;

/* What il_engine_snapshot_get fills. IL_ENGINE_SNAP_MEMORY: the fields fixed at open (device,
 * sizes, placement, attention, types) and the device memory counters, which the allocator and
 * the memory space keep for any thread: safe while another thread decodes (the server's
 * /metrics). IL_ENGINE_SNAP_ALL adds the counters decoding writes (bytes moved, streamed
 * bytes, transfers, numerics): call it from the engine's thread, between decodes. */
typedef enum { IL_ENGINE_SNAP_MEMORY = 1, IL_ENGINE_SNAP_ALL = 3 } il_engine_snap_parts;

/* Fills *out (zeroed first) with the parts asked for. Can't fail. */
void il_engine_snapshot_get(const il_engine *e, il_engine_snap_parts parts, il_engine_snapshot *out);

/* Writes n layer counts as a --split value ("3,1"), truncated to size. */
void il_split_format(const int32_t *counts, int n, char *buf, size_t size);

/* The device allocator's segments and blocks as they are now (for memory maps), into *out;
 * release with il_caching_snapshot_free. IL_ERR_UNSUPPORTED when the device has no caching
 * allocator (cpu), IL_ERR_OOM when the host is out of memory. */
IL_NODISCARD il_status il_engine_memory_map(const il_engine *e, il_caching_snapshot *out);
/* The options e was opened with, after any --fit or --gpu-layers auto change. Borrowed. */
const il_config *il_engine_config(const il_engine *e);

/* Device sampling (greedy): true when the output's backend keeps its buffers off the host and
 * has a sample op, so il_engine_decode_greedy brings back 4 bytes per logits row instead of the
 * row. il_engine_decode_greedy is il_engine_decode with ids_out[i] = the argmax (the lowest id
 * on ties) of the i-th logits row, or -1 where that row holds a NaN or an infinity (decode the
 * entries again with il_engine_decode to read it). IL_ERR_UNSUPPORTED when the backend cannot;
 * IL_ERR_OOM for the ids' and draws' buffers (made at the first call). */
bool il_engine_samples_on_device(const il_engine *e);
IL_NODISCARD il_status il_engine_decode_greedy(il_engine *e, const il_batch_entry *batch, int32_t n, int32_t *ids_out);

/* The public functions (inferlab.h) il_engine_open, il_engine_free, il_engine_decode, the
 * il_engine_seq_* operations, il_engine_tokenize and the accessors are declared there. Beyond
 * them: on an IL_ERR_OOM from il_engine_open the error detail is the out-of-memory report of
 * engine/oom.h, with one suggested change computed from this run's buffer sizes; decode splits
 * the entries into forward passes of at most n_batch entries, of which at most n_logits_max
 * want logits (one per sequence, or every entry with cfg.logits_all). */

#endif
