/* model/spm: SentencePiece-style merging for "llama" vocabularies.
 *
 * The fragment (spaces already escaped to '▁', the space prefix already added) is cut into
 * UTF-8 characters (a malformed sequence is cut byte by byte, where llama.cpp takes the length
 * its first byte announces and may split the '▁' after it; valid text is cut the same way);
 * every adjacent pair whose concatenation is a token goes into a max-heap
 * ordered by that token's score (ties: the leftmost pair), and the best pair is merged until
 * none is left. Symbols that are not tokens at the end become byte tokens <0xXX>. This is
 * llama.cpp's llm_tokenizer_spm (and llama2.c's encode), in O(n log n) for n characters.
 * A merged symbol is always contiguous in the text, so a pair is (start, length) and no
 * string is built on the hot path.
 * Not for: special tokens or escaping (tokenizer.c). Sits on vocab (vocab_impl.h), vec.h and
 * utf8.h; only the encode driver (tokenizer.c) calls it.
 */
#include "model/spm.h"

#include <string.h>

#include "memory/mem.h"
#include "model/utf8.h"
#include "model/vec.h"
#include "model/vocab_impl.h"

typedef struct {
  int32_t prev, next;
  size_t start, n;
} il__sym;

typedef struct {
  int32_t left, right;
  float score;
  size_t size;
} il__spm_pair;

/* true when a should come out of the heap before b */
static inline bool il__spm_before(const il__spm_pair *a, const il__spm_pair *b) {
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void il__spm_heap_push(il__spm_pair *h, size_t *n, il__spm_pair x) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!il__spm_before(&x, &h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = x;
}

static il__spm_pair il__spm_heap_pop(il__spm_pair *h, size_t *n) {
  il__spm_pair top = h[0], x = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && il__spm_before(&h[c + 1], &h[c])) c++;
    if (!il__spm_before(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = x;
  return top;
}

typedef struct {
  const il_vocab *v;
  const char *text;
  il__sym *sym;
  il__vec heap; /* il__spm_pair */
} il__spm;

static il_status il__spm_try_pair(il__spm *s, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return IL_OK;
  size_t n = s->sym[left].n + s->sym[right].n;
  if (n > s->v->max_token_len) return IL_OK;
  int32_t id = il__vocab_lookup(s->v, s->text + s->sym[left].start, n);
  if (id < 0) return IL_OK;
  IL_TRY(il__vec_reserve(&s->heap, 1));
  il__spm_pair p = {left, right, s->v->score[id], n};
  il__spm_heap_push(s->heap.p, &s->heap.n, p);
  return IL_OK;
}

static il_status il__spm_emit_bytes(const il_vocab *v, const char *p, size_t n, il__vec *out) {
  for (size_t j = 0; j < n; j++) {
    int32_t id = v->byte_tok[(uint8_t)p[j]];
    if (id < 0) id = v->unk;
    if (id >= 0) IL_TRY(il__vec_push(out, &id));
  }
  return IL_OK;
}

il_status il__spm_encode(const il_vocab *v, const char *text, size_t len, il__vec *out) {
  if (len == 0) return IL_OK;
  il__spm s = {v, text, NULL, {0}};
  il__vec_init(&s.heap, sizeof(il__spm_pair));
  s.sym = il_mem_alloc(IL_MEM_WORKSPACE, len * sizeof *s.sym, "tokenizer symbols");
  if (!s.sym) return IL_ERR_OOM;
  int32_t n_sym = 0;
  for (size_t off = 0; off < len;) {
    size_t cl = il__utf8_char(text + off, len - off);
    s.sym[n_sym] = (il__sym){n_sym - 1, -1, off, cl};
    off += cl;
    if (off < len) s.sym[n_sym].next = n_sym + 1;
    n_sym++;
  }
  il_status st = IL_OK;
  for (int32_t i = 1; i < n_sym && st == IL_OK; i++) st = il__spm_try_pair(&s, i - 1, i);

  while (st == IL_OK && s.heap.n > 0) {
    il__spm_pair p = il__spm_heap_pop(s.heap.p, &s.heap.n);
    il__sym *l = &s.sym[p.left], *r = &s.sym[p.right];
    /* stale: one side was merged away or grew since the pair was queued */
    if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) s.sym[r->next].prev = p.left;
    st = il__spm_try_pair(&s, l->prev, p.left);
    if (st == IL_OK) st = il__spm_try_pair(&s, p.left, l->next);
  }

  for (int32_t i = 0; i != -1 && st == IL_OK; i = s.sym[i].next) {
    const il__sym *y = &s.sym[i];
    int32_t id = y->n <= v->max_token_len ? il__vocab_lookup(v, text + y->start, y->n) : -1;
    if (id >= 0) st = il__vec_push(out, &id);
    else st = il__spm_emit_bytes(v, text + y->start, y->n, out);
  }
  il__vec_free(&s.heap);
  il_mem_free(s.sym);
  return st;
}
