/* model/export: write any model (a GGUF file or a built-in) to a GGUF file in a chosen type.
 *
 * 2-D weight tensors are converted to the target type (dequantize -> quantize, row by row);
 * 1-D tensors (norms, biases) stay as they are (F32), as llama.cpp keeps them. A 2-D tensor
 * whose row length is not a multiple of the target block size is kept in its type (F32 for
 * F32 sources), and a note naming it is written to `notes`, so no broken file is ever
 * written. Metadata is copied verbatim, then general.quantization_version (2) and
 * general.file_type are set last, as llama-quantize does. The output is written to a temporary
 * file and renamed.
 * The pieces (open a source, copy its metadata, convert one tensor with threads and error
 * statistics) are public so model/quantize builds per-tensor type mixes from the same code.
 * Not for: llama.c checkpoints (format/llama2c); choosing types per tensor (model/quantize).
 */
#ifndef IL_MODEL_EXPORT_H
#define IL_MODEL_EXPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/llama.h"

typedef struct {
  int64_t n_converted; /* tensors written in the target type */
  int64_t n_kept;      /* tensors kept in their own type */
  uint64_t bytes_out;  /* tensor bytes written */
} il_export_stats;

/* src: a GGUF path or builtin:NAME. n_threads for built-in generation and conversion. */
il_status il_export_gguf(const char *src, il_dtype type, const char *out_path, int n_threads, FILE *notes,
                         il_export_stats *stats);

/* Opens a source: a GGUF file (weights stay mapped) or builtin:NAME generated in `wtype`
 * (NULL: the built-in's default type). Free with il_model_free. */
il_status il_export_open(const char *src, const char *wtype, int n_threads, il_model **out);

/* Writes the source's metadata to w (a GGUF's keys copied in order, or a built-in's), then
 * general.quantization_version = 2 and general.file_type = file_type (llama.cpp's
 * LLAMA_FTYPE_* number) moved to the end. Sets w's alignment to the source's. */
il_status il_export_metadata(const il_model *m, bool builtin, il_gguf_writer *w, uint32_t file_type);

/* How far a converted tensor is from its source, over all elements (x = source as floats,
 * y = the converted tensor decoded again). */
typedef struct {
  double rmse;        /* sqrt(mean((y - x)^2)) */
  double max_abs;     /* max |y - x| */
  double rel;         /* rmse / sqrt(mean(x^2)) (0 when x is all zero) */
  double snr_db;      /* 10 log10(sum x^2 / sum (y - x)^2); +inf when exact */
  double outliers;    /* fraction of x with |x - mean| > 3 sigma (the values that stretch scales) */
} il_export_error;

/* Converts tensor t to `type` into a fresh buffer (staging category) that the caller frees
 * with il_mem_free; rows are shared among n_threads threads (the bytes do not depend on it).
 * The row length must be a multiple of the type's block size (callers check). A NaN or Inf
 * in the source is IL_ERR_FORMAT naming the tensor, row and column. err (may be NULL)
 * gets the error statistics, at the cost of decoding the result once more. */
il_status il_export_convert_tensor(const il_gguf_tensor *t, il_dtype type, int n_threads, void **out,
                                   uint64_t *nbytes, il_export_error *err);

#endif
