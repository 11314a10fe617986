/* lab/env: environment description and snapshot. See env.h. */
#include "lab/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/registry.h"
#include "sys/cpuid.h"
#include "il_build_info.h"
#include "memory/mem.h"
#include "probe/doctor.h"
#include "probe/host.h"
#include "probe/nvml.h"
#include "probe/report.h"
#include "probe/sysfs.h"

void il_env_stamp(char *buf, size_t n) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%dT%H%M%SZ", &tm);
}

void il_env_collect(il_env *e, const char *nvml_lib, bool no_gpu) {
  memset(e, 0, sizeof *e);
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(e->time_utc, sizeof e->time_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (gethostname(e->hostname, sizeof e->hostname) != 0) e->hostname[0] = 0;
  e->hostname[sizeof e->hostname - 1] = 0;
  snprintf(e->version, sizeof e->version, "%s", IL_VERSION_STRING);
  snprintf(e->build, sizeof e->build, "%s, %s", IL_BUILD_TYPE, IL_BUILD_COMPILER);
  il_sysfs fs;
  il_host_info h;
  memset(&h, 0, sizeof h);
  if (il_sysfs_init(&fs, NULL, NULL) == IL_OK) il_host_probe(&fs, &h);
  snprintf(e->cpu, sizeof e->cpu, "%s", h.cpu_model);
  snprintf(e->simd_flags, sizeof e->simd_flags, "%s", h.simd);
  snprintf(e->kernel, sizeof e->kernel, "%s", h.kernel);
  e->logical_cpus = h.logical_cpus;
  e->ram_bytes = h.ram_total;
  snprintf(e->isa_detected, sizeof e->isa_detected, "%s", il_isa_name(il_cpu_isa_detected()));
  snprintf(e->isa_used, sizeof e->isa_used, "%s", il_backend_cpu_isa_default());
  snprintf(e->isa_compiled, sizeof e->isa_compiled, "%s", il_backend_cpu_isa_compiled());
  if (no_gpu) {
    snprintf(e->gpu, sizeof e->gpu, "no GPU (GPU sampling off)");
    return;
  }
  il_nvml nv;
  if (il_nvml_open(&nv, nvml_lib) != IL_OK) {
    snprintf(e->gpu, sizeof e->gpu, "no GPU (NVML not loaded: %s)", nv.error);
    il_error_clear();
    il_nvml_close(&nv);
    return;
  }
  il_nvml_snapshot_t *snap = il_mem_alloc(IL_MEM_OTHER, sizeof *snap, "NVML snapshot");
  if (!snap) {
    snprintf(e->gpu, sizeof e->gpu, "unknown (out of memory)");
    il_nvml_close(&nv);
    return;
  }
  il_nvml_snapshot(&nv, snap);
  if (snap->init_rc != 0) {
    snprintf(e->gpu, sizeof e->gpu, "no GPU (nvmlInit failed: %d %s)", snap->init_rc, snap->init_error);
  } else if (snap->n_devices == 0) {
    snprintf(e->gpu, sizeof e->gpu, "no GPU (NVML lists none; driver %s)", snap->driver_version);
  } else {
    snprintf(e->gpu, sizeof e->gpu, "%s x%d, driver %s", snap->devices[0].name, snap->n_devices, snap->driver_version);
  }
  il_mem_free(snap);
  il_nvml_close(&nv);
}

void il_env_json(const il_env *e, il_jsonw *w) {
  il_jsonw_obj(w);
  il_jsonw_kstr(w, "time_utc", e->time_utc);
  il_jsonw_kstr(w, "hostname", e->hostname);
  il_jsonw_kstr(w, "inferlab_version", e->version);
  il_jsonw_kstr(w, "build", e->build);
  il_jsonw_kstr(w, "cpu", e->cpu);
  il_jsonw_kstr(w, "simd_flags", e->simd_flags);
  il_jsonw_kstr(w, "isa_detected", e->isa_detected);
  il_jsonw_kstr(w, "isa_used", e->isa_used);
  il_jsonw_kstr(w, "isa_compiled", e->isa_compiled);
  il_jsonw_kint(w, "logical_cpus", e->logical_cpus);
  il_jsonw_key(w, "ram_bytes");
  if (e->ram_bytes >= 0) il_jsonw_int(w, e->ram_bytes);
  else il_jsonw_null(w);
  il_jsonw_kstr(w, "kernel", e->kernel);
  il_jsonw_kstr(w, "gpu", e->gpu);
  il_jsonw_obj_end(w);
}

il_status il_env_doctor_json(FILE *f, char *const *environ_list) {
  /* doctor runs in a child process: what it maps (the CUDA module and the libraries it links,
   * about 150 MiB resident) would otherwise stay in this process, inside the peak RSS of every
   * sample measured here and of every command forked from here (a child starts with its
   * parent's resident pages) */
  int fds[2];
  if (fflush(f) != 0) return il_error(IL_ERR_IO, "doctor snapshot: flush: %s", strerror(errno));
  if (pipe(fds) != 0) return il_error(IL_ERR_IO, "doctor snapshot: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    return il_error(IL_ERR_IO, "doctor snapshot: fork: %s", strerror(e));
  }
  if (pid == 0) {
    close(fds[0]);
    il_doctor_options o;
    il_doctor_options_default(&o, environ_list);
    il_doctor *dr = NULL;
    il_status st = il_doctor_run(&o, &dr);
    if (st == IL_OK) st = il_report_json(dr, f);
    if (st == IL_OK && fflush(f) != 0) st = il_error(IL_ERR_IO, "write failed: %s", strerror(errno));
    if (st != IL_OK) {
      const char *d = il_error_detail();
      ssize_t w = write(fds[1], d, strlen(d));
      (void)w;
    }
    _exit(st == IL_OK ? 0 : (int)st);
  }
  close(fds[1]);
  char detail[512];
  size_t n = 0;
  for (ssize_t k; n < sizeof detail - 1 && (k = read(fds[0], detail + n, sizeof detail - 1 - n)) != 0;)
    if (k > 0) n += (size_t)k;
    else if (errno != EINTR) break;
  detail[n] = 0;
  close(fds[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return IL_OK;
  const il_status st = WIFEXITED(ws) && WEXITSTATUS(ws) > 0 ? (il_status)WEXITSTATUS(ws) : IL_ERR_IO;
  return il_error(st, "doctor snapshot: %s", *detail ? detail : "the doctor process did not finish");
}
