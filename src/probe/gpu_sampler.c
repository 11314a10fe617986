/* probe/gpu_sampler: background NVML sampling thread. See sampler.h. */
#include "probe/gpu_sampler.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "memory/mem.h"

struct il_gpu_sampler {
  il_nvml nv;
  int interval_ms;
  int n;
  il_nvml_handle handles[IL_NVML_MAX_DEVICES];
  char names[IL_NVML_MAX_DEVICES][96];
  double t0;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* signalled on each new sample and on stop */
  bool stop;
  il_sample_set latest;
  il_gpu_sampler_stats stats;
  double util_sum[IL_NVML_MAX_DEVICES];
};

static double il__wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads every device without holding the lock (NVML calls can take milliseconds), then
 * publishes the set under the lock. */
static void il__take_sample(il_gpu_sampler *s) {
  il_sample_set set;
  memset(&set, 0, sizeof set);
  set.t = il_time_now() - s->t0;
  set.unix_time = il__wall();
  set.n_devices = s->n;
  for (int i = 0; i < s->n; i++) {
    il_nvml_device d;
    memset(&d, 0, sizeof d);
    d.mem_total = d.mem_used = -1;
    d.util_gpu = d.util_mem = d.power_mw = d.temp_c = d.clock_sm_mhz = d.clock_mem_mhz = -1;
    il_nvml_sample_device(&s->nv, s->handles[i], &d);
    il_gpu_sample *g = &set.dev[i];
    g->index = i;
    g->util_gpu = d.util_gpu;
    g->util_mem = d.util_mem;
    g->mem_used = d.mem_used;
    g->mem_total = d.mem_total;
    g->power_mw = d.power_mw;
    g->temp_c = d.temp_c;
    g->clock_sm_mhz = d.clock_sm_mhz;
    g->clock_mem_mhz = d.clock_mem_mhz;
  }
  pthread_mutex_lock(&s->mu);
  set.seq = s->latest.seq + 1;
  s->latest = set;
  il_gpu_sampler_stats *st = &s->stats;
  st->samples++;
  for (int i = 0; i < s->n; i++) {
    const il_gpu_sample *g = &set.dev[i];
    if (g->util_gpu >= 0) s->util_sum[i] += g->util_gpu;
    st->util_gpu_mean[i] = s->util_sum[i] / (double)st->samples;
    if (g->util_gpu > st->util_gpu_peak[i]) st->util_gpu_peak[i] = g->util_gpu;
    if (g->mem_used > st->mem_used_peak[i]) st->mem_used_peak[i] = g->mem_used;
    if (g->power_mw > st->power_mw_peak[i]) st->power_mw_peak[i] = g->power_mw;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void il__deadline(struct timespec *ts, int ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void *il__thread(void *arg) {
  il_gpu_sampler *s = arg;
  for (;;) {
    struct timespec ts;
    il__deadline(&ts, s->interval_ms);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!s->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop) break;
    il__take_sample(s);
  }
  return NULL;
}

il_status il_gpu_sampler_start(const char *nvml_path, int interval_ms, il_gpu_sampler **out) {
  *out = NULL;
  il_gpu_sampler *s = il_mem_calloc(IL_MEM_OTHER, sizeof *s, "gpu sampler");
  if (!s) return IL_ERR_OOM;
  s->interval_ms = interval_ms < 10 ? 10 : interval_ms;
  il_status st = il_nvml_open(&s->nv, nvml_path);
  if (st != IL_OK) {
    il_mem_free(s);
    return st;
  }
  int rc = s->nv.Init();
  if (rc != 0) {
    il_error(IL_ERR_DEVICE, "nvmlInit failed: %s (%d)%s%s", il_nvml_code_name(rc), rc, s->nv.ErrorString ? ": " : "",
             s->nv.ErrorString ? s->nv.ErrorString(rc) : "");
    il_nvml_close(&s->nv);
    il_mem_free(s);
    return IL_ERR_DEVICE;
  }
  unsigned n = 0;
  rc = s->nv.DeviceGetCount(&n);
  if (rc != 0 || n == 0) {
    il_error(IL_ERR_DEVICE, rc ? "nvmlDeviceGetCount failed: %s" : "NVML lists no devices%s", rc ? il_nvml_code_name(rc) : "");
    s->nv.Shutdown();
    il_nvml_close(&s->nv);
    il_mem_free(s);
    return IL_ERR_DEVICE;
  }
  if (n > IL_NVML_MAX_DEVICES) n = IL_NVML_MAX_DEVICES;
  for (unsigned i = 0; i < n; i++) {
    if (s->nv.DeviceGetHandleByIndex(i, &s->handles[s->n]) != 0) continue;
    if (s->nv.DeviceGetName) s->nv.DeviceGetName(s->handles[s->n], s->names[s->n], sizeof s->names[0]);
    s->n++;
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->t0 = il_time_now();
  il__take_sample(s);
  if (pthread_create(&s->thread, NULL, il__thread, s) != 0) {
    il_gpu_sampler_stop(s);
    return il_error(IL_ERR_INTERNAL, "sampler: cannot start the sampling thread");
  }
  s->thread_started = true;
  *out = s;
  return IL_OK;
}

void il_gpu_sampler_read(il_gpu_sampler *s, il_sample_set *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->latest;
  pthread_mutex_unlock(&s->mu);
}

il_status il_gpu_sampler_next(il_gpu_sampler *s, uint64_t after, int timeout_ms, il_sample_set *out) {
  struct timespec ts;
  il__deadline(&ts, timeout_ms);
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  while (s->latest.seq <= after && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  *out = s->latest;
  bool ok = s->latest.seq > after;
  pthread_mutex_unlock(&s->mu);
  return ok ? IL_OK : IL_ERR_RANGE;
}

void il_gpu_sampler_stats_get(il_gpu_sampler *s, il_gpu_sampler_stats *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->stats;
  pthread_mutex_unlock(&s->mu);
}

const char *il_gpu_sampler_device_name(il_gpu_sampler *s, int index) {
  return index >= 0 && index < s->n ? s->names[index] : "";
}

void il_gpu_sampler_stop(il_gpu_sampler *s) {
  if (!s) return;
  if (s->thread_started) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  s->nv.Shutdown();
  il_nvml_close(&s->nv);
  il_mem_free(s);
}
