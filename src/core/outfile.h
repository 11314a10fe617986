/* core/outfile: output files written safely, the same way by every command.
 *
 * An output path names what the user wants replaced, and nothing else:
 *   - a regular file (or a new name) is written to a temporary file created exclusively
 *     (O_EXCL, a unique name in the same directory) and renamed over the path at the end, so a
 *     failed run leaves the old file and no partial one, and no pre-existing file or symlink
 *     at any fixed "OUT.tmp" name is followed or overwritten;
 *   - a symlink is followed: its target is replaced the same way and the link stays;
 *   - a device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is written directly, never
 *     replaced by a regular file;
 *   - a directory, or the same file as one of the command's inputs, is refused before any work.
 * Every failure is IL_ERR_OUTPUT (exit code 73) with a message naming the flag and the path.
 * Nothing is allocated: paths are held in the handle (PATH_MAX).
 * Not for: files inside a directory the program creates itself (experiment folders).
 */
#ifndef IL_CORE_OUTFILE_H
#define IL_CORE_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/status.h"

#define IL_OUTFILE_PATH_MAX 4096

typedef struct {
  FILE *f;        /* write here between open and close */
  bool direct;    /* writing straight to a non-regular file */
  char what[32];  /* the flag, for messages ("-o") */
  char path[IL_OUTFILE_PATH_MAX];      /* final path (a symlink's target) */
  char tmp[IL_OUTFILE_PATH_MAX + 16];  /* temporary file, "" when direct */
} il_outfile;

/* Checks, before a long run, that `path` could be written: not a directory, not the same file
 * as any of inputs[0..n) (NULL entries and names that do not exist are skipped), and its
 * directory (or the existing device/FIFO) is writable. `what` names the flag in messages.
 * IL_OK or IL_ERR_OUTPUT. Creates nothing. */
IL_NODISCARD il_status il_outfile_check(const char *what, const char *path, const char *const *inputs, int n);

/* Runs il_outfile_check, then opens o->f as described above. On failure nothing is left open
 * or created. The caller ends with il_outfile_close or il_outfile_discard. */
IL_NODISCARD il_status il_outfile_open(il_outfile *o, const char *what, const char *path, const char *const *inputs, int n);

/* Flushes and closes, then renames the temporary file over the path. IL_ERR_OUTPUT (naming the
 * path and the system's reason) when any write, the close or the rename failed; the temporary
 * file is removed then. */
IL_NODISCARD il_status il_outfile_close(il_outfile *o);

/* Closes and removes the temporary file (a failed run leaves nothing). Can't fail. */
void il_outfile_discard(il_outfile *o);

#endif
