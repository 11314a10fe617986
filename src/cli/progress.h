/* cli/progress: "inferlab convert: generating builtin:1b ... 3.5 s" on stderr while a step that
 * may take seconds runs, refreshed 4 times a second from a helper thread, only when stderr is a
 * terminal and only once the step has taken a second; erased when it ends. One at a time.
 * Not for: per-repetition progress (bench and experiment print their own). */
#ifndef IL_CLI_PROGRESS_H
#define IL_CLI_PROGRESS_H

/* The line's text, printf-style ("inferlab run: loading %s", path). Can't fail (no thread: no line). */
void il_cli_progress_start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Changes the running line's text (the elapsed time goes on from start): for a step made of
 * parts ("inferlab quant: 40% (blk.3.ffn_up.weight)"). Nothing when no line was started. */
void il_cli_progress_update(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Stops the line and erases it. Safe to call when nothing was started. */
void il_cli_progress_stop(void);
/* While a progress line may be on the terminal: a SIGINT or SIGTERM that would end the process
 * (their handlers are the default) first ends the line, so the shell's prompt or the next
 * output does not join it; then the signal ends the process as before. Only on a terminal.
 * Pairs nest once; il_cli_progress_start/stop use them. */
void il_cli_progress_guard_begin(void);
void il_cli_progress_guard_end(void);

#endif
