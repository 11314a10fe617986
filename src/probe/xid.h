/* probe/xid: NVIDIA's Xid events by number, and the parser that finds them in log text. Both
 * gpu.xid (the kernel log of this machine) and --explain (a pasted message) judge an Xid by its
 * number through this one table, so "Xid 31" is an application's MMU fault and "Xid 79" a GPU that
 * fell off the bus, never "any Xid".
 * Names come from NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
 * "Mnemonic"/"Description"; numbers, names and resolution buckets as transcribed in
 * https://github.com/leptonai/gpud components/accelerator/nvidia/xid/xid.go) and the dynamic page
 * retirement notes (https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html). The
 * action of each kind is the catalog's resolution bucket in words (RESTART_APP, RESET_GPU,
 * RESTART_BM / drain, CONTACT_SUPPORT). Xid 154 carries the recovery action the driver asks for in
 * its own line ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)").
 * Not for: reading the logs (probe/klog) or deciding a check's verdict beyond the kind.
 */
#ifndef IL_PROBE_XID_H
#define IL_PROBE_XID_H

#include <stddef.h>

typedef enum {
  IL_XID_APP = 1,   /* the application's fault: fix or restart it; the GPU is fine */
  IL_XID_INFO,      /* informational, follows another event */
  IL_XID_WATCH,     /* corrected or contained: restart the application, reset when idle, watch the rate */
  IL_XID_RESET,     /* the GPU needs a reset (or the node a reboot) */
  IL_XID_DRIVER,    /* driver or firmware error: reset or reboot; update the driver if it repeats */
  IL_XID_NVLINK,    /* NVLink: check bridges/cables, reset the GPUs */
  IL_XID_HW,        /* hardware: drain the node, power-cycle, RMA if it repeats */
} il_xid_kind;

typedef struct {
  int xid;
  il_xid_kind kind;
  const char *name;
} il_xid_info;

/* The table row of Xid n, NULL when the catalog has no (used) entry for it. Static data. */
const il_xid_info *il_xid_lookup(int n);
/* "application fault", "reset the GPU", ... (static strings). */
const char *il_xid_kind_name(il_xid_kind k);
/* What to do for an Xid of kind k, one sentence (static string). */
const char *il_xid_action(il_xid_kind k);

/* One Xid event found in text. */
typedef struct {
  int xid;
  char pci[40];          /* "PCI:0000:01:00" or "" */
  char recovery[64];     /* Xid 154: the recovery action asked for ("Node Reboot Required"), else "" */
} il_xid_event;

/* Finds Xid events in text: kernel lines "NVRM: Xid (PCI:0000:01:00): 79, ...", the older
 * "NVRM: Xid (0000:03:00): 14, ...", prose "Xid 79" / "XID 79" / "Xid error 79", and the
 * driver's own words for events that have a number ("fallen off the bus" = 79, "Timeout waiting for
 * RPC from GSP" = 119, "GPU recovery action changed" = 154). An event "caused by previous Xid M"
 * is recorded as M. Writes up to max events in text order; returns how many were found in all. */
int il_xid_scan(const char *text, il_xid_event *out, int max);
/* Severity rank of an event for choosing the one to report first: HW > RESET/DRIVER/NVLINK >
 * WATCH > APP > INFO; a 154 asking for no action ranks as INFO. */
int il_xid_rank(const il_xid_event *e);

#endif
