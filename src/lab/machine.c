/* lab/machine: fixture machines in a broken and a repaired state, the doctor run on them, and
 * the difference between two of them. See machine.h. */
#include "lab/machine.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memory/mem.h"

#ifndef IL_LEARN_FAKES_REL
#define IL_LEARN_FAKES_REL "../lib/inferlab/learn"
#endif

static const il_machine_scenario il__scenarios[] = {
    {"cuda-toolkit", "runtime.nvcc", "install the CUDA toolkit that matches the driver (12.2 instead of 12.6)"},
    {"cuda-driver", "driver.version_match", "reboot (or reload the nvidia modules) so the kernel module matches the upgraded libraries"},
    {"compute-capability", "runtime.arch", "rebuild with -DIL_CUDA_ARCHS=\"75;80;90\" so the binary has kernels for sm_75"},
    {"nvidia-container-toolkit", "container.toolkit", "sudo apt install nvidia-container-toolkit"},
    {"nvidia-runtime", "container.containerd", "sudo nvidia-ctk runtime configure --runtime=containerd"},
    {"default-runtime", "container.docker", "\"default-runtime\": \"nvidia\" in /etc/docker/daemon.json (nvidia-ctk runtime configure --set-as-default)"},
    {"gpu-device", "devnodes", "device nodes readable and writable by the user (mode 0666, the driver's default)"},
    {"gpu-passthrough", "virt.pci", "give the GPUs back to the host: drop vfio-pci.ids= from the kernel command line and bind them to nvidia"},
    {"nvidia-visible-devices", "visibility.nvidia", "start the container with NVIDIA_VISIBLE_DEVICES=all (docker run --gpus all)"},
};

int il_machine_count(void) { return (int)(sizeof il__scenarios / sizeof il__scenarios[0]); }

const il_machine_scenario *il_machine_at(int i) { return i >= 0 && i < il_machine_count() ? &il__scenarios[i] : NULL; }

const il_machine_scenario *il_machine_find(const char *name) {
  for (int i = 0; i < il_machine_count(); i++)
    if (!strcmp(il__scenarios[i].name, name)) return &il__scenarios[i];
  return NULL;
}

/* ---- the simulated driver libraries ------------------------------------------------------ */

bool il_machine_fake_lib(const char *which, char *buf, size_t n) {
  const bool nvml = !strcmp(which, "nvml");
  const char *env = getenv(nvml ? "INFERLAB_FAKE_NVML_LIB" : "INFERLAB_FAKE_CUDA_LIB");
  if (env && *env && access(env, R_OK) == 0) {
    snprintf(buf, n, "%s", env);
    return true;
  }
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return false;
  exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  const char *dirs[] = {"fakes", IL_LEARN_FAKES_REL};
  for (int i = 0; i < 2; i++) {
    snprintf(buf, n, "%.3000s/%s/libil_fake_%s.so", exe, dirs[i], nvml ? "nvml" : "cuda");
    if (access(buf, R_OK) == 0) return true;
  }
  return false;
}

/* ---- writing a tree ------------------------------------------------------------------------ */

typedef struct {
  char root[PATH_MAX];
  il_status st; /* the first failure; later writes are skipped */
} il__tree;

static void il__mkdirs(il__tree *t, const char *abs) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", abs);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST && t->st == IL_OK)
      t->st = il_error(IL_ERR_OUTPUT, "%s: cannot create the directory: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST && t->st == IL_OK)
    t->st = il_error(IL_ERR_OUTPUT, "%s: cannot create the directory: %s", tmp, strerror(errno));
}

static void il__path(const il__tree *t, const char *rel, char *out, size_t n) { snprintf(out, n, "%s%s", t->root, rel); }

static void il__parent(il__tree *t, const char *abs) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", abs);
  char *s = strrchr(dir, '/');
  if (s && s != dir) {
    *s = 0;
    il__mkdirs(t, dir);
  }
}

