/* tests/test_eval: perplexity, KL divergence and top-1 agreement (lab/eval).
 *
 * - Perplexity of builtin:tiny over a text equals a direct computation here: tokenize with BOS,
 *   windows of n_ctx with BOS first, each position's logits from a plain decode of the whole
 *   window, log-softmax in double, the second half scored (tokens n_ctx/2+1 .. n_ctx-1).
 * - A model against itself: KL 0 (mean, median, p99, max), top-1 agreement 100%, ratio 1.
 * - A q4_k_m copy against the f32 model: KL > 0 and small, agreement high.
 * - stories260K (fixture) on stories260K-samples.txt: the perplexity llama-perplexity reports
 *   for the same file and text (see docs/eval.md), within 0.1%. Skipped visibly when absent.
 * - Errors: a text shorter than 2 x ctx, a window longer than the context.
 */
#include <unistd.h>

#include "engine/engine.h"
#include "harness.h"
#include "lab/eval.h"
#include "memory/mem.h"
#include "model/quantize.h"

static il_engine *open_engine(const char *model, int ctx) {
  il_config cfg;
  il_config_defaults(&cfg);
  snprintf(cfg.model, sizeof cfg.model, "%s", model);
  cfg.ctx = ctx;
  cfg.threads = 2;
  il_engine *e = NULL;
  il_status st = il_engine_open(&cfg, &e);
  if (st != IL_OK) fprintf(stderr, "open %s: %s\n", model, il_error_detail());
  return e;
}

static const char *text =
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. All that glitters is not "
    "gold. Where there is smoke there is fire. The early bird catches the worm, and the second mouse gets "
    "the cheese. Actions speak louder than words; practice makes perfect.";

static double direct_ppl(il_engine *e, int n_ctx) {
  int32_t *tok = NULL;
  size_t n = 0;
  if (il_tokenize_alloc(il_engine_vocab(e), text, strlen(text), true, false, &tok, &n) != IL_OK) return -1;
  const int nv = il_engine_model(e)->hp.n_vocab, n_chunk = (int)n / n_ctx, first = n_ctx / 2;
  float *lg = malloc(sizeof(float) * (size_t)nv * (size_t)n_ctx);
  il_batch_entry *b = malloc(sizeof *b * (size_t)n_ctx);
  double nll = 0;
  long count = 0;
  for (int c = 0; c < n_chunk; c++) {
    for (int k = 0; k < n_ctx; k++) b[k] = (il_batch_entry){k == 0 ? il_vocab_bos(il_engine_vocab(e)) : tok[c * n_ctx + k], 0, k, true};
    if (il_engine_decode(e, b, n_ctx, lg) != IL_OK) return -1;
    for (int pos = first; pos < n_ctx - 1; pos++) {
      const float *row = lg + (size_t)pos * nv;
      double mx = row[0], s = 0;
      for (int i = 1; i < nv; i++) mx = row[i] > mx ? row[i] : mx;
      for (int i = 0; i < nv; i++) s += exp(row[i] - mx);
      nll -= row[tok[c * n_ctx + pos + 1]] - mx - log(s);
      count++;
    }
  }
  free(lg);
  free(b);
  il_mem_free(tok);
  return exp(nll / (double)count);
}

