/* model/tokenizer_bpe: byte-level BPE for "gpt2" vocabularies.
 *
 * Each pre-tokenized word is first written in GPT-2's byte alphabet (bytes_to_unicode: the 188
 * printable Latin-1 bytes stand for themselves, the other 68 are shifted to U+0100..U+0143), so
 * every byte is one character of 1-2 UTF-8 bytes. Adjacent symbols are merged lowest merge rank
 * first (ties: leftmost), through a min-heap, until no pair has a rank: llama.cpp's
 * llm_tokenizer_bpe_session, in O(n log n) per word. With ignore_merges (Llama 3) a word that
 * is a token as a whole is taken directly.
 * Merges are stored as the strings "left right" and found through a hash of left+' '+right,
 * so a lookup builds no string.
 * Not for: splitting text into words (tokenizer_pre.c) or special tokens (tokenizer.c).
 */
#include <string.h>

#include "memory/mem.h"
#include "model/tokenizer_impl.h"

/* GPT-2's bytes_to_unicode in closed form: the 68 bytes that are not printable (0x00-0x20,
 * 0x7F-0xA0, 0xAD) are numbered in byte order from U+0100. */
uint32_t il__bpe_byte_to_cpt(uint8_t b) {
  if (b <= 0x20) return 256u + b;
  if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
  if (b == 0xAD) return 256u + 33u + 34u;
  return b;
}

int il__bpe_cpt_to_byte(uint32_t cpt) {
  if (cpt < 256) {
    bool printable = (cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt != 0xAD);
    return printable ? (int)cpt : -1;
  }
  if (cpt < 256 + 33) return (int)(cpt - 256);
  if (cpt < 256 + 33 + 34) return (int)(cpt - 256 - 33 + 0x7F);
  if (cpt == 256 + 33 + 34) return 0xAD;
  return -1;
}

/* ---- merges ---- */

static uint64_t il__merge_hash(const char *l, size_t nl, const char *r, size_t nr) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < nl; i++) h = (h ^ (uint8_t)l[i]) * 1099511628211ull;
  h = (h ^ (uint8_t)' ') * 1099511628211ull;
  for (size_t i = 0; i < nr; i++) h = (h ^ (uint8_t)r[i]) * 1099511628211ull;
  return h;
}

int32_t il__tokenizer_bpe_rank(const il_vocab *v, const char *left, size_t nl, const char *right,
                               size_t nr) {
  if (!v->merge_ht) return -1;
  size_t i = il__merge_hash(left, nl, right, nr) & v->merge_ht_mask;
  for (;; i = (i + 1) & v->merge_ht_mask) {
    int32_t m = v->merge_ht[i];
    if (m < 0) return -1;
    const char *s = v->merge_blob + v->merge_off[m];
    if (v->merge_split[m] == nl && v->merge_len[m] == nl + 1 + nr && memcmp(s, left, nl) == 0 &&
        memcmp(s + nl + 1, right, nr) == 0)
      return m;
  }
}

il_status il__tokenizer_bpe_load_merges(il_vocab *v, int32_t n, const char *const *strs,
                                        const uint64_t *lens) {
  size_t total = 0;
  for (int32_t i = 0; i < n; i++) total += (size_t)lens[i] + 1;
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap <<= 1;
  v->merge_blob = il_mem_alloc(IL_MEM_OTHER, total + 1, "bpe merges");
  v->merge_off = il_mem_alloc(IL_MEM_OTHER, ((size_t)n + 1) * sizeof *v->merge_off, "bpe merges");
  v->merge_len = il_mem_alloc(IL_MEM_OTHER, ((size_t)n + 1) * sizeof *v->merge_len, "bpe merges");
  v->merge_split = il_mem_alloc(IL_MEM_OTHER, ((size_t)n + 1) * sizeof *v->merge_split, "bpe merges");
  v->merge_ht = il_mem_alloc(IL_MEM_OTHER, cap * sizeof *v->merge_ht, "bpe merge index");
  if (!v->merge_blob || !v->merge_off || !v->merge_len || !v->merge_split || !v->merge_ht)
    return IL_ERR_OOM;
  memset(v->merge_ht, 0xff, cap * sizeof *v->merge_ht);
  v->merge_ht_mask = cap - 1;
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
    if (il__tokenizer_bpe_rank(v, s, nl, sp + 1, l - nl - 1) >= 0) continue; /* first rank wins */
    size_t h = il__merge_hash(s, nl, sp + 1, l - nl - 1) & v->merge_ht_mask;
    while (v->merge_ht[h] >= 0) h = (h + 1) & v->merge_ht_mask;
    v->merge_ht[h] = i;
  }
  return IL_OK;
}

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

typedef struct {
  il__bpe_pair *h;
  size_t n, cap;
} il__bpe_heap;

static il_status il__bpe_heap_push(il__bpe_heap *hp, il__bpe_pair x) {
  if (hp->n == hp->cap) {
    size_t cap = hp->cap ? hp->cap * 2 : 64;
    il__bpe_pair *h = il_mem_alloc(IL_MEM_WORKSPACE, cap * sizeof *h, "tokenizer merge heap");
    if (!h) return IL_ERR_OOM;
    if (hp->n) memcpy(h, hp->h, hp->n * sizeof *h);
    il_mem_free(hp->h);
    hp->h = h;
    hp->cap = cap;
  }
  size_t i = hp->n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!il__bpe_before(&x, &hp->h[parent])) break;
    hp->h[i] = hp->h[parent];
    i = parent;
  }
  hp->h[i] = x;
  return IL_OK;
}

static il__bpe_pair il__bpe_heap_pop(il__bpe_heap *hp) {
  il__bpe_pair *h = hp->h;
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
  il__bpe_heap heap;
} il__bpe;

static il_status il__bpe_try_pair(il__bpe *b, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return IL_OK;
  const il__bsym *sy = b->syms.p;
  const char *e = b->enc.p;
  int32_t rank = il__tokenizer_bpe_rank(b->v, e + sy[left].start, sy[left].n, e + sy[right].start,
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
    uint32_t c = il__bpe_byte_to_cpt((uint8_t)text[i]);
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

il_status il__tokenizer_bpe_encode(const il_vocab *v, const char *text, size_t len, il__vec *out) {
  if (len == 0) return IL_OK;
  il__vec words;
  il__vec_init(&words, 2 * sizeof(size_t));
  il__bpe b = {v, {0}, {0}, {0}};
  il__vec_init(&b.enc, 1);
  il__vec_init(&b.syms, sizeof(il__bsym));
  il_status s = il__pre_split(v->pre, text, len, &words);
  for (size_t i = 0; i < words.n && s == IL_OK; i++) {
    const size_t *w = (const size_t *)words.p + 2 * i;
    s = il__bpe_word(&b, text + w[0], w[1], out);
  }
  il__vec_free(&words);
  il__vec_free(&b.enc);
  il__vec_free(&b.syms);
  il_mem_free(b.heap.h);
  return s;
}
