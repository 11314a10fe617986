/* tests/test_learn_machine: the fixture machines of `inferlab learn`'s doctor lessons.
 *
 * For every scenario of lab/machine: the broken machine makes the doctor's target check WARN or
 * FAIL, the repaired one makes it OK; the two trees differ; the rollback script generated from
 * the difference makes the repaired tree equal to the broken one again byte for byte (checked
 * with the diff and with `cmp` on each changed file), after which the doctor finds the failure
 * again. Also: the diff on hand-made trees (a changed file, a mode change, an added and a
 * removed file), and a tree that is not a machine.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "lab/machine.h"
#include "probe/check.h"

static int verdict_of(const char *dir, const char *check, char *summary, size_t n) {
  il_machine_report r;
  il_status st = il_machine_doctor(dir, &r);
  if (st != IL_OK) {
    fprintf(stderr, "doctor on %s: %s\n", dir, il_error_detail());
    return -1;
  }
  const il_check *c = il_doctor_find(r.dr, check);
  int v = c ? (int)c->verdict : -2;
  if (summary) snprintf(summary, n, "%s", c ? c->summary : "(no such check)");
  il_machine_report_free(&r);
  return v;
}

static void test_scenarios(const char *tmp) {
  char lib[4096];
  if (!il_machine_fake_lib("nvml", lib, sizeof lib) || !il_machine_fake_lib("cuda", lib, sizeof lib)) {
    fprintf(stderr, "the simulated driver libraries are missing\n");
    il_test_failed++;
    return;
  }
  for (int i = 0; i < il_machine_count(); i++) {
    const il_machine_scenario *s = il_machine_at(i);
    char a[2048], b[2048], script[2100], sa[512], sb[512];
    snprintf(a, sizeof a, "%.1500s/%s-baseline", tmp, s->name);
    snprintf(b, sizeof b, "%.1500s/%s-variant", tmp, s->name);
    IL_CHECK_OK(il_machine_build(s->name, false, a));
    IL_CHECK_OK(il_machine_build(s->name, true, b));
    int va = verdict_of(a, s->check, sa, sizeof sa), vb = verdict_of(b, s->check, sb, sizeof sb);
    printf("%-26s %-22s broken %d (%s)\n%-26s %-22s fixed  %d (%s)\n", s->name, s->check, va, sa, "", "", vb, sb);
    IL_CHECK(va == IL_VERDICT_WARN || va == IL_VERDICT_FAIL);
    IL_CHECK_INT(vb, IL_VERDICT_OK);
    il_machine_change ch[64];
    int n = 0;
    IL_CHECK_OK(il_machine_diff(a, b, ch, 64, &n));
    IL_CHECK(n > 0);
    snprintf(script, sizeof script, "%s/%s-rollback.sh", tmp, s->name);
    IL_CHECK_OK(il_machine_rollback_script(a, b, script));
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "sh '%s'", script);
    IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
    int after = -1;
    IL_CHECK_OK(il_machine_diff(a, b, ch, 64, &after));
    IL_CHECK_INT(after, 0);
    for (int k = 0; k < n && k < 64; k++) {
      char pa[2600];
      snprintf(pa, sizeof pa, "%s%.500s", a, ch[k].path);
      struct stat st;
      if (lstat(pa, &st) != 0 || !S_ISREG(st.st_mode)) continue;
      snprintf(cmd, sizeof cmd, "cmp '%s%.500s' '%s%.500s'", a, ch[k].path, b, ch[k].path);
      IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
    }
    IL_CHECK_INT(verdict_of(b, s->check, NULL, 0), va);
  }
}

static void write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  chmod(path, mode);
}

static void test_diff(const char *tmp) {
  char a[2048], b[2048], p[2200];
  snprintf(a, sizeof a, "%.1500s/da", tmp);
  snprintf(b, sizeof b, "%.1500s/db", tmp);
  mkdir(a, 0755);
  mkdir(b, 0755);
  snprintf(p, sizeof p, "%s/same", a), write_file(p, "x\n", 0644);
  snprintf(p, sizeof p, "%s/same", b), write_file(p, "x\n", 0644);
  snprintf(p, sizeof p, "%s/text", a), write_file(p, "one\n", 0644);
  snprintf(p, sizeof p, "%s/text", b), write_file(p, "two\n", 0644);
  snprintf(p, sizeof p, "%s/mode", a), write_file(p, "m\n", 0660);
  snprintf(p, sizeof p, "%s/mode", b), write_file(p, "m\n", 0666);
  snprintf(p, sizeof p, "%s/gone", a), write_file(p, "g\n", 0644);
  snprintf(p, sizeof p, "%s/sub", b), mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/sub/new", b), write_file(p, "n\n", 0644);
  il_machine_change ch[8];
  int n = 0;
  IL_CHECK_OK(il_machine_diff(a, b, ch, 8, &n));
  IL_CHECK_INT(n, 5);
  if (n == 5) {
    IL_CHECK_STR(ch[0].path, "/gone");
    IL_CHECK_INT(ch[0].kind, 'D');
    IL_CHECK_STR(ch[1].path, "/mode");
    IL_CHECK_INT(ch[1].kind, 'M');
    IL_CHECK_STR(ch[2].path, "/sub");
    IL_CHECK_INT(ch[2].kind, 'A');
    IL_CHECK_STR(ch[3].path, "/sub/new");
    IL_CHECK_STR(ch[4].path, "/text");
  }
  snprintf(p, sizeof p, "%s/rb.sh", tmp);
  IL_CHECK_OK(il_machine_rollback_script(a, b, p));
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "sh '%s'", p);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  IL_CHECK_OK(il_machine_diff(a, b, ch, 8, &n));
  IL_CHECK_INT(n, 0);
  il_machine_report r;
  IL_CHECK_INT(il_machine_doctor(a, &r), IL_ERR_NOT_FOUND);
  IL_CHECK(il_machine_find("no-such") == NULL);
  IL_CHECK_INT(il_machine_build("no-such", false, a), IL_ERR_NOT_FOUND);
}

int main(void) {
  char tmp[1600];
  snprintf(tmp, sizeof tmp, "%.1500s", il_test_tmpdir());
  test_diff(tmp);
  test_scenarios(tmp);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  il_test_run(cmd, NULL, 0);
  return il_test_finish();
}
