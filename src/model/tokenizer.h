/* model/tokenizer: text <-> token ids for the vocabularies Llama-family GGUF files carry.
 *
 * A vocabulary (il_vocab) is built from the `tokenizer.ggml.*` metadata of a GGUF file or from
 * arrays (built-in models, llama2.c tokenizers) and is read-only afterwards, so one vocabulary
 * may be used from many threads at once. Two models are implemented, each token for token as
 * llama.cpp does them (its test vocabularies are the tests):
 *
 *   "llama"  SentencePiece-style: spaces become U+2581 '▁', a space is prefixed to the text
 *            (add_space_prefix), adjacent symbols are merged best score first, and any symbol
 *            that is not a token falls back to byte tokens <0xXX> (or UNK when the vocabulary
 *            has no byte tokens).
 *   "gpt2"   byte-level BPE: the text is split by the pre-tokenizer named in
 *            `tokenizer.ggml.pre` (regular expressions over Unicode categories, matched by
 *            PCRE2), every byte is mapped to a printable code point (GPT-2's bytes_to_unicode)
 *            and pairs are merged by their rank in `tokenizer.ggml.merges`.
 *
 * Special tokens: control, unknown and user-defined tokens are cut out of the text before the
 * model runs, longest first, exactly like llama.cpp: user-defined tokens always, control and
 * unknown ones only when parse_special is on (otherwise their text is tokenized as text).
 *
 * Invalid UTF-8 is never an error. "llama": each byte of a malformed sequence becomes its own
 * symbol and ends up as a byte token <0xXX> (llama.cpp cuts by the length the first byte
 * announces, which can swallow the '▁' that follows; for valid text both agree). "gpt2":
 * invalid bytes match no pre-tokenizer pattern, so each run of them becomes its own word and is
 * encoded byte for byte (llama.cpp replaces them with U+FFFD). Either way decoding gives the
 * bytes back, except bytes a byte-level vocabulary has no token for (falcon lacks some control
 * characters, starcoder and deepseek lack 0xC0, 0xC1, 0xF5..0xFF): those become UNK, or are
 * dropped when there is no UNK (deepseek-llm's user-defined tokens 'ø'..'ÿ' stand for bytes
 * 0xF8..0xFF and decode as those characters, as llama.cpp decodes them).
 *
 * Decoding is byte exact: the pieces are concatenated without the "clean up tokenization
 * spaces" heuristics some reference decoders apply after the fact.
 *
 * Not for: chat templates, WordPiece/Unigram/RWKV vocabularies (IL_ERR_UNSUPPORTED), sampling.
 */
#ifndef IL_MODEL_TOKENIZER_H
#define IL_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "format/gguf.h"

typedef struct il_vocab il_vocab;

/* Token types as stored in tokenizer.ggml.token_type (SentencePiece's numbering). */
typedef enum {
  IL_TOKEN_UNDEFINED = 0,
  IL_TOKEN_NORMAL = 1,
  IL_TOKEN_UNKNOWN = 2,
  IL_TOKEN_CONTROL = 3,
  IL_TOKEN_USER_DEFINED = 4,
  IL_TOKEN_UNUSED = 5,
  IL_TOKEN_BYTE = 6,
} il_token_type;

typedef struct {
  /* Use this pre-tokenizer instead of `tokenizer.ggml.pre` (needed when the file names one this
   * build does not know, or has none). NULL: take the metadata's; a missing key means
   * "default", an unknown name is IL_ERR_UNSUPPORTED naming it. */
  const char *force_pre;
} il_vocab_opts;

/* Reads tokenizer.ggml.{model,pre,tokens,scores,token_type,merges,*_token_id,add_*} (and
 * general.name for per-model token attributes). Everything needed is copied, so `g` may be
 * closed afterwards. Errors: IL_ERR_NOT_FOUND for a missing required key, IL_ERR_FORMAT for a
 * key of the wrong type, a duplicate token or arrays shorter than the token list,
 * IL_ERR_UNSUPPORTED for another tokenizer model or an unknown pre-tokenizer; IL_ERR_OOM.
 * On success the caller owns *out and frees it with il_vocab_free. */
il_status il_vocab_from_gguf(const il_gguf *g, il_vocab **out);
il_status il_vocab_from_gguf_opts(const il_gguf *g, const il_vocab_opts *opts, il_vocab **out);

/* Builds a vocabulary from arrays (copied). model: "llama" or "gpt2" (gpt2 needs merges, so from
 * arrays only "llama" is accepted: IL_ERR_UNSUPPORTED otherwise). lens may be NULL (then tokens
 * are NUL-terminated); scores may be NULL (all 0); types may be NULL, then "<0xXX>" tokens are
 * byte tokens, the rest normal, and il_vocab_set_special marks BOS/EOS as control and UNK as
 * unknown. Token texts in llama2.c's export form (' ' instead of '▁') are recognised: when no
 * token contains '▁' but some contain ' ', spaces are converted. Special ids default to the
 * SentencePiece ones (unk 0, bos 1, eos 2, add_bos on) when n > 2; change them with
 * il_vocab_set_special. */
