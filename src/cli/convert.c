/* cli/convert: `inferlab convert`: export a model to GGUF in a chosen type. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "core/outfile.h"
#include "core/timer.h"
#include "format/llama2c.h"
#include "memory/mem.h"
#include "model/export.h"
#include "model/quantize.h"

static void il__convert_help(void) {
  printf("usage: inferlab convert SOURCE|-m SOURCE [--type T] -o OUT.gguf\n"
         "       inferlab convert --from llama2c CHECKPOINT.bin --tokenizer TOK.bin [--type T] -o OUT.gguf\n\n"
         "Writes a GGUF v3 file that llama.cpp loads. SOURCE is a GGUF file or builtin:tiny /\n"
         "builtin:1b. 2-D weights are converted to T; norms stay f32; a tensor whose rows are\n"
         "not a multiple of T's block size is kept in its type and named in a note.\n\n"
         "options:\n"
         "  -o, --output FILE        output GGUF (a new temporary file, renamed at the end)\n"
         "      --type T             f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | iq4_nl |\n"
         "                           q4_k | q5_k | q6_k (every 2-D tensor in T; `inferlab quant`\n"
         "                           writes llama.cpp's mixes)\n"
         "                           [f32 for llama2c, else f16]\n"
         "      --from FORMAT        source format: gguf (also builtin:NAME) | llama2c [gguf]\n"
         "      --tokenizer FILE     llama2.c tokenizer file (tokenizer.bin, tok512.bin)\n"
         "  -t, --threads N          threads for generating built-in weights\n"
         "\nexamples:\n"
         "  inferlab convert --from llama2c stories260K.bin --tokenizer tok512.bin -o stories.gguf\n"
         "  inferlab convert builtin:1b --type q4_0 -o llama1b-q4_0.gguf\n"
         "  inferlab convert model-f16.gguf --type q8_0 -o model-q8_0.gguf\n"
         "\nexit codes: 0 ok, 64 usage, 65 malformed input, 66 not found, 69 unsupported type,\n"
         "            71 out of memory, 73 OUT cannot be written (or is the input)\n");
}

int il_cli_convert(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  bool help = false;
  const char *output = NULL, *type_name = NULL, *from = "gguf", *tokenizer = NULL, *model = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},       {"output", 'o', true, &output, NULL},
      {"type", 0, true, &type_name, NULL},     {"from", 0, true, &from, NULL},
      {"tokenizer", 0, true, &tokenizer, NULL}, {"model", 'm', true, &model, NULL},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("convert", argc, argv, &cfg, NULL, flags, 6, pos, 1, &n_pos);
  if (rc) return rc;
  if (help) {
    il__convert_help();
    return IL_EXIT_OK;
  }
  /* the source positionally or as -m SOURCE, as quant and run take it */
  if (n_pos == 1 && model && strcmp(model, pos[0]))
    return il_cli_usage_error("convert", "two sources: -m %s and %s; give one", model, pos[0]);
  if (n_pos == 0 && model) pos[n_pos++] = model;
  if (n_pos != 1) return il_cli_usage_error("convert", "give one SOURCE (a GGUF file, builtin:NAME or a llama2.c checkpoint)");
  if (!output) return il_cli_usage_error("convert", "-o OUT.gguf is required");
  bool llama2c = !strcmp(from, "llama2c");
  if (!llama2c && strcmp(from, "gguf")) return il_cli_usage_error("convert", "--from: '%s' is not gguf or llama2c", from);
  if (llama2c && !tokenizer) return il_cli_usage_error("convert", "--from llama2c needs --tokenizer FILE");
  if (!llama2c && tokenizer) return il_cli_usage_error("convert", "--tokenizer applies to --from llama2c only");
  il_dtype type = llama2c ? IL_DTYPE_F32 : IL_DTYPE_F16;
  il_ftype mix;
  if (type_name && !il_dtype_parse(type_name, &type) && il_ftype_parse(type_name, &mix))
    return il_cli_usage_error("convert", "--type %s is one of llama-quantize's mixes, which `inferlab quant` writes: "
                                         "inferlab quant -m %s --type %s -o %s", type_name, pos[0], type_name, output);
  if (type_name && !il_dtype_parse(type_name, &type))
    return il_cli_usage_error("convert", "--type: unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k q5_k q6_k; "
                                         "the mixes q4_k_m q5_k_m ... are `inferlab quant`'s)", type_name);
  const char *inputs[2] = {pos[0], tokenizer};
  il_status st = il_outfile_check("-o", output, inputs, 2);
  if (st != IL_OK) return il_cli_fail("convert", st);
  double t0 = il_time_now();
  il_cli_progress_start("inferlab convert: converting %s", pos[0]);
  if (llama2c) {
    st = il_llama2c_convert(pos[0], tokenizer, type, output);
    il_cli_progress_stop();
    if (st == IL_OK) fprintf(stderr, "wrote %s (%s) in %.2f s\n", output, il_dtype_name(type), il_time_now() - t0);
  } else {
    il_export_stats es;
    st = il_export_gguf(pos[0], type, output, cfg.threads, stderr, &es);
    il_cli_progress_stop();
    char b[32];
    if (st == IL_OK)
      fprintf(stderr, "wrote %s: %lld tensors as %s, %lld kept, %s of tensor data, in %.2f s\n", output,
              (long long)es.n_converted, il_dtype_name(type), (long long)es.n_kept,
              il_mem_format_bytes(es.bytes_out, b, sizeof b), il_time_now() - t0);
  }
  return st == IL_OK ? IL_EXIT_OK : llama2c ? il_cli_fail("convert", st) : il_cli_fail_model("convert", pos[0], st);
}
