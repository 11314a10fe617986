/* backend/cpu/cpu: the CPU backend: host buffers, the thread pool, and the non-matmul ops.
 *
 * Matmul goes to backend/cpu/matmul (SIMD, the kernel table chosen at open); weights that share
 * an input go through matmul_multi as one task. The other ops are a few percent of a token's
 * time, so they are plain C, except SwiGLU, whose expf the compiler cannot vectorise under
 * strict FP (backend/cpu/ops_avx512 on AVX-512 CPUs), and attention, whose kernels (flash,
 * memeff, sliced, naive) are backend/cpu/attn with per-ISA micro-kernels.
 * With one token the elementwise ops run on the calling thread because a pool round trip would
 * cost more than the op, and with many tokens they are split by rows over the pool.
 * Every op checks that its views lie inside their buffers and have the types it computes on,
 * and says which tensor is wrong: a malformed view is an error value, never a stray write.
 */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/check.h"
#include "core/log.h"
#include "core/quant.h"
#include "core/timer.h"

#define IL__PAR_MIN 32768 /* elements below which an op runs on the calling thread */

static il__cpu *il__c(il_backend *b) { return (il__cpu *)b->impl; }

/* view checks: backend/check.h */

/* ---------------------------------------------------------------- memory */

static il_status il__cpu_alloc(il_backend *b, il_mem_category cat, size_t bytes, const char *what, il_buffer **out) {
  *out = NULL;
  il_buffer *buf = il_mem_alloc(IL_MEM_OTHER, sizeof *buf, "buffer record");
  if (!buf) return IL_ERR_OOM;
  buf->base = il_mem_alloc(cat, bytes ? bytes : 1, what);
  if (!buf->base) {
    il_mem_free(buf);
    return IL_ERR_OOM;
  }
  buf->size = bytes;
  buf->owner = b;
  buf->cat = cat;
  buf->wrapped = false;
  buf->handle = NULL;
  buf->packed = NULL;
  *out = buf;
  return IL_OK;
}

static void il__cpu_buffer_free(il_backend *b, il_buffer *buf) {
  if (!buf) return;
  if (!buf->wrapped) il_mem_free(buf->base);
  il_mem_free(buf->packed);
  il_mem_free(buf);
}

static il_status il__cpu_wrap(il_backend *b, void *ptr, size_t bytes, il_mem_category cat, il_buffer **out) {
  *out = NULL;
  il_buffer *buf = il_mem_alloc(IL_MEM_OTHER, sizeof *buf, "buffer record");
  if (!buf) return IL_ERR_OOM;
  *buf = (il_buffer){.base = ptr, .size = bytes, .owner = b, .cat = cat, .wrapped = true};
  *out = buf;
  return IL_OK;
}

static void *il__cpu_host_ptr(il_backend *b, il_buffer *buf) { return buf ? buf->base : NULL; }

static void il__cpu_memory(il_backend *b, size_t *free_b, size_t *total) {
  long pages = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  *free_b = pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
  *total = all > 0 && size > 0 ? (size_t)all * (size_t)size : 0;
  il_mem_stats st;
  il_mem_stats_get(&st);
  if (st.limit) { /* a byte limit on the host space binds first */
    size_t left = st.limit > st.total_current ? st.limit - st.total_current : 0;
    if (left < *free_b) *free_b = left;
    if (st.limit < *total) *total = st.limit;
  }
}

/* ---------------------------------------------------------------- transfers */

static il_status il__cpu_upload(il_backend *b, il_tensor dst, const void *src, size_t bytes) {
  IL_TRY(il__check(b, "upload", &dst, IL_DTYPE_COUNT));
  if (bytes > dst.buf->size - dst.off)
    return il_error(IL_ERR_RANGE, "upload: %zu bytes into '%s' at offset %zu overrun its buffer of %zu bytes", bytes,
                    il__nm(&dst), dst.off, dst.buf->size);
  memcpy(il__cpu_ptr(dst), src, bytes);
  return IL_OK;
}

static il_status il__cpu_download(il_backend *b, void *dst, il_tensor src, size_t bytes) {
  IL_TRY(il__check(b, "download", &src, IL_DTYPE_COUNT));
  if (bytes > src.buf->size - src.off)
    return il_error(IL_ERR_RANGE, "download: %zu bytes from '%s' at offset %zu overrun its buffer of %zu bytes", bytes,
                    il__nm(&src), src.off, src.buf->size);
  memcpy(dst, il__cpu_ptr(src), bytes);
  return IL_OK;
}

/* The portable row conversions (the reference for ops_avx2's). */
static void il__f16_to_f32(void *dst, const void *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = il_fp16_to_f32(((const uint16_t *)src)[i]);
}
static void il__f32_to_f16(void *dst, const void *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = il_f32_to_fp16(((const float *)src)[i]);
}
static void il__bf16_to_f32(void *dst, const void *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = il_bf16_to_f32(((const uint16_t *)src)[i]);
}
static void il__f32_to_bf16(void *dst, const void *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = il_f32_to_bf16(((const float *)src)[i]);
}
static const il__cvt il__cvt_c = {.compiled = true,
                                  .f16_to_f32 = il__f16_to_f32,
                                  .f32_to_f16 = il__f32_to_f16,
                                  .bf16_to_f32 = il__bf16_to_f32,
                                  .f32_to_bf16 = il__f32_to_bf16};

static il_status il__cpu_copy(il_backend *b, il_tensor dst, il_tensor src) {
  IL_TRY(il__copy_check(b, &dst, &src));
  uint8_t *d = il__cpu_ptr(dst);
  const uint8_t *s = il__cpu_ptr(src);
  if (dst.type == src.type) {
    const size_t row = il_tensor_row_bytes(src.type, src.cols);
    for (int64_t r = 0; r < src.rows; r++) memmove(d + (size_t)r * dst.stride, s + (size_t)r * src.stride, row);
    return IL_OK;
  }
  const il__cvt *v = il__c(b)->cvt ? il__c(b)->cvt : &il__cvt_c;
  const il__cvt_fn f = dst.type == IL_DTYPE_F16    ? v->f32_to_f16
                       : dst.type == IL_DTYPE_BF16 ? v->f32_to_bf16
                       : src.type == IL_DTYPE_F16  ? v->f16_to_f32
                                                   : v->bf16_to_f32;
  for (int64_t r = 0; r < src.rows; r++) f(d + (size_t)r * dst.stride, s + (size_t)r * src.stride, src.cols);
  return IL_OK;
}

static il_status il__cpu_sync(il_backend *b) { return IL_OK; } /* ops run synchronously */

/* ---------------------------------------------------------------- capabilities */

static bool il__cpu_supports(il_backend *b, il_op op, il_dtype wtype, il_dtype atype) {
  if (atype != IL_DTYPE_F32 && atype != IL_DTYPE_F16 && atype != IL_DTYPE_BF16) return false;
  switch (op) {
  case IL_OP_MATMUL:
  case IL_OP_GET_ROWS: return il_cpu_matmul_supported(wtype);
  case IL_OP_KV_STORE:
  case IL_OP_ATTENTION: return il_cpu_attn_kv_type_ok(wtype); /* KV cells */
  default: return true;
  }
}

static void il__cpu_info(il_backend *b, il_backend_info *out) {
  il__cpu *c = il__c(b);
  memset(out, 0, sizeof *out);
  snprintf(out->kind, sizeof out->kind, "cpu");
  snprintf(out->name, sizeof out->name, "%s", c->name);
  snprintf(out->isa, sizeof out->isa, "%s", il_isa_name(c->isa));
  out->threads = il_pool_size(c->pool);
  out->host_visible = true;
  snprintf(out->device, sizeof out->device, "host CPU, %d threads, %s kernels", out->threads, out->isa);
}

/* ---------------------------------------------------------------- matmul */

static il_status il__grow(void **buf, size_t *cap, size_t need, il_mem_category cat, const char *what) {
  if (need <= *cap) return IL_OK;
  void *p = il_mem_alloc(cat, need, what);
  if (!p) return IL_ERR_OOM;
  il_mem_free(*buf);
  *buf = p;
  *cap = need;
  return IL_OK;
}

