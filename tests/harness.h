/* tests/harness: tiny assertion helpers shared by the test programs.
 *
 * Assertions print both operands with file:line and count failures; a test's main returns
 * il_test_finish(), which prints "N passed, N failed" for that program. A test that cannot
 * run (missing fixtures, no GPU) calls IL_SKIP("reason"), which prints the reason and exits 77
 * (CTest's skip code as configured in CMakeLists.txt).
 */
#ifndef IL_TESTS_HARNESS_H
#define IL_TESTS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int il_test_passed, il_test_failed;

#define IL_CHECK(cond)                                                                  \
  do {                                                                                  \
    if (cond) il_test_passed++;                                                         \
    else {                                                                              \
      il_test_failed++;                                                                 \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);                \
    }                                                                                   \
  } while (0)

#define IL_CHECK_INT(a, b)                                                              \
  do {                                                                                  \
    long long il__a = (long long)(a), il__b = (long long)(b);                           \
    if (il__a == il__b) il_test_passed++;                                               \
    else {                                                                              \
      il_test_failed++;                                                                 \
      fprintf(stderr, "%s:%d: FAILED: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__,   \
              #a, #b, il__a, il__b);                                                    \
    }                                                                                   \
  } while (0)

#define IL_CHECK_NEAR(a, b, tol)                                                        \
  do {                                                                                  \
    double il__a = (double)(a), il__b = (double)(b);                                    \
    if (fabs(il__a - il__b) <= (tol)) il_test_passed++;                                 \
    else {                                                                              \
      il_test_failed++;                                                                 \
      fprintf(stderr, "%s:%d: FAILED: |%s - %s| <= %g (%.9g vs %.9g)\n", __FILE__,      \
              __LINE__, #a, #b, (double)(tol), il__a, il__b);                           \
    }                                                                                   \
  } while (0)

#define IL_CHECK_STR(a, b)                                                              \
  do {                                                                                  \
    const char *il__a = (a), *il__b = (b);                                              \
    if (il__a && il__b && strcmp(il__a, il__b) == 0) il_test_passed++;                  \
    else {                                                                              \
      il_test_failed++;                                                                 \
      fprintf(stderr, "%s:%d: FAILED: %s == %s (\"%s\" vs \"%s\")\n", __FILE__,         \
              __LINE__, #a, #b, il__a ? il__a : "(null)", il__b ? il__b : "(null)");    \
    }                                                                                   \
  } while (0)

/* Checks a status is IL_OK and prints the recorded detail otherwise. */
#define IL_CHECK_OK(expr)                                                               \
  do {                                                                                  \
    il_status il__s = (expr);                                                           \
    if (il__s == IL_OK) il_test_passed++;                                               \
    else {                                                                              \
      il_test_failed++;                                                                 \
      fprintf(stderr, "%s:%d: FAILED: %s -> %s: %s\n", __FILE__, __LINE__, #expr,       \
              il_status_name(il__s), il_error_detail());                                \
    }                                                                                   \
  } while (0)

/* Checks `needle` occurs in `haystack` (or, for NOT_CONTAINS, does not), printing both on
 * failure: a CLI's output is the evidence of what went wrong. A NULL haystack fails either way. */
#define IL_CHECK_CONTAINS(haystack, needle)                                             \
  il_test_contains(__FILE__, __LINE__, #haystack, #needle, (haystack), (needle), 1)
#define IL_CHECK_NOT_CONTAINS(haystack, needle)                                         \
  il_test_contains(__FILE__, __LINE__, #haystack, #needle, (haystack), (needle), 0)
void il_test_contains(const char *file, int line, const char *hay_expr, const char *needle_expr,
                      const char *haystack, const char *needle, int want);

#define IL_SKIP(reason)                                                                 \
  do {                                                                                  \
    printf("SKIP: %s\n", reason);                                                       \
    exit(77);                                                                           \
  } while (0)

/* Prints the summary line and returns the exit code (0 when nothing failed). */
int il_test_finish(void);
/* Path of a fixture file under $IL_FIXTURES (or ../shared/fixtures), or NULL when absent.
 * Returns a static buffer (one per call site is fine: copy if you need two at once). */
const char *il_test_fixture(const char *rel);
/* Fills a fresh temporary directory path (removed by the caller if wanted). */
const char *il_test_tmpdir(void);
/* Runs a shell command, captures up to cap-1 bytes of its stdout into out (NUL-terminated;
 * out may be NULL to discard), reads the rest, and returns its exit code (-1 when it did not
 * exit normally). */
int il_test_run(const char *cmd, char *out, size_t cap);
/* il_test_run of a printf-formatted command (at most 8 KiB). */
int il_test_runf(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reads a whole file into a fresh NUL-terminated buffer (free with free()); *len (may be NULL)
 * gets its size. NULL when the file cannot be read. */
char *il_test_read_file(const char *path, size_t *len);
/* Deterministic uniform floats in [-1, 1). */
float il_test_randf(uint64_t *state);
/* The CUDA backend ("cuda", the module the registry finds), opened; when there is no module, no
 * driver or no device, prints "SKIP: ..." with the reason and exits 77. Destroy it with
 * b->ops->destroy. */
struct il_backend;
struct il_backend *il_test_open_cuda_or_skip(void);

#endif
