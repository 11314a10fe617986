/* backend/cuda/attn_ops: the CUDA backend's attention kernels as the seam lists them (naive,
 * sliced, memeff, flash: flash-decoding for decode, the tensor-core prefill from
 * IL__FA_MIN_TOK tokens on sm_80+): which one takes a shape and why not, its workspace, and its
 * launch after the host-side checks every kernel shares (il__attn_prepare).
 * Not for: the kernels themselves (attention.cu, attn_fd.cu, attn_fa.cu) or the other ops (cuda.c).
 */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/glue.h" /* first: it defines struct il_buffer, then the view checks */
#include "backend/cuda/attn_flash.h"

/* ---------------------------------------------------------------- attention: naive */

static const char *il__naive_why_not(il_backend *b, const il_attn_args *a) {
  const il_kv_view *kv = a->kv;
  if (kv->k.type != kv->v.type) return "needs K and V of one type";
  if (!il__kv_type_ok(kv->k.type)) return "reads f32, f16, bf16 or q8_0 cells only";
  if (kv->k.type == IL_DTYPE_Q8_0 && a->head_dim % 32) return "q8_0 cells need a head size that is a multiple of 32";
  return NULL;
}

static size_t il__naive_workspace(il_backend *b, const il_attn_args *a) {
  return (size_t)il__cu_attn_naive_rows(a->q.rows * a->n_heads) * (size_t)(a->kv->n_ctx > 0 ? a->kv->n_ctx : 0) *
         sizeof(float);
}

/* Checks every kernel relies on (the cpu backend's, except the index checks that need device
 * data: those run in the kernels) and fills the launcher's arguments. `kernel` names the caller,
 * `need` is its workspace size. */
static il_status il__attn_prepare(il_backend *b, const il_attn_args *a, il_tensor ws, const char *kernel,
                                  const char *why, size_t need, il__cu_attn *x) {
  il__cu *c = il__cu_of(b);
  const il_kv_view *kv = a->kv;
  IL_TRY(il__attn_views_check(b, a, IL_DTYPE_COUNT)); /* K and V of two types: the kernels' why_not */
  if (why) return il_error(IL_ERR_UNSUPPORTED, "attention kernel '%s': %s", kernel, why);
  if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads)
    return il_error(IL_ERR_INVALID_ARG, "attention: %lld heads not divisible by %lld kv heads", (long long)a->n_heads,
                    (long long)a->n_kv_heads);
  if (a->q.cols != a->n_heads * a->head_dim || a->out.rows != a->q.rows || a->out.cols != a->q.cols ||
      kv->k.cols != a->n_kv_heads * a->head_dim || kv->v.cols != kv->k.cols || kv->v.rows != kv->k.rows ||
      a->seq.cols < a->q.rows || a->pos.cols < a->q.rows)
    return il_error(IL_ERR_INVALID_ARG, "attention: q [%lld x %lld] and cache rows of %lld do not match %lld/%lld heads of %lld",
                    (long long)a->q.rows, (long long)a->q.cols, (long long)kv->k.cols, (long long)a->n_heads,
                    (long long)a->n_kv_heads, (long long)a->head_dim);
  if (kv->block <= 0 || kv->max_blocks <= 0 || kv->n_ctx > (int64_t)kv->block * kv->max_blocks ||
      kv->block_table.cols * kv->block_table.rows < (int64_t)kv->n_seq * kv->max_blocks ||
      (kv->block_table.rows > 1 && kv->block_table.stride != (size_t)kv->block_table.cols * 4))
    return il_error(IL_ERR_INVALID_ARG, "attention: block table '%s' [%lld x %lld] does not hold %d sequences of %d blocks of %d",
                    il__nm(&kv->block_table), (long long)kv->block_table.rows, (long long)kv->block_table.cols, kv->n_seq,
                    kv->max_blocks, kv->block);
  IL_TRY(il__aligned("attention", &a->q, 4));
  IL_TRY(il__aligned("attention", &a->out, 4));
  IL_TRY(il__aligned("attention", &kv->k, kv->k.type == IL_DTYPE_F32 ? 4 : 2));
  IL_TRY(il__aligned("attention", &kv->v, kv->v.type == IL_DTYPE_F32 ? 4 : 2));
  if (need) {
    IL_TRY(il__check(b, "attention", &ws, IL_DTYPE_COUNT));
    IL_TRY(il__aligned("attention", &ws, 4));
    if (ws.buf->size - ws.off < need)
      return il_error(IL_ERR_INVALID_ARG, "attention kernel '%s': workspace of %zu bytes, needs %zu", kernel,
                      ws.buf->size - ws.off, need);
  }
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "attention", il__nm(&kv->k));
  *x = (il__cu_attn){
      .out = il__ptr(a->out), .q = il__ptr(a->q), .out_stride = a->out.stride, .q_stride = a->q.stride,
      .seq = il__ptr(a->seq), .pos = il__ptr(a->pos), .table = il__ptr(kv->block_table),
      .k = il__ptr(kv->k), .v = il__ptr(kv->v), .k_stride = kv->k.stride, .v_stride = kv->v.stride,
      .kv_type = kv->k.type, .n_tok = a->q.rows, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
      .head_dim = a->head_dim, .n_cells = kv->k.rows, .block = kv->block, .n_seq = kv->n_seq,
      .max_blocks = kv->max_blocks, .n_ctx = kv->n_ctx, .window = a->window > 0 ? a->window : 0, .scale = a->scale, .scores = need ? il__ptr(ws) : NULL,
      .fault = c->fault, .launch = il__note(c, "attention over", &kv->k)};
  return IL_OK;
}

