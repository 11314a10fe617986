/* cli/bench: `inferlab bench`: measure a model over a sweep of options and write a table,
 * JSON, CSV, JSON lines and/or an HTML report. Any engine option can be a comma list. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "engine/spec.h"
#include "core/outfile.h"
#include "lab/bench.h"
#include "lab/cmdbench.h"
#include "lab/env.h"
#include "lab/report.h"
#include "lab/sweep.h"
#include "memory/mem.h"

#define IL__MAX_FLAGS 96

static void il__bench_help(void) {
  printf("usage: inferlab bench [-m MODEL] [--parallel 1,4,16] [--prompt 128,512] [--gen 128] [-r 5]\n"
         "                      [any engine option, also as a comma list] [--json|--csv|--jsonl]\n"
         "                      [--report report.html]\n"
         "       inferlab bench --cmd 'COMMAND' [-r 5] [--warmup 1] [--json] [-o FILE]\n\n"
         "Measures every combination of the swept options: load time, time to first token, time per\n"
         "output token, end to end (p50/p90/p99, stddev), prompt and generated tokens/s, requests/s,\n"
         "peak memory per category and RSS, CPU utilization, and bandwidth/FLOP/s against this\n"
         "machine's measured read-bandwidth roofline and, on the CPU, the compute peak of the\n"
         "instruction its kernels use (which of the two limits each phase). Each combination: load,\n"
         "--warmup untimed repetitions, then -r timed ones.\n\n"
         "With --cmd, a foreign command instead (any program: llama.cpp's llama-cli, a vLLM server's\n"
         "start script): run under /bin/sh -c, --warmup times untimed, then -r times, its output into a\n"
         "temporary file; min, median and max over the runs that exited 0 of its wall time and of the\n"
         "start as seen from outside: its first output, its RSS at 90%% of its growth, its GPU memory at\n"
         "90%% of its growth (NVML), its peak RSS and CPU time (docs/bench.md).\n\n"
         "workload:\n"
         "      --parallel LIST      parallel sequences decoded together (the engine's n-seq) [n-seq]\n"
         "                           (--batch, the old spelling, still works with a note)\n"
         "  -p, --prompt LIST        prompt tokens per sequence (synthetic ids) [128]\n"
         "      --gen LIST           generated tokens per sequence (the engine's n-predict) [n-predict]\n"
         "  -b, --ubatch LIST        max tokens per forward pass (run's -b/--batch) [512]\n"
         "  -r, --repetitions N      timed repetitions per combination [5] (--reps: old spelling)\n"
         "      --warmup N           untimed repetitions first [1]\n"
         "output:\n"
         "      --json               one JSON document with every raw sample (schema in docs/bench.md)\n"
         "      --csv                one CSV row per combination\n"
         "      --jsonl              one JSON line per repetition\n"
         "      --report FILE        also write a self-contained HTML report with SVG charts\n"
         "      --html FILE          the same as --report FILE\n"
         "  -o, --output FILE        write the table/JSON/CSV to FILE instead of stdout\n"
         "  -q, --quiet              no progress line on stderr\n"
         "measurement:\n"
         "      --roofline-ms N      time spent measuring read bandwidth (0 = skip it and the CPU's\n"
         "                           compute peak) [300]\n"
         "      --no-gpu             do not load NVML\n"
         "      --nvml-lib PATH      NVML library [libnvidia-ml.so.1 or $INFERLAB_NVML_LIB]\n"
         "      --interval MS        GPU/RSS sampling interval [200]\n"
         "speculative decoding (as in run and serve; one sequence: --parallel 1):\n"
         "      --draft-model FILE   also measure generation drafted by FILE (GGUF or builtin:NAME, the model's\n"
         "                           vocabulary), through run's loop at temperature 0; every combination\n"
         "                           is measured without drafting too, the row its speed-up is against\n"
         "      --draft LIST         draft lengths: 1 to 16, adaptive (run's default), 0 = no drafting\n"
         "                           [adaptive]; columns: acceptance rate, tokens per target pass,\n"
         "                           speed-up (generated tokens/s over the same combination's without)\n"
         "engine options (each accepts a comma list to sweep; booleans as --NAME=true,false):\n");
  il_cli_print_options(stdout, "model,wtype,threads,ctx,n-seq,n-predict,isa,repack,no-mmap,direct-io,mlock,preload,load-pipeline");
  printf("\nexamples:\n"
         "  inferlab bench --parallel 1,4 --prompt 64 --gen 32\n"
         "  inferlab bench -m model.gguf --threads 1,2,4 -r 3 --report bench.html\n"
         "  inferlab bench --wtype f32,q8_0,q4_0 --json > types.json\n"
         "  inferlab bench --cmd './llama-cli -m model.gguf -p Hello -n 16 -no-cnv' -r 5\n"
         "\nexit codes: 0 ok, 1 runtime failure, 64 usage (also a draft model whose vocabulary is not the\n"
         "            model's), 65 malformed model, 66 model or draft model not found,\n"
         "            69 unsupported, 71 out of memory (the first failing combination's code; the\n"
         "            others are still measured and reported), 73 -o/--report cannot be written,\n"
         "            130 interrupted by Ctrl-C (the combinations measured so far are reported);\n"
         "            with --cmd: 1 when a run of the command failed (the report names the first),\n"
         "            64 usage (--cmd with engine options, --csv, --jsonl or --report), 130 Ctrl-C\n");
}

typedef struct {
  int index, count;
  const char *label;
} il__progress_state;

static volatile sig_atomic_t il__interrupted;

static void il__on_sigint(int sig) {
  (void)sig;
  il__interrupted = 1;
}

static void il__progress(void *ud, int rep, int reps) {
  il__progress_state *p = ud;
  il_cli_progress_stop(); /* the loading line, if the model took a while */
  if (rep < 0) fprintf(stderr, "\rbench: [%d/%d] %s warm-up\033[K", p->index + 1, p->count, p->label);
  else fprintf(stderr, "\rbench: [%d/%d] %s repetition %d/%d\033[K", p->index + 1, p->count, p->label, rep + 1, reps);
  fflush(stderr);
}

