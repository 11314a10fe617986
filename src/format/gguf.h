/* format/gguf: read GGUF v2/v3 files (the llama.cpp model format); the writer is gguf_writer.h.
 *
 * Byte layout (little-endian):
 *   u32 magic "GGUF" | u32 version (3; 2 also read) | u64 n_tensors | u64 n_kv
 *   n_kv x  { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims (1..4) | u64 ne[n_dims] | u32 type | u64 offset }
 *   zero padding to `general.alignment` (u32, default 32, a power of two)
 *   tensor data; each tensor's offset is relative to the start of this section and aligned.
 *   string = u64 length | bytes (not NUL-terminated)
 *   value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool(u8), 8 string,
 *                9 array = u32 elem_type | u64 n | n elements (arrays may nest), 10 u64, 11 i64, 12 f64
 *
 * The reader maps the file read-only and validates everything before use: counts against
 * the bytes left, string and array lengths, nesting depth, tensor dims, offsets, alignment and
 * sizes against the file size, overflow in size products, duplicate keys and tensor names,
 * unknown value or tensor types. Errors are IL_ERR_FORMAT (or IL_ERR_UNSUPPORTED for a valid
 * but unsupported tensor type) with a detail naming the file, the byte offset and the field,
 * e.g. "m.gguf: offset 4123: tensor 'blk.0.attn_q.weight': data [..) ends past end of file".
 * Tensor data is borrowed from the mapping: valid until il_gguf_close.
 * Not for: writing GGUF (format/gguf_writer.h), interpreting model metadata (model/),
 * tokenizers (model/vocab).
 */
#ifndef IL_FORMAT_GGUF_H
#define IL_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

typedef enum {
  IL_GGUF_U8 = 0,
  IL_GGUF_I8 = 1,
  IL_GGUF_U16 = 2,
  IL_GGUF_I16 = 3,
  IL_GGUF_U32 = 4,
  IL_GGUF_I32 = 5,
  IL_GGUF_F32 = 6,
  IL_GGUF_BOOL = 7,
  IL_GGUF_STRING = 8,
  IL_GGUF_ARRAY = 9,
  IL_GGUF_U64 = 10,
  IL_GGUF_I64 = 11,
  IL_GGUF_F64 = 12,
  IL_GGUF_TYPE_COUNT
} il_gguf_type;

/* "u8", "string", ... (GGUF's value type names); "?" for a value outside the table. */
const char *il_gguf_type_name(uint32_t t);

#define IL_GGUF_DEFAULT_ALIGNMENT 32
#define IL_GGUF_MAX_DIMS 4

typedef struct {
  const char *ptr; /* borrowed, NOT NUL-terminated */
  uint64_t len;
} il_gguf_str;

typedef struct {
  const char *name;  /* NUL-terminated copy owned by the reader */
  uint32_t n_dims;
  int64_t ne[IL_GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest); unused dims are 1 */
  il_dtype type;
  uint64_t offset;   /* relative to the data section */
  uint64_t nbytes;
  const void *data;  /* borrowed from the mapping */
  uint64_t info_offset; /* file offset of this tensor's info record, for error messages */
} il_gguf_tensor;

typedef struct il_gguf il_gguf;

/* Maps and validates `path`. On success *out owns the mapping; free with il_gguf_close. */
il_status il_gguf_open(const char *path, il_gguf **out);
/* Validates a file image already in memory (borrowed; must outlive the reader). `name` is used
 * in error messages. */
il_status il_gguf_open_memory(const void *data, size_t size, const char *name, il_gguf **out);
void il_gguf_close(il_gguf *g);

uint32_t il_gguf_version(const il_gguf *g);
uint32_t il_gguf_alignment(const il_gguf *g);
const char *il_gguf_path(const il_gguf *g);
size_t il_gguf_file_size(const il_gguf *g);
uint64_t il_gguf_data_offset(const il_gguf *g); /* file offset of the tensor data section */
/* The file's mapping (il_gguf_file_size bytes), NULL for a reader of an image in memory. */
const void *il_gguf_image(const il_gguf *g);
/* The mapping is to be replaced by anonymous memory read from the file (--no-mmap,
 * engine/startup): its bytes count as allocated host weights from now on, no longer as mapped
 * (il_gguf_close gives them back). Call before the read. Errors: IL_ERR_OOM under the host's
 * limit (nothing changes). No-op for an image in memory or a second call. */
IL_NODISCARD il_status il_gguf_note_read_in(il_gguf *g);
/* true after il_gguf_note_read_in: the image is the process's own memory, not file pages. */
bool il_gguf_read_in(const il_gguf *g);

/* ---- metadata ---- */
int64_t il_gguf_kv_count(const il_gguf *g);
/* Index of `key`, or -1. */
int64_t il_gguf_find_key(const il_gguf *g, const char *key);
/* Key name of entry i as a NUL-terminated string owned by the reader. */
const char *il_gguf_key(const il_gguf *g, int64_t i);
il_gguf_type il_gguf_kv_type(const il_gguf *g, int64_t i);

/* Typed getters by key. Missing key: IL_ERR_NOT_FOUND with the key in the detail. Wrong type:
 * IL_ERR_FORMAT naming the key, the expected and the actual type. Integer getters accept any
 * integer type whose value fits; float getters accept f32 and f64. */
il_status il_gguf_get_u32(const il_gguf *g, const char *key, uint32_t *out);
il_status il_gguf_get_u64(const il_gguf *g, const char *key, uint64_t *out);
il_status il_gguf_get_i64(const il_gguf *g, const char *key, int64_t *out);
il_status il_gguf_get_f32(const il_gguf *g, const char *key, float *out);
il_status il_gguf_get_bool(const il_gguf *g, const char *key, bool *out);
il_status il_gguf_get_str(const il_gguf *g, const char *key, il_gguf_str *out);

/* Arrays: element type and count; for fixed-size element types `data` points at the packed
 * little-endian elements in the mapping. For string arrays use il_gguf_arr_str (O(1) each, an
 * offset index is built at open). Nested arrays: data is NULL; they are validated and kept
 * for round trips but have no typed accessor. */
il_status il_gguf_get_arr(const il_gguf *g, const char *key, il_gguf_type *elem_type, uint64_t *n,
                          const void **data);
il_status il_gguf_arr_str(const il_gguf *g, const char *key, uint64_t i, il_gguf_str *out);

/* Raw value bytes of entry i (the value only, as stored after the type field) for copying. */
void il_gguf_kv_raw(const il_gguf *g, int64_t i, const void **data, size_t *size);

/* ---- tensors ---- */
int64_t il_gguf_tensor_count(const il_gguf *g);
const il_gguf_tensor *il_gguf_tensor_at(const il_gguf *g, int64_t i);
/* NULL when absent. */
const il_gguf_tensor *il_gguf_find_tensor(const il_gguf *g, const char *name);

#endif
