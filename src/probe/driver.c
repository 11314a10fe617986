/* probe/driver: the checks that judge what NVML and the CUDA driver API report against the
 * kernel module, the GPUs and this build, and the minimum-driver table. See driver.h.
 * Not for: gathering the facts (probe/doctor runs the libraries once and keeps snapshots).
 */
#include "probe/driver.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cudamod.h"
#include "core/text.h"
#include "core/timer.h"
#include "il_build_info.h"
#include "memory/mem.h"
#include "probe/cgroup.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/loader.h"
#include "sys/spawn.h"

/* ---- minimum drivers (research file section C, CUDA 13.1 release notes table 3) ------- */

static const struct {
  const char *cuda, *driver;
} il__toolkit_driver[] = {
    {"13.1", "590.44.01"}, {"13.0", "580.65.06"}, {"12.9", "575.51.03"}, {"12.8", "570.26"},
    {"12.6", "560.28.03"}, {"12.5", "555.42.02"}, {"12.4", "550.54.14"}, {"12.3", "545.23.06"},
    {"12.2", "535.54.03"}, {"12.1", "530.30.02"}, {"12.0", "525.60.13"}, {"11.8", "520.61.05"},
    {"11.7", "515.43.04"}, {"11.6", "510.39.01"}, {"11.5", "495.29.05"}, {"11.4", "470.42.01"},
    {"11.3", "465.19.01"}, {"11.2", "460.27.03"}, {"11.1", "455.23"},    {"11.0", "450.36.06"},
    {"10.2", "440.33"},    {"10.1", "418.39"},    {"10.0", "410.48"},
};

bool il_driver_minimum(const char *cuda_version, char *full, size_t nfull, char *mvc, size_t nmvc) {
  int maj = 0, min = 0;
  if (sscanf(cuda_version, "%d.%d", &maj, &min) < 2) return false;
  char key[16];
  snprintf(key, sizeof key, "%d.%d", maj, min);
  for (size_t i = 0; i < sizeof il__toolkit_driver / sizeof il__toolkit_driver[0]; i++) {
    if (strcmp(il__toolkit_driver[i].cuda, key)) continue;
    il_sysfs_copy(full, nfull, il__toolkit_driver[i].driver);
    /* Minor version compatibility floors per major (section C.1); none before CUDA 11. */
    const char *floor = maj >= 13 ? "580" : maj == 12 ? "525.60.13" : maj == 11 ? "450.80.02" : il__toolkit_driver[i].driver;
    il_sysfs_copy(mvc, nmvc, floor);
    return true;
  }
  return false;
}

/* "535.54.03" from ".../libnvidia-ml.so.535.54.03"; "" when the name has no version. */
static void il__lib_version(const char *path, char *buf, size_t n) {
  buf[0] = 0;
  const char *so = path ? strstr(path, ".so.") : NULL;
  if (!so) return;
  so += 4;
  if (!strchr(so, '.')) return; /* ".so.1" is the soname, not a driver version */
  il_sysfs_copy(buf, n, so);
}

/* Driver's CUDA version (12020) from the CUDA driver API, else NVML; 0 unknown. */
static int il__driver_cuda(const il_doctor *dr) {
  if (dr->cuda.loaded && dr->cuda.driver_version > 0) return dr->cuda.driver_version;
  return dr->nvml.cuda_driver_version;
}

static const char *il__driver_version(const il_doctor *dr) {
  if (dr->nvml.driver_version[0]) return dr->nvml.driver_version;
  return dr->kmod_version;
}

/* ---- driver.nvml, driver.version_match ------------------------------------------------ */

static void il__fix_install_driver(const il_doctor *dr, il_check *c) {
  char cmd[400];
  il__check_fix(c, "Install the NVIDIA driver for this kernel: %s", il__distro_cmd(dr, IL_CMD_INSTALL_DRIVER, NULL, cmd, sizeof cmd));
}

