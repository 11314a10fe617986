/* model/vocab: building a vocabulary and answering questions about it.
 *
 * il_vocab_from_gguf copies the tokenizer.ggml.* metadata into one text blob with a hash index
 * (model/strhash), derives attributes (control, user-defined, byte, EOG) the way
 * llama.cpp does, builds the special-token list with an Aho-Corasick trie over its texts (model/trie: the
 * encode driver finds special tokens in a prompt with it), precomputes each token's decoded
 * piece, loads the BPE merge ranks into a second hash and compiles the pre-tokenizer that
 * `tokenizer.ggml.pre` names. il_vocab_from_arrays does the same for llama2.c and built-in
 * vocabularies. After that nothing here writes to a vocabulary except il_vocab_set_special.
 * Not for: tokenizing (spm.c, bpe.c, tokenizer.c), decoding streams (detok.c), pre-tokenizer
 * expressions (pretok.c).
 */
#include "model/vocab.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"
#include "model/pretok.h"
#include "model/utf8.h"
#include "model/vocab_impl.h"

/* ---- hashing and lookup ---- */

static uint64_t il__vocab_hash(const void *p, size_t n) { return il_strhash_fnv(IL_STRHASH_FNV_BASIS, p, n); }

int32_t il__vocab_lookup(const il_vocab *v, const char *text, size_t n) {
  const il_strhash *h = &v->ht;
  for (size_t i = il_strhash_start(h, il__vocab_hash(text, n)); h->slot[i] >= 0; i = il_strhash_next(h, i)) {
    const int32_t id = h->slot[i];
    if (v->len[id] == n && memcmp(v->blob + v->off[id], text, n) == 0) return id;
  }
  return -1;
}

/* ---- byte-level alphabet ---- */

/* GPT-2's bytes_to_unicode in closed form: the 68 bytes that are not printable (0x00-0x20,
 * 0x7F-0xA0, 0xAD) are numbered in byte order from U+0100. */
uint32_t il__vocab_byte_to_cpt(uint8_t b) {
  if (b <= 0x20) return 256u + b;
  if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
  if (b == 0xAD) return 256u + 33u + 34u;
  return b;
}

int il__vocab_cpt_to_byte(uint32_t cpt) {
  if (cpt < 256) {
    bool printable = (cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt != 0xAD);
    return printable ? (int)cpt : -1;
  }
  if (cpt < 256 + 33) return (int)(cpt - 256);
  if (cpt < 256 + 33 + 34) return (int)(cpt - 256 - 33 + 0x7F);
  if (cpt == 256 + 33 + 34) return 0xAD;
  return -1;
}

/* ---- BPE merges ----
 * Stored as the strings "left right" and found through a hash of left+' '+right, so a lookup
 * builds no string. */

/* Hash of the merge string "left right" (the same value il__vocab_hash gives it), computed
 * without building the string. */
static uint64_t il__vocab_merge_hash(const char *l, size_t nl, const char *r, size_t nr) {
  uint64_t h = il_strhash_fnv(IL_STRHASH_FNV_BASIS, l, nl);
  h = il_strhash_fnv(h, " ", 1);
  return il_strhash_fnv(h, r, nr);
}

int32_t il__vocab_merge_rank(const il_vocab *v, const char *left, size_t nl, const char *right,
                             size_t nr) {
  const il_strhash *h = &v->merge_ht;
  if (!h->slot) return -1;
  for (size_t i = il_strhash_start(h, il__vocab_merge_hash(left, nl, right, nr)); h->slot[i] >= 0;
       i = il_strhash_next(h, i)) {
    const int32_t m = h->slot[i];
    const char *s = v->merge_blob + v->merge_off[m];
    if (v->merge_split[m] == nl && v->merge_len[m] == nl + 1 + nr && memcmp(s, left, nl) == 0 &&
        memcmp(s + nl + 1, right, nr) == 0)
      return m;
  }
  return -1;
}

/* Builds the merge tables from n strings "left right" (lens[i] bytes each; copied). A string
 * without a space after its first byte is kept as a rank that never matches (llama.cpp). */
