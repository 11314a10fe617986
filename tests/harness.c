/* tests/harness: see harness.h. */
#include "harness.h"

#include "backend/registry.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

int il_test_passed, il_test_failed;

int il_test_finish(void) {
  printf("%d passed, %d failed\n", il_test_passed, il_test_failed);
  return il_test_failed ? 1 : 0;
}

void il_test_contains(const char *file, int line, const char *hay_expr, const char *needle_expr,
                      const char *haystack, const char *needle, int want) {
  int found = haystack && needle && strstr(haystack, needle) != NULL;
  if (haystack && needle && found == want) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  /* the whole haystack up to a page of it: enough to see what came instead */
  const int limit = 4096;
  int len = haystack ? (int)strnlen(haystack, (size_t)limit + 1) : 0;
  fprintf(stderr, "%s:%d: FAILED: %s %s %s\n  needle: \"%s\"\n  haystack%s: \"%.*s\"%s\n", file, line,
          hay_expr, want ? "contains" : "does not contain", needle_expr, needle ? needle : "(null)",
          len > limit ? " (first 4096 bytes)" : "", haystack ? (len > limit ? limit : len) : 6,
          haystack ? haystack : "(null)", len > limit ? "..." : "");
}

const char *il_test_fixture(const char *rel) {
  static char path[4096];
  const char *root = getenv("IL_FIXTURES");
  if (!root) root = "../shared/fixtures";
  snprintf(path, sizeof path, "%s/%s", root, rel);
  if (access(path, R_OK) == 0) return path;
  /* CI has ../shared: there a missing fixture is a failure, not a skip */
  const char *req = getenv("IL_REQUIRE_FIXTURES");
  if (req && !strcmp(req, "1")) {
    il_test_failed++;
    fprintf(stderr, "FAILED: fixture %s is required (IL_REQUIRE_FIXTURES=1) but missing\n", path);
  }
  return NULL;
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

int il_test_run(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = 0, r;
  char sink[4096];
  if (out && cap) {
    while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0) n += r;
    out[n] = 0;
  }
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int il_test_runf(char *out, size_t cap, const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return il_test_run(cmd, out, cap);
}

char *il_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) != NULL) {
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
      free(b);
      b = NULL;
    } else {
      b[n] = 0;
      if (len) *len = (size_t)n;
    }
  }
  fclose(f);
  return b;
}

il_backend *il_test_open_cuda_or_skip(void) {
  const char *why = il_backend_cuda_unavailable();
  if (why) {
    printf("SKIP: cuda: %s\n", why);
    exit(77);
  }
  il_backend *b = NULL;
  if (il_backend_open("cuda", NULL, &b) != IL_OK) {
    printf("SKIP: %s\n", il_error_detail());
    exit(77);
  }
  return b;
}
