/* tests/test_measured_figures: every time, rate and peak RSS the commands print, held against
 * what this test measures itself from outside the process: the process's wall time (clock
 * read before fork and after wait4), its peak RSS (wait4's rusage of that one child), and
 * token counts it knows (asked for with --ignore-eos, or counted with `tokenize`).
 *
 * Every bound holds however loaded the machine is: a duration measured inside a process can
 * only be shorter than the process's whole life, a rate of N tokens over such a duration can
 * only be higher than N over the whole life, and the peak RSS of a part of a process can only
 * be below the peak of the process that did that part. Nothing here asserts a speed.
 * Runs $IL_CLI (set by CTest) on builtin:tiny, which needs no fixture.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/timer.h"
#include "harness.h"

/* bench resets the kernel's peak RSS before each repetition (to measure that repetition), and
 * wait4's figure is the peak since the last reset: a repetition's peak can exceed it by what
 * was freed after that reset. Memory, not time: the same on any load. */
#define RESET_SLACK_MIB 1.0

static const char *cli;
static char tmp[256];
static char out[1 << 16], cmd[8192];

typedef struct {
  int code;          /* exit code, -1 when it did not exit normally */
  double wall_s;     /* fork to reap, measured here */
  double maxrss_b;   /* wait4's ru_maxrss of that process */
} il__proc;

/* Runs `sh -c 'exec CMD'` (sh replaces itself with the command: one process, measured by
 * wait4) with stdout and stderr to tmp/out.txt, which is then read into out. */
static il__proc il__timed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static il__proc il__timed(const char *fmt, ...) {
  char body[7000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "exec %s > %s/out.txt 2>&1", body, tmp);
  il__proc p = {-1, 0, 0};
  fflush(NULL);
  const double t0 = il_time_now();
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  struct rusage ru;
  while (pid > 0 && wait4(pid, &ws, 0, &ru) < 0 && errno == EINTR) {
  }
  p.wall_s = il_time_now() - t0;
  if (pid > 0 && WIFEXITED(ws)) p.code = WEXITSTATUS(ws);
  p.maxrss_b = pid > 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
  char path[300];
  snprintf(path, sizeof path, "%s/out.txt", tmp);
  char *s = il_test_read_file(path, NULL);
  snprintf(out, sizeof out, "%s", s ? s : "");
  free(s);
  if (p.code != 0) fprintf(stderr, "command: %s\nexit %d, output:\n%s\n", body, p.code, out);
  return p;
}

/* "1.5 MiB" / "812.0 KiB" / "20 B" after `key` in s, in bytes; -1 when absent. */
static double il__bytes_after(const char *s, const char *key) {
  const char *k = s ? strstr(s, key) : NULL;
  if (!k) return -1;
  char unit[8] = "";
  double v = 0;
  if (sscanf(k + strlen(key), " %lf %7s", &v, unit) != 2) return -1;
  if (!strncmp(unit, "GiB", 3)) return v * 1073741824.0;
  if (!strncmp(unit, "MiB", 3)) return v * 1048576.0;
  if (!strncmp(unit, "KiB", 3)) return v * 1024.0;
  return v;
}

