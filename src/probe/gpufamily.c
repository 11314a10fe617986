/* probe/gpufamily: GPU generation from the PCI device id alone, and which driver branches
 * support it, so an unsupported GPU/driver pair is named before the module loads.
 *
 * The id ranges are the chip blocks NVIDIA assigns per generation (e.g. GA100 0x20xx, GH100
 * 0x23xx, AD102 0x268x, GB202 0x2Bxx) read off the supported-GPU appendix of the driver README;
 * ranges are [inferred] from those lists, not from a documented rule.
 * Branch limits, with sources:
 * - Kepler: R470 is the last branch (https://github.com/NixOS/nixpkgs/pull/142565, citing
 *   https://docs.nvidia.com/datacenter/tesla/drivers/#cuda-arch-matrix).
 * - Maxwell, Pascal, Volta: R580 is the last branch (NVIDIA's CUDA toolkit, driver and
 *   architecture matrix, https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html,
 *   as quoted in https://github.com/NVIDIA/ansible-role-nvidia-driver/pull/89); a newer driver
 *   logs "NVRM: The NVIDIA NVIDIA GeForce GTX 1050 GPU installed in this system is supported
 *   through the NVIDIA 580.xx Legacy drivers ... The 595.71.05 NVIDIA driver will ignore this
 *   GPU." (https://github.com/NixOS/nixos-hardware/issues/1880).
 * - Blackwell: needs the open kernel module ("the 50-series cards require the open source
 *   variant of the driver", https://github.com/truenas/scale-build/pull/895) and a branch of
 *   R570 or newer (CUDA 12.8 is the first toolkit with Blackwell targets; its toolkit driver is
 *   570.26, research file section C) [inferred minimum].
 * - Turing and newer have the GSP the open module needs; Volta and older cannot use it.
 * Not for: compute capability (NVML reports it once the driver runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "probe/gpufamily.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/loader.h"

static const struct {
  unsigned lo, hi;
  il_gpu_family fam;
} il__ranges[] = {
    {0x0fc0, 0x0fff, IL_GPU_KEPLER}, {0x1000, 0x12ff, IL_GPU_KEPLER},   {0x1340, 0x13ff, IL_GPU_MAXWELL},
    {0x1400, 0x17ff, IL_GPU_MAXWELL}, {0x15f0, 0x15ff, IL_GPU_PASCAL},  {0x1b00, 0x1d7f, IL_GPU_PASCAL},
    {0x1d80, 0x1dff, IL_GPU_VOLTA},   {0x1e00, 0x1fff, IL_GPU_TURING},  {0x2180, 0x21ff, IL_GPU_TURING},
    {0x2080, 0x20ff, IL_GPU_AMPERE},  {0x2200, 0x22ff, IL_GPU_AMPERE},  {0x2400, 0x25ff, IL_GPU_AMPERE},
    {0x2300, 0x23ff, IL_GPU_HOPPER},  {0x2600, 0x28ff, IL_GPU_ADA},     {0x2900, 0x2fff, IL_GPU_BLACKWELL},
};

il_gpu_family il_gpufamily_of(unsigned device_id) {
  il_gpu_family f = IL_GPU_UNKNOWN;
  /* Later rows are more specific (0x15f0 GP100 inside Maxwell's 0x1400-0x17ff). */
  for (size_t i = 0; i < sizeof il__ranges / sizeof il__ranges[0]; i++)
    if (device_id >= il__ranges[i].lo && device_id <= il__ranges[i].hi) f = il__ranges[i].fam;
  return f;
}

const char *il_gpufamily_name(il_gpu_family f) {
  static const char *const names[] = {"unknown", "Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Hopper", "Ada", "Blackwell"};
  return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "unknown";
}

/* The driver branch the user-space or kernel side says is installed: the loaded module first,
 * else the version of the libnvidia-ml the loader would pick (known before the module loads). */
static void il__installed_driver(il_doctor *dr, char *ver, size_t n, const char **from) {
  ver[0] = 0;
  *from = "";
  if (dr->kmod_version[0]) {
    il_sysfs_copy(ver, n, dr->kmod_version);
    *from = "kernel module";
    return;
  }
  il_lib_candidate c[1];
  if (il__loader_search(dr, "libnvidia-ml.so.1", c, 1) == 1 && c[0].version[0]) {
    il_sysfs_copy(ver, n, c[0].version);
    *from = "installed libnvidia-ml";
  }
}

