/* engine/startup: the startup timeline, the weights' read and the verdict. */
#include "engine/startup.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/jsonw.h"
#include "core/loadsink.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/units.h"
#include "engine/config.h"
#include "format/gguf.h"
#include "memory/mem.h"

#define IL__READ_CHUNK ((size_t)8 << 20) /* one read() request of --no-mmap */

static const char *const il__names[IL_STARTUP_COUNT] = {
    "process", "config", "backend", "open", "metadata", "tokenizer", "read", "convert", "upload", "alloc", "warmup",
    "first_token"};

static _Thread_local il_startup *il__cur;
static double il__t_main;      /* main's start, CLOCK_MONOTONIC; 0 when main did not record it */
static bool il__process_taken; /* the process's phases went to an engine already */

const char *il_startup_phase_name(il_startup_phase_id p) { return p < IL_STARTUP_COUNT ? il__names[p] : "?"; }

/* format/ and model/ report through core/loadsink; this module listens from the first main or
 * engine open on. */
static void il__on_mapped(const char *path, const void *map, size_t size) { il_startup_file_mapped(path, map, size, 0); }
static void il__on_converted(double seconds, uint64_t bytes) { il_startup_add(IL_STARTUP_CONVERT, seconds, bytes); }
static pthread_once_t il__listen_once = PTHREAD_ONCE_INIT;
static il_status il__bg_wait(const void *p, size_t n);
static void il__on_backed(double seconds, uint64_t bytes) {
  il_startup_add(IL_STARTUP_ALLOC, seconds, 0); /* the bytes are the weights', counted by the upload */
  if (il__cur) il__cur->backed_seconds += seconds, il__cur->backed_bytes += bytes;
}
static void il__listen(void) {
  il_load_listen(il__on_mapped, il__on_converted);
  il_load_listen_wait(il__bg_wait);
  il_load_listen_backed(il__on_backed);
}

void il_startup_main(void) {
  pthread_once(&il__listen_once, il__listen);
  il__t_main = il_time_now();
}

void il_startup_skip_process(void) { il__process_taken = true; }

/* The process's start on CLOCK_MONOTONIC: its age (CLOCK_BOOTTIME now less the kernel's start
 * time, field 22 of /proc/self/stat, in clock ticks since boot) back from now. 0 when unknown. */
static double il__process_start(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (!p) return 0;
  /* after ')': field 3 (state) ... field 22 (starttime) */
  int field = 2;
  for (; *p && field < 22; p++)
    if (*p == ' ') field++;
  char *end;
  unsigned long long ticks = strtoull(p, &end, 10);
  const long hz = sysconf(_SC_CLK_TCK);
  if (end == p || hz <= 0) return 0;
  struct timespec bt;
  clock_gettime(CLOCK_BOOTTIME, &bt);
  const double mono = il_time_now(), boot = (double)bt.tv_sec + (double)bt.tv_nsec * 1e-9;
  const double age = boot - (double)ticks / (double)hz;
  return age >= 0 && age < mono ? mono - age : 0;
}

static void il__set(il_startup *s, il_startup_phase_id p, double start, double end, uint64_t bytes) {
  il_startup_phase *ph = &s->phase[p];
  if (ph->start == 0 || start < ph->start) ph->start = start;
  if (end > ph->end) ph->end = end;
  ph->seconds += end - start;
  ph->bytes += bytes;
}

void il_startup_begin(il_startup *s) {
  pthread_once(&il__listen_once, il__listen);
  memset(s, 0, sizeof *s);
  s->resident = -1;
  const double now = il_time_now();
  s->origin = s->last = now;
  if (!il__process_taken) {
    const double ps = il__process_start();
    const double tm = il__t_main > 0 ? il__t_main : ps;
    if (ps > 0 && ps <= tm && tm <= now) {
      if (tm > ps) il__set(s, IL_STARTUP_PROCESS, ps, tm, 0);
      il_startup_note(s, IL_STARTUP_PROCESS, "exec and libraries (the kernel keeps the start to 1/%ld s)",
                      sysconf(_SC_CLK_TCK));
      il__set(s, IL_STARTUP_CONFIG, tm, now, 0);
      s->origin = ps;
    }
  }
  il__cur = s;
}

void il_startup_end(il_startup *s, bool ok) {
  if (il__cur == s) il__cur = NULL;
  if (ok) {
    il__process_taken = true;
    s->ready = s->last;
  }
}

void il_startup_mark(il_startup *s, il_startup_phase_id p, uint64_t bytes) {
  const double now = il_time_now();
  double t = now - s->last - s->carved;
  il_startup_phase *ph = &s->phase[p];
  if (ph->start == 0) ph->start = s->last;
  ph->end = now;
  ph->seconds += t > 0 ? t : 0;
  ph->bytes += bytes;
  s->last = now;
  s->carved = 0;
}

void il_startup_here(il_startup_phase_id p) {
  if (il__cur) il_startup_mark(il__cur, p, 0);
}

void il_startup_add(il_startup_phase_id p, double seconds, uint64_t bytes) {
  il_startup *s = il__cur;
  if (!s || seconds < 0) return;
  const double now = il_time_now();
  il_startup_phase *ph = &s->phase[p];
  if (ph->start == 0) ph->start = now - seconds;
  if (now > ph->end) ph->end = now;
  ph->seconds += seconds;
  ph->bytes += bytes;
  s->carved += seconds;
}

