/* tests/test_tokenizer_smollm2: a real byte-level BPE model end to end, when it is present.
 *
 * SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh puts it in ~/.cache/inferlab/models, or set
 * IL_SMOLLM2 to the file). Its vocabulary tokenizes a mixed paragraph and a chat-formatted
 * prompt exactly as Hugging Face `tokenizers` does with the model's own vocabulary and merges
 * (ids made by scripts/smollm2_reference.py, kept in tests/data/tokenizer_smollm2_*), and the
 * ids decode back to the text. Skips with the reason when the model file is absent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "harness.h"
#include "model/tokenizer.h"

static void check_case(const il_vocab *v, const char *text_path, const char *ids_line, bool parse_special) {
  size_t len;
  char *text = il_test_read_file(text_path, &len);
  IL_CHECK(text != NULL);
  if (!text) return;
  int32_t want[4096];
  size_t nw = 0;
  for (const char *p = ids_line; *p && *p != '\n' && nw < 4096;) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p) break;
    want[nw++] = (int32_t)x;
    p = end;
  }
  int32_t got[4096];
  size_t n = 0;
  IL_CHECK_OK(il_tokenize(v, text, len, false, parse_special, got, 4096, &n));
  IL_CHECK_INT(n, nw);
  size_t first_diff = 0;
  while (first_diff < n && first_diff < nw && got[first_diff] == want[first_diff]) first_diff++;
  IL_CHECK_INT(first_diff, nw);
  if (first_diff != nw || n != nw)
    fprintf(stderr, "  %s: first difference at id %zu: got %d want %d\n", text_path, first_diff,
            first_diff < n ? (int)got[first_diff] : -1, first_diff < nw ? (int)want[first_diff] : -1);
  char *back = malloc(len + 64);
  size_t bl = il_detokenize(v, got, n, parse_special, back, len + 64);
  IL_CHECK(bl == len && memcmp(back, text, len) == 0);
  free(back);
  free(text);
}

int main(void) {
  char path[4096];
  const char *env = getenv("IL_SMOLLM2");
  const char *home = getenv("HOME");
  if (env) snprintf(path, sizeof path, "%s", env);
  else snprintf(path, sizeof path, "%s/.cache/inferlab/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
  if (access(path, R_OK) != 0) {
    printf("SKIP: %s absent (run scripts/fetch_smollm2.sh or set IL_SMOLLM2)\n", path);
    return 77;
  }
  const char *src = getenv("IL_SRC");
  char dir[4096], para[4200], chat[4200], ref[4200];
  snprintf(dir, sizeof dir, "%s/tests/data", src ? src : "..");
  snprintf(para, sizeof para, "%s/tokenizer_smollm2_paragraph.txt", dir);
  snprintf(chat, sizeof chat, "%s/tokenizer_smollm2_chat.txt", dir);
  snprintf(ref, sizeof ref, "%s/tokenizer_smollm2_reference.ids", dir);
  size_t rl;
  char *ids = il_test_read_file(ref, &rl);
  if (!ids) {
    printf("SKIP: %s absent (set IL_SRC to the source tree)\n", ref);
    return 77;
  }
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(path, &g));
  il_vocab *v = NULL;
  if (g) IL_CHECK_OK(il_vocab_from_gguf(g, &v));
  il_gguf_close(g);
  if (v) {
    IL_CHECK_STR(il_vocab_model(v), "gpt2");
    IL_CHECK_STR(il_vocab_pre(v), "smollm");
    IL_CHECK(!il_vocab_add_bos(v));
    IL_CHECK_INT(il_vocab_eos(v), 2);
    IL_CHECK(il_vocab_is_eog(v, 2)); /* <|im_end|> */
    IL_CHECK(il_vocab_is_eog(v, 0)); /* <|endoftext|> */
    char *line2 = strchr(ids, '\n');
    IL_CHECK(line2 != NULL);
    check_case(v, para, ids, false);
    if (line2) check_case(v, chat, line2 + 1, true);
  }
  il_vocab_free(v);
  free(ids);
  return il_test_finish();
}
