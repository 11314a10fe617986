/* model/tokenizer: text <-> token ids for the vocabularies Llama-family GGUF files carry.
 *
 * The tokenizer's public header: it declares the encode entry points and includes vocab.h
 * (il_vocab: loading, special ids, pieces) and detok.h (ids back to text), so one include gives
 * the whole tokenizer. A vocabulary is read-only once built, so one may be used from many
 * threads at once. Two models are implemented, each token for token as llama.cpp does them
 * (its test vocabularies are the tests):
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
 * Decoding is byte exact (detok.h).
 *
 * Not for: chat templates, WordPiece/Unigram/RWKV vocabularies (IL_ERR_UNSUPPORTED), sampling.
 */
#ifndef IL_MODEL_TOKENIZER_H
#define IL_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/detok.h"
#include "model/vocab.h"

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

/* A byte range [start, end) of a text. */
typedef struct {
  size_t start, end;
} il_text_range;

/* il_tokenize_alloc, except that control and unknown tokens are never matched where their text
 * overlaps one of the literal ranges (sorted, disjoint; user-defined tokens still are, as with
 * parse_special off): there the bytes are tokenized as text. A chat prompt passes its messages'
 * content as literal, so only the template's own markers become control tokens and a user's
 * "<|im_end|>" stays text; for text without special-token texts in those ranges the result is
 * that of il_tokenize_alloc. Errors: IL_ERR_OOM. */
il_status il_tokenize_literal_alloc(const il_vocab *v, const char *text, size_t len, bool add_special,
                                    bool parse_special, const il_text_range *literal, size_t n_literal,
                                    int32_t **out, size_t *n_out);

#endif
