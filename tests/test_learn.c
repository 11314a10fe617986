/* tests/test_learn: `inferlab learn` end to end, through the binary (IL_CLI).
 *
 * - `learn all --quick --json` on the default sim device: every lesson runs; the memory lessons'
 *   differences have the expected sign in the lesson's own figures and, independently, in
 *   `inferlab plan` run on the evidence folder's baseline.conf and variant.conf (f16
 *   activations below f32's, sliced attention's workspace below naive's, offloading fits where
 *   all-on-device does not, the out-of-memory report's fix fits and ran every time); the
 *   fragmenting pattern's figure is the one worked out from the allocator's rules; every
 *   placeholder of every quick check was filled; every evidence folder holds the files its lesson
 *   lists, both configurations, one samples.jsonl line per run and a log whose every line starts
 *   with a UTC timestamp;
 * - rollback: an engine lesson's rollback.sh runs bench with exactly the baseline configuration
 *   (bench's JSON of the run against summary.json's baseline_config, byte for byte); a machine
 *   lesson's rollback.sh makes the repaired tree equal to the broken one byte for byte, and the
 *   doctor then reports the failure again;
 * - the quick check follows the figures: the out-of-memory lesson on two device sizes (learn all's
 *   sim:32MiB and sim:48MiB) names each run's own capacity and the planner's need for its own
 *   baseline.conf; the batch lesson's largest batch differs between the sizes and is, by
 *   `inferlab plan`, the largest that fits; the f16 lesson on sim and on cpu quotes each run's own
 *   activation figures;
 * - Ctrl-C stops a lesson after its current run: exit 130, the summary and learn.json are
 *   written with the runs measured, one samples.jsonl line each;
 * - German, the list, and the exit codes of bad input.
 * Nothing depends on timing: the Ctrl-C test waits for the first sample to appear.
 */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/registry.h"
#include "harness.h"
#include "lab/machine.h"

static const char *cli;
static char tmp[1024];

static json_t *load_json(const char *path) {
  json_error_t e;
  json_t *j = json_load_file(path, 0, &e);
  if (!j) fprintf(stderr, "%s: %s (line %d)\n", path, e.text, e.line);
  return j;
}

static json_t *find_doc(json_t *all, const char *slug) {
  size_t i;
  json_t *d;
  json_array_foreach(all, i, d) {
    if (!strcmp(json_string_value(json_object_get(json_object_get(d, "concept"), "slug")), slug)) return d;
  }
  return NULL;
}

static json_t *metric(json_t *doc, const char *key) {
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(doc, "metrics"), i, m) {
    if (!strcmp(json_string_value(json_object_get(m, "key")), key)) return m;
  }
  return NULL;
}

