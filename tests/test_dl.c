/* tests/test_dl: core/dl, the one dlopen wrapper (NVML, the CUDA driver table and the CUDA
 * module all load through it): a missing library leaves the loader's own message in the
 * handle and in il_error_detail; a real library (glibc's libm.so.6) opens, resolves a symbol
 * that computes, refuses one it lacks with the loader's "undefined symbol" text, names the
 * file it came from, and closes (twice, harmlessly). */
#include <string.h>

#include "core/dl.h"
#include "harness.h"

static void missing_library(void) {
  il_dl lib;
  IL_CHECK_INT(il_dl_open(&lib, "libinferlab-no-such-library.so.7"), IL_ERR_NOT_FOUND);
  IL_CHECK(lib.handle == NULL);
  /* glibc: "libinferlab-no-such-library.so.7: cannot open shared object file: No such file or directory" */
  IL_CHECK_CONTAINS(il_dl_error(&lib), "libinferlab-no-such-library.so.7");
  IL_CHECK_CONTAINS(il_dl_error(&lib), "cannot open shared object file");
  IL_CHECK_CONTAINS(il_error_detail(), "cannot open shared object file");
  void *p = (void *)1;
  IL_CHECK_INT(il_dl_sym(&lib, "cos", &p), IL_ERR_NOT_FOUND);
  IL_CHECK(p == NULL);
  IL_CHECK_CONTAINS(il_dl_error(&lib), "not open");
  il_dl_close(&lib);
  il_dl_close(&lib);

  IL_CHECK_INT(il_dl_open(&lib, ""), IL_ERR_NOT_FOUND);
  IL_CHECK(il_dl_error(&lib)[0] != 0);
  /* A path that exists but is not a shared object: the loader says why. */
  IL_CHECK_INT(il_dl_open(&lib, "/etc/hostname"), IL_ERR_NOT_FOUND);
  IL_CHECK_CONTAINS(il_dl_error(&lib), "/etc/hostname");
}

static void real_library(void) {
  il_dl lib;
  IL_CHECK_OK(il_dl_open(&lib, "libm.so.6"));
  IL_CHECK(lib.handle != NULL);
  IL_CHECK_STR(il_dl_error(&lib), "");
  double (*cos_fn)(double) = NULL;
  IL_CHECK_OK(il_dl_sym(&lib, "cos", (void **)&cos_fn));
  IL_CHECK(cos_fn != NULL);
  if (cos_fn) IL_CHECK_NEAR(cos_fn(0.0), 1.0, 0.0);

  void *p = (void *)1;
  IL_CHECK_INT(il_dl_sym(&lib, "il_no_such_symbol", &p), IL_ERR_NOT_FOUND);
  IL_CHECK(p == NULL);
  IL_CHECK_CONTAINS(il_dl_error(&lib), "il_no_such_symbol");

  static const char *const names[] = {"il_no_such_symbol_v2", "sin", NULL};
  IL_CHECK(il_dl_sym_first(&lib, names) != NULL);
  static const char *const none[] = {"il_no_such_symbol_v2", NULL};
  IL_CHECK(il_dl_sym_first(&lib, none) == NULL);

  char file[512];
  IL_CHECK(il_dl_file_of((void *)cos_fn, file, sizeof file));
  IL_CHECK_CONTAINS(file, "libm");
  IL_CHECK(!il_dl_file_of(NULL, file, sizeof file));
  IL_CHECK_STR(file, "");

  il_dl_close(&lib);
  IL_CHECK(lib.handle == NULL);
  il_dl_close(&lib);
}

int main(void) {
  missing_library();
  real_library();
  return il_test_finish();
}
