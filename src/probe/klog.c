/* probe/klog: the logs the machine already keeps, and the checks that read them. See klog.h.
 *
 * Messages and their sources (quoted in the tests that rebuild them):
 * - GSP firmware of the module's version missing: "nvidia 0000:01:00.0: Direct firmware load for
 *   nvidia/550.76/gsp_ga10x.bin failed with error -2" (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/639;
 *   Debian's package for it: https://github.com/endlessm/eos-meta/pull/811); after a half-finished
 *   update the module of the old version finds no firmware ("RmFetchGspRmImages: No firmware image
 *   found", https://github.com/ublue-os/bazzite/issues/2668).
 * - BAR not assigned: "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid: NVRM:
 *   BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)" in a VM, fixed by a 64-bit MMIO window
 *   (pciPassthru.use64bitMMIO, https://github.com/NVIDIA/gpu-operator/issues/492); on bare metal /
 *   eGPUs by pci=realloc (https://github.com/h8d13/archinstoo/issues/244) or Above 4G decoding.
 * - "NVRM: None of the NVIDIA devices were initialized." follows the line that says why
 *   (https://github.com/system76/firmware-open/issues/66).
 * - DKMS: "Error! Bad return status for module build on kernel: K ... Consult
 *   /var/lib/dkms/nvidia/V/build/make.log" (https://github.com/zen-kernel/zen-kernel/issues/305); the
 *   per-kernel log at /var/lib/dkms/nvidia/V/K/ARCH/log/make.log
 *   (https://github.com/linux-surface/linux-surface/issues/573); make.log reasons: missing headers
 *   ("/lib/modules/K/build/include/linux/autoconf.h: No such file or directory"), another compiler
 *   than the kernel's ("The kernel was built by: x86_64-linux-gnu-gcc-12 ... You are using: cc ...
 *   11.4.0" then "unrecognized command-line option", https://github.com/pop-os/pop/issues/3117;
 *   "Compiler version check failed", https://github.com/clearlinux/distribution/issues/1133), driver
 *   sources older than the kernel ("error: implicit declaration of function",
 *   https://github.com/Frogging-Family/nvidia-all/issues/44).
 * - systemd journal files keep each message as a "MESSAGE=text" data object; short kernel messages
 *   are stored uncompressed (journal file format, https://systemd.io/JOURNAL_FILE_FORMAT/: objects
 *   compressed only above a size threshold), so the text is read straight from the file's bytes
 *   [inferred: compressed entries, which this reader skips, are the long ones].
 */
#include "probe/klog.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/classes.h"
#include "probe/distro.h"
#include "probe/doctor.h"

#define IL__KLOG_CAP ((size_t)1 << 20)

size_t il__klog_read_tail(const il_sysfs *fs, const char *rel, char *buf, size_t cap) {
  char path[2048];
  buf[0] = 0;
  if (!il_sysfs_path(fs, rel, path, sizeof path)) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return 0;
  }
  off_t off = sb.st_size > (off_t)(cap - 1) ? sb.st_size - (off_t)(cap - 1) : 0;
  size_t got = 0;
  while (got < cap - 1) {
    ssize_t r = pread(fd, buf + got, cap - 1 - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = 0;
  return got;
}

/* Lines worth keeping: the driver, containers' security modules, DKMS, module signatures. */
static bool il__keep(const char *line) {
  static const char *const words[] = {"nvrm", "nvidia", "apparmor=", "avc:", "xid", "dkms", "unsigned module", "module verification",
                                      "key was rejected", "secure boot", NULL};
  for (int i = 0; words[i]; i++)
    if (il_sysfs_stristr(line, words[i])) return true;
  return false;
}

/* Appends the kept lines of text (n bytes) to the log buffer. */
static void il__append_lines(char *log, size_t *len, const char *text, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t l = 0;
    while (i + l < n && text[i + l] != '\n') l++;
    if (l && l < 4096) {
      char line[4096];
      memcpy(line, text + i, l);
      line[l] = 0;
      if (il__keep(line) && *len + l + 2 < IL__KLOG_CAP) {
        memcpy(log + *len, line, l);
        *len += l;
        log[(*len)++] = '\n';
        log[*len] = 0;
      }
    }
    i += l + 1;
  }
}

