/* tests/fuzz/fuzz_common: what the harnesses share: exercising a vocabulary with texts. */
#ifndef IL_TESTS_FUZZ_COMMON_H
#define IL_TESTS_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "memory/mem.h"
#include "model/tokenizer.h"

/* Tokenizes text with every flag combination and checks what must hold whatever the input:
 * ids are inside the vocabulary; the streaming detokenizer gives exactly what whole-sequence
 * decoding gives, with any output buffer size. */
static inline void il_fuzz_exercise_vocab(const il_vocab *v, const char *text, size_t len) {
  for (int flags = 0; flags < 4; flags++) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (il_tokenize_alloc(v, text, len, flags & 1, flags & 2, &ids, &n) != IL_OK) continue;
    for (size_t i = 0; i < n; i++) IL_FUZZ_ASSERT(ids[i] >= 0 && ids[i] < il_vocab_size(v));
    size_t need = il_detokenize(v, ids, n, flags & 1, NULL, 0);
    char *whole = malloc(need + 1), *stream = malloc(need + 64);
    il_detokenize(v, ids, n, flags & 1, whole, need);
    il_detok *d = NULL;
    if (il_detok_new(v, flags & 1, NULL, 0, &d) == IL_OK) {
      size_t got = 0, cap = 1 + (size_t)(flags * 3); /* tiny buffers: text must queue, not be lost */
      char buf[16];
      for (size_t i = 0; i < n; i++) {
        size_t k = il_detok_push(d, ids[i], buf, cap);
        IL_FUZZ_ASSERT(got + k <= need + 63);
        memcpy(stream + got, buf, k);
        got += k;
      }
      for (size_t k; (k = il_detok_flush(d, buf, cap)) > 0;) {
        IL_FUZZ_ASSERT(got + k <= need + 63);
        memcpy(stream + got, buf, k);
        got += k;
      }
      IL_FUZZ_ASSERT(got == need && memcmp(stream, whole, need) == 0);
      il_detok_free(d);
    }
    char piece[64];
    for (size_t i = 0; i < n && i < 8; i++) il_vocab_token_piece(v, ids[i], flags & 1, piece, sizeof piece);
    free(whole);
    free(stream);
    il_mem_free(ids);
  }
}

#endif
