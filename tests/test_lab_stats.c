/* tests/test_lab_stats: lab statistics on known data (mean, stddev, percentiles, the
 * bootstrap ratio interval against a delta-method oracle), the JSON writer's escaping, and
 * sweep parsing (comma lists, lab names, the combination count and order, errors). */
#include <math.h>

#include "harness.h"
#include "core/jsonw.h"
#include "lab/stats.h"
#include "lab/sweep.h"
#include "memory/mem.h"

static void test_summary(void) {
  const double x[] = {4, 1, 3, 2}; /* sorted: 1 2 3 4 */
  il_stats_summary s;
  IL_CHECK_OK(il_stats_summarize(x, 4, &s));
  IL_CHECK_INT(s.n, 4);
  IL_CHECK_NEAR(s.mean, 2.5, 1e-12);
  IL_CHECK_NEAR(s.stddev, sqrt(5.0 / 3.0), 1e-12); /* sum of squares 5, n - 1 = 3 */
  IL_CHECK_NEAR(s.min, 1, 0);
  IL_CHECK_NEAR(s.max, 4, 0);
  IL_CHECK_NEAR(s.p50, 2.5, 1e-12);
  IL_CHECK_NEAR(s.p90, 3.7, 1e-12);  /* rank 0.9 * 3 = 2.7 -> 3 + 0.7 */
  IL_CHECK_NEAR(s.p99, 3.97, 1e-12); /* rank 2.97 */
  IL_CHECK_NEAR(x[0], 4, 0);         /* input untouched */
  /* 1..100: numpy.percentile(range(1,101), [50, 90, 99]) = 50.5, 90.1, 99.01 */
  double h[100];
  for (int i = 0; i < 100; i++) h[i] = 100 - i;
  IL_CHECK_OK(il_stats_summarize(h, 100, &s));
  IL_CHECK_NEAR(s.p50, 50.5, 1e-9);
  IL_CHECK_NEAR(s.p90, 90.1, 1e-9);
  IL_CHECK_NEAR(s.p99, 99.01, 1e-9);
  IL_CHECK_NEAR(s.stddev, 29.011491975882016, 1e-9);
  /* one value: stddev 0; none: NaN */
  IL_CHECK_OK(il_stats_summarize(h, 1, &s));
  IL_CHECK_NEAR(s.stddev, 0, 0);
  IL_CHECK_NEAR(s.p99, 100, 0);
  IL_CHECK_OK(il_stats_summarize(NULL, 0, &s));
  IL_CHECK(isnan(s.mean) && isnan(s.p50));
  IL_CHECK_NEAR(il_stats_percentile_sorted((const double[]){10, 20}, 2, 25), 12.5, 1e-12);
}

/* Delta-method (Welch-style) interval of mean(b)/mean(a) for independent samples: the oracle
 * the bootstrap should agree with on well-behaved data. */
static void delta_ci(const double *a, int na, const double *b, int nb, double *lo, double *hi) {
  double ma = il_stats_mean(a, na), mb = il_stats_mean(b, nb);
  double va = pow(il_stats_stddev(a, na), 2) / na, vb = pow(il_stats_stddev(b, nb), 2) / nb;
  double r = mb / ma, se = r * sqrt(vb / (mb * mb) + va / (ma * ma));
  *lo = r - 1.959964 * se;
  *hi = r + 1.959964 * se;
}