void il_startup_note(il_startup *s, il_startup_phase_id p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->phase[p].note, sizeof s->phase[p].note, fmt, ap);
  va_end(ap);
}

/* ---- the weights' read ---- */

#define IL__RESIDENT_SAMPLES 1024 /* pages asked about: a fraction to about 3%, under a millisecond on any file */

double il_startup_resident(const void *map, size_t size) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (!map || !size || !pg) return -1;
  const uintptr_t a = (uintptr_t)map & ~(uintptr_t)(pg - 1);
  const size_t n = ((uintptr_t)map + size - a + pg - 1) / pg;
  const size_t step = n > IL__RESIDENT_SAMPLES ? n / IL__RESIDENT_SAMPLES : 1;
  size_t in = 0, asked = 0;
  for (size_t i = 0; i < n; i += step, asked++) {
    unsigned char v = 0;
    if (mincore((void *)(a + i * pg), pg, &v) != 0) return -1;
    in += v & 1;
  }
  return asked ? (double)in / (double)asked : -1;
}

/* The residency of the last file mapped, when it was first mapped since an engine last took
 * it: a command may read its metadata before the engine opens it (run sizes the context from the
 * vocabulary), and those faults pull neighbouring pages in by readahead. */
static pthread_mutex_t il__first_lock = PTHREAD_MUTEX_INITIALIZER;
static char il__first_path[1024];
static double il__first_resident = -1;
static size_t il__first_size;

void il_startup_file_mapped(const char *path, const void *map, size_t size, size_t data_off) {
  pthread_mutex_lock(&il__first_lock);
  if (strcmp(il__first_path, path) || il__first_size != size) {
    snprintf(il__first_path, sizeof il__first_path, "%s", path);
    il__first_size = size;
    il__first_resident = size > data_off ? il_startup_resident((const uint8_t *)map + data_off, size - data_off) : -1;
  }
  pthread_mutex_unlock(&il__first_lock);
  il_startup_here(IL_STARTUP_OPEN);
}

static double il__resident_at_first_map(const char *path, size_t size) {
  pthread_mutex_lock(&il__first_lock);
  const double r = !strcmp(il__first_path, path) && il__first_size == size ? il__first_resident : -2;
  il__first_path[0] = 0; /* taken: the next open of the file looks again */
  pthread_mutex_unlock(&il__first_lock);
  return r;
}

/* Reads every page of p[0..n) once (one byte per page) so the mapping is filled now. */
static void il__touch(const uint8_t *p, size_t n) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < n; i += pg) sink ^= p[i];
  if (n) sink ^= p[n - 1];
  (void)sink;
}

/* ---- the read of --no-mmap ----
 * Three ways into memory of the process, one per CPU up to 4 workers each: copy-on-write of
 * the file's private mapping in place (--no-mmap's, where the kernel has MADV_POPULATE_WRITE:
 * the kernel copies each cached page into a new one, no zeroed page in between, no read());
 * buffered read() into anonymous memory (older kernels); O_DIRECT read() (--direct-io).
 * Workers share one counter of IL__READ_CHUNK-sized pieces of the file, in file order, so the
 * requests stay sequential as a whole; each has its own descriptor, so one worker's position
 * does not reset another's readahead. Before reading a piece a worker starts the readahead of
 * the one it will take next (POSIX_FADV_WILLNEED: the disk works while the copy runs) and
 * faults its destination in with one MADV_POPULATE_WRITE (a page fault per 4 KiB one at a
 * time inside read() costs more than the copy from the page cache). With O_DIRECT the pieces
 * go from the disk into the destination past the page cache; the bytes after the last whole
 * 4 KiB block, and everything where the filesystem or the buffer refuses O_DIRECT (EINVAL),
 * are read buffered. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define IL__DIRECT_ALIGN ((size_t)4096) /* O_DIRECT's offset, length and address granule */
#define IL__READ_THREADS_MAX 4

typedef struct {
  const char *path;
  uint8_t *dst;
  size_t size, n_chunks;
  bool direct;
  bool cow;         /* dst is the file's private mapping, made writable: each piece becomes the process's
                       own pages by one MADV_POPULATE_WRITE (a copy of each cached page, no zeroed page
                       and no second copy as read() into fresh memory pays) */
  int n_threads;
  pthread_mutex_t lock;
  pthread_cond_t done_cv; /* a piece finished (or the read failed) */
  uint8_t *state;   /* per piece: 0 free, 1 being read, 2 in memory */
  size_t next;      /* no piece before it is free */
  bool refused;     /* O_DIRECT was refused somewhere: the rest went buffered */
  int err;          /* the first failure: errno (or -1: the file ended early) and where */
  size_t err_off;
  const char *err_what;
} il__reader;

static void il__reader_fail(il__reader *r, int err, size_t off, const char *what) {
  pthread_mutex_lock(&r->lock);
  if (!r->err) r->err = err, r->err_off = off, r->err_what = what;
  r->next = r->n_chunks; /* the others stop at their next piece */
  pthread_cond_broadcast(&r->done_cv);
  pthread_mutex_unlock(&r->lock);
}

/* Reads [off, end) of fd into dst + off; false on a failure (recorded unless it is O_DIRECT's
 * EINVAL, which the caller turns into a buffered read). */
static bool il__pread_all(il__reader *r, int fd, size_t off, size_t end, bool direct, int *einval) {
  while (off < end) {
    ssize_t n = pread(fd, r->dst + off, end - off, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && direct && errno == EINVAL) {
      *einval = 1;
      return false;
    }
    if (n <= 0) {
      il__reader_fail(r, n < 0 ? errno : -1, off, "read");
      return false;
    }
    off += (size_t)n;
  }
  return true;
}

