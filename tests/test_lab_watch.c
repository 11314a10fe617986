/* tests/test_lab_watch: watch on short real commands: exit status and duration of
 * `sh -c 'sleep 0.2; exit 3'`, a signal, a command that does not exist (127), peak RSS of a
 * child that touches memory, the GPU part saying why there is none, and the JSON form. */
#include <sys/wait.h>

#include "harness.h"
#include "lab/watch.h"

int main(void) {
  il_watch_options o = {50, "/nonexistent/libnvidia-ml.so.1", false, NULL, NULL};
  il_watch_result r;
  char *sleep3[] = {"sh", "-c", "sleep 0.2; exit 3", NULL};
  IL_CHECK_OK(il_watch_run(&o, sleep3, &r));
  printf("sleep 0.2; exit 3: status %d, %.3f s, %d samples, peak rss %lld\n", r.exit_status, r.seconds,
         r.usage.n_samples, r.peak_rss);
  IL_CHECK_INT(r.exit_status, 3);
  IL_CHECK_INT(il_watch_exit_code(&r), 3);
  IL_CHECK(r.seconds >= 0.2); /* no upper bound: a loaded machine may take any time */
  IL_CHECK(r.usage.n_samples >= 2); /* first and last always; those every 50 ms depend on load */
  IL_CHECK(r.peak_rss > 0);
  IL_CHECK(!r.usage.gpu_available);
  IL_CHECK_CONTAINS(r.usage.gpu_reason, "NVML not loaded");
  IL_CHECK_STR(r.command, "sh -c sleep 0.2; exit 3");

  char *killed[] = {"sh", "-c", "kill -TERM $$", NULL};
  IL_CHECK_OK(il_watch_run(&o, killed, &r));
  IL_CHECK_INT(r.term_signal, 15);
  IL_CHECK_INT(il_watch_exit_code(&r), 128 + 15);

  char *missing[] = {"/nonexistent/inferlab-no-such-command", NULL};
  IL_CHECK_OK(il_watch_run(&o, missing, &r));
  IL_CHECK(r.exec_failed);
  IL_CHECK_INT(il_watch_exit_code(&r), 127);
  printf("missing: %s\n", r.exec_error);

  /* a child holding ~64 MiB: wait4's peak RSS sees it */
  char *big[] = {"python3", "-c", "b = bytearray(64 << 20); import time; time.sleep(0.1)", NULL};
  if (system("python3 -c '' 2>/dev/null") == 0) {
    IL_CHECK_OK(il_watch_run(&o, big, &r));
    printf("python 64 MiB: peak rss %lld, sampled %lld\n", r.peak_rss, r.usage.rss_peak);
    IL_CHECK_INT(r.exit_status, 0);
    IL_CHECK(r.peak_rss >= (64ll << 20));
    IL_CHECK(r.usage.rss_peak >= (64ll << 20));
  }

  char *empty[] = {NULL};
  IL_CHECK_INT(il_watch_run(&o, empty, &r), IL_ERR_INVALID_ARG);

  /* JSON form: parseable, and says the same */
  IL_CHECK_OK(il_watch_run(&o, sleep3, &r));
  const char *tmp = il_test_tmpdir();
  char path[512], cmd[1400];
  snprintf(path, sizeof path, "%s/watch.json", tmp);
  FILE *f = fopen(path, "w");
  IL_CHECK_OK(il_watch_json(&r, f));
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
           "assert d[\"schema_version\"]==1 and d[\"exit_status\"]==3 and d[\"seconds\"]>=0.2, d; "
           "assert d[\"gpu\"][\"available\"] is False and \"NVML\" in d[\"gpu\"][\"reason\"]' %s",
           path);
  if (system("python3 -c '' 2>/dev/null") == 0) IL_CHECK_INT(WEXITSTATUS(system(cmd)), 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) printf("could not remove %s\n", tmp);
  return il_test_finish();
}
