/* cli/experiment: `inferlab experiment`: baseline vs a variant that changes exactly one
 * option, interleaved, with ratios, intervals and an evidence folder; `--show DIR` prints a
 * past one again. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "lab/experiment.h"
#include "memory/mem.h"

#define IL__MAX_CHANGES 64

extern char **environ;

static void il__experiment_help(void) {
  printf("usage: inferlab experiment [-m MODEL] [options] --change KEY=VALUE [-r 5] [-o runs/]\n"
         "       inferlab experiment --cmd 'COMMAND with {}' --values BASELINE,VARIANT [-r 5]\n"
         "       inferlab experiment --show runs/2026-01-15T103000Z-batch-8/\n\n"
         "Runs the baseline configuration and a variant that differs in exactly one option on the\n"
         "same workload, interleaved A B B A ..., and reports every metric's change as the ratio\n"
         "variant/baseline with a 95%% bootstrap confidence interval, marked significant when the\n"
         "interval excludes 1. Each run loads the engine afresh, warms up and measures once.\n"
         "Everything is kept in an evidence folder OUT/<UTC time>-<change>/: env.json (doctor --json),\n"
         "baseline.conf and variant.conf (pass baseline.conf back with --config to roll back),\n"
         "samples.jsonl (one line per run), summary.txt, summary.json, command.txt.\n\n"
         "options:\n"
         "      --change KEY=VALUE   the one option the variant changes: an engine option, or the\n"
         "                           lab's parallel (parallel sequences; also batch), prompt, gen, ubatch\n"
         "      --allow-multi        allow more than one --change (all applied to the variant)\n"
         "  -r, --repetitions N      runs per arm [5] (--repeat: old spelling)\n"
         "      --warmup N           untimed repetitions at the start of each run [1]\n"
         "      --parallel N         parallel sequences of the workload (n-seq) [1] (--batch: old spelling)\n"
         "  -p, --prompt N           prompt tokens per sequence [128]\n"
         "      --gen N              generated tokens per sequence (n-predict) [128]\n"
         "  -b, --ubatch N           max tokens per forward pass (run's -b/--batch) [512]\n"
         "  -o, --output DIR         parent folder of the evidence folder [runs] (--out: old spelling)\n"
         "      --show DIR           print the summary of an evidence folder\n"
         "      --cmd TEMPLATE       compare a foreign command: {} is replaced by each value; it runs\n"
         "                           under /bin/sh -c, output goes to logs/ in the evidence folder\n"
         "      --values A,B         the baseline and variant values for --cmd\n"
         "      --min-effect PCT     smallest change called better/worse; a change beyond the noise\n"
         "                           but under it is \"same\" [1 for memory metrics, 0 for the rest]\n"
         "  -q, --quiet              no progress line on stderr\n"
         "      --no-gpu             do not load NVML\n"
         "      --nvml-lib PATH      NVML library [libnvidia-ml.so.1 or $INFERLAB_NVML_LIB]\n"
         "engine options (the baseline):\n");
  il_cli_print_options(stdout, "model,wtype,threads,ctx,n-predict,isa,repack");
  printf("\nexamples:\n"
         "  inferlab experiment --change parallel=8 -r 10\n"
         "  inferlab experiment -m model.gguf --threads 2 --change threads=4\n"
         "  inferlab experiment --cmd 'python gen.py --slicing {}' --values off,on -r 5\n"
         "  inferlab bench --config runs/2026-01-15T103000Z-batch-8/baseline.conf --prompt 128\n"
         "\nexit codes: 0 ok (whatever the verdicts), 1 runtime failure, 64 usage (including a second\n"
         "            --change without --allow-multi), 66 --show folder or model not found,\n"
         "            65/69/71 as for bench, 73 the -o/--output folder cannot be written,\n"
         "            130 Ctrl-C (after the summary of the runs done is written)\n"
         "Ctrl-C ends the experiment after the run being measured; the evidence folder gets the\n"
         "summary of the runs done, so --show reads it.\n");
}

static volatile sig_atomic_t il__exp_stop;
static void il__exp_on_sigint(int sig) {
  (void)sig;
  il__exp_stop = 1;
}

int il_cli_experiment(int argc, char **argv) {
  il_sweep_point base;
  il_sweep_point_defaults(&base);
  bool help = false, allow_multi = false, quiet = false, no_gpu = false;
  const char *change = NULL, *repeat = NULL, *warmup = NULL, *out = NULL, *show = NULL, *cmd = NULL, *values = NULL,
             *nvml = NULL, *min_effect = NULL, *lab_v[4] = {0};
  const char *lab_names[4] = {"batch", "prompt", "gen", "ubatch"};
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},         {"change", 0, true, &change, NULL},
      {"allow-multi", 0, false, NULL, &allow_multi}, {"repetitions", 'r', true, &repeat, NULL},
      {"warmup", 0, true, &warmup, NULL},        {"output", 'o', true, &out, NULL},
      {"show", 0, true, &show, NULL},            {"cmd", 0, true, &cmd, NULL},
      {"values", 0, true, &values, NULL},        {"quiet", 'q', false, NULL, &quiet},
      {"no-gpu", 0, false, NULL, &no_gpu},       {"nvml-lib", 0, true, &nvml, NULL},
      {"parallel", 0, true, &lab_v[0], NULL},     {"prompt", 'p', true, &lab_v[1], NULL},
      {"gen", 0, true, &lab_v[2], NULL},         {"ubatch", 'b', true, &lab_v[3], NULL},
      {"min-effect", 0, true, &min_effect, NULL},
  };
  const char *pos[1];
  int n_pos;
  static il_request_opts req; /* n-predict (the lab's gen) from flags or --config */
  il_request_opts_defaults(&req);
  int rc = il_cli_parse("experiment", argc, argv, &base.cfg, &req, flags, (int)(sizeof flags / sizeof flags[0]), pos, 0,
                        &n_pos);
  if (rc) return rc;
  base.gen = req.p.n_predict;
  if (help) {
    il__experiment_help();
    return IL_EXIT_OK;
  }
  if (show) {
    il_status st = il_experiment_show(show, stdout);
    return st == IL_OK ? IL_EXIT_OK : il_cli_fail("experiment", st);
  }
  /* the shared parser keeps the last --change; collect every one */
  const char *changes[IL__MAX_CHANGES];
  int n_changes = 0;
  for (int i = 1; i < argc && n_changes < IL__MAX_CHANGES; i++) {
    if (!strcmp(argv[i], "--")) break;
    if (!strcmp(argv[i], "--change") && i + 1 < argc) changes[n_changes++] = argv[++i];
    else if (!strncmp(argv[i], "--change=", 9)) changes[n_changes++] = argv[i] + 9;
  }
  for (int k = 0; k < 4; k++) {
    if (!lab_v[k]) continue;
    char where[32];
    snprintf(where, sizeof where, "--%s", k == 0 ? "parallel" : lab_names[k]); /* the flag's name */
    if (il_sweep_set(&base, lab_names[k], lab_v[k], where) != IL_OK)
      return il_cli_usage_error("experiment", "%s", il_error_detail());
  }
  il_experiment *x = il_mem_calloc(IL_MEM_OTHER, sizeof *x, "experiment");
  if (!x) return il_cli_fail("experiment", IL_ERR_OOM);
  il_experiment_init(x);
  long long iv;
  if (repeat) {
    if (il_config_parse_int(repeat, 1, 100000, "--repetitions", &iv) != IL_OK) {
      il_mem_free(x);
      return il_cli_usage_error("experiment", "%s", il_error_detail());
    }
    x->repeat = (int)iv;
  }
  if (warmup) {
    if (il_config_parse_int(warmup, 0, 100000, "--warmup", &iv) != IL_OK) {
      il_mem_free(x);
      return il_cli_usage_error("experiment", "%s", il_error_detail());
    }
    x->bench.warmup = (int)iv;
  }
  if (min_effect) {
    char *end;
    double pct = strtod(min_effect, &end);
    if (*end == '%') end++;
    if (end == min_effect || *end || !(pct >= 0 && pct < 100)) {
      il_mem_free(x);
      return il_cli_usage_error("experiment", "--min-effect '%s': a percentage from 0 to under 100 (1 or 1%% = 1%%)",
                                min_effect);
    }
    x->min_effect = pct / 100;
  }
  x->bench.no_gpu = x->watch.no_gpu = no_gpu;
  x->bench.nvml_lib = x->watch.nvml_lib = nvml ? nvml : getenv("INFERLAB_NVML_LIB");
  x->environ_list = environ;
  x->progress = !quiet && isatty(2) ? stderr : NULL;
  char command[4096] = "inferlab";
  for (int i = 0; i < argc; i++) {
    size_t l = strlen(command);
    snprintf(command + l, sizeof command - l, " %s", argv[i]);
  }
  x->command_line = command;
  il_status st;
  if (cmd) {
    if (n_changes) {
      il_mem_free(x);
      return il_cli_usage_error("experiment", "--cmd and --change do not mix: the command's {} is the one change");
    }
    st = il_experiment_set_command(x, cmd, values);
  } else {
    if (values) {
      il_mem_free(x);
      return il_cli_usage_error("experiment", "--values goes with --cmd");
    }
    st = il_experiment_set_changes(x, &base, changes, n_changes, allow_multi);
  }
  if (st != IL_OK) {
    il_mem_free(x);
    return il_cli_usage_error("experiment", "%s", il_error_detail());
  }
  st = il_experiment_prepare_dir(x, out); /* first: an unwritable --out fails before any work */
  if (st == IL_OK && !x->is_cmd) {
    /* the roof both arms are measured against: read bandwidth with the most threads either uses */
    int threads = x->baseline.cfg.threads > x->variant.cfg.threads ? x->baseline.cfg.threads : x->variant.cfg.threads;
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (il_bench_measure_roofline(threads, 300, &x->bench.roofline_gbps) != IL_OK) x->bench.roofline_gbps = 0;
  }
  if (st == IL_OK) {
    if (!quiet) fprintf(stderr, "inferlab experiment: evidence in %s/\n", x->dir);
    /* Ctrl-C: the run being measured finishes (or, with --cmd, ends with the command), then
     * the summary of the runs done is written as usual */
    struct sigaction sa, old_int;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = il__exp_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    x->stop = &il__exp_stop;
    st = il_experiment_run(x, NULL, NULL);
    sigaction(SIGINT, &old_int, NULL);
  }
  if (st == IL_OK) st = il_experiment_write_summary(x, stdout);
  int code = st == IL_OK ? IL_EXIT_OK : il_cli_fail("experiment", st);
  if (code == IL_EXIT_OK && x->interrupted) {
    fprintf(stderr, "inferlab experiment: interrupted; the summary above (and in %s/) is of the runs done\n", x->dir);
    code = 130;
  }
  for (int a = 0; a < 2 && code == IL_EXIT_OK; a++)
    if (x->failures[a] >= x->repeat) {
      fprintf(stderr, "inferlab experiment: every %s run failed (%s)\n", a ? "variant" : "baseline", x->first_error[a]);
      code = IL_EXIT_FAILURE;
    }
  il_experiment_free(x);
  il_mem_free(x);
  return code;
}
