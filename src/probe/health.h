/* probe/health: hardware and firmware health checks (pci.link, gpu.xid, gpu.remap,
 * gpu.persistence, gpu.fabric). See health.c. Not for: ECC and lost GPUs (probe/driver).
 */
#ifndef IL_PROBE_HEALTH_H
#define IL_PROBE_HEALTH_H

typedef struct il_doctor il_doctor;

void il__health_checks(il_doctor *dr);

#endif
