/* lab/usage: background sampling of RSS and NVML. See usage.h. */
#include "lab/usage.h"

#include <limits.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"
#include "memory/mem.h"

#define IL__MAX_TREE 512

#define IL__SERIES 1024

struct il_usage {
  il_usage_options opt;
  il_nvml nv;
  bool nvml_on;
  il_nvml_handle handles[IL_NVML_MAX_DEVICES];
  pthread_t thread;
  bool thread_on;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  double t0, last_t;
  double last_power_w[IL_NVML_MAX_DEVICES];
  double rss_sum;
  int rss_n;
  double mem_sum[IL_NVML_MAX_DEVICES], proc_sum[IL_NVML_MAX_DEVICES], util_sum[IL_NVML_MAX_DEVICES],
      power_sum[IL_NVML_MAX_DEVICES];
  il_usage_result r;
  /* the series behind the start's phases: every stride-th sample, halved when full, so a long
   * job keeps IL__SERIES points at most */
  int n_series, stride, skipped;
  double s_t[IL__SERIES];
  long long s_rss[IL__SERIES], s_gpu[IL__SERIES], s_dev[IL__SERIES]; /* gpu: the tree's; dev: the devices' */
};

/* ---- process tree ---------------------------------------------------------------------- */

static pid_t il__parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* "pid (comm) state ppid ...": comm may contain spaces and parentheses, so find the last ')' */
  char *rp = strrchr(buf, ')');
  if (!rp) return -1;
  char state;
  int ppid;
  if (sscanf(rp + 1, " %c %d", &state, &ppid) != 2) return -1;
  return (pid_t)ppid;
}

int il_usage_tree_pids(pid_t root, pid_t *out, int max) {
  if (max < 1) return 0;
  int n = 0;
  out[n++] = root;
  DIR *d = opendir("/proc");
  if (!d) return n;
  pid_t pids[IL__MAX_TREE * 4], parents[IL__MAX_TREE * 4];
  int np = 0;
  struct dirent *de;
  while ((de = readdir(d)) && np < IL__MAX_TREE * 4) {
    char *end;
    long v = strtol(de->d_name, &end, 10);
    if (*end || v <= 0) continue;
    pids[np] = (pid_t)v;
    parents[np] = il__parent_of((pid_t)v);
    np++;
  }
  closedir(d);
  /* breadth-first over the parent links: out[] grows as children are found */
  for (int i = 0; i < n && n < max; i++)
    for (int k = 0; k < np && n < max; k++)
      if (parents[k] == out[i] && pids[k] != root) out[n++] = pids[k];
  return n;
}

static long long il__rss_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) {
      kb = atoll(line + 6);
      break;
    }
  fclose(f);
  return kb < 0 || kb > LLONG_MAX / 1024 ? -1 : kb * 1024;
}

long long il_usage_tree_rss(pid_t root) {
  pid_t pids[IL__MAX_TREE];
  int n = il_usage_tree_pids(root, pids, IL__MAX_TREE);
  long long total = -1;
  for (int i = 0; i < n; i++) {
    long long r = il__rss_of(pids[i]);
    if (r >= 0) total = (total < 0 ? 0 : total) + r;
  }
  return total;
}

/* ---- sampling ---------------------------------------------------------------------------- */