static double mean_of(json_t *doc, const char *key, const char *arm) {
  json_t *m = metric(doc, key);
  json_t *v = m ? json_object_get(json_object_get(m, arm), "mean") : NULL;
  return v && json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *dir_of(json_t *doc) { return json_string_value(json_object_get(json_object_get(doc, "evidence"), "dir")); }

static const char *fact(json_t *doc, const char *key) {
  json_t *v = json_object_get(json_object_get(doc, "facts"), key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static const char *answer(json_t *doc, int i) {
  return json_string_value(json_object_get(json_array_get(json_object_get(doc, "quiz"), (size_t)i), "answer"));
}

static int count_lines(const char *path) {
  char *t = il_test_read_file(path, NULL);
  if (!t) return -1;
  int n = 0;
  for (char *p = t; *p; p++) n += *p == '\n';
  free(t);
  return n;
}

/* `inferlab plan --config FILE --json`: its JSON (caller decrefs) and exit code. */
static json_t *plan_of(const char *conf, const char *extra, int *code) {
  char cmd[8192], *out = malloc(1 << 16);
  snprintf(cmd, sizeof cmd, "%s plan --config '%s' %s --json 2>/dev/null", cli, conf, extra ? extra : "");
  *code = il_test_run(cmd, out, 1 << 16);
  json_error_t e;
  json_t *j = json_loads(out, 0, &e);
  free(out);
  return j;
}

static double plan_cat(const char *conf, const char *cat, int *code) {
  json_t *j = plan_of(conf, NULL, code);
  double v = j ? json_number_value(json_object_get(json_object_get(j, "by_category"), cat)) : NAN;
  json_decref(j);
  return v;
}

/* "12.3 MiB" as the lessons write bytes (lab/learn's formatter, written out again here). */
static void fmt_bytes(double v, char *buf, size_t n) {
  if (v < 1024) snprintf(buf, n, "%.0f B", v);
  else if (v < 1048576.0) snprintf(buf, n, "%.1f KiB", v / 1024.0);
  else if (v < 1073741824.0) snprintf(buf, n, "%.1f MiB", v / 1048576.0);
  else snprintf(buf, n, "%.2f GiB", v / 1073741824.0);
}

static bool has_timestamps(const char *path) {
  char *t = il_test_read_file(path, NULL);
  if (!t) return false;
  bool ok = *t != 0;
  for (char *line = t; ok && *line;) {
    char *nl = strchr(line, '\n');
    /* 2026-12-02T00:43:16.123Z message */
    ok = strlen(line) > 25 && line[4] == '-' && line[10] == 'T' && line[13] == ':' && line[19] == '.' && line[23] == 'Z' &&
         line[24] == ' ';
    if (!nl) break;
    line = nl + 1;
  }
  free(t);
  return ok;
}

static void check_evidence(json_t *doc) {
  const char *slug = json_string_value(json_object_get(json_object_get(doc, "concept"), "slug"));
  const char *dir = dir_of(doc), *kind = json_string_value(json_object_get(json_object_get(doc, "concept"), "kind"));
  IL_CHECK(dir != NULL);
  if (!dir) return;
  size_t i;
  json_t *f;
  char path[4096];
  json_array_foreach(json_object_get(json_object_get(doc, "evidence"), "files"), i, f) {
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(f));
    if (access(path, R_OK) != 0) fprintf(stderr, "%s: %s is listed but missing\n", slug, path);
    IL_CHECK(access(path, R_OK) == 0);
  }
  const bool cmd = !strcmp(kind, "machine") || !strcmp(kind, "pattern");
  const char *need[] = {"env.json", "samples.jsonl", "summary.txt", "summary.json", "log.txt", "rollback.sh", "learn.json",
                        "lesson.md", "command.txt", cmd ? "baseline.cmd" : "baseline.conf", cmd ? "variant.cmd" : "variant.conf"};
  for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, need[k]);
    if (access(path, R_OK) != 0) fprintf(stderr, "%s: %s missing\n", slug, path);
    IL_CHECK(access(path, R_OK) == 0);
  }
  if (!strcmp(kind, "machine")) {
    snprintf(path, sizeof path, "%s/baseline/.learn/environ", dir);
    IL_CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/variant/.learn/environ", dir);
    IL_CHECK(access(path, R_OK) == 0);
  }
  /* one raw line per run: 3 per arm with --quick */
  snprintf(path, sizeof path, "%s/samples.jsonl", dir);
  IL_CHECK_INT(count_lines(path), 6);
  snprintf(path, sizeof path, "%s/log.txt", dir);
  if (!has_timestamps(path)) fprintf(stderr, "%s: log.txt lines lack a timestamp\n", slug);
  IL_CHECK(has_timestamps(path));
  /* every placeholder of the quick check was filled from this run */
  IL_CHECK_STR(fact(doc, "unresolved"), "0");
  IL_CHECK_INT(json_array_size(json_object_get(doc, "quiz")), 3);
}

