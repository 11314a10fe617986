/* tests/sysroots/sysroot: builds fixture machine trees for the doctor tests at run time.
 *
 * A sysroot is a temporary directory laid out like / (proc/, sys/, dev/, etc/, usr/) holding
 * just the files a scenario needs; the doctor reads it through --sysroot. Building the trees in
 * code keeps binary files (and device nodes, which need root) out of the repository: device
 * nodes are regular files with the wanted mode, which probe/sysfs accepts under a sysroot.
 * The fake NVML/CUDA libraries are copied into each tree under versioned names
 * (libnvidia-ml.so.535.54.03) so the doctor sees the file names a real install has, and each
 * scenario loads its own copy. Header-only: static helpers shared by the test_doctor*.c files.
 */
#ifndef IL_TESTS_SYSROOT_H
#define IL_TESTS_SYSROOT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static inline void sr_mkdirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(tmp, 0755);
      *p = '/';
    }
  mkdir(tmp, 0755);
}

static inline void sr_parent(const char *path) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *s = strrchr(dir, '/');
  if (s) {
    *s = 0;
    sr_mkdirs(dir);
  }
}

/* Writes printf-formatted content to root/rel, creating directories. */
__attribute__((format(printf, 3, 4))) static inline void sr_write(const char *root, const char *rel, const char *fmt, ...) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s", root, rel);
  sr_parent(path);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "sysroot: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

/* An empty file (a stand-in for a device node or a marker like /.dockerenv). */
static inline void sr_touch(const char *root, const char *rel) { sr_write(root, rel, "%s", ""); }

static inline void sr_chmod(const char *root, const char *rel, mode_t mode) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s", root, rel);
  chmod(path, mode);
}

static inline void sr_rm(const char *root, const char *rel) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s", root, rel);
  unlink(path);
}

static inline void sr_link(const char *root, const char *rel, const char *target) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s", root, rel);
  sr_parent(path);
  unlink(path);
  if (symlink(target, path) != 0) fprintf(stderr, "sysroot: symlink %s: %s\n", path, strerror(errno));
}

/* An executable placeholder (for PATH lookups of toolkit binaries). */
static inline void sr_exe(const char *root, const char *rel) {
  sr_write(root, rel, "#!/bin/sh\nexit 0\n");
  sr_chmod(root, rel, 0755);
}

