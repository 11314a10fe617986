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
#include "probe/health.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/classes.h"
#include "probe/klog.h"
#include "probe/xid.h"

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

/* ---- Xid events ------------------------------------------------------------------------
 * The kernel log lines probe/klog gathered, judged by Xid number through probe/xid: application
 * faults (13, 31, 43) stay OK, corrected or contained events (63, 92, 94) warn, resets, driver/GSP
 * errors (119, 120), NVLink and hardware (48, 79, 95) fail, and 154 by the recovery action it asks
 * for. */

static void il__check_xid(il_doctor *dr) {
  il_check *c;
  if (!dr->klog || !dr->klog_len || !il_sysfs_stristr(dr->klog, "nvrm")) {
    il__check_add(&dr->checks, "gpu.xid", IL_VERDICT_OK, 0, "no NVRM lines in the readable kernel logs%s",
                  il_sysfs_is_real(&dr->fs) ? " (reading /dev/kmsg may need root)" : "");
    return;
  }
  enum { MAXEV = 256, MAXK = 24 };
  il_xid_event *ev = il_mem_alloc(IL_MEM_OTHER, sizeof *ev * MAXEV, "Xid events");
  if (!ev) {
    dr->checks.oom = true;
    return;
  }
  int n = il_xid_scan(dr->klog, ev, MAXEV);
  if (n > MAXEV) n = MAXEV;
  /* Distinct Xids with their count and last device, most severe first. */
  struct {
    int xid, count, rank;
    char pci[40], recovery[64];
  } k[MAXK];
  int nk = 0;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < nk && k[j].xid != ev[i].xid) j++;
    if (j == nk) {
      if (nk == MAXK) continue;
      memset(&k[nk], 0, sizeof k[nk]);
      k[nk].xid = ev[i].xid;
      nk++;
    }
    k[j].count++;
    if (ev[i].pci[0]) il_sysfs_copy(k[j].pci, sizeof k[j].pci, ev[i].pci);
    if (ev[i].recovery[0]) il_sysfs_copy(k[j].recovery, sizeof k[j].recovery, ev[i].recovery);
    il_xid_event tmp = ev[i];
    il_sysfs_copy(tmp.recovery, sizeof tmp.recovery, k[j].recovery);
    k[j].rank = il_xid_rank(&tmp);
  }
  il_mem_free(ev);
  for (int i = 1; i < nk; i++)
    for (int j = i; j > 0 && k[j - 1].rank < k[j].rank; j--) {
      __typeof__(k[0]) t = k[j];
      k[j] = k[j - 1];
      k[j - 1] = t;
    }
  if (!nk) {
    c = il__check_add(&dr->checks, "gpu.xid", IL_VERDICT_OK, 0, "no Xid events in %s", dr->klog_sources);
    il__check_ev(c, "log", "%s", dr->klog_sources);
    return;
  }
  char text[400] = "";
  int worst = 0;
  for (int i = 0; i < nk; i++) {
    const il_xid_info *x = il_xid_lookup(k[i].xid);
    il_appendf(text, sizeof text, "%sXid %d %s x%d (%s)", text[0] ? "; " : "", k[i].xid,
               k[i].xid == 154 && k[i].recovery[0] ? k[i].recovery : x ? x->name : "(not in the Xid table)", k[i].count,
               k[i].pci[0] ? k[i].pci : "device unknown");
    if (k[i].rank > worst) worst = k[i].rank;
  }
  /* rank: 6 hardware, 5 reset/driver/NVLink (and a 154 asking for action), 4 unknown Xid, 3 watch */
  il_verdict v = worst >= 4 ? IL_VERDICT_FAIL : worst == 3 ? IL_VERDICT_WARN : IL_VERDICT_OK;
  int cls = k[0].xid == 79 ? 10 : IL_CLASS_XID;
  c = il__check_add(&dr->checks, "gpu.xid", v, v == IL_VERDICT_OK ? 0 : cls, "%s", text);
  for (int i = 0; i < nk; i++) {
    if (k[i].rank < 3) continue;
    const il_xid_info *x = il_xid_lookup(k[i].xid);
    char act[400];
    if (k[i].xid == 154) snprintf(act, sizeof act, "the driver asks for '%s': do it (nvidia-smi -q shows the pending recovery action)", k[i].recovery);
    else if (x) il_sysfs_copy(act, sizeof act, il_xid_action(x->kind));
    else il_sysfs_copy(act, sizeof act, "not in this build's Xid table: look it up in NVIDIA's Xid catalog");
    act[0] = (char)tolower((unsigned char)act[0]);
    il__check_fix(c, "Xid %d on %s: %s", k[i].xid, k[i].pci[0] ? k[i].pci : "the GPU", act);
  }
  if (v == IL_VERDICT_OK) il__check_fix(c, "Application-level Xids only: nothing to repair in the stack; see the application's error");
  il__check_ev(c, "log", "%s", dr->klog_sources);
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
    if (il__klog_read_tail(fs, "/var/lib/dpkg/status", db, cap) > 0) {
      il__dpkg_version(db, "nvidia-fabricmanager-", true, ver, n);
    }
    il_mem_free(db);
  }
  char log[16384];
  if (il__klog_read_tail(fs, "/var/log/fabricmanager.log", log, sizeof log) > 0) {
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