/* root/rel = printf text, with the mode given (0 = 0644). */
__attribute__((format(printf, 4, 5))) static void il__write(il__tree *t, const char *rel, mode_t mode, const char *fmt, ...) {
  if (t->st != IL_OK) return;
  char path[PATH_MAX];
  il__path(t, rel, path, sizeof path);
  il__parent(t, path);
  FILE *f = fopen(path, "w");
  if (!f) {
    t->st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  if (fclose(f) != 0) t->st = il_error(IL_ERR_OUTPUT, "%s: write failed", path);
  else chmod(path, mode ? mode : 0644);
}

static void il__link(il__tree *t, const char *rel, const char *target) {
  if (t->st != IL_OK) return;
  char path[PATH_MAX];
  il__path(t, rel, path, sizeof path);
  il__parent(t, path);
  unlink(path);
  if (symlink(target, path) != 0) t->st = il_error(IL_ERR_OUTPUT, "%s: cannot create the link: %s", path, strerror(errno));
}

static void il__copy(il__tree *t, const char *rel, const char *src) {
  if (t->st != IL_OK) return;
  char path[PATH_MAX];
  il__path(t, rel, path, sizeof path);
  il__parent(t, path);
  FILE *in = fopen(src, "rb");
  if (!in) {
    t->st = il_error(IL_ERR_NOT_FOUND, "%s: cannot read the simulated driver library: %s", src, strerror(errno));
    return;
  }
  FILE *out = fopen(path, "wb");
  if (!out) {
    fclose(in);
    t->st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
    return;
  }
  char buf[65536];
  size_t k;
  bool ok = true;
  while ((k = fread(buf, 1, sizeof buf, in)) > 0) ok = ok && fwrite(buf, 1, k, out) == k;
  fclose(in);
  if (fclose(out) != 0 || !ok) t->st = il_error(IL_ERR_OUTPUT, "%s: write failed", path);
  else chmod(path, 0755);
}

/* An executable placeholder for PATH lookups (toolkit binaries, dockerd). */
static void il__exe(il__tree *t, const char *rel) { il__write(t, rel, 0755, "#!/bin/sh\nexit 0\n"); }

/* The simulated library `which` installed as rel_dir/NAME.so.VER with its soname link. */
static void il__install_lib(il__tree *t, const char *which, const char *ver) {
  if (t->st != IL_OK) return;
  char src[PATH_MAX];
  if (!il_machine_fake_lib(which, src, sizeof src)) {
    t->st = il_error(IL_ERR_NOT_FOUND,
                     "the simulated %s library (libil_fake_%s.so) is not beside this inferlab: looked in fakes/ and %s/ "
                     "next to the binary; set INFERLAB_FAKE_%s_LIB to its path",
                     !strcmp(which, "nvml") ? "NVML" : "CUDA driver", which, IL_LEARN_FAKES_REL,
                     !strcmp(which, "nvml") ? "NVML" : "CUDA");
    return;
  }
  const char *base = !strcmp(which, "nvml") ? "libnvidia-ml" : "libcuda";
  char rel[256], target[128], link[256];
  snprintf(rel, sizeof rel, "/usr/lib/x86_64-linux-gnu/%s.so.%s", base, ver);
  snprintf(target, sizeof target, "%s.so.%s", base, ver);
  snprintf(link, sizeof link, "/usr/lib/x86_64-linux-gnu/%s.so.1", base);
  il__copy(t, rel, src);
  il__link(t, link, target);
}

/* A host: 4 CPUs with AVX2, 32 GiB, kernel 6.1.0-learn, no container; the lesson's user is
 * uid/gid 4242 ("learner"); the files' own group is called "video". */
static void il__host(il__tree *t) {
  char cpu[2048] = "";
  for (int i = 0; i < 4; i++) {
    size_t l = strlen(cpu);
    snprintf(cpu + l, sizeof cpu - l, "processor\t: %d\nmodel name\t: Lab CPU @ 3.00GHz\nflags\t\t: fpu sse4_2 avx avx2 fma f16c\n\n", i);
  }
  il__write(t, "/proc/cpuinfo", 0, "%s", cpu);
  il__write(t, "/proc/meminfo", 0,
            "MemTotal:       33554432 kB\nMemAvailable:   30000000 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n");
  il__write(t, "/proc/sys/kernel/osrelease", 0, "6.1.0-learn\n");
  il__write(t, "/proc/1/cgroup", 0, "0::/init.scope\n");
  il__write(t, "/proc/modules", 0, "ext4 1 0 - Live 0x0\n");
  il__write(t, "/proc/cmdline", 0, "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n");
  il__write(t, "/sys/kernel/mm/transparent_hugepage/enabled", 0, "always [madvise] never\n");
  il__write(t, "/etc/os-release", 0, "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n");
  il__write(t, "/etc/group", 0, "%svideo:x:%u:\nlearner:x:4242:\n", getgid() == 0 ? "" : "root:x:0:\n", (unsigned)getgid());
  il__write(t, "/.learn/identity", 0, "uid=4242\ngid=4242\ngroups=4242\n");
  il__write(t, "/.learn/build", 0, "have_cuda=1\ncuda_version=12.2\narchs=80;90\n");
}

static void il__environ(il__tree *t, const char *extra) {
  il__write(t, "/.learn/environ", 0, "PATH=/usr/local/bin:/usr/bin:/bin\n%s", extra);
}

/* An NVIDIA display function at bdf with PCI device id dev, bound to driver ("" = none). */
static void il__pci_gpu(il__tree *t, const char *bdf, unsigned dev, const char *driver) {
  char rel[256];
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/vendor", bdf);
  il__write(t, rel, 0, "0x10de\n");
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/class", bdf);
  il__write(t, rel, 0, "0x030200\n");
  snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/device", bdf);
  il__write(t, rel, 0, "0x%04x\n", dev);
  if (driver && *driver) {
    char target[128];
    snprintf(target, sizeof target, "../../../bus/pci/drivers/%s", driver);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/driver", bdf);
    il__link(t, rel, target);
  }
}

/* The loaded kernel module of `version` (proprietary flavor, with nvidia_uvm) and device nodes
 * for n GPUs with `mode`. */
static void il__driver(il__tree *t, const char *version, int n_gpus, mode_t mode) {
  il__write(t, "/proc/driver/nvidia/version", 0,
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Jun  6 22:20:39 UTC 2023\nGCC version:  gcc version 12.2.0\n",
            version);
  il__write(t, "/sys/module/nvidia/version", 0, "%s\n", version);
  il__write(t, "/proc/modules", 0, "nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\nnvidia_modeset 1 0 - Live 0x0\n");
  il__write(t, "/dev/nvidiactl", mode, "%s", "");
  for (int i = 0; i < n_gpus; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "/dev/nvidia%d", i);
    il__write(t, rel, mode, "%s", "");
  }
  il__write(t, "/dev/nvidia-uvm", mode, "%s", "");
}

