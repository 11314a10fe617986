/* probe/sysfs: the view of the machine every doctor probe reads through.
 *
 * A probe never opens "/proc/..." or calls getenv() directly. It asks an il_sysfs for a path
 * relative to the sysroot (`--sysroot DIR`, default "/"), for an environment variable from the
 * environment it was given, and for the identity (uid, gid, groups) access is judged for. The
 * real command fills it from the running process; tests fill it with a temporary directory
 * tree, a hand-written environment and a made-up user, so every check can be exercised without
 * a GPU and without root.
 *
 * Inside a sysroot other than "/", a regular file stands in for a device node (tests cannot
 * create character devices without root); its mode bits and owner are judged the same way.
 * Not for: parsing any particular file format (the checks do that), or writing anything.
 */
#ifndef IL_PROBE_SYSFS_H
#define IL_PROBE_SYSFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/status.h"

/* supplementary groups kept (directory-service users can have hundreds; Linux allows 65536) */
#define IL_SYSFS_MAX_GROUPS 1024

typedef struct {
  char root[1024];   /* sysroot without trailing slash; "" means the real root */
  char *const *env;  /* borrowed NULL-terminated "KEY=VALUE" array; NULL = empty env */
  uid_t uid;         /* identity that access is judged for */
  gid_t gid;
  gid_t groups[IL_SYSFS_MAX_GROUPS];
  int n_groups;
} il_sysfs;

typedef struct {
  bool exists;
  bool is_dir, is_char, is_reg, is_link;
  unsigned mode; /* permission bits (07777) */
  uid_t uid;
  gid_t gid;
  unsigned major, minor; /* for character devices */
} il_sysfs_stat_t;

/* Fills fs for sysroot `root` (NULL or "/" = the real root) and `env` (borrowed, must outlive
 * fs). The identity is the calling process's; change the fields afterwards to judge for
 * another user. Returns IL_ERR_INVALID_ARG when root is too long. */
il_status il_sysfs_init(il_sysfs *fs, const char *root, char *const *env);
/* True when fs looks at the real machine (root "/"). */
bool il_sysfs_is_real(const il_sysfs *fs);

/* Writes root + rel into buf ("/proc/x" -> "/tmp/fixture/proc/x"). rel must start with '/'.
 * Returns buf, or NULL when it does not fit. */
const char *il_sysfs_path(const il_sysfs *fs, const char *rel, char *buf, size_t n);

/* Reads up to n-1 bytes of file rel into buf and NUL-terminates it. IL_ERR_NOT_FOUND when the
 * file is absent, IL_ERR_IO on other errors and for anything but a regular file (a FIFO,
 * socket or device at the path is refused without blocking; the detail names the path). Sets *len when not
 * NULL. A file longer than the buffer is truncated silently (callers size the buffer). */
il_status il_sysfs_read(const il_sysfs *fs, const char *rel, char *buf, size_t n, size_t *len);
/* First line of file rel without the newline, "" when absent. Returns true when read. */
bool il_sysfs_read_line(const il_sysfs *fs, const char *rel, char *buf, size_t n);
bool il_sysfs_exists(const il_sysfs *fs, const char *rel);
/* lstat/stat of rel (follow = stat). Never fails: st->exists says whether it is there. */
void il_sysfs_stat(const il_sysfs *fs, const char *rel, bool follow, il_sysfs_stat_t *st);
/* Basename of the symlink target of rel ("/sys/bus/pci/devices/X/driver" -> "vfio-pci"), ""
 * when rel is not a link. Returns true when it was one. */
bool il_sysfs_link_name(const il_sysfs *fs, const char *rel, char *buf, size_t n);

/* Lists the names in directory rel (without "." and ".."), sorted, into a newly allocated
 * array of n strings; the caller frees it with il_sysfs_list_free. An absent directory gives
 * an empty list and IL_OK. IL_ERR_OOM on allocation failure. */
il_status il_sysfs_list(const il_sysfs *fs, const char *rel, char ***names, int *n);
/* True when directory rel, or one below it up to maxdepth levels, holds an entry whose name
 * starts with prefix ("nvidia.ko" finds nvidia.ko, nvidia.ko.xz, nvidia.ko.zst). Descends only into
 * directories without a '.' in their name (kernel/drivers/video, updates/dkms, x86_64/module). */
bool il_sysfs_find_below(const il_sysfs *fs, const char *rel, const char *prefix, int maxdepth);
void il_sysfs_list_free(char **names, int n);
/* Copies the line at *cur (without its newline, cut to n-1 bytes) into buf and moves *cur past
 * it; false at the end of the text. `for (const char *p = text; il_sysfs_next_line(&p, b, sizeof b);)`. */
bool il_sysfs_next_line(const char **cur, char *buf, size_t n);

/* Value of environment variable `name` in fs->env, NULL when unset. Borrowed from env. */
const char *il_sysfs_getenv(const il_sysfs *fs, const char *name);
/* Judges read (want 4), write (2) or both (6) permission on st for fs's identity, the way the
 * kernel does for a non-privileged user (owner, then group, then other; uid 0 may do all). */
bool il_sysfs_may(const il_sysfs *fs, const il_sysfs_stat_t *st, unsigned want);
/* Name of group gid from the sysroot's /etc/group, or its number as text. */
void il_sysfs_group_name(const il_sysfs *fs, gid_t gid, char *buf, size_t n);
/* Searches the directories of PATH (from fs->env, plus /usr/local/sbin:/usr/local/bin:
 * /usr/sbin:/usr/bin:/sbin:/bin) for an executable file `prog`; writes its path relative to
 * the sysroot into buf. Returns false when none is found. */
bool il_sysfs_which(const il_sysfs *fs, const char *prog, char *buf, size_t n);

/* For a path given to dlopen: when `path` names a file (has a '/') that exists and is not a
 * regular file (FIFO, socket, device, directory), writes why into why and returns false;
 * dlopen would block on a FIFO. True otherwise (bare sonames are searched by the loader). */
bool il_sysfs_loadable(const char *path, char *why, size_t n);

/* Small text helpers shared by the probes. */
/* Copies src into dst (size n), truncating; always NUL-terminates. Returns dst. */
char *il_sysfs_copy(char *dst, size_t n, const char *src);
/* Case-insensitive substring search; returns a pointer into hay or NULL. */
const char *il_sysfs_stristr(const char *hay, const char *needle);
/* Finds "KEY<sep>value" at the start of a line in text (e.g. "MemTotal:" in /proc/meminfo);
 * copies the trimmed value into buf. Returns false when absent. */
bool il_sysfs_field(const char *text, const char *key, char *buf, size_t n);
/* Compares dotted version strings numerically ("535.54.03" < "535.104.05"). */
int il_sysfs_vercmp(const char *a, const char *b);

#endif
