/* lab/learn: `inferlab learn`: the course's 32 concepts as lessons that run on this machine.
 *
 * Each concept has a text in our own words (docs/learn/LANG/NN-name.md, embedded at build
 * time: what it is, where it sits in the stack, the typical failure, how to check it, and the
 * quick check's three questions with answer templates) and a lab that follows one method in
 * five steps:
 *   1. the state before: the doctor's facts about this machine that matter for the concept,
 *      and the baseline measured once (device memory by category, utilization, dtype, batch);
 *   2. the one change the concept is about (an engine option, a repaired fixture machine, an
 *      allocation pattern);
 *   3. the same measurement again, baseline and variant interleaved A B A B ... through
 *      lab/experiment, each metric's ratio with its bootstrap confidence interval, and whether
 *      the effect the concept predicts was seen;
 *   4. the evidence kept in a folder OUT/NN-name/<UTC time>-<change>/: both configurations as
 *      files (baseline.conf and variant.conf, or the two machine trees and their commands),
 *      samples.jsonl (raw measurements), summary.txt/.json, env.json, log.txt (timestamped),
 *      rollback.sh, learn.json (this lesson's result) and lesson.md (the text shown);
 *   5. the quick check: three questions whose answers are filled in from this run's figures.
 * Lab kinds: engine (lab/bench runs of a baseline and a variant config), machine (the doctor
 * on lab/machine fixture trees, for the container and driver concepts that cannot be changed
 * live), pattern (lab/allocpat on the device's caching allocator), quality (lab/eval: KL and
 * top-1 agreement against the f32 model) and numerics (an activation overflow, counted).
 * Not for: argument parsing and signals (cli/learn).
 */
#ifndef IL_LAB_LEARN_H
#define IL_LAB_LEARN_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"

typedef enum { IL_LEARN_EN, IL_LEARN_DE, IL_LEARN_LANGS } il_learn_lang;

typedef enum {
  IL_LEARN_ENGINE,
  IL_LEARN_MACHINE,
  IL_LEARN_PATTERN,
  IL_LEARN_QUALITY,
  IL_LEARN_NUMERICS,
} il_learn_kind;

typedef struct {
  int number;         /* 1..32, the course's order */
  const char *slug;   /* "attention-slicing": the text files' name after the number */
  il_learn_kind kind;
  const char *lever;  /* what the lab changes, as the list shows it: "--attn naive -> sliced" */
} il_learn_concept;

/* The sections of one concept's text in one language (pointers into an owned copy). */
typedef struct {
  char *buf;          /* owned */
  const char *name;   /* the title */
  const char *line;   /* the one-line summary */
  const char *what, *where, *failure, *check;
  int n_quiz;
  const char *question[3], *answer[3]; /* templates: {a:KEY} {b:KEY} {r:KEY} {ci:KEY} {v:KEY} {dir:KEY} {f:NAME} */
} il_learn_text;

int il_learn_count(void);
const il_learn_concept *il_learn_at(int i);

/* The concept a query names: its number ("17"), its name in either language or its file name
 * ("attention-slicing", "Attention slicing", "Attention in Scheiben"), case, spaces,
 * '-'/'_' and umlaut spellings (ä = ae) ignored, or a prefix of one of those that only one
 * concept has. IL_ERR_NOT_FOUND naming the query; IL_ERR_INVALID_ARG for an ambiguous prefix,
 * listing the concepts it matches. */
il_status il_learn_find(const char *query, const il_learn_concept **out);

/* Parses a concept's text in lang. IL_ERR_FORMAT naming the file and the missing or misplaced
 * section when it is incomplete, IL_ERR_NOT_FOUND when the file is not embedded. Free with
 * il_learn_text_free. */
il_status il_learn_text_get(const il_learn_concept *c, il_learn_lang lang, il_learn_text *out);
void il_learn_text_free(il_learn_text *t);
/* The same check over an arbitrary text (file names the text in messages): every section in
 * order with its language's heading, and exactly three questions with answers. */
il_status il_learn_text_parse(const char *text, il_learn_lang lang, const char *file, il_learn_text *out);

/* The language LC_ALL, LC_MESSAGES or LANG (first set one) asks for: de for "de...", else en. */
il_learn_lang il_learn_lang_from_env(void);
/* "en"/"de" -> lang; false for anything else. */
bool il_learn_lang_parse(const char *s, il_learn_lang *out);

typedef struct {
  const char *device;      /* "sim:32MiB" (the default), "cpu", "sim:SIZE", "cuda[:N]" */
  il_learn_lang lang;
  bool quick;              /* seconds per lesson: small workloads, 3 runs per arm, no warm-up */
  int repeat;              /* runs per arm; 0 = 3 (quick) or 5 */
  bool json;               /* no text on out: the caller prints the JSON */
  bool ask;                /* wait for the learner's answer before each quick-check answer */
  FILE *in;                /* where answers are read (ask) */
  const char *out_dir;     /* parent of the evidence folders; NULL = "runs/learn" */
  FILE *progress;          /* one status line per run (a terminal), or NULL */
  char *const *environ_list;
  const char *exe;         /* this inferlab binary, for the commands written into the evidence */
  const char *command_line;
  volatile sig_atomic_t *stop; /* set by Ctrl-C: the lesson stops after the current run, keeping what was measured */
} il_learn_options;

/* Defaults: sim:32MiB, English, full runs, evidence under runs/learn. Can't fail. */
void il_learn_options_default(il_learn_options *o);
#define IL_LEARN_DEFAULT_DEVICE "sim:32MiB"

typedef enum { IL_LEARN_DONE, IL_LEARN_SKIPPED, IL_LEARN_INTERRUPTED, IL_LEARN_FAILED } il_learn_outcome;

typedef struct {
  il_learn_outcome outcome;
  bool has_expectation, expectation_met;
  char reason[512];   /* why skipped or failed */
  char dir[2048];     /* the evidence folder ("" when none was made) */
  char *json;         /* the lesson's JSON document (owned; free with il_learn_result_free) */
} il_learn_result;

/* Runs concept c's lesson: prints the text and the five steps to out (unless o->json), keeps
 * the evidence, fills r (its JSON is also written to DIR/learn.json). A lab that cannot run on
 * this device (offloading on cpu) is SKIPPED with the reason, not an error. Errors:
 * IL_ERR_OUTPUT when the evidence folder cannot be written, IL_ERR_UNSUPPORTED for a device this
 * build lacks, IL_ERR_INVALID_ARG for a bad device spec, IL_ERR_FORMAT for an incomplete text;
 * a failing measurement is recorded (FAILED with the reason) and returned as its status. */
il_status il_learn_run(const il_learn_concept *c, const il_learn_options *o, FILE *out, il_learn_result *r);
void il_learn_result_free(il_learn_result *r);

/* Prints the list: number, name (in lang), one line and the lever, one concept per line. */
il_status il_learn_list(il_learn_lang lang, FILE *out);
/* The list as JSON: [{number, slug, name, line, lever, kind}]. */
il_status il_learn_list_json(il_learn_lang lang, FILE *out);

/* `learn --machine DIR`: the doctor's report on a lesson's machine tree (text or JSON) on out;
 * *exit_code gets the doctor's verdict (0, 1, 2). Errors of il_machine_doctor. */
il_status il_learn_machine_report(const char *dir, bool json, FILE *out, int *exit_code);
/* `learn vram-fragmentation --pattern P`: the pattern's figures on device (text or JSON). */
il_status il_learn_pattern_report(const char *device, const char *pattern, bool json, FILE *out);

#endif
