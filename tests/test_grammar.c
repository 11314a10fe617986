/* tests/test_grammar: the GBNF parser (and its errors), the matcher, the trie mask against a
 * token-by-token reference, and generation under a grammar on builtin:tiny (cpu and sim; `cuda`:
 * on the CUDA backend). */
#include <stdlib.h>
#include <string.h>

#include "backend/registry.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/request.h"
#include "harness.h"
#include "memory/mem.h"

static il_grammar *parse(const char *text) {
  il_grammar *g = NULL;
  IL_CHECK_OK(il_grammar_parse(text, strlen(text), "t.gbnf", &g));
  return g;
}

/* The grammar's error for text contains `want` (the place and the problem). */
static void parse_fails(const char *text, const char *want) {
  il_grammar *g = NULL;
  il_status st = il_grammar_parse(text, strlen(text), "t.gbnf", &g);
  IL_CHECK_INT(st, IL_ERR_FORMAT);
  IL_CHECK(g == NULL);
  if (!strstr(il_error_detail(), want)) {
    fprintf(stderr, "  grammar %s\n  wanted \"%s\" in: %s\n", text, want, il_error_detail());
    il_test_failed++;
  } else il_test_passed++;
}

static void test_parse_errors(void) {
  parse_fails("root \"a\"", "t.gbnf:1:6: expected '::='");
  parse_fails("root ::= foo\n", "t.gbnf:1:10: undefined rule 'foo'");
  parse_fails("x ::= \"a\"\n", "no rule named 'root'");
  parse_fails("root ::= root \"a\"\n", "rule 'root' is left-recursive");
  parse_fails("root ::= a\na ::= \"x\"? a\n", "rule 'a' is left-recursive");
  parse_fails("root ::= (\"a\"?)*\n", "left-recursive");
  parse_fails("root ::= \"abc\n", "t.gbnf:1:14: newline inside a literal");
  parse_fails("root ::= \"abc", "t.gbnf:1:10: unterminated literal");
  parse_fails("root ::= [a-\n", "newline inside a character class");
  parse_fails("root ::= \"\\q\"\n", "t.gbnf:1:11: unknown escape \\q");
  parse_fails("root ::= \"a\"\nroot ::= \"b\"\n", "t.gbnf:2:1: rule 'root' is defined twice");
  parse_fails("root ::= * \"a\"\n", "t.gbnf:1:10: '*' repeats nothing");
  parse_fails("root ::= \"a\"{3,2}\n", "n below m");
  parse_fails("root ::= \"a\"{2000}\n", "above 1000");
  parse_fails("root ::= (\"a\" | \"b\"\n", "t.gbnf:1:10: this '(' is not closed");
  parse_fails("root ::= \"a\" )\n", "t.gbnf:1:14: unexpected ')'");
  parse_fails("root ::= [z-a]\n", "range end below its start");
  parse_fails("root ::= []\n", "empty character class");
  parse_fails("\n\n  root ::= \"\\x4\"\n", "t.gbnf:3:16: expected a hex digit");
  /* a comment, continuation lines in groups and after '|', escapes */
  il_grammar *g = parse("# a comment\nroot ::= (\n  \"a\" |\n  \"b\" ) x # trailing\nx ::= [\\x41-\\u005A] | \"\\\"\"\n");
  IL_CHECK(g != NULL);
  il_grammar_free(g);
}

/* Accepts text in full (accepting at the end) under a fresh state of g. */
static bool matches(const il_grammar *g, const char *text) {
  il_grammar_state *s = NULL;
  IL_CHECK_OK(il_grammar_state_new(g, NULL, &s));
  if (!s) return false;
  bool ok = il_grammar_state_accept_bytes(s, text, strlen(text)) == IL_OK && il_grammar_state_accepting(s);
  il_grammar_state_free(s);
  return ok;
}