static void il__cmd_progress(void *ud, int rep, int reps) {
  (void)ud;
  if (rep < 0) fprintf(stderr, "\rbench --cmd: warm-up\033[K");
  else fprintf(stderr, "\rbench --cmd: run %d/%d\033[K", rep + 1, reps);
  fflush(stderr);
}

/* bench --cmd: the command's runs, the table or JSON. */
static int il__bench_cmd(const char *cmd, const il_bench_options *opt, bool json, bool quiet, const char *output) {
  FILE *out = stdout;
  il_outfile of = {0};
  if (output) {
    il_status ost = il_outfile_open(&of, "-o", output, NULL, 0);
    if (ost != IL_OK) return il_cli_fail("bench", ost);
    out = of.f;
  }
  const il_watch_options wo = {.interval_ms = opt->interval_ms, .nvml_lib = opt->nvml_lib, .no_gpu = opt->no_gpu};
  il__interrupted = 0;
  struct sigaction sa, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = il__on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  il_cmdbench b;
  const bool progress = !quiet && isatty(2);
  il_status st = il_cmdbench_run(cmd, opt->reps, opt->warmup, &wo, &il__interrupted,
                                 progress ? il__cmd_progress : NULL, NULL, &b);
  sigaction(SIGINT, &old_int, NULL);
  if (progress) fprintf(stderr, "\r\033[K");
  if (st == IL_OK) {
    if (json) st = il_cmdbench_json(&b, out);
    else il_cmdbench_print(&b, out);
  }
  const bool interrupted = b.interrupted, failed = b.failures > 0;
  il_cmdbench_free(&b);
  if (output && st == IL_OK) st = il_outfile_close(&of);
  else if (output) il_outfile_discard(&of);
  if (st != IL_OK) return il_cli_fail("bench", st);
  return interrupted ? IL_EXIT_INTERRUPTED : failed ? IL_EXIT_FAILURE : IL_EXIT_OK;
}

