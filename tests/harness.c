/* tests/harness: see harness.h. */
#include "harness.h"

#include <unistd.h>

int il_test_passed, il_test_failed;

int il_test_finish(void) {
  printf("%d passed, %d failed\n", il_test_passed, il_test_failed);
  return il_test_failed ? 1 : 0;
}

const char *il_test_fixture(const char *rel) {
  static char path[4096];
  const char *root = getenv("IL_FIXTURES");
  if (!root) root = "../shared/fixtures";
  snprintf(path, sizeof path, "%s/%s", root, rel);
  return access(path, R_OK) == 0 ? path : NULL;
}

const char *il_test_tmpdir(void) {
  static char dir[256];
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/inferlab-test-XXXXXX", base ? base : "/tmp");
  return mkdtemp(dir);
}

float il_test_randf(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
