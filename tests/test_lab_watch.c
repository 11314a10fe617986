/* tests/test_lab_watch: watch on short real commands: exit status and duration of
 * `sh -c 'sleep 0.2; exit 3'`, a signal, a command that does not exist (127), peak RSS of a
 * child that touches memory, the GPU part saying why there is none, and the JSON form. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

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
    /* the start seen from outside: the RSS grew by the buffer, half of it before 90% of it */
    IL_CHECK(r.usage.rss_peak - r.usage.rss_first >= (32ll << 20));
    IL_CHECK(r.usage.rss_t50 >= 0 && r.usage.rss_t50 <= r.usage.rss_t90 && r.usage.rss_t90 <= r.usage.seconds);
    IL_CHECK(r.usage.first_output_s < 0); /* no --log: the output is not seen */
  }

  /* --log: the first byte of the output timed from the samples; a silent command: none */
  {
    const char *dir = il_test_tmpdir();
    char log[512], scen[512];
    snprintf(log, sizeof log, "%s/watch.log", dir);
    il_watch_options lo = o;
    lo.log_path = log;
    char *talk[] = {"sh", "-c", "sleep 0.2; echo ready; sleep 0.3", NULL};
    IL_CHECK_OK(il_watch_run(&lo, talk, &r));
    IL_CHECK(r.usage.first_output_s >= 0 && r.usage.first_output_s <= r.usage.seconds);
    char *silent[] = {"sh", "-c", "sleep 0.1", NULL};
    IL_CHECK_OK(il_watch_run(&lo, silent, &r));
    IL_CHECK(r.usage.first_output_s < 0);
    /* GPU memory that grows by 1 GiB while the command runs (the fake NVML re-reads its
     * scenario, live=1): the growth in bytes, first seen no later than its 90% */
    const char *fake = getenv("IL_FAKE_NVML_LIB");
    if (fake && access(fake, R_OK) == 0) {
      snprintf(scen, sizeof scen, "%s/gpu.txt", dir);
      FILE *sf = fopen(scen, "w");
      IL_CHECK(sf != NULL);
      if (sf) {
        fprintf(sf, "live=1\ncount=1\ndev0.name=Fake GPU\ndev0.mem_total=17179869184\ndev0.mem_used=1000\n");
        fclose(sf);
      }
      setenv("IL_FAKE_GPU", scen, 1);
      char grow[2048];
      snprintf(grow, sizeof grow,
               "sleep 0.3; printf 'live=1\ncount=1\ndev0.name=Fake GPU\ndev0.mem_total=17179869184\n"
               "dev0.mem_used=1073742824\n' > %s.new && mv %s.new %s; sleep 0.4", scen, scen, scen);
      char *growv[] = {"sh", "-c", grow, NULL};
      il_watch_options go = o;
      go.nvml_lib = fake;
      IL_CHECK_OK(il_watch_run(&go, growv, &r));
      IL_CHECK(r.usage.gpu_available);
      IL_CHECK_INT(r.usage.gpu_first, 1000);
      IL_CHECK_INT(r.usage.gpu_grown, 1ll << 30);
      IL_CHECK(r.usage.gpu_t_first >= 0 && r.usage.gpu_t_first <= r.usage.gpu_t90);
      char pb[4096];
      FILE *mf = fmemopen(pb, sizeof pb, "w");
      il_watch_print(&r, mf);
      fclose(mf);
      IL_CHECK_CONTAINS(pb, "gpu memory +1.00 GiB");
      printf("%s", pb);
      unsetenv("IL_FAKE_GPU");
    } else {
      printf("SKIP (part): IL_FAKE_NVML_LIB is not set to the fake NVML\n");
    }
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
