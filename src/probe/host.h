/* probe/host: the CPU side of the machine, as the engine's planner needs it.
 *
 * CPU model and SIMD features (from /proc/cpuinfo, so a sysroot fixture can describe any CPU),
 * logical cores, RAM, transparent and explicit huge pages, kernel release, and a measured
 * memory read bandwidth (a short STREAM-style sum over a buffer much larger than the caches)
 * that the roofline uses as the CPU's bytes-per-second ceiling.
 * Not for: choosing kernels at run time (backend/cpu reads CPUID itself); this module reports.
 */
#ifndef IL_PROBE_HOST_H
#define IL_PROBE_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "probe/sysfs.h"

typedef struct {
  char cpu_model[128];
  char simd[160];          /* "sse4_2 avx avx2 fma f16c avx512f ..." as found */
  char cpu_backend[16];    /* "avx512", "avx2" or "scalar": what the CPU backend can use */
  bool hypervisor_flag;    /* cpuinfo "hypervisor" flag */
  int logical_cpus;
  long long ram_total, ram_available; /* bytes, -1 unknown */
  char thp[32];            /* transparent huge pages mode: "always", "madvise", "never", "" */
  long long hugepages_total; /* explicit huge pages (HugePages_Total), -1 unknown */
  long long hugepage_size;   /* bytes */
  char kernel[128];        /* /proc/sys/kernel/osrelease */
  double read_gbps;        /* measured by backend/cpu/membw on all cores; 0 when not measured */
} il_host_info;

/* Fills h from fs. Never fails: unknown fields stay empty or -1. Measures nothing. */
void il_host_probe(const il_sysfs *fs, il_host_info *h);

#endif
