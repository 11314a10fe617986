/* engine/engine: load, size, decode, generate. */
#include "engine/engine.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/matmul.h"
#include "memory/mem.h"
#include "model/builtin.h"

#define IL__DEFAULT_CTX_CAP 4096

static size_t il__available_memory(void) {
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : (size_t)8 << 30;
}

static il_status il__apply_isa(const char *isa) {
  if (!*isa) return IL_OK;
  il_isa want;
  if (!strcmp(isa, "scalar")) want = IL_ISA_SCALAR;
  else if (!strcmp(isa, "avx2")) want = IL_ISA_AVX2;
  else if (!strcmp(isa, "avx512")) want = IL_ISA_AVX512;
  else return il_error(IL_ERR_INVALID_ARG, "--isa: '%s' is not one of scalar, avx2, avx512", isa);
  if (il_cpu_set_isa(want) != want)
    return il_error(IL_ERR_UNSUPPORTED, "--isa: this CPU does not support %s (best: %s)", isa,
                    il_isa_name(il_cpu_isa_detected()));
  return IL_OK;
}

static il_status il__open(il_engine *e) {
  const il_config *cfg = &e->cfg;
  double t0 = il_time_now();
  IL_TRY(il__apply_isa(cfg->isa));
  IL_TRY(il_backend_cpu_new(cfg->threads, &e->backend));
  if (il_builtin_is(cfg->model)) {
    IL_TRY(il_builtin_open(cfg->model, cfg->wtype, il_backend_cpu_threads(e->backend), &e->model));
    IL_TRY(il_builtin_vocab(e->model, &e->vocab));
  } else {
    if (*cfg->wtype)
      return il_error(IL_ERR_INVALID_ARG, "--wtype applies to built-in models only; convert '%s' with "
                                          "'inferlab convert --type' instead", cfg->model);
    IL_TRY(il_model_open_gguf(cfg->model, &e->model));
    il_status st = il_vocab_from_gguf(e->model->gguf, &e->vocab);
    if (st != IL_OK) return il_error_wrap(st, "%s: ", cfg->model);
  }
  const il_hparams *hp = &e->model->hp;
  if (il_vocab_size(e->vocab) != hp->n_vocab)
    return il_error(IL_ERR_FORMAT, "%s: the vocabulary has %d tokens but token_embd.weight has %d rows", cfg->model,
                    il_vocab_size(e->vocab), hp->n_vocab);

  /* warnings a user should see once per process (bench opens the engine per combination) */
  static bool warned_ctx, warned_threads;
  if (cfg->ctx > 0 && hp->n_ctx_train > 0 && cfg->ctx > hp->n_ctx_train && !warned_ctx) {
    warned_ctx = true;
    fprintf(stderr, "inferlab: warning: --ctx %d is beyond the model's training context of %d; text past it degrades\n",
            cfg->ctx, hp->n_ctx_train);
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && cfg->threads > cpus && !warned_threads) {
    warned_threads = true;
    fprintf(stderr, "inferlab: warning: -t %d is more threads than the %ld CPUs here; they share cores and run slower\n",
            cfg->threads, cpus);
  }
  e->n_seq = cfg->n_seq;
  e->n_ctx = cfg->ctx > 0 ? cfg->ctx : (hp->n_ctx_train < IL__DEFAULT_CTX_CAP ? hp->n_ctx_train : IL__DEFAULT_CTX_CAP);
  if (cfg->ctx <= 0) {
    size_t budget = il__available_memory() / 2;
    while (e->n_ctx > 256 && il_kv_cache_bytes(hp, e->n_ctx, e->n_seq) > budget) {
      e->n_ctx /= 2;
      e->ctx_capped = true;
    }
    if (e->ctx_capped)
      fprintf(stderr, "inferlab: context reduced to %d so the KV cache fits in memory (set --ctx to override)\n",
              e->n_ctx);
  }
  const int64_t cells = (int64_t)e->n_ctx * e->n_seq; /* up to 2^22 x 4096: not an int */
  e->n_batch = cfg->batch < cells ? cfg->batch : (int32_t)cells;
  IL_TRY(il_kv_cache_init(&e->kv, e->backend, hp, e->n_ctx, e->n_seq));
  IL_TRY(il_forward_state_init(&e->fs, e->model, e->backend, e->n_batch));
  e->logits = il_mem_alloc(IL_MEM_ACTIVATIONS, sizeof(float) * (size_t)e->n_batch * (size_t)hp->n_vocab, "logits");
  if (!e->logits) return IL_ERR_OOM;
  e->load_seconds = il_time_now() - t0;
  return IL_OK;
}

il_status il_engine_open(const il_config *cfg, il_engine **out) {
  *out = NULL;
  il_engine *e = il_mem_calloc(IL_MEM_OTHER, sizeof *e, "engine");
  if (!e) return IL_ERR_OOM;
  e->cfg = *cfg;
  il_status st = il__open(e);
  if (st != IL_OK) {
    il_engine_free(e);
    return st;
  }
  *out = e;
  return IL_OK;
}

