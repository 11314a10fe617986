/* cli/run: `inferlab run`: generate text from a prompt, streamed as it is produced. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "core/outfile.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/request.h"
#include "engine/spec.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "server/schema.h"

static void il__run_help(void) {
  printf("usage: inferlab run [-m MODEL] [-p PROMPT] [-n N] [options]\n\n"
         "Generates text from PROMPT and streams it to stdout (the prompt is echoed first).\n"
         "At the end, prompt and generation speed and peak memory by category go to stderr.\n\n"
         "options:\n");
  il_cli_print_options(stdout, "model,wtype,prompt,n-predict,threads,ctx,batch,seed,temp,top-k,top-p,min-p,"
                               "repeat-penalty,repeat-last-n,no-bos,ignore-eos,isa,repack,device,split,micro-batches,tp,mem-limit,gpu-layers,place,offload,fit,attn,attn-slice,kv-type,kv,kv-block,dtype,check-numerics,no-mmap,direct-io,mlock,preload,load-pipeline");
  printf("  %-24s %s\n", "    --mmap", "weights through a file mapping, read on first use (the default; undoes --no-mmap)");
  printf("  %-24s %s\n", "-f, --file FILE", "read the prompt from FILE ('-' = stdin)");
  printf("  %-24s %s\n", "    --no-echo", "do not print the prompt before the generated text");
  printf("  %-24s %s\n", "    --startup-json FILE", "write the startup timeline (docs/startup.md) as JSON to FILE");
  printf("  %-24s %s\n", "    --grammar FILE", "constrain the output to a GBNF grammar (llama.cpp's; start rule root)");
  printf("  %-24s %s\n", "    --json-schema FILE", "constrain the output to JSON valid against a JSON Schema (docs/grammar.md)");
  printf("  %-24s %s\n", "    --draft-model FILE", "speculative decoding: a small model with the same vocabulary (GGUF or builtin:NAME)");
  printf("  %-24s %s\n", "", "proposes tokens that the model checks in one batched pass (docs/run.md)");
  printf("  %-24s %s\n", "    --draft N", "tokens drafted per step, 1 to 16 [adaptive: 4 to start, +1 after a step");
  printf("  %-24s %s\n", "", "with every drafted token accepted, -1 after one with none, within 1..8]");
  printf("\nexamples:\n"
         "  inferlab run -p \"Hello\"\n"
         "  inferlab run -m stories.gguf -p \"Once upon a time\" -n 100 --temp 0\n"
         "  inferlab run -p \"Answer:\" --grammar yesno.gbnf\n"
         "  inferlab run -p \"A person:\" --json-schema person.json -n 200\n"
         "  inferlab run -m builtin:1b -p \"Hello\" --temp 0 --draft-model builtin:1b-2l\n"
         "\nexit codes: 0 ok, 1 runtime failure, 64 usage (also a draft model whose vocabulary is not the model's),\n"
         "            65 malformed model, grammar or schema file, 66 model or draft model not found, 69 unsupported\n"
         "            (a schema keyword outside the subset), 71 out of memory\n");
}

/* Device memory of a backend that is not the host (sim, cuda): the allocator's view; with a
 * --device list, one such report per device, with the layers it holds. */
static void il__print_one_device(FILE *f, const il_backend_info *dev, bool has_allocator, const il_caching_stats *csp,
                                 const il_transfer_stats *xsp, int32_t n_layers) {
  if (dev->host_visible || !has_allocator) return;
  const il_caching_stats cs = *csp;
  const il_transfer_stats xs = *xsp;
  char a[32], b[32], c[32], d[32], l[32] = "";
  if (n_layers >= 0) snprintf(l, sizeof l, ", %d layers", n_layers);
  fprintf(f, "device %s (peak%s): reserved %s, allocated %s; fragmentation %.0f%%; copied %s up, %s down\n",
          dev->name, l, il_mem_format_bytes(cs.total.peak_reserved, a, sizeof a),
          il_mem_format_bytes(cs.total.peak_allocated, b, sizeof b), 100 * cs.fragmentation,
          il_mem_format_bytes((size_t)xs.upload_bytes, c, sizeof c), il_mem_format_bytes((size_t)xs.download_bytes, d, sizeof d));
  fprintf(f, "  by category (peak allocated):");
  for (int i = 0; i < IL_MEM_CATEGORY_COUNT; i++)
    if (cs.cat[i].peak_allocated)
      fprintf(f, " %s %s", il_mem_category_name((il_mem_category)i), il_mem_format_bytes(cs.cat[i].peak_allocated, a, sizeof a));
  fprintf(f, "\n");
}

