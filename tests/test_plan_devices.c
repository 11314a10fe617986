/* tests/test_plan_devices: the planner per device of a --device list, and --split auto.
 *
 * - For builtin:tiny and builtin:qwen3-tiny (tied output head) on 2 and 4 sim devices of
 *   uneven sizes (one with a context overhead; default, fixed and auto splits), a real run on
 *   devices of exactly the planned per-device peaks opens, runs a prompt and two decode steps
 *   with one device's logits bit for bit, and on every device: what its allocator reserved
 *   (plus its fixed overhead) is never above the plan and at most 3% below it; what its
 *   memory space counts (blocks, so less: the last 2 MiB small-pool segment of a tight
 *   allocator is partly empty) is never above the plan's blocks peak and at most 3% below it,
 *   and the JSON carries both figures; each device 3%
 *   smaller than its peak fails with out of memory on that device, the report naming it;
 * - --split auto fits where the split proportional to each device's free memory (llama.cpp's
 *   default for --tensor-split) runs out, and its logits equal one device's bit for bit;
 * - the out-of-memory report of a list names the device that ran out and a --split fix (a
 *   --gpu-layers one when --gpu-layers gave the counts); the fix applied (and --fit) opens and
 *   runs;
 * - --place blk.N=K moves the split so that layer N is on the list's K-th device (the split the
 *   engine ends with, one device's logits); items that ask for layers out of list order, a
 *   layer on the CPU between devices or a device past the list are errors naming the item;
 * - --gpu-layers auto on a list: every layer on large devices; on devices too small for all,
 *   the most layers that fit (the plan of that count fits, one more does not), and it runs;
 * - --tp 2 and 4 (every layer split across the devices, the first also holding the embedding
 *   and the head): the same per-device checks as a split, the logits within rounding of one
 *   device's (test_tp checks them closely).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h" /* white-box: each device's memory space */
#include "harness.h"
#include "lab/plan.h"

#define N_TOK 7

static int tp_n; /* --tp for the configs cfg_for makes */

static il_config cfg_for(const char *model, const char *device, const char *split) {
  il_config c;
  il_config_defaults(&c);
  c.tp = tp_n;
  snprintf(c.model, sizeof c.model, "%s", model);
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.split, sizeof c.split, "%s", split);
  c.ctx = 128;
  c.batch = 64;
  c.threads = 2;
  return c;
}

/* A prompt of N_TOK - 2 tokens, then two single steps; the last logits row of each pass. */
static il_status run(il_engine *e, float *out) {
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){1 + i * 29 % 300, 0, i, i >= N_TOK - 3};
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  IL_TRY(il_engine_decode(e, b, N_TOK - 2, out));
  for (int i = N_TOK - 2; i < N_TOK; i++) IL_TRY(il_engine_decode(e, &b[i], 1, out + (size_t)(i - N_TOK + 3) * nv));
  return IL_OK;
}

static float *one_device(const char *model);

/* The devices of a plan at sizes size[k] (each item's options kept). */
static void devices_at(const il_plan *p, const size_t *size, char *out, size_t n) {
  size_t o = 0;
  for (int k = 0; k < p->n_devs; k++) {
    const char *opts = strchr(p->devs[k].device, ',');
    o += (size_t)snprintf(out + o, n - o, "%ssim:%zu%s", k ? "," : "", size[k], opts ? opts : "");
  }
}

