/* tests/test_lab_experiment: the one-change rule (two changes refused unless --allow-multi,
 * a no-op change refused, bad keys and values named), the A B B A interleaving seen by a
 * recording runner, the ratio/verdict of known effects, the evidence folder (configs that
 * load back and differ in exactly the changed key, summary.json valid JSON, --show), and the
 * --cmd runner on a real shell command. */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/request.h"
#include "harness.h"
#include "lab/experiment.h"
#include "memory/mem.h"

typedef struct {
  char seen[64];
  int n;
} recorder;

/* Fake runner: the variant is 2x faster in gen_tps (with a little noise), load time equal. */
static il_status fake_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  recorder *r = ud;
  r->seen[r->n++] = arm ? 'B' : 'A';
  r->seen[r->n] = 0;
  (void)x;
  vals[IL_BM_GEN_TPS] = (arm ? 200.0 : 100.0) + (run % 3);
  vals[IL_BM_LOAD_S] = 0.5 + 0.01 * ((run + arm) % 2);
  vals[IL_BM_TTFT_S] = arm ? 0.2 : 0.1; /* lower is better: the variant is worse */
  /* deterministic memory peaks: 0.4% lower (beyond the noise, under the 1% default) and 5% lower */
  vals[IL_BM_PEAK_RSS] = arm ? 1000.0 * 0.996 : 1000.0;
  vals[IL_BM_MEM_PEAK] = arm ? 1000.0 * 0.95 : 1000.0;
  return IL_OK;
}

static void test_rules(void) {
  il_sweep_point base;
  il_sweep_point_defaults(&base);
  il_experiment x;
  il_experiment_init(&x);
  /* a thread count that is not the machine's (threads=0 runs with one per CPU: the same) */
  char threads_change[32];
  int other_threads = (int)sysconf(_SC_NPROCESSORS_ONLN) + 1;
  snprintf(threads_change, sizeof threads_change, "threads=%d", other_threads);
  const char *two[] = {"batch=8", threads_change};
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, two, 2, false), IL_ERR_INVALID_ARG);
  printf("two changes: %s\n", il_error_detail());
  IL_CHECK_CONTAINS(il_error_detail(), "exactly one option");
  IL_CHECK_CONTAINS(il_error_detail(), "--allow-multi");
  IL_CHECK_OK(il_experiment_set_changes(&x, &base, two, 2, true));
  IL_CHECK_INT(x.variant.cfg.n_seq, 8);
  IL_CHECK_INT(x.variant.cfg.threads, other_threads);
  IL_CHECK_INT(x.baseline.cfg.n_seq, 1);
  const char *same[] = {"batch=1"};
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, same, 1, false), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "already has");
  const char *dup[] = {"batch=2", "n-seq=4"};
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, dup, 2, true), IL_ERR_INVALID_ARG);
  const char *bad[] = {"threads=many"};
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, bad, 1, false), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "many");
  const char *noeq[] = {"threads"};
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, noeq, 1, false), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_experiment_set_changes(&x, &base, NULL, 0, false), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_experiment_set_command(&x, "echo", "a,b"), IL_ERR_INVALID_ARG);    /* no {} */
  IL_CHECK_INT(il_experiment_set_command(&x, "echo {}", "a,b,c"), IL_ERR_INVALID_ARG); /* three arms */
  IL_CHECK_INT(il_experiment_set_command(&x, "echo {}", "a,a"), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_experiment_set_command(&x, "echo {} {}", "off,on"));
  IL_CHECK_STR(x.cmd_a, "echo off off");
  IL_CHECK_STR(x.cmd_b, "echo on on");
  char order[16];
  il_experiment_order(4, order);
  IL_CHECK_STR(order, "ABBAABBA"); /* each arm first in half the pairs */
  il_experiment_free(&x);
}

