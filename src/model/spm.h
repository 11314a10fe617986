/* model/spm: SentencePiece-style merging for "llama" vocabularies (interface).
 *
 * One call turns one plain fragment of text into token ids. Internal to the tokenizer: the
 * encode driver (tokenizer.c) cuts out special tokens and escapes spaces first.
 * Not for: callers outside tokenizer.c; special tokens, escaping, BOS/EOS.
 */
#ifndef IL_MODEL_SPM_H
#define IL_MODEL_SPM_H

#include <stddef.h>

#include "core/status.h"
#include "model/vec.h"
#include "model/vocab.h"

/* Appends the int32_t token ids of text[0..len) to out. The text is already escaped ('▁' for
 * every space, the space prefix added). Symbols that are not tokens become byte tokens <0xXX>,
 * or UNK when the vocabulary has none (dropped without UNK). Errors: IL_ERR_OOM (out keeps
 * what was appended). */
il_status il__spm_encode(const il_vocab *v, const char *text, size_t len, il__vec *out);

#endif
