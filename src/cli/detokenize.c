/* cli/detokenize: `inferlab detokenize -m MODEL ID...` prints the text of token ids.
 *
 * Ids come from the arguments or stdin (-), separated by spaces, commas or brackets, so the
 * output of `tokenize --ids` (or a JSON list) can be piped in. The text is written byte for
 * byte (control tokens only with --special), followed by a newline unless --raw.
 * Not for: streaming generation output (the engine uses il_detok directly).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "model/tokenizer.h"

static void il__detokenize_help(void) {
  printf("usage: inferlab detokenize -m MODEL [OPTIONS] ID...\n"
         "       inferlab detokenize -m MODEL [OPTIONS] -        (ids from stdin)\n\n"
         "Prints the text of the token ids (separated by spaces, commas or brackets). For\n"
         "SentencePiece vocabularies the space the tokenizer put before the first word is\n"
         "removed, as llama.cpp and llama2.c do.\n\n"
         "options:\n"
         "  -m, --model S            the model whose vocabulary is used (GGUF or builtin:tiny)\n"
         "      --special            also print control tokens (<s>, <|im_end|>)\n"
         "      --raw                no newline after the text\n"
         "      --pre NAME           pre-tokenizer to assume when the file's is unknown\n"
         "\nexamples:\n"
         "  inferlab detokenize -m stories260K-f32.gguf 1 403 407 261 378\n"
         "  inferlab tokenize -m m.gguf --ids \"hi\" | inferlab detokenize -m m.gguf -\n"
         "\nexit codes: 0 ok, 64 usage (bad or out-of-range id), 65 malformed model,\n"
         "            66 not found, 69 unsupported, 71 out of memory\n");
}

/* Appends the ids written in s to ids[*n..cap). Returns false (and reports) on a bad word. */
static bool il__parse_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n, size_t *cap) {
  const char *p = s;
  for (;;) {
    while (*p && (isspace((unsigned char)*p) || *p == ',' || *p == '[' || *p == ']')) p++;
    if (!*p) return true;
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || (*end && !isspace((unsigned char)*end) && *end != ',' && *end != ']')) {
      il_cli_usage_error("detokenize", "not a token id: '%.*s'", (int)strcspn(p, " \t\n,]"), p);
      return false;
    }
    if (x < 0 || x >= n_vocab) {
      il_cli_usage_error("detokenize", "token id %ld is outside the vocabulary (0..%d)", x, (int)n_vocab - 1);
      return false;
    }
    if (*n == *cap) {
      size_t nc = *cap ? *cap * 2 : 256;
      int32_t *nb = il_mem_alloc(IL_MEM_TOKENIZER, nc * sizeof *nb, "token ids");
      if (!nb) {
        il_cli_fail("detokenize", IL_ERR_OOM);
        return false;
      }
      if (*n) memcpy(nb, *ids, *n * sizeof *nb);
      il_mem_free(*ids);
      *ids = nb;
      *cap = nc;
    }
    (*ids)[(*n)++] = (int32_t)x;
    p = end;
  }
}

int il_cli_detokenize(int argc, char **argv) {
  const char *model = NULL, *pre = NULL;
  bool help = false, special = false, raw = false;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},     {"model", 'm', true, &model, NULL},
      {"special", 0, false, NULL, &special}, {"raw", 0, false, NULL, &raw},
      {"pre", 0, true, &pre, NULL},
  };
  const char *pos[4096];
  int n_pos = 0;
  int rc = il_cli_parse("detokenize", argc, argv, NULL, NULL, flags, (int)(sizeof flags / sizeof flags[0]),
                        pos, 4096, &n_pos);
  if (rc) return rc;
  if (help) {
    il__detokenize_help();
    return IL_EXIT_OK;
  }
  if (!model) return il_cli_usage_error("detokenize", "-m MODEL is required");
  if (n_pos == 0) return il_cli_usage_error("detokenize", "no token ids (give them as arguments or - for stdin)");

  il_vocab *v = NULL;
  il_status s = il_vocab_open(model, pre, &v);
  if (s != IL_OK) return il_cli_fail("detokenize", s);

  int32_t *ids = NULL;
  size_t n = 0, cap = 0;
  bool ok = true;
  for (int i = 0; i < n_pos && ok; i++) {
    if (strcmp(pos[i], "-") == 0) {
      size_t bl = 0, bc = 4096;
      char *buf = il_mem_alloc(IL_MEM_TOKENIZER, bc, "token ids");
      int c;
      while (buf && (c = getchar()) != EOF) {
        if (bl + 1 == bc) {
          char *nb = il_mem_alloc(IL_MEM_TOKENIZER, bc * 2, "token ids");
          if (nb) memcpy(nb, buf, bl);
          il_mem_free(buf);
          buf = nb;
          bc *= 2;
          if (!buf) break;
        }
        buf[bl++] = (char)c;
      }
      if (!buf) {
        il_mem_free(ids);
        il_vocab_free(v);
        return il_cli_fail("detokenize", IL_ERR_OOM);
      }
      buf[bl] = '\0';
      const char *nul = memchr(buf, 0, bl);
      if (nul) {
        il_cli_usage_error("detokenize", "stdin: NUL byte at offset %zu (expected token ids as text)", (size_t)(nul - buf));
        ok = false;
      } else {
        ok = il__parse_ids(buf, il_vocab_size(v), &ids, &n, &cap);
      }
      il_mem_free(buf);
    } else {
      ok = il__parse_ids(pos[i], il_vocab_size(v), &ids, &n, &cap);
    }
  }
  if (!ok) {
    il_mem_free(ids);
    il_vocab_free(v);
    return IL_EXIT_USAGE;
  }
  size_t need = il_detokenize(v, ids, n, special, NULL, 0);
  char *text = il_mem_alloc(IL_MEM_TOKENIZER, need + 1, "text");
  if (!text) {
    il_mem_free(ids);
    il_vocab_free(v);
    return il_cli_fail("detokenize", IL_ERR_OOM);
  }
  il_detokenize(v, ids, n, special, text, need);
  fwrite(text, 1, need, stdout);
  if (!raw) putchar('\n');
  il_mem_free(text);
  il_mem_free(ids);
  il_vocab_free(v);
  return IL_EXIT_OK;
}
