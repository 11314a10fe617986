/* tests/fakes/fake_scenario: the scripted GPU world shared by the fake libnvidia-ml and libcuda.
 *
 * Both fakes read a key=value file named by the environment variable IL_FAKE_GPU each time the
 * caller initializes the library (nvmlInit_v2, cuDriverGetVersion, cuInit), so one test process
 * can load the fakes once and switch scenarios by rewriting the file. Keys (absent = the query
 * returns NVML_ERROR_NOT_SUPPORTED / a default):
 *   nvml.init=18                 nvmlInit_v2 result (0 = success)
 *   driver=535.54.03             nvmlSystemGetDriverVersion
 *   nvml_version=12.535.54.03    nvmlSystemGetNVMLVersion
 *   cuda_driver=12020            nvmlSystemGetCudaDriverVersion_v2 and cuDriverGetVersion
 *   count=2  count_rc=0          nvmlDeviceGetCount_v2
 *   devN.handle_rc  devN.name  devN.uuid  devN.pci (bus id)  devN.pci_id (0xDDDDVVVV)
 *   devN.mem_total  devN.mem_used (bytes)  devN.util_gpu  devN.util_mem  devN.temp
 *   devN.power_mw  devN.power_limit_mw  devN.clock_sm  devN.clock_mem  devN.clock_gfx
 *   devN.cc=8.0  devN.mig=0|1  devN.mig_pending  devN.mig_max  devN.mig_count
 *   devN.ecc_vol  devN.ecc_agg  devN.retired_pending  devN.compute_mode  devN.persistence
 *   devN.procs=PID:BYTES,PID:BYTES   devN.nprocs=K (K processes first: pids 1001.., 1 MiB each)
 *   devN.remap=CORR,UNC,PENDING,FAILURE (nvmlDeviceGetRemappedRows)
 *   cuda.init=804   cuda.version=12020 (default cuda_driver)   cuda.count (default count)
 *   live=1   nvmlDeviceGetMemoryInfo re-reads the file at every call (memory that grows while sampled)
 * Header-only (static functions) so each fake is one self-contained shared object.
 */
#ifndef IL_FAKE_SCENARIO_H
#define IL_FAKE_SCENARIO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_KEYS 256

static char fake_keys[FAKE_MAX_KEYS][48];
static char fake_vals[FAKE_MAX_KEYS][160];
static int fake_n;

static void fake_load(void) {
  fake_n = 0;
  const char *path = getenv("IL_FAKE_GPU");
  if (!path) return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f) && fake_n < FAKE_MAX_KEYS) {
    line[strcspn(line, "\r\n")] = 0;
    char *eq = strchr(line, '=');
    if (!eq || line[0] == '#') continue;
    *eq = 0;
    snprintf(fake_keys[fake_n], sizeof fake_keys[0], "%.47s", line);
    snprintf(fake_vals[fake_n], sizeof fake_vals[0], "%.159s", eq + 1);
    fake_n++;
  }
  fclose(f);
}

static const char *fake_get(const char *key) {
  for (int i = fake_n - 1; i >= 0; i--)
    if (!strcmp(fake_keys[i], key)) return fake_vals[i];
  return NULL;
}

static const char *fake_dev(int i, const char *field) {
  char k[64];
  snprintf(k, sizeof k, "dev%d.%s", i, field);
  return fake_get(k);
}

static long long fake_int(const char *key, long long deflt) {
  const char *v = fake_get(key);
  return v ? strtoll(v, NULL, 0) : deflt;
}

#endif
