/* cli/main: `inferlab COMMAND ...` dispatch, --help and --version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/cudamod.h"
#include "backend/registry.h"
#include "core/log.h"
#include "engine/startup.h"
#include "sys/cpuid.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "format/llama2c.h"
#include "il_build_info.h"

typedef struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} il__command;

static const il__command il__commands[] = {
#define IL__CLI_DECL(name, fn, summary) {name, fn, summary},
#include "cli/commands.def"
#undef IL__CLI_DECL
};

int il_cli_exit_code(il_status s) {
  switch (s) {
    case IL_OK: return IL_EXIT_OK;
    case IL_ERR_INVALID_ARG: return IL_EXIT_USAGE;
    case IL_ERR_FORMAT: return IL_EXIT_DATA;
    case IL_ERR_IO:
    case IL_ERR_NOT_FOUND: return IL_EXIT_NOINPUT;
    case IL_ERR_UNSUPPORTED: return IL_EXIT_UNSUPPORTED;
    case IL_ERR_OOM: return IL_EXIT_OOM;
    case IL_ERR_OUTPUT: return IL_EXIT_CANTCREAT;
    default: return IL_EXIT_FAILURE;
  }
}

int il_cli_fail(const char *cmd, il_status s) {
  const char *d = il_error_detail();
  fprintf(stderr, "inferlab %s: error: %s\n", cmd, d && *d ? d : il_status_message(s));
  return il_cli_exit_code(s);
}

int il_cli_fail_model(const char *cmd, const char *model, il_status s) {
  int code = il_cli_fail(cmd, s);
  il_llama2c_config c;
  if (s == IL_ERR_FORMAT && model && il_llama2c_read_config(model, &c) == IL_OK)
    fprintf(stderr,
            "inferlab %s: %s is a llama2.c checkpoint (dim %d, %d layers, vocab %d), not a GGUF file; convert it "
            "with:\n  inferlab convert --from llama2c %s --tokenizer tokenizer.bin -o model.gguf\n",
            cmd, model, c.dim, c.n_layers, c.vocab_size, model);
  il_error_clear();
  return code;
}

int il_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "inferlab %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun 'inferlab %s --help' for usage.\n", cmd);
  return IL_EXIT_USAGE;
}

static void il__print_version(void) {
  printf("inferlab %s (%s build)\n", IL_VERSION_STRING, IL_BUILD_TYPE);
  printf("compiler:    %s\n", IL_BUILD_COMPILER);
  printf("simd:        compiled %s; detected %s; using %s\n", il_backend_cpu_isa_compiled(),
         il_isa_name(il_cpu_isa_detected()), il_backend_cpu_isa_default());
#if IL_HAVE_CUDA
  printf("cuda:        built (%s%s%s)\n", IL_BUILD_CUDA_VERSION,
         *IL_BUILD_CUDA_ARCHS ? ", sm " : "", IL_BUILD_CUDA_ARCHS);
  const il_cudamod_module *m = il_cudamod_get();
  if (!m) {
    printf("cuda module: not loaded: %s\n", il_cudamod_error());
    return;
  }
  int rt = 0, drv = 0;
  m->versions(&rt, &drv);
  printf("cuda module: %s (runtime %d.%d, driver %s)\n", il_cudamod_path(), rt / 1000, rt % 1000 / 10,
         drv ? "present" : "none");
  il_cudamod_device devs[16];
  char err[256] = "";
  const int n = m->devices(devs, 16, err, sizeof err);
  if (n < 0) printf("cuda devices: none usable (%s)\n", err);
  else if (n == 0) printf("cuda devices: none visible\n");
  for (int i = 0; i < n && i < 16; i++) {
    char ptx[48] = "";
    if (!devs[i].sass && devs[i].ptx) snprintf(ptx, sizeof ptx, "PTX %d, JIT-compiled at first use", devs[i].ptx);
    printf("cuda device %d: %s sm_%d%d: %s\n", i, devs[i].name, devs[i].cc_major, devs[i].cc_minor,
           devs[i].sass ? "SASS" : devs[i].ptx ? ptx : "no kernel image (rebuild with -DIL_CUDA_ARCHS including it)");
  }
#else
  printf("cuda:        not built (CPU-only build)\n");
#endif
}

static void il__print_help(FILE *f) {
  fprintf(f,
          "inferlab: self-hosted inference runtime and measurement lab\n\n"
          "usage: inferlab COMMAND [OPTIONS]\n"
          "       inferlab COMMAND --help\n"
          "       inferlab --version\n\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof il__commands / sizeof il__commands[0]; i++)
    fprintf(f, "  %-12s %s\n", il__commands[i].name, il__commands[i].summary);
  fprintf(f,
          "\nModels: -m FILE.gguf, or builtin:tiny (default) / builtin:1b, generated in memory.\n"
          "Architectures: llama, mistral, qwen2, qwen3, phi3, gemma3, qwen3moe (docs/model.md lists the built-in ones).\n"
          "\nexit codes: 0 ok, 1 runtime failure, 64 usage error, 65 malformed input,\n"
          "            66 input not found, 69 unsupported, 71 out of memory\n"
          "            (doctor: 0 all OK, 1 warnings, 2 failures)\n"
          "docs: docs/cli.md and one page per command in docs/\n");
}

/* The library's notes, on stderr. */
static void il__log_stderr(void *ud, il_log_level level, const char *msg) {
  (void)ud, (void)level;
  fprintf(stderr, "inferlab: %s\n", msg);
}

int main(int argc, char **argv) {
  il_startup_main(); /* the end of the startup timeline's "process" phase */
  il_log_set(il__log_stderr, NULL);
  if (argc < 2) {
    il__print_help(stderr);
    return IL_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") && argc >= 3) { /* `inferlab help run` is `inferlab run --help` */
    for (size_t i = 0; i < sizeof il__commands / sizeof il__commands[0]; i++)
      if (!strcmp(argv[2], il__commands[i].name)) {
        char *hargv[] = {argv[2], "--help", NULL};
        return il__commands[i].fn(2, hargv);
      }
    cmd = argv[2]; /* an unknown command: said below, with the nearest one */
  } else if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    il__print_help(stdout);
    return IL_EXIT_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
    il__print_version();
    return IL_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof il__commands / sizeof il__commands[0]; i++)
    if (!strcmp(cmd, il__commands[i].name)) return il__commands[i].fn(argc - 1, argv + 1);
  const char *names[sizeof il__commands / sizeof il__commands[0]];
  for (size_t i = 0; i < sizeof il__commands / sizeof il__commands[0]; i++) names[i] = il__commands[i].name;
  const char *near = il_cli_suggest(cmd, names, (int)(sizeof names / sizeof names[0]));
  if (near) {
    fprintf(stderr, "inferlab: unknown command '%s'; did you mean '%s'?\nRun 'inferlab --help' for the commands.\n", cmd, near);
    return IL_EXIT_USAGE;
  }
  fprintf(stderr, "inferlab: unknown command '%s'\n", cmd);
  il__print_help(stderr);
  return IL_EXIT_USAGE;
}
