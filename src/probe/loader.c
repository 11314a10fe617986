/* probe/loader: which libcuda.so.1 (and libnvidia-ml.so.1) the dynamic loader really picks,
 * found without loading anything, and the check "cuda.loader" that compares it with the
 * kernel module.
 *
 * An application loads "libcuda.so.1" by soname, so the file it gets is the first one in the
 * loader's search order (ld.so(8)): the directories of LD_LIBRARY_PATH, then the ld.so cache
 * (/etc/ld.so.cache, read below; ldconfig builds it from /etc/ld.so.conf and the
 * /etc/ld.so.conf.d/NAME.conf files it includes, which name where each directory came from and
 * stand in for a missing cache), then the default directories. A conda environment adds its lib/
 * directory through the RPATH conda-build writes into its binaries (conda-build docs, "Shared
 * libraries in macOS and Linux", quoted in deepmd-kit#650); it is listed after
 * LD_LIBRARY_PATH [inferred order]. A container image may ship its own libcuda in one of
 * those directories, which then shadows the one the NVIDIA runtime injects
 * (https://github.com/NVIDIA/nvidia-docker/issues/1256). The version comes from the name of
 * the file the soname link resolves to (libcuda.so.1 -> libcuda.so.535.54.03), so it is known
 * even when NVML or libcuda will not load.
 * Not for: loading the libraries (probe/nvml, probe/cudadrv).
 */
#include <glob.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/loader.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/elfver.h"

/* "535.54.03" from "libcuda.so.535.54.03"; "" for "libcuda.so.1" or another name. */
static void il__name_version(const char *name, const char *soname, char *buf, size_t n) {
  buf[0] = 0;
  char stem[64];
  snprintf(stem, sizeof stem, "%.*s", (int)(strlen(soname) - 1), soname); /* "libcuda.so." */
  const char *b = strrchr(name, '/');
  b = b ? b + 1 : name;
  if (strncmp(b, stem, strlen(stem))) return;
  const char *v = b + strlen(stem);
  if (!strchr(v, '.')) return;
  il_sysfs_copy(buf, n, v);
}

/* Follows symlinks of rel (sysroot-relative) up to 8 levels and returns the version in the
 * final name. */
static void il__resolve_version(const il_sysfs *fs, const char *rel, const char *soname, char *ver, size_t n, char *final, size_t nf) {
  char cur[1024];
  il_sysfs_copy(cur, sizeof cur, rel);
  for (int depth = 0; depth < 8; depth++) {
    char abs[2048], target[1024];
    if (!il_sysfs_path(fs, cur, abs, sizeof abs)) break;
    ssize_t r = readlink(abs, target, sizeof target - 1);
    if (r <= 0) break;
    target[r] = 0;
    if (target[0] == '/') il_sysfs_copy(cur, sizeof cur, target);
    else {
      char dir[1024];
      il_sysfs_copy(dir, sizeof dir, cur);
      char *s = strrchr(dir, '/');
      if (s) *s = 0;
      snprintf(cur, sizeof cur, "%.500s/%.500s", dir, target);
    }
  }
  il_sysfs_copy(final, nf, cur);
  il__name_version(cur, soname, ver, n);
}

/* The version from the library's own bytes when its name has none (probe/elfver). */
static void il__elf_version(const il_sysfs *fs, il_lib_candidate *c) {
  char abs[2048];
  il_elfver_info info;
  if (!il_sysfs_path(fs, c->target, abs, sizeof abs)) return;
  if (il_elfver_read(abs, &info) != IL_OK) {
    /* name the file as the sysroot sees it, not the host path */
    const char *d = il_error_detail();
    const char *tail = strstr(d, c->target);
    il_sysfs_copy(c->elf_note, sizeof c->elf_note, tail ? tail : d);
    return;
  }
  il_sysfs_copy(c->soname, sizeof c->soname, info.soname);
  if (!info.version[0]) {
    snprintf(c->elf_note, sizeof c->elf_note, "%.200s: no driver version string in .rodata", c->target);
    return;
  }
  il_sysfs_copy(c->version, sizeof c->version, info.version);
  c->version_elf = true;
}

static void il__add_dir(char dirs[][256], char origins[][160], int *n, int max, const char *dir, const char *origin) {
  if (*n >= max || !dir[0] || dir[0] != '/') return;
  for (int i = 0; i < *n; i++)
    if (!strcmp(dirs[i], dir)) return;
  il_sysfs_copy(dirs[*n], 256, dir);
  il_sysfs_copy(origins[*n], 160, origin);
  (*n)++;
}