static il_status il__mm_check(il_backend *b, const il_tensor *y, const il_tensor *w, const il_tensor *x) {
  IL_TRY(il__check(b, "matmul", w, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "matmul", x, IL_DTYPE_F32));
  IL_TRY(il__check(b, "matmul", y, IL_DTYPE_F32));
  IL_TRY(il__dense("matmul", x));
  if (x->cols != w->cols || y->rows != x->rows || y->cols != w->rows || (y->stride % 4 && y->rows > 1))
    return il_error(IL_ERR_INVALID_ARG, "matmul '%s' [%lld x %lld]: input [%lld x %lld] and output [%lld x %lld] do not fit",
                    il__nm(w), (long long)w->rows, (long long)w->cols, (long long)x->rows, (long long)x->cols,
                    (long long)y->rows, (long long)y->cols);
  return IL_OK;
}

/* --repack: the weight's panels, made once when it is placed, for the types whose panels are
 * no larger than their rows (Q8_0, Q4_0, Q4_1: f16 scales; F16), so one-token generation,
 * which then reads the panels too, streams the same bytes. The K-quants' panels hold unpacked
 * scales (Q4_K, 1.25x its bytes) or weights (Q5_K 1.75x, Q6_K 1.54x), and a one-token pass from
 * them ran at 0.48-0.72x (bench_matmul --repack, docs/performance-log.md#repack): they, F32, BF16 (whose
 * batches pick one of two layouts by their activations) and every type on the scalar table are
 * used as stored, said once in the log. */
static il_status il__cpu_prepare_weight(il_backend *b, const il_tensor *w, bool *own_copy) {
  il__cpu *c = il__c(b);
  *own_copy = false;
  if (!c->repack || !w->buf || w->off || w->rows <= 0 || w->buf->packed) return IL_OK;
  const size_t bytes = il_cpu_matmul_packed_size(c->kernels, w->type, w->rows, w->cols);
  const size_t rows = (size_t)(w->rows + 31) / 32 * 32 * il_dtype_row_size(w->type, w->cols);
  if (!bytes || bytes > rows) {
    if (w->type != IL_DTYPE_F32 && !c->repack_noted) {
      c->repack_noted = true;
      il_log(IL_LOG_INFO, "--repack: %s weights ('%s') are used as stored: %s", il_dtype_name(w->type), il__nm(w),
             bytes ? "their panels would be larger than the file's rows and slow down one-token generation"
                   : "no panel layout for them on these kernels");
    }
    return IL_OK;
  }
  uint8_t *p = il_mem_alloc(IL_MEM_WEIGHTS, bytes, "repacked weights");
  if (!p) return il_error(IL_ERR_OOM, "--repack: %zu bytes for the panels of '%s'", bytes, il__nm(w));
  il_status st = il_cpu_matmul_pack(c->pool, c->kernels, w->type, il__cpu_ptr(*w), w->stride, w->rows, w->cols, p);
  if (st != IL_OK) {
    il_mem_free(p);
    return il_error_wrap(st, "--repack '%s': ", il__nm(w));
  }
  w->buf->packed = p;
  w->buf->packed_rows = w->rows;
  w->buf->packed_cols = w->cols;
  *own_copy = true;
  return IL_OK;
}

/* The panels of weight view w when it is the whole tensor they were made from, else NULL. */
static const void *il__packed(const il_tensor *w) {
  const il_buffer *bf = w->buf;
  return bf && bf->packed && !w->off && w->rows == bf->packed_rows && w->cols == bf->packed_cols ? bf->packed : NULL;
}

static int64_t il__ldy(const il_tensor *y) { return y->rows > 1 ? (int64_t)(y->stride / 4) : y->cols; }

static il_status il__f32_matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  il__cpu *c = il__c(b);
  IL_TRY(il__mm_check(b, &y, &w, &x));
  size_t need = il_cpu_matmul_work_size(w.type, w.cols, x.rows, il_pool_size(c->pool));
  IL_TRY(il__grow(&c->work, &c->work_size, need, IL_MEM_WORKSPACE, "matmul workspace"));
  const il_cpu_mm_part part = {.w = il__cpu_ptr(w), .w_stride = w.stride, .n_out = w.rows, .y = il__cpu_ptr(y),
                               .ldy = il__ldy(&y), .packed = il__packed(&w)};
  il_status st = il_cpu_matmul_multi(c->pool, c->kernels, w.type, 1, &part, w.cols, il__cpu_ptr(x), x.rows, c->work);
  if (st != IL_OK) return il_error_wrap(st, "matmul '%s': ", il__nm(&w));
  return IL_OK;
}

/* The matmul workspace for passes of max_tokens rows over w[0..n): the largest any of them
 * needs (quantized activations, the GEMM's per-thread panels). */
static size_t il__cpu_reserve_bytes(il_backend *b, int32_t max_tokens, const il_tensor *w, int n) {
  const int nth = il_pool_size(il__c(b)->pool);
  size_t need = 0;
  for (int i = 0; i < n; i++) {
    if (!w[i].rows || !w[i].cols) continue;
    const size_t k = il_cpu_matmul_work_size(w[i].type, w[i].cols, max_tokens, nth);
    if (k > need) need = k;
  }
  return need > il__c(b)->work_size ? need : 0; /* what reserve would still allocate */
}

/* Allocated at open, so the run's host memory is known before the first batch (the engine
 * calls this once per backend with the weights it will multiply). */
static il_status il__cpu_reserve(il_backend *b, int32_t max_tokens, const il_tensor *w, int n) {
  il__cpu *c = il__c(b);
  const size_t need = il__cpu_reserve_bytes(b, max_tokens, w, n);
  return need ? il__grow(&c->work, &c->work_size, need, IL_MEM_WORKSPACE, "matmul workspace") : IL_OK;
}

/* Weights of one type and row length run as one matmul task (one activation quantization,
 * one barrier); anything else as separate calls. */
static il_status il__f32_matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, il_tensor x) {
  il__cpu *c = il__c(b);
  bool fuse = n >= 2 && n <= IL_CPU_MM_MAX_PARTS;
  for (int i = 1; i < n && fuse; i++)
    fuse = w[i].type == w[0].type && w[i].cols == w[0].cols && !il__packed(&w[i]) == !il__packed(&w[0]);
  if (!fuse) {
    for (int i = 0; i < n; i++) IL_TRY(il__f32_matmul(b, y[i], w[i], x));
    return IL_OK;
  }
  il_cpu_mm_part parts[IL_CPU_MM_MAX_PARTS];
  for (int i = 0; i < n; i++) {
    IL_TRY(il__mm_check(b, &y[i], &w[i], &x));
    parts[i] = (il_cpu_mm_part){.w = il__cpu_ptr(w[i]), .w_stride = w[i].stride, .n_out = w[i].rows,
                                .y = il__cpu_ptr(y[i]), .ldy = il__ldy(&y[i]), .packed = il__packed(&w[i])};
  }
  size_t need = il_cpu_matmul_work_size(w[0].type, w[0].cols, x.rows, il_pool_size(c->pool));
  IL_TRY(il__grow(&c->work, &c->work_size, need, IL_MEM_WORKSPACE, "matmul workspace"));
  il_status st = il_cpu_matmul_multi(c->pool, c->kernels, w[0].type, n, parts, w[0].cols, il__cpu_ptr(x), x.rows, c->work);
  if (st != IL_OK) return il_error_wrap(st, "matmul '%s' (with %d more sharing its input): ", il__nm(&w[0]), n - 1);
  return IL_OK;
}

/* ---------------------------------------------------------------- row-parallel helper */

typedef struct {
  void (*row)(void *ctx, int64_t t);
  void *ctx;
  int64_t n;
} il__rows_task;

static void il__rows_worker(void *p, int ith, int nth) {
  il__rows_task *t = p;
  int64_t per = (t->n + nth - 1) / nth;
  int64_t r0 = per * ith, r1 = r0 + per < t->n ? r0 + per : t->n;
  for (int64_t r = r0; r < r1; r++) t->row(t->ctx, r);
}

static void il__for_rows(il__cpu *c, int64_t n_rows, int64_t row_elems, void (*row)(void *, int64_t), void *ctx) {
  if (n_rows * row_elems < IL__PAR_MIN || n_rows < 2 || il_pool_size(c->pool) == 1) {
    for (int64_t r = 0; r < n_rows; r++) row(ctx, r);
    return;
  }
  il__rows_task t = {row, ctx, n_rows};
  il_pool_run(c->pool, il__rows_worker, &t);
}

/* ---------------------------------------------------------------- rmsnorm */

typedef struct {
  uint8_t *y;
  const uint8_t *x;
  size_t ys, xs;
  const float *g;
  int64_t n;
  float eps;
} il__norm_ctx;

