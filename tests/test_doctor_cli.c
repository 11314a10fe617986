/* tests/test_doctor_cli: `inferlab doctor` and `inferlab monitor` through the real binary
 * ($IL_CLI): exit codes (0/1/2, 64 usage, 66 monitor with an --nvml-lib that does not load), the report on this very
 * machine, --json that python3 parses, --explain, and monitor's sample count with the fake NVML.
 * Skips with a reason when the binary or the fakes are not built.
 */
#include <stdbool.h>
#include <sys/wait.h>

#include "il_build_info.h"
#include "sysroots/sysroot.h"

static const char *cli;

/* The healthy fixture's driver must be new enough for the CUDA this binary was built with:
 * a CUDA 13 build needs the 580 branch, so there the fixture's two A100s run driver 580.65.06
 * (CUDA 13.0); a CPU-only build keeps 535.54.03. */
#if IL_HAVE_CUDA
#define DRV "580.65.06"
#else
#define DRV "535.54.03"
#endif
static char scen[4096];
static const char *two_a100(void) {
  const char *src = SR_TWO_A100;
  size_t o = 0;
  while (*src && o + 16 < sizeof scen) {
    if (!strncmp(src, "535.54.03", 9)) o += (size_t)snprintf(scen + o, sizeof scen - o, "%s", DRV), src += 9;
    else if (IL_HAVE_CUDA && !strncmp(src, "cuda_driver=12020", 17))
      o += (size_t)snprintf(scen + o, sizeof scen - o, "cuda_driver=13000"), src += 17;
    else scen[o++] = *src++;
  }
  scen[o] = 0;
  return scen;
}

static char out[1 << 17];

static void test_this_machine(void) {
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "'%s' doctor --bandwidth-ms 50 2>&1", cli);
  int code = il_test_run(cmd, out, sizeof out);
  IL_CHECK(code == 0 || code == 1 || code == 2);
  IL_CHECK_CONTAINS(out, "driver.nvml: ");
  IL_CHECK_CONTAINS(out, "host.cpu: ");
  IL_CHECK_CONTAINS(out, "-> exit code ");
  if (code) IL_CHECK_CONTAINS(out, "What to fix");
  printf("this machine: doctor exit code %d\n", code);
  /* Without a driver the report says so plainly and names the CPU backend. */
  if (access("/proc/driver/nvidia/version", F_OK) != 0 && strstr(out, "no NVIDIA driver")) {
    IL_CHECK_CONTAINS(out, "CPU backend");
    IL_CHECK_INT(code, 1);
  }
  snprintf(cmd, sizeof cmd, "'%s' doctor --json --bandwidth-ms 0 | python3 -m json.tool > /dev/null && echo JSON-OK", cli);
  if (system("python3 -c 'import json' 2>/dev/null") == 0) {
    il_test_run(cmd, out, sizeof out);
    IL_CHECK_CONTAINS(out, "JSON-OK");
  }
}