static void test_tiny(void) {
  il_engine *e = open_engine("builtin:tiny", 64);
  if (!e) {
    IL_CHECK(e != NULL);
    return;
  }
  il_eval_params p = {32, 0, NULL, NULL, NULL};
  il_eval_result r;
  IL_CHECK_OK(il_eval_text(e, NULL, text, &p, &r));
  const double want = direct_ppl(e, 32);
  printf("  builtin:tiny ctx 32: perplexity %.6f (direct %.6f), %d tokens, %d windows, %lld scored\n", r.perplexity,
         want, r.n_tokens, r.n_chunk, (long long)r.n_scored);
  IL_CHECK_NEAR(r.perplexity, want, want * 1e-6);
  IL_CHECK_INT(r.n_chunk, r.n_tokens / 32);
  IL_CHECK_INT(r.n_scored, (long long)r.n_chunk * (32 - 1 - 16));
  IL_CHECK(r.perplexity > 1 && r.perplexity < 2 * 512); /* a random model: near the vocabulary size */
  IL_CHECK(!r.has_ref);
  /* against itself */
  il_engine *e2 = open_engine("builtin:tiny", 64);
  IL_CHECK_OK(il_eval_text(e, e2, text, &p, &r));
  IL_CHECK(r.has_ref);
  IL_CHECK_NEAR(r.kl_mean, 0, 1e-12);
  IL_CHECK_NEAR(r.kl_max, 0, 1e-12);
  IL_CHECK_NEAR(r.kl_p99, 0, 1e-12);
  IL_CHECK_NEAR(r.top1, 1, 0);
  IL_CHECK_NEAR(r.ppl_ratio, 1, 1e-12);
  /* a q4_k_m copy against the f32 model */
  char path[512];
  snprintf(path, sizeof path, "%s/tiny-q4km.gguf", il_test_tmpdir());
  il_quant_params qp = {.rule = {IL_FTYPE_Q4_K_M, false, NULL, 0}, .n_threads = 2};
  il_quant_report qr;
  IL_CHECK_OK(il_quant_model("builtin:tiny", path, &qp, &qr));
  il_quant_report_free(&qr);
  il_engine *q = open_engine(path, 64);
  if (q) {
    IL_CHECK_OK(il_eval_text(q, e, text, &p, &r));
    printf("  q4_k_m vs f32: KL mean %.5f median %.5f p99 %.5f max %.5f, top-1 %.1f%%, ratio %.4f\n", r.kl_mean,
           r.kl_median, r.kl_p99, r.kl_max, 100 * r.top1, r.ppl_ratio);
    IL_CHECK(r.kl_mean > 0 && r.kl_mean < 0.1);
    IL_CHECK(r.kl_median <= r.kl_p99 && r.kl_p99 <= r.kl_max);
    IL_CHECK(r.top1 > 0.5);
    IL_CHECK(r.ppl_ratio > 0.8 && r.ppl_ratio < 1.25);
  }
  remove(path);
  /* errors */
  p.n_ctx = 256;
  IL_CHECK_INT(il_eval_text(e, NULL, text, &p, &r), IL_ERR_RANGE);
  p.n_ctx = 64;
  IL_CHECK_INT(il_eval_text(e, NULL, "short text", &p, &r), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "needs at least 128");
  il_engine_free(q);
  il_engine_free(e2);
  il_engine_free(e);
}

/* llama-perplexity (llama.cpp via llama-cpp-python 0.3.36's vendored tree, see docs/eval.md)
 * on stories260K-f32.gguf and stories260K-samples.txt, -c 128: */
#define IL_LLAMA_PPL_STORIES 2.9800 /* "Final estimate: PPL = 2.9800 +/- 0.09273" */

static void test_stories(void) {
  const char *m = il_test_fixture("models/stories260K-f32.gguf");
  if (!m) {
    printf("SKIP (part): ../shared/fixtures/models/stories260K-f32.gguf absent: fixture perplexity not checked\n");
    return;
  }
  char model[1024], txt[1024];
  snprintf(model, sizeof model, "%s", m);
  const char *t = il_test_fixture("models/stories260K-samples.txt");
  if (!t) {
    printf("SKIP (part): stories260K-samples.txt absent\n");
    return;
  }
  snprintf(txt, sizeof txt, "%s", t);
  char *body = il_test_read_file(txt, NULL);
  il_engine *e = open_engine(model, 128);
  if (!e || !body) {
    IL_CHECK(e && body);
    free(body);
    il_engine_free(e);
    return;
  }
  il_eval_params p = {128, 0, NULL, NULL, NULL};
  il_eval_result r;
  IL_CHECK_OK(il_eval_text(e, NULL, body, &p, &r));
  printf("  stories260K: perplexity %.4f (llama-perplexity %.4f), %d tokens, %d windows\n", r.perplexity,
         IL_LLAMA_PPL_STORIES, r.n_tokens, r.n_chunk);
  IL_CHECK_NEAR(r.perplexity, IL_LLAMA_PPL_STORIES, IL_LLAMA_PPL_STORIES * 1e-3);
  free(body);
  il_engine_free(e);
}

static void test_cli(void) {
  const char *cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) {
    printf("SKIP (part): IL_CLI not set: CLI checks not run\n");
    return;
  }
  char path[512], cmd[2048], out[8192];
  snprintf(path, sizeof path, "%s/text.txt", il_test_tmpdir());
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s eval -m builtin:tiny --text %s --ctx 32 --ref builtin:tiny --json 2>/dev/null", cli, path);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "{\n  \"model\"") == out);
  IL_CHECK_CONTAINS(out, "\"perplexity\": ");
  IL_CHECK_CONTAINS(out, "\"top1_agreement\": 1");
  snprintf(cmd, sizeof cmd, "%s eval -m builtin:tiny --text %s --ctx 128 2>/dev/null", cli, path);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 64);
  snprintf(cmd, sizeof cmd, "%s eval -m builtin:tiny 2>/dev/null", cli);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 64);
  snprintf(cmd, sizeof cmd, "%s eval -m builtin:tiny --text /nonexistent/x.txt 2>/dev/null", cli);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 66);
  snprintf(cmd, sizeof cmd, "%s eval --help", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  remove(path);
}

int main(void) {
  test_tiny();
  test_stories();
  test_cli();
  return il_test_finish();
}
