/* tests/test_startup: the startup timeline (engine/startup).
 *
 * - marks: the phases add up to the span they cover exactly, also with interleaved work carved
 *   out of a step (a property of the bookkeeping, so it holds on a loaded machine);
 * - the read phase's page-cache verdict against the test's own evidence: a file written and
 *   dropped from the page cache (fdatasync + posix_fadvise DONTNEED, checked with the test's own
 *   mincore) reads "from disk"; after a read() of it, "from the page cache"; --no-mmap reads it
 *   back byte for byte at the same addresses;
 * - --load-pipeline on sim with a throttled link: the same greedy tokens, the overlap named in
 *   the upload's note, the timeline's checks above;
 * - the memory accounting of a GGUF file: mapped, it counts as mapped weights; read in with
 *   --no-mmap, the same bytes count as allocated weights and no longer as mapped; closing gives
 *   either back (the counters return to where they were);
 * - `inferlab run --startup-json` on a GGUF file: every timestamp lies inside the window the
 *   test measured around the process with its own clock (CLOCK_MONOTONIC is system-wide), the
 *   phases sum to the timeline's span, the sum is at most the outside wall time, and a cold
 *   file reads "from disk" while a warm one reads "from the page cache". What the outside wall
 *   time holds beyond the timeline (the fork before the process's start, the report and exit
 *   after the first token) is printed, not asserted: it depends on the scheduler.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/loadsink.h"
#include "core/timer.h"
#include "engine/config.h"
#include "engine/startup.h"
#include "format/gguf.h"
#include "memory/mem.h"
#include "harness.h"

static char il__dir[256];

static double il__num_after(const char *s, const char *key) {
  const char *p = strstr(s, key);
  return p ? strtod(p + strlen(key), NULL) : -1;
}

/* Writes n pseudo-random bytes to path, flushed to disk. */
static int il__write_file(const char *path, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  uint64_t x = 88172645463325252ull;
  uint8_t buf[65536];
  for (size_t off = 0; off < n; off += sizeof buf) {
    for (size_t i = 0; i < sizeof buf; i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      memcpy(buf + i, &x, 8);
    }
    size_t k = n - off < sizeof buf ? n - off : sizeof buf;
    if (write(fd, buf, k) != (ssize_t)k) return close(fd), -1;
  }
  int r = fdatasync(fd);
  close(fd);
  return r;
}

/* Drops path's pages from the page cache; returns the resident fraction left (the test's own
 * mincore over a fresh mapping), -1 on error. */
static double il__drop(const char *path, size_t n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  fdatasync(fd); /* dirty pages are not dropped */
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return -1;
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg;
  unsigned char *v = malloc(np);
  size_t in = 0;
  if (v && mincore(m, n, v) == 0)
    for (size_t i = 0; i < np; i++) in += v[i] & 1;
  free(v);
  munmap(m, n);
  return (double)in / (double)np;
}

/* The resident fraction of path's first n bytes now (the test's own mincore), -1 on error. */
static double il__resident_now(const char *path, size_t n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return -1;
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg;
  unsigned char *v = malloc(np);
  size_t in = 0;
  if (v && mincore(m, n, v) == 0)
    for (size_t i = 0; i < np; i++) in += v[i] & 1;
  free(v);
  munmap(m, n);
  return (double)in / (double)np;
}

