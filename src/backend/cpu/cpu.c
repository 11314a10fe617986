/* backend/cpu/cpu: the CPU backend: host buffers, the thread pool, and the non-matmul ops.
 *
 * Matmul goes to backend/cpu/matmul (SIMD, runtime dispatch); weights that share an input go
 * through matmul_multi as one task. The other ops are a few percent of a token's time, so they
 * are plain C, except attention and SwiGLU, whose dot products and expf the compiler cannot
 * vectorise under strict FP: on AVX-512 CPUs they use backend/cpu/ops_avx512 (about 3% of a
 * Q4_0 token's time saved, and most of a 512-token prompt's attention time). With one token the elementwise ops
 * run on the calling thread because a pool round trip would cost more than the op, and with
 * many tokens they are split by rows over the pool.
 * Attention keeps a per-thread score row in a workspace buffer that grows to the context.
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/pool.h"
#include "core/quant.h"

typedef struct {
  il_pool *pool;
  void *work; /* matmul activation workspace */
  size_t work_size;
  float *scores; /* attention scores, n_threads x scores_cap */
  size_t scores_cap;
  const il__ops *ops; /* SIMD attention/swiglu, NULL for the portable C below */
} il__cpu;

#define IL__PAR_MIN 32768 /* elements below which an op runs on the calling thread */

static il_status il__cpu_alloc(il_backend *b, il_mem_category cat, size_t bytes, const char *what, void **out) {
  *out = il_mem_alloc(cat, bytes, what);
  return *out ? IL_OK : IL_ERR_OOM;
}

static void il__cpu_free(il_backend *b, void *p) { il_mem_free(p); }

static il_status il__grow(void **buf, size_t *cap, size_t need, il_mem_category cat, const char *what) {
  if (need <= *cap) return IL_OK;
  void *p = il_mem_alloc(cat, need, what);
  if (!p) return IL_ERR_OOM;
  il_mem_free(*buf);
  *buf = p;
  *cap = need;
  return IL_OK;
}

static il_status il__cpu_matmul(il_backend *b, const il_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy) {
  il__cpu *c = b->impl;
  size_t need = il_cpu_matmul_work_size(w->type, w->n_in, n_tok);
  IL_TRY(il__grow(&c->work, &c->work_size, need, IL_MEM_WORKSPACE, "matmul workspace"));
  il_status st = il_cpu_matmul(c->pool, w->type, w->data, w->row_stride, w->n_out, w->n_in, x, n_tok, y, ldy, c->work);
  if (st != IL_OK) return il_error_wrap(st, "matmul '%s': ", w->name ? w->name : "?");
  return IL_OK;
}

/* Weights of one type and row length run as one matmul task (one activation quantization,
 * one barrier); anything else as separate calls. */
static il_status il__cpu_matmul_multi(il_backend *b, int n, const il_weight *const *w, const float *x, int64_t n_tok,
                                      float *const *y, const int64_t *ldy) {
  il__cpu *c = b->impl;
  bool fuse = n >= 2 && n <= IL_CPU_MM_MAX_PARTS;
  for (int i = 1; i < n && fuse; i++) fuse = w[i]->type == w[0]->type && w[i]->n_in == w[0]->n_in;
  if (!fuse) {
    for (int i = 0; i < n; i++) IL_TRY(il__cpu_matmul(b, w[i], x, n_tok, y[i], ldy[i]));
    return IL_OK;
  }
  il_cpu_mm_part parts[IL_CPU_MM_MAX_PARTS];
  for (int i = 0; i < n; i++)
    parts[i] = (il_cpu_mm_part){.w = w[i]->data, .w_stride = w[i]->row_stride, .n_out = w[i]->n_out, .y = y[i], .ldy = ldy[i]};
  size_t need = il_cpu_matmul_work_size(w[0]->type, w[0]->n_in, n_tok);
  IL_TRY(il__grow(&c->work, &c->work_size, need, IL_MEM_WORKSPACE, "matmul workspace"));
  il_status st = il_cpu_matmul_multi(c->pool, w[0]->type, n, parts, w[0]->n_in, x, n_tok, c->work);
  if (st != IL_OK)
    return il_error_wrap(st, "matmul '%s' (with %d more sharing its input): ", w[0]->name ? w[0]->name : "?", n - 1);
  return IL_OK;
}

/* ---- row-parallel helper ---- */

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

/* ---- rmsnorm ---- */

typedef struct {
  float *y;
  const float *x, *g;
  int64_t n;
  float eps;
} il__norm_ctx;

