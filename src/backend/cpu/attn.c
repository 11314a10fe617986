/* backend/cpu/attn: the attention drivers (naive, sliced, memeff, flash), their workspace
 * layouts, input validation, auto dispatch, and the scalar micro-kernels (the reference the
 * AVX2 and AVX-512 ones are tested against).
 *
 * Work is split into items and handed out through an atomic counter (a causal prompt's later
 * rows cost more than its first, so a static split would leave a thread idle), largest items
 * first. Items never share output rows, so the result does not depend on the thread count,
 * except for flash's split-key decode, whose merge order is fixed by the split index.
 * Workspace layout of every kernel: [64 bytes of alignment slack][tile table][per-thread
 * scratch x n_threads][flash: split partials], each part 64-byte aligned.
 * Not for: the per-ISA micro-kernels (attn_avx2.c, attn_avx512.c), kernel choice from the
 * config (engine/).
 */
#include "backend/cpu/attn.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/matmul.h"

/* Tile sizes (overridable with -D for tuning). A 64 x 64 score tile (16 KiB) stays in L1. On
 * the development machine (1 thread, CPU time, 8k keys x 128 query rows) 32 query rows per tile
 * took 1.28x the time of 64 (K/V read twice as often) and 128 rows 0.86x, at twice the
 * workspace; 32, 64 or 128 keys per tile were within noise of each other. */
#ifndef IL__KT
#define IL__KT 64 /* keys per tile: flash's chunks are whole tiles, its key splits too */
#endif
#ifndef IL__FLASH_ROWS
#define IL__FLASH_ROWS 64 /* flash: query rows (tokens x heads of one KV head) per tile */
#endif
#define IL__MEMEFF_CHUNK 256
#define IL__SPLIT_MIN_KEYS 256 /* flash decode: fewest keys worth a split of their own */
/* flash: scores per thread (floats). A query tile's softmax bookkeeping (max, exp, rescale of
 * the output rows) runs once per chunk of keys, and a chunk holds as many 64-key tiles as fit
 * in this many scores: one tile for a 64-row prompt tile (16 KiB, as before), 2048 keys for a
 * decode step of 2 rows (stories260K). With one tile per chunk, a decode step of head size 8
 * spent more on that bookkeeping (short latency-bound exp and max calls, a libm expf per row
 * and tile) than on its dot products. */
#define IL__FLASH_SCORES 4096

/* ---- scalar micro-kernels: the reference ---- */

/* Element d of a KV row of type t. A q8_0 row is blocks of 32: an fp16 scale, then 32 int8. */
static inline float il__kv_at(const void *row, il_dtype t, int64_t d) {
  if (t == IL_DTYPE_Q8_0) {
    const il_block_q8_0 *blk = (const il_block_q8_0 *)row + d / IL_QK;
    return il_fp16_to_f32(blk->d) * (float)blk->qs[d % IL_QK];
  }
  if (t == IL_DTYPE_F16) return il_fp16_to_f32(((const uint16_t *)row)[d]);
  if (t == IL_DTYPE_BF16) return il_bf16_to_f32(((const uint16_t *)row)[d]);
  return ((const float *)row)[d];
}

static void il__qk_scalar(float *s, size_t lds, const float *const *q, int m, const void *k, size_t ks, int n,
                          int64_t hd, il_dtype kt, float scale) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      const char *kj = (const char *)k + (size_t)j * ks;
      float acc = 0;
      for (int64_t d = 0; d < hd; d++) acc += q[i][d] * il__kv_at(kj, kt, d);
      s[(size_t)i * lds + j] = acc * scale;
    }
}

static void il__pv_scalar(float *const *o, const float *p, size_t ldp, int m, const void *v, size_t vs, int n,
                          int64_t hd, il_dtype vt) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      const float w = p[(size_t)i * ldp + j];
      const char *vj = (const char *)v + (size_t)j * vs;
      float *oi = o[i];
      if (vt == IL_DTYPE_F32)
        for (int64_t d = 0; d < hd; d++) oi[d] += w * ((const float *)vj)[d];
      else
        for (int64_t d = 0; d < hd; d++) oi[d] += w * il__kv_at(vj, vt, d);
    }
}

