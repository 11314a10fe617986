/* probe/gpu_sampler: per-device GPU telemetry sampled by a background thread.
 *
 * `inferlab monitor` prints what it collects, and the lab records utilization during runs with
 * the same module: il_gpu_sampler_start opens NVML (from a path, like the doctor), starts a thread
 * that reads utilization, memory, power, temperature and clocks of every device every
 * interval, and keeps the latest sample plus running per-device sums (mean and peak utilization
 * over the whole run). il_gpu_sampler_next blocks until a sample newer than one the caller has
 * seen; il_gpu_sampler_read returns the latest without waiting; il_gpu_sampler_stop joins the thread
 * and frees everything.
 * Not for: diagnosis (probe/doctor) or anything that changes GPU state.
 */
#ifndef IL_PROBE_GPU_SAMPLER_H
#define IL_PROBE_GPU_SAMPLER_H

#include <stdint.h>

#include "core/status.h"
#include "probe/nvml.h"

typedef struct {
  int index;
  int util_gpu, util_mem;          /* percent, -1 unknown */
  long long mem_used, mem_total;   /* bytes, -1 unknown */
  int power_mw, temp_c;            /* -1 unknown */
  int clock_sm_mhz, clock_mem_mhz; /* -1 unknown */
} il_gpu_sample;

typedef struct {
  uint64_t seq;      /* 1 for the first sample, then increasing */
  double t;          /* seconds since the sampler started */
  double unix_time;  /* wall clock of the sample */
  int n_devices;
  il_gpu_sample dev[IL_NVML_MAX_DEVICES];
} il_sample_set;

typedef struct {
  uint64_t samples;
  double util_gpu_mean[IL_NVML_MAX_DEVICES];
  int util_gpu_peak[IL_NVML_MAX_DEVICES];
  long long mem_used_peak[IL_NVML_MAX_DEVICES];
  int power_mw_peak[IL_NVML_MAX_DEVICES];
} il_gpu_sampler_stats;

typedef struct il_gpu_sampler il_gpu_sampler;

/* Loads NVML from nvml_path (NULL = libnvidia-ml.so.1), initializes it, takes the first sample
 * synchronously and starts the thread sampling every interval_ms (>= 10). On failure returns
 * IL_ERR_NOT_FOUND (library missing: detail is the dlopen error), IL_ERR_DEVICE (nvmlInit or
 * device enumeration failed: detail names the NVML code) or IL_ERR_OOM; *out stays NULL.
 * The caller owns *out and releases it with il_gpu_sampler_stop. */
il_status il_gpu_sampler_start(const char *nvml_path, int interval_ms, il_gpu_sampler **out);
/* Copies the latest sample set. Can't fail. */
void il_gpu_sampler_read(il_gpu_sampler *s, il_sample_set *out);
/* Waits until a sample with seq > after exists (or timeout_ms passes) and copies it. Returns
 * IL_OK, or IL_ERR_RANGE on timeout (out then holds the latest). */
il_status il_gpu_sampler_next(il_gpu_sampler *s, uint64_t after, int timeout_ms, il_sample_set *out);
/* Mean/peak over all samples so far. */
void il_gpu_sampler_stats_get(il_gpu_sampler *s, il_gpu_sampler_stats *out);
/* Device names ("NVIDIA H100 80GB HBM3") for printing; borrowed until stop. */
const char *il_gpu_sampler_device_name(il_gpu_sampler *s, int index);
/* Stops the thread, shuts NVML down, frees s. NULL is ignored. */
void il_gpu_sampler_stop(il_gpu_sampler *s);

#endif
