/* cli/eval: `inferlab eval`: perplexity of a model over a text, and KL / top-1 against a reference. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/jsonw.h"
#include "lab/eval.h"
#include "memory/mem.h"

static void il__eval_help(void) {
  printf("usage: inferlab eval -m MODEL --text FILE [--ctx 128] [--ref REF_MODEL] [--chunks N] [--json]\n\n"
         "Perplexity over a text with llama-perplexity's definition: the text (with BOS) is cut\n"
         "into non-overlapping windows of --ctx tokens, each starts with BOS on a fresh cache,\n"
         "and only the second half of each window is scored (at least 2 x ctx tokens needed).\n"
         "With --ref the same tokens go through the reference model too: KL divergence of the\n"
         "next-token distributions KL(ref || model) (mean, median, p99, max), top-1 agreement,\n"
         "and the perplexity ratio: the quantization error of the whole model.\n\n"
         "options:\n"
         "  -m, --model MODEL        GGUF file or builtin:NAME\n"
         "      --text FILE          the text (UTF-8)\n"
         "  -c, --ctx N              window length in tokens [128]\n"
         "      --ref MODEL          reference model (same tokenizer), e.g. the f32/f16 original\n"
         "      --chunks N           evaluate only the first N windows [all]\n"
         "  -t, --threads N          CPU threads\n"
         "      --json               the result as JSON on stdout (top-level \"perplexity\")\n"
         "\nexamples:\n"
         "  inferlab eval -m stories-q4_k_m.gguf --text samples.txt --ref stories-f32.gguf\n"
         "  inferlab eval -m builtin:tiny --text README.md --ctx 64 --json\n"
         "\nexit codes: 0 ok, 1 runtime failure, 64 usage (also: text too short for --ctx),\n"
         "            65 malformed model, 66 not found, 69 unsupported, 71 out of memory,\n"
         "            130 Ctrl-C (the windows measured so far are printed first)\n");
}

static il_status il__eval_slurp(const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return il_error(IL_ERR_NOT_FOUND, "--text %s: cannot open: %s", path, strerror(errno));
  size_t n = 0;
  const il_status st = il_cli_read_all(f, path, out, &n);
  fclose(f);
  return st;
}

static volatile sig_atomic_t il__eval_stop;
static void il__eval_on_sigint(int sig) {
  (void)sig;
  il__eval_stop = 1;
}

static void il__eval_progress(void *ud, int done, int total, double ppl) {
  (void)ud;
  const int width = 30, filled = total ? done * width / total : width;
  fprintf(stderr, "\r[%.*s%*s] %d/%d windows, perplexity so far %.4f", filled, "##############################",
          width - filled, "", done, total, ppl);
  if (done >= total) fprintf(stderr, "\r%*s\r", width + 60, "");
  fflush(stderr);
}

int il_cli_eval(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  bool help = false, json = false;
  const char *text_path = NULL, *ref_model = NULL, *chunks = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},      {"text", 0, true, &text_path, NULL}, {"ref", 0, true, &ref_model, NULL},
      {"chunks", 0, true, &chunks, NULL},     {"json", 0, false, NULL, &json},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("eval", argc, argv, &cfg, NULL, flags, 5, pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__eval_help();
    return IL_EXIT_OK;
  }
  if (!text_path) return il_cli_usage_error("eval", "--text FILE is required");
  int max_chunks = 0;
  if (chunks) {
    char *end;
    long v = strtol(chunks, &end, 10);
    if (*end || v < 1 || v > 1 << 20) return il_cli_usage_error("eval", "--chunks '%s': expected a count >= 1", chunks);
    max_chunks = (int)v;
  }
  if (cfg.ctx == 0) cfg.ctx = 128;
  const int32_t n_ctx = cfg.ctx;
  if (cfg.batch > n_ctx) cfg.batch = n_ctx;
  char *text = NULL;
  il_status st = il__eval_slurp(text_path, &text);
  if (st != IL_OK) return il_cli_fail("eval", st);
  il_engine *e = NULL, *ref = NULL;
  st = il_engine_open(&cfg, &e);
  if (st == IL_OK && ref_model) {
    il_config rc2 = cfg;
    snprintf(rc2.model, sizeof rc2.model, "%s", ref_model);
    st = il_engine_open(&rc2, &ref);
    if (st != IL_OK) st = il_error_wrap(st, "--ref %s: ", ref_model);
  }
  il_eval_result r;
  memset(&r, 0, sizeof r);
  const bool progress = isatty(STDERR_FILENO);
  if (st == IL_OK) {
    il_eval_params p = {n_ctx, max_chunks, progress ? il__eval_progress : NULL, NULL, &il__eval_stop};
    struct sigaction sa, old_int;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = il__eval_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    st = il_eval_text(e, ref, text, &p, &r);
    sigaction(SIGINT, &old_int, NULL);
    if (progress && st == IL_OK && r.interrupted) fprintf(stderr, "\r\033[K"); /* end the progress line */
  }
  if (st == IL_OK && r.interrupted && r.n_chunk == 0) {
    fprintf(stderr, "inferlab eval: interrupted before the first window: nothing measured\n");
    il_engine_free(ref);
    il_engine_free(e);
    il_mem_free(text);
    return 130;
  }
  if (st == IL_OK) {
    fprintf(stderr, "%s: %d tokens, %d windows of %d, %lld scored, %.2f s\n", text_path, r.n_tokens, r.n_chunk, n_ctx,
            (long long)r.n_scored, r.seconds);
    if (r.interrupted)
      fprintf(stderr, "interrupted: %d of %d windows measured; the figures below are of those\n", r.n_chunk,
              r.n_chunk_planned);
    if (json) {
      il_jsonw j;
      il_jsonw_init(&j, stdout, true);
      il_jsonw_obj(&j);
      il_jsonw_kstr(&j, "model", cfg.model);
      il_jsonw_kstr(&j, "text", text_path);
      il_jsonw_kint(&j, "ctx", n_ctx);
      il_jsonw_kint(&j, "tokens", r.n_tokens);
      il_jsonw_kint(&j, "windows", r.n_chunk);
      il_jsonw_kint(&j, "windows_planned", r.n_chunk_planned);
      il_jsonw_kbool(&j, "interrupted", r.interrupted);
      il_jsonw_kint(&j, "scored", r.n_scored);
      il_jsonw_knum(&j, "perplexity", r.perplexity);
      il_jsonw_knum(&j, "perplexity_stderr", r.perplexity_stderr);
      il_jsonw_knum(&j, "nll", r.nll);
      if (r.has_ref) {
        il_jsonw_kstr(&j, "ref", ref_model);
        il_jsonw_knum(&j, "ref_perplexity", r.ref_perplexity);
        il_jsonw_knum(&j, "perplexity_ratio", r.ppl_ratio);
        il_jsonw_key(&j, "kl");
        il_jsonw_obj(&j);
        il_jsonw_knum(&j, "mean", r.kl_mean);
        il_jsonw_knum(&j, "median", r.kl_median);
        il_jsonw_knum(&j, "p99", r.kl_p99);
        il_jsonw_knum(&j, "max", r.kl_max);
        il_jsonw_obj_end(&j);
        il_jsonw_knum(&j, "top1_agreement", r.top1);
      }
      il_jsonw_knum(&j, "seconds", r.seconds);
      il_jsonw_obj_end(&j);
      st = il_jsonw_finish(&j);
    } else {
      printf("perplexity      %.4f +/- %.4f\n", r.perplexity, r.perplexity_stderr);
      if (r.has_ref) {
        printf("ref perplexity  %.4f (%s)\n", r.ref_perplexity, ref_model);
        printf("ratio           %.5f\n", r.ppl_ratio);
        printf("KL(ref||model)  mean %.6f  median %.6f  p99 %.6f  max %.6f nats\n", r.kl_mean, r.kl_median, r.kl_p99,
               r.kl_max);
        printf("top-1 agreement %.2f%%\n", 100 * r.top1);
      }
    }
  }
  il_engine_free(ref);
  il_engine_free(e);
  il_mem_free(text);
  if (st == IL_OK && r.interrupted) return 130;
  return st == IL_OK ? IL_EXIT_OK : il_cli_fail("eval", st);
}
