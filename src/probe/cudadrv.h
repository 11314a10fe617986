/* probe/cudadrv: the CUDA driver API (libcuda.so.1) loaded with dlopen, and what cuInit says.
 *
 * The driver API is what every CUDA runtime calls first, so its cuInit result names the
 * failure precisely: CUDA_ERROR_INSUFFICIENT_DRIVER (35), CUDA_ERROR_NO_DEVICE (100),
 * CUDA_ERROR_SYSTEM_NOT_READY (802, NVSwitch box without Fabric Manager),
 * CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804, forward-compat libcuda on a GeForce). The
 * library path defaults to "libcuda.so.1" and is overridable (--cuda-lib, INFERLAB_CUDA_LIB);
 * the file actually loaded is recorded because a cuda-compat libcuda is recognised by it.
 * Not for: running kernels or allocating device memory (that is the CUDA backend's job).
 */
#ifndef IL_PROBE_CUDADRV_H
#define IL_PROBE_CUDADRV_H

#include <stdbool.h>
#include <stddef.h>

#include "core/dl.h"
#include "core/status.h"

#define IL_CUDADRV_MAX_DEVICES 16

enum {
  IL_CUDA_SUCCESS = 0,
  IL_CUDA_ERROR_NOT_INITIALIZED = 3,
  IL_CUDA_ERROR_STUB_LIBRARY = 34,
  IL_CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  IL_CUDA_ERROR_NO_DEVICE = 100,
  IL_CUDA_ERROR_OPERATING_SYSTEM = 304,
  IL_CUDA_ERROR_SYSTEM_NOT_READY = 802,
  IL_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  IL_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  IL_CUDA_ERROR_UNKNOWN = 999,
};

typedef struct {
  il_dl dl;             /* the library; dl.error keeps the loader's text */
  char path[1024];
  char loaded[1024]; /* file actually loaded, "" unknown */
  char error[512];
  int (*Init)(unsigned);
  int (*DriverGetVersion)(int *);
  int (*DeviceGetCount)(int *);
  int (*DeviceGet)(int *, int);
  int (*DeviceGetName)(char *, int, int);
  int (*DeviceGetAttribute)(int *, int, int);
  int (*DeviceTotalMem)(size_t *, int);
  int (*GetErrorName)(int, const char **);
  int (*GetErrorString)(int, const char **);
} il_cudadrv;

typedef struct {
  char name[96];
  int cc_major, cc_minor;
  long long mem_total;
} il_cudadrv_device;

typedef struct {
  bool loaded;
  int init_rc;
  char init_name[64];    /* "CUDA_ERROR_NO_DEVICE" */
  char init_text[256];   /* cuGetErrorString text when available */
  int driver_version;    /* cuDriverGetVersion: 12020 = 12.2; 0 unknown */
  int n_devices;         /* -1 unknown */
  il_cudadrv_device devices[IL_CUDADRV_MAX_DEVICES];
} il_cudadrv_snapshot_t;

/* Loads `path` (NULL = "libcuda.so.1"). IL_ERR_NOT_FOUND with the dlerror text (also in
 * cu->error) when it cannot be loaded or has no cuInit. il_cudadrv_close is always safe. */
il_status il_cudadrv_open(il_cudadrv *cu, const char *path);
void il_cudadrv_close(il_cudadrv *cu);
/* Built-in CUresult names ("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"), for logs and for
 * libraries without cuGetErrorName. Never NULL. */
const char *il_cudadrv_code_name(int rc);
/* cuInit(0), cuDriverGetVersion, and per device name, compute capability, memory. Can't fail. */
void il_cudadrv_snapshot(il_cudadrv *cu, il_cudadrv_snapshot_t *snap);
/* "12.2" from 12020 into buf. */
const char *il_cudadrv_version_text(int v, char *buf, size_t n);

#endif