static void test_peaks(const char *model, const char *device, const char *split, const float *want) {
  il_config c = cfg_for(model, device, split);
  il_plan p;
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(p.n_devs >= 2);
  /* the text has a column per device and the JSON a record per device, with these figures */
  char *txt = NULL, *js = NULL;
  size_t nt = 0, nj = 0;
  FILE *f = open_memstream(&txt, &nt);
  il_plan_print(&p, f);
  fclose(f);
  f = open_memstream(&js, &nj);
  il_plan_json(&p, f);
  fclose(f);
  for (int k = 0; k < p.n_devs; k++) {
    char key[64];
    IL_CHECK_CONTAINS(txt, p.devs[k].device);
    snprintf(key, sizeof key, "\"peak_bytes\": %zu", p.devs[k].peak_bytes);
    IL_CHECK_CONTAINS(js, key);
    snprintf(key, sizeof key, "\"space_peak_bytes\": %zu", p.devs[k].space_peak_bytes);
    IL_CHECK_CONTAINS(js, key);
  }
  IL_CHECK_CONTAINS(js, "\"devices\": [");
  IL_CHECK_CONTAINS(txt, "blocks peak");
  free(txt);
  free(js);
  size_t size[IL_BACKEND_LIST_MAX];
  for (int k = 0; k < p.n_devs; k++) size[k] = p.devs[k].peak_bytes ? p.devs[k].peak_bytes : 4096;
  il_config r = c;
  devices_at(&p, size, r.device, sizeof r.device);
  if (tp_n < 2) snprintf(r.split, sizeof r.split, "%s", p.split);
  IL_CHECK_INT(p.tp, tp_n);
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&r, &e));
  if (!e) return;
  const size_t nl = (size_t)3 * (size_t)e->model->hp.n_vocab;
  float *logits = calloc(nl, 4);
  IL_CHECK_OK(run(e, logits));
  if (tp_n < 2) IL_CHECK(!want || memcmp(logits, want, nl * 4) == 0); /* every split: one device's logits */
  for (size_t i = 0; tp_n > 1 && want && i < nl; i++) IL_CHECK(fabsf(logits[i] - want[i]) < 1e-3f);
  free(logits);
  for (int k = 0; k < p.n_devs; k++) {
    il_mem_stats ms;
    il_mem_space_stats(e->devs[k]->space, &ms);
    il_caching_stats cs;
    e->devs[k]->ops->allocator_stats(e->devs[k], &cs);
    const size_t held = cs.total.peak_reserved + e->dev_fixed[k]; /* segments: what the device gives */
    const double ratio = (double)held / (double)p.devs[k].peak_bytes;
    printf("%s --device %s: device %d: %d layers, planned %zu, reserved peak %zu (%.4f); planned blocks %zu, "
           "space peak %zu (%.4f)\n",
           model, device, k + 1, p.devs[k].n_layers, p.devs[k].peak_bytes, held, ratio, p.devs[k].space_peak_bytes,
           ms.total_peak, p.devs[k].space_peak_bytes ? (double)ms.total_peak / (double)p.devs[k].space_peak_bytes : 0.0);
    if (p.devs[k].n_layers == 0 && k > 0 && k < p.n_devs - 1) { /* between others, no layers: nothing */
      IL_CHECK_INT(held, 0);
      IL_CHECK_INT(p.devs[k].peak_bytes, 0);
      continue;
    }
    IL_CHECK(ms.total_peak <= held);
    /* the space counts blocks; a tight allocator's last small segment (2 MiB) is partly empty,
     * up to 5.6% of builtin:tiny's 4-7 MiB devices, which the plan's blocks peak predicts */
    IL_CHECK(p.devs[k].space_peak_bytes <= p.devs[k].peak_bytes);
    IL_CHECK(ms.total_peak <= p.devs[k].space_peak_bytes);
    IL_CHECK((double)ms.total_peak >= 0.97 * (double)p.devs[k].space_peak_bytes);
    IL_CHECK(held <= p.devs[k].peak_bytes);
    IL_CHECK(ratio >= 0.97);
  }
  il_engine_free(e);
  /* each device 3% smaller than its peak: out of memory there, and the report says which */
  for (int k = 0; k < p.n_devs; k++) {
    if (!p.devs[k].peak_bytes) continue;
    size_t s2[IL_BACKEND_LIST_MAX];
    memcpy(s2, size, sizeof s2);
    s2[k] = size[k] - size[k] * 3 / 100;
    devices_at(&p, s2, r.device, sizeof r.device);
    IL_CHECK_INT(il_engine_open(&r, &e), IL_ERR_OOM);
    il_oom_report rep;
    IL_CHECK(il_oom_report_last(&rep));
    IL_CHECK_INT(rep.n_devs, p.n_devs);
    IL_CHECK_INT(rep.dev, k);
  }
}

/* One device's logits of the run, the reference of every split. */
static float *one_device(const char *model) {
  il_config c = cfg_for(model, "sim:64MiB", "");
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  if (!e) return NULL;
  float *want = calloc((size_t)3 * (size_t)e->model->hp.n_vocab, 4);
  IL_CHECK_OK(run(e, want));
  il_engine_free(e);
  return want;
}

static void check_runs(const il_config *c, const float *want, const char *what) {
  il_engine *e = NULL;
  il_status st = il_engine_open(c, &e);
  if (st != IL_OK) fprintf(stderr, "%s: %s\n", what, il_error_detail());
  IL_CHECK_OK(st);
  if (!e) return;
  const size_t n = (size_t)3 * (size_t)e->model->hp.n_vocab;
  float *got = calloc(n, 4);
  IL_CHECK_OK(run(e, got));
  if (memcmp(got, want, n * 4)) fprintf(stderr, "%s: logits differ from one device's\n", what);
  IL_CHECK(memcmp(got, want, n * 4) == 0);
  free(got);
  il_engine_free(e);
}

