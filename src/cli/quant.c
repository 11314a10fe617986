/* cli/quant: `inferlab quant`: quantize a model into a GGUF file with llama-quantize's type mixes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "core/jsonw.h"
#include "memory/mem.h"
#include "model/quantize.h"

static void il__quant_help(void) {
  printf("usage: inferlab quant -m IN.gguf|builtin:NAME -o OUT.gguf --type TYPE [--pure]\n"
         "                      [--keep PATTERN=TYPE ...] [--threads N] [--report] [--json]\n\n"
         "Quantizes a model with llama-quantize's rules: the same file types, the same per-tensor\n"
         "mix (which tensors get more bits, per layer), the same fallback when a row length is not\n"
         "a multiple of the block size, and the same bytes for every block (ggml's reference\n"
         "quantizers, no importance matrix). 1-D tensors (norms) stay f32. The output is written\n"
         "to OUT.tmp and renamed; writing over the input is refused.\n\n"
         "options:\n"
         "  -m, --model SRC          GGUF file or builtin:tiny | builtin:1b\n"
         "  -o, --output FILE        output GGUF\n"
         "      --type TYPE          f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k_s q4_k_m\n"
         "                           q5_k_s q5_k_m q6_k (q4_k = q4_k_m and q5_k = q5_k_m, as in\n"
         "                           llama-quantize)\n"
         "      --pure               every quantizable 2-D tensor in TYPE's base type (no mix)\n"
         "      --keep PATTERN=TYPE  tensors whose name matches PATTERN (extended regex) get TYPE\n"
         "                           instead of the mix (repeatable; first match wins)\n"
         "  -t, --threads N          threads (0 = one per core)\n"
         "      --report             per-tensor table: type, bytes before/after, RMSE, max abs\n"
         "                           error, relative error, SNR (dB), outliers beyond 3 sigma\n"
         "      --json               the same as JSON on stdout\n"
         "\nexamples:\n"
         "  inferlab quant -m builtin:tiny -o tiny-q4_k_m.gguf --type q4_k_m\n"
         "  inferlab quant -m model-f16.gguf -o model-q6_k.gguf --type q6_k --report\n"
         "  inferlab quant -m model-f16.gguf -o m.gguf --type q4_k_m --keep 'ffn_down=q8_0'\n"
         "\nexit codes: 0 ok, 1 write failure, 64 usage (also: -o is the input), 65 malformed\n"
         "            input (also: NaN/Inf in a weight), 66 not found, 69 unsupported, 71 out of memory\n");
}

/* Per tensor, on the line of cli/progress: the share of the input's tensor bytes done; after
 * the last tensor the file is written (which takes seconds on a large model). */
static void il__quant_progress(void *ud, uint64_t done, uint64_t total, const char *tensor) {
  const char *out = ud;
  if (done >= total) il_cli_progress_update("inferlab quant: writing %s", out);
  else il_cli_progress_update("inferlab quant: %3d%% (%s)", total ? (int)(100.0 * (double)done / (double)total) : 100, tensor);
}

static const char *il__shape(const il_quant_tensor_report *t, char *buf, size_t n) {
  int k = snprintf(buf, n, "%lld", (long long)t->ne[0]);
  for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < n; d++)
    k += snprintf(buf + k, n - (size_t)k, "x%lld", (long long)t->ne[d]);
  return buf;
}

static void il__quant_table(const il_quant_report *r) {
  printf("%-28s %-11s %-6s %-6s %10s %10s %10s %10s %8s %8s %8s\n", "tensor", "shape", "in", "out", "bytes_in",
         "bytes_out", "rmse", "max_abs", "rel", "snr_db", "out>3sd");
  for (int64_t i = 0; i < r->n_tensors; i++) {
    const il_quant_tensor_report *t = &r->tensors[i];
    char sh[48];
    printf("%-28s %-11s %-6s %-6s %10llu %10llu", t->name, il__shape(t, sh, sizeof sh), il_dtype_name(t->type_in),
           il_dtype_name(t->type_out), (unsigned long long)t->bytes_in, (unsigned long long)t->bytes_out);
    if (t->has_error)
      printf(" %10.3e %10.3e %8.4f %8.2f %7.3f%%\n", t->err.rmse, t->err.max_abs, t->err.rel, t->err.snr_db,
             100 * t->err.outliers);
    else
      printf(" %10s %10s %8s %8s %8s\n", "-", "-", "-", "-", "-");
  }
}

/* The tensors that did not get the type asked for, in one line: how many, by the type they
 * got, and the first one's note (--report and --json carry every note). */
