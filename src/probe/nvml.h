/* probe/nvml: NVML (libnvidia-ml.so.1) loaded with dlopen, and a snapshot of what it reports.
 *
 * inferlab never links libnvidia-ml: one binary must run on machines with and without a
 * driver. il_nvml_open loads the library from a path (default "libnvidia-ml.so.1", overridable
 * by --nvml-lib or INFERLAB_NVML_LIB; tests pass a fake library), resolves the functions below
 * into a table and keeps the dlerror() text when loading fails. Optional functions may be
 * NULL (older drivers lack some); every caller checks.
 * il_nvml_snapshot reads the driver facts and, per device, everything the doctor and the
 * monitor show. Numeric return codes are kept, because the code (18 = library/kernel module
 * version mismatch, 9 = driver not loaded, 15 = GPU lost) is the diagnosis.
 * Not for: deciding what a result means (the check groups run by probe/doctor do that), or changing GPU settings.
 */
#ifndef IL_PROBE_NVML_H
#define IL_PROBE_NVML_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dl.h"
#include "core/status.h"

#define IL_NVML_MAX_DEVICES 16
#define IL_NVML_MAX_PROCS 16

/* NVML return codes used by the checks (values from nvml.h). */
enum {
  IL_NVML_SUCCESS = 0,
  IL_NVML_ERROR_UNINITIALIZED = 1,
  IL_NVML_ERROR_NOT_SUPPORTED = 3,
  IL_NVML_ERROR_NO_PERMISSION = 4,
  IL_NVML_ERROR_NOT_FOUND = 6,
  IL_NVML_ERROR_INSUFFICIENT_SIZE = 7,
  IL_NVML_ERROR_DRIVER_NOT_LOADED = 9,
  IL_NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  IL_NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  IL_NVML_ERROR_GPU_IS_LOST = 15,
  IL_NVML_ERROR_RESET_REQUIRED = 16,
  IL_NVML_ERROR_OPERATING_SYSTEM = 17,
  IL_NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  IL_NVML_ERROR_UNKNOWN = 999,
};

typedef struct il_nvml_device_st *il_nvml_handle;

/* nvmlPciInfo_t as of nvmlDeviceGetPciInfo_v3. */
typedef struct {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} il_nvml_pci_info;
typedef struct {
  unsigned long long total, free, used;
} il_nvml_memory;
typedef struct {
  unsigned gpu, memory;
} il_nvml_utilization;
/* nvmlProcessInfo_v2_t, used by the _v2 and _v3 process queries. */
typedef struct {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
} il_nvml_process_info;

/* The function table. Names follow NVML without the "nvml" prefix. */
typedef struct {
  il_dl dl;             /* the library; dl.error keeps the loader's text */
  char path[1024];      /* as requested */
  char loaded[1024];    /* file actually loaded (dladdr + realpath), "" when unknown */
  char error[512];      /* dlopen/dlsym error text when loading failed */
  int (*Init)(void);
  int (*Shutdown)(void);
  const char *(*ErrorString)(int);
  int (*SystemGetDriverVersion)(char *, unsigned);
  int (*SystemGetNVMLVersion)(char *, unsigned);
  int (*SystemGetCudaDriverVersion)(int *);
  int (*DeviceGetCount)(unsigned *);
  int (*DeviceGetHandleByIndex)(unsigned, il_nvml_handle *);
  int (*DeviceGetName)(il_nvml_handle, char *, unsigned);
  int (*DeviceGetUUID)(il_nvml_handle, char *, unsigned);
  int (*DeviceGetPciInfo)(il_nvml_handle, il_nvml_pci_info *);
  int (*DeviceGetMemoryInfo)(il_nvml_handle, il_nvml_memory *);
  int (*DeviceGetUtilizationRates)(il_nvml_handle, il_nvml_utilization *);
  int (*DeviceGetTemperature)(il_nvml_handle, int, unsigned *);
  int (*DeviceGetPowerUsage)(il_nvml_handle, unsigned *);
  int (*DeviceGetEnforcedPowerLimit)(il_nvml_handle, unsigned *);
  int (*DeviceGetClockInfo)(il_nvml_handle, int, unsigned *);
  int (*DeviceGetCudaComputeCapability)(il_nvml_handle, int *, int *);
  int (*DeviceGetMigMode)(il_nvml_handle, unsigned *, unsigned *);
  int (*DeviceGetMaxMigDeviceCount)(il_nvml_handle, unsigned *);
  int (*DeviceGetMigDeviceHandleByIndex)(il_nvml_handle, unsigned, il_nvml_handle *);
  int (*DeviceGetTotalEccErrors)(il_nvml_handle, int, int, unsigned long long *);
  int (*DeviceGetRetiredPagesPendingStatus)(il_nvml_handle, int *);
  int (*DeviceGetComputeMode)(il_nvml_handle, int *);
  int (*DeviceGetPersistenceMode)(il_nvml_handle, int *);
  /* (corrected rows, uncorrected rows, remap pending, remap failure occurred); A100 and later. */
  int (*DeviceGetRemappedRows)(il_nvml_handle, unsigned *, unsigned *, unsigned *, unsigned *);
  int (*DeviceGetComputeRunningProcesses)(il_nvml_handle, unsigned *, il_nvml_process_info *);
} il_nvml;