/* free: each device's free memory (its size less ctx=), the ratios llama.cpp's --tensor-split
 * defaults to. That split runs out on device `ran_out`; --split auto, the report's first fix
 * (a --split) and --fit all open and give one device's logits. */
static void test_auto(const char *model, const char *device, const char *free, int ran_out, const float *want) {
  il_config c = cfg_for(model, device, free);
  il_engine *e = NULL;
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_OOM);
  IL_CHECK_CONTAINS(il_error_detail(), "(device ");
  il_oom_report r;
  IL_CHECK(il_oom_report_last(&r));
  IL_CHECK_INT(r.n_devs, c.device[0] ? r.n_devs : 0);
  IL_CHECK_INT(r.dev, ran_out);
  IL_CHECK(r.n_fixes > 0);
  if (r.n_fixes > 0) {
    IL_CHECK_STR(r.fixes[0].option, "split");
    il_config f = c;
    IL_CHECK_OK(il_oom_fix_apply(&r, r.fixes[0].option, r.fixes[0].value, &f));
    check_runs(&f, want, "the report's fix");
  }
  il_config a = cfg_for(model, device, "auto");
  check_runs(&a, want, "--split auto");
  il_config fit = c;
  fit.fit = true;
  IL_CHECK_OK(il_engine_open(&fit, &e));
  if (e) {
    IL_CHECK(strcmp(il_engine_config(e)->split, free) != 0); /* --fit changed the split */
    il_engine_free(e);
  }
  /* the plan agrees: the proportional split does not fit, on that device; auto does */
  il_plan p;
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK(!p.fits);
  IL_CHECK_INT(p.ran_out, ran_out);
  IL_CHECK(!p.devs[ran_out].fits);
  IL_CHECK_OK(il_plan_run(&a, &p));
  IL_CHECK(p.fits);
}

/* --gpu-layers A,B that runs a device out: the report's move is a --gpu-layers change (the
 * option that gave the counts), and applied it runs with one device's logits. */
static void test_gpu_layers_fix(const float *want) {
  il_config c = cfg_for("builtin:tiny", "sim:3MiB,sim:15MiB", "");
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "1,3");
  il_engine *e = NULL;
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_OOM);
  il_oom_report r;
  IL_CHECK(il_oom_report_last(&r));
  IL_CHECK_INT(r.dev, 0);
  IL_CHECK(r.n_fixes > 0);
  if (r.n_fixes < 1) return;
  IL_CHECK_STR(r.fixes[0].option, "gpu-layers");
  IL_CHECK_STR(r.fixes[0].value, "0,4");
  il_config f = c;
  IL_CHECK_OK(il_oom_fix_apply(&r, r.fixes[0].option, r.fixes[0].value, &f));
  check_runs(&f, want, "the report's --gpu-layers fix");
}

static il_engine *open_split(const char *device, const char *place, const char *gpu_layers) {
  il_config c = cfg_for("builtin:tiny", device, "");
  snprintf(c.place, sizeof c.place, "%s", place);
  if (gpu_layers) snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", gpu_layers);
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  if (st != IL_OK) fprintf(stderr, "--place %s --gpu-layers %s: %s\n", place, gpu_layers, il_error_detail());
  IL_CHECK_OK(st);
  return e;
}

static void check_split(const char *device, const char *place, const char *want_split, const float *want) {
  il_engine *e = open_split(device, place, NULL);
  if (!e) return;
  char got[64];
  il_split_format(e->split_n, e->n_devs, got, sizeof got);
  IL_CHECK_STR(got, want_split);
  const size_t n = (size_t)3 * (size_t)e->model->hp.n_vocab;
  float *l = calloc(n, 4);
  IL_CHECK_OK(run(e, l));
  IL_CHECK(memcmp(l, want, n * 4) == 0);
  free(l);
  il_engine_free(e);
}

static void check_place_error(const char *device, const char *place, const char *says) {
  il_config c = cfg_for("builtin:tiny", device, "");
  snprintf(c.place, sizeof c.place, "%s", place);
  il_engine *e = NULL;
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), says);
  IL_CHECK(e == NULL);
}

