/* tests/test_lab_bench: the lab commands end to end through $IL_CLI on builtin:tiny with tiny
 * sizes: bench's table, --json (checked with python3) and --report (parsed as XML), a sweep's
 * row count, usage errors; experiment refusing two changes, a real --change run whose
 * baseline.conf is accepted back by bench --config, and --show; watch's exit status. */
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static const char *cli;
static char tmp[256];

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) IL_SKIP("IL_CLI is not set to the inferlab binary");
  bool python = system("python3 -c '' 2>/dev/null") == 0;
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  static char out[1 << 17], cmd[4096];
  const char *small = "--prompt 8 --gen 4 -r 2 -t 1 --roofline-ms 20 --no-gpu";

  /* table with a sweep: one row per combination */
  snprintf(cmd, sizeof cmd, "%s bench %s --batch 1,2 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "| batch | prompt | gen | threads | TTFT ms |") != NULL);
  IL_CHECK(strstr(out, "| 1 | 8 | 4 | 1 |") != NULL);
  IL_CHECK(strstr(out, "| 2 | 8 | 4 | 1 |") != NULL);
  IL_CHECK(strstr(out, "no GPU (GPU sampling off)") != NULL);
  if (il_test_failed) printf("%s\n", out);

  /* JSON + HTML report */
  snprintf(cmd, sizeof cmd, "%s bench %s --batch 1,2 --wtype f32,q8_0 --json --report %s/r.html -q > %s/b.json", cli,
           small, tmp, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  if (python) {
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d[\"results\"]; "
             "assert d[\"schema_version\"]==1 and len(r)==4, len(r); "
             "assert all(x[\"status\"]==\"ok\" and len(x[\"samples\"])==2 and len(x[\"step_seconds\"])==8 for x in r); "
             "assert [x[\"point\"][\"wtype\"] for x in r]==[\"f32\",\"q8_0\",\"f32\",\"q8_0\"]; "
             "assert all(x[\"summary\"][\"gen_tps\"][\"mean\"]>0 and x[\"memory_peak_bytes\"][\"kv\"]>0 for x in r); "
             "assert r[2][\"memory_peak_bytes\"][\"kv\"]==2*r[0][\"memory_peak_bytes\"][\"kv\"]; "
             "import xml.etree.ElementTree as ET; t=ET.parse(sys.argv[2]); "
             "n=len(list(t.getroot().iter(\"{http://www.w3.org/2000/svg}svg\"))); assert n==11, n' %s/b.json %s/r.html",
             tmp, tmp);
    IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  }
  /* CSV: header + one row per combination */
  snprintf(cmd, sizeof cmd, "%s bench %s --threads 1 --gen 2,4 --csv -q", cli, "--prompt 8 -r 1 --roofline-ms 0 --no-gpu");
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_INT(count(out, "\n"), 3);
  /* usage errors */
  snprintf(cmd, sizeof cmd, "%s bench --threads 1,x 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK(strstr(out, "--threads") != NULL);
  snprintf(cmd, sizeof cmd, "%s bench --json --csv 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  snprintf(cmd, sizeof cmd, "%s bench -m /nonexistent.gguf %s 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);

  /* experiment: two changes refused, one change measured */
  snprintf(cmd, sizeof cmd, "%s experiment --change batch=2 --change threads=2 --out %s 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK(strstr(out, "exactly one option") != NULL);
  snprintf(cmd, sizeof cmd,
           "%s experiment -t 1 --prompt 8 --gen 4 --repeat 2 --warmup 0 --change batch=2 --no-gpu -q --out %s/runs", cli,
           tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "experiment: batch 1 -> 2") != NULL);
  IL_CHECK(strstr(out, "generated tokens/s (all sequences)") != NULL);
  const char *ev = strstr(out, "evidence:   ");
  IL_CHECK(ev != NULL);
  if (!ev) printf("%s\n", out);
  if (ev) {
    char dir[1024];
    sscanf(ev + 12, "%1023s", dir);
    dir[strlen(dir) - 1] = 0; /* trailing '/' */
    snprintf(cmd, sizeof cmd, "%s bench --config %s/baseline.conf --prompt 8 --gen 2 -r 1 --roofline-ms 0 -q 2>&1", cli, dir);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK(strstr(out, "| 1 | 8 | 2 | 1 |") != NULL); /* batch 1 and threads 1 came from the file */
    snprintf(cmd, sizeof cmd, "%s experiment --show %s", cli, dir);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK(strstr(out, "batch 1 -> 2") != NULL && strstr(out, "samples.jsonl") != NULL);
    snprintf(cmd, sizeof cmd, "test $(wc -l < %s/samples.jsonl) -eq 4", dir);
    IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  }
  snprintf(cmd, sizeof cmd, "%s experiment --show %s/nothing 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);

  /* watch passes the exit status through and reports to -o */
  snprintf(cmd, sizeof cmd, "%s watch -q --no-gpu -o %s/w.txt -- sh -c 'sleep 0.2; exit 3'", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 3);
  snprintf(cmd, sizeof cmd, "cat %s/w.txt", tmp);
  il_test_run(cmd, out, sizeof out);
  IL_CHECK(strstr(out, "exit:          status 3") != NULL);
  double secs = 0;
  const char *d = strstr(out, "duration:");
  if (d) secs = atof(d + 9);
  IL_CHECK(secs >= 0.2);
  snprintf(cmd, sizeof cmd, "%s watch 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);

  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) printf("could not remove %s\n", tmp);
  return il_test_finish();
}