static void il__quant_notes(const il_quant_report *r) {
  int n = 0, by_type[IL_DTYPE_COUNT] = {0};
  const il_quant_tensor_report *first = NULL;
  for (int64_t i = 0; i < r->n_tensors; i++) {
    const il_quant_tensor_report *t = &r->tensors[i];
    if (!t->note[0]) continue;
    if (!first) first = t;
    n++;
    if ((int)t->type_out >= 0 && (int)t->type_out < IL_DTYPE_COUNT) by_type[t->type_out]++;
  }
  if (!n) return;
  fprintf(stderr, "note: %d tensor%s kept another type (", n, n == 1 ? "" : "s");
  const char *sep = "";
  for (int d = 0; d < IL_DTYPE_COUNT; d++)
    if (by_type[d]) {
      fprintf(stderr, "%s%d as %s", sep, by_type[d], il_dtype_name((il_dtype)d));
      sep = ", ";
    }
  fprintf(stderr, "); the first, %s: %s; --report lists each\n", first->name, first->note);
}

static il_status il__quant_json(const il_quant_report *r, const char *in, const char *out, il_ftype ft) {
  il_jsonw j;
  il_jsonw_init(&j, stdout, true);
  il_jsonw_obj(&j);
  il_jsonw_kstr(&j, "input", in);
  il_jsonw_kstr(&j, "output", out);
  il_jsonw_kstr(&j, "type", il_ftype_name(ft));
  il_jsonw_kint(&j, "file_type", (long long)ft);
  il_jsonw_kint(&j, "input_bytes", (long long)r->file_in);
  il_jsonw_kint(&j, "output_bytes", (long long)r->file_out);
  il_jsonw_knum(&j, "seconds", r->seconds);
  il_jsonw_knum(&j, "mb_per_s", r->seconds > 0 ? (double)r->tensor_bytes_in / 1e6 / r->seconds : 0);
  il_jsonw_kbool(&j, "requantized", r->requantized);
  il_jsonw_key(&j, "tensors");
  il_jsonw_arr(&j);
  for (int64_t i = 0; i < r->n_tensors; i++) {
    const il_quant_tensor_report *t = &r->tensors[i];
    il_jsonw_obj(&j);
    il_jsonw_kstr(&j, "name", t->name);
    il_jsonw_key(&j, "shape");
    il_jsonw_arr(&j);
    for (uint32_t d = 0; d < t->n_dims; d++) il_jsonw_int(&j, t->ne[d]);
    il_jsonw_arr_end(&j);
    il_jsonw_kstr(&j, "type_in", il_dtype_name(t->type_in));
    il_jsonw_kstr(&j, "type_out", il_dtype_name(t->type_out));
    il_jsonw_kint(&j, "bytes_in", (long long)t->bytes_in);
    il_jsonw_kint(&j, "bytes_out", (long long)t->bytes_out);
    if (t->has_error) {
      il_jsonw_knum(&j, "rmse", t->err.rmse);
      il_jsonw_knum(&j, "max_abs_error", t->err.max_abs);
      il_jsonw_knum(&j, "relative_error", t->err.rel);
      il_jsonw_knum(&j, "snr_db", t->err.snr_db);
      il_jsonw_knum(&j, "outliers_3sigma", t->err.outliers);
    }
    if (t->note[0]) il_jsonw_kstr(&j, "note", t->note);
    il_jsonw_obj_end(&j);
  }
  il_jsonw_arr_end(&j);
  il_jsonw_obj_end(&j);
  return il_jsonw_finish(&j);
}

