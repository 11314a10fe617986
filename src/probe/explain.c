/* probe/explain: pasted error text -> failure scenario. See explain.h. */
#include "probe/explain.h"

#include <stdbool.h>
#include <stdlib.h>
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
      "nvidia driver is not loaded", "nvml_error_driver_not_loaded", "nvml error: driver not loaded"}},
    {5, "Secure Boot / kernel lockdown rejects the unsigned NVIDIA module",
     "UEFI Secure Boot (and the kernel lockdown it turns on) enforces module signatures and the DKMS/akmods key is not enrolled.",
     "sudo mokutil --import /var/lib/dkms/mok.pub, reboot, enroll in MokManager; or disable Secure Boot.",
     "kmod.nvidia",
     {"key was rejected by service", "required key not available", "unsigned module loading is restricted", "loading of unsigned module is rejected", "module verification failed: signature and/or required key missing", "kernel_lockdown"}},
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
    {12, "NVSwitch system without a running Fabric Manager (or one of another version)",
     "HGX/DGX boards with NVSwitch need nvidia-fabricmanager of exactly the driver's version before CUDA can initialize; "
     "NV_WARN_NOTHING_TO_DO means it found no NVSwitch to manage (wrong machine, or NVLink5 systems missing the NVLSM dependency).",
     "Install nvidia-fabricmanager of the driver's exact version and systemctl enable --now nvidia-fabricmanager; on a machine without NVSwitch, disable it.",
     "gpu.fabric cuda.init",
     {"system not yet initialized", "error 802", "cudaerrorsystemnotready", "cuda_error_system_not_ready", "code=802",
      "nvidia-fabricmanager/socket", "fabric manager nvidia gpu driver interface version", "nv_warn_nothing_to_do", "request to query nvswitch device information"}},
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
      "error_library_not_found", "incompatible strategy detected", "did you configure the nvidia container toolkit", "no devices found. waiting indefinitely"}},
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
    {25, "Out of memory: other processes hold the GPU memory (or it is taken at startup)",
     "Other processes (another server, a notebook, a leftover run) hold VRAM on the selected GPU, or the compute mode is exclusive/prohibited.",
     "Find and stop them (nvidia-smi --query-compute-apps=pid,used_memory --format=csv), pick an idle GPU (CUDA_VISIBLE_DEVICES=<uuid>), "
     "or lower the memory fraction (vLLM --gpu-memory-utilization); compute mode back to Default.",
     "gpu.memory",
     {"out of memory", "free memory on device", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
      "all cuda-capable devices are busy or unavailable", "cudaerrordevicesunavailable", "busy or unavailable"}},
    {103, "GPU not supported by the installed driver branch",
     "The driver branch dropped this GPU generation (Kepler after R470; Maxwell, Pascal, Volta after R580) or predates it (Blackwell before R570).",
     "Install the last branch that supports the GPU (nvidia-driver-470 or -580), or a newer one for a new GPU; inferlab doctor names it from the PCI id.",
     "kmod.branch",
     {"is not supported by the nvidia", "not supported by the nvidia driver release", "supported through the nvidia", "legacy drivers",
      "will ignore this gpu", "appendix a - supported nvidia gpu products"}},
    {104, "Blackwell GPU needs the NVIDIA open kernel modules",
     "Blackwell and newer GPUs are driven only by the open kernel module flavour; the proprietary one refuses them.",
     "Install the -open flavour of the driver (Ubuntu: nvidia-driver-<branch>-open; RHEL: nvidia-open; Arch: nvidia-open) and reboot.",
     "kmod.flavor kmod.branch",
     {"requires use of the nvidia open kernel modules", "open kernel modules"}},
    {105, "nvidia-container-cli does not support cgroup v2",
     "libnvidia-container before 1.8 only knew cgroup v1 device rules; on a cgroup v2 host it stops with 'cgroup subsystem devices not found'.",
     "Upgrade the NVIDIA Container Toolkit (>= 1.8); or set no-cgroups = true in /etc/nvidia-container-runtime/config.toml and pass the /dev/nvidia* devices explicitly.",
     "container.toolkit container.rootless",
     {"cgroup subsystem devices not found"}},
    {106, "Kubernetes: no node advertises a free nvidia.com/gpu",
     "The NVIDIA device plugin is not running on the GPU node, cannot see the GPUs (container runtime not configured), or every GPU is already allocated.",
     "kubectl describe node NODE | grep nvidia.com/gpu; make the node's containerd use the nvidia runtime and restart the device plugin; or free a GPU.",
     "container.containerd",
     {"insufficient nvidia.com/gpu"}},
    {110, "Out of memory: the model, KV cache and activations of this process do not fit on the GPU",
     "This process itself filled the GPU: weights plus KV cache (context x sequences) plus activations need more than the card has.",
     "Make the job smaller: a smaller quantization (Q4_K_M instead of Q8_0/F16), a shorter context (inferlab --ctx, llama.cpp -c, vLLM --max-model-len), "
     "fewer parallel sequences (inferlab --n-seq), fewer layers on the GPU (llama.cpp -ngl N); vLLM: raise --gpu-memory-utilization if other users allow.",
     "gpu.memory",
     {"cudamalloc failed: out of memory", "failed to allocate cuda0 buffer", "unable to allocate cuda0 buffer", "no available memory for the cache blocks",
      "failed to allocate compute buffers", "llama runner process has terminated: cuda error: out of memory"}},
    {112, "Out of memory on the host: the kernel's OOM killer ended the process",
     "Host RAM (not VRAM) ran out: loading or converting a model without mmap, too many layers on the CPU, or other programs; the kernel killed the largest process.",
     "Check with: sudo dmesg | grep -i -e 'out of memory' -e oom-kill; then add RAM or swap, use mmap'd GGUF loading, a smaller model or quantization, "
     "or put more layers on the GPU.",
     "host.memory",
     {"out of memory: killed process", "oom-kill:", "invoked oom-killer", "killed process"}},
    {113, "Out of memory from fragmentation inside PyTorch's caching allocator",
     "Memory is reserved by PyTorch but unallocated: free in total, but split into blocks too small for the request.",
     "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (older PyTorch: max_split_size_mb:128) before the process starts; lower the batch size.",
     "gpu.memory",
     {"reserved but unallocated memory is large", "reserved memory is >> allocated memory"}},
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