/* The kB of anonymous (the process's own) memory in the mapping that holds p (/proc/self/smaps). */
static long il__anon_kb(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  bool in = false;
  long kb = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && !strncmp(line, "Anonymous:", 10)) {
      kb = strtol(line + 10, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

static void il__read_whole(const char *path) {
  int fd = open(path, O_RDONLY);
  char b[1 << 16];
  while (fd >= 0 && read(fd, b, sizeof b) > 0) {
  }
  if (fd >= 0) close(fd);
}

static void test_marks(void) {
  il_startup s;
  il_startup_begin(&s);
  il_startup_mark(&s, IL_STARTUP_BACKEND, 0);
  il_startup_add(IL_STARTUP_CONVERT, 0.25, 100); /* interleaved work inside the next step */
  il_startup_mark(&s, IL_STARTUP_UPLOAD, 1000);
  il_startup_mark(&s, IL_STARTUP_ALLOC, 10);
  il_startup_end(&s, false);
  double sum = 0;
  for (int i = 0; i < IL_STARTUP_COUNT; i++) sum += s.phase[i].seconds;
  /* the carved 0.25 s cannot come out of an upload step that took microseconds: the upload
   * gets 0, the sum then exceeds the span by what was carved beyond it */
  IL_CHECK(s.phase[IL_STARTUP_UPLOAD].seconds >= 0);
  IL_CHECK_NEAR(s.phase[IL_STARTUP_CONVERT].seconds, 0.25, 1e-12);
  IL_CHECK_INT(s.phase[IL_STARTUP_UPLOAD].bytes, 1000);
  IL_CHECK_INT(s.phase[IL_STARTUP_CONVERT].bytes, 100);
  IL_CHECK(s.phase[IL_STARTUP_ALLOC].start == s.phase[IL_STARTUP_UPLOAD].end); /* contiguous */
  IL_CHECK(s.phase[IL_STARTUP_UPLOAD].start == s.phase[IL_STARTUP_BACKEND].end);

  /* without an impossible carve the sum is the span, to rounding */
  il_startup_begin(&s);
  il_startup_mark(&s, IL_STARTUP_BACKEND, 0);
  double t0 = il_time_now();
  while (il_time_now() - t0 < 0.002) {
  }
  il_startup_add(IL_STARTUP_CONVERT, 0.001, 0);
  il_startup_mark(&s, IL_STARTUP_UPLOAD, 0);
  il_startup_mark(&s, IL_STARTUP_ALLOC, 0);
  il_startup_end(&s, false);
  sum = 0;
  for (int i = 0; i < IL_STARTUP_COUNT; i++) sum += s.phase[i].seconds;
  IL_CHECK_NEAR(sum, il_startup_total(&s), 1e-9);
  IL_CHECK(s.phase[IL_STARTUP_UPLOAD].seconds > 0);
  IL_CHECK_NEAR(il_startup_phase_seconds(&s, "convert"), 0.001, 1e-12);
  IL_CHECK(il_startup_phase_seconds(&s, "nope") < 0);
  int best = 0; /* this process's first timeline also holds "process" and "config" */
  for (int i = 0; i < IL_STARTUP_COUNT; i++)
    if (s.phase[i].seconds > s.phase[best].seconds) best = i;
  char v[512], want[64];
  IL_CHECK_INT(il_startup_verdict(&s, v, sizeof v), best);
  snprintf(want, sizeof want, "%s takes", il_startup_phase_name((il_startup_phase_id)best));
  IL_CHECK(strstr(v, want) == v);
}

/* A timeline built by hand: phase p takes `sec` seconds and `bytes`, the rest 1 ms each. */
static void il__fake(il_startup *s, il_startup_phase_id p, double sec, uint64_t bytes) {
  memset(s, 0, sizeof *s);
  s->resident = -1;
  double t = 100;
  s->origin = t;
  for (int i = IL_STARTUP_BACKEND; i <= IL_STARTUP_ALLOC; i++) {
    const double d = i == (int)p ? sec : 0.001;
    s->phase[i] = (il_startup_phase){.start = t, .end = t + d, .seconds = d, .bytes = i == (int)p ? bytes : 0};
    t += d;
  }
  s->last = t;
}

/* Each verdict names the dominant phase, its share and the rate from the figures. */
static void test_verdicts(void) {
  il_startup s;
  char v[512];
  il__fake(&s, IL_STARTUP_READ, 2.0, 1000000000); /* 1 GB in 2 s: 500 MB/s */
  s.resident = 0.02, s.mmap = true, s.read_at_load = true, s.file_bytes = 1000000000;
  IL_CHECK_INT(il_startup_verdict(&s, v, sizeof v), IL_STARTUP_READ);
  IL_CHECK(strstr(v, "from disk at 500 MB/s") && strstr(v, "--preload"));
  IL_CHECK(strstr(v, "read takes 100% (2.000 of 2.007 s)") == v); /* 7 phases of 1 ms beside it */
  IL_CHECK(!strstr(v, "--direct-io")); /* mmap: nothing read() to take past the cache */
  {
    il_startup a;
    il__fake(&a, IL_STARTUP_ALLOC, 2.0, 1000000);
    a.backed_seconds = 1.5, a.backed_bytes = 600000000;
    IL_CHECK_INT(il_startup_verdict(&a, v, sizeof v), IL_STARTUP_ALLOC);
    IL_CHECK(strstr(v, "1.500 s of it backed 600 MB") != NULL);
    a.backed_seconds = 0.5;
    il_startup_verdict(&a, v, sizeof v);
    IL_CHECK(strstr(v, "--ctx") != NULL);
  }
  s.mmap = false;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(strstr(v, "from disk at 500 MB/s") && strstr(v, "--direct-io"));
  s.direct_io = true;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(!strstr(v, "--direct-io"));
  s.mmap = true, s.direct_io = false;
  s.resident = 1;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(strstr(v, "mmap at 500 MB/s") && strstr(v, "--no-mmap"));
  s.mmap = false;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(strstr(v, "copied from the page cache into memory of the process at 500 MB/s") && strstr(v, "--mmap"));

  il__fake(&s, IL_STARTUP_UPLOAD, 1.0, 3600000000); /* 3.6 GB/s on a 4 GB/s link: 90% */
  s.link_rate = 4e9;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK_CONTAINS(v, "3600 MB/s, 90% of the link's 4000 MB/s: the link is the limit");
  il__fake(&s, IL_STARTUP_UPLOAD, 1.0, 400000000); /* 10% */
  s.link_rate = 4e9;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK_CONTAINS(v, "400 MB/s, 10% of the link's 4000 MB/s: the copies");

  il__fake(&s, IL_STARTUP_UPLOAD, 2.0, 600000000); /* cold, read on first use: the disk is in it */
  s.link_rate = 4e9, s.resident = 0, s.file_bytes = 600000000;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK_CONTAINS(v, "600 MB uploaded at 300 MB/s, reading 100% of the weights from disk");

  il__fake(&s, IL_STARTUP_CONVERT, 3.0, 600000000);
  il_startup_verdict(&s, v, sizeof v); /* no file: a built-in model */
  IL_CHECK_CONTAINS(v, "inferlab convert builtin:");
  s.file_bytes = 600000000;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(strstr(v, "600 MB repacked") && strstr(v, "200 MB/s") && strstr(v, "--repack=false"));

  il__fake(&s, IL_STARTUP_ALLOC, 0.5, 600000000);
  s.kv_bytes = 512000000, s.n_ctx = 4096;
  il_startup_verdict(&s, v, sizeof v);
  IL_CHECK(strstr(v, "512 MB of it a KV cache for 4096 positions") && strstr(v, "--ctx"));

  il__fake(&s, IL_STARTUP_FIRST_TOKEN, 0, 0);
  s.phase[IL_STARTUP_FIRST_TOKEN] = (il_startup_phase){.start = s.last, .end = s.last + 5, .seconds = 5};
  s.last += 5;
  s.resident = 0.25, s.file_bytes = 800000000;
  IL_CHECK_INT(il_startup_verdict(&s, v, sizeof v), IL_STARTUP_FIRST_TOKEN);
  IL_CHECK_CONTAINS(v, "75% of the 800 MB of weights were not in the page cache");

  /* the text report: one line per phase that took time, the verdict last */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  il_startup_print(&s, f, "> ");
  fclose(f);
  IL_CHECK(strstr(buf, "> startup: 5.008 s from the engine's open to the first token\n") == buf);
  IL_CHECK_CONTAINS(buf, ">   first_token    5.000 s  99.8%");
  IL_CHECK_NOT_CONTAINS(buf, "warmup"); /* did not run */
  IL_CHECK_CONTAINS(buf, ">   verdict: first_token takes");
  free(buf);
}

/* The read phase of a mapping of path (n bytes) under options o. */
static il_status il__read(const char *path, size_t n, const il_startup_read_opts *o, il_startup *s, uint8_t **map) {
  int fd = open(path, O_RDONLY);
  *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  il_startup_begin(s);
  il_status st = il_startup_read(s, path, *map, n, 4096, o);
  il_startup_end(s, false);
  return st;
}

static void test_read_source(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/weights.bin", il__dir);
  const size_t n = (size_t)8 << 20;
  IL_CHECK_INT(il__write_file(path, n), 0);
  const double left = il__drop(path, n);
  if (left < 0 || left > 0.1) {
    printf("SKIP (part): the page cache kept %.0f%% of a dropped file here; the cold read is not checked\n",
           100 * left);
  } else {
    il_startup s;
    uint8_t *m;
    const il_startup_read_opts lazy = {0};
    IL_CHECK_OK(il__read(path, n, &lazy, &s, &m));
    IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "from disk");
    IL_CHECK(s.resident <= 0.1);
    IL_CHECK(!s.read_at_load);
    munmap(m, n);
    printf("cold: %s\n", s.phase[IL_STARTUP_READ].note);
  }
  il__read_whole(path);
  il_startup s;
  uint8_t *m;
  const il_startup_read_opts lazy = {0};
  IL_CHECK_OK(il__read(path, n, &lazy, &s, &m));
  IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "from the page cache");
  IL_CHECK(s.resident >= 0.9);
  munmap(m, n);
  printf("warm: %s\n", s.phase[IL_STARTUP_READ].note);

  /* --no-mmap: the same bytes at the same addresses, now anonymous memory read at load */
  const il_startup_read_opts nommap = {.no_mmap = true};
  IL_CHECK_OK(il__read(path, n, &nommap, &s, &m));
  IL_CHECK(s.read_at_load);
  IL_CHECK_INT(s.phase[IL_STARTUP_READ].bytes, n - 4096);
  uint8_t *want = malloc(n);
  int fd = open(path, O_RDONLY);
  IL_CHECK(fd >= 0 && read(fd, want, n) == (ssize_t)n);
  close(fd);
  IL_CHECK(memcmp(want, m, n) == 0);
  IL_CHECK_INT(il__anon_kb(m), (long)(n >> 10)); /* every page the process's own, none the file's */
  printf("no-mmap: %s\n", s.phase[IL_STARTUP_READ].note);
  munmap(m, n);
  /* --no-mmap --load-pipeline: the read runs beside the caller; il_load_wait gives a range once
   * it is in, il_startup_read_finish the rest */
  const il_startup_read_opts beside = {.no_mmap = true, .pipeline = true};
  {
    int fd2 = open(path, O_RDONLY);
    m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd2, 0);
    close(fd2);
    il_startup_begin(&s);
    IL_CHECK_OK(il_startup_read(&s, path, m, n, 4096, &beside));
    IL_CHECK(s.bg != NULL);
    IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "beside the upload");
    IL_CHECK_INT(s.phase[IL_STARTUP_READ].bytes, 0); /* counted where it ran */
    IL_CHECK_OK(il_load_wait(m + n - 100, 100));
    IL_CHECK(memcmp(want + n - 100, m + n - 100, 100) == 0);
    il_status rst = IL_ERR_INTERNAL;
    IL_CHECK(il_startup_read_finish(&s, &rst) > 0);
    IL_CHECK_OK(rst);
    IL_CHECK(s.bg == NULL);
    IL_CHECK(il_startup_read_finish(&s, &rst) == 0); /* a second call: nothing */
    il_startup_end(&s, false);
    IL_CHECK(memcmp(want, m, n) == 0);
    IL_CHECK_INT(il__anon_kb(m), (long)(n >> 10));
    munmap(m, n);
  }
  /* --direct-io from a dropped file: "from disk", read at load past the page cache, same bytes */
  const il_startup_read_opts direct = {.direct_io = true};
  const double gone = il__drop(path, n);
  IL_CHECK_OK(il__read(path, n, &direct, &s, &m));
  IL_CHECK(s.read_at_load && !s.mmap);
  IL_CHECK_INT(s.phase[IL_STARTUP_READ].bytes, n - 4096);
  IL_CHECK(memcmp(want, m, n) == 0);
  if (gone >= 0 && gone <= 0.1) {
    IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "from disk");
    if (s.direct_io) IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "O_DIRECT");
    else IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, "O_DIRECT refused");
  }
  printf("direct: %s\n", s.phase[IL_STARTUP_READ].note);
  munmap(m, n);
  /* --preload over the mapping: every byte counted as read at load */
  const il_startup_read_opts pre = {.preload = true};
  IL_CHECK_OK(il__read(path, n, &pre, &s, &m));
  IL_CHECK(s.read_at_load && s.mmap);
  IL_CHECK_INT(s.phase[IL_STARTUP_READ].bytes, n - 4096);
  IL_CHECK(il_startup_resident(m, n) >= 0.9);
  munmap(m, n);
  free(want);
  unlink(path);
}

