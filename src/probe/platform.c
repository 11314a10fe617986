/* probe/platform: the machine below the driver library: NVIDIA PCI functions and the driver
 * bound to each, the kernel modules (nvidia flavour and version, nvidia_uvm, nouveau), the
 * /dev/nvidia* nodes and who may open them, the hypervisor, and the host (CPU, memory,
 * kernel). Facts come from files under the sysroot: /sys/bus/pci/devices, /proc/driver/nvidia,
 * /proc/modules, /dev, /proc/cpuinfo, /sys/class/dmi/id, /proc/cmdline, /etc/modprobe.d.
 * Not for: NVML/CUDA results (probe/driver) or containers (probe/container).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/platform.h"
#include "probe/cgroup.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/gpufamily.h"

/* ---- facts ---------------------------------------------------------------------------- */

static bool il__module_listed(const char *modules, const char *name) {
  size_t l = strlen(name);
  for (const char *p = modules; p && *p;) {
    if (!strncmp(p, name, l) && p[l] == ' ') return true;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return false;
}

static void il__scan_pci(il_doctor *dr) {
  char **names;
  int n;
  if (il_sysfs_list(&dr->fs, "/sys/bus/pci/devices", &names, &n) != IL_OK) return;
  for (int i = 0; i < n && dr->n_pci < (int)(sizeof dr->pci / sizeof dr->pci[0]); i++) {
    char rel[512], v[64], cls[64];
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/vendor", names[i]);
    if (!il_sysfs_read_line(&dr->fs, rel, v, sizeof v) || strtoul(v, NULL, 16) != 0x10de) continue;
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/class", names[i]);
    /* 0x03xxxx: display controllers (VGA 0x0300, 3D 0x0302); skips the HDMI audio function. */
    if (!il_sysfs_read_line(&dr->fs, rel, cls, sizeof cls) || (strtoul(cls, NULL, 16) >> 16) != 0x03) continue;
    il_pci_gpu *g = &dr->pci[dr->n_pci++];
    memset(g, 0, sizeof *g);
    il_sysfs_copy(g->bdf, sizeof g->bdf, names[i]);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/device", names[i]);
    if (il_sysfs_read_line(&dr->fs, rel, v, sizeof v)) g->device_id = (unsigned)strtoul(v, NULL, 16);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/driver", names[i]);
    il_sysfs_link_name(&dr->fs, rel, g->driver, sizeof g->driver);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/iommu_group", names[i]);
    il_sysfs_link_name(&dr->fs, rel, g->iommu_group, sizeof g->iommu_group);
  }
  il_sysfs_list_free(names, n);
}

void il__platform_facts(il_doctor *dr) {
  il__scan_pci(dr);
  char line[512];
  if (il_sysfs_read_line(&dr->fs, "/proc/driver/nvidia/version", line, sizeof line)) {
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun ..." or
     * "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.54.03  Release Build ..." */
    dr->kmod_loaded = true;
    dr->kmod_open = strstr(line, "Open Kernel Module") != NULL;
    const char *m = strstr(line, "Module");
    for (const char *p = m ? m : line; *p; p++) {
      if (isdigit((unsigned char)*p) && (p == line || p[-1] == ' ')) {
        char ver[64];
        if (sscanf(p, "%63[0-9.]", ver) == 1 && strchr(ver, '.')) {
          il_sysfs_copy(dr->kmod_version, sizeof dr->kmod_version, ver);
          break;
        }
      }
    }
  }
  if (!dr->kmod_version[0] && il_sysfs_read_line(&dr->fs, "/sys/module/nvidia/version", line, sizeof line)) {
    dr->kmod_loaded = true;
    il_sysfs_copy(dr->kmod_version, sizeof dr->kmod_version, line);
  }
  char *mods = il_mem_alloc(IL_MEM_OTHER, 1 << 16, "/proc/modules");
  if (mods) {
    if (il_sysfs_read(&dr->fs, "/proc/modules", mods, 1 << 16, NULL) == IL_OK) {
      if (il__module_listed(mods, "nvidia")) dr->kmod_loaded = true;
      dr->uvm_loaded = il__module_listed(mods, "nvidia_uvm");
      dr->nouveau_loaded = il__module_listed(mods, "nouveau");
    }
    il_mem_free(mods);
  }
  dr->wsl = il_sysfs_stristr(dr->host.kernel, "microsoft") != NULL || il_sysfs_exists(&dr->fs, "/dev/dxg");
  dr->gpu_expected = dr->n_pci > 0 || dr->kmod_loaded || il_sysfs_exists(&dr->fs, "/dev/nvidiactl") || dr->wsl;
}

/* ---- kernel modules and device nodes -------------------------------------------------- */

static void il__check_kmod_nvidia(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  il_check *c;
  if (dr->kmod_loaded) {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_OK, 0, "nvidia kernel module %s loaded (%s)",
                      dr->kmod_version[0] ? dr->kmod_version : "(version unknown)", dr->kmod_open ? "open" : "proprietary");
    il__check_ev(c, "version", "%s", dr->kmod_version);
    il__check_ev(c, "flavor", "%s", dr->kmod_open ? "open" : "proprietary");
    return;
  }
  if (dr->wsl) {
    il__check_na(&dr->checks, "kmod.nvidia", IL_VERDICT_OK, 0, "WSL2: no Linux kernel module needed (GPU paravirtualization through /dev/dxg)");
    return;
  }
  if (dr->tegra) {
    il__check_na(&dr->checks, "kmod.nvidia", IL_VERDICT_OK, 0, "Jetson/Tegra: the integrated GPU uses the nvgpu driver, not nvidia.ko (see jetson.platform)");
    return;
  }
  if (dr->n_pci == 0) {
    il__check_na(&dr->checks, "kmod.nvidia", IL_VERDICT_OK, 0, "no nvidia kernel module and no NVIDIA GPU: nothing to load");
    return;
  }
  char kver[128], dir[256];
  il_sysfs_copy(kver, sizeof kver, dr->host.kernel);
  snprintf(dir, sizeof dir, "/lib/modules/%s", kver);
  bool for_running = kver[0] && il_sysfs_find_below(fs, dir, "nvidia.ko", 5);
  char other[128] = "";
  char **names;
  int n;
  if (!for_running && il_sysfs_list(fs, "/lib/modules", &names, &n) == IL_OK) {
    for (int i = 0; i < n && !other[0]; i++) {
      if (!strcmp(names[i], kver)) continue;
      char d[256];
      snprintf(d, sizeof d, "/lib/modules/%s", names[i]);
      if (il_sysfs_find_below(fs, d, "nvidia.ko", 5)) il_sysfs_copy(other, sizeof other, names[i]);
    }
    il_sysfs_list_free(names, n);
  }
  /* Secure Boot state from the EFI variable: 4 attribute bytes then 1 data byte [inferred path]. */
  char sb[8];
  size_t sbl = 0;
  bool secure_boot = il_sysfs_read(fs, "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", sb, sizeof sb, &sbl) == IL_OK &&
                     sbl >= 5 && sb[4] == 1;
  bool nouveau_bound = false;
  for (int i = 0; i < dr->n_pci; i++) nouveau_bound |= !strcmp(dr->pci[i].driver, "nouveau");
  if (nouveau_bound) {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_FAIL, 6, "nvidia kernel module not loaded: nouveau owns the GPU (see kmod.nouveau)");
    il__check_fix(c, "Blacklist nouveau (see kmod.nouveau), then reboot");
  } else if (!for_running && other[0]) {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_FAIL, 4,
                      "nvidia kernel module not loaded: it was built for kernel %s but kernel %s is running (DKMS did not rebuild it)", other, kver);
    char cmd[400];
    il__check_fix(c, "%s", il__distro_cmd(dr, IL_CMD_REBUILD_MODULE, kver, cmd, sizeof cmd));
  } else if (for_running && secure_boot) {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_FAIL, 5,
                      "nvidia kernel module installed for %s but not loaded, and Secure Boot is on: the unsigned module was likely rejected", kver);
    char cmd[400];
    il__check_fix(c, "Enroll the module signing key: %s (or disable Secure Boot)", il__distro_cmd(dr, IL_CMD_ENROLL_KEY, NULL, cmd, sizeof cmd));
  } else if (for_running) {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_FAIL, 4, "nvidia kernel module installed for %s but not loaded", kver);
    char cmd[400];
    il__check_fix(c, "sudo modprobe nvidia   (the error it prints names the cause; 'Key was rejected by service' = Secure Boot: %s)",
                  il__distro_cmd(dr, IL_CMD_ENROLL_KEY, NULL, cmd, sizeof cmd));
  } else {
    c = il__check_add(&dr->checks, "kmod.nvidia", IL_VERDICT_FAIL, 4, "NVIDIA GPU present but no nvidia kernel module installed for kernel %s", kver[0] ? kver : "(unknown)");
    char cmd[400];
    il__check_fix(c, "Install the driver for the running kernel: %s", il__distro_cmd(dr, IL_CMD_INSTALL_DRIVER, NULL, cmd, sizeof cmd));
  }
  il__check_ev(c, "running_kernel", "%s", kver);
  il__check_ev(c, "module_for_running_kernel", "%s", for_running ? "yes" : "no");
  if (other[0]) il__check_ev(c, "module_for_other_kernel", "%s", other);
  il__check_ev(c, "secure_boot", "%s", secure_boot ? "enabled" : "disabled or unknown");
}

