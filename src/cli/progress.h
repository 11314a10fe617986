/* cli/progress: "inferlab convert: generating builtin:1b ... 3.5 s" on stderr while a step that
 * may take seconds runs, refreshed 4 times a second from a helper thread, only when stderr is a
 * terminal and only once the step has taken a second; erased when it ends. One at a time.
 * Not for: per-repetition progress (bench and experiment print their own). */
#ifndef IL_CLI_PROGRESS_H
#define IL_CLI_PROGRESS_H

/* The line's text, printf-style ("inferlab run: loading %s", path). Can't fail (no thread: no line). */
void il_cli_progress_start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Stops the line and erases it. Safe to call when nothing was started. */
void il_cli_progress_stop(void);

#endif
