/* probe/elfver: the driver version and SONAME of an NVIDIA user-space library (libcuda.so.*,
 * libnvidia-ml.so.*), read from the ELF file itself without loading it, so a
 * "driver/library version mismatch" is found even when the file name carries no version
 * (a bare libcuda.so.1 copied into an image or a conda env) and NVML will not load.
 *
 * Where the version lives: the SONAME is always the unversioned "libcuda.so.1" (the driver
 * installs libcuda.so.VERSION and a libcuda.so.1 link to it; NVIDIA's own container toolkit
 * takes the version from that file suffix: https://github.com/NVIDIA/nvidia-container-toolkit/pull/1451).
 * The version string itself is inside the library: every user-space component hands its
 * version to the kernel module, which refuses a different one with "NVRM: API mismatch: the
 * client has the version 535.54.03, but this kernel module has the version 530.30.02"
 * (https://github.com/stackhpc/ansible-slurm-appliance/issues/287). It is read here as a
 * NUL-delimited string of the driver-version shape (3-digit major, ".minor", optional
 * ".patch": 535.54.03, 570.144) in the .rodata section, the most frequent such string
 * winning. [inferred layout, and wrong on the one real library read so far: the 580.159.04
 * libcuda.so of an H200 machine (2026-12-01, test_doctor_elf's real-library case) holds ten
 * distinct version-shaped strings in .rodata, the most frequent being '535.54.02', so this rule
 * returned that. Whether 580.159.04 is among them was not seen (no second GPU run was lent);
 * until it is, the file-name suffix is the trustworthy version of a real driver.]
 *
 * Byte layout read (ELF-64, little-endian only; others are refused with their class):
 *   Ehdr (64 bytes): e_ident[16] ("\x7fELF", class 2 = 64-bit, data 1 = LSB), ...,
 *   e_shoff u64 @40, e_shentsize u16 @58 (must be 64), e_shnum u16 @60, e_shstrndx u16 @62.
 *   Shdr (64 bytes each at e_shoff): sh_name u32 @0, sh_type u32 @4, sh_offset u64 @24,
 *   sh_size u64 @32, sh_link u32 @40. Section names index the e_shstrndx string table.
 *   .dynamic (type 6): 16-byte entries {i64 d_tag; u64 d_val}; DT_SONAME (14) is an offset
 *   into the string table named by the section's sh_link; DT_NULL (0) ends the list.
 * Every offset and size is checked against the file size before use; a bad file gives
 * IL_ERR_FORMAT with "FILE: offset N: what" and never a read outside it.
 * Not for: loading the library (core/dl, probe/cudadrv) or any other ELF question.
 */
#ifndef IL_PROBE_ELFVER_H
#define IL_PROBE_ELFVER_H

#include <stddef.h>

#include "core/status.h"

typedef struct {
  char soname[128];     /* DT_SONAME, "" when the library has none */
  char version[32];     /* "535.54.03", "" when no string of that shape was found */
  int n_versions;       /* distinct version-shaped strings seen in .rodata */
} il_elfver_info;

/* Reads path. IL_OK with *out filled (version may be ""); IL_ERR_NOT_FOUND / IL_ERR_IO when
 * the file cannot be opened or read; IL_ERR_FORMAT, naming the file and the offset, when it is
 * not a well-formed 64-bit little-endian ELF. The message is in il_error_detail(). Reads at
 * most the headers, the dynamic section and .rodata (up to 256 MiB), in 1 MiB pieces. */
il_status il_elfver_read(const char *path, il_elfver_info *out);

/* Scans buf[0..n) for NUL-delimited driver-version strings (the rule above); exposed for the
 * tests. Writes the most frequent into out and returns the number of distinct ones. */
int il_elfver_scan(const char *buf, size_t n, char *out, size_t nout);

#endif
