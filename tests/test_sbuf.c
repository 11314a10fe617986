/* tests/test_sbuf: the server's JSON text writer and UTF-8 helpers (server/sbuf), and the
 * per-request byte budgets with the JSON arena (server/budget).
 *
 * Escapes as JSON requires and turns bytes that are not UTF-8 into U+FFFD, so every string it
 * writes is valid; cuts at character boundaries; and under an allocation that fails at every
 * possible point, a buffer either holds the whole text or says oom: never a shorter text that
 * looks complete (the partial 200 a response built without checks sent under memory pressure).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "memory/mem.h"
#include "server/budget.h"
#include "server/sbuf.h"

static void expect_str(const char *in, size_t n, const char *want) {
  il_sbuf b = {0};
  il_sbuf_json_str(&b, in, n);
  IL_CHECK(!b.oom);
  IL_CHECK_STR(b.p, want);
  IL_CHECK_INT(il_utf8_check(b.p, b.len), b.len);
  il_sbuf_free(&b);
}

static void test_escape(void) {
  expect_str("", 0, "\"\"");
  expect_str("plain", 5, "\"plain\"");
  expect_str("a\"b\\c\n\r\t\b\f", 10, "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\"");
  expect_str("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
  expect_str("nul\0x", 5, "\"nul\\u0000x\"");
  expect_str("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""); /* é € 😀 */
  expect_str("\xff", 1, "\"\xef\xbf\xbd\"");                   /* not UTF-8 */
  expect_str("a\xc3", 2, "\"a\xef\xbf\xbd\"");                /* half a character */
  expect_str("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* a surrogate */
  expect_str("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");  /* overlong */
  il_sbuf b = {0};
  il_sbuf_json_float(&b, -0.5f);
  il_sbuf_puts(&b, ",");
  il_sbuf_json_float(&b, -1.0f / 0.0f);
  il_sbuf_puts(&b, ",");
  il_sbuf_json_float(&b, 0.1f);
  IL_CHECK_STR(b.p, "-0.5,-9999.0,0.1");
  il_sbuf_free(&b);
}

static void test_cut(void) {
  const char *e3 = "\xc3\xa9\xc3\xa9\xc3\xa9"; /* ééé */
  for (size_t n = 0; n <= 6; n++) IL_CHECK_INT(il_utf8_cut(e3, n), n & ~(size_t)1);
  IL_CHECK_INT(il_utf8_cut("ab\xe2\x82", 4), 2);
  IL_CHECK_INT(il_utf8_cut("ab\xe2\x82\xac", 5), 5);
  IL_CHECK_INT(il_utf8_cut("ab\xf0\x9f\x98", 5), 2);
  IL_CHECK_INT(il_utf8_cut("ab", 2), 2);
  char long_e[601], buf[64];
  for (int i = 0; i < 300; i++) memcpy(long_e + 2 * i, "\xc3\xa9", 2);
  long_e[600] = 0;
  il_utf8_clip(long_e, buf, sizeof buf);
  IL_CHECK(strlen(buf) < sizeof buf);
  IL_CHECK(!strcmp(buf + strlen(buf) - 3, "..."));
  IL_CHECK_INT(il_utf8_check(buf, strlen(buf)), strlen(buf));
  IL_CHECK_STR(il_utf8_clip("short", buf, sizeof buf), "short");
}

/* A long JSON document written with every allocation n = 1, 2, ... failing in turn. */
static void write_doc(il_sbuf *b) {
  il_sbuf_puts(b, "{\"tokens\":[");
  for (int i = 0; i < 3000; i++) il_sbuf_printf(b, i ? ",%d" : "%d", i);
  il_sbuf_puts(b, "],\"pieces\":[");
  for (int i = 0; i < 3000; i++) {
    if (i) il_sbuf_puts(b, ",");
    il_sbuf_json_str(b, "piece\xff\n", 7);
  }
  il_sbuf_puts(b, "]}");
}

