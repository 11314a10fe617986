/* cli/logits: `inferlab logits`: raw float32 logits for every position of given tokens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/outfile.h"
#include "engine/engine.h"
#include "memory/mem.h"

static void il__logits_help(void) {
  printf("usage: inferlab logits [-m MODEL] (--tokens ID,ID,... | -p TEXT) -o OUT.f32 [options]\n\n"
         "Runs the tokens through the model in one sequence and writes the logits of every\n"
         "position as raw little-endian float32, [n_tokens x n_vocab], row-major. With --tokens\n"
         "no BOS is added (give it yourself); with -p the text is tokenized with BOS unless\n"
         "--no-bos. The file is written to a new temporary file and renamed over OUT, so a\n"
         "failed run leaves no partial output (a device or FIFO is written directly).\n\noptions:\n");
  printf("  %-24s %s\n", "    --tokens LIST", "comma-separated token ids");
  printf("  %-24s %s\n", "-o, --output FILE", "output file (required)");
  il_cli_print_options(stdout, "model,wtype,prompt,no-bos,threads,ctx,batch,isa,repack");
  printf("\nexample:\n  inferlab logits -m stories.gguf --tokens 1,403,407,261 -o out.f32\n"
         "\nexit codes: 0 ok, 1 runtime failure, 64 usage, 65 malformed model, 66 not found,\n"
         "            69 unsupported, 71 out of memory, 73 OUT cannot be written\n");
}

/* Parses "1,2,3" into a fresh array. Errors name the position of the bad entry. */
static int il__parse_tokens(const char *list, int32_t **out, int32_t *n_out) {
  size_t cap = 1;
  for (const char *p = list; *p; p++) cap += *p == ',';
  int32_t *ids = il_mem_alloc(IL_MEM_WORKSPACE, cap * sizeof(int32_t), "token list");
  if (!ids) return il_cli_fail("logits", IL_ERR_OOM);
  int32_t n = 0;
  const char *p = list;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
      il_mem_free(ids);
      return il_cli_usage_error("logits", "--tokens: entry %d ('%.*s') is not a token id", n + 1,
                                (int)strcspn(p, ","), p);
    }
    ids[n++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  if (n == 0) {
    il_mem_free(ids);
    return il_cli_usage_error("logits", "--tokens: empty list");
  }
  *out = ids;
  *n_out = n;
  return 0;
}

int il_cli_logits(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  static il_request_opts req; /* -p and --no-bos; 64 KiB: not on the stack */
  il_request_opts_defaults(&req);
  bool help = false, have_prompt = false;
  const char *tokens = NULL, *output = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},
      {"tokens", 0, true, &tokens, NULL},
      {"output", 'o', true, &output, NULL},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("logits", argc, argv, &cfg, &req, flags, 3, pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__logits_help();
    return IL_EXIT_OK;
  }
  have_prompt = req.prompt[0] != 0;
  if (!output) return il_cli_usage_error("logits", "-o OUT.f32 is required");
  if (!tokens == !have_prompt) return il_cli_usage_error("logits", "give exactly one of --tokens and -p");
  int32_t *ids = NULL, n = 0;
  if (tokens && (rc = il__parse_tokens(tokens, &ids, &n))) return rc;
  const char *inputs[1] = {cfg.model};
  il_status ost = il_outfile_check("-o", output, inputs, 1);
  if (ost != IL_OK) {
    il_mem_free(ids);
    return il_cli_fail("logits", ost);
  }

  il_engine *e = NULL;
  cfg.logits_all = true; /* every position's logits: passes of --batch entries, not one row per sequence */
  il_status st = il_engine_open(&cfg, &e);
  if (st == IL_OK && !ids) st = il_engine_tokenize(e, req.prompt, !req.p.no_bos, !req.p.no_parse_special, &ids, &n);
  if (st == IL_OK && n > il_engine_n_ctx(e))
    st = il_error(IL_ERR_RANGE, "%d tokens do not fit the context of %d (raise --ctx)", n, il_engine_n_ctx(e));
  const size_t nv = st == IL_OK ? (size_t)il_engine_model(e)->hp.n_vocab : 0;
  for (int32_t i = 0; st == IL_OK && i < n; i++)
    if (ids[i] >= (int32_t)nv) st = il_error(IL_ERR_INVALID_ARG, "--tokens: entry %d: id %d is outside the vocabulary [0, %zu)", i + 1, ids[i], nv);
  il_batch_entry *batch = NULL;
  float *logits = NULL;
  if (st == IL_OK) {
    batch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *batch * (size_t)n, "batch");
    logits = il_mem_alloc(IL_MEM_ACTIVATIONS, sizeof(float) * nv * (size_t)n, "logits output");
    if (!batch || !logits) st = IL_ERR_OOM;
  }
  if (st == IL_OK) {
    for (int32_t i = 0; i < n; i++) batch[i] = (il_batch_entry){ids[i], 0, i, true};
    st = il_engine_decode(e, batch, n, logits);
  }
  if (st == IL_OK) {
    il_outfile of;
    st = il_outfile_open(&of, "-o", output, inputs, 1);
    if (st == IL_OK) {
      fwrite(logits, sizeof(float), nv * (size_t)n, of.f); /* errors surface at close */
      st = il_outfile_close(&of);
    }
    if (st == IL_OK) fprintf(stderr, "wrote %d x %zu logits (float32) to %s\n", n, nv, output);
  }
  il_mem_free(batch);
  il_mem_free(logits);
  il_mem_free(ids);
  il_engine_free(e);
  return st == IL_OK ? IL_EXIT_OK : il_cli_fail("logits", st);
}