/* il_startup_read_file: the file's bytes, buffered and with O_DIRECT (a size that is not a
 * multiple of the request or of 4 KiB, so the last piece and the buffered tail run); O_DIRECT
 * into a buffer off the 4 KiB granule is refused by the kernel and read buffered instead; a
 * dropped file read with O_DIRECT stays out of the page cache. */
static void test_read_file(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/pieces.bin", il__dir);
  const size_t n = ((size_t)8 << 20) * 2 + 12345; /* three requests, the last one short */
  IL_CHECK_INT(il__write_file(path, n), 0);
  uint8_t *want = malloc(n), *got = NULL;
  int fd = open(path, O_RDONLY);
  IL_CHECK(fd >= 0 && read(fd, want, n) == (ssize_t)n);
  close(fd);
  IL_CHECK_INT(posix_memalign((void **)&got, 4096, n + 4096), 0);
  il_startup_read_info ri;
  memset(got, 0, n + 4096);
  IL_CHECK_OK(il_startup_read_file(path, got, n, false, &ri));
  IL_CHECK(memcmp(want, got, n) == 0);
  IL_CHECK(ri.threads >= 1 && ri.threads <= 4);
  IL_CHECK_INT(ri.request, (size_t)8 << 20);
  IL_CHECK(!ri.direct && !ri.direct_refused);
  const double left = il__drop(path, n);
  memset(got, 0, n + 4096);
  IL_CHECK_OK(il_startup_read_file(path, got, n, true, &ri));
  IL_CHECK(memcmp(want, got, n) == 0);
  struct statfs fs;
  const bool tmpfs = statfs(il__dir, &fs) == 0 && fs.f_type == 0x01021994; /* TMPFS_MAGIC: no alignment rule */
  if (ri.direct_refused) {
    printf("SKIP (part): O_DIRECT refused by the filesystem of %s\n", il__dir);
  } else {
    IL_CHECK(ri.direct);
    /* past the page cache: the dropped file is still not resident (the buffered tail is < 4 KiB) */
    if (left >= 0 && left <= 0.1) IL_CHECK(il__resident_now(path, n) < 0.1);
    /* a buffer 8 bytes off the granule: the kernel refuses O_DIRECT, the bytes still come */
    memset(got, 0, n + 4096);
    IL_CHECK_OK(il_startup_read_file(path, got + 8, n, true, &ri));
    IL_CHECK(memcmp(want, got + 8, n) == 0);
    if (tmpfs) printf("SKIP (part): tmpfs takes an unaligned O_DIRECT buffer\n");
    else IL_CHECK(ri.direct_refused && !ri.direct);
  }
  /* a file shorter than asked: an error naming the file and the offset */
  IL_CHECK_INT(il_startup_read_file(path, got, n + 4096, false, &ri), IL_ERR_IO);
  IL_CHECK_CONTAINS(il_error_detail(), path);
  IL_CHECK_CONTAINS(il_error_detail(), "end of file");
  free(want);
  free(got);
  unlink(path);
}

