/* core/outfile: exclusive temporary file + rename; direct writes to non-regular files. */
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Directory part of path into buf ("." when there is none). */
static void il__dirname(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(buf, cap, ".");
  else if (slash == path) snprintf(buf, cap, "/");
  else snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* The file a write to path replaces: path itself, or the target of a symlink (also a dangling
 * one: its target is created). IL_ERR_OUTPUT when the link cannot be read. */
static il_status il__final_path(const char *what, const char *path, char *buf, size_t cap) {
  struct stat sl;
  snprintf(buf, cap, "%s", path);
  if (lstat(path, &sl) != 0 || !S_ISLNK(sl.st_mode)) return IL_OK;
  char resolved[PATH_MAX];
  if (realpath(path, resolved)) {
    snprintf(buf, cap, "%s", resolved);
    return IL_OK;
  }
  char target[PATH_MAX], dir[IL_OUTFILE_PATH_MAX];
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return il_error(IL_ERR_OUTPUT, "%s %s: cannot read the symlink: %s", what, path, strerror(errno));
  target[n] = 0;
  il__dirname(path, dir, sizeof dir);
  int w = target[0] == '/' ? snprintf(buf, cap, "%s", target) : snprintf(buf, cap, "%s/%s", dir, target);
  if (w < 0 || (size_t)w >= cap) return il_error(IL_ERR_OUTPUT, "%s %s: the path is too long", what, path);
  return IL_OK;
}

il_status il_outfile_check(const char *what, const char *path, const char *const *inputs, int n) {
  if (!path || !*path) return il_error(IL_ERR_OUTPUT, "%s: empty output path", what);
  if (strlen(path) >= IL_OUTFILE_PATH_MAX) return il_error(IL_ERR_OUTPUT, "%s: the path is too long", what);
  struct stat so;
  bool exists = stat(path, &so) == 0; /* follows a symlink: the target is what gets written */
  if (exists && S_ISDIR(so.st_mode)) return il_error(IL_ERR_OUTPUT, "%s %s: is a directory", what, path);
  for (int i = 0; exists && i < n; i++) {
    struct stat si;
    if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
      return il_error(IL_ERR_OUTPUT, "%s %s: is the input %s; write to another file", what, path, inputs[i]);
  }
  if (exists && !S_ISREG(so.st_mode)) {
    if (access(path, W_OK) != 0) return il_error(IL_ERR_OUTPUT, "%s %s: cannot write: %s", what, path, strerror(errno));
    return IL_OK;
  }
  char target[IL_OUTFILE_PATH_MAX], dir[IL_OUTFILE_PATH_MAX];
  IL_TRY(il__final_path(what, path, target, sizeof target));
  il__dirname(target, dir, sizeof dir);
  if (access(dir, W_OK) != 0)
    return il_error(IL_ERR_OUTPUT, "%s %s: cannot create a file in %s: %s", what, path, dir, strerror(errno));
  return IL_OK;
}

il_status il_outfile_open(il_outfile *o, const char *what, const char *path, const char *const *inputs, int n) {
  memset(o, 0, sizeof *o);
  snprintf(o->what, sizeof o->what, "%s", what);
  IL_TRY(il_outfile_check(what, path, inputs, n));
  struct stat st;
  IL_TRY(il__final_path(what, path, o->path, sizeof o->path));
  bool exists = stat(o->path, &st) == 0;
  int fd;
  if (exists && !S_ISREG(st.st_mode)) {
    o->direct = true;
    fd = open(o->path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return il_error(IL_ERR_OUTPUT, "%s %s: cannot open: %s", what, path, strerror(errno));
  } else {
    char dir[IL_OUTFILE_PATH_MAX];
    il__dirname(o->path, dir, sizeof dir);
    const char *base = strrchr(o->path, '/') ? strrchr(o->path, '/') + 1 : o->path;
    int w = snprintf(o->tmp, sizeof o->tmp, "%s/.%.200s.XXXXXX", dir, base);
    if (w < 0 || (size_t)w >= sizeof o->tmp) return il_error(IL_ERR_OUTPUT, "%s %s: the path is too long", what, path);
    fd = mkostemp(o->tmp, O_CLOEXEC); /* O_CREAT | O_EXCL: never an existing file or link */
    if (fd < 0) {
      il_status e = il_error(IL_ERR_OUTPUT, "%s %s: cannot create a file in %s: %s", what, path, dir, strerror(errno));
      o->tmp[0] = 0;
      return e;
    }
    mode_t mode;
    if (exists) mode = st.st_mode & 07777; /* keep the replaced file's permissions */
    else {
      mode_t mask = umask(0);
      umask(mask);
      mode = 0666 & ~mask;
    }
    if (fchmod(fd, mode) != 0) { /* mkostemp creates 0600 */
      il_status e = il_error(IL_ERR_OUTPUT, "%s %s: cannot set permissions: %s", what, o->tmp, strerror(errno));
      close(fd);
      unlink(o->tmp);
      o->tmp[0] = 0;
      return e;
    }
  }
  o->f = fdopen(fd, "wb");
  if (!o->f) {
    il_status e = il_error(IL_ERR_OUTPUT, "%s %s: %s", what, path, strerror(errno));
    close(fd);
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
    return e;
  }
  return IL_OK;
}

il_status il_outfile_close(il_outfile *o) {
  if (!o->f) return il_error(IL_ERR_OUTPUT, "%s %s: not open", o->what, o->path);
  int err = 0;
  if (fflush(o->f) != 0 || ferror(o->f)) err = errno ? errno : EIO;
  if (fclose(o->f) != 0 && !err) err = errno ? errno : EIO;
  o->f = NULL;
  if (!err && o->tmp[0] && rename(o->tmp, o->path) != 0) err = errno;
  if (err) {
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
    return il_error(IL_ERR_OUTPUT, "%s %s: write failed: %s", o->what, o->path, strerror(err));
  }
  o->tmp[0] = 0;
  return IL_OK;
}

void il_outfile_discard(il_outfile *o) {
  if (o->f) fclose(o->f);
  o->f = NULL;
  if (o->tmp[0]) unlink(o->tmp);
  o->tmp[0] = 0;
}
