/* tests/test_doctor_world: the failures beyond the research file (issue 17), each rebuilt as a
 * fixture machine from a real report, with the source cited at the scenario, and negative
 * cases that must stay OK. Classes: which libcuda the loader picks; containers beyond Docker;
 * distribution-specific fixes; hardware and firmware health; GPU generation vs driver branch;
 * precision of the verdicts. --explain wordings are in test_doctor_explain.c.
 */
#include "sysroots/scenario.h"
#include "probe/gpufamily.h"
#include "probe/loader.h"

/* A healthy host with two A100s on 535.54.03; callers change one thing. */
static const char *healthy(scen *s) {
  return sc_two_a100(s, "");
}

/* A soname link dir/libcuda.so.1 -> libcuda.so.<ver> (a stand-in file: never loaded). */
static void stale_lib(const char *root, const char *dir, const char *lib, const char *ver) {
  char rel[512], target[128];
  snprintf(rel, sizeof rel, "%s/%s.%s", dir, lib, ver);
  sr_write(root, rel, "ELF stand-in");
  snprintf(rel, sizeof rel, "%s/%s.1", dir, lib);
  snprintf(target, sizeof target, "%s.%s", lib, ver);
  sr_link(root, rel, target);
}

static void expect_fix_lacks(int line, const il_doctor *dr, const char *id, const char *part) {
  const il_check *c = il_doctor_find(dr, id);
  if (c && !strstr(c->fix, part)) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  fprintf(stderr, "test_doctor_world.c:%d: FAILED: %s fix must not contain \"%s\": %s\n", line, id, part, c ? c->fix : "(no check)");
}
#define EXPECT_FIX_LACKS(dr, id, part) expect_fix_lacks(__LINE__, dr, id, part)

/* ---- which libcuda is really loaded -------------------------------------------------------
 * An older libcuda.so.1 earlier on the loader's path than the driver's own: cuInit answers
 * "system has unsupported display driver / cuda driver combination" (error 803), as in
 * https://github.com/NVIDIA/nvidia-docker/issues/1256 (an image's libcuda older than the host
 * driver) and https://github.com/ai-dynamo/nixl/issues/441 (LD_LIBRARY_PATH full of CUDA dirs);
 * a compat directory first in the ld.so cache: https://github.com/NVIDIA/nvidia-container-toolkit/pull/1679
 * ("ldconfig -p | grep libcuda.so.1" listing /usr/local/cuda-13.0/compat first). */
static void test_loader_order(void) {
  scen s;
  const char *root = healthy(&s);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL); /* negative: the driver's own library */
  EXPECT_SUMMARY(dr, "cuda.loader", "same version as the kernel module");
  il_doctor_free(dr);

  /* LD_LIBRARY_PATH: a copy from a 470 install. */
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "470.82.01");
  sc_env(&s, "LD_LIBRARY_PATH=/usr/local/cuda/lib64:/opt/nvidia-470/lib");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "Remove /opt/nvidia-470/lib from LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.loader", "/opt/nvidia-470/lib/libcuda.so.1, version 470.82.01, from LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.loader", "a reboot does not help");
  EXPECT_FIX_LACKS(dr, "cuda.loader", "Reboot");
  const il_check *c = il_doctor_find(dr, "cuda.loader");
  IL_CHECK(c && il_check_evidence(c, "also_on_path") && strstr(il_check_evidence(c, "also_on_path"), "535.54.03"));
  il_doctor_free(dr);
  /* The same directory holding the right version: OK. */
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "535.54.03");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sc_pop(&s);

  /* A conda environment that shipped a driver library. */
  stale_lib(root, "/home/u/miniconda3/envs/llm/lib", "libcuda.so", "525.60.13");
  sc_env(&s, "CONDA_PREFIX=/home/u/miniconda3/envs/llm");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "rm /home/u/miniconda3/envs/llm/lib/libcuda.so*");
  EXPECT_SUMMARY(dr, "cuda.loader", "conda environment");
  il_doctor_free(dr);
  sc_pop(&s);

  /* An ld.so.conf.d entry listed before the system directories. */
  sr_write(root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  sr_write(root, "/etc/ld.so.conf.d/00-nvidia-old.conf", "# left by a .run install\n/opt/nvidia-470/lib\n");
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "470.82.01");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "Remove the line /opt/nvidia-470/lib from /etc/ld.so.conf.d/00-nvidia-old.conf, then sudo ldconfig");
  il_doctor_free(dr);
  sr_rm(root, "/etc/ld.so.conf.d/00-nvidia-old.conf");

  /* NVML cannot be loaded here, yet the version of libnvidia-ml.so.1 is read from its file
   * name: libraries older than the module are found, and the fix is not a reboot. */
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "470.82.01");
  s.nvml[0] = 0;
  dr = sc_run(&s);
  EXPECT(dr, "driver.version_match", IL_VERDICT_FAIL, 3, "a reboot cannot help");
  EXPECT_SUMMARY(dr, "driver.version_match", "kernel module 535.54.03 but user-space driver library 470.82.01");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A CUDA image that bakes in its own libcuda (nvidia-docker#1256: "cuda driver mismatch
 * between host & docker"): inside the container, the image's copy comes first. */
static void test_loader_image_libcuda(void) {
  scen s;
  const char *root = healthy(&s);
  sr_touch(root, "/.dockerenv");
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=all");
  stale_lib(root, "/lib/x86_64-linux-gnu", "libcuda.so", "418.87.01");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "rebuild it without driver libraries");
  EXPECT_SUMMARY(dr, "cuda.loader", "system directory of the image");
  il_doctor_free(dr);
  sr_destroy(root);
}


