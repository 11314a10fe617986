/* lab/plan: predict a run's device memory before it happens, and the change that makes it fit.
 *
 * The prediction is a dry run of the engine itself: il_engine_open on the same device with
 * ",dry" appended (backend/sim): every buffer the run would allocate goes through the same
 * sizing code and the same caching allocator, which hands out addresses with no memory behind
 * them; built-in models are made as shapes only. Nothing is a second formula. Decoding
 * allocates nothing on the device after open, so the state after open is the run's peak.
 *
 * Two figures come out, because a caching allocator reserves more than it hands out when it
 * has room (segments of 2 or 20 MiB):
 *   peak_bytes      the smallest device (sim:peak_bytes) on which this exact configuration
 *                   opens and runs, fixed overhead included: found by bisection over dry runs,
 *                   so a device 3% smaller fails;
 *   reserved_bytes  what the allocator reserves on the device given (at least peak_bytes).
 * Per category: bytes allocated at the peak. When the run does not fit the device given, the
 * engine's own out-of-memory report supplies candidate single changes, and each is checked by
 * a dry run of its own (its measured peak is what is printed), best first.
 * Not for: CUDA until its backend has a dry mode (plan says so), the host (cpu) device.
 */
#ifndef IL_LAB_PLAN_H
#define IL_LAB_PLAN_H

#include <stdbool.h>
#include <stdio.h>

#include "backend/registry.h"
#include "engine/config.h"
#include "engine/oom.h"
#include "memory/mem.h"

typedef struct {
  char option[32], value[32];
  size_t peak_bytes; /* measured by a dry run with the change applied */
  char effect[96];
} il_plan_fix;

/* One device of a --device list. */
typedef struct {
  char device[128];
  size_t capacity;         /* its size */
  size_t fixed_bytes;      /* its context overhead (ctx=) */
  size_t peak_bytes;       /* the smallest size of this device on which the run opens (the others large) */
  size_t reserved_bytes;   /* what its allocator reserves on the devices given (0 when it does not fit) */
  size_t space_peak_bytes; /* what its memory space counts at most on a device of peak_bytes: the
                              blocks handed out and the fixed overhead, without the unused tail of
                              the allocator's last segment (so at most peak_bytes) */
  size_t by_cat[IL_MEM_CATEGORY_COUNT]; /* allocated at the peak, fixed overhead under other */
  int n_layers;            /* layers on it */
  double margin;           /* (capacity - peak) / capacity */
  bool fits;
} il_plan_dev;

typedef struct {
  char device[256];
  size_t capacity;         /* the device's size (a list: the sum of its devices') */
  size_t fixed_bytes;      /* context overhead (ctx=) */
  size_t peak_bytes;       /* the smallest device that runs it */
  size_t reserved_bytes;   /* what the allocator reserves on this device (0 when it does not fit) */
  size_t by_cat[IL_MEM_CATEGORY_COUNT]; /* allocated at the peak */
  double margin;           /* (capacity - peak) / capacity; negative when it does not fit */
  bool fits;
  int n_layers, n_dev_layers; /* placement (after --gpu-layers auto) */
  int n_ctx, n_batch, n_seq;
  il_oom_ctx_from ctx_from; /* given with --ctx, or the engine's default (sized to the device) */
  int dry_runs;            /* engine opens it took */
  il_plan_fix fixes[IL_OOM_MAX_FIXES]; /* a list: peak_bytes is that of the device that ran out */
  int n_fixes;
  /* a --device list (n_devs > 1): each device, in order; the figures above are sums over them
   * (margin: the smallest device's; fits: every device fits) */
  int n_devs;
  int tp;                  /* --tp: every layer split across the devices (their layers: all of them) */
  il_plan_dev devs[IL_BACKEND_LIST_MAX];
  char split[64];          /* the layers on each device, as a --split value ("3,1") */
  int ran_out;             /* the device that ran out first on the sizes given (-1: none) */
} il_plan;

/* Plans cfg (its device must be sim:..., cuda[:N], or a list of them: then per device, each
 * device's peak bisected with the others large, the split and context pinned). IL_ERR_UNSUPPORTED for other devices, the errors of
 * il_engine_open otherwise (a malformed model names the file), never IL_ERR_OOM: not fitting
 * is a result (fits = false) with fixes. */
il_status il_plan_run(const il_config *cfg, il_plan *out);
/* Text report and JSON ({"device", "capacity_bytes", "peak_bytes", "reserved_bytes", "fits",
 * "margin", "by_category", "fixes", ...}). */
void il_plan_print(const il_plan *p, FILE *f);
void il_plan_json(const il_plan *p, FILE *f);

#endif
