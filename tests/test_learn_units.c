/* tests/test_learn_units: the pieces of `inferlab learn` below the lessons.
 *
 * - texts: every concept has both languages, each with every section in order, its language's
 *   headings and three questions with answers; texts missing a section, with another language's
 *   heading or with two questions are refused, naming the file and the section;
 * - finding a concept by number, file name, English and German name (umlauts written either
 *   way), unique prefix; ambiguous prefixes and unknown names are errors;
 * - the language from LC_ALL, LC_MESSAGES and LANG;
 * - lab/allocpat: the two patterns' figures against values worked out by hand from the
 *   allocator's rules (ten 2 MiB blocks in one 20 MiB segment, five freed: 10 MiB free, largest
 *   2 MiB, fragmentation 0.8), the long request's outcome, a device without an allocator;
 * - lab/bench's new figures: the attention kernel the engine used and the host->device bytes,
 *   checked against the config and the model's own weight bytes; no_prediction skips the
 *   planner's prediction on sim.
 */
#include <string.h>

#include "harness.h"
#include "lab/allocpat.h"
#include "lab/bench.h"
#include "lab/learn.h"

static void test_texts(void) {
  for (int i = 0; i < il_learn_count(); i++) {
    const il_learn_concept *c = il_learn_at(i);
    IL_CHECK_INT(c->number, i + 1);
    for (int l = 0; l < IL_LEARN_LANGS; l++) {
      il_learn_text t;
      il_status st = il_learn_text_get(c, (il_learn_lang)l, &t);
      if (st != IL_OK) fprintf(stderr, "%s\n", il_error_detail());
      IL_CHECK_OK(st);
      if (st != IL_OK) continue;
      IL_CHECK(t.name && *t.name && t.line && *t.line && *t.what && *t.where && *t.failure && *t.check);
      IL_CHECK_INT(t.n_quiz, 3);
      for (int q = 0; q < 3; q++) IL_CHECK(t.question[q] && *t.question[q] && t.answer[q] && *t.answer[q]);
      il_learn_text_free(&t);
    }
  }
  const char *good = "# Name\n\nOne line.\n\n## What it is\na\n\n## Where it sits\nb\n\n## Typical failure\nc\n\n"
                     "## How to check\nd\n\n## Quick check\nQ: 1?\nA: one\nQ: 2?\nA: two\nQ: 3?\nA: three\n";
  il_learn_text t;
  IL_CHECK_OK(il_learn_text_parse(good, IL_LEARN_EN, "good.md", &t));
  IL_CHECK_STR(t.name, "Name");
  IL_CHECK_STR(t.line, "One line.");
  IL_CHECK_STR(t.where, "b");
  IL_CHECK_STR(t.answer[2], "three");
  il_learn_text_free(&t);
  /* the same text is not German: its headings are the English ones */
  IL_CHECK_INT(il_learn_text_parse(good, IL_LEARN_DE, "good.md", &t), IL_ERR_FORMAT);
  IL_CHECK_CONTAINS(il_error_detail(), "Was es ist");
  const char *no_failure = "# N\n\nL.\n\n## What it is\na\n\n## Where it sits\nb\n\n## How to check\nd\n\n## Quick check\n"
                           "Q: 1?\nA: 1\nQ: 2?\nA: 2\nQ: 3?\nA: 3\n";
  IL_CHECK_INT(il_learn_text_parse(no_failure, IL_LEARN_EN, "x.md", &t), IL_ERR_FORMAT);
  IL_CHECK(strstr(il_error_detail(), "x.md") && strstr(il_error_detail(), "Typical failure"));
  const char *two_q = "# N\n\nL.\n\n## What it is\na\n\n## Where it sits\nb\n\n## Typical failure\nc\n\n## How to check\nd\n\n"
                      "## Quick check\nQ: 1?\nA: 1\nQ: 2?\nA: 2\n";
  IL_CHECK_INT(il_learn_text_parse(two_q, IL_LEARN_EN, "y.md", &t), IL_ERR_FORMAT);
  const char *empty = "# N\n\nL.\n\n## What it is\n\n## Where it sits\nb\n\n## Typical failure\nc\n\n## How to check\nd\n\n"
                      "## Quick check\nQ: 1?\nA: 1\nQ: 2?\nA: 2\nQ: 3?\nA: 3\n";
  IL_CHECK_INT(il_learn_text_parse(empty, IL_LEARN_EN, "z.md", &t), IL_ERR_FORMAT);
  const char *no_answer = "# N\n\nL.\n\n## What it is\na\n\n## Where it sits\nb\n\n## Typical failure\nc\n\n## How to check\nd\n\n"
                          "## Quick check\nQ: 1?\nQ: 2?\nA: 2\nQ: 3?\nA: 3\n";
  IL_CHECK_INT(il_learn_text_parse(no_answer, IL_LEARN_EN, "w.md", &t), IL_ERR_FORMAT);
}

