/* core/dl: dlopen / dlsym / dlclose with the loader's error text kept in the handle. See dl.h. */
#include "core/dl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void il__dl_set_error(il_dl *lib, const char *fallback) {
  const char *e = dlerror();
  snprintf(lib->error, sizeof lib->error, "%s", e ? e : fallback);
}

il_status il_dl_open(il_dl *lib, const char *filename) {
  memset(lib, 0, sizeof *lib);
  if (!filename || !*filename) {
    snprintf(lib->error, sizeof lib->error, "no library name given");
    return il_error(IL_ERR_NOT_FOUND, "%s", lib->error);
  }
  dlerror(); /* clear a stale message so the one read below is this call's */
  lib->handle = dlopen(filename, RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    il__dl_set_error(lib, "dlopen failed");
    return il_error(IL_ERR_NOT_FOUND, "%s", lib->error);
  }
  return IL_OK;
}

il_status il_dl_sym(il_dl *lib, const char *name, void **ptr) {
  *ptr = NULL;
  if (!lib->handle) {
    snprintf(lib->error, sizeof lib->error, "%s: library not open", name);
    return il_error(IL_ERR_NOT_FOUND, "%s", lib->error);
  }
  dlerror();
  *ptr = dlsym(lib->handle, name);
  if (!*ptr) {
    char fallback[300];
    snprintf(fallback, sizeof fallback, "undefined symbol: %.250s", name);
    il__dl_set_error(lib, fallback);
    return il_error(IL_ERR_NOT_FOUND, "%s", lib->error);
  }
  return IL_OK;
}

void *il_dl_sym_first(il_dl *lib, const char *const *names) {
  if (!lib->handle) return NULL;
  for (; *names; names++) {
    void *p = dlsym(lib->handle, *names);
    if (p) return p;
  }
  return NULL;
}

const char *il_dl_error(const il_dl *lib) { return lib->error; }

void il_dl_close(il_dl *lib) {
  if (lib->handle) dlclose(lib->handle);
  lib->handle = NULL;
}

bool il_dl_name_of(const void *addr, char *out, size_t n) {
  if (!n) return false;
  out[0] = 0;
  Dl_info info;
  if (!addr || !dladdr(addr, &info) || !info.dli_fname || !*info.dli_fname) return false;
  snprintf(out, n, "%s", info.dli_fname);
  return true;
}

bool il_dl_file_of(const void *addr, char *out, size_t n) {
  char name[PATH_MAX], real[PATH_MAX];
  if (!n) return false;
  out[0] = 0;
  if (!il_dl_name_of(addr, name, sizeof name)) return false;
  const char *so = strstr(name, ".so.");
  if (so && strchr(so + 4, '.')) snprintf(out, n, "%s", name);
  else if (realpath(name, real)) snprintf(out, n, "%s", real);
  else snprintf(out, n, "%s", name);
  return true;
}