static void il__check_kmod_flavor(il_doctor *dr) {
  il_check *c;
  if (!dr->kmod_loaded || dr->n_pci == 0) {
    il__check_na(&dr->checks, "kmod.flavor", IL_VERDICT_OK, 0, "nothing to match (%s)", dr->kmod_loaded ? "no NVIDIA PCI function" : "no nvidia module loaded");
    return;
  }
  /* Volta and older have no GSP, so the open module cannot drive them; Blackwell requires it
   * (probe/gpufamily has the id table and its sources). */
  for (int i = 0; i < dr->n_pci; i++) {
    const il_pci_gpu *g = &dr->pci[i];
    il_gpu_family fam = il_gpufamily_of(g->device_id);
    if (dr->kmod_open && fam != IL_GPU_UNKNOWN && fam <= IL_GPU_VOLTA) {
      c = il__check_add(&dr->checks, "kmod.flavor", IL_VERDICT_FAIL, 8,
                        "open kernel module on GPU 10de:%04x at %s, which has no GSP (Volta or older): the open module cannot drive it",
                        g->device_id, g->bdf);
      char br[8];
      snprintf(br, sizeof br, "%.3s", dr->kmod_version[0] ? dr->kmod_version : "580");
      il__check_fix(c, "Install the proprietary module flavour and reboot (Ubuntu: sudo apt install nvidia-driver-%s instead of nvidia-driver-%s-open; "
                       "negativo17: sudo sed -i -e 's/kernel-open$/kernel/g' /etc/nvidia/kernel.conf && sudo akmods --rebuild)", br, br);
      il__check_ev(c, "pci_device", "10de:%04x", g->device_id);
      il__check_ev(c, "flavor", "open");
      return;
    }
    if (!dr->kmod_open && fam == IL_GPU_BLACKWELL) {
      c = il__check_add(&dr->checks, "kmod.flavor", IL_VERDICT_FAIL, 8,
                        "proprietary kernel module on GPU 10de:%04x at %s (Blackwell, from the PCI id), which requires the NVIDIA open kernel modules",
                        g->device_id, g->bdf);
      char br[8];
      snprintf(br, sizeof br, "%.3s", dr->kmod_version);
      if (dr->distro.family == IL_DISTRO_UBUNTU || dr->distro.family == IL_DISTRO_UNKNOWN)
        il__check_fix(c, "Install the open module flavour and reboot: sudo apt install nvidia-driver-%s-open && sudo reboot", br[0] ? br : "570");
      else if (dr->distro.family == IL_DISTRO_FEDORA)
        il__check_fix(c, "Build the open module flavour and reboot: sudo sh -c 'echo %%_with_kmod_nvidia_open 1 > /etc/rpm/macros.nvidia-kmod' && sudo akmods --kernels $(uname -r) --rebuild && sudo reboot");
      else
        il__check_fix(c, "Install the open kernel module flavour of driver %s and reboot (RHEL: sudo dnf install nvidia-open; Arch: sudo pacman -S nvidia-open)",
                      dr->kmod_version[0] ? dr->kmod_version : "570 or newer");
      il__check_ev(c, "pci_device", "10de:%04x", g->device_id);
      il__check_ev(c, "flavor", "proprietary");
      return;
    }
  }
  c = il__check_add(&dr->checks, "kmod.flavor", IL_VERDICT_OK, 0, "%s module suits every NVIDIA GPU here", dr->kmod_open ? "open" : "proprietary");
  il__check_ev(c, "flavor", "%s", dr->kmod_open ? "open" : "proprietary");
}

