/* tests/install/example.c: a program that embeds libinferlab through the installed public
 * header only, as a user of the package would. install_check.sh builds it against the
 * installed tree (pkg-config, then CMake's find_package) and runs it.
 *
 * It opens the built-in model, generates greedily twice and checks that both runs give the
 * same tokens (the API is deterministic), that an unknown and a per-request option are refused
 * by il_config_set with a detail naming them, and that memory is counted by category. Exit
 * 0 when every check holds, 1 otherwise. */
#include <inferlab.h>

#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "example.c:%d: FAILED: %s\n", __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static int generate(il_engine *e, int32_t *out, int cap) {
  il_request_params p = il_request_default_params();
  p.sampling.temp = 0; /* greedy */
  p.n_predict = cap;
  il_request *r = NULL;
  if (il_request_new(e, "Once upon a time", &p, &r) != IL_OK) {
    fprintf(stderr, "il_request_new: %s\n", il_error_detail());
    return -1;
  }
  int n = 0;
  int32_t tok;
  const char *text;
  size_t len;
  while (il_request_next(r, &tok, &text, &len) == IL_OK && tok >= 0 && n < cap) {
    out[n++] = tok;
    fwrite(text, 1, len, stdout);
  }
  fputc('\n', stdout);
  CHECK(il_request_n_generated(r) == n);
  CHECK(il_request_n_prompt(r) > 0);
  il_request_free(r);
  return n;
}

int main(void) {
  printf("libinferlab %s\n", il_version());
  il_config *cfg = il_config_new();
  CHECK(cfg != NULL);
  if (!cfg) return 1;
  CHECK(il_config_set(cfg, "threads", "1", "example") == IL_OK);
  CHECK(il_config_set(cfg, "no-such-option", "1", "example") == IL_ERR_INVALID_ARG);
  CHECK(strstr(il_error_detail(), "no-such-option") != NULL);
  CHECK(il_config_set(cfg, "temp", "0.5", "example") == IL_ERR_INVALID_ARG); /* a request option */
  char v[64];
  CHECK(il_config_get(cfg, "threads", v, sizeof v) == IL_OK && strcmp(v, "1") == 0);

  il_engine *e = NULL;
  if (il_engine_open(cfg, &e) != IL_OK) {
    fprintf(stderr, "il_engine_open: %s: %s\n", il_status_name(IL_ERR_INVALID_ARG), il_error_detail());
    il_config_free(cfg);
    return 1;
  }
  il_config_free(cfg); /* the engine keeps its own copy */
  const il_model *m = il_engine_model(e);
  const il_vocab *voc = il_engine_vocab(e);
  printf("model: %d layers, n_embd %d, vocabulary %d, context %d\n", il_model_n_layer(m), il_model_n_embd(m),
         il_vocab_size(voc), il_engine_n_ctx(e));
  CHECK(il_model_n_vocab(m) == il_vocab_size(voc));

  int32_t a[16], b[16];
  int na = generate(e, a, 16), nb = generate(e, b, 16);
  CHECK(na == 16 && nb == 16);
  CHECK(na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)(na > 0 ? na : 0)) == 0);

  int32_t *ids = NULL, n = 0;
  CHECK(il_engine_tokenize(e, "Hello", true, true, &ids, &n) == IL_OK && n >= 1);
  il_mem_free(ids);

  il_mem_stats st;
  il_mem_stats_get(&st);
  printf("memory (peak): %s %zu B, %s %zu B\n", il_mem_category_name(IL_MEM_WEIGHTS), st.peak[IL_MEM_WEIGHTS],
         il_mem_category_name(IL_MEM_KV), st.peak[IL_MEM_KV]);
  CHECK(st.peak[IL_MEM_KV] > 0);
  il_engine_free(e);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
