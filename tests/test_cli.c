/* tests/test_cli: the inferlab binary end to end: the real model, golden text, logits files,
 * convert, model info, and the exit codes of bad input. Runs $IL_CLI (set by CTest). */
#include <sys/stat.h>
#include <sys/wait.h>

#include <unistd.h>

#include "harness.h"

static const char *cli;
static char tmp[256];

static void check_starts_with(const char *label, const char *got, const char *want) {
  size_t n = strlen(want);
  int ok = strncmp(got, want, n) == 0;
  if (!ok) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    fprintf(stderr, "%s: output differs at byte %zu:\n  got:  \"%.60s\"\n  want: \"%.60s\"\n", label, i, got + i, want + i);
  }
  IL_CHECK(ok);
}

static void test_real_model(void) {
  const char *bin = il_test_fixture("models/stories260K.bin");
  if (!bin) {
    printf("SKIP (part): ../shared/fixtures/models absent: real-model tests not run\n");
    return;
  }
  char bin_path[1024], tok[1024], gguf[1024], golden_path[1024];
  snprintf(bin_path, sizeof bin_path, "%s", bin);
  snprintf(tok, sizeof tok, "%s", il_test_fixture("models/tok512.bin"));
  snprintf(gguf, sizeof gguf, "%s", il_test_fixture("models/stories260K-f32.gguf"));
  snprintf(golden_path, sizeof golden_path, "%s", il_test_fixture("models/stories260K.greedy-once-upon-a-time.txt"));
  char *golden = il_test_read_file(golden_path, NULL);
  IL_CHECK(golden != NULL);
  if (!golden) return;
  /* the file ends with the newline the reference printed after the text */
  size_t gl = strlen(golden);
  while (gl && golden[gl - 1] == '\n') golden[--gl] = 0;
  static char out[1 << 16], cmd[4096];

  snprintf(cmd, sizeof cmd, "%s convert --from llama2c %s --tokenizer %s -o %s/stories.gguf 2>&1", cli, bin_path, tok, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);

  snprintf(cmd, sizeof cmd, "%s run -m %s/stories.gguf -p 'Once upon a time' -n 200 --temp 0 -t 2 2>/dev/null", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  check_starts_with("converted llama2.c model", out, golden);

  snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 200 --temp 0 -t 1 2>/dev/null", cli, gguf);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  check_starts_with("llama.cpp's GGUF", out, golden);

  /* the llama.cpp file says context_length 128: generation stops when it is full */
  size_t want_len = strlen(golden);
  IL_CHECK(strlen(out) >= want_len && strlen(out) <= want_len + 2);

  /* stats on stderr */
  snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 8 --temp 0 2>&1 >/dev/null", cli, gguf);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "tokens/s");
  IL_CHECK(strstr(out, "weights") != NULL && strstr(out, "kv") != NULL);

  /* logits: [n_tokens x n_vocab] float32, same from both files */
  snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens 1,403,407,261 -o %s/a.f32 2>/dev/null", cli, gguf, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  snprintf(cmd, sizeof cmd, "%s logits -m %s/stories.gguf --tokens 1,403,407,261 -o %s/b.f32 2>/dev/null", cli, tmp, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  char pa[512], pb[512];
  snprintf(pa, sizeof pa, "%s/a.f32", tmp);
  snprintf(pb, sizeof pb, "%s/b.f32", tmp);
  size_t la = 0, lb = 0;
  char *a = il_test_read_file(pa, &la), *b = il_test_read_file(pb, &lb);
  IL_CHECK_INT(la, 4 * 512 * 4);
  IL_CHECK_INT(lb, la);
  if (a && b && la == lb) {
    float *fa = (float *)a, *fb = (float *)b;
    double mx = 0;
    for (size_t i = 0; i < la / 4; i++) mx = fmax(mx, fabs(fa[i] - fb[i]));
    IL_CHECK_NEAR(mx, 0, 1e-4);
    /* greedy from position 3 ("Once upon a") must be the token of " time" (261) per tok512 */
    int best = 0;
    for (int v = 1; v < 512; v++)
      if (fa[2 * 512 + v] > fa[2 * 512 + best]) best = v;
    IL_CHECK_INT(best, 261);
  }
  free(a), free(b);

  /* quantized export keeps the 172-wide FFN rows as f32 and says so */
  snprintf(cmd, sizeof cmd, "%s convert %s --type q8_0 -o %s/q8.gguf 2>&1", cli, gguf, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "not a multiple");
  snprintf(cmd, sizeof cmd, "%s run -m %s/q8.gguf -p 'Once upon a time' -n 20 --temp 0 2>/dev/null", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strncmp(out, "Once upon a time", 16) == 0);

  snprintf(cmd, sizeof cmd, "%s model info %s", cli, gguf);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "blk.4.ffn_down.weight");
  IL_CHECK_CONTAINS(out, "kv heads 4");
  free(golden);
}

