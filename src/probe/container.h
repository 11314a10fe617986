/* probe/container: facts and checks about containers and the NVIDIA Container Toolkit. See
 * container.c. Not for: device cgroups, LXC, rootless engines, systemd units (probe/cgroup).
 */
#ifndef IL_PROBE_CONTAINER_H
#define IL_PROBE_CONTAINER_H

typedef struct il_doctor il_doctor;

/* Sets dr->in_container and dr->container_engine. */
void il__container_facts(il_doctor *dr);
/* container.* checks (probe/cgroup's included). */
void il__container_checks(il_doctor *dr);

#endif
