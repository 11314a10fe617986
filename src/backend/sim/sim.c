/* backend/sim: budgeted buffers, counted transfers, CPU kernels. */
#include "backend/sim/sim.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend/dry.h"
#include "core/loadsink.h"
#include "core/timer.h"
#include "core/units.h"

typedef struct {
  il__cpu cpu; /* first: the CPU ops read b->impl as an il__cpu */
  il_mem_space *space;
  size_t budget, ctx_bytes;
  double pcie; /* bytes/s; 0 = unthrottled */
  double hbm, flops; /* the compute model (hbm=, tflops=): bytes/s and multiply-adds x 2 per s; 0 = none */
  double link_up, link_down; /* when each direction of the link finishes what it was given (s->lock) */
  bool dry;    /* the planner's dry run: real allocator, no memory behind it, no compute */
  uintptr_t next_fake; /* dry: the next segment's address (never dereferenced) */
  il_caching *alloc; /* the caching allocator over the budget */
  pthread_mutex_t lock;
  il_transfer_stats xfer;
  /* the copy stream of upload_async: a thread that runs the queued uploads in order (started
   * at the first one), so a copy overlaps the ops as a device's copy engine would */
  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  struct il__sim_job *head, *tail;
  int inflight;   /* queued or running */
  bool copier_on, quit;
  pthread_t copier;
} il__sim;

typedef struct il__sim_job {
  struct il__sim_job *next;
  il_backend *b;
  il_tensor dst;
  const void *src;
  size_t bytes;
  il_event *ev;
} il__sim_job;

/* Segments come from host memory: the simulated device's "cudaMalloc". The budget is the
 * allocator's cap, so this only fails when the host itself is out of memory. */
static il_status il__seg_alloc(void *ctx, size_t bytes, void **base) {
  il__sim *s = ctx;
  if (s->dry) { /* addresses only: the caching allocator never touches segment memory */
    *base = (void *)s->next_fake;
    s->next_fake += (bytes + 4095) & ~(uintptr_t)4095;
    return IL_OK;
  }
  *base = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
  if (!*base) return il_error(IL_ERR_OOM, "sim: the host could not back a segment of %zu bytes", bytes);
  return IL_OK;
}

static void il__seg_free(void *ctx, void *base, size_t bytes) {
  if (!((il__sim *)ctx)->dry) free(base);
}

static il__sim *il__s(il_backend *b) { return (il__sim *)b->impl; }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* A device's memory exists when it is allocated; the sim's is host memory, whose pages the
 * kernel faults in and zeroes one at a time on first write, which would land in the weights'
 * upload and cost more than the link. A weight's buffer is backed in one call when it is
 * allocated (MADV_POPULATE_WRITE over its whole pages; where the kernel lacks it, the copy
 * faults them as before), and the time is reported as allocation (core/loadsink), not as the
 * link's. */
static void il__back(void *p, size_t bytes) {
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
  const uintptr_t e = ((uintptr_t)p + bytes) & ~(pg - 1);
  if (e <= a) return;
  const double t0 = il_time_now();
  if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0) il_load_backed(il_time_now() - t0, e - a);
}

static il_status il__sim_alloc(il_backend *b, il_mem_category cat, size_t bytes, const char *what, il_buffer **out) {
  il__sim *s = il__s(b);
  *out = NULL;
  il_buffer *buf = il_mem_alloc(IL_MEM_OTHER, sizeof *buf, "buffer record");
  if (!buf) return IL_ERR_OOM;
  il_caching_block *blk = NULL;
  il_status st = il_caching_alloc(s->alloc, cat, bytes, what, &blk);
  if (st == IL_ERR_OOM) {
    il_caching_oom o;
    il_mem_record_oom(s->space, cat, bytes, what, "limit", 0);
    if (il_caching_last_oom(s->alloc, &o)) il_mem_record_oom_device(o.reserved, o.largest_free, o.fragmentation);
  }
  /* counted per category in the sim's space (and where fault injection reaches every buffer) */
  if (st == IL_OK) st = il_mem_space_reserve(s->space, cat, il_caching_block_size(blk), what);
  if (st != IL_OK) {
    il_caching_free(s->alloc, blk);
    il_mem_free(buf);
    return st;
  }
  *buf = (il_buffer){.base = il_caching_block_ptr(blk), .size = bytes, .owner = b, .cat = cat, .wrapped = false, .handle = blk};
  *out = buf;
  if (cat == IL_MEM_WEIGHTS && !s->dry) il__back(buf->base, bytes);
  return IL_OK;
}