/* ---- the out-of-memory family, split by cause ----------------------------------------------
 * Message wordings: PyTorch >= 2.1 "CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a
 * total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this
 * process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by
 * PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated."
 * (https://github.com/pytorch/pytorch/issues/16417); older PyTorch "(GPU 0; 6.00 GiB total
 * capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)"
 * (https://github.com/pytorch/pytorch/issues/59778); llama.cpp/ggml
 * "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc
 * failed: out of memory" (https://github.com/ggml-org/llama.cpp/issues/20431); vLLM "No
 * available memory for the cache blocks" (https://github.com/vllm-project/vllm/issues/2248) and
 * "Free memory on device (31.44/47.38 GiB) on startup" (research scenario 25); the host OOM
 * killer "Out of memory: Killed process" and a shell's bare "Killed". */

/* Bytes in "23.65 GiB", "11.06 MiB", "0 bytes", "1024.00 KiB" at p; -1 when none. */
static double il__size_at(const char *p) {
  if (!p) return -1;
  char *end;
  double v = strtod(p, &end);
  if (end == p) return -1;
  while (*end == ' ') end++;
  if (!strncmp(end, "TiB", 3)) return v * 1099511627776.0;
  if (!strncmp(end, "GiB", 3)) return v * 1073741824.0;
  if (!strncmp(end, "MiB", 3)) return v * 1048576.0;
  if (!strncmp(end, "KiB", 3)) return v * 1024.0;
  if (!strncmp(end, "bytes", 5) || *end == 'B') return v;
  return -1;
}

