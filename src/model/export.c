/* model/export: model -> GGUF in a chosen type. */
#include "model/export.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/quant.h"
#include "memory/mem.h"
#include "model/builtin.h"

il_status il_export_open(const char *src, const char *wtype, int n_threads, il_model **out) {
  if (il_builtin_is(src)) return il_builtin_open(src, wtype, n_threads, out);
  return il_model_open_gguf(src, out);
}

il_status il_export_metadata(const il_model *m, bool builtin, il_gguf_writer *w, uint32_t file_type) {
  if (builtin) {
    IL_TRY(il_builtin_write_metadata(m, w, m->main_type));
  } else {
    if (il_gguf_alignment(m->gguf) != IL_GGUF_DEFAULT_ALIGNMENT)
      IL_TRY(il_gguf_writer_set_alignment(w, il_gguf_alignment(m->gguf)));
    for (int64_t i = 0; i < il_gguf_kv_count(m->gguf); i++) IL_TRY(il_gguf_writer_copy_kv(w, m->gguf, i));
  }
  /* llama-quantize's order: both keys removed, then appended */
  il_gguf_writer_remove_key(w, "general.quantization_version");
  il_gguf_writer_remove_key(w, "general.file_type");
  IL_TRY(il_gguf_writer_set_u32(w, "general.quantization_version", 2));
  return il_gguf_writer_set_u32(w, "general.file_type", file_type);
}

/* ---- one tensor, rows shared among threads ---- */

typedef struct {
  const il_gguf_tensor *t;
  il_dtype type;
  char *dst;
  int64_t r0, r1;     /* rows [r0, r1) */
  bool measure_only;  /* pass 1 of the statistics: sums of x only */
  double mean, sigma; /* from pass 1, for the outlier count */
  /* results */
  double sx, sx2, se2, max_abs;
  int64_t n_out;
  il_status st;
  char msg[256];
} il__conv_job;

static il_status il__nonfinite(int64_t r, int64_t c, float v) {
  return il_error(IL_ERR_FORMAT, "row %lld, column %lld is %s", (long long)r, (long long)c, isnan(v) ? "nan" : "inf");
}

static void *il__conv_rows(void *arg) {
  il__conv_job *j = arg;
  const il_gguf_tensor *t = j->t;
  const int64_t n = t->ne[0];
  const size_t row_in = il_dtype_row_size(t->type, n), row_out = il_dtype_row_size(j->type, n);
  float *x = il_mem_alloc(IL_MEM_WORKSPACE, sizeof(float) * (size_t)n * 2, "conversion rows");
  float *y = x ? x + n : NULL;
  const bool quantized_out = il_dtype_get(j->type)->quantized;
  il_status st = x ? IL_OK : IL_ERR_OOM;
  for (int64_t r = j->r0; st == IL_OK && r < j->r1; r++) {
    st = il_dequantize_row(t->type, (const char *)t->data + (size_t)r * row_in, x, n);
    /* block types check for NaN/Inf themselves (il_quantize_row); float targets and the
     * statistics pass need it here */
    for (int64_t c = 0; st == IL_OK && (j->measure_only || !quantized_out) && c < n; c++)
      if (!isfinite(x[c])) st = il__nonfinite(r, c, x[c]);
    if (st != IL_OK) break;
    if (j->measure_only) {
      for (int64_t c = 0; c < n; c++) {
        j->sx += x[c];
        j->sx2 += (double)x[c] * x[c];
      }
      continue;
    }
    char *q = j->dst + (size_t)r * row_out;
    st = il_quantize_row(j->type, x, q, n);
    if (st == IL_ERR_FORMAT && quantized_out) { /* a NaN/Inf il_quantize_row found: say where */
      int64_t c = 0;
      while (c < n && isfinite(x[c])) c++;
      if (c < n) st = il__nonfinite(r, c, x[c]);
    }
    if (st != IL_OK || j->sigma < 0) continue; /* sigma < 0: no statistics wanted */
    st = il_dequantize_row(j->type, q, y, n);
    for (int64_t c = 0; st == IL_OK && c < n; c++) {
      const double e = (double)y[c] - x[c];
      j->se2 += e * e;
      if (fabs(e) > j->max_abs) j->max_abs = fabs(e);
      if (fabs(x[c] - j->mean) > 3 * j->sigma) j->n_out++;
    }
  }
  if (st != IL_OK) snprintf(j->msg, sizeof j->msg, "%s", il_error_detail());
  j->st = st;
  il_mem_free(x);
  return NULL;
}