/* Copies file src to root/rel; returns the absolute destination in a static buffer. */
static inline const char *sr_copy(const char *root, const char *rel, const char *src) {
  static char dst[PATH_MAX];
  snprintf(dst, sizeof dst, "%s%s", root, rel);
  sr_parent(dst);
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  if (!in || !out) {
    fprintf(stderr, "sysroot: copy %s -> %s failed\n", src, dst);
    if (in) fclose(in);
    if (out) fclose(out);
    return dst;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  fclose(out);
  chmod(dst, 0755);
  return dst;
}

static inline int sr__rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static inline void sr_destroy(const char *root) {
  if (root && strncmp(root, "/tmp/", 5) == 0) nftw(root, sr__rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A plain host: 4-CPU AVX2 machine, 32 GiB, kernel 6.1.0-test, no container, /etc/group that
 * names the test's own gid "video". Returns a new temporary root (free with sr_destroy). */
static inline const char *sr_new_host(void) {
  const char *t = il_test_tmpdir();
  static char roots[64][PATH_MAX];
  static int next;
  char *root = roots[next++ % 64];
  snprintf(root, PATH_MAX, "%s", t);
  char cpu[4096] = "";
  for (int i = 0; i < 4; i++) {
    size_t l = strlen(cpu);
    snprintf(cpu + l, sizeof cpu - l,
             "processor\t: %d\nmodel name\t: Test CPU @ 3.00GHz\nflags\t\t: fpu sse4_2 avx avx2 fma f16c\n\n", i);
  }
  sr_write(root, "/proc/cpuinfo", "%s", cpu);
  sr_write(root, "/proc/meminfo", "MemTotal:       33554432 kB\nMemAvailable:   30000000 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n");
  sr_write(root, "/proc/sys/kernel/osrelease", "6.1.0-test\n");
  sr_write(root, "/proc/1/cgroup", "0::/init.scope\n");
  sr_write(root, "/proc/modules", "ext4 1 0 - Live 0x0\n");
  sr_write(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  /* The fixture files belong to the test's own group; call it "video" like a distro would. */
  if (getgid() == 0) sr_write(root, "/etc/group", "video:x:0:\n");
  else sr_write(root, "/etc/group", "root:x:0:\nvideo:x:%u:\n", (unsigned)getgid());
  sr_mkdirs(root);
  return root;
}

/* An NVIDIA display function at bdf with PCI device id `dev` bound to `driver` ("" = none). */
static inline void sr_pci_gpu(const char *root, const char *bdf, unsigned dev, const char *driver) {
  char rel[256];
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/vendor", bdf);
  sr_write(root, rel, "0x10de\n");
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/class", bdf);
  sr_write(root, rel, "0x030200\n");
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/device", bdf);
  sr_write(root, rel, "0x%04x\n", dev);
  if (driver && *driver) {
    char target[256];
    snprintf(target, sizeof target, "../../../bus/pci/drivers/%s", driver);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/driver", bdf);
    sr_link(root, rel, target);
  }
}

/* A loaded driver: /proc/driver/nvidia/version, modules nvidia (+ nvidia_uvm), /dev nodes for
 * n GPUs, all mode 0666. */
static inline void sr_driver(const char *root, const char *version, int open_module, int n_gpus, int uvm) {
  if (open_module)
    sr_write(root, "/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (dvs-builder@U16)  Tue Jun  6 22:20:39 UTC 2023\n"
             "GCC version:  gcc version 12.2.0\n", version);
  else
    sr_write(root, "/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jun  6 22:20:39 UTC 2023\nGCC version:  gcc version 12.2.0\n", version);
  sr_write(root, "/sys/module/nvidia/version", "%s\n", version);
  sr_write(root, "/proc/modules", "nvidia 1 0 - Live 0x0\n%snvidia_modeset 1 0 - Live 0x0\n", uvm ? "nvidia_uvm 1 0 - Live 0x0\n" : "");
  sr_touch(root, "/dev/nvidiactl");
  sr_chmod(root, "/dev/nvidiactl", 0666);
  for (int i = 0; i < n_gpus; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "/dev/nvidia%d", i);
    sr_touch(root, rel);
    sr_chmod(root, rel, 0666);
  }
  if (uvm) {
    sr_touch(root, "/dev/nvidia-uvm");
    sr_chmod(root, "/dev/nvidia-uvm", 0666);
  }
}

/* Path of a built fake library: $IL_FAKE_NVML_LIB / $IL_FAKE_CUDA_LIB (set by CMake), else
 * fakes/ next to the test binary. */
static inline const char *sr_fake_lib(const char *which) {
  static char path[2][PATH_MAX];
  int k = !strcmp(which, "nvml") ? 0 : 1;
  const char *env = getenv(k == 0 ? "IL_FAKE_NVML_LIB" : "IL_FAKE_CUDA_LIB");
  if (env && *env) {
    snprintf(path[k], PATH_MAX, "%s", env);
    return path[k];
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = 0;
  char *s = strrchr(exe, '/');
  if (s) *s = 0;
  snprintf(path[k], PATH_MAX, "%.3000s/fakes/libil_fake_%s.so", exe, which);
  return access(path[k], R_OK) == 0 ? path[k] : NULL;
}

/* Installs the fake NVML as root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<ver> with its soname
 * link libnvidia-ml.so.1; returns the versioned path. */
static inline const char *sr_install_nvml(const char *root, const char *ver, char *out, size_t n) {
  char rel[256];
  snprintf(rel, sizeof rel, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s", ver);
  snprintf(out, n, "%s", sr_copy(root, rel, sr_fake_lib("nvml")));
  char target[128];
  snprintf(target, sizeof target, "libnvidia-ml.so.%s", ver);
  sr_link(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", target); /* the soname link ldconfig makes */
  return out;
}

/* Installs the fake libcuda at root/<rel_dir>/libcuda.so.<ver> with the soname link
 * libcuda.so.1 beside it; returns the versioned path. */
static inline const char *sr_install_cuda(const char *root, const char *rel_dir, const char *ver, char *out, size_t n) {
  char rel[256];
  snprintf(rel, sizeof rel, "%s/libcuda.so.%s", rel_dir, ver);
  snprintf(out, n, "%s", sr_copy(root, rel, sr_fake_lib("cuda")));
  char target[128], link[256];
  snprintf(target, sizeof target, "libcuda.so.%s", ver);
  snprintf(link, sizeof link, "%s/libcuda.so.1", rel_dir);
  sr_link(root, link, target);
  return out;
}

/* Writes the scenario file for the fakes and points IL_FAKE_GPU at it. */
__attribute__((format(printf, 2, 3))) static inline void sr_scenario(const char *root, const char *fmt, ...) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/fake_gpu.txt", root);
  FILE *f = fopen(path, "w");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
  setenv("IL_FAKE_GPU", path, 1);
}

/* Two healthy A100 80GB on driver 535.54.03 (CUDA 12.2). */
#define SR_TWO_A100                                                                                     \
  "driver=535.54.03\nnvml_version=12.535.54.03\ncuda_driver=12020\ncount=2\n"                            \
  "dev0.name=NVIDIA A100-SXM4-80GB\ndev0.uuid=GPU-aaaa1111-2222-3333-4444-555555555555\n"              \
  "dev0.pci=00000000:07:00.0\ndev0.pci_id=0x20b210de\ndev0.mem_total=85899345920\ndev0.mem_used=4194304\n" \
  "dev0.util_gpu=3\ndev0.util_mem=1\ndev0.temp=34\ndev0.power_mw=61000\ndev0.power_limit_mw=400000\n"  \
  "dev0.clock_sm=1410\ndev0.clock_mem=1593\ndev0.clock_gfx=1410\ndev0.cc=8.0\ndev0.mig=0\n"             \
  "dev0.ecc_vol=0\ndev0.ecc_agg=0\ndev0.retired_pending=0\ndev0.compute_mode=0\ndev0.persistence=1\n"  \
  "dev1.name=NVIDIA A100-SXM4-80GB\ndev1.uuid=GPU-bbbb1111-2222-3333-4444-555555555555\n"              \
  "dev1.pci=00000000:0B:00.0\ndev1.pci_id=0x20b210de\ndev1.mem_total=85899345920\ndev1.mem_used=4194304\n" \
  "dev1.util_gpu=0\ndev1.util_mem=0\ndev1.temp=31\ndev1.power_mw=58000\ndev1.power_limit_mw=400000\n"  \
  "dev1.clock_sm=1410\ndev1.clock_mem=1593\ndev1.clock_gfx=1410\ndev1.cc=8.0\ndev1.mig=0\n"             \
  "dev1.ecc_vol=0\ndev1.ecc_agg=0\ndev1.retired_pending=0\ndev1.compute_mode=0\ndev1.persistence=1\n"  \
  "cuda.init=0\n"

#endif
