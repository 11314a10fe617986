/* tests/test_plan: the planner against real runs on the simulated GPU.
 *
 * Over a grid of configurations (weight type, batch, context, sequences, KV type and layout,
 * attention kernel, placement) of builtin:tiny and, when the fixtures are present, the
 * stories260K model: plan on a large device gives peak_bytes P; then the same job really runs
 * (open + prompt + decode) on sim:P and succeeds; its measured device peak (allocator reserved
 * + fixed overhead) is never above P and within 3% of it; on a device 3% smaller the job fails
 * with IL_ERR_OOM. A configuration that does not fit gets fixes, and the first fix, applied,
 * runs on the device. Bad input: a missing model, an impossible device (sim:1KiB), a cpu device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/oom.h"
#include "harness.h"
#include "lab/plan.h"

/* Opens cfg on `device` and runs a prompt of 12 tokens then 4 steps; *peak = reserved peak +
 * fixed overhead. */
static il_status real_run(const il_config *cfg, const char *device, size_t *peak) {
  il_config c = *cfg;
  snprintf(c.device, sizeof c.device, "%s", device);
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  if (st != IL_OK) return st;
  il_batch_entry b[16];
  const int n = il_engine_n_ctx(e) < 16 ? il_engine_n_ctx(e) : 16;
  for (int i = 0; i < n; i++) b[i] = (il_batch_entry){1 + (i * 13) % 200, 0, i, i >= n - 5};
  st = il_engine_decode(e, b, n - 4, NULL);
  for (int i = n - 4; st == IL_OK && i < n; i++) st = il_engine_decode(e, &b[i], 1, NULL);
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  *peak = es.alloc.total.peak_reserved + es.fixed_bytes;
  il_engine_free(e);
  return st;
}

static int n_checked, n_within;
static double worst_over, worst_under;

static void check(const il_config *cfg, const char *label) {
  il_plan p;
  il_status st = il_plan_run(cfg, &p);
  IL_CHECK_OK(st);
  if (st != IL_OK) return;
  IL_CHECK(p.fits);
  char dev[96];
  size_t measured = 0;
  snprintf(dev, sizeof dev, "sim:%zu%s", p.peak_bytes, strstr(cfg->device, ",ctx=") ? strstr(cfg->device, ",ctx=") : "");
  st = real_run(cfg, dev, &measured);
  if (st != IL_OK) fprintf(stderr, "%s: the job fails on %s: %s\n", label, dev, il_error_detail());
  IL_CHECK_OK(st);
  const double over = (double)p.peak_bytes / (double)measured - 1.0;
  if (!(measured <= p.peak_bytes)) fprintf(stderr, "%s: measured %zu above predicted %zu\n", label, measured, p.peak_bytes);
  IL_CHECK(measured <= p.peak_bytes);
  if (over > worst_over) worst_over = over;
  n_within += over <= 0.03;
  /* 3% smaller does not run */
  snprintf(dev, sizeof dev, "sim:%zu%s", (size_t)((double)p.peak_bytes * 0.97),
           strstr(cfg->device, ",ctx=") ? strstr(cfg->device, ",ctx=") : "");
  size_t m2;
  st = real_run(cfg, dev, &m2);
  if (st != IL_ERR_OOM) fprintf(stderr, "%s: still runs on %s\n", label, dev);
  IL_CHECK_INT(st, IL_ERR_OOM);
  n_checked++;
}

static void grid(const char *model, const char *wtype) {
  const char *kvt[] = {"f16", "f32"}, *kv[] = {"contiguous", "paged"}, *attn[] = {"flash", "naive", "sliced"};
  const int ctx[] = {64, 256, 1024}, batch[] = {1, 32, 512}, nseq[] = {1, 3};
  const char *ngl[] = {"all", "2"};
  int i = 0;
  /* a fixed walk through the grid: every value of every option appears, 36 configurations */
  for (int k = 0; k < 36; k++, i += 7) {
    il_config c;
    il_config_defaults(&c);
    c.threads = 2;
    snprintf(c.model, sizeof c.model, "%s", model);
    snprintf(c.wtype, sizeof c.wtype, "%s", wtype);
    snprintf(c.kv_type, sizeof c.kv_type, "%s", kvt[k % 2]);
    snprintf(c.kv, sizeof c.kv, "%s", kv[(k / 2) % 2]);
    snprintf(c.attn, sizeof c.attn, "%s", attn[k % 3]);
    c.ctx = ctx[(k / 3) % 3];
    c.batch = batch[(k / 9) % 3];
    c.n_seq = nseq[(k / 4) % 2];
    snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", ngl[(k / 6) % 2]);
    snprintf(c.device, sizeof c.device, "%s", k % 5 == 0 ? "sim:1GiB,ctx=3MiB" : "sim:1GiB");
    char label[512];
    snprintf(label, sizeof label, "%s %s kv %s %s attn %s ctx %d batch %d seq %d ngl %s %s", model, *wtype ? wtype : "-",
             c.kv_type, c.kv, c.attn, c.ctx, c.batch, c.n_seq, c.gpu_layers, c.device);
    check(&c, label);
  }
}