void il__driver_check_nvml(il_doctor *dr) {
  il_check *c;
  const il_nvml_snapshot_t *s = &dr->nvml;
  if (!s->loaded) {
    if (dr->tegra) {
      /* Jetson: the integrated GPU is driven by nvgpu and reached through libcuda; L4T before
       * JetPack 6 has no NVML (jetson.platform and cuda.init judge it). */
      c = il__check_na(&dr->checks, "driver.nvml", IL_VERDICT_OK, 0, "Jetson/Tegra (%s): no NVML library, which is normal on L4T; CUDA is checked by cuda.init",
                       dr->l4t_release[0] ? dr->l4t_release : "L4T");
    } else if (dr->wsl) {
      c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 24, "WSL2: NVML cannot be loaded (%s)", dr->nvml_error);
      il__check_fix(c, "Update the NVIDIA driver on Windows (it provides /usr/lib/wsl/lib/libnvidia-ml.so.1), then in PowerShell: wsl --shutdown");
      il__check_fix(c, "Do not install a Linux NVIDIA driver inside WSL: sudo apt remove 'nvidia-utils-*' 'libnvidia-compute-*'");
    } else if (dr->in_container && dr->gpu_expected && il_sysfs_exists(&dr->fs, "/dev/nvidiactl")) {
      /* Nodes but no libraries: the devices were injected (CDI or --device) without the driver's files. */
      c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 23,
                        "the GPU device nodes are in this container but libnvidia-ml.so.1 is not: the devices came without the driver libraries "
                        "(a CDI spec without its mounts, or --device without the NVIDIA runtime)");
      il__check_fix(c, "On the host, regenerate the CDI spec (sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml) and recreate the container with "
                       "--device nvidia.com/gpu=all, or start it with the NVIDIA runtime (--gpus all)");
    } else if (dr->in_container && dr->gpu_expected) {
      c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 21,
                        "libnvidia-ml.so.1 not found inside the container: the NVIDIA runtime did not inject the driver");
      il__cgroup_fix_request_gpus(dr, c);
    } else if (dr->gpu_expected) {
      c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 4, "an NVIDIA GPU is present but the driver library cannot be loaded: %s", dr->nvml_error);
      il__fix_install_driver(dr, c);
    } else {
      c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_WARN, 0,
                        "no NVIDIA driver and no NVIDIA GPU on the PCI bus: inferlab will use the CPU backend (%s)",
                        dr->host.cpu_backend);
      il__check_fix(c, "Nothing to repair for CPU inference. To use a GPU, run on a machine with an NVIDIA GPU and driver, then run inferlab doctor again.");
    }
    il__check_ev(c, "library", "%s", dr->nvml_path);
    il__check_ev(c, "dlopen_error", "%s", dr->nvml_error);
    return;
  }
  if (s->init_rc != 0) {
    int rc = s->init_rc;
    const char *name = il_nvml_code_name(rc);
    char libver[64];
    il__lib_version(dr->nvml_loaded, libver, sizeof libver);
    switch (rc) {
      case IL_NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 3,
                          "Failed to initialize NVML: Driver/library version mismatch (kernel module %s, library %s)",
                          dr->kmod_version[0] ? dr->kmod_version : "unknown", libver[0] ? libver : "unknown");
        if (libver[0] && dr->kmod_version[0] && il_sysfs_vercmp(libver, dr->kmod_version) < 0) {
          /* Libraries older than the module: an old copy earlier on the loader's path, or a
           * half-finished install. Reloading the module would not make them match. */
          il__check_fix(c, "The library %s is older than the kernel module %s, so a reboot cannot help: see cuda.loader for where it comes from, "
                           "and remove it (or reinstall the user-space driver %s)", dr->nvml_loaded, dr->kmod_version, dr->kmod_version);
        } else {
          il__check_fix(c, "Reboot (simplest: loads the kernel module that matches the installed libraries)");
          il__check_fix(c, "Or, with no process using the GPU: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo nvidia-modprobe -u -c 0");
          char hold[200];
          il__check_fix(c, "Keep it from recurring: hold the driver packages: %s", il__distro_cmd(dr, IL_CMD_HOLD, NULL, hold, sizeof hold));
        }
        break;
      case IL_NVML_ERROR_DRIVER_NOT_LOADED:
        c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 4, "NVIDIA driver is not loaded (%s): the kernel module is missing", name);
        {
          char cmd[400];
          il__check_fix(c, "sudo modprobe nvidia   (if it says 'Module nvidia not found': %s)",
                        il__distro_cmd(dr, IL_CMD_REBUILD_MODULE, dr->host.kernel[0] ? dr->host.kernel : "$(uname -r)", cmd, sizeof cmd));
        }
        break;
      case IL_NVML_ERROR_NO_PERMISSION:
        c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 17, "Failed to initialize NVML: Insufficient Permissions (%s)", name);
      {
        il_sysfs_stat_t st;
        char grp[64] = "video";
        il_sysfs_stat(&dr->fs, "/dev/nvidiactl", true, &st);
        if (st.exists) il_sysfs_group_name(&dr->fs, st.gid, grp, sizeof grp);
        il__check_fix(c, "Give this user access to /dev/nvidia*: sudo usermod -aG %s $USER and log in again (see devnodes)", grp);
      }
        break;
      case IL_NVML_ERROR_OPERATING_SYSTEM:
        c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, dr->wsl ? 24 : 22, "GPU access blocked by the operating system/cgroups (%s)", name);
        if (dr->wsl) il__check_fix(c, "WSL: use WDDM mode (not TCC) on Windows, remove Linux NVIDIA driver packages inside WSL, then: wsl --shutdown");
        else il__check_fix(c, "Recreate the container (%s); prevent it on the host: sudo nvidia-ctk system create-dev-char-symlinks --create-all",
                           il__cgroup_engine_recreate(dr));
        break;
      default:
        if (dr->in_container && rc == IL_NVML_ERROR_UNKNOWN) {
          c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 22,
                            "Failed to initialize NVML: Unknown Error inside a container (the container lost its device access)");
          il__check_fix(c, "Recreate the container (%s); prevent it on the host: sudo nvidia-ctk system create-dev-char-symlinks --create-all "
                           "(or set docker's cgroup driver to cgroupfs)", il__cgroup_engine_recreate(dr));
        } else {
          c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, 0, "nvmlInit failed: %s (%d: %s)", name, rc, s->init_error);
          il__check_fix(c, "Look at the kernel log for the cause: sudo dmesg | grep -i nvrm");
        }
    }
    il__check_ev(c, "nvml_init", "%s (%d)", name, rc);
    il__check_ev(c, "library", "%s", dr->nvml_loaded[0] ? dr->nvml_loaded : dr->nvml_path);
    if (dr->kmod_version[0]) il__check_ev(c, "kernel_module", "%s", dr->kmod_version);
    return;
  }
  char cv[16];
  il_cudadrv_version_text(s->cuda_driver_version, cv, sizeof cv);
  int n = il_nvml_usable_count(&dr->nvml);
  if (s->count_rc != 0 || n == 0) {
    c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_FAIL, dr->n_pci ? 7 : 0,
                      "driver %s loaded but No devices were found (%d NVIDIA GPU%s on the PCI bus)",
                      s->driver_version, dr->n_pci, dr->n_pci == 1 ? "" : "s");
    il__check_fix(c, "Find out why the driver did not take the GPU: sudo dmesg | grep -i nvrm   (see the kmod.* and virt.pci lines for the usual causes)");
  } else {
    char names[300] = "";
    for (int i = 0; i < s->n_devices; i++) {
      size_t l = strlen(names);
      if (s->devices[i].handle_rc) il_appendf(names, sizeof names, "%s%d (%s, see gpu.health)", l ? ", " : "", i, il_nvml_code_name(s->devices[i].handle_rc));
      else il_appendf(names, sizeof names, "%s%d %s", l ? ", " : "", i, s->devices[i].name);
    }
    c = il__check_add(&dr->checks, "driver.nvml", IL_VERDICT_OK, 0, "driver %s (supports CUDA %s), %d GPU%s: %s", s->driver_version,
                      cv, n, n == 1 ? "" : "s", names);
  }
  il__check_ev(c, "driver_version", "%s", s->driver_version);
  il__check_ev(c, "cuda_driver_version", "%s", cv);
  il__check_ev(c, "nvml_version", "%s", s->nvml_version);
  il__check_ev(c, "library", "%s", dr->nvml_loaded[0] ? dr->nvml_loaded : dr->nvml_path);
  il__check_ev(c, "device_count", "%d", n);
}

void il__driver_check_version_match(il_doctor *dr) {
  char libver[64];
  il__lib_version(dr->nvml_loaded, libver, sizeof libver);
  char libfile[512] = "";
  if (!libver[0]) {
    /* NVML did not load (or its path has no version): the file the loader would pick still
     * names its version, so a mismatch is found without loading anything. */
    il_lib_candidate cand[1];
    if (il__loader_search(dr, "libnvidia-ml.so.1", cand, 1) == 1 && cand[0].version[0]) {
      il_sysfs_copy(libver, sizeof libver, cand[0].version);
      il_sysfs_copy(libfile, sizeof libfile, cand[0].target);
    }
  }
  const char *nv = dr->nvml.init_rc == 0 ? dr->nvml.driver_version : "";
  if (!dr->kmod_version[0] || (!libver[0] && !nv[0])) {
    il_check *c = il__check_na(&dr->checks, "driver.version_match", IL_VERDICT_OK, 0, "nothing to compare (%s)",
                                dr->kmod_version[0] ? "driver library version unknown" : "no NVIDIA kernel module loaded");
    if (dr->kmod_version[0]) il__check_ev(c, "kernel_module", "%s", dr->kmod_version);
    return;
  }
  const char *other = libver[0] ? libver : nv;
  il_check *c;
  if (strcmp(dr->kmod_version, other) != 0 || (nv[0] && strcmp(dr->kmod_version, nv) != 0)) {
    c = il__check_add(&dr->checks, "driver.version_match", IL_VERDICT_FAIL, 3,
                      "kernel module %s but user-space driver library %s: the driver was upgraded without reloading the module",
                      dr->kmod_version, other);
    if (il_sysfs_vercmp(other, dr->kmod_version) > 0)
      il__check_fix(c, "Reboot, or with no GPU users: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo nvidia-modprobe -u -c 0");
    else
    {
      char cmd[300];
      il__check_fix(c, "The libraries are older than the running module, so a reboot cannot help: install the user-space driver %s "
                       "(%s) or remove the stale %s and run sudo ldconfig",
                    dr->kmod_version, il__distro_cmd(dr, IL_CMD_REINSTALL_USERSPACE, dr->kmod_version, cmd, sizeof cmd),
                    libfile[0] ? libfile : "libnvidia-ml.so.* (see cuda.loader)");
    }
  } else {
    c = il__check_add(&dr->checks, "driver.version_match", IL_VERDICT_OK, 0, "kernel module and driver libraries are both %s", dr->kmod_version);
  }
  il__check_ev(c, "kernel_module", "%s", dr->kmod_version);
  if (libver[0]) il__check_ev(c, "libnvidia_ml", "%s", libver);
  if (libfile[0]) il__check_ev(c, "libnvidia_ml_file", "%s", libfile);
  if (nv[0]) il__check_ev(c, "nvml_driver_version", "%s", nv);
}

/* ---- cuda.init, cuda.compat ----------------------------------------------------------- */

static bool il__mig_without_instances(const il_doctor *dr) {
  for (int i = 0; i < dr->nvml.n_devices; i++)
    if (dr->nvml.devices[i].mig_current == 1 && dr->nvml.devices[i].mig_devices == 0) return true;
  return false;
}

