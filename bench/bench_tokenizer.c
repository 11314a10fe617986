/* bench/bench_tokenizer: tokenizer throughput in MB/s against a reading baseline.
 *
 * For every vocabulary given (default: the fixture vocabularies under ../shared/fixtures and
 * SmolLM2 when cached) it tokenizes ~1 MB of mixed text (English prose, code, digits, accents,
 * CJK, emoji, whitespace runs) and also the same text doubled, and prints MB/s, tokens/s and
 * the time ratio 2 MB / 1 MB (about 2 when the cost is linear, 4 if it were quadratic). The
 * baseline is a pass that reads every byte (a checksum), the least any tokenizer must do.
 * Usage: bench_tokenizer [--mb N] [VOCAB.gguf ...]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"
#include "format/gguf.h"
#include "memory/mem.h"
#include "model/tokenizer.h"

static char *make_text(size_t len) {
  static const char *parts[] = {
      "Once upon a time, there was a little girl named Lily. She loved to play outside. ",
      "int main(int argc, char **argv) {\n    return argc > 1 ? atoi(argv[1]) : 0;\n}\n",
      "Prices rose 3.75% in 2023, to $1,234,567.89 -- or so they say!!! ",
      "Caf\xc3\xa9 na\xc3\xafve \xc3\x9c" "ber Stra\xc3\x9f" "e \xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0 ",
      "\xe6\x9d\xb1\xe4\xba\xac\xe3\x82\xbf\xe3\x83\xaf\xe3\x83\xbc\xe3\x81\xaf\xe9\xab\x98\xe3\x81\x84 ",
      "\xf0\x9f\xa6\x99\xf0\x9f\x9a\x80 emoji   and    spaces\t\t\n\n",
      "I'm sure you'll see they've done what we'd said; it's fine. ",
  };
  char *t = malloc(len + 1);
  size_t n = 0, k = 0;
  while (n < len) {
    const char *p = parts[k++ % (sizeof parts / sizeof parts[0])];
    size_t l = strlen(p);
    if (n + l > len) break;
    memcpy(t + n, p, l);
    n += l;
  }
  memset(t + n, ' ', len - n);
  t[len] = '\0';
  return t;
}

static double time_tokenize(const il_vocab *v, const char *text, size_t len, size_t *n_tok) {
  int32_t *ids = NULL;
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = il_time_now();
    il_status s = il_tokenize_alloc(v, text, len, false, false, &ids, n_tok);
    double t = il_time_now() - t0;
    if (s != IL_OK) {
      fprintf(stderr, "tokenize: %s\n", il_error_detail());
      return -1;
    }
    il_mem_free(ids);
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  double mb = 1.0;
  int first = 1;
  if (argc > 2 && strcmp(argv[1], "--mb") == 0) {
    mb = atof(argv[2]);
    first = 3;
  }
  size_t len = (size_t)(mb * 1024 * 1024);
  char *text = make_text(2 * len);

  /* baseline: read every byte */
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = il_time_now();
    uint64_t h = 0;
    for (size_t i = 0; i < len; i++) h = h * 31 + (uint8_t)text[i];
    sink += h;
    double t = il_time_now() - t0;
    if (t < best) best = t;
  }
  printf("text: %.2f MB mixed (prose, code, digits, accents, CJK, emoji, whitespace)\n", mb);
  printf("%-34s %9.1f MB/s\n", "baseline (read every byte)", mb / best);

  const char *defaults[] = {"tokenizer/ggml-vocab-llama-spm.gguf", "tokenizer/ggml-vocab-phi-3.gguf",
                            "tokenizer/ggml-vocab-gpt-2.gguf", "tokenizer/ggml-vocab-falcon.gguf",
                            "tokenizer/ggml-vocab-starcoder.gguf", "tokenizer/ggml-vocab-deepseek-llm.gguf"};
  char paths[8][4096];
  int np = 0;
  if (first < argc) {
    for (int i = first; i < argc && np < 8; i++) snprintf(paths[np++], sizeof paths[0], "%s", argv[i]);
  } else {
    const char *root = getenv("IL_FIXTURES");
    if (!root) root = "../shared/fixtures";
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
      snprintf(paths[np], sizeof paths[0], "%s/%s", root, defaults[i]);
      if (access(paths[np], R_OK) == 0) np++;
    }
    const char *home = getenv("HOME");
    snprintf(paths[np], sizeof paths[0], "%s/.cache/inferlab/models/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : ".");
    if (access(paths[np], R_OK) == 0) np++;
  }
  if (np == 0) printf("no vocabularies found (give GGUF paths, or set IL_FIXTURES)\n");
  printf("%-34s %9s %10s %12s %10s\n", "vocabulary", "MB/s", "tokens", "tokens/s", "2x/1x time");
  for (int i = 0; i < np; i++) {
    il_gguf *g = NULL;
    il_vocab *v = NULL;
    if (il_gguf_open(paths[i], &g) != IL_OK || il_vocab_from_gguf(g, &v) != IL_OK) {
      fprintf(stderr, "%s: %s\n", paths[i], il_error_detail());
      il_gguf_close(g);
      continue;
    }
    il_gguf_close(g);
    size_t n1 = 0, n2 = 0;
    double t1 = time_tokenize(v, text, len, &n1), t2 = time_tokenize(v, text, 2 * len, &n2);
    const char *base = strrchr(paths[i], '/');
    char label[96];
    snprintf(label, sizeof label, "%.60s (%.20s)", base ? base + 1 : paths[i], il_vocab_pre(v));
    if (t1 > 0 && t2 > 0)
      printf("%-34.34s %9.2f %10zu %12.0f %10.2f\n", label, mb / t1, n1, (double)n1 / t1, t2 / t1);
    il_vocab_free(v);
  }
  free(text);
  return 0;
}
