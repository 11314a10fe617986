/* tests/test_doctor: every doctor scenario through the library API.
 *
 * Each test builds a fixture machine (tests/sysroots/sysroot.h), scripts the fake NVML/CUDA
 * libraries (tests/fakes), runs il_doctor_run with a made-up user and environment, and asserts
 * the verdict of a specific check id, the research scenario it maps to, a key part of its fix
 * text, and the exit code. Scenario numbers refer to shared/research/gpu-stack-failures.md.
 */
#include "sysroots/scenario.h"
#include "core/text.h"
#include "probe/driver.h"

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

/* A healthy host with two A100s and this driver; callers change one thing. */
static const char *healthy_root(scen *s) {
  return sc_two_a100(s, "");
}

static void test_healthy_two_gpus(void) {
  scen s;
  const char *root = healthy_root(&s);
  il_doctor *dr = sc_run(&s);
  IL_CHECK_INT(il_doctor_exit_code(dr), 0);
  if (il_doctor_exit_code(dr) != 0) dump(dr);
  EXPECT(dr, "driver.nvml", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "driver.nvml", "2 GPUs");
  EXPECT_SUMMARY(dr, "driver.nvml", "supports CUDA 12.2");
  EXPECT(dr, "driver.version_match", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "cuda.init", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "runtime.build", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "runtime.arch", "GPU 1 sm_80: SASS");
  EXPECT_SUMMARY(dr, "runtime.features", "BF16");
  EXPECT(dr, "devnodes", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "virt.pci", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "visibility.cuda", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "container.detect", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "host.cpu", "CPU backend: avx2, 4 threads");
  EXPECT_SUMMARY(dr, "host.memory", "32.00 GiB RAM");
  IL_CHECK_INT(dr->nvml.n_devices, 2);
  IL_CHECK_STR(dr->nvml.devices[1].uuid, "GPU-bbbb1111-2222-3333-4444-555555555555");
  IL_CHECK_INT(dr->nvml.devices[0].power_mw, 61000);
  IL_CHECK_INT(dr->cuda.n_devices, 2);
  IL_CHECK_INT(dr->cuda.devices[0].cc_major, 8);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A CPU-only build on a machine whose GPUs work: a WARN saying inference runs on the CPU. */
static void test_cpu_only_build_with_gpus(void) {
  scen s;
  const char *root = healthy_root(&s);
  s.have_cuda = false;
  s.cuda_version = "";
  s.archs = "";
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "runtime.build", IL_VERDICT_WARN, 0, "-DIL_CUDA=ON");
  EXPECT_SUMMARY(dr, "runtime.build", "CPU-only build on a machine with 2 usable NVIDIA GPUs: inference will run on the CPU");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_no_gpu_no_driver(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root); /* no fake libraries: nothing to load under a sysroot */
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_WARN, 0, "Nothing to repair for CPU inference");
  EXPECT_SUMMARY(dr, "driver.nvml", "CPU backend");
  EXPECT(dr, "cuda.init", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "runtime.build", "CPU-only build");
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "devnodes", IL_VERDICT_OK, 0, NULL);
  IL_CHECK_INT(il_doctor_exit_code(dr), 1);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_gpu_without_driver(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:01:00.0", 0x2684, "");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 4, "ubuntu-drivers install");
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 4, "linux-headers");
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 4, NULL);
  IL_CHECK_INT(il_doctor_exit_code(dr), 2);
  il_doctor_free(dr);
  /* Module built for an older kernel only: DKMS miss after a kernel update. */
  sr_write(root, "/lib/modules/5.15.0-old/updates/dkms/nvidia.ko.zst", "x");
  sr_mkdirs(root); /* keep the tree */
  dr = sc_run(&s);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 4, "dkms autoinstall -k 6.1.0-test");
  EXPECT_SUMMARY(dr, "kmod.nvidia", "built for kernel 5.15.0-old");
  il_doctor_free(dr);
  /* Installed for the running kernel, Secure Boot on, not loaded. */
  sr_write(root, "/lib/modules/6.1.0-test/updates/dkms/nvidia.ko", "x");
  sr_write(root, "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", "%c%c%c%c%c", 6, 0, 0, 0, 1);
  dr = sc_run(&s);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 5, "mokutil --import");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_driver_too_old(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_scenario(root, "%sdriver=470.82.01\ncuda_driver=11040\n", SR_TWO_A100);
  sr_driver(root, "470.82.01", 0, 2, 1);
  s.cuda_version = "12.4";
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "runtime.build", IL_VERDICT_FAIL, 1, "550.54.14");
  EXPECT_SUMMARY(dr, "runtime.build", "driver too old for the runtime");
  EXPECT_SUMMARY(dr, "runtime.build", "12.x minimum 525.60.13");
  IL_CHECK_INT(il_doctor_exit_code(dr), 2);
  il_doctor_free(dr);
  /* Same major, driver above the 12.x floor: minor version compatibility -> WARN. */
  sr_scenario(root, "%sdriver=535.54.03\ncuda_driver=12020\n", SR_TWO_A100);
  sr_driver(root, "535.54.03", 0, 2, 1);
  dr = sc_run(&s);
  EXPECT(dr, "runtime.build", IL_VERDICT_WARN, 1, ">= 550.54.14");
  il_doctor_free(dr);
  /* cuInit itself says the driver is insufficient. */
  sr_scenario(root, "%scuda.init=35\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 1, "Upgrade the NVIDIA driver");
  il_doctor_free(dr);
  /* Inside an image that requires CUDA 12.8 on a 12.2 driver. */
  sr_touch(root, "/.dockerenv");
  sc_env(&s, "NVIDIA_REQUIRE_CUDA=cuda>=12.8 brand=tesla,driver>=470");
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=all");
  s.cuda_version = "12.2";
  dr = sc_run(&s);
  EXPECT(dr, "runtime.build", IL_VERDICT_FAIL, 1, ">= 570.26");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_version_mismatch(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_driver(root, "530.30.02", 0, 2, 1);
  sr_scenario(root, "%snvml.init=18\ncuda.init=803\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 3, "Reboot");
  EXPECT_SUMMARY(dr, "driver.nvml", "Driver/library version mismatch (kernel module 530.30.02, library 535.54.03)");
  EXPECT(dr, "driver.version_match", IL_VERDICT_FAIL, 3, "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia");
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 3, NULL);
  EXPECT_SUMMARY(dr, "cuda.compat", "driver's own"); /* newer libcuda + equally new NVML = mismatch, not compat */
  IL_CHECK_INT(il_doctor_exit_code(dr), 2);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_forward_compat(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_driver(root, "470.82.01", 0, 1, 1);
  sr_install_nvml(root, "470.82.01", s.nvml, sizeof s.nvml);
  sr_install_cuda(root, "/usr/local/cuda/compat", "520.61.05", s.cuda, sizeof s.cuda);
  sr_scenario(root, "driver=470.82.01\ncuda_driver=11040\ncount=1\ndev0.name=NVIDIA GeForce RTX 3090\ndev0.uuid=GPU-cccc\n"
                    "dev0.cc=8.6\ndev0.mem_total=25769803776\ndev0.mem_used=0\ncuda.init=804\ncuda.version=11080\n");
  sc_env(&s, "LD_LIBRARY_PATH=/usr/local/cuda/compat");
  s.cuda_version = "11.8";
  s.archs = "86";
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 2, "cuda-compat");
  EXPECT(dr, "cuda.compat", IL_VERDICT_FAIL, 2, "sudo apt remove 'cuda-compat-*'");
  EXPECT(dr, "cuda.compat", IL_VERDICT_FAIL, 2, "LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.compat", "GeForce RTX 3090");
  il_doctor_free(dr);
  /* The same compat library on a data-center GPU is supported. */
  sr_scenario(root, "driver=470.82.01\ncuda_driver=11040\ncount=1\ndev0.name=NVIDIA A100-PCIE-40GB\ndev0.uuid=GPU-dddd\n"
                    "dev0.cc=8.0\ncuda.init=0\ncuda.version=11080\n");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.compat", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "cuda.init", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_nouveau(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:01:00.0", 0x1b80, "nouveau");
  sr_write(root, "/proc/modules", "nouveau 1 0 - Live 0x0\ndrm 1 0 - Live 0x0\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.nouveau", IL_VERDICT_FAIL, 6, "blacklist nouveau");
  EXPECT(dr, "kmod.nouveau", IL_VERDICT_FAIL, 6, "update-initramfs");
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_FAIL, 6, NULL);
  IL_CHECK_INT(il_doctor_exit_code(dr), 2);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_vfio(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_rm(root, "/sys/bus/pci/devices/0000:07:00.0/driver");
  sr_rm(root, "/sys/bus/pci/devices/0000:0b:00.0/driver");
  sr_link(root, "/sys/bus/pci/devices/0000:07:00.0/driver", "../../../bus/pci/drivers/vfio-pci");
  sr_link(root, "/sys/bus/pci/devices/0000:0b:00.0/driver", "../../../bus/pci/drivers/vfio-pci");
  sr_write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on vfio-pci.ids=10de:20b2\n");
  sr_scenario(root, "driver=535.54.03\ncuda_driver=12020\ncount=0\ncuda.init=100\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "virt.pci", IL_VERDICT_FAIL, 7, "vfio-pci.ids=");
  EXPECT(dr, "virt.pci", IL_VERDICT_FAIL, 7, "/sys/bus/pci/drivers/nvidia/bind");
  EXPECT_SUMMARY(dr, "virt.pci", "reserved for passthrough to a VM");
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 7, NULL);
  EXPECT_SUMMARY(dr, "driver.nvml", "No devices were found");
  const il_check *c = il_doctor_find(dr, "virt.pci");
  IL_CHECK(c && il_check_evidence(c, "kernel_cmdline") && !strcmp(il_check_evidence(c, "kernel_cmdline"), "vfio-pci.ids=10de:20b2"));
  il_doctor_free(dr);
  /* Mixed host: one GPU on nvidia, one on vfio-pci -> warning only. */
  sr_rm(root, "/sys/bus/pci/devices/0000:07:00.0/driver");
  sr_link(root, "/sys/bus/pci/devices/0000:07:00.0/driver", "../../../bus/pci/drivers/nvidia");
  dr = sc_run(&s);
  EXPECT(dr, "virt.pci", IL_VERDICT_WARN, 7, "0000:0b:00.0");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_open_module_pre_gsp(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:09:00.0", 0x1d01, "");
  sr_driver(root, "580.65.06", 1, 0, 1);
  sr_install_nvml(root, "580.65.06", s.nvml, sizeof s.nvml);
  sr_scenario(root, "driver=580.65.06\ncuda_driver=13000\ncount=0\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.flavor", IL_VERDICT_FAIL, 8, "proprietary");
  EXPECT_SUMMARY(dr, "kmod.flavor", "10de:1d01");
  EXPECT(dr, "virt.pci", IL_VERDICT_FAIL, 8, "dmesg");
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, -1, NULL);
  il_doctor_free(dr);
  /* Proprietary module on a Blackwell id: it requires the open module (probe/gpufamily). */
  sr_pci_gpu(root, "0000:09:00.0", 0x2b85, "nvidia");
  sr_driver(root, "580.65.06", 0, 1, 1);
  dr = sc_run(&s);
  EXPECT(dr, "kmod.flavor", IL_VERDICT_FAIL, 8, "nvidia-driver-580-open");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_device_nodes(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_rm(root, "/dev/nvidia1");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "devnodes", IL_VERDICT_FAIL, 4, "nvidia-modprobe");
  EXPECT_SUMMARY(dr, "devnodes", "/dev/nvidia1");
  il_doctor_free(dr);
  /* Present but 0660 and not in the owning group. */
  sr_touch(root, "/dev/nvidia1");
  sr_chmod(root, "/dev/nvidia0", 0660);
  sr_chmod(root, "/dev/nvidia1", 0660);
  sr_chmod(root, "/dev/nvidiactl", 0660);
  dr = sc_run(&s);
  EXPECT(dr, "devnodes", IL_VERDICT_FAIL, 17, "usermod -aG video");
  EXPECT_SUMMARY(dr, "devnodes", "not readable/writable by uid 4242");
  il_doctor_free(dr);
  /* The same nodes are fine for root. */
  s.uid = 0;
  dr = sc_run(&s);
  EXPECT(dr, "devnodes", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* NVML's own view of it. */
  s.uid = 4242;
  sr_scenario(root, "%snvml.init=4\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 17, "usermod");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_uvm_missing(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_driver(root, "535.54.03", 0, 2, 0);
  sr_rm(root, "/dev/nvidia-uvm");
  sr_scenario(root, "%scuda.init=999\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.uvm", IL_VERDICT_FAIL, 16, "modprobe nvidia_uvm");
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 16, "rmmod nvidia_uvm");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_container_without_runtime(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_touch(root, "/.dockerenv");
  sr_write(root, "/proc/1/cgroup", "0::/docker/0123456789abcdef\n");
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia"); /* sysfs shows the host's GPU */
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.detect", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.detect", "docker");
  EXPECT(dr, "container.injection", IL_VERDICT_FAIL, 21, "--gpus all");
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 21, "docker run --gpus all");
  EXPECT(dr, "visibility.nvidia", IL_VERDICT_FAIL, 21, "--gpus all");
  IL_CHECK(il_doctor_find(dr, "container.docker") == NULL); /* host checks are not run inside */
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_nvidia_visible_void(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_touch(root, "/run/.containerenv");
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=void");
  il_doctor *dr = sc_run(&s);
  EXPECT_SUMMARY(dr, "container.detect", "podman");
  EXPECT(dr, "visibility.nvidia", IL_VERDICT_FAIL, 21, "podman run --device nvidia.com/gpu=all"); /* podman's fix, not docker's */
  EXPECT_SUMMARY(dr, "visibility.nvidia", "is void");
  il_doctor_free(dr);
  /* "none": libraries but no GPU. */
  s.env[s.n_env - 1] = (char *)"NVIDIA_VISIBLE_DEVICES=none";
  sr_install_nvml(root, "535.54.03", s.nvml, sizeof s.nvml);
  sr_scenario(root, "driver=535.54.03\ncuda_driver=12020\ncount=0\n");
  dr = sc_run(&s);
  EXPECT(dr, "visibility.nvidia", IL_VERDICT_WARN, 21, "NVIDIA_VISIBLE_DEVICES=all");
  il_doctor_free(dr);
  /* Capabilities without compute: NVML there, libcuda not injected. */
  s.env[s.n_env - 1] = (char *)"NVIDIA_VISIBLE_DEVICES=all";
  sc_env(&s, "NVIDIA_DRIVER_CAPABILITIES=utility");
  sr_driver(root, "535.54.03", 0, 2, 1);
  sr_scenario(root, "%s", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "container.injection", IL_VERDICT_FAIL, 21, "NVIDIA_DRIVER_CAPABILITIES=compute,utility");
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 21, "NVIDIA_DRIVER_CAPABILITIES=compute,utility");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void toolkit_bins(const char *root) {
  sr_exe(root, "/usr/bin/nvidia-ctk");
  sr_exe(root, "/usr/bin/nvidia-container-runtime");
  sr_exe(root, "/usr/bin/nvidia-container-runtime-hook");
  sr_exe(root, "/usr/bin/nvidia-container-cli");
  sr_exe(root, "/usr/bin/dockerd");
}

static void test_docker_runtime(void) {
  scen s;
  const char *root = healthy_root(&s);
  toolkit_bins(root);
  sr_write(root, "/etc/docker/daemon.json",
           "{\n  \"runtimes\": {\n    \"nvidia\": {\n      \"args\": [],\n      \"path\": \"nvidia-container-runtime\"\n    }\n  },\n"
           "  \"log-driver\": \"json-file\"\n}\n");
  sr_write(root, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
                                         "    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits:\n  mounts:\n"
                                         "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.54.03\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_WARN, 19, "--set-as-default");
  EXPECT(dr, "container.docker", IL_VERDICT_WARN, 19, "docker run --gpus all");
  EXPECT(dr, "container.toolkit", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "container.cdi", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* Registered and default. */
  sr_write(root, "/etc/docker/daemon.json",
           "{\"default-runtime\": \"nvidia\", \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\", \"args\": []}}}");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_OK, 0, NULL);
  IL_CHECK_INT(il_doctor_exit_code(dr), 0);
  il_doctor_free(dr);
  /* Not registered at all. */
  sr_write(root, "/etc/docker/daemon.json", "{\"log-driver\": \"json-file\"}");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_WARN, 19, "nvidia-ctk runtime configure --runtime=docker");
  il_doctor_free(dr);
  /* Broken JSON. */
  sr_write(root, "/etc/docker/daemon.json", "{\"runtimes\": {\"nvidia\": ");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_FAIL, 19, "json.tool");
  il_doctor_free(dr);
  /* Docker installed, toolkit absent. */
  sr_rm(root, "/usr/bin/nvidia-ctk");
  sr_rm(root, "/usr/bin/nvidia-container-runtime");
  sr_rm(root, "/usr/bin/nvidia-container-runtime-hook");
  sr_rm(root, "/usr/bin/nvidia-container-cli");
  dr = sc_run(&s);
  EXPECT(dr, "container.toolkit", IL_VERDICT_WARN, 18, "apt install nvidia-container-toolkit");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_toolkit_root_missing(void) {
  scen s;
  const char *root = healthy_root(&s);
  toolkit_bins(root);
  sr_write(root, "/etc/nvidia-container-runtime/config.toml",
           "disable-require = false\n\n[nvidia-container-cli]\nenvironment = []\nldconfig = \"@/run/nvidia/driver/sbin/ldconfig.real\"\n"
           "load-kmods = true\nroot = \"/run/nvidia/driver\"\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.toolkit", IL_VERDICT_FAIL, 20, "nvidia-container-cli.root=/");
  EXPECT_SUMMARY(dr, "container.toolkit", "/run/nvidia/driver");
  il_doctor_free(dr);
  /* The GPU operator's driver root really present: fine. */
  sr_write(root, "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "x");
  dr = sc_run(&s);
  EXPECT(dr, "container.toolkit", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_cdi(void) {
  scen s;
  const char *root = healthy_root(&s);
  toolkit_bins(root);
  /* Missing spec with nvidia-ctk installed. */
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_WARN, 23, "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml");
  il_doctor_free(dr);
  /* Spec generated for an older driver. */
  sr_write(root, "/var/run/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\ncontainerEdits:\n  mounts:\n"
                                             "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.530.30.02\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_FAIL, 23, "nvidia-ctk cdi generate");
  EXPECT_SUMMARY(dr, "container.cdi", "generated for driver 530.30.02 (running 535.54.03)");
  il_doctor_free(dr);
  /* Spec that injects a node this machine does not have. */
  sr_write(root, "/var/run/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"3\"\n  containerEdits:\n"
                                             "    deviceNodes:\n    - path: /dev/nvidia3\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_FAIL, 23, "cdi generate");
  EXPECT_SUMMARY(dr, "container.cdi", "/dev/nvidia3");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_cuda_visible_devices(void) {
  scen s;
  const char *root = healthy_root(&s);
  sc_env(&s, "CUDA_VISIBLE_DEVICES=7");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "visibility.cuda", IL_VERDICT_FAIL, 14, "unset CUDA_VISIBLE_DEVICES");
  EXPECT_SUMMARY(dr, "visibility.cuda", "index 7 does not exist");
  IL_CHECK_INT(dr->cudavis.n_visible, 0);
  il_doctor_free(dr);
  /* 0,-1,1: the invalid middle entry hides GPU 1. */
  s.env[s.n_env - 1] = (char *)"CUDA_VISIBLE_DEVICES=0,-1,1";
  dr = sc_run(&s);
  EXPECT(dr, "visibility.cuda", IL_VERDICT_WARN, 14, "Remove '-1'");
  EXPECT_SUMMARY(dr, "visibility.cuda", "visible: cuda:0=GPU 0");
  IL_CHECK_INT(dr->cudavis.n_visible, 1);
  IL_CHECK_INT(dr->cudavis.n_hidden_after, 1);
  il_doctor_free(dr);
  /* UUID prefix, reordered. */
  s.env[s.n_env - 1] = (char *)"CUDA_VISIBLE_DEVICES=GPU-bbbb,0";
  dr = sc_run(&s);
  EXPECT(dr, "visibility.cuda", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "visibility.cuda", "cuda:0=GPU 1, cuda:1=GPU 0");
  il_doctor_free(dr);
  /* cuInit says no device and the doctor points at the variable. */
  s.env[s.n_env - 1] = (char *)"CUDA_VISIBLE_DEVICES=";
  sr_scenario(root, "%scuda.init=100\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "visibility.cuda", IL_VERDICT_FAIL, 14, NULL);
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 14, "CUDA_VISIBLE_DEVICES");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_arch_without_kernels(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_scenario(root, "%sdev0.cc=7.5\ndev0.name=Tesla T4\ndev1.cc=7.5\ndev1.name=Tesla T4\n", SR_TWO_A100);
  s.archs = "80;90";
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "runtime.arch", IL_VERDICT_WARN, 15, "-DIL_CUDA_ARCHS=\"80;90;75\"");
  EXPECT_SUMMARY(dr, "runtime.arch", "inference will run on the CPU"); /* a WARN that says so, not an OK */
  EXPECT_SUMMARY(dr, "runtime.arch", "sm_75: no kernel image");
  EXPECT_SUMMARY(dr, "runtime.features", "no BF16 (needs 8.0)");
  il_doctor_free(dr);
  /* SASS-only for 8.0 on a 9.0 device: no image; with PTX 8.0 it JITs (warning). */
  sr_scenario(root, "%sdev0.cc=9.0\ndev1.cc=9.0\n", SR_TWO_A100);
  s.archs = "80-real";
  dr = sc_run(&s);
  EXPECT(dr, "runtime.arch", IL_VERDICT_WARN, 15, "90");
  il_doctor_free(dr);
  s.archs = "80";
  dr = sc_run(&s);
  EXPECT(dr, "runtime.arch", IL_VERDICT_WARN, 15, NULL);
  EXPECT_SUMMARY(dr, "runtime.arch", "PTX 80 JIT-compiled");
  il_doctor_free(dr);
  /* sm_80 SASS runs on 8.6. */
  sr_scenario(root, "%sdev0.cc=8.6\ndev1.cc=8.6\n", SR_TWO_A100);
  s.archs = "sm_80";
  dr = sc_run(&s);
  EXPECT(dr, "runtime.arch", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_mig_without_instances(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_scenario(root, "%sdev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=0\ncuda.init=100\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.mig", IL_VERDICT_FAIL, 13, "nvidia-smi mig -i 0 -cgi");
  EXPECT(dr, "gpu.mig", IL_VERDICT_FAIL, 13, "-mig 0");
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 13, "MIG");
  il_doctor_free(dr);
  sr_scenario(root, "%sdev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=3\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.mig", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "gpu.mig", "3 MIG devices");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_vram_taken(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_scenario(root, "%sdev0.mem_used=75161927680\ndev0.procs=4711:42949672960,4712:32212254720\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.memory", IL_VERDICT_WARN, 25, "4711 4712");
  EXPECT(dr, "gpu.memory", IL_VERDICT_WARN, 25, "CUDA_VISIBLE_DEVICES=GPU-bbbb1111");
  EXPECT_SUMMARY(dr, "gpu.memory", "GPU 0: 70.00 GiB of 80.00 GiB already used by 2 processes");
  IL_CHECK_INT(dr->nvml.devices[0].n_procs, 2);
  IL_CHECK_INT(dr->nvml.devices[0].procs[1].pid, 4712);
  il_doctor_free(dr);
  sr_scenario(root, "%sdev1.compute_mode=2\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.memory", IL_VERDICT_FAIL, 25, "sudo nvidia-smi -i 1 -c DEFAULT");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_health_and_fabric(void) {
  scen s;
  const char *root = healthy_root(&s);
  sr_scenario(root, "%sdev1.handle_rc=15\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.health", IL_VERDICT_FAIL, 10, "power-cycle");
  il_doctor_free(dr);
  sr_scenario(root, "%sdev0.ecc_vol=4\ndev0.retired_pending=1\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "gpu.health", IL_VERDICT_WARN, 11, "nvidia-smi -i 0 -r"); /* the real index, not a placeholder */
  il_doctor_free(dr);
  sr_scenario(root, "%scuda.init=802\n", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "cuda.init", IL_VERDICT_FAIL, 12, "nvidia-fabricmanager-535");
  const il_check *c = il_doctor_find(dr, "cuda.init");
  IL_CHECK(c && il_check_evidence(c, "fabricmanager_socket") && !strcmp(il_check_evidence(c, "fabricmanager_socket"), "missing"));
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_wsl(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_write(root, "/proc/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2\n");
  sr_touch(root, "/dev/dxg");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 24, "wsl --shutdown");
  EXPECT(dr, "devnodes", IL_VERDICT_OK, 0, NULL);
  EXPECT(dr, "kmod.nvidia", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "host.kernel", "(WSL2)");
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_min_driver_table(void) {
  char full[32], mvc[32];
  IL_CHECK(il_driver_minimum("12.4", full, sizeof full, mvc, sizeof mvc));
  IL_CHECK_STR(full, "550.54.14");
  IL_CHECK_STR(mvc, "525.60.13");
  IL_CHECK(il_driver_minimum("13.0.1", full, sizeof full, mvc, sizeof mvc));
  IL_CHECK_STR(full, "580.65.06");
  IL_CHECK(il_driver_minimum("11.8", full, sizeof full, mvc, sizeof mvc));
  IL_CHECK_STR(mvc, "450.80.02");
  IL_CHECK(!il_driver_minimum("12.7", full, sizeof full, mvc, sizeof mvc)); /* never released */
  IL_CHECK(il_sysfs_vercmp("535.54.03", "535.104.05") < 0);
  IL_CHECK(il_sysfs_vercmp("570.124.06", "570.26") > 0);
  IL_CHECK(il_sysfs_vercmp("580", "580.65.06") < 0);
  IL_CHECK_INT(il_sysfs_vercmp("535.54.03", "535.54.03"), 0);
}

/* The real machine (sysroot "/") with a libcuda loaded: cuda.loader asks realpath which file
 * on the loader's path is the one loaded. That call aborted every fortified build with
 * "*** buffer overflow detected ***" (exit 134; an H200 whose GCC 13 defaults to
 * _FORTIFY_SOURCE=3, 2026-12-01): its buffer was 1024 bytes and glibc's check wants PATH_MAX,
 * whatever the path. A fixture sysroot never reaches it, and neither does a machine without a
 * driver. Here LD_LIBRARY_PATH lists an older stand-in first and the fake libcuda second, which
 * is the one loaded: the check must name it and list the other. The same run gives NVML more
 * running processes than the snapshot lists (20, and 100: more than the first request's room,
 * so NVML answers INSUFFICIENT_SIZE and is asked again; the first 16 listed as NVML gave them,
 * all counted, none from stack bytes) and a GPU name longer than NVML's 96-byte buffer. */
static void test_real_root_loaded_libcuda(void) {
  const char *tmp = sr_new_host(); /* a scratch directory: the sysroot is "/" */
  scen s;
  sc_init(&s, "/");
  sr_write(tmp, "/a/libcuda.so.470.82.01", "ELF stand-in");
  sr_link(tmp, "/a/libcuda.so.1", "libcuda.so.470.82.01");
  char unused[PATH_MAX], ld[512], picked[PATH_MAX], other[PATH_MAX];
  sr_install_cuda(tmp, "/b", "580.159.04", unused, sizeof unused);
  sr_install_nvml(tmp, "580.159.04", s.nvml, sizeof s.nvml);
  snprintf(s.cuda, sizeof s.cuda, "%s/b/libcuda.so.1", tmp);
  snprintf(ld, sizeof ld, "LD_LIBRARY_PATH=%s/a:%s/b", tmp, tmp);
  sc_env(&s, ld);
  char procs[160] = "";
  for (int k = 0; k < IL_NVML_MAX_PROCS + 4; k++) il_appendf(procs, sizeof procs, "%s%d:1", k ? "," : "", 1001 + k);
  sr_scenario(tmp, "%sdev0.procs=%s\ndev1.nprocs=100\ndev1.name=NVIDIA %0130d\n", SR_TWO_A100, procs, 0);
  il_doctor *dr = sc_run(&s);
  IL_CHECK(dr->cuda.loaded);
  const il_check *c = il_doctor_find(dr, "cuda.loader");
  snprintf(picked, sizeof picked, "%s/b/libcuda.so.1", tmp);
  snprintf(other, sizeof other, "%s/a/libcuda.so.1 (470.82.01, LD_LIBRARY_PATH)", tmp);
  IL_CHECK_STR(c ? il_check_evidence(c, "picked") : "", picked);
  IL_CHECK_STR(c ? il_check_evidence(c, "version") : "", "580.159.04");
  const char *also = c ? il_check_evidence(c, "also_on_path") : NULL;
  IL_CHECK(also && strstr(also, other));
  if (!also || !strstr(also, other)) dump(dr);
  /* 20 processes: NVML says INSUFFICIENT_SIZE to a short buffer; the first 16 are listed, as
   * NVML gave them, and all 20 are counted */
  IL_CHECK_INT(dr->nvml.devices[0].n_procs, IL_NVML_MAX_PROCS);
  IL_CHECK_INT(dr->nvml.devices[0].n_procs_total, IL_NVML_MAX_PROCS + 4);
  IL_CHECK_INT(dr->nvml.devices[0].procs[IL_NVML_MAX_PROCS - 1].pid, 1000 + IL_NVML_MAX_PROCS);
  /* 100: more than the first request's room of 64, so NVML is asked again with room for them */
  IL_CHECK_INT(dr->nvml.devices[1].n_procs, IL_NVML_MAX_PROCS);
  IL_CHECK_INT(dr->nvml.devices[1].n_procs_total, 100);
  IL_CHECK_INT(dr->nvml.devices[1].procs[0].pid, 1001);
  IL_CHECK(strlen(dr->nvml.devices[1].name) < sizeof dr->nvml.devices[1].name);
  il_doctor_free(dr);
  /* Negative: room for all of them: every pid as NVML gave it. */
  sr_scenario(tmp, "%sdev0.procs=1001:1,1002:2\n", SR_TWO_A100);
  dr = sc_run(&s);
  IL_CHECK_INT(dr->nvml.devices[0].n_procs, 2);
  IL_CHECK_INT(dr->nvml.devices[0].procs[1].pid, 1002);
  il_doctor_free(dr);
  sr_destroy(tmp);
}

/* More supplementary groups than il_sysfs keeps: getgroups with too small a buffer fails and
 * fills nothing, so the groups are read in full and the first IL_SYSFS_MAX_GROUPS kept (they
 * were dropped: every device node owned by a group then looked out of reach). Needs root to
 * set the groups, in a child so this process keeps its own. */
static void test_many_groups(void) {
  if (geteuid() != 0) {
    printf("note: test_many_groups did not run: setting 1100 supplementary groups needs root\n");
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    static gid_t want[1100];
    for (int i = 0; i < 1100; i++) want[i] = (gid_t)(50000 + i);
    if (setgroups(1100, want) != 0) _exit(3); /* (above the kernel's limit: not this test's subject) */
    il_sysfs fs;
    if (il_sysfs_init(&fs, "/", NULL) != IL_OK) _exit(1);
    bool ok = fs.n_groups == IL_SYSFS_MAX_GROUPS;
    for (int i = 0; ok && i < fs.n_groups; i++) ok = fs.groups[i] == want[i];
    _exit(ok ? 0 : 2);
  }
  int st = 0;
  IL_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  IL_CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3));
  if (WIFEXITED(st) && WEXITSTATUS(st) == 3) printf("note: test_many_groups: setgroups(1100) refused here\n");
}

int main(void) {
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) IL_SKIP("fake NVML/CUDA libraries not built (target il_fake_nvml, il_fake_cuda)");
  test_min_driver_table();
  test_healthy_two_gpus();
  test_no_gpu_no_driver();
  test_cpu_only_build_with_gpus();
  test_gpu_without_driver();
  test_driver_too_old();
  test_version_mismatch();
  test_forward_compat();
  test_nouveau();
  test_vfio();
  test_open_module_pre_gsp();
  test_device_nodes();
  test_uvm_missing();
  test_container_without_runtime();
  test_nvidia_visible_void();
  test_docker_runtime();
  test_toolkit_root_missing();
  test_cdi();
  test_cuda_visible_devices();
  test_arch_without_kernels();
  test_mig_without_instances();
  test_vram_taken();
  test_health_and_fabric();
  test_wsl();
  test_real_root_loaded_libcuda();
  test_many_groups();
  return il_test_finish();
}
