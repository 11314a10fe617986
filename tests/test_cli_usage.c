/* tests/test_cli_usage: what a new user types (issue 28): "did you mean" for unknown commands
 * and flags, `inferlab help CMD`, bench's --html alias and its table row for a failed
 * combination, convert taking -m and quant the positional input, convert pointing at quant
 * for a mix, quant's notes in one line and saying when the output grew. Runs $IL_CLI (set by
 * CTest) on builtin:tiny and files it writes. */
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static const char *cli;
static char tmp[256];
static char out[1 << 16];
#define run(...) il_test_runf(out, sizeof out, __VA_ARGS__)

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

static void test_suggest(void) {
  IL_CHECK_INT(run("%s bnech 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "unknown command 'bnech'; did you mean 'bench'?"); /* a swap */
  IL_CHECK_INT(run("%s experimnt 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "did you mean 'experiment'?");
  IL_CHECK_INT(run("%s zzzz 2>&1", cli), 64);
  IL_CHECK(strstr(out, "unknown command 'zzzz'") != NULL && strstr(out, "did you mean") == NULL);
  IL_CHECK_INT(run("%s run --tmep 0 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "did you mean '--temp'?");
  IL_CHECK_INT(run("%s run --temperature 0 2>&1", cli), 64); /* llama.cpp's long spelling */
  IL_CHECK_CONTAINS(out, "did you mean '--temp'?");
  IL_CHECK_INT(run("%s bench --htlm r.html 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "did you mean '--html'?");
  IL_CHECK_INT(run("%s run --zzzzzz 2>&1", cli), 64);
  IL_CHECK(strstr(out, "unknown option '--zzzzzz'") != NULL && strstr(out, "did you mean") == NULL);
  /* help CMD is CMD --help */
  IL_CHECK_INT(run("%s help run", cli), 0);
  IL_CHECK(strncmp(out, "usage: inferlab run", 19) == 0);
  IL_CHECK_INT(run("%s help bnech 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "did you mean 'bench'?");
}

static void test_bench(void) {
  /* --html is --report */
  IL_CHECK_INT(run("%s bench -p 4 --gen 2 -r 1 --warmup 0 --roofline-ms 0 -q --no-gpu --html %s/r.html >/dev/null 2>&1", cli, tmp), 0);
  char p[400];
  snprintf(p, sizeof p, "%s/r.html", tmp);
  char *html = il_test_read_file(p, NULL);
  IL_CHECK(html && strstr(html, "<svg") != NULL);
  free(html);
  /* a combination out of memory is one table row: the error's first line, no '|' inside, and
   * the whole report (cause, fix) on stderr */
  IL_CHECK_INT(run("%s bench -m builtin:tiny --device sim:2MiB -p 8 --gen 2 -r 1 --warmup 0 --roofline-ms 0 -q --no-gpu "
                   "2>%s/err.txt",
                   cli, tmp),
               71);
  const char *row = strstr(out, "\n| 1 | 8 | 2 |");
  IL_CHECK(row != NULL);
  if (row) {
    const char *end = strchr(row + 1, '\n');
    IL_CHECK(end && end[-1] == '|');
    IL_CHECK_CONTAINS(row, "error: out of memory");
    IL_CHECK(strstr(row, "the whole report is on stderr") != NULL && strstr(row, "whole report") < end);
    IL_CHECK(end && (end[1] == 0 || end[1] == '\n')); /* nothing of the report after the row */
  }
  snprintf(p, sizeof p, "%s/err.txt", tmp);
  char *err = il_test_read_file(p, NULL);
  IL_CHECK(err && strstr(err, "cause:") != NULL && strstr(err, "fix:") != NULL);
  free(err);
}

static void test_convert_quant(void) {
  IL_CHECK_INT(run("cd %s && %s convert -m builtin:tiny --type f32 -o t.gguf 2>&1", tmp, cli), 0);
  IL_CHECK_INT(run("cd %s && %s convert builtin:tiny -m builtin:1b -o t2.gguf 2>&1", tmp, cli), 64);
  IL_CHECK_CONTAINS(out, "two sources");
  IL_CHECK_INT(run("cd %s && %s convert t.gguf --type q4_k_m -o t3.gguf 2>&1", tmp, cli), 64);
  IL_CHECK_CONTAINS(out, "inferlab quant -m t.gguf --type q4_k_m -o t3.gguf");
  /* quant: the input positionally, as convert takes it */
  IL_CHECK_INT(run("cd %s && %s quant t.gguf --type q8_0 -o q.gguf 2>&1", tmp, cli), 0);
  IL_CHECK_CONTAINS(out, "quantized t.gguf -> q.gguf");
  IL_CHECK_INT(run("cd %s && %s quant -m t.gguf other.gguf --type q8_0 -o q.gguf 2>&1", tmp, cli), 64);
  /* from q4_0 to q6_k the file grows: said, with how much */
  IL_CHECK_INT(run("cd %s && %s convert builtin:tiny --type q4_0 -o t4.gguf 2>&1 && %s quant t4.gguf --type q6_k -o q6.gguf 2>&1", tmp,
                   cli, cli),
               0);
  struct stat a, b;
  char pa[400], pb[400];
  snprintf(pa, sizeof pa, "%s/t4.gguf", tmp);
  snprintf(pb, sizeof pb, "%s/q6.gguf", tmp);
  IL_CHECK(stat(pa, &a) == 0 && stat(pb, &b) == 0 && b.st_size > a.st_size);
  const char *g = strstr(out, "the output is ");
  double pct = -1;
  IL_CHECK(g && sscanf(g, "the output is %lf%% larger", &pct) == 1);
  /* the percent from the two files' sizes, measured here */
  IL_CHECK_NEAR(pct, 100.0 * ((double)b.st_size / (double)a.st_size - 1), 0.06);
  IL_CHECK_INT(run("cd %s && %s quant t.gguf --type q8_0 -o q.gguf 2>&1", tmp, cli), 0);
  IL_CHECK_NOT_CONTAINS(out, "larger than the input");
}

/* stories260K's rows are 64 and 172 wide, not a multiple of 256: many tensors fall back, said
 * in one line with the count, which --report's table holds */
static void test_quant_notes(void) {
  const char *gguf = il_test_fixture("models/stories260K-f32.gguf");
  if (!gguf) {
    printf("SKIP (part): ../shared/fixtures/models absent: quant's fallback summary not checked\n");
    return;
  }
  IL_CHECK_INT(run("%s quant %s --type q4_k_m -o %s/s.gguf --report 2>&1", cli, gguf, tmp), 0);
  IL_CHECK_INT(count(out, "note:"), 1);
  const char *n = strstr(out, "note: ");
  int kept = -1;
  IL_CHECK(n && sscanf(n, "note: %d tensors kept another type", &kept) == 1);
  /* the report's table: rows whose type out is neither the mix's q4_K/q6_K nor a 1-D f32 */
  IL_CHECK(kept > 10);
  IL_CHECK_CONTAINS(out, "--report lists each");
}

/* Writes a shell script to tmp/NAME and runs it with sh; its stdout into out. */
static int script(const char *name, const char *body) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(body, f);
  fclose(f);
  return run("cd %s && IL_CLI=%s sh %s", tmp, cli, path);
}

/* Waits (no deadline of its own: ctest's timeout ends a hang) until process $1 blocks in
 * read(2) (syscall 0 on x86-64, the first field of /proc/PID/syscall), i.e. sits at the prompt. */
static const char *wait_read_sh =
    "wait_read() { while kill -0 $1 2>/dev/null; do\n"
    "  [ \"$(cat /proc/$1/comm 2>/dev/null)\" = inferlab ] && "
    "[ \"$(cut -d' ' -f1 /proc/$1/syscall 2>/dev/null)\" = 0 ] && return 0; sleep 0.02; done; return 1; }\n";

/* chat: Ctrl-C during a reply stops it and returns to the prompt with the conversation kept
 * (the next turn's prompt holds the stopped reply); Ctrl-C at the prompt ends with 130. The
 * replies are asked 16000 tokens long, so the signal always lands inside one. */
static void test_chat_interrupt(void) {
  if (access("/proc/self/syscall", R_OK) != 0) {
    printf("SKIP (part): /proc/PID/syscall unreadable: chat's Ctrl-C not checked\n");
    return;
  }
  char body[4096];
  snprintf(body, sizeof body,
           "%s"
           "rm -f in; mkfifo in\n"
           "$IL_CLI chat -m builtin:tiny -c 16384 -n 16000 --ignore-eos --stats < in > chat.out 2> chat.err & pid=$!\n"
           "exec 3> in\n"
           "echo hello >&3\n"
           "while kill -0 $pid 2>/dev/null && [ ! -s chat.out ]; do sleep 0.02; done\n"
           "kill -INT $pid\n"
           "while kill -0 $pid 2>/dev/null && ! grep -q stopped chat.err; do sleep 0.02; done\n"
           "while kill -0 $pid 2>/dev/null && ! grep -q 'prompt tokens' chat.err; do sleep 0.02; done\n"
           "size=$(wc -c < chat.out)\n" /* the first reply and its newline are out */
           "echo second >&3\n"
           "while kill -0 $pid 2>/dev/null && [ \"$(wc -c < chat.out)\" -le $size ]; do sleep 0.02; done\n"
           "kill -INT $pid\n"
           "while kill -0 $pid 2>/dev/null && [ \"$(grep -c stopped chat.err)\" != 2 ]; do sleep 0.02; done\n"
           "wait_read $pid && kill -INT $pid\n"
           "wait $pid; echo \"rc=$?\"\n"
           "exec 3>&-\n",
           wait_read_sh);
  IL_CHECK_INT(script("chat.sh", body), 0);
  IL_CHECK_CONTAINS(out, "rc=130");
  if (!strstr(out, "rc=130")) fprintf(stderr, "script said: %s\n", out);
  char p[400];
  snprintf(p, sizeof p, "%s/chat.err", tmp);
  char *err = il_test_read_file(p, NULL);
  IL_CHECK(err != NULL);
  if (!err) return;
  int np[2] = {-1, -1}, ng[2] = {-1, -1}, k = 0;
  for (const char *q = strstr(err, "\n["); q && k < 2; q = strstr(q + 1, "\n[")) {
    int reused;
    if (sscanf(q, "\n[%d prompt tokens (%d reused), %d generated", &np[k], &reused, &ng[k]) == 3) k++;
  }
  IL_CHECK_INT(k, 2);
  IL_CHECK_CONTAINS(err, "cancelled]");
  IL_CHECK(ng[0] > 0 && ng[0] < 16000); /* stopped early */
  IL_CHECK(np[1] >= np[0] + ng[0]);    /* the stopped reply is in the second turn's prompt */
  if (il_test_failed) fprintf(stderr, "chat stderr:\n%s\n", err);
  free(err);
}

/* Waits until process $1 is inferlab (not the shell's fork before exec, which also catches
 * SIGINT) and catches SIGINT (bit 1 of SigCgt in /proc/PID/status): its handler is in place,
 * so a Ctrl-C now is the command's to handle. */
static const char *wait_sigint_sh =
    "wait_sigint() { while kill -0 $1 2>/dev/null; do\n"
    "  [ \"$(cat /proc/$1/comm 2>/dev/null)\" = inferlab ] || { sleep 0.02; continue; }\n" /* exec'd, not sh's fork */
    "  m=$(awk '/^SigCgt:/ {print $2}' /proc/$1/status 2>/dev/null)\n"
    "  [ -n \"$m\" ] && [ $(( 0x$m & 2 )) -ne 0 ] && return 0; sleep 0.02; done; return 1; }\n";

/* eval: Ctrl-C prints the figures of the windows measured so far (exit 130), and they are the
 * figures a run of exactly that many windows (--chunks N) gives. */
static void test_eval_interrupt(void) {
  if (!getenv("IL_SRC")) {
    printf("SKIP (part): IL_SRC is not set (run through ctest): eval's Ctrl-C not checked\n");
    return;
  }
  char body[4096];
  snprintf(body, sizeof body,
           "%s"
           "for i in $(seq 40); do cat %s/README.md; done > big.txt\n"
           "$IL_CLI eval -m builtin:tiny --text big.txt --ctx 64 > ev.out 2> ev.err & pid=$!\n"
           "wait_sigint $pid && kill -INT $pid\n"
           "wait $pid; echo \"rc=$?\"\n",
           wait_sigint_sh, getenv("IL_SRC"));
  IL_CHECK_INT(script("eval.sh", body), 0);
  IL_CHECK_CONTAINS(out, "rc=130");
  char p[400];
  snprintf(p, sizeof p, "%s/ev.err", tmp);
  char *err = il_test_read_file(p, NULL);
  snprintf(p, sizeof p, "%s/ev.out", tmp);
  char *res = il_test_read_file(p, NULL);
  int tokens = -1, windows = -1, done = -1, planned = -1;
  const char *a = err ? strstr(err, "big.txt: ") : NULL, *b = err ? strstr(err, "interrupted: ") : NULL;
  IL_CHECK(a && sscanf(a, "big.txt: %d tokens, %d windows", &tokens, &windows) == 2);
  IL_CHECK(b && sscanf(b, "interrupted: %d of %d windows", &done, &planned) == 2);
  IL_CHECK(done >= 1 && done == windows && planned == tokens / 64 && done < planned);
  double ppl = -1, ppl_n = -2;
  IL_CHECK(res && sscanf(res, "perplexity %lf", &ppl) == 1);
  if (done >= 1) {
    IL_CHECK_INT(run("cd %s && %s eval -m builtin:tiny --text big.txt --ctx 64 --chunks %d 2>/dev/null", tmp, cli, done), 0);
    IL_CHECK(sscanf(out, "perplexity %lf", &ppl_n) == 1);
    IL_CHECK_NEAR(ppl, ppl_n, 1e-9);
  }
  if (il_test_failed) fprintf(stderr, "eval stderr:\n%s\nstdout:\n%s\n", err ? err : "", res ? res : "");
  free(err);
  free(res);
}

/* experiment: Ctrl-C ends it after the run being measured, with the summary of the runs done
 * written (summary.txt counts the runs samples.jsonl holds) and --show reading the folder;
 * exit 130. With --cmd, Ctrl-C at a terminal reaches the command's process group too: the
 * command killed by it is not a sample. */
static void test_experiment_interrupt(void) {
  char body[4096];
  snprintf(body, sizeof body,
           "%s"
           "$IL_CLI experiment -p 8 --gen 64 -r 500 --change threads=1 -o xi -q --no-gpu > x.out 2> x.err & pid=$!\n"
           "while kill -0 $pid 2>/dev/null && [ \"$(cat xi/*/samples.jsonl 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.02; done\n"
           "wait_sigint $pid && kill -INT $pid\n"
           "wait $pid; echo \"rc=$?\"\n"
           "d=$(ls -d xi/*/)\n"
           "echo \"lines=$(wc -l < $d/samples.jsonl)\"\n"
           "$IL_CLI experiment --show $d > show.out; echo \"show=$?\"\n"
           /* --cmd in a process group of its own, signalled as a terminal would */
           "setsid $IL_CLI experiment --cmd 'sleep {}' --values 30,31 -r 3 -o xc -q --no-gpu > c.out 2> c.err & pid=$!\n"
           /* the first command runs (the experiment ignores SIGINT while it waits for one) */
           "while kill -0 $pid 2>/dev/null && ! ps -o comm= -g $pid | grep -q '^sleep'; do sleep 0.02; done\n"
           "kill -INT -$pid\n"
           "wait $pid; echo \"cmdrc=$?\"\n",
           wait_sigint_sh);
  IL_CHECK_INT(script("exp.sh", body), 0);
  IL_CHECK_CONTAINS(out, "rc=130");
  IL_CHECK_CONTAINS(out, "show=0");
  IL_CHECK_CONTAINS(out, "cmdrc=130");
  int lines = -1;
  const char *l = strstr(out, "lines=");
  IL_CHECK(l && sscanf(l, "lines=%d", &lines) == 1 && lines >= 3);
  char p[400];
  snprintf(p, sizeof p, "%s/x.out", tmp);
  char *sum = il_test_read_file(p, NULL);
  int done = -1, of = -1;
  const char *i = sum ? strstr(sum, "interrupted (Ctrl-C) after ") : NULL;
  IL_CHECK(i && sscanf(i, "interrupted (Ctrl-C) after %d of %d runs", &done, &of) == 2);
  IL_CHECK_INT(done, lines);
  IL_CHECK_INT(of, 1000);
  snprintf(p, sizeof p, "%s/show.out", tmp);
  char *show = il_test_read_file(p, NULL);
  IL_CHECK(show && strstr(show, "interrupted (Ctrl-C) after") != NULL);
  snprintf(p, sizeof p, "%s/c.out", tmp);
  char *c = il_test_read_file(p, NULL);
  IL_CHECK(c && strstr(c, "interrupted (Ctrl-C) after 0 of 6 runs") != NULL);
  IL_CHECK(c && strstr(c, "failures: baseline 0, variant 0") != NULL); /* the killed command is no failed sample */
  if (il_test_failed) fprintf(stderr, "script: %s\nsummary: %s\ncmd summary: %s\n", out, sum ? sum : "", c ? c : "");
  free(sum);
  free(show);
  free(c);
}

/* A progress line on a terminal is ended when Ctrl-C kills the command, so the shell's prompt
 * (here "[after") does not join it. `script` gives the command a terminal; env resets SIGINT
 * to its default (a background job of sh starts with it ignored). */
static void test_progress_line_interrupt(void) {
  if (run("command -v script >/dev/null && env --default-signal=INT true 2>/dev/null") != 0) {
    printf("SKIP (part): no 'script' or no 'env --default-signal': the progress line on Ctrl-C is not checked\n");
    return;
  }
  char body[4096];
  snprintf(body, sizeof body,
           "%s"
           "INFERLAB_PROGRESS_DELAY_MS=0 env --default-signal=INT $IL_CLI convert builtin:1b --type q4_0 -o big.gguf & p=$!\n"
           "wait_sigint $p && kill -INT $p\n"
           "wait $p; printf '[after rc=%%s]' $?\n",
           wait_sigint_sh);
  char path[400];
  snprintf(path, sizeof path, "%s/progress.sh", tmp);
  FILE *f = fopen(path, "w");
  IL_CHECK(f != NULL);
  if (!f) return;
  fputs(body, f);
  fclose(f);
  IL_CHECK_INT(run("cd %s && IL_CLI=%s script -qec 'sh %s' /dev/null", tmp, cli, path), 0);
  const char *line = strstr(out, "converting builtin:1b ...");
  const char *after = strstr(out, "[after rc=130]");
  IL_CHECK(line && after && line < after);
  if (line && after) {
    /* between the line and the prompt: the erase (CR, erase-to-end) */
    char between[256];
    snprintf(between, sizeof between, "%.*s", (int)(after - line < 255 ? after - line : 255), line);
    IL_CHECK_CONTAINS(between, "\r\033[K");
  }
}

/* One flag, one meaning: the new spellings work; the old ones still work and say so once. */
static void test_renamed_flags(void) {
  IL_CHECK_INT(run("%s bench --parallel 1 -p 4 --gen 2 -r 1 --warmup 0 --roofline-ms 0 -q --no-gpu 2>&1", cli), 0);
  IL_CHECK_NOT_CONTAINS(out, "note:");
  IL_CHECK_CONTAINS(out, "\n| 1 | 4 | 2 |");
  IL_CHECK_INT(run("%s bench --parallel x 2>&1", cli), 64); /* an error names the flag as typed */
  IL_CHECK_CONTAINS(out, "--parallel: 'x' is not an integer");
  IL_CHECK_INT(run("%s bench --batch 1 -p 4 --gen 2 --reps 1 --warmup 0 --roofline-ms 0 -q --no-gpu 2>&1", cli), 0);
  IL_CHECK_CONTAINS(out, "note: --batch is the old spelling of --parallel");
  IL_CHECK_CONTAINS(out, "note: --reps is the old spelling of -r/--repetitions");
  IL_CHECK_CONTAINS(out, "\n| 1 | 4 | 2 |"); /* and it measured what --parallel would */
  IL_CHECK_INT(run("cd %s && %s experiment --parallel 1 -p 4 --gen 2 --repeat 1 --warmup 0 --out old -q --no-gpu "
                   "--change parallel=2 2>&1 && ls -d old/*/",
                   tmp, cli),
               0);
  IL_CHECK_CONTAINS(out, "note: --repeat is the old spelling of -r/--repetitions");
  IL_CHECK_CONTAINS(out, "note: --out is the old spelling of -o/--output");
  IL_CHECK_CONTAINS(out, "experiment: parallel 1 -> 2");
  IL_CHECK_CONTAINS(out, "old/");
  /* the summary: a default that stands for something with what it ran as; rates as plain numbers */
  IL_CHECK_INT(run("cd %s && %s experiment -p 4 --gen 2 -r 1 --warmup 0 -o th -q --no-gpu --change threads=1 2>&1", tmp, cli), 0);
  char want[64];
  snprintf(want, sizeof want, "experiment: threads 0 (%ld here) -> 1", sysconf(_SC_NPROCESSORS_ONLN));
  IL_CHECK_CONTAINS(out, want);
  IL_CHECK(strstr(out, "tok/s") != NULL && strstr(out, "e+0") == NULL);
  /* monitor: -n/--count is the count (-c is the context length everywhere else) */
  IL_CHECK_INT(run("%s monitor -c 1 --nvml-lib /nonexistent.so 2>&1", cli), 66);
  IL_CHECK_CONTAINS(out, "note: -c is the old spelling of -n/--count");
  IL_CHECK_INT(run("%s monitor -n 1 --nvml-lib /nonexistent.so 2>&1", cli), 66);
  IL_CHECK_NOT_CONTAINS(out, "note:");
}

/* Help pages: defaults in one format ([X], no "(default X)"), no parser bounds like
 * 1073741824, float options labelled X; chat's -n default is the 256 it generates. */
/* serve on an address another process holds: exit 1 (runtime failure), as --help says, with
 * the address named; serve --help lists --parallel once, not also --n-seq or the prompt */
static void test_serve_busy_port(void) {
  int rc = run("%s serve --help", cli);
  IL_CHECK_INT(rc, 0);
  IL_CHECK_CONTAINS(out, "--parallel N");
  IL_CHECK_NOT_CONTAINS(out, "--n-seq N");
  IL_CHECK_NOT_CONTAINS(out, "--prompt S");
  rc = run("%s serve --help 2>&1 | grep -q 'built without the server' || python3 -c \"import socket, subprocess, sys; "
           "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
           "sys.exit(subprocess.call([sys.argv[1], 'serve', '-m', 'builtin:tiny', '--port', str(s.getsockname()[1])]))\" "
           "%s 2>&1",
           cli, cli);
  IL_CHECK_INT(rc, 1);
  IL_CHECK_CONTAINS(out, "cannot listen");
}

static void test_help_format(void) {
  const char *cmds[] = {"run", "chat", "bench", "experiment", "eval", "convert", "quant", "tokenize", "monitor", "watch",
                        "logits", "plan"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    IL_CHECK_INT(run("%s %s --help 2>&1", cli, cmds[i]), 0);
    const bool ok = strstr(out, "(default") == NULL && strstr(out, "1073741824") == NULL && strstr(out, "--temp N") == NULL;
    IL_CHECK(ok);
    if (!ok) fprintf(stderr, "%s --help:\n%s\n", cmds[i], out);
  }
  IL_CHECK_INT(run("%s chat --help", cli), 0);
  IL_CHECK(strstr(out, "-n, --n-predict N") != NULL && strstr(out, "[256]") != NULL);
  IL_CHECK_INT(run("printf 'Hi\\n' | %s chat -m builtin:tiny --ignore-eos --stats 2>&1 >/dev/null", cli), 0);
  IL_CHECK_CONTAINS(out, " 256 generated in ");
  /* exit codes as the help says: plan without a device to size is a usage error */
  IL_CHECK_INT(run("%s plan 2>&1", cli), 64);
  IL_CHECK_CONTAINS(out, "give --device sim:SIZE");
  IL_CHECK_INT(run("%s plan --help", cli), 0);
  IL_CHECK_CONTAINS(out, "64 usage (also: no --device)");
  IL_CHECK_INT(run("%s tokenize --help", cli), 0);
  IL_CHECK_NOT_CONTAINS(out, "--ids --parse-special"); /* the default: no flag needed */
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli) IL_SKIP("IL_CLI is not set (run through ctest)");
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  test_suggest();
  test_renamed_flags();
  test_help_format();
  test_serve_busy_port();
  test_bench();
  test_convert_quant();
  test_quant_notes();
  test_chat_interrupt();
  test_eval_interrupt();
  test_experiment_interrupt();
  test_progress_line_interrupt();
  char rm[300];
  snprintf(rm, sizeof rm, "rm -rf %s", tmp);
  il_test_run(rm, NULL, 0);
  return il_test_finish();
}
