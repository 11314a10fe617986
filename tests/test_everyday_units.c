/* tests/test_everyday_units: regressions for issue 9 (hostile input and everyday use) that
 * need only the library: the streaming detokenizer after a prompt, NaN-safe sampling, pieces
 * longer than any fixed buffer, option ranges, config files, the GGUF writer, vocabularies. */
#include <unistd.h>

#include "core/quant.h"
#include "core/timer.h"
#include "engine/config.h"
#include "engine/request.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "engine/engine_impl.h" /* white-box: reads the engine's own state */
#include "engine/sampler.h"
#include "harness.h"
#include "memory/mem.h"
#include "model/tokenizer.h"
#include "probe/host.h"
#include "probe/sysfs.h"

/* Item 1: the text after an echoed prompt keeps its leading space. */
static void test_detok_after_prompt(void) {
  const char *toks[] = {"<unk>", "<s>", "</s>", " Once", " upon", " a", "time"};
  il_vocab *v = NULL;
  IL_CHECK_OK(il_vocab_from_arrays("llama", 7, toks, NULL, NULL, NULL, &v));
  if (!v) return;
  char buf[64];
  il_detok *d = NULL;
  int32_t prompt[] = {1, 3, 4};
  IL_CHECK_OK(il_detok_new(v, false, prompt, 3, &d));
  size_t n = il_detok_push(d, 5, buf, sizeof buf);
  IL_CHECK_INT(n, 2);
  IL_CHECK(n == 2 && memcmp(buf, " a", 2) == 0);
  il_detok_free(d);
  /* BOS alone before: the first piece still loses its space, as before */
  IL_CHECK_OK(il_detok_new(v, false, prompt, 1, &d));
  n = il_detok_push(d, 3, buf, sizeof buf);
  IL_CHECK(n == 4 && memcmp(buf, "Once", 4) == 0);
  il_detok_free(d);
  il_vocab_free(v);
}

/* Item 2: NaN logits: every sampler setting returns a real token, never a NaN one, and never
 * reads outside the candidates (ASan); the engine's check names the problem. */
static void test_sampler_nan(void) {
  enum { NV = 300 };
  float logits[NV];
  uint64_t rs = 3;
  il_sampler_params ps[] = {
      {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 1}, /* the defaults */
      {0.8f, 0, 1.0f, 0.0f, 1.1f, 64, 2},
      {0.0f, 40, 0.95f, 0.05f, 1.0f, 64, 3},
      {1.5f, 5, 0.5f, 0.0f, 1.0f, 0, 4},
  };
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < NV; i++) logits[i] = 2 * il_test_randf(&rs);
    for (int i = pass; i < NV; i += 3 + pass) logits[i] = NAN; /* many NaNs, interleaved */
    if (pass == 2) logits[7] = -INFINITY;
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
      il_sampler *s = NULL;
      IL_CHECK_OK(il_sampler_new(&ps[k], NV, &s));
      if (!s) continue;
      for (int r = 0; r < 20; r++) {
        int32_t t = il_sampler_sample(s, logits);
        IL_CHECK(t >= 0 && t < NV && !isnan(logits[t]));
        il_sampler_accept(s, t);
      }
      il_sampler_free(s);
    }
  }
  /* all NaN: a defined answer (the lowest id), no crash */
  for (int i = 0; i < NV; i++) logits[i] = NAN;
  il_sampler *s = NULL;
  IL_CHECK_OK(il_sampler_new(&ps[0], NV, &s));
  if (s) IL_CHECK_INT(il_sampler_sample(s, logits), 0);
  il_sampler_free(s);

  IL_CHECK_INT(il_logits_check_finite(logits, NV, 5), IL_ERR_RANGE);
  IL_CHECK(strstr(il_error_detail(), "non-finite") && strstr(il_error_detail(), "position 5"));
  for (int i = 0; i < NV; i++) logits[i] = (float)i;
  IL_CHECK_OK(il_logits_check_finite(logits, NV, 0));
  logits[12] = INFINITY;
  IL_CHECK_INT(il_logits_check_finite(logits, NV, 0), IL_ERR_RANGE);
  IL_CHECK_CONTAINS(il_error_detail(), "token 12");
}

/* Item 5: generated pieces longer than 256 bytes reach the callback whole. The built-in tiny
 * model is given a vocabulary of the same size whose pieces are 300 bytes long. */
typedef struct {
  size_t bytes;
  int calls;
} il__sink;

