/* model/export: model -> GGUF in a chosen type. */
#include "model/export.h"

#include <string.h>

#include "core/quant.h"
#include "format/gguf.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "model/llama.h"

/* Converts one tensor into a new buffer (staging category) when it should be converted. */
static il_status il__convert_tensor(const il_gguf_tensor *t, il_dtype type, void **out, uint64_t *nbytes) {
  *out = NULL;
  const int64_t n_in = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
  size_t row_out = il_dtype_row_size(type, n_in), row_in = il_dtype_row_size(t->type, n_in);
  char *dst = il_mem_alloc(IL_MEM_STAGING, row_out * (size_t)rows, t->name);
  float *tmp = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * (size_t)n_in, "conversion row");
  il_status st = dst && tmp ? IL_OK : IL_ERR_OOM;
  for (int64_t r = 0; st == IL_OK && r < rows; r++) {
    st = il_dequantize_row(t->type, (const char *)t->data + (size_t)r * row_in, tmp, n_in);
    if (st == IL_OK) st = il_quantize_row(type, tmp, dst + (size_t)r * row_out, n_in);
  }
  il_mem_free(tmp);
  if (st != IL_OK) {
    il_mem_free(dst);
    return il_error_wrap(st, "tensor '%s': ", t->name);
  }
  *out = dst;
  *nbytes = row_out * (size_t)rows;
  return IL_OK;
}

il_status il_export_gguf(const char *src, il_dtype type, const char *out_path, int n_threads, FILE *notes,
                         il_export_stats *stats) {
  memset(stats, 0, sizeof *stats);
  if (!il_quantize_supported(type))
    return il_error(IL_ERR_UNSUPPORTED, "--type %s: writing this type is not supported", il_dtype_name(type));
  const bool builtin = il_builtin_is(src);
  il_model *m = NULL;
  /* a built-in model is generated directly in the target type where its shapes allow */
  IL_TRY(builtin ? il_builtin_open(src, il_dtype_name(type), n_threads, &m) : il_model_open_gguf(src, &m));
  il_gguf_writer *w = NULL;
  void **bufs = il_mem_calloc(IL_MEM_OTHER, sizeof(void *) * (size_t)(m->n_tensors ? m->n_tensors : 1), "export");
  il_status st = bufs ? il_gguf_writer_new(&w) : IL_ERR_OOM;
  if (st == IL_OK && builtin) st = il_builtin_write_metadata(m, w, type);
  if (st == IL_OK && !builtin) {
    if (il_gguf_alignment(m->gguf) != IL_GGUF_DEFAULT_ALIGNMENT)
      st = il_gguf_writer_set_alignment(w, il_gguf_alignment(m->gguf));
    for (int64_t i = 0; st == IL_OK && i < il_gguf_kv_count(m->gguf); i++) {
      if (!strcmp(il_gguf_key(m->gguf, i), "general.file_type"))
        st = il_gguf_writer_set_u32(w, "general.file_type", il_dtype_file_type(type));
      else
        st = il_gguf_writer_copy_kv(w, m->gguf, i);
    }
    if (st == IL_OK && il_gguf_find_key(m->gguf, "general.file_type") < 0)
      st = il_gguf_writer_set_u32(w, "general.file_type", il_dtype_file_type(type));
  }
  for (int64_t i = 0; st == IL_OK && i < m->n_tensors; i++) {
    const il_gguf_tensor *t = &m->tensors[i];
    const void *data = t->data;
    uint64_t nbytes = t->nbytes;
    il_dtype out_type = t->type;
    if (t->n_dims >= 2 && t->type != type) {
      if (il_dtype_row_size(type, t->ne[0]) == 0) {
        if (notes)
          fprintf(notes, "note: %s: row length %lld is not a multiple of the %s block size (%u); kept as %s\n",
                  t->name, (long long)t->ne[0], il_dtype_name(type), il_dtype_get(type)->blck,
                  il_dtype_name(t->type));
      } else {
        st = il__convert_tensor(t, type, &bufs[i], &nbytes);
        data = bufs[i];
        out_type = type;
      }
    }
    if (st != IL_OK) break;
    if (t->n_dims >= 2 && out_type == type) stats->n_converted++;
    else if (t->n_dims >= 2) stats->n_kept++;
    stats->bytes_out += nbytes;
    st = il_gguf_writer_add_tensor(w, t->name, out_type, t->n_dims, t->ne, data, nbytes);
  }
  if (st == IL_OK) st = il_gguf_writer_write(w, out_path);
  il_gguf_writer_free(w);
  for (int64_t i = 0; bufs && i < m->n_tensors; i++) il_mem_free(bufs[i]);
  il_mem_free(bufs);
  il_model_free(m);
  return st;
}