/* ---- containers beyond Docker ---------------------------------------------------------------
 * LXC with a device cgroup that lacks nvidia-uvm: "cudaGetDeviceCount returned 30", fixed by
 * re-adding nvidia-uvm (https://github.com/canonical/lxd/issues/5618). The uvm major is dynamic
 * (https://github.com/negativo17/nvidia-driver/issues/29), so it is read from /proc/devices. */
static void test_cgroup_device_rules(void) {
  scen s;
  const char *root = healthy(&s);
  sc_env(&s, "container=lxc");
  sr_write(root, "/proc/devices", "Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n");
  sr_write(root, "/proc/self/cgroup", "12:devices:/\n0::/\n");
  sr_write(root, "/sys/fs/cgroup/devices/devices.list", "c 1:3 rwm\nc 195:* rwm\nc 226:* rwm\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.devices", IL_VERDICT_FAIL, 22, "lxc.cgroup.devices.allow = c 195:* rwm and c 509:* rwm");
  EXPECT_SUMMARY(dr, "container.devices", "/dev/nvidia-uvm (c 509:0)");
  IL_CHECK(il_doctor_find(dr, "container.docker") == NULL);
  il_doctor_free(dr);
  /* Negative: everything allowed. */
  sr_write(root, "/sys/fs/cgroup/devices/devices.list", "a *:* rwm\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.devices", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* Negative: cgroup v2, rules not readable: no verdict from guessing. */
  sr_rm(root, "/sys/fs/cgroup/devices/devices.list");
  sr_write(root, "/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  sr_write(root, "/proc/self/cgroup", "0::/\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.devices", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.devices", "cgroup v2");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* The host side: a Proxmox container config still allowing the uvm major of an older driver. */
static void test_lxc_config_on_host(void) {
  scen s;
  const char *root = healthy(&s);
  sr_write(root, "/proc/devices", "Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n");
  sr_write(root, "/etc/pve/lxc/101.conf",
           "arch: amd64\nhostname: ollama\nlxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
           "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
           "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.lxc", IL_VERDICT_WARN, 22, "in /etc/pve/lxc/101.conf: lxc.cgroup2.devices.allow: c 509:* rwm");
  EXPECT_SUMMARY(dr, "container.lxc", "allows c 511:* but nvidia-uvm is now major 509");
  il_doctor_free(dr);
  sr_write(root, "/etc/pve/lxc/101.conf", "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 509:* rwm\n"
                                         "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.lxc", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A CDI spec written with the wrong nvidia-uvm major: cuInit 999
 * (https://github.com/NVIDIA/nvidia-container-toolkit/issues/1934: "major: 510" vs 509). */
static void test_cdi_uvm_major(void) {
  scen s;
  const char *root = healthy(&s);
  sr_exe(root, "/usr/bin/nvidia-ctk");
  sr_write(root, "/proc/devices", "Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n");
  sr_write(root, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n"
                                         "    - path: /dev/nvidia-uvm\n      major: 510\n      minor: 0\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_FAIL, 23, "nvidia-ctk cdi generate");
  EXPECT_SUMMARY(dr, "container.cdi", "/dev/nvidia-uvm major 510 but /proc/devices says 509");
  il_doctor_free(dr);
  sr_write(root, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n"
                                         "    - path: /dev/nvidia-uvm\n      major: 509\n      minor: 0\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Rootless Docker needs no-cgroups ("failed to add device rules ... operation not permitted",
 * https://github.com/NVIDIA/nvidia-docker/issues/1546; the setting from the nvidia-ctk README,
 * https://pkg.go.dev/github.com/NVIDIA/nvidia-container-toolkit@v1.15.0/cmd/nvidia-ctk). */
static void test_rootless_docker(void) {
  scen s;
  const char *root = healthy(&s);
  sc_env(&s, "HOME=/home/u");
  sr_write(root, "/home/u/.config/docker/daemon.json", "{\"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}}\n");
  sr_write(root, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\n#no-cgroups = false\nldconfig = \"@/sbin/ldconfig.real\"\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.rootless", IL_VERDICT_WARN, 17, "nvidia-ctk config --set nvidia-container-cli.no-cgroups=true --in-place");
  il_doctor_free(dr);
  sr_write(root, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nno-cgroups = true\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.rootless", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A Kubernetes pod that requested no nvidia.com/gpu: the fix is the pod spec, never
 * `docker run --gpus` (k8s-device-plugin README: resources.limits nvidia.com/gpu). */
static void test_kubernetes_pod_without_gpu(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sc_env(&s, "KUBERNETES_SERVICE_HOST=10.96.0.1");
  sr_write(root, "/proc/1/cgroup", "0::/kubepods/besteffort/pod1234/abcd\n");
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  il_doctor *dr = sc_run(&s);
  EXPECT_SUMMARY(dr, "container.detect", "kubernetes");
  EXPECT(dr, "container.injection", IL_VERDICT_FAIL, 21, "resources: limits: nvidia.com/gpu: 1");
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 21, "nvidia.com/gpu");
  EXPECT_FIX_LACKS(dr, "container.injection", "docker run");
  EXPECT_FIX_LACKS(dr, "driver.nvml", "docker run");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- distribution-specific fixes --------------------------------------------------------------
 * The same failure gets each distribution's command: RPM Fusion's akmods and dracut on Fedora
 * (http://rpmfusion.org/Howto/nVidia; "akmods --kernels": http://fedorasolved.org/Members/zcat/akmods),
 * dnf with kernel-devel on Rocky/RHEL (NVIDIA Driver Installation Guide), DKMS and
 * update-initramfs on Debian/Ubuntu. */
static void test_distro_fedora(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_write(root, "/etc/os-release", "NAME=\"Fedora Linux\"\nVERSION=\"40 (Workstation Edition)\"\nID=fedora\nVERSION_ID=40\n"
                                    "PRETTY_NAME=\"Fedora Linux 40 (Workstation Edition)\"\n");
  sr_pci_gpu(root, "0000:01:00.0", 0x2684, "");
  sr_write(root, "/lib/modules/6.0.9-old.fc40.x86_64/extra/nvidia/nvidia.ko.xz", "x");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 4, "sudo akmods --force --kernels 6.1.0-test && sudo dracut --force");
  EXPECT_FIX_LACKS(dr, "kmod.nvidia", "apt");
  EXPECT_SUMMARY(dr, "host.distro", "Fedora Linux 40");
  il_doctor_free(dr);
  /* Secure Boot on Fedora: the akmods key, not DKMS's. */
  sr_write(root, "/lib/modules/6.1.0-test/extra/nvidia/nvidia.ko.xz", "x");
  sr_write(root, "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", "%c%c%c%c%c", 6, 0, 0, 0, 1);
  dr = sc_run(&s);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 5, "mokutil --import /etc/pki/akmods/certs/public_key.der");
  il_doctor_free(dr);
  /* nouveau on Fedora: dracut, not update-initramfs. */
  sr_rm(root, "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c");
  sr_pci_gpu(root, "0000:01:00.0", 0x2684, "nouveau");
  sr_write(root, "/proc/modules", "nouveau 1 0 - Live 0x0\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.nouveau", IL_VERDICT_FAIL, 6, "sudo dracut --force");
  EXPECT_FIX_LACKS(dr, "kmod.nouveau", "update-initramfs");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_distro_rocky_and_debian(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_write(root, "/etc/os-release", "NAME=\"Rocky Linux\"\nVERSION_ID=\"9.4\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"
                                    "PRETTY_NAME=\"Rocky Linux 9.4 (Blue Onyx)\"\n");
  sr_pci_gpu(root, "0000:01:00.0", 0x20b2, "");
  sr_write(root, "/lib/modules/5.14.0-362.el9.x86_64/extra/nvidia.ko.xz", "x");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 4, "sudo dnf install kernel-devel-6.1.0-test kernel-headers-6.1.0-test");
  const il_check *c = il_doctor_find(dr, "host.distro");
  IL_CHECK(c && il_check_evidence(c, "family") && !strcmp(il_check_evidence(c, "family"), "rhel"));
  il_doctor_free(dr);
  sr_destroy(root);
  /* Debian: hold the packages with apt-mark after a version mismatch. */
  root = healthy(&s);
  sr_write(root, "/etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n");
  sr_driver(root, "530.30.02", 0, 2, 1);
  sr_scenario(root, "%snvml.init=18\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 3, "sudo apt-mark hold");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* WSL2: a Linux driver installed inside the distribution (research scenario 24,
 * https://github.com/microsoft/WSL/issues/9938). */
static void test_wsl_linux_driver_inside(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_write(root, "/etc/os-release", "PRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\n");
  sr_write(root, "/proc/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2\n");
  sr_touch(root, "/dev/dxg");
  sr_write(root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  sr_write(root, "/etc/ld.so.conf.d/ld.wsl.conf", "# This file was automatically generated by WSL.\n/usr/lib/wsl/lib\n");
  sr_write(root, "/usr/lib/wsl/lib/libcuda.so.1", "stand-in");
  sr_write(root, "/usr/lib/wsl/lib/libnvidia-ml.so.1", "stand-in");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "wsl.driver", IL_VERDICT_OK, 0, NULL); /* negative: only the Windows driver's libraries */
  il_doctor_free(dr);
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "535.183.01");
  dr = sc_run(&s);
  EXPECT(dr, "wsl.driver", IL_VERDICT_FAIL, 24, "sudo apt remove --purge 'nvidia-utils-*' 'libnvidia-compute-*'");
  EXPECT_SUMMARY(dr, "wsl.driver", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 (535.183.01");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- hardware and firmware health ------------------------------------------------------------ */

/* PCIe: a narrower link is a finding; a lower speed while idle is not. */
static void test_pcie_width(void) {
  scen s;
  const char *root = healthy(&s);
  sr_write(root, "/sys/bus/pci/devices/0000:07:00.0/current_link_width", "16\n");
  sr_write(root, "/sys/bus/pci/devices/0000:07:00.0/max_link_width", "16\n");
  sr_write(root, "/sys/bus/pci/devices/0000:07:00.0/current_link_speed", "2.5 GT/s PCIe\n");
  sr_write(root, "/sys/bus/pci/devices/0000:07:00.0/max_link_speed", "16.0 GT/s PCIe\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "pci.link", IL_VERDICT_OK, 0, NULL); /* negative: idle at 2.5 GT/s, full width */
  il_doctor_free(dr);
  sr_write(root, "/sys/bus/pci/devices/0000:0b:00.0/current_link_width", "8\n");
  sr_write(root, "/sys/bus/pci/devices/0000:0b:00.0/max_link_width", "16\n");
  dr = sc_run(&s);
  EXPECT(dr, "pci.link", IL_VERDICT_WARN, 0, "reseat the card(s) at 0000:0b:00.0");
  EXPECT_SUMMARY(dr, "pci.link", "0000:0b:00.0 runs at x8 of x16");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Xid lines as the kernel writes them ("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the
 * bus.": https://github.com/pop-os/pop/issues/3363; 63 row remapper text:
 * https://github.com/stas00/ml-engineering debug.md), ranked most severe first. A lost GPU is
 * not "a different GPU model" for the visibility check. */
static void test_xid_and_lost_gpu(void) {
  scen s;
  const char *root = healthy(&s);
  sr_write(root, "/var/log/kern.log",
           "Apr 29 19:20:01 host kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=4711, name=python3, Graphics Exception: ESR 0x404600=0x80000002\n"
           "Apr 29 19:24:11 host kernel: NVRM: GPU at PCI:0000:0b:00: GPU-bbbb1111-2222-3333-4444-555555555555\n"
           "Apr 29 19:24:11 host kernel: NVRM: Xid (PCI:0000:0b:00): 79, GPU has fallen off the bus.\n"
           "Apr 29 19:24:12 host kernel: NVRM: Xid (PCI:0000:07:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.\n");
  sr_scenario(root, "%scount=3\ndev2.name=NVIDIA A100-SXM4-80GB\ndev2.uuid=GPU-cccc1111-2222-3333-4444-555555555555\ndev2.cc=8.0\n"
                    "dev2.mem_total=85899345920\ndev2.mem_used=0\ndev0.handle_rc=15\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.xid", IL_VERDICT_FAIL, 10, "Xid 79 on PCI:0000:0b:00: drain the node");
  EXPECT_SUMMARY(dr, "gpu.xid", "Xid 79 GPU has fallen off the bus x1 (PCI:0000:0b:00); Xid 63");
  EXPECT(dr, "gpu.health", IL_VERDICT_FAIL, 10, NULL);
  const il_check *c = il_doctor_find(dr, "visibility.cuda");
  IL_CHECK(c && !strstr(c->summary, "mixed GPU models"));
  il_doctor_free(dr);
  /* Negative: application-level Xids only. */
  sr_write(root, "/var/log/kern.log", "kernel: NVRM: Xid (PCI:0000:07:00): 31, pid=99, Ch 0000000b, intr 10000000. MMU Fault\n");
  sr_scenario(root, "%s", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.xid", IL_VERDICT_OK, 0, "Application-level Xids only");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Row remapping (A100+) and persistence mode. */
static void test_remap_and_persistence(void) {
  scen s;
  const char *root = healthy(&s);
  sr_scenario(root, "%sdev0.remap=0,2,1,0\ndev1.remap=0,0,0,0\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.remap", IL_VERDICT_WARN, 11, "sudo nvidia-smi -r -i 0");
  il_doctor_free(dr);
  sr_scenario(root, "%sdev0.remap=0,0,0,0\ndev1.remap=0,512,0,1\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.remap", IL_VERDICT_FAIL, 11, "GPU 1 has exhausted its spare memory rows");
  il_doctor_free(dr);
  sr_scenario(root, "%sdev0.remap=0,0,0,0\ndev1.remap=0,0,0,0\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.remap", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "gpu.persistence", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* Persistence off, no daemon (https://github.com/NVIDIA/nvidia-docker/issues/723). */
  sr_scenario(root, "%sdev0.persistence=0\ndev1.persistence=0\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.persistence", IL_VERDICT_WARN, 102, "systemctl enable --now nvidia-persistenced");
  EXPECT_SUMMARY(dr, "gpu.persistence", "data-center GPU 0,1");
  il_doctor_free(dr);
  sr_write(root, "/proc/812/comm", "nvidia-persiste\n");
  dr = sc_run(&s);
  EXPECT(dr, "gpu.persistence", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Fabric Manager on an NVSwitch system: missing (802, aws-deep-learning-ami#33), a version
 * other than the driver's (gpu-operator#544), stopped, running. */
static void test_fabric_manager(void) {
  scen s;
  const char *root = healthy(&s);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.fabric", IL_VERDICT_OK, 0, NULL); /* no NVSwitch */
  il_doctor_free(dr);
  sr_mkdirs(root);
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/proc/driver/nvidia-nvswitch/devices/0000:05:00.0", root);
  sr_mkdirs(p);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.fabric", IL_VERDICT_FAIL, 12, "nvidia-fabricmanager-535=535.54.03-1");
  il_doctor_free(dr);
  sr_write(root, "/var/lib/dpkg/status", "Package: bash\nStatus: install ok installed\nVersion: 5.2-2\n\n"
                                         "Package: nvidia-fabricmanager-535\nStatus: install ok installed\nVersion: 535.54.01-1\n\n");
  dr = sc_run(&s);
  EXPECT(dr, "gpu.fabric", IL_VERDICT_FAIL, 12, "nvidia-fabricmanager-535=535.54.03-1");
  EXPECT_SUMMARY(dr, "gpu.fabric", "Fabric Manager 535.54.01 but driver 535.54.03");
  il_doctor_free(dr);
  sr_write(root, "/var/lib/dpkg/status", "Package: nvidia-fabricmanager-535\nStatus: install ok installed\nVersion: 535.54.03-1\n\n");
  dr = sc_run(&s);
  EXPECT(dr, "gpu.fabric", IL_VERDICT_FAIL, 12, "systemctl enable --now nvidia-fabricmanager");
  EXPECT_SUMMARY(dr, "gpu.fabric", "not running");
  il_doctor_free(dr);
  sr_write(root, "/proc/2202/comm", "nv-fabricmanage\n");
  dr = sc_run(&s);
  EXPECT(dr, "gpu.fabric", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* The Fabric Manager's own log line names the mismatch. */
  sr_write(root, "/var/log/fabricmanager.log", "[Jun 28 2023 10:01:02] [ERROR] [tid 3228] fabric manager NVIDIA GPU driver interface version "
                                               "530.30.02 don't match with driver version 530.41.03. Please update with matching NVIDIA driver package.\n");
  dr = sc_run(&s);
  EXPECT_SUMMARY(dr, "gpu.fabric", "don't match with driver version 530.41.03");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- GPU generation vs driver branch ------------------------------------------------------------
 * From the PCI id alone: a Pascal GTX 1050 (10de:1c81) under 595.71.05 ("supported through the
 * NVIDIA 580.xx Legacy drivers ... will ignore this GPU": https://github.com/NixOS/nixos-hardware/issues/1880),
 * a Kepler GTX 680 (10de:1180) after R470 (https://github.com/NixOS/nixpkgs/pull/142565), a
 * Blackwell RTX 5090 (10de:2b85) on the proprietary module (https://github.com/truenas/scale-build/pull/895). */
static void test_family_vs_branch(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:01:00.0", 0x1c81, "");
  sr_driver(root, "595.71.05", 1, 0, 1);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_FAIL, 0, "sudo apt install nvidia-driver-580");
  EXPECT_SUMMARY(dr, "kmod.branch", "10de:1c81 at 0000:01:00.0 is Pascal, which driver 595.71.05 (kernel module) no longer supports");
  il_doctor_free(dr);
  /* Before the module loads: the installed user-space driver says which branch it is. */
  sr_rm(root, "/proc/driver/nvidia/version");
  sr_rm(root, "/sys/module/nvidia/version");
  sr_write(root, "/proc/modules", "ext4 1 0 - Live 0x0\n");
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "595.71.05");
  sr_write(root, "/etc/os-release", "ID=fedora\nVERSION_ID=41\nPRETTY_NAME=\"Fedora Linux 41\"\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_FAIL, 0, "akmod-nvidia-580xx");
  EXPECT_SUMMARY(dr, "kmod.branch", "(installed libnvidia-ml)");
  il_doctor_free(dr);
  /* Negative: the 580 branch still supports Pascal. */
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "580.95.05");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "kmod.branch", "Pascal");
  il_doctor_free(dr);
  /* Kepler after R470. */
  sr_rm(root, "/etc/os-release");
  sr_pci_gpu(root, "0000:01:00.0", 0x1180, "");
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "535.183.01");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_FAIL, 0, "nvidia-driver-470");
  il_doctor_free(dr);
  /* Negative: Ampere on a new branch. */
  sr_pci_gpu(root, "0000:01:00.0", 0x2204, "");
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "595.71.05");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* Blackwell on a branch before R570, then on the proprietary module. */
  sr_pci_gpu(root, "0000:01:00.0", 0x2b85, "");
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "565.77");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.branch", IL_VERDICT_FAIL, 0, NULL);
  EXPECT_SUMMARY(dr, "kmod.branch", "Blackwell, which needs driver branch R570 or newer");
  il_doctor_free(dr);
  sr_driver(root, "575.64.03", 0, 1, 1);
  dr = sc_run(&s);
  EXPECT(dr, "kmod.flavor", IL_VERDICT_FAIL, 8, "sudo apt install nvidia-driver-575-open");
  EXPECT(dr, "kmod.branch", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  IL_CHECK(il_gpufamily_of(0x20b2) == IL_GPU_AMPERE && il_gpufamily_of(0x2330) == IL_GPU_HOPPER && il_gpufamily_of(0x2684) == IL_GPU_ADA);
  IL_CHECK(il_gpufamily_of(0x1db1) == IL_GPU_VOLTA && il_gpufamily_of(0x15f8) == IL_GPU_PASCAL && il_gpufamily_of(0x1e04) == IL_GPU_TURING);
  IL_CHECK(il_gpufamily_of(0x0010) == IL_GPU_UNKNOWN);
  sr_destroy(root);
}

/* ---- precision of the verdicts -----------------------------------------------------------------
 * Values NVML or the host do not report print as "unknown", never -1; checks that do not apply
 * share one n/a line. */
static void test_unknown_values(void) {
  scen s;
  const char *root = healthy(&s);
  sr_rm(root, "/proc/meminfo");
  sr_scenario(root, "driver=535.54.03\ncuda_driver=12020\ncount=1\ndev0.name=NVIDIA A100-SXM4-80GB\ndev0.uuid=GPU-aaaa\n"
                    "dev0.mem_total=85899345920\ndev0.mem_used=0\ncuda.init=0\n");
  il_doctor *dr = sc_run(&s);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  IL_CHECK_OK(il_report_text_ex(dr, f, true));
  fclose(f);
  IL_CHECK(buf && strstr(buf, "util gpu unknown mem unknown; unknown; unknown / unknown W") != NULL);
  IL_CHECK(buf && strstr(buf, "sm_unknown") != NULL);
  IL_CHECK(buf && strstr(buf, "-1") == NULL);
  IL_CHECK(buf && strstr(buf, "unknown RAM (unknown available)") != NULL);
  const il_check *c = il_doctor_find(dr, "host.memory");
  IL_CHECK(c && il_check_evidence(c, "ram_total_bytes") && !strcmp(il_check_evidence(c, "ram_total_bytes"), "unknown"));
  if (buf && strstr(buf, "-1")) fprintf(stderr, "%s\n", buf);
  free(buf);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A CRI-O node without the nvidia runtime (the device plugin then says "Incompatible strategy
 * detected auto": https://github.com/NVIDIA/k8s-device-plugin/issues/1134, on CRI-O). */
static void test_crio(void) {
  scen s;
  const char *root = healthy(&s);
  sr_exe(root, "/usr/bin/crio");
  sr_exe(root, "/usr/bin/kubelet");
  sr_write(root, "/etc/crio/crio.conf", "[crio.runtime]\ndefault_runtime = \"crun\"\n[crio.runtime.runtimes.crun]\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.crio", IL_VERDICT_WARN, 19, "nvidia-ctk runtime configure --runtime=crio --set-as-default");
  il_doctor_free(dr);
  sr_write(root, "/etc/crio/crio.conf.d/99-nvidia.toml", "[crio.runtime]\ndefault_runtime = \"nvidia\"\n\n"
                                                        "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.crio", IL_VERDICT_OK, 0, NULL); /* negative: the drop-in registers it as default */
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Writes root/etc/ld.so.cache in glibc's new format with the given (flags, soname, path)
 * entries, in order. */
static void write_ldcache(const char *root, int n, const unsigned *flags, const char *const *keys, const char *const *vals) {
  unsigned char buf[4096];
  memset(buf, 0, sizeof buf);
  memcpy(buf, "glibc-ld.so.cache1.1", 20);
  size_t strings = 48 + (size_t)n * 24, o = strings;
  uint32_t koff[8], voff[8];
  for (int i = 0; i < n; i++) {
    koff[i] = (uint32_t)o;
    memcpy(buf + o, keys[i], strlen(keys[i]) + 1);
    o += strlen(keys[i]) + 1;
    voff[i] = (uint32_t)o;
    memcpy(buf + o, vals[i], strlen(vals[i]) + 1);
    o += strlen(vals[i]) + 1;
  }
  uint32_t nl = (uint32_t)n, ls = (uint32_t)(o - strings);
  memcpy(buf + 20, &nl, 4); /* the test runs on a little-endian host, as the cache does */
  memcpy(buf + 24, &ls, 4);
  for (int i = 0; i < n; i++) {
    unsigned char *e = buf + 48 + (size_t)i * 24;
    uint32_t f = flags[i];
    memcpy(e, &f, 4);
    memcpy(e + 4, &koff[i], 4);
    memcpy(e + 8, &voff[i], 4);
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/etc/ld.so.cache", root);
  sr_parent(path);
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(buf, 1, o, f);
    fclose(f);
  }
}

/* The ld.so cache decides the order: a compat directory listed first by
 * /etc/ld.so.conf.d/00-compat-888138641.conf (https://github.com/NVIDIA/nvidia-container-toolkit/pull/1679:
 * "libcuda.so.1 (libc6,AArch64) => /usr/local/cuda-13.0/compat/libcuda.so.1" first, code=803/804)
 * on a GeForce, and the same on an A100 (supported). i386 entries are skipped. */
static void test_loader_ldcache(void) {
  scen s;
  const char *root = healthy(&s);
  stale_lib(root, "/usr/local/cuda-13.0/compat", "libcuda.so", "580.65.06");
  stale_lib(root, "/usr/lib/i386-linux-gnu", "libcuda.so", "470.82.01");
  sr_write(root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  sr_write(root, "/etc/ld.so.conf.d/00-compat-888138641.conf", "/usr/local/cuda-13.0/compat\n");
  static const unsigned flags[] = {0x0003, 0x0303, 0x0303, 0x0303};
  static const char *const keys[] = {"libcuda.so.1", "libcuda.so.1", "libcuda.so.1", "libc.so.6"};
  static const char *const vals[] = {"/usr/lib/i386-linux-gnu/libcuda.so.1", "/usr/local/cuda-13.0/compat/libcuda.so.1",
                                     "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libc.so.6"};
  write_ldcache(root, 4, flags, keys, vals);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL); /* A100: forward compatibility is supported */
  EXPECT_SUMMARY(dr, "cuda.loader", "forward-compatibility /usr/local/cuda-13.0/compat/libcuda.so.1 (580.65.06, from ld.so cache "
                                    "(/etc/ld.so.conf.d/00-compat-888138641.conf))");
  il_doctor_free(dr);
  sr_scenario(root, "driver=535.54.03\ncuda_driver=12020\ncount=1\ndev0.name=NVIDIA GeForce RTX 3090\ndev0.uuid=GPU-cccc\ndev0.cc=8.6\n"
                    "dev0.mem_total=25769803776\ndev0.mem_used=0\ncuda.init=0\n");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 2, "Remove the line /usr/local/cuda-13.0/compat from /etc/ld.so.conf.d/00-compat-888138641.conf, then sudo ldconfig");
  il_doctor_free(dr);
  /* A cache without the compat entry: the conf file alone no longer decides. */
  write_ldcache(root, 2, flags + 2, keys + 2, vals + 2);
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "cuda.loader", "/usr/lib/x86_64-linux-gnu/libcuda.so.1 (535.54.03, from ld.so cache (system directory))");
  il_doctor_free(dr);
  sr_destroy(root);
  /* This machine's own cache parses: libc.so.6 is in it. */
  if (access("/etc/ld.so.cache", R_OK) == 0) {
    il_doctor *real = calloc(1, sizeof *real);
    il_sysfs_init(&real->fs, "/", NULL);
    il_lib_candidate cand[4];
    int n = il__loader_search(real, "libc.so.6", cand, 4);
    IL_CHECK(n >= 1 && strstr(cand[0].origin, "ld.so cache") != NULL);
    if (n < 1 || !strstr(cand[0].origin, "ld.so cache")) fprintf(stderr, "libc.so.6: %d candidates, first origin %s\n", n, n ? cand[0].origin : "-");
    free(real);
  }
}

/* Podman without a CDI spec and without the toolkit: "Error: error setting up CDI devices:
 * unresolvable CDI devices nvidia.com/gpu=all" (research scenario 23). */
static void test_podman_cdi(void) {
  scen s;
  const char *root = healthy(&s);
  sr_exe(root, "/usr/bin/podman");
  sr_write(root, "/etc/os-release", "ID=fedora\nVERSION_ID=40\nPRETTY_NAME=\"Fedora Linux 40\"\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_WARN, 23, "sudo dnf install nvidia-container-toolkit");
  EXPECT_SUMMARY(dr, "container.cdi", "podman requests fail");
  il_doctor_free(dr);
  sr_write(root, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* systemd sandboxing a model server away from the GPU: NixOS's ollama unit without
 * char-nvidia-frontend (https://github.com/NixOS/nixpkgs/issues/331069, fix in /pull/331125) and
 * PrivateDevices=yes (https://github.com/NixOS/nixpkgs/pull/266167); a drop-in that repairs it. */
static void test_systemd_service(void) {
  scen s;
  const char *root = healthy(&s);
  sr_write(root, "/etc/systemd/system/ollama.service",
           "[Unit]\nDescription=Server for local large language models\n[Service]\nExecStart=/usr/bin/ollama serve\n"
           "DevicePolicy=closed\nDeviceAllow=char-nvidiactl\nDeviceAllow=char-nvidia-caps\nDeviceAllow=char-nvidia-uvm\n");
  sr_write(root, "/etc/systemd/system/sshd.service", "[Service]\nExecStart=/usr/sbin/sshd -D\nPrivateDevices=yes\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "service.devices", IL_VERDICT_FAIL, 22, "sudo systemctl edit ollama.service");
  EXPECT_SUMMARY(dr, "service.devices", "ollama.service: DeviceAllow= lacks char-nvidia-frontend");
  const il_check *c = il_doctor_find(dr, "service.devices");
  IL_CHECK(c && !strstr(c->summary, "sshd")); /* not a model server: left alone */
  il_doctor_free(dr);
  /* The drop-in of the fix makes it OK (negative). */
  sr_write(root, "/etc/systemd/system/ollama.service.d/gpu.conf", "[Service]\nDeviceAllow=char-nvidia-frontend rw\n");
  dr = sc_run(&s);
  EXPECT(dr, "service.devices", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* PrivateDevices on a vLLM unit. */
  sr_write(root, "/etc/systemd/system/vllm.service", "[Service]\nExecStart=/opt/venv/bin/vllm serve Qwen/Qwen2.5-7B\nPrivateDevices=yes\n");
  dr = sc_run(&s);
  EXPECT(dr, "service.devices", IL_VERDICT_FAIL, 22, "PrivateDevices=no");
  EXPECT_SUMMARY(dr, "service.devices", "vllm.service: PrivateDevices=yes hides /dev/nvidia*");
  il_doctor_free(dr);
  sr_destroy(root);
}

int main(void) {
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) IL_SKIP("fake NVML/CUDA libraries not built (target il_fake_nvml, il_fake_cuda)");
  test_loader_order();
  test_loader_image_libcuda();
  test_loader_ldcache();
  test_cgroup_device_rules();
  test_lxc_config_on_host();
  test_cdi_uvm_major();
  test_rootless_docker();
  test_kubernetes_pod_without_gpu();
  test_crio();
  test_podman_cdi();
  test_systemd_service();
  test_distro_fedora();
  test_distro_rocky_and_debian();
  test_wsl_linux_driver_inside();
  test_pcie_width();
  test_xid_and_lost_gpu();
  test_remap_and_persistence();
  test_fabric_manager();
  test_family_vs_branch();
  test_unknown_values();
  return il_test_finish();
}
