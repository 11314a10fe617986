/* probe/health: hardware and firmware health: the PCIe link, Xid events in the kernel log,
 * row remapping, persistence mode and the NVSwitch Fabric Manager.
 *
 * - PCIe: /sys/bus/pci/devices/BDF/{current,max}_link_{width,speed}. A width below the maximum
 *   (x8 in an x16 slot: a riser, a dirty or half-seated card) halves host<->device bandwidth
 *   for good; a lower speed alone is normal, GPUs drop the link speed when idle to save power.
 * - Xid: "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus." lines from the kernel
 *   log (/dev/kmsg on the real machine, else /var/log/kern.log, /var/log/messages,
 *   /var/log/syslog), each code ranked by what it asks for, from NVIDIA's Xid catalog
 *   (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) and the dynamic page
 *   retirement notes (https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html:
 *   48 "A DBE has occurred", 63 "A page has successfully been retired", 64 "A page has failed
 *   retirement due to an error").
 * - Row remapping (A100 and later; nvmlDeviceGetRemappedRows): a pending remap needs a GPU
 *   reset, a remapping failure means the memory ran out of spare rows.
 * - Persistence: without persistence mode or nvidia-persistenced the driver tears the GPU state
 *   down between clients; slow or timed-out initialization on servers ("driver error: timed
 *   out", https://github.com/NVIDIA/nvidia-docker/issues/723; ~30 s nvidia-smi on AKS,
 *   https://github.com/Azure/aks-gpu/pull/105).
 * - Fabric Manager: on NVSwitch systems CUDA fails with 802 "system not yet initialized" until
 *   it runs (https://github.com/aws-samples/aws-deep-learning-ami-ubuntu-dcv-desktop/issues/33),
 *   and it refuses to start unless its version equals the driver's exactly: "fabric manager
 *   NVIDIA GPU driver interface version 530.30.02 don't match with driver version 530.41.03"
 *   (https://github.com/NVIDIA/gpu-operator/issues/544).
 * Not for: ECC counters and lost GPUs as NVML reports them (probe/driver gpu.health).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/health.h"
#include "probe/distro.h"
#include "probe/doctor.h"

/* ---- PCIe link width ------------------------------------------------------------------ */

static void il__check_pcie(il_doctor *dr) {
  char text[400] = "", fixes[300] = "";
  int n_checked = 0;
  il_verdict v = IL_VERDICT_OK;
  il_check tmp;
  memset(&tmp, 0, sizeof tmp);
  for (int i = 0; i < dr->n_pci; i++) {
    const il_pci_gpu *g = &dr->pci[i];
    char rel[256], cw[32] = "", mw[32] = "", cs[48] = "", ms[48] = "";
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/current_link_width", g->bdf);
    if (!il_sysfs_read_line(&dr->fs, rel, cw, sizeof cw)) continue;
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/max_link_width", g->bdf);
    il_sysfs_read_line(&dr->fs, rel, mw, sizeof mw);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/current_link_speed", g->bdf);
    il_sysfs_read_line(&dr->fs, rel, cs, sizeof cs);
    snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/max_link_speed", g->bdf);
    il_sysfs_read_line(&dr->fs, rel, ms, sizeof ms);
    int cur = atoi(cw), max = atoi(mw);
    n_checked++;
    il__check_ev(&tmp, g->bdf, "x%d of x%d, %s of %s", cur, max, cs[0] ? cs : "unknown", ms[0] ? ms : "unknown");
    if (cur > 0 && max > 0 && cur < max) {
      il_appendf(text, sizeof text, "%s%s runs at x%d of x%d", text[0] ? "; " : "", g->bdf, cur, max);
      il_appendf(fixes, sizeof fixes, "%s%s", fixes[0] ? " " : "", g->bdf);
      v = IL_VERDICT_WARN;
    }
  }
  il_check *c;
  if (n_checked == 0) {
    il__check_na(&dr->checks, "pci.link", IL_VERDICT_OK, 0, "no PCIe link attributes to read%s", dr->n_pci ? "" : " (no NVIDIA GPU on the PCI bus)");
    return;
  }
  if (v == IL_VERDICT_WARN) {
    c = il__check_add(&dr->checks, "pci.link", v, 0, "PCIe link narrower than the card supports: %s (host<->GPU copies and model loading slow down "
                      "in proportion)", text);
    il__check_fix(c, "Power off, reseat the card(s) at %s in an x16 slot (no x8 riser, check the slot's lanes in the board manual), "
                     "then compare: sudo lspci -vv -s %.12s | grep -e LnkCap -e LnkSta", fixes, fixes);
  } else {
    c = il__check_add(&dr->checks, "pci.link", IL_VERDICT_OK, 0, "PCIe links at full width on %d GPU%s (a lower speed while idle is normal power saving)",
                      n_checked, n_checked == 1 ? "" : "s");
  }
  for (int i = 0; i < tmp.n_evidence; i++) il__check_ev(c, tmp.evidence[i].key, "%s", tmp.evidence[i].value);
}

