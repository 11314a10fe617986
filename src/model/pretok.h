/* model/pretok: the pre-tokenizers of byte-level BPE vocabularies (interface).
 *
 * A pre-tokenizer cuts text into the words BPE merges run inside. It is chosen by the name in a
 * GGUF file's `tokenizer.ggml.pre`, compiled once when a vocabulary is loaded, owned by that
 * vocabulary and read-only afterwards (one may split texts from many threads at once).
 * Not for: merging (bpe.c), special tokens (tokenizer.c), or use outside the tokenizer modules.
 * It knows nothing of vocabularies: it sits on vec.h and utf8.h only, and vocab.c sits on it.
 */
#ifndef IL_MODEL_PRETOK_H
#define IL_MODEL_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "model/vec.h"

typedef struct il__pretok il__pretok; /* compiled expressions */

typedef struct {
  bool ignore_merges;
  bool add_bos; /* the pre-tokenizer's own default for add_bos (llama3, tekken) */
} il__pretok_flags;

/* Compiles the pre-tokenizer `name` (aliases allowed). IL_ERR_UNSUPPORTED naming it when
 * unknown; IL_ERR_INTERNAL if PCRE2 rejects a pattern (a bug); IL_ERR_OOM. On success the
 * caller owns *out (free with il__pretok_free), and *flags and *canon (the canonical name,
 * static) are set. */
il_status il__pretok_new(const char *name, il__pretok **out, il__pretok_flags *flags,
                         const char **canon);
/* NULL is ignored. */
void il__pretok_free(il__pretok *p);
/* Splits text[0..len) into words: appends (offset, length) pairs as size_t[2] to words.
 * Errors: IL_ERR_OOM, IL_ERR_INTERNAL (a PCRE2 matching failure other than a limit). */
il_status il__pretok_split(const il__pretok *p, const char *text, size_t len, il__vec *words);

#endif