static void il__print_device_memory(FILE *f, const il_engine_snapshot *es) {
  if (es->n_devs <= 1) {
    il__print_one_device(f, &es->device, es->has_allocator, &es->alloc, &es->transfers, -1);
    return;
  }
  for (int i = 0; i < es->n_devs; i++)
    il__print_one_device(f, &es->devs[i].device, es->devs[i].has_allocator, &es->devs[i].alloc, &es->devs[i].transfers,
                         es->devs[i].n_layers);
}

static bool il__emit(void *ud, int32_t token, const char *text, size_t len) {
  (void)ud;
  (void)token;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return true;
}

/* Reads the prompt file ('-': stdin) into buf[max]. IL_ERR_IO when it cannot be read,
 * IL_ERR_INVALID_ARG when it does not fit or holds a NUL byte (never a silently cut prompt). */
static il_status il__read_file(const char *path, size_t max, char *buf) {
  bool is_stdin = !strcmp(path, "-");
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) return il_error(IL_ERR_IO, "--file %s: cannot open: %s", path, strerror(errno));
  size_t n = fread(buf, 1, max - 1, f);
  bool more = fgetc(f) != EOF;
  bool err = ferror(f);
  if (!is_stdin) fclose(f);
  if (err) return il_error(IL_ERR_IO, "--file %s: read error", path);
  if (more) return il_error(IL_ERR_INVALID_ARG, "--file %s: the prompt is longer than %zu bytes", path, max - 1);
  const char *nul = memchr(buf, 0, n);
  if (nul)
    return il_error(IL_ERR_INVALID_ARG, "--file %s: NUL byte at offset %zu (a prompt is text)", path,
                    (size_t)(nul - buf));
  buf[n] = 0;
  return IL_OK;
}

/* The three "total memory" figures a user meets, side by side: what inferlab counted (the
 * `total` above and `model info`'s estimate: weights + kv + activations + workspace), the
 * weights mapped from the file (not allocated, so not in that total), and the process's peak
 * RSS (`watch`'s figure: also code, libraries and stacks, and only the touched pages). */
static void il__print_memory_totals(FILE *f) {
  il_mem_stats st;
  il_mem_stats_get(&st);
  size_t mapped = 0;
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) mapped += st.mapped[c];
  struct rusage ru;
  long long rss = getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss >= 0 && ru.ru_maxrss <= LLONG_MAX / 1024
                      ? (long long)ru.ru_maxrss * 1024
                      : -1;
  char a[32], b[32], c[32], d[32];
  fprintf(f, "memory totals: counted %s (allocated by inferlab: the total above) + mapped %s (weights read from the "
             "file) = %s (what model info estimates: weights + kv + activations)\n"
             "               process peak RSS %s (what watch reports: also code, libraries and stacks, and only "
             "the pages touched)\n",
          il_mem_format_bytes(st.total_peak, a, sizeof a), il_mem_format_bytes(mapped, b, sizeof b),
          il_mem_format_bytes(st.total_peak + mapped, c, sizeof c),
          rss >= 0 ? il_mem_format_bytes((size_t)rss, d, sizeof d) : "unknown");
}

#define IL__GRAMMAR_FILE_MAX (1u << 20)

/* --grammar FILE (GBNF) or --json-schema FILE (converted by server/schema) -> *out. Errors name
 * the file: IL_ERR_IO, IL_ERR_FORMAT (line:col), IL_ERR_UNSUPPORTED (schema keyword), IL_ERR_OOM. */
static il_status il__load_grammar(const char *gbnf_path, const char *schema_path, il_grammar **out) {
  *out = NULL;
  const char *path = gbnf_path ? gbnf_path : schema_path;
  const char *flag = gbnf_path ? "--grammar" : "--json-schema";
  char *buf = il_mem_alloc(IL_MEM_OTHER, IL__GRAMMAR_FILE_MAX, "grammar file");
  if (!buf) return IL_ERR_OOM;
  FILE *f = fopen(path, "rb");
  il_status st = f ? IL_OK : il_error(IL_ERR_IO, "%s %s: cannot open: %s", flag, path, strerror(errno));
  size_t n = 0;
  if (f) {
    n = fread(buf, 1, IL__GRAMMAR_FILE_MAX, f);
    if (ferror(f)) st = il_error(IL_ERR_IO, "%s %s: read error", flag, path);
    else if (n == IL__GRAMMAR_FILE_MAX) st = il_error(IL_ERR_INVALID_ARG, "%s %s: larger than 1 MiB", flag, path);
    fclose(f);
  }
  il_sbuf gbnf = {0};
  if (st == IL_OK && schema_path) {
    st = il_schema_text_to_gbnf(buf, n, path, &gbnf);
    if (st != IL_OK && st != IL_ERR_FORMAT) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", il_error_detail());
      st = il_error(st, "--json-schema %s: %s", path, msg);
    }
  }
  if (st == IL_OK)
    st = schema_path ? il_grammar_parse(gbnf.p, gbnf.len, path, out) : il_grammar_parse(buf, n, path, out);
  if (st == IL_ERR_FORMAT) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", il_error_detail());
    st = il_error(st, "%s %s", flag, msg);
  }
  il_sbuf_free(&gbnf);
  il_mem_free(buf);
  return st;
}

