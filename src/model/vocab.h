/* model/vocab: a tokenizer vocabulary, the table every other tokenizer module reads.
 *
 * A vocabulary (il_vocab) is built from the `tokenizer.ggml.*` metadata of a GGUF file or from
 * arrays (built-in models, llama2.c tokenizers) and is read-only afterwards, so one vocabulary
 * may be used from many threads at once. Building it does what llama.cpp does after loading:
 * token attributes (control, user-defined, byte, end of generation) derived from types and
 * texts, the special-token list and its search trie, the decoded piece of every token, the BPE
 * merge ranks, and for "gpt2" vocabularies the compiled pre-tokenizer (pretok.c).
 * Not for: turning text into ids (tokenizer.h: il_tokenize) or ids into text beyond one token's
 * piece (detok.h). It sits on pretok, vec.h and utf8.h; spm, bpe, detok and the tokenizer
 * driver sit on it, and it includes none of them.
 */
#ifndef IL_MODEL_VOCAB_H
#define IL_MODEL_VOCAB_H

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
/* Longest piece il_vocab_token_piece can produce (special = true), in bytes. */
size_t il_vocab_max_piece(const il_vocab *v);

/* Bytes of one token: byte tokens give their byte, '▁' becomes ' ', byte-level BPE code points
 * are mapped back to bytes; control and unknown tokens give "" unless special is true (then
 * their text). Writes min(needed, cap) bytes (no NUL) and returns the number needed; an id out
 * of range gives 0. Can't fail. */
size_t il_vocab_token_piece(const il_vocab *v, int32_t id, bool special, char *buf, size_t cap);

#endif
