/* backend/check: the view checks every backend's ops run on their tensor arguments before they
 * touch memory, with errors that name the op and the tensor. Static inline, so the CUDA module
 * (a separate shared object) compiles the same checks as the cpu backend.
 * Not for: shape rules of one op (the op checks those itself). */
#ifndef IL_BACKEND_CHECK_H
#define IL_BACKEND_CHECK_H

#include "backend/backend.h"
#include "core/status.h"

static inline const char *il__nm(const il_tensor *t) { return t->name ? t->name : "tensor"; }

/* t lies inside its buffer and has type `type` (IL_DTYPE_COUNT: any). `op` names the caller. */
static inline il_status il__check(const char *op, const il_tensor *t, il_dtype type) {
  if (!t->buf) return il_error(IL_ERR_INVALID_ARG, "%s: '%s' has no buffer", op, il__nm(t));
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

/* Same shape as ref. */
static inline il_status il__same_shape(const char *op, const il_tensor *a, const il_tensor *ref) {
  if (a->rows != ref->rows || a->cols != ref->cols)
    return il_error(IL_ERR_INVALID_ARG, "%s: '%s' is [%lld x %lld] but '%s' is [%lld x %lld]", op, il__nm(a),
                    (long long)a->rows, (long long)a->cols, il__nm(ref), (long long)ref->rows, (long long)ref->cols);
  return IL_OK;
}

/* Rows of an F32 tensor are packed (stride = cols * 4) or it has one row. */
static inline il_status il__dense(const char *op, const il_tensor *t) {
  if (t->rows > 1 && t->stride != (size_t)t->cols * 4)
    return il_error(IL_ERR_UNSUPPORTED, "%s: '%s' needs packed rows (stride %zu, row %lld floats)", op, il__nm(t),
                    t->stride, (long long)t->cols);
  return IL_OK;
}

#endif
