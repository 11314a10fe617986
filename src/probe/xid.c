/* probe/xid: the Xid table and the scanner. See xid.h. */
#include "probe/xid.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "probe/sysfs.h"

static const il_xid_info il__xids[] = {
    {8, IL_XID_APP, "GPU stopped processing"},
    {9, IL_XID_DRIVER, "Driver error programming GPU"},
    {11, IL_XID_APP, "Invalid or corrupted push buffer stream"},
    {12, IL_XID_DRIVER, "Driver error handling GPU exception"},
    {13, IL_XID_APP, "Graphics Engine Exception"},
    {16, IL_XID_WATCH, "Display engine hung"},
    {18, IL_XID_RESET, "Bus mastering disabled in PCI Config Space"},
    {19, IL_XID_WATCH, "Display Engine error"},
    {24, IL_XID_APP, "GPU semaphore timeout"},
    {26, IL_XID_RESET, "Framebuffer timeout"},
    {27, IL_XID_RESET, "Video processor exception"},
    {28, IL_XID_RESET, "Video processor exception"},
    {29, IL_XID_RESET, "Video processor exception"},
    {30, IL_XID_RESET, "GPU semaphore access error"},
    {31, IL_XID_APP, "GPU memory page fault (MMU fault)"},
    {32, IL_XID_RESET, "Invalid or corrupted push buffer stream"},
    {33, IL_XID_RESET, "Internal micro-controller error"},
    {34, IL_XID_RESET, "Video processor exception"},
    {35, IL_XID_RESET, "Video processor exception"},
    {36, IL_XID_RESET, "Video processor exception"},
    {37, IL_XID_DRIVER, "Driver firmware error"},
    {38, IL_XID_DRIVER, "Driver firmware error"},
    {42, IL_XID_RESET, "Video processor exception"},
    {43, IL_XID_APP, "GPU stopped processing (reset channel)"},
    {44, IL_XID_RESET, "Graphics Engine fault during context switch"},
    {45, IL_XID_INFO, "Preemptive cleanup, due to previous errors"},
    {46, IL_XID_RESET, "GPU stopped processing"},
    {47, IL_XID_RESET, "Video processor exception"},
    {48, IL_XID_HW, "Double Bit ECC Error (DBE)"},
    {54, IL_XID_HW, "Auxiliary power is not connected to the GPU board"},
    {56, IL_XID_WATCH, "Display Engine error"},
    {57, IL_XID_HW, "Error programming video memory interface"},
    {58, IL_XID_HW, "Unstable video memory interface detected"},
    {59, IL_XID_RESET, "Internal micro-controller error (older drivers)"},
    {60, IL_XID_RESET, "Video processor exception"},
    {61, IL_XID_RESET, "Internal micro-controller breakpoint/warning"},
    {62, IL_XID_RESET, "Internal micro-controller halt"},
    {63, IL_XID_WATCH, "ECC page retirement or row remapping recording event"},
    {64, IL_XID_HW, "ECC page retirement or row remapper recording failure"},
    {65, IL_XID_RESET, "Video processor exception"},
    {66, IL_XID_DRIVER, "Illegal access by driver"},
    {67, IL_XID_DRIVER, "Illegal access by driver"},
    {68, IL_XID_RESET, "NVDEC0 Exception"},
    {69, IL_XID_RESET, "Graphics Engine class error"},
    {74, IL_XID_NVLINK, "NVLink error"},
    {78, IL_XID_RESET, "vGPU Start Error"},
    {79, IL_XID_HW, "GPU has fallen off the bus"},
    {80, IL_XID_HW, "Corrupted data sent to GPU"},
    {81, IL_XID_HW, "VGA Subsystem Error"},
    {92, IL_XID_WATCH, "High single-bit ECC error rate"},
    {93, IL_XID_WATCH, "Non-fatal violation of provisioned InfoROM wear limit"},
    {94, IL_XID_WATCH, "Contained ECC error"},
    {95, IL_XID_RESET, "Uncontained ECC error"},
    {109, IL_XID_APP, "Context Switch Timeout Error"},
    {110, IL_XID_RESET, "Security Fault Error"},
    {119, IL_XID_DRIVER, "GSP RPC Timeout"},
    {120, IL_XID_DRIVER, "GSP Error"},
    {121, IL_XID_HW, "C2C Link Error"},
    {122, IL_XID_RESET, "SPI PMU RPC Read Failure"},
    {123, IL_XID_RESET, "SPI PMU RPC Write Failure"},
    {124, IL_XID_RESET, "SPI PMU RPC Erase Failure"},
    {125, IL_XID_HW, "Inforom FS Failure"},
    {137, IL_XID_APP, "NVLink FLA privilege error"},
    {140, IL_XID_HW, "Unrecovered ECC Error"},
    {142, IL_XID_HW, "Unrecovered ECC Error"},
    {143, IL_XID_HW, "GPU Initialization Failure"},
    {144, IL_XID_NVLINK, "NVLink: SAW Error"},
    {145, IL_XID_NVLINK, "NVLink: RLW Error"},
    {146, IL_XID_NVLINK, "NVLink: TLW Error"},
    {147, IL_XID_NVLINK, "NVLink: TREX Error"},
    {148, IL_XID_NVLINK, "NVLink: NVLPW_CTRL Error"},
    {149, IL_XID_NVLINK, "NVLink: NETIR Error"},
    {150, IL_XID_NVLINK, "NVLink: MSE Error"},
    {151, IL_XID_RESET, "Key rotation Error"},
    {154, IL_XID_INFO, "GPU Recovery Action Changed"},
    {155, IL_XID_NVLINK, "NVLink: SW Defined Error"},
    {156, IL_XID_RESET, "Resource Retirement Event"},
    {157, IL_XID_HW, "Resource Retirement Failure"},
    {158, IL_XID_RESET, "GPU Fatal Timeout"},
    {159, IL_XID_HW, "CHI Non-Data Error"},
    {160, IL_XID_WATCH, "Channel Retirement Event"},
    {161, IL_XID_HW, "Channel Retirement Failure"},
    {162, IL_XID_WATCH, "Power Smoothing HW Circuitry capability reengaged"},
    {163, IL_XID_WATCH, "Power Smoothing HW Circuitry capability disengaged"},
    {164, IL_XID_WATCH, "Power Smoothing HW Circuitry low lifetime reached"},
    {165, IL_XID_WATCH, "Power Smoothing HW Circuitry lifetime exhausted"},
    {166, IL_XID_RESET, "CC traffic seen before the link was configured for encrypted traffic"},
    {167, IL_XID_HW, "PCIe fatal timeout"},
    {168, IL_XID_RESET, "Errors found in WPR (write protected region)"},
    {169, IL_XID_RESET, "Internal micro-controller halt"},
    {170, IL_XID_APP, "Interrupt seen in CC mode"},
    {171, IL_XID_HW, "Details of an Xid 48 (DRAM/SRAM)"},
    {172, IL_XID_HW, "Details of an Xid 48 (DRAM/SRAM)"},
    {173, IL_XID_HW, "C2C Fatal Link Failure"},
};

