/* tests/test_sim: the engine on the simulated GPU.
 *
 * - builtin:tiny gives the same logits on sim as on cpu, bit for bit (same kernels);
 * - the host touches no device memory: per decoded token only the batch upload and the logits
 *   download cross, and their byte counts are exactly what the shapes say;
 * - a device too small for the run fails with IL_ERR_OOM and a report naming the buffer, the
 *   device and a fix; applying the first fix makes the same run succeed, and its predicted
 *   need is never below what the run then reserves at its peak;
 * - every device and host allocation of load + decode fails in turn: an error each time, no
 *   crash, and (under ASan) no leak.
 */
#include <string.h>

#include "backend/registry.h"
#include "engine/engine.h"
#include "engine/kv.h"
#include "engine/oom.h"
#include "harness.h"
#include "memory/mem.h"

static void base_cfg(il_config *c, const char *device) {
  il_config_defaults(c);
  c->ctx = 64;
  c->threads = 2;
  snprintf(c->device, sizeof c->device, "%s", device);
}

/* Prompt of 5 tokens then 3 single steps; all positions' logits into out. */
static il_status decode_some(il_engine *e, float *out) {
  const int toks[8] = {1, 50, 60, 70, 80, 90, 100, 110};
  il_batch_entry b[5];
  for (int i = 0; i < 5; i++) b[i] = (il_batch_entry){toks[i], 0, i, true};
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  IL_TRY(il_engine_decode(e, b, 5, out));
  for (int i = 5; i < 8; i++) {
    il_batch_entry one = {toks[i], 0, i, true};
    IL_TRY(il_engine_decode(e, &one, 1, out ? out + (size_t)i * nv : NULL));
  }
  return IL_OK;
}

static void test_same_logits(void) {
  il_config c;
  base_cfg(&c, "cpu");
  c.logits_all = true;
  il_engine *cpu = NULL, *sim = NULL;
  IL_CHECK_OK(il_engine_open(&c, &cpu));
  base_cfg(&c, "sim:64MiB");
  c.logits_all = true;
  IL_CHECK_OK(il_engine_open(&c, &sim));
  if (!cpu || !sim) return;
  const size_t nv = (size_t)il_engine_model(cpu)->hp.n_vocab;
  float *a = calloc(8 * nv, 4), *b = calloc(8 * nv, 4);
  IL_CHECK_OK(decode_some(cpu, a));
  il_engine_snapshot s0, s1;
  il_engine_snapshot_get(sim, IL_ENGINE_SNAP_ALL, &s0);
  IL_CHECK_OK(decode_some(sim, b));
  il_engine_snapshot_get(sim, IL_ENGINE_SNAP_ALL, &s1);
  const il_transfer_stats x0 = s0.transfers, x1 = s1.transfers;
  IL_CHECK(memcmp(a, b, 8 * nv * 4) == 0);
  /* per pass: one upload of 4 int32 per entry; one download of the logits rows */
  IL_CHECK_INT(x1.upload_bytes - x0.upload_bytes, (5 + 3) * 16);
  IL_CHECK_INT(x1.n_uploads - x0.n_uploads, 4);
  IL_CHECK_INT(x1.download_bytes - x0.download_bytes, 8 * nv * 4);
  /* the weights live on the device, counted under weights */
  const il_mem_stats st = s1.mem;
  const il_kv_opts ko = {.type = s1.kv_type, .block = s1.kv_paged ? s1.kv_block : 0};
  IL_CHECK(st.current[IL_MEM_WEIGHTS] >= il_model_dev_bytes(il_engine_model(sim)));
  IL_CHECK(st.current[IL_MEM_KV] >= il_kv_cache_bytes(&il_engine_model(sim)->hp, 64, 1, &ko) - 64);
  printf("cpu == sim logits (8 positions, bitwise); device holds %zu bytes of weights\n", st.current[IL_MEM_WEIGHTS]);
  free(a), free(b);
  il_engine_free(cpu);
  il_engine_free(sim);
}

