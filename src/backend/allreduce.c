/* backend/allreduce: the host sum in a fixed order and the NCCL table (allreduce.h). */
#include "backend/allreduce.h"

#include <string.h>

#include "core/dtype.h"
#include "core/status.h"

/* A part's rows, as one copy where they are contiguous (activation buffers are), else row by
 * row. */
static il_status il__part_io(il_backend *b, il_tensor t, void *host, bool up) {
  const size_t row = il_tensor_row_bytes(t.type, t.cols);
  if (t.stride == row || t.rows == 1) {
    const size_t bytes = (size_t)t.rows * row;
    return up ? b->ops->upload(b, t, host, bytes) : b->ops->download(b, host, t, bytes);
  }
  for (int64_t r = 0; r < t.rows; r++) {
    uint8_t *h = (uint8_t *)host + (size_t)r * row;
    IL_TRY(up ? b->ops->upload(b, il_tensor_rows(t, r, 1), h, row) : b->ops->download(b, h, il_tensor_rows(t, r, 1), row));
  }
  return IL_OK;
}

il_status il_allreduce_host(il_backend *const *devs, const il_tensor *parts, int n, float *scratch) {
  if (n < 1) return il_error(IL_ERR_INVALID_ARG, "all-reduce: %d devices (need at least 1)", n);
  const int64_t rows = parts[0].rows, cols = parts[0].cols;
  const il_dtype type = parts[0].type;
  if (type != IL_DTYPE_F32 && type != IL_DTYPE_F16 && type != IL_DTYPE_BF16)
    return il_error(IL_ERR_INVALID_ARG, "all-reduce: part 0 (%s) is %s; the sum takes f32, f16 or bf16",
                    parts[0].name ? parts[0].name : "unnamed", il_dtype_name(type));
  for (int k = 0; k < n; k++) {
    if (parts[k].type != type || parts[k].rows != rows || parts[k].cols != cols)
      return il_error(IL_ERR_INVALID_ARG, "all-reduce: part %d (%s) is not %s %lld x %lld like part 0", k,
                      parts[k].name ? parts[k].name : "unnamed", il_dtype_name(type), (long long)rows, (long long)cols);
  }
  const int64_t elems = rows * cols;
  float *sum = scratch, *part = scratch + elems;
  /* a 16-bit part arrives in the second half's bytes and is widened into the first half's floats
   * (k = 0) or in place from the back, which reads ahead of what it writes */
  for (int k = 0; k < n; k++) {
    float *dst = k == 0 ? sum : part;
    void *raw = type == IL_DTYPE_F32 ? (void *)dst : (void *)part;
    IL_TRY(il__part_io(devs[k], parts[k], raw, false));
    if (type != IL_DTYPE_F32) {
      const uint16_t *h = raw;
      for (int64_t i = elems - 1; i >= 0; i--) {
        const uint16_t v = h[i];
        dst[i] = type == IL_DTYPE_F16 ? il_fp16_to_f32(v) : il_bf16_to_f32(v);
      }
    }
    if (k > 0)
      for (int64_t i = 0; i < elems; i++) sum[i] += part[i];
  }
  void *out = sum;
  if (type != IL_DTYPE_F32) { /* the sum stored at the parts' type, rounded once */
    uint16_t *h = (uint16_t *)part;
    for (int64_t i = 0; i < elems; i++) h[i] = type == IL_DTYPE_F16 ? il_f32_to_fp16(sum[i]) : il_f32_to_bf16(sum[i]);
    out = h;
  }
  for (int k = 0; k < n; k++) IL_TRY(il__part_io(devs[k], parts[k], out, true));
  return IL_OK;
}

uint64_t il_allreduce_bytes_host(int64_t elems) { return 2u * (uint64_t)elems * sizeof(float); }

uint64_t il_allreduce_bytes_ring(int64_t elems, int n) {
  if (n < 2) return 0;
  return 2u * (uint64_t)(n - 1) * (uint64_t)elems * sizeof(float) / (uint64_t)n;
}

il_status il_nccl_open(il_nccl *t, const char *filename) {
  memset(t, 0, sizeof *t);
  const char *file = filename ? filename : IL_NCCL_LIBRARY;
  if (il_dl_open(&t->lib, file) != IL_OK)
    return il_error(IL_ERR_NOT_FOUND, "tensor parallelism on cuda devices needs NCCL (%s): %s", file, il_dl_error(&t->lib));
  struct { const char *name; void **slot; } syms[] = {
      {"ncclCommInitAll", (void **)&t->comm_init_all}, {"ncclCommDestroy", (void **)&t->comm_destroy},
      {"ncclAllReduce", (void **)&t->all_reduce},      {"ncclGroupStart", (void **)&t->group_start},
      {"ncclGroupEnd", (void **)&t->group_end},        {"ncclGetErrorString", (void **)&t->get_error_string},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    if (il_dl_sym(&t->lib, syms[i].name, syms[i].slot) != IL_OK) {
      il_status st = il_error(IL_ERR_NOT_FOUND, "%s is not NCCL: it lacks %s: %s", file, syms[i].name, il_dl_error(&t->lib));
      il_nccl_close(t);
      return st;
    }
  }
  return IL_OK;
}

void il_nccl_close(il_nccl *t) {
  il_dl_close(&t->lib);
  memset(t, 0, sizeof *t);
}

il_status il_nccl_check(const il_nccl *t, int result, const char *what) {
  if (result == 0) return IL_OK;
  const char *text = t->get_error_string ? t->get_error_string(result) : NULL;
  return il_error(IL_ERR_DEVICE, "NCCL %s: %s (code %d)", what, text ? text : "unknown error", result);
}

il_status il_nccl_init(const il_nccl *t, void **comms, int n, const int *devlist) {
  return il_nccl_check(t, t->comm_init_all(comms, n, devlist), "ncclCommInitAll");
}

int il_nccl_dtype(il_dtype type) {
  return type == IL_DTYPE_F32 ? IL_NCCL_FLOAT32 : type == IL_DTYPE_F16 ? IL_NCCL_FLOAT16
                                                 : type == IL_DTYPE_BF16 ? IL_NCCL_BFLOAT16 : -1;
}

il_status il_nccl_allreduce_sum(const il_nccl *t, void *const *comms, void *const *buf, void *const *stream, int n,
                                size_t count, int dtype) {
  IL_TRY(il_nccl_check(t, t->group_start(), "ncclGroupStart"));
  il_status first = IL_OK;
  for (int k = 0; k < n; k++) {
    il_status s = il_nccl_check(t, t->all_reduce(buf[k], buf[k], count, dtype, IL_NCCL_SUM, comms[k], stream[k]),
                                "ncclAllReduce");
    if (s != IL_OK && first == IL_OK) first = s;
  }
  /* The group is closed even after a failed call: an open group would hold NCCL's thread state. */
  const il_status st = il_nccl_check(t, t->group_end(), "ncclGroupEnd");
  return first != IL_OK ? first : st;
}
