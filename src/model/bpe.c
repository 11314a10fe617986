/* model/bpe: byte-level BPE for "gpt2" vocabularies.
 *
 * Each pre-tokenized word is first written in GPT-2's byte alphabet (bytes_to_unicode: the 188
 * printable Latin-1 bytes stand for themselves, the other 68 are shifted to U+0100..U+0143), so
 * every byte is one character of 1-2 UTF-8 bytes. Adjacent symbols are merged lowest merge rank
 * first (ties: leftmost), through a min-heap, until no pair has a rank: llama.cpp's
 * llm_tokenizer_bpe_session, in O(n log n) per word. With ignore_merges (Llama 3) a word that
 * is a token as a whole is taken directly.
 * The merge ranks and the byte alphabet belong to the vocabulary (vocab.c), since loading it
 * builds them; this file only runs the merges.
 * Not for: splitting text into words (pretok.c) or special tokens (tokenizer.c). Sits on vocab
 * (vocab_impl.h), pretok, vec.h and utf8.h; only the encode driver (tokenizer.c) calls it.
 */
#include "model/bpe.h"

#include "model/pretok.h"
#include "model/utf8.h"
#include "model/vec.h"
#include "model/vocab_impl.h"

/* ---- merging one word ---- */

typedef struct {
  int32_t prev, next;
  size_t start, n;
} il__bsym;

typedef struct {
  int32_t left, right;
  int32_t rank;
  uint32_t nl, nr; /* sizes when queued, to detect stale pairs */
} il__bpe_pair;

static inline bool il__bpe_before(const il__bpe_pair *a, const il__bpe_pair *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

/* Pushes x onto the min-heap of il__bpe_pair in hp. IL_ERR_OOM, the heap unchanged. */
static il_status il__bpe_heap_push(il__vec *hp, il__bpe_pair x) {
  IL_TRY(il__vec_reserve(hp, 1));
  il__bpe_pair *h = hp->p;
  size_t i = hp->n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!il__bpe_before(&x, &h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = x;
  return IL_OK;
}

static il__bpe_pair il__bpe_heap_pop(il__vec *hp) {
  il__bpe_pair *h = hp->p;
  il__bpe_pair top = h[0], x = h[--hp->n];
  size_t i = 0, n = hp->n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && il__bpe_before(&h[c + 1], &h[c])) c++;
    if (!il__bpe_before(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  if (n > 0) h[i] = x;
  return top;
}

typedef struct {
  const il_vocab *v;
  il__vec enc;   /* the word in the byte alphabet */
  il__vec syms;  /* il__bsym */
  il__vec heap;  /* il__bpe_pair, a min-heap */
} il__bpe;

static il_status il__bpe_try_pair(il__bpe *b, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return IL_OK;
  const il__bsym *sy = b->syms.p;
  const char *e = b->enc.p;
  int32_t rank = il__vocab_merge_rank(b->v, e + sy[left].start, sy[left].n, e + sy[right].start,
                                      sy[right].n);
  if (rank < 0) return IL_OK;
  il__bpe_pair p = {left, right, rank, (uint32_t)sy[left].n, (uint32_t)sy[right].n};
  return il__bpe_heap_push(&b->heap, p);
}

/* The token ids of one word: text[0..len) in raw bytes. */
static il_status il__bpe_word(il__bpe *b, const char *text, size_t len, il__vec *out) {
  const il_vocab *v = b->v;
  b->enc.n = 0;
  IL_TRY(il__vec_reserve(&b->enc, len * 2));
  char *e = b->enc.p;
  size_t ne = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t c = il__vocab_byte_to_cpt((uint8_t)text[i]);
    if (c < 0x80) e[ne++] = (char)c;
    else {
      e[ne++] = (char)(0xC0 | (c >> 6));
      e[ne++] = (char)(0x80 | (c & 0x3F));
    }
  }
  b->enc.n = ne;

  if (v->ignore_merges && ne <= v->max_token_len) {
    int32_t id = il__vocab_lookup(v, e, ne);
    if (id >= 0) return il__vec_push(out, &id);
  }

  /* one symbol per byte of the original word (= one character of the encoded word) */
  b->syms.n = 0;
  IL_TRY(il__vec_reserve(&b->syms, len));
  il__bsym *sy = b->syms.p;
  int32_t n_sym = 0;
  for (size_t off = 0; off < ne;) {
    size_t cl = il__utf8_len((uint8_t)e[off]);
    if (cl > ne - off) cl = ne - off;
    sy[n_sym] = (il__bsym){n_sym - 1, -1, off, cl};
    off += cl;
    if (off < ne) sy[n_sym].next = n_sym + 1;
    n_sym++;
  }
  b->syms.n = (size_t)n_sym;
  b->heap.n = 0;
  for (int32_t i = 1; i < n_sym; i++) IL_TRY(il__bpe_try_pair(b, i - 1, i));

  while (b->heap.n > 0) {
    il__bpe_pair p = il__bpe_heap_pop(&b->heap);
    il__bsym *l = &sy[p.left], *r = &sy[p.right];
    if (l->n == 0 || r->n == 0 || l->n != p.nl || r->n != p.nr) continue; /* stale */
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) sy[r->next].prev = p.left;
    IL_TRY(il__bpe_try_pair(b, l->prev, p.left));
    IL_TRY(il__bpe_try_pair(b, p.left, l->next));
  }

  for (int32_t i = 0; i != -1 && n_sym > 0; i = sy[i].next) {
    const il__bsym *y = &sy[i];
    int32_t id = y->n <= v->max_token_len ? il__vocab_lookup(v, e + y->start, y->n) : -1;
    if (id >= 0) {
      IL_TRY(il__vec_push(out, &id));
      continue;
    }
    /* not a token (a vocabulary without all 256 byte characters): byte by byte, UNK for a
     * byte the vocabulary lacks */
    for (size_t k = 0; k < y->n;) {
      size_t cl = il__utf8_len((uint8_t)e[y->start + k]);
      if (cl > y->n - k) cl = y->n - k;
      int32_t bid = il__vocab_lookup(v, e + y->start + k, cl);
      if (bid < 0) bid = v->unk;
      if (bid >= 0) IL_TRY(il__vec_push(out, &bid));
      k += cl;
    }
  }
  return IL_OK;
}

il_status il__bpe_encode(const il_vocab *v, const char *text, size_t len, il__vec *out) {
  if (len == 0) return IL_OK;
  il__vec words;
  il__vec_init(&words, 2 * sizeof(size_t));
  il__bpe b = {v, {0}, {0}, {0}};
  il__vec_init(&b.enc, 1);
  il__vec_init(&b.syms, sizeof(il__bsym));
  il__vec_init(&b.heap, sizeof(il__bpe_pair));
  il_status s = il__pretok_split(v->pre, text, len, &words);
  for (size_t i = 0; i < words.n && s == IL_OK; i++) {
    const size_t *w = (const size_t *)words.p + 2 * i;
    s = il__bpe_word(&b, text + w[0], w[1], out);
  }
  il__vec_free(&words);
  il__vec_free(&b.enc);
  il__vec_free(&b.syms);
  il__vec_free(&b.heap);
  return s;
}
