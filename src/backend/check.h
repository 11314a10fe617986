/* backend/check: the view checks every backend's ops run on their tensor arguments before they
 * touch memory, with errors that name the op and the tensor. Static inline, so the CUDA module
 * (a separate shared object) compiles the same checks as the cpu backend.
 * Also the argument checks of ops that cpu and cuda both run the same way (get_rows, rmsnorm,
 * rope, elementwise, add_bias, kv_store, copy, sample, reserve_act, attention's views).
 * Not for: what only one backend needs (alignment on the device, q8_0 row widths). */
#ifndef IL_BACKEND_CHECK_H
#define IL_BACKEND_CHECK_H

#include "backend/backend.h"
#include "core/status.h"

static inline const char *il__nm(const il_tensor *t) { return t->name ? t->name : "tensor"; }

/* A 16-bit activation type (the types reserve_act and the 16-bit op paths take). */
static inline bool il__half(il_dtype t) { return t == IL_DTYPE_F16 || t == IL_DTYPE_BF16; }

/* t lies inside its buffer and has type `type` (IL_DTYPE_COUNT: any). `op` names the caller. */
static inline il_status il__check(il_backend *b, const char *op, const il_tensor *t, il_dtype type) {
  if (!t->buf) return il_error(IL_ERR_INVALID_ARG, "%s: '%s' has no buffer", op, il__nm(t));
  if (t->buf->owner != b)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' lives on another backend than the one running the op", op, il__nm(t));
  if (type != IL_DTYPE_COUNT && t->type != type)
    return il_error(IL_ERR_UNSUPPORTED, "%s: '%s' is %s; this op computes on %s", op, il__nm(t),
                    il_dtype_name(t->type), il_dtype_name(type));
  if (t->rows < 0 || t->cols < 0) return il_error(IL_ERR_INVALID_ARG, "%s: '%s' has a negative shape", op, il__nm(t));
  size_t row = il_tensor_row_bytes(t->type, t->cols);
  if (t->cols && !row)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s': %lld columns is not a whole number of %s blocks", op, il__nm(t),
                    (long long)t->cols, il_dtype_name(t->type));
  if (t->rows > 1 && t->stride < row)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s': row stride %zu below the row size %zu", op, il__nm(t), t->stride, row);
  if (t->off > t->buf->size || il_tensor_span(t) > t->buf->size - t->off)
    return il_error(IL_ERR_RANGE, "%s: '%s' [%lld x %lld] at offset %zu runs past its buffer of %zu bytes", op,
                    il__nm(t), (long long)t->rows, (long long)t->cols, t->off, t->buf->size);
  return IL_OK;
}

/* Reports output y of op to b's observer (backend.h): y as computed in F32, stored at `stored`. */
static inline il_status il__observe(il_backend *b, il_op op, il_tensor y, il_dtype stored) {
  return b->observer.fn ? b->observer.fn(b->observer.ctx, b, op, y, stored) : IL_OK;
}

/* t is an activation this caller computes on: F32, or F16/BF16 too where half_ok (a backend
 * whose kernels read and write 16-bit activations themselves; the cpu's F32 kernels pass
 * false, so a 16-bit view that reached them unwidened is refused, not misread). */
static inline il_status il__check_act(il_backend *b, const char *op, const il_tensor *t, bool half_ok) {
  if (half_ok && (t->type == IL_DTYPE_F16 || t->type == IL_DTYPE_BF16)) return il__check(b, op, t, IL_DTYPE_COUNT);
  return il__check(b, op, t, IL_DTYPE_F32);
}

/* Same shape as ref. */
static inline il_status il__same_shape(const char *op, const il_tensor *a, const il_tensor *ref) {
  if (a->rows != ref->rows || a->cols != ref->cols)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is [%lld x %lld] but '%s' is [%lld x %lld]", op, il__nm(a),
                    (long long)a->rows, (long long)a->cols, il__nm(ref), (long long)ref->rows, (long long)ref->cols);
  return IL_OK;
}

/* copy's arguments: one shape, and the same type or F32 <-> F16/BF16 (a conversion, rounding
 * to nearest even exactly as round_to does). */