static void test_fixes(void) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 2048;
  snprintf(c.device, sizeof c.device, "sim:16MiB");
  il_plan p;
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(!p.fits);
  IL_CHECK(p.peak_bytes > p.capacity);
  IL_CHECK(p.n_fixes >= 1);
  if (p.n_fixes < 1) return;
  IL_CHECK(p.fixes[0].peak_bytes <= p.capacity);
  IL_CHECK_OK(il_config_set(&c, p.fixes[0].option, p.fixes[0].value, "fix"));
  size_t measured;
  IL_CHECK_OK(real_run(&c, "sim:16MiB", &measured));
  printf("sim:16MiB ctx 2048: needs %zu; fix --%s %s -> runs (device peak %zu)\n", p.peak_bytes, p.fixes[0].option,
         p.fixes[0].value, measured);
  /* --fit does the same by itself */
  il_config f;
  il_config_defaults(&f);
  f.ctx = 2048;
  f.fit = true;
  snprintf(f.device, sizeof f.device, "sim:16MiB");
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&f, &e));
  il_engine_snapshot es;
  if (e) il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  if (e) IL_CHECK(es.n_ctx < 2048 || es.n_batch < 512 || es.n_dev_layers < es.n_layer);
  il_engine_free(e);
}

/* Where the KV cache dominates, q8_0 cells are among the fixes (after those that cost no
 * quality), and the run with them holds the device. */
static void test_kv_q8_fix(void) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 8192;
  snprintf(c.device, sizeof c.device, "sim:32MiB");
  il_plan p;
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(!p.fits);
  int at = -1;
  for (int i = 0; i < p.n_fixes; i++)
    if (!strcmp(p.fixes[i].option, "kv-type")) at = i;
  IL_CHECK(at > 0); /* --batch comes first: it costs only prompt speed */
  if (at < 0) return;
  IL_CHECK(!strcmp(p.fixes[at].value, "q8_0"));
  IL_CHECK(p.fixes[at].peak_bytes <= p.capacity);
  IL_CHECK_OK(il_config_set(&c, "kv-type", "q8_0", "fix"));
  size_t measured;
  IL_CHECK_OK(real_run(&c, "sim:32MiB", &measured));
  IL_CHECK(measured <= p.capacity);
  printf("sim:32MiB ctx 8192: needs %zu; fix %d --kv-type q8_0 predicted %zu -> runs (device peak %zu)\n",
         p.peak_bytes, at, p.fixes[at].peak_bytes, measured);
}

/* Notes the engine logs ("context reduced to N ..."), counted. */
static int n_ctx_notes;
static void count_notes(void *ud, il_log_level level, const char *msg) {
  (void)ud, (void)level;
  if (strstr(msg, "context reduced to")) n_ctx_notes++;
}

/* run and plan propose the same first fix for the same job: run's report (its context sized
 * for prompt + n, 256 here) and plan's (the default context, sized to the device as the engine
 * would size it beside the weights) assume the same context and say which one; plan's checks
 * pin that context, so the fix is not walked down to a smaller one (before: --gpu-layers 0
 * from plan against 2 from run on sim:10MiB). plan logs the context note at most once. */