static void il__nvml_setup(il_usage *u) {
  il_usage_result *r = &u->r;
  if (u->opt.no_gpu) {
    snprintf(r->gpu_reason, sizeof r->gpu_reason, "GPU sampling off");
    return;
  }
  if (il_nvml_open(&u->nv, u->opt.nvml_lib) != IL_OK) {
    snprintf(r->gpu_reason, sizeof r->gpu_reason, "NVML not loaded: %.500s", u->nv.error);
    il_error_clear();
    return;
  }
  int rc = u->nv.Init();
  if (rc != 0) {
    snprintf(r->gpu_reason, sizeof r->gpu_reason, "NVML loaded from %.400s but nvmlInit failed: %d %.100s",
             *u->nv.loaded ? u->nv.loaded : u->nv.path, rc,
             u->nv.ErrorString ? u->nv.ErrorString(rc) : il_nvml_code_name(rc));
    il_nvml_close(&u->nv);
    return;
  }
  unsigned count = 0;
  rc = u->nv.DeviceGetCount(&count);
  if (rc != 0 || count == 0) {
    snprintf(r->gpu_reason, sizeof r->gpu_reason, "NVML lists no GPU (nvmlDeviceGetCount: %d %s, count %u)", rc,
             il_nvml_code_name(rc), count);
    u->nv.Shutdown();
    il_nvml_close(&u->nv);
    return;
  }
  if (count > IL_NVML_MAX_DEVICES) count = IL_NVML_MAX_DEVICES;
  if (u->nv.SystemGetDriverVersion) u->nv.SystemGetDriverVersion(r->nvml_driver, sizeof r->nvml_driver);
  for (unsigned i = 0; i < count; i++) {
    il_usage_gpu *g = &r->gpus[r->n_gpus];
    memset(g, 0, sizeof *g);
    g->index = (int)i;
    g->mem_total = -1;
    g->util_max = -1;
    g->energy_j = -1;
    if (u->nv.DeviceGetHandleByIndex(i, &u->handles[r->n_gpus]) != 0) continue;
    if (u->nv.DeviceGetName) u->nv.DeviceGetName(u->handles[r->n_gpus], g->name, sizeof g->name);
    u->last_power_w[r->n_gpus] = -1;
    r->n_gpus++;
  }
  r->gpu_available = r->n_gpus > 0;
  u->nvml_on = true;
  if (!r->gpu_available) snprintf(r->gpu_reason, sizeof r->gpu_reason, "NVML lists %u GPU(s) but none answers", count);
}

static void il__series_add(il_usage *u, double t, long long rss, long long gpu, long long dev);
static long long il__sample_gpu(il_usage *u, double dt, long long *dev);

/* One sample; called with u->mu held. */
static void il__sample(il_usage *u) {
  il_usage_result *r = &u->r;
  double t = il_time_now() - u->t0, dt = t - u->last_t;
  u->last_t = t;
  r->n_samples++;
  r->seconds = t;
  long long rss = il_usage_tree_rss(u->opt.root);
  if (rss >= 0) {
    if (rss > r->rss_peak) r->rss_peak = rss;
    u->rss_sum += (double)rss;
    u->rss_n++;
    r->rss_mean = u->rss_sum / u->rss_n;
  }
  if (r->first_output_s < 0 && u->opt.output_path) {
    struct stat st;
    if (stat(u->opt.output_path, &st) == 0 && st.st_size > 0) r->first_output_s = t;
  }
  long long dev = -1;
  long long gpu = il__sample_gpu(u, dt, &dev);
  il__series_add(u, t, rss, gpu, dev);
}

/* Keeps (t, rss, gpu) every stride-th call; a full series drops every other point. */
static void il__series_add(il_usage *u, double t, long long rss, long long gpu, long long dev) {
  if (u->stride < 1) u->stride = 1;
  if (u->skipped++ % u->stride) return;
  if (u->n_series == IL__SERIES) {
    for (int i = 0; i < IL__SERIES / 2; i++)
      u->s_t[i] = u->s_t[2 * i], u->s_rss[i] = u->s_rss[2 * i], u->s_gpu[i] = u->s_gpu[2 * i],
      u->s_dev[i] = u->s_dev[2 * i];
    u->n_series = IL__SERIES / 2;
    u->stride *= 2;
  }
  u->s_t[u->n_series] = t, u->s_rss[u->n_series] = rss, u->s_gpu[u->n_series] = gpu, u->s_dev[u->n_series] = dev;
  u->n_series++;
}

/* The first time the series v reaches base + frac * (peak - base); -1 when it never grows. */
static double il__crossing(const il_usage *u, const long long *v, long long base, long long peak, double frac) {
  if (peak <= base || base < 0) return -1;
  const double at = (double)base + frac * (double)(peak - base);
  for (int i = 0; i < u->n_series; i++)
    if (v[i] >= 0 && (double)v[i] >= at && v[i] > base) return u->s_t[i];
  return -1;
}

