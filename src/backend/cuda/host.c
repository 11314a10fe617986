/* backend/cuda/host: the library functions the module calls, forwarded to the host's copy.
 *
 * The module is compiled against the ordinary headers (core/status.h, memory/mem.h, ...), so
 * its code reads like the rest of inferlab; this file defines those functions inside the
 * module as calls through the table the host passed at load (backend/cudamod.h). They have
 * hidden visibility and the module links with -Bsymbolic, so they never replace the
 * executable's, and every error detail and memory counter lands in the host's one copy.
 * Only the functions the module uses are here; the link (--no-undefined) fails on any other.
 * Not for: CUDA (cuda.c and the .cu files).
 */
#include "backend/cuda/glue.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/quant.h"

const il_cudamod_host *il__cu_host;

bool il__cu_host_accept(const il_cudamod_host *h, char *err, size_t nerr) {
  if (!h || h->abi != IL_CUDAMOD_ABI || h->size < sizeof(il_cudamod_host)) {
    snprintf(err, nerr, "host table ABI %u size %u; this module needs ABI %d size %zu", h ? h->abi : 0,
             h ? h->size : 0, IL_CUDAMOD_ABI, sizeof(il_cudamod_host));
    return false;
  }
  il__cu_host = h;
  return true;
}

il_status il_error(il_status code, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return il__cu_host->error(code, "%s", buf);
}

il_status il_error_wrap(il_status code, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return il__cu_host->error_wrap(code, "%s", buf);
}

const char *il_error_detail(void) { return il__cu_host->error_detail(); }
const char *il_dtype_name(uint32_t type_id) { return il__cu_host->dtype_name(type_id); }
size_t il_tensor_row_bytes(il_dtype type, int64_t cols) { return il__cu_host->tensor_row_bytes(type, cols); }
size_t il_tensor_span(const il_tensor *t) { return il__cu_host->tensor_span(t); }
void *il_mem_alloc(il_mem_category cat, size_t bytes, const char *what) { return il__cu_host->mem_alloc(cat, bytes, what); }
void *il_mem_calloc(il_mem_category cat, size_t bytes, const char *what) {
  return il__cu_host->mem_calloc(cat, bytes, what);
}
void il_mem_free(void *p) { il__cu_host->mem_free(p); }
il_mem_space *il_mem_host(void) { return il__cu_host->mem_host(); }
il_mem_space *il_mem_space_new(const char *name, size_t limit) { return il__cu_host->mem_space_new(name, limit); }
void il_mem_space_free(il_mem_space *space) { il__cu_host->mem_space_free(space); }
il_status il_mem_space_reserve(il_mem_space *space, il_mem_category cat, size_t bytes, const char *what) {
  return il__cu_host->mem_space_reserve(space, cat, bytes, what);
}
void il_mem_space_release(il_mem_space *space, il_mem_category cat, size_t bytes) {
  il__cu_host->mem_space_release(space, cat, bytes);
}
void il_mem_record_oom(const il_mem_space *space, il_mem_category cat, size_t bytes, const char *what, const char *why,
                       size_t largest_free) {
  il__cu_host->mem_record_oom(space, cat, bytes, what, why, largest_free);
}
void il_mem_record_oom_device(size_t reserved, size_t largest_free, bool fragmentation) {
  il__cu_host->mem_record_oom_device(reserved, largest_free, fragmentation);
}
const char *il_mem_format_bytes(size_t bytes, char *buf, size_t n) { return il__cu_host->mem_format_bytes(bytes, buf, n); }
il_status il_caching_new(const il_caching_opts *opts, il_caching **out) { return il__cu_host->caching_new(opts, out); }
void il_caching_destroy(il_caching *a) { il__cu_host->caching_destroy(a); }
il_status il_caching_alloc(il_caching *a, il_mem_category cat, size_t bytes, const char *name, il_caching_block **out) {
  return il__cu_host->caching_alloc(a, cat, bytes, name, out);
}
void il_caching_free(il_caching *a, il_caching_block *b) { il__cu_host->caching_free(a, b); }
void *il_caching_block_ptr(const il_caching_block *b) { return il__cu_host->caching_block_ptr(b); }
size_t il_caching_block_size(const il_caching_block *b) { return il__cu_host->caching_block_size(b); }
size_t il_caching_empty_cache(il_caching *a) { return il__cu_host->caching_empty_cache(a); }
void il_caching_stats_get(il_caching *a, il_caching_stats *out) { il__cu_host->caching_stats_get(a, out); }
il_status il_caching_snapshot_take(il_caching *a, il_caching_snapshot *out) {
  return il__cu_host->caching_snapshot_take(a, out);
}
bool il_caching_last_oom(il_caching *a, il_caching_oom *out) { return il__cu_host->caching_last_oom(a, out); }
il_status il_dequantize_row(il_dtype t, const void *src, float *dst, int64_t n) {
  return il__cu_host->dequantize_row(t, src, dst, n);
}
il_status il_quantize_row(il_dtype t, const float *src, void *dst, int64_t n) {
  return il__cu_host->quantize_row(t, src, dst, n);
}
