/* lab/learn_machine: the lessons that cannot change this machine live. The machine kind builds
 * a lesson's fixture machine twice in its evidence folder (baseline/ broken, variant/ repaired,
 * lab/machine) and runs the doctor on each; the arms are commands (`inferlab learn --machine
 * DIR/baseline`, the same for variant/) the learner can run and edit, and the rollback is a
 * script that copies the changed files back. The pattern kind runs lab/allocpat's two
 * allocation patterns on the device's caching allocator. See lab/learn_impl.h for the steps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/registry.h"
#include "core/jsonw.h"
#include "lab/allocpat.h"
#include "lab/learn_impl.h"
#include "memory/mem.h"
#include "probe/check.h"
#include "probe/report.h"

/* ---- machine ------------------------------------------------------------------------------ */

enum { MM_LEVEL, MM_FAILS, MM_WARNS, MM_EXIT, MM_COUNT };

static const il__learn_metric il__machine_metrics[MM_COUNT] = {
    {"check_level", {"verdict of the lesson's check (0 OK, 1 WARN, 2 FAIL)", "Urteil der Prüfung der Lektion (0 OK, 1 WARN, 2 FAIL)"}, "count", -1},
    {"fails", {"checks that FAIL", "Prüfungen mit FAIL"}, "count", -1},
    {"warns", {"checks that WARN", "Prüfungen mit WARN"}, "count", -1},
    {"exit_code", {"doctor's exit code", "Exit-Code des doctor"}, "count", -1},
};

/* The command template of the two arms: this binary on DIR/{}. */
static il_status il__machine_command(il__learn *L, const char *dir) {
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl, "'%s' learn --machine '%s/{}'", L->o->exe ? L->o->exe : "inferlab", dir);
  IL_TRY(il_experiment_set_command(L->x, tmpl, "baseline,variant"));
  il__learn_set_metrics(L, il__machine_metrics, MM_COUNT);
  return IL_OK;
}

static il_status il__machine_define(il__learn *L) {
  L->scen = il_machine_find(L->c->slug);
  if (!L->scen) return il_error(IL_ERR_INTERNAL, "no machine for '%s'", L->c->slug);
  /* the folder is not known yet: the commands are written again once it is */
  IL_TRY(il__machine_command(L, "."));
  snprintf(L->change, sizeof L->change, "%s", L->scen->fix);
  L->focus[0] = "check_level";
  L->focus[1] = "fails";
  L->focus[2] = "exit_code";
  L->n_focus = 3;
  L->expect_key = "check_level";
  L->expect_dir = -1;
  il__learn_fact(L, "check", "%s", L->scen->check);
  il__learn_fact(L, "repair", "%s", L->scen->fix);
  return IL_OK;
}

static il_status il__machine_files(il__learn *L) {
  il_experiment *x = L->x;
  for (int a = 0; a < 2; a++) {
    snprintf(L->tree[a], sizeof L->tree[a], "%s/%s", x->dir, a ? "variant" : "baseline");
    IL_TRY(il_machine_build(L->scen->name, a == 1, L->tree[a]));
    il__learn_file(L, a ? "variant/" : "baseline/");
  }
  IL_TRY(il__machine_command(L, x->dir));
  const char *names[2] = {"baseline.cmd", "variant.cmd"};
  const char *cmds[2] = {x->cmd_a, x->cmd_b};
  for (int a = 0; a < 2; a++) {
    il_status st = IL_OK;
    FILE *f = il__learn_open(L, names[a], &st);
    if (!f) return st;
    fprintf(f, "%s\n", cmds[a]);
    if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s/%s: write failed", x->dir, names[a]);
  }
  return IL_OK;
}

static const il_check *il__find(const il_machine_report *r, const char *id) { return il_doctor_find(r->dr, id); }

/* The facts of one arm's doctor report (verdict, summary, exit code) and its JSON as evidence. */
static il_status il__arm_report(il__learn *L, const il_machine_report *r, const il_check *c, const char *arm) {
  char key[48], name[48];
  snprintf(key, sizeof key, "verdict_%s", arm);
  il__learn_fact(L, key, "%s", c ? il_check_verdict_name(c->verdict) : "?");
  snprintf(key, sizeof key, "summary_%s", arm);
  il__learn_fact(L, key, "%s", c ? c->summary : "");
  snprintf(key, sizeof key, "exit_%s", arm);
  il__learn_fact(L, key, "%d", il_doctor_exit_code(r->dr));
  snprintf(name, sizeof name, "doctor-%s.json", arm);
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, name, &st);
  if (!f) return st;
  il_report_json(r->dr, f);
  return fclose(f) == 0 ? IL_OK : il_error(IL_ERR_OUTPUT, "%s/%s: write failed", L->x->dir, name);
}

