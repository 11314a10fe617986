/* probe/distro: which Linux distribution the sysroot holds (/etc/os-release), and the exact
 * command for each repair on it, so a fix says `dracut --force` on Fedora and
 * `update-initramfs -u` on Ubuntu, never one distribution's command for all.
 *
 * Families and their tools, from each project's own instructions:
 * - Ubuntu: ubuntu-drivers, DKMS, update-initramfs, libnvidia-compute-BRANCH, Secure Boot key
 *   through update-secureboot-policy --enroll-key or /var/lib/shim-signed/mok/MOK.der (research
 *   file scenario 5).
 * - Debian: the nvidia-driver package from non-free with DKMS, libcuda1 / libnvidia-ml1
 *   (https://wiki.debian.org/NvidiaGraphicsDrivers), DKMS key /var/lib/dkms/mok.pub.
 * - Fedora (RPM Fusion, http://rpmfusion.org/Howto/nVidia): akmod-nvidia builds the module
 *   (akmods --force --kernels KVER), xorg-x11-drv-nvidia-cuda holds libcuda, the akmods key is
 *   made by kmodgenca and lives in /etc/pki/akmods/certs/public_key.der, the initramfs is
 *   rebuilt with dracut, libraries are in /usr/lib64.
 * - RHEL, Rocky, Alma, CentOS (NVIDIA's repository, NVIDIA Driver Installation Guide,
 *   https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html): dnf with
 *   kernel-devel-KVER kernel-headers-KVER, the nvidia-open / nvidia-driver:latest-dkms streams,
 *   dracut, dnf versionlock.
 * - SUSE: zypper, nvidia-compute-G06, dracut. Arch: pacman, nvidia-open / nvidia-dkms,
 *   mkinitcpio.
 * Not for: deciding verdicts; every check asks here for its command text.
 */
#include <stdio.h>
#include <string.h>

#include "probe/distro.h"
#include "probe/doctor.h"

static bool il__word_in(const char *list, const char *w) {
  size_t l = strlen(w);
  for (const char *p = list; (p = strstr(p, w)) != NULL; p += l)
    if ((p == list || p[-1] == ' ' || p[-1] == '"') && (p[l] == 0 || p[l] == ' ' || p[l] == '"')) return true;
  return false;
}

/* Value of KEY= in os-release text, unquoted. */
static void il__osr(const char *text, const char *key, char *buf, size_t n) {
  buf[0] = 0;
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, key, kl) && p[kl] == '=') {
      const char *v = p + kl + 1;
      size_t l = strcspn(v, "\n");
      if (l && (*v == '"' || *v == '\'')) {
        v++;
        l -= 1;
        if (l && (v[l - 1] == '"' || v[l - 1] == '\'')) l--;
      }
      if (l >= n) l = n - 1;
      memcpy(buf, v, l);
      buf[l] = 0;
      return;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
}

void il__distro_facts(il_doctor *dr) {
  il_distro *d = &dr->distro;
  memset(d, 0, sizeof *d);
  char text[4096];
  if (il_sysfs_read(&dr->fs, "/etc/os-release", text, sizeof text, NULL) != IL_OK &&
      il_sysfs_read(&dr->fs, "/usr/lib/os-release", text, sizeof text, NULL) != IL_OK) {
    d->family = IL_DISTRO_UNKNOWN;
    return;
  }
  il__osr(text, "ID", d->id, sizeof d->id);
  il__osr(text, "ID_LIKE", d->id_like, sizeof d->id_like);
  il__osr(text, "VERSION_ID", d->version_id, sizeof d->version_id);
  il__osr(text, "PRETTY_NAME", d->pretty, sizeof d->pretty);
  char all[200];
  snprintf(all, sizeof all, "%s %s", d->id, d->id_like);
  if (!strcmp(d->id, "ubuntu") || il__word_in(d->id_like, "ubuntu")) d->family = IL_DISTRO_UBUNTU;
  else if (il__word_in(all, "debian")) d->family = IL_DISTRO_DEBIAN;
  else if (!strcmp(d->id, "fedora")) d->family = IL_DISTRO_FEDORA;
  else if (il__word_in(all, "rhel") || il__word_in(all, "centos") || il__word_in(all, "fedora")) d->family = IL_DISTRO_RHEL;
  else if (il__word_in(all, "suse") || il__word_in(all, "opensuse")) d->family = IL_DISTRO_SUSE;
  else if (il__word_in(all, "arch")) d->family = IL_DISTRO_ARCH;
  else d->family = IL_DISTRO_UNKNOWN;
}