static void il__norm_row(void *p, int64_t t) {
  il__norm_ctx *c = p;
  const float *x = (const float *)(c->x + (size_t)t * c->xs);
  float *y = (float *)(c->y + (size_t)t * c->ys);
  double ss = 0;
  for (int64_t i = 0; i < c->n; i++) ss += (double)x[i] * x[i];
  float scale = (float)(1.0 / sqrt(ss / (double)c->n + c->eps));
  for (int64_t i = 0; i < c->n; i++) y[i] = x[i] * scale * c->g[i];
}

static il_status il__f32_rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  IL_TRY(il__rmsnorm_check(b, &y, &x, &g, false));
  il__norm_ctx ctx = {il__cpu_ptr(y), il__cpu_ptr(x), y.stride, x.stride, il__cpu_ptr(g), x.cols, eps};
  il__for_rows(il__c(b), x.rows, x.cols, il__norm_row, &ctx);
  return IL_OK;
}

/* ---------------------------------------------------------------- rope */

typedef struct {
  uint8_t *x;
  size_t xs;
  const int32_t *pos;
  il_rope_params p;
  int32_t cpos;          /* rows at this position take cs, sn (NULL: none) */
  const float *cs, *sn;
} il__rope_ctx;

/* cos and sin of pair i/2's angle at position pos (scaled); double precision for the angle so
 * long contexts do not drift */
static void il__rope_angle(float pos, int64_t i, const il_rope_params *p, float *cs, float *sn) {
  const double theta = (double)pos * pow((double)p->base, -(double)i / (double)p->n_rot);
  *cs = (float)cos(theta);
  *sn = (float)sin(theta);
}

static void il__rope_row(void *p, int64_t t) {
  il__rope_ctx *c = p;
  const bool cached = c->cs && c->pos[t] == c->cpos;
  const float pos = (float)c->pos[t] / c->p.scale;
  float *row = (float *)(c->x + (size_t)t * c->xs);
  for (int64_t i = 0; i < c->p.n_rot; i += 2) {
    float cs, sn;
    if (cached) cs = c->cs[i / 2], sn = c->sn[i / 2];
    else il__rope_angle(pos, i, &c->p, &cs, &sn);
    for (int64_t h = 0; h < c->p.n_heads; h++) {
      float *v = row + h * c->p.head_dim;
      int64_t a = c->p.mode == IL_ROPE_NEOX ? i / 2 : i;
      int64_t bb = c->p.mode == IL_ROPE_NEOX ? i / 2 + c->p.n_rot / 2 : i + 1;
      float x0 = v[a], x1 = v[bb];
      v[a] = x0 * cs - x1 * sn;
      v[bb] = x0 * sn + x1 * cs;
    }
  }
}

static il_status il__f32_rope(il_backend *b, il_tensor x, il_tensor pos, const il_rope_params *p) {
  IL_TRY(il__rope_check(b, &x, &pos, p, false));
  il__rope_ctx ctx = {il__cpu_ptr(x), x.stride, il__cpu_ptr(pos), *p, 0, NULL, NULL};
  if (!(ctx.p.scale > 0)) ctx.p.scale = 1.0f;
  /* the first row's position from the cache (filled when it was another position or rope) */
  il__cpu *c = il__c(b);
  const int64_t pairs = ctx.p.n_rot / 2;
  if (x.rows > 0 && pairs > 0 && pairs <= (int64_t)(sizeof c->rope.cs / sizeof c->rope.cs[0])) {
    ctx.cpos = ctx.pos[0];
    if (c->rope.pairs != pairs || c->rope.pos != ctx.cpos || c->rope.base != ctx.p.base ||
        c->rope.scale != ctx.p.scale) {
      const float fp = (float)ctx.cpos / ctx.p.scale;
      for (int64_t i = 0; i < pairs; i++) il__rope_angle(fp, 2 * i, &ctx.p, &c->rope.cs[i], &c->rope.sn[i]);
      c->rope.pos = ctx.cpos, c->rope.pairs = (int32_t)pairs, c->rope.base = ctx.p.base, c->rope.scale = ctx.p.scale;
    }
    ctx.cs = c->rope.cs, ctx.sn = c->rope.sn;
  }
  il__for_rows(c, x.rows, x.cols, il__rope_row, &ctx);
  return IL_OK;
}

/* ---------------------------------------------------------------- KV store */

/* One row into a cell of the cache's type (F32 copied, F16 and BF16 rounded to nearest even
 * through copy's row conversions, Q8_0 quantized as ggml's reference quantizer does; a
 * non-finite element is an error there). */
static il_status il__store_row(const il__cvt *cv, uint8_t *dst, il_dtype t, const float *src, int64_t n) {
  if (t == IL_DTYPE_Q8_0) return il_quantize_row(t, src, dst, n);
  if (t == IL_DTYPE_F32) memcpy(dst, src, (size_t)n * 4);
  else (t == IL_DTYPE_BF16 ? cv->f32_to_bf16 : cv->f32_to_f16)(dst, src, n);
  return IL_OK;
}

static il_status il__f32_kv_store(il_backend *b, const il_kv_view *kv, il_tensor k, il_tensor v, il_tensor slots) {
  IL_TRY(il__kv_store_check(b, kv, &k, &v, &slots, il_cpu_attn_kv_type_ok(kv->k.type), false));
  const int32_t *sl = il__cpu_ptr(slots);
  uint8_t *kd = il__cpu_ptr(kv->k), *vd = il__cpu_ptr(kv->v);
  const uint8_t *ks = il__cpu_ptr(k), *vs = il__cpu_ptr(v);
  const il__cvt *cv = il__c(b)->cvt ? il__c(b)->cvt : &il__cvt_c;
  for (int64_t i = 0; i < k.rows; i++) {
    if (sl[i] < 0 || sl[i] >= kv->k.rows)
      return il_error(IL_ERR_RANGE, "kv_store: slot %d of row %lld outside the %lld cells of '%s'", sl[i], (long long)i,
                      (long long)kv->k.rows, il__nm(&kv->k));
    const il_tensor *bad = &k;
    il_status st =
        il__store_row(cv, kd + (size_t)sl[i] * kv->k.stride, kv->k.type, (const float *)(ks + (size_t)i * k.stride), k.cols);
    if (st == IL_OK) {
      bad = &v;
      st = il__store_row(cv, vd + (size_t)sl[i] * kv->v.stride, kv->v.type, (const float *)(vs + (size_t)i * v.stride),
                         v.cols);
    }
    if (st != IL_OK) {
      char why[160];
      snprintf(why, sizeof why, "%s", il_error_detail());
      return il_error(st, "kv_store: row %lld of '%s' into %s cells: %s", (long long)i, il__nm(bad),
                      il_dtype_name(kv->k.type), why);
    }
  }
  return IL_OK;
}

/* ---------------------------------------------------------------- attention */

/* The seam's attention kernels are the CPU kernels of backend/cpu/attn (flash, memeff, sliced,
 * naive, in auto's order) over the tensors' host addresses (cpu and sim buffers are both host
 * memory inside the backend). */

static il_cpu_attn_args il__attn_args(il_backend *b, const il_attn_args *a) {
  const il_kv_view *kv = a->kv;
  return (il_cpu_attn_args){
      .out = il__cpu_ptr(a->out),
      .q = il__cpu_ptr(a->q),
      .seq = il__cpu_ptr(a->seq),
      .pos = il__cpu_ptr(a->pos),
      .n_tok = a->q.rows,
      .k = il__cpu_ptr(kv->k),
      .v = il__cpu_ptr(kv->v),
      .kv_type = kv->k.type,
      .kv_row_stride = kv->k.stride,
      .n_cells = kv->k.rows,
      .block_table = il__cpu_ptr(kv->block_table),
      .block = kv->block,
      .max_blocks = kv->max_blocks,
      .n_seq = kv->n_seq,
      .n_heads = a->n_heads,
      .n_kv_heads = a->n_kv_heads,
      .head_dim = a->head_dim,
      .scale = a->scale,
      .slice = a->slice,
      .window = a->window,
      .isa = il__c(b)->isa,
  };
}

/* Checks every kernel relies on before it reads device memory: buffers, types, shapes. */
static il_status il__attn_check(il_backend *b, const il_attn_args *a) {
  const il_kv_view *kv = a->kv;
  IL_TRY(il__attn_views_check(b, a, kv->k.type));
  if (a->q.cols != a->n_heads * a->head_dim || a->out.rows != a->q.rows || a->out.cols != a->q.cols ||
      kv->k.cols != a->n_kv_heads * a->head_dim || kv->v.rows != kv->k.rows || kv->v.stride != kv->k.stride ||
      a->seq.cols < a->q.rows || a->pos.cols < a->q.rows || kv->block_table.rows * kv->block_table.cols <
      (int64_t)kv->n_seq * kv->max_blocks || il__dense("attention", &a->q) || il__dense("attention", &a->out))
    return il_error(IL_ERR_INVALID_ARG, "attention: q [%lld x %lld] and cache rows of %lld do not match %lld/%lld heads of %lld",
                    (long long)a->q.rows, (long long)a->q.cols, (long long)kv->k.cols, (long long)a->n_heads,
                    (long long)a->n_kv_heads, (long long)a->head_dim);
  return IL_OK;
}