static json_t *test_all(void) {
  char cmd[4096], out[4096];
  snprintf(cmd, sizeof cmd, "%s learn all --quick --json --out %s/all -q > %s/all.json 2> %s/all.err", cli, tmp, tmp, tmp);
  int code = il_test_run(cmd, NULL, 0);
  IL_CHECK_INT(code, 0);
  snprintf(out, sizeof out, "%s/all.json", tmp);
  json_t *all = load_json(out);
  IL_CHECK(all && json_array_size(all) == 32);
  if (!all) return NULL;
  size_t i;
  json_t *d;
  json_array_foreach(all, i, d) {
    const char *slug = json_string_value(json_object_get(json_object_get(d, "concept"), "slug"));
    const char *status = json_string_value(json_object_get(d, "status"));
    if (strcmp(status, "done")) fprintf(stderr, "%s: %s (%s)\n", slug, status, json_string_value(json_object_get(d, "reason")));
    IL_CHECK_STR(status, "done");
    check_evidence(d);
  }
  char conf_a[4096], conf_b[4096];
  int ca = 0, cb = 0;
  /* f16 activations use less device memory than f32 */
  json_t *fp16 = find_doc(all, "fp16");
  IL_CHECK(mean_of(fp16, "act_bytes", "variant") < mean_of(fp16, "act_bytes", "baseline"));
  snprintf(conf_a, sizeof conf_a, "%s/baseline.conf", dir_of(fp16));
  snprintf(conf_b, sizeof conf_b, "%s/variant.conf", dir_of(fp16));
  IL_CHECK(plan_cat(conf_b, "activations", &cb) < plan_cat(conf_a, "activations", &ca));
  /* sliced attention needs less workspace than naive */
  json_t *sl = find_doc(all, "attention-slicing");
  IL_CHECK(mean_of(sl, "ws_bytes", "variant") < mean_of(sl, "ws_bytes", "baseline"));
  snprintf(conf_a, sizeof conf_a, "%s/baseline.conf", dir_of(sl));
  snprintf(conf_b, sizeof conf_b, "%s/variant.conf", dir_of(sl));
  IL_CHECK(plan_cat(conf_b, "workspace", &cb) < plan_cat(conf_a, "workspace", &ca));
  /* offloading fits where all-on-device does not: in the runs and by the planner */
  const char *off[] = {"model-offloading", "cpu-offloading", "cuda-out-of-memory"};
  for (int k = 0; k < 3; k++) {
    json_t *o = find_doc(all, off[k]);
    IL_CHECK_NEAR(mean_of(o, "fits", "baseline"), 0.0, 0);
    IL_CHECK_NEAR(mean_of(o, "fits", "variant"), 1.0, 0);
    IL_CHECK_INT(json_integer_value(json_object_get(json_object_get(metric(o, "fits"), "variant"), "n")), 3);
    snprintf(conf_a, sizeof conf_a, "%s/baseline.conf", dir_of(o));
    snprintf(conf_b, sizeof conf_b, "%s/variant.conf", dir_of(o));
    json_decref(plan_of(conf_a, NULL, &ca));
    json_decref(plan_of(conf_b, NULL, &cb));
    IL_CHECK_INT(ca, 1); /* plan: does not fit */
    IL_CHECK_INT(cb, 0);
  }
  /* the fragmenting pattern raises the fragmentation figure: 0 -> 1 - 2/10 */
  json_t *fr = find_doc(all, "vram-fragmentation");
  IL_CHECK_NEAR(mean_of(fr, "fragmentation", "baseline"), 0.0, 1e-9);
  IL_CHECK_NEAR(mean_of(fr, "fragmentation", "variant"), 0.8, 1e-9);
  IL_CHECK_NEAR(mean_of(fr, "big_ok", "variant"), 0.0, 0);
  /* the machine lessons: the target check better after the repair, in every one */
  json_array_foreach(all, i, d) {
    if (strcmp(json_string_value(json_object_get(json_object_get(d, "concept"), "kind")), "machine")) continue;
    IL_CHECK(mean_of(d, "check_level", "baseline") >= 1);
    IL_CHECK_NEAR(mean_of(d, "check_level", "variant"), 0.0, 0);
  }
  /* the expectations the lessons state and that do not depend on timing */
  const char *exact[] = {"gpu-compute", "cuda", "cuda-out-of-memory", "vram-fragmentation", "model-offloading", "cpu-offloading",
                         "vae-offloading", "attention-slicing", "memory-efficient-attention", "flashattention", "xformers",
                         "mixed-precision", "fp32", "fp16", "bf16", "int8", "int4", "quantization-error"};
  for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++) {
    json_t *e = json_object_get(find_doc(all, exact[k]), "expectation");
    if (!json_is_true(json_object_get(e, "met"))) fprintf(stderr, "%s: expectation not met\n", exact[k]);
    IL_CHECK(json_is_true(json_object_get(e, "met")));
  }

  /* rollback, engine: bench with exactly the baseline's configuration */
  char sum[4096];
  snprintf(sum, sizeof sum, "%s/summary.json", dir_of(fp16));
  json_t *s = load_json(sum);
  snprintf(cmd, sizeof cmd, "sh %s/rollback.sh -r 1 --warmup 0 --roofline-ms 0 --no-gpu -q --json > %s/rb.json 2>/dev/null",
           dir_of(fp16), tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  snprintf(out, sizeof out, "%s/rb.json", tmp);
  json_t *rb = load_json(out);
  json_t *ran = rb ? json_object_get(json_array_get(json_object_get(rb, "results"), 0), "config") : NULL;
  char *a = s ? json_dumps(json_object_get(s, "baseline_config"), JSON_SORT_KEYS | JSON_COMPACT) : NULL;
  char *b = ran ? json_dumps(ran, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
  char *v = s ? json_dumps(json_object_get(s, "variant_config"), JSON_SORT_KEYS | JSON_COMPACT) : NULL;
  IL_CHECK(a && b && v);
  if (a && b && v) {
    IL_CHECK_STR(b, a);
    IL_CHECK(strcmp(a, v) != 0);
  }
  free(a), free(b), free(v);
  json_decref(rb);
  json_decref(s);
  /* rollback, machine: the repaired tree becomes the broken one byte for byte */
  json_t *dr = find_doc(all, "default-runtime");
  char base[2048], var[2048];
  snprintf(base, sizeof base, "%s/baseline", dir_of(dr));
  snprintf(var, sizeof var, "%s/variant", dir_of(dr));
  il_machine_change ch[8];
  int n = 0;
  IL_CHECK_OK(il_machine_diff(base, var, ch, 8, &n));
  IL_CHECK_INT(n, 1);
  snprintf(cmd, sizeof cmd, "sh %s/rollback.sh", dir_of(dr));
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  IL_CHECK_OK(il_machine_diff(base, var, ch, 8, &n));
  IL_CHECK_INT(n, 0);
  snprintf(cmd, sizeof cmd, "diff -r --no-dereference %.2000s %.2000s", base, var);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  snprintf(cmd, sizeof cmd, "%s learn --machine %s", cli, var);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 1); /* the warning is back */
  return all;
}

