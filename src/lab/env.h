/* lab/env: the environment a measurement ran in, recorded with every result.
 *
 * A short description (CPU model, SIMD level detected and used, logical CPUs, RAM, kernel,
 * build type and compiler, inferlab version, GPU or why there is none, UTC time, hostname)
 * for report headers and JSON documents, and the full environment snapshot for an
 * experiment's evidence folder: the `doctor --json` document (probe/checks + probe/report),
 * which records drivers, devices, containers and host facts the same way doctor prints them.
 * Not for: judging the environment (doctor does that).
 */
#ifndef IL_LAB_ENV_H
#define IL_LAB_ENV_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"
#include "core/jsonw.h"

typedef struct {
  char time_utc[32];      /* "2026-01-15T10:30:00Z" */
  char hostname[64];
  char version[32];       /* inferlab version */
  char build[128];        /* "Release, GNU 12.2.0" */
  char cpu[128];
  char simd_flags[160];
  char isa_detected[16], isa_used[16], isa_compiled[64];
  int logical_cpus;
  long long ram_bytes;    /* -1 unknown */
  char kernel[128];
  char gpu[700];          /* "NVIDIA H100 80GB HBM3 x1, driver 550.54" or "no GPU (reason)" */
} il_env;

/* Fills e from this machine (probe/host on the real root, NVML when it loads). Can't fail:
 * unknown fields stay empty. */
void il_env_collect(il_env *e, const char *nvml_lib, bool no_gpu);
/* Writes e as one JSON object value (after a key or in an array). */
void il_env_json(const il_env *e, il_jsonw *w);
/* Writes the doctor's JSON document for this machine to f (no bandwidth measurement, no exec),
 * from a forked child process, so nothing doctor loads stays resident in this one.
 * IL_ERR_OOM / IL_ERR_IO. */
il_status il_env_doctor_json(FILE *f, char *const *environ_list);
/* "2026-01-15T103000Z": a timestamp that sorts and is safe in file names. */
void il_env_stamp(char *buf, size_t n);

#endif