static void test_fixture_exit_codes(void) {
  const char *root = sr_new_host();
  char nvml[PATH_MAX], cuda[PATH_MAX], cmd[4 * PATH_MAX];
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_pci_gpu(root, "0000:0b:00.0", 0x20b2, "nvidia");
  sr_driver(root, DRV, 0, 2, 1);
  sr_install_nvml(root, DRV, nvml, sizeof nvml);
  sr_install_cuda(root, "/usr/lib/x86_64-linux-gnu", DRV, cuda, sizeof cuda);
  sr_scenario(root, "%s", two_a100());
  /* Healthy fixture (env -i: no CUDA_VISIBLE_DEVICES from the caller): no failure; this
   * binary is CPU-only unless built with CUDA, and with GPUs present that is the one WARN. */
  snprintf(cmd, sizeof cmd, "env -i IL_FAKE_GPU='%s/fake_gpu.txt' PATH=/usr/bin:/bin '%s' doctor --sysroot '%s' --nvml-lib '%s' --cuda-lib '%s' --bandwidth-ms 0 2>&1",
           root, cli, root, nvml, cuda);
  int code = il_test_run(cmd, out, sizeof out);
  bool cpu_only = strstr(out, "WARN  runtime.build: CPU-only build on a machine with 2 usable NVIDIA GPUs") != NULL;
  IL_CHECK_INT(code, cpu_only ? 1 : 0);
  if (code != (cpu_only ? 1 : 0)) fprintf(stderr, "%s\n", out);
  IL_CHECK_CONTAINS(out, cpu_only ? "1 WARN, 0 FAIL" : "0 WARN, 0 FAIL");
  IL_CHECK_CONTAINS(out, "Devices (driver " DRV ")");
  /* Library paths through the environment instead of flags. */
  snprintf(cmd, sizeof cmd, "env -i IL_FAKE_GPU='%s/fake_gpu.txt' INFERLAB_NVML_LIB='%s' INFERLAB_CUDA_LIB='%s' '%s' doctor --sysroot '%s' --bandwidth-ms 0 --json",
           root, nvml, cuda, cli, root);
  code = il_test_run(cmd, out, sizeof out);
  IL_CHECK_INT(code, cpu_only ? 1 : 0);
  IL_CHECK_CONTAINS(out, "\"nvml_loaded\":true");
  IL_CHECK_CONTAINS(out, "\"schema_version\":1");
  /* Issue 9 item 12: raw non-UTF-8 bytes in argv (the sysroot path) and in the environment
   * still give valid UTF-8 JSON (python3 decodes it strictly). */
  if (system("python3 -c 'import json' 2>/dev/null") == 0) {
    char odd[PATH_MAX];
    snprintf(odd, sizeof odd, "%s/odd\xff\xc3", root);
    if (symlink(root, odd) == 0) {
      snprintf(cmd, sizeof cmd, "env -i IL_FAKE_GPU='%s/fake_gpu.txt' CUDA_VISIBLE_DEVICES=$(printf '\\377\\376') '%s' doctor --sysroot '%s' "
               "--nvml-lib '%s' --cuda-lib '%s' --bandwidth-ms 0 --json | python3 -c \"import sys,json; "
               "d=json.loads(sys.stdin.buffer.read().decode('utf-8')); assert '\\ufffd' in d['sysroot']; print('UTF8-OK')\"",
               root, cli, odd, nvml, cuda);
      il_test_run(cmd, out, sizeof out);
      IL_CHECK_CONTAINS(out, "UTF8-OK");
      if (!strstr(out, "UTF8-OK")) fprintf(stderr, "%s\n", out);
      unlink(odd);
    }
  }
  /* A failure -> 2. */
  sr_scenario(root, "%snvml.init=18\n", two_a100());
  snprintf(cmd, sizeof cmd, "env -i IL_FAKE_GPU='%s/fake_gpu.txt' '%s' doctor --sysroot '%s' --nvml-lib '%s' --cuda-lib '%s' --bandwidth-ms 0 2>&1",
           root, cli, root, nvml, cuda);
  code = il_test_run(cmd, out, sizeof out);
  IL_CHECK_INT(code, 2);
  IL_CHECK_CONTAINS(out, "FAIL  driver.nvml: Failed to initialize NVML: Driver/library version mismatch");
  IL_CHECK_CONTAINS(out, "What to fix\n  1. [FAIL driver.nvml] (docs/doctor.md#driver-library-mismatch)\n     Reboot");
  /* A warning only -> 1. */
  sr_scenario(root, "%sdev0.mem_used=75161927680\n", two_a100());
  code = il_test_run(cmd, out, sizeof out);
  IL_CHECK_INT(code, 1);

  /* monitor: 3 samples of 2 GPUs as JSON lines. */
  sr_scenario(root, "%s", two_a100());
  snprintf(cmd, sizeof cmd, "IL_FAKE_GPU='%s/fake_gpu.txt' '%s' monitor --nvml-lib '%s' -i 20ms -c 3 --json-lines", root, cli, nvml);
  code = il_test_run(cmd, out, sizeof out);
  IL_CHECK_INT(code, 0);
  int lines = 0;
  for (const char *p = out; *p; p++) lines += *p == '\n';
  IL_CHECK_INT(lines, 6);
  IL_CHECK_CONTAINS(out, "\"gpu\":1,\"util_gpu_pct\":0,\"util_mem_pct\":0,\"mem_used_bytes\":4194304,\"mem_total_bytes\":85899345920,"
                       "\"power_mw\":58000,\"temp_c\":31,\"clock_sm_mhz\":1410,\"clock_mem_mhz\":1593}");
  if (system("python3 -c 'import json' 2>/dev/null") == 0) {
    char cmd2[5 * PATH_MAX];
    snprintf(cmd2, sizeof cmd2, "%s | python3 -c \"import sys,json; [json.loads(l) for l in sys.stdin]; print('JSONL-OK')\"", cmd);
    il_test_run(cmd2, out, sizeof out);
    IL_CHECK_CONTAINS(out, "JSONL-OK");
  }
  /* Table form: header, 2 device-name lines, 2 rows per sample. */
  snprintf(cmd, sizeof cmd, "IL_FAKE_GPU='%s/fake_gpu.txt' '%s' monitor --nvml-lib '%s' -i 0.02 -c 2", root, cli, nvml);
  code = il_test_run(cmd, out, sizeof out);
  IL_CHECK_INT(code, 0);
  IL_CHECK_CONTAINS(out, "# gpu   sm%  mem%");
  IL_CHECK_CONTAINS(out, "# 0: NVIDIA A100-SXM4-80GB");
  IL_CHECK_CONTAINS(out, "    0     3     1          4      81920    61.0      34     1410     1593\n");
  sr_destroy(root);
}