void il__driver_check_cuda_init(il_doctor *dr) {
  const il_cudadrv_snapshot_t *s = &dr->cuda;
  il_check *c;
  if (!s->loaded) {
    bool nvml_ok = dr->nvml.loaded && dr->nvml.init_rc == 0 && il_nvml_usable_count(&dr->nvml) > 0;
    if (nvml_ok) {
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 21, "NVML works but libcuda.so.1 cannot be loaded: %s", dr->cuda_error);
      if (dr->in_container)
        il__check_fix(c, "Restart the container with the compute capability: -e NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all)");
      else
      {
        char cmd[300];
        il__check_fix(c, "Install the CUDA driver library of the same version as the driver: %s",
                      il__distro_cmd(dr, IL_CMD_REINSTALL_USERSPACE, il__driver_version(dr), cmd, sizeof cmd));
      }
    } else if (dr->gpu_expected) {
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 4, "libcuda.so.1 cannot be loaded: %s", dr->cuda_error);
      il__check_fix(c, "Install the NVIDIA driver (it ships libcuda.so.1); see driver.nvml");
    } else {
      c = il__check_na(&dr->checks, "cuda.init", IL_VERDICT_OK, 0, "libcuda.so.1 not present (no NVIDIA driver): nothing to initialize");
    }
    il__check_ev(c, "library", "%s", dr->cuda_path);
    il__check_ev(c, "dlopen_error", "%s", dr->cuda_error);
    return;
  }
  char dv[16];
  il_cudadrv_version_text(s->driver_version, dv, sizeof dv);
  int rc = s->init_rc;
  switch (rc) {
    case IL_CUDA_SUCCESS:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_OK, 0, "cuInit: CUDA_SUCCESS; driver API CUDA %s; %d device%s", dv,
                        s->n_devices, s->n_devices == 1 ? "" : "s");
      break;
    case IL_CUDA_ERROR_INSUFFICIENT_DRIVER:
      if (dr->in_container && !dr->nvml.loaded) {
        c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 21, "cuInit: %s: no driver was injected into this container", s->init_name);
        il__cgroup_fix_request_gpus(dr, c);
      } else {
        c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 1, "cuInit: %s: the driver is older than this CUDA driver library (driver API CUDA %s)",
                          s->init_name, dv);
      {
        char cmd[400];
        il__check_fix(c, "Upgrade the NVIDIA driver: %s; if the driver was just upgraded, reboot to load the new kernel module",
                      il__distro_cmd(dr, IL_CMD_INSTALL_DRIVER, NULL, cmd, sizeof cmd));
      }
      }
      break;
    case IL_CUDA_ERROR_NO_DEVICE:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 14, "cuInit: %s: CUDA sees no GPU", s->init_name);
      if (dr->cudavis.set && dr->cudavis.n_visible == 0) {
        c->scenario = 14;
        il__check_fix(c, "CUDA_VISIBLE_DEVICES hides every GPU (see visibility.cuda): unset CUDA_VISIBLE_DEVICES or list GPU UUIDs from nvidia-smi -L");
      } else if (il__mig_without_instances(dr)) {
        c->scenario = 13;
        int mg = 0;
        for (int i = 0; i < dr->nvml.n_devices; i++)
          if (dr->nvml.devices[i].mig_current == 1 && dr->nvml.devices[i].mig_devices == 0) { mg = i; break; }
        il__check_fix(c, "MIG is enabled on GPU %d without instances (see gpu.mig): sudo nvidia-smi mig -i %d -cgi 0 -C (profile 0: one instance "
                         "spanning the GPU), or disable MIG: sudo nvidia-smi -i %d -mig 0", mg, mg, mg);
      } else {
        c->scenario = 0;
        il__check_fix(c, "Check the visibility.* and gpu.* lines; the kernel log says more: sudo dmesg | grep -i nvrm");
      }
      break;
    case IL_CUDA_ERROR_SYSTEM_NOT_READY: {
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 12,
                        "cuInit: %s (802): system not yet initialized: on an NVSwitch system the Fabric Manager is not running", s->init_name);
      bool sock = il_sysfs_exists(&dr->fs, "/var/run/nvidia-fabricmanager/socket") || il_sysfs_exists(&dr->fs, "/run/nvidia-fabricmanager/socket");
      il__check_ev(c, "fabricmanager_socket", "%s", sock ? "present" : "missing");
      {
        char cmd[300];
        const char *dv0 = il__driver_version(dr);
        if (dv0[0]) il__check_fix(c, "Install the Fabric Manager of exactly the driver's version %s: %s", dv0, il__distro_cmd(dr, IL_CMD_FABRICMANAGER, dv0, cmd, sizeof cmd));
        else il__check_fix(c, "Install the Fabric Manager of exactly the driver's version (nvidia-smi shows it) and start it: sudo systemctl enable --now nvidia-fabricmanager");
      }
      break;
    }
    case IL_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 3, "cuInit: %s: display driver and CUDA driver versions differ", s->init_name);
      il__check_fix(c, "Reboot (or reload the nvidia modules) so the kernel module matches libcuda; see driver.version_match");
      break;
    case IL_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 2,
                        "cuInit: %s (804): forward compatibility was attempted on non supported HW (libcuda %s)", s->init_name,
                        dr->cuda_loaded[0] ? dr->cuda_loaded : dr->cuda_path);
      il__check_fix(c, "Remove the forward-compatibility libcuda (see cuda.compat): sudo apt remove 'cuda-compat-*' and drop its directory from LD_LIBRARY_PATH");
      break;
    case IL_CUDA_ERROR_STUB_LIBRARY:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 0, "cuInit: %s: %s is the CUDA toolkit's link-time stub, not the driver", s->init_name,
                        dr->cuda_loaded[0] ? dr->cuda_loaded : dr->cuda_path);
      il__check_fix(c, "Remove the toolkit's stubs directory (e.g. /usr/local/cuda/lib64/stubs) from LD_LIBRARY_PATH; the real libcuda.so.1 comes with the driver");
      break;
    case IL_CUDA_ERROR_UNKNOWN:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 16, "cuInit: %s (999): usually nvidia_uvm missing or wedged (often after suspend/resume)", s->init_name);
      il__check_fix(c, "With no GPU users: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm   (or sudo nvidia-modprobe -c 0 -u); reboot if the module is in use");
      break;
    case IL_CUDA_ERROR_OPERATING_SYSTEM:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 22, "cuInit: %s: device access blocked by the operating system/cgroups", s->init_name);
      il__check_fix(c, "Recreate the container; on the host: sudo nvidia-ctk system create-dev-char-symlinks --create-all");
      break;
    default:
      c = il__check_add(&dr->checks, "cuda.init", IL_VERDICT_FAIL, 0, "cuInit: %s (%d)%s%s", s->init_name, rc, s->init_text[0] ? ": " : "", s->init_text);
      il__check_fix(c, "See the kernel log: sudo dmesg | grep -i -e nvrm -e xid");
  }
  il__check_ev(c, "cuInit", "%s (%d)", s->init_name, rc);
  il__check_ev(c, "driver_api_version", "%s", dv);
  il__check_ev(c, "library", "%s", dr->cuda_loaded[0] ? dr->cuda_loaded : dr->cuda_path);
}

/* Forward compatibility is for data-center GPUs (and select NGC-ready RTX, Jetson). A GeForce
 * or TITAN card is never among them (CUDA forward-compatibility documentation). */
static bool il__consumer_gpu(const char *name) {
  return il_sysfs_stristr(name, "GeForce") || il_sysfs_stristr(name, "TITAN");
}