static void test_matcher(void) {
  il_grammar *g = parse("root ::= \"a\" [0-9]+ (\"x\" | \"yz\")? tail\ntail ::= \"!\"{0,2}\n");
  IL_CHECK(matches(g, "a1"));
  IL_CHECK(matches(g, "a123yz!!"));
  IL_CHECK(matches(g, "a0x!"));
  IL_CHECK(!matches(g, "a"));
  IL_CHECK(!matches(g, "ab"));
  IL_CHECK(!matches(g, "a1y"));
  IL_CHECK(!matches(g, "a1!!!"));
  /* a rejected byte leaves the state as it was */
  il_grammar_state *s = NULL;
  IL_CHECK_OK(il_grammar_state_new(g, NULL, &s));
  IL_CHECK_OK(il_grammar_state_accept_bytes(s, "a4", 2));
  IL_CHECK_INT(il_grammar_state_accept_bytes(s, "q", 1), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "byte 0 (0x71)");
  IL_CHECK(il_grammar_state_accepting(s));
  IL_CHECK(!il_grammar_state_finished(s));
  IL_CHECK_OK(il_grammar_state_accept_bytes(s, "yz!!", 4));
  IL_CHECK(il_grammar_state_finished(s));
  il_grammar_state_free(s);
  il_grammar_free(g);

  /* Unicode: classes match code points, fed one byte at a time */
  g = parse("root ::= [α-ω]+ \"→\" [^a-z]\n");
  IL_CHECK(matches(g, "αβγ→Z"));
  IL_CHECK(matches(g, "ω→é"));
  IL_CHECK(!matches(g, "αβγ→z"));
  IL_CHECK(!matches(g, "a→Z"));
  IL_CHECK_OK(il_grammar_state_new(g, NULL, &s));
  IL_CHECK_OK(il_grammar_state_accept_bytes(s, "\xce", 1)); /* the first byte of α..ω */
  IL_CHECK(!il_grammar_state_accepting(s));
  IL_CHECK_INT(il_grammar_state_accept_bytes(s, "a", 1), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_grammar_state_accept_bytes(s, "\xb1", 1)); /* α */
  IL_CHECK_INT(il_grammar_state_accept_bytes(s, "\xc1", 1), IL_ERR_INVALID_ARG); /* never in UTF-8 */
  il_grammar_state_free(s);
  il_grammar_free(g);
  /* overlong encodings of ASCII are refused, also while half read */
  g = parse("root ::= \"e\"\n");
  IL_CHECK(!matches(g, "\xc1\xa5"));
  IL_CHECK(!matches(g, "\xe0\x81\xa5"));
  IL_CHECK_OK(il_grammar_state_new(g, NULL, &s));
  IL_CHECK_INT(il_grammar_state_accept_bytes(s, "\xe0", 1), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_grammar_state_accept_bytes(s, "\xe4", 1), IL_ERR_INVALID_ARG); /* U+4000.. no */
  il_grammar_state_free(s);
  il_grammar_free(g);

  /* repetition bounds and `.` */
  g = parse("root ::= (\"ab\"){2,3} .\n");
  IL_CHECK(!matches(g, "abx"));
  IL_CHECK(matches(g, "ababx"));
  IL_CHECK(matches(g, "abababé"));
  IL_CHECK(!matches(g, "abababab"));
  il_grammar_free(g);

  /* ambiguity: several stacks at once, deduplicated */
  g = parse("root ::= (a | b)*\na ::= \"x\" | \"xy\"\nb ::= \"x\" \"y\"?\n");
  IL_CHECK(matches(g, ""));
  IL_CHECK(matches(g, "xyxxxyxy"));
  IL_CHECK(!matches(g, "yx"));
  il_grammar_free(g);
}

#define JSON_GBNF                                                                              \
  "root ::= object\n"                                                                          \
  "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"        \
  "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n" \
  "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"                                 \
  "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n" \
  "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n" \
  "ws ::= [ \\t\\n]{0,8}\n"

/* The mask of each step equals the reference: token t is allowed iff its bytes are accepted
 * (or it ends the generation and the grammar accepts). */