/* One reader's descriptors: buffered (always) and O_DIRECT (asked, not refused yet). */
typedef struct {
  int fd, dfd;
} il__reader_fds;

static bool il__reader_open(il__reader *r, il__reader_fds *f) {
  f->dfd = -1;
  f->fd = open(r->path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    il__reader_fail(r, errno, 0, "open");
    return false;
  }
  posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (r->direct) {
    f->dfd = open(r->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (f->dfd < 0) {
      pthread_mutex_lock(&r->lock);
      r->refused = true;
      pthread_mutex_unlock(&r->lock);
    }
  }
  return true;
}

static void il__reader_close(il__reader_fds *f) {
  if (f->dfd >= 0) close(f->dfd);
  if (f->fd >= 0) close(f->fd);
}

/* Reads piece k (taken: state 1) and marks it in memory; false on a failure. */
static bool il__read_piece(il__reader *r, il__reader_fds *f, size_t k) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const size_t off = k * IL__READ_CHUNK, end = off + IL__READ_CHUNK < r->size ? off + IL__READ_CHUNK : r->size;
  const size_t ahead = (k + (size_t)r->n_threads) * IL__READ_CHUNK;
  if (r->cow && ahead < r->size) /* the file's pages behind the next piece, read from disk while this one copies */
    madvise(r->dst + ahead, ahead + IL__READ_CHUNK < r->size ? IL__READ_CHUNK : r->size - ahead, MADV_WILLNEED);
  else if (f->dfd < 0 && f->fd >= 0 && ahead < r->size)
    posix_fadvise(f->fd, (off_t)ahead, (off_t)IL__READ_CHUNK, POSIX_FADV_WILLNEED);
  /* the whole pages of the piece's destination, faulted in at once (EINVAL before 5.14: the
   * read faults them) */
  const uintptr_t a = ((uintptr_t)(r->dst + off) + pg - 1) & ~(uintptr_t)(pg - 1);
  const uintptr_t b = (uintptr_t)(r->dst + end) & ~(uintptr_t)(pg - 1);
  if (r->cow) { /* dst and off are page-aligned; the last page holds the end of the file */
    const size_t len = ((end - off) + pg - 1) & ~(pg - 1);
    if (madvise(r->dst + off, len, MADV_POPULATE_WRITE) != 0) {
      il__reader_fail(r, errno, off, "copy-on-write of the mapping (MADV_POPULATE_WRITE)");
      return false;
    }
  } else if (b > a) {
    madvise((void *)a, b - a, MADV_POPULATE_WRITE);
  }
  size_t done = r->cow ? end : off;
  if (f->dfd >= 0) {
    const size_t dend = end == r->size ? off + (end - off) / IL__DIRECT_ALIGN * IL__DIRECT_ALIGN : end;
    int einval = 0;
    if (il__pread_all(r, f->dfd, off, dend, true, &einval)) done = dend;
    else if (!einval) return false;
    else { /* refused here: this reader goes buffered from now on */
      close(f->dfd);
      f->dfd = -1;
      pthread_mutex_lock(&r->lock);
      r->refused = true;
      pthread_mutex_unlock(&r->lock);
    }
  }
  int unused = 0;
  if (done < end && !il__pread_all(r, f->fd, done, end, false, &unused)) return false;
  pthread_mutex_lock(&r->lock);
  r->state[k] = 2;
  pthread_cond_broadcast(&r->done_cv);
  pthread_mutex_unlock(&r->lock);
  return true;
}

static void *il__reader_worker(void *arg) {
  il__reader *r = arg;
  il__reader_fds f = {-1, -1};
  if (!r->cow && !il__reader_open(r, &f)) return NULL;
  for (;;) {
    pthread_mutex_lock(&r->lock);
    while (r->next < r->n_chunks && r->state[r->next]) r->next++;
    const size_t k = r->next;
    if (k < r->n_chunks) r->state[k] = 1;
    pthread_mutex_unlock(&r->lock);
    if (k >= r->n_chunks || !il__read_piece(r, &f, k)) break;
  }
  il__reader_close(&f);
  return NULL;
}

static int il__read_threads(size_t n_chunks) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int t = cpus < 1 ? 1 : cpus > IL__READ_THREADS_MAX ? IL__READ_THREADS_MAX : (int)cpus;
  return (size_t)t > n_chunks ? (n_chunks ? (int)n_chunks : 1) : t;
}

static il_status il__reader_init(il__reader *r, const char *path, void *dst, size_t size, bool direct) {
  *r = (il__reader){.path = path, .dst = dst, .size = size, .direct = direct};
  r->n_chunks = (size + IL__READ_CHUNK - 1) / IL__READ_CHUNK;
  r->n_threads = il__read_threads(r->n_chunks);
  r->state = il_mem_calloc(IL_MEM_STAGING, r->n_chunks ? r->n_chunks : 1, "read pieces");
  if (!r->state) return IL_ERR_OOM;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->done_cv, NULL);
  return IL_OK;
}