static il_status il__vocab_load_merges(il_vocab *v, int32_t n, const char *const *strs,
                                       const uint64_t *lens) {
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) total += (size_t)lens[i] + 1;
  v->merge_blob = il_mem_alloc(IL_MEM_TOKENIZER, total + 1, "bpe merges");
  v->merge_off = il_mem_alloc(IL_MEM_TOKENIZER, ((size_t)n + 1) * sizeof *v->merge_off, "bpe merges");
  v->merge_len = il_mem_alloc(IL_MEM_TOKENIZER, ((size_t)n + 1) * sizeof *v->merge_len, "bpe merges");
  v->merge_split = il_mem_alloc(IL_MEM_TOKENIZER, ((size_t)n + 1) * sizeof *v->merge_split, "bpe merges");
  if (!v->merge_blob || !v->merge_off || !v->merge_len || !v->merge_split) return IL_ERR_OOM;
  IL_TRY(il_strhash_init(&v->merge_ht, (size_t)n, IL_MEM_TOKENIZER, "bpe merge index"));
  v->n_merges = n;
  size_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    const char *s = strs[i];
    size_t l = (size_t)lens[i];
    memcpy(v->merge_blob + off, s, l);
    v->merge_blob[off + l] = '\0';
    v->merge_off[i] = off;
    v->merge_len[i] = (uint32_t)l;
    off += l + 1;
    /* split at the first space after the first byte, like llama.cpp (find(' ', 1)) */
    const char *sp = l > 1 ? memchr(s + 1, ' ', l - 1) : NULL;
    if (!sp) { /* malformed: never matches (llama.cpp stores it as ("", "")) */
      v->merge_split[i] = UINT32_MAX;
      continue;
    }
    size_t nl = (size_t)(sp - s);
    v->merge_split[i] = (uint32_t)nl;
    if (il__vocab_merge_rank(v, s, nl, sp + 1, l - nl - 1) >= 0) continue; /* first rank wins */
    il_strhash *mh = &v->merge_ht;
    size_t h = il_strhash_start(mh, il__vocab_merge_hash(s, nl, sp + 1, l - nl - 1));
    while (mh->slot[h] >= 0) h = il_strhash_next(mh, h);
    mh->slot[h] = i;
  }
  return IL_OK;
}

/* ---- construction ---- */

static void il__vocab_free_derived(il_vocab *v) {
  il_mem_free(v->special);
  il_mem_free(v->special_rank);
  il_trie_free(&v->trie);
  v->special = v->special_rank = NULL;
}

void il_vocab_free(il_vocab *v) {
  if (!v) return;
  il__vocab_free_derived(v);
  il_mem_free(v->blob);
  il_mem_free(v->off);
  il_mem_free(v->len);
  il_mem_free(v->score);
  il_mem_free(v->attr);
  il_mem_free(v->type);
  il_mem_free(v->eog);
  il_strhash_free(&v->ht);
  il_mem_free(v->piece_blob);
  il_mem_free(v->piece_len);
  il_mem_free(v->merge_blob);
  il_mem_free(v->merge_off);
  il_mem_free(v->merge_len);
  il_mem_free(v->merge_split);
  il_strhash_free(&v->merge_ht);
  il__pretok_free(v->pre);
  il_mem_free(v);
}

/* Copies the token texts (an empty text becomes "[EMPTY_i]" like llama.cpp) and builds the
 * hash index. `get` returns token i's bytes. Duplicate texts are IL_ERR_FORMAT. */
typedef void (*il__text_fn)(const void *ctx, int32_t i, const char **p, size_t *n);

static il_status il__vocab_set_texts(il_vocab *v, const char *src, il__text_fn get,
                                     const void *ctx, bool spaces_to_escape) {
  int32_t n = v->n;
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    const char *p;
    size_t l;
    get(ctx, i, &p, &l);
    size_t extra = 0;
    if (spaces_to_escape)
      for (size_t k = 0; k < l; k++) extra += p[k] == ' ' ? 2 : 0;
    total += (l ? l + extra : 24) + 1;
  }
  v->blob = il_mem_alloc(IL_MEM_TOKENIZER, total + 1, "vocabulary texts");
  v->piece_blob = il_mem_alloc(IL_MEM_TOKENIZER, total + 1, "vocabulary pieces");
  if (!v->blob || !v->piece_blob) return IL_ERR_OOM;
  IL_TRY(il_strhash_init(&v->ht, (size_t)n, IL_MEM_TOKENIZER, "vocabulary index"));
  size_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    const char *p;
    size_t l;
    get(ctx, i, &p, &l);
    char *d = v->blob + off;
    size_t dl = 0;
    if (l == 0) {
      dl = (size_t)snprintf(d, 24, "[EMPTY_%d]", (int)i);
    } else if (spaces_to_escape) {
      for (size_t k = 0; k < l; k++) {
        if (p[k] == ' ') {
          memcpy(d + dl, IL__VOCAB_SPACE, 3);
          dl += 3;
        } else {
          d[dl++] = p[k];
        }
      }
    } else {
      memcpy(d, p, l);
      dl = l;
    }
    d[dl] = '\0';
    v->off[i] = off;
    v->len[i] = (uint32_t)dl;
    if (dl > v->max_token_len) v->max_token_len = dl;
    off += dl + 1;
    il_strhash *ht = &v->ht;
    for (size_t h = il_strhash_start(ht, il__vocab_hash(d, dl));; h = il_strhash_next(ht, h)) {
      int32_t o = ht->slot[h];
      if (o < 0) {
        ht->slot[h] = i;
        break;
      }
      if (v->len[o] == dl && memcmp(v->blob + v->off[o], d, dl) == 0)
        return il_error(IL_ERR_FORMAT, "%s: duplicate token in vocabulary: '%.*s' has ids %d and %d",
                        src, (int)(dl > 64 ? 64 : dl), d, (int)o, (int)i);
    }
  }
  return IL_OK;
}

