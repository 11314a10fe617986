/* model/bpe: byte-level BPE for "gpt2" vocabularies (interface).
 *
 * One call turns one plain fragment of text into token ids: it is split into words by the
 * vocabulary's pre-tokenizer and each word is merged by rank. Internal to the tokenizer: the
 * encode driver (tokenizer.c) cuts out special tokens first.
 * Not for: callers outside tokenizer.c; special tokens, BOS/EOS.
 */
#ifndef IL_MODEL_BPE_H
#define IL_MODEL_BPE_H

#include <stddef.h>

#include "core/status.h"
#include "model/vec.h"
#include "model/vocab.h"

/* Appends the int32_t token ids of text[0..len) (raw bytes) to out. A byte the vocabulary has
 * no token for becomes UNK (dropped without UNK). Errors: IL_ERR_OOM, IL_ERR_INTERNAL from the
 * pre-tokenizer (out keeps what was appended). */
il_status il__bpe_encode(const il_vocab *v, const char *text, size_t len, il__vec *out);

#endif