/* The scripted GPU world: two GPUs of one model on driver 535.54.03 (CUDA 12.2), with extra
 * lines appended (later keys win). */
static void il__gpus(il__tree *t, const char *name, const char *cc, unsigned pci_dev, const char *extra) {
  char devs[2048] = "";
  for (int i = 0; i < 2; i++) {
    size_t l = strlen(devs);
    snprintf(devs + l, sizeof devs - l,
             "dev%d.name=%s\ndev%d.uuid=GPU-%c%c%c%c1111-2222-3333-4444-555555555555\ndev%d.pci=00000000:%s:00.0\n"
             "dev%d.pci_id=0x%04x10de\ndev%d.mem_total=85899345920\ndev%d.mem_used=4194304\ndev%d.util_gpu=0\n"
             "dev%d.util_mem=0\ndev%d.temp=33\ndev%d.power_mw=60000\ndev%d.power_limit_mw=400000\ndev%d.clock_sm=1410\n"
             "dev%d.clock_mem=1593\ndev%d.clock_gfx=1410\ndev%d.cc=%s\ndev%d.mig=0\ndev%d.ecc_vol=0\ndev%d.ecc_agg=0\n"
             "dev%d.retired_pending=0\ndev%d.compute_mode=0\ndev%d.persistence=1\n",
             i, name, i, 'a' + i, 'a' + i, 'a' + i, 'a' + i, i, i ? "0B" : "07", i, pci_dev, i, i, i, i, i, i, i, i, i, i, i,
             cc, i, i, i, i, i, i);
  }
  il__write(t, "/.learn/gpu", 0, "driver=535.54.03\nnvml_version=12.535.54.03\ncuda_driver=12020\ncount=2\n%scuda.init=0\n%s", devs,
            extra);
}

/* A healthy host with two GPUs (default: A100 80GB, sm_80) on driver 535.54.03; the scenarios
 * change one thing of it. */
static void il__healthy(il__tree *t, const char *name, const char *cc, unsigned pci_dev, const char *gpu_extra) {
  il__host(t);
  il__pci_gpu(t, "0000:07:00.0", pci_dev, "nvidia");
  il__pci_gpu(t, "0000:0b:00.0", pci_dev, "nvidia");
  il__driver(t, "535.54.03", 2, 0666);
  il__install_lib(t, "nvml", "535.54.03");
  il__install_lib(t, "cuda", "535.54.03");
  il__gpus(t, name, cc, pci_dev, gpu_extra);
}

