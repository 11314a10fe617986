/* tests/test_log: library notes go to the caller's callback, never to stdout/stderr by
 * themselves: an engine opened with a context beyond the model's training context, and one that
 * --fit shrinks to a small device, hand their notes to the callback; with no callback the same
 * --fit run prints nothing (stderr checked). */
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "engine/engine.h"
#include "harness.h"

static char got[4096];
static int n_notes;
static void collect(void *ud, il_log_level level, const char *msg) {
  (void)ud;
  n_notes++;
  snprintf(got + strlen(got), sizeof got - strlen(got), "[%d] %s\n", (int)level, msg);
}

/* A device too small, with --fit: the engine notes the change it applied (every time). */
static void open_fit(void) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 2048;
  c.fit = true;
  snprintf(c.device, sizeof c.device, "sim:20MiB");
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  il_engine_free(e);
}

static void open_wide(void) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 4096; /* builtin:tiny is trained for 1024 */
  c.threads = 1;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  il_engine_free(e);
}

int main(void) {
  il_log_set(collect, NULL);
  open_wide();
  IL_CHECK(n_notes >= 1);
  IL_CHECK_CONTAINS(got, "--ctx 4096 is beyond the model's training context");
  open_fit();
  IL_CHECK_CONTAINS(got, "--fit: out of memory on sim:20MiB");
  IL_CHECK_CONTAINS(got, "; changing --"); /* what it changed, from what to what */
  IL_CHECK(strchr(got, '\n') && !strstr(got, "\n\n")); /* one line each, no trailing newline of their own */
  /* no callback: nothing reaches stderr */
  il_log_set(NULL, NULL);
  fflush(stderr);
  char path[] = "/tmp/inferlab-log-XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  IL_CHECK(fd >= 0 && saved >= 0);
  dup2(fd, 2);
  open_fit();
  il_log(IL_LOG_WARN, "not printed");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  IL_CHECK_INT(lseek(fd, 0, SEEK_END), 0);
  close(fd);
  unlink(path);
  return il_test_finish();
}