static void test_oom(void) {
  il_sbuf whole = {0};
  write_doc(&whole);
  IL_CHECK(!whole.oom);
  int failed = 0, complete = 0, bad = 0;
  for (long n = 1; n < 64; n++) {
    il_sbuf b = {0};
    il_mem_fail_after(n);
    write_doc(&b);
    il_mem_fail_after(0);
    il_error_clear();
    if (b.oom) failed++;
    else if (b.len == whole.len && !memcmp(b.p, whole.p, b.len)) complete++;
    else bad++;
    il_sbuf_free(&b);
  }
  IL_CHECK(failed > 5);    /* the document needs several growths: early failures were seen */
  IL_CHECK(complete > 0);  /* and late ones never touched it */
  IL_CHECK_INT(bad, 0);    /* never a shorter document without oom */
  printf("fault injection: %d failed (oom set), %d complete, %d partial\n", failed, complete, bad);
  il_sbuf_free(&whole);
}

static void test_budget(void) {
  size_t held0 = 0, held = 0;
  uint64_t over0 = 0, over = 0;
  il_budget_totals(&held0, NULL, &over0);
  il_budget *b = il_budget_new(100000);
  IL_CHECK(b != NULL);
  IL_CHECK(il_budget_take(b, 60000));
  IL_CHECK(!il_budget_take(b, 50000)); /* would pass the limit: refused, nothing charged */
  IL_CHECK(il_budget_over(b));
  IL_CHECK_INT(il_budget_used(b), 60000);
  il_budget_totals(&held, NULL, &over);
  IL_CHECK_INT(held - held0, 60000);
  IL_CHECK_INT(over - over0, 1);
  il_budget_give(b, 60000);
  /* a buffer charges its capacity and gives it back */
  il_sbuf sb = {.budget = b};
  for (int i = 0; i < 1000; i++) il_sbuf_puts(&sb, "0123456789");
  IL_CHECK(!sb.oom);
  IL_CHECK(il_budget_used(b) >= sb.len && il_budget_used(b) <= 2 * sb.len + 4096);
  for (int i = 0; i < 20000 && !sb.oom; i++) il_sbuf_puts(&sb, "0123456789");
  IL_CHECK(sb.oom);                               /* stopped at the budget */
  IL_CHECK(il_budget_used(b) <= 100000);
  il_sbuf_free(&sb);
  IL_CHECK_INT(il_budget_used(b), 0);
  il_budget_unref(b);
  il_budget_totals(&held, NULL, NULL);
  IL_CHECK_INT(held, held0);

  /* the arena: small blocks share chunks, a scope's end frees them, its budget bounds it */
  il_budget *a = il_budget_new(1 << 20);
  il_mem_stats m0, m1;
  il_mem_stats_get(&m0);
  il_jarena ar;
  il_jarena_begin(&ar, a);
  int got = 0;
  for (int i = 0; i < 10000; i++) {
    char *p = il_budget_json_malloc(24);
    if (!p) break;
    memset(p, 0x5a, 24);
    il_budget_json_free(p); /* a no-op inside a scope */
    got++;
  }
  IL_CHECK_INT(got, 10000);
  /* 10000 x 24-byte blocks: about 320 KB in 64 KiB chunks, where memory/ would take 128 each */
  IL_CHECK(il_budget_used(a) < 400000);
  IL_CHECK(il_budget_used(a) > 320000);
  void *big = il_budget_json_malloc(200000); /* a chunk of its own */
  IL_CHECK(big != NULL);
  void *none = NULL;
  for (int i = 0; i < 10 && (none = il_budget_json_malloc(200000)); i++) {
  }
  IL_CHECK(none == NULL); /* the budget ran out: jansson sees a failed malloc */
  IL_CHECK(il_budget_over(a));
  il_jarena_end(&ar);
  IL_CHECK_INT(il_budget_used(a), 0);
  il_mem_stats_get(&m1);
  IL_CHECK_INT(m1.current[IL_MEM_SERVER] + m1.current[IL_MEM_OTHER], m0.current[IL_MEM_SERVER] + m0.current[IL_MEM_OTHER]);
  /* outside a scope: memory/, uncharged, freed one by one */
  char *p = il_budget_json_malloc(10);
  IL_CHECK(p != NULL);
  memcpy(p, "123456789", 10);
  il_budget_json_free(p);
  il_mem_stats_get(&m1);
  IL_CHECK_INT(m1.current[IL_MEM_SERVER] + m1.current[IL_MEM_OTHER], m0.current[IL_MEM_SERVER] + m0.current[IL_MEM_OTHER]);
  il_budget_unref(a);
}

int main(void) {
  test_budget();
  test_escape();
  test_cut();
  test_oom();
  return il_test_finish();
}
