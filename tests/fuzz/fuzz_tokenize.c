/* tests/fuzz/fuzz_tokenize: text against real vocabularies: the first input byte picks the
 * vocabulary (llama.cpp's test vocabularies from $IL_FIXTURES/tokenizer, loaded once, plus one
 * built from arrays so the harness runs without fixtures); the rest is the text. */
#include <stdbool.h>

#include "format/gguf.h"
#include "fuzz_common.h"

#define IL__MAX_VOCABS 8
static il_vocab *il__vocabs[IL__MAX_VOCABS];
static int il__n_vocabs = -1;

static void il__load_vocabs(void) {
  il__n_vocabs = 0;
  static const char *const files[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-phi-3.gguf",
                                      "ggml-vocab-starcoder.gguf", "ggml-vocab-falcon.gguf",
                                      "ggml-vocab-deepseek-llm.gguf"};
  const char *root = getenv("IL_FIXTURES") ? getenv("IL_FIXTURES") : "../shared/fixtures";
  for (size_t i = 0; i < sizeof files / sizeof files[0] && il__n_vocabs < IL__MAX_VOCABS - 1; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s", root, files[i]);
    il_gguf *g = NULL;
    if (il_gguf_open(path, &g) != IL_OK) continue;
    if (il_vocab_from_gguf(g, &il__vocabs[il__n_vocabs]) == IL_OK) il__n_vocabs++;
    il_gguf_close(g);
  }
  /* always one: SentencePiece-style with byte fallback and special tokens */
  static char names[256][8];
  const char *toks[272];
  int32_t types[272];
  int k = 0;
  const char *head[] = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "\xe2\x96\x81", "\xe2\x96\x81" "a", "ab"};
  const int32_t head_t[] = {2, 3, 3, 3, 3, 1, 1, 4};
  for (int i = 0; i < 8; i++, k++) {
    toks[k] = head[i];
    types[k] = head_t[i];
  }
  for (int b = 0; b < 256; b++, k++) {
    snprintf(names[b], sizeof names[b], "<0x%02X>", b);
    toks[k] = names[b];
    types[k] = 6;
  }
  if (il_vocab_from_arrays("llama", k, toks, NULL, NULL, types, &il__vocabs[il__n_vocabs]) == IL_OK) il__n_vocabs++;
  fprintf(stderr, "fuzz_tokenize: %d vocabularies\n", il__n_vocabs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (il__n_vocabs < 0) il__load_vocabs();
  if (size < 1 || il__n_vocabs == 0) return 0;
  const il_vocab *v = il__vocabs[data[0] % il__n_vocabs];
  il_fuzz_exercise_vocab(v, (const char *)data + 1, size - 1);
  return 0;
}

int il_fuzz_seeds(il_fuzz_input *seeds, int cap) {
  static const char *const texts[] = {
      "Hello world", " leading space", "<|im_start|>user\nhi<|im_end|>", "\xf0\x9f\x98\x80 emoji \xc3\xa9",
      "\xff\xfe invalid \xc3", "   \t\n  ", "1234567890 3.14 it's don't", "<s></s><unk>ab ab"};
  int n = 0;
  for (int v = 0; v < 8 && n < cap; v++)
    for (size_t t = 0; t < sizeof texts / sizeof texts[0] && n < cap; t++) {
      size_t l = strlen(texts[t]);
      seeds[n].data = malloc(l + 1);
      seeds[n].data[0] = (uint8_t)v;
      memcpy(seeds[n].data + 1, texts[t], l);
      seeds[n].size = l + 1;
      n++;
    }
  return n;
}