static void il__sim_free(il_backend *b, il_buffer *buf) {
  if (!buf) return;
  il__sim *s = il__s(b);
  il_mem_space_release(s->space, buf->cat, il_caching_block_size(buf->handle));
  il_caching_free(s->alloc, buf->handle);
  il_mem_free(buf);
}

static void il__sim_allocator_stats(il_backend *b, il_caching_stats *out) { il_caching_stats_get(il__s(b)->alloc, out); }

static il_status il__sim_snapshot(il_backend *b, il_caching_snapshot *out) {
  return il_caching_snapshot_take(il__s(b)->alloc, out);
}

static size_t il__sim_empty_cache(il_backend *b) { return il_caching_empty_cache(il__s(b)->alloc); }

/* Device memory is not host memory: callers must upload and download. */
static void *il__sim_host_ptr(il_backend *b, il_buffer *buf) { return NULL; }

/* Free = what is not reserved by the allocator or the context; cached blocks count as used,
 * as cudaMemGetInfo sees PyTorch's cache. */
static void il__sim_memory(il_backend *b, size_t *free_b, size_t *total) {
  il__sim *s = il__s(b);
  il_caching_stats st;
  il_caching_stats_get(s->alloc, &st);
  *total = s->budget;
  const size_t used = st.total.reserved + s->ctx_bytes;
  *free_b = s->budget > used ? s->budget - used : 0;
}

/* A sleep wakes late (timer slack, the scheduler): a transfer that starts within this of the
 * link's end continues the stream from that end rather than from its own start, so a run of
 * transfers takes the sum of their link times and not that plus one late wake-up each. */
#define IL__LINK_SLACK 0.001

static void il__sleep_until(double until) {
  double left = until - il_time_now();
  if (left <= 0) return;
  struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Returns when `bytes`, copied since t0, have passed the link: the direction's link takes them
 * after what it was given before (a stream of copies runs at the link's rate, the host's copy
 * of one beside the link time of the one before) and the call sleeps until the link is done. */
static void il__throttle(il__sim *s, double *link, size_t bytes, double t0) {
  if (s->pcie <= 0) return;
  pthread_mutex_lock(&s->lock);
  const double start = *link > t0 - IL__LINK_SLACK ? *link : t0;
  *link = start + (double)bytes / s->pcie;
  const double until = *link;
  pthread_mutex_unlock(&s->lock);
  il__sleep_until(until);
}

/* The compute model: an op that reads weights w[0..nw) for n_tok rows returns no earlier than
 * the longer of their bytes at hbm= and their 2 x rows x cols x n_tok flops at tflops= after
 * it started, the roofline of the device the sim stands for; the CPU's own time hides inside
 * it where shorter. So devices of a list that compute at once (--micro-batches) overlap as
 * GPUs would, though the sims share the host's cores. Other ops run at the CPU's speed. */
static void il__roofline(const il__sim *s, double t0, int nw, const il_tensor *w, int64_t n_tok) {
  if (s->hbm <= 0 && s->flops <= 0) return;
  double bytes = 0, flop = 0;
  for (int i = 0; i < nw; i++) {
    bytes += (double)w[i].rows * (double)il_tensor_row_bytes(w[i].type, w[i].cols);
    flop += 2.0 * (double)w[i].rows * (double)w[i].cols * (double)n_tok;
  }
  const double tb = s->hbm > 0 ? bytes / s->hbm : 0, tf = s->flops > 0 ? flop / s->flops : 0;
  il__sleep_until(t0 + (tb > tf ? tb : tf));
}

static il_status il__sim_matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  const double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.matmul(b, y, w, x));
  il__roofline(il__s(b), t0, 1, &w, x.rows);
  return IL_OK;
}