/* The host counters of a GGUF file's bytes: mapped, then read in (--no-mmap), then closed. */
static void test_read_accounting(const char *gguf, size_t size) {
  il_mem_stats m0, m1, m2, m3;
  il_mem_stats_get(&m0);
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(gguf, &g));
  if (!g) return;
  il_mem_stats_get(&m1);
  IL_CHECK_INT(m1.mapped[IL_MEM_WEIGHTS] - m0.mapped[IL_MEM_WEIGHTS], size);
  IL_CHECK_INT(m1.current[IL_MEM_WEIGHTS], m0.current[IL_MEM_WEIGHTS]);
  IL_CHECK(!il_gguf_read_in(g));
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.no_mmap = true;
  il_startup s;
  il_startup_begin(&s);
  IL_CHECK_OK(il_startup_read_gguf(&s, g, &cfg));
  il_startup_end(&s, false);
  il_mem_stats_get(&m2);
  IL_CHECK(il_gguf_read_in(g));
  IL_CHECK_INT(m2.mapped[IL_MEM_WEIGHTS], m0.mapped[IL_MEM_WEIGHTS]);
  IL_CHECK_INT(m2.current[IL_MEM_WEIGHTS] - m0.current[IL_MEM_WEIGHTS], size);
  IL_CHECK_INT(s.phase[IL_STARTUP_READ].bytes, size - il_gguf_data_offset(g));
  IL_CHECK_CONTAINS(s.phase[IL_STARTUP_READ].note, " into memory");
  il_gguf_close(g);
  il_mem_stats_get(&m3);
  IL_CHECK_INT(m3.mapped[IL_MEM_WEIGHTS], m0.mapped[IL_MEM_WEIGHTS]);
  IL_CHECK_INT(m3.current[IL_MEM_WEIGHTS], m0.current[IL_MEM_WEIGHTS]);
}

