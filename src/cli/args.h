/* cli/args: one flag parser for every command.
 *
 * Engine options come from the il_config table (engine/config.h), so `--threads 4`, `-t 4`,
 * `--threads=4` and a `threads = 4` line in a --config file all go through il_config_set.
 * A command adds its own flags (output path, token list) as il_cli_flag entries. --config
 * FILE is applied first wherever it appears, so flags always override the file. `--` ends the
 * options; everything after it is positional.
 */
#ifndef IL_CLI_ARGS_H
#define IL_CLI_ARGS_H

#include <stdbool.h>

#include "engine/config.h"
#include "engine/request.h"

typedef struct {
  const char *name;   /* long name, without -- */
  char short_flag;    /* 0 = none */
  bool has_arg;
  const char **value; /* set for flags with an argument */
  bool *set;          /* set to true when the flag is present (optional for has_arg) */
} il_cli_flag;

/* Parses argv[1..] (argv[0] is the command name). Positional arguments are collected into
 * pos (at most max_pos; more is a usage error). Returns 0 on success, or the exit code to
 * return (usage errors are printed). When cfg is NULL no option of the table is accepted; when
 * req is NULL the request options (prompt, sampling, n-predict: engine/request.h) are not. */
int il_cli_parse(const char *cmd, int argc, char **argv, il_config *cfg, il_request_opts *req, const il_cli_flag *flags,
                 int n_flags, const char **pos, int max_pos, int *n_pos);
/* Edits (insertions, deletions, substitutions, adjacent swaps) between a and b. */
size_t il_cli_edit_distance(const char *a, const char *b);
/* The candidate nearest to word when it is near enough to be a typo of it (at most a third of
 * its letters, one for short words), else NULL: the "did you mean" of usage errors. */
const char *il_cli_suggest(const char *word, const char *const *cands, int n);
/* A duration as every command's -i/--interval takes it: "500ms", "2s", "1.5s", or a bare
 * number of seconds -> milliseconds, rounded. -1 when malformed or outside min_ms..1 hour.
 * *bare (may be NULL) says whether the text had no unit. */
int il_cli_parse_duration_ms(const char *text, int min_ms, bool *bare);
/* Prints the engine options table (for --help), only those named in `names` (comma list), or
 * all when names is NULL. */
void il_cli_print_options(FILE *f, const char *names);
/* Reads all of f into a fresh NUL-terminated buffer *out (free with il_mem_free); *n its
 * length without the NUL. Errors: IL_ERR_IO naming `name`, IL_ERR_OOM; *out is NULL then. */
il_status il_cli_read_all(FILE *f, const char *name, char **out, size_t *n);
/* Prints the peak memory of the host space by category to f. */
void il_cli_print_memory(FILE *f);

#endif