static void il__check_nouveau(il_doctor *dr) {
  const char *bound = NULL;
  for (int i = 0; i < dr->n_pci; i++)
    if (!strcmp(dr->pci[i].driver, "nouveau")) bound = dr->pci[i].bdf;
  il_check *c;
  if (!bound && !dr->nouveau_loaded) {
    il__check_add(&dr->checks, "kmod.nouveau", IL_VERDICT_OK, 0, "nouveau not loaded");
    return;
  }
  if (bound)
    c = il__check_add(&dr->checks, "kmod.nouveau", IL_VERDICT_FAIL, 6, "nouveau owns the NVIDIA GPU at %s, so the nvidia driver cannot probe it", bound);
  else
    c = il__check_add(&dr->checks, "kmod.nouveau", IL_VERDICT_WARN, 6, "nouveau is loaded (it may claim the GPU before nvidia at next boot)");
  char ini[64];
  il__check_fix(c, "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf && "
                   "%s && sudo reboot", il__distro_cmd(dr, IL_CMD_INITRAMFS, NULL, ini, sizeof ini));
  il__check_ev(c, "nouveau_loaded", "%s", dr->nouveau_loaded ? "yes" : "no");
  if (bound) il__check_ev(c, "bound_to", "%s", bound);
  il__check_ev(c, "blacklist_file", "%s", il_sysfs_exists(&dr->fs, "/etc/modprobe.d/blacklist-nouveau.conf") ? "present" : "missing");
}