#define IL__A100 "NVIDIA A100-SXM4-80GB", "8.0", 0x20b2

static void il__toolkit_bins(il__tree *t) {
  il__exe(t, "/usr/bin/nvidia-ctk");
  il__exe(t, "/usr/bin/nvidia-container-runtime");
  il__exe(t, "/usr/bin/nvidia-container-runtime-hook");
  il__exe(t, "/usr/bin/nvidia-container-cli");
}

il_status il_machine_build(const char *name, bool fixed, const char *dir) {
  const il_machine_scenario *sc = il_machine_find(name);
  if (!sc) return il_error(IL_ERR_NOT_FOUND, "no machine scenario '%s'", name);
  il__tree t = {.st = IL_OK};
  snprintf(t.root, sizeof t.root, "%s", dir);
  il__mkdirs(&t, dir);
  if (!strcmp(name, "cuda-toolkit")) {
    /* nvcc 12.6 on a driver that supports CUDA 12.2: what it builds needs a newer driver */
    il__healthy(&t, IL__A100, "");
    il__environ(&t, "");
    il__exe(&t, "/usr/local/cuda/bin/nvcc");
    il__write(&t, "/usr/local/cuda/version.json", 0, "{\n  \"cuda\": {\n    \"name\": \"CUDA SDK\",\n    \"version\": \"%s\"\n  }\n}\n",
              fixed ? "12.2.140" : "12.6.77");
  } else if (!strcmp(name, "cuda-driver")) {
    /* the driver packages were upgraded to 535.54.03 while the 530.30.02 module stays loaded */
    il__healthy(&t, IL__A100, fixed ? "" : "nvml.init=18\ncuda.init=803\n");
    il__environ(&t, "");
    if (!fixed) il__driver(&t, "530.30.02", 2, 0666);
  } else if (!strcmp(name, "compute-capability")) {
    /* two Tesla T4 (sm_75) and a build with kernels for sm_80 and sm_90 only */
    il__healthy(&t, "Tesla T4", "7.5", 0x1eb8, "");
    il__environ(&t, "");
    il__write(&t, "/.learn/build", 0, "have_cuda=1\ncuda_version=12.2\narchs=%s\n", fixed ? "75;80;90" : "80;90");
  } else if (!strcmp(name, "nvidia-container-toolkit")) {
    /* docker is installed, the toolkit that gives containers the GPU is not */
    il__healthy(&t, IL__A100, "");
    il__environ(&t, "");
    il__exe(&t, "/usr/bin/dockerd");
    il__write(&t, "/etc/docker/daemon.json", 0, "{\n  \"log-driver\": \"json-file\"\n}\n");
    if (fixed) il__toolkit_bins(&t);
  } else if (!strcmp(name, "nvidia-runtime")) {
    /* a containerd node with the toolkit, but containerd does not know the nvidia runtime */
    il__healthy(&t, IL__A100, "");
    il__environ(&t, "");
    il__toolkit_bins(&t);
    il__exe(&t, "/usr/bin/containerd");
    il__write(&t, "/etc/containerd/config.toml", 0,
              "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n\n"
              "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n%s",
              fixed ? "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = "
                      "\"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n"
                      "  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n"
                    : "");
  } else if (!strcmp(name, "default-runtime")) {
    /* docker has the nvidia runtime, but a plain `docker run` uses runc */
    il__healthy(&t, IL__A100, "");
    il__environ(&t, "");
    il__toolkit_bins(&t);
    il__exe(&t, "/usr/bin/dockerd");
    il__write(&t, "/etc/docker/daemon.json", 0,
              "{\n%s  \"runtimes\": {\n    \"nvidia\": {\n      \"args\": [],\n      \"path\": \"nvidia-container-runtime\"\n    }\n  }\n}\n",
              fixed ? "  \"default-runtime\": \"nvidia\",\n" : "");
  } else if (!strcmp(name, "gpu-device")) {
    /* the device nodes are 0660 root:video and the user is not in video: NVML gets no permission */
    il__healthy(&t, IL__A100, fixed ? "" : "nvml.init=4\n");
    il__environ(&t, "");
    if (!fixed) il__driver(&t, "535.54.03", 2, 0660);
  } else if (!strcmp(name, "gpu-passthrough")) {
    /* both GPUs are bound to vfio-pci for a VM: the host driver sees none */
    il__healthy(&t, IL__A100, fixed ? "" : "count=0\ncuda.init=100\n");
    il__environ(&t, "");
    if (!fixed) {
      il__link(&t, "/sys/bus/pci/devices/0000:07:00.0/driver", "../../../bus/pci/drivers/vfio-pci");
      il__link(&t, "/sys/bus/pci/devices/0000:0b:00.0/driver", "../../../bus/pci/drivers/vfio-pci");
      il__write(&t, "/proc/cmdline", 0, "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet intel_iommu=on vfio-pci.ids=10de:20b2\n");
      il__write(&t, "/proc/modules", 0, "nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\nvfio_pci 1 0 - Live 0x0\n");
    }
  } else if (!strcmp(name, "nvidia-visible-devices")) {
    /* inside a docker container started with NVIDIA_VISIBLE_DEVICES=void: the runtime injects
     * nothing; with =all it mounts the driver libraries and device nodes */
    il__host(&t);
    il__write(&t, "/.dockerenv", 0, "%s", "");
    il__write(&t, "/proc/1/cgroup", 0, "0::/docker/0123456789abcdef\n");
    il__pci_gpu(&t, "0000:07:00.0", 0x20b2, "nvidia");
    il__pci_gpu(&t, "0000:0b:00.0", 0x20b2, "nvidia");
    il__environ(&t, fixed ? "NVIDIA_VISIBLE_DEVICES=all\n" : "NVIDIA_VISIBLE_DEVICES=void\n");
    if (fixed) {
      il__driver(&t, "535.54.03", 2, 0666);
      il__write(&t, "/proc/modules", 0, "%s", ""); /* a container sees no module list of its own */
      il__install_lib(&t, "nvml", "535.54.03");
      il__install_lib(&t, "cuda", "535.54.03");
      il__gpus(&t, IL__A100, "");
    }
  }
  return t.st;
}

