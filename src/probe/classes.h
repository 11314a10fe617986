/* probe/classes: the failure classes doctor and --explain name, each with a stable id (the
 * number a check records in il_check.scenario), a slug that is also the heading of its section in
 * docs/doctor.md ("Failure classes"), and a title. The report links a finding to its section
 * (docs/doctor.md#SLUG) instead of a number in a research file outside the repository.
 * Xid events are one class (IL_CLASS_XID) whose slug carries the Xid number ("xid-31").
 * Not for: deciding which class a machine or a message is in (the checks, probe/explain).
 */
#ifndef IL_PROBE_CLASSES_H
#define IL_PROBE_CLASSES_H

#include <stddef.h>

/* Class ids beyond the research file's 1..25 and the first extras (101..113). */
enum {
  IL_CLASS_GSP_FIRMWARE = 120,  /* GSP firmware file of the driver version missing */
  IL_CLASS_BAR = 121,           /* BAR/MMIO window not assigned (BAR1 is 0M) */
  IL_CLASS_DKMS = 122,          /* DKMS build of the module failed for the running kernel */
  IL_CLASS_PROBE_FAILED = 123,  /* "None of the NVIDIA devices were initialized" alone */
  IL_CLASS_SELINUX = 124,
  IL_CLASS_APPARMOR = 125,
  IL_CLASS_NCCL_SHM = 126,
  IL_CLASS_IMAGE_DRIVER = 127,  /* the image ships driver files the runtime must inject */
  IL_CLASS_MOUNT_MISSING = 128, /* a CDI spec / CSV list names a host file that is gone */
  IL_CLASS_OPERATOR_HOST = 129, /* GPU operator's driver container beside a host driver */
  IL_CLASS_JETSON = 130,
  IL_CLASS_DOCKER_SNAP = 131,
  IL_CLASS_GPU_INIT = 132,      /* RmInitAdapter failed (not GSP-specific) */
  IL_CLASS_K3S = 133,           /* K3s/RKE2 containerd without (default) nvidia runtime */
  IL_CLASS_CONTAINERD2 = 134,   /* containerd 2 (config version 3) ignores the runtime section */
  IL_CLASS_XID = 140,
};

/* Slug of class id ("driver-library-mismatch"), NULL for 0 or an unknown id. Static string. */
const char *il_class_slug(int id);
/* Title of class id, NULL when unknown. Static string. */
const char *il_class_title(int id);
/* Writes the link "docs/doctor.md#SLUG" into buf; xid > 0 gives "docs/doctor.md#xid-events".
 * Returns buf, or "" (buf emptied) for an unknown id. */
const char *il_class_doc(int id, char *buf, size_t n);
/* Number of classes and the id of the i-th (for the docs test that every slug has a section). */
int il_class_count(void);
int il_class_id_at(int i);

#endif