static void test_ratio(void) {
  il_stats_ratio r;
  /* no spread: the interval collapses onto the ratio */
  const double a[] = {10, 10, 10, 10}, b[] = {20, 20, 20};
  IL_CHECK_OK(il_stats_ratio_ci(a, 4, b, 3, 0.95, 500, 1, &r));
  IL_CHECK_NEAR(r.ratio, 2, 1e-12);
  IL_CHECK_NEAR(r.lo, 2, 1e-12);
  IL_CHECK_NEAR(r.hi, 2, 1e-12);
  IL_CHECK(r.significant);
  /* noisy, roughly normal data: bootstrap vs delta method */
  uint64_t rng = 7;
  double x[400], y[400];
  for (int i = 0; i < 400; i++) {
    double u = 0, v = 0;
    for (int k = 0; k < 12; k++) { /* Irwin-Hall: approximately normal, sd 1 */
      u += (double)(il_stats_rand(&rng) >> 11) / 9007199254740992.0;
      v += (double)(il_stats_rand(&rng) >> 11) / 9007199254740992.0;
    }
    x[i] = 100 + 5 * (u - 6);
    y[i] = 103 + 5 * (v - 6);
  }
  IL_CHECK_OK(il_stats_ratio_ci(x, 400, y, 400, 0.95, 2000, 42, &r));
  double lo, hi;
  delta_ci(x, 400, y, 400, &lo, &hi);
  printf("ratio %.4f bootstrap [%.4f, %.4f] delta [%.4f, %.4f]\n", r.ratio, r.lo, r.hi, lo, hi);
  IL_CHECK(r.lo < r.ratio && r.ratio < r.hi);
  IL_CHECK_NEAR(r.lo, lo, 0.15 * (hi - lo));
  IL_CHECK_NEAR(r.hi, hi, 0.15 * (hi - lo));
  IL_CHECK(r.significant); /* 3% apart with n = 400 and sd 5 */
  /* same seed, same interval */
  il_stats_ratio r2;
  IL_CHECK_OK(il_stats_ratio_ci(x, 400, y, 400, 0.95, 2000, 42, &r2));
  IL_CHECK_NEAR(r2.lo, r.lo, 0);
  IL_CHECK_NEAR(r2.hi, r.hi, 0);
  /* two samples of the same distribution: not significant */
  IL_CHECK_OK(il_stats_ratio_ci(x, 200, x + 200, 200, 0.95, 2000, 42, &r));
  printf("same distribution: ratio %.4f [%.4f, %.4f]\n", r.ratio, r.lo, r.hi);
  IL_CHECK(!r.significant);
  /* undefined ratios and bad arguments */
  const double z[] = {0, 0};
  IL_CHECK_OK(il_stats_ratio_ci(z, 2, b, 3, 0.95, 100, 1, &r));
  IL_CHECK(isnan(r.ratio) && !r.significant);
  IL_CHECK_INT(il_stats_ratio_ci(a, 4, b, 3, 1.5, 100, 1, &r), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_stats_ratio_ci(a, 4, b, 3, 0.95, 0, 1, &r), IL_ERR_INVALID_ARG);
}

static void test_jsonw(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  il_jsonw w;
  il_jsonw_init(&w, f, false);
  il_jsonw_obj(&w);
  il_jsonw_kstr(&w, "s", "a\"b\\c\n\x01");
  il_jsonw_knum(&w, "nan", NAN);
  il_jsonw_knum(&w, "x", 1.5);
  il_jsonw_key(&w, "a");
  il_jsonw_arr(&w);
  il_jsonw_int(&w, 1);
  il_jsonw_obj(&w);
  il_jsonw_obj_end(&w);
  il_jsonw_arr(&w);
  il_jsonw_arr_end(&w);
  il_jsonw_arr_end(&w);
  il_jsonw_kstr(&w, "null", NULL);
  il_jsonw_obj_end(&w);
  IL_CHECK_OK(il_jsonw_finish(&w));
  fclose(f);
  IL_CHECK_STR(buf, "{\"s\":\"a\\\"b\\\\c\\n\\u0001\",\"nan\":null,\"x\":1.5,\"a\":[1,{},[]],\"null\":null}\n");
  free(buf);
}

