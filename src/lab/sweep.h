/* lab/sweep: what one measurement runs (a point: the engine config plus the workload), and
 * the cartesian product of comma lists that bench sweeps over (`--batch 1,4,16 --threads 2,4`).
 *
 * The lab speaks about a workload in three words that are not engine option names, mapped
 * here once so bench, experiment and the docs agree:
 *   batch   parallel sequences, each with its own sequence id, decoded together
 *           -> the engine option n-seq
 *   gen     tokens generated per sequence -> the engine option n-predict
 *   prompt  prompt tokens per sequence (a count; the lab feeds synthetic token ids)
 *   ubatch  the engine's own `batch` option (max tokens per forward pass), renamed in the lab
 *           because `batch` means parallel sequences here
 * Every other name is an engine option from engine/config.h and is set with il_config_set, so
 * validation and error messages are the engine's own; of the request options only n-predict
 * (gen) means something to a measurement that feeds synthetic tokens and never samples. A
 * point's config is a complete il_config: il_config_write of it plus an `n-predict` line is a
 * config file that reproduces the point (the prompt token count, which is not an option, is
 * written as a comment by the callers).
 * Combinations are enumerated with the first axis varying slowest, like nested loops in the
 * order the options were given.
 * Not for: running anything (lab/bench), or parsing argv (cli/).
 */
#ifndef IL_LAB_SWEEP_H
#define IL_LAB_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "engine/config.h"

#define IL_SWEEP_MAX_AXES 32
#define IL_SWEEP_MAX_VALUES 64
#define IL_SWEEP_MAX_COMBINATIONS 4096

typedef struct {
  il_config cfg; /* engine options; n_seq = parallel sequences */
  int gen;       /* tokens generated per sequence: the request option n-predict */
  int prompt;    /* prompt tokens per sequence (>= 1) */
} il_sweep_point;

typedef struct {
  char name[48]; /* the lab name as written: "batch", "threads" */
  int n;
  char *values[IL_SWEEP_MAX_VALUES]; /* owned */
} il_sweep_axis;

typedef struct {
  int n_axes;
  il_sweep_axis axes[IL_SWEEP_MAX_AXES];
} il_sweep;

/* Defaults of a point: il_config_defaults, gen = 128 (n-predict's default) and prompt = 128. Can't fail. */
void il_sweep_point_defaults(il_sweep_point *p);
/* The engine option a lab name sets ("batch" -> "n-seq"), "prompt" for the prompt count, or
 * NULL for an unknown name. Engine option names (and their underscore spellings) map to
 * their canonical name. */
const char *il_sweep_key(const char *name);
/* Sets one lab name on a point. IL_ERR_INVALID_ARG naming `where` for an unknown name or a
 * bad value (the engine's message for engine options). */
il_status il_sweep_set(il_sweep_point *p, const char *name, const char *value, const char *where);
/* Formats the value of lab name `name` in p into buf ("" for an unknown name). */
void il_sweep_get(const il_sweep_point *p, const char *name, char *buf, size_t n);

/* Starts an empty sweep (one combination: the base point). Can't fail. */
void il_sweep_init(il_sweep *s);
/* Adds an axis from a comma list ("1,4,16"); items are trimmed; each is validated against
 * `base` with il_sweep_set so a bad value fails here, naming `where` and the item. Errors:
 * IL_ERR_INVALID_ARG for an unknown name, an empty item, a name given twice, too many axes,
 * values or combinations; IL_ERR_OOM. On error s is unchanged. */
il_status il_sweep_add(il_sweep *s, const il_sweep_point *base, const char *name, const char *list, const char *where);
/* Number of combinations: the product of the axis sizes (1 for no axes). */
size_t il_sweep_count(const il_sweep *s);
/* Builds combination `index` (0 <= index < count) from base into *out. When label is not
 * NULL it receives "name=value name=value" for the axes with more than one value ("" when
 * none). The values were validated by il_sweep_add, so this fails only for combinations that
 * are invalid together (none today) with IL_ERR_INVALID_ARG. */
il_status il_sweep_point_at(const il_sweep *s, const il_sweep_point *base, size_t index, il_sweep_point *out,
                            char *label, size_t label_n);
/* The axis that charts put on the x axis: the one with the most values (the first of equals),
 * or -1 when no axis has more than one value. */
int il_sweep_main_axis(const il_sweep *s);
/* Releases the value strings. Safe on an initialized or zeroed sweep. */
void il_sweep_free(il_sweep *s);

#endif
