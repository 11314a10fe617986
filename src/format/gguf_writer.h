/* format/gguf_writer: write GGUF v3 files (the byte layout is at the top of gguf.h).
 *
 * A writer collects metadata and tensors in insertion order and writes a GGUF v3 file. Tensor
 * data is borrowed until il_gguf_writer_write returns. Keys and names are copied. Adding a
 * duplicate key or tensor name is IL_ERR_INVALID_ARG. The file is written through core/outfile (an exclusive
 * temporary file renamed over the path; devices and FIFOs written directly), so a failed write
 * never leaves a truncated model behind; write errors are IL_ERR_OUTPUT.
 * Not for: reading (gguf.h; this module sits on the reader, whose entries it can copy).
 */
#ifndef IL_FORMAT_GGUF_WRITER_H
#define IL_FORMAT_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "format/gguf.h"

typedef struct il_gguf_writer il_gguf_writer;

il_status il_gguf_writer_new(il_gguf_writer **out);
void il_gguf_writer_free(il_gguf_writer *w);
il_status il_gguf_writer_set_u32(il_gguf_writer *w, const char *key, uint32_t v);
il_status il_gguf_writer_set_i32(il_gguf_writer *w, const char *key, int32_t v);
il_status il_gguf_writer_set_u64(il_gguf_writer *w, const char *key, uint64_t v);
il_status il_gguf_writer_set_f32(il_gguf_writer *w, const char *key, float v);
il_status il_gguf_writer_set_bool(il_gguf_writer *w, const char *key, bool v);
il_status il_gguf_writer_set_str(il_gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (not STRING or ARRAY), copied. */
il_status il_gguf_writer_set_arr(il_gguf_writer *w, const char *key, il_gguf_type elem_type,
                                 const void *data, uint64_t n);
/* Array of strings with explicit lengths (may contain NUL bytes), copied. */
il_status il_gguf_writer_set_arr_str(il_gguf_writer *w, const char *key, const char *const *strs,
                                     const uint64_t *lens, uint64_t n);
/* Adds a value of any type (nested arrays included) from its serialized bytes, laid out as
 * il_gguf_kv_raw returns them; the bytes are copied and validated like the reader validates a
 * file (IL_ERR_INVALID_ARG naming the key when they do not parse to exactly `size` bytes). */
il_status il_gguf_writer_set_raw(il_gguf_writer *w, const char *key, il_gguf_type type, const void *value,
                                 size_t size);
/* Removes key if present (later keys keep their order); true when it was there. Can't fail.
 * With a set_* after it, a key moves to the end, as llama.cpp's gguf_set_val_* does. */
bool il_gguf_writer_remove_key(il_gguf_writer *w, const char *key);
/* Copies entry i of a reader verbatim (any type, nested arrays included). */
il_status il_gguf_writer_copy_kv(il_gguf_writer *w, const il_gguf *g, int64_t i);
/* Adds a tensor; nbytes must equal the size implied by type and shape. */
il_status il_gguf_writer_add_tensor(il_gguf_writer *w, const char *name, il_dtype type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes);
/* Sets the alignment written (default 32; the caller also sets general.alignment when it is
 * not the default). */
il_status il_gguf_writer_set_alignment(il_gguf_writer *w, uint32_t alignment);
il_status il_gguf_writer_write(il_gguf_writer *w, const char *path);

#endif
