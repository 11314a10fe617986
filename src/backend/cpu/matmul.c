/* backend/cpu/matmul: the threaded matmul driver.
 *
 * One call runs one pool task, for one weight matrix or for several that read the same input
 * (il_cpu_matmul_multi: Q, K and V; gate and up), whose chunks then form one list. Every thread
 * first quantizes an equal share of the activation blocks (quantized weight types only), then
 * all meet at the one barrier, then the output rows are computed in chunks. Each thread owns a
 * contiguous range of chunks and takes them from its front; a thread that finishes early
 * steals single chunks from the back of the others' ranges (one compare-and-swap per chunk on
 * a word the owner rarely shares). Contiguous ranges matter
 * for generation: a thread streams one long run of weight memory, and the kernels' software
 * prefetch of the next rows lands in rows the same thread will read (with chunks handed out
 * round-robin, a third of the prefetched rows belonged to the other thread: -10% at 2 threads).
 * Chunks hold about 32 KiB of weights for generation (stealing granularity; at least 8 chunks per
 * thread; 64 KiB left the last thread up to a chunk behind at every matmul: -5% Q4_0 tokens/s at
 * 2 threads) and 16 rows for small batches (the rows stay in L1/L2 while all tokens sweep them).
 * Batches of il__gemm_min_tok tokens or more run the blocked GEMM where the table has one
 * (backend/cpu/gemm.h): a chunk is a 32-row panel, which the thread packs into its own part of
 * the workspace, times a token slice when the panels are fewer than 4 per thread. Weights
 * repacked at load (il_cpu_matmul_pack, --repack) are already panels: every batch size, one
 * token included, runs the GEMM from them, a chunk being one of their panels.
 *
 * Not for: choosing the kernel table (isa.c), the kernels themselves (matmul_scalar.c,
 * matmul_avx2.c, matmul_avx512.c).
 */
#include "backend/cpu/matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "sys/cpuid.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define IL__X86 1
#endif

/* ---------------------------------------------------------------- driver */

bool il_cpu_matmul_supported(il_dtype t) {
  return (unsigned)t < IL_DTYPE_COUNT && il__matmul_scalar.rows[t] != NULL;
}

/* Bytes of one thread's GEMM panel, 0 when this call will not use the GEMM. */
static size_t il__mm_panel_bytes(il_dtype wtype, int64_t n_in, int64_t n_tok) {
  return n_tok >= il__gemm_min_tok_first(wtype) ? il__align64(il__gemm_panel_size(wtype, n_in)) : 0;
}

/* Quantized-activation bytes of one token; for BF16 batches that take the GEMM, the room for
 * x as BF16 pairs (used when x is BF16-exact on a CPU with AVX512_BF16, reserved on any, so a
 * workspace's size does not depend on the CPU); 0 for other float weights (they read x). */
static size_t il__mm_act_stride(il_dtype wtype, int64_t n_in, int64_t n_tok) {
  if (wtype == IL_DTYPE_BF16)
    return n_tok >= il__gemm_min_tok_first(wtype) ? il__act_bf16_stride(n_in) : 0;
  return il_dtype_get(wtype)->quantized ? il__act_stride(wtype, n_in) : 0;
}

/* Whether a row of x holds only BF16 values (the lower 16 bits of every float zero): the
 * one-row test that decides whether the BF16 GEMM converts x at all; the conversion then
 * checks every row. */
static bool il__mm_row_bf16(const float *x, int64_t n) {
  uint32_t low = 0;
  for (int64_t k = 0; k < n; k++) {
    uint32_t v;
    memcpy(&v, x + k, 4);
    low |= v & 0xFFFFu;
  }
  return low == 0;
}

size_t il_cpu_matmul_work_size(il_dtype wtype, int64_t n_in, int64_t n_tok, int n_threads) {
  if (!il_cpu_matmul_supported(wtype)) return 0;
  if (n_in <= 0 || n_tok <= 0 || n_in % il_dtype_get(wtype)->blck != 0) return 0;
  if (n_threads < 1) n_threads = 1;
  const size_t panels = (size_t)n_threads * il__mm_panel_bytes(wtype, n_in, n_tok);
  if (!il_dtype_get(wtype)->quantized && panels == 0) return 0; /* F32, or F16/BF16 below the GEMM */
  /* + 64: alignment slack */
  return (size_t)n_tok * il__mm_act_stride(wtype, n_in, n_tok) + 64 + panels;
}