void il__driver_check_cuda_compat(il_doctor *dr) {
  char cver[64];
  il__lib_version(dr->cuda_loaded, cver, sizeof cver);
  bool in_compat_dir = dr->cuda_loaded[0] && strstr(dr->cuda_loaded, "/compat/");
  /* A libcuda newer than the kernel module is a compat library only when libnvidia-ml is not
   * equally new: both newer is the version mismatch of scenario 3 (driver.version_match). */
  char nver[64];
  il__lib_version(dr->nvml_loaded, nver, sizeof nver);
  bool newer = cver[0] && dr->kmod_version[0] && il_sysfs_vercmp(cver, dr->kmod_version) > 0 && strcmp(nver, cver) != 0;
  bool failed804 = dr->cuda.loaded && dr->cuda.init_rc == IL_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE;
  il_check *c;
  if (!dr->cuda.loaded) {
    il__check_na(&dr->checks, "cuda.compat", IL_VERDICT_OK, 0, "no libcuda loaded: nothing to check");
    return;
  }
  if (!in_compat_dir && !newer && !failed804) {
    if (cver[0]) il__check_add(&dr->checks, "cuda.compat", IL_VERDICT_OK, 0, "libcuda is the driver's own (%s)", cver);
    else il__check_add(&dr->checks, "cuda.compat", IL_VERDICT_OK, 0, "libcuda is the driver's own");
    return;
  }
  const char *consumer = NULL;
  for (int i = 0; i < dr->nvml.n_devices; i++)
    if (il__consumer_gpu(dr->nvml.devices[i].name)) consumer = dr->nvml.devices[i].name;
  if (failed804 || consumer) {
    c = il__check_add(&dr->checks, "cuda.compat", IL_VERDICT_FAIL, 2,
                      "forward-compatibility libcuda %s (kernel module %s) on %s, which does not support forward compatibility",
                      cver[0] ? cver : dr->cuda_loaded, dr->kmod_version[0] ? dr->kmod_version : "unknown",
                      consumer ? consumer : "this GPU");
    il__check_fix(c, "Remove the cuda-compat package: sudo apt remove 'cuda-compat-*'   (containers: do not mount compat libraries into the image)");
    const char *ld = il_sysfs_getenv(&dr->fs, "LD_LIBRARY_PATH");
    if (ld && strstr(ld, "compat")) il__check_fix(c, "Drop the compat directory from LD_LIBRARY_PATH (now: %s)", ld);
    il__check_fix(c, "To run newer CUDA on this GPU, upgrade the real driver instead (see runtime.build for the minimum)");
  } else {
    c = il__check_add(&dr->checks, "cuda.compat", IL_VERDICT_OK, 0,
                      "forward-compatibility libcuda %s on kernel module %s (supported on data-center GPUs)",
                      cver[0] ? cver : dr->cuda_loaded, dr->kmod_version[0] ? dr->kmod_version : "unknown");
  }
  il__check_ev(c, "libcuda", "%s", dr->cuda_loaded);
  if (dr->kmod_version[0]) il__check_ev(c, "kernel_module", "%s", dr->kmod_version);
}

/* ---- runtime.build, runtime.arch, runtime.features, runtime.nvcc --------------------- */

/* Judges "this needs CUDA `need`" against the driver. Returns the verdict; fills text/fix. */
static il_verdict il__judge_cuda_need(const il_doctor *dr, const char *need, const char *what, bool strict, char *text,
                                      size_t nt, char *fix, size_t nf) {
  int drv = il__driver_cuda(dr);
  int maj = 0, min = 0;
  fix[0] = 0;
  if (sscanf(need, "%d.%d", &maj, &min) < 1) {
    snprintf(text, nt, "%s: CUDA version '%s' not understood", what, need);
    return IL_VERDICT_WARN;
  }
  int need_v = maj * 1000 + min * 10;
  char full[32] = "", mvc[32] = "";
  bool known = il_driver_minimum(need, full, sizeof full, mvc, sizeof mvc);
  char dv[16];
  il_cudadrv_version_text(drv, dv, sizeof dv);
  if (drv <= 0) {
    snprintf(text, nt, "%s CUDA %s; no driver to check it against", what, need);
    return IL_VERDICT_OK;
  }
  const char *dver = il__driver_version(dr);
  if (drv >= need_v) {
    snprintf(text, nt, "%s CUDA %s; driver %s supports CUDA %s", what, need, dver, dv);
    return IL_VERDICT_OK;
  }
  if (strict) {
    /* The container toolkit compares versions strictly; minor version compatibility does not
     * count (cuda_image.go: "cuda>=12.8" against the driver's CUDA version). */
    snprintf(text, nt, "driver too old for the image: %s CUDA %s but driver %s supports CUDA %s; the NVIDIA runtime refuses such a "
             "container ('unsatisfied condition: cuda>=%s') unless NVIDIA_DISABLE_REQUIRE=true", what, need, dver, dv, need);
    snprintf(fix, nf, "Upgrade the host driver to >= %s (CUDA %s), or use an image built for CUDA <= %s", known ? full : "a newer branch", need, dv);
    return IL_VERDICT_FAIL;
  }
  if (drv / 1000 == maj && known && il_sysfs_vercmp(dver, mvc) >= 0) {
    snprintf(text, nt, "%s CUDA %s but driver %s supports CUDA %s: runs under minor version compatibility "
             "(limited features; newer PTX fails with cudaErrorUnsupportedPtxVersion)", what, need, dver, dv);
    snprintf(fix, nf, "Upgrade the NVIDIA driver to >= %s for full CUDA %s support (sudo ubuntu-drivers install, or nvidia-driver-%.3s), then reboot",
             full, need, full);
    return IL_VERDICT_WARN;
  }
  if (known)
    snprintf(text, nt, "driver too old for the runtime: %s CUDA %s but driver %s supports only CUDA %s; CUDA %s needs driver >= %s "
             "(CUDA %d.x minimum %s)", what, need, dver, dv, need, full, maj, mvc);
  else
    snprintf(text, nt, "driver too old for the runtime: %s CUDA %s but driver %s supports only CUDA %s (no CUDA %s row in NVIDIA's table)",
             what, need, dver, dv, need);
  snprintf(fix, nf, "Upgrade the NVIDIA driver to >= %s (sudo apt install nvidia-driver-%.3s, or sudo ubuntu-drivers install) and reboot; "
           "or use a build/image made for CUDA <= %s", known ? full : "a newer branch", known ? full : "XXX", dv);
  return IL_VERDICT_FAIL;
}

