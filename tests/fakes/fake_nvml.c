/* tests/fakes/fake_nvml: a test double for libnvidia-ml.so.1.
 *
 * Exports the NVML entry points inferlab's probe/nvml resolves, with the same signatures and
 * return codes, answering from the scenario file described in fake_scenario.h. Device handles
 * are pointers into a static array; MIG device handles point at a separate dummy.
 * Not for: anything but tests. It has no state beyond the loaded scenario and an init count.
 */
#include <stdint.h>

#include "fake_scenario.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct {
  int index;
} fake_device;
typedef fake_device *nvmlDevice_t;

typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static fake_device fake_devices[64];
static fake_device fake_mig_device = {-1};
static int fake_inited;

int nvmlInit_v2(void) {
  fake_load();
  int rc = (int)fake_int("nvml.init", 0);
  if (rc == 0) fake_inited++;
  return rc;
}

int nvmlShutdown(void) {
  if (!fake_inited) return NVML_ERROR_UNINITIALIZED;
  fake_inited--;
  return NVML_SUCCESS;
}

const char *nvmlErrorString(int rc) {
  switch (rc) {
    case 0: return "Success";
    case 4: return "Insufficient Permissions";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 17: return "GPU access blocked by the operating system";
    case 18: return "Driver/library version mismatch";
    case 999: return "Unknown Error";
    default: return "Fake NVML error";
  }
}

static int fake_copy(const char *v, char *buf, unsigned len) {
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  if (strlen(v) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(buf, v);
  return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len) { return fake_copy(fake_get("driver"), buf, len); }
int nvmlSystemGetNVMLVersion(char *buf, unsigned len) { return fake_copy(fake_get("nvml_version"), buf, len); }
int nvmlSystemGetCudaDriverVersion_v2(int *v) {
  if (!fake_get("cuda_driver")) return NVML_ERROR_NOT_SUPPORTED;
  *v = (int)fake_int("cuda_driver", 0);
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned *n) {
  int rc = (int)fake_int("count_rc", 0);
  if (rc) return rc;
  *n = (unsigned)fake_int("count", 0);
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h) {
  if (i >= (unsigned)fake_int("count", 0) || i >= 64) return NVML_ERROR_INVALID_ARGUMENT;
  const char *rc = fake_dev((int)i, "handle_rc");
  if (rc && atoi(rc)) return atoi(rc);
  fake_devices[i].index = (int)i;
  *h = &fake_devices[i];
  return NVML_SUCCESS;
}

#define FAKE_DEV_FIELD(h, field) ((h)->index < 0 ? NULL : fake_dev((h)->index, field))

int nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned len) { return fake_copy(FAKE_DEV_FIELD(h, "name"), buf, len); }
int nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned len) { return fake_copy(FAKE_DEV_FIELD(h, "uuid"), buf, len); }

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *p) {
  const char *bus = FAKE_DEV_FIELD(h, "pci");
  if (!bus) return NVML_ERROR_NOT_SUPPORTED;
  memset(p, 0, sizeof *p);
  snprintf(p->busId, sizeof p->busId, "%s", bus);
  const char *id = FAKE_DEV_FIELD(h, "pci_id");
  p->pciDeviceId = id ? (unsigned)strtoul(id, NULL, 0) : 0;
  return NVML_SUCCESS;
}

static int fake_uint(nvmlDevice_t h, const char *field, unsigned *out) {
  const char *v = FAKE_DEV_FIELD(h, field);
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  *out = (unsigned)strtoul(v, NULL, 0);
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
  if (fake_get("live")) fake_load(); /* live=1: the scenario re-read at every memory query (a job that grows) */
  const char *t = FAKE_DEV_FIELD(h, "mem_total"), *u = FAKE_DEV_FIELD(h, "mem_used");
  if (!t) return NVML_ERROR_NOT_SUPPORTED;
  m->total = strtoull(t, NULL, 0);
  m->used = u ? strtoull(u, NULL, 0) : 0;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
  int rc = fake_uint(h, "util_gpu", &u->gpu);
  if (rc) return rc;
  return fake_uint(h, "util_mem", &u->memory);
}

int nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *t) {
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
  return fake_uint(h, "temp", t);
}
int nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *p) { return fake_uint(h, "power_mw", p); }
int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned *p) { return fake_uint(h, "power_limit_mw", p); }

int nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
  static const char *const names[] = {"clock_gfx", "clock_sm", "clock_mem"};
  if (type < 0 || type > 2) return NVML_ERROR_INVALID_ARGUMENT;
  return fake_uint(h, names[type], mhz);
}

int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor) {
  const char *v = FAKE_DEV_FIELD(h, "cc");
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  if (sscanf(v, "%d.%d", major, minor) != 2) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
  int rc = fake_uint(h, "mig", current);
  if (rc) return rc;
  if (fake_uint(h, "mig_pending", pending)) *pending = *current;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *n) { return fake_uint(h, "mig_max", n); }

int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned i, nvmlDevice_t *mig) {
  unsigned count = 0;
  fake_uint(h, "mig_count", &count);
  if (i >= count) return NVML_ERROR_NOT_FOUND;
  *mig = &fake_mig_device;
  return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *n) {
  if (type != 1) return NVML_ERROR_NOT_SUPPORTED;
  const char *v = FAKE_DEV_FIELD(h, counter == 0 ? "ecc_vol" : "ecc_agg");
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  *n = strtoull(v, NULL, 0);
  return NVML_SUCCESS;
}

static int fake_int_field(nvmlDevice_t h, const char *field, int *out) {
  const char *v = FAKE_DEV_FIELD(h, field);
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  *out = atoi(v);
  return NVML_SUCCESS;
}
int nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, int *p) { return fake_int_field(h, "retired_pending", p); }
int nvmlDeviceGetComputeMode(nvmlDevice_t h, int *m) { return fake_int_field(h, "compute_mode", m); }
int nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *m) { return fake_int_field(h, "persistence", m); }

/* devN.remap=CORR,UNC,PENDING,FAILURE */
int nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failure) {
  const char *v = FAKE_DEV_FIELD(h, "remap");
  if (!v || sscanf(v, "%u,%u,%u,%u", corr, unc, pending, failure) != 4) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *count, nvmlProcessInfo_t *infos) {
  const char *v = FAKE_DEV_FIELD(h, "procs");
  unsigned n = 0;
  nvmlProcessInfo_t tmp[256];
  /* devN.nprocs=K: K processes, pids 1001.., 1 MiB each (lists longer than a scenario value) */
  const char *nk = FAKE_DEV_FIELD(h, "nprocs");
  for (unsigned k = 0, kn = nk ? (unsigned)strtoul(nk, NULL, 10) : 0; k < kn && n < 256; k++, n++) {
    tmp[n].pid = 1001 + k;
    tmp[n].usedGpuMemory = 1u << 20;
    tmp[n].gpuInstanceId = tmp[n].computeInstanceId = 0xFFFFFFFFu;
  }
  for (const char *p = v; p && *p && n < 256;) {
    char *end; /* strtoul's end pointer is char ** even for a const string */
    tmp[n].pid = (unsigned)strtoul(p, &end, 10);
    p = end;
    if (*p == ':') p++;
    tmp[n].usedGpuMemory = strtoull(p, &end, 10);
    p = end;
    tmp[n].gpuInstanceId = tmp[n].computeInstanceId = 0xFFFFFFFFu;
    n++;
    if (*p == ',') p++;
  }
  if (n > *count) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  memcpy(infos, tmp, sizeof tmp[0] * n);
  *count = n;
  return NVML_SUCCESS;
}
