/* engine/oom: the out-of-memory report, better than "CUDA out of memory".
 *
 * When a device allocation fails, the engine fills an il_oom_report: what was requested, for
 * which category and buffer, on which device; total, reserved, free and largest free block;
 * the breakdown by category; whether fragmentation (free bytes enough, no block large enough)
 * rather than capacity is the cause; what this run needs in all (weights, KV, activations,
 * attention workspace, fixed device overhead), computed from the model's real buffer sizes;
 * and the single option change that makes it fit with the least loss, with its predicted
 * need, plus the next alternatives. The text form is the error detail every command prints;
 * the JSON form is for --json and for `doctor --explain`, which recognises the text.
 * Not for: catching failures (memory/ records them), or planning ahead (lab/plan).
 */
#ifndef IL_ENGINE_OOM_H
#define IL_ENGINE_OOM_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/config.h"
#include "memory/mem.h"

#define IL_OOM_MAX_FIXES 4

typedef struct {
  char option[32];       /* config key: "batch", "ctx", "wtype", "n-seq" */
  char value[32];        /* its new value */
  size_t predicted;      /* bytes the run would need with it */
  char effect[96];       /* what is lost: "prompt processing in smaller passes" */
} il_oom_fix;

/* What a run needs on its device, by the engine's own sizing code. */
typedef struct {
  size_t weights, kv, activations, workspace, fixed;
} il_oom_need;

typedef struct {
  il_mem_oom failure;    /* the allocation that failed (memory/) */
  char device[64];
  size_t capacity;       /* the device's budget (total) */
  il_oom_need need;      /* this configuration */
  size_t need_total;
  bool fragmentation;    /* enough free bytes in all, no single block large enough */
  il_oom_fix fixes[IL_OOM_MAX_FIXES]; /* best first; n_fixes may be 0 (nothing fits) */
  int n_fixes;
} il_oom_report;

/* Sum of a need. */
size_t il_oom_need_total(const il_oom_need *n);
/* Writes the text report (several lines, no trailing newline) into buf. */
void il_oom_report_text(const il_oom_report *r, char *buf, size_t n);
/* Writes the report as one JSON object. */
void il_oom_report_json(const il_oom_report *r, FILE *f);
/* The last report the engine made on this thread; false when none. */
bool il_oom_report_last(il_oom_report *out);
void il__oom_report_set(const il_oom_report *r);

#endif
