/* tests/test_lab_cmdbench: `bench --cmd` (lab/cmdbench) on short real commands.
 *
 * - `sleep 0.3; echo hi; sleep 0.2`, 3 runs after 1 warm-up: 3 samples, each first output at
 *   0.3 s or later (the sleep before the echo; no upper bound: a loaded machine may take any
 *   time), each wall time at 0.5 s or later and not below its first output, every run's wall time
 *   within the time the whole call took on this process's clock (an independent measurement),
 *   the peak RSS above zero, the GPU part saying why there is none; the command's output went to
 *   a temporary file in $TMPDIR that is gone afterwards;
 * - the summary: min <= median <= max of the wall times, as the text and the JSON print them;
 * - a command that exits 3: every run counted as a failure, the first named, no samples in the
 *   summary; an empty command and -r 0 are refused;
 * - the CLI: exit 1 for a failing command, 64 for --cmd with an engine option or --csv.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/timer.h"
#include "harness.h"
#include "lab/cmdbench.h"

static int files_in(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(void) {
  char tmp[] = "/tmp/il-cmdbench-XXXXXX";
  IL_CHECK(mkdtemp(tmp) != NULL);
  setenv("TMPDIR", tmp, 1);
  const il_watch_options wo = {.interval_ms = 50, .nvml_lib = "/nonexistent/libnvidia-ml.so.1"};
  il_cmdbench b;
  const double t0 = il_time_now();
  IL_CHECK_OK(il_cmdbench_run("sleep 0.3; echo hi; sleep 0.2", 3, 1, &wo, NULL, NULL, NULL, &b));
  const double took = il_time_now() - t0;
  IL_CHECK_INT(b.n, 3);
  IL_CHECK_INT(b.failures, 0);
  for (int i = 0; i < b.n; i++) {
    const double *v = b.runs[i].v;
    printf("run %d: wall %.3f s, first output %.3f s, peak rss %.0f\n", i + 1, v[IL_CMDB_WALL], v[IL_CMDB_FIRST_OUTPUT],
           v[IL_CMDB_PEAK_RSS]);
    IL_CHECK_INT(b.runs[i].exit_code, 0);
    IL_CHECK(v[IL_CMDB_FIRST_OUTPUT] >= 0.3);
    IL_CHECK(v[IL_CMDB_WALL] >= 0.5);
    IL_CHECK(v[IL_CMDB_WALL] >= v[IL_CMDB_FIRST_OUTPUT]);
    IL_CHECK(v[IL_CMDB_WALL] <= took);
    IL_CHECK(v[IL_CMDB_PEAK_RSS] > 0);
    IL_CHECK(isnan(v[IL_CMDB_GPU90]));
  }
  IL_CHECK(!b.gpu_available);
  IL_CHECK_CONTAINS(b.gpu_reason, "NVML not loaded");
  IL_CHECK_INT(files_in(tmp), 0); /* the output's temporary file is removed */
  char *txt = NULL, *js = NULL;
  size_t nt = 0, nj = 0;
  FILE *f = open_memstream(&txt, &nt);
  il_cmdbench_print(&b, f);
  fclose(f);
  f = open_memstream(&js, &nj);
  IL_CHECK_OK(il_cmdbench_json(&b, f));
  fclose(f);
  printf("%s", txt);
  double w[3];
  for (int i = 0; i < 3; i++) w[i] = b.runs[i].v[IL_CMDB_WALL];
  double lo = fmin(w[0], fmin(w[1], w[2])), hi = fmax(w[0], fmax(w[1], w[2])), mid = w[0] + w[1] + w[2] - lo - hi;
  char row[160], a[3][32];
  snprintf(a[0], sizeof a[0], "%.3f s", lo);
  snprintf(a[1], sizeof a[1], "%.3f s", mid);
  snprintf(a[2], sizeof a[2], "%.3f s", hi);
  snprintf(row, sizeof row, "%-34s %12s %12s %12s %6d", "wall time", a[0], a[1], a[2], 3);
  IL_CHECK_CONTAINS(txt, row);
  IL_CHECK_CONTAINS(txt, "runs: 3 timed (1 warm-up first), 0 failed");
  IL_CHECK_CONTAINS(js, "\"command\": \"sleep 0.3; echo hi; sleep 0.2\"");
  IL_CHECK_CONTAINS(js, "\"wall_seconds\": {");
  IL_CHECK_CONTAINS(js, "\"n\": 3");
  free(txt);
  free(js);
  il_cmdbench_free(&b);

  IL_CHECK_OK(il_cmdbench_run("exit 3", 2, 0, &wo, NULL, NULL, NULL, &b));
  IL_CHECK_INT(b.n, 2);
  IL_CHECK_INT(b.failures, 2);
  IL_CHECK_INT(b.first_failure_code, 3);
  IL_CHECK_INT(b.first_failure_run, 0);
  f = open_memstream(&txt, &nt);
  il_cmdbench_print(&b, f);
  fclose(f);
  IL_CHECK_CONTAINS(txt, "first failure: run 1 exited with 3");
  free(txt);
  il_cmdbench_free(&b);
  IL_CHECK_INT(il_cmdbench_run("", 2, 0, &wo, NULL, NULL, NULL, &b), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_cmdbench_run("true", 0, 0, &wo, NULL, NULL, NULL, &b), IL_ERR_INVALID_ARG);

  const char *cli = getenv("IL_CLI");
  if (cli) {
    char c[1024];
    snprintf(c, sizeof c, "'%s' bench --cmd 'exit 3' -r 1 --warmup 0 --no-gpu > /dev/null 2>&1", cli);
    int st = system(c);
    IL_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    snprintf(c, sizeof c, "'%s' bench --cmd true --threads 2 > /dev/null 2>&1", cli);
    st = system(c);
    IL_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64);
    snprintf(c, sizeof c, "'%s' bench --cmd true --csv > /dev/null 2>&1", cli);
    st = system(c);
    IL_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64);
  } else {
    printf("SKIP (part): IL_CLI not set: the CLI's exit codes are not checked\n");
  }
  rmdir(tmp);
  return il_test_finish();
}