/* The number after `key` in a JSON line ("key":NUMBER); NAN when absent. */
static double il__json_num(const char *line, const char *key) {
  char k[80];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(line, k);
  return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* run's summary: prompt and generation time inside the process's wall time, each rate at
 * least its token count over that wall time, the count the one asked for, peak RSS at most
 * the process's. This failed while generation time counted each decode twice (issue 28). */
static void test_run(void) {
  const int n = 200;
  il__proc p = il__timed("%s run -m builtin:tiny -p Hello -n %d --temp 0 --ignore-eos --no-echo", cli, n);
  IL_CHECK_INT(p.code, 0);
  int np = -1, ng = -1;
  double ps = -1, pr = -1, gs = -1, gr = -1;
  const char *a = strstr(out, "prompt:"), *b = strstr(out, "generation:");
  IL_CHECK(a && sscanf(a, "prompt: %d tokens in %lf s (%lf tokens/s)", &np, &ps, &pr) == 3);
  IL_CHECK(b && sscanf(b, "generation: %d tokens in %lf s (%lf tokens/s)", &ng, &gs, &gr) == 3);
  IL_CHECK_INT(ng, n);
  char summary[sizeof out];
  snprintf(summary, sizeof summary, "%s", out);
  IL_CHECK_INT(il__timed("%s tokenize -m builtin:tiny --ids Hello", cli).code, 0);
  int ids = 0;
  for (char *t = strtok(out, " \n"); t; t = strtok(NULL, " \n")) ids++;
  IL_CHECK(ids > 0);
  IL_CHECK_INT(np, ids);
  /* the printed seconds are rounded to 1 ms */
  IL_CHECK(ps + gs <= p.wall_s + 0.001);
  IL_CHECK(gr >= ng / p.wall_s * 0.999);
  IL_CHECK(pr >= np / p.wall_s * 0.999);
  if (gs > p.wall_s) fprintf(stderr, "generation %.3f s in a process of %.3f s\n", gs, p.wall_s);
  double rss = il__bytes_after(summary, "process peak RSS");
  IL_CHECK(rss > 0);
  IL_CHECK(rss <= p.maxrss_b * 1.001 + 52429); /* printed to 0.1 MiB */
}

/* chat --stats: the replies' seconds add up to at most the process's wall time, each reply
 * generated the -n tokens asked for, at a rate of at least that over the wall time. */
static void test_chat_stats(void) {
  const int n = 20;
  il__proc p = il__timed("printf 'Hello\\nOnce upon\\n' | %s chat -m builtin:tiny --stats -n %d --ignore-eos", cli, n);
  /* the pipe: sh -c cannot exec a pipeline, so wall time is sh's; wait4's RSS is not used */
  IL_CHECK_INT(p.code, 0);
  double sum = 0;
  int replies = 0;
  for (const char *s = strstr(out, "prompt tokens ("); s; s = strstr(s + 1, "prompt tokens (")) {
    int reused = -1, ng = -1;
    double secs = -1, rate = -1;
    IL_CHECK(sscanf(s, "prompt tokens (%d reused), %d generated in %lf s, %lf tokens/s", &reused, &ng, &secs, &rate) == 4);
    IL_CHECK_INT(ng, n);
    IL_CHECK(rate >= ng / p.wall_s * 0.99);
    sum += secs;
    replies++;
  }
  IL_CHECK_INT(replies, 2);
  IL_CHECK(sum <= p.wall_s + 0.01); /* printed to 10 ms */
}

/* bench --jsonl: every repetition's end-to-end time inside the process's life and their sum
 * too; rates at least tokens over that life; peak RSS at most the process's. The table's
 * mean end to end times the repetitions fits as well. */
static void test_bench(void) {
  const int reps = 3, P = 16, G = 16;
  il__proc p = il__timed("%s bench -m builtin:tiny -p %d --gen %d -r %d --roofline-ms 0 -q --no-gpu --jsonl", cli, P, G, reps);
  IL_CHECK_INT(p.code, 0);
  double sum = 0;
  int lines = 0;
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
    if (*l != '{') continue;
    double e2e = il__json_num(l, "e2e_s"), ttft = il__json_num(l, "ttft_s"), load = il__json_num(l, "load_s");
    IL_CHECK(e2e > 0 && ttft > 0 && ttft <= e2e && load >= 0);
    IL_CHECK(il__json_num(l, "prompt_tps") >= P / p.wall_s);
    IL_CHECK(il__json_num(l, "gen_tps") >= G / p.wall_s);
    IL_CHECK(il__json_num(l, "peak_rss_bytes") <= p.maxrss_b * 1.05 + 1048576.0 * RESET_SLACK_MIB);
    IL_CHECK(il__json_num(l, "tpot_s") * G <= e2e);
    sum += e2e;
    lines++;
  }
  IL_CHECK_INT(lines, reps);
  IL_CHECK(sum <= p.wall_s);
  p = il__timed("%s bench -m builtin:tiny -p %d --gen %d -r %d --roofline-ms 0 -q --no-gpu", cli, P, G, reps);
  IL_CHECK_INT(p.code, 0);
  const char *row = strstr(out, "\n| 1 | 16 | 16 |");
  double ttft_ms = -1, tpot_ms = -1, e2e_ms = -1, sd;
  int th = 0;
  IL_CHECK(row && sscanf(row, "\n| 1 | 16 | 16 | %d | %lf ± %lf | %lf ± %lf | %lf", &th, &ttft_ms, &sd, &tpot_ms, &sd, &e2e_ms) == 6);
  IL_CHECK(e2e_ms > 0 && e2e_ms * reps / 1000 <= p.wall_s);
  double rss = il__bytes_after(out, " rss");
  IL_CHECK(rss > 0 && rss <= p.maxrss_b * 1.05 + 1048576.0 * RESET_SLACK_MIB);
}

/* eval: the seconds it prints inside its wall time; its token count the one tokenize counts;
 * windows and scored tokens what the definition in its help gives for that count. */