static il_status il__sim_matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w,
                                      const il_tensor *bias, il_tensor x) {
  const double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.matmul_multi(b, n, y, w, bias, x));
  il__roofline(il__s(b), t0, n, w, x.rows);
  return IL_OK;
}

static il_status il__sim_gate_up_swiglu(il_backend *b, il_tensor h, il_tensor up, il_tensor w_gate, il_tensor w_up,
                                        il_tensor x) {
  const double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.gate_up_swiglu(b, h, up, w_gate, w_up, x));
  const il_tensor w[2] = {w_gate, w_up};
  il__roofline(il__s(b), t0, 2, w, x.rows);
  return IL_OK;
}

static il_status il__sim_matmul_add(il_backend *b, il_tensor y, il_tensor w, il_tensor x, il_tensor tmp) {
  const double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.matmul_add(b, y, w, x, tmp));
  il__roofline(il__s(b), t0, 1, &w, x.rows);
  return IL_OK;
}

static il_status il__sim_upload(il_backend *b, il_tensor dst, const void *src, size_t bytes) {
  il__sim *s = il__s(b);
  double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.upload(b, dst, src, bytes));
  il__throttle(s, &s->link_up, bytes, t0);
  pthread_mutex_lock(&s->lock);
  s->xfer.upload_bytes += bytes;
  s->xfer.n_uploads++;
  s->xfer.upload_seconds += il_time_now() - t0;
  pthread_mutex_unlock(&s->lock);
  return IL_OK;
}

static il_status il__sim_download(il_backend *b, void *dst, il_tensor src, size_t bytes) {
  il__sim *s = il__s(b);
  double t0 = il_time_now();
  IL_TRY(il__cpu_ops_template.download(b, dst, src, bytes));
  il__throttle(s, &s->link_down, bytes, t0);
  pthread_mutex_lock(&s->lock);
  s->xfer.download_bytes += bytes;
  s->xfer.n_downloads++;
  s->xfer.download_seconds += il_time_now() - t0;
  pthread_mutex_unlock(&s->lock);
  return IL_OK;
}

/* ---- the copy stream ---- */

static void *il__sim_copier(void *p) {
  il__sim *s = p;
  pthread_mutex_lock(&s->qlock);
  for (;;) {
    while (!s->quit && !s->head) pthread_cond_wait(&s->qcond, &s->qlock);
    if (!s->head) break; /* quit, and nothing left to copy */
    il__sim_job *j = s->head;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->qlock);
    il_status st = il__sim_upload(j->b, j->dst, j->src, j->bytes);
    pthread_mutex_lock(&s->qlock);
    j->ev->st = st;
    if (st != IL_OK) snprintf(j->ev->msg, sizeof j->ev->msg, "%s", il_error_detail());
    j->ev->t = il_time_now();
    j->ev->pending = false;
    s->inflight--;
    il_mem_free(j);
    pthread_cond_broadcast(&s->qcond);
  }
  pthread_mutex_unlock(&s->qlock);
  return NULL;
}

