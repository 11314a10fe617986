/* tests/test_tokenizer: the tokenizer family against llama.cpp's test vocabularies and by hand.
 *
 * Tiers in one program: in-memory vocabularies (always run), then every fixture vocabulary in
 * ../shared/fixtures/tokenizer (every case of every .inp against its .out, exactly, plus
 * decoding back to the input), the TinyStories tok512 vocabulary both as llama2.c arrays and
 * as GGUF, hand-written edge cases (empty, spaces, long runs, invalid UTF-8, special tokens,
 * 1 MB), a random-bytes fuzz loop with a byte-exact round trip, streaming decoding, the
 * unknown-pre-tokenizer error, and out-of-memory injection. Fixture parts are skipped with a
 * printed reason when the fixtures are absent.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "harness.h"
#include "memory/mem.h"
#include "model/tokenizer.h"

/* ---- helpers ---- */

static size_t tok(const il_vocab *v, const char *text, size_t len, bool add, bool parse, int32_t *out,
                  size_t cap) {
  size_t n = 0;
  il_status s = il_tokenize(v, text, len, add, parse, out, cap, &n);
  if (s != IL_OK) {
    fprintf(stderr, "tokenize failed: %s: %s\n", il_status_name(s), il_error_detail());
    return (size_t)-1;
  }
  return n;
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *label, const int32_t *a, size_t n) {
  fprintf(stderr, "    %s:", label);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", (int)a[i]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* decode with il_detokenize into a malloc'd buffer */
static char *detok_all(const il_vocab *v, const int32_t *ids, size_t n, bool special, size_t *len) {
  size_t need = il_detokenize(v, ids, n, special, NULL, 0);
  char *b = malloc(need + 1);
  size_t got = il_detokenize(v, ids, n, special, b, need + 1);
  IL_CHECK_INT(got, need);
  b[need] = '\0';
  *len = need;
  return b;
}

static il_vocab *load_vocab(const char *path, const char *force_pre) {
  il_gguf *g = NULL;
  il_status s = il_gguf_open(path, &g);
  if (s != IL_OK) {
    fprintf(stderr, "open %s: %s\n", path, il_error_detail());
    IL_CHECK_OK(s);
    return NULL;
  }
  il_vocab *v = NULL;
  il_vocab_opts o = {force_pre};
  s = il_vocab_from_gguf_opts(g, &o, &v);
  il_gguf_close(g); /* the vocabulary must not borrow from the file */
  if (s != IL_OK) {
    fprintf(stderr, "vocab %s: %s\n", path, il_error_detail());
    IL_CHECK_OK(s);
    return NULL;
  }
  return v;
}

/* ---- in-memory SentencePiece vocabulary ---- */

#define E "\xe2\x96\x81" /* '▁' */

static il_vocab *small_spm(void) {
  /* 0..2 specials, 3..258 byte tokens, then pieces */
  static const char *pieces[] = {E, "a", "b", "c", E "a", "ab", E "ab", E "c", "bc", E "abc",
                                 "<tag>", "<|user|>", "\xc3\xa9", E E};
  static const float pscores[] = {-1, -2, -2, -2, -1.5f, -1.2f, -0.5f, -1.8f, -1.1f, -0.2f, 0, 0, -3, -4};
  enum { NP = sizeof pieces / sizeof pieces[0] };
  static char bytes[256][7];
  const char *toks[3 + 256 + NP];
  float scores[3 + 256 + NP];
  int32_t types[3 + 256 + NP];
  toks[0] = "<unk>";
  toks[1] = "<s>";
  toks[2] = "</s>";
  types[0] = IL_TOKEN_UNKNOWN;
  types[1] = types[2] = IL_TOKEN_CONTROL;
  scores[0] = scores[1] = scores[2] = 0;
  for (int b = 0; b < 256; b++) {
    snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
    toks[3 + b] = bytes[b];
    types[3 + b] = IL_TOKEN_BYTE;
    scores[3 + b] = 0;
  }
  for (int i = 0; i < NP; i++) {
    toks[259 + i] = pieces[i];
    scores[259 + i] = pscores[i];
    types[259 + i] = IL_TOKEN_NORMAL;
  }
  types[259 + 10] = IL_TOKEN_USER_DEFINED; /* <tag> */
  types[259 + 11] = IL_TOKEN_CONTROL;      /* <|user|> */
  il_vocab *v = NULL;
  IL_CHECK_OK(il_vocab_from_arrays("llama", 3 + 256 + NP, toks, NULL, scores, types, &v));
  return v;
}

static void test_small_spm(void) {
  il_vocab *v = small_spm();
  if (!v) return;
  const int32_t A = 259; /* first piece id */
  int32_t out[64];
  size_t n;

  IL_CHECK_INT(il_vocab_size(v), 3 + 256 + 14);
  IL_CHECK_STR(il_vocab_model(v), "llama");
  IL_CHECK_INT(il_vocab_bos(v), 1);
  IL_CHECK(il_vocab_is_eog(v, 2));
  IL_CHECK(!il_vocab_is_eog(v, 1));

  /* "abc" -> "▁abc" merges fully (best-score pairs first) */
  n = tok(v, "abc", 3, false, false, out, 64);
  IL_CHECK_INT(n, 1);
  IL_CHECK_INT(out[0], A + 9);
  /* with BOS */
  n = tok(v, "abc", 3, true, false, out, 64);
  IL_CHECK_INT(n, 2);
  IL_CHECK_INT(out[0], 1);
  IL_CHECK_INT(out[1], A + 9);
  /* "ab c": ▁ab ▁c */
  n = tok(v, "ab c", 4, false, false, out, 64);
  IL_CHECK_INT(n, 2);
  IL_CHECK_INT(out[0], A + 6);
  IL_CHECK_INT(out[1], A + 7);
  /* byte fallback: 'z' is no token -> <0x7A>; 'é' is one */
  n = tok(v, "z\xc3\xa9", 3, false, false, out, 64);
  IL_CHECK_INT(n, 3);
  IL_CHECK_INT(out[0], A); /* ▁ */
  IL_CHECK_INT(out[1], 3 + 'z');
  IL_CHECK_INT(out[2], A + 12);
  /* empty text: nothing, or only BOS */
  IL_CHECK_INT(tok(v, "", 0, false, false, out, 64), 0);
  n = tok(v, "", 0, true, false, out, 64);
  IL_CHECK_INT(n, 1);
  IL_CHECK_INT(out[0], 1);
  /* too small a buffer: IL_ERR_RANGE with the size needed */
  il_status s = il_tokenize(v, "ab c", 4, false, false, out, 1, &n);
  IL_CHECK_INT(s, IL_ERR_RANGE);
  IL_CHECK_INT(n, 2);
  IL_CHECK_INT(out[0], A + 6);

  /* user-defined tokens are always cut out; control tokens only with parse_special */
  n = tok(v, "a<tag>b", 7, false, false, out, 64);
  IL_CHECK_INT(n, 4);
  IL_CHECK_INT(out[0], A + 4); /* ▁a */
  IL_CHECK_INT(out[1], A + 10);
  IL_CHECK_INT(out[2], A); /* llama.cpp prefixes a space after every special token too */
  IL_CHECK_INT(out[3], A + 2);
  n = tok(v, "<|user|>c", 9, false, true, out, 64);
  IL_CHECK_INT(n, 2);
  IL_CHECK_INT(out[0], A + 11);
  IL_CHECK_INT(out[1], A + 7); /* ▁c: space prefix after a special, like llama.cpp */
  n = tok(v, "<|user|>c", 9, false, false, out, 64);
  IL_CHECK(n > 2);
  IL_CHECK(out[0] != A + 11);
  n = tok(v, "<s>", 3, false, true, out, 64);
  IL_CHECK_INT(n, 1);
  IL_CHECK_INT(out[0], 1);

  /* pieces */
  char buf[32];
  IL_CHECK_INT(il_vocab_token_piece(v, A + 9, false, buf, sizeof buf), 4);
  IL_CHECK(memcmp(buf, " abc", 4) == 0);
  IL_CHECK_INT(il_vocab_token_piece(v, 3 + 0x41, false, buf, sizeof buf), 1);
  IL_CHECK_INT(buf[0], 'A');
  IL_CHECK_INT(il_vocab_token_piece(v, 1, false, buf, sizeof buf), 0);
  IL_CHECK_INT(il_vocab_token_piece(v, 1, true, buf, sizeof buf), 3);
  IL_CHECK_INT(il_vocab_token_piece(v, A + 10, false, buf, sizeof buf), 5); /* user-defined: text */
  IL_CHECK_INT(il_vocab_token_piece(v, 99999, true, buf, sizeof buf), 0);
  IL_CHECK_INT(il_vocab_token_piece(v, A + 9, false, buf, 2), 4); /* needed, writes 2 */

  /* decoding: BOS then "▁abc" -> "abc"; without BOS the first space goes too */
  int32_t ids[] = {1, A + 9, A + 7};
  size_t len;
  char *t = detok_all(v, ids, 3, false, &len);
  IL_CHECK_STR(t, "abc c");
  free(t);
  t = detok_all(v, ids + 1, 2, false, &len);
  IL_CHECK_STR(t, "abc c");
  free(t);
  t = detok_all(v, ids, 3, true, &len);
  IL_CHECK_STR(t, "<s>abc c");
  free(t);
  il_vocab_free(v);

  /* from_arrays: unsupported model, bad count */
  const char *one[] = {"a"};
  il_vocab *w = NULL;
  IL_CHECK_INT(il_vocab_from_arrays("gpt2", 1, one, NULL, NULL, NULL, &w), IL_ERR_UNSUPPORTED);
  IL_CHECK(w == NULL);
  IL_CHECK_INT(il_vocab_from_arrays("llama", 0, one, NULL, NULL, NULL, &w), IL_ERR_INVALID_ARG);
  /* duplicates are malformed */
  const char *dup[] = {"<unk>", "<s>", "</s>", "x", "x"};
  IL_CHECK_INT(il_vocab_from_arrays("llama", 5, dup, NULL, NULL, NULL, &w), IL_ERR_FORMAT);
  IL_CHECK_CONTAINS(il_error_detail(), "duplicate");
}

/* ---- streaming decoder ---- */

static void check_stream(const il_vocab *v, const int32_t *ids, size_t n, bool special, size_t cap) {
  size_t want_len;
  char *want = detok_all(v, ids, n, special, &want_len);
  il_detok *d = NULL;
  IL_CHECK_OK(il_detok_new(v, special, NULL, 0, &d));
  if (!d) {
    free(want);
    return;
  }
  char *got = malloc(want_len + 64);
  size_t m = 0;
  bool split_ok = true;
  char *chunk = malloc(cap);
  for (size_t i = 0; i < n; i++) {
    size_t k = il_detok_push(d, ids[i], chunk, cap);
    IL_CHECK(k <= cap);
    memcpy(got + m, chunk, k);
    m += k;
    /* never ends inside a UTF-8 sequence unless the text itself is invalid there */
    if (cap >= 4 && k > 0 && m < want_len && ((uint8_t)want[m] & 0xC0) == 0x80) split_ok = false;
  }
  size_t k;
  while ((k = il_detok_flush(d, chunk, cap)) > 0) {
    memcpy(got + m, chunk, k);
    m += k;
  }
  IL_CHECK(split_ok);
  IL_CHECK_INT(m, want_len);
  IL_CHECK(m == want_len && memcmp(got, want, m) == 0);
  il_detok_free(d);
  free(chunk);
  free(got);
  free(want);
}

/* ---- fixtures ---- */

typedef struct {
  const char *name;
  bool round_trip; /* decoding gives the input back for every case */
} fixture_vocab;

static const fixture_vocab fixture_vocabs[] = {
    {"llama-spm", true}, {"phi-3", true}, {"gpt-2", true},
    {"falcon", true},    {"starcoder", true}, {"deepseek-llm", true},
};

static void test_fixture(const fixture_vocab *fv, const char *force_pre) {
  char rel[256], path_gguf[4000], path_inp[4100], path_out[4100];
  snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", fv->name);
  const char *p = il_test_fixture(rel);
  if (!p) {
    printf("SKIP part: fixture %s absent\n", rel);
    return;
  }
  snprintf(path_gguf, sizeof path_gguf, "%s", p);
  snprintf(path_inp, sizeof path_inp, "%s.inp", path_gguf);
  snprintf(path_out, sizeof path_out, "%s.out", path_gguf);
  il_vocab *v = load_vocab(path_gguf, force_pre);
  if (!v) return;
  size_t ni, no;
  char *inp = il_test_read_file(path_inp, &ni), *outs = il_test_read_file(path_out, &no);
  IL_CHECK(inp && outs);
  if (!inp || !outs) {
    free(inp);
    free(outs);
    il_vocab_free(v);
    return;
  }
  const char *sep = "\n__ggml_vocab_test__\n";
  size_t seplen = strlen(sep);
  char *cur = inp, *line = outs;
  int cases = 0, bad = 0, bad_rt = 0;
  int32_t *ids = malloc(sizeof(int32_t) * 4096), *want = malloc(sizeof(int32_t) * 4096);
  for (;;) {
    char *next = strstr(cur, sep);
    if (!next) break;
    size_t len = (size_t)(next - cur);
    char *eol = strchr(line, '\n');
    if (!eol) break;
    *eol = '\0';
    size_t nw = 0;
    for (char *q = line; *q;) {
      char *end;
      long x = strtol(q, &end, 10);
      if (end == q) break;
      want[nw++] = (int32_t)x;
      q = end;
    }
    line = eol + 1;
    size_t n = tok(v, cur, len, false, false, ids, 4096);
    cases++;
    if (!ids_equal(ids, n, want, nw)) {
      bad++;
      if (bad <= 5) {
        fprintf(stderr, "  %s case %d mismatch: \"%.*s\"\n", fv->name, cases, (int)len, cur);
        print_ids("want", want, nw);
        print_ids("got ", ids, n);
      }
    }
    if (fv->round_trip && n != (size_t)-1) {
      size_t dl;
      char *d = detok_all(v, ids, n, false, &dl);
      if (dl != len || memcmp(d, cur, len) != 0) {
        bad_rt++;
        if (bad_rt <= 3)
          fprintf(stderr, "  %s case %d round trip: \"%.*s\" -> \"%s\"\n", fv->name, cases,
                  (int)len, cur, d);
      }
      free(d);
      check_stream(v, ids, n, false, 4);
      check_stream(v, ids, n, true, 1);
    }
    cur = next + seplen;
  }
  printf("fixture %-13s pre=%-13s %d cases, %d token mismatches, %d round-trip mismatches\n",
         fv->name, il_vocab_pre(v), cases, bad, bad_rt);
  IL_CHECK(cases > 40);
  IL_CHECK_INT(bad, 0);
  IL_CHECK_INT(bad_rt, 0);
  free(ids);
  free(want);
  free(inp);
  free(outs);
  il_vocab_free(v);
}

/* ---- TinyStories tok512: llama2.c arrays and GGUF agree, and match llama2.c's encode ---- */

static il_vocab *load_tok512(void) {
  const char *p = il_test_fixture("models/tok512.bin");
  if (!p) return NULL;
  size_t n;
  char *b = il_test_read_file(p, &n);
  if (!b) return NULL;
  const char *toks[512];
  uint64_t lens[512];
  float scores[512];
  size_t off = 4;
  int i = 0;
  for (; i < 512 && off + 8 <= n; i++) {
    int32_t l;
    memcpy(&scores[i], b + off, 4);
    memcpy(&l, b + off + 4, 4);
    off += 8;
    toks[i] = b + off;
    lens[i] = (uint64_t)l;
    off += (size_t)l;
  }
  IL_CHECK_INT(i, 512);
  il_vocab *v = NULL;
  IL_CHECK_OK(il_vocab_from_arrays("llama", 512, toks, lens, scores, NULL, &v));
  free(b);
  return v;
}

static void test_tok512(void) {
  il_vocab *a = load_tok512();
  const char *g = il_test_fixture("models/stories260K-f32.gguf");
  if (!a || !g) {
    printf("SKIP part: tok512 fixtures absent\n");
    il_vocab_free(a);
    return;
  }
  il_vocab *b = load_vocab(g, NULL);
  if (!b) {
    il_vocab_free(a);
    return;
  }
  /* expected ids from llama2.c's encode (BOS, dummy prefix, best-score merges) */
  struct {
    const char *text;
    int32_t ids[32];
    size_t n;
  } cases[] = {
      {"Once upon a time", {1, 403, 407, 261, 378}, 5},
      {"Lily's mom said, \"Lily, let's go to the park.\"",
       {1, 317, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267,
        265, 282, 295, 433, 426, 436},
       24},
  };
  int32_t out[4096];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int which = 0; which < 2; which++) {
      il_vocab *v = which ? b : a;
      size_t n = tok(v, cases[c].text, strlen(cases[c].text), true, false, out, 4096);
      if (!ids_equal(out, n, cases[c].ids, cases[c].n)) {
        fprintf(stderr, "  tok512 (%s) \"%s\"\n", which ? "gguf" : "arrays", cases[c].text);
        print_ids("want", cases[c].ids, cases[c].n);
        print_ids("got ", out, n);
        IL_CHECK(false);
      } else {
        IL_CHECK(true);
      }
      size_t dl;
      char *d = detok_all(v, out, n, false, &dl);
      IL_CHECK_STR(d, cases[c].text);
      free(d);
    }
  }
  /* the two forms agree on a whole text */
  const char *sp = il_test_fixture("models/stories260K-samples.txt");
  if (sp) {
    size_t n;
    char *text = il_test_read_file(sp, &n);
    int32_t *x = malloc(sizeof(int32_t) * (n + 2)), *y = malloc(sizeof(int32_t) * (n + 2));
    size_t nx = tok(a, text, n, true, false, x, n + 2), ny = tok(b, text, n, true, false, y, n + 2);
    IL_CHECK(ids_equal(x, nx, y, ny));
    IL_CHECK(nx > 100 && nx < n);
    size_t dl;
    char *d = detok_all(b, y, ny, false, &dl);
    IL_CHECK(dl == n && memcmp(d, text, n) == 0);
    free(d);
    check_stream(b, y, ny, false, 1);
    free(x);
    free(y);
    free(text);
  }
  IL_CHECK_INT(il_vocab_bos(b), 1);
  IL_CHECK_INT(il_vocab_eos(b), 2);
  IL_CHECK(il_vocab_add_bos(b));
  IL_CHECK(il_vocab_is_eog(b, 2));
  il_vocab_free(a);
  il_vocab_free(b);
}

