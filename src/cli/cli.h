/* cli/cli: what every subcommand shares: exit codes, error printing, the command table.
 *
 * Exit codes of every command (documented in docs/cli.md and `inferlab --help`):
 *   0  success
 *   1  runtime failure (device error, internal error)
 *   64 usage error: unknown flag, bad flag value, missing argument
 *   65 malformed input data (a GGUF or checkpoint that fails validation)
 *   66 input not found or unreadable
 *   69 unsupported (tensor type, architecture, feature)
 *   71 out of memory (with a report by category)
 *   73 an output file cannot be created or written (checked before the work starts)
 * `doctor` additionally uses 1 (warnings) and 2 (failures) for its verdicts.
 * Only this layer may call exit().
 */
#ifndef IL_CLI_CLI_H
#define IL_CLI_CLI_H

#include "core/status.h"

enum {
  IL_EXIT_OK = 0,
  IL_EXIT_FAILURE = 1,
  IL_EXIT_USAGE = 64,
  IL_EXIT_DATA = 65,
  IL_EXIT_NOINPUT = 66,
  IL_EXIT_UNSUPPORTED = 69,
  IL_EXIT_OOM = 71,
  IL_EXIT_CANTCREAT = 73,
  IL_EXIT_INTERRUPTED = 130, /* 128 + SIGINT, as shells report it: partial results were kept */
};

/* Maps a status to the exit code above. */
int il_cli_exit_code(il_status s);
/* Prints "inferlab CMD: error: DETAIL" (or the status message when no detail) to stderr and
 * returns the exit code for s. */
int il_cli_fail(const char *cmd, il_status s);
/* il_cli_fail for a model that failed to open: when the file is not a GGUF but a valid
 * llama2.c checkpoint, also says how to convert it. */
int il_cli_fail_model(const char *cmd, const char *model, il_status s);
/* Prints "inferlab CMD: FMT" plus a hint to run --help, returns IL_EXIT_USAGE. */
int il_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes the startup timeline as JSON to path (--startup-json; core/outfile rules). */
typedef struct il_startup il_startup;
il_status il_cli_write_startup_json(const char *path, const il_startup *s);
/* Every subcommand: int il_cli_NAME(int argc, char **argv), argv[0] being the command name. */
#define IL__CLI_DECL(name, fn, summary) int fn(int argc, char **argv);
#include "cli/commands.def"
#undef IL__CLI_DECL

#endif