/* ---- the doctor on a tree ------------------------------------------------------------------ */

static il_status il__read_small(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) return il_error(IL_ERR_NOT_FOUND, "%s: %s (not a lesson machine)", path, strerror(errno));
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = 0;
  fclose(f);
  return IL_OK;
}

/* Value of `key=` in a key=value text, copied into out ("" when absent). */
static void il__kv(const char *text, const char *key, char *out, size_t n) {
  out[0] = 0;
  size_t kl = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (!strncmp(p, key, kl) && p[kl] == '=') {
      const char *v = p + kl + 1;
      size_t l = strcspn(v, "\n");
      snprintf(out, n, "%.*s", (int)(l < n ? l : n - 1), v);
      return;
    }
  }
}

void il_machine_report_free(il_machine_report *r) {
  il_doctor_free(r->dr);
  il_mem_free(r->env_text);
  il_mem_free(r->env);
  memset(r, 0, sizeof *r);
}

il_status il_machine_doctor(const char *dir, il_machine_report *out) {
  memset(out, 0, sizeof *out);
  char path[PATH_MAX], build[512], ident[256], v[256];
  snprintf(path, sizeof path, "%s/.learn/build", dir);
  IL_TRY(il__read_small(path, build, sizeof build));
  snprintf(path, sizeof path, "%s/.learn/identity", dir);
  IL_TRY(il__read_small(path, ident, sizeof ident));
  out->env_text = il_mem_alloc(IL_MEM_OTHER, 8192, "machine environ");
  out->env = il_mem_calloc(IL_MEM_OTHER, sizeof *out->env * 64, "machine environ list");
  if (!out->env_text || !out->env) {
    il_machine_report_free(out);
    return IL_ERR_OOM;
  }
  snprintf(path, sizeof path, "%s/.learn/environ", dir);
  il_status st = il__read_small(path, out->env_text, 8192);
  if (st != IL_OK) {
    il_machine_report_free(out);
    return st;
  }
  int n_env = 0, line = 1;
  for (char *p = out->env_text; *p && n_env < 63; line++) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    if (*p && !strchr(p, '=')) {
      il_machine_report_free(out);
      return il_error(IL_ERR_FORMAT, "%s/.learn/environ:%d: expected NAME=VALUE", dir, line);
    }
    if (*p) out->env[n_env++] = p;
    if (!nl) break;
    p = nl + 1;
  }
  il_doctor_options o;
  il_doctor_options_default(&o, out->env);
  o.sysroot = dir;
  char cuda_version[32], archs[128];
  il__kv(build, "have_cuda", v, sizeof v);
  o.build_have_cuda = !strcmp(v, "1");
  il__kv(build, "cuda_version", cuda_version, sizeof cuda_version);
  il__kv(build, "archs", archs, sizeof archs);
  o.build_cuda_version = cuda_version;
  o.build_cuda_archs = archs;
  o.cpu_threads = 4;
  static const gid_t groups[] = {4242};
  o.identity_set = true;
  il__kv(ident, "uid", v, sizeof v);
  o.uid = (uid_t)strtoul(v, NULL, 10);
  il__kv(ident, "gid", v, sizeof v);
  o.gid = (gid_t)strtoul(v, NULL, 10);
  o.groups = groups;
  o.n_groups = 1;
  /* the simulated libraries inside the tree, by their versioned file names */
  char nvml[PATH_MAX] = "", cuda[PATH_MAX] = "", lib[PATH_MAX + 64];
  snprintf(lib, sizeof lib, "%s/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", dir);
  if (access(lib, R_OK) == 0 && realpath(lib, nvml)) o.nvml_lib = nvml;
  snprintf(lib, sizeof lib, "%s/usr/lib/x86_64-linux-gnu/libcuda.so.1", dir);
  if (access(lib, R_OK) == 0 && realpath(lib, cuda)) o.cuda_lib = cuda;
  /* the libraries read their GPU world from IL_FAKE_GPU at each init */
  char gpu[PATH_MAX + 16], *old = getenv("IL_FAKE_GPU");
  char saved[PATH_MAX] = "";
  if (old) snprintf(saved, sizeof saved, "%s", old);
  snprintf(gpu, sizeof gpu, "%s/.learn/gpu", dir);
  setenv("IL_FAKE_GPU", gpu, 1);
  st = il_doctor_run(&o, &out->dr);
  if (old) setenv("IL_FAKE_GPU", saved, 1);
  else unsetenv("IL_FAKE_GPU");
  if (st != IL_OK) il_machine_report_free(out);
  return st;
}

