/* backend/cudamod: finds and loads the CUDA module, hands it the host table. See cudamod.h. */
#include "backend/cudamod.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dl.h"
#include "core/quant.h"
#include "il_build_info.h"

static pthread_once_t il__once = PTHREAD_ONCE_INIT;
static const il_cudamod_module *il__mod;
static il_dl il__lib;
static char il__err[2048];
static char il__path[PATH_MAX];

static const il_cudamod_host il__host = {
    .abi = IL_CUDAMOD_ABI,
    .size = sizeof(il_cudamod_host),
    .error = il_error,
    .error_wrap = il_error_wrap,
    .error_detail = il_error_detail,
    .dtype_name = il_dtype_name,
    .tensor_row_bytes = il_tensor_row_bytes,
    .tensor_span = il_tensor_span,
    .mem_alloc = il_mem_alloc,
    .mem_calloc = il_mem_calloc,
    .mem_free = il_mem_free,
    .mem_host = il_mem_host,
    .mem_space_new = il_mem_space_new,
    .mem_space_free = il_mem_space_free,
    .mem_space_reserve = il_mem_space_reserve,
    .mem_space_release = il_mem_space_release,
    .mem_record_oom = il_mem_record_oom,
    .mem_record_oom_device = il_mem_record_oom_device,
    .mem_format_bytes = il_mem_format_bytes,
    .caching_new = il_caching_new,
    .caching_destroy = il_caching_destroy,
    .caching_alloc = il_caching_alloc,
    .caching_free = il_caching_free,
    .caching_block_ptr = il_caching_block_ptr,
    .caching_block_size = il_caching_block_size,
    .caching_empty_cache = il_caching_empty_cache,
    .caching_stats_get = il_caching_stats_get,
    .caching_snapshot_take = il_caching_snapshot_take,
    .caching_last_oom = il_caching_last_oom,
    .dequantize_row = il_dequantize_row,
    .quantize_row = il_quantize_row,
};

/* Appends a then b to the message of why the module did not load. */
static void il__append(const char *a, const char *b) {
  size_t l = strlen(il__err);
  if (l < sizeof il__err) snprintf(il__err + l, sizeof il__err - l, "%s%s", a, b);
}

/* Tries one path; true when the module is loaded and accepted. */
static bool il__try(const char *path) {
  il_dl h;
  if (il_dl_open(&h, path) != IL_OK) {
    il__append(il__err[0] ? "; " : "", il_dl_error(&h));
    return false;
  }
  il_cudamod_entry_fn entry;
  if (il_dl_sym(&h, IL_CUDAMOD_ENTRY, (void **)&entry) != IL_OK) {
    il__append(il__err[0] ? "; " : "", il_dl_error(&h));
    il_dl_close(&h);
    return false;
  }
  char why[512] = "";
  const il_cudamod_module *m = entry(&il__host, why, sizeof why);
  if (!m || m->abi != IL_CUDAMOD_ABI || m->ops_version != IL_BACKEND_OPS_VERSION) {
    char msg[700];
    if (!m) snprintf(msg, sizeof msg, "%s refused this inferlab: %s", path, why);
    else
      snprintf(msg, sizeof msg, "%s is module ABI %u with backend ops version %u; this inferlab needs ABI %d, ops %d",
               path, m->abi, m->ops_version, IL_CUDAMOD_ABI, IL_BACKEND_OPS_VERSION);
    il__append(il__err[0] ? "; " : "", msg);
    il_dl_close(&h);
    return false;
  }
  il__lib = h;
  il__mod = m;
  snprintf(il__path, sizeof il__path, "%s", path);
  il__err[0] = 0;
  return true;
}

/* dir of `file` + sub + IL_CUDAMOD_FILE into out (sub: "/" beside it, or "/../lib/" for an
 * installed bin/inferlab); false when it does not fit. */
static bool il__beside(const char *file, const char *sub, char *out, size_t n) {
  const char *slash = strrchr(file, '/');
  if (!slash) return false;
  int w = snprintf(out, n, "%.*s%s%s", (int)(slash - file), file, sub, IL_CUDAMOD_FILE);
  return w > 0 && (size_t)w < n;
}

static void il__load(void) {
  const char *env = getenv("INFERLAB_CUDA_MODULE");
  if (env && *env) {
    if (!il__try(env)) {
      char msg[sizeof il__err];
      snprintf(msg, sizeof msg, "%s", il__err);
      snprintf(il__err, sizeof il__err, "INFERLAB_CUDA_MODULE=%.200s: %.1800s", env, msg);
    }
    return;
  }
  /* beside the executable (the build tree), in the install's library directory next to its bin/
   * (cmake --install puts the module beside libinferlab.so), beside the library this code is in */
  char exe[PATH_MAX], cand[PATH_MAX], tried[3][PATH_MAX] = {"", "", ""};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    if (il__beside(exe, "/", cand, sizeof cand)) {
      snprintf(tried[0], sizeof tried[0], "%s", cand);
      if (access(cand, F_OK) == 0 && il__try(cand)) return;
    }
    if (il__beside(exe, "/../" IL_INSTALL_LIBDIR "/", cand, sizeof cand)) {
      snprintf(tried[1], sizeof tried[1], "%s", cand);
      if (access(cand, F_OK) == 0 && il__try(cand)) return;
    }
  }
  char self[PATH_MAX];
  if (il_dl_name_of((void *)il_cudamod_get, self, sizeof self) && il__beside(self, "/", cand, sizeof cand) &&
      strcmp(cand, tried[0])) {
    snprintf(tried[2], sizeof tried[2], "%s", cand);
    if (access(cand, F_OK) == 0 && il__try(cand)) return;
  }
  if (!il__err[0]) { /* nothing was there to load */
    snprintf(il__err, sizeof il__err, "the CUDA module %s is not installed (looked for %.600s%s%.600s%s%.600s); set "
             "INFERLAB_CUDA_MODULE to its path", IL_CUDAMOD_FILE, tried[0][0] ? tried[0] : "(no executable path)",
             tried[1][0] ? ", " : "", tried[1], tried[2][0] ? ", " : "", tried[2]);
  }
}

const il_cudamod_module *il_cudamod_get(void) {
  pthread_once(&il__once, il__load);
  return il__mod;
}

const char *il_cudamod_error(void) {
  pthread_once(&il__once, il__load);
  return il__err;
}

const char *il_cudamod_path(void) {
  pthread_once(&il__once, il__load);
  return il__path;
}