static double il__size_after(const char *text, const char *key) {
  const char *p = il_sysfs_stristr(text, key);
  return p ? il__size_at(p + strlen(key)) : -1;
}

static void il__gib(double b, char *buf, size_t n) {
  if (b < 0) snprintf(buf, n, "unknown");
  else if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
  else snprintf(buf, n, "%.2f MiB", b / 1048576.0);
}

/* True when a line of text is exactly "Killed" or ends with " Killed ..." as a shell reports a
 * SIGKILLed job ("line 3: 12345 Killed  python app.py"). */
static bool il__shell_killed(const char *text) {
  for (const char *line = text; line && *line;) {
    size_t l = strcspn(line, "\n");
    while (l && (line[l - 1] == '\r' || line[l - 1] == ' ')) l--;
    if (l == 6 && !strncmp(line, "Killed", 6)) return true;
    for (size_t i = 0; i + 8 <= l; i++)
      if (!strncmp(line + i, " Killed ", 8) && i > 0 && line[i - 1] >= '0' && line[i - 1] <= '9') return true;
    line = strchr(line, '\n');
    if (line) line++;
  }
  return false;
}

/* Returns the scenario of the OOM family that text belongs to (25 other processes hold the
 * memory, 110 this process does not fit, 112 host OOM killer, 113 fragmentation), 0 when it is
 * not an OOM message; writes what the numbers say into why. */
static int il__oom_classify(const char *text, char *why, size_t n) {
  why[0] = 0;
  if (il_sysfs_stristr(text, "out of memory: killed process") || il_sysfs_stristr(text, "oom-kill:") ||
      il_sysfs_stristr(text, "invoked oom-killer") || il__shell_killed(text)) {
    snprintf(why, n, "the kernel killed the process for lack of host RAM (not GPU memory)");
    return 112;
  }
  if (il_sysfs_stristr(text, "free memory on device")) {
    snprintf(why, n, "memory was already in use by others when the engine started");
    return 25;
  }
  bool torch = il_sysfs_stristr(text, "cuda out of memory") != NULL;
  if (torch) {
    double q = il__size_after(text, "tried to allocate ");
    double t = il__size_after(text, "total capacity of ");
    if (t < 0) t = il__size_after(text, "total capacty of "); /* the typo of PyTorch 2.1 */
    double f = il__size_after(text, "of which ");
    double own = il__size_after(text, "this process has ");
    double alloc = il__size_after(text, "of the allocated memory ");
    double unalloc = il__size_after(text, "and ");
    if (unalloc >= 0 && !il_sysfs_stristr(text, "reserved by pytorch but unallocated")) unalloc = -1;
    if (t < 0) {
      /* Old format: "(GPU 0; 6.00 GiB total capacity; 781.59 MiB already allocated; 3.03 GiB
       * free; 1.24 GiB reserved in total by PyTorch)". */
      const char *g = il_sysfs_stristr(text, "(gpu ");
      const char *semi = g ? strchr(g, ';') : NULL;
      if (semi) {
        t = il__size_at(semi + 1);
        const char *p2 = strchr(semi + 1, ';');
        alloc = p2 ? il__size_at(p2 + 1) : -1;
        const char *p3 = p2 ? strchr(p2 + 1, ';') : NULL;
        f = p3 ? il__size_at(p3 + 1) : -1;
        const char *p4 = p3 ? strchr(p3 + 1, ';') : NULL;
        double reserved = p4 ? il__size_at(p4 + 1) : -1;
        if (reserved >= 0) {
          own = reserved;
          if (alloc >= 0) unalloc = reserved - alloc;
        }
      }
    }
    if (own < 0 && alloc >= 0) own = alloc + (unalloc > 0 ? unalloc : 0);
    double others = t >= 0 && f >= 0 && own >= 0 ? t - f - own : -1;
    char a[32], b[32], c[32], d[32];
    il__gib(own, a, sizeof a);
    il__gib(t, b, sizeof b);
    il__gib(others, c, sizeof c);
    il__gib(q, d, sizeof d);
    if (others > 1073741824.0 && others > 0.5 * (t - f)) {
      snprintf(why, n, "this process holds %s of %s; other processes hold about %s", a, b, c);
      return 25;
    }
    if (unalloc > 0 && q > 0 && unalloc >= q && t > 0 && unalloc > 0.1 * t) {
      char e[32];
      il__gib(unalloc, e, sizeof e);
      snprintf(why, n, "%s is reserved by PyTorch but unallocated, more than the %s requested: fragmentation", e, d);
      return 113;
    }
    if (q > 0 && t > 0 && q > t) snprintf(why, n, "one request of %s is larger than the whole GPU (%s)", d, b);
    else if (own >= 0) snprintf(why, n, "this process holds %s of %s (others about %s) and asked for %s more", a, b, c, d);
    return 110;
  }
  if (il_sysfs_stristr(text, "cudamalloc failed: out of memory") || il_sysfs_stristr(text, "failed to allocate cuda") ||
      il_sysfs_stristr(text, "unable to allocate cuda") || il_sysfs_stristr(text, "no available memory for the cache blocks") ||
      il_sysfs_stristr(text, "llama runner process has terminated: cuda error: out of memory")) {
    const char *p = il_sysfs_stristr(text, "alloc_buffer: allocating ");
    if (p) {
      char d[32];
      il__gib(il__size_at(p + 25), d, sizeof d);
      snprintf(why, n, "one buffer of %s did not fit (weights, KV cache or compute buffer)", d);
    }
    return 110;
  }
  return 0;
}

