/* probe/checks: `inferlab doctor`: every check of the GPU stack, each with a verdict, the
 * evidence it rests on and, when not OK, one actionable fix.
 *
 * il_doctor_run gathers facts once (NVML and CUDA driver snapshots through dlopen'd tables,
 * sysfs/procfs/dev/etc files under the sysroot, the given environment, host facts) and then runs
 * the checks in a fixed order; the check ids ("driver.nvml", "container.docker", ...) are
 * stable and documented in docs/doctor.md, and so is the JSON that probe/report writes.
 * Verdicts: OK (nothing to do; a check that does not apply on this machine is an OK marked
 * `na`, which the text report folds into one line), WARN (works, but something is degraded or
 * will bite later), FAIL (GPU work will not run as things are). The exit code of
 * the command is the worst verdict: 0, 1 or 2.
 * Each failure scenario of the research file (shared/research/gpu-stack-failures.md) that a
 * process can observe maps to a check; a check records that scenario's number. The classes
 * found beyond it (issue 17) live in their own files: probe/loader (which libcuda is loaded),
 * probe/cgroup (containers beyond Docker), probe/distro (per-distribution commands),
 * probe/health (PCIe, Xid, row remapping, persistence, Fabric Manager), probe/gpufamily (GPU
 * generation vs driver branch).
 * Not for: printing (probe/report), mapping pasted error text (probe/explain), monitoring.
 */
#ifndef IL_PROBE_CHECKS_H
#define IL_PROBE_CHECKS_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/status.h"
#include "probe/cudadrv.h"
#include "probe/host.h"
#include "probe/nvml.h"
#include "probe/sysfs.h"
#include "probe/visible.h"

typedef enum { IL_VERDICT_OK = 0, IL_VERDICT_WARN = 1, IL_VERDICT_FAIL = 2 } il_verdict;

#define IL_CHECK_MAX_EVIDENCE 12

typedef struct {
  char key[40];
  char value[240];
} il_evidence;

typedef struct {
  char id[32];          /* stable id: "driver.nvml" */
  il_verdict verdict;
  int scenario;         /* row of the research scenario table, 0 when none */
  char summary[400];    /* one line: what was found */
  char fix[900];        /* what to do, exact commands; "" when OK. Lines separated by '\n'. */
  int n_evidence;
  il_evidence evidence[IL_CHECK_MAX_EVIDENCE];
  bool na;              /* OK because the check does not apply here (no GPU, no docker, ...): reported compactly */
} il_check;

/* An NVIDIA PCI display function found in /sys/bus/pci/devices. */
typedef struct {
  char bdf[16];         /* "0000:01:00.0" */
  unsigned device_id;   /* 0x2330 */
  char driver[32];      /* "nvidia", "vfio-pci", "nouveau", "" (none) */
  char iommu_group[16];
} il_pci_gpu;

/* A file the dynamic loader would find for a soname ("libcuda.so.1"), in search order. */
typedef struct {
  char path[512];       /* sysroot-relative: "/opt/old/lib/libcuda.so.1" */
  char dir[256];        /* its directory */
  char target[512];     /* where its symlinks lead: "/opt/old/lib/libcuda.so.470.82.01" */
  char version[64];     /* from the target's file name, "" when it has none */
  char origin[160];     /* "LD_LIBRARY_PATH", "conda environment (CONDA_PREFIX)", "ld.so cache (FILE)", "system directory" */
  bool stub, compat;    /* in a toolkit stubs/ or a forward-compatibility compat/ directory */
} il_lib_candidate;

typedef enum {
  IL_DISTRO_UNKNOWN = 0,
  IL_DISTRO_UBUNTU,
  IL_DISTRO_DEBIAN,
  IL_DISTRO_FEDORA,
  IL_DISTRO_RHEL,   /* RHEL, Rocky, Alma, CentOS: NVIDIA's dnf repository */
  IL_DISTRO_SUSE,
  IL_DISTRO_ARCH,
} il_distro_family;

/* The distribution of the sysroot, from /etc/os-release. */
typedef struct {
  char id[32], id_like[64], version_id[32], pretty[128];
  il_distro_family family;
} il_distro;