const il_xid_info *il_xid_lookup(int n) {
  for (size_t i = 0; i < sizeof il__xids / sizeof il__xids[0]; i++)
    if (il__xids[i].xid == n) return &il__xids[i];
  return NULL;
}

const char *il_xid_kind_name(il_xid_kind k) {
  switch (k) {
    case IL_XID_APP: return "application fault";
    case IL_XID_INFO: return "informational";
    case IL_XID_WATCH: return "corrected or contained";
    case IL_XID_RESET: return "GPU needs a reset";
    case IL_XID_DRIVER: return "driver or firmware error";
    case IL_XID_NVLINK: return "NVLink error";
    case IL_XID_HW: return "hardware fault";
  }
  return "unknown";
}

const char *il_xid_action(il_xid_kind k) {
  switch (k) {
    case IL_XID_APP:
      return "The application made the GPU fault (an invalid address, an illegal instruction, a hang): fix or restart it "
             "(compute-sanitizer / CUDA_LAUNCH_BLOCKING=1 to find the kernel); the GPU and the driver are fine unless it "
             "repeats across applications on the same GPU";
    case IL_XID_INFO: return "Informational: it follows another event; act on the Xid before it";
    case IL_XID_WATCH:
      return "Corrected or contained by the GPU: restart the affected application; reset the GPU when idle "
             "(nvidia-smi -r -i N) and watch the rate; RMA when it keeps growing";
    case IL_XID_RESET: return "Stop the GPU's work and reset it (nvidia-smi -r -i N), or reboot the node; report it if it repeats";
    case IL_XID_DRIVER:
      return "Driver or GSP firmware error: reset the GPU or reboot; if it repeats, update the driver (GSP timeouts were "
             "fixed in several branches) or, on the proprietary module, try NVreg_EnableGpuFirmware=0";
    case IL_XID_NVLINK: return "Check NVLink bridges/cables and the NVSwitch (Fabric Manager log), reset the GPUs; report it if it repeats";
    case IL_XID_HW:
      return "Drain the node, power-cycle it; check power cabling, cooling, seating and SBIOS; run field diagnostics and RMA "
             "if it repeats";
  }
  return "";
}