static const il_cpu_attn_kernel *il__attn_cpu_kernel(const il_attn_kernel *k);

static const char *il__attn_why_not(il_backend *b, const il_attn_kernel *k, const il_attn_args *a) {
  il_cpu_attn_args ca = il__attn_args(b, a);
  /* a shapes-only call (no buffers yet): why_not reads shapes, never memory, so any address will do */
  static int32_t none[1];
  if (!ca.out) ca.out = (float *)none;
  if (!ca.q) ca.q = (const float *)none;
  if (!ca.seq) ca.seq = none;
  if (!ca.pos) ca.pos = none;
  if (!ca.k) ca.k = none;
  if (!ca.v) ca.v = none;
  if (!ca.block_table) ca.block_table = none;
  return il__attn_cpu_kernel(k)->why_not(&ca);
}

/* An upper bound for any call with at most q.rows tokens over this cache, computed without
 * reading device memory (the engine sizes the workspace once, before any batch exists). A
 * kernel's need depends on how the tokens fall into sequences (naive: the longest run times the
 * context; flash: the number of query tiles, or the key split of a lone decode row), so the
 * bound is the largest of the extreme layouts: one sequence's prefill ending at the last
 * position; the tokens spread over every sequence (most tiles); one decode row (most split). */
static size_t il__attn_workspace(il_backend *b, const il_attn_kernel *k, const il_attn_args *a) {
  const il_kv_view *kv = a->kv;
  const int64_t n = a->q.rows < (int64_t)kv->n_ctx * kv->n_seq ? a->q.rows : (int64_t)kv->n_ctx * kv->n_seq;
  if (n <= 0 || kv->max_blocks <= 0 || kv->block <= 0) return 0;
  const int32_t n_seq = kv->n_seq > 0 ? kv->n_seq : 1;
  /* (out of memory here leaves the bound at 0: the kernel then refuses its too-small workspace
   * by name at run time, never overruns it) */
  int32_t *seq = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)n, "attention layout"),
          *pos = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)n, "attention layout"),
          *table = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(int32_t) * (size_t)kv->max_blocks * (size_t)n_seq,
                                "attention layout");
  size_t best = 0;
  if (seq && pos && table) {
    for (int32_t s = 0; s < n_seq; s++)
      for (int32_t i = 0; i < kv->max_blocks; i++) table[(size_t)s * (size_t)kv->max_blocks + (size_t)i] = s * kv->max_blocks + i;
    for (int layout = 0; layout < 3; layout++) {
      int64_t m = layout == 2 ? 1 : n;
      if (layout == 0 && m > kv->n_ctx) m = kv->n_ctx;
      for (int64_t i = 0; i < m; i++) {
        if (layout == 1) { /* round-robin over the sequences, each ending at the last position */
          seq[i] = (int32_t)(i % n_seq);
          const int64_t per = (m + n_seq - 1) / n_seq, j = i / n_seq;
          pos[i] = (int32_t)(kv->n_ctx - per + j); /* m <= n_ctx x n_seq, so per <= n_ctx */
        } else {
          seq[i] = 0;
          pos[i] = (int32_t)(kv->n_ctx - m + i);
        }
      }
      il_cpu_attn_args ca = il__attn_args(b, a);
      ca.seq = seq, ca.pos = pos, ca.block_table = table, ca.n_seq = n_seq, ca.n_tok = m;
      ca.n_cells = (int64_t)kv->max_blocks * kv->block * n_seq;
      static float none[1]; /* shapes only: never read */
      if (!ca.out) ca.out = none;
      if (!ca.q) ca.q = none;
      if (!ca.k) ca.k = none;
      if (!ca.v) ca.v = none;
      const size_t ws = il__attn_cpu_kernel(k)->workspace(&ca, il_pool_size(il__c(b)->pool));
      if (ws > best) best = ws;
    }
    il_error_clear();
  }
  il_mem_free(seq), il_mem_free(pos), il_mem_free(table);
  if (!strcmp(k->name, "flash")) { /* its need grows with the tiles too: the analytic bound */
    il_cpu_attn_args ca = il__attn_args(b, a);
    ca.n_tok = a->q.rows;
    const size_t fb = il_cpu_attn_flash_bound(&ca, il_pool_size(il__c(b)->pool));
    if (fb > best) best = fb;
  }
  return best;
}

static il_status il__f32_attn_run(il_backend *b, const il_attn_kernel *k, const il_attn_args *a, il_tensor ws) {
  IL_TRY(il__attn_check(b, a));
  if (ws.buf) IL_TRY(il__check(b, "attention workspace", &ws, IL_DTYPE_COUNT));
  il_cpu_attn_args ca = il__attn_args(b, a);
  const size_t have = ws.buf ? ws.buf->size - ws.off : 0;
  il_status st = il__attn_cpu_kernel(k)->run(il__c(b)->pool, &ca, ws.buf ? il__cpu_ptr(ws) : NULL, have);
  if (st != IL_OK) return il_error_wrap(st, "attention (%s): ", k->name);
  return IL_OK;
}

static il_status il__attn_run(il_backend *b, const il_attn_kernel *k, const il_attn_args *a, il_tensor ws);

/* One thin adapter per CPU kernel, in the list's order (flash, memeff, sliced, naive). */
#define IL__ATTN_ADAPT(i)                                                                              \
  static const char *il__attn_why_##i(il_backend *b, const il_attn_args *a);                          \
  static size_t il__attn_ws_##i(il_backend *b, const il_attn_args *a);                                \
  static il_status il__attn_run_##i(il_backend *b, const il_attn_args *a, il_tensor w);
IL__ATTN_ADAPT(0)
IL__ATTN_ADAPT(1)
IL__ATTN_ADAPT(2)
IL__ATTN_ADAPT(3)

static il_attn_kernel il__cpu_attn[4] = {
    {NULL, il__attn_why_0, il__attn_ws_0, il__attn_run_0},
    {NULL, il__attn_why_1, il__attn_ws_1, il__attn_run_1},
    {NULL, il__attn_why_2, il__attn_ws_2, il__attn_run_2},
    {NULL, il__attn_why_3, il__attn_ws_3, il__attn_run_3},
};

static const il_cpu_attn_kernel *il__attn_cpu_kernel(const il_attn_kernel *k) {
  return &il_cpu_attn_kernels(NULL)[k - il__cpu_attn];
}

#define IL__ATTN_BODY(i)                                                                               \
  static const char *il__attn_why_##i(il_backend *b, const il_attn_args *a) {                         \
    return il__attn_why_not(b, &il__cpu_attn[i], a);                                                   \
  }                                                                                                    \
  static size_t il__attn_ws_##i(il_backend *b, const il_attn_args *a) {                               \
    return il__attn_workspace(b, &il__cpu_attn[i], a);                                                 \
  }                                                                                                    \
  static il_status il__attn_run_##i(il_backend *b, const il_attn_args *a, il_tensor w) {              \
    return il__attn_run(b, &il__cpu_attn[i], a, w);                                                    \
  }
IL__ATTN_BODY(0)
IL__ATTN_BODY(1)
IL__ATTN_BODY(2)
IL__ATTN_BODY(3)

static pthread_once_t il__attn_once = PTHREAD_ONCE_INIT;
static void il__attn_names(void) {
  int n = 0;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&n);
  IL_ASSERT(n == 4);
  for (int i = 0; i < 4; i++) il__cpu_attn[i].name = ks[i].name;
}

static const il_attn_kernel *il__cpu_attn_kernels(il_backend *b, int *n) {
  pthread_once(&il__attn_once, il__attn_names);
  *n = 4;
  return il__cpu_attn;
}

/* ---------------------------------------------------------------- elementwise */

typedef struct {
  const il__ops *ops;
  float *g;
  const float *u;
  int64_t n;
} il__swiglu_ctx;

