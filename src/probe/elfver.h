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
 * ".patch": 535.54.03, 570.144) in the .rodata section, where a real libcuda keeps it beside a
 * table of older driver versions (what the table is for was not found out):
 *   bare, once:        "535.261.03"
 *   inside names:      "libnvidia-pkcs11.so.535.261.03", "libnvidia-pkcs11-openssl3.so.535.261.03",
 *                      ".../nvidia-application-profiles-535.261.03-rc:..." (a ':'-separated path list)
 *   the table, bare:   450.36.05 450.51.02 470.57.01 535.54.02 535.86.06 twice each,
 *                      450.79 450.111 510.48 515.39 525.65 once each
 * [observed: Debian 12's libcuda.so.535.261.03 (non-free libcuda1).] So the
 * rule is: the highest version seen inside a name (a library's ".so.VERSION" suffix, or
 * "-VERSION-rc"); when no name carries one, the highest bare one, because a library is not
 * older than the versions its table names. Versions compare numerically group by group
 * (535.261.03 > 535.86.06). The former rule, the most frequent bare string, read the table's
 * 450.36.05 from that file, and '535.54.02' (among ten distinct strings) from the 580.159.04
 * libcuda.so of a GPU machine (test_doctor_elf's real-library case). [inferred:
 * that the 580 file carries 580.159.04 in a name, or at least as its highest bare version;
 * it was not re-read.] The file-name suffix, when there is one, stays the version probe/loader
 * trusts first; this rule is for a bare libcuda.so.1.
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
  int n_versions;       /* distinct version-shaped strings seen in .rodata, bare or inside names */
} il_elfver_info;

/* Reads path. IL_OK with *out filled (version may be ""); IL_ERR_NOT_FOUND / IL_ERR_IO when
 * the file cannot be opened or read; IL_ERR_FORMAT, naming the file and the offset, when it is
 * not a well-formed 64-bit little-endian ELF. The message is in il_error_detail(). Reads at
 * most the headers, the dynamic section and .rodata (up to 256 MiB), in 1 MiB pieces. */
il_status il_elfver_read(const char *path, il_elfver_info *out);

/* Scans buf[0..n) for NUL-delimited driver-version strings, bare or inside names (the rule
 * above); exposed for the tests. Writes the library's own version by that rule into out ("" when
 * there is none) and returns the number of distinct versions seen (at most 64 are kept). */
int il_elfver_scan(const char *buf, size_t n, char *out, size_t nout);

#endif