static int find_number(const char *q) {
  const il_learn_concept *c = NULL;
  il_status st = il_learn_find(q, &c);
  return st == IL_OK ? c->number : st == IL_ERR_INVALID_ARG ? -1 : 0;
}

static void test_find(void) {
  IL_CHECK_INT(find_number("17"), 17);
  IL_CHECK_INT(find_number("attention-slicing"), 17);
  IL_CHECK_INT(find_number("Attention slicing"), 17);
  IL_CHECK_INT(find_number("17-attention-slicing"), 17);
  IL_CHECK_INT(find_number("Attention in Scheiben"), 17);
  IL_CHECK_INT(find_number("Batchgröße"), 29);
  IL_CHECK_INT(find_number("batchgroesse"), 29);
  IL_CHECK_INT(find_number("BATCH_SIZE"), 29);
  IL_CHECK_INT(find_number("Durchsatz"), 31);
  IL_CHECK_INT(find_number("quantisierungs"), 27); /* a unique prefix of a German name */
  IL_CHECK_INT(find_number("flash"), 19);
  IL_CHECK_INT(find_number("cuda"), 2); /* exact beats prefix (cuda-toolkit, cuda-driver ...) */
  IL_CHECK_INT(find_number("fp"), -1);  /* fp32, fp16 */
  IL_CHECK(strstr(il_error_detail(), "fp32") && strstr(il_error_detail(), "fp16"));
  IL_CHECK_INT(find_number("gpu"), -1);
  IL_CHECK_INT(find_number("33"), 0);
  IL_CHECK_INT(find_number("0"), 0);
  IL_CHECK_INT(find_number("warp-specialization"), 0);
  IL_CHECK_INT(find_number("--"), 0);
}

static void test_lang(void) {
  unsetenv("LC_ALL");
  unsetenv("LC_MESSAGES");
  unsetenv("LANG");
  IL_CHECK_INT(il_learn_lang_from_env(), IL_LEARN_EN);
  setenv("LANG", "de_DE.UTF-8", 1);
  IL_CHECK_INT(il_learn_lang_from_env(), IL_LEARN_DE);
  setenv("LC_MESSAGES", "en_US.UTF-8", 1);
  IL_CHECK_INT(il_learn_lang_from_env(), IL_LEARN_EN);
  setenv("LC_ALL", "de_AT", 1);
  IL_CHECK_INT(il_learn_lang_from_env(), IL_LEARN_DE);
  unsetenv("LC_ALL");
  unsetenv("LC_MESSAGES");
  unsetenv("LANG");
  il_learn_lang l;
  IL_CHECK(il_learn_lang_parse("de", &l) && l == IL_LEARN_DE);
  IL_CHECK(!il_learn_lang_parse("fr", &l));
}