static void il__swiglu_row(void *p, int64_t t) {
  const il__swiglu_ctx *s = p;
  float *g = s->g + t * s->n;
  const float *u = s->u + t * s->n;
  if (s->ops) {
    s->ops->swiglu(g, u, s->n);
    return;
  }
  for (int64_t i = 0; i < s->n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* Rows split across the pool (a 512-token prompt's SwiGLU is 4M elements a layer); elementwise,
 * so the result does not depend on the thread count. */
static il_status il__f32_swiglu(il_backend *b, il_tensor gate, il_tensor up) {
  IL_TRY(il__elementwise_check(b, "swiglu", &gate, &up, false));
  il__cpu *c = il__c(b);
  il__swiglu_ctx s = {.ops = c->ops, .g = il__cpu_ptr(gate), .u = il__cpu_ptr(up), .n = gate.cols};
  il__for_rows(c, gate.rows, gate.cols, il__swiglu_row, &s);
  return IL_OK;
}

/* gelu's tanh form times up, one row (scalar at every level: one tanhf per element). */
static void il__geglu_row(void *p, int64_t t) {
  const il__swiglu_ctx *s = p;
  float *g = s->g + t * s->n;
  const float *u = s->u + t * s->n;
  for (int64_t i = 0; i < s->n; i++) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
  }
}

static il_status il__f32_geglu(il_backend *b, il_tensor gate, il_tensor up) {
  IL_TRY(il__elementwise_check(b, "geglu", &gate, &up, false));
  il__cpu *c = il__c(b);
  il__swiglu_ctx s = {.ops = NULL, .g = il__cpu_ptr(gate), .u = il__cpu_ptr(up), .n = gate.cols};
  il__for_rows(c, gate.rows, gate.cols, il__geglu_row, &s);
  return IL_OK;
}

static il_status il__f32_add(il_backend *b, il_tensor y, il_tensor x) {
  IL_TRY(il__elementwise_check(b, "add", &y, &x, false));
  float *yp = il__cpu_ptr(y);
  const float *xp = il__cpu_ptr(x);
  const int64_t n = y.rows * y.cols;
  for (int64_t i = 0; i < n; i++) yp[i] += xp[i];
  return IL_OK;
}

static il_status il__f32_add_bias(il_backend *b, il_tensor y, il_tensor bias) {
  IL_TRY(il__add_bias_check(b, &y, &bias, false));
  const float *bp = il__cpu_ptr(bias);
  for (int64_t t = 0; t < y.rows; t++) {
    float *row = (float *)((uint8_t *)il__cpu_ptr(y) + (size_t)t * y.stride);
    for (int64_t i = 0; i < y.cols; i++) row[i] += bp[i];
  }
  return IL_OK;
}

static il_status il__cpu_count_nonfinite(il_backend *b, il_tensor x, int64_t *out) {
  *out = 0;
  IL_TRY(il__check(b, "count_nonfinite", &x, IL_DTYPE_F32));
  int64_t n = 0;
  for (int64_t t = 0; t < x.rows; t++) {
    const float *row = (const float *)((const uint8_t *)il__cpu_ptr(x) + (size_t)t * x.stride);
    for (int64_t i = 0; i < x.cols; i++) n += !isfinite(row[i]);
  }
  *out = n;
  return IL_OK;
}

static il_status il__cpu_round_to(il_backend *b, il_tensor x, il_dtype type) {
  IL_TRY(il__check(b, "round_to", &x, IL_DTYPE_F32));
  if (type == IL_DTYPE_F32) return IL_OK;
  if (type != IL_DTYPE_F16 && type != IL_DTYPE_BF16)
    return il_error(IL_ERR_UNSUPPORTED, "round_to: activations are f32, f16 or bf16, not %s", il_dtype_name(type));
  for (int64_t t = 0; t < x.rows; t++) {
    float *row = (float *)((uint8_t *)il__cpu_ptr(x) + (size_t)t * x.stride);
    if (type == IL_DTYPE_F16)
      for (int64_t i = 0; i < x.cols; i++) row[i] = il_fp16_to_f32(il_f32_to_fp16(row[i]));
    else
      for (int64_t i = 0; i < x.cols; i++) row[i] = il_bf16_to_f32(il_f32_to_bf16(row[i]));
  }
  return IL_OK;
}

static il_status il__cpu_value_stats(il_backend *b, il_tensor x, int64_t *nonfinite, float *absmax) {
  *nonfinite = 0, *absmax = 0;
  IL_TRY(il__check(b, "value_stats", &x, IL_DTYPE_F32));
  int64_t n = 0;
  float m = 0;
  for (int64_t t = 0; t < x.rows; t++) {
    const float *row = (const float *)((const uint8_t *)il__cpu_ptr(x) + (size_t)t * x.stride);
    for (int64_t i = 0; i < x.cols; i++) {
      if (!isfinite(row[i])) n++;
      else if (fabsf(row[i]) > m) m = fabsf(row[i]);
    }
  }
  *nonfinite = n, *absmax = m;
  return IL_OK;
}

static il_status il__f32_get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor ids) {
  IL_TRY(il__get_rows_check(b, &y, &w, &ids, false));
  const int32_t *id = il__cpu_ptr(ids);
  for (int64_t t = 0; t < y.rows; t++) {
    if (id[t] < 0 || id[t] >= w.rows)
      return il_error(IL_ERR_RANGE, "token id %d out of range [0, %lld) for '%s'", id[t], (long long)w.rows, il__nm(&w));
    IL_TRY(il_dequantize_row(w.type, (const uint8_t *)il__cpu_ptr(w) + (size_t)id[t] * w.stride,
                             (float *)((uint8_t *)il__cpu_ptr(y) + (size_t)t * y.stride), w.cols));
  }
  return IL_OK;
}

/* ---------------------------------------------------------------- 16-bit activations
 * Every op of the table takes F32, F16 or BF16 activations (the hot ops test for F32 first and
 * run their kernels directly: the chunk loop costs a few hundred instructions an op). The kernels above compute on F32
 * only, so an op with a 16-bit activation runs in chunks of the rows reserve_act asked for: its
 * 16-bit inputs widened into the scratch (copy's conversions), the kernel run on those F32 views,
 * each result reported to the observer and narrowed back to its tensor. With F32 activations an
 * op is the kernel on the tensors themselves and the observer sees its output. The chunk size
 * is the caller's (the model's), so results do not depend on how a batch is split. */


/* Rows [r0, r0 + rows) of an op over n rows; `used`: scratch bytes this chunk has taken. */
typedef struct {
  il_backend *b;
  int64_t n, r0, rows, step;
  size_t used;
  bool go;
} il__wk;

/* The chunks of an op over n rows: all at once unless one of its activations is 16-bit. */
static il__wk il__wk_first(il_backend *b, int64_t n, bool half) {
  const int64_t step = half && il__c(b)->wide_rows > 0 ? il__c(b)->wide_rows : (n > 0 ? n : 1);
  return (il__wk){b, n, 0, n < step ? n : step, step, 0, true};
}

static void il__wk_next(il__wk *k) {
  k->r0 += k->rows;
  k->used = 0;
  k->go = k->r0 < k->n;
  k->rows = k->n - k->r0 < k->step ? k->n - k->r0 : k->step;
}

#define IL__WIDE(k, b, n, half) for (il__wk k = il__wk_first(b, n, half); k.go; il__wk_next(&k))

/* Where the kernel writes the chunk's rows of t: t's rows when F32, else F32 scratch. */
static il_status il__wide_out(il__wk *k, il_tensor t, il_tensor *out) {
  if (!il__half(t.type)) {
    *out = k->rows == k->n && !k->r0 ? t : il_tensor_rows(t, k->r0, k->rows);
    return IL_OK;
  }
  const il__cpu *c = il__c(k->b);
  const size_t bytes = (size_t)k->rows * (size_t)t.cols * 4;
  if (!c->wide || k->used + bytes > c->wide->size)
    return il_error(IL_ERR_INVALID_ARG, "'%s' is %s: %s (%lld rows of %lld columns)", il__nm(&t), il_dtype_name(t.type),
                    c->wide ? "the op's f32 copies do not fit the scratch of reserve_act"
                            : "16-bit activations need the f32 scratch of reserve_act first",
                    (long long)k->rows, (long long)t.cols);
  *out = il_tensor_make(c->wide, k->used, k->rows, t.cols, IL_DTYPE_F32, t.name);
  k->used += bytes;
  return IL_OK;
}

/* The chunk's rows of input t as the kernel reads them: t's rows when F32, else widened. */
static il_status il__wide_in(il__wk *k, il_tensor t, il_tensor *out) {
  IL_TRY(il__wide_out(k, t, out));
  return il__half(t.type) ? il__cpu_copy(k->b, *out, il_tensor_rows(t, k->r0, k->rows)) : IL_OK;
}

/* y, the kernel's result for the chunk's rows of output t: reported, then stored at t's type. */
static il_status il__wide_put(il__wk *k, il_op op, il_tensor y, il_tensor t) {
  IL_TRY(il__observe(k->b, op, y, t.type));
  return il__half(t.type) ? il__cpu_copy(k->b, il_tensor_rows(t, k->r0, k->rows), y) : IL_OK;
}

/* The chunk's entries of an I32 vector with one entry per row (ids, positions, slots). */
static il_tensor il__wide_ids(const il__wk *k, il_tensor t) {
  if (k->rows == k->n && !k->r0) return t;
  t.off += (size_t)k->r0 * 4;
  t.cols = k->rows;
  t.stride = (size_t)k->rows * 4;
  return t;
}

/* A 16-bit activation is checked before any chunk: in bounds, this backend's, and as many
 * rows as the op's (the kernel checks the F32 chunks it is given). */
static il_status il__wide_check(il_backend *b, const char *op, const il_tensor *t, int64_t rows) {
  if (!il__half(t->type)) return IL_OK;
  IL_TRY(il__check(b, op, t, IL_DTYPE_COUNT));
  if (t->rows != rows)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' has %lld rows; the op has %lld", op, il__nm(t), (long long)t->rows,
                    (long long)rows);
  return IL_OK;
}