/* ---- Xid events ------------------------------------------------------------------------ */

static const struct {
  int xid;
  int severity; /* 3 FAIL: the GPU needs a reset, drain or RMA; 2 WARN; 1 usually the application */
  const char *meaning, *action;
} il__xids[] = {
    {79, 3, "GPU has fallen off the bus", "drain the node, power-cycle it; check power cabling, cooling and SBIOS; RMA if it repeats"},
    {48, 3, "double-bit ECC error (DBE)", "reset the GPU (nvidia-smi -r) to retire the page; RMA if it repeats"},
    {95, 3, "uncontained ECC error", "reset the GPU; every application on it was affected"},
    {64, 3, "ECC page retirement or row remapper recording failure", "reset the GPU; RMA if the memory has no spare rows left"},
    {119, 3, "GSP RPC timeout", "reset the GPU or reboot; update the driver if it repeats"},
    {120, 3, "GSP error", "reset the GPU or reboot; update the driver if it repeats"},
    {154, 3, "GPU recovery action changed (reset or reboot required)", "do the recovery action nvidia-smi -q shows (reset or reboot)"},
    {63, 2, "ECC page retirement or row remapping event", "reset the GPU when idle to activate the remapped row"},
    {94, 2, "contained ECC error", "restart the affected application; reset the GPU when idle"},
    {92, 2, "high single-bit ECC error rate", "watch it; RMA if it keeps growing"},
    {74, 2, "NVLink error", "check NVLink cabling/bridges; reset the GPUs"},
    {13, 1, "graphics engine exception", "usually an application bug (out-of-range access); rerun"},
    {31, 1, "GPU memory page fault", "usually an application bug (invalid address); rerun"},
    {43, 1, "GPU stopped processing", "usually the application; rerun"},
    {45, 1, "preemptive cleanup after earlier errors", "look at the Xid before it"},
};

static int il__xid_row(int xid) {
  for (size_t i = 0; i < sizeof il__xids / sizeof il__xids[0]; i++)
    if (il__xids[i].xid == xid) return (int)i;
  return -1;
}