/* Repairs whose command differs per distribution (probe/distro). */
typedef enum {
  IL_CMD_INSTALL_DRIVER,
  IL_CMD_REBUILD_MODULE,     /* arg: kernel release */
  IL_CMD_ENROLL_KEY,         /* Secure Boot: enroll the module signing key */
  IL_CMD_INITRAMFS,
  IL_CMD_HOLD,               /* keep driver packages from upgrading under a running module */
  IL_CMD_REINSTALL_USERSPACE,/* arg: driver version */
  IL_CMD_FABRICMANAGER,      /* arg: driver version */
  IL_CMD_INSTALL_TOOLKIT,
} il_distro_cmd;

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
  il_check *checks;
  int n_checks, cap;
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
  il_distro distro;
  il_host_info host;
  il_nvvis nvvis;
  il_cudavis cudavis;
  bool oom;                     /* a check could not be recorded (report incomplete) */
  il_check overflow;            /* where writes go after an allocation failure */
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
const char *il_verdict_name(il_verdict v);
/* Value of evidence `key` of check c, NULL when absent. */
const char *il_check_evidence(const il_check *c, const char *key);
/* Minimum Linux driver for a CUDA version "12.4": writes the full-feature ("toolkit driver")
 * minimum and the minor-version-compatibility floor of that major. Returns false for a
 * version the table does not know (e.g. "12.7", which NVIDIA never released). */
bool il_doctor_min_driver(const char *cuda_version, char *full, size_t nfull, char *mvc, size_t nmvc);

/* Internal, shared by the check files (checks.c, platform.c, container.c). */
il_check *il__check_add(il_doctor *dr, const char *id, il_verdict v, int scenario, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Same as il__check_add, for a check that does not apply on this machine (marked na). */
il_check *il__check_na(il_doctor *dr, const char *id, il_verdict v, int scenario, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void il__check_fix(il_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void il__check_ev(il_check *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void il__platform_facts(il_doctor *dr);
void il__platform_checks_kmod(il_doctor *dr);
void il__platform_checks_virt(il_doctor *dr);
void il__platform_checks_host(il_doctor *dr);
void il__container_facts(il_doctor *dr);
void il__container_checks(il_doctor *dr);
/* probe/loader: files the loader finds for soname, in its search order (max entries). */
int il__loader_search(const il_doctor *dr, const char *soname, il_lib_candidate *out, int max);
void il__check_loader(il_doctor *dr);
/* probe/gpufamily: GPU generation from the PCI device id. */
typedef enum {
  IL_GPU_UNKNOWN = 0, IL_GPU_KEPLER, IL_GPU_MAXWELL, IL_GPU_PASCAL, IL_GPU_VOLTA,
  IL_GPU_TURING, IL_GPU_AMPERE, IL_GPU_HOPPER, IL_GPU_ADA, IL_GPU_BLACKWELL,
} il_gpu_family;
il_gpu_family il_gpu_family_of(unsigned device_id);
const char *il_gpu_family_name(il_gpu_family f);
void il__check_branch(il_doctor *dr);
/* probe/health: pci.link, gpu.xid, gpu.remap, gpu.persistence, gpu.fabric */
void il__health_checks(il_doctor *dr);
/* probe/distro */
void il__distro_facts(il_doctor *dr);
const char *il_distro_family_name(il_distro_family f);
/* Writes the command for `what` on this distribution into buf and returns buf. */
const char *il__distro_cmd(const il_doctor *dr, il_distro_cmd what, const char *arg, char *buf, size_t n);
void il__check_distro(il_doctor *dr);
void il__check_wsl_driver(il_doctor *dr);
/* probe/cgroup */
int il__proc_devices_major(const il_sysfs *fs, const char *name); /* character major of `name` in /proc/devices, -1 */
void il__fix_request_gpus(const il_doctor *dr, il_check *c);       /* "start the container with GPUs", for the engine found */
const char *il__engine_recreate(const il_doctor *dr);             /* how to recreate this container, for its engine */
void il__check_cgroup_devices(il_doctor *dr);
void il__check_lxc_configs(il_doctor *dr);
void il__check_rootless(il_doctor *dr);
void il__check_systemd_units(il_doctor *dr);
/* Number of usable NVML devices (handle_rc == 0). */
int il__doctor_gpu_count(const il_doctor *dr);

#endif