static inline il_status il__copy_check(il_backend *b, const il_tensor *dst, const il_tensor *src) {
  IL_TRY(il__check(b, "copy", src, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "copy", dst, IL_DTYPE_COUNT));
  IL_TRY(il__same_shape("copy", dst, src));
  const bool half_d = dst->type == IL_DTYPE_F16 || dst->type == IL_DTYPE_BF16,
             half_s = src->type == IL_DTYPE_F16 || src->type == IL_DTYPE_BF16;
  if (dst->type == src->type || (dst->type == IL_DTYPE_F32 && half_s) || (src->type == IL_DTYPE_F32 && half_d))
    return IL_OK;
  return il_error(IL_ERR_UNSUPPORTED, "copy: '%s' (%s) into '%s' (%s): a copy converts only between f32 and f16 or bf16",
                  il__nm(src), il_dtype_name(src->type), il__nm(dst), il_dtype_name(dst->type));
}

/* Rows of an activation tensor are packed (stride = cols * element size) or it has one row. */
static inline il_status il__dense(const char *op, const il_tensor *t) {
  const size_t row = t->type == IL_DTYPE_F32 ? (size_t)t->cols * 4 : il_tensor_row_bytes(t->type, t->cols);
  if (t->rows > 1 && t->stride != row)
    return il_error(IL_ERR_UNSUPPORTED, "%s: '%s' needs packed rows (stride %zu, row %lld elements)", op, il__nm(t),
                    t->stride, (long long)t->cols);
  return IL_OK;
}

/* y and x of an elementwise op (swiglu, add): activations (il__check_act), one shape, packed rows. */
static inline il_status il__elementwise_check(il_backend *b, const char *op, const il_tensor *y, const il_tensor *x,
                                              bool half_ok) {
  IL_TRY(il__check_act(b, op, y, half_ok));
  IL_TRY(il__check_act(b, op, x, half_ok));
  IL_TRY(il__same_shape(op, y, x));
  IL_TRY(il__dense(op, y));
  return il__dense(op, x);
}

/* get_rows' arguments: activation rows y, weights w of any type as wide as y, an I32 id per row. */
static inline il_status il__get_rows_check(il_backend *b, const il_tensor *y, const il_tensor *w, const il_tensor *ids,
                                           bool half_ok) {
  IL_TRY(il__check_act(b, "get_rows", y, half_ok));
  IL_TRY(il__check(b, "get_rows", w, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "get_rows", ids, IL_DTYPE_I32));
  if (y->cols != w->cols || ids->cols < y->rows)
    return il_error(IL_ERR_INVALID_ARG, "get_rows: '%s' rows of %lld into [%lld x %lld] with %lld ids", il__nm(w),
                    (long long)w->cols, (long long)y->rows, (long long)y->cols, (long long)ids->cols);
  return IL_OK;
}

/* rmsnorm's arguments: activations y and x of one shape, an F32 weight as wide as a row. */
static inline il_status il__rmsnorm_check(il_backend *b, const il_tensor *y, const il_tensor *x, const il_tensor *g,
                                          bool half_ok) {
  IL_TRY(il__check_act(b, "rmsnorm", y, half_ok));
  IL_TRY(il__check_act(b, "rmsnorm", x, half_ok));
  IL_TRY(il__check(b, "rmsnorm", g, IL_DTYPE_F32));
  IL_TRY(il__same_shape("rmsnorm", y, x));
  if (g->cols != x->cols || g->rows < 1)
    return il_error(IL_ERR_INVALID_ARG, "rmsnorm: weight '%s' has %lld elements; rows have %lld", il__nm(g),
                    (long long)g->cols, (long long)x->cols);
  return IL_OK;
}

/* rope's arguments: activations x of n_heads heads of head_dim per row, an even n_rot within a
 * head, an I32 position per row. */
static inline il_status il__rope_check(il_backend *b, const il_tensor *x, const il_tensor *pos, const il_rope_params *p,
                                       bool half_ok) {
  IL_TRY(il__check_act(b, "rope", x, half_ok));
  IL_TRY(il__check(b, "rope", pos, IL_DTYPE_I32));
  if (pos->cols < x->rows || x->cols != p->n_heads * p->head_dim || p->n_rot > p->head_dim || p->n_rot % 2)
    return il_error(IL_ERR_INVALID_ARG, "rope: '%s' [%lld x %lld] does not match %lld heads of %lld (%lld rotated), %lld positions",
                    il__nm(x), (long long)x->rows, (long long)x->cols, (long long)p->n_heads, (long long)p->head_dim,
                    (long long)p->n_rot, (long long)pos->cols);
  return IL_OK;
}