/* ---- hand-written edge cases on every fixture vocabulary ---- */

static void test_edges(const char *name) {
  char rel[256];
  snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", name);
  const char *p = il_test_fixture(rel);
  if (!p) return;
  il_vocab *v = load_vocab(p, NULL);
  if (!v) return;
  size_t cap = (1u << 20) + 64;
  int32_t *ids = malloc(cap * sizeof *ids);
  char *text = malloc(cap);

  /* empty and only spaces */
  IL_CHECK_INT(tok(v, "", 0, false, false, ids, cap), 0);
  size_t n = tok(v, "     ", 5, false, false, ids, cap);
  IL_CHECK(n >= 1 && n <= 5);
  size_t dl;
  char *d = detok_all(v, ids, n, false, &dl);
  IL_CHECK_STR(d, "     ");
  free(d);

  /* long runs of one character: must finish and give the text back (not quadratic: each run is
   * 200k bytes; the whole test stays well under a second per run on one core) */
  const char runs[] = {'a', ' ', '\n', '1', '!'};
  for (size_t r = 0; r < sizeof runs; r++) {
    size_t len = 200000;
    memset(text, runs[r], len);
    n = tok(v, text, len, false, false, ids, cap);
    IL_CHECK(n != (size_t)-1 && n > 0 && n <= len + 1); /* + SentencePiece's '▁' prefix */
    d = detok_all(v, ids, n, false, &dl);
    IL_CHECK(dl == len && memcmp(d, text, len) == 0);
    free(d);
  }

  /* bytes this vocabulary can represent on their own (byte-level vocabularies may lack some) */
  bool repr[256];
  int n_repr = 0;
  for (int b = 0; b < 256; b++) {
    char c = (char)b, o[8];
    size_t k = tok(v, &c, 1, false, false, ids, cap);
    repr[b] = il_detokenize(v, ids, k, false, o, sizeof o) == 1 && o[0] == c;
    n_repr += repr[b];
  }
  IL_CHECK(n_repr >= 200);
  if (n_repr < 256) printf("  %s: %d of 256 bytes have no token (decoded as nothing/UNK)\n", name, 256 - n_repr);

  /* invalid UTF-8: no crash, every representable byte comes back */
  const char bad[] = "ok \xff\xfe \xc3 \xe2\x82 end\x80";
  n = tok(v, bad, sizeof bad - 1, false, false, ids, cap);
  IL_CHECK(n != (size_t)-1 && n > 0);
  for (size_t i = 0; i < n; i++) IL_CHECK(ids[i] >= 0 && ids[i] < il_vocab_size(v));
  d = detok_all(v, ids, n, false, &dl);
  /* a byte without its own token decodes as that byte alone does (nothing, UNK's piece, or for
   * deepseek-llm the user-defined character standing for it) */
  char kept[8 * sizeof bad];
  size_t nk = 0;
  for (size_t i = 0; i + 1 < sizeof bad; i++) {
    if (repr[(uint8_t)bad[i]]) kept[nk++] = bad[i];
    else {
      int32_t one[8];
      size_t k = tok(v, &bad[i], 1, false, false, one, 8);
      nk += il_detokenize(v, one, k, false, kept + nk, 8);
    }
  }
  IL_CHECK(dl == nk && memcmp(d, kept, nk) == 0);
  if (dl != nk || memcmp(d, kept, nk) != 0) {
    fprintf(stderr, "  %s: invalid UTF-8 decoded to %zu bytes:", name, dl);
    for (size_t i = 0; i < dl; i++) fprintf(stderr, " %02x", (uint8_t)d[i]);
    fprintf(stderr, "\n");
    print_ids("ids", ids, n);
  }
  free(d);

  /* special-token text: parsed as one token with parse_special, as text without */
  int32_t eos = il_vocab_eos(v);
  size_t sl = 0;
  const char *st = il_vocab_token_text(v, eos, &sl);
  if (st && il_vocab_token_type(v, eos) == IL_TOKEN_CONTROL) {
    snprintf(text, cap, "x%.*sy", (int)sl, st);
    n = tok(v, text, strlen(text), false, true, ids, cap);
    bool found = false;
    for (size_t i = 0; i < n; i++) found |= ids[i] == eos;
    IL_CHECK(found);
    n = tok(v, text, strlen(text), false, false, ids, cap);
    found = false;
    for (size_t i = 0; i < n; i++) found |= ids[i] == eos;
    IL_CHECK(!found);
    d = detok_all(v, ids, n, false, &dl);
    IL_CHECK_STR(d, text);
    free(d);
  }

  /* add_special follows the metadata */
  n = tok(v, "Hello", 5, true, false, ids, cap);
  if (il_vocab_add_bos(v)) IL_CHECK_INT(ids[0], il_vocab_bos(v));
  if (il_vocab_add_eos(v)) IL_CHECK_INT(ids[n - 1], il_vocab_eos(v));

  /* 1 MB of mixed text round-trips */
  const char *mix = "The quick brown fox, 1234 jumps; \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd "
                    "\xf0\x9f\xa6\x99!\n\tcode(x) { return y'; }  ";
  size_t ml = strlen(mix), len = 0;
  while (len + ml <= (1u << 20)) {
    memcpy(text + len, mix, ml);
    len += ml;
  }
  n = tok(v, text, len, false, false, ids, cap);
  IL_CHECK(n != (size_t)-1 && n > len / 8 && n < len);
  d = detok_all(v, ids, n, false, &dl);
  IL_CHECK(dl == len && memcmp(d, text, len) == 0);
  free(d);

  /* fuzz: random bytes, byte-exact round trip, ids in range */
  uint64_t seed = 12345;
  int fails = 0;
  for (int it = 0; it < 300; it++) {
    size_t fl = (size_t)((il_test_randf(&seed) + 1.0f) * 100.0f);
    for (size_t i = 0; i < fl; i++) {
      uint8_t c = (uint8_t)((il_test_randf(&seed) + 1.0f) * 128.0f);
      if (it % 3 == 0) c = (uint8_t)(c % 64 + 32); /* some mostly-ASCII ones */
      if (c == '<') c = '>'; /* keep special-token texts out of the round trip */
      if (!repr[c]) c = 'x';
      text[i] = (char)c;
    }
    n = tok(v, text, fl, it % 2 == 0, false, ids, cap);
    bool ok = n != (size_t)-1;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] >= 0 && ids[i] < il_vocab_size(v);
    if (ok) {
      d = detok_all(v, ids, n, false, &dl);
      ok = dl == fl && memcmp(d, text, fl) == 0;
      free(d);
    }
    if (!ok && ++fails <= 3) fprintf(stderr, "  %s fuzz case %d (len %zu) failed\n", name, it, fl);
  }
  IL_CHECK_INT(fails, 0);

  /* out of memory anywhere in tokenize: an error, never a crash or a leak (ASan checks) */
  const char *oom_text = "Hello world, this is a test of 123 tokens!";
  il_status s = IL_OK;
  for (long k = 1; k < 200; k++) {
    il_mem_fail_after(k);
    size_t nn;
    s = il_tokenize(v, oom_text, strlen(oom_text), true, true, ids, cap, &nn);
    il_mem_fail_after(0);
    if (s == IL_OK) break;
    IL_CHECK_INT(s, IL_ERR_OOM);
  }
  IL_CHECK_OK(s);
  free(ids);
  free(text);
  il_vocab_free(v);
}