/* The start's phases from the series (at stop). */
static void il__phases(il_usage *u) {
  il_usage_result *r = &u->r;
  r->rss_first = u->n_series ? u->s_rss[0] : -1;
  r->rss_t50 = il__crossing(u, u->s_rss, r->rss_first, r->rss_peak, 0.5);
  r->rss_t90 = il__crossing(u, u->s_rss, r->rss_first, r->rss_peak, 0.9);
  r->gpu_first = r->gpu_grown = -1;
  r->gpu_t_first = r->gpu_t90 = -1;
  if (!r->gpu_available || !u->n_series) return;
  /* the tree's memory where NVML showed the tree holding any; else (no process list, or pids
   * from another namespace) the devices' */
  bool tree = false;
  for (int i = 0; i < u->n_series; i++) tree |= u->s_gpu[i] > 0;
  const long long *v = tree ? u->s_gpu : u->s_dev;
  if (v[0] < 0) return;
  long long peak = v[0];
  for (int i = 0; i < u->n_series; i++)
    if (v[i] > peak) peak = v[i];
  r->gpu_first = v[0];
  r->gpu_grown = peak - v[0];
  r->gpu_t_first = il__crossing(u, v, r->gpu_first, peak, 0.0);
  r->gpu_t90 = il__crossing(u, v, r->gpu_first, peak, 0.9);
}

/* The GPU part of one sample; returns the tree's memory on all devices (-1: NVML lists no
 * processes) and *dev the devices' used memory (-1 unknown). */
static long long il__sample_gpu(il_usage *u, double dt, long long *dev) {
  il_usage_result *r = &u->r;
  if (!r->gpu_available) return -1;
  long long tree_mem = 0, dev_mem = 0;
  bool tree_known = false, dev_known = false;
  pid_t tree[IL__MAX_TREE];
  int n_tree = il_usage_tree_pids(u->opt.root, tree, IL__MAX_TREE);
  for (int i = 0; i < r->n_gpus; i++) {
    il_usage_gpu *g = &r->gpus[i];
    il_nvml_device d;
    memset(&d, 0, sizeof d);
    d.mem_total = d.mem_used = -1;
    d.util_gpu = d.power_mw = -1;
    il_nvml_sample_device(&u->nv, u->handles[i], &d);
    if (d.mem_used >= 0) {
      g->mem_total = d.mem_total;
      if (d.mem_used > g->mem_peak) g->mem_peak = d.mem_used;
      u->mem_sum[i] += (double)d.mem_used;
      g->mem_n++;
      g->mem_mean = u->mem_sum[i] / g->mem_n;
      dev_mem += d.mem_used, dev_known = true;
      if (u->nv.DeviceGetComputeRunningProcesses) {
        unsigned np = 0;
        il_nvml_process_info procs[256]; /* (a tree of ours past the first 256 is not summed) */
        const unsigned cap = (unsigned)(sizeof procs / sizeof procs[0]);
        int rc = il_nvml_processes(&u->nv, u->handles[i], procs, cap, &np);
        if (rc == 0) {
          if (np > cap) np = cap;
          long long mine = 0;
          for (unsigned k = 0; k < np; k++)
            for (int j = 0; j < n_tree; j++)
              if ((pid_t)procs[k].pid == tree[j]) mine += (long long)procs[k].used_gpu_memory;
          g->proc_known = true;
          tree_mem += mine, tree_known = true;
          if (mine > g->proc_mem_peak) g->proc_mem_peak = mine;
          u->proc_sum[i] += (double)mine;
          g->proc_mem_mean = u->proc_sum[i] / g->mem_n;
        }
      }
    }
    if (d.util_gpu >= 0) {
      u->util_sum[i] += d.util_gpu;
      g->util_n++;
      g->util_mean = u->util_sum[i] / g->util_n;
      if (d.util_gpu > g->util_max) g->util_max = d.util_gpu;
    }
    if (d.power_mw >= 0) {
      double w = d.power_mw / 1000.0;
      u->power_sum[i] += w;
      g->power_n++;
      g->power_mean_w = u->power_sum[i] / g->power_n;
      if (g->energy_j < 0) g->energy_j = 0;
      if (u->last_power_w[i] >= 0 && dt > 0) g->energy_j += 0.5 * (w + u->last_power_w[i]) * dt;
      u->last_power_w[i] = w;
    }
  }
  *dev = dev_known ? dev_mem : -1;
  return tree_known ? tree_mem : -1;
}

