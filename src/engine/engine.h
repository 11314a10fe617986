/* engine/engine: the run loop: model + backend + KV cache + sampler, from one il_config.
 *
 * il_engine_open loads the model (a GGUF file or builtin:NAME), creates the backend, sizes the
 * context (the config's, else the model's training context capped at 4096, then halved until
 * the KV cache fits in half of the available memory, with a note on stderr) and allocates the
 * KV cache and activations. il_engine_decode runs any number of (seq, pos, token) entries,
 * split into forward passes of at most cfg.batch entries; prompt processing and generation are
 * the same call. il_engine_generate is the loop `run` uses: prompt, then sample -> decode.
 * Not for: argument parsing (cli/) or measurement reports (lab/).
 */
#ifndef IL_ENGINE_ENGINE_H
#define IL_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/timer.h"
#include "engine/config.h"
#include "engine/kv.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/startup.h"
#include "model/llama.h"
#include "model/tokenizer.h"

struct il_engine {
  il_config cfg;
  il_backend *backend;    /* the device (--device) */
  il_backend *host;       /* where components placed on the CPU run: a cpu backend, or the device
                             itself when it is the CPU */
  il_backend_info info;   /* the device's facts (kind, threads, kernel level) */
  uint8_t *layer_dev;     /* [n_layer]: 1 = on the device */
  il_backend **layer_b;   /* [n_layer]: the backend of each layer */
  bool embd_dev, out_dev, auto_layers;
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
  const il_attn_kernel *attn; /* the attention kernel in use */
  char attn_why[256];     /* why auto skipped the kernels before it ("" when none were) */
  int32_t *slots;         /* host: KV cell of each entry of a pass [n_batch] */
  int32_t n_ctx, n_seq, n_batch, n_logits_max;
  size_t fixed_bytes;     /* device memory in use before the engine allocated (context overhead) */
  double load_seconds;
  il_startup startup;     /* the open's timeline (engine/startup.h) */
  bool ctx_capped;        /* the context was reduced to fit memory */
};

/* The public functions (inferlab.h) il_engine_open, il_engine_free, il_engine_decode, the
 * il_engine_seq_* operations, il_engine_tokenize and the accessors are declared there. Beyond
 * them: on an IL_ERR_OOM from il_engine_open the error detail is the out-of-memory report of
 * engine/oom.h, with one suggested change computed from this run's buffer sizes; decode splits
 * the entries into forward passes of at most n_batch entries, of which at most n_logits_max
 * want logits (one per sequence, or every entry with cfg.logits_all). */

/* Called with each generated token and its text (possibly empty while a UTF-8 character is
 * incomplete), and once with token -1 for text still queued at the end. Return false to stop. */
typedef bool (*il_token_fn)(void *ud, int32_t token, const char *text, size_t len);

/* The `run` loop: a request (engine/request.h) for the tokenized prompt in sequence 0, each
 * token handed to fn. *stats is filled even on failure. */
il_status il_engine_generate(il_engine *e, const int32_t *prompt, int32_t n_prompt, const il_request_params *p,
                             il_token_fn fn, void *ud, il_gen_stats *stats);

#endif
