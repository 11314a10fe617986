/* tests/fakes/fake_cuda: a test double for libcuda.so.1 (CUDA driver API).
 *
 * Exports cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
 * cuDeviceGetAttribute (compute capability 75/76), cuDeviceTotalMem_v2, cuGetErrorName and
 * cuGetErrorString, answering from the scenario file of fake_scenario.h (cuda.* keys, device
 * names and capabilities from devN.*). Not for: anything but tests.
 */
#include <stddef.h>

#include "fake_scenario.h"

static int fake_cu_inited;

int cuDriverGetVersion(int *v) {
  fake_load();
  if (!v) return 1;
  *v = (int)fake_int("cuda.version", fake_int("cuda_driver", 0));
  return 0;
}

int cuInit(unsigned flags) {
  (void)flags;
  fake_load();
  int rc = (int)fake_int("cuda.init", 0);
  fake_cu_inited = rc == 0;
  return rc;
}

int cuDeviceGetCount(int *n) {
  if (!fake_cu_inited) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
  *n = (int)fake_int("cuda.count", fake_int("count", 0));
  return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
  if (!fake_cu_inited) return 3;
  if (ordinal < 0 || ordinal >= fake_int("cuda.count", fake_int("count", 0))) return 101; /* INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}

int cuDeviceGetName(char *name, int len, int dev) {
  const char *v = fake_dev(dev, "name");
  snprintf(name, (size_t)len, "%s", v ? v : "Fake GPU");
  return 0;
}

int cuDeviceGetAttribute(int *out, int attr, int dev) {
  const char *cc = fake_dev(dev, "cc");
  int major = 0, minor = 0;
  if (cc) sscanf(cc, "%d.%d", &major, &minor);
  if (attr == 75) *out = major;
  else if (attr == 76) *out = minor;
  else return 1; /* INVALID_VALUE */
  return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  const char *v = fake_dev(dev, "mem_total");
  *bytes = v ? (size_t)strtoull(v, NULL, 0) : 0;
  return 0;
}

static const char *fake_cu_name(int rc) {
  switch (rc) {
    case 0: return "CUDA_SUCCESS";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return NULL;
  }
}

int cuGetErrorName(int rc, const char **s) {
  *s = fake_cu_name(rc);
  return *s ? 0 : 1;
}

int cuGetErrorString(int rc, const char **s) {
  switch (rc) {
    case 804: *s = "forward compatibility was attempted on non supported HW"; return 0;
    case 802: *s = "system not yet initialized"; return 0;
    case 100: *s = "no CUDA-capable device is detected"; return 0;
    default: *s = fake_cu_name(rc); return *s ? 0 : 1;
  }
}