static void il__norm_row(void *p, int64_t t) {
  il__norm_ctx *c = p;
  const float *x = c->x + t * c->n;
  float *y = c->y + t * c->n;
  double ss = 0;
  for (int64_t i = 0; i < c->n; i++) ss += (double)x[i] * x[i];
  float scale = (float)(1.0 / sqrt(ss / (double)c->n + c->eps));
  for (int64_t i = 0; i < c->n; i++) y[i] = x[i] * scale * c->g[i];
}

static void il__cpu_rmsnorm(il_backend *b, float *y, const float *x, const float *g, int64_t n, int64_t n_tok, float eps) {
  il__norm_ctx ctx = {y, x, g, n, eps};
  il__for_rows(b->impl, n_tok, n, il__norm_row, &ctx);
}

/* ---- rope ---- */

typedef struct {
  float *x;
  const int32_t *pos;
  int64_t n_heads, head_dim, n_rot;
  float base, scale;
  il_rope_mode mode;
} il__rope_ctx;

static void il__rope_row(void *p, int64_t t) {
  il__rope_ctx *c = p;
  float pos = (float)c->pos[t] / c->scale;
  for (int64_t i = 0; i < c->n_rot; i += 2) {
    /* double precision for the angle so long contexts do not drift */
    double theta = (double)pos * pow((double)c->base, -(double)i / (double)c->n_rot);
    float cs = (float)cos(theta), sn = (float)sin(theta);
    for (int64_t h = 0; h < c->n_heads; h++) {
      float *v = c->x + t * c->n_heads * c->head_dim + h * c->head_dim;
      int64_t a = c->mode == IL_ROPE_NEOX ? i / 2 : i;
      int64_t bb = c->mode == IL_ROPE_NEOX ? i / 2 + c->n_rot / 2 : i + 1;
      float x0 = v[a], x1 = v[bb];
      v[a] = x0 * cs - x1 * sn;
      v[bb] = x0 * sn + x1 * cs;
    }
  }
}

static void il__cpu_rope(il_backend *b, float *x, const int32_t *pos, int64_t n_tok, int64_t n_heads,
                         int64_t head_dim, int64_t n_rot, float base, float scale, il_rope_mode mode) {
  il__rope_ctx ctx = {x, pos, n_heads, head_dim, n_rot, base, scale > 0 ? scale : 1.0f, mode};
  il__for_rows(b->impl, n_tok, n_heads * head_dim, il__rope_row, &ctx);
}

/* ---- attention ---- */

typedef struct {
  il__cpu *cpu;
  float *out;
  const float *q;
  const il_attn_row *rows;
  int64_t n_tok;
  const il_kv_view *kv;
  int64_t n_heads, n_kv_heads, head_dim;
} il__attn_ctx;

/* One (token, head) pair per work item, split evenly: a query row's cost grows with its
 * position, but in a prompt the rows are interleaved by head so the split stays balanced. */
static void il__attn_worker(void *p, int ith, int nth) {
  il__attn_ctx *c = p;
  float *scores = c->cpu->scores + (size_t)ith * c->cpu->scores_cap;
  const int64_t hd = c->head_dim, group = c->n_heads / c->n_kv_heads, kv_dim = c->kv->kv_dim;
  const float inv = 1.0f / sqrtf((float)hd);
  const int64_t n_items = c->n_tok * c->n_heads;
  for (int64_t it = ith; it < n_items; it += nth) {
    int64_t t = it / c->n_heads, h = it % c->n_heads, kvh = h / group;
    const float *q = c->q + t * c->n_heads * hd + h * hd;
    float *o = c->out + t * c->n_heads * hd + h * hd;
    const il_attn_row r = c->rows[t];
    const float *kbase = c->kv->k + (size_t)r.seq * c->kv->n_ctx * kv_dim + kvh * hd;
    const float *vbase = c->kv->v + (size_t)r.seq * c->kv->n_ctx * kv_dim + kvh * hd;
    if (c->cpu->ops) {
      c->cpu->ops->attn_head(o, q, kbase, vbase, (size_t)kv_dim, hd, r.pos + 1, inv, scores);
      continue;
    }
    float mx = -INFINITY;
    for (int32_t s = 0; s <= r.pos; s++) {
      const float *k = kbase + (size_t)s * kv_dim;
      float d = 0;
      for (int64_t i = 0; i < hd; i++) d += q[i] * k[i];
      scores[s] = d * inv;
      if (scores[s] > mx) mx = scores[s];
    }
    float sum = 0;
    for (int32_t s = 0; s <= r.pos; s++) {
      scores[s] = expf(scores[s] - mx);
      sum += scores[s];
    }
    float norm = 1.0f / sum;
    for (int64_t i = 0; i < hd; i++) o[i] = 0;
    for (int32_t s = 0; s <= r.pos; s++) {
      const float *v = vbase + (size_t)s * kv_dim;
      float w = scores[s] * norm;
      for (int64_t i = 0; i < hd; i++) o[i] += w * v[i];
    }
  }
}