static uint16_t il__attr_of_type(int32_t t) {
  switch (t) {
    case IL_TOKEN_NORMAL: return IL__ATTR_NORMAL;
    case IL_TOKEN_UNKNOWN: return IL__ATTR_UNKNOWN;
    case IL_TOKEN_CONTROL: return IL__ATTR_CONTROL;
    case IL_TOKEN_USER_DEFINED: return IL__ATTR_USER_DEFINED;
    case IL_TOKEN_UNUSED: return IL__ATTR_UNUSED;
    case IL_TOKEN_BYTE: return IL__ATTR_BYTE;
    default: return 0;
  }
}

static bool il__text_is(const il_vocab *v, int32_t id, const char *s) {
  size_t l = strlen(s);
  return v->len[id] == l && memcmp(v->blob + v->off[id], s, l) == 0;
}

/* "<0xXX>" -> XX, else -1 */
static int il__hex_byte_token(const char *t, size_t n) {
  if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
  int b = 0;
  for (int k = 3; k < 5; k++) {
    char c = t[k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    b = b * 16 + d;
  }
  return b;
}

/* Decoded piece of token id with special = true, written into its slot of piece_blob (a piece
 * is never longer than the token's text). */
static void il__vocab_make_piece(il_vocab *v, int32_t id) {
  const char *t = v->blob + v->off[id];
  size_t n = v->len[id];
  char *d = v->piece_blob + v->off[id];
  size_t dl = 0;
  uint16_t a = v->attr[id];
  if (a & (IL__ATTR_UNKNOWN | IL__ATTR_CONTROL | IL__ATTR_USER_DEFINED)) {
    memcpy(d, t, n);
    dl = n;
  } else if (a & IL__ATTR_NORMAL) {
    if (v->kind == IL__VOCAB_SPM) {
      for (size_t k = 0; k < n;) {
        if (k + 3 <= n && memcmp(t + k, IL__VOCAB_SPACE, 3) == 0) {
          d[dl++] = ' ';
          k += 3;
        } else {
          d[dl++] = t[k++];
        }
      }
    } else {
      /* byte-level: each code point stands for one byte; others are copied as they are */
      for (size_t k = 0; k < n;) {
        uint8_t c = (uint8_t)t[k];
        size_t cl = il__utf8_len(c);
        if (cl > n - k) cl = n - k;
        uint32_t cpt = c;
        if (cl == 2 && (c & 0xE0) == 0xC0) cpt = ((uint32_t)(c & 0x1F) << 6) | ((uint8_t)t[k + 1] & 0x3F);
        int b = cl <= 2 ? il__vocab_cpt_to_byte(cpt) : -1;
        if (b >= 0) d[dl++] = (char)b;
        else {
          memcpy(d + dl, t + k, cl);
          dl += cl;
        }
        k += cl;
      }
    }
  } else if (a & IL__ATTR_BYTE) {
    int b = il__hex_byte_token(t, n);
    if (b >= 0) d[dl++] = (char)b;
  }
  d[dl] = '\0';
  v->piece_len[id] = (uint32_t)dl;
}

typedef struct {
  uint32_t len;
  int32_t id;
} il__len_id;

static int il__len_id_cmp(const void *a, const void *b) {
  const il__len_id *x = a, *y = b;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Special-token list (length desc, then id) and the byte trie over their texts. */
static il_status il__vocab_build_specials(il_vocab *v) {
  il__vocab_free_derived(v);
  int32_t n = v->n, ns = 0;
  size_t nodes = 1;
  for (int32_t i = 0; i < n; i++) {
    if (v->attr[i] & (IL__ATTR_CONTROL | IL__ATTR_USER_DEFINED | IL__ATTR_UNKNOWN)) {
      ns++;
      nodes += v->len[i];
    }
  }
  v->special = il_mem_alloc(IL_MEM_TOKENIZER, ((size_t)ns + 1) * sizeof *v->special, "special tokens");
  v->special_rank = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->special_rank, "special tokens");
  if (!v->special || !v->special_rank) return IL_ERR_OOM;
  IL_TRY(il_trie_init(&v->trie, nodes, IL_MEM_TOKENIZER, "special token trie"));
  ns = 0;
  for (int32_t i = 0; i < n; i++) {
    v->special_rank[i] = -1;
    if (v->attr[i] & (IL__ATTR_CONTROL | IL__ATTR_USER_DEFINED | IL__ATTR_UNKNOWN))
      v->special[ns++] = i;
  }
  /* longest first, then by id: O(ns log ns) (one 256 KiB token must not cost a pass per length) */
  il__len_id *sorted = il_mem_alloc(IL_MEM_WORKSPACE, ((size_t)ns + 1) * sizeof *sorted, "special tokens");
  if (!sorted) return IL_ERR_OOM;
  for (int32_t k = 0; k < ns; k++) sorted[k] = (il__len_id){v->len[v->special[k]], v->special[k]};
  if (ns > 1) qsort(sorted, (size_t)ns, sizeof *sorted, il__len_id_cmp);
  for (int32_t k = 0; k < ns; k++) v->special[k] = sorted[k].id;
  il_mem_free(sorted);
  v->n_special = ns;
  for (int32_t k = 0; k < ns; k++) v->special_rank[v->special[k]] = k;

  for (int32_t k = 0; k < ns; k++) {
    int32_t id = v->special[k];
    if (v->len[id]) il_trie_add(&v->trie, (const uint8_t *)v->blob + v->off[id], v->len[id], id);
  }
  return il_trie_link(&v->trie);
}

/* EOG flags: bit 1 by text (fixed), bit 0 by id (recomputed when ids change). */
static void il__vocab_update_eog(il_vocab *v) {
  for (int32_t i = 0; i < v->n; i++) v->eog[i] &= 2;
  const int32_t ids[] = {v->eos, v->eot, v->eom};
  for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
    if (ids[k] >= 0 && ids[k] < v->n) v->eog[ids[k]] |= 1;
}

/* What llama.cpp derives after loading: EOT/EOM and EOG tokens recognised by their text (made
 * control tokens if they were not), per-model strip attributes, byte tokens, the special list
 * and the piece cache. */
static il_status il__vocab_finish(il_vocab *v, const char *general_name) {
  static const char *const eot_texts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
      "<EOT>", "_<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
      "<end_of_utterance>"};
  static const char *const eog_texts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
      "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"};
  int32_t n = v->n;
  for (int32_t i = 0; i < n; i++) {
    bool is_eot = false, is_eog = false;
    for (size_t k = 0; k < sizeof eot_texts / sizeof eot_texts[0]; k++)
      if (il__text_is(v, i, eot_texts[k])) is_eot = true;
    for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++)
      if (il__text_is(v, i, eog_texts[k])) is_eog = true;
    if (is_eot && v->eot < 0) {
      v->eot = i;
      v->attr[i] |= IL__ATTR_CONTROL;
    }
    if (v->eom < 0 && il__text_is(v, i, "<|eom_id|>")) {
      v->eom = i;
      v->attr[i] |= IL__ATTR_CONTROL;
    }
    if (is_eog) {
      v->eog[i] = 2;
      v->attr[i] |= IL__ATTR_CONTROL;
    }
  }
  il__vocab_update_eog(v);

  for (int c = 0; c < 256; c++) {
    v->byte_tok[c] = -1;
    if (v->kind == IL__VOCAB_SPM) {
      char hex[7];
      snprintf(hex, sizeof hex, "<0x%02X>", c);
      int32_t id = il__vocab_lookup(v, hex, 6);
      if (id < 0) {
        char raw = (char)c;
        id = il__vocab_lookup(v, &raw, 1);
      }
      v->byte_tok[c] = id;
    } else {
      uint32_t cpt = il__vocab_byte_to_cpt((uint8_t)c);
      char e[2];
      size_t el = 0;
      if (cpt < 0x80) e[el++] = (char)cpt;
      else {
        e[el++] = (char)(0xC0 | (cpt >> 6));
        e[el++] = (char)(0x80 | (cpt & 0x3F));
      }
      v->byte_tok[c] = il__vocab_lookup(v, e, el);
    }
  }

  IL_TRY(il__vocab_build_specials(v));

  /* per-model attributes that GGUF files do not carry (llama.cpp keys them on general.name) */
  if (general_name) {
    char lower[128];
    size_t k = 0;
    for (; general_name[k] && k + 1 < sizeof lower; k++)
      lower[k] = (char)tolower((unsigned char)general_name[k]);
    lower[k] = '\0';
    if (strstr(lower, "phi-3") || strstr(lower, "phi3")) {
      for (int32_t s = 0; s < v->n_special; s++) v->attr[v->special[s]] |= IL__ATTR_RSTRIP;
      int32_t id = il__vocab_lookup(v, "</s>", 4);
      if (id >= 0) v->attr[id] |= IL__ATTR_RSTRIP;
      const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
      for (size_t j = 0; j < 3; j++) {
        id = il__vocab_lookup(v, keep[j], strlen(keep[j]));
        if (id >= 0) v->attr[id] &= (uint16_t)~IL__ATTR_RSTRIP;
      }
    }
  }

  v->max_piece = 0;
  for (int32_t i = 0; i < n; i++) {
    il__vocab_make_piece(v, i);
    if (v->piece_len[i] > v->max_piece) v->max_piece = v->piece_len[i];
  }
  return IL_OK;
}

