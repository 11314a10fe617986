/* probe/cgroup: containers beyond Docker (device cgroup rules, LXC/Proxmox, rootless engines,
 * systemd units) and the fixes that fit the container engine found. See cgroup.c.
 * Not for: Docker's daemon.json, containerd or CDI specs (probe/container).
 */
#ifndef IL_PROBE_CGROUP_H
#define IL_PROBE_CGROUP_H

#include "probe/check.h"
#include "probe/sysfs.h"

typedef struct il_doctor il_doctor;

/* Character major of `name` in /proc/devices under the sysroot, -1 when absent. */
int il__cgroup_devices_major(const il_sysfs *fs, const char *name);
/* Adds to c's fix "start the container with GPUs", in the words of the engine found. */
void il__cgroup_fix_request_gpus(const il_doctor *dr, il_check *c);
/* How to recreate this container, for its engine (a static string). */
const char *il__cgroup_engine_recreate(const il_doctor *dr);
void il__cgroup_check_devices(il_doctor *dr);
void il__cgroup_check_lxc(il_doctor *dr);
void il__cgroup_check_rootless(il_doctor *dr);
void il__cgroup_check_systemd(il_doctor *dr);
/* Inside a container: marks every fix line that only the host can carry out. */
void il__cgroup_container_advice(il_doctor *dr);

#endif