static il_status il__machine_before(il__learn *L) {
  il__learn_say(L, "%s", il__learn_ui(L, "step1"));
  /* this machine, for the same check */
  il_doctor_options o;
  il_doctor_options_default(&o, L->o->environ_list);
  il_doctor *dr = NULL;
  if (il_doctor_run(&o, &dr) == IL_OK) {
    const il_check *c = il_doctor_find(dr, L->scen->check);
    il__learn_say(L, "   %s: %s %s: %s", il__learn_ui(L, "this_machine"), c ? il_check_verdict_name(c->verdict) : "n/a",
                  L->scen->check, c ? c->summary : "(not run on this machine: it does not apply here)");
    il__learn_fact(L, "here", "%s", c ? il_check_verdict_name(c->verdict) : "n/a");
    il_doctor_free(dr);
  } else {
    il_error_clear();
  }
  il_machine_report r;
  IL_TRY(il_machine_doctor(L->tree[0], &r));
  const il_check *c = il__find(&r, L->scen->check);
  il__learn_say(L, "   %s (%s/baseline): %s %s: %s", il__learn_ui(L, "machine_tree"), L->x->dir,
                c ? il_check_verdict_name(c->verdict) : "?", L->scen->check, c ? c->summary : "(no such check)");
  char fix[2000] = "";
  if (c && c->fix[0]) {
    /* the fix's steps, one per line, indented under the first; joined by "; " for the quick check */
    size_t k = 0, j = 0;
    char joined[1000];
    for (const char *q = c->fix; *q && k + 8 < sizeof fix && j + 3 < sizeof joined; q++) {
      if (*q == '\n' && !q[1]) break; /* a trailing newline ends the last step */
      if (*q == '\n') {
        memcpy(fix + k, "\n     ", 6), k += 6;
        joined[j++] = ';', joined[j++] = ' ';
      } else {
        fix[k++] = *q;
        joined[j++] = *q;
      }
    }
    fix[k] = 0;
    joined[j] = 0;
    il__learn_say(L, "   %s: %s", il__learn_ui(L, "doctor_fix"), fix);
    il__learn_fact(L, "fix", "%s", joined);
  } else {
    il__learn_fact(L, "fix", "-");
  }
  il__learn_fact(L, "scenario", "%d", c ? c->scenario : 0);
  il_status st = il__arm_report(L, &r, c, "baseline");
  il_machine_report_free(&r);
  return st;
}

static void il__machine_change(il__learn *L) {
  il__learn_say(L, "%s\n   %s: %s", il__learn_ui(L, "step2"), il__learn_ui(L, "repair"), L->scen->fix);
  il_machine_change ch[16];
  int n = 0;
  if (il_machine_diff(L->tree[0], L->tree[1], ch, 16, &n) != IL_OK) {
    il_error_clear();
    return;
  }
  char list[2048] = "";
  for (int i = 0; i < n && i < 16; i++) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s%.500s%s", i ? ", " : "", ch[i].path,
             ch[i].kind == 'A' ? " (new)" : ch[i].kind == 'D' ? " (removed)" : "");
  }
  if (n > 16) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, ", ... (%d in all)", n);
  }
  il__learn_say(L, "   %s: %s", il__learn_ui(L, "changed_files"), list);
  il__learn_fact(L, "changed", "%s", list);
  il__learn_fact(L, "n_changed", "%d", n);
}