static void test_usage_and_explain(void) {
  char cmd[PATH_MAX + 256];
  snprintf(cmd, sizeof cmd, "'%s' doctor --frobnicate 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "unknown option '--frobnicate'");
  snprintf(cmd, sizeof cmd, "'%s' doctor --sysroot 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  snprintf(cmd, sizeof cmd, "'%s' doctor --help", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "exit codes: 0 all checks OK, 1 warnings only, 2 at least one failure");
  snprintf(cmd, sizeof cmd, "'%s' monitor -i fast 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  snprintf(cmd, sizeof cmd, "'%s' monitor -c 0 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  /* a library named on the command line that does not load: said so, with the loader's
   * reason, not "no NVIDIA driver" (issue 9) */
  snprintf(cmd, sizeof cmd, "'%s' monitor --nvml-lib /nonexistent/libnvidia-ml.so.1 -c 1 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);
  IL_CHECK_CONTAINS(out, "/nonexistent/libnvidia-ml.so.1 could not be loaded");
  IL_CHECK(strstr(out, "No such file") != NULL && strstr(out, "no NVIDIA driver") == NULL);
  snprintf(cmd, sizeof cmd, "'%s' doctor --explain 'Failed to initialize NVML: Driver/library version mismatch' 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "1. Driver/library version mismatch (docs/doctor.md#driver-library-mismatch");
  snprintf(cmd, sizeof cmd, "'%s' doctor --explain 'Error 804: forward compatibility was attempted on non supported HW' --json", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "\"matches\":[{\"scenario\":2,");
  /* --explain - reads the message from stdin (a pasted log). */
  snprintf(cmd, sizeof cmd, "printf 'loading...\\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 9220.57 MiB on device 0: "
                            "cudaMalloc failed: out of memory\\n' | '%s' doctor --explain - 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "(docs/doctor.md#oom-model-too-large;");
  IL_CHECK_CONTAINS(out, "one buffer of 9.00 GiB did not fit");
  snprintf(cmd, sizeof cmd, "'%s' doctor --explain - < /dev/null 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 1);
  IL_CHECK(strstr(out, "Not recognised") != NULL && strstr(out, "inferlab doctor") != NULL);
  snprintf(cmd, sizeof cmd, "'%s' doctor --explain 'all good here' 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 1);
  IL_CHECK_CONTAINS(out, "Not recognised");
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) IL_SKIP("the inferlab binary ($IL_CLI) is not built; the library-level tests cover the checks");
  test_usage_and_explain();
  test_this_machine();
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) {
    printf("SKIP (partial): fake NVML/CUDA libraries not built; fixture CLI runs skipped\n");
    return il_test_finish();
  }
  test_fixture_exit_codes();
  return il_test_finish();
}
