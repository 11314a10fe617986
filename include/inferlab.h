/* inferlab.h: the public C API of libinferlab.
 *
 * One self-contained include for programs that embed the engine, in the manner of llama.h:
 * opaque handles (il_config, il_engine, il_model, il_vocab, il_sampler, il_request) that the
 * library allocates and the caller frees with the matching *_free, plain parameter structs
 * the caller fills (il_request_params, il_sampler_params, il_batch_entry), and il_status error
 * values with a detail message. Nothing here includes an internal header; the library exports
 * exactly the functions marked IL_API (it is built with -fvisibility=hidden).
 *
 * Engine options (model, device, threads, ctx, kv-type, attn, gpu-layers, ... every flag of
 * `inferlab run --help` that is not per request) are set by name on an il_config, so a new
 * option never changes this header or the ABI. What one generation asks for (prompt, sampling,
 * n_predict) is an il_request_params, separate from the engine it runs on.
 *
 *   il_config *cfg = il_config_new();              // defaults: builtin:tiny, all cores
 *   il_config_set(cfg, "model", "model.gguf", "example");
 *   il_engine *e;
 *   if (il_engine_open(cfg, &e) != IL_OK) { fprintf(stderr, "%s\n", il_error_detail()); ... }
 *   il_request_params p = il_request_default_params();
 *   p.n_predict = 32;
 *   il_request *r;
 *   il_request_new(e, "Once upon a time", &p, &r);
 *   int32_t tok; const char *text; size_t len;
 *   while (il_request_next(r, &tok, &text, &len) == IL_OK && tok >= 0) fwrite(text, 1, len, stdout);
 *   il_request_free(r); il_engine_free(e); il_config_free(cfg);
 *
 * Threads: one engine is used by one thread at a time; error details are per thread.
 * Link: `pkg-config --cflags --libs inferlab`, or find_package(inferlab) and inferlab::inferlab.
 */
#ifndef INFERLAB_H
#define INFERLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define IL_API __attribute__((visibility("default")))
#else
#define IL_API
#endif

/* On functions returning il_status: a caller that drops the status gets a compiler warning,
 * since an error ignored there surfaces later as wrong output far from its cause. */
#if defined(__GNUC__) || defined(__clang__)
#define IL_NODISCARD __attribute__((warn_unused_result))
#else
#define IL_NODISCARD
#endif

/* ---- errors ------------------------------------------------------------------------------ */

/* X(name, value, message): one table gives the codes, their names and default messages. */
#define IL_STATUS_TABLE(X)                                                              \
  X(OK, 0, "success")                                                                   \
  X(ERR_INVALID_ARG, 1, "invalid argument")                                             \
  X(ERR_IO, 2, "input/output error")                                                    \
  X(ERR_FORMAT, 3, "malformed input file")                                              \
  X(ERR_UNSUPPORTED, 4, "unsupported feature or type")                                  \
  X(ERR_OOM, 5, "out of memory")                                                        \
  X(ERR_NOT_FOUND, 6, "not found")                                                      \
  X(ERR_RANGE, 7, "value out of range")                                                 \
  X(ERR_DEVICE, 8, "device error")                                                      \
  X(ERR_INTERNAL, 9, "internal error")                                                  \
  X(ERR_OUTPUT, 10, "cannot write the output file")                                    \
  X(ERR_BUSY, 11, "busy: try again later")

typedef enum {
#define IL__STATUS_ENUM(name, value, msg) IL_##name = value,
  IL_STATUS_TABLE(IL__STATUS_ENUM)
#undef IL__STATUS_ENUM
} il_status;

/* "IL_ERR_FORMAT"-style name of a code; "IL_UNKNOWN" for values outside the table. */
IL_API const char *il_status_name(il_status s);
/* One-line default message for a code. Never NULL. */
IL_API const char *il_status_message(il_status s);
/* What failed and where (file offset, tensor name, option name), recorded by the last failing
 * call on this thread; "" when none. Borrowed: valid until the next failure on this thread. */
IL_API const char *il_error_detail(void);

/* The library's version, "MAJOR.MINOR.PATCH". Static storage. */
IL_API const char *il_version(void);

/* ---- notes --------------------------------------------------------------------------------- */

typedef enum { IL_LOG_INFO, IL_LOG_WARN } il_log_level;
/* msg is one line without the trailing newline; borrowed for the call. */
typedef void (*il_log_fn)(void *ud, il_log_level level, const char *msg);
/* Where the library's notes go (the context was reduced to fit, an option warning, a change
 * --fit applied); the library never prints. NULL: notes are dropped. Set it before using the
 * library; it may be called from any thread that runs library code. */
IL_API void il_log_set(il_log_fn fn, void *ud);

/* ---- memory -------------------------------------------------------------------------------- */