void il__driver_check_runtime_build(il_doctor *dr) {
  const il_doctor_options *o = &dr->opt;
  char text[400], fix[400];
  il_check *c;
  int threads = o->cpu_threads > 0 ? o->cpu_threads : dr->host.logical_cpus;
  int gpus = il_nvml_usable_count(&dr->nvml);
  if (!gpus) gpus = dr->cuda.loaded && dr->cuda.init_rc == 0 ? dr->cuda.n_devices : 0;
  if (!o->build_have_cuda || !o->build_cuda_version || !o->build_cuda_version[0]) {
    if (gpus > 0) {
      /* A usable GPU that this binary cannot use: the job silently runs on the CPU. */
      c = il__check_add(&dr->checks, "runtime.build", IL_VERDICT_WARN, 0,
                        "CPU-only build on a machine with %d usable NVIDIA GPU%s: inference will run on the CPU (%s, %d thread%s), not on the GPU",
                        gpus, gpus == 1 ? "" : "s", dr->host.cpu_backend, threads, threads == 1 ? "" : "s");
      il__check_fix(c, "Use a build with the CUDA backend: configure where nvcc is installed (cmake --preset release; -DIL_CUDA=ON is the default and "
                       "CUDA is detected automatically), then check that inferlab --version lists CUDA");
    } else {
      c = il__check_add(&dr->checks, "runtime.build", IL_VERDICT_OK, 0,
                        "CPU-only build: no CUDA kernels compiled in; the CPU backend will be used (%s, %d thread%s)",
                        dr->host.cpu_backend, threads, threads == 1 ? "" : "s");
    }
    il__check_ev(c, "cuda_backend", "not built");
    il__check_ev(c, "cpu_backend", "%s", dr->host.cpu_backend);
    if (o->build_have_cuda) il__check_ev(c, "cuda_compiler_at_build", "found (%s), CUDA backend not compiled", IL_BUILD_CUDA_COMPILER);
  } else {
    il_verdict v = il__judge_cuda_need(dr, o->build_cuda_version, "built with", false, text, sizeof text, fix, sizeof fix);
    c = il__check_add(&dr->checks, "runtime.build", v, v == IL_VERDICT_OK ? 0 : 1, "%s", text);
    if (fix[0]) il__check_fix(c, "%s", fix);
    il__check_ev(c, "build_cuda_version", "%s", o->build_cuda_version);
    il__check_ev(c, "build_cuda_archs", "%s", o->build_cuda_archs ? o->build_cuda_archs : "");
    /* The kernels live in a module loaded at run time: on the real machine, say whether it
     * loads and, if not, the loader's reason (fixture sysroots describe other machines). */
    if (IL_HAVE_CUDA && il_sysfs_is_real(&dr->fs)) {
      if (il_cudamod_get()) {
        il__check_ev(c, "cuda_module", "%s (kernels for %s)", il_cudamod_path(), il_cudamod_get()->archs);
      } else {
        il__check_ev(c, "cuda_module", "not loaded: %s", il_cudamod_error());
        if (c->verdict < IL_VERDICT_WARN) {
          c->verdict = IL_VERDICT_WARN;
          c->scenario = 1;
          il_sysfs_copy(c->summary, sizeof c->summary, "built with CUDA, but the CUDA module " IL_CUDAMOD_FILE " does not load");
          il__check_fix(c, "Install it next to the inferlab binary or set INFERLAB_CUDA_MODULE; the loader says: %.300s",
                        il_cudamod_error());
        }
      }
    }
  }
  /* Inside a CUDA image the toolkit checked NVIDIA_REQUIRE_CUDA (or CUDA_VERSION for legacy
   * images) at start; the same comparison explains "requirement error: unsatisfied
   * condition: cuda>=12.8". */
  const char *req = il_sysfs_getenv(&dr->fs, "NVIDIA_REQUIRE_CUDA");
  const char *cv = il_sysfs_getenv(&dr->fs, "CUDA_VERSION");
  char need[32] = "";
  if (req && strstr(req, "cuda>=")) sscanf(strstr(req, "cuda>=") + 6, "%31[0-9.]", need);
  else if (cv) sscanf(cv, "%31[0-9.]", need);
  if (need[0] && dr->in_container) {
    il_verdict v = il__judge_cuda_need(dr, need, "this image needs", true, text, sizeof text, fix, sizeof fix);
    il__check_ev(c, "image_requires_cuda", "%s", need);
    if (v > c->verdict) {
      c->verdict = v;
      c->scenario = 1;
      il_sysfs_copy(c->summary, sizeof c->summary, text);
      c->fix[0] = 0;
      il__check_fix(c, "%s", fix);
    }
  }
}

typedef struct {
  int cc[16];
  bool sass[16], ptx[16];
  int n;
} il__archs;

/* Parses "80;86-real;90-virtual", "sm_80,compute_90" or "8.0 9.0". A plain number means
 * SASS and PTX (CMake's CUDA_ARCHITECTURES convention). */
static void il__parse_archs(const char *s, il__archs *a) {
  memset(a, 0, sizeof *a);
  if (!s) return;
  const char *p = s;
  while (*p && a->n < 16) {
    while (*p && !isdigit((unsigned char)*p) && strncmp(p, "sm_", 3) && strncmp(p, "compute_", 8)) p++;
    if (!*p) break;
    bool sass = true, ptx = true;
    if (!strncmp(p, "sm_", 3)) ptx = false, p += 3;
    else if (!strncmp(p, "compute_", 8)) sass = false, p += 8;
    int major = 0, minor = 0;
    char *end;
    long v = strtol(p, &end, 10);
    if (*end == '.') {
      major = (int)v;
      minor = (int)strtol(end + 1, &end, 10);
    } else {
      major = (int)(v / 10);
      minor = (int)(v % 10);
    }
    while (isalpha((unsigned char)*end)) end++; /* "90a" */
    if (!strncmp(end, "-real", 5)) ptx = false, end += 5;
    else if (!strncmp(end, "-virtual", 8)) sass = false, end += 8;
    a->cc[a->n] = major * 10 + minor;
    a->sass[a->n] = sass;
    a->ptx[a->n] = ptx;
    a->n++;
    p = end;
  }
}

/* Compute capabilities of the devices: NVML first, else the CUDA driver API. */
static int il__device_ccs(const il_doctor *dr, int *cc, char names[][96], int max) {
  int n = 0;
  for (int i = 0; i < dr->nvml.n_devices && n < max; i++) {
    const il_nvml_device *d = &dr->nvml.devices[i];
    if (d->handle_rc || d->cc_major < 0) continue;
    cc[n] = d->cc_major * 10 + d->cc_minor;
    il_sysfs_copy(names[n++], 96, d->name);
  }
  if (n == 0 && dr->cuda.loaded && dr->cuda.n_devices > 0)
    for (int i = 0; i < dr->cuda.n_devices && n < max; i++) {
      if (dr->cuda.devices[i].cc_major < 0) continue;
      cc[n] = dr->cuda.devices[i].cc_major * 10 + dr->cuda.devices[i].cc_minor;
      il_sysfs_copy(names[n++], 96, dr->cuda.devices[i].name);
    }
  return n;
}

void il__driver_check_runtime_arch(il_doctor *dr) {
  int cc[16];
  char names[16][96];
  int n = il__device_ccs(dr, cc, names, 16);
  const char *archs = dr->opt.build_cuda_archs;
  il_check *c;
  if (!dr->opt.build_have_cuda || !archs || !archs[0]) {
    c = il__check_na(&dr->checks, "runtime.arch", IL_VERDICT_OK, 0, "CPU-only build: no GPU kernels to match against %d device%s", n, n == 1 ? "" : "s");
    return;
  }
  il__archs a;
  il__parse_archs(archs, &a);
  if (n == 0) {
    c = il__check_add(&dr->checks, "runtime.arch", IL_VERDICT_OK, 0, "kernels compiled for %s; no GPU to match", archs);
    return;
  }
  il_verdict worst = IL_VERDICT_OK;
  char text[400] = "";
  int bad_cc = 0, no_image = 0;
  for (int i = 0; i < n; i++) {
    bool sass = false;
    int ptx_from = 0;
    for (int k = 0; k < a.n; k++) {
      /* SASS for sm_XY runs on the same major with minor >= Y; PTX for compute_XY is
       * JIT-compiled on any device with cc >= XY. */
      if (a.sass[k] && a.cc[k] / 10 == cc[i] / 10 && a.cc[k] <= cc[i]) sass = true;
      if (a.ptx[k] && a.cc[k] <= cc[i] && a.cc[k] > ptx_from) ptx_from = a.cc[k];
    }
    size_t l = strlen(text);
    if (sass) il_appendf(text, sizeof text, "%sGPU %d sm_%d: SASS", l ? "; " : "", i, cc[i]);
    else if (ptx_from) {
      il_appendf(text, sizeof text, "%sGPU %d sm_%d: PTX %d JIT-compiled at first launch", l ? "; " : "", i, cc[i], ptx_from);
      if (worst < IL_VERDICT_WARN) worst = IL_VERDICT_WARN;
      if (!bad_cc) bad_cc = cc[i];
    } else {
      il_appendf(text, sizeof text, "%sGPU %d %s sm_%d: no kernel image (no SASS or PTX)", l ? "; " : "", i, names[i], cc[i]);
      worst = IL_VERDICT_WARN;
      bad_cc = cc[i];
      no_image++;
    }
  }
  c = il__check_add(&dr->checks, "runtime.arch", worst, worst == IL_VERDICT_OK ? 0 : 15, "kernels for %s; %s%s", archs, text,
                    no_image == n ? ": no GPU here can run this build's kernels, so inference will run on the CPU" : "");
  il__check_ev(c, "compiled_archs", "%s", archs);
  if (worst != IL_VERDICT_OK)
    il__check_fix(c, "Rebuild with this GPU's architecture: cmake -B build -DIL_CUDA_ARCHS=\"%s;%d\" && cmake --build build -j",
                  archs, bad_cc);
}

