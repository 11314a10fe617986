/* tests/fuzz/fuzz_grammar: hostile grammars and schemas. The first byte picks the input kind:
 * even: GBNF text, up to the first NUL, then bytes to feed the matcher; odd: a JSON Schema,
 * whose generated grammar must always parse (a property: the converter writes valid GBNF or
 * says why not). A grammar that parses gets a matcher fed the bytes and a mask over a small
 * byte-level vocabulary, checked against advancing on each allowed token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "fuzz.h"
#include "server/schema.h"

static il_vocab *il__vocab;
static il_grammar_vocab *il__tv;

static void il__setup(void) {
  static char names[256][8];
  const char *toks[264];
  int32_t types[264];
  int k = 0;
  const char *head[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "\xe2\x96\x81" "a", "ab", "{\"", "\":"};
  const int32_t head_t[] = {2, 3, 3, 1, 1, 1, 1, 1};
  for (int i = 0; i < 8; i++, k++) toks[k] = head[i], types[k] = head_t[i];
  for (int b = 0; b < 256; b++, k++) {
    snprintf(names[b], sizeof names[b], "<0x%02X>", b);
    toks[k] = names[b];
    types[k] = 6;
  }
  if (il_vocab_from_arrays("llama", k, toks, NULL, NULL, types, &il__vocab) != IL_OK) abort();
  il_vocab_set_special(il__vocab, 1, 2, 0, true, false);
  if (il_grammar_vocab_new(il__vocab, &il__tv) != IL_OK) abort();
}

static void il__exercise(const il_grammar *g, const uint8_t *bytes, size_t n) {
  il_grammar_state *s = NULL;
  if (il_grammar_state_new(g, il__tv, &s) != IL_OK) return;
  (void)il_grammar_state_accept_bytes(s, (const char *)bytes, n > 64 ? 64 : n);
  const int32_t nv = il_vocab_size(il__vocab);
  uint8_t allowed[(264 + 7) / 8];
  int32_t n_allowed = 0;
  if (il_grammar_state_mask(s, allowed, &n_allowed) == IL_OK) {
    int32_t seen = 0;
    for (int32_t t = 0; t < nv && seen < 8; t++) {
      if (!(allowed[t >> 3] >> (t & 7) & 1)) continue;
      seen++;
      il_grammar_state *r = NULL;
      if (il_grammar_state_new(g, il__tv, &r) != IL_OK) continue;
      (void)il_grammar_state_accept_bytes(r, (const char *)bytes, n > 64 ? 64 : n);
      /* a token the mask allows can be taken (unless the work space runs out) */
      il_status st = il_grammar_state_accept_token(r, t);
      IL_FUZZ_ASSERT(st == IL_OK || st == IL_ERR_RANGE);
      il_grammar_state_free(r);
    }
  }
  il_grammar_state_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!il__tv) il__setup();
  if (size < 1) return 0;
  const uint8_t *text = data + 1;
  size_t len = size - 1;
  const uint8_t *nul = memchr(text, 0, len);
  size_t glen = nul ? (size_t)(nul - text) : len;
  const uint8_t *rest = nul ? nul + 1 : text + len;
  size_t rlen = (size_t)(text + len - rest);
  il_grammar *g = NULL;
  if (data[0] % 2 == 0) {
    if (il_grammar_parse((const char *)text, glen, "fuzz", &g) != IL_OK) return 0;
  } else {
    il_sbuf out = {0};
    il_status st = il_schema_text_to_gbnf((const char *)text, glen, "fuzz", &out);
    if (st == IL_OK) {
      st = il_grammar_parse(out.p, out.len, "generated", &g);
      if (st != IL_OK) fprintf(stderr, "%s\n%s\n", il_error_detail(), out.p);
      IL_FUZZ_ASSERT(st == IL_OK);
    }
    il_sbuf_free(&out);
    if (!g) return 0;
  }
  il__exercise(g, rest, rlen);
  il_grammar_free(g);
  return 0;
}

int il_fuzz_seeds(il_fuzz_input *seeds, int cap) {
  static const char *const grammars[] = {
      "root ::= \"a\" [0-9]+ (\"x\" | \"yz\")?\0a12y",
      "root ::= obj\nobj ::= \"{\" ( str \":\" [0-9]{1,3} )? \"}\"\nstr ::= \"\\\"\" [^\"]* \"\\\"\"\0{\"ab",
      "root ::= [α-ω]+ \"!\" .\0\xce\xb1",
      "root ::= (a | b)*\na ::= \"x\" | \"xy\"\nb ::= \"x\" \"y\"?\0xyx",
  };
  static const char *const schemas[] = {
      "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":300},"
      "\"b\":{\"type\":\"string\",\"pattern\":\"^[a-c]{2}\\\\d?$\"}},\"required\":[\"a\"]}\0{\"a\":1",
      "{\"type\":\"array\",\"items\":{\"enum\":[1,\"x\",null]},\"maxItems\":3}\0[1,",
      "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/n\"}}}},\"$ref\":\"#/$defs/n\"}\0{",
      "{\"type\":\"number\",\"minimum\":-3,\"maximum\":7}\0-2.5",
  };
  int n = 0;
  for (int kind = 0; kind < 2; kind++)
    for (int i = 0; i < 4 && n < cap; i++) {
      const char *s = kind ? schemas[i] : grammars[i];
      size_t l = strlen(s);
      size_t l2 = strlen(s + l + 1);
      seeds[n].size = 1 + l + 1 + l2;
      seeds[n].data = malloc(seeds[n].size);
      seeds[n].data[0] = (uint8_t)kind;
      memcpy(seeds[n].data + 1, s, l + 1 + l2);
      n++;
    }
  return n;
}
