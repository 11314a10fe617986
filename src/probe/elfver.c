/* probe/elfver: driver version and SONAME from a library's ELF file. See elfver.h. */
#include "probe/elfver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memory/mem.h"
#include "probe/sysfs.h" /* il_sysfs_vercmp: 535.261.03 > 535.86.06, group by group */

#define IL_ELFVER_MAX_SECTIONS 4096
#define IL_ELFVER_MAX_RODATA ((uint64_t)256 << 20)
#define IL_ELFVER_CHUNK ((size_t)1 << 20)
#define IL_ELFVER_MAX_DISTINCT 64 /* a real 535 libcuda holds 11; the table only grows */

/* ---- version-shaped strings ------------------------------------------------------------ */

typedef struct {
  char s[IL_ELFVER_MAX_DISTINCT][16];
  int bare[IL_ELFVER_MAX_DISTINCT];  /* times seen as a whole NUL-delimited string */
  int named[IL_ELFVER_MAX_DISTINCT]; /* times seen inside a name: "x.so.V", "-V-rc" */
  int n;
} il__tally;

/* "535.54.03", "570.144": three digits, then one or two groups of 1-3 digits after a dot. */
static bool il__version_shaped(const char *s, size_t len) {
  if (len < 5 || len > 11) return false;
  for (int i = 0; i < 3; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  if (s[0] == '0') return false;
  size_t i = 3;
  int groups = 0;
  while (i < len) {
    if (s[i] != '.') return false;
    size_t d = ++i;
    while (i < len && s[i] >= '0' && s[i] <= '9') i++;
    if (i - d < 1 || i - d > 3) return false;
    groups++;
  }
  return groups >= 1 && groups <= 2;
}

static void il__tally_add(il__tally *t, const char *s, size_t len, bool named) {
  int i = 0;
  while (i < t->n && !(strlen(t->s[i]) == len && !memcmp(t->s[i], s, len))) i++;
  if (i == t->n) {
    if (t->n == IL_ELFVER_MAX_DISTINCT) return;
    memcpy(t->s[i], s, len);
    t->s[i][len] = 0;
    t->n++;
  }
  if (named) t->named[i]++;
  else t->bare[i]++;
}

/* One NUL-terminated string s[0..len): a bare version, or names that carry one at their end
 * ("libnvidia-pkcs11.so.535.261.03") or before "-rc" (".../nvidia-application-profiles-535.261.03-rc:..."). */
static void il__tally_string(il__tally *t, const char *s, size_t len) {
  if (il__version_shaped(s, len)) {
    il__tally_add(t, s, len, false);
    return;
  }
  for (size_t j = 0; j + 5 < len; j++) {
    if (s[j] == '.' && !memcmp(s + j, ".so.", 4) && il__version_shaped(s + j + 4, len - j - 4)) il__tally_add(t, s + j + 4, len - j - 4, true);
    if (s[j] != '-') continue;
    size_t e = j + 1;
    while (e < len && e - j <= 12 && ((s[e] >= '0' && s[e] <= '9') || s[e] == '.')) e++;
    if (len - e >= 3 && !memcmp(s + e, "-rc", 3) && il__version_shaped(s + j + 1, e - j - 1)) il__tally_add(t, s + j + 1, e - j - 1, true);
  }
}

/* Every run buf[a..b) with buf[b] == 0 and (a == 0 or buf[a-1] == 0); a run that reaches the
 * end of buf without a NUL is not counted (the caller rescans it with what follows). Returns
 * the index of the last NUL in buf, or n when there is none. */
static size_t il__tally_scan(il__tally *t, const char *buf, size_t n) {
  size_t start = 0, last_nul = n;
  for (size_t i = 0; i < n; i++) {
    if (buf[i]) continue;
    if (i > start) il__tally_string(t, buf + start, i - start);
    start = i + 1;
    last_nul = i;
  }
  return last_nul;
}

/* The library's own version (the rule in elfver.h): the highest one seen inside a name, else
 * the highest bare one. */
static int il__tally_best(const il__tally *t, char *out, size_t nout) {
  if (nout) out[0] = 0;
  int best = -1;
  for (int i = 0; i < t->n; i++) {
    if (best < 0) {
      best = i;
      continue;
    }
    bool named = t->named[i] > 0, best_named = t->named[best] > 0;
    if (named != best_named ? named : il_sysfs_vercmp(t->s[i], t->s[best]) > 0) best = i;
  }
  if (best >= 0 && nout) snprintf(out, nout, "%s", t->s[best]);
  return t->n;
}

int il_elfver_scan(const char *buf, size_t n, char *out, size_t nout) {
  il__tally t = {0};
  il__tally_scan(&t, buf, n);
  return il__tally_best(&t, out, nout);
}

/* ---- the ELF file ---------------------------------------------------------------------- */

typedef struct {
  const char *path;
  int fd;
  uint64_t size;
} il__file;

static uint16_t il__u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t il__u32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t il__u64(const unsigned char *p) { return (uint64_t)il__u32(p) | (uint64_t)il__u32(p + 4) << 32; }

/* True when [off, off + len) lies inside the file (no overflow). */
static bool il__inside(const il__file *f, uint64_t off, uint64_t len) { return off <= f->size && len <= f->size - off; }

/* Reads exactly len bytes at off, which the caller has checked with il__inside. */
static il_status il__pread(const il__file *f, uint64_t off, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(f->fd, (char *)buf + got, len - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return il_error(IL_ERR_IO, "%s: offset %llu: read failed: %s", f->path, (unsigned long long)(off + got), r < 0 ? strerror(errno) : "file shrank");
    got += (size_t)r;
  }
  return IL_OK;
}

typedef struct {
  uint32_t name, type, link;
  uint64_t offset, size;
} il__shdr;

static il_status il__section(const il__file *f, uint64_t shoff, unsigned i, il__shdr *s) {
  unsigned char b[64];
  uint64_t at = shoff + (uint64_t)i * 64;
  IL_TRY(il__pread(f, at, b, sizeof b));
  s->name = il__u32(b);
  s->type = il__u32(b + 4);
  s->offset = il__u64(b + 24);
  s->size = il__u64(b + 32);
  s->link = il__u32(b + 40);
  if (s->type != 8 /* SHT_NOBITS */ && !il__inside(f, s->offset, s->size))
    return il_error(IL_ERR_FORMAT, "%s: offset %llu: section %u (offset %llu, %llu bytes) runs past the end of the file (%llu bytes)", f->path,
                    (unsigned long long)at, i, (unsigned long long)s->offset, (unsigned long long)s->size, (unsigned long long)f->size);
  return IL_OK;
}

/* The NUL-terminated string at index idx of string table s, into out (at most 127 bytes read). */
static il_status il__strtab(const il__file *f, const il__shdr *s, uint64_t idx, char *out, size_t n) {
  out[0] = 0;
  if (s->type != 3 /* SHT_STRTAB */) return il_error(IL_ERR_FORMAT, "%s: offset %llu: not a string table", f->path, (unsigned long long)s->offset);
  if (idx >= s->size) return il_error(IL_ERR_FORMAT, "%s: offset %llu: string index %llu outside its table (%llu bytes)", f->path,
                                      (unsigned long long)s->offset, (unsigned long long)idx, (unsigned long long)s->size);
  uint64_t left = s->size - idx;
  size_t want = left < n ? (size_t)left : n;
  char buf[128];
  if (want > sizeof buf) want = sizeof buf;
  IL_TRY(il__pread(f, s->offset + idx, buf, want));
  size_t l = strnlen(buf, want);
  if (l == want) return il_error(IL_ERR_FORMAT, "%s: offset %llu: unterminated string", f->path, (unsigned long long)(s->offset + idx));
  memcpy(out, buf, l + 1);
  return IL_OK;
}

static il_status il__soname(const il__file *f, uint64_t shoff, unsigned shnum, const il__shdr *dyn, char *out, size_t n) {
  if (dyn->link >= shnum) return il_error(IL_ERR_FORMAT, "%s: offset %llu: .dynamic links to section %u of %u", f->path, (unsigned long long)dyn->offset, dyn->link, shnum);
  il__shdr str;
  IL_TRY(il__section(f, shoff, dyn->link, &str));
  for (uint64_t at = 0; at + 16 <= dyn->size && at < 16 * 4096; at += 16) {
    unsigned char e[16];
    IL_TRY(il__pread(f, dyn->offset + at, e, sizeof e));
    uint64_t tag = il__u64(e), val = il__u64(e + 8);
    if (tag == 0) break;
    if (tag == 14 /* DT_SONAME */) return il__strtab(f, &str, val, out, n);
  }
  return IL_OK;
}

static il_status il__rodata_version(const il__file *f, const il__shdr *ro, il_elfver_info *out) {
  uint64_t size = ro->size < IL_ELFVER_MAX_RODATA ? ro->size : IL_ELFVER_MAX_RODATA;
  char *buf = il_mem_alloc(IL_MEM_OTHER, IL_ELFVER_CHUNK, "elf .rodata piece");
  if (!buf) return il_error(IL_ERR_OOM, "%s: no memory to read .rodata", f->path);
  il__tally t = {0};
  il_status st = IL_OK;
  uint64_t pos = 0;
  while (pos < size) {
    size_t len = size - pos < IL_ELFVER_CHUNK ? (size_t)(size - pos) : IL_ELFVER_CHUNK;
    if ((st = il__pread(f, ro->offset + pos, buf, len)) != IL_OK) break;
    size_t last = il__tally_scan(&t, buf, len);
    /* Restart at the last NUL so a string cut by the piece's end is read whole next time. */
    pos += (last == len || last == 0 || pos + len == size) ? len : last;
  }
  il_mem_free(buf);
  out->n_versions = il__tally_best(&t, out->version, sizeof out->version);
  return st;
}

il_status il_elfver_read(const char *path, il_elfver_info *out) {
  memset(out, 0, sizeof *out);
  il__file f = {path, -1, 0};
  f.fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO planted at the path must not block */
  if (f.fd < 0) return il_error(errno == ENOENT ? IL_ERR_NOT_FOUND : IL_ERR_IO, "%s: %s", path, strerror(errno));
  il_status st = IL_OK;
  struct stat sb;
  unsigned char eh[64];
  if (fstat(f.fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = il_error(IL_ERR_IO, "%s: not a regular file", path);
    goto done;
  }
  f.size = (uint64_t)sb.st_size;
  if (f.size >= sizeof eh && (st = il__pread(&f, 0, eh, sizeof eh)) != IL_OK) goto done;
  if (f.size < sizeof eh || memcmp(eh, "\x7f" "ELF", 4)) {
    st = il_error(IL_ERR_FORMAT, "%s: offset 0: not an ELF file", path);
    goto done;
  }
  if (eh[4] != 2 || eh[5] != 1) {
    st = il_error(IL_ERR_FORMAT, "%s: offset 4: ELF class %u, data %u: only 64-bit little-endian libraries are read", path, eh[4], eh[5]);
    goto done;
  }
  uint64_t shoff = il__u64(eh + 40);
  unsigned shentsize = il__u16(eh + 58), shnum = il__u16(eh + 60), shstrndx = il__u16(eh + 62);
  if (shnum == 0) {
    st = il_error(IL_ERR_FORMAT, "%s: offset 60: no section headers", path);
    goto done;
  }
  if (shentsize != 64 || shnum > IL_ELFVER_MAX_SECTIONS || !il__inside(&f, shoff, (uint64_t)shnum * 64) || shstrndx >= shnum) {
    st = il_error(IL_ERR_FORMAT, "%s: offset 40: section header table (offset %llu, %u entries of %u bytes, names in %u) does not fit the file (%llu bytes)",
                  path, (unsigned long long)shoff, shnum, shentsize, shstrndx, (unsigned long long)f.size);
    goto done;
  }
  il__shdr names, s, dyn = {0}, ro = {0};
  bool have_dyn = false, have_ro = false;
  if ((st = il__section(&f, shoff, shstrndx, &names)) != IL_OK) goto done;
  for (unsigned i = 0; i < shnum; i++) {
    if ((st = il__section(&f, shoff, i, &s)) != IL_OK) goto done;
    if (s.type == 6 /* SHT_DYNAMIC */ && !have_dyn) dyn = s, have_dyn = true;
    if (s.type != 1 /* SHT_PROGBITS */ || have_ro) continue;
    char nm[32];
    if ((st = il__strtab(&f, &names, s.name, nm, sizeof nm)) != IL_OK) goto done;
    if (!strcmp(nm, ".rodata")) ro = s, have_ro = true;
  }
  if (have_dyn && (st = il__soname(&f, shoff, shnum, &dyn, out->soname, sizeof out->soname)) != IL_OK) goto done;
  if (have_ro) st = il__rodata_version(&f, &ro, out);
done:
  close(f.fd);
  return st;
}
