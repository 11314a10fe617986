/* model/tokenizer: the encode driver, text -> token ids.
 *
 * A text's path: il_tokenize first cuts special tokens out of it (il__partition, one
 * Aho-Corasick pass over the vocabulary's special-token trie), then hands every plain fragment
 * to the vocabulary's model: SentencePiece-style (spm.c) after escaping spaces to '▁', or
 * byte-level BPE (bpe.c, which pre-tokenizes with pretok.c), and adds BOS/EOS.
 *
 * The tokenizer's modules, each including only those below it (checked with grep on the
 * #include lines):
 *
 *   tokenizer.c         encode driver: special tokens, escaping, BOS/EOS   il_tokenize*
 *   spm.c  bpe.c        merging one fragment, per model                    il__spm_*, il__bpe_*
 *   detok.c             ids -> text, whole or streamed (beside the driver) il_detok*
 *   vocab.c             the vocabulary: load, hash index, specials trie,   il_vocab_*, il__vocab_*
 *                       pieces, merge ranks, byte alphabet
 *   pretok.c            pre-tokenizer expressions (PCRE2); a vocabulary    il__pretok_*
 *                       owns its compiled one, so it sits below vocab.c
 *   strhash.c  trie.c   the text -> id index; the special-token trie with   il_strhash_*, il_trie_*
 *                       its Aho-Corasick links (both below vocab.c)
 *   vec.h  utf8.h       growable scratch array, UTF-8 lengths              il__vec_*, il__utf8_*
 *
 * tokenizer.h, the public header, also includes vocab.h and detok.h for callers that want the
 * whole tokenizer from one include.
 * Not for: the merge algorithms, pre-tokenizer expressions, decoding, the CLI.
 */
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "memory/mem.h"
#include "model/bpe.h"
#include "model/spm.h"
#include "model/vec.h"
#include "model/vocab_impl.h"

static bool il__is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* ---- special-token partition ---- */

typedef struct {
  int32_t rank;
  uint32_t pad;
  size_t pos;
} il__occ;