static il_status il__reader_result(il__reader *r, il_startup_read_info *info, int threads) {
  if (info) *info = (il_startup_read_info){.threads = threads, .request = IL__READ_CHUNK,
                                           .direct = r->direct && !r->refused, .direct_refused = r->direct && r->refused,
                                           .cow = r->cow};
  il_status st = IL_OK;
  if (r->err)
    st = il_error(IL_ERR_IO, "%s: %s at offset %zu: %s", r->path, r->err_what, r->err_off,
                  r->err > 0 ? strerror(r->err) : "end of file before the expected size (the file changed)");
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->done_cv);
  il_mem_free(r->state);
  r->state = NULL;
  return st;
}

il_status il_startup_read_file(const char *path, void *dst, size_t size, bool direct, il_startup_read_info *info) {
  il__reader r;
  IL_TRY(il__reader_init(&r, path, dst, size, direct));
  pthread_t th[IL__READ_THREADS_MAX];
  int started = 0;
  for (int i = 1; i < r.n_threads; i++) {
    if (pthread_create(&th[started], NULL, il__reader_worker, &r) != 0) break;
    started++;
  }
  il__reader_worker(&r); /* the calling thread reads too */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  return il__reader_result(&r, info, started + 1);
}

/* ---- the read beside the upload (--no-mmap --load-pipeline) ----
 * The reader threads run while the engine places the weights; a placement that needs bytes
 * not in memory yet waits for them (core/loadsink's il_load_wait), and reads a piece itself
 * where no reader has taken it, so the upload order need not be the file's. One at a time
 * per process (engines open one after another). */
typedef struct il__bg_read {
  il__reader r;
  pthread_t th[IL__READ_THREADS_MAX];
  int started;
  double t0;
  bool mprotect_after;
} il__bg_read;

static pthread_mutex_t il__bg_lock = PTHREAD_MUTEX_INITIALIZER;
static il__bg_read *il__bg; /* the read in progress, for il_load_wait */
static il__bg_read il__bg_claimed; /* il__bg while a read is being started (its range is empty) */

static il_status il__bg_wait(const void *p, size_t n) {
  pthread_mutex_lock(&il__bg_lock);
  il__bg_read *g = il__bg;
  pthread_mutex_unlock(&il__bg_lock);
  if (!g || !n) return IL_OK;
  il__reader *r = &g->r;
  const uintptr_t lo = (uintptr_t)r->dst, q = (uintptr_t)p;
  if (q + n <= lo || q >= lo + r->size) return IL_OK; /* not the file being read */
  const size_t a = (q < lo ? 0 : q - lo) / IL__READ_CHUNK;
  const size_t e = (q + n > lo + r->size ? r->size : q + n - lo);
  const size_t b = (e + IL__READ_CHUNK - 1) / IL__READ_CHUNK;
  il__reader_fds f = {-1, -1};
  bool opened = false;
  for (size_t k = a; k < b; k++) {
    pthread_mutex_lock(&r->lock);
    const bool mine = !r->err && r->state[k] == 0;
    if (mine) r->state[k] = 1;
    while (!mine && !r->err && r->state[k] != 2) pthread_cond_wait(&r->done_cv, &r->lock);
    const bool failed = r->err != 0;
    pthread_mutex_unlock(&r->lock);
    if (failed) break;
    if (mine) {
      if (!r->cow && !opened && !(opened = il__reader_open(r, &f))) break;
      if (!il__read_piece(r, &f, k)) break;
    }
  }
  if (opened) il__reader_close(&f);
  pthread_mutex_lock(&r->lock);
  const int err = r->err;
  pthread_mutex_unlock(&r->lock);
  if (err) return il_error(IL_ERR_IO, "%s: --no-mmap --load-pipeline: %s at offset %zu: %s", r->path, r->err_what,
                           r->err_off, err > 0 ? strerror(err) : "end of file before the expected size (the file changed)");
  return IL_OK;
}

double il_startup_read_finish(il_startup *s, il_status *st) {
  il__bg_read *g = s->bg;
  if (!g) return 0;
  for (int i = 0; i < g->started; i++) pthread_join(g->th[i], NULL);
  pthread_mutex_lock(&il__bg_lock);
  if (il__bg == g) il__bg = NULL;
  pthread_mutex_unlock(&il__bg_lock);
  const double t = il_time_now() - g->t0;
  il_startup_read_info ri;
  il_status r = il__reader_result(&g->r, &ri, g->started);
  if (r == IL_OK) mprotect(g->r.dst, g->r.size, PROT_READ);
  if (st) *st = r;
  s->direct_io = ri.direct;
  s->bg = NULL;
  s->bg_seconds = t;
  il_mem_free(g);
  return t;
}

/* Whether the file's private mapping at map can become the process's own pages in place
 * (MADV_POPULATE_WRITE, Linux 5.14): made writable and its first page copied; else (EINVAL: an
 * older kernel) it stays read-only and the caller replaces it with anonymous memory and
 * read(). */
static bool il__cow_ready(void *map, size_t size) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (mprotect(map, size, PROT_READ | PROT_WRITE) != 0) return false;
  if (madvise(map, pg < size ? pg : size, MADV_POPULATE_WRITE) == 0) {
    madvise(map, size, MADV_SEQUENTIAL); /* a cold file: larger readahead behind each fault */
    return true;
  }
  mprotect(map, size, PROT_READ);
  return false;
}

/* --no-mmap --load-pipeline: the readers started on the anonymous memory at map, the bytes
 * before data_off (metadata the reader's structures point into) read before it returns. */
