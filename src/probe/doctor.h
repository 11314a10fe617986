/* probe/doctor: `inferlab doctor`: gathers the facts about the GPU stack once and runs every
 * check over them, each with a verdict, the evidence it rests on and, when not OK, one
 * actionable fix.
 *
 * il_doctor_run gathers facts (NVML and CUDA driver snapshots through dlopen'd tables,
 * sysfs/procfs/dev/etc files under the sysroot, the given environment, host facts) and then runs
 * the check groups in a fixed order; the check ids ("driver.nvml", "container.docker", ...) are
 * stable and documented in docs/doctor.md, and so is the JSON that probe/report writes. The
 * exit code of the command is the worst verdict: 0, 1 or 2.
 * Each failure class (probe/classes, one section of docs/doctor.md each) that a process can
 * observe maps to a check; a check records its class id.
 * Layers, each only calling the ones below it: probe/check (the record), probe/classes, and the
 * fact readers (probe/sysfs, nvml, cudadrv, host, visible, klog: the kernel log the machine
 * already wrote); probe/distro (per-distribution commands); probe/loader (which libcuda is
 * loaded) and probe/cgroup (containers beyond Docker, container-aware fix lines);
 * probe/gpufamily, probe/container, probe/platform, probe/health, probe/driver, probe/layout
 * (containerd/K3s/RKE2, GPU operator, Jetson) and probe/security (SELinux/AppArmor, toolkit vs
 * cgroup v2, CDI paths, the hook's user, /dev/shm) (the check groups); this file, which runs them. The group headers only name `struct il_doctor`; their
 * .c files read its fields here.
 * Not for: printing (probe/report), mapping pasted error text (probe/explain), monitoring.
 */
#ifndef IL_PROBE_DOCTOR_H
#define IL_PROBE_DOCTOR_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/status.h"
#include "probe/check.h"
#include "probe/cudadrv.h"
#include "probe/distro.h"
#include "probe/host.h"
#include "probe/nvml.h"
#include "probe/platform.h"
#include "probe/sysfs.h"
#include "probe/visible.h"

typedef struct {
  const char *sysroot;          /* NULL or "/" = the real machine */
  char *const *env;             /* borrowed "KEY=VALUE" list (NULL-terminated); NULL = empty */
  const char *nvml_lib;         /* NULL: INFERLAB_NVML_LIB from env, else libnvidia-ml.so.1 (real root only) */
  const char *cuda_lib;         /* NULL: INFERLAB_CUDA_LIB from env, else libcuda.so.1 (real root only) */
  /* Build facts; il_doctor_options_default fills them from il_build_info.h. */
  bool build_have_cuda;
  const char *build_cuda_version; /* "12.4", "" when none */
  const char *build_cuda_archs;   /* CMake CUDA_ARCHITECTURES style: "80;90-real;90-virtual", "" none */
  int cpu_threads;                /* threads the CPU backend will use; 0 = logical CPUs */
  /* Identity to judge device-node access for; used when identity_set. */
  bool identity_set;
  uid_t uid;
  gid_t gid;
  const gid_t *groups;
  int n_groups;
  int bandwidth_ms;             /* > 0: measure memory read bandwidth for about this long */
  bool allow_exec;              /* may run `nvcc --version` (real root only) */
} il_doctor_options;

typedef struct il_doctor {
  il_doctor_options opt;
  il_sysfs fs;
  il_check_list checks;         /* in report order; checks.oom: the report is incomplete */
  /* NVML */
  char nvml_path[1024], nvml_loaded[1024], nvml_error[512];
  il_nvml_snapshot_t nvml;
  /* CUDA driver API */
  char cuda_path[1024], cuda_loaded[1024], cuda_error[512];
  il_cudadrv_snapshot_t cuda;
  /* platform facts */
  il_pci_gpu pci[16];
  int n_pci;
  bool kmod_loaded, kmod_open, uvm_loaded, nouveau_loaded;
  char kmod_version[64];
  bool in_container;
  char container_engine[32];
  bool wsl;
  bool gpu_expected;            /* some sign that an NVIDIA GPU should be usable here */
  bool tegra;                   /* Jetson/Tegra board (probe/layout): integrated GPU, no PCI function */
  char l4t_release[32];         /* "R35.4.1", "" unknown */
  il_distro distro;
  il_host_info host;
  il_nvvis nvvis;
  il_cudavis cudavis;
  /* The kernel and audit log lines about the driver, containers and security modules
   * (probe/klog; owned, NULL when nothing was readable). */
  char *klog;
  size_t klog_len;
  char klog_sources[600];
} il_doctor;

/* Defaults: real root, the given env, build facts of this binary, no bandwidth measurement,
 * no exec. */
void il_doctor_options_default(il_doctor_options *o, char *const *env);
/* Runs every check. On success *out is a report the caller frees with il_doctor_free.
 * IL_ERR_OOM when memory runs out, IL_ERR_INVALID_ARG for a bad sysroot. Missing drivers,
 * libraries or files are findings, not errors. */
il_status il_doctor_run(const il_doctor_options *opt, il_doctor **out);
void il_doctor_free(il_doctor *dr);
/* The check with this id, or NULL. Borrowed from dr. */
const il_check *il_doctor_find(const il_doctor *dr, const char *id);
/* Worst verdict: 0 all OK, 1 warnings only, 2 at least one failure. */
int il_doctor_exit_code(const il_doctor *dr);

#endif
