/* probe/check: the record of one doctor check (verdict, evidence, fix) and the list the checks
 * are recorded into. This is the leaf every check group writes through: it knows nothing of
 * the doctor's facts, of NVML or of any check, so probe/platform, probe/loader,
 * probe/container, probe/cgroup, probe/health, probe/gpufamily, probe/distro and
 * probe/driver can all sit above it and probe/doctor (which runs them) above those.
 * Verdicts: OK (nothing to do; a check that does not apply on this machine is an OK marked
 * `na`, which the text report folds into one line), WARN (works, but something is degraded or
 * will bite later), FAIL (GPU work will not run as things are).
 * Not for: deciding verdicts (the check groups), running the checks (probe/doctor), printing
 * (probe/report).
 */
#ifndef IL_PROBE_CHECK_H
#define IL_PROBE_CHECK_H

#include <stdbool.h>

typedef enum { IL_VERDICT_OK = 0, IL_VERDICT_WARN = 1, IL_VERDICT_FAIL = 2 } il_verdict;

#define IL_CHECK_MAX_EVIDENCE 12

typedef struct {
  char key[40];
  char value[240];
} il_evidence;

typedef struct {
  char id[32];          /* stable id: "driver.nvml" */
  il_verdict verdict;
  int scenario;         /* failure class id (probe/classes), 0 when none */
  char summary[400];    /* one line: what was found */
  char fix[900];        /* what to do, exact commands; "" when OK. Lines separated by '\n'. */
  int n_evidence;
  il_evidence evidence[IL_CHECK_MAX_EVIDENCE];
  bool na;              /* OK because the check does not apply here (no GPU, no docker, ...): reported compactly */
} il_check;

/* Checks in the order they were recorded. Zero-initialise; il_check_list_free releases it. */
typedef struct {
  il_check *items;      /* owned */
  int n, cap;
  bool oom;             /* a check (or a fact behind one) could not be recorded: the report is incomplete */
  il_check overflow;    /* where writes go after an allocation failure */
} il_check_list;

/* Appends a check with summary fmt and returns it (borrowed from l; valid until the next add).
 * Never NULL: when memory runs out it sets l->oom and returns a scratch record. Internal to the
 * check groups. il__check_na does the same for a check that does not apply here (marked na). */
il_check *il__check_add(il_check_list *l, const char *id, il_verdict v, int scenario, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
il_check *il__check_na(il_check_list *l, const char *id, il_verdict v, int scenario, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Appends a line to c's fix (truncated at the field's size; cannot fail). */
void il__check_fix(il_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Adds evidence key = value to c; ignored beyond IL_CHECK_MAX_EVIDENCE entries. */
void il__check_ev(il_check *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "OK", "WARN", "FAIL" (static strings). */
const char *il_check_verdict_name(il_verdict v);
/* Value of evidence `key` of check c, NULL when absent. Borrowed from c. */
const char *il_check_evidence(const il_check *c, const char *key);
/* The first check with this id, or NULL. Borrowed from l. */
const il_check *il_check_find(const il_check_list *l, const char *id);
/* Worst verdict recorded: 0 all OK, 1 warnings only, 2 at least one failure. */
int il_check_worst(const il_check_list *l);
/* Frees the records; l may be reused after il_check_list_free (it is zeroed). */
void il_check_list_free(il_check_list *l);

#endif
