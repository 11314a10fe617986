/* probe/nvml: dlopen'd NVML table and device snapshot. See nvml.h. */
#include "probe/nvml.h"

#include <stdio.h>
#include <string.h>

#include "memory/mem.h"
#include "probe/sysfs.h"

/* Resolves the first name the library exports. Versioned names come first: the unversioned
 * ones keep old struct layouts. */
#define IL__SYM(field, ...)                                                         \
  do {                                                                              \
    static const char *const il__n[] = {__VA_ARGS__, NULL};                         \
    *(void **)&nv->field = il_dl_sym_first(&nv->dl, il__n);                         \
  } while (0)

il_status il_nvml_open(il_nvml *nv, const char *path) {
  memset(nv, 0, sizeof *nv);
  il_sysfs_copy(nv->path, sizeof nv->path, path && *path ? path : "libnvidia-ml.so.1");
  if (!il_sysfs_loadable(nv->path, nv->error, sizeof nv->error)) return il_error(IL_ERR_NOT_FOUND, "%s", nv->error);
  if (il_dl_open(&nv->dl, nv->path) != IL_OK) {
    il_sysfs_copy(nv->error, sizeof nv->error, il_dl_error(&nv->dl));
    return il_error(IL_ERR_NOT_FOUND, "%s", nv->error);
  }
  IL__SYM(Init, "nvmlInit_v2", "nvmlInit");
  IL__SYM(Shutdown, "nvmlShutdown");
  IL__SYM(ErrorString, "nvmlErrorString");
  IL__SYM(SystemGetDriverVersion, "nvmlSystemGetDriverVersion");
  IL__SYM(SystemGetNVMLVersion, "nvmlSystemGetNVMLVersion");
  IL__SYM(SystemGetCudaDriverVersion, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion");
  IL__SYM(DeviceGetCount, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  IL__SYM(DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  IL__SYM(DeviceGetName, "nvmlDeviceGetName");
  IL__SYM(DeviceGetUUID, "nvmlDeviceGetUUID");
  IL__SYM(DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3");
  IL__SYM(DeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo");
  IL__SYM(DeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates");
  IL__SYM(DeviceGetTemperature, "nvmlDeviceGetTemperature");
  IL__SYM(DeviceGetPowerUsage, "nvmlDeviceGetPowerUsage");
  IL__SYM(DeviceGetEnforcedPowerLimit, "nvmlDeviceGetEnforcedPowerLimit");
  IL__SYM(DeviceGetClockInfo, "nvmlDeviceGetClockInfo");
  IL__SYM(DeviceGetCudaComputeCapability, "nvmlDeviceGetCudaComputeCapability");
  IL__SYM(DeviceGetMigMode, "nvmlDeviceGetMigMode");
  IL__SYM(DeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount");
  IL__SYM(DeviceGetMigDeviceHandleByIndex, "nvmlDeviceGetMigDeviceHandleByIndex");
  IL__SYM(DeviceGetTotalEccErrors, "nvmlDeviceGetTotalEccErrors");
  IL__SYM(DeviceGetRetiredPagesPendingStatus, "nvmlDeviceGetRetiredPagesPendingStatus");
  IL__SYM(DeviceGetComputeMode, "nvmlDeviceGetComputeMode");
  IL__SYM(DeviceGetPersistenceMode, "nvmlDeviceGetPersistenceMode");
  IL__SYM(DeviceGetRemappedRows, "nvmlDeviceGetRemappedRows");
  /* Only the _v3/_v2 variants use the 24-byte nvmlProcessInfo_v2_t layout of the table. */
  IL__SYM(DeviceGetComputeRunningProcesses, "nvmlDeviceGetComputeRunningProcesses_v3",
          "nvmlDeviceGetComputeRunningProcesses_v2");
  if (!nv->Init || !nv->Shutdown || !nv->DeviceGetCount || !nv->DeviceGetHandleByIndex) {
    snprintf(nv->error, sizeof nv->error, "%.400s: not an NVML library (nvmlInit_v2/nvmlDeviceGetCount missing)", nv->path);
    il_dl_close(&nv->dl);
    return il_error(IL_ERR_NOT_FOUND, "%s", nv->error);
  }
  il_dl_file_of(*(void **)&nv->Init, nv->loaded, sizeof nv->loaded);
  return IL_OK;
}

void il_nvml_close(il_nvml *nv) {
  il_dl_close(&nv->dl);
}

const char *il_nvml_code_name(int rc) {
  switch (rc) {
    case 0: return "NVML_SUCCESS";
    case 1: return "NVML_ERROR_UNINITIALIZED";
    case 2: return "NVML_ERROR_INVALID_ARGUMENT";
    case 3: return "NVML_ERROR_NOT_SUPPORTED";
    case 4: return "NVML_ERROR_NO_PERMISSION";
    case 5: return "NVML_ERROR_ALREADY_INITIALIZED";
    case 6: return "NVML_ERROR_NOT_FOUND";
    case 7: return "NVML_ERROR_INSUFFICIENT_SIZE";
    case 8: return "NVML_ERROR_INSUFFICIENT_POWER";
    case 9: return "NVML_ERROR_DRIVER_NOT_LOADED";
    case 10: return "NVML_ERROR_TIMEOUT";
    case 11: return "NVML_ERROR_IRQ_ISSUE";
    case 12: return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case 13: return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case 14: return "NVML_ERROR_CORRUPTED_INFOROM";
    case 15: return "NVML_ERROR_GPU_IS_LOST";
    case 16: return "NVML_ERROR_RESET_REQUIRED";
    case 17: return "NVML_ERROR_OPERATING_SYSTEM";
    case 18: return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case 19: return "NVML_ERROR_IN_USE";
    case 20: return "NVML_ERROR_MEMORY";
    case 21: return "NVML_ERROR_NO_DATA";
    case 999: return "NVML_ERROR_UNKNOWN";
    default: return "NVML_ERROR_(unlisted)";
  }
}

void il_nvml_sample_device(il_nvml *nv, il_nvml_handle h, il_nvml_device *d) {
  il_nvml_memory m;
  il_nvml_utilization u;
  unsigned v;
  if (nv->DeviceGetMemoryInfo && nv->DeviceGetMemoryInfo(h, &m) == 0) {
    d->mem_total = (long long)m.total;
    d->mem_used = (long long)m.used;
    d->mem_free = (long long)m.free;
  }
  if (nv->DeviceGetUtilizationRates && nv->DeviceGetUtilizationRates(h, &u) == 0) {
    d->util_gpu = (int)u.gpu;
    d->util_mem = (int)u.memory;
  }
  if (nv->DeviceGetTemperature && nv->DeviceGetTemperature(h, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) d->temp_c = (int)v;
  if (nv->DeviceGetPowerUsage && nv->DeviceGetPowerUsage(h, &v) == 0) d->power_mw = (int)v;
  if (nv->DeviceGetEnforcedPowerLimit && nv->DeviceGetEnforcedPowerLimit(h, &v) == 0) d->power_limit_mw = (int)v;
  if (nv->DeviceGetClockInfo) {
    /* nvmlClockType_t: GRAPHICS 0, SM 1, MEM 2 */
    if (nv->DeviceGetClockInfo(h, 0, &v) == 0) d->clock_gfx_mhz = (int)v;
    if (nv->DeviceGetClockInfo(h, 1, &v) == 0) d->clock_sm_mhz = (int)v;
    if (nv->DeviceGetClockInfo(h, 2, &v) == 0) d->clock_mem_mhz = (int)v;
  }
}

static void il__device_defaults(il_nvml_device *d, int index) {
  memset(d, 0, sizeof *d);
  d->index = index;
  d->mem_total = d->mem_used = d->mem_free = -1;
  d->util_gpu = d->util_mem = d->temp_c = -1;
  d->power_mw = d->power_limit_mw = -1;
  d->clock_sm_mhz = d->clock_mem_mhz = d->clock_gfx_mhz = -1;
  d->cc_major = d->cc_minor = -1;
  d->mig_current = d->mig_pending = d->mig_devices = -1;
  d->ecc_uncorrected_volatile = d->ecc_uncorrected_aggregate = -1;
  d->retired_pending = d->compute_mode = d->persistence = -1;
  d->remap_corr = d->remap_unc = d->remap_pending = d->remap_failure = -1;
}

static void il__read_device(il_nvml *nv, unsigned i, il_nvml_device *d) {
  il_nvml_handle h = NULL;
  il__device_defaults(d, (int)i);
  d->handle_rc = nv->DeviceGetHandleByIndex(i, &h);
  if (d->handle_rc != 0) return;
  if (nv->DeviceGetName) nv->DeviceGetName(h, d->name, sizeof d->name);
  if (nv->DeviceGetUUID) nv->DeviceGetUUID(h, d->uuid, sizeof d->uuid);
  il_nvml_pci_info pci;
  memset(&pci, 0, sizeof pci);
  if (nv->DeviceGetPciInfo && nv->DeviceGetPciInfo(h, &pci) == 0) {
    il_sysfs_copy(d->pci_bus_id, sizeof d->pci_bus_id, pci.bus_id);
    d->pci_device_id = pci.pci_device_id;
  }
  il_nvml_sample_device(nv, h, d);
  int a, b;
  if (nv->DeviceGetCudaComputeCapability && nv->DeviceGetCudaComputeCapability(h, &a, &b) == 0) {
    d->cc_major = a;
    d->cc_minor = b;
  }
  unsigned cur, pend;
  if (nv->DeviceGetMigMode && nv->DeviceGetMigMode(h, &cur, &pend) == 0) {
    d->mig_current = (int)cur;
    d->mig_pending = (int)pend;
    unsigned max = 0;
    if (cur == 1 && nv->DeviceGetMaxMigDeviceCount && nv->DeviceGetMigDeviceHandleByIndex &&
        nv->DeviceGetMaxMigDeviceCount(h, &max) == 0) {
      d->mig_devices = 0;
      for (unsigned k = 0; k < max; k++) {
        il_nvml_handle mh;
        if (nv->DeviceGetMigDeviceHandleByIndex(h, k, &mh) == 0) d->mig_devices++;
      }
    }
  }
  unsigned long long ecc;
  /* nvmlMemoryErrorType_t UNCORRECTED = 1; nvmlEccCounterType_t VOLATILE = 0, AGGREGATE = 1 */
  if (nv->DeviceGetTotalEccErrors && nv->DeviceGetTotalEccErrors(h, 1, 0, &ecc) == 0) d->ecc_uncorrected_volatile = (long long)ecc;
  if (nv->DeviceGetTotalEccErrors && nv->DeviceGetTotalEccErrors(h, 1, 1, &ecc) == 0) d->ecc_uncorrected_aggregate = (long long)ecc;
  int iv;
  if (nv->DeviceGetRetiredPagesPendingStatus && nv->DeviceGetRetiredPagesPendingStatus(h, &iv) == 0) d->retired_pending = iv;
  if (nv->DeviceGetComputeMode && nv->DeviceGetComputeMode(h, &iv) == 0) d->compute_mode = iv;
  if (nv->DeviceGetPersistenceMode && nv->DeviceGetPersistenceMode(h, &iv) == 0) d->persistence = iv;
  unsigned rc_, ru, rp, rf;
  if (nv->DeviceGetRemappedRows && nv->DeviceGetRemappedRows(h, &rc_, &ru, &rp, &rf) == 0) {
    d->remap_corr = (int)rc_;
    d->remap_unc = (int)ru;
    d->remap_pending = (int)rp;
    d->remap_failure = (int)rf;
  }
  if (nv->DeviceGetComputeRunningProcesses) {
    unsigned total = 0;
    if (il_nvml_processes(nv, h, d->procs, IL_NVML_MAX_PROCS, &total) == 0) {
      d->n_procs_total = (int)total;
      d->n_procs = total < IL_NVML_MAX_PROCS ? (int)total : IL_NVML_MAX_PROCS;
    }
  }
}

int il_nvml_processes(il_nvml *nv, il_nvml_handle h, il_nvml_process_info *out, unsigned cap, unsigned *total) {
  *total = 0;
  /* Twice the room the count allows: a driver whose process struct were larger than the v2
   * layout would still write inside the buffer. */
  il_nvml_process_info local[64 * 2], *buf = local;
  unsigned room = 64, n = room;
  int rc = nv->DeviceGetComputeRunningProcesses(h, &n, buf);
  /* More processes than room: NVML sets n to the number needed and promises nothing about the
   * array; ask again with that much (and a margin for processes starting meanwhile). */
  for (int tries = 0; rc == IL_NVML_ERROR_INSUFFICIENT_SIZE && n > room && n < (1u << 20) && tries < 3; tries++) {
    if (buf != local) il_mem_free(buf);
    room = n + 16;
    buf = il_mem_alloc(IL_MEM_OTHER, sizeof *buf * room * 2, "NVML process list");
    if (!buf) return IL_NVML_ERROR_UNKNOWN;
    n = room;
    rc = nv->DeviceGetComputeRunningProcesses(h, &n, buf);
  }
  if (rc == 0) {
    *total = n;
    memcpy(out, buf, sizeof *buf * (n < cap ? n : cap));
  }
  if (buf != local) il_mem_free(buf);
  return rc;
}

void il_nvml_snapshot(il_nvml *nv, il_nvml_snapshot_t *snap) {
  memset(snap, 0, sizeof *snap);
  snap->count_rc = -1;
  if (!nv->dl.handle) return;
  snap->loaded = true;
  snap->init_rc = nv->Init();
  il_sysfs_copy(snap->init_error, sizeof snap->init_error,
                nv->ErrorString ? nv->ErrorString(snap->init_rc) : il_nvml_code_name(snap->init_rc));
  if (snap->init_rc != 0) return;
  if (nv->SystemGetDriverVersion) nv->SystemGetDriverVersion(snap->driver_version, sizeof snap->driver_version);
  if (nv->SystemGetNVMLVersion) nv->SystemGetNVMLVersion(snap->nvml_version, sizeof snap->nvml_version);
  if (nv->SystemGetCudaDriverVersion) nv->SystemGetCudaDriverVersion(&snap->cuda_driver_version);
  unsigned n = 0;
  snap->count_rc = nv->DeviceGetCount(&n);
  if (snap->count_rc == 0) {
    if (n > IL_NVML_MAX_DEVICES) n = IL_NVML_MAX_DEVICES;
    snap->n_devices = (int)n;
    for (unsigned i = 0; i < n; i++) il__read_device(nv, i, &snap->devices[i]);
  }
  nv->Shutdown();
}

int il_nvml_usable_count(const il_nvml_snapshot_t *s) {
  int n = 0;
  for (int i = 0; i < s->n_devices; i++) n += s->devices[i].handle_rc == 0;
  return n;
}
