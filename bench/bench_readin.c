/* bench/bench_readin: why a read of a model file into memory of the process (--no-mmap) is
 * slower than `cat FILE >/dev/null`, measured: the same file read several ways in one run,
 * each against cat's way (128 KiB read() requests into one reused buffer, which stays in the
 * CPU's cache). The ways, in order:
 *   reuse-16M      16 MiB requests into one reused buffer (the request size alone)
 *   pages          as many new pages as the file has, faulted in and zeroed, nothing copied
 *                  (the floor under any read into new memory)
 *   fresh-read     16 MiB read() requests into new anonymous memory, one thread (--no-mmap before
 *                  the rework: a fault and a zeroed page per 4 KiB inside read(), then the copy)
 *   fresh-popw     the same with each piece's pages faulted in at once (MADV_POPULATE_WRITE)
 *   cow            the file's private mapping made writable and each piece copied in place
 *                  (MADV_POPULATE_WRITE: a copy of each cached page, no zeroed page)
 *   library        il_startup_read_file (buffered, up to 4 threads) and, with O_DIRECT, direct
 * Each way runs warm (the file read once before) and, with --cold, after the file's pages are
 * dropped (fdatasync + posix_fadvise DONTNEED; a file the caller may drop: one it wrote).
 * Usage: bench_readin FILE [--cold] [--reps N]   (medians of N, default 3)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/timer.h"
#include "engine/startup.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static const char *il__path;
static size_t il__size;

static void il__drop(void) {
  int fd = open(il__path, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static double il__reuse(size_t req) {
  char *b = aligned_alloc(4096, req);
  int fd = open(il__path, O_RDONLY);
  const double t0 = il_time_now();
  while (fd >= 0 && read(fd, b, req) > 0) {
  }
  const double t = il_time_now() - t0;
  if (fd >= 0) close(fd);
  free(b);
  return t;
}

static double il__pages(void) {
  const double t0 = il_time_now();
  void *m = mmap(NULL, il__size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  if (madvise(m, il__size, MADV_POPULATE_WRITE) != 0)
    for (size_t i = 0; i < il__size; i += 4096) ((volatile char *)m)[i] = 1;
  const double t = il_time_now() - t0;
  munmap(m, il__size);
  return t;
}

static double il__fresh(bool popw) {
  const size_t req = (size_t)16 << 20;
  const double t0 = il_time_now();
  char *m = mmap(NULL, il__size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int fd = open(il__path, O_RDONLY);
  if (m == MAP_FAILED || fd < 0) return -1;
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  for (size_t off = 0; off < il__size;) {
    const size_t want = il__size - off < req ? il__size - off : req;
    if (popw) madvise(m + off, (want + 4095) & ~(size_t)4095, MADV_POPULATE_WRITE);
    ssize_t r = read(fd, m + off, want);
    if (r <= 0) break;
    off += (size_t)r;
  }
  const double t = il_time_now() - t0;
  close(fd);
  munmap(m, il__size);
  return t;
}

static double il__cow(void) {
  const size_t piece = (size_t)8 << 20;
  const double t0 = il_time_now();
  int fd = open(il__path, O_RDONLY);
  if (fd < 0) return -1;
  char *m = mmap(NULL, il__size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return -1;
  madvise(m, il__size, MADV_SEQUENTIAL);
  for (size_t off = 0; off < il__size; off += piece) {
    const size_t n = il__size - off < piece ? il__size - off : piece;
    if (off + piece < il__size) madvise(m + off + piece, piece, MADV_WILLNEED);
    if (madvise(m + off, (n + 4095) & ~(size_t)4095, MADV_POPULATE_WRITE) != 0) {
      munmap(m, il__size);
      return -1;
    }
  }
  const double t = il_time_now() - t0;
  munmap(m, il__size);
  return t;
}

static double il__library(bool direct, il_startup_read_info *ri) {
  const double t0 = il_time_now();
  char *m = mmap(NULL, il__size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  il_status st = il_startup_read_file(il__path, m, il__size, direct, ri);
  const double t = il_time_now() - t0;
  munmap(m, il__size);
  return st == IL_OK ? t : -1;
}

static int il__cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  bool cold = false;
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cold")) cold = true;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (argv[i][0] != '-') il__path = argv[i];
    else {
      fprintf(stderr, "usage: bench_readin FILE [--cold] [--reps N]\n");
      return 64;
    }
  }
  struct stat st;
  if (!il__path || stat(il__path, &st) != 0 || st.st_size <= 0 || reps < 1 || reps > 99) {
    fprintf(stderr, "usage: bench_readin FILE [--cold] [--reps N]  (FILE: a readable, non-empty file; N 1..99)\n");
    return 64;
  }
  il__size = (size_t)st.st_size;
  static const char *const names[] = {"cat-like (128 KiB, reused)", "reuse-16M", "pages (no copy)", "fresh-read",
                                      "fresh-popw", "cow", "library", "library O_DIRECT"};
  enum { N = 8 };
  printf("bench_readin: %s, %.0f MB, %s, medians of %d\n", il__path, (double)il__size / 1e6,
         cold ? "warm and cold" : "warm", reps);
  printf("%-28s %10s %9s %10s %9s\n", "way", "warm MB/s", "vs cat", "cold MB/s", "vs cat");
  double med[2][N];
  int threads = 0;
  for (int c = 0; c < (cold ? 2 : 1); c++) {
    for (int w = 0; w < N; w++) {
      double t[99];
      for (int r = 0; r < reps; r++) {
        if (c) il__drop();
        else il__reuse((size_t)128 << 10); /* warm: the file read once before */
        il_startup_read_info ri = {0};
        t[r] = w == 0 ? il__reuse((size_t)128 << 10)
               : w == 1 ? il__reuse((size_t)16 << 20)
               : w == 2 ? il__pages()
               : w == 3 ? il__fresh(false)
               : w == 4 ? il__fresh(true)
               : w == 5 ? il__cow()
               : w == 6 ? il__library(false, &ri)
                        : il__library(true, &ri);
        if (ri.threads) threads = ri.threads;
      }
      qsort(t, (size_t)reps, sizeof t[0], il__cmp);
      med[c][w] = t[reps / 2];
    }
  }
  for (int w = 0; w < N; w++) {
    printf("%-28s", names[w]);
    for (int c = 0; c < (cold ? 2 : 1); c++) {
      const double mbs = med[c][w] > 0 ? (double)il__size / med[c][w] / 1e6 : 0;
      printf(" %10.0f %9.2f", mbs, med[c][w] > 0 ? med[c][0] / med[c][w] : 0.0);
    }
    printf("\n");
  }
  printf("(library: %d thread%s of 8 MiB requests; the rest one thread)\n", threads, threads == 1 ? "" : "s");
  return 0;
}
