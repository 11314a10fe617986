/* probe/security: what stands between a container and the GPU beyond the runtime's
 * configuration: SELinux and AppArmor denials (security.lsm), a toolkit too old for the host's
 * cgroup v2 (container.cgroupv2), device-node modes that the hook's user cannot open
 * (container.hook_user), and the /dev/shm size NCCL needs inside a container (container.shm).
 * See security.c. Not for: device cgroup rules (probe/cgroup) or runtime registration (probe/container).
 */
#ifndef IL_PROBE_SECURITY_H
#define IL_PROBE_SECURITY_H

typedef struct il_doctor il_doctor;

void il__security_check_lsm(il_doctor *dr);
void il__security_check_toolkit_cgroup(il_doctor *dr);
void il__security_check_hook_user(il_doctor *dr);
void il__security_check_shm(il_doctor *dr);

#endif
