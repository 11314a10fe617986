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

#define IL__READ_CHUNK ((size_t)16 << 20) /* one read() request of --no-mmap */

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
static void il__listen(void) { il_load_listen(il__on_mapped, il__on_converted); }

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

/* --no-mmap: the mapping's pages become anonymous memory at the same addresses, filled from
 * the file with read() requests of IL__READ_CHUNK. */
static il_status il__read_into(const char *path, void *map, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return il_error(IL_ERR_IO, "%s: --no-mmap: cannot open: %s", path, strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (mmap(map, size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
    int e = errno;
    close(fd);
    return il_error(IL_ERR_IO, "%s: --no-mmap: cannot replace the mapping of %zu bytes: %s", path, size, strerror(e));
  }
  uint8_t *dst = map;
  size_t off = 0;
  while (off < size) {
    const size_t want = size - off < IL__READ_CHUNK ? size - off : IL__READ_CHUNK;
    ssize_t r = read(fd, dst + off, want);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : 0;
      close(fd);
      return il_error(IL_ERR_IO, "%s: --no-mmap: read at offset %zu: %s", path, off,
                      r < 0 ? strerror(e) : "end of file before the mapped size (the file changed)");
    }
    off += (size_t)r;
  }
  close(fd);
  mprotect(map, size, PROT_READ); /* the weights are read-only, as the file mapping was */
  return IL_OK;
}

il_status il_startup_read(il_startup *s, const char *path, void *map, size_t size, size_t data_off,
                          const il_startup_read_opts *o) {
  const size_t data = size > data_off ? size - data_off : 0;
  s->file_bytes = data;
  s->mmap = !o->no_mmap;
  s->resident = il__resident_at_first_map(path, size);
  if (s->resident < -1) s->resident = il_startup_resident((const uint8_t *)map + data_off, data);
  const char *src = s->resident < 0 ? "page cache unknown" : s->resident >= 0.9 ? "from the page cache"
                    : s->resident <= 0.1                         ? "from disk"
                                                                 : "partly from disk";
  char res[64] = "";
  if (s->resident >= 0) snprintf(res, sizeof res, " (%.0f%% resident when first mapped)", 100 * s->resident);
  il_startup_mark(s, IL_STARTUP_READ, 0); /* the residency check itself */
  if (o->no_mmap) {
    IL_TRY(il__read_into(path, map, size));
    s->read_at_load = true;
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
  il_startup_mark(s, IL_STARTUP_READ, s->read_at_load ? data : 0);
  const il_startup_phase *ph = &s->phase[IL_STARTUP_READ];
  if (s->read_at_load)
    il_startup_note(s, IL_STARTUP_READ, "%s%s, %s at %.0f MB/s%s", src, res,
                    o->no_mmap ? "read() into memory" : "mmap, pages touched at load",
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
               "(serve --preload and keep the server running, or read the file once before: cat FILE >/dev/null)",
               mb, rate);
    else if (s->mmap)
      snprintf(buf, n, "%.0f MB faulted in through mmap at %.0f MB/s from the page cache: --no-mmap reads it "
               "with large requests; compare the two (inferlab experiment ... --no-mmap)", mb, rate);
    else
      snprintf(buf, n, "%.0f MB copied by read() from the page cache at %.0f MB/s (a memory copy): the "
               "default --mmap maps the cached pages without copying them; compare the two "
               "(inferlab experiment ... --mmap)", mb, rate);
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
  if (cfg->no_mmap) IL_TRY(il_gguf_note_read_in(g)); /* weights read, no longer mapped */
  const il_startup_read_opts o = {.no_mmap = cfg->no_mmap, .preload = cfg->preload, .mlock = cfg->mlock};
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
  il_startup_note(s, IL_STARTUP_ALLOC, "kv %s for %d positions, activations %s",
                  il_mem_format_bytes((size_t)kv_bytes, a, sizeof a), n_ctx,
                  il_mem_format_bytes((size_t)act_bytes, b, sizeof b));
}

void il_startup_first_token(il_startup *s) {
  if (s->ready <= 0 || s->phase[IL_STARTUP_FIRST_TOKEN].end > 0) return;
  il_startup_mark(s, IL_STARTUP_FIRST_TOKEN, 0);
  il_startup_note(s, IL_STARTUP_FIRST_TOKEN, "prompt, its forward pass and the first sample");
}