static int il__occ_cmp(const void *a, const void *b) {
  const il__occ *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct {
  size_t pos;
  int32_t id;
} il__hit;

static int il__hit_cmp(const void *a, const void *b) {
  const il__hit *x = a, *y = b;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Fenwick tree over [0, n): count of taken bytes before position i, and marking byte i. */
static uint32_t il__fen_sum(const uint32_t *f, size_t i) {
  uint32_t s = 0;
  for (; i > 0; i -= i & (~i + 1)) s += f[i];
  return s;
}
static void il__fen_add(uint32_t *f, size_t n, size_t i) {
  for (i++; i <= n; i += i & (~i + 1)) f[i]++;
}

/* Finds the special tokens llama.cpp's tokenizer_st_partition would cut out, with the same
 * result: tokens are taken longest first; each takes its leftmost non-overlapping occurrences
 * inside the text not yet taken; lstrip/rstrip tokens also remove adjacent ASCII whitespace.
 * One Aho-Corasick pass over the trie collects every occurrence, then each token's are accepted
 * in order, so the cost is O(len + occurrences * log len): neither a long special token nor a
 * long prompt multiplies the work (a 64 KiB prompt against a 256 KiB token is linear).
 * taken[i]: 0 free text, 1 removed whitespace, 2 inside a special token. */
/* Whether [pos, pos + n) overlaps one of the sorted, disjoint ranges lit[0..n_lit). */
static bool il__in_literal(const il_text_range *lit, size_t n_lit, size_t pos, size_t n) {
  size_t lo = 0, hi = n_lit;
  while (lo < hi) { /* the first range that ends after pos */
    size_t mid = lo + (hi - lo) / 2;
    if (lit[mid].end <= pos) lo = mid + 1;
    else hi = mid;
  }
  return lo < n_lit && lit[lo].start < pos + n;
}

static il_status il__partition(const il_vocab *v, const char *text, size_t len, bool parse_special,
                               const il_text_range *lit, size_t n_lit, uint8_t *taken, il__vec *hits) {
  const uint16_t allowed = parse_special
                               ? (IL__ATTR_CONTROL | IL__ATTR_USER_DEFINED | IL__ATTR_UNKNOWN)
                               : IL__ATTR_USER_DEFINED;
  il__vec occ;
  il__vec_init(&occ, sizeof(il__occ));
  const uint8_t *t = (const uint8_t *)text;
  int32_t state = -1; /* Aho-Corasick: the longest trie path that is a suffix of text[0..p] */
  for (size_t p = 0; p < len; p++) {
    int32_t g;
    while ((g = il_trie_step(&v->trie, state, t[p])) < 0 && state >= 0) state = v->trie.fail[state];
    state = g;
    int32_t node = state >= 0 && v->trie.key[state] >= 0 ? state : state >= 0 ? v->trie.out[state] : -1;
    for (; node >= 0; node = v->trie.out[node]) { /* every token ending at p */
      int32_t id = v->trie.key[node];
      if (!(v->attr[id] & allowed)) continue;
      if (n_lit && !(v->attr[id] & IL__ATTR_USER_DEFINED) && il__in_literal(lit, n_lit, p + 1 - v->len[id], v->len[id]))
        continue; /* a control token's text inside literal text is text */
      il__occ o = {v->special_rank[id], 0, p + 1 - v->len[id]};
      il_status s = il__vec_push(&occ, &o);
      if (s != IL_OK) {
        il__vec_free(&occ);
        return s;
      }
    }
  }
  if (occ.n > 1) qsort(occ.p, occ.n, sizeof(il__occ), il__occ_cmp);
  /* taken bytes counted in a Fenwick tree: "is this span still free" is O(log len), not O(span) */
  uint32_t *fen = il_mem_calloc(IL_MEM_WORKSPACE, (len + 1) * sizeof *fen, "tokenizer partition");
  if (!fen) {
    il__vec_free(&occ);
    return IL_ERR_OOM;
  }
  il_status s = IL_OK;
  size_t last_end = 0;
  int32_t last_rank = -1;
  for (size_t k = 0; k < occ.n && s == IL_OK; k++) {
    il__occ o = IL__VEC_AT(&occ, il__occ, k);
    int32_t id = v->special[o.rank];
    size_t l = v->len[id];
    if (o.rank != last_rank) {
      last_rank = o.rank;
      last_end = 0;
    }
    if (o.pos < last_end) continue;
    if (il__fen_sum(fen, o.pos + l) != il__fen_sum(fen, o.pos)) continue; /* some byte already taken */
    memset(taken + o.pos, 2, l);
    for (size_t j = o.pos; j < o.pos + l; j++) il__fen_add(fen, len, j);
    last_end = o.pos + l;
    if (v->attr[id] & IL__ATTR_LSTRIP)
      for (size_t j = o.pos; j > 0 && taken[j - 1] == 0 && il__is_space(t[j - 1]); j--) {
        taken[j - 1] = 1;
        il__fen_add(fen, len, j - 1);
      }
    if (v->attr[id] & IL__ATTR_RSTRIP)
      for (; last_end < len && taken[last_end] == 0 && il__is_space(t[last_end]); last_end++) {
        taken[last_end] = 1;
        il__fen_add(fen, len, last_end);
      }
    il__hit h = {o.pos, id};
    s = il__vec_push(hits, &h);
  }
  il__vec_free(&occ);
  il_mem_free(fen);
  if (s == IL_OK && hits->n > 1) qsort(hits->p, hits->n, sizeof(il__hit), il__hit_cmp);
  return s;
}

/* ---- tokenize ---- */

static il_status il__encode_fragment(const il_vocab *v, const char *text, size_t len,
                                     bool prefix_space, il__vec *esc, il__vec *out) {
  if (v->kind == IL__VOCAB_BPE) return il__bpe_encode(v, text, len, out);
  esc->n = 0;
  IL_TRY(il__vec_reserve(esc, 3 * (len + 1)));
  char *e = esc->p;
  size_t n = 0;
  if (prefix_space) {
    memcpy(e, IL__VOCAB_SPACE, 3);
    n = 3;
  }
  for (size_t i = 0; i < len; i++) {
    if (text[i] == ' ') {
      memcpy(e + n, IL__VOCAB_SPACE, 3);
      n += 3;
    } else {
      e[n++] = text[i];
    }
  }
  esc->n = n;
  return il__spm_encode(v, e, n, out);
}

static il_status il__tokenize(const il_vocab *v, const char *text, size_t len, bool add_special,
                              bool parse_special, const il_text_range *lit, size_t n_lit, il__vec *out) {
  if (add_special && v->add_bos && v->bos >= 0) IL_TRY(il__vec_push(out, &v->bos));
  il_status s = IL_OK;
  uint8_t *taken = NULL;
  il__vec hits, esc;
  il__vec_init(&hits, sizeof(il__hit));
  il__vec_init(&esc, 1);
  if (len > 0) {
    taken = il_mem_calloc(IL_MEM_WORKSPACE, len, "tokenizer partition");
    if (!taken) return IL_ERR_OOM;
    if (v->n_special > 0) s = il__partition(v, text, len, parse_special, lit, n_lit, taken, &hits);
  }
  bool prev_special = true; /* SentencePiece prefixes a space to the first fragment */
  size_t h = 0, p = 0;
  while (s == IL_OK && p < len) {
    if (h < hits.n && IL__VEC_AT(&hits, il__hit, h).pos == p) {
      int32_t id = IL__VEC_AT(&hits, il__hit, h).id;
      s = il__vec_push(out, &id);
      p += v->len[id];
      h++;
      prev_special = true;
      continue;
    }
    if (taken[p] != 0) { /* stripped whitespace */
      p++;
      continue;
    }
    size_t q = p;
    while (q < len && taken[q] == 0) q++;
    s = il__encode_fragment(v, text + p, q - p, v->add_space_prefix && prev_special, &esc, out);
    prev_special = false;
    p = q;
  }
  il_mem_free(taken);
  il__vec_free(&hits);
  il__vec_free(&esc);
  if (s == IL_OK && add_special && v->add_eos && v->eos >= 0) s = il__vec_push(out, &v->eos);
  return s;
}

il_status il_tokenize(const il_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out) {
  il__vec res;
  il__vec_init(&res, sizeof(int32_t));
  il_status s = il__tokenize(v, text, len, add_special, parse_special, NULL, 0, &res);
  if (s != IL_OK) {
    il__vec_free(&res);
    *n_out = 0;
    return s;
  }
  *n_out = res.n;
  size_t m = res.n < cap ? res.n : cap;
  if (m) memcpy(out, res.p, m * sizeof(int32_t));
  il__vec_free(&res);
  if (*n_out > cap)
    return il_error(IL_ERR_RANGE, "tokenize: %zu tokens do not fit in a buffer of %zu", *n_out, cap);
  return IL_OK;
}

il_status il_tokenize_alloc(const il_vocab *v, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out, size_t *n_out) {
  return il_tokenize_literal_alloc(v, text, len, add_special, parse_special, NULL, 0, out, n_out);
}

il_status il_tokenize_literal_alloc(const il_vocab *v, const char *text, size_t len, bool add_special,
                                    bool parse_special, const il_text_range *literal, size_t n_literal,
                                    int32_t **out, size_t *n_out) {
  il__vec res;
  il__vec_init(&res, sizeof(int32_t));
  *out = NULL;
  *n_out = 0;
  il_status s = il__tokenize(v, text, len, add_special, parse_special, literal, n_literal, &res);
  if (s == IL_OK) {
    int32_t *ids = il_mem_alloc(IL_MEM_TOKENIZER, (res.n + 1) * sizeof *ids, "token ids");
    if (!ids) s = IL_ERR_OOM;
    else {
      if (res.n) memcpy(ids, res.p, res.n * sizeof *ids);
      *out = ids;
      *n_out = res.n;
    }
  }
  il__vec_free(&res);
  return s;
}