static il_status il__sim_upload_async(il_backend *b, il_tensor dst, const void *src, size_t bytes, il_event **done) {
  il__sim *s = il__s(b);
  *done = NULL;
  il_event *ev = il_mem_calloc(IL_MEM_OTHER, sizeof *ev, "event");
  il__sim_job *j = il_mem_alloc(IL_MEM_OTHER, sizeof *j, "copy job");
  if (!ev || !j) {
    il_mem_free(ev);
    il_mem_free(j);
    return IL_ERR_OOM;
  }
  *j = (il__sim_job){NULL, b, dst, src, bytes, ev};
  ev->pending = true;
  pthread_mutex_lock(&s->qlock);
  if (!s->copier_on) {
    if (pthread_create(&s->copier, NULL, il__sim_copier, s) != 0) {
      pthread_mutex_unlock(&s->qlock);
      il_mem_free(ev);
      il_mem_free(j);
      return il_error(IL_ERR_INTERNAL, "upload_async: cannot start %s's copy thread", s->cpu.name);
    }
    s->copier_on = true;
  }
  if (s->tail) s->tail->next = j;
  else s->head = j;
  s->tail = j;
  s->inflight++;
  pthread_cond_broadcast(&s->qcond);
  pthread_mutex_unlock(&s->qlock);
  *done = ev;
  return IL_OK;
}

static il_status il__sim_event_wait(il_backend *b, il_event *e) {
  il__sim *s = il__s(b);
  pthread_mutex_lock(&s->qlock);
  while (e->pending) pthread_cond_wait(&s->qcond, &s->qlock);
  const il_status st = e->st;
  pthread_mutex_unlock(&s->qlock);
  return st == IL_OK ? IL_OK : il_error(st, "%s", e->msg);
}

/* An event still queued is waited for first (the copy thread writes it when the copy ends);
 * its error, if any, is dropped with it, and the caller's error text is left alone. */
static void il__sim_event_free(il_backend *b, il_event *e) {
  if (!e) return;
  il__sim *s = il__s(b);
  pthread_mutex_lock(&s->qlock);
  while (e->pending) pthread_cond_wait(&s->qcond, &s->qlock);
  pthread_mutex_unlock(&s->qlock);
  il_mem_free(e);
}

/* The ops run as called; sync also waits for the queued copies (their errors are their
 * events'). */
static il_status il__sim_sync(il_backend *b) {
  il__sim *s = il__s(b);
  pthread_mutex_lock(&s->qlock);
  while (s->inflight) pthread_cond_wait(&s->qcond, &s->qlock);
  pthread_mutex_unlock(&s->qlock);
  return IL_OK;
}

static void il__sim_transfers(il_backend *b, il_transfer_stats *out) {
  il__sim *s = il__s(b);
  pthread_mutex_lock(&s->lock);
  *out = s->xfer;
  pthread_mutex_unlock(&s->lock);
}

static void il__sim_info(il_backend *b, il_backend_info *out) {
  il__cpu_ops_template.info(b, out);
  il__sim *s = il__s(b);
  char size[32], ctx[32];
  snprintf(out->kind, sizeof out->kind, "sim");
  snprintf(out->name, sizeof out->name, "%s", s->cpu.name);
  out->host_visible = false;
  out->dry = s->dry;
  char model[96] = "";
  if (s->hbm > 0 || s->flops > 0)
    snprintf(model, sizeof model, "; matmuls timed at %.0f GB/s, %.1f TFLOP/s", s->hbm / 1e9, s->flops / 1e12);
  snprintf(out->device, sizeof out->device, "simulated GPU: %s budget, %s context, %s; CPU compute (%d threads, %s)%s",
           il_mem_format_bytes(s->budget, size, sizeof size), il_mem_format_bytes(s->ctx_bytes, ctx, sizeof ctx),
           s->pcie > 0 ? "throttled copies" : "unthrottled copies", out->threads, out->isa, model);
}

