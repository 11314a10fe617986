/* cli/monitor: `inferlab monitor`: live per-GPU utilization, memory, power, temperature and
 * clocks, like `nvidia-smi dmon`, from the probe/sampler background thread.
 * Documented in docs/monitor.md.
 */
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/config.h"
#include "probe/gpu_sampler.h"

static volatile sig_atomic_t il__monitor_stop;

static void il__on_signal(int sig) {
  (void)sig;
  il__monitor_stop = 1;
}

static void il__monitor_help(FILE *f) {
  fprintf(f,
          "usage: inferlab monitor [-i INTERVAL] [-n COUNT] [--json-lines] [--nvml-lib PATH]\n\n"
          "Prints one line per GPU per sample: utilization (SM and memory controller), memory used\n"
          "and total, power, temperature, SM and memory clocks. Stops after COUNT samples or Ctrl-C.\n\n"
          "options:\n"
          "  -i, --interval T   time between samples: 500ms, 2s, 1.5s, or a plain number of seconds\n"
          "                     [1s; at least 10ms]\n"
          "  -n, --count N      stop after N samples [until interrupted]; -c, the old\n"
          "                     spelling, still works with a note (-c is the context length elsewhere)\n"
          "  --json-lines       one JSON object per GPU per sample instead of the table\n"
          "  --nvml-lib PATH    NVML library to load [libnvidia-ml.so.1 or $INFERLAB_NVML_LIB]\n\n"
          "exit codes: 0 ok, 1 NVML present but failing (no devices, init error), 64 usage error,\n"
          "            66 the library named by --nvml-lib or INFERLAB_NVML_LIB cannot be loaded,\n"
          "            69 no NVML on this machine (no NVIDIA driver)\n");
}

static void il__print_table_header(void) {
  printf("# gpu   sm%%  mem%%    fb_used   fb_total   pwr_W  temp_C   sm_MHz  mem_MHz\n");
  printf("# idx     %%     %%        MiB        MiB       W       C      MHz      MHz\n");
}

static void il__num(char *buf, size_t n, long long v, int width) {
  if (v < 0) snprintf(buf, n, "%*s", width, "-");
  else snprintf(buf, n, "%*lld", width, v);
}

int il_cli_monitor(int argc, char **argv) {
  int interval_ms = 1000;
  long count = 0;
  bool jsonl = false;
  const char *lib = getenv("INFERLAB_NVML_LIB");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      il__monitor_help(stdout);
      return IL_EXIT_OK;
    } else if (!strcmp(a, "--json-lines")) {
      jsonl = true;
    } else if (!strcmp(a, "-i") || !strcmp(a, "--interval") || !strcmp(a, "-c") || !strcmp(a, "-n") || !strcmp(a, "--count") || !strcmp(a, "--nvml-lib")) {
      if (i + 1 >= argc) return il_cli_usage_error("monitor", "%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "-c"))
        fprintf(stderr, "inferlab monitor: note: -c is the old spelling of -n/--count (-c is the context length in "
                        "the other commands); it still works\n");
      if (!strcmp(a, "--nvml-lib")) lib = v;
      else if (a[1] == 'i' || !strcmp(a, "--interval")) {
        interval_ms = il_cli_parse_duration_ms(v, 10, NULL);
        if (interval_ms < 0) return il_cli_usage_error("monitor", "%s: '%s' is not an interval like 500ms, 2s or 1.5 (10ms..1h)", a, v);
      } else {
        long long c;
        if (il_config_parse_int(v, 1, 1000000000, a, &c) != IL_OK)
          return il_cli_usage_error("monitor", "%s", il_error_detail());
        count = (long)c;
      }
    } else {
      return il_cli_usage_error("monitor", "unknown option '%s'", a);
    }
  }
  il_gpu_sampler *s;
  il_status st = il_gpu_sampler_start(lib, interval_ms, &s);
  if (st == IL_ERR_NOT_FOUND && lib) {
    /* a library the user named: say that it did not load, and why, not "no driver" */
    fprintf(stderr, "inferlab monitor: the NVML library %s could not be loaded: %s\n", lib, il_error_detail());
    return IL_EXIT_NOINPUT;
  }
  if (st == IL_ERR_NOT_FOUND) {
    fprintf(stderr, "inferlab monitor: no NVML here, nothing to monitor (%s).\n"
                    "This machine has no NVIDIA driver; inference runs on the CPU backend. Run 'inferlab doctor' for details.\n",
            il_error_detail());
    return IL_EXIT_UNSUPPORTED;
  }
  if (st != IL_OK) return il_cli_fail("monitor", st);
  signal(SIGINT, il__on_signal);
  signal(SIGTERM, il__on_signal);
  if (!jsonl) {
    for (int i = 0; i < 16 && il_gpu_sampler_device_name(s, i)[0]; i++) printf("# %d: %s\n", i, il_gpu_sampler_device_name(s, i));
    il__print_table_header();
  }
  uint64_t seen = 0;
  long printed = 0;
  while (!il__monitor_stop && (count == 0 || printed < count)) {
    il_sample_set set;
    if (seen == 0) il_gpu_sampler_read(s, &set);
    else if (il_gpu_sampler_next(s, seen, interval_ms + 1000, &set) != IL_OK) continue;
    seen = set.seq;
    for (int i = 0; i < set.n_devices; i++) {
      const il_gpu_sample *g = &set.dev[i];
      if (jsonl) {
        printf("{\"t\":%.3f,\"unix_time\":%.3f,\"seq\":%llu,\"gpu\":%d", set.t, set.unix_time, (unsigned long long)set.seq, g->index);
        const struct {
          const char *k;
          long long v;
        } f[] = {{"util_gpu_pct", g->util_gpu},   {"util_mem_pct", g->util_mem},   {"mem_used_bytes", g->mem_used},
                 {"mem_total_bytes", g->mem_total}, {"power_mw", g->power_mw},       {"temp_c", g->temp_c},
                 {"clock_sm_mhz", g->clock_sm_mhz}, {"clock_mem_mhz", g->clock_mem_mhz}};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
          if (f[k].v < 0) printf(",\"%s\":null", f[k].k);
          else printf(",\"%s\":%lld", f[k].k, f[k].v);
        }
        printf("}\n");
      } else {
        char c[8][24];
        il__num(c[0], sizeof c[0], g->util_gpu, 5);
        il__num(c[1], sizeof c[1], g->util_mem, 5);
        il__num(c[2], sizeof c[2], g->mem_used < 0 ? -1 : g->mem_used >> 20, 10);
        il__num(c[3], sizeof c[3], g->mem_total < 0 ? -1 : g->mem_total >> 20, 10);
        if (g->power_mw < 0) snprintf(c[4], sizeof c[4], "%7s", "-");
        else snprintf(c[4], sizeof c[4], "%7.1f", g->power_mw / 1000.0);
        il__num(c[5], sizeof c[5], g->temp_c, 7);
        il__num(c[6], sizeof c[6], g->clock_sm_mhz, 8);
        il__num(c[7], sizeof c[7], g->clock_mem_mhz, 8);
        printf("%5d %s %s %s %s %s %s %s %s\n", g->index, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
      }
    }
    fflush(stdout);
    printed++;
    if (!jsonl && printed % 20 == 0 && (count == 0 || printed < count)) il__print_table_header();
  }
  il_gpu_sampler_stop(s);
  return IL_EXIT_OK;
}
