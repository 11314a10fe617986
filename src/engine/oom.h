/* engine/oom: the out-of-memory report, better than "CUDA out of memory".
 *
 * When a device allocation fails, the engine fills an il_oom_report: what was requested, for
 * which category and buffer, on which device; total, reserved, free and largest free block;
 * the breakdown by category; whether fragmentation (free bytes enough, no block large enough)
 * rather than capacity is the cause; what this run needs in all (weights, KV, activations,
 * attention workspace, fixed device overhead), computed from the model's real buffer sizes
 * at a context it names;
 * and the single option change that makes it fit with the least loss, with its predicted
 * need, plus the next alternatives. The text form is the error detail every command prints;
 * the JSON form is for --json and for `doctor --explain`, which recognises the text.
 * Not for: catching failures (memory/ records them), or planning ahead (lab/plan).
 */
#ifndef IL_ENGINE_OOM_H
#define IL_ENGINE_OOM_H

#include <stdbool.h>
#include <stdio.h>

#include "backend/registry.h"
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

/* Where the context of the report's figures comes from. */
typedef enum {
  IL_OOM_CTX_DEFAULT, /* the engine's default: the model's context, sized to the device */
  IL_OOM_CTX_SIZED,   /* sized by the command for its run (run: prompt + tokens to generate) */
  IL_OOM_CTX_GIVEN,   /* --ctx */
} il_oom_ctx_from;

typedef struct {
  il_mem_oom failure;    /* the allocation that failed (memory/) */
  char device[64];
  size_t capacity;       /* the device's budget (total) */
  il_oom_need need;      /* this configuration */
  size_t need_total;
  int32_t n_ctx;         /* the context need and fixes are computed at */
  il_oom_ctx_from ctx_from;
  bool fragmentation;    /* the run fits the device in all, but no single free block is large
                            enough for the request (a run larger than the device is capacity) */
  il_oom_fix fixes[IL_OOM_MAX_FIXES]; /* best first; n_fixes may be 0 (nothing fits) */
  int n_fixes;
  /* a --device list (n_devs > 1): device, capacity and need above are those of the device that
   * ran out, dev its index; each device's layers, size and need at the failure */
  int n_devs, dev;
  struct {
    char name[64];
    int32_t layers;
    size_t capacity, need;
  } devs[IL_BACKEND_LIST_MAX];
} il_oom_report;

/* Applies a fix of r (option and value, as r->fixes[i] or a value a caller walked down from
 * it) to c. When r's context was the engine's default, c's context is pinned to r->n_ctx, the
 * context the fix was predicted at (opened again, the engine would size the default anew for
 * the new placement, and the fix would not be the one predicted). The one way --fit and plan
 * apply a fix. IL_ERR_INVALID_ARG from il_config_set. */
il_status il_oom_fix_apply(const il_oom_report *r, const char *option, const char *value, il_config *c);
/* "given with --ctx", "sized for the prompt and the tokens to generate", "the model's default context, ...". */
const char *il_oom_ctx_from_name(il_oom_ctx_from f);
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
