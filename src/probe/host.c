/* probe/host: CPU, memory, huge pages, kernel and a read-bandwidth measurement. See host.h. */
#include "probe/host.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/mem.h"

static bool il__has_flag(const char *flags, const char *f) {
  size_t l = strlen(f);
  for (const char *p = flags; (p = strstr(p, f)) != NULL; p += l) {
    bool start = p == flags || p[-1] == ' ' || p[-1] == '\t';
    bool end = p[l] == 0 || p[l] == ' ' || p[l] == '\n';
    if (start && end) return true;
  }
  return false;
}

static long long il__meminfo_kb(const char *text, const char *key) {
  char v[64];
  if (!il_sysfs_field(text, key, v, sizeof v)) return -1;
  long long kb = strtoll(v, NULL, 10);
  return kb >= 0 && kb <= LLONG_MAX / 1024 ? kb : -1; /* callers multiply by 1024 */
}

void il_host_probe(const il_sysfs *fs, il_host_info *h) {
  memset(h, 0, sizeof *h);
  h->ram_total = h->ram_available = h->hugepages_total = -1;
  /* cpuinfo is repeated per CPU; the first block gives model and flags, "processor" lines count. */
  const size_t cap = (size_t)1 << 20;
  char *owned = il_mem_alloc(IL_MEM_OTHER, cap, "/proc/cpuinfo");
  const char *cpuinfo = owned ? owned : "";
  if (owned) il_sysfs_read(fs, "/proc/cpuinfo", owned, cap, NULL); /* absent or empty: "" */
  il_sysfs_field(cpuinfo, "model name", h->cpu_model, sizeof h->cpu_model);
  char flags[4096];
  if (!il_sysfs_field(cpuinfo, "flags", flags, sizeof flags)) il_sysfs_field(cpuinfo, "Features", flags, sizeof flags);
  static const char *const interesting[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                            "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                                            "neon", "asimd", NULL};
  for (int i = 0; interesting[i]; i++) {
    if (!il__has_flag(flags, interesting[i])) continue;
    size_t l = strlen(h->simd);
    snprintf(h->simd + l, sizeof h->simd - l, "%s%s", l ? " " : "", interesting[i]);
  }
  h->hypervisor_flag = il__has_flag(flags, "hypervisor");
  if (il__has_flag(flags, "avx512f") && il__has_flag(flags, "avx512bw") && il__has_flag(flags, "avx512vl"))
    strcpy(h->cpu_backend, "avx512");
  else if (il__has_flag(flags, "avx2") && il__has_flag(flags, "fma"))
    strcpy(h->cpu_backend, "avx2");
  else
    strcpy(h->cpu_backend, "scalar");
  for (const char *p = cpuinfo; (p = strstr(p, "processor")) != NULL; p++)
    if (p == cpuinfo || p[-1] == '\n') h->logical_cpus++;
  il_mem_free(owned); /* freed whether or not the file had content */

  char meminfo[8192];
  if (il_sysfs_read(fs, "/proc/meminfo", meminfo, sizeof meminfo, NULL) == IL_OK) {
    long long kb = il__meminfo_kb(meminfo, "MemTotal:");
    if (kb >= 0) h->ram_total = kb * 1024;
    kb = il__meminfo_kb(meminfo, "MemAvailable:");
    if (kb >= 0) h->ram_available = kb * 1024;
    h->hugepages_total = il__meminfo_kb(meminfo, "HugePages_Total:");
    kb = il__meminfo_kb(meminfo, "Hugepagesize:");
    h->hugepage_size = kb > 0 ? kb * 1024 : 0;
  }
  char thp[128];
  if (il_sysfs_read_line(fs, "/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp)) {
    /* "always [madvise] never": the bracketed word is the mode in force */
    char *a = strchr(thp, '['), *b = a ? strchr(a, ']') : NULL;
    if (a && b) {
      *b = 0;
      il_sysfs_copy(h->thp, sizeof h->thp, a + 1);
    }
  }
  il_sysfs_read_line(fs, "/proc/sys/kernel/osrelease", h->kernel, sizeof h->kernel);
}