static void il__check_uvm(il_doctor *dr) {
  il_check *c;
  bool node = il_sysfs_exists(&dr->fs, "/dev/nvidia-uvm");
  if (dr->wsl) {
    il__check_na(&dr->checks, "kmod.uvm", IL_VERDICT_OK, 0, "WSL2: unified memory goes through /dev/dxg");
    return;
  }
  if (!dr->kmod_loaded) {
    il__check_na(&dr->checks, "kmod.uvm", IL_VERDICT_OK, 0, "not checked: the nvidia module is not loaded%s", dr->n_pci ? " (see kmod.nvidia)" : "");
    return;
  }
  if (!dr->uvm_loaded && !node) {
    c = il__check_add(&dr->checks, "kmod.uvm", IL_VERDICT_FAIL, 16,
                      "nvidia_uvm is not loaded and /dev/nvidia-uvm is missing: CUDA cannot initialize (cuInit returns CUDA_ERROR_UNKNOWN)");
    if (dr->in_container)
      il__check_fix(c, "On the host: sudo modprobe nvidia_uvm && sudo nvidia-modprobe -c 0 -u; then restart this container with --gpus all");
    else
      il__check_fix(c, "sudo modprobe nvidia_uvm && sudo nvidia-modprobe -c 0 -u   (load at boot: echo nvidia_uvm | sudo tee /etc/modules-load.d/nvidia-uvm.conf)");
  } else if (!node) {
    c = il__check_add(&dr->checks, "kmod.uvm", IL_VERDICT_FAIL, 16, "nvidia_uvm is loaded but /dev/nvidia-uvm is missing");
    if (dr->in_container) il__check_fix(c, "Restart the container with the NVIDIA runtime (--gpus all) so /dev/nvidia-uvm is injected");
    else il__check_fix(c, "sudo nvidia-modprobe -c 0 -u   (creates /dev/nvidia-uvm and /dev/nvidia-uvm-tools)");
  } else {
    c = il__check_add(&dr->checks, "kmod.uvm", IL_VERDICT_OK, 0, "nvidia_uvm loaded, /dev/nvidia-uvm present");
  }
  il__check_ev(c, "nvidia_uvm_module", "%s", dr->uvm_loaded ? "loaded" : "not listed in /proc/modules");
  il__check_ev(c, "dev_nvidia_uvm", "%s", node ? "present" : "missing");
}