il_status il_vocab_from_arrays(const char *model, int32_t n, const char *const *tokens,
                               const uint64_t *lens, const float *scores, const int32_t *types,
                               il_vocab **out);
/* Sets the special ids (-1 = none; ids outside the vocabulary are treated as none) and whether
 * tokenizing with add_special adds BOS/EOS. Can't fail. */
void il_vocab_set_special(il_vocab *v, int32_t bos, int32_t eos, int32_t unk, bool add_bos,
                          bool add_eos);
/* NULL is ignored. */
void il_vocab_free(il_vocab *v);

int32_t il_vocab_size(const il_vocab *v);
int32_t il_vocab_bos(const il_vocab *v); /* -1 if none */
int32_t il_vocab_eos(const il_vocab *v);
int32_t il_vocab_eot(const il_vocab *v);
int32_t il_vocab_unk(const il_vocab *v);
int32_t il_vocab_pad(const il_vocab *v);
bool il_vocab_add_bos(const il_vocab *v);
bool il_vocab_add_eos(const il_vocab *v);
/* End of generation: eos, eot, eom and the tokens llama.cpp recognises by text
 * (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, ...). */
bool il_vocab_is_eog(const il_vocab *v, int32_t id);
/* "llama" or "gpt2"; and the pre-tokenizer in use ("default" for llama). Borrowed. */
const char *il_vocab_model(const il_vocab *v);
const char *il_vocab_pre(const il_vocab *v);
/* The stored text of token id (NOT NUL-terminated, *len set), or NULL when id is out of range. */
const char *il_vocab_token_text(const il_vocab *v, int32_t id, size_t *len);
il_token_type il_vocab_token_type(const il_vocab *v, int32_t id);
float il_vocab_token_score(const il_vocab *v, int32_t id);
/* Id of the token whose stored text is exactly text[0..len), or -1. */
int32_t il_vocab_find(const il_vocab *v, const char *text, size_t len);
/* Longest piece il_token_to_piece can produce (special = true), in bytes. */
size_t il_vocab_max_piece(const il_vocab *v);

/* Tokenizes text[0..len). add_special: add BOS/EOS as the vocabulary says. parse_special:
 * match control/unknown token texts in the text (user-defined ones are always matched).
 * Writes up to cap ids to out (may be NULL when cap is 0) and sets *n_out to the number of ids
 * of the full result; if that is more than cap, returns IL_ERR_RANGE and the caller retries
 * with a bigger buffer. Errors: IL_ERR_RANGE, IL_ERR_OOM. Linear-ish in len (n log n merges). */
il_status il_tokenize(const il_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out);
/* Convenience: allocates the result (il_mem_alloc, category OTHER; free with il_mem_free). */
il_status il_tokenize_alloc(const il_vocab *v, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out, size_t *n_out);

/* Bytes of one token: byte tokens give their byte, '▁' becomes ' ', byte-level BPE code points
 * are mapped back to bytes; control and unknown tokens give "" unless special is true (then
 * their text). Writes min(needed, cap) bytes (no NUL) and returns the number needed; an id out
 * of range gives 0. */
size_t il_token_to_piece(const il_vocab *v, int32_t id, bool special, char *buf, size_t cap);

/* Streaming detokenizer. Holds back an incomplete UTF-8 sequence until the token that
 * completes it arrives (invalid bytes are passed through, never held forever). For "llama"
 * vocabularies with add_space_prefix, the first text piece of the stream loses one leading
 * space when nothing but BOS came before it (llama.cpp strips it for the first token,
 * llama2.c after BOS; both agree on "<s> ▁Once" -> "Once").
 * il_detok_new: *out owned by the caller, free with il_detok_free; errors: IL_ERR_OOM.
 * il_detok_push: appends the token's piece and writes up to cap ready bytes to buf; returns
 * how many it wrote. Ready bytes that do not fit stay queued for the next push or flush, so
 * nothing is lost with any cap; cap >= il_vocab_max_piece(v) + 4 never leaves a queue.
 * il_detok_flush: writes what is left (an incomplete sequence at the end included). */
typedef struct il_detok il_detok;
il_status il_detok_new(const il_vocab *v, bool special, il_detok **out);
/* Tells the detokenizer that the text of ids[0..n) was already shown (a prompt echoed as
 * typed), so what follows is decoded as their continuation: the leading-space rule above then
 * applies only when nothing but BOS came before. Writes nothing; can't fail. */
void il_detok_skip(il_detok *d, const int32_t *ids, size_t n);
size_t il_detok_push(il_detok *d, int32_t id, char *buf, size_t cap);
size_t il_detok_flush(il_detok *d, char *buf, size_t cap);
void il_detok_free(il_detok *d);

/* Whole-sequence decoding with the same rules as il_detok (leading space after BOS, special
 * pieces only when special is true). Writes min(needed, cap) bytes (buf may be NULL when cap
 * is 0) and returns the number needed. Allocates nothing; can't fail. */
size_t il_detokenize(const il_vocab *v, const int32_t *ids, size_t n, bool special, char *buf,
                     size_t cap);

#endif