static il_status il__machine_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  il__learn *L = ud;
  if (il__learn_stopped(L)) return il_error(IL_ERR_INTERNAL, "interrupted by Ctrl-C");
  il_machine_report r;
  IL_TRY(il_machine_doctor(L->tree[arm], &r));
  const il_check *c = il__find(&r, L->scen->check);
  int fails = 0, warns = 0;
  for (int i = 0; i < r.dr->checks.n; i++) {
    fails += r.dr->checks.items[i].verdict == IL_VERDICT_FAIL;
    warns += r.dr->checks.items[i].verdict == IL_VERDICT_WARN;
  }
  vals[MM_LEVEL] = c ? (double)c->verdict : NAN;
  vals[MM_FAILS] = fails;
  vals[MM_WARNS] = warns;
  vals[MM_EXIT] = il_doctor_exit_code(r.dr);
  char log[2400];
  snprintf(log, sizeof log, "%s/logs/run-%03d-%s.log", x->dir, run, arm ? "variant" : "baseline");
  FILE *f = fopen(log, "w");
  if (f) {
    il_report_text_ex(r.dr, f, false);
    fclose(f);
  }
  il__learn_log(L, "run %d %s: %s %s, %d FAIL, %d WARN", run, arm ? "variant" : "baseline",
                c ? il_check_verdict_name(c->verdict) : "?", L->scen->check, fails, warns);
  il_status st = arm == 1 && run == 0 ? il__arm_report(L, &r, c, "variant") : IL_OK;
  il_machine_report_free(&r);
  IL_TRY(st);
  il__learn_file(L, "logs/");
  il__learn_sample_line(L, arm, run, vals);
  return IL_OK;
}

static il_status il__machine_after(il__learn *L) {
  const char *v = il__learn_fact_get(L, "verdict_variant"), *s = il__learn_fact_get(L, "summary_variant");
  if (v) il__learn_say(L, "   %s (variant): %s %s: %s", il__learn_ui(L, "machine_tree"), v, L->scen->check, s ? s : "");
  return IL_OK;
}

static il_status il__machine_rollback(il__learn *L) {
  char path[2400];
  snprintf(path, sizeof path, "%s/rollback.sh", L->x->dir);
  if (!L->tree[0][0]) return IL_OK;
  IL_TRY(il_machine_rollback_script(L->tree[0], L->tree[1], path));
  il__learn_file(L, "rollback.sh");
  snprintf(L->rollback, sizeof L->rollback, "sh %s   (variant/ becomes baseline/ again, byte for byte)", path);
  return IL_OK;
}

static const il__learn_kind_ops il__machine_ops = {il__machine_define, il__machine_files, il__machine_before, il__machine_change,
                                                   il__machine_run, il__machine_after, il__machine_rollback};

const il__learn_kind_ops *il__learn_ops_machine(void) { return &il__machine_ops; }

/* ---- pattern ------------------------------------------------------------------------------ */

enum { PM_FRAG, PM_LARGEST, PM_FREE, PM_RESERVED, PM_BIG_OK, PM_COUNT };

static const il__learn_metric il__pattern_metrics[PM_COUNT] = {
    {"fragmentation", {"fragmentation (1 - largest free / free)", "Fragmentierung (1 - größter freier Block / frei)"}, "fraction", -1},
    {"largest_free", {"largest free block", "größter freier Block"}, "bytes", 1},
    {"free_bytes", {"free in the cache", "frei im Cache"}, "bytes", 0},
    {"reserved_bytes", {"reserved from the device", "vom Gerät reserviert"}, "bytes", -1},
    {"big_ok", {"the long request fits (1) or not (0)", "die lange Anforderung passt (1) oder nicht (0)"}, "count", 1},
};

/* The device the pattern runs on and its cap: a caching allocator is needed (cpu has none: the
 * default sim stands in), and a device above 64 MiB is capped at 32 MiB so the long request
 * stays small. */
static void il__pattern_device(const char *device, char *dev, size_t n, size_t *cap) {
  char given[64];
  snprintf(given, sizeof given, "%s", device); /* device may be dev itself */
  snprintf(dev, n, "%s", !strcmp(given, "cpu") ? IL_LEARN_DEFAULT_DEVICE : given);
  *cap = 0;
  il_backend *b = NULL;
  il_backend_opts bo = {0};
  if (il_backend_open(dev, &bo, &b) == IL_OK) {
    size_t fr = 0, total = 0;
    b->ops->memory(b, &fr, &total);
    if (fr > ((size_t)64 << 20)) *cap = (size_t)32 << 20;
    b->ops->destroy(b);
  }
  il_error_clear();
}

