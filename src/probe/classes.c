/* probe/classes: the class registry. See classes.h. */
#include "probe/classes.h"

#include <stdio.h>

static const struct {
  int id;
  const char *slug, *title;
} il__classes[] = {
    {1, "driver-too-old", "Driver older than the CUDA runtime"},
    {2, "forward-compat-unsupported", "Forward-compatibility libcuda on a GPU that does not support it"},
    {3, "driver-library-mismatch", "Driver/library version mismatch"},
    {4, "module-not-loaded", "Kernel module not built or not loaded for the running kernel"},
    {5, "secure-boot", "Secure Boot / kernel lockdown rejects the unsigned NVIDIA module"},
    {6, "nouveau", "nouveau owns the GPU"},
    {7, "vfio-bound", "GPU bound to vfio-pci for passthrough"},
    {8, "module-flavor", "Wrong kernel module flavour (open vs proprietary)"},
    {9, "gsp-init-failed", "GSP firmware failed to initialize"},
    {10, "xid-79", "GPU fell off the bus (Xid 79)"},
    {11, "ecc-error", "Uncorrectable ECC error / pending row remap or page retirement"},
    {12, "fabric-manager", "NVSwitch system without a running Fabric Manager of the driver's version"},
    {13, "mig-no-instances", "MIG enabled without GPU/compute instances, or the wrong MIG strategy"},
    {14, "cuda-visible-devices", "CUDA_VISIBLE_DEVICES hides the GPU, or CUDA sees none"},
    {15, "no-kernel-image", "No kernel image for this GPU's compute capability"},
    {16, "uvm-missing", "nvidia_uvm missing or wedged (CUDA unknown error, 999)"},
    {17, "device-permissions", "No permission on the GPU device nodes / rootless containers"},
    {18, "docker-no-gpu-driver", "Docker has no GPU device driver registered"},
    {19, "runtime-not-registered", "nvidia runtime not registered or not the default"},
    {20, "toolkit-no-nvml", "nvidia-container-cli cannot load NVML"},
    {21, "container-no-gpu", "Container started without GPUs, or asking for a GPU that does not exist"},
    {22, "container-lost-gpu", "Running container lost its GPU (device cgroup rules dropped)"},
    {23, "cdi-spec", "CDI spec missing, incomplete or stale"},
    {24, "wsl", "WSL2-specific breakage"},
    {25, "gpu-taken", "GPU memory or the GPU itself already taken by other processes"},
    {101, "stub-library", "CUDA toolkit stub library loaded instead of the driver"},
    {102, "persistence-off", "Persistence mode off: slow or timed-out initialization"},
    {103, "gpu-unsupported-branch", "GPU not supported by the installed driver branch"},
    {104, "open-module-required", "GPU needs the NVIDIA open kernel modules"},
    {105, "toolkit-cgroup-v2", "NVIDIA Container Toolkit too old for cgroup v2"},
    {106, "k8s-no-gpu-resource", "Kubernetes: no node advertises a free nvidia.com/gpu"},
    {110, "oom-model-too-large", "Out of memory: this process's model, KV cache and activations do not fit"},
    {112, "host-oom-killer", "Out of memory on the host: the kernel's OOM killer ended the process"},
    {113, "oom-fragmentation", "Out of memory from fragmentation inside PyTorch's caching allocator"},
    {IL_CLASS_GSP_FIRMWARE, "gsp-firmware-missing", "GSP firmware file of this driver version is missing"},
    {IL_CLASS_BAR, "bar-unassigned", "PCI BAR (MMIO window) of the GPU not assigned"},
    {IL_CLASS_DKMS, "dkms-build-failed", "DKMS could not build the nvidia module for the kernel"},
    {IL_CLASS_PROBE_FAILED, "probe-failed", "The driver's probe failed for every GPU"},
    {IL_CLASS_SELINUX, "selinux-denied", "SELinux denies the container the GPU device nodes"},
    {IL_CLASS_APPARMOR, "apparmor-denied", "AppArmor denies access to the GPU device nodes or the container"},
    {IL_CLASS_NCCL_SHM, "nccl-shm", "NCCL cannot create its shared memory segments (/dev/shm too small)"},
    {IL_CLASS_IMAGE_DRIVER, "image-ships-driver", "The image ships driver files that the runtime must inject"},
    {IL_CLASS_MOUNT_MISSING, "mount-source-missing", "A CDI spec or CSV list names a host file that does not exist"},
    {IL_CLASS_OPERATOR_HOST, "operator-host-driver", "GPU operator's driver container beside a host driver"},
    {IL_CLASS_JETSON, "jetson-nvml", "Jetson / Tegra: integrated GPU without NVML in the usual sense"},
    {IL_CLASS_DOCKER_SNAP, "docker-snap", "Docker installed as a snap"},
    {IL_CLASS_GPU_INIT, "gpu-init-failed", "The driver could not initialize the GPU (RmInitAdapter failed)"},
    {IL_CLASS_K3S, "k3s-runtime", "K3s / RKE2: containerd without the (default) nvidia runtime"},
    {IL_CLASS_CONTAINERD2, "containerd2-config", "containerd 2 (config version 3) ignores the nvidia runtime section"},
    {IL_CLASS_XID, "xid-events", "Xid events in the kernel log, judged by number"},
};

#define IL__NCLASSES ((int)(sizeof il__classes / sizeof il__classes[0]))

const char *il_class_slug(int id) {
  for (int i = 0; i < IL__NCLASSES; i++)
    if (il__classes[i].id == id) return il__classes[i].slug;
  return NULL;
}

const char *il_class_title(int id) {
  for (int i = 0; i < IL__NCLASSES; i++)
    if (il__classes[i].id == id) return il__classes[i].title;
  return NULL;
}

const char *il_class_doc(int id, char *buf, size_t n) {
  const char *s = il_class_slug(id);
  if (!s) {
    if (n) buf[0] = 0;
    return buf;
  }
  snprintf(buf, n, "docs/doctor.md#%s", s);
  return buf;
}

int il_class_count(void) { return IL__NCLASSES; }

int il_class_id_at(int i) { return i >= 0 && i < IL__NCLASSES ? il__classes[i].id : 0; }