/* Each thread owns a contiguous range of chunks and takes them from the front; a thread that
 * runs out steals single chunks from the back of another range. Front and back share one
 * 64-bit word (front in the low half) so both ends move with one compare-and-swap. */
#define IL__MAX_REGIONS 64

typedef struct {
  _Alignas(64) _Atomic uint64_t fb;
} il__region;

/* A task computes the rows of up to IL__MM_MAX_PARTS weight matrices that share the input
 * (same type and n_in): their chunks form one list, so one activation quantization, one barrier
 * and one pool round trip serve them all (Q, K and V; gate and up). */
typedef struct {
  il__mm_args a;      /* the part's weights and output; activation fields shared */
  int64_t chunk_rows; /* rows per chunk of this part */
  int64_t c0, c1;     /* its chunks in the task's list: [c0, c1) */
} il__mm_part;

/* With the GEMM a chunk is one 32-row panel x one token slice (all tokens unless the panels
 * are too few to keep every thread busy); the slices of a panel are consecutive chunks, so a
 * thread that takes them in a row packs the panel once. */

typedef struct {
  il__mm_part part[IL_CPU_MM_MAX_PARTS];
  int n_parts;
  il__mm_rows_fn rows;
  il__mm_quant_fn quant;
  il__mm_gemm_fn gemm;  /* NULL: the tile kernels (rows) */
  uint8_t *panels;      /* GEMM: thread ith's panel at panels + ith * panel_bytes */
  size_t panel_bytes;   /* (with packed: the distance between the repacked panels) */
  bool packed;          /* the parts' weights are repacked (il_cpu_matmul_pack): no packing */
  int64_t n_slices;     /* GEMM: token slices per panel */
  int64_t slice_tok;    /* tokens per slice */
  il_pool *pool;
  int64_t n_units; /* activation blocks to quantize */
  int64_t n_chunks;
  int n_regions;
  il__region *region; /* n_regions entries, on the caller's stack (not zeroed beyond those) */
} il__mm_task;

static inline uint64_t il__fb(uint64_t f, uint64_t b) { return f | b << 32; }

/* Takes the next chunk from the front (own range) or the back (stolen); -1 when empty. */
static int64_t il__claim(il__region *rg, bool front) {
  uint64_t v = atomic_load_explicit(&rg->fb, memory_order_relaxed);
  for (;;) {
    const uint64_t f = v & 0xffffffffu, b = v >> 32;
    if (f >= b) return -1;
    const uint64_t nv = front ? il__fb(f + 1, b) : il__fb(f, b - 1);
    if (atomic_compare_exchange_weak_explicit(&rg->fb, &v, nv, memory_order_relaxed, memory_order_relaxed))
      return front ? (int64_t)f : (int64_t)(b - 1);
  }
}

/* The part holding chunk c and the chunk's first row in it. */
static const il__mm_part *il__mm_locate(const il__mm_task *task, int64_t c, int64_t *r0) {
  int p = 0;
  while (p + 1 < task->n_parts && c >= task->part[p].c1) p++;
  const il__mm_part *pt = &task->part[p];
  *r0 = (c - pt->c0) / task->n_slices * pt->chunk_rows;
  return pt;
}

/* What a thread's panel holds: the part's weights and first row (NULL: nothing yet). */
typedef struct {
  const uint8_t *w;
  int64_t r0;
} il__mm_panel_tag;

