/* probe/platform: facts and checks about the machine below the driver library (PCI functions,
 * kernel modules, /dev nodes, hypervisor, host). See platform.c.
 * Not for: NVML/CUDA results (probe/driver) or containers (probe/container).
 */
#ifndef IL_PROBE_PLATFORM_H
#define IL_PROBE_PLATFORM_H

typedef struct il_doctor il_doctor;

/* An NVIDIA PCI display function found in /sys/bus/pci/devices. */
typedef struct {
  char bdf[16];         /* "0000:01:00.0" */
  unsigned device_id;   /* 0x2330 */
  char driver[32];      /* "nvidia", "vfio-pci", "nouveau", "" (none) */
  char iommu_group[16];
} il_pci_gpu;

/* Fills dr's PCI, kernel module and WSL facts from the sysroot. */
void il__platform_facts(il_doctor *dr);
/* kmod.* and dev.* checks, then the GPU family vs driver branch (probe/gpufamily). */
void il__platform_checks_kmod(il_doctor *dr);
/* pci.* passthrough / binding checks. */
void il__platform_checks_virt(il_doctor *dr);
/* host.* checks, host.distro included. */
void il__platform_checks_host(il_doctor *dr);

#endif
