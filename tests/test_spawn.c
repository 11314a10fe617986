/* tests/test_spawn: sys/spawn, the one way doctor and watch start a program.
 *
 * Captured stdout (and the cut at the buffer's size), exit status, a signal, a program that
 * does not exist (127, ENOENT) and one that is not executable (126), PATH lookup, stdout and
 * stderr into a log file, an unopenable log file (IL_ERR_IO naming it), and the deadline: a
 * child that would sleep 30 s is killed and reaped at a 200 ms timeout (the assertion is on
 * the outcome, not on how long it took), and on_start sees the child's pid.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "sys/spawn.h"

static pid_t started;
static void on_start(void *ud, pid_t pid) {
  (void)ud;
  started = pid;
}

int main(void) {
  char buf[64];
  il_spawn_result r;
  char *echo[] = {"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3", NULL};
  il_spawn_opts o = {.quiet = true, .capture = buf, .capture_cap = sizeof buf, .on_start = on_start};
  IL_CHECK_OK(il_spawn_run(echo, &o, &r));
  IL_CHECK_STR(buf, "hello\n"); /* stderr went to /dev/null */
  IL_CHECK_INT(r.exit_status, 3);
  IL_CHECK(!r.exec_failed && !r.timed_out && r.term_signal == 0);
  IL_CHECK(started > 0);

  char small[4];
  il_spawn_opts os = {.quiet = true, .capture = small, .capture_cap = sizeof small};
  IL_CHECK_OK(il_spawn_run(echo, &os, &r));
  IL_CHECK_STR(small, "hel");
  IL_CHECK_INT(r.captured, 3);

  char *sig[] = {"/bin/sh", "-c", "kill -TERM $$", NULL};
  il_spawn_opts oq = {.quiet = true};
  IL_CHECK_OK(il_spawn_run(sig, &oq, &r));
  IL_CHECK_INT(r.term_signal, SIGTERM);
  IL_CHECK_INT(r.exit_status, -1);

  char *missing[] = {"/nonexistent/program", NULL};
  IL_CHECK_OK(il_spawn_run(missing, &oq, &r));
  IL_CHECK(r.exec_failed);
  IL_CHECK_INT(r.exec_errno, ENOENT);
  IL_CHECK_INT(r.exit_status, 127);
  char *notexec[] = {"/etc/hostname", NULL};
  if (access(notexec[0], R_OK) == 0) {
    IL_CHECK_OK(il_spawn_run(notexec, &oq, &r));
    IL_CHECK(r.exec_failed);
    IL_CHECK_INT(r.exit_status, 126);
  }

  /* PATH lookup, output into a log file */
  char log[] = "/tmp/il_test_spawn_XXXXXX";
  int fd = mkstemp(log);
  IL_CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  char *path_sh[] = {"sh", "-c", "echo out; echo err >&2", NULL};
  il_spawn_opts ol = {.search_path = true, .log_path = log};
  IL_CHECK_OK(il_spawn_run(path_sh, &ol, &r));
  IL_CHECK_INT(r.exit_status, 0);
  FILE *f = fopen(log, "r");
  char text[64] = "";
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
  }
  IL_CHECK_STR(text, "out\nerr\n");
  unlink(log);
  il_spawn_opts obad = {.log_path = "/nonexistent/dir/log"};
  IL_CHECK_INT(il_spawn_run(path_sh, &obad, &r), IL_ERR_IO);
  IL_CHECK_CONTAINS(il_error_detail(), "/nonexistent/dir/log");

  /* the deadline, with and without a capture */
  char *slow[] = {"/bin/sleep", "30", NULL};
  il_spawn_opts ot = {.quiet = true, .timeout_ms = 200};
  IL_CHECK_OK(il_spawn_run(slow, &ot, &r));
  IL_CHECK(r.timed_out);
  IL_CHECK_INT(r.term_signal, SIGKILL);
  il_spawn_opts otc = {.quiet = true, .capture = buf, .capture_cap = sizeof buf, .timeout_ms = 200};
  IL_CHECK_OK(il_spawn_run(slow, &otc, &r));
  IL_CHECK(r.timed_out);
  IL_CHECK_INT(r.term_signal, SIGKILL);
  /* a quick child under a deadline is not killed */
  char *quick[] = {"/bin/sh", "-c", "exit 0", NULL};
  il_spawn_opts oqk = {.quiet = true, .timeout_ms = 60000};
  IL_CHECK_OK(il_spawn_run(quick, &oqk, &r));
  IL_CHECK(!r.timed_out);
  IL_CHECK_INT(r.exit_status, 0);
  return il_test_finish();
}