static il_status il__pattern_define(il__learn *L) {
  il__pattern_device(L->device, L->device, sizeof L->device, &L->pattern_cap);
  char tmpl[2200];
  snprintf(tmpl, sizeof tmpl, "'%s' learn vram-fragmentation --pattern {} --device '%s'", L->o->exe ? L->o->exe : "inferlab",
           L->device);
  IL_TRY(il_experiment_set_command(L->x, tmpl, "steady,fragmenting"));
  il__learn_set_metrics(L, il__pattern_metrics, PM_COUNT);
  snprintf(L->change, sizeof L->change, "pattern=fragmenting");
  L->focus[0] = "fragmentation";
  L->focus[1] = "largest_free";
  L->focus[2] = "big_ok";
  L->n_focus = 3;
  L->expect_key = "fragmentation";
  L->expect_dir = +1;
  il__learn_fact(L, "device", "%s", L->device);
  return IL_OK;
}

static void il__pattern_vals(const il_allocpat_result *r, double *vals) {
  vals[PM_FRAG] = r->fragmentation;
  vals[PM_LARGEST] = (double)r->largest_free;
  vals[PM_FREE] = (double)r->free_bytes;
  vals[PM_RESERVED] = (double)r->reserved;
  vals[PM_BIG_OK] = r->big_ok;
}

static il_status il__pattern_before(il__learn *L) {
  const char *drv, *build, *dev;
  il__learn_machine_facts(L, &drv, &build, &dev);
  il__learn_say(L, "%s\n   %s: %s", il__learn_ui(L, "step1"), il__learn_ui(L, "this_machine"), drv);
  il_allocpat_result r;
  IL_TRY(il_allocpat_run(L->device, L->pattern_cap, IL_ALLOCPAT_STEADY, &r));
  char cap[24], blk[24], big[24];
  il__learn_fmt("bytes", (double)r.capacity, cap, sizeof cap);
  il__learn_fmt("bytes", (double)r.block, blk, sizeof blk);
  il__learn_fmt("bytes", (double)r.big, big, sizeof big);
  il__learn_say(L, "   %s, %s%s%s: %d %s (%s), %s %s: %s", L->device, cap, L->pattern_cap ? ", " : "",
                L->pattern_cap ? il__learn_ui(L, "capped") : "", r.n_blocks, il__learn_ui(L, "kv_buffers"), blk,
                il__learn_ui(L, "all_finish"), big, il__learn_ui(L, r.big_ok ? "fits" : "no_fit"));
  il__learn_fact(L, "capacity", "%s", cap);
  il__learn_fact(L, "block", "%s", blk);
  il__learn_fact(L, "big", "%s", big);
  il__learn_fact(L, "n_blocks", "%d", r.n_blocks);
  il_allocpat_result_free(&r);
  return IL_OK;
}

static void il__pattern_change(il__learn *L) {
  il__learn_say(L, "%s\n   pattern: steady -> fragmenting (%s; %s)", il__learn_ui(L, "step2"), il__learn_ui(L, "every_other"),
                il__learn_ui(L, "nothing_else"));
  il__learn_fact(L, "option", "pattern");
  il__learn_fact(L, "from", "steady");
  il__learn_fact(L, "to", "fragmenting");
}

static il_status il__pattern_run(void *ud, il_experiment *x, int arm, int run, double *vals) {
  il__learn *L = ud;
  if (il__learn_stopped(L)) return il_error(IL_ERR_INTERNAL, "interrupted by Ctrl-C");
  il_allocpat_result r;
  IL_TRY(il_allocpat_run(L->device, L->pattern_cap, arm ? IL_ALLOCPAT_FRAGMENTING : IL_ALLOCPAT_STEADY, &r));
  il__pattern_vals(&r, vals);
  if (r.svg && !L->map_written[arm]) {
    il_status st = IL_OK;
    FILE *f = il__learn_open(L, arm ? "memory-map-variant.svg" : "memory-map-baseline.svg", &st);
    if (f) {
      fputs(r.svg, f);
      fclose(f);
      L->map_written[arm] = true;
    }
  }
  if (arm == 1 && !r.big_ok) {
    il__learn_fact(L, "big_error", "%s", r.big_error);
    il__learn_fact_yesno(L, "by_fragmentation", r.big_fragmentation);
  }
  char log[2400];
  snprintf(log, sizeof log, "%s/logs/run-%03d-%s.log", x->dir, run, arm ? "variant" : "baseline");
  FILE *f = fopen(log, "w");
  if (f) {
    fprintf(f, "pattern %s on %s: reserved %zu, allocated %zu, free %zu, largest free %zu, fragmentation %.4f; long request "
               "%zu: %s%s%s\n",
            il_allocpat_name(arm ? IL_ALLOCPAT_FRAGMENTING : IL_ALLOCPAT_STEADY), L->device, r.reserved, r.allocated,
            r.free_bytes, r.largest_free, r.fragmentation, r.big, r.big_ok ? "fits" : "out of memory: ", r.big_error, "");
    fclose(f);
  }
  il__learn_file(L, "logs/");
  il__learn_log(L, "run %d %s: fragmentation %.3f, long request %s", run, arm ? "variant" : "baseline", r.fragmentation,
                r.big_ok ? "fits" : "fails");
  il_allocpat_result_free(&r);
  il__learn_sample_line(L, arm, run, vals);
  return IL_OK;
}