static il_status il__naive_run(il_backend *b, const il_attn_args *a, il_tensor ws) {
  il__cu *c = il__cu_of(b);
  il__cu_attn x;
  IL_TRY(il__attn_prepare(b, a, ws, "naive", il__naive_why_not(b, a), il__naive_workspace(b, a), &x));
  if (!x.n_tok) return IL_OK;
  IL_CUDA_CHECK(c, il__cu_attn_naive(c->compute, &x), "attention", il__nm(&a->kv->k));
  return il__observe(b, IL_OP_ATTENTION, a->out, a->out.type);
}

/* ---------------------------------------------------------------- attention: sliced */

/* The naive kernel over slices of query rows (--attn-slice, default 32 as on the CPU): the
 * scores workspace holds one slice's rows, not the batch's. */
static int64_t il__slice_rows(const il_attn_args *a) {
  const int64_t s = a->slice > 0 ? a->slice : 32;
  return s < a->q.rows ? s : (a->q.rows > 0 ? a->q.rows : 1);
}

static const char *il__sliced_why_not(il_backend *b, const il_attn_args *a) {
  if (a->slice < 0) return "a negative slice";
  return il__naive_why_not(b, a);
}

static size_t il__sliced_workspace(il_backend *b, const il_attn_args *a) {
  return (size_t)il__cu_attn_naive_rows(il__slice_rows(a) * a->n_heads) * (size_t)(a->kv->n_ctx > 0 ? a->kv->n_ctx : 0) *
         sizeof(float);
}

static il_status il__sliced_run(il_backend *b, const il_attn_args *a, il_tensor ws) {
  il__cu *c = il__cu_of(b);
  il__cu_attn x;
  IL_TRY(il__attn_prepare(b, a, ws, "sliced", il__sliced_why_not(b, a), il__sliced_workspace(b, a), &x));
  const int64_t rows = il__slice_rows(a);
  for (int64_t t0 = 0; t0 < x.n_tok; t0 += rows) {
    il__cu_attn y = x;
    y.n_tok = x.n_tok - t0 < rows ? x.n_tok - t0 : rows;
    y.q = (const float *)((const uint8_t *)x.q + (size_t)t0 * x.q_stride);
    y.out = (float *)((uint8_t *)x.out + (size_t)t0 * x.out_stride);
    y.seq = x.seq + t0;
    y.pos = x.pos + t0;
    IL_CUDA_CHECK(c, il__cu_attn_naive(c->compute, &y), "attention", il__nm(&a->kv->k));
  }
  return il__observe(b, IL_OP_ATTENTION, a->out, a->out.type);
}

static const char *il__memeff_why_not(il_backend *b, const il_attn_args *a) {
  const char *why = il__naive_why_not(b, a);
  if (why) return why;
  if (a->head_dim > il__cu_attn_memeff_max_head_dim()) return "head sizes above 256";
  return NULL;
}

static size_t il__memeff_workspace(il_backend *b, const il_attn_args *a) { return 0; }

static il_status il__memeff_run(il_backend *b, const il_attn_args *a, il_tensor ws) {
  il__cu *c = il__cu_of(b);
  il__cu_attn x;
  IL_TRY(il__attn_prepare(b, a, ws, "memeff", il__memeff_why_not(b, a), 0, &x));
  if (!x.n_tok) return IL_OK;
  IL_CUDA_CHECK(c, il__cu_attn_memeff(c->compute, &x), "attention", il__nm(&a->kv->k));
  return il__observe(b, IL_OP_ATTENTION, a->out, a->out.type);
}

/* ---------------------------------------------------------------- attention: flash */

