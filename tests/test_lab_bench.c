/* tests/test_lab_bench: the lab commands end to end through $IL_CLI on builtin:tiny with tiny
 * sizes: bench's table, --json (checked with python3) and --report (parsed as XML), a sweep's
 * row count, usage errors; the compute peak (sys/peak: which instruction binds each kernel level
 * and weight type, measured > 0, quoted in the table, the limits line and the JSON; none with
 * the scalar kernels); experiment refusing two changes, a real --change run whose
 * baseline.conf is accepted back by bench --config, and --show; watch's exit status. */
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sys/peak.h"

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
  snprintf(cmd, sizeof cmd, "%s bench %s --parallel 1,2 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "| batch | prompt | gen | threads | TTFT ms |");
  IL_CHECK_CONTAINS(out, "| 1 | 8 | 4 | 1 |");
  IL_CHECK_CONTAINS(out, "| 2 | 8 | 4 | 1 |");
  IL_CHECK_CONTAINS(out, "no GPU (GPU sampling off)");
  if (il_test_failed) printf("%s\n", out);

  /* the compute peak: the instruction each level's kernels use, measured; the table's column and
   * the line saying which limit each phase runs against */
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_SCALAR, IL_DTYPE_Q8_0, IL_DTYPE_F32), -1);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX512, IL_DTYPE_Q4_K, IL_DTYPE_F32), IL_PEAK_VNNI512);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX512, IL_DTYPE_BF16, IL_DTYPE_F32), IL_PEAK_FMA512);
  /* BF16 activations: vdpbf16ps where the CPU has it (the BF16 GEMM's dot product) */
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX512, IL_DTYPE_BF16, IL_DTYPE_BF16),
               il_cpu_features_get()->avx512bf16 ? IL_PEAK_BF16DOT : IL_PEAK_FMA512);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX2, IL_DTYPE_BF16, IL_DTYPE_BF16), IL_PEAK_FMA256);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX512, IL_DTYPE_F16, IL_DTYPE_BF16), IL_PEAK_FMA512);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX2, IL_DTYPE_F32, IL_DTYPE_F32), IL_PEAK_FMA256);
  IL_CHECK_INT(il_peak_kind_for(IL_ISA_AVX2, IL_DTYPE_Q4_0, IL_DTYPE_F32),
               il_cpu_features_get()->avxvnni ? IL_PEAK_AVXVNNI : IL_PEAK_AVX2);
  const bool has_peak = il_peak_available(IL_PEAK_FMA256);
  if (has_peak) {
    il_pool *pool = NULL;
    IL_CHECK_OK(il_pool_new(1, &pool));
    for (int k = 0; pool && k < IL_PEAK_KINDS; k++) {
      double g = -1;
      if (!il_peak_available((il_peak_kind)k)) {
        IL_CHECK_INT(il_peak_measure(pool, (il_peak_kind)k, &g), IL_ERR_UNSUPPORTED);
        continue;
      }
      IL_CHECK_OK(il_peak_measure(pool, (il_peak_kind)k, &g));
      IL_CHECK(g > 1); /* GOPS: any AVX2 core does tens */
      printf("peak %s: %.0f GOPS on 1 thread\n", il_peak_name((il_peak_kind)k), g);
    }
    il_pool_free(pool);
    IL_CHECK_CONTAINS(out, "| gen roof % | prompt peak % |");
    IL_CHECK(strstr(out, "compute peak ") != NULL && strstr(out, "GOPS (vfmadd231ps") != NULL);
    /* which of the three a run gets depends on the machine's speed (a sanitizer build or a loaded
     * machine is below both limits): that one of them is printed is what holds */
    IL_CHECK(strstr(out, "generation bandwidth-bound") != NULL || strstr(out, "generation compute-bound") != NULL ||
             strstr(out, "generation below both limits") != NULL);
  } else {
    printf("SKIP (part): no AVX2 on this CPU: no compute peak to measure\n");
  }
  snprintf(cmd, sizeof cmd, "%s bench %s --isa scalar 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_NOT_CONTAINS(out, "compute peak"); /* the scalar kernels have no instruction to quote */

  /* JSON + HTML report */
  snprintf(cmd, sizeof cmd, "%s bench %s --parallel 1,2 --wtype f32,q8_0 --json --report %s/r.html -q > %s/b.json", cli,
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
             "p=[x[\"compute_peak_gops\"] for x in r]; f=[x[\"summary\"][\"prompt_peak_frac\"][\"mean\"] for x in r]; "
             "assert (%s and all(g and g>1 for g in p) and all(0<v<2 for v in f)) or (not %s and all(g is None for g in p)), (p, f); "
             "import xml.etree.ElementTree as ET; t=ET.parse(sys.argv[2]); "
             "n=len(list(t.getroot().iter(\"{http://www.w3.org/2000/svg}svg\"))); assert n==11, n' %s/b.json %s/r.html",
             has_peak ? "True" : "False", has_peak ? "True" : "False", tmp, tmp);
    IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  }
  /* CSV: header + one row per combination */
  snprintf(cmd, sizeof cmd, "%s bench %s --threads 1 --gen 2,4 --csv -q", cli, "--prompt 8 -r 1 --roofline-ms 0 --no-gpu");
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_INT(count(out, "\n"), 3);
  /* usage errors */
  snprintf(cmd, sizeof cmd, "%s bench --threads 1,x 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--threads");
  snprintf(cmd, sizeof cmd, "%s bench --json --csv 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  snprintf(cmd, sizeof cmd, "%s bench -m /nonexistent.gguf %s 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);

  /* experiment: two changes refused, one change measured */
  snprintf(cmd, sizeof cmd, "%s experiment --change batch=2 --change threads=2 -o %s 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "exactly one option");
  snprintf(cmd, sizeof cmd,
           "%s experiment -t 1 --prompt 8 --gen 4 -r 2 --warmup 0 --change batch=2 --no-gpu -q -o %s/runs", cli,
           tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "experiment: batch 1 -> 2");
  IL_CHECK_CONTAINS(out, "generated tokens/s (all sequences)");
  const char *ev = strstr(out, "evidence:   ");
  IL_CHECK(ev != NULL);
  if (!ev) printf("%s\n", out);
  if (ev) {
    char dir[1024];
    sscanf(ev + 12, "%1023s", dir);
    dir[strlen(dir) - 1] = 0; /* trailing '/' */
    snprintf(cmd, sizeof cmd, "%s bench --config %s/baseline.conf --prompt 8 --gen 2 -r 1 --roofline-ms 0 -q 2>&1", cli, dir);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK_CONTAINS(out, "| 1 | 8 | 2 | 1 |"); /* batch 1 and threads 1 came from the file */
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
  IL_CHECK_CONTAINS(out, "exit:          status 3");
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
