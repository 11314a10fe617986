/* tests/fuzz: harnesses for hostile input, built two ways from the same source.
 *
 * Each fuzz_*.c defines LLVMFuzzerTestOneInput (the libFuzzer entry point) and il_fuzz_seeds
 * (small valid inputs made in memory, so no binary corpus lives in the repository). With clang
 * and -DIL_LIBFUZZER=ON it links against libFuzzer; otherwise it links fuzz_main.c, a replay
 * driver that runs the seeds, every file or directory named on its command line, and then
 * deterministic random mutations of the seeds for a bounded time: that is the CTest smoke run
 * (sanitized in the asan preset). docs/fuzzing.md has the long libFuzzer run.
 */
#ifndef IL_TESTS_FUZZ_H
#define IL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  uint8_t *data; /* malloc'd */
  size_t size;
} il_fuzz_input;

/* Fills up to cap seeds; returns how many. The driver frees each data with free(). */
int il_fuzz_seeds(il_fuzz_input *seeds, int cap);

/* Aborts (a crash the fuzzer reports) when cond is false: a property of the code under test. */
#define IL_FUZZ_ASSERT(cond)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond);    \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

#endif