int il_cli_bench(int argc, char **argv) {
  il_sweep_point base;
  il_sweep_point_defaults(&base);
  bool help = false, json = false, csv = false, jsonl = false, quiet = false, no_gpu = false;
  const char *reps_s = NULL, *warmup_s = NULL, *report = NULL, *output = NULL, *roof_s = NULL, *nvml = NULL,
             *interval_s = NULL, *draft_model = NULL, *draft_s = NULL, *cmd = NULL;
  /* lab workload names and every engine option, each with a value slot (a comma list) */
  const char *names[IL__MAX_FLAGS];
  const char *values[IL__MAX_FLAGS] = {0};
  bool present[IL__MAX_FLAGS] = {0};
  il_cli_flag flags[IL__MAX_FLAGS + 20];
  int n = 0, n_opt = 0;
  const char *lab[] = {"batch", "prompt", "gen", "ubatch"};
  const char *lab_flag[] = {"parallel", "prompt", "gen", "ubatch"}; /* --batch: an old spelling (args.c) */
  /* -b is the engine's tokens per forward pass in every command (run, model info, logits), so
   * here it is --ubatch; --batch (parallel sequences) has no short form */
  const char lab_short[] = {0, 'p', 0, 'b'};
  for (int i = 0; i < 4; i++) {
    names[n_opt] = lab[i];
    flags[n++] = (il_cli_flag){lab_flag[i], lab_short[i], true, &values[n_opt], &present[n_opt]};
    n_opt++;
  }
  for (const il_opt *o = il_config_options(); o->name && n_opt < IL__MAX_FLAGS; o++) {
    if (!il_sweep_key(o->name)) continue; /* batch and prompt mean other things here */
    names[n_opt] = o->name;
    char sf = o->short_flag == 'b' || o->short_flag == 'p' ? 0 : o->short_flag;
    flags[n++] = (il_cli_flag){o->name, sf, o->kind != IL_OPT_BOOL, &values[n_opt], &present[n_opt]};
    n_opt++;
  }
  il_cli_flag own[] = {
      {"help", 'h', false, NULL, &help},          {"repetitions", 'r', true, &reps_s, NULL},
      {"warmup", 0, true, &warmup_s, NULL},       {"json", 0, false, NULL, &json},
      {"csv", 0, false, NULL, &csv},              {"jsonl", 0, false, NULL, &jsonl},
      {"report", 0, true, &report, NULL},         {"output", 'o', true, &output, NULL},
      {"quiet", 'q', false, NULL, &quiet},        {"roofline-ms", 0, true, &roof_s, NULL},
      {"no-gpu", 0, false, NULL, &no_gpu},        {"nvml-lib", 0, true, &nvml, NULL},
      {"interval", 0, true, &interval_s, NULL},   {"html", 0, true, &report, NULL},
      {"draft-model", 0, true, &draft_model, NULL}, {"draft", 0, true, &draft_s, NULL},
      {"cmd", 0, true, &cmd, NULL},
  };
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) flags[n++] = own[i];

  /* booleans swept as --NAME=true,false: taken out before the shared parser sees them */
  char **args = il_mem_calloc(IL_MEM_OTHER, sizeof *args * ((size_t)argc + 1), "bench argv");
  if (!args) return il_cli_fail("bench", IL_ERR_OOM);
  int nargs = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *eq = i > 0 && !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
    bool taken = false;
    for (int k = 0; eq && k < n_opt && !taken; k++) {
      const il_opt *o = il_config_find(names[k]);
      if (o && o->kind == IL_OPT_BOOL && strlen(names[k]) == (size_t)(eq - a - 2) && !strncmp(a + 2, names[k], (size_t)(eq - a - 2))) {
        values[k] = eq + 1;
        present[k] = true;
        taken = true;
      }
    }
    if (!strcmp(a, "--")) {
      while (i < argc) args[nargs++] = argv[i++];
      break;
    }
    if (!taken) args[nargs++] = argv[i];
  }
  const char *pos[1];
  int n_pos;
  static il_request_opts req; /* n-predict from --config (the --gen / --n-predict flags are axes) */
  il_request_opts_defaults(&req);
  int rc = il_cli_parse("bench", nargs, args, &base.cfg, &req, flags, n, pos, 0, &n_pos);
  il_mem_free(args);
  if (rc) return rc;
  base.gen = req.p.n_predict;
  if (help) {
    il__bench_help();
    return IL_EXIT_OK;
  }
  if ((int)json + (int)csv + (int)jsonl > 1) return il_cli_usage_error("bench", "choose one of --json, --csv, --jsonl");

  il_bench_options opt;
  il_bench_options_default(&opt);
  int roof_ms = 300;
  {
    const struct {
      const char *text, *where;
      long long min, max;
      int *dst;
    } ints[] = {
        {reps_s, "--repetitions", 1, 1000000, &opt.reps},
        {warmup_s, "--warmup", 0, 1000000, &opt.warmup},
        {roof_s, "--roofline-ms", 0, 600000, &roof_ms},
        {interval_s, "--interval", 1, 3600000, &opt.interval_ms},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
      long long v;
      if (!ints[k].text) continue;
      if (il_config_parse_int(ints[k].text, ints[k].min, ints[k].max, ints[k].where, &v) != IL_OK)
        return il_cli_usage_error("bench", "%s", il_error_detail());
      *ints[k].dst = (int)v;
    }
  }
  opt.sample_usage = true;
  opt.no_gpu = no_gpu;
  opt.nvml_lib = nvml ? nvml : getenv("INFERLAB_NVML_LIB");
  if (cmd) {
    for (int k = 0; k < n_opt; k++)
      if (present[k])
        return il_cli_usage_error("bench", "--cmd runs a foreign command: --%s is an option of inferlab's engine",
                                  k < 4 ? lab_flag[k] : names[k]);
    if (draft_model || csv || jsonl || report)
      return il_cli_usage_error("bench", "--cmd writes its table or --json; not %s",
                                draft_model ? "--draft-model" : csv ? "--csv" : jsonl ? "--jsonl" : "--report");
    return il__bench_cmd(cmd, &opt, json, quiet, output);
  }

  /* the draft lengths measured per combination: first none (the speed-up's baseline) */
  int drafts[IL_SPEC_DRAFT_MAX + 2] = {-1}, nd = 1;
  if (draft_s && !draft_model) return il_cli_usage_error("bench", "--draft %s: needs --draft-model", draft_s);
  if (draft_model) {
    const char *t = draft_s ? draft_s : "adaptive";
    if (!*t) return il_cli_usage_error("bench", "--draft: empty (give draft lengths, e.g. 2,4,adaptive)");
    while (*t) {
      size_t len = strcspn(t, ",");
      char item[32];
      long long v = 0;
      snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), t);
      if (!strcmp(item, "adaptive")) v = 0;
      else if (il_config_parse_int(item, 0, IL_SPEC_DRAFT_MAX, "--draft", &v) != IL_OK)
        return il_cli_usage_error("bench", "--draft %s: give draft lengths from 1 to %d, adaptive, or 0 (no drafting)",
                                  draft_s, IL_SPEC_DRAFT_MAX);
      else if (v == 0) v = -1; /* 0: no drafting, always measured */
      bool seen = false;
      for (int k = 0; k < nd; k++) seen |= drafts[k] == (int)v;
      if (!seen && nd < (int)(sizeof drafts / sizeof drafts[0])) drafts[nd++] = (int)v;
      t += len;
      if (*t) t++;
    }
    opt.draft_model = draft_model;
  }

  il_sweep sw;
  il_sweep_init(&sw);
  for (int k = 0; k < n_opt; k++) {
    if (!present[k]) continue;
    char where[64];
    snprintf(where, sizeof where, "--%s", k < 4 ? lab_flag[k] : names[k]); /* the flag as typed today */
    il_status st = il_sweep_add(&sw, &base, names[k], values[k] ? values[k] : "true", where);
    if (st != IL_OK) {
      il_sweep_free(&sw);
      return il_cli_usage_error("bench", "%s", il_error_detail());
    }
  }
  const size_t n_points = il_sweep_count(&sw), count = n_points * (size_t)nd;
  for (size_t i = 0; draft_model && i < n_points; i++) {
    il_sweep_point p;
    if (il_sweep_point_at(&sw, &base, i, &p, NULL, 0) == IL_OK && p.cfg.n_seq != 1) {
      il_sweep_free(&sw);
      return il_cli_usage_error("bench", "--draft-model: one sequence at a time (--parallel 1, not %d)", p.cfg.n_seq);
    }
  }

  FILE *out = stdout;
  il_outfile out_file = {0};
  {
    const char *inputs[1] = {base.cfg.model};
    il_status ost = report ? il_outfile_check("--report", report, inputs, 1) : IL_OK;
    if (ost == IL_OK && output) ost = il_outfile_open(&out_file, "-o", output, inputs, 1);
    if (ost != IL_OK) {
      il_sweep_free(&sw);
      return il_cli_fail("bench", ost);
    }
    if (output) out = out_file.f;
  }
  il_env env;
  il_env_collect(&env, opt.nvml_lib, no_gpu);
  if (roof_ms > 0) {
    int threads = base.cfg.threads;
    for (size_t i = 0; i < n_points; i++) {
      il_sweep_point p;
      if (il_sweep_point_at(&sw, &base, i, &p, NULL, 0) == IL_OK && p.cfg.threads > threads) threads = p.cfg.threads;
    }
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (il_bench_measure_roofline(threads, roof_ms, &opt.roofline_gbps) != IL_OK) opt.roofline_gbps = 0;
    opt.peaks = il_mem_calloc(IL_MEM_OTHER, sizeof *opt.peaks, "compute peaks"); /* NULL: none measured */
  }
  bool progress = !quiet && isatty(2);
  il_startup_skip_process(); /* every combination's timeline starts at its open, so they compare */
  il_bench_result *results = il_mem_calloc(IL_MEM_OTHER, sizeof *results * count, "bench results");
  if (!results) {
    il_mem_free(opt.peaks);
    il_sweep_free(&sw);
    return il_cli_fail("bench", IL_ERR_OOM);
  }
  int exit_code = IL_EXIT_OK;
  char command[2048] = "inferlab";
  for (int i = 0; i < argc; i++) {
    size_t l = strlen(command);
    snprintf(command + l, sizeof command - l, " %s", argv[i]);
  }
  /* the table is printed row by row as combinations finish (as llama-bench does); Ctrl-C stops
   * after the current combination and keeps what was measured (a second Ctrl-C kills) */
  const bool table = !json && !csv && !jsonl;
  il_report rep = {&sw, results, 0, &opt, &env, command};
  if (table) il_report_table_begin(&rep, out);
  il__interrupted = 0;
  struct sigaction sa, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = il__on_sigint;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  for (size_t i = 0; i < count && !il__interrupted; i++) {
    il_sweep_point p;
    il_sweep_point_at(&sw, &base, i / (size_t)nd, &p, results[i].label, sizeof results[i].label);
    const int dj = (int)(i % (size_t)nd);
    if (draft_model) { /* the row's draft length joins the label: "draft=4", "threads=2 draft=none" */
      opt.draft = drafts[dj];
      size_t l = strlen(results[i].label);
      char dv[16];
      if (drafts[dj] < 0) snprintf(dv, sizeof dv, "none");
      else if (drafts[dj] == 0) snprintf(dv, sizeof dv, "adaptive");
      else snprintf(dv, sizeof dv, "%d", drafts[dj]);
      snprintf(results[i].label + l, sizeof results[i].label - l, "%sdraft=%s", l ? " " : "", dv);
    }
    il__progress_state ps = {(int)i, (int)count, *results[i].label ? results[i].label : "run"};
    opt.progress = progress ? il__progress : NULL;
    opt.progress_ud = &ps;
    char what[300];
    snprintf(what, sizeof what, "bench: [%d/%zu] %s: loading", (int)i + 1, count, ps.label);
    if (progress) il_cli_progress_start("%s", what);
    il_status st = il_bench_run(&p, &opt, &results[i]);
    il_cli_progress_stop();
    if (draft_model) { /* against the combination's row without drafting, measured just before */
      results[i].baseline = (int)(i - (size_t)dj);
      il_status sst = il_bench_speedup(&results[i], &results[i - (size_t)dj]);
      if (st == IL_OK && sst != IL_OK) st = sst;
    }
    rep.n_results = (int)i + 1;
    if (st != IL_OK && exit_code == IL_EXIT_OK) exit_code = il_cli_exit_code(st);
    if (progress) fprintf(stderr, "\r\033[K");
    if (st != IL_OK)
      fprintf(stderr, "inferlab bench: %s: %s\n", *results[i].label ? results[i].label : "run", results[i].error);
    else if (!quiet && results[i].startup.last > 0) { /* the open's timeline, once per combination */
      char prefix[300];
      snprintf(prefix, sizeof prefix, "inferlab bench: %s: ", *results[i].label ? results[i].label : "run");
      il_startup_print(&results[i].startup, stderr, prefix);
    }
    if (table) il_report_table_row(&rep, (int)i, out);
  }
  sigaction(SIGINT, &old_int, NULL);
  if (progress) fprintf(stderr, "\r\033[K");
  if (il__interrupted) {
    fprintf(stderr, "inferlab bench: interrupted: %d of %zu combinations measured; their results follow\n",
            rep.n_results, count);
    exit_code = IL_EXIT_INTERRUPTED;
  }
  il_status st = json ? il_report_json_write(&rep, out)
                 : csv ? il_report_csv_write(&rep, out)
                 : jsonl ? il_report_jsonl_write(&rep, NULL, out)
                         : il_report_table_end(&rep, out);
  if (st == IL_OK && report) {
    const char *inputs[1] = {base.cfg.model};
    il_outfile h;
    st = il_outfile_open(&h, "--report", report, inputs, 1);
    if (st == IL_OK) {
      st = il_report_html_write(&rep, h.f);
      if (st == IL_OK) st = il_outfile_close(&h);
      else il_outfile_discard(&h);
      if (st == IL_OK && !quiet) fprintf(stderr, "inferlab bench: wrote %s\n", report);
    }
  }
  if (output) {
    il_status cst = st == IL_OK ? il_outfile_close(&out_file) : IL_OK;
    if (st != IL_OK) il_outfile_discard(&out_file);
    if (st == IL_OK) st = cst;
  }
  for (size_t i = 0; i < count; i++) il_bench_result_free(&results[i]); /* unmeasured ones are zeroed */
  il_mem_free(results);
  il_mem_free(opt.peaks);
  il_sweep_free(&sw);
  if (st != IL_OK) return il_cli_fail("bench", st);
  return exit_code;
}