/* ---- unknown pre-tokenizer: a clear error, and --pre to force one ---- */

static void test_unknown_pre(void) {
  const char *p = il_test_fixture("tokenizer/ggml-vocab-gpt-2.gguf");
  if (!p) return;
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(p, &g));
  if (!g) return;
  il_gguf_writer *w = NULL;
  IL_CHECK_OK(il_gguf_writer_new(&w));
  for (int64_t i = 0; i < il_gguf_kv_count(g); i++) {
    if (strcmp(il_gguf_key(g, i), "tokenizer.ggml.pre") == 0) continue;
    IL_CHECK_OK(il_gguf_writer_copy_kv(w, g, i));
  }
  IL_CHECK_OK(il_gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre"));
  char path[512];
  snprintf(path, sizeof path, "%s/pre.gguf", il_test_tmpdir());
  IL_CHECK_OK(il_gguf_writer_write(w, path));
  il_gguf_writer_free(w);
  il_gguf_close(g);

  IL_CHECK_OK(il_gguf_open(path, &g));
  il_vocab *v = NULL;
  il_status s = il_vocab_from_gguf(g, &v);
  IL_CHECK_INT(s, IL_ERR_UNSUPPORTED);
  IL_CHECK_CONTAINS(il_error_detail(), "no-such-pre");
  IL_CHECK(v == NULL);
  il_vocab_opts o = {"gpt-2"};
  IL_CHECK_OK(il_vocab_from_gguf_opts(g, &o, &v));
  il_gguf_close(g);
  if (v) {
    int32_t ids[16];
    size_t n = tok(v, "Hello world", 11, false, false, ids, 16);
    int32_t want[] = {15496, 995};
    IL_CHECK(ids_equal(ids, n, want, 2));
    IL_CHECK_STR(il_vocab_pre(v), "gpt-2");
  }
  il_vocab_free(v);
  unlink(path);
}