static il_status il__vocab_alloc(int32_t n, il__vocab_kind kind, il_vocab **out) {
  il_vocab *v = il_mem_calloc(IL_MEM_TOKENIZER, sizeof *v, "vocabulary");
  if (!v) return IL_ERR_OOM;
  v->kind = kind;
  v->n = n;
  v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;
  v->off = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->off, "vocabulary");
  v->len = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->len, "vocabulary");
  v->piece_len = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->piece_len, "vocabulary");
  v->score = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->score, "vocabulary");
  v->attr = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n * sizeof *v->attr, "vocabulary");
  v->type = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n, "vocabulary");
  v->eog = il_mem_calloc(IL_MEM_TOKENIZER, (size_t)n, "vocabulary");
  *out = v;
  if (!v->off || !v->len || !v->piece_len || !v->score || !v->attr || !v->type || !v->eog)
    return IL_ERR_OOM;
  return IL_OK;
}
/* ---- from GGUF ---- */

typedef struct {
  const il_gguf *g;
} il__gguf_ctx;

static void il__gguf_text(const void *ctx, int32_t i, const char **p, size_t *n) {
  const il__gguf_ctx *c = ctx;
  il_gguf_str s = {NULL, 0};
  if (il_gguf_arr_str(c->g, "tokenizer.ggml.tokens", (uint64_t)i, &s) != IL_OK) s.len = 0;
  *p = s.ptr;
  *n = (size_t)s.len;
}