static il_status il__pattern_after(il__learn *L) {
  const char *e = il__learn_fact_get(L, "big_error");
  if (e) il__learn_say(L, "   %s", e);
  return IL_OK;
}

static il_status il__pattern_rollback(il__learn *L) {
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, "rollback.sh", &st);
  if (!f) return st;
  fprintf(f, "#!/bin/sh\n# Rollback: the baseline's allocation pattern again (baseline.cmd).\nexec sh -c \"$(cat '%s/baseline.cmd')\"\n",
          L->x->dir);
  if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s/rollback.sh: write failed", L->x->dir);
  char path[2400];
  snprintf(path, sizeof path, "%s/rollback.sh", L->x->dir);
  chmod(path, 0755);
  snprintf(L->rollback, sizeof L->rollback, "sh %.2000s   (= %.2000s)", path, L->x->cmd_a);
  return IL_OK;
}

static const il__learn_kind_ops il__pattern_ops = {il__pattern_define, NULL, il__pattern_before, il__pattern_change,
                                                   il__pattern_run, il__pattern_after, il__pattern_rollback};

const il__learn_kind_ops *il__learn_ops_pattern(void) { return &il__pattern_ops; }

il_status il_learn_pattern_report(const char *device, const char *pattern, bool json, FILE *out) {
  il_allocpat_kind k;
  if (!il_allocpat_parse(pattern, &k)) return il_error(IL_ERR_INVALID_ARG, "--pattern %s: steady or fragmenting", pattern);
  char dev[64];
  size_t cap = 0;
  il__pattern_device(device && *device ? device : IL_LEARN_DEFAULT_DEVICE, dev, sizeof dev, &cap);
  il_allocpat_result r;
  IL_TRY(il_allocpat_run(dev, cap, k, &r));
  if (json) {
    il_jsonw w;
    il_jsonw_init(&w, out, true);
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "pattern", pattern);
    il_jsonw_kstr(&w, "device", dev);
    il_jsonw_kint(&w, "capacity_bytes", (long long)r.capacity);
    il_jsonw_kint(&w, "reserved_bytes", (long long)r.reserved);
    il_jsonw_kint(&w, "allocated_bytes", (long long)r.allocated);
    il_jsonw_kint(&w, "free_bytes", (long long)r.free_bytes);
    il_jsonw_kint(&w, "largest_free_bytes", (long long)r.largest_free);
    il_jsonw_knum(&w, "fragmentation", r.fragmentation);
    il_jsonw_kint(&w, "long_request_bytes", (long long)r.big);
    il_jsonw_kbool(&w, "long_request_fits", r.big_ok);
    il_jsonw_kstr(&w, "long_request_error", r.big_ok ? NULL : r.big_error);
    il_jsonw_obj_end(&w);
    il_status st = il_jsonw_finish(&w);
    il_allocpat_result_free(&r);
    return st;
  }
  fprintf(out, "pattern %s on %s (%zu MiB%s): %d KV buffers of %zu MiB, %d freed\n", pattern, dev, r.capacity >> 20,
          cap ? ", capped" : "", r.n_blocks, r.block >> 20, r.n_freed);
  fprintf(out, "reserved %.1f MiB, allocated %.1f MiB, free %.1f MiB, largest free block %.1f MiB, fragmentation %.1f%%\n",
          r.reserved / 1048576.0, r.allocated / 1048576.0, r.free_bytes / 1048576.0, r.largest_free / 1048576.0,
          r.fragmentation * 100);
  fprintf(out, "long request of %.1f MiB: %s%s\n", r.big / 1048576.0, r.big_ok ? "fits" : "out of memory: ", r.big_ok ? "" : r.big_error);
  il_allocpat_result_free(&r);
  return IL_OK;
}