static void check_mask(const il_grammar *g, const il_grammar_vocab *tv, const il_vocab *v, const char *prefix) {
  il_grammar_state *s = NULL;
  IL_CHECK_OK(il_grammar_state_new(g, tv, &s));
  IL_CHECK_OK(il_grammar_state_accept_bytes(s, prefix, strlen(prefix)));
  const int32_t n = il_vocab_size(v);
  uint8_t *allowed = calloc((size_t)(n + 7) / 8, 1);
  int32_t n_allowed = 0, ref_allowed = 0, wrong = 0;
  IL_CHECK_OK(il_grammar_state_mask(s, allowed, &n_allowed));
  for (int32_t t = 0; t < n; t++) {
    il_grammar_state *r = NULL;
    IL_CHECK_OK(il_grammar_state_new(g, tv, &r));
    IL_CHECK_OK(il_grammar_state_accept_bytes(r, prefix, strlen(prefix)));
    char piece[512];
    size_t k = il_vocab_token_piece(v, t, false, piece, sizeof piece);
    bool ok;
    if (il_vocab_is_eog(v, t)) ok = il_grammar_state_accepting(r);
    else ok = k > 0 && il_grammar_state_accept_bytes(r, piece, k) == IL_OK;
    il_grammar_state_free(r);
    bool got = allowed[t >> 3] >> (t & 7) & 1;
    ref_allowed += ok;
    if (got != ok && wrong++ < 5) fprintf(stderr, "  prefix \"%s\": token %d (\"%.*s\") mask %d, reference %d\n", prefix, t, (int)k, piece, got, ok);
  }
  IL_CHECK_INT(wrong, 0);
  IL_CHECK_INT(n_allowed, ref_allowed);
  free(allowed);
  il_grammar_state_free(s);
}

static il_engine *open_tiny(const char *device) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.device, sizeof c.device, "%s", device);
  c.ctx = 256;
  c.threads = 2;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

static void test_mask(il_engine *e) {
  il_grammar_vocab *tv = NULL;
  IL_CHECK_OK(il_grammar_vocab_new(il_engine_vocab(e), &tv));
  IL_CHECK(il_grammar_vocab_nodes(tv) > 256);
  il_grammar *g = parse(JSON_GBNF);
  const char *prefixes[] = {"", "{", "{\"ab", "{\"a\": ", "{\"a\": [1, 2.5", "{\"a\": tr", "{\"a\": \"\xce", "{}"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) check_mask(g, tv, il_engine_vocab(e), prefixes[i]);
  il_grammar_free(g);
  g = parse("root ::= [α-ω]+ \"!\"\n");
  check_mask(g, tv, il_engine_vocab(e), "");
  check_mask(g, tv, il_engine_vocab(e), "αβ\xcf");
  il_grammar_free(g);
  il_grammar_vocab_free(tv);
}

/* Generates under g and checks the text is in the grammar (complete when it ended on EOS). */
static void generate(il_engine *e, const il_grammar_vocab *tv, const char *gbnf, float temp, uint64_t seed,
                     int32_t n_predict, bool want_complete) {
  il_grammar *g = parse(gbnf);
  il_grammar_state *s = NULL;
  IL_CHECK_OK(il_grammar_state_new(g, tv, &s));
  il_request_params p = il_request_default_params();
  p.sampling.temp = temp;
  p.sampling.seed = seed;
  p.n_predict = n_predict;
  il_request *r = NULL;
  IL_CHECK_OK(il_request_new(e, "Once upon a time", &p, &r));
  IL_CHECK_OK(il_request_set_grammar(r, s));
  char out[8192];
  size_t n = 0;
  int32_t tok;
  const char *text;
  size_t len;
  il_status st;
  while ((st = il_request_next(r, &tok, &text, &len)) == IL_OK) {
    if (len && n + len < sizeof out) memcpy(out + n, text, len), n += len;
    if (tok < 0) break;
  }
  IL_CHECK_OK(st);
  out[n] = 0;
  il_gen_stats gs;
  il_request_stats(r, &gs);
  /* the text itself is valid UTF-8 (an independent check of the matcher's decoding) */
  size_t bad = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c0 = (unsigned char)out[i];
    size_t k = c0 < 0x80 ? 1 : c0 >= 0xC2 && c0 <= 0xDF ? 2 : c0 >= 0xE0 && c0 <= 0xEF ? 3 : c0 >= 0xF0 && c0 <= 0xF4 ? 4 : 0;
    if (k == 0 || i + k > n) {
      bad++;
      break;
    }
    for (size_t j = 1; j < k; j++) bad += ((unsigned char)out[i + j] & 0xC0) != 0x80;
    i += k;
  }
  IL_CHECK_INT(bad, 0);
  il_grammar_state *check = NULL;
  IL_CHECK_OK(il_grammar_state_new(g, NULL, &check));
  il_status cst = il_grammar_state_accept_bytes(check, out, n);
  IL_CHECK_OK(cst);
  if (gs.stopped_eog) IL_CHECK(il_grammar_state_accepting(check));
  if (want_complete) IL_CHECK(gs.stopped_eog);
  if (cst != IL_OK || (want_complete && !gs.stopped_eog)) fprintf(stderr, "  output: %s\n", out);
  il_grammar_state_free(check);
  il_request_free(r);
  il_grammar_state_free(s);
  il_grammar_free(g);
}