/* Optional string key: *out NULL when absent; wrong type is an error. */
static il_status il__gguf_opt_str(const il_gguf *g, const char *key, il_gguf_str *out) {
  out->ptr = NULL;
  out->len = 0;
  if (il_gguf_find_key(g, key) < 0) return IL_OK;
  return il_gguf_get_str(g, key, out);
}

static il_status il__gguf_opt_bool(const il_gguf *g, const char *key, bool *val) {
  if (il_gguf_find_key(g, key) < 0) return IL_OK;
  return il_gguf_get_bool(g, key, val);
}

/* Special id keys, all treated alike: absent keeps the default; an integer of any width and
 * signedness outside the vocabulary keeps it too (llama.cpp warns "bad special token" and does
 * the same; a u64 beyond INT64_MAX is just another value out of range); a key that is not an
 * integer is IL_ERR_FORMAT naming it. */
static il_status il__gguf_opt_id(const il_gguf *g, const char *key, int32_t n, int32_t *id) {
  if (*id >= n) *id = -1;
  if (il_gguf_find_key(g, key) < 0) return IL_OK;
  int64_t x = -1;
  il_status st = il_gguf_get_i64(g, key, &x);
  if (st == IL_ERR_RANGE) { /* does not fit int64: out of any vocabulary's range */
    il_error_clear();
    return IL_OK;
  }
  IL_TRY(st);
  if (x >= 0 && x < n) *id = (int32_t)x;
  return IL_OK;
}

