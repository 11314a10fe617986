/* backend/backend: tensor views and the conveniences over the ops table. */
#include "backend/backend.h"

#include <string.h>

size_t il_tensor_row_bytes(il_dtype type, int64_t cols) {
  if (type == IL_DTYPE_I32) return cols >= 0 ? (size_t)cols * 4 : 0;
  return il_dtype_row_size(type, cols);
}

il_tensor il_tensor_make(il_buffer *buf, size_t off, int64_t rows, int64_t cols, il_dtype type, const char *name) {
  return (il_tensor){buf, off, il_tensor_row_bytes(type, cols), rows, cols, type, name};
}

size_t il_tensor_span(const il_tensor *t) {
  if (t->rows <= 0) return 0;
  return (size_t)(t->rows - 1) * t->stride + il_tensor_row_bytes(t->type, t->cols);
}

il_status il_backend_tensor_new(il_backend *b, il_mem_category cat, int64_t rows, int64_t cols, il_dtype type,
                                const char *name, il_tensor *out) {
  memset(out, 0, sizeof *out);
  const size_t row = il_tensor_row_bytes(type, cols);
  if (rows < 0 || (cols && !row) || (row && (size_t)rows > SIZE_MAX / row))
    return il_error(IL_ERR_INVALID_ARG, "tensor '%s': [%lld x %lld] of %s cannot be allocated", name ? name : "?",
                    (long long)rows, (long long)cols, il_dtype_name(type));
  il_buffer *buf;
  IL_TRY(b->ops->buffer_alloc(b, cat, row * (size_t)rows, name, &buf));
  *out = il_tensor_make(buf, 0, rows, cols, type, name);
  return IL_OK;
}

void il_backend_tensor_free(il_backend *b, il_tensor *t) {
  if (t->buf) b->ops->buffer_free(b, t->buf);
  memset(t, 0, sizeof *t);
}

il_status il_backend_tensor_from_host(il_backend *b, il_mem_category cat, const void *data, int64_t rows,
                                      int64_t cols, size_t stride, il_dtype type, const char *name, il_tensor *out) {
  memset(out, 0, sizeof *out);
  const size_t row = il_tensor_row_bytes(type, cols);
  if (stride < row) stride = row;
  const size_t span = rows > 0 ? (size_t)(rows - 1) * stride + row : 0;
  il_buffer *buf;
  if (b->ops->buffer_wrap_host) {
    /* read in place: the cpu backend never writes through a weight view */
    IL_TRY(b->ops->buffer_wrap_host(b, (void *)(uintptr_t)data, span, cat, &buf));
    *out = (il_tensor){buf, 0, stride, rows, cols, type, name};
    return IL_OK;
  }
  IL_TRY(b->ops->buffer_alloc(b, cat, span, name, &buf));
  *out = (il_tensor){buf, 0, stride, rows, cols, type, name};
  il_status st = b->ops->upload(b, *out, data, span);
  if (st != IL_OK) {
    b->ops->buffer_free(b, buf);
    memset(out, 0, sizeof *out);
  }
  return st;
}

il_status il_backend_upload_i32(il_backend *b, il_tensor dst, const int32_t *src, int64_t n) {
  if (dst.type != IL_DTYPE_I32 || n > dst.cols)
    return il_error(IL_ERR_INVALID_ARG, "upload: %lld ids into '%s' of %lld", (long long)n, dst.name ? dst.name : "?",
                    (long long)dst.cols);
  return b->ops->upload(b, dst, src, (size_t)n * sizeof(int32_t));
}