/* `inferlab run` on a GGUF file, timed from outside. */
static void run_once(const char *cli, const char *gguf, const char *extra, bool expect_cold) {
  char json[300], cmd[1200], out[4096];
  snprintf(json, sizeof json, "%s/startup.json", il__dir);
  snprintf(cmd, sizeof cmd, "exec %s run -m %s -n 1 -p Hi --no-echo %s --startup-json %s 2>&1", cli, gguf, extra, json);
  const double t0 = il_time_now();
  int rc = il_test_run(cmd, out, sizeof out);
  const double t1 = il_time_now();
  IL_CHECK_INT(rc, 0);
  if (rc) {
    fprintf(stderr, "%s\n", out);
    return;
  }
  char *j = il_test_read_file(json, NULL);
  IL_CHECK(j != NULL);
  if (!j) return;
  const double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
  const double origin = il__num_after(j, "\"origin\":"), end = il__num_after(j, "\"end\":"),
               total = il__num_after(j, "\"total_seconds\":");
  IL_CHECK(origin >= t0 - tick); /* the kernel's start time is truncated to a tick */
  IL_CHECK(end <= t1 + 1e-4);
  IL_CHECK(end > origin);
  double sum = 0;
  int n = 0;
  bool inside = true;
  for (const char *p = strstr(j, "\"phases\""); p && (p = strstr(p, "{\"name\"")); p++, n++) {
    const double s = il__num_after(p, "\"start\":"), e = il__num_after(p, "\"end\":");
    sum += il__num_after(p, "\"seconds\":");
    inside &= s >= origin - 1e-4 && e <= end + 1e-4 && e >= s - 1e-4; /* 12 digits of uptime seconds */
  }
  IL_CHECK(n >= 6);
  IL_CHECK(inside);
  IL_CHECK_NEAR(sum, total, 1e-6 + 1e-6 * n);       /* the phases are the whole timeline */
  IL_CHECK(sum <= (t1 - t0) + tick);                /* and fit in the wall time measured outside */
  IL_CHECK_CONTAINS(j, "\"name\":\"first_token\"");
  const char *rd = strstr(j, "\"name\":\"read\"");
  IL_CHECK(rd != NULL);
  if (rd) {
    const char *note = strstr(rd, "\"note\":\"");
    IL_CHECK(note && strstr(note, expect_cold ? "\"note\":\"from disk" : "\"note\":\"from the page cache") == note);
  }
  const bool no_mmap = (strstr(extra, "--no-mmap") && !strstr(extra, "--mmap")) || strstr(extra, "--direct-io");
  IL_CHECK_CONTAINS(j, no_mmap ? "\"mmap\":false" : "\"mmap\":true");
  const bool at_load = no_mmap || strstr(extra, "--preload") || strstr(extra, "--mlock");
  IL_CHECK_CONTAINS(j, at_load ? "\"read_at_load\":true" : "\"read_at_load\":false");
  if (strstr(extra, "--mlock")) /* locked, or a warning that names the limit */
    IL_CHECK(strstr(j, "\"mlocked\":true") || strstr(out, "--mlock:"));
  printf("run %s: timeline %.4f s of %.4f s measured outside (%.1f%%; the rest: fork before the start, report and "
         "exit after the first token)\n",
         extra, sum, t1 - t0, 100 * sum / (t1 - t0));
  free(j);
}