void il_engine_free(il_engine *e) {
  if (!e) return;
  il_mem_free(e->logits);
  if (e->backend) {
    if (e->fs.x) il_forward_state_free(&e->fs, e->backend);
    il_kv_cache_free(&e->kv);
  }
  il_vocab_free(e->vocab);
  il_model_free(e->model);
  if (e->backend) e->backend->destroy(e->backend);
  il_mem_free(e);
}

il_status il_engine_decode(il_engine *e, const il_batch_entry *batch, int32_t n, float *logits_out) {
  const size_t nv = (size_t)e->model->hp.n_vocab;
  size_t written = 0;
  for (int32_t off = 0; off < n; off += e->n_batch) {
    int32_t chunk = n - off < e->n_batch ? n - off : e->n_batch;
    IL_TRY(il_model_forward(e->model, e->backend, &e->fs, batch + off, chunk, e->kv.views, e->logits));
    size_t n_logits = 0;
    for (int32_t i = 0; i < chunk; i++) n_logits += batch[off + i].logits;
    if (n_logits && logits_out) memcpy(logits_out + written * nv, e->logits, n_logits * nv * sizeof(float));
    written += n_logits;
  }
  return IL_OK;
}

il_status il_engine_tokenize(il_engine *e, const char *text, bool add_bos, int32_t **out, int32_t *n_out) {
  size_t n = 0;
  *out = NULL;
  IL_TRY(il_tokenize_alloc(e->vocab, text, strlen(text), add_bos, !e->cfg.no_parse_special, out, &n));
  *n_out = (int32_t)n;
  return IL_OK;
}

il_status il_engine_generate(il_engine *e, const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                             il_sampler *s, il_token_fn fn, void *ud, il_gen_stats *stats) {
  memset(stats, 0, sizeof *stats);
  if (n_prompt <= 0) return il_error(IL_ERR_INVALID_ARG, "prompt: no tokens (empty prompt and no BOS)");
  if (n_prompt >= e->n_ctx)
    return il_error(IL_ERR_RANGE, "prompt: %d tokens do not fit the context of %d (raise --ctx)", n_prompt, e->n_ctx);
  const int32_t nv = e->model->hp.n_vocab;
  il_batch_entry *batch = il_mem_alloc(IL_MEM_WORKSPACE, sizeof *batch * (size_t)n_prompt, "prompt batch");
  float *logits = il_mem_alloc(IL_MEM_ACTIVATIONS, sizeof(float) * (size_t)nv, "sampling logits");
  /* room for the longest piece, so a push never leaves text queued (pieces can be longer than
   * any fixed buffer) */
  const size_t text_cap = il_vocab_max_piece(e->vocab) + 8;
  char *text = il_mem_alloc(IL_MEM_WORKSPACE, text_cap, "detokenized text");
  il_detok *dt = NULL;
  il_status st = batch && logits && text ? il_detok_new(e->vocab, false, &dt) : IL_ERR_OOM;
  if (st == IL_OK) {
    il_detok_skip(dt, prompt, (size_t)n_prompt); /* the caller shows the prompt as typed */
    for (int32_t i = 0; i < n_prompt; i++) {
      batch[i] = (il_batch_entry){prompt[i], 0, i, i == n_prompt - 1};
      il_sampler_accept(s, prompt[i]);
    }
    double t0 = il_time_now();
    st = il_engine_decode(e, batch, n_prompt, logits);
    if (st == IL_OK) st = il_logits_check_finite(logits, nv, n_prompt - 1);
    stats->prompt_seconds = il_time_now() - t0;
    stats->n_prompt = n_prompt;
  }
  double t1 = il_time_now();
  /* the token for position pos is sampled from the logits of pos - 1, so the last one the
   * context allows is pos == n_ctx: it is emitted but not decoded (as llama2.c does) */
  for (int32_t pos = n_prompt; st == IL_OK && pos <= e->n_ctx && (n_predict < 0 || stats->n_gen < n_predict); pos++) {
    int32_t tok = il_sampler_sample(s, logits);
    il_sampler_accept(s, tok);
    stats->n_gen++;
    if (il_vocab_is_eog(e->vocab, tok) && !e->cfg.ignore_eos) {
      stats->stopped_eog = true;
      break;
    }
    size_t len = il_detok_push(dt, tok, text, text_cap);
    if (fn && !fn(ud, tok, text, len)) break;
    if (n_predict >= 0 && stats->n_gen >= n_predict) break;
    if (pos >= e->n_ctx) break;
    il_batch_entry one = {tok, 0, pos, true};
    st = il_engine_decode(e, &one, 1, logits);
    if (st == IL_OK) st = il_logits_check_finite(logits, nv, pos);
  }
  stats->gen_seconds = il_time_now() - t1;
  if (st == IL_OK && dt && fn)
    for (size_t len; (len = il_detok_flush(dt, text, text_cap)) > 0;) fn(ud, -1, text, len);
  il_detok_free(dt);
  il_mem_free(text);
  il_mem_free(batch);
  il_mem_free(logits);
  return st;
}