static void *il__thread(void *arg) {
  il_usage *u = arg;
  pthread_mutex_lock(&u->mu);
  while (!u->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)u->opt.interval_ms * 1000000LL;
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    int rc = 0;
    while (!u->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&u->cv, &u->mu, &ts);
    if (u->stop) break;
    il__sample(u);
    if (u->opt.tick) {
      il_usage_result now = u->r;
      pthread_mutex_unlock(&u->mu);
      u->opt.tick(u->opt.tick_ud, &now);
      pthread_mutex_lock(&u->mu);
    }
  }
  pthread_mutex_unlock(&u->mu);
  return NULL;
}

il_status il_usage_start(const il_usage_options *o, il_usage **out) {
  *out = NULL;
  il_usage *u = il_mem_calloc(IL_MEM_OTHER, sizeof *u, "usage sampler");
  if (!u) return IL_ERR_OOM;
  u->opt = *o;
  if (u->opt.interval_ms < 1) u->opt.interval_ms = 200;
  if (u->opt.root <= 0) u->opt.root = getpid();
  u->r.rss_peak = -1;
  u->r.first_output_s = -1;
  pthread_mutex_init(&u->mu, NULL);
  pthread_cond_init(&u->cv, NULL);
  il__nvml_setup(u);
  u->t0 = il_time_now();
  il__sample(u);
  if (pthread_create(&u->thread, NULL, il__thread, u) != 0) {
    il_usage_result ignored;
    il_usage_stop(u, &ignored);
    return il_error(IL_ERR_INTERNAL, "usage sampler: cannot start a thread");
  }
  u->thread_on = true;
  *out = u;
  return IL_OK;
}

void il_usage_stop(il_usage *u, il_usage_result *out) {
  pthread_mutex_lock(&u->mu);
  u->stop = true;
  pthread_cond_signal(&u->cv);
  pthread_mutex_unlock(&u->mu);
  if (u->thread_on) pthread_join(u->thread, NULL);
  il__sample(u);
  il__phases(u);
  *out = u->r;
  if (u->nvml_on) {
    u->nv.Shutdown();
    il_nvml_close(&u->nv);
  }
  pthread_cond_destroy(&u->cv);
  pthread_mutex_destroy(&u->mu);
  il_mem_free(u);
}

void il_usage_print_gpu(const il_usage_result *r, FILE *f) {
  if (!r->gpu_available) {
    fprintf(f, "gpu:           no GPU (%s)\n", r->gpu_reason);
    return;
  }
  for (int i = 0; i < r->n_gpus; i++) {
    const il_usage_gpu *g = &r->gpus[i];
    char a[32], b[32], c[32], d[32];
    fprintf(f, "gpu %d:         %s\n", g->index, g->name);
    fprintf(f, "  memory:      peak %s, mean %s of %s (device, all processes)\n",
            il_mem_format_bytes((size_t)(g->mem_peak > 0 ? g->mem_peak : 0), a, sizeof a),
            il_mem_format_bytes((size_t)(g->mem_mean > 0 ? g->mem_mean : 0), b, sizeof b),
            g->mem_total >= 0 ? il_mem_format_bytes((size_t)g->mem_total, c, sizeof c) : "?");
    if (g->proc_known)
      fprintf(f, "  process:     peak %s, mean %s\n", il_mem_format_bytes((size_t)g->proc_mem_peak, c, sizeof c),
              il_mem_format_bytes((size_t)g->proc_mem_mean, d, sizeof d));
    else
      fprintf(f, "  process:     unknown (NVML does not list compute processes here)\n");
    if (g->util_n) fprintf(f, "  utilization: mean %.1f%%, max %d%%\n", g->util_mean, g->util_max);
    else fprintf(f, "  utilization: not reported\n");
    if (g->energy_j >= 0) fprintf(f, "  energy:      %.1f J (mean power %.1f W)\n", g->energy_j, g->power_mean_w);
    else fprintf(f, "  energy:      not reported (no power readings)\n");
  }
}
