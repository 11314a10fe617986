/* model/tokenizer_impl: what the tokenizer_*.c files share and nobody else should see.
 *
 * The vocabulary layout (texts in one blob, an open-addressing hash from text to id, merges
 * in a second hash), a growable scratch vector, and the entry points of the model-specific
 * files: tokenizer_spm.c (SentencePiece-style merges), tokenizer_bpe.c (byte-level BPE and
 * the GPT-2 byte mapping), tokenizer_pre.c (pre-tokenizer regular expressions via PCRE2).
 * Not for: use outside src/model/tokenizer*.c.
 */
#ifndef IL_MODEL_TOKENIZER_IMPL_H
#define IL_MODEL_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/tokenizer.h"

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

/* A growable array of fixed-size elements in counted workspace memory. */
typedef struct {
  void *p;
  size_t n, cap, elem;
} il__vec;

void il__vec_init(il__vec *v, size_t elem);
void il__vec_free(il__vec *v);
/* Makes room for `more` elements; IL_ERR_OOM on failure (vector unchanged). */
il_status il__vec_reserve(il__vec *v, size_t more);
/* Appends one element (copied from elem). */
il_status il__vec_push(il__vec *v, const void *elem);
#define IL__VEC_AT(vec, type, i) (((type *)(vec)->p)[i])

typedef struct il__pre il__pre; /* compiled pre-tokenizer (tokenizer_pre.c) */

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

  int32_t *ht;       /* text -> id, open addressing, -1 empty */
  size_t ht_mask;

  /* decoded pieces with special = true, for token_to_piece and the detokenizer */
  char *piece_blob; /* same layout as blob: token i's piece at off[i] */
  uint32_t *piece_len;
  size_t max_piece;

  /* merges (BPE): merge i is "left right" in merge_blob; hash of (left, right) -> rank */
  char *merge_blob;
  size_t *merge_off;
  uint32_t *merge_len, *merge_split;
  int32_t n_merges;
  int32_t *merge_ht;
  size_t merge_ht_mask;

  /* byte -> token id: SPM <0xXX> (or the raw byte), BPE the mapped code point; -1 if absent */
  int32_t byte_tok[256];

  int32_t bos, eos, eot, eom, unk, pad;
  bool add_bos, add_eos, add_space_prefix, ignore_merges, types_inferred;

  /* special tokens (control, user-defined, unknown) by length desc, then id */
  int32_t *special;
  int32_t n_special;
  int32_t *special_rank; /* [n] rank in `special`, -1 if not special */
  /* byte trie over special texts for finding all occurrences in one pass */
  int32_t *trie_child;   /* [nodes] first child */
  int32_t *trie_next;    /* [nodes] next sibling */
  uint8_t *trie_byte;    /* [nodes] edge byte into the node */
  int32_t *trie_tok;     /* [nodes] token ending here, -1 */
  int32_t *trie_fail;    /* [nodes] Aho-Corasick failure link: longest proper suffix node, -1 = root */
  int32_t *trie_out;     /* [nodes] nearest node on the failure chain with a token, -1 */
  int32_t trie_root[256];
  int32_t n_trie;

  char model_name[16];
  char pre_name[64];
  il__pre *pre;
};

/* FNV-1a over bytes; the hash of every table here. */
uint64_t il__tok_hash(const void *p, size_t n);
/* Token id of text[0..n), or -1. */
int32_t il__vocab_lookup(const il_vocab *v, const char *text, size_t n);
/* Length of the UTF-8 sequence a lead byte announces, llama.cpp's way (continuation and
 * invalid bytes count 1, 0xF8.. count 4). */
static inline size_t il__utf8_len(uint8_t c) {
  static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lut[c >> 4];
}

/* Length of the character starting at s[0] of n > 0 bytes: the announced length when that
 * many continuation bytes follow, else 1 (so a stray byte never swallows the next character;
 * for valid UTF-8 this is il__utf8_len). */
static inline size_t il__utf8_char(const char *s, size_t n) {
  size_t cl = il__utf8_len((uint8_t)s[0]);
  if (cl > n) return 1;
  for (size_t k = 1; k < cl; k++)
    if (((uint8_t)s[k] & 0xC0) != 0x80) return 1;
  return cl;
}

/* tokenizer_spm.c: appends the tokens of one raw fragment (already escaped: '▁' for spaces,
 * prefix added) to out. */
il_status il__tokenizer_spm_encode(const il_vocab *v, const char *text, size_t len, il__vec *out);

/* tokenizer_bpe.c */
/* GPT-2 bytes_to_unicode: the code point byte b is written as (all < 0x144). */
uint32_t il__bpe_byte_to_cpt(uint8_t b);
/* Inverse; -1 when cpt is not one of the 256. */
int il__bpe_cpt_to_byte(uint32_t cpt);
/* Appends the tokens of one raw fragment (pre-tokenized with v->pre) to out. */
il_status il__tokenizer_bpe_encode(const il_vocab *v, const char *text, size_t len, il__vec *out);
/* Builds the merge tables from n strings "left right" (lens[i] bytes each; copied). A string
 * without a space after its first byte is kept as a rank that never matches (llama.cpp). */
il_status il__tokenizer_bpe_load_merges(il_vocab *v, int32_t n, const char *const *strs,
                                        const uint64_t *lens);
/* Rank of merging left+right, or -1. */
int32_t il__tokenizer_bpe_rank(const il_vocab *v, const char *left, size_t nl, const char *right,
                               size_t nr);

/* tokenizer_pre.c */
typedef struct {
  bool ignore_merges;
  bool add_bos; /* the pre-tokenizer's own default for add_bos (llama3, tekken) */
} il__pre_flags;
/* Compiles the pre-tokenizer `name` (aliases allowed). IL_ERR_UNSUPPORTED naming it when
 * unknown; IL_ERR_INTERNAL if PCRE2 rejects a pattern (a bug). *canon gets the canonical
 * name (static). */
il_status il__pre_new(const char *name, il__pre **out, il__pre_flags *flags, const char **canon);
void il__pre_free(il__pre *p);
/* Splits text[0..len) into words: appends (offset, length) pairs as size_t[2] to words. */
il_status il__pre_split(const il__pre *p, const char *text, size_t len, il__vec *words);

#endif
