/* tests/test_spec: speculative decoding (engine/spec) on builtin:tiny, cpu and sim.
 *
 * - greedy: the output equals plain decoding's token for token, with the draft the same model
 *   (every drafted token accepted), a derived one (tiny-2l) and an unrelated one (tiny-other,
 *   almost none accepted), for fixed and adaptive draft lengths, with and without a repetition
 *   penalty; the counts add up (each pass emits its accepted tokens and one more);
 * - il_sampler_dist is the distribution il_sampler_sample draws from (chi-square over draws);
 * - il_spec_accept's output follows p whatever q proposed (chi-square on a 6-token vocabulary);
 * - temperature > 0 through the engines: the first generated token over many seeds follows the
 *   target's filtered distribution (top-k 6), with the unrelated draft proposing it;
 * - a draft with another vocabulary is refused, naming both models.
 * All seeds are fixed: the outcome is the same on every run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/spec.h"
#include "harness.h"
#include "memory/mem.h"

static il_engine *open_engine(const char *model, const char *device, bool logits_all) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "%s", model);
  snprintf(c.device, sizeof c.device, "%s", device);
  c.ctx = 256;
  c.threads = 2;
  c.logits_all = logits_all;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

typedef struct {
  int32_t tok[512];
  int32_t n;
} collect;

static bool collect_fn(void *ud, int32_t token, const char *text, size_t len) {
  (void)text, (void)len;
  collect *c = ud;
  if (token >= 0 && c->n < 512) c->tok[c->n++] = token;
  return true;
}

static const int32_t PROMPT[] = {1, 300, 301, 302, 40, 77};
#define N_PROMPT 6

static void greedy_case(const char *device) {
  il_engine *plain = open_engine("builtin:tiny", device, false);
  il_engine *t = open_engine("builtin:tiny", device, true);
  const char *drafts[] = {"builtin:tiny", "builtin:tiny-2l", "builtin:tiny-other"};
  for (int pen = 0; pen < 2; pen++) {
    il_request_params p = il_request_default_params();
    p.sampling.temp = 0;
    p.sampling.repeat_penalty = pen ? 1.3f : 1.0f;
    p.n_predict = 100;
    p.ignore_eos = true;
    collect ref = {0};
    il_gen_stats gs;
    IL_CHECK_OK(il_engine_generate(plain, PROMPT, N_PROMPT, &p, collect_fn, &ref, &gs));
    IL_CHECK_INT(ref.n, 100);
    for (int d = 0; d < 3; d++) {
      il_engine *de = open_engine(drafts[d], device, false);
      const int32_t lens[] = {0, 3, 1, 16};
      const int n_lens = strcmp(device, "cpu") ? 2 : 4; /* sim: fewer (it is slower) */
      for (int l = 0; l < n_lens; l++) {
        collect got = {0};
        il_spec_stats ss;
        IL_CHECK_OK(il_spec_generate(t, de, PROMPT, N_PROMPT, &p, lens[l], collect_fn, &got, &gs, &ss));
        IL_CHECK_INT(got.n, ref.n);
        IL_CHECK(!memcmp(got.tok, ref.tok, sizeof(int32_t) * (size_t)ref.n));
        IL_CHECK_INT(gs.n_gen, 100);
        /* every pass emits its accepted tokens and one more (none cut: n_predict bounds k) */
        IL_CHECK_INT(ss.accepted + ss.steps, 100);
        IL_CHECK(ss.accepted <= ss.drafted);
        if (d == 0) IL_CHECK_INT(ss.accepted, ss.drafted);
        if (d == 2) IL_CHECK(ss.accepted * 5 < ss.drafted);
        if (lens[l] == 1) IL_CHECK(ss.drafted <= ss.steps);
      }
      il_engine_free(de);
    }
  }
  il_engine_free(t);
  il_engine_free(plain);
}

/* Pearson's statistic of counts[n] against probabilities prob[n] (total draws N); cells with
 * prob 0 must be empty. */
static double chi2(const int64_t *counts, const double *prob, int n, int64_t N, int *df) {
  double x = 0;
  *df = -1;
  for (int i = 0; i < n; i++) {
    if (prob[i] <= 0) {
      IL_CHECK_INT(counts[i], 0);
      continue;
    }
    const double e = prob[i] * (double)N;
    x += (counts[i] - e) * (counts[i] - e) / e;
    (*df)++;
  }
  return x;
}

/* Upper 0.1% points of chi-square by degrees of freedom. */
static double chi2_crit(int df) {
  static const double c[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};
  IL_CHECK(df >= 1 && df <= 10);
  return c[df];
}

