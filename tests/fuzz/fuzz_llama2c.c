/* tests/fuzz/fuzz_llama2c: the llama2.c importer. Input: u32 checkpoint length, the checkpoint,
 * then the tokenizer (empty: none). Both are written to files (the importer maps files) and
 * converted to a GGUF, which is then read back and its vocabulary loaded: what the importer
 * writes, inferlab must accept. */
#include <stdbool.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/llama2c.h"
#include "fuzz_common.h"

static char il__dir[64];

static void il__cleanup(void) {
  if (il__dir[0]) rmdir(il__dir); /* the files in it are removed after each input */
}

static bool il__write(const char *path, const uint8_t *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(d, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!il__dir[0]) {
    snprintf(il__dir, sizeof il__dir, "/tmp/il-fuzz-l2c-XXXXXX");
    if (!mkdtemp(il__dir)) abort();
    atexit(il__cleanup);
  }
  if (size < 4) return 0;
  uint32_t ck;
  memcpy(&ck, data, 4);
  if (ck > size - 4) ck = (uint32_t)(size - 4);
  char ckpt[128], tok[128], out[128];
  snprintf(ckpt, sizeof ckpt, "%s/c.bin", il__dir);
  snprintf(tok, sizeof tok, "%s/t.bin", il__dir);
  snprintf(out, sizeof out, "%s/o.gguf", il__dir);
  if (!il__write(ckpt, data + 4, ck) || !il__write(tok, data + 4 + ck, size - 4 - ck)) abort();
  bool with_tok = size - 4 - ck > 0;
  il_dtype type = (ck & 1) ? IL_DTYPE_Q8_0 : IL_DTYPE_F32;
  if (il_llama2c_convert_ex(ckpt, with_tok ? tok : NULL, type, out, NULL, NULL) == IL_OK) {
    il_gguf *g = NULL;
    IL_FUZZ_ASSERT(il_gguf_open(out, &g) == IL_OK); /* the importer's output is a valid GGUF */
    il_vocab *v = NULL;
    if (with_tok) {
      IL_FUZZ_ASSERT(il_vocab_from_gguf(g, &v) == IL_OK); /* and its vocabulary loads (issue 9, item 17) */
      il_fuzz_exercise_vocab(v, "Once upon a time", 16);
      il_vocab_free(v);
    }
    il_gguf_close(g);
    unlink(out);
  }
  unlink(ckpt);
  unlink(tok);
  return 0;
}

/* A tiny version-0 checkpoint (dim 8, hidden 16, 1 layer, 2 heads, vocab 8, seq 4) and its
 * tokenizer, and the same with a separate classifier. */
static void il__put32(uint8_t **p, int32_t v) {
  memcpy(*p, &v, 4);
  *p += 4;
}

static il_fuzz_input il__seed(bool shared) {
  const int D = 8, H = 16, L = 1, NH = 2, NKV = 2, V = 8, S = 4, HS = D / NH, KV = D / NH * NKV;
  size_t floats = (size_t)(V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * H * D + D + S * HS +
                           (shared ? 0 : V * D));
  const char *pieces[] = {"<unk>", "<s>", "</s>", " a", "b", "<0x41>", "c d", "e"};
  size_t tok_bytes = 4;
  for (int i = 0; i < V; i++) tok_bytes += 8 + strlen(pieces[i]);
  size_t ck = 28 + 4 * floats;
  il_fuzz_input in = {malloc(4 + ck + tok_bytes), 4 + ck + tok_bytes};
  uint8_t *p = in.data;
  il__put32(&p, (int32_t)ck);
  const int32_t hdr[7] = {D, H, L, NH, NKV, shared ? V : -V, S};
  for (int i = 0; i < 7; i++) il__put32(&p, hdr[i]);
  for (size_t i = 0; i < floats; i++) {
    float f = (float)((int)(i * 37 % 17) - 8) / 16.0f;
    memcpy(p, &f, 4);
    p += 4;
  }
  il__put32(&p, 8);
  for (int i = 0; i < V; i++) {
    float score = -(float)i;
    memcpy(p, &score, 4);
    p += 4;
    il__put32(&p, (int32_t)strlen(pieces[i]));
    memcpy(p, pieces[i], strlen(pieces[i]));
    p += strlen(pieces[i]);
  }
  return in;
}

int il_fuzz_seeds(il_fuzz_input *seeds, int cap) {
  int n = 0;
  if (n < cap) seeds[n++] = il__seed(true);
  if (n < cap) seeds[n++] = il__seed(false);
  return n;
}