/* What host and device bytes are for, as memory reports name them. */
typedef enum {
  IL_MEM_WEIGHTS,
  IL_MEM_KV,          /* KV cache cells (their bookkeeping is other) */
  IL_MEM_ACTIVATIONS,
  IL_MEM_WORKSPACE,   /* scratch of one operation (attention, matmul packing, a prompt batch) */
  IL_MEM_STAGING,     /* host copies on their way to or from a device */
  IL_MEM_MODEL,       /* model metadata and tables: GGUF index, tensor list, layers, conversion */
  IL_MEM_TOKENIZER,   /* vocabulary, its indexes, merges, pre-tokenizer, token ids, detokenizers */
  IL_MEM_SCHEDULER,   /* requests, sequence slots and sampling state of the engine's scheduler */
  IL_MEM_SERVER,      /* HTTP connections, request bodies, responses, chat prompts */
  IL_MEM_OTHER,       /* everything else: backends' records, doctor, the lab, the CLI */
  IL_MEM_CATEGORY_COUNT
} il_mem_category;

typedef struct {
  size_t current[IL_MEM_CATEGORY_COUNT];
  size_t peak[IL_MEM_CATEGORY_COUNT];
  size_t mapped[IL_MEM_CATEGORY_COUNT]; /* borrowed (mmap), not allocated here */
  size_t total_current;
  size_t total_peak;
  size_t limit; /* 0 = none */
  uint64_t n_allocs;
  uint64_t n_failed;
} il_mem_stats;

/* "weights", "kv", "activations", "workspace", "staging", "other". */
IL_API const char *il_mem_category_name(il_mem_category c);
/* Host memory by category: current, peak and mapped bytes. Can't fail. */
IL_API void il_mem_stats_get(il_mem_stats *out);
/* Frees memory the library handed to the caller (il_engine_tokenize's ids). NULL is ignored. */
IL_API void il_mem_free(void *p);

/* ---- engine options ------------------------------------------------------------------------ */

typedef struct il_config il_config;

/* A config holding every engine option at its default. NULL when out of memory. Free with
 * il_config_free. */
IL_API il_config *il_config_new(void);
IL_API void il_config_free(il_config *c);
/* Sets engine option `name` ("threads", "model", "kv-type"; the long flag without "--") from
 * text, validated as the CLI does. IL_ERR_INVALID_ARG naming `where` (your label for the
 * source, e.g. "settings.ini:3") for an unknown name, a per-request option (set those in
 * il_request_params), a malformed value or one out of range; c is unchanged then. */
IL_NODISCARD IL_API il_status il_config_set(il_config *c, const char *name, const char *value, const char *where);
/* Formats the current value of engine option `name` into buf (always NUL-terminated when
 * n > 0). IL_ERR_INVALID_ARG for an unknown or per-request name. */
IL_NODISCARD IL_API il_status il_config_get(const il_config *c, const char *name, char *buf, size_t n);

/* ---- engine, model, vocabulary ------------------------------------------------------------- */

typedef struct il_engine il_engine;
typedef struct il_model il_model;
typedef struct il_vocab il_vocab;

/* Loads the model the config names, opens its device and allocates the KV cache and
 * activations. On failure nothing is left allocated and *out is NULL; when the device is too
 * small the error is IL_ERR_OOM and the detail is a report with the change that makes it fit.
 * The config is copied: it may be freed after this returns. */
IL_NODISCARD IL_API il_status il_engine_open(const il_config *cfg, il_engine **out);
/* Releases the engine, its model, vocabulary and device memory. NULL is ignored. */
IL_API void il_engine_free(il_engine *e);
/* Borrowed from the engine; valid until il_engine_free. */
IL_API const il_model *il_engine_model(const il_engine *e);
IL_API const il_vocab *il_engine_vocab(const il_engine *e);
/* Positions per sequence in the KV cache, as sized at open. */
IL_API int32_t il_engine_n_ctx(const il_engine *e);

/* The startup timeline of the open (engine/startup.h has the struct): phases "process",
 * "config", "backend", "open", "metadata", "tokenizer", "read", "convert", "upload", "alloc",
 * "warmup", "first_token", contiguous from the process's start (first engine of a process) or
 * the open. Borrowed from the engine; valid until il_engine_free. Can't fail. */
typedef struct il_startup il_startup;
IL_API const il_startup *il_engine_startup(const il_engine *e);
/* Seconds of phase `name` (0 for a phase that did not run, -1 for an unknown name). */
IL_API double il_startup_phase_seconds(const il_startup *s, const char *name);

IL_API int32_t il_model_n_vocab(const il_model *m);
IL_API int32_t il_model_n_layer(const il_model *m);
IL_API int32_t il_model_n_embd(const il_model *m);
IL_API int32_t il_model_n_ctx_train(const il_model *m);

IL_API int32_t il_vocab_size(const il_vocab *v);
IL_API int32_t il_vocab_bos(const il_vocab *v); /* -1 if none */
IL_API int32_t il_vocab_eos(const il_vocab *v); /* -1 if none */
/* True for the end-of-generation tokens (EOS, EOT and the vocabulary's other EOG ids). */
IL_API bool il_vocab_is_eog(const il_vocab *v, int32_t id);
/* The token's stored text (not NUL-terminated; *len bytes); NULL for an id out of range.
 * Borrowed from the vocabulary. */