static il_status il__vocab_load_gguf(const il_gguf *g, const il_vocab_opts *opts, il_vocab **out) {
  const char *src = il_gguf_path(g) ? il_gguf_path(g) : "gguf";
  il_gguf_str model;
  IL_TRY(il_gguf_get_str(g, "tokenizer.ggml.model", &model));
  il__vocab_kind kind;
  if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) kind = IL__VOCAB_SPM;
  else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) kind = IL__VOCAB_BPE;
  else
    return il_error(IL_ERR_UNSUPPORTED,
                    "%s: tokenizer.ggml.model '%.*s' is not supported (only 'llama' and 'gpt2')",
                    src, (int)(model.len > 64 ? 64 : model.len), model.ptr);

  il_gguf_type et;
  uint64_t n64;
  const void *data;
  IL_TRY(il_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n64, &data));
  if (et != IL_GGUF_STRING)
    return il_error(IL_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not an array of strings", src);
  if (n64 == 0 || n64 > INT32_MAX)
    return il_error(IL_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", src,
                    (unsigned long long)n64);
  int32_t n = (int32_t)n64;

  il_vocab *v = NULL;
  il_status s = il__vocab_alloc(n, kind, &v);
  *out = v;
  if (s != IL_OK) return s;
  snprintf(v->model_name, sizeof v->model_name, "%s", kind == IL__VOCAB_SPM ? "llama" : "gpt2");
  il__gguf_ctx ctx = {g};
  IL_TRY(il__vocab_set_texts(v, src, il__gguf_text, &ctx, false));

  if (il_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
    IL_TRY(il_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n64, &data));
    if ((et != IL_GGUF_F32 && et != IL_GGUF_I32) || n64 < (uint64_t)n)
      return il_error(IL_ERR_FORMAT,
                      "%s: tokenizer.ggml.scores must be f32 or i32 with >= %d entries", src, n);
    for (int32_t i = 0; i < n; i++) {
      if (et == IL_GGUF_F32) memcpy(&v->score[i], (const char *)data + 4 * (size_t)i, 4);
      else {
        int32_t x;
        memcpy(&x, (const char *)data + 4 * (size_t)i, 4);
        v->score[i] = (float)x;
      }
    }
  }
  bool have_types = il_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0;
  if (have_types) {
    IL_TRY(il_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n64, &data));
    if (et != IL_GGUF_I32 || n64 < (uint64_t)n)
      return il_error(IL_ERR_FORMAT,
                      "%s: tokenizer.ggml.token_type must be i32 with >= %d entries", src, n);
  }
  for (int32_t i = 0; i < n; i++) {
    int32_t t = IL_TOKEN_NORMAL;
    if (have_types) memcpy(&t, (const char *)data + 4 * (size_t)i, 4);
    v->type[i] = (uint8_t)(t >= 0 && t <= 6 ? t : 0);
    v->attr[i] = have_types ? il__attr_of_type(t) : IL__ATTR_NORMAL;
  }

  il__pretok_flags pf = {false, false};
  if (kind == IL__VOCAB_BPE) {
    if (il_gguf_find_key(g, "tokenizer.ggml.merges") < 0)
      return il_error(IL_ERR_NOT_FOUND, "%s: tokenizer.ggml.merges is missing (needed by gpt2)", src);
    IL_TRY(il_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n64, &data));
    if (et != IL_GGUF_STRING || n64 > INT32_MAX)
      return il_error(IL_ERR_FORMAT, "%s: tokenizer.ggml.merges is not an array of strings", src);
    int32_t nm = (int32_t)n64;
    const char **strs = il_mem_alloc(IL_MEM_WORKSPACE, ((size_t)nm + 1) * sizeof *strs, "merges");
    uint64_t *lens = il_mem_alloc(IL_MEM_WORKSPACE, ((size_t)nm + 1) * sizeof *lens, "merges");
    s = strs && lens ? IL_OK : IL_ERR_OOM;
    for (int32_t i = 0; i < nm && s == IL_OK; i++) {
      il_gguf_str m;
      s = il_gguf_arr_str(g, "tokenizer.ggml.merges", (uint64_t)i, &m);
      strs[i] = m.ptr;
      lens[i] = m.len;
    }
    if (s == IL_OK) s = il__vocab_load_merges(v, nm, strs, lens);
    il_mem_free(strs);
    il_mem_free(lens);
    IL_TRY(s);

    il_gguf_str pre;
    IL_TRY(il__gguf_opt_str(g, "tokenizer.ggml.pre", &pre));
    char name[64] = "default";
    if (opts && opts->force_pre) snprintf(name, sizeof name, "%s", opts->force_pre);
    else if (pre.ptr) snprintf(name, sizeof name, "%.*s", (int)(pre.len > 63 ? 63 : pre.len), pre.ptr);
    const char *canon = NULL;
    s = il__pretok_new(name, &v->pre, &pf, &canon);
    if (s != IL_OK) return il_error_wrap(s, "%s: ", src);
    snprintf(v->pre_name, sizeof v->pre_name, "%s", name);
    v->ignore_merges = pf.ignore_merges;
    v->add_bos = pf.add_bos;
    v->add_space_prefix = false;
  } else {
    snprintf(v->pre_name, sizeof v->pre_name, "default");
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
  }
  IL_TRY(il__gguf_opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.bos_token_id", n, &v->bos));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.eos_token_id", n, &v->eos));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.eot_token_id", n, &v->eot));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.eom_token_id", n, &v->eom));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.unknown_token_id", n, &v->unk));
  IL_TRY(il__gguf_opt_id(g, "tokenizer.ggml.padding_token_id", n, &v->pad));
  IL_TRY(il__gguf_opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos));
  IL_TRY(il__gguf_opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos));

  il_gguf_str gname;
  IL_TRY(il__gguf_opt_str(g, "general.name", &gname));
  char name[128] = "";
  if (gname.ptr) snprintf(name, sizeof name, "%.*s", (int)(gname.len > 127 ? 127 : gname.len), gname.ptr);
  return il__vocab_finish(v, name);
}