/* A device that is too small, the report, and the fix. */
static void test_oom_fix(const char *device, int ctx, int batch, int n_seq) {
  il_config c;
  base_cfg(&c, device);
  c.ctx = ctx;
  c.batch = batch;
  c.n_seq = n_seq;
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  IL_CHECK_INT(st, IL_ERR_OOM);
  if (st != IL_ERR_OOM) {
    il_engine_free(e);
    return;
  }
  const char *text = il_error_detail();
  IL_CHECK_CONTAINS(text, "out of memory on sim:");
  IL_CHECK_CONTAINS(text, "this run needs");
  IL_CHECK_CONTAINS(text, "fix: --");
  il_oom_report r;
  IL_CHECK(il_oom_report_last(&r));
  IL_CHECK(r.n_fixes >= 1);
  IL_CHECK(r.need_total > r.capacity);
  IL_CHECK(r.failure.requested > 0);
  if (r.n_fixes < 1) return;
  printf("%s ctx %d batch %d n-seq %d: needs %zu of %zu; fix --%s %s (predicted %zu)\n", device, ctx, batch, n_seq,
         r.need_total, r.capacity, r.fixes[0].option, r.fixes[0].value, r.fixes[0].predicted);
  /* the JSON form parses (python3 when present) */
  FILE *f = tmpfile();
  il_oom_report_json(&r, f);
  rewind(f);
  char json[4096] = {0};
  IL_CHECK(fread(json, 1, sizeof json - 1, f) > 10);
  fclose(f);
  IL_CHECK(strstr(json, "\"fixes\": [{\"option\"") != NULL || strstr(json, "\"fixes\":[{\"option\"") != NULL);
  /* apply the suggestion: the same run now fits */
  IL_CHECK_OK(il_config_set(&c, r.fixes[0].option, r.fixes[0].value, "fix"));
  IL_CHECK_OK(il_engine_open(&c, &e));
  if (!e) return;
  IL_CHECK_OK(decode_some(e, NULL));
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  const il_mem_stats ms = es.mem;
  /* the prediction is never below what the run reserved at its peak */
  IL_CHECK(r.fixes[0].predicted >= ms.total_peak);
  IL_CHECK(ms.total_peak <= r.capacity);
  printf("  after the fix: peak %zu bytes on the device (predicted %zu)\n", ms.total_peak, r.fixes[0].predicted);
  il_engine_free(e);
}

/* Fails the n-th allocation of engine open + decode on sim, for every n until one succeeds. */
static void test_fault_injection(void) {
  il_config c;
  base_cfg(&c, "sim:64MiB,ctx=1MiB");
  int n, failures = 0;
  for (n = 1; n < 5000; n++) {
    il_mem_fail_after(n);
    il_engine *e = NULL;
    il_status st = il_engine_open(&c, &e);
    if (st == IL_OK) st = decode_some(e, NULL);
    il_engine_free(e);
    il_mem_fail_after(0);
    if (st == IL_OK) break;
    failures++;
    if (st != IL_ERR_OOM) {
      fprintf(stderr, "allocation %d: %s: %s\n", n, il_status_name(st), il_error_detail());
      IL_CHECK_INT(st, IL_ERR_OOM);
      break;
    }
  }
  printf("fault injection: %d allocations of open + decode on sim failed in turn, each an IL_ERR_OOM\n", failures);
  IL_CHECK(failures > 20);
  il_mem_stats hs;
  il_mem_stats_get(&hs);
  IL_CHECK_INT(hs.current[IL_MEM_KV] + hs.current[IL_MEM_ACTIVATIONS] + hs.current[IL_MEM_WEIGHTS], 0);
}

int main(void) {
  test_same_logits();
  /* builtin:tiny F32 weights are about 13 MiB */
  test_oom_fix("sim:20MiB", 2048, 512, 1);        /* the KV cache does not fit: a shorter context */
  test_oom_fix("sim:16MiB", 256, 512, 4);         /* four sequences do not fit */
  test_oom_fix("sim:12MiB", 64, 64, 1);           /* the weights do not fit: lower precision */
  test_oom_fix("sim:24MiB,ctx=6MiB", 1024, 512, 1); /* a context overhead leaves less room */
  test_fault_injection();
  return il_test_finish();
}