int il_cli_quant(int argc, char **argv) {
  /* --keep may repeat: take those out before the shared parser sees them */
  il_quant_keep keep[16];
  int n_keep = 0, nargc = 0;
  char **nargv = il_mem_alloc(IL_MEM_OTHER, sizeof(char *) * (size_t)(argc + 1), "arguments");
  if (!nargv) return il_cli_fail("quant", IL_ERR_OOM);
  char keep_buf[16][256];
  int rc = 0;
  for (int i = 0; i < argc && !rc; i++) {
    const char *v = NULL;
    if (!strcmp(argv[i], "--")) {
      while (i < argc) nargv[nargc++] = argv[i++];
      break;
    }
    if (i > 0 && !strcmp(argv[i], "--keep")) {
      if (i + 1 >= argc) rc = il_cli_usage_error("quant", "--keep needs PATTERN=TYPE");
      else v = argv[++i];
    } else if (i > 0 && !strncmp(argv[i], "--keep=", 7)) {
      v = argv[i] + 7;
    } else {
      nargv[nargc++] = argv[i];
      continue;
    }
    if (rc) break;
    const char *eq = strrchr(v, '=');
    if (n_keep >= 16) rc = il_cli_usage_error("quant", "--keep: at most 16 patterns");
    else if (!eq || eq == v || strlen(v) >= sizeof keep_buf[0])
      rc = il_cli_usage_error("quant", "--keep '%s': expected PATTERN=TYPE", v);
    else {
      memcpy(keep_buf[n_keep], v, (size_t)(eq - v));
      keep_buf[n_keep][eq - v] = 0;
      keep[n_keep].pattern = keep_buf[n_keep];
      if (!il_dtype_parse(eq + 1, &keep[n_keep].type))
        rc = il_cli_usage_error("quant", "--keep '%s': unknown type '%s'", v, eq + 1);
      n_keep++;
    }
  }
  if (rc) {
    il_mem_free(nargv);
    return rc;
  }
  il_config cfg;
  il_config_defaults(&cfg);
  bool help = false, pure = false, report = false, json = false;
  const char *output = NULL, *type_name = NULL, *model = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},     {"output", 'o', true, &output, NULL}, {"type", 0, true, &type_name, NULL},
      {"pure", 0, false, NULL, &pure},       {"report", 0, false, NULL, &report},  {"json", 0, false, NULL, &json},
      {"model", 'm', true, &model, NULL},
  };
  const char *pos[1];
  int n_pos;
  rc = il_cli_parse("quant", nargc, nargv, &cfg, NULL, flags, 7, pos, 1, &n_pos);
  il_mem_free(nargv);
  if (rc) return rc;
  if (help) {
    il__quant_help();
    return IL_EXIT_OK;
  }
  /* the input as -m IN or positionally, as convert takes it */
  if (n_pos == 1 && model && strcmp(model, pos[0]))
    return il_cli_usage_error("quant", "two inputs: -m %s and %s; give one", model, pos[0]);
  if (n_pos == 1) model = pos[0];
  if (model) snprintf(cfg.model, sizeof cfg.model, "%s", model);
  if (!output) return il_cli_usage_error("quant", "-o OUT.gguf is required");
  if (!type_name) return il_cli_usage_error("quant", "--type TYPE is required");
  il_ftype ft;
  if (!il_ftype_parse(type_name, &ft))
    return il_cli_usage_error("quant", "--type: unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl "
                                       "q4_k q4_k_s q4_k_m q5_k q5_k_s q5_k_m q6_k)", type_name);
  const int threads = cfg.threads > 0 ? cfg.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  char out_name[4096]; /* the progress line's name of the output (the callback's context is not const) */
  snprintf(out_name, sizeof out_name, "%s", output);
  il_quant_params p = {
      .rule = {ft, pure, keep, n_keep},
      .n_threads = threads > 0 ? threads : 1,
      .measure = report || json,
      .progress = isatty(STDERR_FILENO) ? il__quant_progress : NULL,
      .progress_ud = out_name,
      .notes = NULL, /* each tensor's note is in the report: one summary line below */
  };
  il_quant_report r;
  /* a line from the start (reading the model or generating builtin:*), refreshed per tensor;
   * a Ctrl-C ends it first (cli/progress) */
  il_cli_progress_start("inferlab quant: reading %s", cfg.model);
  il_status st = il_quant_model(cfg.model, output, &p, &r);
  il_cli_progress_stop();
  if (st != IL_OK) return il_cli_fail("quant", st);
  if (r.requantized)
    fprintf(stderr, "warning: %s already has quantized tensors (%s); quantizing them again adds to their error "
                    "(start from the f16/f32 model when you have it)\n", cfg.model, il_dtype_name(r.requant_from));
  int n_q = 0;
  for (int64_t i = 0; i < r.n_tensors; i++) n_q += r.tensors[i].converted;
  char a[32], b[32];
  fprintf(stderr, "quantized %s -> %s as %s: %lld tensors, %d converted; %s -> %s (%.1f%%) in %.2f s (%.1f MB/s)\n",
          cfg.model, output, il_ftype_name(ft), (long long)r.n_tensors, n_q, il_mem_format_bytes(r.file_in, a, sizeof a),
          il_mem_format_bytes(r.file_out, b, sizeof b), r.file_in ? 100.0 * (double)r.file_out / (double)r.file_in : 0,
          r.seconds, r.seconds > 0 ? (double)r.tensor_bytes_in / 1e6 / r.seconds : 0);
  if (r.file_out > r.file_in)
    fprintf(stderr, "note: the output is %.1f%% larger than the input: its tensors were already smaller than %s "
                    "(--report lists each tensor's type in and out)\n",
            r.file_in ? 100.0 * ((double)r.file_out / (double)r.file_in - 1) : 0, il_ftype_name(ft));
  il__quant_notes(&r);
  if (report) il__quant_table(&r);
  if (json) st = il__quant_json(&r, cfg.model, output, ft);
  il_quant_report_free(&r);
  return st == IL_OK ? IL_EXIT_OK : il_cli_fail("quant", st);
}
