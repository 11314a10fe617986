/* probe/cudadrv: dlopen'd CUDA driver API and the cuInit snapshot. See cudadrv.h. */
#include "probe/cudadrv.h"

#include <stdio.h>
#include <string.h>

#include "probe/sysfs.h"

static void *il__first_sym(il_dl *lib, const char *a, const char *b) {
  const char *const names[] = {a, b, NULL};
  return il_dl_sym_first(lib, names);
}

il_status il_cudadrv_open(il_cudadrv *cu, const char *path) {
  memset(cu, 0, sizeof *cu);
  il_sysfs_copy(cu->path, sizeof cu->path, path && *path ? path : "libcuda.so.1");
  if (!il_sysfs_loadable(cu->path, cu->error, sizeof cu->error)) return il_error(IL_ERR_NOT_FOUND, "%s", cu->error);
  if (il_dl_open(&cu->dl, cu->path) != IL_OK) {
    il_sysfs_copy(cu->error, sizeof cu->error, il_dl_error(&cu->dl));
    return il_error(IL_ERR_NOT_FOUND, "%s", cu->error);
  }
  *(void **)&cu->Init = il__first_sym(&cu->dl, "cuInit", NULL);
  *(void **)&cu->DriverGetVersion = il__first_sym(&cu->dl, "cuDriverGetVersion", NULL);
  *(void **)&cu->DeviceGetCount = il__first_sym(&cu->dl, "cuDeviceGetCount", NULL);
  *(void **)&cu->DeviceGet = il__first_sym(&cu->dl, "cuDeviceGet", NULL);
  *(void **)&cu->DeviceGetName = il__first_sym(&cu->dl, "cuDeviceGetName", NULL);
  *(void **)&cu->DeviceGetAttribute = il__first_sym(&cu->dl, "cuDeviceGetAttribute", NULL);
  *(void **)&cu->DeviceTotalMem = il__first_sym(&cu->dl, "cuDeviceTotalMem_v2", "cuDeviceTotalMem");
  *(void **)&cu->GetErrorName = il__first_sym(&cu->dl, "cuGetErrorName", NULL);
  *(void **)&cu->GetErrorString = il__first_sym(&cu->dl, "cuGetErrorString", NULL);
  if (!cu->Init) {
    snprintf(cu->error, sizeof cu->error, "%.400s: not a CUDA driver library (no cuInit)", cu->path);
    il_dl_close(&cu->dl);
    return il_error(IL_ERR_NOT_FOUND, "%s", cu->error);
  }
  il_dl_file_of(*(void **)&cu->Init, cu->loaded, sizeof cu->loaded);
  return IL_OK;
}

void il_cudadrv_close(il_cudadrv *cu) {
  il_dl_close(&cu->dl);
}

const char *il_cudadrv_code_name(int rc) {
  switch (rc) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_(unlisted)";
  }
}

const char *il_cudadrv_version_text(int v, char *buf, size_t n) {
  if (v <= 0) snprintf(buf, n, "unknown");
  else snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

void il_cudadrv_snapshot(il_cudadrv *cu, il_cudadrv_snapshot_t *snap) {
  memset(snap, 0, sizeof *snap);
  snap->n_devices = -1;
  if (!cu->dl.handle) return;
  snap->loaded = true;
  /* cuDriverGetVersion works before cuInit and even when cuInit fails. */
  if (cu->DriverGetVersion) cu->DriverGetVersion(&snap->driver_version);
  snap->init_rc = cu->Init(0);
  const char *s = NULL;
  if (cu->GetErrorName && cu->GetErrorName(snap->init_rc, &s) == 0 && s)
    il_sysfs_copy(snap->init_name, sizeof snap->init_name, s);
  else
    il_sysfs_copy(snap->init_name, sizeof snap->init_name, il_cudadrv_code_name(snap->init_rc));
  s = NULL;
  if (cu->GetErrorString && cu->GetErrorString(snap->init_rc, &s) == 0 && s)
    il_sysfs_copy(snap->init_text, sizeof snap->init_text, s);
  if (snap->init_rc != 0 || !cu->DeviceGetCount) return;
  int n = 0;
  if (cu->DeviceGetCount(&n) != 0) return;
  if (n > IL_CUDADRV_MAX_DEVICES) n = IL_CUDADRV_MAX_DEVICES;
  snap->n_devices = n;
  for (int i = 0; i < n; i++) {
    il_cudadrv_device *d = &snap->devices[i];
    d->cc_major = d->cc_minor = -1;
    d->mem_total = -1;
    int dev = i;
    if (cu->DeviceGet && cu->DeviceGet(&dev, i) != 0) continue;
    if (cu->DeviceGetName) cu->DeviceGetName(d->name, (int)sizeof d->name, dev);
    if (cu->DeviceGetAttribute) {
      /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 */
      cu->DeviceGetAttribute(&d->cc_major, 75, dev);
      cu->DeviceGetAttribute(&d->cc_minor, 76, dev);
    }
    size_t bytes = 0;
    if (cu->DeviceTotalMem && cu->DeviceTotalMem(&bytes, dev) == 0) d->mem_total = (long long)bytes;
  }
}