/* Every pre-tokenizer of the list compiles and splits text without error. */
static void test_all_pre_names(void) {
  const char *p = il_test_fixture("tokenizer/ggml-vocab-gpt-2.gguf");
  if (!p) return;
  const char *names[] = {"default", "gpt-2", "llama-bpe", "qwen2", "falcon", "starcoder",
                         "refact", "deepseek-llm", "deepseek-coder", "mpt", "gpt-neox", "smollm",
                         "dbrx", "poro-chat", "viking", "gpt-4o", "tekken", "command-r"};
  const char *text = "Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3 1314151\n\n  x";
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    il_vocab *v = load_vocab(p, names[i]);
    if (!v) continue;
    int32_t ids[256];
    size_t n = tok(v, text, strlen(text), false, false, ids, 256);
    IL_CHECK(n != (size_t)-1 && n > 5);
    size_t dl;
    char *d = detok_all(v, ids, n, false, &dl);
    IL_CHECK_STR(d, text);
    free(d);
    il_vocab_free(v);
  }
}

int main(void) {
  test_small_spm();
  if (!il_test_fixture("tokenizer")) {
    printf("SKIP part: ../shared/fixtures/tokenizer absent; fixture tests not run\n");
    return il_test_finish();
  }
  for (size_t i = 0; i < sizeof fixture_vocabs / sizeof fixture_vocabs[0]; i++)
    test_fixture(&fixture_vocabs[i], NULL);
  test_tok512();
  for (size_t i = 0; i < sizeof fixture_vocabs / sizeof fixture_vocabs[0]; i++)
    test_edges(fixture_vocabs[i].name);
  test_unknown_pre();
  test_all_pre_names();
  il_mem_stats st;
  il_mem_stats_get(&st);
  IL_CHECK_INT(st.current[IL_MEM_WORKSPACE], 0); /* every scratch buffer was given back */
  IL_CHECK_INT(st.current[IL_MEM_TOKENIZER], 0);
  IL_CHECK_INT(st.current[IL_MEM_OTHER], 0);
  return il_test_finish();
}