/* Runs one lesson with --json and returns its document (caller decrefs). */
static json_t *lesson(const char *args, const char *sub, int want_code) {
  char cmd[4096], path[2048];
  snprintf(path, sizeof path, "%s/%s.json", tmp, sub);
  snprintf(cmd, sizeof cmd, "%s learn %s --quick --json -q --out %s/%s > %s 2>/dev/null", cli, args, tmp, sub, path);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), want_code);
  return load_json(path);
}

/* The out-of-memory and batch lessons' answers for one run: checked against the planner on
 * that run's own baseline.conf. Returns the capacity the answer named and the largest batch. */
static void check_oom_batch(json_t *oom, json_t *batch, const char *dev, char *cap_out, size_t cap_n, int *largest) {
  char conf[4096], need[32], cap[32];
  int code = 0;
  cap_out[0] = 0;
  *largest = 0;
  if (oom) {
    snprintf(conf, sizeof conf, "%s/baseline.conf", dir_of(oom));
    json_t *p = plan_of(conf, NULL, &code);
    IL_CHECK_INT(code, 1);
    fmt_bytes(json_number_value(json_object_get(p, "peak_bytes")), need, sizeof need);
    fmt_bytes(json_number_value(json_object_get(p, "capacity_bytes")), cap, sizeof cap);
    json_decref(p);
    const char *a0 = answer(oom, 0);
    printf("%s: %s\n", dev, a0);
    IL_CHECK(a0 && strstr(a0, need) && strstr(a0, cap));
    snprintf(cap_out, cap_n, "%s", cap);
    const char *a1 = answer(oom, 1);
    IL_CHECK(a1 && fact(oom, "fix_option") && strstr(a1, fact(oom, "fix_option")) && strstr(a1, fact(oom, "fix_value")));
  }
  if (batch) {
    /* the batch lesson's largest batch, checked with the planner: it fits, one more does not */
    *largest = fact(batch, "largest_batch") ? atoi(fact(batch, "largest_batch")) : 0;
    IL_CHECK(*largest > 1);
    char want[64], extra[64];
    snprintf(want, sizeof want, "%d", *largest);
    printf("%s: %s\n", dev, answer(batch, 2));
    IL_CHECK(answer(batch, 2) && strstr(answer(batch, 2), want));
    snprintf(conf, sizeof conf, "%s/baseline.conf", dir_of(batch));
    snprintf(extra, sizeof extra, "--n-seq %d --ctx %d", *largest, 40);
    json_decref(plan_of(conf, extra, &code));
    IL_CHECK_INT(code, 0);
    snprintf(extra, sizeof extra, "--n-seq %d --ctx %d", *largest + 1, 40);
    json_decref(plan_of(conf, extra, &code));
    IL_CHECK_INT(code, 1);
  }
}