/* Reads the last `cap` bytes of a regular log file under the sysroot (never a FIFO). */
static size_t il__read_tail(const il_sysfs *fs, const char *rel, char *buf, size_t cap) {
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

/* The kernel ring buffer through /dev/kmsg (real machine only): one record per read, read
 * until EAGAIN without blocking. Keeps only NVRM lines. */
static size_t il__read_kmsg(char *buf, size_t cap) {
  int fd = open("/dev/kmsg", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  buf[0] = 0;
  if (fd < 0) return 0;
  size_t got = 0;
  char rec[8192];
  for (int k = 0; k < 200000; k++) {
    ssize_t r = read(fd, rec, sizeof rec - 1);
    if (r < 0 && errno == EPIPE) continue; /* overwritten record: go on */
    if (r <= 0) break;
    rec[r] = 0;
    char *msg = strchr(rec, ';');
    if (!msg || !strstr(msg, "NVRM")) continue;
    msg++;
    size_t l = strcspn(msg, "\n");
    if (got + l + 2 >= cap) break;
    memcpy(buf + got, msg, l);
    got += l;
    buf[got++] = '\n';
  }
  close(fd);
  buf[got] = 0;
  return got;
}

static void il__check_xid(il_doctor *dr) {
  const size_t cap = (size_t)1 << 20;
  char *log = il_mem_alloc(IL_MEM_OTHER, cap, "kernel log");
  if (!log) {
    dr->checks.oom = true;
    return;
  }
  const char *source = NULL;
  if (il_sysfs_is_real(&dr->fs) && il__read_kmsg(log, cap) > 0) source = "/dev/kmsg";
  static const char *const files[] = {"/var/log/kern.log", "/var/log/messages", "/var/log/syslog"};
  for (size_t i = 0; i < 3 && !source; i++)
    if (il__read_tail(&dr->fs, files[i], log, cap) > 0 && strstr(log, "NVRM")) source = files[i];
  int counts[sizeof il__xids / sizeof il__xids[0]] = {0};
  int unknown = 0, worst = 0;
  char last_pci[sizeof il__xids / sizeof il__xids[0]][40];
  memset(last_pci, 0, sizeof last_pci);
  if (source) {
    for (const char *p = log; (p = strstr(p, "NVRM: Xid (")) != NULL; p++) {
      const char *close = strstr(p, "): ");
      const char *eol = strchr(p, '\n');
      if (!close || (eol && close > eol)) continue;
      int xid = atoi(close + 3);
      int row = il__xid_row(xid);
      if (row < 0) {
        unknown++;
        continue;
      }
      counts[row]++;
      if (il__xids[row].severity > worst) worst = il__xids[row].severity;
      size_t l = (size_t)(close - (p + 11));
      if (l >= sizeof last_pci[0]) l = sizeof last_pci[0] - 1;
      memcpy(last_pci[row], p + 11, l);
      last_pci[row][l] = 0;
    }
  }
  il_mem_free(log);
  il_check *c;
  if (!source) {
    il__check_add(&dr->checks, "gpu.xid", IL_VERDICT_OK, 0, "no NVRM lines in the readable kernel logs%s",
                  il_sysfs_is_real(&dr->fs) ? " (reading /dev/kmsg may need root)" : "");
    return;
  }
  char text[400] = "";
  /* Most severe first: the table is ordered by severity. */
  for (size_t i = 0; i < sizeof il__xids / sizeof il__xids[0]; i++) {
    if (!counts[i]) continue;
    il_appendf(text, sizeof text, "%sXid %d %s x%d (%s)", text[0] ? "; " : "", il__xids[i].xid, il__xids[i].meaning, counts[i], last_pci[i]);
  }
  if (!text[0] && !unknown) {
    c = il__check_add(&dr->checks, "gpu.xid", IL_VERDICT_OK, 0, "no Xid events in %s", source);
  } else {
    il_verdict v = worst >= 3 ? IL_VERDICT_FAIL : worst == 2 ? IL_VERDICT_WARN : IL_VERDICT_OK;
    if (unknown) il_appendf(text, sizeof text, "%s%d other Xid event%s", text[0] ? "; " : "", unknown, unknown == 1 ? "" : "s");
    c = il__check_add(&dr->checks, "gpu.xid", v, counts[0] ? 10 : 0, "%s", text);
    for (size_t i = 0; i < sizeof il__xids / sizeof il__xids[0]; i++)
      if (counts[i] && il__xids[i].severity >= 2) il__check_fix(c, "Xid %d on %s: %s", il__xids[i].xid, last_pci[i], il__xids[i].action);
    if (v == IL_VERDICT_OK && text[0]) il__check_fix(c, "Application-level Xids only: nothing to repair in the stack; see the application's error");
  }
  il__check_ev(c, "log", "%s", source);
}

/* ---- row remapping, persistence ------------------------------------------------------------- */

static void il__check_remap(il_doctor *dr) {
  const il_nvml_snapshot_t *s = &dr->nvml;
  char text[400] = "";
  il_verdict v = IL_VERDICT_OK;
  int gpu = -1, known = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const il_nvml_device *d = &s->devices[i];
    if (d->handle_rc || d->remap_pending < 0) continue;
    known++;
    if (d->remap_failure > 0) {
      il_appendf(text, sizeof text, "%sGPU %d: row remapping failed (%d uncorrectable rows remapped, no spare rows left)", text[0] ? "; " : "", i,
                 d->remap_unc);
      v = IL_VERDICT_FAIL;
      gpu = i;
    } else if (d->remap_pending > 0) {
      il_appendf(text, sizeof text, "%sGPU %d: row remap pending (takes effect at the next GPU reset)", text[0] ? "; " : "", i);
      if (v < IL_VERDICT_WARN) v = IL_VERDICT_WARN;
      if (gpu < 0) gpu = i;
    }
  }
  il_check *c;
  if (!known) {
    il__check_na(&dr->checks, "gpu.remap", IL_VERDICT_OK, 0, "row remapping not reported (pre-A100 GPU, or no GPU)");
    return;
  }
  if (!text[0]) c = il__check_add(&dr->checks, "gpu.remap", IL_VERDICT_OK, 0, "no pending or failed row remaps on %d GPU%s", known, known == 1 ? "" : "s");
  else c = il__check_add(&dr->checks, "gpu.remap", v, 11, "%s", text);
  if (v == IL_VERDICT_FAIL)
    il__check_fix(c, "GPU %d has exhausted its spare memory rows: drain it and RMA (nvidia-smi -q -d ROW_REMAPPER -i %d shows the counts)", gpu, gpu);
  else if (v == IL_VERDICT_WARN)
    il__check_fix(c, "Reset GPU %d when idle to apply the remap: sudo nvidia-smi -r -i %d (or reboot)", gpu, gpu);
  for (int i = 0; i < s->n_devices && c->n_evidence < IL_CHECK_MAX_EVIDENCE; i++) {
    const il_nvml_device *d = &s->devices[i];
    if (d->handle_rc || d->remap_pending < 0) continue;
    char key[40];
    snprintf(key, sizeof key, "gpu%d_remapped_rows", i);
    il__check_ev(c, key, "corrected %d uncorrected %d pending %d failure %d", d->remap_corr, d->remap_unc, d->remap_pending, d->remap_failure);
  }
}

/* True when a process whose comm starts with `comm` runs (scans /proc/PID/comm). */
static bool il__process_running(const il_sysfs *fs, const char *comm) {
  char **names;
  int n;
  if (il_sysfs_list(fs, "/proc", &names, &n) != IL_OK) return false;
  bool found = false;
  for (int i = 0; i < n && !found; i++) {
    if (names[i][0] < '0' || names[i][0] > '9') continue;
    char rel[64], c[64];
    snprintf(rel, sizeof rel, "/proc/%.20s/comm", names[i]);
    /* comm is cut to 15 characters ("nvidia-persiste"). */
    if (il_sysfs_read_line(fs, rel, c, sizeof c) && (!strcmp(c, comm) || (strlen(c) == 15 && !strncmp(c, comm, 15)))) found = true;
  }
  il_sysfs_list_free(names, n);
  return found;
}

static bool il__consumer(const char *name) {
  return il_sysfs_stristr(name, "GeForce") || il_sysfs_stristr(name, "TITAN");
}

static void il__check_persistence(il_doctor *dr) {
  const il_nvml_snapshot_t *s = &dr->nvml;
  if (dr->wsl) {
    il__check_na(&dr->checks, "gpu.persistence", IL_VERDICT_OK, 0, "WSL2: the Windows driver keeps the GPU initialized");
    return;
  }
  bool daemon = il__process_running(&dr->fs, "nvidia-persistenced");
  char off[200] = "";
  int known = 0;
  for (int i = 0; i < s->n_devices; i++) {
    const il_nvml_device *d = &s->devices[i];
    if (d->handle_rc || d->persistence < 0) continue;
    known++;
    if (d->persistence == 0 && !il__consumer(d->name)) il_appendf(off, sizeof off, "%s%d", off[0] ? "," : "", i);
  }
  il_check *c;
  if (!known) {
    il__check_na(&dr->checks, "gpu.persistence", IL_VERDICT_OK, 0, "persistence mode not reported (no GPU)");
    return;
  }
  if (off[0] && !daemon) {
    c = il__check_add(&dr->checks, "gpu.persistence", IL_VERDICT_WARN, 102,
                      "persistence mode off on data-center GPU %s and nvidia-persistenced is not running: the driver tears the GPU down "
                      "between clients (slow start, 'driver error: timed out')", off);
    il__check_fix(c, "sudo systemctl enable --now nvidia-persistenced   (legacy: sudo nvidia-smi -i %s -pm 1)", off);
  } else {
    c = il__check_add(&dr->checks, "gpu.persistence", IL_VERDICT_OK, 0, "%s", daemon ? "nvidia-persistenced is running" : "persistence mode on (or a desktop GPU)");
  }
  il__check_ev(c, "nvidia_persistenced", "%s", daemon ? "running" : "not running");
}

/* ---- Fabric Manager ----------------------------------------------------------------------------- */

/* Installed nvidia-fabricmanager version from the dpkg database ("535.54.03"), or from the
 * Fabric Manager log's mismatch line; "" when unknown. */
static void il__fm_version(const il_sysfs *fs, char *ver, size_t n, char *logline, size_t nl) {
  ver[0] = logline[0] = 0;
  const size_t cap = (size_t)1 << 20;
  char *db = il_mem_alloc(IL_MEM_OTHER, cap, "dpkg status");
  if (db) {
    if (il__read_tail(fs, "/var/lib/dpkg/status", db, cap) > 0) {
      for (const char *p = db; (p = strstr(p, "Package: nvidia-fabricmanager-")) != NULL; p++) {
        const char *end = strstr(p, "\n\n");
        const char *st = strstr(p, "\nStatus: install ok installed");
        const char *v = strstr(p, "\nVersion: ");
        if (st && v && (!end || (st < end && v < end))) {
          char raw[64];
          if (sscanf(v + 10, "%63[0-9.]", raw) == 1) {
            size_t l = strlen(raw);
            while (l && raw[l - 1] == '.') raw[--l] = 0;
            il_sysfs_copy(ver, n, raw);
          }
          break;
        }
      }
    }
    il_mem_free(db);
  }
  char log[16384];
  if (il__read_tail(fs, "/var/log/fabricmanager.log", log, sizeof log) > 0) {
    const char *m = strstr(log, "fabric manager NVIDIA GPU driver interface version");
    if (m) {
      il_sysfs_copy(logline, nl, m);
      logline[strcspn(logline, "\n")] = 0;
    }
  }
}

static void il__check_fabric(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  /* NVSwitch: the nvswitch driver's proc directory, or an NVIDIA bridge function (class
   * 0x0680) on the PCI bus [inferred class]. */
  int n_switch = 0;
  char **names;
  int n;
  if (il_sysfs_list(fs, "/proc/driver/nvidia-nvswitch/devices", &names, &n) == IL_OK) {
    n_switch = n;
    il_sysfs_list_free(names, n);
  }
  if (!n_switch && il_sysfs_list(fs, "/sys/bus/pci/devices", &names, &n) == IL_OK) {
    for (int i = 0; i < n; i++) {
      char rel[300], v[32], cls[32];
      snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/vendor", names[i]);
      if (!il_sysfs_read_line(fs, rel, v, sizeof v) || strtoul(v, NULL, 16) != 0x10de) continue;
      snprintf(rel, sizeof rel, "/sys/bus/pci/devices/%s/class", names[i]);
      if (il_sysfs_read_line(fs, rel, cls, sizeof cls) && (strtoul(cls, NULL, 16) >> 8) == 0x0680) n_switch++;
    }
    il_sysfs_list_free(names, n);
  }
  il_check *c;
  if (!n_switch) {
    il__check_na(&dr->checks, "gpu.fabric", IL_VERDICT_OK, 0, "no NVSwitch: Fabric Manager not needed");
    return;
  }
  char fmv[64], logline[300];
  il__fm_version(fs, fmv, sizeof fmv, logline, sizeof logline);
  bool running = il__process_running(fs, "nv-fabricmanager");
  const char *drv = dr->kmod_version[0] ? dr->kmod_version : dr->nvml.driver_version;
  char cmd[300];
  if (drv[0]) il__distro_cmd(dr, IL_CMD_FABRICMANAGER, drv, cmd, sizeof cmd);
  else il_sysfs_copy(cmd, sizeof cmd, "install nvidia-fabricmanager of the driver's exact version, then sudo systemctl enable --now nvidia-fabricmanager");
  bool installed = fmv[0] || il_sysfs_exists(fs, "/usr/bin/nv-fabricmanager");
  if (!installed) {
    c = il__check_add(&dr->checks, "gpu.fabric", IL_VERDICT_FAIL, 12, "%d NVSwitch device%s but no Fabric Manager installed: CUDA fails with 802 "
                      "'system not yet initialized'", n_switch, n_switch == 1 ? "" : "s");
    il__check_fix(c, "%s", cmd);
  } else if ((fmv[0] && drv[0] && strcmp(fmv, drv)) || logline[0]) {
    c = il__check_add(&dr->checks, "gpu.fabric", IL_VERDICT_FAIL, 12, "Fabric Manager %s but driver %s: it starts only with the exact same version%s%s",
                      fmv[0] ? fmv : "(other version)", drv[0] ? drv : "unknown", logline[0] ? "; log: " : "", logline);
    il__check_fix(c, "%s", cmd);
  } else if (!running) {
    c = il__check_add(&dr->checks, "gpu.fabric", IL_VERDICT_FAIL, 12, "Fabric Manager %s installed but not running: CUDA fails with 802 until it does",
                      fmv[0] ? fmv : "");
    il__check_fix(c, "sudo systemctl enable --now nvidia-fabricmanager   (if it fails: journalctl -u nvidia-fabricmanager)");
  } else {
    c = il__check_add(&dr->checks, "gpu.fabric", IL_VERDICT_OK, 0, "Fabric Manager %s running for %d NVSwitch device%s", fmv[0] ? fmv : "", n_switch,
                      n_switch == 1 ? "" : "s");
  }
  il__check_ev(c, "nvswitch_devices", "%d", n_switch);
  il__check_ev(c, "fabricmanager_version", "%s", fmv[0] ? fmv : "unknown");
  il__check_ev(c, "fabricmanager", "%s", running ? "running" : "not running");
}

void il__health_checks(il_doctor *dr) {
  il__check_pcie(dr);
  il__check_xid(dr);
  il__check_remap(dr);
  il__check_persistence(dr);
  il__check_fabric(dr);
}