static void il__sim_destroy(il_backend *b) {
  if (!b) return;
  il__sim *s = il__s(b);
  if (s) {
    if (s->copier_on) { /* the queued copies finish first */
      pthread_mutex_lock(&s->qlock);
      s->quit = true;
      pthread_cond_broadcast(&s->qcond);
      pthread_mutex_unlock(&s->qlock);
      pthread_join(s->copier, NULL);
    }
    pthread_mutex_destroy(&s->qlock);
    pthread_cond_destroy(&s->qcond);
    il__cpu_release_act(b); /* a buffer of this device's allocator */
    il__cpu_fini(&s->cpu);
    il_caching_destroy(s->alloc);
    if (s->space) {
      if (s->ctx_bytes) il_mem_space_release(s->space, IL_MEM_OTHER, s->ctx_bytes);
      il_mem_space_free(s->space);
    }
    pthread_mutex_destroy(&s->lock);
    il_mem_free(s);
  }
  il_mem_free(b);
}

static il_backend_ops il__sim_ops, il__sim_dry_ops;
static pthread_once_t il__sim_once = PTHREAD_ONCE_INIT;

static void il__sim_ops_init(void) {
  il__sim_ops = il__cpu_ops_template;
  il__sim_ops.buffer_alloc = il__sim_alloc;
  il__sim_ops.buffer_free = il__sim_free;
  il__sim_ops.buffer_wrap_host = NULL;
  il__sim_ops.prepare_weight = NULL; /* --repack: the panels would be host memory outside the device's budget */
  il__sim_ops.host_ptr = il__sim_host_ptr;
  il__sim_ops.memory = il__sim_memory;
  il__sim_ops.upload = il__sim_upload;
  il__sim_ops.download = il__sim_download;
  il__sim_ops.info = il__sim_info;
  il__sim_ops.destroy = il__sim_destroy;
  il__sim_ops.transfers = il__sim_transfers;
  il__sim_ops.allocator_stats = il__sim_allocator_stats;
  il__sim_ops.allocator_snapshot = il__sim_snapshot;
  il__sim_ops.empty_cache = il__sim_empty_cache;
  il__sim_ops.upload_async = il__sim_upload_async;
  il__sim_ops.event_wait = il__sim_event_wait;
  il__sim_ops.event_free = il__sim_event_free;
  il__sim_ops.sync = il__sim_sync;
  il__sim_ops.matmul = il__sim_matmul;
  il__sim_ops.matmul_multi = il__sim_matmul_multi;
  il__sim_ops.gate_up_swiglu = il__sim_gate_up_swiglu;
  il__sim_ops.matmul_add = il__sim_matmul_add;
  /* the CPU kernels' matmul scratch is host memory (reserved at open like the cpu backend's),
   * not the simulated device's: nothing of it belongs in the device's out-of-memory arithmetic */
  il__sim_ops.reserve_bytes = NULL;
  il__sim_dry_ops = il__sim_ops;
  il_backend_dry_ops(&il__sim_dry_ops); /* the planner's: allocates, computes nothing */
}