static void test_run_and_plan_agree(void) {
  const char *devs[] = {"sim:8MiB", "sim:10MiB", "sim:12MiB"};
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) {
    il_config c;
    il_config_defaults(&c);
    snprintf(c.device, sizeof c.device, "%s", devs[i]);
    il_config run = c;
    run.ctx = 256, run.ctx_is_hint = true; /* what run sizes for a short prompt and -n 4 */
    il_engine *e = NULL;
    IL_CHECK_INT(il_engine_open(&run, &e), IL_ERR_OOM);
    il_engine_free(e);
    il_oom_report r;
    IL_CHECK(il_oom_report_last(&r));
    IL_CHECK(r.n_fixes >= 1);
    IL_CHECK_INT(r.n_ctx, 256);
    IL_CHECK_INT(r.ctx_from, IL_OOM_CTX_SIZED);
    IL_CHECK_CONTAINS(il_error_detail(), "at ctx 256 (sized for the prompt");
    n_ctx_notes = 0;
    il_log_set(count_notes, NULL);
    il_plan p;
    IL_CHECK_OK(il_plan_run(&c, &p));
    il_log_set(NULL, NULL);
    IL_CHECK(!p.fits);
    IL_CHECK(p.n_fixes >= 1);
    IL_CHECK_INT(p.ctx_from, IL_OOM_CTX_DEFAULT);
    IL_CHECK_INT(p.n_ctx, 256);
    IL_CHECK(n_ctx_notes <= 1);
    if (r.n_fixes < 1 || p.n_fixes < 1) continue;
    printf("%s: run's first fix --%s %s, plan's --%s %s (ctx %d); %d context notes in %d dry runs\n", devs[i],
           r.fixes[0].option, r.fixes[0].value, p.fixes[0].option, p.fixes[0].value, p.n_ctx, n_ctx_notes, p.dry_runs);
    IL_CHECK_STR(p.fixes[0].option, r.fixes[0].option);
    IL_CHECK_STR(p.fixes[0].value, r.fixes[0].value);
    /* the printed run line names where the context comes from */
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    il_plan_print(&p, f);
    fclose(f);
    IL_CHECK_CONTAINS(txt, "ctx 256 is the model's default context");
    free(txt);
  }
}

/* A run larger than the device is capacity, even where the allocator's own test (its cached
 * free bytes would hold the request, no block does) says fragmentation: builtin:tiny (13 MiB
 * of f32 weights) on devices from 4 to 13 MiB. Before, some of these said fragmentation. */
static void test_oom_cause(void) {
  int n_oom = 0, n_alloc_frag = 0;
  for (size_t kib = 4096; kib <= 13 * 1024; kib += 128) {
    il_config c;
    il_config_defaults(&c);
    snprintf(c.device, sizeof c.device, "sim:%zuKiB", kib);
    c.ctx = 256, c.ctx_is_hint = true;
    il_engine *e = NULL;
    il_status st = il_engine_open(&c, &e);
    il_engine_free(e);
    il_oom_report r;
    if (st != IL_ERR_OOM || !il_oom_report_last(&r)) continue;
    n_oom++;
    n_alloc_frag += r.failure.fragmentation;
    IL_CHECK(r.need_total > r.capacity);
    IL_CHECK(!r.fragmentation);
    IL_CHECK_CONTAINS(il_error_detail(), "cause: capacity");
  }
  printf("builtin:tiny on 4-13 MiB: %d out of memory, %d where the allocator alone said fragmentation; all capacity\n",
         n_oom, n_alloc_frag);
  IL_CHECK(n_oom > 20);
  IL_CHECK(n_alloc_frag >= 1); /* the case the classification is about occurred */
}

static void test_errors(void) {
  il_config c;
  il_config_defaults(&c);
  il_plan p;
  snprintf(c.device, sizeof c.device, "cpu");
  IL_CHECK_INT(il_plan_run(&c, &p), IL_ERR_UNSUPPORTED);
  snprintf(c.device, sizeof c.device, "sim:1KiB");
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(!p.fits); /* not an error: a result that says how much is missing */
  snprintf(c.device, sizeof c.device, "sim:1GiB");
  snprintf(c.model, sizeof c.model, "/nonexistent/model.gguf");
  il_status st = il_plan_run(&c, &p);
  IL_CHECK(st == IL_ERR_IO || st == IL_ERR_NOT_FOUND);
  IL_CHECK_CONTAINS(il_error_detail(), "/nonexistent/model.gguf");
}

int main(void) {
  grid("builtin:tiny", "");
  grid("builtin:tiny", "q8_0");
  const char *fx = il_test_fixture("models/stories260K-f32.gguf");
  if (fx) grid(fx, "");
  else printf("SKIP (part): models/stories260K-f32.gguf not found: the grid runs on builtin:tiny only\n");
  printf("planner: %d configurations; every job ran on sim:peak_bytes and failed 3%% below it; "
         "%d of %d within 3%% of the measured peak (worst %.2f%% over)\n",
         n_checked, n_within, n_checked, 100 * worst_over);
  IL_CHECK(n_checked >= 60);
  IL_CHECK_INT(n_within, n_checked);
  test_fixes();
  test_kv_q8_fix();
  test_run_and_plan_agree();
  test_oom_cause();
  test_errors();
  (void)worst_under;
  return il_test_finish();
}
