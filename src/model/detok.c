/* model/detok: token ids back to text, whole sequences and streams.
 *
 * Everything reads the vocabulary's piece cache (il__vocab_piece), so decoding allocates
 * nothing per token; a stream keeps one small buffer for the bytes it holds back (an
 * incomplete UTF-8 sequence, or ready bytes the caller had no room for).
 * Not for: building pieces (vocab.c), text to ids (tokenizer.c).
 */
#include "model/detok.h"

#include <string.h>

#include "memory/mem.h"
#include "model/utf8.h"
#include "model/vocab_impl.h"

struct il_detok {
  const il_vocab *v;
  bool special;
  bool strip; /* the next text piece loses one leading space */
  char *buf;
  size_t n, cap;
};

il_status il_detok_new(const il_vocab *v, bool special, const int32_t *prompt, size_t n_prompt, il_detok **out) {
  il_detok *d = il_mem_calloc(IL_MEM_TOKENIZER, sizeof *d, "detokenizer");
  if (!d) return IL_ERR_OOM;
  d->v = v;
  d->special = special;
  d->strip = v->kind == IL__VOCAB_SPM && v->add_space_prefix;
  for (size_t i = 0; i < n_prompt && d->strip; i++)
    if (prompt[i] != v->bos) d->strip = false;
  d->cap = v->max_piece + 8;
  d->buf = il_mem_alloc(IL_MEM_TOKENIZER, d->cap, "detokenizer");
  if (!d->buf) {
    il_mem_free(d);
    return IL_ERR_OOM;
  }
  *out = d;
  return IL_OK;
}

void il_detok_free(il_detok *d) {
  if (!d) return;
  il_mem_free(d->buf);
  il_mem_free(d);
}

/* Moves up to cap of the first `ready` queued bytes to out; returns how many it moved. */
static size_t il__detok_take(il_detok *d, size_t ready, char *out, size_t cap) {
  size_t m = ready < cap ? ready : cap;
  if (m < ready) { /* cut at a character boundary unless not even one character fits */
    size_t b = m;
    while (b > 0 && ((uint8_t)d->buf[b] & 0xC0) == 0x80) b--;
    if (b > 0) m = b;
  }
  if (m) {
    memcpy(out, d->buf, m);
    memmove(d->buf, d->buf + m, d->n - m);
    d->n -= m;
  }
  return m;
}

size_t il_detok_push(il_detok *d, int32_t id, char *out, size_t cap) {
  size_t n;
  const char *p = il__vocab_piece(d->v, id, d->special, &n);
  if (d->strip && id != d->v->bos) {
    if (n > 0 && p[0] == ' ') {
      p++;
      n--;
    }
    d->strip = false;
  }
  if (d->n + n > d->cap) { /* only when the caller's buffers were too small to drain */
    size_t cap2 = (d->n + n) * 2;
    char *nb = il_mem_alloc(IL_MEM_TOKENIZER, cap2, "detokenizer");
    if (!nb) return il__detok_take(d, d->n, out, cap); /* OOM: give what we have */
    memcpy(nb, d->buf, d->n);
    il_mem_free(d->buf);
    d->buf = nb;
    d->cap = cap2;
  }
  memcpy(d->buf + d->n, p, n);
  d->n += n;
  return il__detok_take(d, d->n - il__utf8_incomplete_tail(d->buf, d->n), out, cap);
}

size_t il_detok_flush(il_detok *d, char *out, size_t cap) { return il__detok_take(d, d->n, out, cap); }

size_t il_detokenize(const il_vocab *v, const int32_t *ids, size_t n, bool special, char *buf,
                     size_t cap) {
  bool strip = v->kind == IL__VOCAB_SPM && v->add_space_prefix;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    size_t pn;
    const char *p = il__vocab_piece(v, ids[i], special, &pn);
    if (strip && ids[i] != v->bos) {
      if (pn > 0 && p[0] == ' ') {
        p++;
        pn--;
      }
      strip = false;
    }
    if (total < cap) memcpy(buf + total, p, pn < cap - total ? pn : cap - total);
    total += pn;
  }
  return total;
}