/* ---- differences and the rollback ---------------------------------------------------------- */

typedef struct {
  char (*paths)[512];
  int n, cap;
  il_status st;
} il__list;

static void il__walk(const char *root, const char *rel, il__list *l) {
  char abs[PATH_MAX];
  snprintf(abs, sizeof abs, "%s%s", root, rel);
  DIR *d = opendir(abs);
  if (!d) {
    if (l->st == IL_OK) l->st = il_error(IL_ERR_IO, "%s: cannot read the directory: %s", abs, strerror(errno));
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) && l->st == IL_OK) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (l->n == l->cap) {
      int cap = l->cap ? l->cap * 2 : 256;
      char(*p)[512] = il_mem_alloc(IL_MEM_OTHER, sizeof *p * (size_t)cap, "machine paths");
      if (!p) {
        l->st = IL_ERR_OOM;
        break;
      }
      if (l->n) memcpy(p, l->paths, sizeof *p * (size_t)l->n);
      il_mem_free(l->paths);
      l->paths = p;
      l->cap = cap;
    }
    snprintf(l->paths[l->n], 512, "%s/%s", rel, e->d_name);
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s%s", root, l->paths[l->n]);
    struct stat sb;
    bool dir = lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode);
    char mine[512];
    snprintf(mine, sizeof mine, "%s", l->paths[l->n]);
    l->n++;
    if (dir) il__walk(root, mine, l);
  }
  closedir(d);
}

