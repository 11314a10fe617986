/* bench/bench_grammar: what a step's grammar mask costs against the decode step it guards.
 *
 * In one run: the decode step of MODEL (default builtin:1b) is timed over --decode N tokens
 * (il_engine_generate, no grammar: its gen_seconds / n_gen), then for each grammar a walk of
 * --steps N steps over MODEL's vocabulary: compute the mask (timed), pick an allowed token with
 * a seeded generator, advance (timed with the mask: both run per sampled token), starting over
 * when the grammar ends. The walk visits the states a generation would (any allowed token is a
 * token some sampler could draw) without paying for the forward passes. Grammars: an object
 * schema with eight properties (server/schema), response_format json_object, and a free-text
 * string (almost every token allowed at every step: the walk's worst case).
 * Prints per grammar: mean, p99 and max mask+advance time, mean allowed tokens, and the mean as
 * a share of the decode step. Usage: bench_grammar [-m MODEL] [--steps N] [--decode N] [-t N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/request.h"
#include "memory/mem.h"
#include "probe/host.h"
#include "probe/sysfs.h"
#include "server/schema.h"

static const char *const il__schema =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000000},"
    "\"name\":{\"type\":\"string\",\"maxLength\":8},\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z]{1,6}@[a-z]{1,6}\\\\.com$\"},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100},\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"maxLength\":5},\"maxItems\":3},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":10}},"
    "\"required\":[\"id\",\"name\",\"role\"]}";

static int il__cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static il_status il__walk(const char *label, const il_grammar *g, const il_grammar_vocab *tv, int32_t n_vocab,
                          int steps, double decode_s) {
  uint8_t *allowed = malloc(((size_t)n_vocab + 7) / 8);
  double *t = malloc(sizeof(double) * (size_t)steps);
  il_grammar_state *s = NULL;
  il_status st = il_grammar_state_new(g, tv, &s);
  uint64_t rng = 12345;
  double sum_allowed = 0, sum = 0;
  int restarts = 0;
  for (int i = 0; st == IL_OK && i < steps; i++) {
    int32_t n_allowed = 0;
    double t0 = il_time_now();
    st = il_grammar_state_mask(s, allowed, &n_allowed);
    double t1 = il_time_now();
    if (st != IL_OK || n_allowed == 0) break;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int32_t pick = (int32_t)((rng >> 33) % (uint64_t)n_allowed), tok = -1;
    for (int32_t k = 0; k < n_vocab; k++)
      if (allowed[k >> 3] >> (k & 7) & 1 && pick-- == 0) {
        tok = k;
        break;
      }
    double t2 = il_time_now();
    if (il_grammar_state_accepting(s) && tok == il_grammar_vocab_eos(tv)) {
      il_grammar_state_free(s);
      s = NULL;
      st = il_grammar_state_new(g, tv, &s);
      restarts++;
    } else {
      st = il_grammar_state_accept_token(s, tok);
    }
    t[i] = (t1 - t0) + (il_time_now() - t2);
    sum += t[i];
    sum_allowed += n_allowed;
    if (i + 1 == steps) {
      qsort(t, (size_t)steps, sizeof *t, il__cmp_d);
      double mean = sum / steps;
      printf("%-22s %8.1f %8.1f %8.1f %10.0f %8d %9.3f%%\n", label, mean * 1e6, t[steps * 99 / 100] * 1e6,
             t[steps - 1] * 1e6, sum_allowed / steps, restarts, 100 * mean / decode_s);
    }
  }
  if (st != IL_OK) fprintf(stderr, "%s: %s\n", label, il_error_detail());
  il_grammar_state_free(s);
  free(allowed);
  free(t);
  return st;
}

int main(int argc, char **argv) {
  const char *model = "builtin:1b";
  int steps = 400, decode = 8, threads = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--decode") && i + 1 < argc) decode = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_grammar [-m MODEL] [--steps N] [--decode N] [-t THREADS]\n");
      return 64;
    }
  }
  if (steps < 1 || decode < 1) return 64;
  il_sysfs fs;
  il_host_info host;
  if (il_sysfs_init(&fs, "/", NULL) != IL_OK) return 1;
  il_host_probe(&fs, &host);
  const char *cpu = host.cpu_model[0] ? host.cpu_model : "unknown";

  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "%s", model);
  c.ctx = 256;
  if (threads > 0) c.threads = threads;
  il_engine *e = NULL;
  if (il_engine_open(&c, &e) != IL_OK) {
    fprintf(stderr, "%s: %s\n", model, il_error_detail());
    return 1;
  }
  /* the decode step: unconstrained generation of `decode` tokens after a short prompt */
  int32_t *ids = NULL, n = 0;
  il_gen_stats gs;
  il_request_params rp = il_request_default_params();
  rp.n_predict = decode;
  rp.ignore_eos = true;
  rp.sampling.temp = 0;
  if (il_engine_tokenize(e, "Once upon a time", true, false, &ids, &n) != IL_OK ||
      il_engine_generate(e, ids, n, &rp, NULL, NULL, &gs) != IL_OK || gs.n_gen < 1) {
    fprintf(stderr, "decode: %s\n", il_error_detail());
    return 1;
  }
  il_mem_free(ids);
  const double decode_s = gs.gen_seconds / gs.n_gen;
  double t0 = il_time_now();
  il_grammar_vocab *tv = NULL;
  if (il_grammar_vocab_new(il_engine_vocab(e), &tv) != IL_OK) return 1;
  const double index_s = il_time_now() - t0;
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  printf("bench_grammar: %s, vocabulary %d tokens, trie %d nodes built in %.1f ms; CPU %s, %d threads\n", model,
         il_vocab_size(il_engine_vocab(e)), il_grammar_vocab_nodes(tv), index_s * 1e3, cpu, es.device.threads);
  printf("decode step (baseline, this run): %.2f ms over %d tokens\n\n", decode_s * 1e3, gs.n_gen);
  printf("%-22s %8s %8s %8s %10s %8s %10s\n", "grammar", "mean_us", "p99_us", "max_us", "allowed", "restarts",
         "of_decode");

  il_sbuf gbnf[2] = {{0}, {0}};
  const char *free_text = "root ::= \"\\\"\" [^\"]* \"\\\"\"\n";
  il_status st = il_schema_text_to_gbnf(il__schema, strlen(il__schema), "schema", &gbnf[0]);
  if (st == IL_OK) st = il_schema_any_gbnf(&gbnf[1]);
  const char *texts[3] = {gbnf[0].p, gbnf[1].p, free_text};
  const size_t lens[3] = {gbnf[0].len, gbnf[1].len, strlen(free_text)};
  const char *labels[3] = {"schema (8 properties)", "json_object", "free-text string"};
  int rc = 0;
  for (int k = 0; st == IL_OK && k < 3; k++) {
    il_grammar *g = NULL;
    st = il_grammar_parse(texts[k], lens[k], labels[k], &g);
    if (st == IL_OK) st = il__walk(labels[k], g, tv, il_vocab_size(il_engine_vocab(e)), steps, decode_s);
    il_grammar_free(g);
  }
  if (st != IL_OK) {
    fprintf(stderr, "bench_grammar: %s\n", il_error_detail());
    rc = 1;
  }
  il_sbuf_free(&gbnf[0]);
  il_sbuf_free(&gbnf[1]);
  il_grammar_vocab_free(tv);
  il_engine_free(e);
  return rc;
}