static void test_eval(void) {
  const int ctx = 64, chunks = 4;
  char text[300];
  snprintf(text, sizeof text, "%s/text.txt", tmp);
  FILE *f = fopen(text, "w");
  IL_CHECK(f != NULL);
  if (!f) return;
  for (int i = 0; i < 60; i++) fprintf(f, "Once upon a time there was a little girl named Lily number %d.\n", i);
  fclose(f);
  IL_CHECK_INT(il__timed("%s tokenize -m builtin:tiny --ids -f %s", cli, text).code, 0);
  int ids = 0;
  for (char *t = strtok(out, " \n"); t; t = strtok(NULL, " \n")) ids++;
  il__proc p = il__timed("%s eval -m builtin:tiny --text %s --ctx %d", cli, text, ctx);
  IL_CHECK_INT(p.code, 0);
  const char *s = strstr(out, ": ");
  int tokens = -1, windows = -1, wctx = -1, scored = -1;
  double secs = -1;
  IL_CHECK(s && sscanf(s, ": %d tokens, %d windows of %d, %d scored, %lf s", &tokens, &windows, &wctx, &scored, &secs) == 5);
  IL_CHECK_INT(tokens, ids);
  IL_CHECK_INT(windows, ids / ctx);
  IL_CHECK_INT(wctx, ctx);
  IL_CHECK_INT(scored, windows * (ctx / 2 - 1));
  IL_CHECK(secs >= 0 && secs <= p.wall_s + 0.01);
  p = il__timed("%s eval -m builtin:tiny --text %s --ctx %d --chunks %d", cli, text, ctx, chunks);
  s = strstr(out, ": ");
  IL_CHECK(p.code == 0 && s && sscanf(s, ": %d tokens, %d windows of %d, %d scored, %lf s", &tokens, &windows, &wctx, &scored, &secs) == 5);
  IL_CHECK_INT(windows, chunks);
  IL_CHECK(secs <= p.wall_s + 0.01);
}

/* The lines of tmp/DIR/samples.jsonl (the one evidence folder under DIR) into out. */
static int il__samples(const char *dir) {
  char c[600];
  snprintf(c, sizeof c, "cat %s/%s/*/samples.jsonl", tmp, dir);
  return il_test_run(c, out, sizeof out);
}

/* experiment: each sample's peak RSS is that run's own, not the process's (issue 28: 172 MiB
 * beside bench's 20 MiB, from the CUDA libraries the doctor snapshot left mapped), so it is
 * at most what a separate bench process doing the same work peaks at, as wait4 measures it
 * here (with room for the experiment's own bookkeeping); durations fit in the wall time. */
static void test_experiment(void) {
  /* under AddressSanitizer freed memory stays resident in its quarantine, so a later run in the
   * same process starts above a fresh process's peak: the bound is a property of the build */
#if defined(__SANITIZE_ADDRESS__)
  const bool asan = true;
  printf("SKIP (part): AddressSanitizer build: experiment's per-run peak RSS bound not checked\n");
#else
  const bool asan = false;
#endif
  const char *work = "-m builtin:tiny -p 16 --gen 16 --no-gpu";
  il__proc ref = il__timed("%s bench %s -r 1 --warmup 1 --roofline-ms 0 -q", cli, work);
  IL_CHECK_INT(ref.code, 0);
  il__proc p = il__timed("%s experiment %s -r 2 --change threads=1 -o %s/xe -q", cli, work, tmp);
  IL_CHECK_INT(p.code, 0);
  IL_CHECK_INT(il__samples("xe"), 0);
  double sum = 0;
  int n = 0;
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
    double rss = il__json_num(l, "peak_rss_bytes"), e2e = il__json_num(l, "e2e_s");
    IL_CHECK(rss > 0 && (rss <= ref.maxrss_b * 1.25 + 4194304.0 || asan));
    if (!(rss <= ref.maxrss_b * 1.25 + 4194304.0) && !asan)
      fprintf(stderr, "sample peak RSS %.1f MiB, bench process %.1f MiB\n", rss / 1048576, ref.maxrss_b / 1048576);
    IL_CHECK(e2e > 0 && e2e <= p.wall_s);
    sum += e2e;
    n++;
  }
  IL_CHECK_INT(n, 4);
  IL_CHECK(sum <= p.wall_s);
  /* --cmd: each command's peak is its own (it was an earlier child's, or the parent's pages a
   * forked child starts with), so at most that command's peak measured alone here */
  il__proc one = il__timed("%s run -m builtin:tiny -p Hi -n 16 --no-echo", cli);
  IL_CHECK_INT(one.code, 0);
  p = il__timed("%s experiment --cmd '%s run -m builtin:tiny -p Hi -n {} --no-echo' --values 8,16 -r 2 -o %s/xc -q --no-gpu",
                cli, cli, tmp);
  IL_CHECK_INT(p.code, 0);
  IL_CHECK_INT(il__samples("xc"), 0);
  n = 0;
  sum = 0;
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
    double rss = il__json_num(l, "peak_rss_bytes"), d = il__json_num(l, "duration_s");
    IL_CHECK(rss > 0 && rss <= one.maxrss_b * 1.1 + 2097152.0);
    if (!(rss <= one.maxrss_b * 1.1 + 2097152.0))
      fprintf(stderr, "command peak RSS %.1f MiB, alone %.1f MiB\n", rss / 1048576, one.maxrss_b / 1048576);
    IL_CHECK(d > 0 && d <= p.wall_s);
    sum += d;
    n++;
  }
  IL_CHECK_INT(n, 4);
  IL_CHECK(sum <= p.wall_s);
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli) IL_SKIP("IL_CLI is not set (run through ctest)");
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  test_run();
  test_chat_stats();
  test_bench();
  test_eval();
  test_experiment();
  char rm[300];
  snprintf(rm, sizeof rm, "rm -rf %s", tmp);
  il_test_run(rm, NULL, 0);
  return il_test_finish();
}
