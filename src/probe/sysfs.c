/* probe/sysfs: sysroot-relative reads, the given environment and access judgement. See
 * sysfs.h. */
#include "probe/sysfs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "memory/mem.h"

char *il_sysfs_copy(char *dst, size_t n, const char *src) {
  if (!n) return dst;
  size_t l = src ? strlen(src) : 0;
  if (l >= n) l = n - 1;
  if (l) memcpy(dst, src, l);
  dst[l] = 0;
  return dst;
}

il_status il_sysfs_init(il_sysfs *fs, const char *root, char *const *env) {
  memset(fs, 0, sizeof *fs);
  if (root && strcmp(root, "/") != 0 && *root) {
    size_t l = strlen(root);
    while (l > 1 && root[l - 1] == '/') l--;
    if (l >= sizeof fs->root) return il_error(IL_ERR_INVALID_ARG, "--sysroot: path too long (%zu bytes)", l);
    memcpy(fs->root, root, l);
    fs->root[l] = 0;
  }
  fs->env = env;
  fs->uid = getuid();
  fs->gid = getgid();
  int n = getgroups(IL_SYSFS_MAX_GROUPS, fs->groups);
  if (n < 0) { /* more groups than room (EINVAL, nothing filled): read them all, keep the first */
    int all = getgroups(0, NULL);
    gid_t *g = all > 0 ? il_mem_alloc(IL_MEM_OTHER, sizeof *g * (size_t)all, "supplementary groups") : NULL;
    n = g ? getgroups(all, g) : -1;
    if (n > IL_SYSFS_MAX_GROUPS) n = IL_SYSFS_MAX_GROUPS;
    if (n > 0) memcpy(fs->groups, g, sizeof *g * (size_t)n);
    il_mem_free(g);
  }
  fs->n_groups = n < 0 ? 0 : n;
  return IL_OK;
}

bool il_sysfs_is_real(const il_sysfs *fs) { return fs->root[0] == 0; }

const char *il_sysfs_path(const il_sysfs *fs, const char *rel, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s%s", fs->root, rel);
  return (w < 0 || (size_t)w >= n) ? NULL : buf;
}