static void il__mode_text(const il_sysfs *fs, const il_sysfs_stat_t *st, char *buf, size_t n) {
  char m[11] = "----------", grp[64];
  m[0] = st->is_char ? 'c' : st->is_reg ? '-' : '?';
  static const char rwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; i++)
    if (st->mode & (0400u >> i)) m[1 + i] = rwx[i];
  il_sysfs_group_name(fs, st->gid, grp, sizeof grp);
  snprintf(buf, n, "%s uid %u group %s", m, (unsigned)st->uid, grp);
}

static void il__check_devnodes(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  il_check *c;
  if (dr->wsl) {
    bool dxg = il_sysfs_exists(fs, "/dev/dxg");
    if (dxg) il__check_na(&dr->checks, "devnodes", IL_VERDICT_OK, 0, "WSL2: /dev/dxg present (no /dev/nvidia* nodes are used)");
    else {
      c = il__check_add(&dr->checks, "devnodes", IL_VERDICT_FAIL, 24, "WSL2 kernel but /dev/dxg is missing: no GPU paravirtualization");
      il__check_fix(c, "Update WSL and the Windows NVIDIA driver (PowerShell: wsl --update; wsl --shutdown)");
    }
    return;
  }
  if (!dr->gpu_expected) {
    il__check_na(&dr->checks, "devnodes", IL_VERDICT_OK, 0, "no /dev/nvidia* nodes needed (no NVIDIA GPU)");
    return;
  }
  if (dr->tegra && !il_sysfs_exists(fs, "/dev/nvidiactl")) {
    il__check_na(&dr->checks, "devnodes", IL_VERDICT_OK, 0, "Jetson/Tegra: the integrated GPU's nodes are /dev/nvmap, /dev/nvhost-* or /dev/nvgpu (see jetson.platform)");
    return;
  }
  int n = il_nvml_usable_count(&dr->nvml);
  if (n == 0) {
    for (int i = 0; i < dr->n_pci; i++) n += !strcmp(dr->pci[i].driver, "nvidia");
  }
  char nodes[20][32];
  int nn = 0;
  strcpy(nodes[nn++], "/dev/nvidiactl");
  for (int i = 0; i < n && nn < 18; i++) snprintf(nodes[nn++], sizeof nodes[0], "/dev/nvidia%d", i);
  strcpy(nodes[nn++], "/dev/nvidia-uvm");
  char missing[300] = "", denied[400] = "";
  gid_t deny_gid = 0;
  bool deny_any = false;
  il_sysfs_stat_t denied_st;
  memset(&denied_st, 0, sizeof denied_st);
  il_check tmp;
  memset(&tmp, 0, sizeof tmp);
  for (int i = 0; i < nn; i++) {
    il_sysfs_stat_t st;
    il_sysfs_stat(fs, nodes[i], true, &st);
    /* /dev/nvidia-uvm has its own check (kmod.uvm); only its access matters here. */
    if (!st.exists) {
      if (strcmp(nodes[i], "/dev/nvidia-uvm")) {
        size_t l = strlen(missing);
        il_appendf(missing, sizeof missing, "%s%s", l ? " " : "", nodes[i]);
      }
      continue;
    }
    char mt[128];
    il__mode_text(fs, &st, mt, sizeof mt);
    il__check_ev(&tmp, nodes[i], "%s", mt);
    if (il_sysfs_is_real(fs) && !st.is_char) {
      size_t l = strlen(missing);
      il_appendf(missing, sizeof missing, "%s%s(not a device)", l ? " " : "", nodes[i]);
      continue;
    }
    if (!il_sysfs_may(fs, &st, 6)) {
      size_t l = strlen(denied);
      il_appendf(denied, sizeof denied, "%s%s (%s)", l ? ", " : "", nodes[i], mt);
      if (!deny_any) denied_st = st;
      deny_any = true;
      deny_gid = st.gid;
    }
  }
  if (missing[0]) {
    c = il__check_add(&dr->checks, "devnodes", IL_VERDICT_FAIL, dr->in_container ? 21 : 4, "device nodes missing: %s", missing);
    if (dr->in_container) il__cgroup_fix_request_gpus(dr, c);
    else il__check_fix(c, "sudo nvidia-modprobe -c 0 -u   (creates the nodes; if it fails, the nvidia module is not loaded: see kmod.nvidia)");
  } else if (deny_any) {
    char grp[64];
    il_sysfs_group_name(fs, deny_gid, grp, sizeof grp);
    c = il__check_add(&dr->checks, "devnodes", IL_VERDICT_FAIL, 17, "not readable/writable by uid %u: %s", (unsigned)fs->uid, denied);
    if (dr->in_container) {
      /* Inside, the nodes carry the modes the host (or the runtime's hook) gave them: a group
       * change in here or a new login does nothing; the container must start with the group. */
      if ((denied_st.mode & 060) == 060)
        il__check_fix(c, "Start the container with the nodes' group (gid %u): docker run --group-add %u ...   (rootless podman: "
                         "--group-add keep-groups, with the host user in that group); Kubernetes: securityContext.supplementalGroups: [%u]",
                      (unsigned)deny_gid, (unsigned)deny_gid, (unsigned)deny_gid);
      else
        il__check_fix(c, "On the host, restore the driver's default mode 0666 for /dev/nvidia* (remove NVreg_DeviceFileMode/NVreg_DeviceFileUID/GID), "
                         "or run this container's process as the nodes' owner");
    } else if (strcmp(grp, "root") && strcmp(grp, "0") && (denied_st.mode & 060) == 060)
      il__check_fix(c, "sudo usermod -aG %s $USER   then log out and in (or: newgrp %s)", grp, grp);
    else
    {
      char ini[64];
      il__check_fix(c, "Restore the driver default (root:root 0666): remove NVreg_DeviceFileMode/NVreg_DeviceFileGID from /etc/modprobe.d/*nvidia*.conf, "
                       "then %s && sudo reboot", il__distro_cmd(dr, IL_CMD_INITRAMFS, NULL, ini, sizeof ini));
    }

  } else {
    c = il__check_add(&dr->checks, "devnodes", IL_VERDICT_OK, 0, "%d device node%s present and usable by uid %u", nn, nn == 1 ? "" : "s", (unsigned)fs->uid);
  }
  for (int i = 0; i < tmp.n_evidence; i++) il__check_ev(c, tmp.evidence[i].key, "%s", tmp.evidence[i].value);
}

