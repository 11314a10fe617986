/* cli/learn: `inferlab learn`: the course's 32 concepts as lessons that run on this machine
 * (lab/learn). Lists them, runs one or all, reports a lesson machine (--machine) or an
 * allocation pattern (--pattern); Ctrl-C stops a lesson after its current run and keeps what
 * was measured (exit 130). Documented in docs/learn.md. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "lab/learn.h"

extern char **environ;

static volatile sig_atomic_t il__stop;

static void il__on_sigint(int sig) {
  (void)sig;
  il__stop = 1;
}

static void il__learn_help(void) {
  printf("usage: inferlab learn [--lang en|de] [--json]\n"
         "       inferlab learn CONCEPT [--device cpu|sim:SIZE|cuda[:N]] [--quick] [--repeat N] [--out DIR] [--lang en|de] [--json]\n"
         "       inferlab learn all [--quick] [options as above]\n"
         "       inferlab learn --machine DIR [--json]\n"
         "       inferlab learn vram-fragmentation --pattern steady|fragmenting [--device D] [--json]\n\n"
         "The course's 32 concepts (GPU compute ... GPU utilization) as lessons that run here. Without a\n"
         "concept: the list (number, name, one line, the lever the lab changes). With one (a number, a name\n"
         "in English or German, or a prefix only one concept has): the explanation (what it is, where it\n"
         "sits, the typical failure, how to check it), then the lab in five steps: the state before, the one\n"
         "change, the same measurement again (baseline and variant interleaved, ratios with 95%% intervals),\n"
         "the evidence folder (both configurations as files, raw samples, a timestamped log, rollback.sh),\n"
         "and a quick check of three questions answered from this run's figures.\n"
         "The container and driver concepts run the doctor on lesson machines (fixture trees in the\n"
         "evidence folder with a simulated driver), since they cannot be changed live.\n\n"
         "options:\n"
         "      --device D     where the engine lessons run: cpu, sim:SIZE or cuda[:N] [" IL_LEARN_DEFAULT_DEVICE "]\n"
         "      --lang L       en or de [from LC_ALL, LC_MESSAGES or LANG; else en]\n"
         "      --quick        small workloads, one thread, 3 runs per arm, no warm-up (seconds per lesson)\n"
         "      --repeat N     runs per arm [3 with --quick, else 5]\n"
         "      --out DIR      parent of the evidence folders [runs/learn]\n"
         "      --json         the lesson's result as JSON on stdout (learn all: an array); no text\n"
         "      --no-ask       print the quick check's answers without waiting (the default off a terminal)\n"
         "  -q, --quiet        no progress line on stderr\n"
         "      --machine DIR  the doctor's report on a lesson machine (DIR/baseline or DIR/variant of a lesson)\n"
         "      --pattern P    with vram-fragmentation: run one allocation pattern and print the allocator's figures\n\n"
         "examples:\n"
         "  inferlab learn\n"
         "  inferlab learn fp16 --quick\n"
         "  inferlab learn 17 --device sim:64MiB --lang de\n"
         "  inferlab learn default-runtime\n"
         "  inferlab learn all --quick --json > learn.json\n\n"
         "exit codes: 0 the lesson(s) ran (whatever was measured), 1 a lesson's measurement failed,\n"
         "            64 usage, 66 no such concept, 69 device not available in this build, 73 the\n"
         "            evidence folder cannot be written, 130 stopped by Ctrl-C (what was measured is kept);\n"
         "            --machine: the doctor's 0 all OK, 1 warnings, 2 failures\n");
}

static int il__exit_for(il_status st, const il_learn_result *r) {
  if (r->outcome == IL_LEARN_INTERRUPTED) return IL_EXIT_INTERRUPTED;
  if (st == IL_OK) return r->outcome == IL_LEARN_FAILED ? IL_EXIT_FAILURE : IL_EXIT_OK;
  return il_cli_exit_code(st);
}

int il_cli_learn(int argc, char **argv) {
  bool help = false, quick = false, json = false, quiet = false, no_ask = false;
  const char *device = NULL, *lang_s = NULL, *repeat_s = NULL, *out = NULL, *machine = NULL, *pattern = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},       {"quick", 0, false, NULL, &quick},   {"json", 0, false, NULL, &json},
      {"quiet", 'q', false, NULL, &quiet},     {"no-ask", 0, false, NULL, &no_ask}, {"device", 0, true, &device, NULL},
      {"lang", 0, true, &lang_s, NULL},        {"repeat", 0, true, &repeat_s, NULL}, {"out", 0, true, &out, NULL},
      {"machine", 0, true, &machine, NULL},    {"pattern", 0, true, &pattern, NULL},
  };
  const char *pos[2];
  int n_pos = 0;
  int rc = il_cli_parse("learn", argc, argv, NULL, NULL, flags, (int)(sizeof flags / sizeof flags[0]), pos, 1, &n_pos);
  if (rc) return rc;
  if (help) {
    il__learn_help();
    return IL_EXIT_OK;
  }
  il_learn_options o;
  il_learn_options_default(&o);
  o.lang = il_learn_lang_from_env();
  if (lang_s && !il_learn_lang_parse(lang_s, &o.lang))
    return il_cli_usage_error("learn", "--lang %s: en or de", lang_s);
  if (machine) {
    if (n_pos) return il_cli_usage_error("learn", "--machine takes a folder, not a concept");
    int code = 0;
    il_status st = il_learn_machine_report(machine, json, stdout, &code);
    return st == IL_OK ? code : il_cli_fail("learn", st);
  }
  if (n_pos == 0) {
    if (pattern) return il_cli_usage_error("learn", "--pattern goes with vram-fragmentation");
    il_status st = json ? il_learn_list_json(o.lang, stdout) : il_learn_list(o.lang, stdout);
    return st == IL_OK ? IL_EXIT_OK : il_cli_fail("learn", st);
  }
  if (device) {
    if (strcmp(device, "cpu") && strncmp(device, "sim:", 4) && strcmp(device, "cuda") && strncmp(device, "cuda:", 5))
      return il_cli_usage_error("learn", "--device %s: cpu, sim:SIZE or cuda[:N]", device);
    o.device = device;
  }
  if (repeat_s) {
    long long v;
    if (il_config_parse_int(repeat_s, 1, 100000, "--repeat", &v) != IL_OK)
      return il_cli_usage_error("learn", "%s", il_error_detail());
    o.repeat = (int)v;
  }
  const bool all = !strcmp(pos[0], "all");
  const il_learn_concept *c = NULL;
  if (!all) {
    il_status st = il_learn_find(pos[0], &c);
    if (st != IL_OK) {
      fprintf(stderr, "inferlab learn: %s\n", il_error_detail());
      return st == IL_ERR_INVALID_ARG ? IL_EXIT_USAGE : IL_EXIT_NOINPUT;
    }
  }
  if (pattern) {
    if (all || strcmp(c->slug, "vram-fragmentation"))
      return il_cli_usage_error("learn", "--pattern goes with vram-fragmentation");
    il_status st = il_learn_pattern_report(o.device, pattern, json, stdout);
    return st == IL_OK ? IL_EXIT_OK : st == IL_ERR_INVALID_ARG ? il_cli_usage_error("learn", "%s", il_error_detail()) : il_cli_fail("learn", st);
  }
  o.quick = quick;
  o.json = json;
  o.out_dir = out;
  o.environ_list = environ;
  o.stop = &il__stop;
  o.progress = !quiet && isatty(2) ? stderr : NULL;
  o.ask = !all && !quick && !json && !no_ask && isatty(0) && isatty(1);
  o.in = stdin;
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  o.exe = n > 0 ? exe : "inferlab";
  char command[4096] = "inferlab";
  for (int i = 0; i < argc; i++) {
    size_t l = strlen(command);
    snprintf(command + l, sizeof command - l, " %s", argv[i]);
  }
  o.command_line = command;

  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = il__on_sigint;
  sigemptyset(&sa.sa_mask);
  il__stop = 0;
  sigaction(SIGINT, &sa, &old);
  int code = IL_EXIT_OK;
  if (!all) {
    il_learn_result r;
    il_status st = il_learn_run(c, &o, stdout, &r);
    if (json && r.json) printf("%s\n", r.json);
    if (st != IL_OK && r.outcome != IL_LEARN_INTERRUPTED) il_cli_fail("learn", st);
    code = il__exit_for(st, &r);
    il_learn_result_free(&r);
  } else {
    if (json) printf("[\n");
    int done = 0, skipped = 0, failed = 0, unmet = 0;
    char summary[64][200];
    int n_sum = 0;
    for (int i = 0; i < il_learn_count() && !il__stop; i++) {
      const il_learn_concept *ci = il_learn_at(i);
      if (o.progress) fprintf(stderr, "inferlab learn: %d/%d %s\n", i + 1, il_learn_count(), ci->slug);
      if (!json) printf("\n");
      il_learn_result r;
      il_status st = il_learn_run(ci, &o, stdout, &r);
      if (json && r.json) printf("%s%s\n", i ? "," : "", r.json);
      const char *what = r.outcome == IL_LEARN_DONE ? "done" : r.outcome == IL_LEARN_SKIPPED ? "skipped" :
                         r.outcome == IL_LEARN_INTERRUPTED ? "interrupted" : "FAILED";
      if (r.outcome == IL_LEARN_DONE) done++;
      else if (r.outcome == IL_LEARN_SKIPPED) skipped++;
      else if (r.outcome == IL_LEARN_FAILED) failed++;
      if (r.outcome == IL_LEARN_DONE && r.has_expectation && !r.expectation_met) unmet++;
      if (n_sum < 64)
        snprintf(summary[n_sum++], sizeof summary[0], "%2d %-28s %-11s %s%.120s", ci->number, ci->slug, what,
                 r.outcome == IL_LEARN_DONE ? (r.has_expectation ? (r.expectation_met ? "as expected" : "NOT as expected") : "") : "",
                 r.outcome == IL_LEARN_DONE ? "" : r.reason);
      int c2 = il__exit_for(st, &r);
      if (st != IL_OK && r.outcome != IL_LEARN_INTERRUPTED) {
        fprintf(stderr, "inferlab learn: %s: %s\n", ci->slug, il_error_detail());
        if (st == IL_ERR_OUTPUT || st == IL_ERR_UNSUPPORTED || st == IL_ERR_INVALID_ARG) {
          il_learn_result_free(&r);
          code = c2;
          break;
        }
      }
      if (c2 != IL_EXIT_OK && code == IL_EXIT_OK) code = c2;
      il_learn_result_free(&r);
    }
    if (json) printf("]\n");
    if (il__stop) code = IL_EXIT_INTERRUPTED;
    FILE *sf = json ? stderr : stdout;
    fprintf(sf, "\nlearn all on %s: %d done, %d skipped, %d failed; %d not as expected\n", o.device, done, skipped, failed, unmet);
    for (int i = 0; i < n_sum; i++) fprintf(sf, "  %s\n", summary[i]);
  }
  sigaction(SIGINT, &old, NULL);
  return code;
}