/* --load-pipeline on sim with a throttled link: the same greedy tokens as without it, the
 * upload's note names the overlapped reads, and run_once's checks hold (the phases are the
 * whole timeline and fit in the wall time measured outside). */
static void test_pipeline(const char *cli, const char *gguf) {
  static const char dev[] = "--device sim:1GiB,pcie=1GB/s";
  char a[4096], b[4096];
  IL_CHECK_INT(il_test_runf(a, sizeof a, "%s run -m %s -n 8 -p Hello --temp 0 --no-echo %s 2>/dev/null", cli, gguf, dev), 0);
  IL_CHECK_INT(il_test_runf(b, sizeof b, "%s run -m %s -n 8 -p Hello --temp 0 --no-echo %s --load-pipeline 2>/dev/null", cli,
                            gguf, dev), 0);
  IL_CHECK(a[0] != 0);
  IL_CHECK_STR(a, b);
  char e[8192];
  IL_CHECK_INT(il_test_runf(e, sizeof e, "%s run -m %s -n 1 -p Hi --no-echo %s --load-pipeline 2>&1 >/dev/null", cli, gguf, dev), 0);
  IL_CHECK_CONTAINS(e, "pages read beside it");
  /* the sim backs its weights' memory at allocation: counted in alloc, not in the upload */
  IL_CHECK_CONTAINS(e, "the weights' device memory backed");
  IL_CHECK_INT(il_test_runf(e, sizeof e, "%s run -m %s -n 1 -p Hi --no-echo %s --load-pipeline --no-mmap 2>&1 >/dev/null", cli,
                            gguf, dev), 0);
  IL_CHECK_NOT_CONTAINS(e, "pages read beside it"); /* mmap's page reader: not with the file read in */
  /* --no-mmap's read runs beside the placements: the read phase says so, the upload holds it */
  IL_CHECK_CONTAINS(e, " beside the upload on ");
  IL_CHECK_CONTAINS(e, "file read beside it");
  IL_CHECK_INT(il_test_runf(b, sizeof b, "%s run -m %s -n 8 -p Hello --temp 0 --no-echo %s --load-pipeline --no-mmap 2>/dev/null",
                            cli, gguf, dev), 0);
  IL_CHECK_STR(a, b); /* the same tokens from the weights read beside the upload */
  IL_CHECK_INT(il_test_runf(b, sizeof b, "%s run -m %s -n 8 -p Hello --temp 0 --no-echo %s --load-pipeline --direct-io 2>/dev/null",
                            cli, gguf, dev), 0);
  IL_CHECK_STR(a, b);
  run_once(cli, gguf, "--device sim:1GiB,pcie=1GB/s --load-pipeline", false);
  run_once(cli, gguf, "--device sim:1GiB,pcie=1GB/s --load-pipeline --no-mmap", false);
}