void il__platform_checks_kmod(il_doctor *dr) {
  il__check_kmod_nvidia(dr);
  il__check_kmod_flavor(dr);
  il__gpufamily_check(dr);
  il__check_nouveau(dr);
  il__check_uvm(dr);
  il__check_devnodes(dr);
}

/* ---- virtualization and PCI ------------------------------------------------------------ */

void il__platform_checks_virt(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char vendor[128] = "", product[128] = "";
  il_sysfs_read_line(fs, "/sys/class/dmi/id/sys_vendor", vendor, sizeof vendor);
  il_sysfs_read_line(fs, "/sys/class/dmi/id/product_name", product, sizeof product);
  char **groups;
  int ngroups = 0;
  if (il_sysfs_list(fs, "/sys/kernel/iommu_groups", &groups, &ngroups) == IL_OK) il_sysfs_list_free(groups, ngroups);
  char dmi[280] = "";
  if (vendor[0] || product[0]) snprintf(dmi, sizeof dmi, " (%s%s%s)", vendor, vendor[0] && product[0] ? " " : "", product);
  il_check *c = il__check_add(&dr->checks, "virt.hypervisor", IL_VERDICT_OK, 0, "%s%s; IOMMU %s (%d group%s)",
                              dr->host.hypervisor_flag ? "virtual machine" : "no hypervisor flag (bare metal)", dmi,
                              ngroups ? "on" : "off or not exposed", ngroups, ngroups == 1 ? "" : "s");
  il__check_ev(c, "hypervisor_flag", "%s", dr->host.hypervisor_flag ? "yes" : "no");
  il__check_ev(c, "dmi", "%s %s", vendor, product);
  il__check_ev(c, "iommu_groups", "%d", ngroups);

  if (dr->n_pci == 0) {
    c = il__check_na(&dr->checks, "virt.pci", IL_VERDICT_OK, 0, "no NVIDIA display function (vendor 0x10de, class 0x03) on the PCI bus");
    return;
  }
  char list[400] = "", vfio[200] = "", none[200] = "";
  int n_vfio = 0, n_none = 0, n_nvidia = 0;
  for (int i = 0; i < dr->n_pci; i++) {
    const il_pci_gpu *g = &dr->pci[i];
    const char *what = !g->driver[0] ? "no driver bound"
                       : !strcmp(g->driver, "vfio-pci") ? "reserved for passthrough to a VM"
                       : !strcmp(g->driver, "nouveau") ? "open-source nouveau (see kmod.nouveau)"
                       : !strcmp(g->driver, "nvidia") ? "usable"
                                                      : "other driver";
    size_t l = strlen(list);
    il_appendf(list, sizeof list, "%s%s 10de:%04x %s: %s", l ? "; " : "", g->bdf, g->device_id, g->driver[0] ? g->driver : "none", what);
    if (!strcmp(g->driver, "vfio-pci")) {
      n_vfio++;
      l = strlen(vfio);
      il_appendf(vfio, sizeof vfio, "%s%s", l ? " " : "", g->bdf);
    } else if (!g->driver[0]) {
      n_none++;
      l = strlen(none);
      il_appendf(none, sizeof none, "%s%s", l ? " " : "", g->bdf);
    } else if (!strcmp(g->driver, "nvidia")) {
      n_nvidia++;
    }
  }
  il_verdict v = IL_VERDICT_OK;
  int scen = 0;
  if (n_vfio) {
    v = n_nvidia ? IL_VERDICT_WARN : IL_VERDICT_FAIL;
    scen = 7;
  } else if (n_none && dr->kmod_loaded) {
    v = n_nvidia ? IL_VERDICT_WARN : IL_VERDICT_FAIL;
    scen = dr->kmod_open ? 8 : 9;
  }
  c = il__check_add(&dr->checks, "virt.pci", v, scen, "%s", list);
  if (n_vfio) {
    char ini[64];
    char cmdline[1024] = "";
    il_sysfs_read_line(fs, "/proc/cmdline", cmdline, sizeof cmdline);
    const char *ids = strstr(cmdline, "vfio-pci.ids=");
    if (ids) il__check_ev(c, "kernel_cmdline", "%.*s", (int)strcspn(ids, " "), ids);
    il__check_fix(c, "GPU %s is reserved for passthrough: remove its id from 'vfio-pci.ids=' in /etc/default/grub and from 'options vfio-pci ids=' "
                     "in /etc/modprobe.d/*.conf, then %s && %s && sudo reboot", vfio, il__distro_cmd(dr, IL_CMD_INITRAMFS, NULL, ini, sizeof ini),
                  dr->distro.family == IL_DISTRO_FEDORA || dr->distro.family == IL_DISTRO_RHEL || dr->distro.family == IL_DISTRO_SUSE
                      ? "sudo grub2-mkconfig -o /boot/grub2/grub.cfg" : "sudo update-grub");
    char first[16];
    il_sysfs_copy(first, sizeof first, vfio);
    il__check_fix(c, "Or now, if no VM uses it: echo %s | sudo tee /sys/bus/pci/devices/%s/driver/unbind && echo %s | sudo tee /sys/bus/pci/drivers/nvidia/bind",
                  first, first, first);
  } else if (scen) {
    il__check_fix(c, "The nvidia driver did not take %s: sudo dmesg | grep -i nvrm   (GSP firmware, unsupported GPU, or open module on an old GPU)", none);
  }
  for (int i = 0; i < dr->n_pci && c->n_evidence < IL_CHECK_MAX_EVIDENCE; i++)
    il__check_ev(c, dr->pci[i].bdf, "10de:%04x driver=%s iommu_group=%s", dr->pci[i].device_id,
                 dr->pci[i].driver[0] ? dr->pci[i].driver : "none", dr->pci[i].iommu_group[0] ? dr->pci[i].iommu_group : "none");
}

