/* tests/test_engine_units: config parsing, the sampler, memory accounting and OOM injection. */
#include <unistd.h>

#include "engine/config.h"
#include "engine/request.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "harness.h"
#include "memory/mem.h"

static void test_config(void) {
  il_config c;
  il_config_defaults(&c);
  IL_CHECK_STR(c.model, "builtin:tiny");
  IL_CHECK_OK(il_config_set(&c, "threads", "3", "--threads"));
  IL_CHECK_INT(c.threads, 3);
  IL_CHECK_INT(il_config_set(&c, "threads", "3x", "--threads"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--threads");
  IL_CHECK_INT(il_config_set(&c, "kv-block", "0", "--kv-block"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "out of range");
  IL_CHECK_INT(il_config_set(&c, "nope", "1", "x.conf:3"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "x.conf:3");
  /* request options live in il_request_opts: il_config_set refuses them by name */
  static il_request_opts r, r2;
  il_request_opts_defaults(&r);
  IL_CHECK_INT(il_config_set(&c, "temp", "0.5", "--temp"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "per-request");
  IL_CHECK_INT(il_config_apply(&c, NULL, "no-bos", "true", "f"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_config_apply(&c, &r, "top-p", "1.5", "--top-p"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "out of range");
  IL_CHECK_OK(il_config_apply(&c, &r, "repeat_penalty", "1.1", "f"));
  IL_CHECK_NEAR(r.p.sampling.repeat_penalty, 1.1, 1e-6);
  IL_CHECK_OK(il_config_apply(&c, &r, "no-bos", "true", "f"));
  IL_CHECK(r.p.no_bos);
  IL_CHECK_OK(il_config_apply(&c, &r, "threads", "4", "f"));
  IL_CHECK_INT(c.threads, 4);
  IL_CHECK_INT(il_config_apply(&c, &r, "seed", "-1", "--seed"), IL_ERR_INVALID_ARG);
  /* the public getter formats engine options and refuses request ones */
  char got[64];
  IL_CHECK_OK(il_config_get(&c, "threads", got, sizeof got));
  IL_CHECK_STR(got, "4");
  IL_CHECK_INT(il_config_get(&c, "seed", got, sizeof got), IL_ERR_INVALID_ARG);
  IL_CHECK(sizeof(il_config) < 4096); /* copied into every sweep point: no prompt text in it */

  /* write -> load gives the same struct */
  const char *dir = il_test_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/a.conf", dir);
  snprintf(r.prompt, sizeof r.prompt, "Once upon a time");
  FILE *f = fopen(path, "w");
  il_config_write(&c, &r, f);
  fclose(f);
  il_config d;
  il_config_defaults(&d);
  il_request_opts_defaults(&r2);
  IL_CHECK(!il_config_given(&d, "repack"));
  IL_CHECK_OK(il_config_load(&d, &r2, path));
  /* the file names every engine option, so each one counts as given (serve's --repack default
   * gives way to it); request options are not engine options */
  IL_CHECK(il_config_given(&d, "repack") && il_config_given(&d, "threads") && !il_config_given(&d, "seed"));
  IL_CHECK(!il_config_given(&d, "no-such-option"));
  d.given = c.given;
  IL_CHECK(memcmp(&c, &d, sizeof c) == 0);
  IL_CHECK(memcmp(&r, &r2, sizeof r) == 0);
  /* without a request the same file is refused at its first request option, by line */
  IL_CHECK_INT(il_config_load(&d, NULL, path), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "per-request");
  f = fopen(path, "w");
  fprintf(f, "# comment\n\nthreads = 2\nbogus line\n");
  fclose(f);
  IL_CHECK_INT(il_config_load(&d, NULL, path), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "a.conf:4");
  unlink(path);
  rmdir(dir);
}

static void test_sampler(void) {
  enum { NV = 100 };
  float logits[NV];
  uint64_t s = 9;
  for (int i = 0; i < NV; i++) logits[i] = 3 * il_test_randf(&s);
  int argmax = 0;
  for (int i = 1; i < NV; i++)
    if (logits[i] > logits[argmax]) argmax = i;

  il_sampler *sm;
  il_sampler_params greedy = {0, 40, 0.95f, 0.05f, 1.0f, 64, 1};
  IL_CHECK_OK(il_sampler_new(&greedy, NV, &sm));
  IL_CHECK_INT(il_sampler_sample(sm, logits), argmax);
  /* greedy's order: NaN below every number, the lowest id among equal maxima, id 0 when all
   * are NaN; the same with a repetition penalty of 1.0001 on an unrelated token (the
   * candidate-sorting path) as without (the direct scan) */
  {
    float odd[6] = {NAN, 1.0f, 4.0f, NAN, 4.0f, -2.0f}, nans[3] = {NAN, NAN, NAN};
    il_sampler *g2;
    il_sampler_params pen1 = greedy;
    pen1.repeat_penalty = 1.0001f;
    IL_CHECK_OK(il_sampler_new(&pen1, 6, &g2));
    il_sampler_accept(g2, 5);
    il_sampler *g6, *g3, *g3p;
    IL_CHECK_OK(il_sampler_new(&greedy, 6, &g6));
    IL_CHECK_OK(il_sampler_new(&greedy, 3, &g3));
    IL_CHECK_OK(il_sampler_new(&pen1, 3, &g3p));
    IL_CHECK_INT(il_sampler_sample(g6, odd), 2);
    IL_CHECK_INT(il_sampler_sample(g2, odd), 2);
    IL_CHECK_INT(il_sampler_sample(g3, nans), 0);
    IL_CHECK_INT(il_sampler_sample(g3p, nans), 0);
    il_sampler_free(g2), il_sampler_free(g6), il_sampler_free(g3), il_sampler_free(g3p);
  }
  /* a repetition penalty on the argmax can move the choice */
  il_sampler_free(sm);
  il_sampler_params pen = {0, 0, 1, 0, 100.0f, 4, 1};
  IL_CHECK_OK(il_sampler_new(&pen, NV, &sm));
  il_sampler_accept(sm, argmax);
  IL_CHECK(il_sampler_sample(sm, logits) != argmax);
  il_sampler_free(sm);

  /* top-k 1 is greedy whatever the temperature */
  il_sampler_params k1 = {5.0f, 1, 1, 0, 1, 0, 3};
  IL_CHECK_OK(il_sampler_new(&k1, NV, &sm));
  for (int i = 0; i < 20; i++) IL_CHECK_INT(il_sampler_sample(sm, logits), argmax);
  il_sampler_free(sm);

  /* same seed, same sequence; different seed, different sequence; all draws within top-k */
  il_sampler_params p = {1.0f, 10, 1.0f, 0, 1, 0, 77};
  int a[64], b[64], c[64];
  il_sampler *s1, *s2, *s3;
  IL_CHECK_OK(il_sampler_new(&p, NV, &s1));
  IL_CHECK_OK(il_sampler_new(&p, NV, &s2));
  p.seed = 78;
  IL_CHECK_OK(il_sampler_new(&p, NV, &s3));
  int same = 1, diff = 0, in_topk = 1;
  float sorted[NV];
  memcpy(sorted, logits, sizeof sorted);
  for (int i = 0; i < NV; i++)
    for (int j = i + 1; j < NV; j++)
      if (sorted[j] > sorted[i]) {
        float t = sorted[i];
        sorted[i] = sorted[j];
        sorted[j] = t;
      }
  for (int i = 0; i < 64; i++) {
    a[i] = il_sampler_sample(s1, logits);
    b[i] = il_sampler_sample(s2, logits);
    c[i] = il_sampler_sample(s3, logits);
    same &= a[i] == b[i];
    diff |= a[i] != c[i];
    in_topk &= logits[a[i]] >= sorted[9];
  }
  IL_CHECK(same);
  IL_CHECK(diff);
  IL_CHECK(in_topk);
  il_sampler_free(s1), il_sampler_free(s2), il_sampler_free(s3);

  /* min-p: with one dominant logit nothing else survives */
  float peaked[NV] = {0};
  peaked[17] = 20.0f;
  il_sampler_params mp = {1.0f, 0, 1.0f, 0.01f, 1, 0, 5};
  IL_CHECK_OK(il_sampler_new(&mp, NV, &sm));
  for (int i = 0; i < 20; i++) IL_CHECK_INT(il_sampler_sample(sm, peaked), 17);
  il_sampler_free(sm);
  /* top-p: mass 0.5 of two equal tokens far above the rest keeps only the lower id */
  float two[NV] = {0};
  two[3] = two[4] = 30.0f;
  il_sampler_params tp = {1.0f, 0, 0.4f, 0, 1, 0, 5};
  IL_CHECK_OK(il_sampler_new(&tp, NV, &sm));
  for (int i = 0; i < 20; i++) IL_CHECK_INT(il_sampler_sample(sm, two), 3);
  il_sampler_free(sm);
}

static void test_memory(void) {
  il_mem_stats before, st;
  il_mem_stats_get(&before);
  void *p = il_mem_alloc(IL_MEM_KV, 1000, "test kv");
  IL_CHECK(p != NULL);
  IL_CHECK_INT((uintptr_t)p % 64, 0);
  il_mem_stats_get(&st);
  IL_CHECK_INT(st.current[IL_MEM_KV] - before.current[IL_MEM_KV], 1000);
  il_mem_free(p);
  il_mem_stats_get(&st);
  IL_CHECK_INT(st.current[IL_MEM_KV], before.current[IL_MEM_KV]);
  IL_CHECK(st.peak[IL_MEM_KV] >= 1000);

  il_mem_fail_after(2);
  void *a = il_mem_alloc(IL_MEM_OTHER, 10, "a");
  void *b = il_mem_alloc(IL_MEM_OTHER, 10, "second buffer");
  IL_CHECK(a != NULL);
  IL_CHECK(b == NULL);
  IL_CHECK_CONTAINS(il_error_detail(), "second buffer");
  il_mem_free(a);

  il_mem_set_limit(st.total_current + 4096);
  void *big = il_mem_alloc(IL_MEM_ACTIVATIONS, 1 << 20, "big activations");
  IL_CHECK(big == NULL);
  IL_CHECK(strstr(il_error_detail(), "activations") != NULL && strstr(il_error_detail(), "limit") != NULL);
  il_mem_set_limit(0);
}

/* Every allocation of engine start-up and one decode fails in turn; each must come back as
 * IL_ERR_OOM (never a crash), and ASan checks nothing leaks. */
static void test_oom_injection(void) {
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.threads = 2;
  cfg.ctx = 32;
  int n_oom = 0, n_ok = 0;
  for (long n = 1; n < 400; n++) {
    il_mem_fail_after(n);
    il_engine *e = NULL;
    il_status st = il_engine_open(&cfg, &e);
    if (st == IL_OK) {
      il_batch_entry b[3] = {{1, 0, 0, false}, {70, 0, 1, false}, {71, 0, 2, true}};
      float *logits = malloc(sizeof(float) * 512);
      st = il_engine_decode(e, b, 3, logits);
      free(logits);
      il_engine_free(e);
    }
    il_mem_fail_after(0);
    if (st == IL_OK) {
      n_ok++;
      if (n_ok > 3) break; /* past the last allocation */
    } else {
      IL_CHECK_INT(st, IL_ERR_OOM);
      n_oom++;
    }
  }
  printf("OOM injection: %d allocation sites failed cleanly\n", n_oom);
  IL_CHECK(n_oom > 20);
  il_mem_stats s;
  il_mem_stats_get(&s);
  IL_CHECK_INT(s.current[IL_MEM_KV], 0);
  IL_CHECK_INT(s.current[IL_MEM_WEIGHTS], 0);
}

int main(void) {
  test_config();
  test_sampler();
  test_memory();
  test_oom_injection();
  return il_test_finish();
}