static il_status il__cpu_reserve_act(il_backend *b, il_dtype atype, int32_t rows, int64_t cols) {
  il__cpu *c = il__c(b);
  if (c->wide) b->ops->buffer_free(b, c->wide);
  c->wide = NULL;
  c->wide_rows = 0;
  if (rows <= 0) return IL_OK;
  IL_TRY(il__reserve_act_check(atype, rows, cols));
  IL_TRY(b->ops->buffer_alloc(b, IL_MEM_ACTIVATIONS, (size_t)rows * (size_t)cols * 4, "activations: f32 chunk", &c->wide));
  c->wide_rows = rows;
  return IL_OK;
}

void il__cpu_release_act(il_backend *b) { (void)il__cpu_reserve_act(b, IL_DTYPE_F32, 0, 0); }

static il_status il__cpu_get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor ids) {
  const bool half = il__half(y.type);
  if (half) IL_TRY(il__wide_check(b, "get_rows", &y, y.rows));
  IL__WIDE(k, b, y.rows, half) {
    il_tensor yy;
    IL_TRY(il__wide_out(&k, y, &yy));
    IL_TRY(il__f32_get_rows(b, yy, w, il__wide_ids(&k, ids)));
    IL_TRY(il__wide_put(&k, IL_OP_GET_ROWS, yy, y));
  }
  return IL_OK;
}

static il_status il__cpu_matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, const il_tensor *bias,
                                      il_tensor x) {
  if (n < 1 || n > IL_CPU_MM_MAX_PARTS)
    return il_error(IL_ERR_INVALID_ARG, "matmul_multi: %d weights (1..%d)", n, IL_CPU_MM_MAX_PARTS);
  bool half = il__half(x.type);
  for (int i = 0; i < n; i++) half = half || il__half(y[i].type);
  if (!half) { /* F32: the kernels on the tensors themselves (the per-token path) */
    IL_TRY(n == 1 ? il__f32_matmul(b, y[0], w[0], x) : il__f32_matmul_multi(b, n, y, w, x));
    for (int i = 0; i < n; i++) {
      if (bias && bias[i].buf) IL_TRY(il__f32_add_bias(b, y[i], bias[i]));
      IL_TRY(il__observe(b, IL_OP_MATMUL, y[i], y[i].type));
    }
    return IL_OK;
  }
  IL_TRY(il__wide_check(b, "matmul", &x, x.rows));
  for (int i = 0; i < n; i++) IL_TRY(il__wide_check(b, "matmul", &y[i], x.rows));
  IL__WIDE(k, b, x.rows, half) {
    il_tensor xx, yy[IL_CPU_MM_MAX_PARTS];
    IL_TRY(il__wide_in(&k, x, &xx));
    for (int i = 0; i < n; i++) IL_TRY(il__wide_out(&k, y[i], &yy[i]));
    IL_TRY(n == 1 ? il__f32_matmul(b, yy[0], w[0], xx) : il__f32_matmul_multi(b, n, yy, w, xx));
    for (int i = 0; bias && i < n; i++)
      if (bias[i].buf) IL_TRY(il__f32_add_bias(b, yy[i], bias[i]));
    for (int i = 0; i < n; i++) IL_TRY(il__wide_put(&k, IL_OP_MATMUL, yy[i], y[i]));
  }
  return IL_OK;
}

static il_status il__cpu_matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  return il__cpu_matmul_multi(b, 1, &y, &w, NULL, x);
}

static il_status il__cpu_rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  const bool half = il__half(x.type) || il__half(y.type);
  if (!half) {
    IL_TRY(il__f32_rmsnorm(b, y, x, g, eps));
    return il__observe(b, IL_OP_RMSNORM, y, y.type);
  }
  IL_TRY(il__wide_check(b, "rmsnorm", &x, x.rows));
  IL_TRY(il__wide_check(b, "rmsnorm", &y, x.rows));
  IL__WIDE(k, b, x.rows, half) {
    il_tensor xx, yy;
    IL_TRY(il__wide_in(&k, x, &xx));
    IL_TRY(il__wide_out(&k, y, &yy));
    IL_TRY(il__f32_rmsnorm(b, yy, xx, g, eps));
    IL_TRY(il__wide_put(&k, IL_OP_RMSNORM, yy, y));
  }
  return IL_OK;
}

static il_status il__cpu_rope(il_backend *b, il_tensor x, il_tensor pos, const il_rope_params *p) {
  const bool half = il__half(x.type);
  IL_TRY(il__wide_check(b, "rope", &x, x.rows));
  IL__WIDE(k, b, x.rows, half) {
    il_tensor xx;
    IL_TRY(il__wide_in(&k, x, &xx));
    IL_TRY(il__f32_rope(b, xx, il__wide_ids(&k, pos), p));
    IL_TRY(il__wide_put(&k, IL_OP_ROPE, xx, x));
  }
  return IL_OK;
}

static il_status il__cpu_kv_store(il_backend *b, const il_kv_view *kv, il_tensor kt, il_tensor vt, il_tensor slots) {
  const bool half = il__half(kt.type) || il__half(vt.type);
  IL_TRY(il__wide_check(b, "kv_store", &kt, kt.rows));
  IL_TRY(il__wide_check(b, "kv_store", &vt, kt.rows));
  IL__WIDE(k, b, kt.rows, half) {
    il_tensor kk, vv;
    IL_TRY(il__wide_in(&k, kt, &kk));
    IL_TRY(il__wide_in(&k, vt, &vv));
    IL_TRY(il__f32_kv_store(b, kv, kk, vv, il__wide_ids(&k, slots)));
  }
  return IL_OK;
}

/* k is stored from its rotated F32 copy; with 16-bit activations k's own rows stay unrotated. */
static il_status il__cpu_rope_kv_store(il_backend *b, il_tensor q, il_tensor kt, il_tensor vt, il_tensor pos,
                                       const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv,
                                       il_tensor slots) {
  const bool half = il__half(q.type) || il__half(kt.type) || il__half(vt.type);
  if (!half) {
    IL_TRY(il__f32_rope(b, q, pos, rq));
    IL_TRY(il__f32_rope(b, kt, pos, rk));
    IL_TRY(il__f32_kv_store(b, kv, kt, vt, slots));
    return il__observe(b, IL_OP_ROPE, q, q.type);
  }
  IL_TRY(il__wide_check(b, "rope_kv_store", &q, q.rows));
  IL_TRY(il__wide_check(b, "rope_kv_store", &kt, q.rows));
  IL_TRY(il__wide_check(b, "rope_kv_store", &vt, q.rows));
  IL__WIDE(k, b, q.rows, half) {
    il_tensor qq, kk, vv;
    IL_TRY(il__wide_in(&k, q, &qq));
    IL_TRY(il__wide_in(&k, kt, &kk));
    IL_TRY(il__wide_in(&k, vt, &vv));
    const il_tensor at = il__wide_ids(&k, pos);
    IL_TRY(il__f32_rope(b, qq, at, rq));
    IL_TRY(il__f32_rope(b, kk, at, rk));
    IL_TRY(il__f32_kv_store(b, kv, kk, vv, il__wide_ids(&k, slots)));
    IL_TRY(il__wide_put(&k, IL_OP_ROPE, qq, q));
  }
  return IL_OK;
}