const char *il_distro_family_name(il_distro_family f) {
  switch (f) {
    case IL_DISTRO_UBUNTU: return "ubuntu";
    case IL_DISTRO_DEBIAN: return "debian";
    case IL_DISTRO_FEDORA: return "fedora";
    case IL_DISTRO_RHEL: return "rhel";
    case IL_DISTRO_SUSE: return "suse";
    case IL_DISTRO_ARCH: return "arch";
    case IL_DISTRO_UNKNOWN: break;
  }
  return "unknown";
}

const char *il__distro_cmd(const il_doctor *dr, il_distro_cmd what, const char *arg, char *buf, size_t n) {
  il_distro_family f = dr->distro.family;
  const char *a = arg && *arg ? arg : "";
  char branch[8];
  snprintf(branch, sizeof branch, "%.3s", a); /* "535" from "535.54.03" */
  switch (what) {
    case IL_CMD_INSTALL_DRIVER:
      if (f == IL_DISTRO_DEBIAN) snprintf(buf, n, "sudo apt install linux-headers-$(uname -r) nvidia-driver firmware-misc-nonfree (non-free enabled) && sudo reboot");
      else if (f == IL_DISTRO_FEDORA) snprintf(buf, n, "sudo dnf install akmod-nvidia xorg-x11-drv-nvidia-cuda (RPM Fusion), wait for akmods to build the module, then sudo reboot");
      else if (f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install kernel-devel-$(uname -r) kernel-headers-$(uname -r) && sudo dnf install nvidia-open "
                                           "(NVIDIA's repository; RHEL 8: sudo dnf module install nvidia-driver:latest-dkms) && sudo reboot");
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install nvidia-open-driver-G06-signed-kmp-default nvidia-compute-G06 && sudo reboot");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S nvidia-open nvidia-utils (nvidia-dkms for other kernels) && sudo reboot");
      else if (f == IL_DISTRO_UBUNTU) snprintf(buf, n, "sudo apt install linux-headers-$(uname -r) && sudo ubuntu-drivers install && sudo reboot");
      else snprintf(buf, n, "sudo apt install linux-headers-$(uname -r) && sudo ubuntu-drivers install && sudo reboot   "
                            "(no /etc/os-release: on other distributions, their NVIDIA driver package with DKMS)");
      break;
    case IL_CMD_REBUILD_MODULE:
      if (f == IL_DISTRO_FEDORA) snprintf(buf, n, "sudo dnf install kernel-devel-%s && sudo akmods --force --kernels %s && sudo dracut --force && sudo reboot", a, a);
      else if (f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install kernel-devel-%s kernel-headers-%s && sudo dkms autoinstall -k %s && sudo dracut --force && sudo reboot", a, a, a);
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install --force nvidia-open-driver-G06-signed-kmp-default && sudo dracut --force && sudo reboot");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S linux-headers nvidia-dkms && sudo dkms autoinstall -k %s && sudo reboot", a);
      else snprintf(buf, n, "sudo apt install linux-headers-%s dkms && sudo dkms autoinstall -k %s && sudo reboot", a, a);
      break;
    case IL_CMD_ENROLL_KEY:
      if (f == IL_DISTRO_FEDORA) snprintf(buf, n, "sudo kmodgenca -a && sudo mokutil --import /etc/pki/akmods/certs/public_key.der, then sudo akmods --force, reboot and confirm in MokManager");
      else if (f == IL_DISTRO_UBUNTU) snprintf(buf, n, "sudo update-secureboot-policy --enroll-key (or sudo mokutil --import /var/lib/shim-signed/mok/MOK.der), reboot and confirm in MokManager");
      else snprintf(buf, n, "sudo mokutil --import /var/lib/dkms/mok.pub, reboot and confirm in MokManager");
      break;
    case IL_CMD_INITRAMFS:
      if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL || f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo dracut --force");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo mkinitcpio -P");
      else snprintf(buf, n, "sudo update-initramfs -u -k all");
      break;
    case IL_CMD_HOLD:
      if (f == IL_DISTRO_FEDORA) snprintf(buf, n, "sudo dnf versionlock add 'akmod-nvidia*' 'xorg-x11-drv-nvidia*'");
      else if (f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf versionlock add 'nvidia-*' 'kmod-nvidia*'");
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper addlock 'nvidia-*'");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "add IgnorePkg = nvidia* to /etc/pacman.conf");
      else snprintf(buf, n, "sudo apt-mark hold 'nvidia-*' 'libnvidia-*' (or exclude them from unattended-upgrades)");
      break;
    case IL_CMD_REINSTALL_USERSPACE:
      if (f == IL_DISTRO_FEDORA) snprintf(buf, n, "sudo dnf reinstall xorg-x11-drv-nvidia-cuda-libs xorg-x11-drv-nvidia-libs");
      else if (f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf reinstall nvidia-driver-cuda-libs nvidia-driver-libs");
      else if (f == IL_DISTRO_DEBIAN) snprintf(buf, n, "sudo apt install --reinstall libcuda1 libnvidia-ml1");
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install --force nvidia-compute-G06");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S nvidia-utils");
      else snprintf(buf, n, "sudo apt install --reinstall libnvidia-compute-%s", branch[0] ? branch : "$(modinfo -F version nvidia | cut -d. -f1)");
      break;
    case IL_CMD_FABRICMANAGER:
      if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install nvidia-fabric-manager-%s && sudo systemctl enable --now nvidia-fabricmanager", a);
      else snprintf(buf, n, "sudo apt install nvidia-fabricmanager-%s=%s-1 && sudo systemctl enable --now nvidia-fabricmanager", branch, a);
      break;
    case IL_CMD_INSTALL_TOOLKIT:
      if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install nvidia-container-toolkit (NVIDIA's repository)");
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install nvidia-container-toolkit (NVIDIA's repository)");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S nvidia-container-toolkit");
      else snprintf(buf, n, "sudo apt install nvidia-container-toolkit (after adding NVIDIA's apt repository)");
      break;
    case IL_CMD_INSTALL_PKG:
      if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install %s", a);
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install %s", a);
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S %s", a);
      else snprintf(buf, n, "sudo apt install %s", a);
      break;
    case IL_CMD_KERNEL_HEADERS:
      if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf install kernel-devel-%s kernel-headers-%s", a, a);
      else if (f == IL_DISTRO_SUSE) snprintf(buf, n, "sudo zypper install kernel-default-devel");
      else if (f == IL_DISTRO_ARCH) snprintf(buf, n, "sudo pacman -S linux-headers (the headers package of the kernel you boot)");
      else snprintf(buf, n, "sudo apt install linux-headers-%s", a);
      break;
    case IL_CMD_GSP_FIRMWARE:
      /* Debian splits the GSP firmware into its own package (endlessm/eos-meta#811: "will load the
       * firmware file provided by firmware-nvidia-gsp"); elsewhere it ships with the driver of that
       * exact version [inferred for the package names other than Debian's]. */
      if (f == IL_DISTRO_DEBIAN) snprintf(buf, n, "sudo apt install firmware-nvidia-gsp (of driver %s)", a);
      else if (f == IL_DISTRO_UBUNTU) snprintf(buf, n, "sudo apt install --reinstall nvidia-firmware-%s-%s", branch, a);
      else if (f == IL_DISTRO_FEDORA || f == IL_DISTRO_RHEL) snprintf(buf, n, "sudo dnf reinstall the driver packages of version %s (they own /lib/firmware/nvidia/%s)", a, a);
      else snprintf(buf, n, "reinstall the driver packages of version %s, which own /lib/firmware/nvidia/%s", a, a);
      break;
  }
  return buf;
}

void il__distro_check(il_doctor *dr) {
  const il_distro *d = &dr->distro;
  il_check *c;
  if (d->family == IL_DISTRO_UNKNOWN && !d->id[0]) {
    c = il__check_add(&dr->checks, "host.distro", IL_VERDICT_OK, 0, "no /etc/os-release: fixes use Debian/Ubuntu commands");
  } else {
    char ini[64];
    il__distro_cmd(dr, IL_CMD_INITRAMFS, NULL, ini, sizeof ini);
    c = il__check_add(&dr->checks, "host.distro", IL_VERDICT_OK, 0, "%s (fixes for the %s family: initramfs with '%s')", d->pretty[0] ? d->pretty : d->id,
                      il_distro_family_name(d->family), ini);
  }
  il__check_ev(c, "id", "%s", d->id[0] ? d->id : "unknown");
  if (d->id_like[0]) il__check_ev(c, "id_like", "%s", d->id_like);
  if (d->version_id[0]) il__check_ev(c, "version_id", "%s", d->version_id);
  il__check_ev(c, "family", "%s", il_distro_family_name(d->family));
}

void il__dpkg_version(const char *db, const char *pkg, bool prefix, char *buf, size_t n) {
  buf[0] = 0;
  char key[128];
  snprintf(key, sizeof key, "Package: %s%s", pkg, prefix ? "" : "\n");
  for (const char *p = db; (p = strstr(p, key)) != NULL; p++) {
    if (p != db && p[-1] != '\n') continue;
    const char *end = strstr(p, "\n\n");
    const char *st = strstr(p, "\nStatus: install ok installed");
    const char *v = strstr(p, "\nVersion: ");
    if (st && v && (!end || (st < end && v < end))) {
      char raw[64];
      if (sscanf(v + 10, "%63[0-9.]", raw) == 1) {
        size_t l = strlen(raw);
        while (l && raw[l - 1] == '.') raw[--l] = 0;
        il_sysfs_copy(buf, n, raw);
      }
      return;
    }
  }
}
