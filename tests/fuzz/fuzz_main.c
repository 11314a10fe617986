/* tests/fuzz/fuzz_main: the replay driver used when libFuzzer is not available (gcc builds).
 *
 *   fuzz_X [FILE|DIR ...]          run the seeds, each file (each regular file of a directory),
 *                                  then random mutations of seeds and files for
 *                                  $IL_FUZZ_SECONDS (default 3) or $IL_FUZZ_ITERS inputs
 *   fuzz_X --write-seeds DIR       write the seeds as files (a starting corpus for libFuzzer)
 *
 * Mutations (byte flips, random bytes, interesting values, insertions, deletions, truncation,
 * splices of two inputs) come from a fixed-seed generator ($IL_FUZZ_SEED), so a failure
 * replays. Before each input the driver writes it to $IL_FUZZ_CRASH_FILE when that is set, so
 * the input that crashed can be kept. Exit 0 when nothing crashed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fuzz.h"

#define IL__MAX_INPUTS 512

static il_fuzz_input inputs[IL__MAX_INPUTS];
static int n_inputs;

static uint64_t il__rng = 0x9E3779B97F4A7C15ull;
static uint64_t il__next(void) {
  uint64_t z = (il__rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double il__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void il__add_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f || n_inputs >= IL__MAX_INPUTS) {
    if (f) fclose(f);
    return;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (n < 0 || n > (16 << 20)) { /* the long run handles big files; the smoke run stays quick */
    fclose(f);
    return;
  }
  uint8_t *d = malloc((size_t)n + 1);
  if (d && fread(d, 1, (size_t)n, f) == (size_t)n) inputs[n_inputs++] = (il_fuzz_input){d, (size_t)n};
  else free(d);
  fclose(f);
}

static void il__add_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "fuzz: %s: not found (skipped)\n", path);
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    il__add_file(path);
    return;
  }
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) il__add_file(p);
  }
  if (d) closedir(d);
}

static void il__run(const uint8_t *d, size_t n) {
  const char *keep = getenv("IL_FUZZ_CRASH_FILE");
  if (keep) {
    FILE *f = fopen(keep, "wb");
    if (f) {
      fwrite(d, 1, n, f);
      fclose(f);
    }
  }
  LLVMFuzzerTestOneInput(d, n);
}

/* One random mutation of src into a fresh buffer. */
static uint8_t *il__mutate(const il_fuzz_input *src, size_t *out_n) {
  size_t n = src->size, cap = n + 64;
  uint8_t *d = malloc(cap);
  memcpy(d, src->data, n);
  int rounds = 1 + (int)(il__next() % 4);
  static const uint64_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000u,
                                         0xffffffffu, 0x7fffffffffffffffull, 0xffffffffffffffffull};
  for (int r = 0; r < rounds; r++) {
    uint64_t op = il__next() % 8, pos = n ? il__next() % n : 0;
    switch (op) {
      case 0: if (n) d[pos] ^= (uint8_t)(1u << (il__next() % 8)); break;
      case 1: if (n) d[pos] = (uint8_t)il__next(); break;
      case 2: { /* an interesting integer, 1/2/4/8 bytes */
        size_t w = (size_t)1 << (il__next() % 4);
        uint64_t v = interesting[il__next() % (sizeof interesting / sizeof interesting[0])];
        if (n >= w) memcpy(d + (pos > n - w ? n - w : pos), &v, w);
        break;
      }
      case 3: /* insert a few bytes */
        if (n + 8 <= cap) {
          size_t k = 1 + il__next() % 8;
          memmove(d + pos + k, d + pos, n - pos);
          for (size_t i = 0; i < k; i++) d[pos + i] = (uint8_t)il__next();
          n += k;
        }
        break;
      case 4: /* delete a few bytes */
        if (n) {
          size_t k = 1 + il__next() % 16;
          if (k > n - pos) k = n - pos;
          memmove(d + pos, d + pos + k, n - pos - k);
          n -= k;
        }
        break;
      case 5: n = pos; break; /* truncate */
      case 6: /* copy a block inside the input */
        if (n > 8) {
          size_t from = il__next() % n, k = 1 + il__next() % 32;
          if (k > n - from) k = n - from;
          if (k > n - pos) k = n - pos;
          memmove(d + pos, d + from, k);
        }
        break;
      case 7: { /* splice with another input */
        const il_fuzz_input *o = &inputs[il__next() % (uint64_t)n_inputs];
        if (o->size && n) {
          size_t from = il__next() % o->size, k = 1 + il__next() % 64;
          if (k > o->size - from) k = o->size - from;
          if (k > n - pos) k = n - pos;
          memcpy(d + pos, o->data + from, k);
        }
        break;
      }
    }
  }
  *out_n = n;
  return d;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-seeds")) {
    int n = il_fuzz_seeds(inputs, IL__MAX_INPUTS);
    mkdir(argv[2], 0755);
    for (int i = 0; i < n; i++) {
      char p[4096];
      snprintf(p, sizeof p, "%s/seed-%03d", argv[2], i);
      FILE *f = fopen(p, "wb");
      if (!f || fwrite(inputs[i].data, 1, inputs[i].size, f) != inputs[i].size) {
        fprintf(stderr, "fuzz: cannot write %s\n", p);
        return 1;
      }
      fclose(f);
    }
    printf("wrote %d seeds to %s\n", n, argv[2]);
    return 0;
  }
  n_inputs = il_fuzz_seeds(inputs, IL__MAX_INPUTS);
  int n_seeds = n_inputs;
  for (int i = 1; i < argc; i++) il__add_path(argv[i]);
  if (n_inputs == 0) {
    fprintf(stderr, "fuzz: no inputs\n");
    return 1;
  }
  const char *s = getenv("IL_FUZZ_SEED");
  if (s) il__rng = strtoull(s, NULL, 10);
  double seconds = getenv("IL_FUZZ_SECONDS") ? atof(getenv("IL_FUZZ_SECONDS")) : 3.0;
  long iters = getenv("IL_FUZZ_ITERS") ? atol(getenv("IL_FUZZ_ITERS")) : -1;
  for (int i = 0; i < n_inputs; i++) il__run(inputs[i].data, inputs[i].size);
  double t0 = il__now();
  long done = 0;
  while (iters >= 0 ? done < iters : il__now() - t0 < seconds) {
    size_t n;
    uint8_t *d = il__mutate(&inputs[il__next() % (uint64_t)n_inputs], &n);
    il__run(d, n);
    free(d);
    done++;
  }
  printf("fuzz: %d seeds, %d files, %ld mutated inputs in %.1f s: no crash\n", n_seeds, n_inputs - n_seeds, done,
         il__now() - t0);
  for (int i = 0; i < n_inputs; i++) free(inputs[i].data);
  return 0;
}