static void test_errors(void) {
  static char out[1 << 14], cmd[4096];
  snprintf(cmd, sizeof cmd, "%s run -m /nonexistent/model.gguf 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);
  IL_CHECK_CONTAINS(out, "/nonexistent/model.gguf");

  snprintf(cmd, sizeof cmd, "printf 'GGUF\\003\\000\\000\\000garbage' > %s/bad.gguf; %s run -m %s/bad.gguf 2>&1", tmp, cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 65);
  IL_CHECK_CONTAINS(out, "offset");

  snprintf(cmd, sizeof cmd, "%s run --threads lots 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--threads");

  snprintf(cmd, sizeof cmd, "%s run --no-such-flag 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);

  snprintf(cmd, sizeof cmd, "%s logits --tokens 1,x,3 -o %s/x.f32 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "entry 2");

  snprintf(cmd, sizeof cmd, "%s logits --tokens 1,99999 -o %s/x.f32 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  struct stat sb;
  char px[512];
  snprintf(px, sizeof px, "%s/x.f32", tmp);
  IL_CHECK(stat(px, &sb) != 0); /* no partial output */

  snprintf(cmd, sizeof cmd, "%s run -m builtin:nope 2>&1", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);

  snprintf(cmd, sizeof cmd, "%s convert builtin:tiny --type q9_9 -o %s/y.gguf 2>&1", cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);

  snprintf(cmd, sizeof cmd, "%s --version", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strstr(out, "simd") != NULL && strstr(out, "cuda") != NULL);
  for (const char *c = "run logits model convert"; *c;) {
    char name[32];
    int n = 0;
    while (*c && *c != ' ') name[n++] = *c++;
    name[n] = 0;
    while (*c == ' ') c++;
    snprintf(cmd, sizeof cmd, "%s %s --help", cli, name);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    IL_CHECK(strstr(out, "usage: inferlab") != NULL && strstr(out, "exit codes") != NULL);
  }
}

static void test_builtin(void) {
  static char out[1 << 16], cmd[4096];
  /* builtin:tiny is the default model; same seed -> same text, other seed -> other text */
  snprintf(cmd, sizeof cmd, "%s run -p Hello -n 24 --seed 7 2>/dev/null", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  static char first[1 << 16];
  memcpy(first, out, sizeof first);
  IL_CHECK(strlen(first) > 6);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_STR(out, first);
  snprintf(cmd, sizeof cmd, "%s run -p Hello -n 24 --seed 8 2>/dev/null", cli);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK(strcmp(out, first) != 0);

  /* convert builtin:tiny -> GGUF, then the file gives the same logits as the built-in */
  snprintf(cmd, sizeof cmd, "%s convert builtin:tiny --type f32 -o %s/tiny.gguf 2>/dev/null && "
                            "%s logits -m %s/tiny.gguf --tokens 1,70,80,90 -o %s/t1.f32 2>/dev/null && "
                            "%s logits --tokens 1,70,80,90 -o %s/t2.f32 2>/dev/null && cmp %s/t1.f32 %s/t2.f32",
           cli, tmp, cli, tmp, tmp, cli, tmp, tmp, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  snprintf(cmd, sizeof cmd, "%s convert builtin:tiny --type q4_0 -o %s/tq.gguf 2>/dev/null && %s model info %s/tq.gguf",
           cli, tmp, cli, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "q4_0");
}

/* A real byte-level BPE model (SmolLM2-135M-Instruct, Q4_1), fetched by
 * scripts/fetch_smollm2.sh into $IL_MODEL_CACHE or ~/.cache/inferlab/models. */
static void test_smollm2(void) {
  char path[1024];
  const char *cache = getenv("IL_MODEL_CACHE");
  if (cache) snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
  else snprintf(path, sizeof path, "%s/.cache/inferlab/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME") ? getenv("HOME") : "/root");
  if (access(path, R_OK) != 0) {
    printf("SKIP (part): %s absent (run scripts/fetch_smollm2.sh): SmolLM2 test not run\n", path);
    return;
  }
  static char out[1 << 14], cmd[4096];
  char prompt[512];
  snprintf(prompt, sizeof prompt, "%s/chat.txt", tmp);
  FILE *f = fopen(prompt, "w");
  fputs("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s run -m %s -f %s --temp 0 -n 40 --no-echo 2>/dev/null", cli, path, prompt);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  printf("SmolLM2 answered: %s", out);
  IL_CHECK_CONTAINS(out, "Paris");

  /* through q8_0, q4_k_m, q5_k_m and iq4_nl (issues 13, 35): requantized from the cached Q4_1
   * (the f16 original is not on PyPI; quant warns that the error compounds). SmolLM2's rows of
   * 576 are not a multiple of 256, so q4_k_m and q5_k_m keep most tensors in llama-quantize's
   * fallback types, Q5_0 and Q5_1 (notes say so), and iq4_nl writes IQ4_NL. Each file loads, answers the same
   * question, and stays close to its source on a short English text (eval --ref: KL, top-1). */
  char text[512];
  snprintf(text, sizeof text, "%s/text.txt", tmp);
  f = fopen(text, "w");
  fputs("The city of Paris is the capital and largest city of France. It sits on the river Seine, in the north "
        "of the country. Paris is known for its museums and monuments, among them the Louvre, the Eiffel Tower "
        "and the cathedral of Notre-Dame. Millions of visitors come every year to see the city, to eat in its "
        "restaurants and to walk along the river. The city is divided into twenty districts, which are numbered "
        "in a spiral that starts at the centre. Many people who live in Paris travel by metro, bus or bicycle.\n",
        f);
  fclose(f);
  const struct {
    const char *type, *fallback; /* the type a note names for rows of 576 */
    double kl_max_mean, top1_min;
  } qs[] = {/* seen: KL 0.0072, 0.053, 0.082, 0.20; top-1 0.978, 0.978, 0.911, 0.756 (the uniform
             * Q4_1 grid the source holds maps onto IQ4_NL's uneven levels worst) */
            {"q8_0", NULL, 0.02, 0.90},
            {"q4_k_m", "q5_0", 0.08, 0.85},
            {"q5_k_m", "q5_1", 0.12, 0.85},
            {"iq4_nl", NULL, 0.30, 0.65}};
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
    char q[600];
    snprintf(q, sizeof q, "%s/smollm2-%s.gguf", tmp, qs[i].type);
    snprintf(cmd, sizeof cmd, "%s quant -m %s -o %s --type %s 2>%s/quant.log", cli, path, q, qs[i].type, tmp);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "grep -c 'quantizing them again' %s/quant.log", tmp); /* the requantization warning */
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    if (qs[i].fallback) {
      /* the notes' summary line counts the fallback type and names the first tensor's reason */
      snprintf(cmd, sizeof cmd,
               "grep -cE 'kept another type \\(.*[0-9]+ as %s.*row length 576 is not a multiple of 256 .*fell back to %s;' "
               "%s/quant.log",
               qs[i].fallback, qs[i].fallback, tmp);
      IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    }
    snprintf(cmd, sizeof cmd, "%s run -m %s -f %s --temp 0 -n 24 --no-echo 2>/dev/null", cli, q, prompt);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    printf("SmolLM2 %s answered: %s", qs[i].type, out);
    IL_CHECK_CONTAINS(out, "Paris");
    snprintf(cmd, sizeof cmd, "%s eval -m %s --ref %s --text %s --ctx 32 --json 2>/dev/null", cli, q, path, text);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    const char *kl = strstr(out, "\"mean\":"), *t1 = strstr(out, "\"top1_agreement\":");
    IL_CHECK(kl && t1);
    if (!kl || !t1) continue;
    const double kl_mean = strtod(kl + 7, NULL), top1 = strtod(t1 + 17, NULL);
    printf("SmolLM2 %s vs Q4_1: KL mean %.4g (bound %.2g), top-1 %.3f (at least %.2f)\n", qs[i].type, kl_mean,
           qs[i].kl_max_mean, top1, qs[i].top1_min);
    IL_CHECK(kl_mean >= 0 && kl_mean <= qs[i].kl_max_mean);
    IL_CHECK(top1 >= qs[i].top1_min);
  }
}

int main(void) {
  cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) IL_SKIP("IL_CLI is not set to the inferlab binary");
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  test_errors();
  test_builtin();
  test_real_model();
  test_smollm2();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return il_test_finish();
}
