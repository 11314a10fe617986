/* cli/doctor: `inferlab doctor`: diagnose the GPU stack and print what to fix.
 *
 * Parses flags into il_doctor_options, runs il_doctor_run over the real machine (or --sysroot)
 * with this process's environment, prints the text or JSON report, and exits with the worst
 * verdict (0 OK, 1 warnings, 2 failures). --explain maps a pasted error message instead.
 * Documented in docs/doctor.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "memory/mem.h"
#include "probe/doctor.h"
#include "probe/explain.h"
#include "probe/report.h"

extern char **environ;

static void il__doctor_help(FILE *f) {
  fprintf(f,
          "usage: inferlab doctor [--json] [--all] [--sysroot DIR] [--nvml-lib PATH] [--cuda-lib PATH]\n"
          "                       [--bandwidth-ms N] [--threads N]\n"
          "       inferlab doctor --explain \"PASTED ERROR MESSAGE\" [--json]\n"
          "       COMMAND 2>&1 | inferlab doctor --explain - [--json]\n\n"
          "Checks the GPU stack end to end (driver, CUDA driver API, this build's CUDA runtime and\n"
          "kernels, kernel modules, /dev nodes, CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES,\n"
          "containers and the NVIDIA Container Toolkit, PCI binding and passthrough, host) and prints\n"
          "one line per check (OK / WARN / FAIL) followed by numbered steps to fix what is wrong.\n\n"
          "options:\n"
          "  --json             print the report as JSON (schema in docs/doctor.md)\n"
          "  --all              list every check; by default the ones that do not apply here share one n/a line\n"
          "  --sysroot DIR      read /proc, /sys, /dev, /etc under DIR instead of / (fixtures, chroots)\n"
          "  --nvml-lib PATH    NVML library to load (default libnvidia-ml.so.1; env INFERLAB_NVML_LIB)\n"
          "  --cuda-lib PATH    CUDA driver library to load (default libcuda.so.1; env INFERLAB_CUDA_LIB)\n"
          "  --bandwidth-ms N   measure host memory read bandwidth for about N ms (default 300, 0 = skip)\n"
          "  --threads N        CPU threads the report assumes for the CPU backend (default: all)\n"
          "  --explain TEXT     map an error message to its known causes, fix and checks ('-': read it from stdin)\n\n"
          "exit codes: 0 all checks OK, 1 warnings only, 2 at least one failure, 64 usage error\n"
          "            (--explain: 0 recognised, 1 not recognised)\n");
}

int il_cli_doctor(int argc, char **argv) {
  il_doctor_options o;
  il_doctor_options_default(&o, environ);
  o.bandwidth_ms = 300;
  o.allow_exec = true;
  bool json = false, all = false;
  const char *explain = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      il__doctor_help(stdout);
      return IL_EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--all")) {
      all = true;
    } else if (!strcmp(a, "--sysroot") || !strcmp(a, "--nvml-lib") || !strcmp(a, "--cuda-lib") || !strcmp(a, "--explain") ||
               !strcmp(a, "--bandwidth-ms") || !strcmp(a, "--threads")) {
      if (!has_val) return il_cli_usage_error("doctor", "%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--sysroot")) {
        if (access(v, R_OK | X_OK) != 0) return il_cli_usage_error("doctor", "--sysroot %s: not a readable directory", v);
        o.sysroot = v;
      } else if (!strcmp(a, "--nvml-lib")) o.nvml_lib = v;
      else if (!strcmp(a, "--cuda-lib")) o.cuda_lib = v;
      else if (!strcmp(a, "--explain")) explain = v;
      else {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0 || n > 100000) return il_cli_usage_error("doctor", "%s: '%s' is not a number in 0..100000", a, v);
        if (!strcmp(a, "--threads")) o.cpu_threads = (int)n;
        else o.bandwidth_ms = (int)n;
      }
    } else {
      return il_cli_usage_error("doctor", "unknown option '%s'", a);
    }
  }
  if (explain) {
    char *pasted = NULL;
    if (!strcmp(explain, "-")) {
      /* A log pasted through a pipe: read up to 1 MiB; NUL bytes become spaces so the text
       * after them is still searched. */
      const size_t cap = (size_t)1 << 20;
      pasted = il_mem_alloc(IL_MEM_OTHER, cap + 1, "--explain - input");
      if (!pasted) return il_cli_fail("doctor", il_error(IL_ERR_OOM, "--explain -: no memory for the input"));
      size_t got = fread(pasted, 1, cap, stdin);
      if (ferror(stdin)) {
        il_mem_free(pasted);
        return il_cli_fail("doctor", il_error(IL_ERR_IO, "--explain -: reading standard input failed"));
      }
      for (size_t i = 0; i < got; i++)
        if (!pasted[i]) pasted[i] = ' ';
      pasted[got] = 0;
      explain = pasted;
    }
    int n = json ? il_explain_print_json(explain, stdout) : il_explain_print_text(explain, stdout);
    il_mem_free(pasted);
    return n ? IL_EXIT_OK : IL_EXIT_FAILURE;
  }
  il_doctor *dr;
  il_status st = il_doctor_run(&o, &dr);
  if (st != IL_OK) return il_cli_fail("doctor", st);
  st = json ? il_report_json(dr, stdout) : il_report_text_ex(dr, stdout, all);
  int code = il_doctor_exit_code(dr);
  il_doctor_free(dr);
  if (st != IL_OK) return il_cli_fail("doctor", st);
  fflush(stdout);
  return code;
}