size_t il__klog_journal_messages(const char *data, size_t n, char *out, size_t cap) {
  size_t got = 0;
  if (!cap) return 0;
  out[0] = 0;
  for (size_t i = 0; i + 8 < n; i++) {
    if (memcmp(data + i, "MESSAGE=", 8)) continue;
    size_t s = i + 8, e = s;
    /* The payload ends at the object's end: zero padding or the next object's header bytes. */
    while (e < n && ((unsigned char)data[e] >= 0x20 || data[e] == '\t') && data[e] != 0x7f) e++;
    size_t l = e - s;
    if (l && got + l + 2 < cap) {
      memcpy(out + got, data + s, l);
      got += l;
      out[got++] = '\n';
      out[got] = 0;
    }
    i = e;
  }
  return got;
}

/* The kernel ring buffer through /dev/kmsg (real machine only): one record per read, until
 * EAGAIN without blocking. */
static void il__read_kmsg(char *log, size_t *len) {
  int fd = open("/dev/kmsg", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  char rec[8192];
  for (int k = 0; k < 200000; k++) {
    ssize_t r = read(fd, rec, sizeof rec - 1);
    if (r < 0 && errno == EPIPE) continue; /* overwritten record: go on */
    if (r <= 0) break;
    rec[r] = 0;
    char *msg = strchr(rec, ';');
    if (!msg) continue;
    msg++;
    il__append_lines(log, len, msg, strcspn(msg, "\n"));
  }
  close(fd);
}

static void il__add_source(il_doctor *dr, const char *name) {
  il_appendf(dr->klog_sources, sizeof dr->klog_sources, "%s%s", dr->klog_sources[0] ? " " : "", name);
}

void il__klog_gather(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char *log = il_mem_alloc(IL_MEM_OTHER, IL__KLOG_CAP, "kernel log");
  char *tmp = il_mem_alloc(IL_MEM_OTHER, IL__KLOG_CAP, "log file");
  if (!log || !tmp) {
    il_mem_free(log);
    il_mem_free(tmp);
    dr->checks.oom = true;
    return;
  }
  size_t len = 0;
  log[0] = 0;
  if (il_sysfs_is_real(fs)) {
    size_t before = len;
    il__read_kmsg(log, &len);
    if (len > before) il__add_source(dr, "/dev/kmsg");
  }
  static const char *const files[] = {"/var/log/kern.log", "/var/log/dmesg", "/var/log/messages", "/var/log/syslog", "/var/log/audit/audit.log"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    size_t n = il__klog_read_tail(fs, files[i], tmp, IL__KLOG_CAP);
    size_t before = len;
    if (n) il__append_lines(log, &len, tmp, n);
    if (len > before) il__add_source(dr, files[i]);
  }
  static const char *const jdirs[] = {"/var/log/journal", "/run/log/journal"};
  for (int d = 0; d < 2; d++) {
    char **ids;
    int nid;
    if (il_sysfs_list(fs, jdirs[d], &ids, &nid) != IL_OK) continue;
    for (int i = 0; i < nid; i++) {
      char sub[600];
      snprintf(sub, sizeof sub, "%s/%s", jdirs[d], ids[i]);
      char **names;
      int nn;
      if (il_sysfs_list(fs, sub, &names, &nn) != IL_OK) continue;
      for (int k = 0; k < nn; k++) {
        size_t nl = strlen(names[k]);
        if (nl < 9 || strcmp(names[k] + nl - 8, ".journal")) continue;
        char rel[900];
        snprintf(rel, sizeof rel, "%s/%s", sub, names[k]);
        size_t n = il__klog_read_tail(fs, rel, tmp, IL__KLOG_CAP);
        char *msgs = il_mem_alloc(IL_MEM_OTHER, IL__KLOG_CAP, "journal messages");
        if (!msgs) {
          dr->checks.oom = true;
          continue;
        }
        size_t m = il__klog_journal_messages(tmp, n, msgs, IL__KLOG_CAP);
        size_t before = len;
        il__append_lines(log, &len, msgs, m);
        il_mem_free(msgs);
        if (len > before) il__add_source(dr, rel);
      }
      il_sysfs_list_free(names, nn);
    }
    il_sysfs_list_free(ids, nid);
  }
  il_mem_free(tmp);
  dr->klog = log;
  dr->klog_len = len;
}

/* ---- kmod.log: driver initialization ----------------------------------------------------- */

/* The line of text holding p, copied into buf. */
static void il__line_at(const char *text, const char *p, char *buf, size_t n) {
  const char *s = p;
  while (s > text && s[-1] != '\n') s--;
  size_t l = strcspn(s, "\n");
  if (l >= n) l = n - 1;
  memcpy(buf, s, l);
  buf[l] = 0;
}

/* The first dotted version number after p (within lim bytes): "535.54.03". */
static bool il__version_after(const char *p, size_t lim, char *buf, size_t n) {
  for (size_t i = 0; i < lim && p[i]; i++) {
    if (isdigit((unsigned char)p[i]) && (i == 0 || p[i - 1] == ' ')) {
      char v[64];
      if (sscanf(p + i, "%63[0-9.]", v) == 1 && strchr(v, '.')) {
        size_t l = strlen(v);
        while (l && v[l - 1] == '.') v[--l] = 0;
        il_sysfs_copy(buf, n, v);
        return true;
      }
    }
  }
  return false;
}

void il__klog_check_driver(il_doctor *dr) {
  const char *log = dr->klog;
  il_check *c;
  if (!log || !dr->klog_len) {
    il__check_na(&dr->checks, "kmod.log", IL_VERDICT_OK, 0, "no kernel log lines about the driver to read%s",
                 il_sysfs_is_real(&dr->fs) ? " (reading /dev/kmsg may need root)" : "");
    return;
  }
  char text[400] = "", first[240] = "";
  int cls = 0;
  il_check fixes;
  memset(&fixes, 0, sizeof fixes);
  char cmd[300];
  const char *p;
  if ((p = il_sysfs_stristr(log, "firmware load for nvidia/")) != NULL) {
    char path[200] = "", ver[64] = "";
    sscanf(p + strlen("firmware load for "), "%199s", path);
    sscanf(path, "nvidia/%63[0-9.]", ver);
    il_appendf(text, sizeof text, "%sGSP firmware /lib/firmware/%s is missing (the driver cannot start the GPU)", text[0] ? "; " : "", path);
    if (!cls) cls = IL_CLASS_GSP_FIRMWARE;
    il__line_at(log, p, first, sizeof first);
    /* Which firmware versions are installed: another one than the module's = an update that replaced it. */
    char **names;
    int n;
    char others[160] = "";
    if (il_sysfs_list(&dr->fs, "/lib/firmware/nvidia", &names, &n) == IL_OK) {
      for (int i = 0; i < n; i++)
        if (isdigit((unsigned char)names[i][0]) && strcmp(names[i], ver)) il_appendf(others, sizeof others, "%s%s", others[0] ? " " : "", names[i]);
      il_sysfs_list_free(names, n);
    }
    if (others[0])
      il__check_fix(&fixes, "The module %s wants its own firmware but /lib/firmware/nvidia has %s: a driver update replaced it while the old module stayed "
                            "loaded; reboot so the module of the installed version loads", ver, others);
    else
      il__check_fix(&fixes, "Install the GSP firmware of driver %s: %s, then reboot", ver[0] ? ver : "(the module's version)",
                    il__distro_cmd(dr, IL_CMD_GSP_FIRMWARE, ver, cmd, sizeof cmd));
  }
  if ((p = il_sysfs_stristr(log, " is 0M @ ")) != NULL && p - log > 4) {
    char line[240], pci[40] = "";
    il__line_at(log, p, line, sizeof line);
    const char *bar = il_sysfs_stristr(line, "BAR");
    const char *q = strstr(line, "(PCI:");
    if (q) sscanf(q + 5, "%39[0-9a-fA-F:.]", pci);
    il_appendf(text, sizeof text, "%s%.4s is 0M at %s: no address window was assigned to the GPU", text[0] ? "; " : "", bar ? bar : "BAR", pci[0] ? pci : "the GPU");
    if (!cls || cls == IL_CLASS_PROBE_FAILED) cls = IL_CLASS_BAR;
    if (!first[0]) il_sysfs_copy(first, sizeof first, line);
    if (dr->host.hypervisor_flag)
      il__check_fix(&fixes, "This is a VM: give it a 64-bit MMIO window larger than the GPUs' BARs (VMware: pciPassthru.use64bitMMIO=\"TRUE\" and "
                            "pciPassthru.64bitMMIOSizeGB at least the sum of the GPUs' BAR sizes; QEMU/OVMF: a larger 64-bit PCI "
                            "window), then power the VM off and on");
    else
      il__check_fix(&fixes, "Enable Above 4G Decoding (and Resizable BAR) in the firmware setup; for an external or riser-attached GPU, boot with "
                            "pci=realloc (add it to GRUB_CMDLINE_LINUX, then update the bootloader configuration)");
  }
  if ((p = il_sysfs_stristr(log, "cannot initialize gsp firmware")) != NULL) {
    il_appendf(text, sizeof text, "%sGSP firmware did not start (RmInitAdapter)", text[0] ? "; " : "");
    if (!cls) cls = 9;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Power-cycle the machine (GSP state survives a warm reboot); if it repeats on the proprietary module: options nvidia "
                          "NVreg_EnableGpuFirmware=0 in /etc/modprobe.d/nvidia.conf, then rebuild the initramfs");
  } else if ((p = il_sysfs_stristr(log, "rminitadapter failed")) != NULL && !cls) {
    il_appendf(text, sizeof text, "%sthe driver could not initialize the GPU (RmInitAdapter failed)", text[0] ? "; " : "");
    cls = IL_CLASS_GPU_INIT;
    il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Power-cycle the machine; update the SBIOS and the driver; the NVRM lines before it in the kernel log name the failing unit");
  }
  if ((p = il_sysfs_stristr(log, "api mismatch")) != NULL) {
    char client[64] = "", module[64] = "";
    const char *v1 = il_sysfs_stristr(p, "has the version");
    const char *v2 = v1 ? il_sysfs_stristr(v1 + 15, "has the version") : NULL;
    if (!v2 && v1) v2 = il_sysfs_stristr(v1 + 15, "the version");
    if (v1) il__version_after(v1 + 15, 40, client, sizeof client);
    if (v2) il__version_after(strstr(v2, "version") + 7, 40, module, sizeof module);
    il_appendf(text, sizeof text, "%sAPI mismatch: user-space driver %s, kernel module %s", text[0] ? "; " : "", client[0] ? client : "?", module[0] ? module : "?");
    if (!cls) cls = 3;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    if (client[0] && module[0] && il_sysfs_vercmp(client, module) > 0) il__check_fix(&fixes, "Reboot so the kernel module %s replaces %s", client, module);
    else il__check_fix(&fixes, "Make the module and the libraries the same version: reinstall the driver %s and reboot", module[0] ? module : "");
  }
  if (((p = il_sysfs_stristr(log, "loading of unsigned module is rejected")) != NULL || (p = il_sysfs_stristr(log, "key was rejected by service")) != NULL)) {
    il_appendf(text, sizeof text, "%sthe kernel rejected the unsigned module (Secure Boot / lockdown)", text[0] ? "; " : "");
    if (!cls) cls = 5;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Enroll the module signing key: %s", il__distro_cmd(dr, IL_CMD_ENROLL_KEY, NULL, cmd, sizeof cmd));
  }
  if ((p = il_sysfs_stristr(log, "probe routine was not called")) != NULL) {
    il_appendf(text, sizeof text, "%sthe nvidia probe was not called: another driver (nouveau) owns the GPU", text[0] ? "; " : "");
    if (!cls) cls = 6;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Blacklist nouveau (see kmod.nouveau) and reboot");
  }
  if ((p = il_sysfs_stristr(log, "requires use of the nvidia open kernel modules")) != NULL) {
    il_appendf(text, sizeof text, "%sthe GPU requires the open kernel module flavour", text[0] ? "; " : "");
    if (!cls) cls = 104;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Install the -open flavour of the driver and reboot (see kmod.flavor)");
  } else if ((p = il_sysfs_stristr(log, "in this system is not supported by the")) != NULL) {
    il_appendf(text, sizeof text, "%sthe installed driver branch does not support this GPU", text[0] ? "; " : "");
    if (!cls) cls = 103;
    if (!first[0]) il__line_at(log, p, first, sizeof first);
    il__check_fix(&fixes, "Install a driver branch that supports the GPU (see kmod.branch for which one)");
  }
  if ((p = il_sysfs_stristr(log, "none of the nvidia devices were initialized")) != NULL ||
      (p = il_sysfs_stristr(log, "none of the nvidia graphics adapters were initialized")) != NULL) {
    if (!cls) {
      cls = IL_CLASS_PROBE_FAILED;
      il_appendf(text, sizeof text, "%sthe driver initialized none of the GPUs", text[0] ? "; " : "");
      il__line_at(log, p, first, sizeof first);
      il__check_fix(&fixes, "Read the NVRM lines just before it (journalctl -k -b | grep -B5 'None of the NVIDIA'); they name the cause");
    }
  }
  if (!cls) {
    c = il__check_add(&dr->checks, "kmod.log", IL_VERDICT_OK, 0, "no driver initialization errors in %s", dr->klog_sources);
    il__check_ev(c, "logs", "%s", dr->klog_sources);
    return;
  }
  /* Logs keep earlier boots: a GPU that works now makes an old failure a warning. */
  int usable = il_nvml_usable_count(&dr->nvml);
  bool works_now = usable > 0 && usable >= dr->n_pci;
  c = il__check_add(&dr->checks, "kmod.log", works_now ? IL_VERDICT_WARN : IL_VERDICT_FAIL, cls, "%s%s", works_now ? "earlier in the kernel log: " : "",
                    text);
  for (const char *f = fixes.fix; *f;) {
    size_t l = strcspn(f, "\n");
    il__check_fix(c, "%.*s", (int)l, f);
    f += l;
    if (*f) f++;
  }
  il__check_ev(c, "logs", "%s", dr->klog_sources);
  il__check_ev(c, "line", "%s", first);
}