static void test_run_and_evidence(const char *tmp) {
  il_sweep_point base;
  il_sweep_point_defaults(&base);
  base.cfg.threads = 1;
  il_experiment x;
  il_experiment_init(&x);
  x.repeat = 6;
  x.command_line = "inferlab experiment --change batch=4";
  const char *ch[] = {"batch=4"};
  IL_CHECK_OK(il_experiment_set_changes(&x, &base, ch, 1, false));
  IL_CHECK_OK(il_experiment_prepare_dir(&x, tmp));
  printf("evidence: %s\n", x.dir);
  IL_CHECK_CONTAINS(x.dir, "-batch-4");
  recorder rec = {{0}, 0};
  IL_CHECK_OK(il_experiment_run(&x, fake_run, &rec));
  IL_CHECK_STR(rec.seen, "ABBAABBAABBA");
  IL_CHECK_INT(x.n_runs[0], 6);
  IL_CHECK_INT(x.n_runs[1], 6);
  il_experiment_effect e;
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_GEN_TPS, &e));
  printf("gen_tps ratio %.4f [%.4f, %.4f] %s\n", e.ratio.ratio, e.ratio.lo, e.ratio.hi, e.verdict);
  IL_CHECK_NEAR(e.ratio.ratio, 201.0 / 101.0, 1e-9);
  IL_CHECK(e.ratio.significant);
  IL_CHECK_STR(e.verdict, "better");
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_TTFT_S, &e));
  IL_CHECK_STR(e.verdict, "worse");
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_LOAD_S, &e));
  IL_CHECK_STR(e.verdict, "no significant change");
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_REQ_S, &e)); /* never measured */
  IL_CHECK_STR(e.verdict, "n/a");
  /* the minimum practical effect: 0.4% on a memory peak is "same" though significant */
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_PEAK_RSS, &e));
  printf("peak_rss ratio %.4f [%.4f, %.4f] min %.3f %s\n", e.ratio.ratio, e.ratio.lo, e.ratio.hi, e.min_effect, e.verdict);
  IL_CHECK(e.ratio.significant);
  IL_CHECK_NEAR(e.min_effect, IL_EXP_MIN_EFFECT_MEM, 1e-12);
  IL_CHECK_STR(e.verdict, "same");
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_MEM_PEAK, &e));
  IL_CHECK_STR(e.verdict, "better");
  IL_CHECK_NEAR(il_experiment_min_effect_of(&x, IL_BM_GEN_TPS), 0, 0);
  x.min_effect = 0; /* the noise alone decides */
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_PEAK_RSS, &e));
  IL_CHECK_STR(e.verdict, "better");
  x.min_effect = 0.10; /* 10% for every metric: the 5% memory change is "same", the 2x speed-up still "better" */
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_MEM_PEAK, &e));
  IL_CHECK_STR(e.verdict, "same");
  IL_CHECK_OK(il_experiment_effect_of(&x, IL_BM_GEN_TPS, &e));
  IL_CHECK_STR(e.verdict, "better");
  x.min_effect = -1;
  char *text = NULL;
  size_t len = 0;
  FILE *show = open_memstream(&text, &len);
  IL_CHECK_OK(il_experiment_write_summary(&x, show));
  fclose(show);
  IL_CHECK_CONTAINS(text, "batch 1 -> 4");
  IL_CHECK_CONTAINS(text, "under the minimum effect (1% for memory");
  IL_CHECK_CONTAINS(text, "rollback:   inferlab bench --config");
  free(text);
  /* the configs load back and differ only in the changed key */
  char path[2400];
  il_config a, b;
  static il_request_opts ra, rb; /* the conf files carry n-predict (the lab's gen) too */
  il_config_defaults(&a);
  il_config_defaults(&b);
  il_request_opts_defaults(&ra);
  il_request_opts_defaults(&rb);
  snprintf(path, sizeof path, "%s/baseline.conf", x.dir);
  IL_CHECK_OK(il_config_load(&a, &ra, path));
  snprintf(path, sizeof path, "%s/variant.conf", x.dir);
  IL_CHECK_OK(il_config_load(&b, &rb, path));
  IL_CHECK_INT(ra.p.n_predict, x.baseline.gen);
  int differ = 0;
  static char va[IL_REQUEST_PROMPT_MAX], vb[IL_REQUEST_PROMPT_MAX];
  for (const il_opt *o = il_config_options(); o->name; o++) {
    il_config_format(&a, &ra, o, va, sizeof va);
    il_config_format(&b, &rb, o, vb, sizeof vb);
    if (strcmp(va, vb)) {
      differ++;
      IL_CHECK_STR(o->name, "n-seq");
    }
  }
  IL_CHECK_INT(differ, 1);
  IL_CHECK_INT(a.threads, 1);
  const char *files[] = {"env.json", "samples.jsonl", "summary.txt", "summary.json", "command.txt"};
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s", x.dir, files[i]);
    IL_CHECK(access(path, R_OK) == 0);
  }
  char cmd[5200];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=json.load(open(sys.argv[2])); "
           "m={x[\"key\"]: x for x in d[\"metrics\"]}; "
           "assert d[\"schema_version\"]==1 and d[\"changes\"][0][\"key\"]==\"n-seq\", d[\"changes\"]; "
           "assert m[\"gen_tps\"][\"verdict\"]==\"better\" and m[\"gen_tps\"][\"significant\"] is True; "
           "assert m[\"peak_rss_bytes\"][\"verdict\"]==\"same\" and m[\"peak_rss_bytes\"][\"min_effect\"]==0.01; "
           "assert m[\"gen_tps\"][\"baseline\"][\"n\"]==6; assert isinstance(e, dict)' %s/summary.json %s/env.json",
           x.dir, x.dir);
  if (system("python3 -c '' 2>/dev/null") == 0) IL_CHECK_INT(WEXITSTATUS(system(cmd)), 0);
  text = NULL;
  show = open_memstream(&text, &len);
  IL_CHECK_OK(il_experiment_show(x.dir, show));
  fclose(show);
  IL_CHECK(strstr(text, "gen") != NULL && strstr(text, "baseline.conf") != NULL);
  free(text);
  IL_CHECK_INT(il_experiment_show(tmp, stdout), IL_ERR_NOT_FOUND);
  il_experiment_free(&x);
}