static void il__mm_chunk(il__mm_task *task, int64_t c, int ith, il__mm_panel_tag *tag) {
  if (task->gemm) {
    int64_t r0;
    const il__mm_part *pt = il__mm_locate(task, c, &r0);
    const int64_t t0 = (c - pt->c0) % task->n_slices * task->slice_tok;
    const int64_t t1 = t0 + task->slice_tok < pt->a.n_tok ? t0 + task->slice_tok : pt->a.n_tok;
    if (task->packed) { /* a.w is the repacked matrix, panel after panel */
      task->gemm(&pt->a, r0, t0, t1, (uint8_t *)(uintptr_t)pt->a.w + (size_t)(r0 / IL__GEMM_ROWS) * task->panel_bytes, false);
      return;
    }
    const bool pack = tag->w != pt->a.w || tag->r0 != r0;
    tag->w = pt->a.w;
    tag->r0 = r0;
    task->gemm(&pt->a, r0, t0, t1, task->panels + (size_t)ith * task->panel_bytes, pack);
    return;
  }
  int64_t r0;
  const il__mm_part *pt = il__mm_locate(task, c, &r0);
  int64_t r1 = r0 + pt->chunk_rows;
  if (r1 > pt->a.n_out) r1 = pt->a.n_out;
  task->rows(&pt->a, r0, r1);
}

/* ---------------------------------------------------------------- weights repacked at load */

/* Bytes of one repacked panel (the distance between panels), 0 when not packable. */
static size_t il__mm_packed_panel(const il__kernels *k, il_dtype t, int64_t n_in) {
  if (!k || (unsigned)t >= IL_DTYPE_COUNT || !k->gemm[t] || t == IL_DTYPE_BF16) return 0;
  if (n_in <= 0 || n_in % il_dtype_get(t)->blck != 0) return 0;
  return il__align64(il__gemm_panel_size(t, n_in));
}

size_t il_cpu_matmul_packed_size(const il__kernels *k, il_dtype wtype, int64_t n_out, int64_t n_in) {
  const size_t pb = il__mm_packed_panel(k, wtype, n_in);
  return pb && n_out > 0 ? (size_t)((n_out + IL__GEMM_ROWS - 1) / IL__GEMM_ROWS) * pb : 0;
}

typedef struct {
  il__mm_args a;
  il__mm_gemm_fn gemm;
  uint8_t *dst;
  size_t pb;
  int64_t n_panels;
} il__pack_task;

/* The table's own GEMM driver packs (t0 = t1: no tokens), so the panels hold exactly what its
 * micro-kernels expect (flipped Q8_0 bytes where it multiplies with vpdpbusd). */
static void il__pack_run(void *p, int ith, int nth) {
  const il__pack_task *t = p;
  for (int64_t i = t->n_panels * ith / nth; i < t->n_panels * (ith + 1) / nth; i++)
    t->gemm(&t->a, i * IL__GEMM_ROWS, 0, 0, t->dst + (size_t)i * t->pb, true);
}

il_status il_cpu_matmul_pack(il_pool *pool, const il__kernels *k, il_dtype wtype, const void *w, size_t w_stride,
                             int64_t n_out, int64_t n_in, void *dst) {
  const size_t pb = il__mm_packed_panel(k, wtype, n_in);
  if (!pb || n_out <= 0)
    return il_error(IL_ERR_UNSUPPORTED, "cpu matmul: %s weights [%lld x %lld] have no repacked layout on this kernel table",
                    il_dtype_name(wtype), (long long)n_out, (long long)n_in);
  if (w_stride < il_dtype_row_size(wtype, n_in) || ((uintptr_t)dst & 63))
    return il_error(IL_ERR_INVALID_ARG, "cpu matmul: repacking needs a row stride of at least %zu (got %zu) and a 64-byte aligned copy",
                    il_dtype_row_size(wtype, n_in), w_stride);
  il__pack_task t = {.a = {.type = wtype, .w = w, .w_stride = w_stride, .n_out = n_out, .n_in = n_in, .n_tok = 0},
                     .gemm = k->gemm[wtype],
                     .dst = dst,
                     .pb = pb,
                     .n_panels = (n_out + IL__GEMM_ROWS - 1) / IL__GEMM_ROWS};
  if (pool && il_pool_size(pool) > 1 && t.n_panels > 1) il_pool_run(pool, il__pack_run, &t);
  else il__pack_run(&t, 0, 1);
  return IL_OK;
}

/* Multiply-adds below which one thread does a matmul alone (see il_cpu_matmul_multi): waking
 * the pool costs more than a small model's matmuls repay; 2^17 was best for stories260K and
 * builtin:tiny, far below builtin:1b's (docs/performance-log.md#small-models-threads-by-work-size). */
static double il__mm_par_min = 1 << 17;

