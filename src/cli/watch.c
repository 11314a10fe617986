/* cli/watch: `inferlab watch`: run any command and report duration, exit status, peak RSS
 * and the GPU view (VRAM, utilization, energy) sampled while it ran. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/outfile.h"
#include "lab/watch.h"
#include "memory/mem.h"

#define IL__MAX_ARGS 1024

static void il__watch_help(void) {
  printf("usage: inferlab watch [-i 200ms] [--json] [-o FILE] [--log FILE] [--live] -- COMMAND [ARGS...]\n\n"
         "Runs COMMAND and reports what `time` would plus the GPU view: duration, exit status, CPU\n"
         "time, peak RSS (wait4), the sampled RSS of its process tree, and per GPU (through NVML when\n"
         "it loads) peak and mean memory of the device and of the command's processes, mean and max\n"
         "utilization, mean power and the energy integrated from it. Without a usable NVML the\n"
         "report says why. The report goes to stderr (like time), or to FILE with -o. Its startup\n"
         "line is the start seen from outside, from the samples: the first output (with --log), the\n"
         "RSS's growth to half and 90%%, the GPU memory's first growth and its 90%%.\n\n"
         "options:\n"
         "  -i, --interval T         sampling interval: 200ms, 1s, 0.5s, or a bare number of seconds [200ms]\n"
         "      --json               the report as one JSON document (keys in docs/watch.md)\n"
         "  -o, --output FILE        write the report to FILE\n"
         "      --log FILE           the command's stdout and stderr to FILE, whose first byte is timed\n"
         "      --live               a live status line on stderr while it runs (when stderr is a\n"
         "                           terminal; it shares that terminal with the command's output)\n"
         "  -q, --quiet              no live status line (the default)\n"
         "      --no-gpu             do not load NVML\n"
         "      --nvml-lib PATH      NVML library [libnvidia-ml.so.1 or $INFERLAB_NVML_LIB]\n"
         "\nexamples:\n"
         "  inferlab watch -- python train.py --steps 10\n"
         "  inferlab watch -i 100ms --json -o run.json -- ./llama-cli -m model.gguf -p hi -n 64\n"
         "\nexit codes: the command's own exit status; 128+N when it was killed by signal N;\n"
         "            126 not executable, 127 not found; 64 usage error of watch itself;\n"
         "            1 when watch itself fails (fork); 73 when -o or --log cannot be written\n");
}

/* il_watch_run on copies of cmd[0..nc) that this function owns: execvp takes char *const
 * argv[], and the option parser hands positionals back as const char *. Errors: IL_ERR_OOM and
 * il_watch_run's. */
static il_status il__watch_run(const il_watch_options *o, const char *const *cmd, int nc,
                               il_watch_result *r) {
  size_t total = 1;
  for (int i = 0; i < nc; i++) total += strlen(cmd[i]) + 1;
  char *buf = il_mem_alloc(IL_MEM_OTHER, total, "watch command"), *p = buf;
  if (!buf) return IL_ERR_OOM;
  char *argv[IL__MAX_ARGS + 1];
  for (int i = 0; i < nc; i++) {
    size_t n = strlen(cmd[i]) + 1;
    argv[i] = memcpy(p, cmd[i], n);
    p += n;
  }
  argv[nc] = NULL;
  il_status st = il_watch_run(o, argv, r);
  il_mem_free(buf);
  return st;
}

int il_cli_watch(int argc, char **argv) {
  bool help = false, json = false, quiet = false, no_gpu = false, live = false;
  const char *interval = NULL, *output = NULL, *nvml = NULL, *log = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},       {"interval", 'i', true, &interval, NULL},
      {"json", 0, false, NULL, &json},         {"output", 'o', true, &output, NULL},
      {"quiet", 'q', false, NULL, &quiet},     {"no-gpu", 0, false, NULL, &no_gpu},
      {"nvml-lib", 0, true, &nvml, NULL},      {"live", 0, false, NULL, &live},
      {"log", 0, true, &log, NULL},
  };
  /* options end at `--`; everything after it is the command, passed through untouched */
  int split = argc;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--")) {
      split = i;
      break;
    }
  const char *pos[IL__MAX_ARGS];
  int n_pos = 0;
  int rc = il_cli_parse("watch", split, argv, NULL, NULL, flags, (int)(sizeof flags / sizeof flags[0]), pos, IL__MAX_ARGS,
                        &n_pos);
  if (rc) return rc;
  if (help) {
    il__watch_help();
    return IL_EXIT_OK;
  }
  const char *cmd[IL__MAX_ARGS + 1];
  int nc = 0;
  for (int i = 0; i < n_pos; i++) cmd[nc++] = pos[i];
  for (int i = split + 1; i < argc && nc < IL__MAX_ARGS; i++) cmd[nc++] = argv[i];
  cmd[nc] = NULL;
  if (nc == 0) return il_cli_usage_error("watch", "no command given (inferlab watch [options] -- COMMAND [ARGS...])");
  il_watch_options o = {200, nvml ? nvml : getenv("INFERLAB_NVML_LIB"), no_gpu, log, NULL};
  bool bare = false;
  if (interval && (o.interval_ms = il_cli_parse_duration_ms(interval, 1, &bare)) < 1)
    return il_cli_usage_error("watch", "-i %s: expected an interval like 200ms, 1s or 0.5s (1ms..1h)", interval);
  /* a bare number was milliseconds here and seconds in monitor; it is seconds in both now */
  if (interval && bare && o.interval_ms >= 50 * 1000)
    fprintf(stderr, "inferlab watch: note: -i %s is %s seconds (a bare number is seconds, as in monitor; it used to be "
                    "milliseconds here): write -i %sms for milliseconds\n", interval, interval, interval);
  /* the command writes to the same terminal, so a \r status line would overwrite its output:
   * only on request; the report always comes on its own lines at the end */
  if (live && !quiet && isatty(2)) o.progress = stderr;
  FILE *out = stderr;
  il_outfile out_file;
  if (output) {
    il_status ost = il_outfile_open(&out_file, "-o", output, cmd, nc);
    if (ost != IL_OK) return il_cli_fail("watch", ost);
    out = out_file.f;
  }
  if (log) { /* an unwritable output is 73 before the work, as for every command's -o */
    int fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      fprintf(stderr, "inferlab watch: error: --log %s: cannot create: %s\n", log, strerror(errno));
      if (output) il_outfile_discard(&out_file);
      return IL_EXIT_CANTCREAT;
    }
    close(fd);
  }
  il_watch_result r;
  il_status st = il__watch_run(&o, cmd, nc, &r);
  if (st == IL_OK) {
    if (json) st = il_watch_json(&r, out);
    else il_watch_print(&r, out);
    if (r.exec_failed) fprintf(stderr, "inferlab watch: cannot run %s\n", r.exec_error);
  }
  if (output) {
    if (st == IL_OK) st = il_outfile_close(&out_file);
    else il_outfile_discard(&out_file);
  }
  if (st != IL_OK) {
    int code = il_cli_fail("watch", st);
    return code == IL_EXIT_USAGE || code == IL_EXIT_CANTCREAT ? code : IL_EXIT_FAILURE;
  }
  return il_watch_exit_code(&r);
}