static void check_fp16(json_t *d, const char *dev) {
  char a[32], b[32];
  if (!d) return;
  fmt_bytes(mean_of(d, "act_bytes", "baseline"), a, sizeof a);
  fmt_bytes(mean_of(d, "act_bytes", "variant"), b, sizeof b);
  printf("%s: %s\n", dev, answer(d, 0));
  IL_CHECK(answer(d, 0) && strstr(answer(d, 0), a) && strstr(answer(d, 0), b));
}

/* The same lessons on a second device (the first is learn all's sim:32MiB run): each run's
 * answers come from its own figures, and the figures differ. */
static void test_answers_follow_figures(json_t *all) {
  char caps[2][64];
  int largest[2];
  check_oom_batch(find_doc(all, "cuda-out-of-memory"), find_doc(all, "batch-size"), "sim:32MiB", caps[0], 64, &largest[0]);
  json_t *oom = lesson("cuda-out-of-memory --device sim:48MiB", "oom48", 0);
  json_t *batch = lesson("batch-size --device sim:48MiB", "batch48", 0);
  check_oom_batch(oom, batch, "sim:48MiB", caps[1], 64, &largest[1]);
  json_decref(oom);
  json_decref(batch);
  IL_CHECK(strcmp(caps[0], caps[1]) != 0);
  IL_CHECK(largest[0] != largest[1]);
  /* fp16 on the host and on the simulated device: each quotes its own run's activation bytes */
  check_fp16(find_doc(all, "fp16"), "sim:32MiB");
  json_t *d = lesson("fp16 --device cpu", "fp16cpu", 0);
  check_fp16(d, "cpu");
  IL_CHECK(strcmp(answer(d, 0), answer(find_doc(all, "fp16"), 0)) != 0);
  json_decref(d);
  /* a lesson that needs a device says why on cpu */
  d = lesson("cpu-offloading --device cpu", "skip", 0);
  IL_CHECK(d && !strcmp(json_string_value(json_object_get(d, "status")), "skipped"));
  json_decref(d);
}

static void test_ctrl_c(void) {
  char out[2048], samples[2048];
  snprintf(out, sizeof out, "%s/stop", tmp);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(cli, cli, "learn", "fp16", "--quick", "--repeat", "500", "--no-ask", "-q", "--out", out, (char *)NULL);
    _exit(127);
  }
  /* wait for the first measured run (no deadline shorter than the test's own timeout) */
  char dir[2300] = "";
  for (int tries = 0; tries < 60000; tries++) {
    char cmd[2400], found[2300] = "";
    snprintf(cmd, sizeof cmd, "ls -d %s/23-fp16/*/ 2>/dev/null | head -1", out);
    il_test_run(cmd, found, sizeof found);
    found[strcspn(found, "\n")] = 0;
    if (found[0]) {
      snprintf(samples, sizeof samples, "%.2000s/samples.jsonl", found);
      if (count_lines(samples) >= 1) {
        snprintf(dir, sizeof dir, "%s", found);
        break;
      }
    }
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  IL_CHECK(dir[0] != 0);
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  IL_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130);
  char path[2600];
  snprintf(path, sizeof path, "%slearn.json", dir);
  json_t *d = load_json(path);
  IL_CHECK(d && !strcmp(json_string_value(json_object_get(d, "status")), "interrupted"));
  int lines = count_lines(samples);
  IL_CHECK(lines >= 1 && lines < 1000);
  /* what was measured is in the summary: as many runs as sample lines */
  snprintf(path, sizeof path, "%ssummary.json", dir);
  json_t *s = load_json(path);
  json_t *m0 = s ? json_array_get(json_object_get(s, "metrics"), 0) : NULL;
  long long nb = json_integer_value(json_object_get(json_object_get(m0, "baseline"), "n"));
  long long nv = json_integer_value(json_object_get(json_object_get(m0, "variant"), "n"));
  IL_CHECK_INT(nb + nv, lines);
  IL_CHECK(nb >= 1);
  json_decref(s);
  json_decref(d);
}