static void test_place(const float *want) {
  const char *two = "sim:64MiB,sim:32MiB", *four = "sim:32MiB,sim:32MiB,sim:32MiB,sim:32MiB";
  check_split(two, "", "3,1", want); /* proportional to the sizes */
  check_split(two, "blk.2=2", "2,2", want);
  check_split(two, "blk.0=2", "0,4", want);
  check_split(two, "blk.3=1", "4,0", want);
  check_split(four, "", "1,1,1,1", want);
  check_split(four, "blk.1=3", "1,0,2,1", want); /* the layers after it from device 3 on */
  check_split(four, "blk.0-1=2,blk.3=4", "0,2,1,1", want);
  check_split(four, "blk.2=1,blk.3=device", "3,0,0,1", want);
  check_place_error(two, "blk.1=2,blk.2=1", "'blk.1=2,blk.2=1': layer 1 on device 2");
  check_place_error(two, "blk.1=cpu", "layers on the CPU are the last ones");
  check_place_error(two, "blk.2=3", "'blk.2=3': the place is cpu, device, or for blk.N the position of a device");
  check_place_error(two, "blk.7=1", "'blk.7=1': layers are blk.N or blk.A-B");
  check_place_error(two, "blk.1=1,blk.1=2", "layer 1 is placed on device 1 already");
  /* the last layer on the CPU, as --gpu-layers 3 */
  il_engine *e = open_split(two, "blk.3=cpu", NULL);
  if (e) {
    IL_CHECK_INT(e->n_dev_layers, 3);
    IL_CHECK(e->layer_b[3] == e->host);
    il_engine_free(e);
  }
}

static void test_gpu_layers_auto(const float *want) {
  il_engine *e = open_split("sim:64MiB,sim:32MiB", "", "auto");
  if (e) {
    IL_CHECK_INT(e->n_dev_layers, e->model->hp.n_layer);
    IL_CHECK(e->out_dev);
    il_engine_free(e);
  }
  const char *small = "sim:5MiB,sim:5MiB";
  e = open_split(small, "", "auto");
  if (!e) return;
  const int32_t n = e->n_dev_layers;
  printf("--gpu-layers auto --device %s: %d of %d layers on the devices\n", small, n, e->model->hp.n_layer);
  IL_CHECK(n > 0 && n < e->model->hp.n_layer);
  const size_t nl = (size_t)3 * (size_t)e->model->hp.n_vocab;
  float *l = calloc(nl, 4);
  IL_CHECK_OK(run(e, l));
  IL_CHECK(memcmp(l, want, nl * 4) == 0);
  free(l);
  il_engine_free(e);
  /* one layer more does not fit */
  il_config c = cfg_for("builtin:tiny", small, "");
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "%d", n + 1);
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_OOM);
}

int main(void) {
  float *tiny = one_device("builtin:tiny"), *qwen = one_device("builtin:qwen3-tiny");
  test_peaks("builtin:tiny", "sim:64MiB,sim:32MiB", "", tiny);
  test_peaks("builtin:tiny", "sim:24MiB,ctx=2MiB,sim:40MiB,sim:12MiB,sim:32MiB", "", tiny);
  test_peaks("builtin:tiny", "sim:24MiB,sim:40MiB,sim:12MiB,sim:32MiB", "auto", tiny);
  test_peaks("builtin:qwen3-tiny", "sim:12MiB,sim:40MiB", "", qwen);
  test_peaks("builtin:qwen3-tiny", "sim:40MiB,sim:24MiB,sim:24MiB,ctx=3MiB,sim:12MiB", "1,1,1,1", qwen);
  test_peaks("builtin:qwen3-tiny", "sim:40MiB,sim:24MiB,sim:24MiB,sim:12MiB", "auto", qwen);
  tp_n = 2;
  test_peaks("builtin:tiny", "sim:64MiB,sim:32MiB", "", tiny);
  test_peaks("builtin:qwen3-tiny", "sim:12MiB,ctx=2MiB,sim:40MiB", "", qwen);
  tp_n = 4;
  test_peaks("builtin:tiny", "sim:24MiB,sim:40MiB,sim:12MiB,sim:32MiB", "", tiny);
  tp_n = 0;
  if (tiny) {
    test_auto("builtin:tiny", "sim:4608KiB,sim:15MiB", "4.5,15", 0, tiny);
    test_auto("builtin:tiny", "sim:6MiB,ctx=1536KiB,sim:8MiB,sim:8MiB,sim:8MiB", "4.5,8,8,8", 0, tiny);
  }
  if (tiny) test_gpu_layers_fix(tiny);
  if (tiny) test_place(tiny);
  if (tiny) test_gpu_layers_auto(tiny);
  if (qwen) test_auto("builtin:qwen3-tiny", "sim:5MiB,sim:20MiB", "5,20", 0, qwen);
  free(tiny);
  free(qwen);
  return il_test_finish();
}