void il_cpu_matmul_par_min(double macs) { il__mm_par_min = macs; }

static void il__mm_run(void *p, int ith, int nth) {
  il__mm_task *task = p;
  const int nr = task->n_regions;
#ifdef IL__X86
  /* Start fetching the first 16 KiB of this thread's rows now, so the reads overlap the
   * activation quantization and the barrier; the kernels prefetch ahead from there on. */
  if (ith < nr) {
    const uint64_t fb = atomic_load_explicit(&task->region[ith].fb, memory_order_relaxed);
    const int64_t c = (int64_t)(fb & 0xffffffffu);
    if (c < (int64_t)(fb >> 32)) {
      int64_t r0;
      const il__mm_part *pt = il__mm_locate(task, c, &r0);
      const uint8_t *w0 = pt->a.w + (size_t)r0 * pt->a.w_stride;
      const size_t bytes = (size_t)(pt->a.n_out - r0) * pt->a.w_stride;
      for (size_t o = 0; o < bytes && o < 16384; o += 64) _mm_prefetch((const char *)(w0 + o), _MM_HINT_T0);
    }
  }
#endif
  if (task->quant) {
    const int64_t u0 = task->n_units * ith / nth, u1 = task->n_units * (ith + 1) / nth;
    if (u1 > u0) task->quant(&task->part[0].a, u0, u1);
    if (task->pool) il_pool_barrier(task->pool);
  }
  int64_t c;
  il__mm_panel_tag tag = {NULL, -1};
  if (ith < nr)
    while ((c = il__claim(&task->region[ith], true)) >= 0) il__mm_chunk(task, c, ith, &tag);
  for (int k = 1; k <= nr; k++) {
    il__region *rg = &task->region[(ith + k) % nr];
    while ((c = il__claim(rg, false)) >= 0) il__mm_chunk(task, c, ith, &tag);
  }
}

il_status il_cpu_matmul(il_pool *pool, const il__kernels *k, il_dtype wtype, const void *w, size_t w_stride,
                        int64_t n_out, int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy, void *work) {
  const il_cpu_mm_part part = {.w = w, .w_stride = w_stride, .n_out = n_out, .y = y, .ldy = ldy};
  return il_cpu_matmul_multi(pool, k, wtype, 1, &part, n_in, x, n_tok, work);
}