void il__driver_check_runtime_features(il_doctor *dr) {
  int cc[16];
  char names[16][96];
  int n = il__device_ccs(dr, cc, names, 16);
  if (n == 0) {
    il__check_na(&dr->checks, "runtime.features", IL_VERDICT_OK, 0, "no GPU: FP32/BF16/FP16 run on the CPU backend");
    return;
  }
  char text[400] = "";
  for (int i = 0; i < n; i++) {
    size_t l = strlen(text);
    il_appendf(text, sizeof text, "%sGPU %d sm_%d: FP16%s%s%s%s", l ? "; " : "", i, cc[i], cc[i] >= 70 ? ", tensor cores" : "",
             cc[i] >= 80 ? ", BF16" : ", no BF16 (needs 8.0)", cc[i] >= 89 ? ", FP8" : ", no FP8 (needs 8.9)",
             cc[i] < 80 ? ": prefer F16 over BF16 weights" : "");
  }
  il_check *c = il__check_add(&dr->checks, "runtime.features", IL_VERDICT_OK, 0, "%s", text);
  for (int i = 0; i < n && i < IL_CHECK_MAX_EVIDENCE; i++) {
    char key[16];
    snprintf(key, sizeof key, "gpu%d_cc", i);
    il__check_ev(c, key, "%d.%d", cc[i] / 10, cc[i] % 10);
  }
}

/* Runs argv[0] (a path, not searched) with argv, no shell, stdin and stderr on /dev/null,
 * and captures up to n-1 bytes of its stdout into buf. Gives up after timeout_ms (the child
 * is killed and reaped). True when the program ran and exited with status 0. */
static bool il__run_capture(char *const argv[], char *buf, size_t n, int timeout_ms) {
  const il_spawn_opts o = {.quiet = true, .capture = buf, .capture_cap = n, .timeout_ms = timeout_ms};
  il_spawn_result r;
  if (il_spawn_run(argv, &o, &r) != IL_OK) {
    il_error_clear();
    buf[0] = 0;
    return false;
  }
  return !r.timed_out && !r.exec_failed && r.exit_status == 0;
}

void il__driver_check_nvcc(il_doctor *dr) {
  char path[1024];
  il_check *c;
  bool found = il_sysfs_which(&dr->fs, "nvcc", path, sizeof path);
  if (!found && il_sysfs_exists(&dr->fs, "/usr/local/cuda/bin/nvcc")) {
    il_sysfs_copy(path, sizeof path, "/usr/local/cuda/bin/nvcc");
    found = true;
  }
  if (!found) {
    il__check_na(&dr->checks, "runtime.nvcc", IL_VERDICT_OK, 0, "nvcc not found (only needed to build the CUDA backend)");
    return;
  }
  /* The toolkit root is two levels above bin/nvcc; version.json (CUDA >= 11.1) or version.txt. */
  char root[1024], text[8192], ver[32] = "";
  il_sysfs_copy(root, sizeof root, path);
  char *slash = strrchr(root, '/');
  if (slash) *slash = 0;
  slash = strrchr(root, '/');
  if (slash) *slash = 0;
  char rel[1100];
  snprintf(rel, sizeof rel, "%s/version.json", root);
  if (il_sysfs_read(&dr->fs, rel, text, sizeof text, NULL) == IL_OK) {
    const char *k = strstr(text, "\"cuda\"");
    const char *v = k ? strstr(k, "\"version\"") : NULL;
    if (v) sscanf(v + 9, " : \"%31[0-9.]", ver);
  }
  if (!ver[0]) {
    snprintf(rel, sizeof rel, "%s/version.txt", root);
    if (il_sysfs_read(&dr->fs, rel, text, sizeof text, NULL) == IL_OK) {
      const char *v = strstr(text, "CUDA Version ");
      if (v) sscanf(v + 13, "%31[0-9.]", ver);
    }
  }
  if (!ver[0] && dr->opt.allow_exec && il_sysfs_is_real(&dr->fs)) {
    /* Executed directly (no shell), so a quote or `$(...)` in a PATH directory is just part
     * of a file name. */
    char *const argv[] = {path, (char *)"--version", NULL};
    if (il__run_capture(argv, text, sizeof text, 5000)) {
      /* "Cuda compilation tools, release 13.0, V13.0.88": the V token has the patch level. */
      const char *v = strstr(text, ", V");
      if (v) sscanf(v + 3, "%31[0-9.]", ver);
      else if ((v = strstr(text, "release ")) != NULL) sscanf(v + 8, "%31[0-9.]", ver);
    }
  }
  int drv = il__driver_cuda(dr), maj = 0, min = 0;
  sscanf(ver, "%d.%d", &maj, &min);
  if (ver[0] && drv > 0 && maj * 1000 + min * 10 > drv) {
    char dv[16], full[32] = "", mvc[32] = "";
    il_cudadrv_version_text(drv, dv, sizeof dv);
    il_driver_minimum(ver, full, sizeof full, mvc, sizeof mvc);
    c = il__check_add(&dr->checks, "runtime.nvcc", IL_VERDICT_WARN, 1,
                      "nvcc %s at %s is newer than the driver's CUDA %s: programs built with it need driver >= %s", ver, path, dv,
                      full[0] ? full : "a newer one");
    il__check_fix(c, "Upgrade the driver to >= %s, or build with a CUDA toolkit <= %s", full[0] ? full : "a newer branch", dv);
  } else {
    c = il__check_add(&dr->checks, "runtime.nvcc", IL_VERDICT_OK, 0, "nvcc %s at %s", ver[0] ? ver : "(version unknown)", path);
  }
  il__check_ev(c, "nvcc", "%s", path);
  if (ver[0]) il__check_ev(c, "nvcc_version", "%s", ver);
}

/* ---- visibility ----------------------------------------------------------------------- */