static void dist_matches_sample(void) {
  const int32_t nv = 10;
  float logits[10] = {0.3f, 1.2f, -0.5f, 2.0f, 0.0f, 1.1f, -2.0f, 0.7f, 1.9f, -0.1f};
  il_sampler_params sp = {.temp = 0.9f, .top_k = 7, .top_p = 0.97f, .min_p = 0.02f, .repeat_penalty = 1.0f,
                          .repeat_last_n = 64, .seed = 7};
  il_sampler *s;
  IL_CHECK_OK(il_sampler_new(&sp, nv, &s));
  float prob[10];
  il_sampler_dist(s, logits, prob);
  double pd[10], sum = 0;
  int nz = 0;
  for (int i = 0; i < nv; i++) pd[i] = prob[i], sum += prob[i], nz += prob[i] > 0;
  IL_CHECK_NEAR(sum, 1.0, 1e-5);
  IL_CHECK(nz >= 3 && nz <= 7);
  int64_t counts[10] = {0};
  const int64_t N = 50000;
  for (int64_t i = 0; i < N; i++) counts[il_sampler_sample(s, logits)]++;
  int df;
  double x = chi2(counts, pd, nv, N, &df);
  printf("il_sampler_dist vs il_sampler_sample: chi2 %.2f, df %d (0.1%% point %.2f)\n", x, df, chi2_crit(df));
  IL_CHECK(x < chi2_crit(df));
  sp.temp = 0;
  il_sampler *g;
  IL_CHECK_OK(il_sampler_new(&sp, nv, &g));
  il_sampler_dist(g, logits, prob);
  IL_CHECK(prob[3] == 1.0f);
  il_sampler_free(g);
  il_sampler_free(s);
}

static void accept_rule(void) {
  const int32_t nv = 6;
  const float p[6] = {0.05f, 0.30f, 0.10f, 0.25f, 0.00f, 0.30f};
  const float q[6] = {0.40f, 0.05f, 0.10f, 0.05f, 0.30f, 0.10f};
  il_sampler_params sp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 3};
  il_sampler *s;
  IL_CHECK_OK(il_sampler_new(&sp, nv, &s));
  float scratch[6];
  int64_t counts[6] = {0}, acc = 0;
  const int64_t N = 200000;
  for (int64_t i = 0; i < N; i++) {
    const int32_t d = il_sampler_draw(s, q);
    int32_t tok;
    acc += il_spec_accept(s, nv, p, q, d, scratch, &tok);
    counts[tok]++;
  }
  double pd[6];
  double want_acc = 0; /* sum of min(p, q) */
  for (int i = 0; i < nv; i++) pd[i] = p[i], want_acc += p[i] < q[i] ? p[i] : q[i];
  int df;
  double x = chi2(counts, pd, nv, N, &df);
  printf("il_spec_accept: chi2 %.2f, df %d (0.1%% point %.2f); acceptance %.4f (sum min(p, q) %.4f)\n", x, df,
         chi2_crit(df), (double)acc / N, want_acc);
  IL_CHECK(x < chi2_crit(df));
  IL_CHECK_NEAR((double)acc / N, want_acc, 0.01);
  il_sampler_free(s);
}

/* The first generated token at temperature 1, top-k 6, over many seeds, with one drafted
 * token from the unrelated draft, against the target's filtered distribution at that place. */
static void sampled_engine(const char *device) {
  il_engine *t = open_engine("builtin:tiny", device, true);
  il_engine *de = open_engine("builtin:tiny-other", device, false);
  const int32_t nv = il_engine_model(t)->hp.n_vocab;
  il_request_params p = il_request_default_params();
  p.sampling.temp = 1.0f;
  p.sampling.top_k = 6;
  p.sampling.top_p = 1.0f;
  p.sampling.min_p = 0;
  p.n_predict = 2; /* the first step drafts one token: the first output token is judged */
  p.ignore_eos = true;
  float *logits = il_mem_alloc(IL_MEM_OTHER, sizeof(float) * (size_t)nv * N_PROMPT, "test logits");
  float *prob = il_mem_alloc(IL_MEM_OTHER, sizeof(float) * (size_t)nv, "test prob");
  double *pd = il_mem_alloc(IL_MEM_OTHER, sizeof(double) * (size_t)nv, "test prob");
  int64_t *counts = il_mem_calloc(IL_MEM_OTHER, sizeof(int64_t) * (size_t)nv, "test counts");
  IL_CHECK(logits && prob && pd && counts);
  il_batch_entry b[N_PROMPT];
  IL_CHECK_OK(il_engine_seq_remove(t, 0));
  for (int i = 0; i < N_PROMPT; i++) b[i] = (il_batch_entry){PROMPT[i], 0, i, true};
  IL_CHECK_OK(il_engine_decode(t, b, N_PROMPT, logits));
  il_sampler *s;
  IL_CHECK_OK(il_sampler_new(&p.sampling, nv, &s));
  il_sampler_dist(s, logits + (size_t)(N_PROMPT - 1) * nv, prob);
  il_sampler_free(s);
  for (int i = 0; i < nv; i++) pd[i] = prob[i];
  const int64_t N = strcmp(device, "cpu") ? 600 : 1500;
  int64_t drafted = 0, accepted = 0;
  for (int64_t i = 0; i < N; i++) {
    /* hashed: consecutive seeds of the sampler's LCG would draw evenly spaced values */
    uint64_t h = (uint64_t)i + 1;
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
    p.sampling.seed = h ^ (h >> 29);
    collect got = {0};
    il_gen_stats gs;
    il_spec_stats ss;
    IL_CHECK_OK(il_spec_generate(t, de, PROMPT, N_PROMPT, &p, 1, collect_fn, &got, &gs, &ss));
    IL_CHECK_INT(got.n, 2);
    counts[got.tok[0]]++;
    drafted += ss.drafted, accepted += ss.accepted;
  }
  int df;
  double x = chi2(counts, pd, nv, N, &df);
  printf("%s: first sampled token over %lld seeds: chi2 %.2f, df %d (0.1%% point %.2f); %lld of %lld drafts accepted\n",
         device, (long long)N, x, df, chi2_crit(df), (long long)accepted, (long long)drafted);
  IL_CHECK(x < chi2_crit(df));
  IL_CHECK(drafted >= N); /* the judged token was drafted every time */
  IL_CHECK(accepted > 0 && accepted < drafted);
  il_mem_free(logits);
  il_mem_free(prob);
  il_mem_free(pd);
  il_mem_free(counts);
  il_engine_free(de);
  il_engine_free(t);
}

