/* tests/fuzz/fuzz_gguf: the GGUF reader, then the vocabulary built from what it accepted, then
 * the tokenizers on fixed texts and on the input's last bytes. */
#include <stdbool.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "fuzz_common.h"

static const char *const il__texts[] = {"", " ", "Hello world", "<s>a</s> <|x|>b", "  \n\t x",
                                        "\xf0\x9f\x98\x80\xff\xc3", "the hello ll"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  il_gguf *g = NULL;
  if (il_gguf_open_memory(data, size, "fuzz", &g) != IL_OK) return 0;
  for (int64_t i = 0; i < il_gguf_kv_count(g); i++) {
    const char *key = il_gguf_key(g, i);
    il_gguf_type t = il_gguf_kv_type(g, i);
    int64_t x;
    il_gguf_str s;
    il_gguf_type et;
    uint64_t n;
    const void *arr;
    il_gguf_get_i64(g, key, &x);
    il_gguf_get_str(g, key, &s);
    if (t == IL_GGUF_ARRAY && il_gguf_get_arr(g, key, &et, &n, &arr) == IL_OK && et == IL_GGUF_STRING && n)
      il_gguf_arr_str(g, key, n - 1, &s);
  }
  for (int64_t i = 0; i < il_gguf_tensor_count(g); i++) {
    const il_gguf_tensor *t = il_gguf_tensor_at(g, i);
    IL_FUZZ_ASSERT(t && il_gguf_find_tensor(g, t->name) == t);
    if (t->nbytes) { /* the data is inside the image */
      const uint8_t *p = t->data;
      IL_FUZZ_ASSERT(p >= data && p + t->nbytes <= data + size);
    }
  }
  il_vocab *v = NULL;
  if (il_vocab_from_gguf(g, &v) == IL_OK) {
    for (size_t i = 0; i < sizeof il__texts / sizeof il__texts[0]; i++)
      il_fuzz_exercise_vocab(v, il__texts[i], strlen(il__texts[i]));
    size_t tail = size < 48 ? size : 48;
    il_fuzz_exercise_vocab(v, (const char *)data + size - tail, tail);
    il_vocab_free(v);
  }
  il_gguf_close(g);
  return 0;
}

/* ---- seeds: small vocabularies written by the GGUF writer ---- */

static bool il__finish(il_gguf_writer *w, il_fuzz_input *out) {
  char dir[] = "/tmp/il-fuzz-seed-XXXXXX", path[64];
  bool ok = false;
  if (mkdtemp(dir)) {
    snprintf(path, sizeof path, "%s/s.gguf", dir);
    if (il_gguf_writer_write(w, path) == IL_OK) {
      FILE *f = fopen(path, "rb");
      if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        out->data = malloc((size_t)n + 1);
        ok = out->data && fread(out->data, 1, (size_t)n, f) == (size_t)n;
        out->size = (size_t)n;
        fclose(f);
      }
      unlink(path);
    }
    rmdir(dir);
  }
  il_gguf_writer_free(w);
  return ok;
}

static void il__set_strs(il_gguf_writer *w, const char *key, const char *const *strs, int n) {
  uint64_t lens[300];
  for (int i = 0; i < n && i < 300; i++) lens[i] = strlen(strs[i]);
  il_gguf_writer_set_arr_str(w, key, strs, lens, (uint64_t)n);
}

/* GPT-2's bytes_to_unicode: byte b as the UTF-8 of its printable stand-in. */
static void il__byte_char(int b, char *out) {
  static int map[256];
  static bool init;
  if (!init) {
    int n = 0;
    for (int c = 0; c < 256; c++) {
      bool keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      map[c] = keep ? c : 256 + n++;
    }
    init = true;
  }
  int cp = map[b];
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
  }
}

int il_fuzz_seeds(il_fuzz_input *seeds, int cap) {
  int n = 0;
  /* 1: SentencePiece-style ("llama") with byte fallback, a user-defined token, a tensor */
  {
    static char names[300][16];
    const char *toks[300];
    float scores[300];
    int32_t types[300];
    int k = 0;
    const char *fixed[] = {"<unk>", "<s>", "</s>"};
    const int32_t fixed_t[] = {2, 3, 3};
    for (int i = 0; i < 3; i++, k++) {
      toks[k] = fixed[i];
      types[k] = fixed_t[i];
      scores[k] = 0;
    }
    for (int b = 0; b < 256; b++, k++) {
      snprintf(names[k], sizeof names[k], "<0x%02X>", b);
      toks[k] = names[k];
      types[k] = 6;
      scores[k] = 0;
    }
    const char *words[] = {"\xe2\x96\x81", "\xe2\x96\x81the", "\xe2\x96\x81h", "he", "ll", "o", "hello", "<|x|>", "a", "b"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++, k++) {
      toks[k] = words[i];
      types[k] = !strcmp(words[i], "<|x|>") ? 4 : 1;
      scores[k] = -(float)i;
    }
    il_gguf_writer *w = NULL;
    if (il_gguf_writer_new(&w) == IL_OK) {
      il_gguf_writer_set_str(w, "general.architecture", "llama");
      il_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
      il__set_strs(w, "tokenizer.ggml.tokens", toks, k);
      il_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IL_GGUF_F32, scores, (uint64_t)k);
      il_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IL_GGUF_I32, types, (uint64_t)k);
      il_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
      il_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
      static float t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
      const int64_t ne[2] = {4, 2};
      il_gguf_writer_add_tensor(w, "token_embd.weight", IL_DTYPE_F32, 2, ne, t, sizeof t);
      if (n < cap && il__finish(w, &seeds[n])) n++;
    }
  }
  /* 2: byte-level BPE ("gpt2") with merges and a pre-tokenizer name */
  {
    static char bytes[256][4];
    const char *toks[270];
    int k = 0;
    for (int b = 0; b < 256; b++, k++) {
      il__byte_char(b, bytes[b]);
      toks[k] = bytes[b];
    }
    const char *extra[] = {"\xc4\xa0t", "he", "\xc4\xa0the", "ll", "hell", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) toks[k++] = extra[i];
    const char *merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "he ll"};
    il_gguf_writer *w = NULL;
    if (il_gguf_writer_new(&w) == IL_OK) {
      il_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
      il_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
      il__set_strs(w, "tokenizer.ggml.tokens", toks, k);
      il__set_strs(w, "tokenizer.ggml.merges", merges, 5);
      il_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)k - 1);
      if (n < cap && il__finish(w, &seeds[n])) n++;
    }
  }
  /* 3: an empty file and a header only */
  {
    il_gguf_writer *w = NULL;
    if (il_gguf_writer_new(&w) == IL_OK && n < cap && il__finish(w, &seeds[n])) n++;
  }
  return n;
}