static void test_cmd(const char *tmp) {
  il_experiment x;
  il_experiment_init(&x);
  x.repeat = 2;
  x.watch.no_gpu = true;
  x.bench.no_gpu = true;
  IL_CHECK_OK(il_experiment_set_command(&x, "sleep {}; echo slept {}", "0.01,0.15"));
  IL_CHECK_OK(il_experiment_prepare_dir(&x, tmp));
  IL_CHECK_OK(il_experiment_run(&x, NULL, NULL));
  IL_CHECK_INT(x.n_runs[0], 2);
  IL_CHECK_INT(x.failures[0] + x.failures[1], 0);
  il_experiment_effect e;
  IL_CHECK_OK(il_experiment_effect_of(&x, 0, &e)); /* duration */
  printf("cmd duration: %.3f s vs %.3f s, ratio %.2f\n", e.a.mean, e.b.mean, e.ratio.ratio);
  /* lower bounds only (a sleep lasts at least its time; how much longer depends on load);
   * which arm ran which value is checked in the variant's log below */
  IL_CHECK(e.a.mean >= 0.01 && e.b.mean >= 0.15);
  IL_CHECK_OK(il_experiment_write_summary(&x, NULL));
  char path[2400], line[256] = "";
  snprintf(path, sizeof path, "%s/logs/run-001-variant.log", x.dir);
  FILE *f = fopen(path, "r");
  IL_CHECK(f != NULL);
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
  }
  IL_CHECK_STR(line, "slept 0.15\n");
  /* each sample carries the start seen from outside: the first output, in its log, is seen */
  snprintf(path, sizeof path, "%s/samples.jsonl", x.dir);
  f = fopen(path, "r");
  IL_CHECK(f != NULL);
  int n_lines = 0;
  static char jl[8192];
  while (f && fgets(jl, sizeof jl, f)) {
    n_lines++;
    IL_CHECK(strstr(jl, "\"first_output_seconds\":") && !strstr(jl, "\"first_output_seconds\":null"));
    IL_CHECK_CONTAINS(jl, "\"gpu_memory_90_seconds\":null"); /* no GPU sampling here */
  }
  if (f) fclose(f);
  IL_CHECK_INT(n_lines, 4);
  il_experiment_free(&x);
}

int main(void) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  test_rules();
  test_run_and_evidence(tmp);
  test_cmd(tmp);
  il_mem_stats ms;
  il_mem_stats_get(&ms);
  IL_CHECK_INT((long long)ms.total_current, 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) printf("could not remove %s\n", tmp);
  return il_test_finish();
}
