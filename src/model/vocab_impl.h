/* model/vocab_impl: the inside of a vocabulary, for the tokenizer modules that sit on vocab.c.
 *
 * The vocabulary layout (texts in one blob with an open-addressing hash from text to id, the
 * special-token trie, the decoded-piece cache, merges in a second hash, the byte-token table)
 * and the internal accessors spm.c, bpe.c, detok.c and tokenizer.c use. Everything here is
 * filled by vocab.c when a vocabulary is built and is read-only afterwards.
 * Not for: use outside the tokenizer modules of src/model/ (everyone else has vocab.h), or for
 * declaring anything of the modules above it: it includes only vocab.h, pretok.h and the two
 * index structures (strhash.h, trie.h).
 */
#ifndef IL_MODEL_VOCAB_IMPL_H
#define IL_MODEL_VOCAB_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/pretok.h"
#include "model/strhash.h"
#include "model/trie.h"
#include "model/vocab.h"

/* Attribute bits (llama.cpp's llama_token_attr numbering). */
enum {
  IL__ATTR_UNKNOWN = 1 << 0,
  IL__ATTR_UNUSED = 1 << 1,
  IL__ATTR_NORMAL = 1 << 2,
  IL__ATTR_CONTROL = 1 << 3,
  IL__ATTR_USER_DEFINED = 1 << 4,
  IL__ATTR_BYTE = 1 << 5,
  IL__ATTR_LSTRIP = 1 << 7,
  IL__ATTR_RSTRIP = 1 << 8,
};

typedef enum { IL__VOCAB_SPM, IL__VOCAB_BPE } il__vocab_kind;

/* U+2581 '▁', SentencePiece's stand-in for a space in token texts. */
#define IL__VOCAB_SPACE "\xe2\x96\x81"

struct il_vocab {
  il__vocab_kind kind;
  int32_t n;
  char *blob;        /* token texts, each followed by a NUL */
  size_t *off;       /* [n] offset of token i in blob */
  uint32_t *len;     /* [n] */
  float *score;      /* [n] */
  uint16_t *attr;    /* [n] IL__ATTR_* */
  uint8_t *type;     /* [n] il_token_type as given (or inferred) */
  uint8_t *eog;      /* [n] 1 when end of generation */
  size_t max_token_len;

  il_strhash ht;     /* text -> id (model/strhash) */

  /* decoded pieces with special = true, for token_to_piece and the detokenizer */
  char *piece_blob; /* same layout as blob: token i's piece at off[i] */
  uint32_t *piece_len;
  size_t max_piece;

  /* merges (BPE): merge i is "left right" in merge_blob; hash of (left, right) -> rank */
  char *merge_blob;
  size_t *merge_off;
  uint32_t *merge_len, *merge_split;
  int32_t n_merges;
  il_strhash merge_ht; /* "left right" -> rank; slot NULL without merges */

  /* byte -> token id: SPM <0xXX> (or the raw byte), BPE the mapped code point; -1 if absent */
  int32_t byte_tok[256];

  int32_t bos, eos, eot, eom, unk, pad;
  bool add_bos, add_eos, add_space_prefix, ignore_merges, types_inferred;

  /* special tokens (control, user-defined, unknown) by length desc, then id */
  int32_t *special;
  int32_t n_special;
  int32_t *special_rank; /* [n] rank in `special`, -1 if not special */
  il_trie trie;          /* over the special texts: every occurrence in one pass (model/trie) */

  char model_name[16];
  char pre_name[64];
  il__pretok *pre; /* gpt2: compiled pre-tokenizer, owned; NULL for llama */
};

/* Token id of text[0..n), or -1. */
int32_t il__vocab_lookup(const il_vocab *v, const char *text, size_t n);

/* Piece bytes of id (borrowed from the piece cache, not NUL-terminated, *n set): "" for an id
 * out of range, and for control and unknown tokens unless special is true. */
const char *il__vocab_piece(const il_vocab *v, int32_t id, bool special, size_t *n);

/* BPE merges: the rank of merging left+right, or -1 (also for a vocabulary without merges). */
int32_t il__vocab_merge_rank(const il_vocab *v, const char *left, size_t nl, const char *right,
                             size_t nr);

/* GPT-2 bytes_to_unicode, the alphabet byte-level token texts are written in: the code point
 * byte b is written as (all < 0x144). */
uint32_t il__vocab_byte_to_cpt(uint8_t b);
/* Inverse; -1 when cpt is not one of the 256. */
int il__vocab_cpt_to_byte(uint32_t cpt);

#endif