static void test_cli(void) {
  char cmd[4096], out[65536];
  snprintf(cmd, sizeof cmd, "%s learn", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "17  Attention slicing") && strstr(out, "32  GPU utilization"));
  snprintf(cmd, sizeof cmd, "LANG=de_DE.UTF-8 %s learn", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "Batchgröße") && strstr(out, "Hebel"));
  snprintf(cmd, sizeof cmd, "%s learn --json", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  json_error_t e;
  json_t *list = json_loads(out, 0, &e);
  IL_CHECK(list && json_array_size(list) == 32);
  json_decref(list);
  snprintf(cmd, sizeof cmd, "LANG=de_DE.UTF-8 %s learn Standard-Laufzeit --quick --no-ask -q --out %s/de", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "Was es ist") && strstr(out, "5. Kurztest") && strstr(out, "F: ") && strstr(out, "Läufe je Arm") &&
           strstr(out, "Übungsrechner"));
  snprintf(cmd, sizeof cmd, "%s learn --help", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "--device") && strstr(out, "exit codes"));
  const struct {
    const char *args;
    int code;
  } bad[] = {
      {"no-such-concept", 66}, {"fp", 64}, {"fp16 --lang fr", 64}, {"fp16 --device tpu", 64}, {"fp16 --repeat 0", 64},
      {"fp16 --bogus", 64},    {"fp16 --pattern steady", 64},      {"fp16 extra", 64},       {"--machine /nonexistent", 66},
      {"fp16 --quick --out /proc/learn", 73},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s learn %s -q --no-ask 2>&1", cli, bad[i].args);
    int code = il_test_run(cmd, out, sizeof out);
    if (code != bad[i].code) fprintf(stderr, "learn %s: exit %d, want %d: %s\n", bad[i].args, code, bad[i].code, out);
    IL_CHECK_INT(code, bad[i].code);
  }
  snprintf(cmd, sizeof cmd, "%s learn fp16 --quick --device sim:4GB,pcie=fast -q --no-ask 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "pcie");
  if (il_backend_cuda_unavailable()) {
    /* no CUDA here: said before anything is shown or measured */
    snprintf(cmd, sizeof cmd, "%s learn fp16 --quick --device cuda -q --no-ask --out %s/nocuda 2>&1", cli, tmp);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 69);
    IL_CHECK_NOT_CONTAINS(out, "What it is");
    snprintf(cmd, sizeof cmd, "%s/nocuda", tmp);
    IL_CHECK(access(cmd, F_OK) != 0);
  }
  snprintf(cmd, sizeof cmd, "%s learn vram-fragmentation --pattern fragmenting --json", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  json_t *p = json_loads(out, 0, &e);
  IL_CHECK(p && fabs(json_number_value(json_object_get(p, "fragmentation")) - 0.8) < 1e-9);
  IL_CHECK(p && json_is_false(json_object_get(p, "long_request_fits")));
  json_decref(p);
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) IL_SKIP("IL_CLI does not name the inferlab binary");
  snprintf(tmp, sizeof tmp, "%.1000s", il_test_tmpdir());
  char lib[4096];
  if (!il_machine_fake_lib("nvml", lib, sizeof lib)) {
    /* the test binary sits beside inferlab, so it finds the same simulated libraries */
    fprintf(stderr, "the simulated driver libraries are not built\n");
    return 1;
  }
  test_cli();
  json_t *all = test_all();
  if (all) test_answers_follow_figures(all);
  json_decref(all);
  test_ctrl_c();
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  il_test_run(cmd, NULL, 0);
  return il_test_finish();
}