/* ---- kmod.dkms ------------------------------------------------------------------------------ */

/* "gcc-12" from "x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0"; "gcc" plus the
 * version from "gcc (GCC) 11.2.0". */
static void il__compiler_pkg(const char *built_by, char *buf, size_t n) {
  char prog[96] = "";
  sscanf(built_by, "%95s", prog);
  const char *g = strstr(prog, "gcc");
  const char *cl = strstr(prog, "clang");
  if (g) il_sysfs_copy(buf, n, g);
  else if (cl) il_sysfs_copy(buf, n, cl);
  else il_sysfs_copy(buf, n, prog);
  if (!strcmp(buf, "gcc") || !strcmp(buf, "clang")) {
    /* Versioned name from the last number of the line ("11.2.0" -> gcc-11). */
    const char *last = NULL;
    for (const char *p = built_by; *p; p++)
      if (isdigit((unsigned char)*p) && (p == built_by || p[-1] == ' ')) last = p;
    if (last) {
      size_t l = strlen(buf);
      snprintf(buf + l, n - l, "-%d", atoi(last));
    }
  }
}

/* Reads make.log and writes its reason and the fix for it. Returns false when no error is seen. */
static bool il__makelog_reason(il_doctor *dr, const char *log, const char *kver, char *why, size_t nw, char *fix, size_t nf) {
  char cmd[300];
  const char *p;
  why[0] = fix[0] = 0;
  if (il_sysfs_stristr(log, "autoconf.h: no such file") || il_sysfs_stristr(log, "kernel configuration is invalid") ||
      (il_sysfs_stristr(log, "/build: no such file or directory")) || il_sysfs_stristr(log, "kernel headers")) {
    snprintf(why, nw, "the headers of kernel %s are missing or incomplete", kver);
    snprintf(fix, nf, "Install the headers of the running kernel: %s, then sudo dkms autoinstall -k %s", il__distro_cmd(dr, IL_CMD_KERNEL_HEADERS, kver, cmd, sizeof cmd), kver);
    return true;
  }
  if ((p = il_sysfs_stristr(log, "the kernel was built by:")) != NULL || il_sysfs_stristr(log, "compiler version check failed") ||
      il_sysfs_stristr(log, "incompatible gcc/plugin versions") || il_sysfs_stristr(log, "unrecognized command-line option") ||
      il_sysfs_stristr(log, "unknown warning option")) {
    char built[160] = "", using[160] = "", pkg[64] = "";
    if (p) {
      sscanf(p + strlen("the kernel was built by:"), " %159[^\n]", built);
      const char *u = il_sysfs_stristr(p, "you are using:");
      if (u) sscanf(u + strlen("you are using:"), " %159[^\n]", using);
    }
    if (!built[0] && (p = il_sysfs_stristr(log, "compile the kernel:")) != NULL) sscanf(p + 19, " %159[^\n]", built);
    if (built[0]) {
      il__compiler_pkg(built, pkg, sizeof pkg);
      snprintf(why, nw, "make.log: the compiler differs from the kernel's (kernel built by %.60s%s%.60s)", built, using[0] ? ", building with " : "", using);
      snprintf(fix, nf, "Install the compiler the kernel was built with: %s, then rebuild: sudo dkms autoinstall -k %s (with CC=%s if dkms still uses cc)",
               il__distro_cmd(dr, IL_CMD_INSTALL_PKG, pkg, cmd, sizeof cmd), kver, pkg);
    } else if (il_sysfs_stristr(log, "unknown warning option")) {
      snprintf(why, nw, "make.log: the build ran with clang (unknown warning option) but the kernel was built with gcc");
      snprintf(fix, nf, "Build with gcc: make cc point to gcc (or CC=gcc sudo dkms autoinstall -k %s)", kver);
    } else {
      snprintf(why, nw, "make.log: the compiler does not match the one the kernel was built with");
      snprintf(fix, nf, "Install the compiler named in /proc/version (gcc of the same major), then sudo dkms autoinstall -k %s", kver);
    }
    return true;
  }
  if ((p = il_sysfs_stristr(log, "error: implicit declaration of function")) != NULL || (p = il_sysfs_stristr(log, "error:")) != NULL) {
    char line[100];
    il__line_at(log, p, line, sizeof line);
    snprintf(why, nw, "make.log: the driver sources do not build against kernel %.60s (%s)", kver, line);
    snprintf(fix, nf, "Install a driver branch that supports kernel %s (newer drivers follow new kernels), or boot the previous kernel until one does", kver);
    return true;
  }
  return false;
}

