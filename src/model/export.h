/* model/export: write any model (a GGUF file or a built-in) to a GGUF file in a chosen type.
 *
 * 2-D weight tensors are converted to the target type (dequantize -> quantize, row by row);
 * 1-D tensors (norms, biases) stay as they are (F32), as llama.cpp keeps them. A 2-D tensor
 * whose row length is not a multiple of the target block size is kept in its type (F32 for
 * F32 sources), and a note naming it is written to `notes`, so no broken file is ever
 * written. Metadata is copied verbatim except general.file_type. The output is written to a
 * temporary file and renamed.
 * Not for: llama.c checkpoints (format/llama2c).
 */
#ifndef IL_MODEL_EXPORT_H
#define IL_MODEL_EXPORT_H

#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"

typedef struct {
  int64_t n_converted; /* tensors written in the target type */
  int64_t n_kept;      /* tensors kept in their own type */
  uint64_t bytes_out;  /* tensor bytes written */
} il_export_stats;

/* src: a GGUF path or builtin:NAME. n_threads for built-in generation. */
il_status il_export_gguf(const char *src, il_dtype type, const char *out_path, int n_threads, FILE *notes,
                         il_export_stats *stats);

#endif
