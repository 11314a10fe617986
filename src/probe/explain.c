/* probe/explain: pasted error text -> failure scenario. See explain.h. */
#include "probe/explain.h"

#include <string.h>

#include "probe/report.h"
#include "probe/sysfs.h"

#define IL__MAXPAT 12

typedef struct {
  int scenario;
  const char *title, *causes, *fix, *checks;
  const char *patterns[IL__MAXPAT];
} il__scenario;

static const il__scenario il__table[] = {
    {1, "Driver older than the CUDA runtime",
     "The CUDA runtime (framework wheel, container image, this build) needs a newer CUDA major than the loaded driver supports.",
     "Upgrade the driver to the minimum for that CUDA version (12.x >= 525, 13.x >= 580; exact values: inferlab doctor runtime.build), "
     "or use a build/image for an older CUDA.",
     "runtime.build cuda.init driver.nvml",
     {"driver version is insufficient for cuda runtime", "nvidia driver on your system is too old", "driver is too old or missing",
      "unsatisfied condition: cuda>=", "cudaerrorinsufficientdriver", "cuda_error_insufficient_driver",
      "compiled with an unsupported toolchain", "cudaerrorunsupportedptxversion", "please update your driver to a newer version"}},
    {2, "Forward-compatibility libcuda on a GPU that does not support it",
     "A cuda-compat libcuda (newer than the kernel module) is loaded on a GeForce/unsupported GPU.",
     "Remove the cuda-compat package (sudo apt remove 'cuda-compat-*'), drop its directory from LD_LIBRARY_PATH, upgrade the real driver.",
     "cuda.compat cuda.init",
     {"forward compatibility was attempted on non supported hw", "error 804", "cuda_error_compat_not_supported_on_device",
      "cudaerrorcompatnotsupportedondevice", "code=804", "(804)"}},
    {3, "Driver/library version mismatch",
     "The driver packages were upgraded (often by unattended-upgrade) but the old kernel module is still loaded.",
     "Reboot; or with no GPU users: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo nvidia-modprobe -u -c 0. Hold driver packages.",
     "driver.nvml driver.version_match",
     {"driver/library version mismatch", "api mismatch: the client has the version", "nvml_error_lib_rm_version_mismatch",
      "version mismatch between driver and cuda driver library", "cuda_error_system_driver_mismatch", "cudaerrorsystemdrivermismatch",
      "error 803"}},
    {4, "Kernel module not built or not loaded for the running kernel",
     "The kernel was updated and DKMS did not rebuild the nvidia module, or the driver is not installed.",
     "sudo apt install linux-headers-$(uname -r) dkms && sudo dkms autoinstall (or reinstall nvidia-dkms-<branch>), then reboot.",
     "kmod.nvidia driver.nvml devnodes",
     {"couldn't communicate with the nvidia driver", "module nvidia not found", "unable to load the kernel module 'nvidia.ko'",
      "nvidia driver is not loaded", "nvml_error_driver_not_loaded"}},
    {5, "Secure Boot rejects the unsigned NVIDIA module",
     "UEFI Secure Boot enforces module signatures and the DKMS key is not enrolled.",
     "sudo mokutil --import /var/lib/dkms/mok.pub, reboot, enroll in MokManager; or disable Secure Boot.",
     "kmod.nvidia",
     {"key was rejected by service", "required key not available"}},
    {6, "nouveau owns the GPU",
     "nouveau was loaded first and claimed the device, so the nvidia probe routine was never called.",
     "Blacklist nouveau in /etc/modprobe.d/blacklist-nouveau.conf (blacklist nouveau; options nouveau modeset=0), update-initramfs -u, reboot.",
     "kmod.nouveau virt.pci",
     {"probe routine was not called", "nouveau, rivafb, nvidiafb or rivatv", "no nvidia graphics adapter probed"}},
    {7, "GPU bound to vfio-pci for passthrough",
     "vfio-pci.ids on the kernel command line or in modprobe.d reserves the GPU for a VM.",
     "Remove the ids from /etc/default/grub and /etc/modprobe.d, update-initramfs -u, update-grub, reboot; or unbind from vfio-pci.",
     "virt.pci driver.nvml",
     {"already bound to vfio-pci", "vfio-pci"}},
    {8, "Wrong kernel module flavour (open module on a GPU without GSP, or proprietary on Blackwell)",
     "Open kernel modules only drive Turing and newer; Blackwell needs them.",
     "Switch flavour: proprietary for Maxwell/Pascal/Volta, -open for Blackwell; rebuild and reboot.",
     "kmod.flavor virt.pci",
     {"not supported by open nvrm", "does not include the required gpu", "none of the nvidia devices were initialized",
      "probe with driver nvidia failed"}},
    {9, "GSP firmware failed to initialize",
     "Stale GPU state after a crash, missing firmware for this driver version, or platform settings (ReBAR/Above-4G).",
     "Power-cycle; install the firmware files of the exact driver version; enable ReBAR/Above-4G decoding; proprietary module only: NVreg_EnableGpuFirmware=0.",
     "virt.pci kmod.nvidia",
     {"cannot initialize gsp firmware", "rminitadapter failed", "rm_init_adapter failed", "wpr2 already up", "gsp_"}},
    {10, "GPU fell off the bus (Xid 79)",
     "Hardware or platform: overheating, power, outdated SBIOS.",
     "Drain and power-cycle; check cooling, PSU, cables, SBIOS; RMA if it repeats.",
     "gpu.health",
     {"fallen off the bus", "xid (pci", ": 79,", "gpu_is_lost", "unable to determine the device handle"}},
    {11, "Uncorrectable ECC error / pending row remap or page retirement",
     "Uncorrectable DRAM errors; the repair applies only after a GPU reset.",
     "Reset the GPU or reboot; drain and RMA on repeats or Xid 64.",
     "gpu.health",
     {"uncorrectable ecc error", "ecc_uncorrectable", "cudaerroreccuncorrectable", "row remapper", "dynamic page retirement",
      "double bit error"}},
    {12, "NVSwitch system without a running Fabric Manager",
     "HGX/DGX boards with NVSwitch need nvidia-fabricmanager before CUDA can initialize.",
     "Install nvidia-fabricmanager of the driver's branch and systemctl enable --now nvidia-fabricmanager.",
     "cuda.init",
     {"system not yet initialized", "error 802", "cudaerrorsystemnotready", "cuda_error_system_not_ready", "code=802",
      "nvidia-fabricmanager/socket"}},
    {13, "MIG enabled without GPU/compute instances",
     "MIG mode persists across reboots but instances do not; with none, CUDA has nothing to enumerate.",
     "sudo nvidia-smi mig -cgi <profiles> -C, or disable MIG (nvidia-smi -i N -mig 0); apply layouts at boot with nvidia-mig-parted.",
     "gpu.mig cuda.init",
     {"mig mode is enabled, but no mig devices were found", "no cuda capable devices found", "mig devices"}},
    {14, "CUDA_VISIBLE_DEVICES hides the GPU",
     "A missing index, an empty/-1 value, or an invalid entry (which hides everything after it); renumbered ordinals used as host ids.",
     "Unset CUDA_VISIBLE_DEVICES or list GPU UUIDs from nvidia-smi -L; set it before the process starts; CUDA_DEVICE_ORDER=PCI_BUS_ID.",
     "visibility.cuda cuda.init",
     {"no cuda gpus are available", "invalid device ordinal", "no cuda-capable device is detected", "error=38",
      "changing env variable cuda_visible_devices", "cudaerrorinvaliddevice", "cuda_error_no_device", "cudaerrornodevice", "returned 100"}},
    {15, "No kernel image for this GPU's compute capability",
     "The binary has no SASS for this architecture and no PTX it can JIT (new GPU on an old build, or old GPU dropped from a new build).",
     "Install a build that includes this sm_XY, or rebuild with CMAKE_CUDA_ARCHITECTURES including it (plus PTX).",
     "runtime.arch",
     {"no kernel image is available", "is not compatible with the current pytorch installation", "cudaerrornokernelimagefordevice",
      "cuda_error_no_binary_for_gpu", "error=48"}},
    {16, "nvidia_uvm missing or wedged (often after suspend/resume)",
     "The UVM module is not loaded, /dev/nvidia-uvm is missing, or its state broke across suspend.",
     "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or nvidia-modprobe -c 0 -u); reboot if in use.",
     "kmod.uvm cuda.init",
     {"cuda unknown error", "cuda_error_unknown", "cudaerrorunknown", "err: 999", "init failure: 999", "returned 30", "could not load uvm kernel module",
      "cuinit failed: unknown"}},
    {17, "No permission on the GPU device nodes / rootless containers",
     "/dev/nvidia* are not readable/writable by this user (restrictive NVreg_DeviceFileMode/GID), or a rootless engine cannot set cgroup device rules.",
     "Add the user to the owning group or restore mode 0666; rootless: nvidia-ctk config --set nvidia-container-cli.no-cgroups=true --in-place, or CDI.",
     "devnodes driver.nvml",
     {"insufficient permissions", "nvml_error_no_permission", "bpf_prog_query(bpf_cgroup_device) failed", "failed to add device rules"}},
    {18, "Docker has no GPU device driver registered",
     "dockerd registers its nvidia device driver only if nvidia-container-runtime-hook is on its PATH at start (toolkit missing, docker not restarted, snap docker).",
     "Install nvidia-container-toolkit, sudo nvidia-ctk runtime configure --runtime=docker, sudo systemctl restart docker; remove snap docker.",
     "container.toolkit container.docker",
     {"could not select device driver", "with capabilities: [[gpu]]"}},
    {19, "nvidia runtime not registered or not the default",
     "daemon.json lacks runtimes.nvidia, or default-runtime is not nvidia where the workload relies on it (Kubernetes device plugin).",
     "sudo nvidia-ctk runtime configure --runtime=docker --set-as-default (or --runtime=containerd) and restart the engine.",
     "container.docker container.containerd",
     {"unknown or invalid runtime name: nvidia", "did you set the docker default runtime to `nvidia`", "could not load nvml library",
      "error_library_not_found"}},
    {20, "nvidia-container-cli cannot load NVML",
     "No driver on the host, or the toolkit config root/ldconfig point at a driver location that does not exist.",
     "Install the driver; make root/ldconfig in /etc/nvidia-container-runtime/config.toml match the install (root = \"/\").",
     "container.toolkit driver.nvml",
     {"load library failed: libnvidia-ml.so.1", "couldn't find libnvidia-ml.so", "could not start /sbin/ldconfig"}},
    {21, "Container started without GPUs, or asking for a GPU that does not exist",
     "No --gpus/--runtime, NVIDIA_VISIBLE_DEVICES unset/void, or ids that the host does not have.",
     "docker run --gpus all (or --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all); request existing indices or full UUIDs.",
     "container.injection visibility.nvidia",
     {"unknown device", "device error:", "nvidia-smi: command not found"}},
    {22, "Running container lost its GPU after systemctl daemon-reload",
     "With the systemd cgroup driver, missing /dev/char symlinks let systemd drop the device rules.",
     "Recreate the container; sudo nvidia-ctk system create-dev-char-symlinks --create-all (udev rule), or the cgroupfs driver.",
     "driver.nvml cuda.init",
     {"failed to initialize nvml: unknown error", "open(\"/dev/nvidiactl\", o_rdwr) = -1 eperm"}},
    {23, "CDI spec missing, incomplete or stale",
     "No spec generated, or generated before a driver/MIG change.",
     "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; remove stale specs in /var/run/cdi.",
     "container.cdi",
     {"unresolvable cdi devices", "failed to inject cdi devices", "error setting up cdi devices"}},
    {24, "WSL2-specific breakage",
     "A Linux driver installed inside WSL, TCC mode on Windows, or incomplete /usr/lib/wsl/lib.",
     "Remove Linux NVIDIA packages inside WSL, use WDDM, wsl --shutdown; keep /usr/lib/wsl/lib on the loader path.",
     "driver.nvml devnodes",
     {"gpu access blocked by the operating system", "/usr/lib/wsl/lib", "nvml_error_operating_system", "dxcore"}},
    {25, "GPU memory already taken at startup",
     "Other processes hold VRAM on the selected GPU, or the compute mode is exclusive/prohibited.",
     "Stop the other users, pick an idle GPU (CUDA_VISIBLE_DEVICES=<uuid>), or lower the memory fraction; compute mode back to Default.",
     "gpu.memory",
     {"out of memory", "free memory on device", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
      "all cuda-capable devices are busy or unavailable", "cudaerrordevicesunavailable"}},
    {101, "CUDA toolkit stub library loaded instead of the driver",
     "LD_LIBRARY_PATH includes the toolkit's lib64/stubs, whose libcuda only exists for linking.",
     "Remove the stubs directory from LD_LIBRARY_PATH.",
     "cuda.init",
     {"cuda_error_stub_library", "cudaerrorstublibrary", "stub library"}},
    {102, "Persistence mode off: slow or timed-out initialization",
     "Without nvidia-persistenced the driver tears the GPU state down between clients.",
     "sudo systemctl enable --now nvidia-persistenced.",
     "gpu.health",
     {"driver error: timed out", "nvidia-persistenced/socket"}},
};