/* Flash-decoding (attn_fd.cu) for any batch; the tensor-core prefill kernel (attn_fa.cu) takes
 * batches of IL__FA_MIN_TOK tokens or more on sm_80+ when it reads the cell type and head size.
 * The choice is per call: the engine picks one kernel for every step, and a decode step and a
 * prompt want different ones. */
static const char *il__flash_why_not(il_backend *b, const il_attn_args *a) {
  const char *why = il__naive_why_not(b, a);
  if (why) return why;
  if (!il__cu_attn_fd_supports(a->n_heads, a->n_kv_heads, a->head_dim))
    return "flash-decoding takes head sizes up to 256 and (query heads per kv head) x head size up to 2048";
  return NULL;
}

/* Splits and workspace of flash-decoding for a call of n_tok tokens. */
static int il__flash_splits(const il_attn_args *a, int64_t n_tok) {
  return il__cu_attn_fd_splits(n_tok, a->n_kv_heads, a->kv->n_ctx, a->head_dim);
}

/* Enough for every call of up to q.rows tokens (the engine sizes it once for the largest batch). */
static size_t il__flash_workspace(il_backend *b, const il_attn_args *a) {
  size_t most = 0;
  for (int64_t n = 1; n <= a->q.rows; n++) {
    const size_t w = il__cu_attn_fd_workspace(n, a->n_heads, a->head_dim, il__flash_splits(a, n));
    most = w > most ? w : most;
  }
  return most;
}

/* The tensor-core prefill kernel for this call: enough query tokens, sm_80+ (mma.sync
 * m16n8k16), a cell type and head size it reads. */
static bool il__flash_prefill(const il__cu *c, const il_attn_args *a) {
  const il_kv_view *kv = a->kv;
  if (a->q.rows < il__cu_attn_fa_min_tokens() || c->cc_major < 8 || !il__cu_attn_fa_supports(kv->k.type, a->head_dim) ||
      kv->v.type != kv->k.type)
    return false;
  if (kv->k.type == IL_DTYPE_Q8_0) return true;
  /* F16/F32 rows of a head at 16-byte boundaries (16-byte loads); else flash-decoding */
  const size_t es = kv->k.type == IL_DTYPE_F32 ? 4 : 2;
  return kv->k.buf && kv->v.buf && ((uintptr_t)il__ptr(kv->k) | (uintptr_t)il__ptr(kv->v) | kv->k.stride | kv->v.stride |
                                    ((size_t)a->head_dim * es)) % 16 == 0;
}

static il_status il__flash_run(il_backend *b, const il_attn_args *a, il_tensor ws) {
  il__cu *c = il__cu_of(b);
  il__cu_attn x;
  const int64_t n_tok = a->q.rows;
  const int S = il__flash_splits(a, n_tok > 0 ? n_tok : 1);
  const size_t need = n_tok > 0 ? il__cu_attn_fd_workspace(n_tok, a->n_heads, a->head_dim, S) : 0;
  const bool prefill = il__flash_prefill(c, a);
  IL_TRY(il__attn_prepare(b, a, ws, "flash", il__flash_why_not(b, a), prefill ? 0 : need, &x));
  if (!x.n_tok) return IL_OK;
  if (prefill) IL_CUDA_CHECK(c, il__cu_attn_fa(c->compute, &x), "attention", il__nm(&a->kv->k));
  else IL_CUDA_CHECK(c, il__cu_attn_fd(c->compute, &x, il__ptr(ws), S), "attention", il__nm(&a->kv->k));
  return il__observe(b, IL_OP_ATTENTION, a->out, a->out.type);
}

/* flash first (what --attn auto takes): flash-decoding for decode steps and small batches, the
 * mma.sync prefill kernel for prompts on sm_80+ (il__flash_prefill); both are verified on the
 * host (tests/test_cuda_attn_twin.cpp) and on a GPU by scripts/gpu-check-attention.sh. memeff
 * follows as the fallback for shapes flash does not take (head sizes above 256, a GQA group x
 * head size above 2048): it needs no workspace and is faster than naive at decode and more so
 * for many query tokens (docs/cuda.md#current-figures); naive, the reference, takes head sizes
 * above 256. */
static const il_attn_kernel il__attn[] = {
    {"flash", il__flash_why_not, il__flash_workspace, il__flash_run},
    {"memeff", il__memeff_why_not, il__memeff_workspace, il__memeff_run},
    {"naive", il__naive_why_not, il__naive_workspace, il__naive_run},
    {"sliced", il__sliced_why_not, il__sliced_workspace, il__sliced_run},
};

const il_attn_kernel *il__cu_attn_kernels(il_backend *b, int *n) {
  *n = (int)(sizeof il__attn / sizeof il__attn[0]);
  return il__attn;
}