static float il__expsum_scalar(float *s, int n, float mx) {
  float sum = 0;
  for (int j = 0; j < n; j++) {
    s[j] = expf(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

static float il__max_scalar(const float *s, int n) {
  float mx = s[0];
  for (int j = 1; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  return mx;
}

const il__attn_isa il__attn_isa_scalar = {.compiled = true,
                                          .name = "scalar",
                                          .width = 1,
                                          .qk = il__qk_scalar,
                                          .pv = il__pv_scalar,
                                          .exp_sum = il__expsum_scalar,
                                          .max = il__max_scalar};

const il__attn_isa *il__attn_isa_for(il_isa isa) {
  if (isa > il_cpu_isa_detected()) isa = il_cpu_isa_detected();
  if (isa >= IL_ISA_AVX512 && il__attn_isa_avx512.compiled) return &il__attn_isa_avx512;
  if (isa >= IL_ISA_AVX2 && il__attn_isa_avx2.compiled) return &il__attn_isa_avx2;
  return &il__attn_isa_scalar;
}

static const il__attn_isa *il__isa_for(const il_cpu_attn_args *a) {
  const il__attn_isa *isa = il__attn_isa_for(a->isa);
  return a->head_dim % isa->width ? &il__attn_isa_scalar : isa;
}

/* ---- shapes, validation ---- */

bool il_cpu_attn_kv_type_ok(il_dtype t) {
  return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16 || t == IL_DTYPE_Q8_0;
}

static _Thread_local char il__why_buf[256];

/* Shape and type problems every kernel shares; NULL when none. */
static const char *il__shape_why(const il_cpu_attn_args *a) {
  char *b = il__why_buf;
  const size_t n = sizeof il__why_buf;
  if (!a) return "no arguments";
  if (a->n_tok < 0) return snprintf(b, n, "n_tok %lld is negative", (long long)a->n_tok), b;
  if (a->n_heads <= 0 || a->n_kv_heads <= 0 || a->head_dim <= 0)
    return snprintf(b, n, "n_heads %lld, n_kv_heads %lld, head_dim %lld must be positive", (long long)a->n_heads,
                    (long long)a->n_kv_heads, (long long)a->head_dim),
           b;
  if (a->n_heads % a->n_kv_heads)
    return snprintf(b, n, "n_heads %lld is not a multiple of n_kv_heads %lld", (long long)a->n_heads,
                    (long long)a->n_kv_heads),
           b;
  if (!il_cpu_attn_kv_type_ok(a->kv_type))
    return snprintf(b, n, "KV type %s is not supported (f32, f16, bf16, q8_0)", il_dtype_name(a->kv_type)), b;
  if (a->kv_type == IL_DTYPE_Q8_0 && a->head_dim % 32)
    return snprintf(b, n, "head_dim %lld is not a multiple of 32, the q8_0 block", (long long)a->head_dim), b;
  const size_t row = il_dtype_row_size(a->kv_type, a->n_kv_heads * a->head_dim);
  if (a->kv_row_stride < row)
    return snprintf(b, n, "kv_row_stride %zu is below one row of %lld x %lld %s (%zu bytes)", a->kv_row_stride,
                    (long long)a->n_kv_heads, (long long)a->head_dim, il_dtype_name(a->kv_type), row),
           b;
  if (a->block <= 0 || a->max_blocks <= 0 || a->n_seq <= 0 || a->n_cells < 0)
    return snprintf(b, n, "block %d, max_blocks %d, n_seq %d must be positive", a->block, a->max_blocks, a->n_seq), b;
  if (a->slice < 0) return snprintf(b, n, "slice %d is negative", a->slice), b;
  if (a->n_tok > 0 && (!a->out || !a->q || !a->seq || !a->pos || !a->k || !a->v || !a->block_table))
    return "a NULL pointer among out, q, seq, pos, k, v, block_table";
  return NULL;
}

/* Positions inside the table and table entries inside the cache, for every token; a run of
 * consecutive tokens of one sequence checks its blocks once. */
static il_status il__validate(const char *kname, const il_cpu_attn_args *a) {
  const char *why = il__shape_why(a);
  if (why)
    return il_error(a && !il_cpu_attn_kv_type_ok(a->kv_type) ? IL_ERR_UNSUPPORTED : IL_ERR_INVALID_ARG,
                    "attention %s: %s", kname, why);
  const int64_t cap = (int64_t)a->block * a->max_blocks;
  for (int64_t t0 = 0; t0 < a->n_tok;) {
    const int32_t s = a->seq[t0];
    int32_t mx = -1;
    int64_t t = t0;
    for (; t < a->n_tok && a->seq[t] == s; t++) {
      if (s < 0 || s >= a->n_seq)
        return il_error(IL_ERR_RANGE, "attention %s: token %lld: sequence %d outside 0..%d", kname, (long long)t, s,
                        a->n_seq - 1);
      if (a->pos[t] < 0 || a->pos[t] >= cap)
        return il_error(IL_ERR_RANGE,
                        "attention %s: token %lld: position %d outside the block table (%d blocks x %d positions)",
                        kname, (long long)t, a->pos[t], a->max_blocks, a->block);
      if (a->pos[t] > mx) mx = a->pos[t];
    }
    for (int32_t bi = 0; bi <= mx / a->block; bi++) {
      const int32_t e = a->block_table[(int64_t)s * a->max_blocks + bi];
      const int64_t last = bi < mx / a->block ? a->block - 1 : mx % a->block;
      if (e < 0 || (int64_t)e * a->block + last >= a->n_cells)
        return il_error(IL_ERR_RANGE,
                        "attention %s: block table [seq %d][%d] = %d: cells %lld..%lld outside the cache of %lld cells",
                        kname, s, bi, e, (long long)e * a->block, (long long)e * a->block + last,
                        (long long)a->n_cells);
    }
    t0 = t;
  }
  return IL_OK;
}

/* The cells at base (a->k or a->v) of KV head kh from position p of sequence s on, as far as
 * they are consecutive (to the end of p's block) and at most n: returns how many, *row the
 * first. One division per run; the micro-kernels then step by kv_row_stride (a contiguous
 * cache is one block per sequence, so any range is one run). */
static int il__kv_run(const il_cpu_attn_args *a, const void *base, int32_t s, int32_t p, int n, int64_t kh,
                      const void **row) {
  const int32_t bi = p / a->block, off = p % a->block;
  const size_t cell = (size_t)a->block_table[(int64_t)s * a->max_blocks + bi] * (size_t)a->block + (size_t)off;
  *row = (const char *)base + cell * a->kv_row_stride + il_dtype_row_size(a->kv_type, kh * a->head_dim);
  return a->block - off < n ? a->block - off : n;
}

/* Scores of m query rows against positions p0..p0+n-1 into S (row stride lds), run by run. */
static void il__qk_span(const il__attn_isa *isa, const il_cpu_attn_args *a, int32_t s, int32_t p0, int n, int64_t kh,
                        float *S, size_t lds, const float *const *q, int m) {
  for (int j = 0; j < n;) {
    const void *k;
    const int run = il__kv_run(a, a->k, s, p0 + j, n - j, kh, &k);
    isa->qk(S + j, lds, q, m, k, a->kv_row_stride, run, a->head_dim, a->kv_type, a->scale);
    j += run;
  }
}

/* o[i] += P[i] V over positions p0..p0+n-1 (P row stride ldp), run by run. */
static void il__pv_span(const il__attn_isa *isa, const il_cpu_attn_args *a, int32_t s, int32_t p0, int n, int64_t kh,
                        float *const *o, const float *P, size_t ldp, int m) {
  for (int j = 0; j < n;) {
    const void *v;
    const int run = il__kv_run(a, a->v, s, p0 + j, n - j, kh, &v);
    isa->pv(o, P + j, ldp, m, v, a->kv_row_stride, run, a->head_dim, a->kv_type);
    j += run;
  }
}

/* ---- tiles: consecutive tokens of one sequence, at most max_rows of them ---- */

typedef struct {
  int32_t t0, nt, maxpos;
} il__tile;

typedef struct {
  int64_t n_tiles, max_nt, max_tk, max_area; /* area: nt x (maxpos + 1) */
} il__tiling;

/* Counts the tiles (and fills out when not NULL). Assumes valid seq/pos pointers. */
static il__tiling il__tiles(const il_cpu_attn_args *a, int64_t max_rows, il__tile *out) {
  il__tiling r = {0, 0, 0, 0};
  for (int64_t t0 = 0; t0 < a->n_tok;) {
    int64_t t = t0;
    int32_t mx = -1;
    while (t < a->n_tok && a->seq[t] == a->seq[t0] && t - t0 < max_rows) {
      if (a->pos[t] > mx) mx = a->pos[t];
      t++;
    }
    const int64_t nt = t - t0, tk = (int64_t)mx + 1;
    if (out) out[r.n_tiles] = (il__tile){(int32_t)t0, (int32_t)nt, mx};
    r.n_tiles++;
    if (nt > r.max_nt) r.max_nt = nt;
    if (tk > r.max_tk) r.max_tk = tk;
    if (nt * tk > r.max_area) r.max_area = nt * tk;
    t0 = t;
  }
  return r;
}

static size_t il__a64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Invalid args (bad shape, positions outside the table, ...) size nothing: a garbage position
 * would otherwise ask for a huge scores matrix. Leaves the reason in il_error_detail(). */
static bool il__sizable(const il_cpu_attn_args *a) { return il__validate("workspace", a) == IL_OK; }

static void *il__align_work(void *work) { return (void *)(((uintptr_t)work + 63) & ~(uintptr_t)63); }

static il_status il__check_work(const char *kname, size_t need, size_t have) {
  if (have < need)
    return il_error(IL_ERR_INVALID_ARG, "attention %s: workspace of %zu bytes is below the %zu bytes it needs", kname,
                    have, need);
  return IL_OK;
}

typedef struct {
  const il_cpu_attn_args *a;
  const il__attn_isa *isa;
  const il__tile *tiles;
  char *scratch; /* per-thread scratch, per_thread bytes each */
  size_t per_thread;
  int64_t n_items;
  int64_t n_split;  /* flash */
  float *partials;  /* flash, n_split > 1 */
  int64_t m_max;    /* flash */
  atomic_llong next;
} il__job;

/* Next item, largest first (items are ordered so that a higher index costs at least as much
 * within one tile sequence); -1 when done. */
static int64_t il__take(il__job *j) {
  const long long i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
  return i < j->n_items ? j->n_items - 1 - i : -1;
}

/* Multiply-adds (scores and the product with V) below which one thread runs a call alone: a
 * small model's decode step (stories260K: 8 heads of 8 over a few hundred positions) costs less
 * than waking the pool. */
static double il__attn_par_min = 1 << 16;

void il_cpu_attn_par_min(double macs) { il__attn_par_min = macs; }

static void il__run_job(il_pool *pool, il_pool_fn fn, il__job *j) {
  atomic_store(&j->next, 0);
  double macs = 0;
  for (int64_t t = 0; t < j->a->n_tok; t++) macs += (double)j->a->pos[t] + 1;
  macs *= 2.0 * (double)j->a->n_heads * (double)j->a->head_dim;
  if (pool && il_pool_size(pool) > 1 && j->n_items > 1 && macs >= il__attn_par_min) il_pool_run(pool, fn, j);
  else fn(j, 0, 1);
}

static int il__nth(il_pool *pool) { return pool ? il_pool_size(pool) : 1; }

/* The first position a token at pos sees: pos - window + 1 with a sliding window, else 0. */
static int32_t il__first_key(const il_cpu_attn_args *a, int32_t pos) {
  const int32_t lo = a->window > 0 ? pos - a->window + 1 : 0;
  return lo > 0 ? lo : 0;
}

/* ---- naive and sliced: the scores matrix of a tile (rows x keys), then softmax, then P V ---- */

static int64_t il__slice_rows(const il_cpu_attn_args *a, bool sliced) {
  if (!sliced) return INT64_MAX;
  return a->slice > 0 ? a->slice : IL_CPU_ATTN_SLICE_DEFAULT;
}

static size_t il__matrix_layout(const il_cpu_attn_args *a, int nth, bool sliced, il__tiling *tl, size_t *per_thread) {
  if (!il__sizable(a)) return 0;
  *tl = il__tiles(a, il__slice_rows(a, sliced), NULL);
  *per_thread = il__a64((size_t)tl->max_area * sizeof(float));
  return 64 + il__a64((size_t)tl->n_tiles * sizeof(il__tile)) + (size_t)(nth < 1 ? 1 : nth) * *per_thread;
}

static void il__matrix_worker(void *p, int ith, int nth) {
  il__job *j = p;
  const il_cpu_attn_args *a = j->a;
  const il__attn_isa *isa = j->isa;
  const int64_t hd = a->head_dim, G = a->n_heads / a->n_kv_heads, qs = a->n_heads * hd;
  float *S = (float *)(j->scratch + (size_t)ith * j->per_thread);
  for (int64_t it; (it = il__take(j)) >= 0;) {
    const il__tile tl = j->tiles[it / a->n_heads];
    const int64_t h = it % a->n_heads, kh = h / G, tk = (int64_t)tl.maxpos + 1;
    const int32_t s = a->seq[tl.t0];
    /* scores: S[i][0..pos_i] for every row of the tile */
    for (int32_t i = 0; i < tl.nt; i++) {
      const float *q = a->q + (tl.t0 + i) * qs + h * hd;
      il__qk_span(isa, a, s, 0, a->pos[tl.t0 + i] + 1, kh, S + (size_t)i * tk, 0, &q, 1);
    }
    /* softmax of each row over its window's keys (those before it weigh 0) */
    for (int32_t i = 0; i < tl.nt; i++) {
      float *r = S + (size_t)i * tk;
      const int32_t n = a->pos[tl.t0 + i] + 1, lo = il__first_key(a, n - 1);
      const float inv = 1.0f / isa->exp_sum(r + lo, n - lo, isa->max(r + lo, n - lo));
      for (int32_t k = 0; k < lo; k++) r[k] = 0;
      for (int32_t k = lo; k < n; k++) r[k] *= inv;
    }
    /* out = P V */
    for (int32_t i = 0; i < tl.nt; i++) {
      float *o = a->out + (tl.t0 + i) * qs + h * hd;
      const int32_t n = a->pos[tl.t0 + i] + 1;
      memset(o, 0, (size_t)hd * sizeof(float));
      il__pv_span(isa, a, s, 0, n, kh, &o, S + (size_t)i * tk, 0, 1);
    }
  }
}

static il_status il__matrix_run(const char *kname, bool sliced, il_pool *pool, const il_cpu_attn_args *a, void *work,
                                size_t work_bytes) {
  IL_TRY(il__validate(kname, a));
  if (a->n_tok == 0) return IL_OK;
  il__tiling tl = {0, 0, 0, 0};
  size_t per = 0;
  const size_t need = il__matrix_layout(a, il__nth(pool), sliced, &tl, &per);
  IL_TRY(il__check_work(kname, need, work_bytes));
  char *w = il__align_work(work);
  il__tile *tiles = (il__tile *)w;
  il__tiles(a, il__slice_rows(a, sliced), tiles);
  il__job j = {.a = a,
               .isa = il__isa_for(a),
               .tiles = tiles,
               .scratch = w + il__a64((size_t)tl.n_tiles * sizeof(il__tile)),
               .per_thread = per,
               .n_items = tl.n_tiles * a->n_heads};
  il__run_job(pool, il__matrix_worker, &j);
  return IL_OK;
}

static const char *il__common_why(const il_cpu_attn_args *a) { return il__shape_why(a); }
static size_t il__naive_ws(const il_cpu_attn_args *a, int nth) {
  il__tiling tl;
  size_t per;
  return il__matrix_layout(a, nth, false, &tl, &per);
}
static il_status il__naive_run(il_pool *pool, const il_cpu_attn_args *a, void *work, size_t bytes) {
  return il__matrix_run("naive", false, pool, a, work, bytes);
}
static size_t il__sliced_ws(const il_cpu_attn_args *a, int nth) {
  il__tiling tl;
  size_t per;
  return il__matrix_layout(a, nth, true, &tl, &per);
}
static il_status il__sliced_run(il_pool *pool, const il_cpu_attn_args *a, void *work, size_t bytes) {
  return il__matrix_run("sliced", true, pool, a, work, bytes);
}

/* ---- memeff: one query row at a time, keys in chunks, running max and sum ---- */

static size_t il__memeff_ws(const il_cpu_attn_args *a, int nth) {
  if (!il__sizable(a)) return 0;
  return 64 + (size_t)(nth < 1 ? 1 : nth) * il__a64(IL__MEMEFF_CHUNK * sizeof(float));
}

static void il__memeff_worker(void *p, int ith, int nth) {
  il__job *j = p;
  const il_cpu_attn_args *a = j->a;
  const il__attn_isa *isa = j->isa;
  const int64_t hd = a->head_dim, G = a->n_heads / a->n_kv_heads, qs = a->n_heads * hd;
  float *S = (float *)(j->scratch + (size_t)ith * j->per_thread);
  for (int64_t it; (it = il__take(j)) >= 0;) {
    /* items ordered token-major so the highest index is the last (usually longest) token */
    const int64_t t = it / a->n_heads, h = it % a->n_heads, kh = h / G;
    const int32_t s = a->seq[t], n = a->pos[t] + 1;
    const float *q = a->q + t * qs + h * hd;
    float *o = a->out + t * qs + h * hd;
    float m = -INFINITY, l = 0;
    memset(o, 0, (size_t)hd * sizeof(float));
    for (int32_t c0 = il__first_key(a, n - 1); c0 < n; c0 += IL__MEMEFF_CHUNK) { /* from its window's start */
      const int32_t nc = n - c0 < IL__MEMEFF_CHUNK ? n - c0 : IL__MEMEFF_CHUNK;
      il__qk_span(isa, a, s, c0, nc, kh, S, 0, &q, 1);
      const float mx = isa->max(S, nc), mn = mx > m ? mx : m;
      const float alpha = m == -INFINITY ? 0.0f : expf(m - mn);
      l = l * alpha + isa->exp_sum(S, nc, mn);
      if (alpha != 1.0f)
        for (int64_t d = 0; d < hd; d++) o[d] *= alpha;
      m = mn;
      il__pv_span(isa, a, s, c0, nc, kh, &o, S, 0, 1);
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < hd; d++) o[d] *= inv;
  }
}

static il_status il__memeff_run(il_pool *pool, const il_cpu_attn_args *a, void *work, size_t bytes) {
  IL_TRY(il__validate("memeff", a));
  if (a->n_tok == 0) return IL_OK;
  IL_TRY(il__check_work("memeff", il__memeff_ws(a, il__nth(pool)), bytes));
  il__job j = {.a = a,
               .isa = il__isa_for(a),
               .scratch = il__align_work(work),
               .per_thread = il__a64(IL__MEMEFF_CHUNK * sizeof(float)),
               .n_items = a->n_tok * a->n_heads};
  il__run_job(pool, il__memeff_worker, &j);
  return IL_OK;
}

/* ---- flash: query tiles (tokens x the G heads of one KV head) x key tiles, fused ---- */

typedef struct {
  il__tiling tl;
  int64_t rows_tok; /* tokens per query tile */
  int64_t m_max;    /* rows of the largest tile: tokens x G */
  int64_t n_split;  /* key-range splits per (tile, KV head) */
  size_t tiles_bytes, per_thread, partial_bytes;
} il__flash_layout;

static int64_t il__flash_tok(const il_cpu_attn_args *a) {
  const int64_t G = a->n_heads / a->n_kv_heads;
  return G >= IL__FLASH_ROWS ? 1 : IL__FLASH_ROWS / G;
}

/* Keys per chunk for query tiles of m rows: whole 64-key tiles, m x chunk <= IL__FLASH_SCORES
 * (at least one tile). */
static int64_t il__flash_chunk(int64_t m) {
  const int64_t tiles = m > 0 ? IL__FLASH_SCORES / (m * IL__KT) : 1;
  return (tiles > 1 ? tiles : 1) * IL__KT;
}

static size_t il__flash_plan(const il_cpu_attn_args *a, int nth, il__flash_layout *L) {
  if (!il__sizable(a)) return 0;
  if (nth < 1) nth = 1;
  const int64_t G = a->n_heads / a->n_kv_heads, hd = a->head_dim;
  L->rows_tok = il__flash_tok(a);
  L->tl = il__tiles(a, L->rows_tok, NULL);
  L->m_max = L->tl.max_nt * G;
  /* Too few (tile, KV head) items to keep the threads busy (decode): split the keys. */
  const int64_t base = L->tl.n_tiles * a->n_kv_heads;
  L->n_split = 1;
  if (nth > 1 && base > 0 && base < 2 * nth) {
    int64_t want = (2 * nth + base - 1) / base, most = (L->tl.max_tk + IL__SPLIT_MIN_KEYS - 1) / IL__SPLIT_MIN_KEYS;
    L->n_split = want < most ? want : most;
    if (L->n_split < 1) L->n_split = 1;
  }
  L->tiles_bytes = il__a64((size_t)L->tl.n_tiles * sizeof(il__tile));
  /* S [m x chunk], m and l [m], q and output row pointers [m], row positions [m]; the output
   * rows themselves accumulate in out (or in the split partials) */
  const size_t m = (size_t)L->m_max;
  L->per_thread = il__a64(m * (size_t)il__flash_chunk(L->m_max) * sizeof(float)) + il__a64(2 * m * sizeof(float)) +
                  il__a64(2 * m * sizeof(float *)) + il__a64(m * sizeof(int32_t));
  L->partial_bytes = L->n_split > 1 ? il__a64((size_t)(base * L->n_split) * m * (size_t)(hd + 2) * sizeof(float)) : 0;
  return 64 + L->tiles_bytes + (size_t)nth * L->per_thread + L->partial_bytes;
}

static const char *il__flash_why(const il_cpu_attn_args *a);

size_t il_cpu_attn_flash_bound(const il_cpu_attn_args *a, int nth) {
  if (!a || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->n_tok <= 0) return 0;
  if (nth < 1) nth = 1;
  const int64_t G = a->n_heads / a->n_kv_heads, hd = a->head_dim;
  const int64_t rows_tok = il__flash_tok(a), nt = a->n_tok < rows_tok ? a->n_tok : rows_tok;
  const size_t m = (size_t)(nt * G);
  /* every token its own tile (most tiles), the largest tile, and the most key splits: a split
   * happens only when tiles x KV heads < 2 x threads, and then at most 2 x threads items exist */
  const size_t tiles = il__a64((size_t)a->n_tok * sizeof(il__tile));
  /* a tile of fewer rows takes longer chunks, but never more than IL__FLASH_SCORES scores
   * unless one 64-key tile of its rows is already more */
  const size_t scores = m * IL__KT > IL__FLASH_SCORES ? m * IL__KT : IL__FLASH_SCORES;
  const size_t per_thread = il__a64(scores * sizeof(float)) + il__a64(2 * m * sizeof(float)) +
                            il__a64(2 * m * sizeof(float *)) + il__a64(m * sizeof(int32_t));
  const size_t items = (size_t)(4 * nth + 2 * a->n_kv_heads);
  const size_t partial = il__a64(items * m * (size_t)(hd + 2) * sizeof(float));
  return 64 + tiles + (size_t)nth * per_thread + partial;
}

static size_t il__flash_ws(const il_cpu_attn_args *a, int nth) {
  if (il__flash_why(a)) return 0;
  il__flash_layout L;
  return il__flash_plan(a, nth, &L);
}

static const char *il__flash_why(const il_cpu_attn_args *a) {
  const char *why = il__shape_why(a);
  if (why) return why;
  if (a->head_dim % 8)
    return snprintf(il__why_buf, sizeof il__why_buf,
                    "head_dim %lld is not a multiple of 8 (the tile micro-kernels' vector width)",
                    (long long)a->head_dim),
           il__why_buf;
  return NULL;
}

static void il__flash_worker(void *p, int ith, int nth) {
  il__job *j = p;
  const il_cpu_attn_args *a = j->a;
  const il__attn_isa *isa = j->isa;
  const int64_t hd = a->head_dim, G = a->n_heads / a->n_kv_heads, qs = a->n_heads * hd, mm = j->m_max;
  const int64_t C = il__flash_chunk(mm); /* keys per chunk, the row stride of S */
  char *sc = j->scratch + (size_t)ith * j->per_thread;
  float *S = (float *)sc;
  sc += il__a64((size_t)mm * (size_t)C * sizeof(float));
  float *M = (float *)sc, *L = M + mm;
  sc += il__a64(2 * (size_t)mm * sizeof(float));
  const float **qrow = (const float **)sc;
  float **orow = (float **)(sc + (size_t)mm * sizeof(float *)); /* after qrow */
  sc += il__a64(2 * (size_t)mm * sizeof(float *));
  int32_t *rpos = (int32_t *)sc;
  for (int64_t it; (it = il__take(j)) >= 0;) {
    const int64_t sp = it % j->n_split, th = it / j->n_split, kh = th % a->n_kv_heads;
    const il__tile tl = j->tiles[th / a->n_kv_heads];
    const int32_t s = a->seq[tl.t0];
    const int m = (int)(tl.nt * G);
    float *part = j->n_split > 1 ? j->partials + (size_t)it * (size_t)mm * (size_t)(hd + 2) : NULL;
    for (int r = 0; r < m; r++) {
      const int64_t t = tl.t0 + r / G, h = kh * G + r % G;
      qrow[r] = a->q + t * qs + h * hd;
      orow[r] = part ? part + (size_t)r * (size_t)(hd + 2) + 2 : a->out + t * qs + h * hd;
      memset(orow[r], 0, (size_t)hd * sizeof(float));
      rpos[r] = a->pos[t];
      M[r] = -INFINITY;
      L[r] = 0;
    }
    /* this split's keys [kb0, kb1), in chunks of C: the scores of a chunk's 64-key tiles, then
     * the online softmax once per row and chunk, then the chunk's P V */
    const int64_t nkt = ((int64_t)tl.maxpos + IL__KT) / IL__KT, per = (nkt + j->n_split - 1) / j->n_split;
    const int64_t kt0 = sp * per, kt1 = kt0 + per < nkt ? kt0 + per : nkt;
    int32_t kb0 = (int32_t)(kt0 * IL__KT);
    const int32_t kb1 = kt1 * IL__KT < tl.maxpos + 1 ? (int32_t)(kt1 * IL__KT) : tl.maxpos + 1;
    if (a->window > 0 && j->n_split == 1) { /* key tiles before every row's window: skipped */
      int32_t lo = INT32_MAX;
      for (int r = 0; r < m; r++) lo = il__first_key(a, rpos[r]) < lo ? il__first_key(a, rpos[r]) : lo;
      lo -= lo % IL__KT;
      kb0 = lo > kb0 ? lo : kb0;
    }
    for (int32_t c0 = kb0; c0 < kb1; c0 += (int32_t)C) {
      const int nc = kb1 - c0 < C ? kb1 - c0 : (int)C;
      il__qk_span(isa, a, s, c0, nc, kh, S, (size_t)C, qrow, m);
      /* causal mask and online softmax, row by row: keys c0..c0+nv-1 are visible to row r */
      for (int r = 0; r < m; r++) {
        float *sr = S + (size_t)r * (size_t)C;
        int nv = rpos[r] - c0 + 1, lo = il__first_key(a, rpos[r]) - c0;
        nv = nv < 0 ? 0 : nv > nc ? nc : nv;
        lo = lo < 0 ? 0 : lo > nv ? nv : lo;
        if (nv > lo) { /* keys lo..nv-1 of the chunk are in the row's window */
          const float mx = isa->max(sr + lo, nv - lo), mn = mx > M[r] ? mx : M[r];
          const float alpha = M[r] == -INFINITY ? 0.0f : expf(M[r] - mn);
          L[r] = L[r] * alpha + isa->exp_sum(sr + lo, nv - lo, mn);
          if (alpha != 1.0f)
            for (int64_t d = 0; d < hd; d++) orow[r][d] *= alpha;
          M[r] = mn;
        }
        for (int k = 0; k < lo; k++) sr[k] = 0; /* before the row's window: weight 0 */
        for (int k = nv; k < nc; k++) sr[k] = 0;
      }
      il__pv_span(isa, a, s, c0, nc, kh, orow, S, (size_t)C, m);
    }
    for (int r = 0; r < m; r++) {
      if (part) {
        orow[r][-2] = M[r];
        orow[r][-1] = L[r];
      } else {
        const float inv = 1.0f / L[r];
        for (int64_t d = 0; d < hd; d++) orow[r][d] *= inv;
      }
    }
  }
}

/* Split-key partials (m, l, unnormalised O per row) of one (tile, KV head) merged into out. */
static void il__flash_merge(void *p, int ith, int nth) {
  il__job *j = p;
  const il_cpu_attn_args *a = j->a;
  const int64_t hd = a->head_dim, G = a->n_heads / a->n_kv_heads, qs = a->n_heads * hd, mm = j->m_max;
  for (int64_t th; (th = il__take(j)) >= 0;) {
    const int64_t kh = th % a->n_kv_heads;
    const il__tile tl = j->tiles[th / a->n_kv_heads];
    const float *part = j->partials + (size_t)th * (size_t)j->n_split * (size_t)mm * (size_t)(hd + 2);
    for (int64_t r = 0; r < tl.nt * G; r++) {
      float *o = a->out + (tl.t0 + r / G) * qs + (kh * G + r % G) * hd;
      float mx = -INFINITY, l = 0;
      for (int64_t sp = 0; sp < j->n_split; sp++) {
        const float m = part[((size_t)sp * (size_t)mm + (size_t)r) * (size_t)(hd + 2)];
        mx = m > mx ? m : mx;
      }
      memset(o, 0, (size_t)hd * sizeof(float));
      for (int64_t sp = 0; sp < j->n_split; sp++) {
        const float *pr = part + ((size_t)sp * (size_t)mm + (size_t)r) * (size_t)(hd + 2);
        if (pr[0] == -INFINITY) continue; /* this split saw no visible key of the row */
        const float w = expf(pr[0] - mx);
        l += w * pr[1];
        for (int64_t d = 0; d < hd; d++) o[d] += w * pr[2 + d];
      }
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < hd; d++) o[d] *= inv;
    }
  }
}

static il_status il__flash_run(il_pool *pool, const il_cpu_attn_args *a, void *work, size_t bytes) {
  const char *why = il__flash_why(a);
  if (why && !il__shape_why(a)) return il_error(IL_ERR_UNSUPPORTED, "attention flash: %s", why);
  IL_TRY(il__validate("flash", a));
  if (a->n_tok == 0) return IL_OK;
  il__flash_layout L = {0};
  IL_TRY(il__check_work("flash", il__flash_plan(a, il__nth(pool), &L), bytes));
  char *w = il__align_work(work);
  il__tile *tiles = (il__tile *)w;
  il__tiles(a, L.rows_tok, tiles);
  il__job j = {.a = a,
               .isa = il__isa_for(a),
               .tiles = tiles,
               .scratch = w + L.tiles_bytes,
               .per_thread = L.per_thread,
               .n_items = L.tl.n_tiles * a->n_kv_heads * L.n_split,
               .n_split = L.n_split,
               .partials = (float *)(w + L.tiles_bytes + (size_t)il__nth(pool) * L.per_thread),
               .m_max = L.m_max};
  il__run_job(pool, il__flash_worker, &j);
  if (L.n_split > 1) {
    j.n_items = L.tl.n_tiles * a->n_kv_heads;
    il__run_job(pool, il__flash_merge, &j);
  }
  return IL_OK;
}

/* ---- the list, lookup, auto ---- */

static const il_cpu_attn_kernel il__attn_list[] = {
    {"flash", il__flash_why, il__flash_ws, il__flash_run},
    {"memeff", il__common_why, il__memeff_ws, il__memeff_run},
    {"sliced", il__common_why, il__sliced_ws, il__sliced_run},
    {"naive", il__common_why, il__naive_ws, il__naive_run},
};

const il_cpu_attn_kernel *il_cpu_attn_kernels(int *n) {
  if (n) *n = (int)(sizeof il__attn_list / sizeof il__attn_list[0]);
  return il__attn_list;
}

const il_cpu_attn_kernel *il_cpu_attn_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof il__attn_list / sizeof il__attn_list[0]; i++)
    if (strcmp(il__attn_list[i].name, name) == 0) return &il__attn_list[i];
  return NULL;
}

const il_cpu_attn_kernel *il_cpu_attn_auto(const il_cpu_attn_args *a, char *why, size_t n) {
  size_t used = 0;
  if (why && n) why[0] = 0;
  for (size_t i = 0; i < sizeof il__attn_list / sizeof il__attn_list[0]; i++) {
    const char *r = il__attn_list[i].why_not(a);
    if (!r) return &il__attn_list[i];
    if (why && used < n) {
      int w = snprintf(why + used, n - used, "%s%s: %s", used ? "; " : "", il__attn_list[i].name, r);
      used += w > 0 ? (size_t)w : 0;
    }
  }
  return NULL;
}