void il__driver_check_visibility(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  il_visible_gpu gpus[IL_VISIBLE_MAX];
  int n = 0;
  for (int i = 0; i < dr->nvml.n_devices && n < IL_VISIBLE_MAX; i++) {
    il_sysfs_copy(gpus[n].uuid, sizeof gpus[n].uuid, dr->nvml.devices[i].uuid);
    gpus[n].mig_enabled = dr->nvml.devices[i].mig_current == 1;
    n++;
  }
  const char *cvd = il_sysfs_getenv(fs, "CUDA_VISIBLE_DEVICES");
  const char *order = il_sysfs_getenv(fs, "CUDA_DEVICE_ORDER");
  il_visible_cuda(cvd, gpus, n, &dr->cudavis);
  const il_cudavis *v = &dr->cudavis;
  il_check *c;
  if (!cvd) {
    if (n) c = il__check_add(&dr->checks, "visibility.cuda", IL_VERDICT_OK, 0, "CUDA_VISIBLE_DEVICES unset: all %d GPU%s visible", n, n == 1 ? "" : "s");
    else c = il__check_na(&dr->checks, "visibility.cuda", IL_VERDICT_OK, 0, "CUDA_VISIBLE_DEVICES unset; no GPU to select from");
  } else if (n == 0) {
    c = il__check_add(&dr->checks, "visibility.cuda", IL_VERDICT_OK, 0, "CUDA_VISIBLE_DEVICES=\"%s\" but there is no GPU to select from", cvd);
  } else {
    char map[300] = "";
    for (int i = 0; i < v->n_visible; i++) {
      size_t l = strlen(map);
      il_appendf(map, sizeof map, "%scuda:%d=GPU %d", l ? ", " : "", i, v->phys[i]);
    }
    if (v->n_visible == 0) {
      c = il__check_add(&dr->checks, "visibility.cuda", IL_VERDICT_FAIL, 14, "CUDA_VISIBLE_DEVICES=\"%s\" hides every GPU: %s%s",
                        cvd, v->invalid_at >= 0 ? v->invalid_reason : "the list is empty",
                        v->invalid_at >= 0 ? ", and CUDA ignores the entries after an invalid one" : "");
      il__check_fix(c, "Unset it (unset CUDA_VISIBLE_DEVICES) or list existing GPUs, best by UUID: export CUDA_VISIBLE_DEVICES=%s "
                       "(all UUIDs: nvidia-smi -L). If you meant to force the CPU, this is expected.", gpus[0].uuid[0] ? gpus[0].uuid : "0");
    } else if (v->invalid_at >= 0) {
      c = il__check_add(&dr->checks, "visibility.cuda", IL_VERDICT_WARN, 14,
                        "CUDA_VISIBLE_DEVICES=\"%s\": entry %d '%s' is invalid (%s), so it and the %d entr%s after it are hidden; visible: %s",
                        cvd, v->invalid_at, v->invalid_entry, v->invalid_reason, v->n_hidden_after, v->n_hidden_after == 1 ? "y" : "ies", map);
      il__check_fix(c, "Remove '%s' from CUDA_VISIBLE_DEVICES (use UUIDs from nvidia-smi -L)", v->invalid_entry);
    } else {
      c = il__check_add(&dr->checks, "visibility.cuda", IL_VERDICT_OK, 0, "CUDA_VISIBLE_DEVICES=\"%s\": %s", cvd, map);
    }
    il__check_ev(c, "CUDA_VISIBLE_DEVICES", "%s", cvd);
    il__check_ev(c, "mapping", "%s", map);
  }
  /* Mixed GPU models: CUDA's default FASTEST_FIRST order can differ from nvidia-smi's. */
  bool mixed = false;
  /* Only GPUs with a handle have a name: a lost GPU (empty name) is not "another model". */
  const char *first_name = NULL;
  for (int i = 0; i < dr->nvml.n_devices; i++) {
    const il_nvml_device *d = &dr->nvml.devices[i];
    if (d->handle_rc || !d->name[0]) continue;
    if (!first_name) first_name = d->name;
    else mixed |= strcmp(d->name, first_name) != 0;
  }
  if (order) il__check_ev(c, "CUDA_DEVICE_ORDER", "%s", order);
  if (mixed && (!order || strcmp(order, "PCI_BUS_ID"))) {
    if (c->verdict == IL_VERDICT_OK) {
      c->verdict = IL_VERDICT_WARN;
      c->scenario = 14;
    }
    size_t l = strlen(c->summary);
    snprintf(c->summary + l, sizeof c->summary - l, "; mixed GPU models: CUDA numbering may differ from nvidia-smi");
    il__check_fix(c, "export CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA indices match nvidia-smi");
  }

  /* NVIDIA_VISIBLE_DEVICES: read by the container runtime at container start only. */
  const char *nvd = il_sysfs_getenv(fs, "NVIDIA_VISIBLE_DEVICES");
  bool legacy = il_sysfs_getenv(fs, "CUDA_VERSION") && !il_sysfs_getenv(fs, "NVIDIA_REQUIRE_CUDA");
  il_visible_nvidia(nvd, legacy, &dr->nvvis);
  const il_nvvis *nv = &dr->nvvis;
  int gpus_here = il_nvml_usable_count(&dr->nvml);
  if (!dr->in_container) {
    c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_OK, 0, "NVIDIA_VISIBLE_DEVICES %s%s%s: only the NVIDIA container runtime reads it, "
                      "when a container starts; it does not affect this process", nvd ? "=\"" : "unset", nvd ? nvd : "", nvd ? "\"" : "");
  } else if ((nv->mode == IL_NVVIS_VOID || nv->mode == IL_NVVIS_UNSET_VOID) && (gpus_here > 0 || il_sysfs_exists(fs, "/dev/nvidiactl"))) {
    /* CDI (or --device) injected the GPU: nvidia-ctk's CDI specs set NVIDIA_VISIBLE_DEVICES=void
     * so the legacy hook stays out (https://github.com/NVIDIA/nvidia-container-toolkit/pull/395). */
    c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_OK, 0,
                      "NVIDIA_VISIBLE_DEVICES %s, yet %s: the GPU came through CDI (or --device), which sets it to void on purpose%s",
                      nv->mode == IL_NVVIS_VOID ? "is void" : "is unset", gpus_here > 0 ? "GPUs are injected" : "/dev/nvidiactl is here",
                      gpus_here > 0 ? "" : " (NVML does not work: see driver.nvml)");
  } else if ((nv->mode == IL_NVVIS_VOID || nv->mode == IL_NVVIS_UNSET_VOID) && gpus_here == 0) {
    if (nv->mode == IL_NVVIS_VOID || dr->gpu_expected) {
      c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_FAIL, 21,
                        "NVIDIA_VISIBLE_DEVICES %s: the NVIDIA runtime behaved like runc and injected neither GPUs nor driver libraries",
                        nv->mode == IL_NVVIS_VOID ? "is void" : "is unset or empty");
      il__cgroup_fix_request_gpus(dr, c);
    } else {
      c = il__check_na(&dr->checks, "visibility.nvidia", IL_VERDICT_OK, 0, "NVIDIA_VISIBLE_DEVICES unset and no NVIDIA GPU on this machine");
    }
  } else if (nv->mode == IL_NVVIS_NONE) {
    c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_WARN, 21, "NVIDIA_VISIBLE_DEVICES=none: driver libraries injected but no GPU");
    il__check_fix(c, "Restart the container with -e NVIDIA_VISIBLE_DEVICES=all (or --gpus all)");
  } else {
    char ents[200] = "";
    for (int i = 0; i < nv->n_entries; i++) {
      size_t l = strlen(ents);
      il_appendf(ents, sizeof ents, "%s%s (%s)", l ? ", " : "", nv->entries[i], nv->kind[i]);
    }
    if (nv->mode == IL_NVVIS_LIST)
      c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_OK, 0, "NVIDIA_VISIBLE_DEVICES=%s: %d GPU%s injected into this container", ents,
                        gpus_here, gpus_here == 1 ? "" : "s");
    else
      c = il__check_add(&dr->checks, "visibility.nvidia", IL_VERDICT_OK, 0, "NVIDIA_VISIBLE_DEVICES %s: %d GPU%s injected into this container",
                        il_visible_nvidia_mode_name(nv->mode), gpus_here, gpus_here == 1 ? "" : "s");
  }
  il__check_ev(c, "mode", "%s", il_visible_nvidia_mode_name(nv->mode));
  if (nvd) il__check_ev(c, "NVIDIA_VISIBLE_DEVICES", "%s", nvd);
}

/* ---- gpu.mig, gpu.memory, gpu.health -------------------------------------------------- */