il_status il_cpu_matmul_multi(il_pool *pool, const il__kernels *k, il_dtype wtype, int n_parts,
                              const il_cpu_mm_part *parts, int64_t n_in, const float *x, int64_t n_tok, void *work) {
  if (!k) k = &il__matmul_scalar;
  if (!il_cpu_matmul_supported(wtype))
    return il_error(IL_ERR_UNSUPPORTED, "cpu matmul: no kernel for weight type %s", il_dtype_name(wtype));
  if (n_parts < 1 || n_parts > IL_CPU_MM_MAX_PARTS)
    return il_error(IL_ERR_INVALID_ARG, "cpu matmul: %d weight matrices in one call (1..%d)", n_parts,
                    IL_CPU_MM_MAX_PARTS);
  const il_dtype_info *ti = il_dtype_get(wtype);
  int64_t total_out = 0;
  for (int i = 0; i < n_parts; i++) {
    const il_cpu_mm_part *pt = &parts[i];
    if (pt->n_out < 0 || n_tok < 0 || n_in <= 0 || n_in % ti->blck != 0)
      return il_error(IL_ERR_INVALID_ARG,
                      "cpu matmul: %s weights need n_in a positive multiple of %u (n_in=%lld, n_out=%lld, n_tok=%lld)",
                      ti->name, ti->blck, (long long)n_in, (long long)pt->n_out, (long long)n_tok);
    if (pt->w_stride < il_dtype_row_size(wtype, n_in))
      return il_error(IL_ERR_INVALID_ARG, "cpu matmul: row stride %zu below the %s row size %zu", pt->w_stride,
                      ti->name, il_dtype_row_size(wtype, n_in));
    if (n_tok > 1 && pt->ldy < pt->n_out)
      return il_error(IL_ERR_INVALID_ARG, "cpu matmul: ldy %lld below n_out %lld", (long long)pt->ldy,
                      (long long)pt->n_out);
    total_out += pt->n_out;
  }
  const bool packed = parts[0].packed != NULL;
  for (int i = 1; i < n_parts; i++)
    if ((parts[i].packed != NULL) != packed)
      return il_error(IL_ERR_INVALID_ARG, "cpu matmul: repacked and plain weights in one call (part %d)", i);
  if (packed && !il__mm_packed_panel(k, wtype, n_in))
    return il_error(IL_ERR_INVALID_ARG, "cpu matmul: repacked %s weights on a kernel table without their GEMM",
                    ti->name);
  if (total_out == 0 || n_tok == 0) return IL_OK;
  /* Threads by work size: waking the pool costs microseconds, which a small model's matmuls
   * (stories260K: 64 x 64 per token) do not repay; below il__mm_par_min multiply-adds the
   * calling thread does it alone (a workspace sized for the pool is large enough for one). */
  int nth = pool ? il_pool_size(pool) : 1;
  const bool tiny_op = (double)total_out * (double)n_in * (double)n_tok < il__mm_par_min;
  if (tiny_op) nth = 1;
  if (ti->quantized && !work)
    return il_error(IL_ERR_INVALID_ARG, "cpu matmul: %s weights need a workspace of %zu bytes", ti->name,
                    il_cpu_matmul_work_size(wtype, n_in, n_tok, nth));

  /* the workspace from its first 64-byte boundary: activations, then the GEMM's panels */
  uint8_t *const base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  il__mm_rows_fn rows = k->rows[wtype] ? k->rows[wtype] : il__matmul_scalar.rows[wtype];
  il__mm_quant_fn quant = NULL;
  il__mm_args shared = {.type = wtype, .n_in = n_in, .n_tok = n_tok, .x = x};
  int64_t n_units = 0;
  if (ti->quantized) {
    quant = k->quant[wtype] ? k->quant[wtype] : il__matmul_scalar.quant[wtype];
    shared.act = base;
    shared.act_stride = il__act_stride(wtype, n_in);
    n_units = n_tok * (n_in / il__act_blck(wtype));
  }
  _Atomic int bf16_inexact = 0;
  /* The GEMM's panels follow the activations in the workspace; F16/BF16 weights need a
   * workspace only for the GEMM, and without one (work NULL) run the tile kernels. */
  const size_t panel_bytes = packed ? il__mm_packed_panel(k, wtype, n_in) : work ? il__mm_panel_bytes(wtype, n_in, n_tok) : 0;
  /* BF16 weights and BF16-exact activations (--dtype bf16) on a CPU with AVX512_BF16: the
   * threads first convert x to BF16 pairs, and the GEMM multiplies with vdpbf16ps (from fewer
   * tokens than its F32 path) unless the conversion finds an element that is not exact. */
  const bool bf16_dot = !packed && panel_bytes && wtype == IL_DTYPE_BF16 && k->gemm[wtype] && k->bf16_act &&
                        il_cpu_features_get()->avx512bf16 && il__mm_row_bf16(x, n_in);
  const bool gemm = packed || (panel_bytes && k->gemm[wtype] &&
                               n_tok >= (bf16_dot ? IL__GEMM_MIN_TOK_BF16_DOT : il__gemm_min_tok(wtype, k->plain_int8)));
  if (bf16_dot) {
    quant = k->bf16_act;
    shared.act = base;
    shared.act_stride = il__mm_act_stride(wtype, n_in, n_tok);
    shared.inexact = &bf16_inexact;
    n_units = n_tok;
  }
  /* A small matmul without the GEMM: each matrix in one kernel call, without the chunk list and
   * its claims (a small model's matrices are a few dozen rows, and claiming a chunk of 8 of them
   * cost as much as computing it: 7% of stories260K's instructions), and without building the
   * task, whose 4 KiB of zeroed regions were 1.5% of a stories260K token. Large ones on one
   * thread keep the chunked path and its early prefetch of the first rows. */
  if (tiny_op && !gemm) {
    if (quant) quant(&shared, 0, n_units);
    for (int i = 0; i < n_parts; i++) {
      if (parts[i].n_out == 0) continue;
      il__mm_args a = shared;
      a.w = parts[i].w;
      a.w_stride = parts[i].w_stride;
      a.n_out = parts[i].n_out;
      a.y = parts[i].y;
      a.ldy = parts[i].ldy;
      rows(&a, 0, a.n_out);
    }
    return IL_OK;
  }

  static_assert(sizeof(il__region) == 64, "one region per cache line");
  il__mm_task task = {
      .rows = rows,
      .quant = quant,
      .n_units = n_units,
      .pool = nth > 1 ? pool : NULL,
      .n_slices = 1,
      .panel_bytes = panel_bytes,
      .packed = packed,
  };
  if (gemm) {
    task.gemm = k->gemm[wtype];
    if (!packed) task.panels = base + (size_t)n_tok * il__mm_act_stride(wtype, n_in, n_tok);
    /* Token slices only when the panels are too few for 4 chunks per thread; a slice keeps
     * at least 8 tokens so the micro-kernels run full tiles. */
    int64_t n_panels = 0;
    for (int i = 0; i < n_parts; i++) n_panels += (parts[i].n_out + IL__GEMM_ROWS - 1) / IL__GEMM_ROWS;
    int64_t ns = n_panels >= 4 * nth ? 1 : (4 * nth + n_panels - 1) / n_panels;
    if (ns > n_tok / 8) ns = n_tok / 8;
    if (ns < 1) ns = 1;
    task.slice_tok = (n_tok + ns - 1) / ns;
    task.n_slices = (n_tok + task.slice_tok - 1) / task.slice_tok;
  }
  /* Chunk size: about 32 KiB of weights for generation, at least 8 chunks per thread when
   * the matrices together are small; 16 rows when a batch of tokens reuses them. Multiples of
   * 4 rows, the kernels' row tile. With the GEMM, one panel (times the token slices). Empty
   * parts are dropped. */
  for (int i = 0; i < n_parts; i++) {
    const il_cpu_mm_part *pt = &parts[i];
    if (pt->n_out == 0) continue;
    int64_t cr;
    if (task.gemm) {
      cr = IL__GEMM_ROWS;
    } else if (n_tok == 1) {
      cr = (int64_t)(32768 / pt->w_stride);
      const int64_t small = total_out / (8 * nth);
      if (cr > small) cr = small;
    } else {
      cr = 16;
    }
    if (!task.gemm) {
      if (cr < total_out / 0x7fffffff + 1) cr = total_out / 0x7fffffff + 1; /* chunk indices fit 32 bits */
      cr = (cr + 3) & ~(int64_t)3;
      if (cr < 4) cr = 4;
    }
    il__mm_part *tp = &task.part[task.n_parts++];
    tp->a = shared;
    tp->a.w = pt->w;
    tp->a.w_stride = pt->w_stride;
    if (packed) { /* rows as 1/32 of a panel: the prefetches of "the next rows" fetch the next panel */
      tp->a.w = pt->packed;
      tp->a.w_stride = panel_bytes / IL__GEMM_ROWS;
      /* except up to the table's stream_tok tokens, where the panels stream from DRAM at the
       * rate they are used and a prefetch of the panel being read into L1 (a->stream, gemm.h)
       * beats the next-panel prefetch into L2 (bench_matmul --repack, batched decode;
       * docs/performance-log.md#repacked-small-batches) */
      tp->a.stream = n_tok <= k->stream_tok[wtype];
    }
    tp->a.n_out = pt->n_out;
    tp->a.y = pt->y;
    tp->a.ldy = pt->ldy;
    tp->chunk_rows = cr;
    tp->c0 = task.n_chunks;
    task.n_chunks += (pt->n_out + cr - 1) / cr * task.n_slices;
    tp->c1 = task.n_chunks;
  }
  il__region region[IL__MAX_REGIONS];
  task.region = region;
  task.n_regions = nth < IL__MAX_REGIONS ? nth : IL__MAX_REGIONS;
  for (int i = 0; i < task.n_regions; i++)
    atomic_init(&task.region[i].fb, il__fb((uint64_t)(task.n_chunks * i / task.n_regions),
                                           (uint64_t)(task.n_chunks * (i + 1) / task.n_regions)));
  if (nth > 1) il_pool_run(pool, il__mm_run, &task);
  else il__mm_run(&task, 0, 1);
  return IL_OK;
}