static void test_generate(il_engine *e) {
  il_grammar_vocab *tv = NULL;
  IL_CHECK_OK(il_grammar_vocab_new(il_engine_vocab(e), &tv));
  /* a grammar with one finite language: every run ends on EOS inside it */
  const char *small = "root ::= (\"yes\" | \"no\" | \"maybe\") \" \" [0-9]{1,3} \".\"\n";
  for (uint64_t seed = 1; seed <= 6; seed++) generate(e, tv, small, seed == 1 ? 0.0f : 1.0f, seed, 64, true);
  /* JSON: whatever the length, a prefix of the language; at most 8 spaces in a row so the
   * model cannot spend the whole budget on whitespace */
  for (uint64_t seed = 1; seed <= 4; seed++) generate(e, tv, JSON_GBNF, seed == 1 ? 0.0f : 0.9f, seed, 96, false);
  il_grammar_vocab_free(tv);
}

/* Every allocation failing in turn: parse, vocabulary index, state, mask and advance either
 * succeed or return IL_ERR_OOM, never crash or leak (ASan's leak check in the asan preset). */
static void test_oom(il_engine *e) {
  int fails = 0, n;
  for (n = 1; n < 400; n++) {
    il_mem_fail_after(n);
    il_grammar *g = NULL;
    il_grammar_vocab *tv = NULL;
    il_grammar_state *s = NULL;
    il_status st = il_grammar_parse(JSON_GBNF, strlen(JSON_GBNF), "oom", &g);
    if (st == IL_OK) st = il_grammar_vocab_new(il_engine_vocab(e), &tv);
    if (st == IL_OK) st = il_grammar_state_new(g, tv, &s);
    uint8_t allowed[(512 + 7) / 8];
    int32_t k = 0;
    if (st == IL_OK) st = il_grammar_state_accept_bytes(s, "{\"a\": [1", 8);
    if (st == IL_OK) st = il_grammar_state_mask(s, allowed, &k);
    il_mem_fail_after(0);
    if (st != IL_OK) {
      IL_CHECK_INT(st, IL_ERR_OOM);
      fails++;
    }
    il_grammar_state_free(s);
    il_grammar_vocab_free(tv);
    il_grammar_free(g);
    if (st == IL_OK) break; /* past the last allocation */
  }
  IL_CHECK(fails > 10);
  IL_CHECK(n < 400);
}

int main(int argc, char **argv) {
  /* `cuda` (test_grammar_fakecuda, test_grammar_cuda): generation on the CUDA backend, where a
   * greedy request would otherwise pick its token on the device, past the mask */
  const bool cuda = argc > 1 && !strcmp(argv[1], "cuda");
  if (cuda) {
    il_backend *b = il_test_open_cuda_or_skip(); /* exits 77 without a module or a device */
    b->ops->destroy(b);
  } else {
    test_parse_errors();
    test_matcher();
  }
  il_engine *e = open_tiny(cuda ? "cuda" : "cpu");
  if (e) {
    if (!cuda) test_mask(e);
    test_generate(e);
    if (!cuda) test_oom(e);
    il_engine_free(e);
  }
  if (!cuda && (e = open_tiny("sim:256MiB"))) { /* the logits come back from the device */
    test_generate(e);
    il_engine_free(e);
  }
  return il_test_finish();
}