/* One GPU as NVML reports it. Fields a driver does not support stay at -1 / "" and the
 * corresponding *_rc says why. */
typedef struct {
  int index;
  int handle_rc;            /* nvmlDeviceGetHandleByIndex result; the rest is void unless 0 */
  char name[96];
  char uuid[96];
  char pci_bus_id[32];      /* "00000000:07:00.0" */
  unsigned pci_device_id;   /* 0xDDDDVVVV as NVML gives it */
  long long mem_total, mem_used, mem_free; /* bytes, -1 unknown */
  int util_gpu, util_mem;   /* percent, -1 unknown */
  int temp_c;               /* -1 unknown */
  int power_mw, power_limit_mw;
  int clock_sm_mhz, clock_mem_mhz, clock_gfx_mhz;
  int cc_major, cc_minor;   /* -1 unknown */
  int mig_current, mig_pending; /* -1 unsupported, 0 disabled, 1 enabled */
  int mig_devices;          /* MIG devices (GPU/compute instances) that exist; -1 unknown */
  long long ecc_uncorrected_volatile, ecc_uncorrected_aggregate; /* -1 unsupported */
  int retired_pending;      /* -1 unsupported */
  int compute_mode;         /* 0 default, 2 prohibited, 3 exclusive process; -1 unknown */
  int persistence;          /* -1 unknown */
  int remap_corr, remap_unc, remap_pending, remap_failure; /* row remapping; -1 unsupported */
  int n_procs;               /* listed in procs: the first IL_NVML_MAX_PROCS */
  int n_procs_total;         /* running on the device (0 when NVML could not list them) */
  il_nvml_process_info procs[IL_NVML_MAX_PROCS];
} il_nvml_device;

typedef struct {
  bool loaded;              /* the library was found and its core functions resolved */
  int init_rc;              /* nvmlInit_v2 result (meaningful when loaded) */
  char init_error[160];     /* nvmlErrorString(init_rc) */
  char driver_version[80];  /* "535.54.03"; 80: NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
  char nvml_version[80];    /* "12.535.54.03"; 80: NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE */
  int cuda_driver_version;  /* 12020 = CUDA 12.2; 0 unknown */
  int count_rc;
  int n_devices;
  il_nvml_device devices[IL_NVML_MAX_DEVICES];
} il_nvml_snapshot_t;

/* Loads the library at `path` (NULL = "libnvidia-ml.so.1") and fills nv. Returns
 * IL_ERR_NOT_FOUND (detail: the dlerror text, also kept in nv->error) when the library cannot
 * be loaded or lacks nvmlInit; the table is then unusable but il_nvml_close is still safe. */
il_status il_nvml_open(il_nvml *nv, const char *path);
/* Unloads; safe on a table whose open failed and on a zeroed table. */
void il_nvml_close(il_nvml *nv);
/* Text for an NVML code from the library when loaded, else from the built-in names
 * ("NVML_ERROR_LIB_RM_VERSION_MISMATCH"). Never NULL. */
const char *il_nvml_code_name(int rc);

/* Initializes NVML, reads driver facts and every device, shuts NVML down again. Missing
 * optional functions leave fields at -1. Can't fail: outcomes are recorded in snap. */
void il_nvml_snapshot(il_nvml *nv, il_nvml_snapshot_t *snap);
/* Reads the fast-changing fields (utilization, memory, power, temperature, clocks) of device
 * `handle` into d. For the monitor, between Init and Shutdown. */
void il_nvml_sample_device(il_nvml *nv, il_nvml_handle handle, il_nvml_device *d);

/* Device h's running compute processes: the first cap of them into out and how many there are
 * into *total, asking again with a larger buffer (memory layer, IL_MEM_OTHER) when NVML says
 * there are more than its first room of 64. Returns the NVML code (0: out and *total valid; an
 * error leaves *total 0). Needs DeviceGetComputeRunningProcesses. */
int il_nvml_processes(il_nvml *nv, il_nvml_handle h, il_nvml_process_info *out, unsigned cap, unsigned *total);

/* Number of devices whose handle NVML returned (handle_rc == 0): the usable GPUs. */
int il_nvml_usable_count(const il_nvml_snapshot_t *s);

#endif
