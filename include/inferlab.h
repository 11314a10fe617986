/* inferlab.h: the public C API of libinferlab.
 *
 * One include for programs that embed the engine: load a model from a config, tokenize,
 * decode batches of (sequence, position, token), sample, and read memory by category.
 * Build against the static or shared library (libinferlab.a / libinferlab.so) with
 * -I include -I src. Every function returns il_status; il_error_detail() says what and where.
 *
 *   il_config cfg;
 *   il_config_defaults(&cfg);                     // builtin:tiny, all cores
 *   il_engine *e;
 *   if (il_engine_open(&cfg, &e) != IL_OK) { fprintf(stderr, "%s\n", il_error_detail()); ... }
 *   int32_t *ids, n;
 *   il_engine_tokenize(e, "Once upon a time", true, &ids, &n);
 *   ... il_engine_decode(e, batch, n, logits) / il_engine_generate(...) ...
 *   il_mem_free(ids);
 *   il_engine_free(e);
 */
#ifndef INFERLAB_H
#define INFERLAB_H

#include "core/status.h"       /* il_status, il_error_detail */
#include "core/dtype.h"        /* il_dtype, block layouts */
#include "memory/mem.h"        /* il_mem_stats_get: peak bytes per category */
#include "format/gguf.h"       /* GGUF reader and writer */
#include "model/llama.h"       /* il_model, il_hparams, il_batch_entry */
#include "model/tokenizer.h"   /* il_vocab, il_tokenize, il_detok */
#include "model/export.h"      /* il_export_gguf */
#include "engine/config.h"     /* il_config: every option */
#include "engine/sampler.h"    /* il_sampler */
#include "engine/engine.h"     /* il_engine: open, decode, generate */

#endif