/* il_engine_generate's loop with the sampler constrained by g. */
static il_status il__generate_grammar(il_engine *e, const int32_t *prompt, int32_t n_prompt, const il_request_params *p,
                                      const il_grammar *g, il_gen_stats *stats) {
  memset(stats, 0, sizeof *stats);
  il_grammar_vocab *tv = NULL;
  il_grammar_state *gs = NULL;
  il_request *r = NULL;
  il_status st = il_grammar_vocab_new(il_engine_vocab(e), &tv);
  if (st == IL_OK) st = il_grammar_state_new(g, tv, &gs);
  if (st == IL_OK) st = il_request_new_tokens(e, prompt, n_prompt, p, &r);
  if (st == IL_OK) st = il_request_set_grammar(r, gs);
  int32_t tok;
  const char *text;
  size_t len;
  while (st == IL_OK && (st = il_request_next(r, &tok, &text, &len)) == IL_OK) {
    il__emit(NULL, tok, text, len);
    if (tok < 0) break;
  }
  if (r) il_request_stats(r, stats);
  il_request_free(r);
  il_grammar_state_free(gs);
  il_grammar_vocab_free(tv);
  return st;
}

int il_cli_run(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  static il_request_opts req; /* 64 KiB of prompt text: not on the stack */
  il_request_opts_defaults(&req);
  bool help = false, no_echo = false;
  const char *file = NULL, *startup_json = NULL, *grammar_file = NULL, *schema_file = NULL;
  const char *draft_model = NULL, *draft_n = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},
      {"file", 'f', true, &file, NULL},
      {"no-echo", 0, false, NULL, &no_echo},
      {"startup-json", 0, true, &startup_json, NULL},
      {"grammar", 0, true, &grammar_file, NULL},
      {"json-schema", 0, true, &schema_file, NULL},
      {"draft-model", 0, true, &draft_model, NULL},
      {"draft", 0, true, &draft_n, NULL},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("run", argc, argv, &cfg, &req, flags, 8, pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__run_help();
    return IL_EXIT_OK;
  }
  if (file) {
    il_status fst = il__read_file(file, sizeof req.prompt, req.prompt);
    if (fst != IL_OK) return il_cli_fail("run", fst);
  }
  if (startup_json) { /* a path that cannot be written fails before the run, not after it */
    const char *inputs[1] = {cfg.model};
    il_status ost = il_outfile_check("--startup-json", startup_json, inputs, 1);
    if (ost != IL_OK) return il_cli_fail("run", ost);
  }
  if (grammar_file && schema_file) {
    fprintf(stderr, "inferlab run: --grammar and --json-schema: give one of them\n");
    return IL_EXIT_USAGE;
  }
  int32_t n_draft = 0; /* adaptive */
  if (draft_n) {
    char *end = NULL;
    errno = 0;
    long v = strtol(draft_n, &end, 10);
    if (!draft_model) {
      fprintf(stderr, "inferlab run: --draft %s: needs --draft-model\n", draft_n);
      return IL_EXIT_USAGE;
    }
    if (errno || end == draft_n || *end || v < 1 || v > IL_SPEC_DRAFT_MAX) {
      fprintf(stderr, "inferlab run: --draft %s: give a whole number from 1 to %d\n", draft_n, IL_SPEC_DRAFT_MAX);
      return IL_EXIT_USAGE;
    }
    n_draft = (int32_t)v;
  }
  if (draft_model && (grammar_file || schema_file)) {
    fprintf(stderr, "inferlab run: --draft-model with --grammar or --json-schema: not supported together\n");
    return IL_EXIT_USAGE;
  }
  il_grammar *grammar = NULL;
  if (grammar_file || schema_file) {
    il_status gst = il__load_grammar(grammar_file, schema_file, &grammar);
    if (gst != IL_OK) return il_cli_fail("run", gst);
  }
  il_engine *e = NULL;
  il_cli_progress_start("inferlab run: loading %s", cfg.model);
  il_status st = IL_OK;
  int32_t sized_ctx = 0;
  if (cfg.ctx <= 0 && req.p.n_predict >= 0) {
    /* size the KV cache for what this run will hold (prompt + tokens to generate), not for the
     * model's whole context: the same answer in a fraction of the memory */
    il_vocab *v = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (il_vocab_open(cfg.model, NULL, &v) == IL_OK &&
        il_tokenize_alloc(v, req.prompt, strlen(req.prompt), !req.p.no_bos, !req.p.no_parse_special, &ids, &n) == IL_OK) {
      const int64_t need = (int64_t)n + req.p.n_predict + 1;
      sized_ctx = (int32_t)((need + 255) / 256 * 256);
      cfg.ctx = sized_ctx;
      cfg.ctx_is_hint = true; /* at most the model's default context: never a warning */
    }
    il_error_clear(); /* no vocabulary here: the engine says why below */
    il_mem_free(ids);
    il_vocab_free(v);
  }
  il_engine *draft = NULL;
  if (draft_model) {
    /* the draft shares the run's options (threads, device, context) */
    il_config dcfg = cfg;
    snprintf(dcfg.model, sizeof dcfg.model, "%s", draft_model);
    cfg.logits_all = true; /* a verification pass returns every drafted position's logits */
    il_cli_progress_stop();
    il_cli_progress_start("inferlab run: loading draft %s", draft_model);
    st = il_engine_open(&dcfg, &draft);
    il_cli_progress_stop();
    if (st != IL_OK) return il_cli_fail_model("run", draft_model, st);
    il_cli_progress_start("inferlab run: loading %s", cfg.model);
  }
  st = il_engine_open(&cfg, &e);
  il_cli_progress_stop();
  if (st == IL_OK && draft) st = il_spec_check_vocab(e, draft);
  if (st != IL_OK) {
    il_grammar_free(grammar);
    il_engine_free(draft);
    if (e) {
      il_engine_free(e);
      return il_cli_fail("run", st);
    }
    return il_cli_fail_model("run", cfg.model, st);
  }
  int32_t *prompt = NULL, n_prompt = 0;
  il_gen_stats gs = {0};
  il_spec_stats ss = {0};
  st = il_engine_tokenize(e, req.prompt, !req.p.no_bos, !req.p.no_parse_special, &prompt, &n_prompt);
  if (st == IL_OK) {
    if (!no_echo) {
      fputs(req.prompt, stdout);
      fflush(stdout);
    }
    st = grammar ? il__generate_grammar(e, prompt, n_prompt, &req.p, grammar, &gs)
         : draft ? il_spec_generate(e, draft, prompt, n_prompt, &req.p, n_draft, il__emit, NULL, &gs, &ss)
                 : il_engine_generate(e, prompt, n_prompt, &req.p, il__emit, NULL, &gs);
    printf("\n");
  }
  if (st == IL_OK) {
    const il_model *m = il_engine_model(e);
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    fprintf(stderr, "\nmodel: %s (%s, %.1fM params), %d threads, ctx %d, loaded in %.2f s\n", m->name,
            il_dtype_name(m->main_type), (double)m->n_params / 1e6, es.device.threads, es.n_ctx, es.load_seconds);
    const bool auto_attn = !strcmp(cfg.attn, "auto");
    fprintf(stderr, "device: %s; %d/%d layers%s%s on it; attention %s%s; kv %s %s\n", es.device.name, es.n_dev_layers,
            es.n_layer, es.embd_dev ? ", token_embd" : "", es.out_dev ? ", output" : "", es.attn,
            auto_attn ? " (auto)" : "", es.kv_paged ? "paged" : "contiguous", il_dtype_name(es.kv_type));
    if (es.split)
      fprintf(stderr, "  the rest on the CPU; residual moved between them: %.1f KiB in all\n", (double)es.residual_bytes / 1024);
    if (es.tp > 1) { /* --tp: every layer on every device */
      fprintf(stderr, "  tensor parallel over %d devices:", es.tp);
      for (int i = 0; i < es.n_devs; i++) fprintf(stderr, "%s %s", i ? "," : "", es.devs[i].device.name);
      fprintf(stderr, "; 1/%d of every layer on each, token_embd and output on the first; %llu all-reduces (%s), "
              "%.1f KiB summed in all, %.1f KiB of embedding rows sent\n", es.tp, (unsigned long long)es.tp_allreduces,
              es.tp_nccl ? "NCCL" : "through the host", (double)es.tp_allreduce_bytes / 1024,
              (double)es.tp_broadcast_bytes / 1024);
    } else if (es.n_devs > 1) { /* a --device list: the line above names the first device; the split here */
      fprintf(stderr, "  split over %d devices:", es.n_devs);
      for (int i = 0; i < es.n_devs; i++)
        fprintf(stderr, "%s %s %d layers", i ? "," : "", es.devs[i].device.name, es.devs[i].n_layers);
      fprintf(stderr, "; token_embd on %s, output on %s; residual moved between them: %.1f KiB in all\n",
              es.embd_dev ? "the first" : "the CPU", es.out_dev ? "the last" : "the CPU", (double)es.residual_bytes / 1024);
    }
    if (es.micro_batches > 1)
      fprintf(stderr, "  pipeline: --micro-batches %d over %d stages; %llu of %llu passes pipelined%s\n", es.micro_batches,
              es.pipeline_stages, (unsigned long long)es.pipelined_passes, (unsigned long long)es.passes,
              es.pipelined_passes < es.passes ? " (a pass of one entry, or one that shares host state between stages, runs whole)" : "");
    if (es.n_expert)
      fprintf(stderr, "  %d experts per layer on the %s; hidden rows moved around them: %.1f KiB in all\n", es.n_expert,
              es.exps_dev ? "layers' backend" : "CPU (--place exps=cpu)", (double)es.expert_bytes / 1024);
    if (es.stream)
      fprintf(stderr, "  --offload stream: layer weights stay in host memory; %.1f MiB copied through two device slots\n",
              (double)es.streamed_bytes / (1 << 20));
    if (auto_attn && *es.attn_why) fprintf(stderr, "  auto skipped: %s\n", es.attn_why);
    if (cfg.check_numerics) {
      if (es.bad_layer >= 0)
        fprintf(stderr, "numerics: inf/nan first at %s of layer %d (%lld values)%s\n", es.bad_block, es.bad_layer,
                (long long)es.bad_count,
                es.act_type == IL_DTYPE_F16 ? "; f16 overflows beyond 65504: --dtype bf16 keeps f32's range" : "");
      else
        fprintf(stderr, "numerics: no inf/nan; largest |activation| %.4g at %s of layer %d (activations %s%s)\n",
                (double)es.max_abs, es.max_abs_op[0] ? es.max_abs_op : "-", es.max_abs_layer,
                il_dtype_name(es.act_type),
                es.act_type == IL_DTYPE_F16 && es.max_abs > 32768 ? ", close to f16's 65504" : "");
    }
    fprintf(stderr, "prompt:     %5d tokens in %8.3f s (%8.2f tokens/s)\n", gs.n_prompt, gs.prompt_seconds,
            gs.prompt_seconds > 0 ? gs.n_prompt / gs.prompt_seconds : 0.0);
    fprintf(stderr, "generation: %5d tokens in %8.3f s (%8.2f tokens/s)%s\n", gs.n_gen, gs.gen_seconds,
            gs.gen_seconds > 0 ? gs.n_gen / gs.gen_seconds : 0.0, gs.stopped_eog ? ", stopped at end of text" : "");
    if (draft)
      fprintf(stderr, "speculative: draft %s, length %s (last %d); %lld drafted, %lld accepted (%.1f%%); %lld target "
                      "passes for %d tokens\n",
              il_engine_model(draft)->name, n_draft ? "fixed" : "adaptive", ss.n_draft_last, (long long)ss.drafted,
              (long long)ss.accepted, ss.drafted ? 100.0 * (double)ss.accepted / (double)ss.drafted : 0.0,
              (long long)ss.steps, gs.n_gen);
    il_cli_print_memory(stderr);
    il__print_memory_totals(stderr);
    il__print_device_memory(stderr, &es);
    il_startup_print(il_engine_startup(e), stderr, "");
    if (startup_json) st = il_cli_write_startup_json(startup_json, il_engine_startup(e));
  }
  il_mem_free(prompt);
  il_engine_free(e);
  il_engine_free(draft);
  il_grammar_free(grammar);
  return st == IL_OK ? IL_EXIT_OK : il_cli_fail("run", st);
}