int il_explain(const char *text, il_explain_match *out, int max) {
  int n = 0;
  if (!text) return 0;
  for (size_t i = 0; i < sizeof il__table / sizeof il__table[0]; i++) {
    const il__scenario *s = &il__table[i];
    int score = 0;
    const char *best = NULL;
    for (int k = 0; k < IL__MAXPAT && s->patterns[k]; k++) {
      if (!il_sysfs_stristr(text, s->patterns[k])) continue;
      int l = (int)strlen(s->patterns[k]);
      score += l;
      if (!best || l > (int)strlen(best)) best = s->patterns[k];
    }
    if (!score) continue;
    il_explain_match m = {s->scenario, s->title, s->causes, s->fix, s->checks, score, best};
    /* insertion by score, highest first */
    int pos = n < max ? n : max;
    while (pos > 0 && out[pos - 1].score < score) {
      if (pos < max) out[pos] = out[pos - 1];
      pos--;
    }
    if (pos < max) out[pos] = m;
    if (n < max) n++;
  }
  return n;
}

int il_explain_print_text(const char *text, FILE *out) {
  il_explain_match m[8];
  int n = il_explain(text, m, 8);
  if (!n) {
    fprintf(out, "Not recognised: no known GPU-stack failure matches this message.\n"
                 "Run `inferlab doctor` on the machine where it happened; it checks driver, CUDA, device nodes, visibility and containers.\n");
    return 0;
  }
  for (int i = 0; i < n; i++) {
    fprintf(out, "%s%d. %s (scenario %d; matched \"%s\")\n", i ? "\n" : "", i + 1, m[i].title, m[i].scenario, m[i].matched);
    fprintf(out, "   cause:  %s\n   fix:    %s\n   checks: inferlab doctor (see %s)\n", m[i].causes, m[i].fix, m[i].checks);
  }
  return n;
}

int il_explain_print_json(const char *text, FILE *out) {
  il_explain_match m[8];
  int n = il_explain(text, m, 8);
  fputs("{\"schema_version\":1,\"input\":", out);
  il_report_json_string(out, text);
  fputs(",\"matches\":[", out);
  for (int i = 0; i < n; i++) {
    fprintf(out, "%s{\"scenario\":%d,\"title\":", i ? "," : "", m[i].scenario);
    il_report_json_string(out, m[i].title);
    fputs(",\"causes\":", out);
    il_report_json_string(out, m[i].causes);
    fputs(",\"fix\":", out);
    il_report_json_string(out, m[i].fix);
    fputs(",\"matched\":", out);
    il_report_json_string(out, m[i].matched);
    fputs(",\"checks\":[", out);
    char ids[128];
    il_sysfs_copy(ids, sizeof ids, m[i].checks);
    bool first = true;
    for (char *save = NULL, *t = strtok_r(ids, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
      if (!first) fputc(',', out);
      il_report_json_string(out, t);
      first = false;
    }
    fputs("]}", out);
  }
  fputs("]}\n", out);
  return n;
}
