/* lab/watch: spawn (sys/spawn), sample, report. See watch.h. */
#include "lab/watch.h"

#include <limits.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/text.h"
#include "core/timer.h"
#include "core/jsonw.h"
#include "memory/mem.h"
#include "sys/spawn.h"

typedef struct {
  FILE *f;
  double t0;
} il__progress;

static void il__tick(void *ud, const il_usage_result *now) {
  il__progress *p = ud;
  char a[32], line[256];
  snprintf(line, sizeof line, "watch: %.1f s  rss %s", il_time_now() - p->t0,
           il_mem_format_bytes((size_t)(now->rss_peak > 0 ? now->rss_peak : 0), a, sizeof a));
  for (int i = 0; i < now->n_gpus; i++) {
    char b[32];
    il_appendf(line, sizeof line, "  gpu%d %s %d%%", now->gpus[i].index,
               il_mem_format_bytes((size_t)now->gpus[i].mem_peak, b, sizeof b), now->gpus[i].util_max);
  }
  fprintf(p->f, "\r%s\033[K", line);
  fflush(p->f);
}

/* The sampler, started on the child's pid as soon as it runs. */
typedef struct {
  const il_watch_options *o;
  il__progress *prog;
  il_usage *u;
  il_status st;
} il__watch_start;

static void il__watch_started(void *ud, pid_t pid) {
  il__watch_start *w = ud;
  const il_watch_options *o = w->o;
  il_usage_options uo = {o->nvml_lib, o->no_gpu, o->interval_ms > 0 ? o->interval_ms : 200, pid,
                         o->progress ? il__tick : NULL, w->prog, o->log_path};
  w->st = il_usage_start(&uo, &w->u);
}