IL_API const char *il_vocab_token_text(const il_vocab *v, int32_t id, size_t *len);

/* Tokenizes text with the model's vocabulary, adding BOS when add_bos and the vocabulary
 * wants one; control-token text ("<|im_start|>") becomes those tokens when parse_special.
 * *out is allocated; free it with il_mem_free. IL_ERR_OOM; *out is NULL on failure. */
IL_NODISCARD IL_API il_status il_engine_tokenize(il_engine *e, const char *text, bool add_bos, bool parse_special, int32_t **out,
                                    int32_t *n_out);

/* ---- decoding ------------------------------------------------------------------------------ */

/* One entry of a forward batch. */
typedef struct {
  int32_t token;
  int32_t seq;
  int32_t pos;
  bool logits; /* compute logits for this entry */
} il_batch_entry;

/* Runs n entries (any n >= 1) through the model, writing each entry's K and V into the cache of
 * its sequence. For each entry with .logits set, n_vocab floats are written to logits_out in
 * batch order (logits_out may be NULL). Errors name the entry (a position beyond the context,
 * a sequence id out of range) or the device failure. */
IL_NODISCARD IL_API il_status il_engine_decode(il_engine *e, const il_batch_entry *batch, int32_t n, float *logits_out);
/* Sequence operations on the KV cache: forget a sequence, keep its first n_pos positions, or
 * make dst a copy of src. */
IL_NODISCARD IL_API il_status il_engine_seq_remove(il_engine *e, int32_t seq);
IL_NODISCARD IL_API il_status il_engine_seq_truncate(il_engine *e, int32_t seq, int32_t n_pos);
IL_NODISCARD IL_API il_status il_engine_seq_fork(il_engine *e, int32_t src, int32_t dst);

/* ---- sampling ------------------------------------------------------------------------------ */

typedef struct {
  float temp;            /* 0 = greedy */
  int32_t top_k;         /* 0 = off */
  float top_p;           /* 1 = off */
  float min_p;           /* 0 = off */
  float repeat_penalty;  /* 1 = off */
  int32_t repeat_last_n; /* tokens the penalty looks back over */
  uint64_t seed;
} il_sampler_params;

typedef struct il_sampler il_sampler;

/* Repetition penalty -> top-k -> top-p -> min-p -> temperature -> a seeded draw (llama.cpp's
 * default order); the same seed gives the same tokens on every machine. Allocates; free with
 * il_sampler_free. IL_ERR_OOM. */
IL_NODISCARD IL_API il_status il_sampler_new(const il_sampler_params *p, int32_t n_vocab, il_sampler **out);
IL_API void il_sampler_free(il_sampler *s);
/* Records a token (prompt or generated) in the penalty history. */
IL_API void il_sampler_accept(il_sampler *s, int32_t token);
/* Picks a token from logits[n_vocab] (not modified). Can't fail. */
IL_API int32_t il_sampler_sample(il_sampler *s, const float *logits);

/* ---- requests ------------------------------------------------------------------------------ */

/* What one generation asks for. */
typedef struct {
  il_sampler_params sampling;
  int32_t n_predict;     /* tokens to generate; -1 = until end of generation or the context is full */
  bool no_bos;           /* do not add BOS before the prompt */
  bool no_parse_special; /* read control-token text in the prompt as plain text */
  bool ignore_eos;       /* keep generating past end-of-generation tokens */
} il_request_params;

/* The CLI's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 42, n_predict 128. */
IL_API il_request_params il_request_default_params(void);

typedef struct il_request il_request;

/* Starts a generation in sequence 0: forgets what the sequence held, tokenizes the prompt and
 * runs it. Errors: IL_ERR_INVALID_ARG for an empty prompt, IL_ERR_RANGE when it does not fit
 * the context, the engine's errors; *out is NULL then. Free with il_request_free, before
 * il_engine_free; one request per engine at a time (they share sequence 0). */
IL_NODISCARD IL_API il_status il_request_new(il_engine *e, const char *prompt, const il_request_params *p, il_request **out);
/* Samples and decodes the next token. On IL_OK, *token is the token and text/len its text
 * (possibly empty while a UTF-8 character is incomplete; borrowed until the next call), or
 * *token is -1 when the request has ended (n_predict reached, end of generation, context full)
 * and text holds any text still queued. */
IL_NODISCARD IL_API il_status il_request_next(il_request *r, int32_t *token, const char **text, size_t *len);
/* Tokens in the prompt and generated so far. */
IL_API int32_t il_request_n_prompt(const il_request *r);
IL_API int32_t il_request_n_generated(const il_request *r);
IL_API void il_request_free(il_request *r);

#ifdef __cplusplus
}
#endif

#endif
