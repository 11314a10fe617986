/* tests/sysroots/scenario: running the doctor library on a fixture machine, for the
 * test_doctor*.c programs. A scen holds the sysroot, the environment the doctor is given, the
 * fake libraries to load and the build facts; sc_run runs il_doctor_run as uid 4242 (group
 * 4242) and EXPECT / EXPECT_SUMMARY assert one check's verdict, scenario, fix or summary,
 * printing the whole report when they fail. Header-only: static helpers.
 */
#ifndef IL_TESTS_SCENARIO_H
#define IL_TESTS_SCENARIO_H

#include <stdbool.h>

#include "sysroots/sysroot.h"

#include "probe/doctor.h"
#include "probe/report.h"

#define SC_MAX_ENV 40

typedef struct {
  const char *root;
  char *env[SC_MAX_ENV]; /* NULL-terminated; sc_env's entries point into env_text */
  char env_text[SC_MAX_ENV][512];
  int n_env;
  char nvml[PATH_MAX], cuda[PATH_MAX];
  bool have_cuda;
  const char *cuda_version, *archs;
  unsigned uid;
} scen;

static inline void sc_init(scen *s, const char *root) {
  memset(s, 0, sizeof *s);
  s->root = root;
  s->uid = 4242;
  s->env[s->n_env++] = (char *)"PATH=/usr/local/bin:/usr/bin:/bin";
}

/* Adds "NAME=value", copied into the scen: env is environ-shaped (il_doctor_options_default
 * takes char *const *), so it points at strings the scen owns rather than at casts of the
 * caller's const ones. A variable longer than a slot is a broken test: it exits. */
static inline void sc_env(scen *s, const char *kv) {
  if (s->n_env >= SC_MAX_ENV - 1) return;
  size_t n = strlen(kv);
  if (n >= sizeof s->env_text[0]) {
    fprintf(stderr, "sc_env: '%.40s...' is longer than %zu bytes\n", kv, sizeof s->env_text[0] - 1);
    exit(1);
  }
  memcpy(s->env_text[s->n_env], kv, n + 1);
  s->env[s->n_env] = s->env_text[s->n_env];
  s->n_env++;
}

/* Drops the last variable added with sc_env. */
static inline void sc_pop(scen *s) {
  if (s->n_env > 1) s->env[--s->n_env] = NULL;
}

static inline il_doctor *sc_run(scen *s) {
  il_doctor_options o;
  il_doctor_options_default(&o, s->env);
  o.sysroot = s->root;
  o.nvml_lib = s->nvml[0] ? s->nvml : NULL;
  o.cuda_lib = s->cuda[0] ? s->cuda : NULL;
  o.build_have_cuda = s->have_cuda;
  o.build_cuda_version = s->cuda_version ? s->cuda_version : "";
  o.build_cuda_archs = s->archs ? s->archs : "";
  o.cpu_threads = 4;
  static const gid_t groups[] = {4242};
  o.identity_set = true;
  o.uid = s->uid;
  o.gid = 4242;
  o.groups = groups;
  o.n_groups = 1;
  il_doctor *dr = NULL;
  il_status st = il_doctor_run(&o, &dr);
  if (st != IL_OK) {
    fprintf(stderr, "il_doctor_run failed: %s %s\n", il_status_name(st), il_error_detail());
    exit(1);
  }
  return dr;
}

/* A healthy host with two A100s on driver 535.54.03 (SR_TWO_A100 plus `extra` scenario lines),
 * built with CUDA 12.2 for sm_80/90; callers change one thing. Returns the sysroot. */
static inline const char *sc_two_a100(scen *s, const char *extra) {
  const char *root = sr_new_host();
  sc_init(s, root);
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_pci_gpu(root, "0000:0b:00.0", 0x20b2, "nvidia");
  sr_driver(root, "535.54.03", 0, 2, 1);
  sr_install_nvml(root, "535.54.03", s->nvml, sizeof s->nvml);
  sr_install_cuda(root, "/usr/lib/x86_64-linux-gnu", "535.54.03", s->cuda, sizeof s->cuda);
  sr_scenario(root, "%s%s", SR_TWO_A100, extra);
  s->have_cuda = true;
  s->cuda_version = "12.2";
  s->archs = "80;90";
  return root;
}

static inline void dump(const il_doctor *dr) {
  il_report_text(dr, stderr);
}

/* Asserts check `id` has verdict v, scenario `scenario` (-1 = don't care) and, when fix_part is
 * not NULL, that its fix contains fix_part. */
static inline void expect_at(const char *file, int line, const il_doctor *dr, const char *id, il_verdict v, int scenario, const char *fix_part) {
  const il_check *c = il_doctor_find(dr, id);
  bool ok = c && c->verdict == v && (scenario < 0 || c->scenario == scenario) && (!fix_part || strstr(c->fix, fix_part));
  if (ok) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  fprintf(stderr, "%s:%d: FAILED: %s: want %s scenario %d fix containing \"%s\"\n", file, line, id, il_check_verdict_name(v), scenario,
          fix_part ? fix_part : "");
  if (!c) fprintf(stderr, "   got: no such check\n");
  else fprintf(stderr, "   got: %s scenario %d: %s\n   fix: %s\n", il_check_verdict_name(c->verdict), c->scenario, c->summary, c->fix);
  dump(dr);
}
#define EXPECT(dr, id, v, scen, fix) expect_at(__FILE__, __LINE__, dr, id, v, scen, fix)

static inline void expect_summary_at(const char *file, int line, const il_doctor *dr, const char *id, const char *part) {
  const il_check *c = il_doctor_find(dr, id);
  if (c && strstr(c->summary, part)) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  if (c) dump(dr);
  fprintf(stderr, "%s:%d: FAILED: %s summary should contain \"%s\", got \"%s\"\n", file, line, id, part, c ? c->summary : "(no check)");
}
#define EXPECT_SUMMARY(dr, id, part) expect_summary_at(__FILE__, __LINE__, dr, id, part)

#endif
