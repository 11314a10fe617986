/* probe/k8s: the Kubernetes device plugin's MIG strategy, as far as it can be seen from where
 * the doctor runs (the k8s.mig check). See k8s.c.
 * Not for: whether a pod requested a GPU at all (probe/container's injection check).
 */
#ifndef IL_PROBE_K8S_H
#define IL_PROBE_K8S_H

typedef struct il_doctor il_doctor;

void il__k8s_check_mig(il_doctor *dr);

#endif
