/* lab/machine: small fixture machines for the lessons the doctor teaches (`inferlab learn`).
 *
 * The container and driver concepts (toolkit, runtimes, device nodes, passthrough,
 * NVIDIA_VISIBLE_DEVICES, driver, CUDA toolkit, compute capability) cannot be broken and
 * fixed live on the learner's machine, so each lesson builds a machine tree in two states, the
 * failure and the fix, which differ in what one repair changes, and runs the doctor on both.
 * A tree is laid out like / (proc/, sys/, dev/, etc/, usr/) with just the files the doctor
 * reads through --sysroot, plus a `.learn/` folder the doctor never reads that holds what is not
 * a file on a real machine:
 *   .learn/environ    KEY=VALUE lines: the environment the doctor is given
 *   .learn/build      have_cuda, cuda_version, archs: the inferlab build being judged
 *   .learn/identity   uid, gid, groups: the user whose device-node access is judged
 *   .learn/gpu        the scripted GPU world of the simulated driver libraries (tests/fakes:
 *                     NVML and libcuda test doubles that answer from this key=value file)
 * The simulated libraries are copied into the tree under the versioned names a real install
 * has (usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 with its libnvidia-ml.so.1 link).
 * They are found next to the running binary (fakes/ in a build tree, lib/inferlab/learn/ in an
 * installed one) or through INFERLAB_FAKE_NVML_LIB / INFERLAB_FAKE_CUDA_LIB.
 * Device nodes are regular files with the wanted mode, which the doctor accepts under a sysroot.
 * Not for: judging anything (the doctor does), or the engine lessons (lab/learn).
 */
#ifndef IL_LAB_MACHINE_H
#define IL_LAB_MACHINE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"
#include "probe/doctor.h"

/* One lesson's machine: its name, the doctor check that judges it, and the repair. */
typedef struct {
  const char *name;  /* "default-runtime" */
  const char *check; /* "container.docker" */
  const char *fix;   /* the repair in a few words, as a command or an edit ("default-runtime": "nvidia") */
} il_machine_scenario;

/* The scenario named `name`, or NULL. */
const il_machine_scenario *il_machine_find(const char *name);
/* Scenario i (0 <= i < il_machine_count()). */
const il_machine_scenario *il_machine_at(int i);
int il_machine_count(void);

/* Writes the machine of scenario `name` in its broken (fixed = false) or repaired state into
 * the directory dir (created; it must not exist yet or be empty). IL_ERR_NOT_FOUND for an
 * unknown scenario or when the simulated driver libraries cannot be found (the message names
 * the places searched), IL_ERR_OUTPUT naming the path that could not be written. */
il_status il_machine_build(const char *name, bool fixed, const char *dir);

/* The doctor's report on a machine tree, and the environment it was given (owned here). */
typedef struct {
  il_doctor *dr;
  char *env_text; /* the .learn/environ bytes */
  char **env;     /* NULL-terminated pointers into env_text */
} il_machine_report;

/* Runs the doctor on the tree at dir as its .learn files describe (sysroot dir, the
 * simulated libraries inside it, no bandwidth measurement, nothing executed). On success
 * out->dr is the report; free everything with il_machine_report_free. IL_ERR_NOT_FOUND when
 * dir is not a machine tree, IL_ERR_FORMAT naming the .learn file and line that is malformed,
 * and il_doctor_run's errors. */
il_status il_machine_doctor(const char *dir, il_machine_report *out);
void il_machine_report_free(il_machine_report *r);

/* One difference between two trees, as a path relative to their roots. */
typedef struct {
  char path[512];
  char kind; /* 'M' different content, mode or link target; 'A' only in b; 'D' only in a */
} il_machine_change;

/* The differences that turn tree a into tree b (regular files by content and mode, symbolic
 * links by target, directories by presence), sorted by path, at most max of them (*n is the
 * total). IL_ERR_IO naming the path that could not be read. */
il_status il_machine_diff(const char *a, const char *b, il_machine_change *out, int max, int *n);
/* Writes an executable /bin/sh script at path that makes tree b equal to tree a again: each
 * changed file copied back with its mode, files only in b removed, files only in a restored.
 * IL_ERR_OUTPUT naming the path, IL_ERR_IO from the diff, IL_ERR_RANGE when the trees differ
 * in more than 256 places. */
il_status il_machine_rollback_script(const char *a, const char *b, const char *path);

/* Where the simulated library `which` ("nvml" or "cuda") is: the environment variable, then
 * fakes/ beside the running binary, then ../lib/inferlab/learn/ from it. False when none. */
bool il_machine_fake_lib(const char *which, char *buf, size_t n);

#endif
