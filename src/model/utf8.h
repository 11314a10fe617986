/* model/utf8: the UTF-8 lengths the tokenizer modules cut text and pieces by.
 *
 * These follow llama.cpp rather than the standard, so that tokens come out the same: a lead byte
 * announces a length whether or not the sequence is valid, and invalid bytes count as one. The
 * tokenizer never rejects text for being malformed; these helpers only decide where a character
 * ends.
 * Not for: validating UTF-8 (core/text's il_utf8_char_len does that, strictly). It sits below
 * every other tokenizer module and includes none of them.
 */
#ifndef IL_MODEL_UTF8_H
#define IL_MODEL_UTF8_H

#include <stddef.h>
#include <stdint.h>

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

/* Bytes at the end of b[0..n) that start a UTF-8 sequence not yet complete (0 to 3): what a
 * streaming decoder holds back until the next piece arrives. */
static inline size_t il__utf8_incomplete_tail(const char *b, size_t n) {
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    uint8_t c = (uint8_t)b[n - k];
    if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
    if (c >= 0xC0 && c < 0xF8) {
      size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      return need > k ? k : 0;
    }
    return 0;
  }
  return 0;
}

#endif
