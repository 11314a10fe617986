/* model/detok: token ids back to text, whole sequences and streams.
 *
 * Decoding is byte exact: the pieces a vocabulary precomputed (il_vocab_token_piece) are
 * concatenated without the "clean up tokenization spaces" heuristics some reference decoders
 * apply after the fact. Two rules sit on top of the pieces: an incomplete UTF-8 sequence is held
 * back until the token that completes it arrives (streams only), and for "llama" vocabularies
 * with add_space_prefix the first text piece loses the space the encoder added.
 * Not for: text to ids (tokenizer.h), chat templates, sampling. It sits on vocab (vocab_impl.h)
 * and utf8.h, beside the encode driver; nothing below it includes it.
 */
#ifndef IL_MODEL_DETOK_H
#define IL_MODEL_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/vocab.h"

/* Streaming detokenizer. Holds back an incomplete UTF-8 sequence until the token that
 * completes it arrives (invalid bytes are passed through, never held forever). For "llama"
 * vocabularies with add_space_prefix, the first text piece of the stream loses one leading
 * space when nothing but BOS came before it (llama.cpp strips it for the first token,
 * llama2.c after BOS; both agree on "<s> ▁Once" -> "Once").
 * il_detok_new: a detokenizer for the text that follows prompt[0..n_prompt) (NULL, 0: a stream
 * of its own), which the caller has already shown, so what follows is decoded as its
 * continuation: the leading-space rule above then applies only when nothing but BOS came
 * before. Every caller says what came before, so none can forget it. *out owned by the caller,
 * free with il_detok_free; errors: IL_ERR_OOM.
 * il_detok_push: appends the token's piece and writes up to cap ready bytes to buf; returns
 * how many it wrote. Ready bytes that do not fit stay queued for the next push or flush, so
 * nothing is lost with any cap; cap >= il_vocab_max_piece(v) + 4 never leaves a queue.
 * il_detok_flush: writes what is left (an incomplete sequence at the end included). */
typedef struct il_detok il_detok;
il_status il_detok_new(const il_vocab *v, bool special, const int32_t *prompt, size_t n_prompt, il_detok **out);
size_t il_detok_push(il_detok *d, int32_t id, char *buf, size_t cap);
size_t il_detok_flush(il_detok *d, char *buf, size_t cap);
void il_detok_free(il_detok *d);

/* Whole-sequence decoding with the same rules as il_detok (leading space after BOS, special
 * pieces only when special is true). Writes min(needed, cap) bytes (buf may be NULL when cap
 * is 0) and returns the number needed. Allocates nothing; can't fail. */
size_t il_detokenize(const il_vocab *v, const int32_t *ids, size_t n, bool special, char *buf,
                     size_t cap);

#endif