il_status il_vocab_from_gguf_opts(const il_gguf *g, const il_vocab_opts *opts, il_vocab **out) {
  il_vocab *v = NULL;
  il_status s = il__vocab_load_gguf(g, opts, &v);
  if (s != IL_OK) {
    il_vocab_free(v);
    *out = NULL;
    return s;
  }
  *out = v;
  return IL_OK;
}

il_status il_vocab_from_gguf(const il_gguf *g, il_vocab **out) {
  return il_vocab_from_gguf_opts(g, NULL, out);
}

/* ---- from arrays ---- */

typedef struct {
  const char *const *tokens;
  const uint64_t *lens;
} il__arr_ctx;

static void il__arr_text(const void *ctx, int32_t i, const char **p, size_t *n) {
  const il__arr_ctx *c = ctx;
  *p = c->tokens[i] ? c->tokens[i] : "";
  *n = c->lens ? (size_t)c->lens[i] : strlen(*p);
}

static void il__vocab_infer_special_types(il_vocab *v) {
  for (int32_t i = 0; i < v->n; i++) {
    bool byte = il__hex_byte_token(v->blob + v->off[i], v->len[i]) >= 0;
    v->type[i] = byte ? IL_TOKEN_BYTE : IL_TOKEN_NORMAL;
    if (i == v->unk) v->type[i] = IL_TOKEN_UNKNOWN;
    if (i == v->bos || i == v->eos) v->type[i] = IL_TOKEN_CONTROL;
    v->attr[i] = il__attr_of_type(v->type[i]);
  }
}

il_status il_vocab_from_arrays(const char *model, int32_t n, const char *const *tokens,
                               const uint64_t *lens, const float *scores, const int32_t *types,
                               il_vocab **out) {
  *out = NULL;
  if (!model || strcmp(model, "llama") != 0)
    return il_error(IL_ERR_UNSUPPORTED,
                    "il_vocab_from_arrays: model '%s' is not supported (only 'llama'; byte-level "
                    "BPE needs merges: load it from GGUF)",
                    model ? model : "(null)");
  if (n <= 0 || !tokens)
    return il_error(IL_ERR_INVALID_ARG, "il_vocab_from_arrays: %d tokens", (int)n);
  il__arr_ctx ctx = {tokens, lens};
  /* llama2.c's exporter writes ' ' where SentencePiece has '▁' */
  bool has_escape = false, has_space = false;
  for (int32_t i = 0; i < n; i++) {
    const char *p;
    size_t l;
    il__arr_text(&ctx, i, &p, &l);
    for (size_t k = 0; k < l; k++) {
      if (p[k] == ' ') has_space = true;
      if (k + 3 <= l && memcmp(p + k, IL__VOCAB_SPACE, 3) == 0) has_escape = true;
    }
  }
  il_vocab *v = NULL;
  il_status s = il__vocab_alloc(n, IL__VOCAB_SPM, &v);
  if (s == IL_OK) s = il__vocab_set_texts(v, "arrays", il__arr_text, &ctx, has_space && !has_escape);
  if (s == IL_OK) {
    snprintf(v->model_name, sizeof v->model_name, "llama");
    snprintf(v->pre_name, sizeof v->pre_name, "default");
    v->add_space_prefix = true;
    if (n > 2) {
      v->unk = 0;
      v->bos = 1;
      v->eos = 2;
      v->add_bos = true;
    }
    for (int32_t i = 0; i < n; i++) v->score[i] = scores ? scores[i] : 0.0f;
    if (types) {
      for (int32_t i = 0; i < n; i++) {
        v->type[i] = (uint8_t)(types[i] >= 0 && types[i] <= 6 ? types[i] : 0);
        v->attr[i] = il__attr_of_type(types[i]);
      }
    } else {
      v->types_inferred = true;
      il__vocab_infer_special_types(v);
    }
    s = il__vocab_finish(v, NULL);
  }
  if (s != IL_OK) {
    il_vocab_free(v);
    return s;
  }
  *out = v;
  return IL_OK;
}