il_status il_sysfs_read(const il_sysfs *fs, const char *rel, char *buf, size_t n, size_t *len) {
  char path[2048];
  if (len) *len = 0;
  if (n) buf[0] = 0;
  if (!il_sysfs_path(fs, rel, path, sizeof path)) return il_error(IL_ERR_INVALID_ARG, "%s: path too long", rel);
  /* O_NONBLOCK: a FIFO (or a device) planted at a probed path must not block the doctor;
   * only regular files are read. O_NONBLOCK has no effect on a regular file's reads. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return il_error(IL_ERR_NOT_FOUND, "%s: not found", path);
    return il_error(IL_ERR_IO, "%s: %s", path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return il_error(IL_ERR_IO, "%s: not a regular file", path);
  }
  size_t got = 0;
  while (n && got < n - 1) {
    ssize_t r = read(fd, buf + got, n - 1 - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      buf[got] = 0;
      return il_error(IL_ERR_IO, "%s: read: %s", path, strerror(e));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (n) buf[got] = 0;
  if (len) *len = got;
  return IL_OK;
}

bool il_sysfs_read_line(const il_sysfs *fs, const char *rel, char *buf, size_t n) {
  if (il_sysfs_read(fs, rel, buf, n, NULL) != IL_OK) {
    if (n) buf[0] = 0;
    return false;
  }
  buf[strcspn(buf, "\r\n")] = 0;
  return true;
}

bool il_sysfs_loadable(const char *path, char *why, size_t n) {
  struct stat sb;
  if (!path || !strchr(path, '/') || stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return true;
  snprintf(why, n, "%s: not a regular file (refusing to load it)", path);
  return false;
}

bool il_sysfs_exists(const il_sysfs *fs, const char *rel) {
  il_sysfs_stat_t st;
  il_sysfs_stat(fs, rel, true, &st);
  return st.exists;
}

void il_sysfs_stat(const il_sysfs *fs, const char *rel, bool follow, il_sysfs_stat_t *st) {
  char path[2048];
  struct stat s;
  memset(st, 0, sizeof *st);
  if (!il_sysfs_path(fs, rel, path, sizeof path)) return;
  if ((follow ? stat(path, &s) : lstat(path, &s)) != 0) return;
  st->exists = true;
  st->is_dir = S_ISDIR(s.st_mode);
  st->is_char = S_ISCHR(s.st_mode);
  st->is_reg = S_ISREG(s.st_mode);
  st->is_link = S_ISLNK(s.st_mode);
  st->mode = (unsigned)(s.st_mode & 07777);
  st->uid = s.st_uid;
  st->gid = s.st_gid;
  if (st->is_char) {
    st->major = major(s.st_rdev);
    st->minor = minor(s.st_rdev);
  }
}

bool il_sysfs_link_name(const il_sysfs *fs, const char *rel, char *buf, size_t n) {
  char path[2048], target[2048];
  if (n) buf[0] = 0;
  if (!il_sysfs_path(fs, rel, path, sizeof path)) return false;
  ssize_t r = readlink(path, target, sizeof target - 1);
  if (r < 0) return false;
  target[r] = 0;
  const char *slash = strrchr(target, '/');
  il_sysfs_copy(buf, n, slash ? slash + 1 : target);
  return true;
}

static int il__cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

il_status il_sysfs_list(const il_sysfs *fs, const char *rel, char ***names, int *n) {
  char path[2048];
  *names = NULL;
  *n = 0;
  if (!il_sysfs_path(fs, rel, path, sizeof path)) return il_error(IL_ERR_INVALID_ARG, "%s: path too long", rel);
  DIR *d = opendir(path);
  if (!d) return IL_OK;
  int cap = 0, cnt = 0;
  char **arr = NULL;
  struct dirent *e;
  il_status st = IL_OK;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (cnt == cap) {
      int ncap = cap ? cap * 2 : 16;
      char **na = il_mem_alloc(IL_MEM_OTHER, sizeof(char *) * (size_t)ncap, "directory listing");
      if (!na) { st = IL_ERR_OOM; break; }
      if (arr) memcpy(na, arr, sizeof(char *) * (size_t)cnt);
      il_mem_free(arr);
      arr = na;
      cap = ncap;
    }
    size_t l = strlen(e->d_name) + 1;
    arr[cnt] = il_mem_alloc(IL_MEM_OTHER, l, "directory entry");
    if (!arr[cnt]) { st = IL_ERR_OOM; break; }
    memcpy(arr[cnt++], e->d_name, l);
  }
  closedir(d);
  if (st != IL_OK) {
    il_sysfs_list_free(arr, cnt);
    return st;
  }
  if (cnt > 1) qsort(arr, (size_t)cnt, sizeof *arr, il__cmp_names);
  *names = arr;
  *n = cnt;
  return IL_OK;
}

void il_sysfs_list_free(char **names, int n) {
  if (!names) return;
  for (int i = 0; i < n; i++) il_mem_free(names[i]);
  il_mem_free(names);
}

const char *il_sysfs_getenv(const il_sysfs *fs, const char *name) {
  if (!fs->env) return NULL;
  size_t l = strlen(name);
  for (char *const *e = fs->env; *e; e++)
    if (!strncmp(*e, name, l) && (*e)[l] == '=') return *e + l + 1;
  return NULL;
}

bool il_sysfs_may(const il_sysfs *fs, const il_sysfs_stat_t *st, unsigned want) {
  if (!st->exists) return false;
  if (fs->uid == 0) return true;
  unsigned bits;
  if (st->uid == fs->uid) bits = (st->mode >> 6) & 7;
  else {
    bool in_group = st->gid == fs->gid;
    for (int i = 0; i < fs->n_groups && !in_group; i++) in_group = fs->groups[i] == st->gid;
    bits = in_group ? (st->mode >> 3) & 7 : st->mode & 7;
  }
  return (bits & want) == want;
}

void il_sysfs_group_name(const il_sysfs *fs, gid_t gid, char *buf, size_t n) {
  char text[16384];
  snprintf(buf, n, "%u", (unsigned)gid);
  if (il_sysfs_read(fs, "/etc/group", text, sizeof text, NULL) != IL_OK) return;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char *c1 = strchr(line, ':');
    if (!c1) continue;
    char *c2 = strchr(c1 + 1, ':');
    if (!c2) continue;
    if ((gid_t)strtoul(c2 + 1, NULL, 10) == gid && isdigit((unsigned char)c2[1])) {
      *c1 = 0;
      il_sysfs_copy(buf, n, line);
      return;
    }
  }
}

bool il_sysfs_which(const il_sysfs *fs, const char *prog, char *buf, size_t n) {
  char dirs[4096];
  const char *path = il_sysfs_getenv(fs, "PATH");
  snprintf(dirs, sizeof dirs, "%s%s/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           path ? path : "", path && *path ? ":" : "");
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (d[0] != '/') continue;
    char rel[2048];
    snprintf(rel, sizeof rel, "%s/%s", d, prog);
    il_sysfs_stat_t st;
    il_sysfs_stat(fs, rel, true, &st);
    if (st.exists && !st.is_dir && (st.mode & 0111)) {
      il_sysfs_copy(buf, n, rel);
      return true;
    }
  }
  if (n) buf[0] = 0;
  return false;
}

const char *il_sysfs_stristr(const char *hay, const char *needle) {
  if (!hay || !needle) return NULL;
  size_t nl = strlen(needle);
  if (!nl) return hay;
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < nl && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == nl) return hay;
  }
  return NULL;
}

bool il_sysfs_field(const char *text, const char *key, char *buf, size_t n) {
  size_t kl = strlen(key);
  const char *p = text;
  while (p && *p) {
    if (!strncmp(p, key, kl)) {
      const char *v = p + kl;
      while (*v == ' ' || *v == '\t' || *v == ':' || *v == '=') v++;
      size_t l = strcspn(v, "\n");
      while (l && (v[l - 1] == ' ' || v[l - 1] == '\t' || v[l - 1] == '\r')) l--;
      if (l >= n) l = n - 1;
      memcpy(buf, v, l);
      buf[l] = 0;
      return true;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (n) buf[0] = 0;
  return false;
}

int il_sysfs_vercmp(const char *a, const char *b) {
  while (*a || *b) {
    char *ea, *eb;
    const long x = strtol(a, &ea, 10), y = strtol(b, &eb, 10);
    a = ea;
    b = eb;
    if (x != y) return x < y ? -1 : 1;
    if (*a == '.') a++;
    else if (*a) break;
    if (*b == '.') b++;
    else if (*b) break;
  }
  return 0;
}

bool il_sysfs_find_below(const il_sysfs *fs, const char *rel, const char *prefix, int maxdepth) {
  char **names;
  int n;
  if (maxdepth < 0 || il_sysfs_list(fs, rel, &names, &n) != IL_OK) return false;
  bool found = false;
  size_t pl = strlen(prefix);
  for (int i = 0; i < n && !found; i++) {
    if (!strncmp(names[i], prefix, pl)) found = true;
    else if (!strchr(names[i], '.')) {
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", rel, names[i]);
      il_sysfs_stat_t st;
      il_sysfs_stat(fs, sub, false, &st);
      if (st.is_dir) found = il_sysfs_find_below(fs, sub, prefix, maxdepth - 1);
    }
  }
  il_sysfs_list_free(names, n);
  return found;
}

bool il_sysfs_next_line(const char **cur, char *buf, size_t n) {
  const char *p = *cur;
  if (!p || !*p) return false;
  size_t l = strcspn(p, "\n");
  size_t bl = l < n - 1 ? l : n - 1;
  memcpy(buf, p, bl);
  buf[bl] = 0;
  *cur = p + l + (p[l] ? 1 : 0);
  return true;
}