/* Directories named in one ld.so.conf-style file, in order; "include" lines are followed once. */
static void il__ldconf(const il_sysfs *fs, const char *rel, char dirs[][256], char origins[][160], int *n, int max, int depth) {
  char text[8192];
  if (depth > 2 || il_sysfs_read(fs, rel, text, sizeof text, NULL) != IL_OK) return;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    while (*line == ' ' || *line == '\t') line++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    size_t l = strlen(line);
    while (l && (line[l - 1] == ' ' || line[l - 1] == '\t' || line[l - 1] == '\r')) line[--l] = 0;
    if (!l) continue;
    if (!strncmp(line, "include", 7) && (line[7] == ' ' || line[7] == '\t')) {
      const char *pat = line + 8;
      while (*pat == ' ' || *pat == '\t') pat++;
      char abs[2048];
      if (!il_sysfs_path(fs, pat, abs, sizeof abs)) continue;
      glob_t g;
      if (glob(abs, 0, NULL, &g) == 0) {
        size_t rl = strlen(fs->root);
        for (size_t i = 0; i < g.gl_pathc; i++) il__ldconf(fs, g.gl_pathv[i] + rl, dirs, origins, n, max, depth + 1);
        globfree(&g);
      }
      continue;
    }
    char origin[160];
    snprintf(origin, sizeof origin, "ld.so cache (%s)", rel);
    il__add_dir(dirs, origins, n, max, line, origin);
  }
}

/* ---- /etc/ld.so.cache ----------------------------------------------------------------------
 * The cache ldconfig writes, in glibc's "new" format (the only one glibc >= 2.32 writes):
 *   char magic[17] = "glibc-ld.so.cache"; char version[3] = "1.1";
 *   uint32 nlibs; uint32 len_strings; uint8 flags; uint8 pad[3]; uint32 extension_offset;
 *   uint32 unused[3];                                              -- 48 bytes
 *   nlibs x { int32 flags; uint32 key; uint32 value; uint32 osversion; uint64 hwcap; } -- 24 bytes
 *   then the strings; key (the soname) and value (the path) are offsets from the header start.
 * An old-format prefix ("ld.so-1.7.0", 12-byte entries) may come first; it is skipped. The
 * loader takes the first entry whose soname matches and whose flags fit this architecture, so
 * the entries' order is the search order (glibc elf/cache.c, sysdeps/generic/dl-cache.h). */
#define IL__CACHE_MAGIC "glibc-ld.so.cache1.1"

static uint32_t il__u32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* Paths of soname in the cache, in order (max entries); -1 when there is no readable cache. */
static int il__ldcache(const il_sysfs *fs, const char *soname, char paths[][512], int max) {
  const size_t cap = (size_t)4 << 20;
  unsigned char *buf = il_mem_alloc(IL_MEM_OTHER, cap, "ld.so.cache");
  if (!buf) return -1;
  size_t len = 0;
  int n = -1;
  if (il_sysfs_read(fs, "/etc/ld.so.cache", (char *)buf, cap, &len) != IL_OK) goto done;
  size_t base = 0;
  if (len >= 16 && !memcmp(buf, "ld.so-1.7.0", 11)) {
    /* Old format: 12-byte header (magic + nlibs) and 12-byte entries, then the new header. */
    uint32_t nold = il__u32(buf + 12);
    base = 16 + (size_t)nold * 12;
    base = (base + 7) & ~(size_t)7;
  }
  if (base + 48 > len || memcmp(buf + base, IL__CACHE_MAGIC, 20)) goto done;
  uint32_t nlibs = il__u32(buf + base + 20);
  if (nlibs > (len - base - 48) / 24) goto done;
  n = 0;
  for (uint32_t i = 0; i < nlibs && n < max; i++) {
    const unsigned char *e = buf + base + 48 + (size_t)i * 24;
    uint32_t flags = il__u32(e), key = il__u32(e + 4), value = il__u32(e + 8);
#if defined(__x86_64__)
    if ((flags & 0xff00) != 0x0300) continue; /* FLAG_X8664_LIB64: skip i386 and x32 entries */
#elif defined(__aarch64__)
    if ((flags & 0xff00) != 0x0a00) continue; /* FLAG_AARCH64_LIB64 */
#endif
    if (base + key >= len || base + value >= len) continue;
    const char *k = (const char *)buf + base + key, *v = (const char *)buf + base + value;
    if (!memchr(k, 0, len - base - key) || !memchr(v, 0, len - base - value)) continue;
    if (strcmp(k, soname) || v[0] != '/') continue;
    il_sysfs_copy(paths[n++], 512, v);
  }
done:
  il_mem_free(buf);
  return n;
}