static void test_sweep(void) {
  il_sweep_point base;
  il_sweep_point_defaults(&base);
  IL_CHECK_INT(base.prompt, 128);
  il_sweep s;
  il_sweep_init(&s);
  IL_CHECK_INT((int)il_sweep_count(&s), 1);
  IL_CHECK_INT(il_sweep_main_axis(&s), -1);
  IL_CHECK_OK(il_sweep_add(&s, &base, "batch", "1, 4,16", "--batch"));
  IL_CHECK_OK(il_sweep_add(&s, &base, "threads", "1,2", "--threads"));
  IL_CHECK_OK(il_sweep_add(&s, &base, "prompt", "64", "--prompt"));
  IL_CHECK_OK(il_sweep_add(&s, &base, "wtype", "f32,q8_0", "--wtype"));
  IL_CHECK_INT((int)il_sweep_count(&s), 3 * 2 * 1 * 2);
  IL_CHECK_INT(il_sweep_main_axis(&s), 0);
  IL_CHECK_STR(s.axes[0].values[1], "4");
  /* first axis slowest: index 5 = batch 4 (1), threads 1 (0), wtype q8_0 (1) */
  il_sweep_point p;
  char label[256];
  IL_CHECK_OK(il_sweep_point_at(&s, &base, 5, &p, label, sizeof label));
  IL_CHECK_INT(p.cfg.n_seq, 4);
  IL_CHECK_INT(p.cfg.threads, 1);
  IL_CHECK_STR(p.cfg.wtype, "q8_0");
  IL_CHECK_INT(p.prompt, 64);
  IL_CHECK_STR(label, "batch=4 threads=1 wtype=q8_0");
  IL_CHECK_OK(il_sweep_point_at(&s, &base, 11, &p, NULL, 0));
  IL_CHECK_INT(p.cfg.n_seq, 16);
  IL_CHECK_INT(p.cfg.threads, 2);
  IL_CHECK_INT(il_sweep_point_at(&s, &base, 12, &p, NULL, 0), IL_ERR_INVALID_ARG);
  /* lab names map to engine options */
  IL_CHECK_STR(il_sweep_key("batch"), "n-seq");
  IL_CHECK_STR(il_sweep_key("gen"), "n-predict");
  IL_CHECK_STR(il_sweep_key("ubatch"), "batch");
  IL_CHECK_STR(il_sweep_key("kv_block"), "kv-block");
  IL_CHECK(il_sweep_key("repeat_penalty") == NULL); /* a sampling option: the lab never samples */
  IL_CHECK(il_sweep_key("nonsense") == NULL);
  IL_CHECK_OK(il_sweep_set(&p, "ubatch", "64", "x"));
  IL_CHECK_INT(p.cfg.batch, 64);
  IL_CHECK_OK(il_sweep_set(&p, "gen", "7", "x"));
  IL_CHECK_INT(p.gen, 7);
  char v[64];
  il_sweep_get(&p, "gen", v, sizeof v);
  IL_CHECK_STR(v, "7");
  /* errors name the flag and leave the sweep unchanged */
  IL_CHECK_INT(il_sweep_add(&s, &base, "gen", "4,,8", "--gen"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--gen");
  IL_CHECK_INT(il_sweep_add(&s, &base, "threads", "3", "--threads"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_sweep_add(&s, &base, "n-seq", "3", "--n-seq"), IL_ERR_INVALID_ARG); /* == batch */
  IL_CHECK_CONTAINS(il_error_detail(), "already swept");
  IL_CHECK_INT(il_sweep_add(&s, &base, "ctx", "abc", "--ctx"), IL_ERR_INVALID_ARG);
  printf("bad value: %s\n", il_error_detail());
  IL_CHECK_CONTAINS(il_error_detail(), "abc");
  IL_CHECK_INT(il_sweep_add(&s, &base, "bogus", "1", "--bogus"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_sweep_add(&s, &base, "prompt", "0", "--prompt"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(s.n_axes, 4);
  IL_CHECK_INT((int)il_sweep_count(&s), 12);
  /* too many combinations is refused */
  il_sweep big;
  il_sweep_init(&big);
  IL_CHECK_OK(il_sweep_add(&big, &base, "threads", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "--threads"));
  IL_CHECK_OK(il_sweep_add(&big, &base, "gen", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "--gen"));
  IL_CHECK_INT(il_sweep_add(&big, &base, "seed", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "--seed"),
               IL_ERR_INVALID_ARG);
  il_sweep_free(&big);
  /* values with commas of their own: ';' between the values; a device's sim options stay with it */
  il_sweep dv;
  il_sweep_init(&dv);
  IL_CHECK_OK(il_sweep_add(&dv, &base, "device", "sim:64MiB,pcie=16GB/s,ctx=1MiB,sim:32MiB", "--device"));
  IL_CHECK_INT(dv.axes[0].n, 2);
  IL_CHECK_STR(dv.axes[0].values[0], "sim:64MiB,pcie=16GB/s,ctx=1MiB");
  IL_CHECK_STR(dv.axes[0].values[1], "sim:32MiB");
  IL_CHECK_OK(il_sweep_add(&dv, &base, "split", "3,1; 1,1", "--split"));
  IL_CHECK_INT(dv.axes[1].n, 2);
  IL_CHECK_STR(dv.axes[1].values[0], "3,1");
  IL_CHECK_STR(dv.axes[1].values[1], "1,1");
  il_sweep_free(&dv);
  il_sweep dl;
  il_sweep_init(&dl);
  IL_CHECK_OK(il_sweep_add(&dl, &base, "device", "sim:64MiB,pcie=16GB/s,sim:64MiB;sim:128MiB", "--device"));
  IL_CHECK_INT(dl.axes[0].n, 2);
  IL_CHECK_STR(dl.axes[0].values[0], "sim:64MiB,pcie=16GB/s,sim:64MiB");
  il_sweep_free(&dl);
  il_sweep_free(&s);
  il_mem_stats ms;
  il_mem_stats_get(&ms);
  IL_CHECK_INT((long long)ms.total_current, 0); /* every value string freed */
}

int main(void) {
  test_summary();
  test_ratio();
  test_jsonw();
  test_sweep();
  return il_test_finish();
}
