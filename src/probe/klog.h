/* probe/klog: what the machine's logs already say. Gathers the kernel and audit lines that concern
 * NVIDIA, containers and security modules once per run, from /dev/kmsg (real machine), the log
 * files of the sysroot (/var/log/kern.log, dmesg, messages, syslog, audit/audit.log) and the
 * systemd journal files (/var/log/journal, /run/log/journal), and runs the checks that read them:
 * kmod.log (driver initialization: GSP firmware, BAR/MMIO, probe, RmInitAdapter, API mismatch,
 * module signature, unsupported GPU) and kmod.dkms (DKMS build of the module, with make.log's
 * reason). gpu.xid (probe/health) and security.lsm (probe/security) read the same lines.
 * Not for: writing or rotating logs; parsing Xid numbers (probe/xid).
 */
#ifndef IL_PROBE_KLOG_H
#define IL_PROBE_KLOG_H

#include <stddef.h>

#include "probe/sysfs.h"

typedef struct il_doctor il_doctor;

/* Fills dr->klog (owned, NUL-terminated, may be NULL when nothing was readable) and
 * dr->klog_sources. Sets dr->checks.oom when the buffer cannot be allocated. */
void il__klog_gather(il_doctor *dr);
/* Appends the message texts of a systemd journal file's bytes (fields "MESSAGE=...", stored
 * uncompressed for short kernel messages) to out as lines; returns the bytes appended.
 * Exposed for the tests, which build journal files by the documented layout. */
size_t il__klog_journal_messages(const char *data, size_t n, char *out, size_t cap);
/* Reads the last cap-1 bytes of regular file rel under the sysroot into buf (never a FIFO or a
 * device); returns the bytes read, 0 when absent or unreadable. */
size_t il__klog_read_tail(const il_sysfs *fs, const char *rel, char *buf, size_t cap);
void il__klog_check_driver(il_doctor *dr);
void il__klog_check_dkms(il_doctor *dr);
/* After every check: points the checks that saw only the effect (no device, no driver bound) at
 * the cause kmod.log found. */
void il__klog_link_causes(il_doctor *dr);

#endif
