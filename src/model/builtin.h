/* model/builtin: models generated in memory from a fixed seed, so every command has a
 * default that needs no download.
 *
 *   builtin:tiny  4 layers, dim 256, FFN 768, 8 heads / 4 KV heads, vocab 512, ~3.4M params
 *   builtin:1b    Llama-3.2-1B shapes: 16 layers, dim 2048, FFN 8192, 32 heads / 8 KV heads,
 *                 vocab 32000, separate output head (as in the peer measurements of
 *                 shared/research), 1.10B params (the real model's 128256-token
 *                 vocabulary and tied head make it 1.24B)
 *   builtin:tiny-2l, builtin:1b-2l  the first 2 layers of tiny and 1b (same embeddings and
 *                 head): drafts for speculative decoding that agree often with their model
 *   builtin:tiny-other  2 layers, dim 128, tiny's vocabulary: a draft that rarely agrees
 *   builtin:1b-other  2 layers, dim 512, FFN 1536, 1b's vocabulary: the same for 1b, at about 4%
 *                 of its weights (1b-2l: 23%)
 *   builtin:moe-tiny  a mixtral-style mixture of experts: tiny's attention and vocabulary, 8
 *                 experts of FFN 256 per layer, 2 used per token (llama.expert_count = 8,
 *                 llama.expert_used_count = 2), 7.4M params
 *   builtin:qwen3-tiny, phi3-tiny, gemma3-tiny, qwen3moe-tiny  the other architectures at
 *                 tiny's size (docs/model.md)
 *   builtin:gemma3-270m, qwen3-0.6b-4l, phi3-mini-2l, qwen3moe-30b-a3b-2l  the published
 *                 shapes of Gemma 3 270M (all 18 layers, 268.1M params), Qwen3-0.6B (4 of 28
 *                 layers), Phi-3-mini-4k (2 of 32) and Qwen3-30B-A3B (2 of 48), for plan and
 *                 bench: their vocabularies, widths, heads, FFNs, experts and windows
 * Weights are uniform pseudo-random with variance 1/fan_in from a per-tensor, per-row seed, so
 * generation is parallel and the same on every machine; norms are 1. The vocabulary is
 * byte-level SentencePiece-style: <unk> <s> </s>, the 256 byte tokens <0xXX>, then letter
 * pieces ("▁a", "ab", "abc", ...) to fill the vocabulary, so output is readable text.
 * Not for: anything that needs trained weights.
 */
#ifndef IL_MODEL_BUILTIN_H
#define IL_MODEL_BUILTIN_H

#include <stdbool.h>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/llama.h"
#include "model/tokenizer.h"

/* True when spec names a built-in model ("builtin:..."). */
bool il_builtin_is(const char *spec);
/* Generates the model; wtype NULL or "" = the model's default (f32 for tiny, f16 for 1b).
 * Weight buffers are counted as weights and owned by the model. Errors: IL_ERR_NOT_FOUND for
 * an unknown name (listing the known ones), IL_ERR_UNSUPPORTED for a type that cannot be
 * generated, IL_ERR_OOM. */
il_status il_builtin_open(const char *spec, const char *wtype, int n_threads, il_model **out);
/* The same; with values = false only shapes are real (the planner's dry runs): 2-D tensors
 * point at a small zero buffer that must never be read, which a dry device never does. */
il_status il_builtin_open_ex(const char *spec, const char *wtype, int n_threads, bool values, il_model **out);
/* The model's vocabulary. Caller frees with il_vocab_free. */
il_status il_builtin_vocab(const il_model *m, il_vocab **out);
/* The vocabulary of a model spec (a GGUF path or builtin:NAME) without loading its weights;
 * force_pre (NULL = the file's) overrides tokenizer.ggml.pre. Caller frees with il_vocab_free. */
il_status il_vocab_open(const char *spec, const char *force_pre, il_vocab **out);
/* Writes general.*, {arch}.* and tokenizer.ggml.* metadata of a built-in model. */
il_status il_builtin_write_metadata(const il_model *m, il_gguf_writer *w, il_dtype file_type);
/* Names of the built-in models, comma separated. */
const char *il_builtin_names(void);

#endif
