/* cli/model: `inferlab model info MODEL`: architecture, hyperparameters, tensors, memory. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "core/text.h"
#include "engine/kv.h"
#include "memory/mem.h"
#include "model/builtin.h"

static void il__model_help(void) {
  printf("usage: inferlab model info [MODEL] [--ctx N] [--batch N] [--wtype T] [--kv-type T] [--dtype T]\n"
         "                           [--metadata]\n\n"
         "Prints the architecture, hyperparameters, every tensor with its type, shape and bytes,\n"
         "and the memory a run needs at the given context (default: the model's, capped at 4096)\n"
         "and batch. MODEL is a GGUF file or builtin:tiny (default) / builtin:1b; the other built-in\n"
         "architectures are builtin:qwen3-tiny, builtin:phi3-tiny, builtin:gemma3-tiny, builtin:moe-tiny\n"
         "and builtin:qwen3moe-tiny.\n"
         "Architectures: llama, mistral, qwen2, qwen3, phi3, gemma3, qwen3moe.\n\n"
         "options:\n"
         "  -m, --model S            the model (or give it as the argument)\n"
         "  -c, --ctx N              context length for the memory estimate\n"
         "  -b, --batch N            batch size for the memory estimate [512]\n"
         "      --wtype T            weight type of a built-in model\n"
         "      --kv-type T          KV cell type for the memory estimate: f16 f32 bf16 q8_0 [f16]\n"
         "      --dtype T            activation type for the memory estimate: f32 f16 bf16 [f32]\n"
         "      --metadata           also list every GGUF metadata key\n"
         "\nexamples:\n  inferlab model info builtin:tiny\n  inferlab model info stories.gguf --ctx 512\n"
         "\nexit codes: 0 ok, 64 usage, 65 malformed model, 66 not found, 69 unsupported,\n"
         "            71 out of memory\n");
}

static void il__print_metadata(const il_gguf *g) {
  printf("\nmetadata (%lld keys):\n", (long long)il_gguf_kv_count(g));
  for (int64_t i = 0; i < il_gguf_kv_count(g); i++) {
    const char *key = il_gguf_key(g, i);
    il_gguf_type t = il_gguf_kv_type(g, i);
    printf("  %-48s ", key);
    il_gguf_str s;
    int64_t iv;
    float fv;
    bool bv;
    if (t == IL_GGUF_STRING && il_gguf_get_str(g, key, &s) == IL_OK)
      printf("\"%.*s\"%s\n", (int)(s.len > 60 ? 60 : s.len), s.ptr, s.len > 60 ? "..." : "");
    else if (t == IL_GGUF_ARRAY) {
      il_gguf_type et;
      uint64_t n;
      const void *d;
      if (il_gguf_get_arr(g, key, &et, &n, &d) == IL_OK)
        printf("[%llu x %s]\n", (unsigned long long)n, il_gguf_type_name(et));
      else printf("[array]\n");
    } else if ((t == IL_GGUF_F32 || t == IL_GGUF_F64) && il_gguf_get_f32(g, key, &fv) == IL_OK)
      printf("%g\n", fv);
    else if (t == IL_GGUF_BOOL && il_gguf_get_bool(g, key, &bv) == IL_OK)
      printf("%s\n", bv ? "true" : "false");
    else if (il_gguf_get_i64(g, key, &iv) == IL_OK)
      printf("%lld\n", (long long)iv);
    else
      printf("(%s)\n", il_gguf_type_name(t));
  }
}

int il_cli_model(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  bool help = false, metadata = false;
  il_cli_flag flags[] = {{"help", 'h', false, NULL, &help}, {"metadata", 0, false, NULL, &metadata}};
  const char *pos[2];
  int n_pos;
  int rc = il_cli_parse("model", argc, argv, &cfg, NULL, flags, 2, pos, 2, &n_pos);
  if (rc) return rc;
  if (help || n_pos == 0) {
    il__model_help();
    return help ? IL_EXIT_OK : IL_EXIT_USAGE;
  }
  if (strcmp(pos[0], "info") != 0) return il_cli_usage_error("model", "unknown subcommand '%s' (expected: info)", pos[0]);
  if (n_pos == 2) snprintf(cfg.model, sizeof cfg.model, "%s", pos[1]);

  il_kv_opts kvo = {.type = IL_DTYPE_F16};
  if (il_kv_type_parse(cfg.kv_type, &kvo.type) != IL_OK) return il_cli_usage_error("model", "%s", il_error_detail());
  il_dtype act_type = IL_DTYPE_F32;
  if (il_config_act_type(cfg.dtype, &act_type) != IL_OK) return il_cli_usage_error("model", "%s", il_error_detail());
  il_model *m = NULL;
  il_cli_progress_start("inferlab model: loading %s", cfg.model);
  il_status st = il_builtin_is(cfg.model) ? il_builtin_open_ex(cfg.model, cfg.wtype, cfg.threads, false, &m) /* shapes only: nothing here reads a weight */
                                         : il_model_open_gguf(cfg.model, &m);
  il_cli_progress_stop();
  if (st != IL_OK) return il_cli_fail_model("model", cfg.model, st);
  const il_hparams *hp = &m->hp;
  char a[32], b[32], c[32];
  printf("model:        %s\n", m->name);
  if (m->gguf) printf("file:         %s (GGUF v%u, %s, alignment %u)\n", cfg.model, il_gguf_version(m->gguf),
                      il_mem_format_bytes(il_gguf_file_size(m->gguf), a, sizeof a), il_gguf_alignment(m->gguf));
  printf("architecture: %s\n", hp->arch);
  printf("parameters:   %.2fM (%s of tensors, mostly %s)\n", (double)m->n_params / 1e6,
         il_mem_format_bytes(m->weight_bytes, a, sizeof a), il_dtype_name(m->main_type));
  printf("vocab:        %d\n", hp->n_vocab);
  printf("context:      %d (training)\n", hp->n_ctx_train);
  printf("embedding:    %d\nffn:          %d\nlayers:       %d\n", hp->n_embd, hp->n_ff, hp->n_layer);
  printf("heads:        %d (kv heads %d, head size %d, GQA group %d)\n", hp->n_head, hp->n_head_kv, hp->head_dim,
         hp->n_head / hp->n_head_kv);
  printf("rope:         %s, %d dims, base %g, linear scale %g\n", hp->rope_mode == IL_ROPE_NEOX ? "neox" : "normal",
         hp->n_rot, hp->rope_base, hp->rope_scale);
  if (hp->swa > 0)
    printf("window:       %d positions on the local layers (all but every %dth; rope base %g there)\n", hp->swa,
           hp->swa_pattern, hp->rope_base_local);
  if (hp->n_expert)
    printf("experts:      %d, %d per token, FFN %d each (router weights %s)\n", hp->n_expert, hp->n_expert_used,
           hp->n_ff_exp, hp->expert_weights_norm ? "renormalized over the chosen" : "as the softmax gives them");
  printf("norm eps:     %g\n", hp->norm_eps);
  printf("output head:  %s\n", m->tied_output ? "tied to token_embd.weight" : "output.weight");

  int32_t ctx = cfg.ctx > 0 ? cfg.ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
  int32_t batch = cfg.batch < ctx ? cfg.batch : ctx;
  kvo.batch = batch; /* as the engine sizes its cache: sliding-window layers keep window + batch - 1 positions */
  size_t kv = il_kv_cache_bytes(hp, ctx, cfg.n_seq, &kvo);
  const int32_t ring = il_kv_cache_ring(hp, ctx, &kvo);
  int n_ring = 0;
  for (int32_t l = 0; ring && l < hp->n_layer; l++) n_ring += il_kv_cache_layer_ring(hp, l, ctx, &kvo);
  /* the engine's own sizing: activations for `batch` tokens, logits for one row per sequence,
   * on a backend that computes on them itself (cpu) */
  size_t act = il_forward_state_bytes(hp, act_type, batch, cfg.n_seq < batch ? cfg.n_seq : batch, NULL, kvo.type);
  printf("\nmemory for a run at ctx %d, batch %d, %d sequence(s):\n", ctx, batch, cfg.n_seq);
  printf("  weights      %10s%s\n", il_mem_format_bytes(m->weight_bytes, a, sizeof a), m->gguf ? " (mapped from the file)" : "");
  if (n_ring)
    printf("  kv           %10s (%s, %d layers x %lld positions + %d local layers x %lld (window %d + batch %d - 1) x "
           "%lld kv dims x 2)\n",
           il_mem_format_bytes(kv, b, sizeof b), il_dtype_name(kvo.type), hp->n_layer - n_ring,
           (long long)ctx * cfg.n_seq, n_ring, (long long)ring * cfg.n_seq, hp->swa, batch,
           (long long)hp->n_head_kv * hp->head_dim);
  else
    printf("  kv           %10s (%s, %d layers x %lld positions x %lld kv dims x 2)\n", il_mem_format_bytes(kv, b, sizeof b),
           il_dtype_name(kvo.type), hp->n_layer, (long long)ctx * cfg.n_seq, (long long)hp->n_head_kv * hp->head_dim);
  printf("  activations  %10s (%s)\n", il_mem_format_bytes(act, c, sizeof c), il_dtype_name(act_type));
  printf("  total        %10s\n", il_mem_format_bytes(m->weight_bytes + kv + act, a, sizeof a));

  printf("\ntensors (%lld):\n", (long long)m->n_tensors);
  printf("  %-32s %-6s %-20s %12s\n", "name", "type", "shape", "bytes");
  for (int64_t i = 0; i < m->n_tensors; i++) {
    const il_gguf_tensor *t = &m->tensors[i];
    char shape[4 * 24 + 8]; /* IL_GGUF_MAX_DIMS values of up to 20 digits; il_appendf never overruns */
    snprintf(shape, sizeof shape, "[%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims; d++) il_appendf(shape, sizeof shape, ", %lld", (long long)t->ne[d]);
    il_appendf(shape, sizeof shape, "]");
    printf("  %-32s %-6s %-20s %12llu\n", t->name, il_dtype_name(t->type), shape, (unsigned long long)t->nbytes);
  }
  if (metadata && m->gguf) il__print_metadata(m->gguf);
  il_model_free(m);
  return IL_EXIT_OK;
}
