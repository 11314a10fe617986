/* core/dl: loading a shared library at run time, in the manner of libuv's uv_dlopen: the caller
 * owns an il_dl handle, il_dl_open fills it, il_dl_close empties it, and the dynamic loader's
 * own error text ("libnvidia-ml.so.1: cannot open shared object file: No such file or
 * directory") is kept in the handle, because that text is the diagnosis.
 *
 * inferlab never links the NVIDIA driver or its CUDA module at build time: NVML
 * (probe/nvml), the CUDA driver API (probe/cudadrv) and the CUDA backend module
 * (backend/cudamod) are all opened through here, so one binary runs with or without a driver.
 * Libraries are opened RTLD_NOW | RTLD_LOCAL: a missing symbol fails at open, not mid-run, and
 * nothing the library exports leaks into the global namespace.
 * Not for: deciding which file to open (each caller has its own search order), or reading a
 * library without loading it (probe/elfver).
 */
#ifndef IL_CORE_DL_H
#define IL_CORE_DL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

typedef struct {
  void *handle;       /* dlopen's handle, NULL when closed or when opening failed */
  char error[512];    /* the loader's text for the last failure of this handle, "" when none */
} il_dl;

/* Opens `filename` (a path, or a bare name the loader searches for). IL_OK, or
 * IL_ERR_NOT_FOUND with lib->error (and il_error_detail) holding the loader's message.
 * lib is always initialised, so il_dl_close is safe either way. */
IL_NODISCARD il_status il_dl_open(il_dl *lib, const char *filename);
/* Looks up `name`: IL_OK with *ptr set, or IL_ERR_NOT_FOUND with *ptr NULL and lib->error set
 * (the loader's "undefined symbol" text). */
IL_NODISCARD il_status il_dl_sym(il_dl *lib, const char *name, void **ptr);
/* The first of a NULL-terminated list of names that the library exports, NULL when none does
 * (no error recorded: callers use this for optional and versioned names, newest first). */
void *il_dl_sym_first(il_dl *lib, const char *const *names);
/* The loader's error text for lib ("" when none). Borrowed from lib. */
const char *il_dl_error(const il_dl *lib);
/* Closes the library (a no-op on a closed or failed handle); the error text is kept. */
void il_dl_close(il_dl *lib);
/* The name under which the loader opened the object holding the code or data at `addr`
 * (dladdr's dli_fname: a path as given or found, not resolved), written into out. False (out =
 * "") when addr is in no loaded object. */
bool il_dl_name_of(const void *addr, char *out, size_t n);
/* The file that the code or data at `addr` was loaded from, written into out: the name as the
 * loader knows it when that name carries a version ("libcuda.so.535.54.03": a compat/ symlink
 * says more than its target), else its real path. False (out = "") when addr is in no loaded
 * object. */
bool il_dl_file_of(const void *addr, char *out, size_t n);

#endif