static int il__kind_rank(il_xid_kind k) {
  switch (k) {
    case IL_XID_HW: return 6;
    case IL_XID_RESET: case IL_XID_DRIVER: case IL_XID_NVLINK: return 5;
    case IL_XID_WATCH: return 3;
    case IL_XID_APP: return 2;
    case IL_XID_INFO: return 1;
  }
  return 0;
}

int il_xid_rank(const il_xid_event *e) {
  if (e->xid == 154) {
    /* The action the driver asks for: "None" means nothing to do. */
    return !e->recovery[0] || il_sysfs_stristr(e->recovery, "none") ? 1 : 5;
  }
  const il_xid_info *x = il_xid_lookup(e->xid);
  return x ? il__kind_rank(x->kind) : 4; /* an Xid the table does not know: take it seriously */
}

/* Appends an event (counting it even when out is full). */
static void il__push(il_xid_event *out, int max, int *n, int xid, const char *pci, size_t pl, const char *recovery) {
  if (*n < max) {
    il_xid_event *e = &out[*n];
    memset(e, 0, sizeof *e);
    e->xid = xid;
    if (pci) {
      if (pl >= sizeof e->pci) pl = sizeof e->pci - 1;
      memcpy(e->pci, pci, pl);
    }
    if (recovery) il_sysfs_copy(e->recovery, sizeof e->recovery, recovery);
  }
  (*n)++;
}

/* "to 0x2 (Node Reboot Required)" in a 154 line: the text in the last parentheses after "to". */
static void il__recovery(const char *line, size_t l, char *buf, size_t n) {
  buf[0] = 0;
  const char *to = NULL;
  for (size_t i = 0; i + 4 < l; i++)
    if (!strncmp(line + i, " to 0x", 6) || !strncmp(line + i, " to (", 5)) to = line + i;
  if (!to) return;
  const char *open = memchr(to, '(', (size_t)(line + l - to));
  const char *close = open ? memchr(open, ')', (size_t)(line + l - open)) : NULL;
  if (!close) return;
  size_t k = (size_t)(close - open - 1);
  if (k >= n) k = n - 1;
  memcpy(buf, open + 1, k);
  buf[k] = 0;
}

int il_xid_scan(const char *text, il_xid_event *out, int max) {
  int n = 0;
  if (!text) return 0;
  char buf[2048];
  for (const char *line = text; il_sysfs_next_line(&line, buf, sizeof buf);) {
    /* Kernel form: "Xid (PCI:0000:01:00): 79," or "Xid (0000:03:00): 14,". */
    const char *x = il_sysfs_stristr(buf, "xid (");
    const char *cause = il_sysfs_stristr(buf, "caused by previous xid ");
    char rec[64] = "";
    if (x) {
      const char *close = strstr(x, "): ");
      if (close) {
        int xid = atoi(close + 3);
        const char *pci = x + 5;
        if (cause) xid = atoi(cause + 23);
        if (xid == 154) il__recovery(buf, strlen(buf), rec, sizeof rec);
        if (xid > 0) il__push(out, max, &n, xid, pci, (size_t)(close - pci), rec);
      }
    } else if (cause) {
      il__push(out, max, &n, atoi(cause + 23), NULL, 0, NULL);
    } else {
      /* Prose: "Xid 79", "XID 31", "Xid error 79", "xid=79"; not "Xid 154 linkage"-style table text. */
      for (const char *p = buf; (p = il_sysfs_stristr(p, "xid")) != NULL; p += 3) {
        if (p > buf && isalnum((unsigned char)p[-1])) continue;
        const char *q = p + 3;
        if (!strncasecmp(q, " error", 6)) q += 6;
        while (*q == ' ' || *q == '=' || *q == ':' || *q == '#') q++;
        if (!isdigit((unsigned char)*q)) continue;
        int xid = atoi(q);
        if (xid == 154) il__recovery(buf, strlen(buf), rec, sizeof rec);
        if (xid > 0 && xid < 1000) il__push(out, max, &n, xid, NULL, 0, rec);
        break;
      }
      /* The driver's words for numbered events. */
      if (il_sysfs_stristr(buf, "fallen off the bus")) il__push(out, max, &n, 79, NULL, 0, NULL);
      else if (il_sysfs_stristr(buf, "timeout waiting for rpc from gsp") || il_sysfs_stristr(buf, "gsp timeout") ||
               il_sysfs_stristr(buf, "_kgsplogrpctimeout") || il_sysfs_stristr(buf, "waiting for rpc response from gpu"))
        il__push(out, max, &n, 119, NULL, 0, NULL);
      else if (il_sysfs_stristr(buf, "gpu recovery action changed")) {
        il__recovery(buf, strlen(buf), rec, sizeof rec);
        il__push(out, max, &n, 154, NULL, 0, rec);
      }
    }
  }
  return n;
}