int il__loader_search(const il_doctor *dr, const char *soname, il_lib_candidate *out, int max) {
  enum { MAXD = 48 };
  char dirs[MAXD][256], origins[MAXD][160];
  int nd = 0;
  const il_sysfs *fs = &dr->fs;
  const char *ld = il_sysfs_getenv(fs, "LD_LIBRARY_PATH");
  if (ld) {
    char tmp[4096];
    il_sysfs_copy(tmp, sizeof tmp, ld);
    char *save = NULL;
    for (char *d = strtok_r(tmp, ":", &save); d; d = strtok_r(NULL, ":", &save)) il__add_dir(dirs, origins, &nd, MAXD, d, "LD_LIBRARY_PATH");
  }
  const char *conda = il_sysfs_getenv(fs, "CONDA_PREFIX");
  if (conda && conda[0] == '/') {
    char d[300];
    snprintf(d, sizeof d, "%.290s/lib", conda);
    il__add_dir(dirs, origins, &nd, MAXD, d, "conda environment (CONDA_PREFIX)");
  }
  /* The ld.so cache is what the loader reads; /etc/ld.so.conf only says where each of its
   * directories came from (and stands in for a missing cache). */
  char cdirs[MAXD][256], corigins[MAXD][160];
  int ncd = 0;
  il__ldconf(fs, "/etc/ld.so.conf", cdirs, corigins, &ncd, MAXD, 0);
  char cached[8][512];
  int nc = il__ldcache(fs, soname, cached, 8);
  if (nc >= 0) {
    for (int i = 0; i < nc; i++) {
      char dir[256];
      il_sysfs_copy(dir, sizeof dir, cached[i]);
      char *sl = strrchr(dir, '/');
      if (sl) *sl = 0;
      const char *origin = dr->in_container ? "ld.so cache (system directory of the image)" : "ld.so cache (system directory)";
      for (int k = 0; k < ncd; k++)
        if (!strcmp(cdirs[k], dir)) origin = corigins[k];
      il__add_dir(dirs, origins, &nd, MAXD, dir, origin);
    }
  } else {
    for (int k = 0; k < ncd; k++) il__add_dir(dirs, origins, &nd, MAXD, cdirs[k], corigins[k]);
  }
  static const char *const defaults[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                                         "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
    il__add_dir(dirs, origins, &nd, MAXD, defaults[i], dr->in_container ? "system directory of the image" : "system directory");
  int n = 0;
  for (int i = 0; i < nd && n < max; i++) {
    char rel[512];
    snprintf(rel, sizeof rel, "%.250s/%.60s", dirs[i], soname);
    il_sysfs_stat_t st;
    il_sysfs_stat(fs, rel, true, &st);
    if (!st.exists || st.is_dir) continue;
    il_lib_candidate *c = &out[n++];
    memset(c, 0, sizeof *c);
    il_sysfs_copy(c->path, sizeof c->path, rel);
    il_sysfs_copy(c->origin, sizeof c->origin, origins[i]);
    il_sysfs_copy(c->dir, sizeof c->dir, dirs[i]);
    il__resolve_version(fs, rel, soname, c->version, sizeof c->version, c->target, sizeof c->target);
    c->stub = strstr(c->path, "/stubs") != NULL;
    if (!c->version[0] && !c->stub) il__elf_version(fs, c);
    c->compat = strstr(c->path, "/compat") != NULL || strstr(c->target, "/compat") != NULL;
  }
  return n;
}

/* The fix for a library at the wrong place, fitted to where it came from. */
static void il__fix_for_origin(il_check *c, const il_doctor *dr, const il_lib_candidate *l, const char *want) {
  const char *ld = il_sysfs_getenv(&dr->fs, "LD_LIBRARY_PATH");
  if (!strcmp(l->origin, "LD_LIBRARY_PATH")) {
    il__check_fix(c, "Remove %s from LD_LIBRARY_PATH (now: %s); the driver's own libcuda.so.1 (%s) is then found through the ld.so cache",
                  l->dir, ld ? ld : "", want);
  } else if (!strncmp(l->origin, "conda", 5)) {
    il__check_fix(c, "The conda environment carries its own driver library: rm %s/libcuda.so*   (libcuda belongs to the host driver; "
                     "conda packages must not ship it)", l->dir);
  } else if (!strncmp(l->origin, "ld.so cache (", 13) && !strstr(l->origin, "system directory")) {
    char file[160];
    il_sysfs_copy(file, sizeof file, l->origin + 13);
    file[strcspn(file, ")")] = 0;
    il__check_fix(c, "Remove the line %s from %s, then sudo ldconfig", l->dir, file);
  } else if (dr->in_container) {
    il__check_fix(c, "The image ships its own %s (%s): rebuild it without driver libraries (the NVIDIA runtime injects the host's %s), "
                     "or delete it in the image: RUN rm -f %s/libcuda.so*", l->path, l->version[0] ? l->version : "unknown version", want, l->dir);
  } else {
    char cmd[300];
    il__check_fix(c, "%s is left from another driver install: reinstall the user-space driver of version %s (%s), or remove the stale file "
                     "and run sudo ldconfig", l->path, want, il__distro_cmd(dr, IL_CMD_REINSTALL_USERSPACE, want, cmd, sizeof cmd));
  }
}

void il__loader_check(il_doctor *dr) {
  il_lib_candidate cand[8];
  int n = il__loader_search(dr, "libcuda.so.1", cand, 8);
  il_check *c;
  const char *k = dr->kmod_version;
  if (n == 0) {
    c = il__check_na(&dr->checks, "cuda.loader", IL_VERDICT_OK, 0, "no libcuda.so.1 on the loader's path%s",
                      dr->cuda.loaded ? " (loaded from an explicit path)" : "");
    return;
  }
  /* On the real machine the library that dlopen returned is the authority; the search
   * explains where it came from. */
  int pick = 0;
  if (il_sysfs_is_real(&dr->fs) && dr->cuda_loaded[0]) {
    /* realpath needs PATH_MAX bytes: with _FORTIFY_SOURCE a smaller buffer aborts the run
     * ("buffer overflow detected") on the first call, whatever the path. */
    char real[PATH_MAX];
    for (int i = 0; i < n; i++)
      if (realpath(cand[i].path, real) && !strcmp(real, dr->cuda_loaded)) pick = i;
  }
  const il_lib_candidate *l = &cand[pick];
  char others[400] = "";
  for (int i = 0; i < n; i++) {
    if (i == pick) continue;
    size_t ol = strlen(others);
    il_appendf(others, sizeof others, "%s%s (%s, %s)", ol ? "; " : "", cand[i].path, cand[i].version[0] ? cand[i].version : "version unknown",
               cand[i].origin);
  }
  const char *v = l->version;
  int cmp = v[0] && k[0] ? il_sysfs_vercmp(v, k) : 0;
  const char *consumer = NULL;
  for (int i = 0; i < dr->nvml.n_devices; i++)
    if (!dr->nvml.devices[i].handle_rc && (il_sysfs_stristr(dr->nvml.devices[i].name, "GeForce") || il_sysfs_stristr(dr->nvml.devices[i].name, "TITAN")))
      consumer = dr->nvml.devices[i].name;
  if (l->stub) {
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_FAIL, 0, "the loader picks %s (from %s): the CUDA toolkit's link-time stub, not the driver "
                      "(CUDA_ERROR_STUB_LIBRARY)", l->path, l->origin);
    il__fix_for_origin(c, dr, l, k[0] ? k : "the driver's");
  } else if (!v[0] || !k[0] || cmp == 0) {
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_OK, 0, "the loader picks %s (%s, from %s)%s", l->path,
                      v[0] ? v : "version not in its file name", l->origin, k[0] && cmp == 0 && v[0] ? ", same version as the kernel module" : "");
  } else if (cmp > 0 && l->compat && consumer) {
    /* Forward compatibility is for data-center GPUs only: error 804 on this one. */
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_FAIL, 2, "the loader picks the forward-compatibility %s (%s, from %s) on %s, which does not "
                      "support forward compatibility: CUDA fails with error 804", l->path, v, l->origin, consumer);
    il__fix_for_origin(c, dr, l, k);
  } else if (cmp > 0 && l->compat) {
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_OK, 0, "the loader picks the forward-compatibility %s (%s, from %s) on kernel module %s "
                      "(see cuda.compat)", l->path, v, l->origin, k);
  } else if (cmp > 0 && strstr(l->origin, "system directory")) {
    /* The driver packages were upgraded and the module not reloaded: driver.version_match. */
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_OK, 0, "the loader picks %s (%s, from %s), newer than kernel module %s: "
                      "an upgrade waiting for a reboot (see driver.version_match)", l->path, v, l->origin, k);
  } else {
    c = il__check_add(&dr->checks, "cuda.loader", IL_VERDICT_FAIL, 3,
                      "the loader picks %s, version %s, from %s, but the kernel module is %s: cuInit fails with 'system has unsupported "
                      "display driver / cuda driver combination' (803), and a reboot does not help", l->path, v, l->origin, k);
    il__fix_for_origin(c, dr, l, k);
  }
  il__check_ev(c, "picked", "%s", l->path);
  if (strcmp(l->target, l->path)) il__check_ev(c, "resolves_to", "%s", l->target);
  il__check_ev(c, "version", "%s", v[0] ? v : "unknown");
  if (l->version_elf) il__check_ev(c, "version_from", "the library's ELF data (its name carries no version)");
  if (l->soname[0]) il__check_ev(c, "soname", "%s", l->soname);
  if (l->elf_note[0]) il__check_ev(c, "elf", "%s", l->elf_note);
  il__check_ev(c, "origin", "%s", l->origin);
  if (k[0]) il__check_ev(c, "kernel_module", "%s", k);
  if (others[0]) il__check_ev(c, "also_on_path", "%s", others);
}