static void test_run(void) {
  const char *cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) {
    printf("SKIP (part): IL_CLI is not set to the inferlab binary\n");
    return;
  }
  char gguf[300], cmd[800];
  snprintf(gguf, sizeof gguf, "%s/tiny.gguf", il__dir);
  snprintf(cmd, sizeof cmd, "%s convert builtin:tiny -o %s 2>&1", cli, gguf);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  struct stat sb;
  if (stat(gguf, &sb) != 0) return;
  test_read_accounting(gguf, (size_t)sb.st_size);
  /* an unwritable --startup-json fails before the run, naming the flag (exit 73) */
  char out[2048];
  snprintf(cmd, sizeof cmd, "%s run -m %s -n 1 -p Hi --startup-json /nonexistent-dir/s.json 2>&1", cli, gguf);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 73);
  IL_CHECK_CONTAINS(out, "--startup-json");
  run_once(cli, gguf, "", false);
  run_once(cli, gguf, "--no-mmap", false);
  run_once(cli, gguf, "--mlock", false);
  run_once(cli, gguf, "--no-mmap --mmap", false); /* --mmap undoes --no-mmap */
  run_once(cli, gguf, "--direct-io", false);
  test_pipeline(cli, gguf);
  const double left = il__drop(gguf, (size_t)sb.st_size);
  if (left >= 0 && left <= 0.1) run_once(cli, gguf, "--preload", true);
  else printf("SKIP (part): the page cache kept %.0f%% of the dropped model\n", 100 * left);
  run_once(cli, gguf, "--preload", false); /* the run above read it: warm now */
  unlink(gguf);
}

int main(void) {
  snprintf(il__dir, sizeof il__dir, "/tmp/il_startup_XXXXXX");
  if (!mkdtemp(il__dir)) IL_SKIP("cannot create a temporary directory");
  test_marks();
  test_verdicts();
  test_read_source();
  test_read_file();
  test_run();
  char p[300];
  snprintf(p, sizeof p, "%s/startup.json", il__dir);
  unlink(p);
  rmdir(il__dir);
  return il_test_finish();
}
