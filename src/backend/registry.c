/* backend/registry: backend names -> constructors. */
#include "backend/registry.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cudamod.h"
#include "backend/sim/sim.h"
#include "il_build_info.h"

const char *il_backend_cpu_isa_compiled(void) { return il_cpu_isa_compiled(); }

const char *il_backend_cpu_isa_default(void) {
  /* il__cpu_init's default choice, without starting a pool */
  il_isa isa = il_cpu_isa_best();
  const char *env = getenv("IL_ISA");
  il_isa e;
  if (env && *env && il_isa_parse(env, &e) && e < isa) isa = e;
  return il_isa_name(isa);
}

const char *il_backend_cuda_unavailable(void) {
#if IL_HAVE_CUDA
  if (il_cudamod_get()) return NULL;
  return il_cudamod_error();
#else
  return "this inferlab was built without the CUDA backend (CPU-only build: nvcc was not found or "
         "-DIL_CUDA=OFF); use --device cpu or sim:SIZE";
#endif
}

/* Whether s begins with a device name: cpu, sim or cuda, then ':', ',' or the end. */
static bool il__names_device(const char *s) {
  static const char *const names[] = {"cpu", "sim", "cuda"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const size_t k = strlen(names[i]);
    if (!strncmp(s, names[i], k) && (s[k] == ':' || s[k] == ',' || s[k] == 0)) return true;
  }
  return false;
}

il_status il_backend_list_parse(const char *spec, char item[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX], int *n) {
  *n = 0;
  if (!spec || !*spec) spec = "cpu";
  const char *start = spec;
  for (const char *p = spec;; p++) {
    if (*p && !(*p == ',' && il__names_device(p + 1))) continue;
    const size_t len = (size_t)(p - start);
    if (len == 0 || start[len - 1] == ',' || memmem(start, len, ",,", 2))
      return il_error(IL_ERR_INVALID_ARG, "--device '%s': item %d has an empty part (two commas, or one at an end)",
                      spec, *n + 1);
    if (*n == IL_BACKEND_LIST_MAX)
      return il_error(IL_ERR_INVALID_ARG, "--device '%s': more than %d devices", spec, IL_BACKEND_LIST_MAX);
    if (len >= IL_BACKEND_SPEC_MAX)
      return il_error(IL_ERR_INVALID_ARG, "--device '%s': item %d is longer than %d characters", spec, *n + 1,
                      IL_BACKEND_SPEC_MAX - 1);
    memcpy(item[*n], start, len);
    item[(*n)++][len] = 0;
    if (!*p) return IL_OK;
    start = p + 1;
  }
}

static il_status il__opened(const char *spec, il_status st, il_backend **out) {
  if (st != IL_OK || (*out)->ops->version == IL_BACKEND_OPS_VERSION) return st;
  const uint32_t v = (*out)->ops->version;
  (*out)->ops->destroy(*out);
  *out = NULL;
  return il_error(IL_ERR_UNSUPPORTED, "--device %s: its ops table is version %u; this inferlab needs version %d", spec, v,
                  IL_BACKEND_OPS_VERSION);
}

static il_status il__open(const char *spec, const il_backend_opts *opts, il_backend **out);

il_status il_backend_open(const char *spec, const il_backend_opts *opts, il_backend **out) {
  *out = NULL;
  return il__opened(spec && *spec ? spec : "cpu", il__open(spec, opts, out), out);
}

static il_status il__open(const char *spec, const il_backend_opts *opts, il_backend **out) {
  il_backend_opts dflt = {0};
  if (!opts) opts = &dflt;
  if (!spec || !*spec) spec = "cpu";
  il__cpu_opts co = {opts->threads, opts->isa, opts->repack};
  if (!strcmp(spec, "cpu")) {
    if (opts->mem_limit) il_mem_set_limit(opts->mem_limit);
    return il__cpu_backend_new(&co, out);
  }
  if (!strncmp(spec, "sim", 3) && (spec[3] == ':' || spec[3] == 0)) {
    if (spec[3] == 0) return il_error(IL_ERR_INVALID_ARG, "--device sim: give the device size, e.g. sim:4GiB");
    return il__sim_backend_new(spec, &co, opts->mem_limit, out);
  }
  if (!strncmp(spec, "cuda", 4) && (spec[4] == ':' || spec[4] == ',' || spec[4] == 0)) {
    const char *why = il_backend_cuda_unavailable();
    if (why) return il_error(IL_ERR_UNSUPPORTED, "--device %s: %s", spec, why);
    il_status st = il_cudamod_get()->open(spec, opts->mem_limit, out);
    if (st != IL_OK) return il_error_wrap(st, "--device %s: ", spec);
    return IL_OK;
  }
  return il_error(IL_ERR_INVALID_ARG, "--device: '%s' is not a device (cpu, sim:SIZE[,pcie=RATE][,ctx=SIZE], cuda[:N])",
                  spec);
}