/* WSL2: the Windows driver provides libcuda and libnvidia-ml in /usr/lib/wsl/lib; a Linux
 * driver package installed inside the distribution shadows them and breaks CUDA (research
 * file scenario 24; https://github.com/microsoft/WSL/issues/9938). */
void il__loader_check_wsl(il_doctor *dr) {
  if (!dr->wsl) return;
  il_lib_candidate cand[4];
  int n = il__loader_search(dr, "libcuda.so.1", cand, 4);
  const il_lib_candidate *linux_lib = NULL;
  for (int i = 0; i < n && !linux_lib; i++)
    if (strncmp(cand[i].path, "/usr/lib/wsl/", 13)) linux_lib = &cand[i];
  il_lib_candidate ml[4];
  int nm = il__loader_search(dr, "libnvidia-ml.so.1", ml, 4);
  for (int i = 0; i < nm && !linux_lib; i++)
    if (strncmp(ml[i].path, "/usr/lib/wsl/", 13)) linux_lib = &ml[i];
  il_check *c;
  bool wsl_lib = il_sysfs_exists(&dr->fs, "/usr/lib/wsl/lib/libcuda.so.1");
  if (linux_lib) {
    c = il__check_add(&dr->checks, "wsl.driver", IL_VERDICT_FAIL, 24, "a Linux NVIDIA driver library is installed inside WSL: %s (%s, from %s); "
                      "the Windows driver's /usr/lib/wsl/lib copies must be the ones loaded", linux_lib->path,
                      linux_lib->version[0] ? linux_lib->version : "version unknown", linux_lib->origin);
    if (dr->distro.family == IL_DISTRO_UBUNTU || dr->distro.family == IL_DISTRO_DEBIAN || dr->distro.family == IL_DISTRO_UNKNOWN)
      il__check_fix(c, "Remove the Linux driver packages inside WSL: sudo apt remove --purge 'nvidia-utils-*' 'libnvidia-compute-*' 'nvidia-driver-*' && sudo ldconfig; "
                       "then in PowerShell: wsl --shutdown");
    else
      il__check_fix(c, "Remove the Linux NVIDIA driver packages inside WSL (the library at %s), run sudo ldconfig, then in PowerShell: wsl --shutdown", linux_lib->path);
  } else if (!wsl_lib) {
    c = il__check_add(&dr->checks, "wsl.driver", IL_VERDICT_FAIL, 24, "WSL2 without /usr/lib/wsl/lib/libcuda.so.1: the Windows NVIDIA driver did not provide CUDA");
    il__check_fix(c, "Install or update the NVIDIA driver on Windows, then in PowerShell: wsl --update; wsl --shutdown");
  } else {
    c = il__check_add(&dr->checks, "wsl.driver", IL_VERDICT_OK, 0, "WSL2: CUDA comes from the Windows driver (/usr/lib/wsl/lib), no Linux driver inside");
  }
  il__check_ev(c, "wsl_libcuda", "%s", wsl_lib ? "present" : "missing");
}