/* One F32 binary op: swiglu, geglu or add. */
static il_status il__f32_binary(il_backend *b, il_op op, il_tensor y, il_tensor x) {
  return op == IL_OP_SWIGLU  ? il__f32_swiglu(b, y, x)
         : op == IL_OP_GEGLU ? il__f32_geglu(b, y, x)
                             : il__f32_add(b, y, x);
}

/* y = f(y, x) elementwise: swiglu (y = silu(y) * x), geglu (y = gelu(y) * x) or add (y += x). */
static il_status il__cpu_binary(il_backend *b, il_op op, il_tensor y, il_tensor x) {
  const char *nm = op == IL_OP_SWIGLU ? "swiglu" : op == IL_OP_GEGLU ? "geglu" : "add";
  const bool half = il__half(y.type) || il__half(x.type);
  if (!half) {
    IL_TRY(il__f32_binary(b, op, y, x));
    return il__observe(b, op, y, y.type);
  }
  IL_TRY(il__wide_check(b, nm, &y, y.rows));
  IL_TRY(il__wide_check(b, nm, &x, y.rows));
  IL__WIDE(k, b, y.rows, half) {
    il_tensor yy, xx;
    IL_TRY(il__wide_in(&k, y, &yy));
    IL_TRY(il__wide_in(&k, x, &xx));
    IL_TRY(il__f32_binary(b, op, yy, xx));
    IL_TRY(il__wide_put(&k, op, yy, y));
  }
  return IL_OK;
}

static il_status il__cpu_swiglu(il_backend *b, il_tensor gate, il_tensor up) { return il__cpu_binary(b, IL_OP_SWIGLU, gate, up); }
static il_status il__cpu_add(il_backend *b, il_tensor y, il_tensor x) { return il__cpu_binary(b, IL_OP_ADD, y, x); }
static il_status il__cpu_geglu(il_backend *b, il_tensor gate, il_tensor up) { return il__cpu_binary(b, IL_OP_GEGLU, gate, up); }

static il_status il__f32_scale(il_backend *b, il_tensor x, float s) {
  IL_TRY(il__elementwise_check(b, "scale", &x, &x, false));
  float *p = il__cpu_ptr(x);
  const int64_t n = x.rows * x.cols;
  for (int64_t i = 0; i < n; i++) p[i] *= s;
  return IL_OK;
}

static il_status il__cpu_scale(il_backend *b, il_tensor x, float s) {
  const bool half = il__half(x.type);
  if (!half) {
    IL_TRY(il__f32_scale(b, x, s));
    return il__observe(b, IL_OP_SCALE, x, x.type);
  }
  IL_TRY(il__wide_check(b, "scale", &x, x.rows));
  IL__WIDE(k, b, x.rows, half) {
    il_tensor xx;
    IL_TRY(il__wide_in(&k, x, &xx));
    IL_TRY(il__f32_scale(b, xx, s));
    IL_TRY(il__wide_put(&k, IL_OP_SCALE, xx, x));
  }
  return IL_OK;
}

static il_status il__cpu_add_bias(il_backend *b, il_tensor y, il_tensor bias) {
  const bool half = il__half(y.type);
  IL_TRY(il__wide_check(b, "add_bias", &y, y.rows));
  IL__WIDE(k, b, y.rows, half) {
    il_tensor yy;
    IL_TRY(il__wide_in(&k, y, &yy));
    IL_TRY(il__f32_add_bias(b, yy, bias));
    IL_TRY(il__wide_put(&k, IL_OP_ADD, yy, y));
  }
  return IL_OK;
}

static il_status il__attn_run(il_backend *b, const il_attn_kernel *kn, const il_attn_args *a, il_tensor ws) {
  const bool half = il__half(a->q.type) || il__half(a->out.type);
  if (!half) {
    IL_TRY(il__f32_attn_run(b, kn, a, ws));
    return il__observe(b, IL_OP_ATTENTION, a->out, a->out.type);
  }
  IL_TRY(il__wide_check(b, "attention", &a->q, a->q.rows));
  IL_TRY(il__wide_check(b, "attention", &a->out, a->q.rows));
  IL__WIDE(k, b, a->q.rows, half) {
    il_attn_args c = *a;
    IL_TRY(il__wide_in(&k, a->q, &c.q));
    IL_TRY(il__wide_out(&k, a->out, &c.out));
    c.pos = il__wide_ids(&k, a->pos);
    c.seq = il__wide_ids(&k, a->seq);
    IL_TRY(il__f32_attn_run(b, kn, &c, ws));
    IL_TRY(il__wide_put(&k, IL_OP_ATTENTION, c.out, a->out));
  }
  return IL_OK;
}

/* ---------------------------------------------------------------- fused ops
 * The compositions the table names, of the ops above (16-bit activations included): one call
 * here is exactly the ops it stands for. */

static il_status il__cpu_rmsnorm_quant(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  il__cpu *c = il__c(b);
  IL_TRY(il__check(b, "rmsnorm_quant", &y, IL_DTYPE_COUNT));
  if (!il_quantize_supported(y.type) || y.rows != x.rows || y.cols != x.cols)
    return il_error(IL_ERR_UNSUPPORTED, "rmsnorm_quant: '%s' [%lld x %lld] of %s for rows [%lld x %lld]", il__nm(&y),
                    (long long)y.rows, (long long)y.cols, il_dtype_name(y.type), (long long)x.rows, (long long)x.cols);
  IL_TRY(il__wide_check(b, "rmsnorm_quant", &x, x.rows));
  IL_TRY(il__grow(&c->qrow, &c->qrow_size, (size_t)x.cols * 4, IL_MEM_WORKSPACE, "rmsnorm_quant row"));
  IL__WIDE(k, b, x.rows, il__half(x.type)) {
    il_tensor xx;
    IL_TRY(il__wide_in(&k, x, &xx));
    IL_TRY(il__rmsnorm_check(b, &xx, &xx, &g, false));
    il__norm_ctx ctx = {c->qrow, il__cpu_ptr(xx), 0, xx.stride, il__cpu_ptr(g), xx.cols, eps};
    for (int64_t r = 0; r < k.rows; r++) {
      il__norm_row(&ctx, r); /* rmsnorm's arithmetic, one row at a time */
      IL_TRY(il_quantize_row(y.type, c->qrow, (uint8_t *)il__cpu_ptr(y) + (size_t)(k.r0 + r) * y.stride, x.cols));
    }
  }
  return IL_OK;
}

static il_status il__cpu_gate_up_swiglu(il_backend *b, il_tensor h, il_tensor up, il_tensor w_gate, il_tensor w_up,
                                        il_tensor x) {
  const il_tensor y[2] = {h, up}, w[2] = {w_gate, w_up};
  IL_TRY(il__cpu_matmul_multi(b, 2, y, w, NULL, x));
  return il__cpu_swiglu(b, h, up);
}

static il_status il__cpu_matmul_add(il_backend *b, il_tensor y, il_tensor w, il_tensor x, il_tensor tmp) {
  IL_TRY(il__cpu_matmul(b, tmp, w, x));
  return il__cpu_add(b, y, tmp);
}

/* ---------------------------------------------------------------- sampling */

typedef struct {
  float l;
  int32_t id;
} il__cand;

static int il__cand_cmp(const void *a, const void *b) {
  const il__cand *x = a, *y = b;
  if (x->l != y->l) return x->l > y->l ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* One row as il_sample_args says; cand: n_vocab entries of scratch. */
static int32_t il__sample_row(const float *l, int64_t n, float u, const il_sample_args *a, il__cand *cand) {
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(l[i])) return -1;
  if (!(a->temperature > 0)) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
      if (l[i] > l[best]) best = i;
    return (int32_t)best;
  }
  for (int64_t i = 0; i < n; i++) cand[i] = (il__cand){l[i], (int32_t)i};
  qsort(cand, (size_t)n, sizeof *cand, il__cand_cmp);
  const int64_t k = a->top_k > 0 && a->top_k < n ? a->top_k : n;
  double total = 0;
  for (int64_t i = 0; i < k; i++) total += exp(((double)cand[i].l - cand[0].l) / a->temperature);
  int64_t m = 0;
  double kept = 0;
  while (m < k && (m == 0 || kept < (double)a->top_p * total)) kept += exp(((double)cand[m].l - cand[0].l) / a->temperature), m++;
  const double r = (double)u * kept;
  double cum = 0;
  for (int64_t i = 0; i < m; i++) {
    cum += exp(((double)cand[i].l - cand[0].l) / a->temperature);
    if (cum > r) return cand[i].id;
  }
  return cand[m - 1].id;
}

