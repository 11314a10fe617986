/* tests/test_schema: JSON Schema -> GBNF: documents that validate are in the grammar's
 * language and documents that do not are not; unsupported keywords name the keyword and path. */
#include "engine/grammar.h"
#include "harness.h"
#include "server/schema.h"

static il_grammar *compile(const char *schema) {
  il_sbuf out = {0};
  il_status st = il_schema_text_to_gbnf(schema, strlen(schema), "schema.json", &out);
  IL_CHECK_OK(st);
  il_grammar *g = NULL;
  if (st == IL_OK) {
    st = il_grammar_parse(out.p, out.len, "generated", &g);
    IL_CHECK_OK(st);
    if (st != IL_OK) fprintf(stderr, "  schema %s\n  grammar:\n%s\n", schema, out.p);
  }
  il_sbuf_free(&out);
  return g;
}

static bool in_language(const il_grammar *g, const char *doc) {
  il_grammar_state *s = NULL;
  if (il_grammar_state_new(g, NULL, &s) != IL_OK) return false;
  bool ok = il_grammar_state_accept_bytes(s, doc, strlen(doc)) == IL_OK && il_grammar_state_accepting(s);
  il_grammar_state_free(s);
  return ok;
}

/* yes: documents that validate (each must be accepted); no: documents that do not. */
static void check(const char *schema, const char *const *yes, const char *const *no) {
  il_grammar *g = compile(schema);
  if (!g) return;
  for (; yes && *yes; yes++) {
    bool ok = in_language(g, *yes);
    IL_CHECK(ok);
    if (!ok) fprintf(stderr, "  schema %s\n  refused valid %s\n", schema, *yes);
  }
  for (; no && *no; no++) {
    bool ok = in_language(g, *no);
    IL_CHECK(!ok);
    if (ok) fprintf(stderr, "  schema %s\n  accepted invalid %s\n", schema, *no);
  }
  il_grammar_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void fails(const char *schema, il_status code, const char *want) {
  il_sbuf out = {0};
  IL_CHECK_INT(il_schema_text_to_gbnf(schema, strlen(schema), "schema.json", &out), code);
  if (!strstr(il_error_detail(), want)) {
    fprintf(stderr, "  schema %s\n  wanted \"%s\" in: %s\n", schema, want, il_error_detail());
    il_test_failed++;
  } else il_test_passed++;
  il_sbuf_free(&out);
}

int main(void) {
  check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\",\"maxLength\":3}},"
        "\"required\":[\"a\"],\"additionalProperties\":false}",
        L("{\"a\":1}", "{\"a\": -12, \"b\": \"xyz\"}", "{ \"a\" : 0 ,\n  \"b\":\"\"}"),
        L("{}", "{\"b\":\"x\"}", "{\"a\":1,}", "{\"b\":\"x\",\"a\":1}", "{\"a\":01}", "{\"a\":1,\"b\":\"abcd\"}", "{\"a\":1.5}"));
  /* all optional: commas only between the present ones */
  check("{\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"type\":\"null\"},\"z\":{\"const\":\"k\"}}}",
        L("{}", "{\"y\":null}", "{\"x\":true,\"z\":\"k\"}", "{\"x\":false,\"y\":null,\"z\":\"k\"}"),
        L("{,\"y\":null}", "{\"x\":true,}", "{\"z\":\"j\"}"));
  check("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",3,null]},\"minItems\":1,\"maxItems\":3}",
        L("[\"red\"]", "[3, null, \"green\"]"), L("[]", "[\"blue\"]", "[3,3,3,3]", "[\"red\",]"));
  check("{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
  check("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":237}", L("-15", "-9", "0", "7", "99", "100", "199", "237"),
        L("-16", "238", "240", "300", "1000", "-0", "05"));
  check("{\"type\":\"integer\",\"exclusiveMinimum\":10,\"exclusiveMaximum\":20}", L("11", "19"), L("10", "20", "9"));
  check("{\"type\":\"integer\",\"minimum\":1000}", L("1000", "123456789"), L("999", "-5"));
  check("{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}", L("-2", "-1.5", "-0.25", "0", "2.999", "3"),
        L("-2.5", "3.5", "4", "-3"));
  check("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}", L("\"AB-123\"", "\"QQ-000yz\""),
        L("\"A-123\"", "\"AB-12\"", "\"ab-123\"", "\"AB-123y\""));
  check("{\"type\":\"string\",\"pattern\":\"[^a]\\\\.+\"}", L("\"b..\""), L("\"a.\"", "\"\\\"..\""));
  check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}", L("\"ab\"", "\"\\n\\u00e9cd\"", "\"éé\""),
        L("\"a\"", "\"abcde\""));
  check("{\"type\":[\"string\",\"null\"],\"maxLength\":1}", L("null", "\"a\""), L("1", "\"ab\""));
  check("{\"anyOf\":[{\"type\":\"integer\",\"maximum\":5,\"minimum\":0},{\"type\":\"boolean\"}]}", L("5", "true"),
        L("6", "\"x\""));
  /* $ref and recursion */
  check("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":"
        "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
        L("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"), L("{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"));
  check("{\"properties\":{\"s\":{\"maxLength\":2},\"n\":{\"maximum\":3,\"minimum\":1}},\"required\":[\"s\",\"n\"]}",
        L("{\"s\":\"ab\",\"n\":2.5}"), L("{\"s\":\"abc\",\"n\":1}", "{\"s\":\"a\",\"n\":4}"));
  /* \s is a space only: a raw tab inside a JSON string is not JSON */
  check("{\"type\":\"string\",\"pattern\":\"^a\\\\sb$\"}", L("\"a b\""), L("\"a\tb\""));
  check("{}", L("{\"a\":[1,2,{\"b\":null}]}", "\"s\"", "1e5"), L("{a:1}"));
  /* response_format json_object */
  il_sbuf out = {0};
  IL_CHECK_OK(il_schema_any_gbnf(&out));
  il_grammar *g = NULL;
  IL_CHECK_OK(il_grammar_parse(out.p, out.len, "json_object", &g));
  IL_CHECK(in_language(g, "{\"k\": [true, false, null, -1.5e3, \"\\u0041\"]}"));
  IL_CHECK(!in_language(g, "[1]"));
  il_grammar_free(g);
  il_sbuf_free(&out);

  fails("{\"type\":\"string\",\"format\":\"email\"}", IL_ERR_UNSUPPORTED, "$.format: unsupported keyword 'format'");
  fails("{\"properties\":{\"a\":{\"type\":\"array\",\"uniqueItems\":true}}}", IL_ERR_UNSUPPORTED,
        "$.properties.a.uniqueItems: unsupported keyword 'uniqueItems'");
  fails("{\"allOf\":[]}", IL_ERR_UNSUPPORTED, "'allOf'");
  fails("{\"type\":\"number\",\"minimum\":0.5}", IL_ERR_UNSUPPORTED, "$.minimum");
  fails("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", IL_ERR_UNSUPPORTED, "$.pattern: lookaround");
  fails("{\"type\":\"string\",\"pattern\":\"^(a?)*$\"}", IL_ERR_UNSUPPORTED, "can match nothing");
  fails("{\"type\":\"string\",\"pattern\":\"(|b){2,}\"}", IL_ERR_UNSUPPORTED, "can match nothing");
  check("{\"type\":\"string\",\"pattern\":\"^(a?b)*(c?){0,3}$\"}", L("\"\"", "\"abbcc\""), L("\"aa\"", "\"cccc\""));
  fails("{\"$ref\":\"#/$defs/nope\"}", IL_ERR_INVALID_ARG, "\"#/$defs/nope\" is not defined");
  fails("{\"type\":\"strin\"}", IL_ERR_INVALID_ARG, "unknown type \"strin\"");
  fails("{\"type\":\"object\",\"required\":[\"q\"]}", IL_ERR_UNSUPPORTED, "'q' has no schema");
  fails("{\"type\":", IL_ERR_FORMAT, "schema.json:1:");
  fails("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", IL_ERR_INVALID_ARG, "no value fits");
  fails("{\"type\":\"string\",\"enum\":[\"a\",3]}", IL_ERR_INVALID_ARG, "$.enum[]: a value that 'type' does not allow");
  fails("{\"type\":\"integer\",\"const\":1.5}", IL_ERR_INVALID_ARG, "$.const");
  fails("{\"type\":\"string\",\"anyOf\":[{\"maxLength\":3}]}", IL_ERR_UNSUPPORTED, "'anyOf' with other constraining keywords");
  check("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null]}", L("\"a\"", "null"), L("\"b\""));
  return il_test_finish();
}
