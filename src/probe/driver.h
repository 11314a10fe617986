/* probe/driver: the checks that judge what the driver libraries report (NVML and the CUDA
 * driver API, as snapshotted by probe/doctor) against the kernel module, the GPUs and this
 * build: driver.nvml, driver.version_match, cuda.init, cuda.compat, runtime.build,
 * runtime.arch, runtime.features, runtime.nvcc, visibility.cuda, visibility.nvidia, gpu.mig,
 * gpu.memory and gpu.health; and the table of minimum drivers per CUDA version. See driver.c.
 * Not for: loading the libraries (probe/nvml, probe/cudadrv), which libcuda the loader picks
 * (probe/loader), the machine below the driver (probe/platform).
 */
#ifndef IL_PROBE_DRIVER_H
#define IL_PROBE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct il_doctor il_doctor;

/* Minimum Linux driver for a CUDA version "12.4": writes the full-feature ("toolkit driver")
 * minimum and the minor-version-compatibility floor of that major. Returns false for a
 * version the table does not know (e.g. "12.7", which NVIDIA never released). */
bool il_driver_minimum(const char *cuda_version, char *full, size_t nfull, char *mvc, size_t nmvc);

void il__driver_check_nvml(il_doctor *dr);
void il__driver_check_version_match(il_doctor *dr);
void il__driver_check_visibility(il_doctor *dr);
void il__driver_check_cuda_init(il_doctor *dr);
void il__driver_check_cuda_compat(il_doctor *dr);
void il__driver_check_runtime_build(il_doctor *dr);
void il__driver_check_runtime_arch(il_doctor *dr);
void il__driver_check_runtime_features(il_doctor *dr);
void il__driver_check_nvcc(il_doctor *dr);
void il__driver_check_gpus(il_doctor *dr);

#endif