static void test_allocpat(void) {
  const size_t mib = (size_t)1 << 20;
  il_allocpat_result s, f;
  IL_CHECK_OK(il_allocpat_run("sim:32MiB", 0, IL_ALLOCPAT_STEADY, &s));
  IL_CHECK_OK(il_allocpat_run("sim:32MiB", 0, IL_ALLOCPAT_FRAGMENTING, &f));
  /* ten 2 MiB buffers fill one 20 MiB large-pool segment (requests of 1-10 MiB get 20 MiB) */
  IL_CHECK_INT(s.capacity, 32 * mib);
  IL_CHECK_INT(s.reserved, 20 * mib);
  IL_CHECK_INT(f.reserved, 20 * mib);
  IL_CHECK_INT(s.n_freed, 10);
  IL_CHECK_INT(f.n_freed, 5);
  /* steady: everything merged back into one free block */
  IL_CHECK_INT(s.allocated, 0);
  IL_CHECK_INT(s.largest_free, 20 * mib);
  IL_CHECK_NEAR(s.fragmentation, 0.0, 1e-12);
  /* fragmenting: five 2 MiB holes between five buffers: 1 - 2/10 */
  IL_CHECK_INT(f.allocated, 10 * mib);
  IL_CHECK_INT(f.free_bytes, 10 * mib);
  IL_CHECK_INT(f.largest_free, 2 * mib);
  IL_CHECK_NEAR(f.fragmentation, 0.8, 1e-12);
  /* the long request: room outside the segment (12 MiB) + 2 MiB */
  IL_CHECK_INT(s.big, 14 * mib);
  IL_CHECK(s.big_ok);
  IL_CHECK(!f.big_ok);
  IL_CHECK(f.big_fragmentation);
  IL_CHECK_CONTAINS(f.big_error, "fragmentation");
  IL_CHECK(s.svg && strstr(s.svg, "<svg") && f.svg && strstr(f.svg, "</svg>"));
  il_allocpat_result_free(&s);
  il_allocpat_result_free(&f);
  /* capped at 32 MiB, a larger device behaves the same */
  IL_CHECK_OK(il_allocpat_run("sim:1GiB", 32 * mib, IL_ALLOCPAT_FRAGMENTING, &f));
  IL_CHECK_INT(f.capacity, 32 * mib);
  IL_CHECK(!f.big_ok);
  il_allocpat_result_free(&f);
  IL_CHECK_INT(il_allocpat_run("cpu", 0, IL_ALLOCPAT_STEADY, &s), IL_ERR_UNSUPPORTED);
  IL_CHECK_INT(il_allocpat_run("sim:16MiB", 0, IL_ALLOCPAT_STEADY, &s), IL_ERR_RANGE);
  il_allocpat_kind k;
  IL_CHECK(il_allocpat_parse("fragmenting", &k) && k == IL_ALLOCPAT_FRAGMENTING);
  IL_CHECK(!il_allocpat_parse("random", &k));
}

static void test_bench_figures(void) {
  il_bench_options o;
  il_bench_options_default(&o);
  o.reps = 1;
  o.warmup = 0;
  const char *devs[2] = {"sim:64MiB", "cpu"};
  for (int d = 0; d < 2; d++) {
    il_sweep_point p;
    il_sweep_point_defaults(&p);
    p.prompt = 16;
    p.gen = 4;
    IL_CHECK_OK(il_sweep_set(&p, "device", devs[d], "test"));
    IL_CHECK_OK(il_sweep_set(&p, "attn", "sliced", "test"));
    il_bench_result r;
    memset(&r, 0, sizeof r);
    IL_CHECK_OK(il_bench_run(&p, &o, &r));
    IL_CHECK_STR(r.attn, "sliced");
    if (d == 0) {
      /* the weights go up once; then every pass uploads its batch (16 bytes per token) */
      IL_CHECK(r.transfers.upload_bytes >= r.weight_bytes);
      IL_CHECK(r.transfers.upload_bytes <= r.weight_bytes + ((uint64_t)1 << 20));
      IL_CHECK(r.transfers.n_uploads >= 1 + (uint64_t)p.gen);
      IL_CHECK(r.transfers.download_bytes > 0);
    } else {
      IL_CHECK_INT(r.transfers.upload_bytes, 0);
      IL_CHECK_INT(r.transfers.n_uploads, 0);
    }
    il_bench_result_free(&r);
  }
  /* the planner's prediction on sim, and without it when the caller plans itself */
  for (int k = 0; k < 2; k++) {
    il_sweep_point p;
    il_sweep_point_defaults(&p);
    p.prompt = 8;
    p.gen = 1;
    IL_CHECK_OK(il_sweep_set(&p, "device", "sim:64MiB", "test"));
    il_bench_options ok = o;
    ok.no_prediction = k == 1;
    il_bench_result r;
    memset(&r, 0, sizeof r);
    IL_CHECK_OK(il_bench_run(&p, &ok, &r));
    if (k == 0) IL_CHECK(r.predicted_min > 0 && r.predicted_reserved >= r.predicted_min);
    else IL_CHECK(r.predicted_min == 0 && r.predicted_reserved == 0);
    il_bench_result_free(&r);
  }
  /* auto says which kernel it took */
  il_sweep_point p;
  il_sweep_point_defaults(&p);
  p.prompt = 8;
  p.gen = 1;
  il_bench_result r;
  memset(&r, 0, sizeof r);
  IL_CHECK_OK(il_bench_run(&p, &o, &r));
  IL_CHECK_STR(r.attn, "flash");
  il_bench_result_free(&r);
}

int main(void) {
  test_texts();
  test_find();
  test_lang();
  test_allocpat();
  test_bench_figures();
  return il_test_finish();
}