static bool il__sink_fn(void *ud, int32_t token, const char *text, size_t len) {
  il__sink *k = ud;
  k->bytes += len;
  k->calls++;
  for (size_t i = 0; i < len; i++)
    if (text[i] != 'x' && text[i] != 'y') return false;
  return true;
}

static void test_long_pieces(void) {
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.threads = 1;
  cfg.ctx = 64;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&cfg, &e));
  if (!e) return;
  int32_t nv = e->model->hp.n_vocab;
  char **toks = calloc((size_t)nv, sizeof *toks);
  for (int32_t i = 0; i < nv; i++) {
    toks[i] = malloc(301);
    memset(toks[i], 'x', 290);
    for (int b = 0; b < 10; b++) toks[i][290 + b] = (i >> b) & 1 ? 'x' : 'y'; /* distinct texts */
    toks[i][300] = 0;
  }
  il_vocab *v = NULL;
  IL_CHECK_OK(il_vocab_from_arrays("llama", nv, (const char *const *)toks, NULL, NULL, NULL, &v));
  il_vocab_set_special(v, -1, -1, -1, false, false);
  if (v) {
    il_vocab_free(e->vocab);
    e->vocab = v;
    int32_t prompt[] = {5, 6};
    il_request_params rp = il_request_default_params();
    rp.sampling = (il_sampler_params){0, 0, 1, 0, 1, 0, 1};
    rp.n_predict = 6;
    il__sink k = {0, 0};
    il_gen_stats gs;
    IL_CHECK_OK(il_engine_generate(e, prompt, 2, &rp, il__sink_fn, &k, &gs));
    IL_CHECK_INT(gs.n_gen, 6);
    IL_CHECK_INT(k.bytes, 6 * 300);
  }
  for (int32_t i = 0; i < nv; i++) free(toks[i]);
  free(toks);
  il_engine_free(e);
}

/* Item 15: strict integers; item 6: repeat-penalty 0. */
static void test_option_ints(void) {
  il_config c;
  il_config_defaults(&c);
  static il_request_opts r;
  il_request_opts_defaults(&r);
  IL_CHECK_OK(il_config_apply(&c, &r, "seed", "010", "--seed"));
  IL_CHECK_INT(r.p.sampling.seed, 10);
  IL_CHECK_INT(il_config_apply(&c, &r, "seed", "0x10", "--seed"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_config_apply(&c, &r, "seed", " -1", "--seed"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_config_apply(&c, &r, "seed", "18446744073709551616", "--seed"), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_config_apply(&c, &r, "seed", "18446744073709551615", "--seed"));
  IL_CHECK(r.p.sampling.seed == UINT64_MAX);
  IL_CHECK_OK(il_config_set(&c, "threads", "010", "--threads"));
  IL_CHECK_INT(c.threads, 10);
  IL_CHECK_INT(il_config_set(&c, "ctx", "4294967297", "--ctx"), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "out of range");
  IL_CHECK_INT(c.ctx, 0);
  IL_CHECK_INT(il_config_set(&c, "ctx", "99999999999999999999999", "--ctx"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_config_set(&c, "ctx", "+5", "--ctx"), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_config_apply(&c, &r, "repeat-penalty", "0", "--repeat-penalty"), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_config_apply(&c, &r, "repeat-penalty", "0.5", "--repeat-penalty"));
  long long v = 0;
  IL_CHECK_INT(il_config_parse_int("4294967297", 1, 1000, "--reps", &v), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_config_parse_int("-3", -5, 5, "x", &v));
  IL_CHECK_INT(v, -3);
}

/* Item 6: meminfo values that would overflow when multiplied by 1024 are treated as absent. */
static void test_meminfo_overflow(void) {
  const char *dir = il_test_tmpdir();
  char p[600];
  snprintf(p, sizeof p, "mkdir -p %s/proc && printf 'MemTotal: 99999999999999999999 kB\nMemAvailable: "
                        "9223372036854775807 kB\nHugepagesize: 2048 kB\n' > %s/proc/meminfo && "
                        "printf 'processor\t: 0\nflags\t\t: fpu\n' > %s/proc/cpuinfo", dir, dir, dir);
  IL_CHECK_INT(system(p), 0);
  il_sysfs fs;
  IL_CHECK_OK(il_sysfs_init(&fs, dir, NULL));
  il_host_info h;
  il_host_probe(&fs, &h);
  IL_CHECK_INT(h.ram_total, -1);
  IL_CHECK_INT(h.ram_available, -1);
  IL_CHECK_INT(h.hugepage_size, 2048 * 1024);
  snprintf(p, sizeof p, "rm -rf %s", dir);
  IL_CHECK_INT(system(p), 0);
}

/* Item 6: quantizing NaN/Inf is refused; tiny scales do not overflow the integer conversion. */
static void test_quant_nonfinite(void) {
  float x[32];
  unsigned char buf[64];
  for (int i = 0; i < 32; i++) x[i] = (float)i;
  x[5] = NAN;
  IL_CHECK_INT(il_quantize_row(IL_DTYPE_Q8_0, x, buf, 32), IL_ERR_FORMAT);
  IL_CHECK_CONTAINS(il_error_detail(), "element 5");
  x[5] = INFINITY;
  IL_CHECK_INT(il_quantize_row(IL_DTYPE_Q4_0, x, buf, 32), IL_ERR_FORMAT);
  IL_CHECK_INT(il_quantize_row(IL_DTYPE_Q4_1, x, buf, 32), IL_ERR_FORMAT);
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_F16, x, buf, 32));
  /* a subnormal scale: 1/d is infinite; the result is still a valid block (no UB) */
  for (int i = 0; i < 32; i++) x[i] = i % 2 ? 1e-38f : -1e-38f;
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q8_0, x, buf, 32));
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_0, x, buf, 32));
  IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q4_1, x, buf, 32));
}