void il__klog_check_dkms(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char **mods;
  int nm;
  if (il_sysfs_list(fs, "/var/lib/dkms", &mods, &nm) != IL_OK || nm == 0) {
    il__check_na(&dr->checks, "kmod.dkms", IL_VERDICT_OK, 0, "no DKMS-built NVIDIA module (/var/lib/dkms)");
    if (mods) il_sysfs_list_free(mods, nm);
    return;
  }
  const char *kver = dr->host.kernel;
  char built[200] = "", failed_why[300] = "", failed_fix[500] = "", logrel[600] = "", modver[120] = "";
  bool any = false;
  char *log = il_mem_alloc(IL_MEM_OTHER, 1 << 18, "make.log");
  if (!log) {
    dr->checks.oom = true;
    il_sysfs_list_free(mods, nm);
    return;
  }
  for (int m = 0; m < nm; m++) {
    if (strncmp(mods[m], "nvidia", 6)) continue;
    char mdir[300];
    snprintf(mdir, sizeof mdir, "/var/lib/dkms/%s", mods[m]);
    char **vers;
    int nv;
    if (il_sysfs_list(fs, mdir, &vers, &nv) != IL_OK) continue;
    for (int v = 0; v < nv; v++) {
      if (!isdigit((unsigned char)vers[v][0])) continue;
      any = true;
      char vdir[600], krel[900];
      snprintf(vdir, sizeof vdir, "%s/%s", mdir, vers[v]);
      snprintf(krel, sizeof krel, "%s/%s", vdir, kver);
      if (kver[0] && il_sysfs_find_below(fs, krel, "nvidia.ko", 5)) {
        il_appendf(built, sizeof built, "%s%s/%s", built[0] ? " " : "", mods[m], vers[v]);
        continue;
      }
      /* No module for the running kernel: the per-kernel log, else build/make.log. */
      char cand[2][1000];
      char **archs;
      int na;
      cand[0][0] = 0;
      if (il_sysfs_list(fs, krel, &archs, &na) == IL_OK && na > 0) {
        snprintf(cand[0], sizeof cand[0], "%s/%s/log/make.log", krel, archs[0]);
        il_sysfs_list_free(archs, na);
      }
      snprintf(cand[1], sizeof cand[1], "%s/build/make.log", vdir);
      for (int k = 0; k < 2 && !failed_why[0]; k++) {
        if (!cand[k][0] || il_sysfs_read(fs, cand[k], log, 1 << 18, NULL) != IL_OK) continue;
        /* A make.log names its kernel in the first line; one for another kernel says nothing about this one. */
        const char *hdr = il_sysfs_stristr(log, "for kernel ");
        char lk[128] = "";
        if (hdr) sscanf(hdr + 11, "%127s", lk);
        if (lk[0] && kver[0] && strcmp(lk, kver)) continue;
        if (il__makelog_reason(dr, log, kver[0] ? kver : "$(uname -r)", failed_why, sizeof failed_why, failed_fix, sizeof failed_fix)) {
          il_sysfs_copy(logrel, sizeof logrel, cand[k]);
          snprintf(modver, sizeof modver, "%s/%s", mods[m], vers[v]);
        }
      }
    }
    il_sysfs_list_free(vers, nv);
  }
  il_sysfs_list_free(mods, nm);
  il_mem_free(log);
  il_check *c;
  if (!any) {
    il__check_na(&dr->checks, "kmod.dkms", IL_VERDICT_OK, 0, "no DKMS-built NVIDIA module (/var/lib/dkms)");
    return;
  }
  if (failed_why[0]) {
    bool loaded = dr->kmod_loaded;
    c = il__check_add(&dr->checks, "kmod.dkms", loaded ? IL_VERDICT_WARN : IL_VERDICT_FAIL, IL_CLASS_DKMS,
                      "DKMS could not build %s for kernel %s: %s%s", modver, kver[0] ? kver : "(running)", failed_why,
                      loaded ? " (a module is loaded now; the next build or boot needs this fixed)" : "");
    il__check_fix(c, "%s", failed_fix);
    il__check_ev(c, "make_log", "%s", logrel);
  } else if (built[0]) {
    c = il__check_add(&dr->checks, "kmod.dkms", IL_VERDICT_OK, 0, "DKMS built %s for kernel %s", built, kver);
  } else {
    c = il__check_add(&dr->checks, "kmod.dkms", dr->kmod_loaded ? IL_VERDICT_OK : IL_VERDICT_WARN, dr->kmod_loaded ? 0 : IL_CLASS_DKMS,
                      "DKMS has the nvidia sources but no module for kernel %s and no make.log that says why", kver);
    if (!dr->kmod_loaded) {
      char cmd[300];
      il__check_fix(c, "%s", il__distro_cmd(dr, IL_CMD_REBUILD_MODULE, kver, cmd, sizeof cmd));
    }
  }
  il__check_ev(c, "running_kernel", "%s", kver);
}

/* ---- the kernel log's cause for the checks that only saw the effect --------------------------
 * driver.nvml ("No devices were found"), cuda.init (no device) and virt.pci (no driver bound) see
 * that the driver did not take the GPU; when kmod.log found why, their "look at the kernel log"
 * becomes that cause, so the report names it once instead of sending the user to dmesg. */
void il__klog_link_causes(il_doctor *dr) {
  const il_check *k = il_check_find(&dr->checks, "kmod.log");
  if (!k || k->verdict != IL_VERDICT_FAIL || !k->scenario) return;
  static const char *const ids[] = {"driver.nvml", "cuda.init", "virt.pci", "kmod.nvidia"};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    for (int j = 0; j < dr->checks.n; j++) {
      il_check *c = &dr->checks.items[j];
      if (strcmp(c->id, ids[i]) || c->verdict != IL_VERDICT_FAIL || !strstr(c->fix, "dmesg")) continue;
      c->scenario = k->scenario;
      c->fix[0] = 0;
      il__check_fix(c, "The kernel log says why (kmod.log): %.600s", k->summary);
    }
  }
}