/* Runs the jobs on threads (the first on the calling thread); returns the first failure. */
static il_status il__conv_run(il__conv_job *jobs, int n_jobs) {
  pthread_t tid[64];
  bool started[64] = {false};
  for (int i = 1; i < n_jobs; i++) started[i] = pthread_create(&tid[i], NULL, il__conv_rows, &jobs[i]) == 0;
  il__conv_rows(&jobs[0]);
  for (int i = 1; i < n_jobs; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else il__conv_rows(&jobs[i]); /* no thread to be had: do its share here */
  }
  for (int i = 0; i < n_jobs; i++)
    if (jobs[i].st != IL_OK) return il_error(jobs[i].st, "%s", jobs[i].msg);
  return IL_OK;
}

il_status il_export_convert_tensor(const il_gguf_tensor *t, il_dtype type, int n_threads, void **out,
                                   uint64_t *nbytes, il_export_error *err) {
  *out = NULL;
  const int64_t n_in = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
  const size_t row_out = il_dtype_row_size(type, n_in);
  if (row_out == 0 || il_dtype_row_size(t->type, n_in) == 0)
    return il_error(IL_ERR_INVALID_ARG, "tensor '%s': row length %lld is not a multiple of the %s block size",
                    t->name, (long long)n_in, il_dtype_name(row_out ? t->type : type));
  char *dst = il_mem_alloc(IL_MEM_STAGING, row_out * (size_t)rows, t->name);
  if (!dst) return IL_ERR_OOM;
  int n_jobs = n_threads < 1 ? 1 : n_threads > 64 ? 64 : n_threads;
  if (n_jobs > rows) n_jobs = rows > 0 ? (int)rows : 1;
  il__conv_job jobs[64];
  double mean = 0, sigma = -1; /* -1: no statistics */
  il_status st = IL_OK;
  for (int pass = err ? 0 : 1; st == IL_OK && pass < 2; pass++) {
    for (int i = 0; i < n_jobs; i++)
      jobs[i] = (il__conv_job){.t = t, .type = type, .dst = dst, .r0 = rows * i / n_jobs,
                               .r1 = rows * (i + 1) / n_jobs, .measure_only = pass == 0, .mean = mean, .sigma = sigma};
    st = il__conv_run(jobs, n_jobs);
    if (st == IL_OK && pass == 0) {
      double sx = 0, sx2 = 0;
      for (int i = 0; i < n_jobs; i++) {
        sx += jobs[i].sx;
        sx2 += jobs[i].sx2;
      }
      const double cnt = (double)n_in * (double)rows;
      mean = cnt > 0 ? sx / cnt : 0;
      const double var = cnt > 0 ? sx2 / cnt - mean * mean : 0;
      sigma = var > 0 ? sqrt(var) : 0;
      if (err) {
        memset(err, 0, sizeof *err);
        err->rel = cnt > 0 ? sx2 / cnt : 0; /* mean x^2 for now */
      }
    }
  }
  if (st != IL_OK) {
    il_mem_free(dst);
    return il_error_wrap(st, "tensor '%s': ", t->name);
  }
  if (err) {
    double se2 = 0, max_abs = 0;
    int64_t n_out = 0;
    for (int i = 0; i < n_jobs; i++) {
      se2 += jobs[i].se2;
      n_out += jobs[i].n_out;
      if (jobs[i].max_abs > max_abs) max_abs = jobs[i].max_abs;
    }
    const double cnt = (double)n_in * (double)rows, mx2 = err->rel;
    err->rmse = cnt > 0 ? sqrt(se2 / cnt) : 0;
    err->max_abs = max_abs;
    err->rel = mx2 > 0 ? err->rmse / sqrt(mx2) : 0;
    err->snr_db = se2 > 0 ? 10.0 * log10(mx2 * cnt / se2) : INFINITY;
    err->outliers = cnt > 0 ? (double)n_out / cnt : 0;
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
  IL_TRY(il_export_open(src, builtin ? il_dtype_name(type) : NULL, n_threads, &m));
  il_gguf_writer *w = NULL;
  void **bufs = il_mem_calloc(IL_MEM_MODEL, sizeof(void *) * (size_t)(m->n_tensors ? m->n_tensors : 1), "export");
  il_status st = bufs ? il_gguf_writer_new(&w) : IL_ERR_OOM;
  if (st == IL_OK) st = il_export_metadata(m, builtin, w, il_dtype_file_type(type));
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
        st = il_export_convert_tensor(t, type, n_threads, &bufs[i], &nbytes, NULL);
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