/* Item 16: config files: NUL bytes, over-long lines, directories, quoted values round-trip. */
static void test_config_files(void) {
  const char *dir = il_test_tmpdir();
  char path[600];
  snprintf(path, sizeof path, "%s/a.conf", dir);
  il_config c, d;
  il_config_defaults(&c);
  static il_request_opts r, r2; /* the prompt is a request option */
  il_request_opts_defaults(&r);
  /* a NUL then an over-long line: the part after the NUL must not become a hidden key */
  FILE *f = fopen(path, "wb");
  fputs("prompt = x", f);
  fputc(0, f);
  for (int i = 0; i < 2 * IL_REQUEST_PROMPT_MAX + 2000; i++) fputc('y', f);
  fputs("\nthreads = 3\n", f);
  fclose(f);
  IL_CHECK_INT(il_config_load(&c, &r, path), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(c.threads, 0);
  /* a line starting with NUL is not blank */
  f = fopen(path, "wb");
  fputc(0, f);
  fputs("threads = 3\n", f);
  fclose(f);
  IL_CHECK_INT(il_config_load(&c, &r, path), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "a.conf:1: NUL byte at column 1");
  /* a directory */
  IL_CHECK_INT(il_config_load(&c, &r, dir), IL_ERR_IO);
  IL_CHECK_CONTAINS(il_error_detail(), "is a directory");
  /* quotes, backslashes, newlines and tabs round-trip */
  snprintf(r.prompt, sizeof r.prompt, "say \"hi\"\nthen \\n\tbye\\");
  snprintf(c.model, sizeof c.model, "/tmp/a \"b\".gguf");
  f = fopen(path, "w");
  il_config_write(&c, &r, f);
  fclose(f);
  il_config_defaults(&d);
  il_request_opts_defaults(&r2);
  IL_CHECK_OK(il_config_load(&d, &r2, path));
  IL_CHECK_STR(r2.prompt, r.prompt);
  IL_CHECK_STR(d.model, c.model);
  d.given = c.given; /* (which options were applied: all of them, from the file) */
  IL_CHECK(memcmp(&c, &d, sizeof c) == 0);
  IL_CHECK(memcmp(&r, &r2, sizeof r) == 0);
  /* malformed quoting is an error, not a literal */
  f = fopen(path, "w");
  fputs("prompt = \"abc\n", f);
  fclose(f);
  IL_CHECK_INT(il_config_load(&d, &r2, path), IL_ERR_INVALID_ARG);
  f = fopen(path, "w");
  fputs("prompt = \"a\\qb\"\n", f);
  fclose(f);
  IL_CHECK_INT(il_config_load(&d, &r2, path), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "unknown escape");
  unlink(path);
  rmdir(dir);
}

/* CPU seconds of this thread: a complexity bound read on it does not move when other processes
 * take the CPU (wall time would: the suite must pass on a loaded machine). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Item 7: the GGUF writer's duplicate check is a hash lookup: 200k tensor names are added in a
 * fraction of a second (the old scan took minutes); duplicates are still refused. */
static void test_writer_many_tensors(void) {
  il_gguf_writer *w = NULL;
  IL_CHECK_OK(il_gguf_writer_new(&w));
  if (!w) return;
  double t0 = cpu_now();
  const int64_t ne[1] = {0};
  char name[64];
  il_status st = IL_OK;
  for (int i = 0; i < 200000 && st == IL_OK; i++) {
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", i);
    st = il_gguf_writer_add_tensor(w, name, IL_DTYPE_F32, 1, ne, NULL, 0);
  }
  IL_CHECK_OK(st);
  IL_CHECK_INT(il_gguf_writer_add_tensor(w, "blk.77.attn_q.weight", IL_DTYPE_F32, 1, ne, NULL, 0), IL_ERR_INVALID_ARG);
  IL_CHECK_OK(il_gguf_writer_set_u32(w, "a.key", 1));
  IL_CHECK_INT(il_gguf_writer_set_u32(w, "a.key", 2), IL_ERR_INVALID_ARG);
  double dt = cpu_now() - t0;
  IL_CHECK(dt < 10.0); /* CPU time: a regression to a quadratic scan takes minutes, this a few ms */
  il_gguf_writer_free(w);
}

/* Item 8: one 256 KiB user-defined token among 60000 others, and a 128 KiB text matched against
 * it: loading and tokenizing are near-linear (the old code took seconds for each: the special
 * list was sorted in O(longest x count), the matching walked O(length x depth)). */
static void test_long_special_token(void) {
  enum { LONG = 256 * 1024, TEXT = 128 * 1024, NU = 60000, NV = NU + 8 };
  char *lng = malloc(LONG + 1), *prompt = malloc(TEXT + 1);
  memset(lng, 'a', LONG);
  lng[LONG] = 0;
  memset(prompt, 'a', TEXT);
  prompt[TEXT] = 0;
  const char **toks = calloc(NV, sizeof *toks);
  int32_t *types = calloc(NV, sizeof *types);
  char (*names)[16] = calloc(NU, sizeof *names);
  const char *base[] = {"<unk>", "<s>", "</s>", lng, "a", "aa", "\xe2\x96\x81", "b"};
  const int32_t base_types[] = {2, 3, 3, 4, 1, 1, 1, 4};
  for (int i = 0; i < 8; i++) {
    toks[i] = base[i];
    types[i] = base_types[i];
  }
  for (int i = 0; i < NU; i++) {
    snprintf(names[i], sizeof names[i], "<u%05d>", i);
    toks[8 + i] = names[i];
    types[8 + i] = 4;
  }
  double t0 = cpu_now();
  il_vocab *v = NULL;
  IL_CHECK_OK(il_vocab_from_arrays("llama", NV, toks, NULL, NULL, types, &v));
  double t_load = cpu_now() - t0;
  if (v) {
    t0 = cpu_now();
    int32_t *ids = NULL;
    size_t n = 0;
    IL_CHECK_OK(il_tokenize_alloc(v, prompt, TEXT, false, true, &ids, &n));
    double t_tok = cpu_now() - t0;
    IL_CHECK(n > 0);
    il_mem_free(ids);
    /* the long token itself is still found, with special tokens around it */
    char *text = malloc(LONG + 16);
    memcpy(text, "bb", 2);
    memcpy(text + 2, lng, LONG);
    memcpy(text + 2 + LONG, "<u00042>", 8);
    IL_CHECK_OK(il_tokenize_alloc(v, text, LONG + 10, false, true, &ids, &n));
    IL_CHECK_INT(n, 4);
    if (n == 4) {
      IL_CHECK_INT(ids[0], 7);
      IL_CHECK_INT(ids[2], 3);
      IL_CHECK_INT(ids[3], 8 + 42);
    }
    il_mem_free(ids);
    free(text);
    printf("long special token: load %.3f s, tokenize 128 KiB %.3f s of CPU\n", t_load, t_tok);
    IL_CHECK(t_load < 2.0 && t_tok < 3.0); /* CPU time: regressions take many seconds, these milliseconds */
  }
  il_vocab_free(v);
  free(names);
  free(types);
  free(toks);
  free(lng);
  free(prompt);
}

int main(void) {
  test_detok_after_prompt();
  test_sampler_nan();
  test_long_pieces();
  test_option_ints();
  test_meminfo_overflow();
  test_quant_nonfinite();
  test_config_files();
  test_writer_many_tensors();
  test_long_special_token();
  return il_test_finish();
}