il_status il_watch_run(const il_watch_options *o, char *const argv[], il_watch_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_status = -1;
  if (!argv || !argv[0] || !*argv[0]) return il_error(IL_ERR_INVALID_ARG, "watch: no command given");
  size_t used = 0;
  for (int i = 0; argv[i] && used < sizeof r->command - 1; i++) {
    int w = snprintf(r->command + used, sizeof r->command - used, "%s%s", i ? " " : "", argv[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  il__progress prog = {o->progress, il_time_now()};
  il__watch_start ws = {o, &prog, NULL, IL_OK};
  const il_spawn_opts so = {.search_path = true, .log_path = o->log_path, .ignore_interrupts = true,
                            .on_start = il__watch_started, .ud = &ws};
  il_spawn_result sr;
  il_status st = il_spawn_run(argv, &so, &sr);
  if (st != IL_OK) return st;
  r->seconds = sr.seconds;
  if (ws.u) il_usage_stop(ws.u, &r->usage);
  if (o->progress) {
    fprintf(o->progress, "\r\033[K");
    fflush(o->progress);
  }
  if (ws.st != IL_OK) return ws.st;
  if (sr.exec_failed) {
    r->exec_failed = true;
    snprintf(r->exec_error, sizeof r->exec_error, "%s: %s", argv[0], strerror(sr.exec_errno));
  }
  r->exit_status = sr.exit_status;
  r->term_signal = sr.term_signal;
  const struct rusage ru = sr.ru;
  r->peak_rss = ru.ru_maxrss >= 0 && ru.ru_maxrss <= LLONG_MAX / 1024 ? (long long)ru.ru_maxrss * 1024 : -1;
  r->user_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
  r->sys_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  return IL_OK;
}

int il_watch_exit_code(const il_watch_result *r) {
  if (r->term_signal) return 128 + r->term_signal;
  return r->exit_status >= 0 ? r->exit_status : 1;
}

/* The start as seen from outside, from the samples (so to the sampling interval). */
static void il__print_startup(const il_usage_result *u, FILE *f) {
  char a[32], line[512] = "";
  if (u->first_output_s >= 0) il_appendf(line, sizeof line, "first output at %.2f s", u->first_output_s);
  if (u->rss_t90 >= 0)
    il_appendf(line, sizeof line, "%srss +%s: half at %.2f s, 90%% at %.2f s", *line ? "; " : "",
               il_mem_format_bytes((size_t)(u->rss_peak - u->rss_first), a, sizeof a), u->rss_t50, u->rss_t90);
  if (u->gpu_t90 >= 0)
    il_appendf(line, sizeof line, "%sgpu memory +%s: first at %.2f s, 90%% at %.2f s", *line ? "; " : "",
               il_mem_format_bytes((size_t)u->gpu_grown, a, sizeof a), u->gpu_t_first, u->gpu_t90);
  if (*line) fprintf(f, "startup:       %s (from the samples, since the command started)\n", line);
}

void il_watch_print(const il_watch_result *r, FILE *f) {
  char a[32], b[32];
  fprintf(f, "command:       %s\n", r->command);
  if (r->exec_failed) fprintf(f, "exit:          could not run: %s (status %d)\n", r->exec_error, il_watch_exit_code(r));
  else if (r->term_signal) fprintf(f, "exit:          killed by signal %d (%s)\n", r->term_signal, strsignal(r->term_signal));
  else fprintf(f, "exit:          status %d\n", r->exit_status);
  fprintf(f, "duration:      %.3f s\n", r->seconds);
  fprintf(f, "cpu:           user %.3f s, sys %.3f s (%.0f%% of one core)\n", r->user_s, r->sys_s,
          r->seconds > 0 ? 100.0 * (r->user_s + r->sys_s) / r->seconds : 0.0);
  fprintf(f, "peak rss:      %s (wait4)", il_mem_format_bytes((size_t)r->peak_rss, a, sizeof a));
  if (r->usage.rss_peak >= 0)
    fprintf(f, "; sampled tree peak %s, mean %s", il_mem_format_bytes((size_t)r->usage.rss_peak, a, sizeof a),
            il_mem_format_bytes((size_t)r->usage.rss_mean, b, sizeof b));
  fprintf(f, "\nsamples:       %d\n", r->usage.n_samples);
  il_usage_print_gpu(&r->usage, f);
  il__print_startup(&r->usage, f);
}

/* Writes key: s with every byte that is not part of valid UTF-8 (raw bytes of a non-UTF-8
 * argv, a name cut mid-character) replaced by U+FFFD, so the document is always valid JSON
 * text. s is at most a few KiB here (command lines, names, messages). */
static void il__kstr_utf8(il_jsonw *w, const char *key, const char *s) {
  if (!s) {
    il_jsonw_kstr(w, key, NULL);
    return;
  }
  char buf[3 * 1024 + 8];
  size_t o = 0, n = strlen(s);
  for (size_t i = 0; i < n && o + 4 < sizeof buf;) {
    size_t l = il_utf8_char_len(s + i, n - i);
    if (l) {
      memcpy(buf + o, s + i, l);
      o += l;
      i += l;
    } else {
      memcpy(buf + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    }
  }
  buf[o] = 0;
  il_jsonw_kstr(w, key, buf);
}

il_status il_watch_json(const il_watch_result *r, FILE *f) {
  il_jsonw w;
  il_jsonw_init(&w, f, true);
  il_jsonw_obj(&w);
  il_jsonw_kint(&w, "schema_version", 1);
  il_jsonw_kstr(&w, "tool", "inferlab watch");
  il__kstr_utf8(&w, "command", r->command);
  il_jsonw_kbool(&w, "exec_failed", r->exec_failed);
  il__kstr_utf8(&w, "exec_error", r->exec_failed ? r->exec_error : NULL);
  il_jsonw_key(&w, "exit_status");
  if (r->exit_status >= 0) il_jsonw_int(&w, r->exit_status);
  else il_jsonw_null(&w);
  il_jsonw_key(&w, "signal");
  if (r->term_signal) il_jsonw_int(&w, r->term_signal);
  else il_jsonw_null(&w);
  il_jsonw_kint(&w, "exit_code", il_watch_exit_code(r));
  il_jsonw_knum(&w, "seconds", r->seconds);
  il_jsonw_knum(&w, "user_seconds", r->user_s);
  il_jsonw_knum(&w, "sys_seconds", r->sys_s);
  il_jsonw_kint(&w, "peak_rss_bytes", r->peak_rss);
  il_jsonw_key(&w, "sampled_rss_peak_bytes");
  if (r->usage.rss_peak >= 0) il_jsonw_int(&w, r->usage.rss_peak);
  else il_jsonw_null(&w);
  il_jsonw_knum(&w, "sampled_rss_mean_bytes", r->usage.rss_peak >= 0 ? r->usage.rss_mean : (double)NAN);
  il_jsonw_kint(&w, "samples", r->usage.n_samples);
  const il_usage_result *u = &r->usage;
  il_jsonw_key(&w, "startup"); /* seconds since the command started, to the sampling interval; null: not seen */
  il_jsonw_obj(&w);
  il_jsonw_knum(&w, "first_output_seconds", u->first_output_s >= 0 ? u->first_output_s : (double)NAN);
  il_jsonw_knum(&w, "rss_growth_bytes", u->rss_peak >= 0 && u->rss_first >= 0 ? (double)(u->rss_peak - u->rss_first) : (double)NAN);
  il_jsonw_knum(&w, "rss_half_seconds", u->rss_t50 >= 0 ? u->rss_t50 : (double)NAN);
  il_jsonw_knum(&w, "rss_90_seconds", u->rss_t90 >= 0 ? u->rss_t90 : (double)NAN);
  il_jsonw_knum(&w, "gpu_memory_growth_bytes", u->gpu_grown >= 0 ? (double)u->gpu_grown : (double)NAN);
  il_jsonw_knum(&w, "gpu_memory_first_seconds", u->gpu_t_first >= 0 ? u->gpu_t_first : (double)NAN);
  il_jsonw_knum(&w, "gpu_memory_90_seconds", u->gpu_t90 >= 0 ? u->gpu_t90 : (double)NAN);
  il_jsonw_obj_end(&w);
  il_jsonw_key(&w, "gpu");
  il_jsonw_obj(&w);
  il_jsonw_kbool(&w, "available", r->usage.gpu_available);
  il__kstr_utf8(&w, "reason", r->usage.gpu_available ? NULL : r->usage.gpu_reason);
  il__kstr_utf8(&w, "driver", r->usage.gpu_available ? r->usage.nvml_driver : NULL);
  il_jsonw_key(&w, "devices");
  il_jsonw_arr(&w);
  for (int i = 0; i < r->usage.n_gpus; i++) {
    const il_usage_gpu *g = &r->usage.gpus[i];
    il_jsonw_obj(&w);
    il_jsonw_kint(&w, "index", g->index);
    il__kstr_utf8(&w, "name", g->name);
    il_jsonw_knum(&w, "memory_total_bytes", g->mem_total >= 0 ? (double)g->mem_total : (double)NAN);
    il_jsonw_knum(&w, "memory_used_peak_bytes", g->mem_n ? (double)g->mem_peak : (double)NAN);
    il_jsonw_knum(&w, "memory_used_mean_bytes", g->mem_n ? g->mem_mean : (double)NAN);
    il_jsonw_knum(&w, "process_memory_peak_bytes", g->proc_known ? (double)g->proc_mem_peak : (double)NAN);
    il_jsonw_knum(&w, "process_memory_mean_bytes", g->proc_known ? g->proc_mem_mean : (double)NAN);
    il_jsonw_knum(&w, "utilization_mean_percent", g->util_n ? g->util_mean : (double)NAN);
    il_jsonw_knum(&w, "utilization_max_percent", g->util_n ? (double)g->util_max : (double)NAN);
    il_jsonw_knum(&w, "power_mean_watts", g->power_n ? g->power_mean_w : (double)NAN);
    il_jsonw_knum(&w, "energy_joules", g->energy_j >= 0 ? g->energy_j : (double)NAN);
    il_jsonw_obj_end(&w);
  }
  il_jsonw_arr_end(&w);
  il_jsonw_obj_end(&w);
  il_jsonw_obj_end(&w);
  return il_jsonw_finish(&w);
}