static il_status il__cpu_attention(il_backend *b, float *out, const float *q, const il_attn_row *rows, int64_t n_tok,
                                   const il_kv_view *kv, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  il__cpu *c = b->impl;
  if (n_kv_heads <= 0 || n_heads % n_kv_heads)
    return il_error(IL_ERR_INVALID_ARG, "attention: %lld heads not divisible by %lld kv heads", (long long)n_heads,
                    (long long)n_kv_heads);
  for (int64_t t = 0; t < n_tok; t++)
    if (rows[t].pos < 0 || rows[t].pos >= kv->n_ctx)
      return il_error(IL_ERR_RANGE, "attention: position %d outside the context of %d", rows[t].pos, kv->n_ctx);
  size_t nth = (size_t)il_pool_size(c->pool);
  if ((size_t)kv->n_ctx > c->scores_cap) {
    float *s = il_mem_alloc(IL_MEM_WORKSPACE, nth * (size_t)kv->n_ctx * sizeof(float), "attention scores");
    if (!s) return IL_ERR_OOM;
    il_mem_free(c->scores);
    c->scores = s;
    c->scores_cap = (size_t)kv->n_ctx;
  }
  il__attn_ctx ctx = {c, out, q, rows, n_tok, kv, n_heads, n_kv_heads, head_dim};
  if (n_tok * n_heads < 2) il__attn_worker(&ctx, 0, 1);
  else il_pool_run(c->pool, il__attn_worker, &ctx);
  return IL_OK;
}

/* ---- elementwise ---- */

static void il__cpu_swiglu(il_backend *b, float *gate, const float *up, int64_t n) {
  const il__cpu *c = b->impl;
  if (c->ops) {
    c->ops->swiglu(gate, up, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

static void il__cpu_add(il_backend *b, float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void il__cpu_add_bias(il_backend *b, float *y, const float *bias, int64_t n, int64_t n_tok) {
  for (int64_t t = 0; t < n_tok; t++)
    for (int64_t i = 0; i < n; i++) y[t * n + i] += bias[i];
}



static il_status il__cpu_get_rows(il_backend *b, const il_weight *w, const int32_t *ids, int64_t n_tok, float *y) {
  for (int64_t t = 0; t < n_tok; t++) {
    if (ids[t] < 0 || ids[t] >= w->n_out)
      return il_error(IL_ERR_RANGE, "token id %d out of range [0, %lld) for '%s'", ids[t], (long long)w->n_out,
                      w->name ? w->name : "embedding");
    IL_TRY(il_dequantize_row(w->type, (const char *)w->data + (size_t)ids[t] * w->row_stride, y + t * w->n_in, w->n_in));
  }
  return IL_OK;
}

static void il__cpu_copy(il_backend *b, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void il__cpu_destroy(il_backend *b) {
  if (!b) return;
  il__cpu *c = b->impl;
  if (c) {
    il_pool_free(c->pool);
    il_mem_free(c->work);
    il_mem_free(c->scores);
    il_mem_free(c);
  }
  il_mem_free(b);
}

il_status il_backend_cpu_new(int n_threads, il_backend **out) {
  *out = NULL;
  il_backend *b = il_mem_calloc(IL_MEM_OTHER, sizeof *b, "cpu backend");
  il__cpu *c = il_mem_calloc(IL_MEM_OTHER, sizeof *c, "cpu backend");
  if (!b || !c) {
    il_mem_free(b);
    il_mem_free(c);
    return IL_ERR_OOM;
  }
  il_status st = il_pool_new(n_threads, &c->pool);
  if (st != IL_OK) {
    il_mem_free(b);
    il_mem_free(c);
    return st;
  }
  if (il_cpu_isa() == IL_ISA_AVX512 && il__ops_avx512.compiled) c->ops = &il__ops_avx512;
  *b = (il_backend){
      .name = "cpu",
      .space = il_mem_host(),
      .impl = c,
      .alloc = il__cpu_alloc,
      .free = il__cpu_free,
      .matmul = il__cpu_matmul,
      .matmul_multi = il__cpu_matmul_multi,
      .rmsnorm = il__cpu_rmsnorm,
      .rope = il__cpu_rope,
      .attention = il__cpu_attention,
      .swiglu = il__cpu_swiglu,
      .add = il__cpu_add,
      .add_bias = il__cpu_add_bias,
      .get_rows = il__cpu_get_rows,
      .copy = il__cpu_copy,
      .destroy = il__cpu_destroy,
  };
  *out = b;
  return IL_OK;
}

int il_backend_cpu_threads(const il_backend *b) { return il_pool_size(((const il__cpu *)b->impl)->pool); }