void il__gpufamily_check(il_doctor *dr) {
  char ver[64];
  const char *from;
  il__installed_driver(dr, ver, sizeof ver, &from);
  int branch = atoi(ver);
  il_check *c;
  if (dr->n_pci == 0) {
    il__check_na(&dr->checks, "kmod.branch", IL_VERDICT_OK, 0, "no NVIDIA GPU on the PCI bus");
    return;
  }
  char fams[300] = "";
  for (int i = 0; i < dr->n_pci; i++)
    il_appendf(fams, sizeof fams, "%s%s 10de:%04x %s", fams[0] ? "; " : "", dr->pci[i].bdf, dr->pci[i].device_id,
               il_gpufamily_name(il_gpufamily_of(dr->pci[i].device_id)));
  if (!branch) {
    c = il__check_na(&dr->checks, "kmod.branch", IL_VERDICT_OK, 0, "no driver installed to match against: %s", fams);
    il__check_ev(c, "gpus", "%s", fams);
    return;
  }
  for (int i = 0; i < dr->n_pci; i++) {
    const il_pci_gpu *g = &dr->pci[i];
    il_gpu_family f = il_gpufamily_of(g->device_id);
    const char *need = NULL;
    char cmd[400] = "";
    if (f == IL_GPU_KEPLER && branch > 470) need = "470";
    else if ((f == IL_GPU_MAXWELL || f == IL_GPU_PASCAL || f == IL_GPU_VOLTA) && branch > 580) need = "580";
    if (need) {
      c = il__check_add(&dr->checks, "kmod.branch", IL_VERDICT_FAIL, 0,
                        "GPU 10de:%04x at %s is %s, which driver %s (%s) no longer supports: it is supported through the NVIDIA %s.xx "
                        "legacy drivers, and newer drivers ignore it", g->device_id, g->bdf, il_gpufamily_name(f), ver, from, need);
      il_distro_family df = dr->distro.family;
      if (df == IL_DISTRO_UBUNTU || df == IL_DISTRO_UNKNOWN) snprintf(cmd, sizeof cmd, "sudo apt install nvidia-driver-%s && sudo reboot", need);
      else if (df == IL_DISTRO_DEBIAN && !strcmp(need, "470")) snprintf(cmd, sizeof cmd, "sudo apt install nvidia-tesla-470-driver && sudo reboot");
      else if (df == IL_DISTRO_FEDORA) snprintf(cmd, sizeof cmd, "sudo dnf install akmod-nvidia-%sxx xorg-x11-drv-nvidia-%sxx-cuda && sudo reboot", need, need);
      else if (df == IL_DISTRO_RHEL) snprintf(cmd, sizeof cmd, "sudo dnf module install nvidia-driver:%s-dkms && sudo reboot", need);
      else if (df == IL_DISTRO_ARCH) snprintf(cmd, sizeof cmd, "install nvidia-%sxx-dkms (AUR) and reboot", need);
      else snprintf(cmd, sizeof cmd, "install the R%s legacy driver branch and reboot", need);
      il__check_fix(c, "Install the last branch that supports this GPU: %s   (or run on the CPU backend / a newer GPU)", cmd);
      il__check_ev(c, "pci_device", "10de:%04x", g->device_id);
      il__check_ev(c, "family", "%s", il_gpufamily_name(f));
      il__check_ev(c, "driver", "%s (%s)", ver, from);
      return;
    }
    if (f == IL_GPU_BLACKWELL && branch < 570) {
      char inst[400];
      c = il__check_add(&dr->checks, "kmod.branch", IL_VERDICT_FAIL, 0, "GPU 10de:%04x at %s is Blackwell, which needs driver branch R570 or newer "
                        "(open kernel module); driver %s (%s) predates it", g->device_id, g->bdf, ver, from);
      il__check_fix(c, "Install a current driver with the open kernel module: %s", il__distro_cmd(dr, IL_CMD_INSTALL_DRIVER, NULL, inst, sizeof inst));
      il__check_ev(c, "pci_device", "10de:%04x", g->device_id);
      il__check_ev(c, "driver", "%s (%s)", ver, from);
      return;
    }
  }
  c = il__check_add(&dr->checks, "kmod.branch", IL_VERDICT_OK, 0, "driver %s (%s) supports every GPU here: %s", ver, from, fams);
  il__check_ev(c, "gpus", "%s", fams);
}