void il_vocab_set_special(il_vocab *v, int32_t bos, int32_t eos, int32_t unk, bool add_bos,
                          bool add_eos) {
  v->bos = bos >= 0 && bos < v->n ? bos : -1;
  v->eos = eos >= 0 && eos < v->n ? eos : -1;
  v->unk = unk >= 0 && unk < v->n ? unk : -1;
  v->add_bos = add_bos;
  v->add_eos = add_eos;
  il__vocab_update_eog(v);
  if (v->types_inferred) {
    /* the special list and pieces depend on the types; on OOM the old list stays in use, which
     * only affects matching of the special texts with parse_special */
    il__vocab_infer_special_types(v);
    if (il__vocab_build_specials(v) != IL_OK) {
      il__vocab_free_derived(v);
      v->n_special = 0;
    }
    for (int32_t i = 0; i < v->n; i++) il__vocab_make_piece(v, i);
  }
}

/* ---- getters ---- */

int32_t il_vocab_size(const il_vocab *v) { return v->n; }
int32_t il_vocab_bos(const il_vocab *v) { return v->bos; }
int32_t il_vocab_eos(const il_vocab *v) { return v->eos; }
int32_t il_vocab_eot(const il_vocab *v) { return v->eot; }
int32_t il_vocab_unk(const il_vocab *v) { return v->unk; }
int32_t il_vocab_pad(const il_vocab *v) { return v->pad; }
bool il_vocab_add_bos(const il_vocab *v) { return v->add_bos && v->bos >= 0; }
bool il_vocab_add_eos(const il_vocab *v) { return v->add_eos && v->eos >= 0; }
bool il_vocab_is_eog(const il_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
const char *il_vocab_model(const il_vocab *v) { return v->model_name; }
const char *il_vocab_pre(const il_vocab *v) { return v->pre_name; }
size_t il_vocab_max_piece(const il_vocab *v) { return v->max_piece; }

const char *il_vocab_token_text(const il_vocab *v, int32_t id, size_t *len) {
  if (id < 0 || id >= v->n) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = v->len[id];
  return v->blob + v->off[id];
}

il_token_type il_vocab_token_type(const il_vocab *v, int32_t id) {
  return id >= 0 && id < v->n ? (il_token_type)v->type[id] : IL_TOKEN_UNDEFINED;
}

float il_vocab_token_score(const il_vocab *v, int32_t id) {
  return id >= 0 && id < v->n ? v->score[id] : 0.0f;
}

int32_t il_vocab_find(const il_vocab *v, const char *text, size_t len) {
  return il__vocab_lookup(v, text, len);
}

/* ---- pieces ---- */

const char *il__vocab_piece(const il_vocab *v, int32_t id, bool special, size_t *n) {
  *n = 0;
  if (id < 0 || id >= v->n) return "";
  if (!special && (v->attr[id] & (IL__ATTR_UNKNOWN | IL__ATTR_CONTROL))) return "";
  *n = v->piece_len[id];
  return v->piece_blob + v->off[id];
}

size_t il_vocab_token_piece(const il_vocab *v, int32_t id, bool special, char *buf, size_t cap) {
  size_t n;
  const char *p = il__vocab_piece(v, id, special, &n);
  memcpy(buf, p, n < cap ? n : cap);
  return n;
}