static int il__cmp(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static bool il__same(const char *pa, const char *pb) {
  struct stat sa, sb;
  if (lstat(pa, &sa) != 0 || lstat(pb, &sb) != 0) return false;
  if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) return false;
  if (S_ISDIR(sa.st_mode)) return true;
  if (S_ISLNK(sa.st_mode)) {
    char ta[PATH_MAX], tb[PATH_MAX];
    ssize_t na = readlink(pa, ta, sizeof ta), nb = readlink(pb, tb, sizeof tb);
    return na == nb && na >= 0 && !memcmp(ta, tb, (size_t)na);
  }
  if ((sa.st_mode & 07777) != (sb.st_mode & 07777) || sa.st_size != sb.st_size) return false;
  FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
  bool same = fa && fb;
  char ba[8192], bb[8192];
  while (same) {
    size_t ka = fread(ba, 1, sizeof ba, fa), kb = fread(bb, 1, sizeof bb, fb);
    if (ka != kb || memcmp(ba, bb, ka)) same = false;
    if (ka == 0) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

il_status il_machine_diff(const char *a, const char *b, il_machine_change *out, int max, int *n) {
  il__list la = {0}, lb = {0};
  la.st = lb.st = IL_OK;
  il__walk(a, "", &la);
  il__walk(b, "", &lb);
  il_status st = la.st != IL_OK ? la.st : lb.st;
  *n = 0;
  if (st == IL_OK) {
    qsort(la.paths, (size_t)la.n, sizeof *la.paths, il__cmp);
    qsort(lb.paths, (size_t)lb.n, sizeof *lb.paths, il__cmp);
    int i = 0, j = 0;
    while (i < la.n || j < lb.n) {
      int c = i >= la.n ? 1 : j >= lb.n ? -1 : strcmp(la.paths[i], lb.paths[j]);
      char kind = 0;
      const char *p = c <= 0 ? la.paths[i] : lb.paths[j];
      if (c == 0) {
        char pa[PATH_MAX], pb[PATH_MAX];
        snprintf(pa, sizeof pa, "%s%s", a, p);
        snprintf(pb, sizeof pb, "%s%s", b, p);
        if (!il__same(pa, pb)) kind = 'M';
      } else {
        kind = c < 0 ? 'D' : 'A';
      }
      if (kind) {
        if (*n < max) {
          snprintf(out[*n].path, sizeof out[*n].path, "%s", p);
          out[*n].kind = kind;
        }
        (*n)++;
      }
      if (c <= 0) i++;
      if (c >= 0) j++;
    }
  }
  il_mem_free(la.paths);
  il_mem_free(lb.paths);
  return st;
}

/* Writes s single-quoted for /bin/sh. */
static void il__sq(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  }
  fputc('\'', f);
}

il_status il_machine_rollback_script(const char *a, const char *b, const char *path) {
  enum { MAX = 256 };
  il_machine_change *ch = il_mem_alloc(IL_MEM_OTHER, sizeof *ch * MAX, "machine changes");
  if (!ch) return IL_ERR_OOM;
  int n = 0;
  il_status st = il_machine_diff(a, b, ch, MAX, &n);
  if (st == IL_OK && n > MAX) st = il_error(IL_ERR_RANGE, "%s and %s differ in %d places (at most %d)", a, b, n, MAX);
  FILE *f = st == IL_OK ? fopen(path, "w") : NULL;
  if (st == IL_OK && !f) st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
  if (st != IL_OK) {
    il_mem_free(ch);
    return st;
  }
  fprintf(f, "#!/bin/sh\n# Rollback: makes the repaired machine the baseline again, byte for byte: every file the\n"
             "# change touched is copied back with its mode, files the change added are removed.\nset -e\nB=");
  il__sq(f, a);
  fprintf(f, "\nV=");
  il__sq(f, b);
  fputc('\n', f);
  /* removals deepest first, so a directory's files go before it */
  for (int i = n - 1; i >= 0; i--)
    if (ch[i].kind == 'A') {
      fprintf(f, "rm -rf \"$V\"");
      il__sq(f, ch[i].path);
      fputc('\n', f);
    }
  for (int i = 0; i < n; i++) {
    if (ch[i].kind == 'A') continue;
    char pa[PATH_MAX];
    snprintf(pa, sizeof pa, "%s%s", a, ch[i].path);
    struct stat sb;
    if (lstat(pa, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode)) {
      fprintf(f, "mkdir -p \"$V\"");
      il__sq(f, ch[i].path);
    } else {
      fprintf(f, "rm -f \"$V\"");
      il__sq(f, ch[i].path);
      fprintf(f, "\ncp -P -p \"$B\"");
      il__sq(f, ch[i].path);
      fprintf(f, " \"$V\"");
      il__sq(f, ch[i].path);
    }
    fputc('\n', f);
  }
  il_mem_free(ch);
  if (fclose(f) != 0) return il_error(IL_ERR_OUTPUT, "%s: write failed", path);
  chmod(path, 0755);
  return IL_OK;
}