int il_explain(const char *text, il_explain_match *out, int max) {
  if (!text || max <= 0) return 0;
  enum { NT = sizeof il__table / sizeof il__table[0] };
  il_explain_match all[NT];
  int na = 0;
  char why[240];
  int oom = il__oom_classify(text, why, sizeof why);
  for (size_t i = 0; i < NT; i++) {
    const il__scenario *s = &il__table[i];
    int score = 0;
    const char *best = NULL;
    for (int k = 0; k < IL__MAXPAT && s->patterns[k]; k++) {
      if (!il_sysfs_stristr(text, s->patterns[k])) continue;
      int l = (int)strlen(s->patterns[k]);
      score += l;
      if (!best || l > (int)strlen(best)) best = s->patterns[k];
    }
    /* The OOM classification decides between the OOM scenarios: its pick leads, the other
     * OOM rows step aside. */
    if (oom) {
      bool oom_row = s->scenario == 25 || (s->scenario >= 110 && s->scenario <= 113);
      if (s->scenario == oom) {
        score += 1000;
        if (!best) best = "out of memory (classified by its numbers)";
      } else if (oom_row) {
        score = 0;
      }
    }
    if (!score) continue;
    il_explain_match m;
    memset(&m, 0, sizeof m);
    m.scenario = s->scenario;
    m.title = s->title;
    m.causes = s->causes;
    m.fix = s->fix;
    m.checks = s->checks;
    m.score = score;
    m.matched = best;
    if (s->scenario == oom) il_sysfs_copy(m.detail, sizeof m.detail, why);
    all[na++] = m;
  }
  /* Stable insertion sort by score, highest first. */
  for (int i = 1; i < na; i++) {
    il_explain_match m = all[i];
    int j = i;
    while (j > 0 && all[j - 1].score < m.score) {
      all[j] = all[j - 1];
      j--;
    }
    all[j] = m;
  }
  int n = na < max ? na : max;
  for (int i = 0; i < n; i++) out[i] = all[i];
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
    if (m[i].detail[0]) fprintf(out, "   what the numbers say: %s\n", m[i].detail);
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
    fputs(",\"detail\":", out);
    il_report_json_string(out, m[i].detail[0] ? m[i].detail : NULL);
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