static void vocab_mismatch(void) {
  il_engine *t = open_engine("builtin:tiny", "cpu", true);
  il_engine *de = open_engine("builtin:tiny", "cpu", false);
  IL_CHECK_OK(il_spec_check_vocab(t, de));
  il_engine_free(de);
  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "builtin:1b-2l");
  c.ctx = 64;
  c.threads = 2;
  il_engine *big = NULL;
  if (il_engine_open(&c, &big) != IL_OK) {
    printf("builtin:1b-2l did not open here (%s): mismatch case skipped\n", il_error_detail());
    il_engine_free(t);
    return;
  }
  il_status st = il_spec_check_vocab(t, big);
  IL_CHECK_INT(st, IL_ERR_INVALID_ARG);
  IL_CHECK(strstr(il_error_detail(), "builtin:1b-2l") && strstr(il_error_detail(), "builtin:tiny"));
  il_engine_free(big);
  il_engine_free(t);
}

/* `inferlab run`: the same text with and without a draft; the summary's counts agree with the
 * generated tokens (accepted + passes) and its percentage with the counts; the exit codes. */
static void cli(void) {
  const char *bin = getenv("IL_CLI");
  if (!bin) {
    printf("IL_CLI not set: the command-line case is skipped\n");
    return;
  }
  static char plain[8192], spec[8192], err[8192];
  const char *args = "run -m builtin:tiny -p 'Once upon a time' -n 40 --temp 0 -t 2";
  IL_CHECK_INT(il_test_runf(plain, sizeof plain, "%s %s 2>/dev/null", bin, args), 0);
  IL_CHECK_INT(il_test_runf(spec, sizeof spec, "%s %s --draft-model builtin:tiny-2l 2>/dev/null", bin, args), 0);
  IL_CHECK_STR(spec, plain);
  IL_CHECK_INT(il_test_runf(err, sizeof err, "%s %s --draft-model builtin:tiny-2l --draft 3 2>&1 >/dev/null", bin, args), 0);
  const char *line = strstr(err, "speculative: draft builtin:tiny-2l, length fixed");
  IL_CHECK(line != NULL);
  long long drafted = -1, accepted = -1, passes = -1;
  double pct = -1;
  int gen = -1;
  if (line) {
    const char *semi = strchr(line, ';');
    IL_CHECK(semi && sscanf(semi, "; %lld drafted, %lld accepted (%lf%%); %lld target passes for %d tokens", &drafted,
                            &accepted, &pct, &passes, &gen) == 5);
  }
  IL_CHECK_INT(gen, 40);
  IL_CHECK_INT(accepted + passes, 40);
  IL_CHECK(drafted >= accepted && drafted > 0);
  IL_CHECK_NEAR(pct, drafted > 0 ? 100.0 * (double)accepted / (double)drafted : -1, 0.051);
  IL_CHECK_INT(il_test_runf(err, sizeof err, "%s run -m builtin:tiny -n 2 --draft-model builtin:1b-2l 2>&1", bin), 64);
  IL_CHECK(strstr(err, "builtin:1b-2l") && strstr(err, "builtin:tiny") && strstr(err, "vocabulary"));
  IL_CHECK_INT(il_test_runf(err, sizeof err, "%s run -m builtin:tiny -n 2 --draft 3 2>&1", bin), 64);
  IL_CHECK(strstr(err, "--draft-model") != NULL);
  IL_CHECK_INT(il_test_runf(err, sizeof err, "%s run -m builtin:tiny -n 2 --draft-model builtin:tiny --draft 17 2>&1", bin), 64);
  IL_CHECK_INT(il_test_runf(err, sizeof err, "%s run -m builtin:tiny -n 2 --draft-model /nope.gguf 2>&1", bin), 66);
  IL_CHECK(strstr(err, "/nope.gguf") != NULL);
}

int main(void) {
  cli();
  greedy_case("cpu");
  greedy_case("sim:1GiB");
  dist_matches_sample();
  accept_rule();
  sampled_engine("cpu");
  sampled_engine("sim:1GiB");
  vocab_mismatch();
  return il_test_finish();
}
