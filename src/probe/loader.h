/* probe/loader: which libcuda.so.1 / libnvidia-ml.so.1 the dynamic loader picks, found without
 * loading anything; the cuda.loader and wsl.driver checks. See loader.c.
 * Not for: loading the libraries (probe/nvml, probe/cudadrv).
 */
#ifndef IL_PROBE_LOADER_H
#define IL_PROBE_LOADER_H

#include <stdbool.h>

typedef struct il_doctor il_doctor;

/* A file the dynamic loader would find for a soname ("libcuda.so.1"), in search order. */
typedef struct {
  char path[512];       /* sysroot-relative: "/opt/old/lib/libcuda.so.1" */
  char dir[256];        /* its directory */
  char target[512];     /* where its symlinks lead: "/opt/old/lib/libcuda.so.470.82.01" */
  char version[64];     /* from the target's file name, else from its ELF data (version_elf), "" unknown */
  bool version_elf;     /* version read from the library's .rodata (probe/elfver), not its name */
  char soname[64];      /* DT_SONAME when the ELF was read, "" otherwise */
  char elf_note[240];   /* why the ELF gave no version ("FILE: offset N: ..."), "" when it did or was not read */
  char origin[160];     /* "LD_LIBRARY_PATH", "conda environment (CONDA_PREFIX)", "ld.so cache (FILE)", "system directory" */
  bool stub, compat;    /* in a toolkit stubs/ or a forward-compatibility compat/ directory */
} il_lib_candidate;

/* Files the loader finds for soname, in its search order; returns how many (at most max). */
int il__loader_search(const il_doctor *dr, const char *soname, il_lib_candidate *out, int max);
/* cuda.loader: the libcuda the loader picks against the kernel module. */
void il__loader_check(il_doctor *dr);
/* wsl.driver: on WSL2, a Linux driver library installed inside shadows the Windows driver's. */
void il__loader_check_wsl(il_doctor *dr);

#endif