void il__driver_check_gpus(il_doctor *dr) {
  const il_nvml_snapshot_t *s = &dr->nvml;
  int n = il_nvml_usable_count(&dr->nvml);
  il_check *c;
  /* MIG */
  {
    char text[400] = "";
    il_verdict v = IL_VERDICT_OK;
    int gpu = -1, enabled = 0;
    for (int i = 0; i < s->n_devices; i++) {
      const il_nvml_device *d = &s->devices[i];
      if (d->handle_rc || d->mig_current < 0) continue;
      size_t l = strlen(text);
      if (d->mig_current == 1) enabled++;
      if (d->mig_current == 1 && d->mig_devices == 0) {
        il_appendf(text, sizeof text, "%sGPU %d: MIG enabled but no GPU/compute instances, so CUDA sees no device", l ? "; " : "", i);
        v = IL_VERDICT_FAIL;
        gpu = i;
      } else if (d->mig_pending >= 0 && d->mig_pending != d->mig_current) {
        il_appendf(text, sizeof text, "%sGPU %d: MIG mode change pending (current %d, pending %d): needs a GPU reset", l ? "; " : "", i,
                 d->mig_current, d->mig_pending);
        if (v < IL_VERDICT_WARN) v = IL_VERDICT_WARN;
        if (gpu < 0) gpu = i;
      } else if (d->mig_current == 1) {
        il_appendf(text, sizeof text, "%sGPU %d: MIG enabled, %d MIG device%s (one per process is enumerated by CUDA)", l ? "; " : "", i,
                 d->mig_devices, d->mig_devices == 1 ? "" : "s");
      }
    }
    if (!text[0]) snprintf(text, sizeof text, n ? "MIG disabled or not supported on every GPU" : "no GPU");
    c = il__check_add(&dr->checks, "gpu.mig", v, v ? 13 : 0, "%s", text);
    if (!n && v == IL_VERDICT_OK) c->na = true;
    if (v == IL_VERDICT_FAIL) {
      il__check_fix(c, "Create instances: sudo nvidia-smi mig -i %d -cgi 0 -C   (profile 0 spans the GPU; nvidia-smi mig -i %d -lgip lists the "
                       "smaller ones), or disable MIG: sudo nvidia-smi -i %d -mig 0", gpu, gpu, gpu);
      il__check_fix(c, "MIG instances do not survive a reboot: apply the layout at boot (nvidia-mig-parted)");
    } else if (v == IL_VERDICT_WARN) {
      il__check_fix(c, "Reset the GPU when idle: sudo nvidia-smi -i %d -r   (or reboot)", gpu);
    }
    il__check_ev(c, "mig_enabled_gpus", "%d", enabled);
  }
  /* Memory already used by other processes, compute mode. */
  {
    char text[400] = "", fixpids[200] = "";
    il_verdict v = IL_VERDICT_OK;
    int idle_gpu = -1, mode_gpu = -1;
    char idle_uuid[96] = "";
    for (int i = 0; i < s->n_devices; i++) {
      const il_nvml_device *d = &s->devices[i];
      if (d->handle_rc || d->mem_total <= 0) continue;
      size_t l = strlen(text);
      double used = (double)d->mem_used / (double)d->mem_total;
      /* A display or idle driver keeps a few hundred MiB; more than 10% and 1 GiB held means
       * another program has this GPU's memory. */
      if (used > 0.10 && d->mem_used > (1ll << 30)) {
        char u[32], t[32];
        il_mem_format_bytes((size_t)d->mem_used, u, sizeof u);
        il_mem_format_bytes((size_t)d->mem_total, t, sizeof t);
        il_appendf(text, sizeof text, "%sGPU %d: %s of %s already used by %d process%s", l ? "; " : "", i, u, t,
                   d->n_procs_total, d->n_procs_total == 1 ? "" : "es");
        for (int k = 0; k < d->n_procs; k++) {
          size_t fl = strlen(fixpids);
          il_appendf(fixpids, sizeof fixpids, "%s%u", fl ? " " : "", d->procs[k].pid);
        }
        if (v < IL_VERDICT_WARN) v = IL_VERDICT_WARN;
      } else if (idle_gpu < 0) {
        idle_gpu = i;
        il_sysfs_copy(idle_uuid, sizeof idle_uuid, d->uuid);
      }
      l = strlen(text);
      if (d->compute_mode == 2) {
        il_appendf(text, sizeof text, "%sGPU %d: compute mode Prohibited (no CUDA contexts allowed)", l ? "; " : "", i);
        v = IL_VERDICT_FAIL;
        if (mode_gpu < 0) mode_gpu = i;
      } else if (d->compute_mode == 3 && d->n_procs > 0) {
        il_appendf(text, sizeof text, "%sGPU %d: compute mode Exclusive_Process and already in use", l ? "; " : "", i);
        v = IL_VERDICT_FAIL;
        if (mode_gpu < 0) mode_gpu = i;
      }
    }
    if (!text[0]) snprintf(text, sizeof text, n ? "GPU memory free on every GPU" : "no GPU");
    c = il__check_add(&dr->checks, "gpu.memory", v, v ? 25 : 0, "%s", text);
    if (!n && v == IL_VERDICT_OK) c->na = true;
    if (fixpids[0]) {
      il__check_fix(c, "Stop the other users of the GPU (ps -o pid,user,cmd -p %s; then kill PID), or make the job smaller "
                       "(inferlab --ctx / --n-seq; vLLM --gpu-memory-utilization), or pick another GPU", fixpids);
      if (idle_gpu >= 0) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", idle_gpu);
        il__check_fix(c, "A GPU with free memory: export CUDA_VISIBLE_DEVICES=%s", idle_uuid[0] ? idle_uuid : idx);
      }
    }
    if (mode_gpu >= 0) il__check_fix(c, "Set the compute mode back to Default: sudo nvidia-smi -i %d -c DEFAULT", mode_gpu);
    for (int i = 0; i < s->n_devices && c->n_evidence < IL_CHECK_MAX_EVIDENCE; i++) {
      const il_nvml_device *d = &s->devices[i];
      if (d->handle_rc || d->mem_total <= 0) continue;
      char key[40];
      snprintf(key, sizeof key, "gpu%d_used_bytes", i);
      if (d->mem_used >= 0) il__check_ev(c, key, "%lld of %lld", d->mem_used, d->mem_total);
      else il__check_ev(c, key, "unknown of %lld", d->mem_total);
    }
  }
  /* Health: GPU lost, ECC, pending retirement. */
  {
    char text[400] = "";
    il_verdict v = IL_VERDICT_OK;
    int scen = 0, ecc_gpu = -1;
    for (int i = 0; i < s->n_devices; i++) {
      const il_nvml_device *d = &s->devices[i];
      size_t l = strlen(text);
      if (d->handle_rc == IL_NVML_ERROR_GPU_IS_LOST) {
        il_appendf(text, sizeof text, "%sGPU %d has fallen off the bus (NVML_ERROR_GPU_IS_LOST)", l ? "; " : "", i);
        v = IL_VERDICT_FAIL;
        scen = 10;
      } else if (d->handle_rc) {
        il_appendf(text, sizeof text, "%sGPU %d: cannot get a handle (%s)", l ? "; " : "", i, il_nvml_code_name(d->handle_rc));
        v = IL_VERDICT_FAIL;
      } else if (d->ecc_uncorrected_volatile > 0 || d->retired_pending == 1) {
        il_appendf(text, sizeof text, "%sGPU %d: %lld uncorrectable ECC error%s since boot%s", l ? "; " : "", i,
                 d->ecc_uncorrected_volatile > 0 ? d->ecc_uncorrected_volatile : 0, d->ecc_uncorrected_volatile == 1 ? "" : "s",
                 d->retired_pending == 1 ? ", page retirement pending (needs reset)" : "");
        if (v < IL_VERDICT_WARN) v = IL_VERDICT_WARN;
        if (!scen) scen = 11;
        if (ecc_gpu < 0) ecc_gpu = i;
      }
    }
    if (!text[0]) snprintf(text, sizeof text, n ? "no lost GPU, no uncorrectable ECC errors" : "no GPU");
    c = il__check_add(&dr->checks, "gpu.health", v, scen, "%s", text);
    if (!n && v == IL_VERDICT_OK) c->na = true;
    if (scen == 10)
      il__check_fix(c, "Drain the node and power-cycle it; check cooling, power cables and SBIOS; RMA if it repeats (kernel log: sudo dmesg | grep -i xid)");
    else if (scen == 11)
      il__check_fix(c, "Reset the GPU when idle (sudo nvidia-smi -i %d -r) or reboot to activate row remapping/page retirement; RMA on repeats", ecc_gpu);
    else if (v == IL_VERDICT_FAIL)
      il__check_fix(c, "See the kernel log: sudo dmesg | grep -i -e nvrm -e xid");
  }
}