static il_status il__cpu_sample(il_backend *b, il_tensor ids, il_tensor logits, il_tensor u, const il_sample_args *a) {
  il__cpu *c = il__c(b);
  IL_TRY(il__sample_check(b, &ids, &logits, &u));
  IL_TRY(il__grow(&c->cand, &c->cand_size, (size_t)logits.cols * sizeof(il__cand), IL_MEM_WORKSPACE, "sampling candidates"));
  const float *uv = il__cpu_ptr(u);
  int32_t *out = il__cpu_ptr(ids);
  for (int64_t t = 0; t < logits.rows; t++)
    out[t] = il__sample_row((const float *)((const uint8_t *)il__cpu_ptr(logits) + (size_t)t * logits.stride), logits.cols,
                            uv[t], a, c->cand);
  return IL_OK;
}

/* ---------------------------------------------------------------- step capture
 * Nothing to record on the host: the ops run as called, and capture_end hands back no step. */

static il_status il__cpu_capture_begin(il_backend *b) { return IL_OK; }
static il_status il__cpu_capture_end(il_backend *b, il_step **out) {
  if (out) *out = NULL;
  return IL_OK;
}
static il_status il__cpu_replay(il_backend *b, il_step *step) {
  return il_error(IL_ERR_INVALID_ARG, "replay: %s records no steps (capture_end gave none); run the ops again",
                  il__c(b)->name);
}
static void il__cpu_step_free(il_backend *b, il_step *step) {}

/* ---------------------------------------------------------------- events */

static il_status il__cpu_event_record(il_backend *b, il_event **out) {
  *out = il_mem_calloc(IL_MEM_OTHER, sizeof **out, "event");
  if (!*out) return IL_ERR_OOM;
  (*out)->t = il_time_now();
  return IL_OK;
}

/* The copy is done when upload returns: the event is recorded after it. */
static il_status il__cpu_upload_async(il_backend *b, il_tensor dst, const void *src, size_t bytes, il_event **done) {
  *done = NULL;
  IL_TRY(b->ops->upload(b, dst, src, bytes));
  return il__cpu_event_record(b, done);
}

static il_status il__cpu_event_wait(il_backend *b, il_event *e) { return IL_OK; }

static il_status il__cpu_event_elapsed(il_backend *b, il_event *a, il_event *e, double *seconds) {
  *seconds = e->t - a->t;
  return IL_OK;
}

static void il__cpu_event_free(il_backend *b, il_event *e) { il_mem_free(e); }

/* ---------------------------------------------------------------- lifetime */

il_status il__cpu_init(il__cpu *c, const il__cpu_opts *o) {
  memset(c, 0, sizeof *c);
  il_isa isa = il_cpu_isa_best();
  const char *want = o->isa && *o->isa ? o->isa : NULL;
  if (!want) { /* IL_ISA in the environment may lower the default (never raise it) */
    const char *env = getenv("IL_ISA");
    il_isa e;
    if (env && *env && il_isa_parse(env, &e) && e < isa) isa = e;
  } else {
    if (!il_isa_parse(want, &isa))
      return il_error(IL_ERR_INVALID_ARG, "--isa: '%s' is not one of scalar, avx2, avx512", want);
    if (!il_cpu_isa_kernels(isa))
      return il_error(IL_ERR_UNSUPPORTED, "--isa: this %s does not support %s (best: %s; compiled: %s)",
                      il_cpu_isa_detected() < isa ? "CPU" : "build", want, il_isa_name(il_cpu_isa_best()),
                      il_cpu_isa_compiled());
  }
  c->isa = isa;
  c->repack = o->repack;
  c->kernels = il_cpu_isa_kernels(isa);
  const char *gemm = getenv("IL_CPU_GEMM"); /* 0: tile kernels only, to measure the GEMM against them */
  if (gemm && !strcmp(gemm, "0")) c->kernels = il_cpu_isa_kernels_tiles(isa);
  /* IL_CPU_AVXVNNI=0: the AVX2 level without AVX-VNNI, what an AVX2-only CPU (Zen 2/3, Haswell
   * to Cascade Lake servers) runs, to measure it on a CPU that has AVX-VNNI */
  const char *vnni = getenv("IL_CPU_AVXVNNI");
  if (vnni && !strcmp(vnni, "0") && isa == IL_ISA_AVX2 && c->kernels == il_cpu_isa_kernels(isa))
    c->kernels = il_cpu_isa_kernels_avx2_plain();
  if (isa == IL_ISA_AVX512 && il__ops_avx512.compiled) c->ops = &il__ops_avx512;
  else if (isa == IL_ISA_AVX2 && il__ops_avx2.compiled) c->ops = &il__ops_avx2;
  if (isa >= IL_ISA_AVX2 && il__cvt_avx2.compiled) c->cvt = &il__cvt_avx2;
  return il_pool_new(o->threads, &c->pool);
}

void il__cpu_fini(il__cpu *c) {
  il_pool_free(c->pool);
  il_mem_free(c->work);
  il_mem_free(c->qrow);
  il_mem_free(c->cand);
  memset(c, 0, sizeof *c);
}

static void il__cpu_destroy(il_backend *b) {
  if (!b) return;
  if (b->impl) il__cpu_release_act(b);
  if (b->impl) il__cpu_fini(b->impl);
  il_mem_free(b->impl);
  il_mem_free(b);
}

const il_backend_ops il__cpu_ops_template = {
    .version = IL_BACKEND_OPS_VERSION,
    .buffer_alloc = il__cpu_alloc,
    .buffer_free = il__cpu_buffer_free,
    .buffer_wrap_host = il__cpu_wrap,
    .host_ptr = il__cpu_host_ptr,
    .memory = il__cpu_memory,
    .upload = il__cpu_upload,
    .download = il__cpu_download,
    .copy = il__cpu_copy,
    .sync = il__cpu_sync,
    .supports = il__cpu_supports,
    .attn_kernels = il__cpu_attn_kernels,
    .info = il__cpu_info,
    .get_rows = il__cpu_get_rows,
    .matmul = il__cpu_matmul,
    .matmul_multi = il__cpu_matmul_multi,
    .rmsnorm = il__cpu_rmsnorm,
    .rope = il__cpu_rope,
    .kv_store = il__cpu_kv_store,
    .swiglu = il__cpu_swiglu,
    .add = il__cpu_add,
    .geglu = il__cpu_geglu,
    .scale = il__cpu_scale,
    .add_bias = il__cpu_add_bias,
    .count_nonfinite = il__cpu_count_nonfinite,
    .event_record = il__cpu_event_record,
    .event_elapsed = il__cpu_event_elapsed,
    .event_free = il__cpu_event_free,
    .destroy = il__cpu_destroy,
    .round_to = il__cpu_round_to,
    .value_stats = il__cpu_value_stats,
    .reserve = il__cpu_reserve,
    .reserve_bytes = il__cpu_reserve_bytes,
    .prepare_weight = il__cpu_prepare_weight,
    .rope_kv_store = il__cpu_rope_kv_store,
    .reserve_act = il__cpu_reserve_act,
    .rmsnorm_quant = il__cpu_rmsnorm_quant,
    .gate_up_swiglu = il__cpu_gate_up_swiglu,
    .matmul_add = il__cpu_matmul_add,
    .sample = il__cpu_sample,
    .capture_begin = il__cpu_capture_begin,
    .capture_end = il__cpu_capture_end,
    .replay = il__cpu_replay,
    .step_free = il__cpu_step_free,
    .upload_async = il__cpu_upload_async,
    .event_wait = il__cpu_event_wait,
};

il_status il__cpu_backend_new(const il__cpu_opts *o, il_backend **out) {
  *out = NULL;
  il_backend *b = il_mem_calloc(IL_MEM_OTHER, sizeof *b, "cpu backend");
  il__cpu *c = il_mem_calloc(IL_MEM_OTHER, sizeof *c, "cpu backend");
  if (!b || !c) {
    il_mem_free(b);
    il_mem_free(c);
    return IL_ERR_OOM;
  }
  il_status st = il__cpu_init(c, o);
  if (st != IL_OK) {
    il__cpu_fini(c);
    il_mem_free(b);
    il_mem_free(c);
    return st;
  }
  snprintf(c->name, sizeof c->name, "cpu");
  *b = (il_backend){.ops = &il__cpu_ops_template, .space = il_mem_host(), .impl = c};
  *out = b;
  return IL_OK;
}