static il_status il__read_start(il_startup *s, const char *path, void *map, size_t size, size_t data_off, bool direct,
                                il_startup_read_info *info) {
  il__bg_read *g = il_mem_calloc(IL_MEM_STAGING, sizeof *g, "background read");
  il_status st = g ? il__reader_init(&g->r, path, map, size, direct) : IL_ERR_OOM;
  if (st != IL_OK) {
    il_mem_free(g);
    pthread_mutex_lock(&il__bg_lock);
    il__bg = NULL; /* the claim given back */
    pthread_mutex_unlock(&il__bg_lock);
    return st;
  }
  g->r.cow = !direct && il__cow_ready(map, size);
  if (!g->r.cow &&
      mmap(map, size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
    const int e = errno;
    (void)il__reader_result(&g->r, NULL, 0);
    il_mem_free(g);
    pthread_mutex_lock(&il__bg_lock);
    il__bg = NULL;
    pthread_mutex_unlock(&il__bg_lock);
    return il_error(IL_ERR_IO, "%s: --no-mmap: cannot replace the mapping of %zu bytes: %s", path, size, strerror(e));
  }
  g->t0 = il_time_now();
  pthread_mutex_lock(&il__bg_lock);
  il__bg = g;
  pthread_mutex_unlock(&il__bg_lock);
  s->bg = g;
  for (int i = 0; i < g->r.n_threads; i++)
    if (pthread_create(&g->th[g->started], NULL, il__reader_worker, &g->r) == 0) g->started++;
  *info = (il_startup_read_info){.threads = g->started, .request = IL__READ_CHUNK, .direct = direct, .cow = g->r.cow};
  /* no thread started: the placements read every piece they need themselves */
  return il__bg_wait(map, data_off ? data_off : 1);
}

/* --no-mmap: the mapping's pages become anonymous memory at the same addresses, filled from
 * the file by il_startup_read_file. */
static il_status il__read_into(const char *path, void *map, size_t size, bool direct, il_startup_read_info *info) {
  il_status st;
  if (!direct && il__cow_ready(map, size)) {
    il__reader r;
    IL_TRY(il__reader_init(&r, path, map, size, false));
    r.cow = true;
    pthread_t th[IL__READ_THREADS_MAX];
    int started = 0;
    for (int i = 1; i < r.n_threads; i++)
      if (pthread_create(&th[started], NULL, il__reader_worker, &r) == 0) started++;
    il__reader_worker(&r);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    st = il__reader_result(&r, info, started + 1);
  } else {
    if (mmap(map, size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
      return il_error(IL_ERR_IO, "%s: --no-mmap: cannot replace the mapping of %zu bytes: %s", path, size, strerror(errno));
    st = il_startup_read_file(path, map, size, direct, info);
  }
  if (st != IL_OK) {
    char why[900];
    snprintf(why, sizeof why, "%s", il_error_detail());
    return il_error(st, "--no-mmap: %s", why);
  }
  mprotect(map, size, PROT_READ); /* the weights are read-only, as the file mapping was */
  return IL_OK;
}

il_status il_startup_read(il_startup *s, const char *path, void *map, size_t size, size_t data_off,
                          const il_startup_read_opts *o) {
  const size_t data = size > data_off ? size - data_off : 0;
  s->file_bytes = data;
  s->mmap = !o->no_mmap && !o->direct_io;
  s->resident = il__resident_at_first_map(path, size);
  if (s->resident < -1) s->resident = il_startup_resident((const uint8_t *)map + data_off, data);
  const char *src = s->resident < 0 ? "page cache unknown" : s->resident >= 0.9 ? "from the page cache"
                    : s->resident <= 0.1                         ? "from disk"
                                                                 : "partly from disk";
  char res[64] = "";
  if (s->resident >= 0) snprintf(res, sizeof res, " (%.0f%% resident when first mapped)", 100 * s->resident);
  il_startup_mark(s, IL_STARTUP_READ, 0); /* the residency check itself */
  il_startup_read_info ri = {0};
  bool beside = false;
  bool bg_free = false; /* one read beside an upload at a time: claimed here; another engine's reads whole */
  if ((o->no_mmap || o->direct_io) && o->pipeline && !s->bg) {
    pthread_mutex_lock(&il__bg_lock);
    if (!il__bg) il__bg = &il__bg_claimed, bg_free = true;
    pthread_mutex_unlock(&il__bg_lock);
  }
  if ((o->no_mmap || o->direct_io) && o->pipeline && bg_free && !s->bg) {
    IL_TRY(il__read_start(s, path, map, size, data_off, o->direct_io, &ri));
    s->read_at_load = true;
    beside = true;
  } else if (o->no_mmap || o->direct_io) {
    IL_TRY(il__read_into(path, map, size, o->direct_io, &ri));
    s->read_at_load = true;
    s->direct_io = ri.direct;
  } else if (o->preload || o->mlock) {
    madvise((uint8_t *)map + (data_off & ~(size_t)(sysconf(_SC_PAGESIZE) - 1)), data + (data_off % (size_t)sysconf(_SC_PAGESIZE)),
            MADV_WILLNEED);
    il__touch((const uint8_t *)map + data_off, data);
    s->read_at_load = true;
  }
  if (o->mlock) {
    if (mlock(map, size) == 0) s->mlocked = true;
    else il_log(IL_LOG_WARN, "warning: --mlock: %s stays pageable: %s (RLIMIT_MEMLOCK: ulimit -l)", path, strerror(errno));
  }
  il_startup_mark(s, IL_STARTUP_READ, s->read_at_load && !beside ? data : 0);
  const il_startup_phase *ph = &s->phase[IL_STARTUP_READ];
  char how[96] = "mmap, pages touched at load";
  if (!s->mmap)
    snprintf(how, sizeof how, "%s, %d x %zu MiB %s", ri.direct ? "O_DIRECT read() past the page cache"
                                                  : ri.direct_refused ? "read() into memory (O_DIRECT refused here)"
                                                  : ri.cow ? "copied into memory (copy-on-write of the file's pages)"
                                                           : "read() into memory",
             ri.threads, ri.request >> 20, ri.cow ? "pieces" : "requests");
  if (beside)
    il_startup_note(s, IL_STARTUP_READ, "%s%s, %s beside the upload on %d thread%s (--load-pipeline; its "
                    "time is in the upload's)", src, res,
                    ri.cow ? "copied into memory" : ri.direct ? "O_DIRECT read()" : "read()", ri.threads,
                    ri.threads == 1 ? "" : "s");
  else if (s->read_at_load)
    il_startup_note(s, IL_STARTUP_READ, "%s%s, %s at %.0f MB/s%s", src, res, how,
                    ph->seconds > 0 ? (double)data / ph->seconds / 1e6 : 0.0, s->mlocked ? ", locked" : "");
  else
    il_startup_note(s, IL_STARTUP_READ, "%s%s, mmap: read on first use (counted in first_token)", src, res);
  return IL_OK;
}

/* ---- reports ---- */

double il_startup_total(const il_startup *s) { return s->last - s->origin; }

static double il__rate(const il_startup_phase *p) { return p->seconds > 0 && p->bytes ? (double)p->bytes / p->seconds : 0; }

il_startup_phase_id il_startup_verdict(const il_startup *s, char *buf, size_t n) {
  int best = IL_STARTUP_PROCESS;
  for (int i = 0; i < IL_STARTUP_COUNT; i++)
    if (s->phase[i].seconds > s->phase[best].seconds) best = i;
  const il_startup_phase *p = &s->phase[best];
  const double total = il_startup_total(s), share = total > 0 ? 100 * p->seconds / total : 0;
  const double mb = (double)p->bytes / 1e6, rate = il__rate(p) / 1e6;
  int w = snprintf(buf, n, "%s takes %.0f%% (%.3f of %.3f s): ", il__names[best], share, p->seconds, total);
  if (w < 0 || (size_t)w >= n) return (il_startup_phase_id)best;
  buf += w, n -= (size_t)w;
  const bool cold = s->resident >= 0 && s->resident < 0.5;
  switch ((il_startup_phase_id)best) {
  case IL_STARTUP_READ:
    if (cold)
      snprintf(buf, n, "%.0f MB read from disk at %.0f MB/s (a cold page cache): start from a warm cache "
               "(serve --preload and keep the server running, or read the file once before: cat FILE >/dev/null)%s",
               mb, rate, !s->mmap && !s->direct_io ? "; --direct-io reads it past the page cache (compare: "
                                                     "inferlab experiment ... --change direct-io=true)" : "");
    else if (s->mmap)
      snprintf(buf, n, "%.0f MB faulted in through mmap at %.0f MB/s from the page cache: --no-mmap reads it "
               "with large requests; compare the two (inferlab experiment ... --no-mmap)", mb, rate);
    else
      snprintf(buf, n, "%.0f MB copied from the page cache into memory of the process at %.0f MB/s (a new page "
               "for every 4 KiB, and the copy): the default --mmap maps the cached pages without copying them; "
               "compare the two (inferlab experiment ... --mmap)", mb, rate);
    break;
  case IL_STARTUP_FIRST_TOKEN:
    if (!s->read_at_load && s->file_bytes && s->resident >= 0 && s->resident < 0.9)
      snprintf(buf, n, "%.0f%% of the %.0f MB of weights were not in the page cache, so the first token read "
               "them from disk through mmap page faults, inside its time: --preload reads them at load (where "
               "the read phase measures it), a warm page cache (keep the server running) avoids the disk",
               100 * (1 - s->resident), (double)s->file_bytes / 1e6);
    else
      snprintf(buf, n, "the prompt's forward pass: a shorter prompt, or more threads/a faster device");
    break;
  case IL_STARTUP_CONVERT:
    if (!s->file_bytes)
      snprintf(buf, n, "built-in weights are generated at every start: export them once "
               "(inferlab convert builtin:NAME -o model.gguf) and run the file");
    else
      snprintf(buf, n, "%.0f MB repacked into the CPU GEMM's panel layout at load (%.0f MB/s; --repack, serve's "
               "default for a GGUF file on the CPU): --repack=false skips it, at the cost of batched decode speed "
               "(docs/devices.md)", mb, rate);
    break;
  case IL_STARTUP_UPLOAD:
    if (!s->read_at_load && s->file_bytes && s->resident >= 0 && s->resident < 0.9)
      snprintf(buf, n, "%.0f MB uploaded at %.0f MB/s, reading %.0f%% of the weights from disk through page "
               "faults on the way: --preload reads them first at the disk's pace (measured in the read phase), a "
               "warm page cache (keep the server running) leaves only the copies", mb, rate, 100 * (1 - s->resident));
    else if (s->link_rate > 0 && rate * 1e6 >= 0.8 * s->link_rate)
      snprintf(buf, n, "%.0f MB uploaded at %.0f MB/s, %.0f%% of the link's %.0f MB/s: the link is the limit; "
               "fewer bytes (a smaller weight type) or a server kept warm", mb, rate, 100 * rate * 1e6 / s->link_rate,
               s->link_rate / 1e6);
    else if (s->link_rate > 0)
      snprintf(buf, n, "%.0f MB uploaded at %.0f MB/s, %.0f%% of the link's %.0f MB/s: %s", mb, rate,
               100 * rate * 1e6 / s->link_rate, s->link_rate / 1e6,
               s->pinned ? "the time goes to the copies themselves (one tensor at a time), not to the link"
                         : "the copies, one tensor at a time from pageable memory into newly allocated device "
                           "memory, take longer than the link; overlapping the read with the copies hides part");
    else if (!p->bytes)
      snprintf(buf, n, "weights placed in host memory (nothing copied): the placement itself");
    else
      snprintf(buf, n, "%.0f MB uploaded at %.0f MB/s%s", mb, rate,
               s->pinned ? " through pinned staging" : " from pageable memory: pinned staging is faster");
    break;
  case IL_STARTUP_ALLOC:
    if (s->backed_seconds > 0.5 * p->seconds)
      snprintf(buf, n, "%.3f s of it backed %.0f MB of the weights' device memory with host pages at allocation "
               "(the sim's cost of simulating a device, which a GPU's memory does not have)", s->backed_seconds,
               (double)s->backed_bytes / 1e6);
    else
      snprintf(buf, n, "%.0f MB allocated, %.0f MB of it a KV cache for %d positions: a context sized to the "
             "requests (--ctx) allocates less", mb, (double)s->kv_bytes / 1e6, s->n_ctx);
    break;
  case IL_STARTUP_BACKEND:
    snprintf(buf, n, "the device's initialisation: paid once per process; keep a server running");
    break;
  case IL_STARTUP_TOKENIZER:
    snprintf(buf, n, "the vocabulary and merges: paid once per process; keep a server running");
    break;
  case IL_STARTUP_WARMUP:
    snprintf(buf, n, "--preload's warm-up pass: ready later, the first request faster; drop --preload to be ready sooner");
    break;
  case IL_STARTUP_PROCESS:
  case IL_STARTUP_CONFIG:
    snprintf(buf, n, "before the engine opened (exec, libraries, the command's own preparation)");
    break;
  case IL_STARTUP_OPEN:
    snprintf(buf, n, "opening and mapping the file (and asking the page cache about it): milliseconds at most; "
             "a start this short has nothing to shorten");
    break;
  default:
    snprintf(buf, n, "metadata parse (from a cold page cache it reads the metadata from disk): a warm page cache, "
             "a file with fewer or shorter metadata entries");
    break;
  }
  return (il_startup_phase_id)best;
}

/* A phase that took time or moved bytes; the read also when it only checked the page cache
 * (where the weights will come from is the point). */
static bool il__shown(const il_startup_phase *p, int i) {
  return p->seconds >= 0.0005 || p->bytes || (i == IL_STARTUP_READ && p->note[0]);
}

void il_startup_print(const il_startup *s, FILE *f, const char *prefix) {
  fprintf(f, "%sstartup: %.3f s from %s to %s\n", prefix, il_startup_total(s),
          s->phase[IL_STARTUP_PROCESS].seconds > 0 || s->phase[IL_STARTUP_CONFIG].seconds > 0 ? "the process's start"
                                                                                               : "the engine's open",
          s->phase[IL_STARTUP_FIRST_TOKEN].end > 0 ? "the first token" : "ready");
  for (int i = 0; i < IL_STARTUP_COUNT; i++) {
    const il_startup_phase *p = &s->phase[i];
    if (!il__shown(p, i)) continue;
    char b[32] = "", r[32] = "";
    if (p->bytes) il_mem_format_bytes((size_t)p->bytes, b, sizeof b);
    const bool moves = i == IL_STARTUP_READ || i == IL_STARTUP_CONVERT || i == IL_STARTUP_UPLOAD;
    if (moves && il__rate(p) > 0) snprintf(r, sizeof r, ", %.0f MB/s", il__rate(p) / 1e6);
    fprintf(f, "%s  %-11s %8.3f s %5.1f%%%s%s%s%s%s\n", prefix, il__names[i], p->seconds,
            il_startup_total(s) > 0 ? 100 * p->seconds / il_startup_total(s) : 0.0, *b ? "  " : "", b, r,
            p->note[0] ? "  " : "", p->note);
  }
  char v[512];
  il_startup_verdict(s, v, sizeof v);
  fprintf(f, "%s  verdict: %s\n", prefix, v);
}

void il_startup_json(const il_startup *s, il_jsonw *wp) {
#define w (*wp)
  il_jsonw_obj(&w);
  il_jsonw_knum(&w, "origin", s->origin);
  il_jsonw_knum(&w, "end", s->last);
  il_jsonw_knum(&w, "total_seconds", il_startup_total(s));
  il_jsonw_kbool(&w, "mmap", s->mmap);
  il_jsonw_kbool(&w, "read_at_load", s->read_at_load);
  il_jsonw_kbool(&w, "mlocked", s->mlocked);
  il_jsonw_knum(&w, "resident_before", s->resident);
  il_jsonw_kint(&w, "file_bytes", (long long)s->file_bytes);
  il_jsonw_knum(&w, "link_rate", s->link_rate);
  il_jsonw_key(&w, "phases");
  il_jsonw_arr(&w);
  for (int i = 0; i < IL_STARTUP_COUNT; i++) {
    const il_startup_phase *p = &s->phase[i];
    if (p->end == 0) continue;
    il_jsonw_obj(&w);
    il_jsonw_kstr(&w, "name", il__names[i]);
    il_jsonw_knum(&w, "start", p->start);
    il_jsonw_knum(&w, "end", p->end);
    il_jsonw_knum(&w, "seconds", p->seconds);
    il_jsonw_kint(&w, "bytes", (long long)p->bytes);
    il_jsonw_knum(&w, "rate", il__rate(p));
    il_jsonw_kstr(&w, "note", p->note);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  char v[512];
  il_startup_phase_id d = il_startup_verdict(s, v, sizeof v);
  il_jsonw_key(&w, "verdict");
  il_jsonw_obj(&w);
  il_jsonw_kstr(&w, "phase", il__names[d]);
  il_jsonw_kstr(&w, "text", v);
  il_jsonw_obj_end(&w);
  il_jsonw_obj_end(&w);
#undef w
}

il_status il_startup_write_json(const il_startup *s, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, false);
  il_startup_json(s, &w);
  return il_jsonw_finish(&w);
}


double il_startup_phase_seconds(const il_startup *s, const char *name) {
  for (int i = 0; i < IL_STARTUP_COUNT; i++)
    if (name && !strcmp(name, il__names[i])) return s->phase[i].seconds;
  return -1;
}

/* ---- the engine's steps ---- */

void il_startup_builtin(il_startup *s, uint64_t bytes) {
  il_startup_mark(s, IL_STARTUP_CONVERT, bytes);
  il_startup_note(s, IL_STARTUP_CONVERT, "built-in weights generated at load, in memory");
}

il_status il_startup_read_gguf(il_startup *s, il_gguf *g, const il_config *cfg) {
  void *map = (void *)(uintptr_t)il_gguf_image(g); /* --no-mmap replaces the read-only mapping in place */
  if (!map) return IL_OK; /* a file image in memory: nothing to read */
  if (cfg->no_mmap || cfg->direct_io) IL_TRY(il_gguf_note_read_in(g)); /* weights read, no longer mapped */
  const il_startup_read_opts o = {.no_mmap = cfg->no_mmap, .direct_io = cfg->direct_io, .preload = cfg->preload,
                                  .mlock = cfg->mlock, .pipeline = cfg->load_pipeline};
  return il_startup_read(s, il_gguf_path(g), map, il_gguf_file_size(g), (size_t)il_gguf_data_offset(g), &o);
}

void il_startup_upload(il_startup *s, const char *kind, const char *name, uint64_t bytes) {
  il_startup_mark(s, IL_STARTUP_UPLOAD, bytes);
  snprintf(s->device_kind, sizeof s->device_kind, "%s", kind);
  s->pinned = !strcmp(kind, "cuda"); /* the CUDA backend stages every upload through pinned buffers */
  const char *pcie = strstr(name, "pcie=");
  if (pcie) {
    char rate[32];
    size_t n = strcspn(pcie + 5, ",");
    snprintf(rate, sizeof rate, "%.*s", (int)(n < sizeof rate - 1 ? n : sizeof rate - 1), pcie + 5);
    if (!il_parse_rate(rate, &s->link_rate)) s->link_rate = 0;
  }
  const il_startup_phase *p = &s->phase[IL_STARTUP_UPLOAD];
  if (!bytes)
    il_startup_note(s, IL_STARTUP_UPLOAD, "weights used in place in host memory (%s)", kind);
  else if (s->link_rate > 0)
    il_startup_note(s, IL_STARTUP_UPLOAD, "to %s, %.0f%% of the link's %.0f MB/s, %s", name,
                    p->seconds > 0 ? 100 * (double)bytes / p->seconds / s->link_rate : 0.0, s->link_rate / 1e6,
                    s->pinned ? "pinned staging" : "from pageable memory");
  else
    il_startup_note(s, IL_STARTUP_UPLOAD, "to %s, %s", name, s->pinned ? "pinned staging" : "from pageable memory");
  const il_startup_phase *c = &s->phase[IL_STARTUP_CONVERT];
  if (c->bytes && s->file_bytes) il_startup_note(s, IL_STARTUP_CONVERT, "weights repacked for the backend at load");
}

void il_startup_alloc(il_startup *s, int32_t n_ctx, uint64_t kv_bytes, uint64_t act_bytes) {
  il_startup_mark(s, IL_STARTUP_ALLOC, kv_bytes + act_bytes);
  s->n_ctx = n_ctx;
  s->kv_bytes = kv_bytes;
  char a[32], b[32];
  char c[32], w[80] = "";
  if (s->backed_bytes)
    snprintf(w, sizeof w, "; the weights' device memory backed %s in %.3f s", il_mem_format_bytes((size_t)s->backed_bytes, c, sizeof c),
             s->backed_seconds);
  il_startup_note(s, IL_STARTUP_ALLOC, "kv %s for %d positions, activations %s%s",
                  il_mem_format_bytes((size_t)kv_bytes, a, sizeof a), n_ctx,
                  il_mem_format_bytes((size_t)act_bytes, b, sizeof b), w);
}

void il_startup_first_token(il_startup *s) {
  if (s->ready <= 0 || s->phase[IL_STARTUP_FIRST_TOKEN].end > 0) return;
  il_startup_mark(s, IL_STARTUP_FIRST_TOKEN, 0);
  il_startup_note(s, IL_STARTUP_FIRST_TOKEN, "prompt, its forward pass and the first sample");
}