/* Parses "sim:SIZE[,pcie=RATE][,ctx=SIZE][,hbm=RATE][,tflops=N][,dry]". */
static il_status il__parse_spec(const char *spec, size_t *budget, double *pcie, size_t *ctx, double *hbm,
                                double *flops, bool *dry) {
  char buf[128];
  if (strlen(spec) >= sizeof buf) return il_error(IL_ERR_INVALID_ARG, "--device: '%.40s...' is too long", spec);
  snprintf(buf, sizeof buf, "%s", spec + 4);
  *pcie = 0;
  *ctx = 0;
  *hbm = *flops = 0;
  *dry = false;
  char *save = NULL;
  int i = 0;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
    if (i == 0) {
      const bool ok = il_parse_bytes(tok, budget);
      if (!ok || *budget == 0)
        return il_error(IL_ERR_INVALID_ARG, "--device %s: device size '%s': %s", spec, tok,
                        ok ? "zero bytes" : il_parse_bytes_why(tok));
    } else if (!strncmp(tok, "pcie=", 5)) {
      if (!il_parse_rate(tok + 5, pcie))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s' is not a transfer rate (e.g. pcie=16GB/s, 900MiB/s)%s%s",
                        spec, tok, il_units_ambiguous(tok + 5) ? ": " : "",
                        il_units_ambiguous(tok + 5) ? il_units_ambiguous(tok + 5) : "");
    } else if (!strncmp(tok, "hbm=", 4)) {
      if (!il_parse_rate(tok + 4, hbm) || *hbm <= 0)
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s' is not a memory bandwidth (e.g. hbm=900GB/s)", spec, tok);
    } else if (!strncmp(tok, "tflops=", 7)) {
      char *end = NULL;
      *flops = strtod(tok + 7, &end) * 1e12;
      if (end == tok + 7 || *end || !(*flops > 0) || !isfinite(*flops))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s' is not a number of TFLOP/s > 0 (e.g. tflops=100)", spec, tok);
    } else if (!strcmp(tok, "dry")) {
      *dry = true;
    } else if (!strncmp(tok, "ctx=", 4)) {
      if (!il_parse_bytes(tok + 4, ctx))
        return il_error(IL_ERR_INVALID_ARG, "--device %s: '%s': %s", spec, tok, il_parse_bytes_why(tok + 4));
    } else {
      return il_error(IL_ERR_INVALID_ARG, "--device %s: unknown option '%s' (pcie=RATE, ctx=SIZE, hbm=RATE, tflops=N, dry)", spec, tok);
    }
  }
  if (i == 0) return il_error(IL_ERR_INVALID_ARG, "--device %s: give the device size, e.g. sim:4GiB", spec);
  return IL_OK;
}

il_status il__sim_backend_new(const char *spec, const il__cpu_opts *o, size_t mem_limit, il_backend **out) {
  *out = NULL;
  size_t budget, ctx;
  double pcie = 0, hbm = 0, flops = 0;
  bool dry = false;
  IL_TRY(il__parse_spec(spec, &budget, &pcie, &ctx, &hbm, &flops, &dry));
  if (mem_limit && mem_limit < budget) budget = mem_limit;
  pthread_once(&il__sim_once, il__sim_ops_init);
  il_backend *b = il_mem_calloc(IL_MEM_OTHER, sizeof *b, "sim backend");
  il__sim *s = il_mem_calloc(IL_MEM_OTHER, sizeof *s, "sim backend");
  if (!b || !s) {
    il_mem_free(b);
    il_mem_free(s);
    return IL_ERR_OOM;
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->qlock, NULL);
  pthread_cond_init(&s->qcond, NULL);
  *b = (il_backend){.ops = dry ? &il__sim_dry_ops : &il__sim_ops, .impl = s};
  s->dry = dry;
  s->next_fake = (uintptr_t)1 << 40;
  s->budget = budget;
  s->pcie = pcie;
  s->hbm = hbm;
  s->flops = flops;
  il_status st = il__cpu_init(&s->cpu, o);
  snprintf(s->cpu.name, sizeof s->cpu.name, "%s", spec);
  if (st == IL_OK) {
    s->space = il_mem_space_new("sim", budget);
    if (!s->space) st = IL_ERR_OOM;
  }
  b->space = s->space;
  if (st == IL_OK && ctx) {
    st = il_mem_space_reserve(s->space, IL_MEM_OTHER, ctx, "device context (ctx=)");
    if (st == IL_OK) s->ctx_bytes = ctx;
    else st = il_error_wrap(st, "--device %s: the context overhead does not fit the device: ", spec);
  }
  if (st == IL_OK) {
    il_caching_opts co = {.name = "sim", .cap = budget - s->ctx_bytes, .seg_alloc = il__seg_alloc,
                          .seg_free = il__seg_free, .ctx = s};
    st = il_caching_new(&co, &s->alloc);
  }
  if (st != IL_OK) {
    il__sim_destroy(b);
    return st;
  }
  *out = b;
  return IL_OK;
}
