/* probe/explain: pasted error text -> failure class. See explain.h. */
#include "probe/explain.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/classes.h"
#include "probe/report.h"
#include "probe/sysfs.h"
#include "probe/xid.h"

#define IL__MAXPAT 16

/* A class and the fragments of its messages. A pattern "a&b" matches when a and b appear in the
 * same line; a match scores the length of the fragments found. `unless` fragments veto the class
 * (a module signature warning that ends in "tainting kernel" was not rejected). A weak class (the
 * summary line after the real cause, "None of the NVIDIA devices were initialized") steps aside when
 * a strong one matched too. */
typedef struct {
  int scenario;
  const char *title, *causes, *fix, *checks;
  const char *patterns[IL__MAXPAT];
  const char *unless[4];
  bool weak;
} il__scenario;

static const il__scenario il__table[] = {
    {1, "Driver older than the CUDA runtime",
     "The CUDA runtime (framework wheel, container image, this build) needs a newer CUDA major than the loaded driver supports.",
     "Upgrade the driver to the minimum for that CUDA version (12.x >= 525, 13.x >= 580; exact values: inferlab doctor runtime.build), "
     "or use a build/image for an older CUDA.",
     "runtime.build cuda.init driver.nvml",
     {"driver version is insufficient for cuda runtime", "nvidia driver on your system is too old", "driver is too old or missing",
      "unsatisfied condition: cuda>=", "cudaerrorinsufficientdriver", "cuda_error_insufficient_driver",
      "compiled with an unsupported toolchain", "cudaerrorunsupportedptxversion", "please update your driver to a newer version",
      "symbol lookup for cuctxcreate_v3 failed", "cudasetdevice err: 35"}, {NULL}, false},
    {2, "Forward-compatibility libcuda on a GPU that does not support it",
     "A cuda-compat libcuda (newer than the kernel module) is loaded on a GeForce/unsupported GPU.",
     "Remove the cuda-compat package (sudo apt remove 'cuda-compat-*'), drop its directory from LD_LIBRARY_PATH, upgrade the real driver.",
     "cuda.compat cuda.init",
     {"forward compatibility was attempted on non supported hw", "error 804", "cuda_error_compat_not_supported_on_device",
      "cudaerrorcompatnotsupportedondevice", "code=804", "(804)"}, {NULL}, false},
    {3, "Driver/library version mismatch",
     "The driver packages were upgraded (often by unattended-upgrade) but the old kernel module is still loaded.",
     "Reboot; or with no GPU users: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo nvidia-modprobe -u -c 0. Hold driver packages.",
     "driver.nvml driver.version_match",
     {"driver/library version mismatch", "api mismatch: the client has the version", "nvrm: api mismatch: the client", "nvml_error_lib_rm_version_mismatch",
      "version mismatch between driver and cuda driver library", "cuda_error_system_driver_mismatch", "cudaerrorsystemdrivermismatch",
      "error 803"}, {NULL}, false},
    {4, "Kernel module not built or not loaded for the running kernel",
     "The kernel was updated and DKMS did not rebuild the nvidia module, or the driver is not installed.",
     "sudo apt install linux-headers-$(uname -r) dkms && sudo dkms autoinstall (or reinstall nvidia-dkms-<branch>), then reboot.",
     "kmod.nvidia driver.nvml devnodes",
     {"couldn't communicate with the nvidia driver", "module nvidia not found", "unable to load the kernel module 'nvidia.ko'",
      "nvidia driver is not loaded", "nvml_error_driver_not_loaded", "nvml error: driver not loaded"}, {NULL}, false},
    {5, "Secure Boot / kernel lockdown rejects the unsigned NVIDIA module",
     "UEFI Secure Boot (and the kernel lockdown it turns on) enforces module signatures and the DKMS/akmods key is not enrolled.",
     "sudo mokutil --import /var/lib/dkms/mok.pub, reboot, enroll in MokManager; or disable Secure Boot.",
     "kmod.nvidia",
     {"key was rejected by service", "required key not available", "unsigned module loading is restricted", "loading of unsigned module is rejected", "module verification failed: signature and/or required key missing", "kernel_lockdown",
      "uefi secure boot enabled&sign the nvidia kernel module", "kernel module load error: operation not permitted"},
     {"- tainting kernel"}, false},
    {6, "nouveau owns the GPU",
     "nouveau was loaded first and claimed the device, so the nvidia probe routine was never called.",
     "Blacklist nouveau in /etc/modprobe.d/blacklist-nouveau.conf (blacklist nouveau; options nouveau modeset=0), update-initramfs -u, reboot.",
     "kmod.nouveau virt.pci",
     {"probe routine was not called", "nouveau, rivafb, nvidiafb or rivatv", "no nvidia graphics adapter probed",
      "error inserting nvidia&no such device", "nouveau module should be deactivated"}, {NULL}, false},
    {7, "GPU bound to vfio-pci for passthrough",
     "vfio-pci.ids on the kernel command line or in modprobe.d reserves the GPU for a VM.",
     "Remove the ids from /etc/default/grub and /etc/modprobe.d, update-initramfs -u, update-grub, reboot; or unbind from vfio-pci.",
     "virt.pci driver.nvml",
     {"already bound to vfio-pci", "vfio-pci"}, {NULL}, false},
    {8, "Wrong kernel module flavour (open module on a GPU without GSP, or proprietary on Blackwell)",
     "Open kernel modules only drive Turing and newer; Blackwell needs them.",
     "Switch flavour: proprietary for Maxwell/Pascal/Volta, -open for Blackwell; rebuild and reboot.",
     "kmod.flavor virt.pci",
     {"not supported by open nvrm", "does not include the required gpu"}, {NULL}, false},
    {9, "GSP firmware failed to initialize",
     "Stale GPU state after a crash, missing firmware for this driver version, or platform settings (ReBAR/Above-4G).",
     "Power-cycle; install the firmware files of the exact driver version; enable ReBAR/Above-4G decoding; proprietary module only: NVreg_EnableGpuFirmware=0.",
     "virt.pci kmod.nvidia",
     {"cannot initialize gsp firmware", "wpr2 already up", "kgspinitrm_impl&failed", "gsp rm&failed"}, {NULL}, false},
    {10, "GPU fell off the bus (Xid 79)",
     "Hardware or platform: overheating, power, outdated SBIOS.",
     "Drain and power-cycle; check cooling, PSU, cables, SBIOS; RMA if it repeats.",
     "gpu.health",
     {"gpu_is_lost", "unable to determine the device handle"}, {NULL}, false},
    {11, "Uncorrectable ECC error / pending row remap or page retirement",
     "Uncorrectable DRAM errors; the repair applies only after a GPU reset.",
     "Reset the GPU or reboot; drain and RMA on repeats or Xid 64.",
     "gpu.health",
     {"uncorrectable ecc error", "ecc_uncorrectable", "cudaerroreccuncorrectable", "row remapper", "dynamic page retirement",
      "double bit error"}, {NULL}, false},
    {12, "NVSwitch system without a running Fabric Manager (or one of another version)",
     "HGX/DGX boards with NVSwitch need nvidia-fabricmanager of exactly the driver's version before CUDA can initialize; "
     "NV_WARN_NOTHING_TO_DO means it found no NVSwitch to manage (wrong machine, or NVLink5 systems missing the NVLSM dependency).",
     "Install nvidia-fabricmanager of the driver's exact version and systemctl enable --now nvidia-fabricmanager; on a machine without NVSwitch, disable it.",
     "gpu.fabric cuda.init",
     {"system not yet initialized", "error 802", "cudaerrorsystemnotready", "cuda_error_system_not_ready", "code=802",
      "nvidia-fabricmanager/socket", "fabric manager nvidia gpu driver interface version", "nv_warn_nothing_to_do", "request to query nvswitch device information", "[802]"}, {NULL}, false},
    {13, "MIG enabled without GPU/compute instances",
     "MIG mode persists across reboots but instances do not; with none, CUDA has nothing to enumerate.",
     "sudo nvidia-smi mig -cgi <profiles> -C, or disable MIG (nvidia-smi -i N -mig 0); apply layouts at boot with nvidia-mig-parted.",
     "gpu.mig cuda.init",
     {"mig mode is enabled, but no mig devices were found", "no cuda capable devices found", "mig devices"}, {NULL}, false},
    {14, "CUDA_VISIBLE_DEVICES hides the GPU",
     "A missing index, an empty/-1 value, or an invalid entry (which hides everything after it); renumbered ordinals used as host ids.",
     "Unset CUDA_VISIBLE_DEVICES or list GPU UUIDs from nvidia-smi -L; set it before the process starts; CUDA_DEVICE_ORDER=PCI_BUS_ID.",
     "visibility.cuda cuda.init",
     {"no cuda gpus are available", "invalid device ordinal", "no cuda-capable device is detected", "error=38",
      "changing env variable cuda_visible_devices", "cudaerrorinvaliddevice", "cuda_error_no_device", "cudaerrornodevice", "returned 100",
      "no cuda devices found, cuda will be disabled"},
     {"cuda unknown error"}, false},
    {15, "No kernel image for this GPU's compute capability",
     "The binary has no SASS for this architecture and no PTX it can JIT (new GPU on an old build, or old GPU dropped from a new build).",
     "Install a build that includes this sm_XY, or rebuild with CMAKE_CUDA_ARCHITECTURES including it (plus PTX).",
     "runtime.arch",
     {"no kernel image is available", "is not compatible with the current pytorch installation", "cudaerrornokernelimagefordevice",
      "cuda_error_no_binary_for_gpu", "error=48"}, {NULL}, false},
    {16, "nvidia_uvm missing or wedged (often after suspend/resume)",
     "The UVM module is not loaded, /dev/nvidia-uvm is missing, or its state broke across suspend.",
     "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm (or nvidia-modprobe -c 0 -u); reboot if in use.",
     "kmod.uvm cuda.init",
     {"cuda unknown error", "cuda_error_unknown", "cudaerrorunknown", "err: 999", "init failure: 999", "returned 30", "could not load uvm kernel module",
      "cuinit failed: unknown", "cuda unknown error - this may be due to an incorrectly set up environment", "cuda error 999",
      "error code 999", "(30 vs. 0) unknown error", "failed to initialize cuda: unknown error"}, {NULL}, false},
    {17, "No permission on the GPU device nodes / rootless containers",
     "/dev/nvidia* are not readable/writable by this user (restrictive NVreg_DeviceFileMode/GID), or a rootless engine cannot set cgroup device rules.",
     "Add the user to the owning group or restore mode 0666; rootless: nvidia-ctk config --set nvidia-container-cli.no-cgroups=true --in-place, or CDI.",
     "devnodes driver.nvml",
     {"insufficient permissions", "nvml_error_no_permission", "bpf_prog_query(bpf_cgroup_device) failed", "failed to add device rules"}, {NULL}, false},
    {18, "Docker has no GPU device driver registered",
     "dockerd registers its nvidia device driver only if nvidia-container-runtime-hook is on its PATH at start (toolkit missing, docker not restarted, snap docker).",
     "Install nvidia-container-toolkit, sudo nvidia-ctk runtime configure --runtime=docker, sudo systemctl restart docker; remove snap docker.",
     "container.toolkit container.docker",
     {"could not select device driver", "with capabilities: [[gpu]]"}, {NULL}, false},
    {19, "nvidia runtime not registered or not the default",
     "daemon.json lacks runtimes.nvidia, or default-runtime is not nvidia where the workload relies on it (Kubernetes device plugin).",
     "sudo nvidia-ctk runtime configure --runtime=docker --set-as-default (or --runtime=containerd) and restart the engine.",
     "container.docker container.containerd",
     {"unknown or invalid runtime name: nvidia", "did you set the docker default runtime to `nvidia`", "could not load nvml library",
      "error_library_not_found", "incompatible strategy detected", "did you configure the nvidia container toolkit", "no devices found. waiting indefinitely"}, {NULL}, false},
    {20, "nvidia-container-cli cannot load NVML",
     "No driver on the host, or the toolkit config root/ldconfig point at a driver location that does not exist.",
     "Install the driver; make root/ldconfig in /etc/nvidia-container-runtime/config.toml match the install (root = \"/\").",
     "container.toolkit driver.nvml",
     {"load library failed: libnvidia-ml.so.1", "couldn't find libnvidia-ml.so", "could not start /sbin/ldconfig"}, {NULL}, false},
    {21, "Container started without GPUs, or asking for a GPU that does not exist",
     "No --gpus/--runtime, NVIDIA_VISIBLE_DEVICES unset/void, or ids that the host does not have.",
     "docker run --gpus all (or --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all); request existing indices or full UUIDs.",
     "container.injection visibility.nvidia",
     {"unknown device", "device error:", "nvidia-smi: command not found"}, {NULL}, false},
    {22, "Running container lost its GPU after systemctl daemon-reload",
     "With the systemd cgroup driver, missing /dev/char symlinks let systemd drop the device rules.",
     "Recreate the container; sudo nvidia-ctk system create-dev-char-symlinks --create-all (udev rule), or the cgroupfs driver.",
     "driver.nvml cuda.init",
     {"failed to initialize nvml: unknown error", "open(\"/dev/nvidiactl\", o_rdwr) = -1 eperm"}, {NULL}, false},
    {23, "CDI spec missing, incomplete or stale",
     "No spec generated, or generated before a driver/MIG change.",
     "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; remove stale specs in /var/run/cdi.",
     "container.cdi",
     {"unresolvable cdi devices", "failed to inject cdi devices", "error setting up cdi devices"}, {NULL}, false},
    {24, "WSL2-specific breakage",
     "A Linux driver installed inside WSL, TCC mode on Windows, or incomplete /usr/lib/wsl/lib.",
     "Remove Linux NVIDIA packages inside WSL, use WDDM, wsl --shutdown; keep /usr/lib/wsl/lib on the loader path.",
     "driver.nvml devnodes",
     {"gpu access blocked by the operating system", "/usr/lib/wsl/lib", "nvml_error_operating_system", "dxcore"}, {NULL}, false},
    {25, "Out of memory: other processes hold the GPU memory (or it is taken at startup)",
     "Other processes (another server, a notebook, a leftover run) hold VRAM on the selected GPU, or the compute mode is exclusive/prohibited.",
     "Find and stop them (nvidia-smi --query-compute-apps=pid,used_memory --format=csv), pick an idle GPU (CUDA_VISIBLE_DEVICES=<uuid>), "
     "or lower the memory fraction (vLLM --gpu-memory-utilization); compute mode back to Default.",
     "gpu.memory",
     {"out of memory", "free memory on device", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
      "all cuda-capable devices are busy or unavailable", "cudaerrordevicesunavailable", "busy or unavailable"}, {NULL}, false},
    {103, "GPU not supported by the installed driver branch",
     "The driver branch dropped this GPU generation (Kepler after R470; Maxwell, Pascal, Volta after R580) or predates it (Blackwell before R570).",
     "Install the last branch that supports the GPU (nvidia-driver-470 or -580), or a newer one for a new GPU; inferlab doctor names it from the PCI id.",
     "kmod.branch",
     {"is not supported by the nvidia", "not supported by the nvidia driver release", "supported through the nvidia", "legacy drivers",
      "will ignore this gpu", "appendix a - supported nvidia gpu products", "in this system is not supported by the"}, {NULL}, false},
    {104, "Blackwell GPU needs the NVIDIA open kernel modules",
     "Blackwell and newer GPUs are driven only by the open kernel module flavour; the proprietary one refuses them.",
     "Install the -open flavour of the driver (Ubuntu: nvidia-driver-<branch>-open; RHEL: nvidia-open; Arch: nvidia-open) and reboot.",
     "kmod.flavor kmod.branch",
     {"requires use of the nvidia open kernel modules", "open kernel modules"}, {NULL}, false},
    {105, "nvidia-container-cli does not support cgroup v2",
     "libnvidia-container before 1.8 only knew cgroup v1 device rules; on a cgroup v2 host it stops with 'cgroup subsystem devices not found'.",
     "Upgrade the NVIDIA Container Toolkit (>= 1.8); or set no-cgroups = true in /etc/nvidia-container-runtime/config.toml and pass the /dev/nvidia* devices explicitly.",
     "container.toolkit container.rootless",
     {"cgroup subsystem devices not found"}, {NULL}, false},
    {106, "Kubernetes: no node advertises a free nvidia.com/gpu",
     "The NVIDIA device plugin is not running on the GPU node, cannot see the GPUs (container runtime not configured), or every GPU is already allocated.",
     "kubectl describe node NODE | grep nvidia.com/gpu; make the node's containerd use the nvidia runtime and restart the device plugin; or free a GPU.",
     "container.containerd",
     {"insufficient nvidia.com/gpu"}, {NULL}, false},
    {110, "Out of memory: the model, KV cache and activations of this process do not fit on the GPU",
     "This process itself filled the GPU: weights plus KV cache (context x sequences) plus activations need more than the card has.",
     "Make the job smaller: a smaller quantization (Q4_K_M instead of Q8_0/F16), a shorter context (inferlab --ctx, llama.cpp -c, vLLM --max-model-len), "
     "fewer parallel sequences (inferlab --n-seq), fewer layers on the GPU (llama.cpp -ngl N); vLLM: raise --gpu-memory-utilization if other users allow.",
     "gpu.memory",
     {"cudamalloc failed: out of memory", "failed to allocate cuda0 buffer", "unable to allocate cuda0 buffer", "no available memory for the cache blocks",
      "failed to allocate compute buffers", "llama runner process has terminated: cuda error: out of memory"}, {NULL}, false},
    {112, "Out of memory on the host: the kernel's OOM killer ended the process",
     "Host RAM (not VRAM) ran out: loading or converting a model without mmap, too many layers on the CPU, or other programs; the kernel killed the largest process.",
     "Check with: sudo dmesg | grep -i -e 'out of memory' -e oom-kill; then add RAM or swap, use mmap'd GGUF loading, a smaller model or quantization, "
     "or put more layers on the GPU.",
     "host.memory",
     {"out of memory: killed process", "oom-kill:", "invoked oom-killer", "killed process"}, {NULL}, false},
    {113, "Out of memory from fragmentation inside PyTorch's caching allocator",
     "Memory is reserved by PyTorch but unallocated: free in total, but split into blocks too small for the request.",
     "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (older PyTorch: max_split_size_mb:128) before the process starts; lower the batch size.",
     "gpu.memory",
     {"reserved but unallocated memory is large", "reserved memory is >> allocated memory"}, {NULL}, false},
    {101, "CUDA toolkit stub library loaded instead of the driver",
     "LD_LIBRARY_PATH includes the toolkit's lib64/stubs, whose libcuda only exists for linking.",
     "Remove the stubs directory from LD_LIBRARY_PATH.",
     "cuda.init",
     {"cuda_error_stub_library", "cudaerrorstublibrary", "stub library"}, {NULL}, false},
    {102, "Persistence mode off: slow or timed-out initialization",
     "Without nvidia-persistenced the driver tears the GPU state down between clients.",
     "sudo systemctl enable --now nvidia-persistenced.",
     "gpu.health",
     {"driver error: timed out", "nvidia-persistenced/socket"}, {NULL}, false},
    {IL_CLASS_GSP_FIRMWARE, NULL,
     "The open module and GSP-based GPUs (Turing and newer) load /lib/firmware/nvidia/<version>/gsp_*.bin of exactly the module's version; "
     "the firmware package is missing, or a half-finished update removed the running module's firmware.",
     "Install the firmware of that driver version (Debian: firmware-nvidia-gsp; Ubuntu: the nvidia-firmware-<branch>-<version> package of the driver; "
     "NixOS: hardware.firmware), or reboot after an update so module and firmware match. inferlab doctor (kmod.log) names the missing file.",
     "kmod.log",
     {"direct firmware load for nvidia/&gsp", "rmfetchgsprmimages: no firmware image found", "failed to load gsp firmware"}, {NULL}, false},
    {IL_CLASS_BAR, NULL,
     "The firmware (BIOS) or the hypervisor gave the GPU no address window for its BARs: a VM without a large 64-bit MMIO window, "
     "an external or riser-attached GPU, Above 4G decoding / Resizable BAR off.",
     "VM: give it a 64-bit MMIO window larger than the GPUs' BARs (VMware: pciPassthru.use64bitMMIO=TRUE and pciPassthru.64bitMMIOSizeGB; "
     "QEMU/OVMF: a larger 64-bit PCI hole); bare metal: enable Above 4G decoding (and ReBAR) in the firmware, or boot with pci=realloc.",
     "kmod.log virt.hypervisor",
     {"this pci i/o region assigned to your nvidia device is invalid", "bar1 is 0m", "bar0 is 0m", "the system bios may have misconfigured your gpu"}, {NULL}, false},
    {IL_CLASS_DKMS, NULL,
     "DKMS could not build the nvidia module for this kernel: headers missing, a compiler other than the kernel's, or a driver too old for the kernel.",
     "Read make.log (inferlab doctor kmod.dkms names the reason): install the headers of the running kernel, the compiler the kernel was built with, "
     "or a driver branch that supports this kernel; then sudo dkms autoinstall -k $(uname -r).",
     "kmod.dkms kmod.nvidia",
     {"bad return status for module build on kernel", "/var/lib/dkms/nvidia&error", "kernel configuration is invalid", "generated/autoconf.h",
      "include/linux/autoconf.h: no such file", "compiler version check failed", "incompatible gcc/plugin versions",
      "the compiler differs from the one used to build the kernel", "kernel headers for module nvidia", "error (dkms apport)",
      "failed cc version check", "dkms make.log for nvidia"}, {NULL}, false},
    {IL_CLASS_PROBE_FAILED, NULL,
     "The nvidia module loaded but could not take any GPU; the NVRM lines just before this one name the reason.",
     "Look at the NVRM lines before it (BAR, firmware, unsupported GPU, nouveau): inferlab doctor reads the kernel log (kmod.log).",
     "kmod.log virt.pci",
     {"none of the nvidia devices were initialized", "none of the nvidia graphics adapters were initialized", "the nvidia probe routine failed for",
      "nvidia: probe of&failed with error", "probe with driver nvidia failed"},
     {NULL}, true},
    {IL_CLASS_SELINUX, NULL,
     "SELinux confines containers (container_t) away from device nodes labelled xserver_misc_device_t / dri_device_t, so the container may not open /dev/nvidia*.",
     "On the host: sudo setsebool -P container_use_devices on (container-selinux), or run the container with --security-opt label=disable; "
     "a dedicated NVIDIA SELinux module is the strictest choice.",
     "security.lsm",
     {"xserver_misc_device_t", "avc:  denied&container_t", "avc: denied&container_t", "source context&container_t"}, {NULL}, false},
    {IL_CLASS_APPARMOR, NULL,
     "An AppArmor profile (docker-default, a snap's, or a service's) denies the process the NVIDIA device nodes, or the profile cannot be applied in this container.",
     "Add the devices to the profile (/dev/nvidia* rw, /dev/char/* r), or run the container with --security-opt apparmor=unconfined; "
     "inside LXC/Proxmox set lxc.apparmor.profile: unconfined for the nested engine.",
     "security.lsm",
     {"apparmor=\"denied\"&/dev/nvidia", "apparmor=\"denied\"&/dev/char/", "apparmor=\"denied\"&nvidia", "unable to apply apparmor profile",
      "apparmor failed to apply profile"}, {NULL}, false},
    {IL_CLASS_NCCL_SHM, NULL,
     "NCCL's shared-memory transport needs /dev/shm segments of several MiB per peer; a container's default /dev/shm is 64 MiB "
     "(or it does not share /dev/shm with its peers).",
     "Start the container with --shm-size=1g (or --ipc=host); Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm; "
     "or NCCL_SHM_DISABLE=1 to use another transport.",
     "container.shm",
     {"error while creating shared memory segment", "error while attaching to shared memory segment", "nccl warn call to posix_fallocate failed",
      "failed to extend /dev/shm/nccl", "/dev/shm/nccl-"}, {NULL}, false},
    {IL_CLASS_IMAGE_DRIVER, NULL,
     "The image contains driver files (nvidia-smi, libnvidia-ml.so.1, libcuda.so.1) at the paths the NVIDIA runtime injects the host's copies to.",
     "Rebuild the image without driver packages (no nvidia-utils / libnvidia-compute / cuda-drivers): the driver comes from the host.",
     "container.injection cuda.loader",
     {"mount error: file creation failed:&file exists"}, {NULL}, false},
    {IL_CLASS_MOUNT_MISSING, NULL,
     "The runtime was told to mount a host file that is gone: a CDI spec generated before a driver or library update, "
     "or a Jetson CSV list naming a file this board does not have.",
     "Regenerate the CDI spec (sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml); on Jetson update the runtime so missing CSV entries are skipped; "
     "inferlab doctor (container.cdi) checks every path of the spec.",
     "container.cdi",
     {"mount error: stat failed:&no such file or directory", "failed to fulfil mount request&no such file or directory"},
     {"/usr/lib/wsl/"}, false},
    {IL_CLASS_OPERATOR_HOST, NULL,
     "The GPU operator's driver container runs on a node that already has a host driver: it cannot unload the host module (or skips itself).",
     "Use one driver: keep the host driver and install the operator with --set driver.enabled=false (or label the node nvidia.com/gpu.deploy.driver=false), "
     "or remove the host driver.",
     "container.operator",
     {"could not unload nvidia driver kernel modules, driver is in use", "nvidia gpu driver is already pre-installed on the node",
      "nvidia.com/gpu.deploy.driver=false"}, {NULL}, false},
    {IL_CLASS_JETSON, NULL,
     "Jetson/Tegra GPUs are integrated (nvgpu), not PCI devices: NVML and nvidia-smi are absent or limited, so tools that look for libnvidia-ml find no GPU.",
     "Use builds made for Jetson (L4T/JetPack images, --runtime nvidia in CSV mode); check the GPU with CUDA (deviceQuery) or tegrastats, not NVML.",
     "driver.nvml container.injection",
     {"jetson&libnvidia-ml", "jetson&nvml", "tegra&nvml", "nvidia-l4t&nvml"}, {NULL}, false},
    {IL_CLASS_DOCKER_SNAP, NULL,
     "Docker installed as a snap is confined and reads its own daemon.json (/var/snap/docker/current/config); the host's NVIDIA toolkit does not configure it.",
     "Use the snap's own NVIDIA support (snap logs docker.nvidia-container-toolkit), or remove the snap and install Docker from the distribution with the toolkit.",
     "container.docker",
     {"/snap/docker", "snap.docker", "docker-snap"}, {NULL}, false},
    {IL_CLASS_GPU_INIT, NULL,
     "The driver could not initialize the GPU: stale state after a crash, firmware, power, or platform settings; the lines before it say more.",
     "Power-cycle the machine (not just reboot); read the NVRM lines before it (inferlab doctor kmod.log); update the driver and the SBIOS.",
     "kmod.log virt.pci",
     {"rminitadapter failed", "rm_init_adapter failed"},
     {NULL}, true},
    /* "Error: unable to load config: unsupported config version: 3": a toolkit older than version 3
     * support on a containerd 2 node (https://github.com/NVIDIA/gpu-operator/issues/2060,
     * https://github.com/NVIDIA/nvidia-container-toolkit/issues/803). */
    {IL_CLASS_CONTAINERD2, NULL,
     "containerd 2 writes config version 3; a toolkit (nvidia-ctk, the operator's toolkit container) older than version 3 support "
     "cannot read it, and a version 2 section (io.containerd.grpc.v1.cri) in a version 3 file is ignored.",
     "Use a toolkit >= 1.17.4 (the operator's default toolkit image, not an old override) and rerun sudo nvidia-ctk runtime configure --runtime=containerd; "
     "sudo systemctl restart containerd.",
     "container.containerd",
     {"unsupported config version: 3"}, {NULL}, false},
    /* K3s regenerates its containerd config on every start (https://github.com/k3s-io/k3s/issues/4070). */
    {IL_CLASS_K3S, NULL,
     "K3s/RKE2 regenerate their containerd config on every start: edits to config.toml are lost, and the nvidia runtime is there only when "
     "nvidia-container-runtime was on PATH when k3s started.",
     "Edit config.toml.tmpl (config-v3.toml.tmpl for containerd 2) instead, or set default-runtime: nvidia in /etc/rancher/k3s/config.yaml; "
     "restart k3s; pods use runtimeClassName: nvidia otherwise.",
     "container.containerd",
     {"config.toml will be overwritten by k3s", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml&nvidia",
      "/var/lib/rancher/rke2/agent/etc/containerd/config.toml&nvidia"}, {NULL}, false},
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
  /* inferlab's own report (engine/oom.h) carries its cause and the fix computed from the run's
   * buffer sizes: pass them on */
  if (il_sysfs_stristr(text, "out of memory on ") && il_sysfs_stristr(text, "this run needs")) {
    const char *fix = il_sysfs_stristr(text, "fix: ");
    const bool frag = il_sysfs_stristr(text, "cause: fragmentation") != NULL;
    int len = 0;
    if (fix) {
      fix += 5;
      while (fix[len] && fix[len] != '\n') len++;
    }
    snprintf(why, n, "inferlab's own report: %s; its fix: %.*s", frag ? "fragmentation (free bytes split into small blocks)"
                                                                          : "this run needs more than the device holds",
             fix ? len : 4, fix ? fix : "none");
    return 110;
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
    if (q > 0 && t > 0 && q > t) {
      /* A single request larger than the whole GPU decides it, whoever else holds memory. */
      snprintf(why, n, "one request of %s is larger than the whole GPU (%s)", d, b);
      return 110;
    }
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

/* True when fragment pat ("a&b": every part in one line) occurs in text. */
static bool il__frag(const char *text, const char *pat) {
  if (!strchr(pat, '&')) return il_sysfs_stristr(text, pat) != NULL;
  char parts[4][96];
  int np = 0;
  for (const char *p = pat; *p && np < 4;) {
    size_t l = strcspn(p, "&");
    if (l >= sizeof parts[0]) l = sizeof parts[0] - 1;
    memcpy(parts[np], p, l);
    parts[np++][l] = 0;
    p += l;
    if (*p) p++;
  }
  char buf[4096];
  for (const char *line = text; il_sysfs_next_line(&line, buf, sizeof buf);) {
    bool all = true;
    for (int i = 0; i < np && all; i++) all = il_sysfs_stristr(buf, parts[i]) != NULL;
    if (all) return true;
  }
  return false;
}

static const char *il__xid_causes(il_xid_kind k) {
  switch (k) {
    case IL_XID_APP: return "NVIDIA's Xid catalog lists it as an application-level event: the program touched memory it does not own, ran an illegal instruction or hung a channel.";
    case IL_XID_INFO: return "An informational event that follows another one.";
    case IL_XID_WATCH: return "A corrected or contained memory event: the GPU handled it, the affected application may have been stopped.";
    case IL_XID_RESET: return "An engine or memory fault the GPU cannot recover from without a reset.";
    case IL_XID_DRIVER: return "The driver or the GSP firmware failed to answer or made an error.";
    case IL_XID_NVLINK: return "An NVLink link or switch reported an error.";
    case IL_XID_HW: return "A hardware or platform fault: power, cooling, seating, the PCIe link or the memory.";
  }
  return "";
}

/* The match for the most severe Xid in text, 0 when there is none. */
static int il__xid_match(const char *text, il_explain_match *m) {
  il_xid_event ev[32];
  int n = il_xid_scan(text, ev, 32);
  if (n > 32) n = 32;
  if (n <= 0) return 0;
  int best = 0;
  for (int i = 1; i < n; i++)
    if (il_xid_rank(&ev[i]) > il_xid_rank(&ev[best])) best = i;
  const il_xid_event *e = &ev[best];
  const il_xid_info *x = il_xid_lookup(e->xid);
  memset(m, 0, sizeof *m);
  m->scenario = e->xid == 79 ? 10 : IL_CLASS_XID;
  snprintf(m->slug, sizeof m->slug, "xid-%d", e->xid);
  m->checks = "gpu.xid gpu.health";
  m->matched = "Xid number";
  m->score = 400 + 10 * il_xid_rank(e);
  if (e->xid == 154) {
    snprintf(m->title, sizeof m->title, "Xid 154: GPU recovery action changed%s%s", e->recovery[0] ? " to " : "", e->recovery);
    m->causes = "The driver asks for a recovery action after an earlier fault (see the Xid before it).";
    m->fix = il_xid_rank(e) > 1 ? "Do what it asks: a GPU reset (nvidia-smi -r -i N) for 'GPU Reset Required', a node reboot for 'Node Reboot Required', "
                                  "drain the node for 'Drain and Reset' / 'Drain P2P'; nvidia-smi -q shows the pending action."
                                : "No action asked for (None).";
  } else if (x) {
    snprintf(m->title, sizeof m->title, "Xid %d: %s (%s)", e->xid, x->name, il_xid_kind_name(x->kind));
    m->causes = il__xid_causes(x->kind);
    m->fix = il_xid_action(x->kind);
  } else {
    snprintf(m->title, sizeof m->title, "Xid %d: not in the Xid table of this build", e->xid);
    m->causes = "An Xid this build does not know.";
    m->fix = "Look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) and run inferlab doctor on the machine (gpu.xid).";
  }
  if (e->pci[0]) snprintf(m->detail, sizeof m->detail, "Xid %d on %s%s", e->xid, e->pci, n > 1 ? " (the most severe of the Xids found)" : "");
  return 1;
}

int il_explain(const char *text, il_explain_match *out, int max) {
  if (!text || max <= 0) return 0;
  enum { NT = sizeof il__table / sizeof il__table[0] };
  il_explain_match all[NT + 1];
  int na = 0;
  char why[240];
  int oom = il__oom_classify(text, why, sizeof why);
  bool strong = false;
  for (size_t i = 0; i < NT; i++) {
    const il__scenario *s = &il__table[i];
    int score = 0;
    const char *best = NULL;
    bool veto = false;
    for (int k = 0; k < 4 && s->unless[k] && !veto; k++) veto = il__frag(text, s->unless[k]);
    for (int k = 0; k < IL__MAXPAT && s->patterns[k] && !veto; k++) {
      if (!il__frag(text, s->patterns[k])) continue;
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
    if (!s->weak) strong = true;
    il_explain_match m;
    memset(&m, 0, sizeof m);
    m.scenario = s->scenario;
    il_sysfs_copy(m.title, sizeof m.title, s->title ? s->title : il_class_title(s->scenario));
    il_sysfs_copy(m.slug, sizeof m.slug, il_class_slug(s->scenario));
    m.causes = s->causes;
    m.fix = s->fix;
    m.checks = s->checks;
    m.score = s->weak ? -score : score; /* sign marks weak until all are known */
    m.matched = best;
    if (s->scenario == oom) il_sysfs_copy(m.detail, sizeof m.detail, why);
    all[na++] = m;
  }
  if (il__xid_match(text, &all[na])) {
    strong = true;
    na++;
  }
  for (int i = 0; i < na; i++)
    if (all[i].score < 0) all[i].score = strong ? 1 : -all[i].score;
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

/* The fragment as a reader sees it: "a&b" (both in one line) prints as "a ... b". */
static const char *il__shown(const char *matched, char *buf, size_t n) {
  size_t o = 0;
  for (const char *p = matched ? matched : ""; *p && o + 6 < n; p++) {
    if (*p == '&') {
      memcpy(buf + o, " ... ", 5);
      o += 5;
    } else buf[o++] = *p;
  }
  buf[o] = 0;
  return buf;
}

static const char *il__doc(const il_explain_match *m, char *buf, size_t n) {
  if (m->scenario == IL_CLASS_XID || !strncmp(m->slug, "xid-", 4)) snprintf(buf, n, "docs/doctor.md#xid-events");
  else snprintf(buf, n, "docs/doctor.md#%s", m->slug);
  return buf;
}

int il_explain_print_text(const char *text, FILE *out) {
  il_explain_match m[8];
  int n = il_explain(text, m, 8);
  if (!n) {
    fprintf(out, "Not recognised: no known GPU-stack failure matches this message.\n"
                 "Run `inferlab doctor` on the machine where it happened; it checks driver, CUDA, device nodes, visibility, containers "
                 "and reads the kernel log.\n");
    return 0;
  }
  for (int i = 0; i < n; i++) {
    char doc[96], shown[160];
    fprintf(out, "%s%d. %s (%s; matched \"%s\")\n", i ? "\n" : "", i + 1, m[i].title, il__doc(&m[i], doc, sizeof doc),
            il__shown(m[i].matched, shown, sizeof shown));
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
    char doc[96];
    fprintf(out, "%s{\"scenario\":%d,\"class\":", i ? "," : "", m[i].scenario);
    il_report_json_string(out, m[i].slug);
    fputs(",\"doc\":", out);
    il_report_json_string(out, il__doc(&m[i], doc, sizeof doc));
    fputs(",\"title\":", out);
    il_report_json_string(out, m[i].title);
    fputs(",\"causes\":", out);
    il_report_json_string(out, m[i].causes);
    fputs(",\"fix\":", out);
    il_report_json_string(out, m[i].fix);
    fputs(",\"matched\":", out);
    char shown[160];
    il_report_json_string(out, il__shown(m[i].matched, shown, sizeof shown));
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