/* ---- host ---------------------------------------------------------------------------------- */

void il__platform_checks_host(il_doctor *dr) {
  const il_host_info *h = &dr->host;
  int threads = dr->opt.cpu_threads > 0 ? dr->opt.cpu_threads : h->logical_cpus;
  il_check *c = il__check_add(&dr->checks, "host.cpu", IL_VERDICT_OK, 0, "%s, %d logical CPU%s, SIMD: %s; CPU backend: %s, %d thread%s",
                              h->cpu_model[0] ? h->cpu_model : "unknown CPU", h->logical_cpus, h->logical_cpus == 1 ? "" : "s",
                              h->simd[0] ? h->simd : "none found", h->cpu_backend, threads, threads == 1 ? "" : "s");
  il__check_ev(c, "model", "%s", h->cpu_model);
  il__check_ev(c, "simd", "%s", h->simd);
  il__check_ev(c, "logical_cpus", "%d", h->logical_cpus);
  il__check_ev(c, "cpu_backend", "%s", h->cpu_backend);

  char total[32] = "unknown", avail[32] = "unknown", bw[48] = "not measured";
  if (h->ram_total >= 0) il_mem_format_bytes((size_t)h->ram_total, total, sizeof total);
  if (h->ram_available >= 0) il_mem_format_bytes((size_t)h->ram_available, avail, sizeof avail);
  if (h->read_gbps > 0) snprintf(bw, sizeof bw, "%.1f GB/s", h->read_gbps);
  c = il__check_add(&dr->checks, "host.memory", IL_VERDICT_OK, 0, "%s RAM (%s available); read bandwidth %s; transparent huge pages: %s; %lld explicit huge page%s",
                    total, avail, bw, h->thp[0] ? h->thp : "unknown", h->hugepages_total > 0 ? h->hugepages_total : 0,
                    h->hugepages_total == 1 ? "" : "s");
  /* Unknown values read "unknown", never -1. */
  char v1[32], v2[32], v3[32];
  snprintf(v1, sizeof v1, h->ram_total >= 0 ? "%lld" : "unknown", h->ram_total);
  snprintf(v2, sizeof v2, h->ram_available >= 0 ? "%lld" : "unknown", h->ram_available);
  snprintf(v3, sizeof v3, h->hugepages_total >= 0 ? "%lld" : "unknown", h->hugepages_total);
  il__check_ev(c, "ram_total_bytes", "%s", v1);
  il__check_ev(c, "ram_available_bytes", "%s", v2);
  if (h->read_gbps > 0) il__check_ev(c, "read_bandwidth_gbps", "%.2f", h->read_gbps);
  else il__check_ev(c, "read_bandwidth_gbps", "not measured");
  il__check_ev(c, "thp", "%s", h->thp[0] ? h->thp : "unknown");
  il__check_ev(c, "hugepages_total", "%s", v3);

  c = il__check_add(&dr->checks, "host.kernel", IL_VERDICT_OK, 0, "Linux %s%s", h->kernel[0] ? h->kernel : "(release unknown)", dr->wsl ? " (WSL2)" : "");
  il__check_ev(c, "release", "%s", h->kernel);
  il__distro_check(dr);
}