/* The sample op's arguments: F32 logits, one I32 id and one F32 draw per row. */
static inline il_status il__sample_check(il_backend *b, const il_tensor *ids, const il_tensor *logits, const il_tensor *u) {
  IL_TRY(il__check(b, "sample", logits, IL_DTYPE_F32));
  IL_TRY(il__check(b, "sample", ids, IL_DTYPE_I32));
  IL_TRY(il__check(b, "sample", u, IL_DTYPE_F32));
  if (ids->cols < logits->rows || u->cols < logits->rows || logits->cols < 1)
    return il_error(IL_ERR_INVALID_ARG, "sample: %lld rows of %lld logits into %lld ids with %lld draws",
                    (long long)logits->rows, (long long)logits->cols, (long long)ids->cols, (long long)u->cols);
  return IL_OK;
}

/* add_bias' arguments: activation rows y, an F32 bias as wide as a row. */
static inline il_status il__add_bias_check(il_backend *b, const il_tensor *y, const il_tensor *bias, bool half_ok) {
  IL_TRY(il__check_act(b, "add_bias", y, half_ok));
  IL_TRY(il__check(b, "add_bias", bias, IL_DTYPE_F32));
  if (bias->cols != y->cols)
    return il_error(IL_ERR_INVALID_ARG, "add_bias: '%s' has %lld elements; rows have %lld", il__nm(bias),
                    (long long)bias->cols, (long long)y->cols);
  return IL_OK;
}

/* kv_store's arguments: activation rows k and v, I32 slots, K and V cells of one type the backend
 * stores (cells_ok), rows as wide as the cells, a slot per row. */
static inline il_status il__kv_store_check(il_backend *b, const il_kv_view *kv, const il_tensor *k, const il_tensor *v,
                                           const il_tensor *slots, bool cells_ok, bool half_ok) {
  IL_TRY(il__check_act(b, "kv_store", k, half_ok));
  IL_TRY(il__check_act(b, "kv_store", v, half_ok));
  if (!cells_ok || kv->v.type != kv->k.type)
    return il_error(IL_ERR_UNSUPPORTED, "kv_store: cells of type %s (f32, f16, bf16 or q8_0)", il_dtype_name(kv->k.type));
  IL_TRY(il__check(b, "kv_store", slots, IL_DTYPE_I32));
  IL_TRY(il__check(b, "kv_store", &kv->k, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "kv_store", &kv->v, IL_DTYPE_COUNT));
  if (k->cols != kv->k.cols || v->cols != kv->v.cols || k->rows != v->rows || slots->cols < k->rows ||
      kv->k.rows != kv->v.rows)
    return il_error(IL_ERR_INVALID_ARG, "kv_store: rows [%lld x %lld] do not fit cells of %lld, %lld slots",
                    (long long)k->rows, (long long)k->cols, (long long)kv->k.cols, (long long)slots->cols);
  return IL_OK;
}

/* reserve_act's arguments (rows > 0): a 16-bit atype and a chunk whose F32 bytes fit size_t. */
static inline il_status il__reserve_act_check(il_dtype atype, int32_t rows, int64_t cols) {
  if (!il__half(atype))
    return il_error(IL_ERR_UNSUPPORTED, "reserve_act: activations of %s (f16 or bf16 need it)", il_dtype_name(atype));
  if (cols <= 0 || (uint64_t)cols > SIZE_MAX / 4 / (uint64_t)rows)
    return il_error(IL_ERR_INVALID_ARG, "reserve_act: %d rows of %lld columns", rows, (long long)cols);
  return IL_OK;
}

/* The views every attention kernel reads: F32 q and out, I32 seq, pos and block table, and K/V
 * cells of any type, V's of type v_type (IL_DTYPE_COUNT: any; a backend that says why not
 * itself). */
static inline il_status il__attn_views_check(il_backend *b, const il_attn_args *a, il_dtype v_type) {
  const il_kv_view *kv = a->kv;
  IL_TRY(il__check(b, "attention", &a->q, IL_DTYPE_F32));
  IL_TRY(il__check(b, "attention", &a->out, IL_DTYPE_F32));
  IL_TRY(il__check(b, "attention", &a->seq, IL_DTYPE_I32));
  IL_TRY(il__check(b, "attention", &a->pos, IL_DTYPE_I32));
  IL_TRY(il__check(b, "attention", &kv->k, IL_DTYPE_COUNT));
  IL_TRY(il__check(b, "attention", &kv->v, v_type));
  IL_TRY(il__check(b, "attention", &kv->block_table, IL_DTYPE_I32));
  return IL_OK;
}

#endif
