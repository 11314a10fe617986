/* tests/test_multi_device: several devices in one process, the layers split across them.
 *
 * - builtin:tiny on 2 and 4 simulated devices, with even, uneven and zero --split ratios and
 *   with the default split (proportional to the devices' sizes), gives bit for bit the logits of
 *   one device (every sim device runs the same CPU kernels);
 * - each device holds the layers its share gives, in order, and each layer's KV cache is on its
 *   layer's device; the snapshot (run's per-device report) gives each device's layers, and its
 *   allocator holds KV cells exactly where it holds layers;
 * - the residual crosses once per device boundary per pass, and the bytes counted equal two
 *   copies (download + upload) of n_tokens x n_embd floats per boundary;
 * - the paged KV cache on a device list: a block table on every device, one device's logits;
 * - --gpu-layers N and one count per device on a list (the rest on the CPU), --place of the
 *   embedding, the head and a MoE's experts, and --offload stream (two slots per device) give
 *   one device's logits and place what they say;
 * - a device list whose items carry sim options with commas parses as the devices it names;
 * - a bad list, a ratio count that differs from the device count, a ratio that is not a number
 *   and --split on one device are errors naming the flag.
 */
#include <string.h>

#include "backend/registry.h"
#include "engine/engine_impl.h" /* white-box: reads the engine's placement */
#include "harness.h"
#include "memory/mem.h"

#define N_TOK 9

static const char *kv_layout = "contiguous";

static const char *gpu_layers = "", *place = "", *model = "builtin:tiny", *offload = "";
static int micro_batches;

static il_status open_with(const char *device, const char *split, il_engine **e) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.kv, sizeof c.kv, "%s", kv_layout);
  c.ctx = 64;
  c.threads = 2;
  c.logits_all = true;
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.split, sizeof c.split, "%s", split);
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", gpu_layers);
  snprintf(c.place, sizeof c.place, "%s", place);
  snprintf(c.offload, sizeof c.offload, "%s", offload);
  snprintf(c.model, sizeof c.model, "%s", model);
  c.micro_batches = micro_batches;
  *e = NULL;
  return il_engine_open(&c, e);
}

/* A prompt of N_TOK - 2 tokens, then two single steps; logits of all. */
static void run(il_engine *e, float *out) {
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){1 + i * 29 % 300, 0, i, true};
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  IL_CHECK_OK(il_engine_decode(e, b, N_TOK - 2, out));
  for (int i = N_TOK - 2; i < N_TOK; i++) IL_CHECK_OK(il_engine_decode(e, &b[i], 1, out + (size_t)i * nv));
}

static void test_list_parse(void) {
  char item[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX];
  int n = 0;
  IL_CHECK_OK(il_backend_list_parse("sim:1GiB,pcie=1GB/s,ctx=8MiB,sim:2GiB,cpu,cuda:1", item, &n));
  IL_CHECK_INT(n, 4);
  IL_CHECK_STR(item[0], "sim:1GiB,pcie=1GB/s,ctx=8MiB");
  IL_CHECK_STR(item[1], "sim:2GiB");
  IL_CHECK_STR(item[2], "cpu");
  IL_CHECK_STR(item[3], "cuda:1");
  IL_CHECK_OK(il_backend_list_parse("sim:24GiB", item, &n));
  IL_CHECK_INT(n, 1);
  IL_CHECK_INT(il_backend_list_parse(",sim:1GiB", item, &n), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--device");
  IL_CHECK_INT(il_backend_list_parse("cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu,cpu", item, &n), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "more than 8 devices");
}

static void test_equal_logits(void) {
  il_engine *one;
  IL_CHECK_OK(open_with("sim:64MiB", "", &one));
  if (!one) return;
  const il_hparams hpv = one->model->hp, *hp = &hpv; /* a copy: `one` is freed below */
  const size_t n = (size_t)N_TOK * (size_t)hp->n_vocab;
  float *want = calloc(n, 4), *got = calloc(n, 4);
  run(one, want);
  IL_CHECK_INT(one->fs.bytes_moved, 0);
  il_engine_free(one);
  /* device list, --split, the layers each device holds (builtin:tiny has 4) */
  static const struct {
    const char *device, *split;
    int layers[4];
  } cases[] = {
      {"sim:64MiB,sim:64MiB", "", {2, 2}},
      {"sim:64MiB,sim:64MiB", "3,1", {3, 1}},
      {"sim:64MiB,sim:64MiB", "1,3", {1, 3}},
      {"sim:64MiB,sim:64MiB", "0.2,0.8", {1, 3}},
      {"sim:96MiB,sim:32MiB", "", {3, 1}}, /* uneven budgets: the default split follows the sizes */
      {"sim:64MiB,pcie=64GB/s,sim:64MiB,ctx=1MiB", "1,1", {2, 2}},
      {"sim:64MiB,sim:64MiB,sim:64MiB,sim:64MiB", "", {1, 1, 1, 1}},
      {"sim:64MiB,sim:64MiB,sim:64MiB,sim:64MiB", "1,0,2,1", {1, 0, 2, 1}},
      {"sim:64MiB,sim:64MiB,sim:64MiB,sim:64MiB", "0,0,0,1", {0, 0, 0, 4}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    il_engine *e;
    il_status st = open_with(cases[i].device, cases[i].split, &e);
    IL_CHECK_OK(st);
    if (st != IL_OK) continue;
    run(e, got);
    if (memcmp(got, want, n * 4))
      fprintf(stderr, "--device %s --split '%s': logits differ from one device\n", cases[i].device, cases[i].split);
    IL_CHECK(memcmp(got, want, n * 4) == 0);
    int l = 0, boundaries = 0;
    for (int k = 0; k < e->n_devs; k++)
      for (int j = 0; j < cases[i].layers[k]; j++, l++) {
        IL_CHECK(e->weights.layer_b[l] == e->devs[k]);
        IL_CHECK(e->kv.layer_b[l] == e->devs[k]); /* its KV cache on its own device */
      }
    IL_CHECK_INT(l, hp->n_layer);
    /* the report's per-device figures: its layers, and KV cells only where it holds layers (the
     * device's own allocator, not the placement, says so) */
    il_engine_snapshot es;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
    IL_CHECK_INT(es.n_devs, e->n_devs);
    for (int k = 0; k < es.n_devs; k++) {
      IL_CHECK_INT(es.devs[k].n_layers, cases[i].layers[k]);
      IL_CHECK(es.devs[k].has_allocator);
      IL_CHECK((es.devs[k].alloc.cat[IL_MEM_KV].peak_allocated > 0) == (cases[i].layers[k] > 0));
      /* a device with layers takes the residual and the batch ids every pass; one without, nothing */
      if (k > 0 && k < es.n_devs - 1) IL_CHECK((es.devs[k].transfers.upload_bytes > 0) == (cases[i].layers[k] > 0));
    }
    const il_backend *cur = e->weights.embd_b;
    IL_CHECK(cur == e->devs[0]);
    IL_CHECK(e->weights.out_b == e->devs[e->n_devs - 1]);
    for (l = 0; l < hp->n_layer; l++) {
      boundaries += e->weights.layer_b[l] != cur;
      cur = e->weights.layer_b[l];
    }
    boundaries += e->weights.out_b != cur;
    /* passes of 7, 1 and 1 tokens: download + upload of each row at each boundary */
    IL_CHECK_INT(e->fs.bytes_moved, (uint64_t)boundaries * 2 * N_TOK * (uint64_t)hp->n_embd * 4);
    il_engine_free(e);
  }
  free(want);
  free(got);
}

/* The paged cache on a device list: a block table on every device, the same logits as one
 * device's paged cache. */
static void test_paged(void) {
  kv_layout = "paged";
  il_engine *one, *three;
  IL_CHECK_OK(open_with("sim:64MiB", "", &one));
  IL_CHECK_OK(open_with("sim:64MiB,sim:64MiB,sim:64MiB", "1,2,1", &three));
  if (one && three) {
    IL_CHECK(three->kv.paged);
    const size_t n = (size_t)N_TOK * (size_t)one->model->hp.n_vocab;
    float *want = calloc(n, 4), *got = calloc(n, 4);
    run(one, want);
    run(three, got);
    IL_CHECK(memcmp(got, want, n * 4) == 0);
    for (int k = 0; k < 3; k++) IL_CHECK(three->kv.table_b[k] == three->devs[k]);
    free(want);
    free(got);
  }
  il_engine_free(one);
  il_engine_free(three);
  kv_layout = "contiguous";
}

/* --gpu-layers on a device list: N layers in all shared out by --split (llama.cpp's -ngl with
 * --tensor-split), or one count per device; the rest and (unless every layer is on the devices)
 * the output head on the CPU, the embedding on the CPU; one device's logits bit for bit. */
static void test_gpu_layers(void) {
  il_engine *one;
  gpu_layers = "";
  IL_CHECK_OK(open_with("sim:64MiB", "", &one));
  if (!one) return;
  const int L = one->model->hp.n_layer;
  const size_t n = (size_t)N_TOK * (size_t)one->model->hp.n_vocab;
  float *want = calloc(n, 4), *got = calloc(n, 4);
  run(one, want);
  il_engine_free(one);
  static const struct {
    const char *device, *split, *gl;
    int layers[4]; /* per device; the rest on the CPU */
  } cases[] = {
      {"sim:64MiB,sim:64MiB", "", "3", {2, 1}},
      {"sim:64MiB,sim:64MiB", "1,2", "3", {1, 2}},
      {"sim:64MiB,sim:64MiB", "", "1,2", {1, 2}},
      {"sim:64MiB,sim:64MiB", "", "0,4", {0, 4}},
      {"sim:64MiB,sim:64MiB", "", "2", {1, 1}},
      {"sim:64MiB,sim:64MiB,sim:64MiB,sim:64MiB", "", "1,0,1,1", {1, 0, 1, 1}},
      {"sim:64MiB,sim:64MiB", "auto", "3", {-1, -1}}, /* auto: any split of 3 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gpu_layers = cases[i].gl;
    il_engine *e;
    il_status st = open_with(cases[i].device, cases[i].split, &e);
    IL_CHECK_OK(st);
    if (st != IL_OK) continue;
    run(e, got);
    if (memcmp(got, want, n * 4))
      fprintf(stderr, "--device %s --gpu-layers %s: logits differ from one device\n", cases[i].device, cases[i].gl);
    IL_CHECK(memcmp(got, want, n * 4) == 0);
    int l = 0, on = 0;
    for (int k = 0; k < e->n_devs; k++) {
      on += e->split_n[k];
      if (cases[i].layers[0] >= 0) IL_CHECK_INT(e->split_n[k], cases[i].layers[k]);
      for (int j = 0; j < e->split_n[k]; j++, l++) IL_CHECK(e->weights.layer_b[l] == e->devs[k]);
    }
    for (; l < L; l++) IL_CHECK(e->weights.layer_b[l] == e->host); /* the rest on the CPU */
    IL_CHECK(e->weights.embd_b == e->host);
    IL_CHECK(e->weights.out_b == (on == L ? e->devs[e->n_devs - 1] : e->host));
    il_engine_free(e);
  }
  gpu_layers = "1,2,1";
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "", &one), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--gpu-layers");
  gpu_layers = "1,2";
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "1,1", &one), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB", "", &one), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "one device");
  gpu_layers = "auto"; /* on devices with room: every layer and the head on them (test_plan_devices: tight ones) */
  IL_CHECK_OK(open_with("sim:64MiB,sim:64MiB", "", &one));
  if (one) {
    IL_CHECK_INT(one->n_dev_layers, L);
    IL_CHECK(one->weights.out_b == one->devs[1]);
    il_engine_free(one);
  }
  gpu_layers = "";
  free(want);
  free(got);
}

/* --place of components on a device list: the embedding and the head on the CPU; a MoE's
 * experts on the CPU (llama.cpp's --cpu-moe beside a split); one device's logits. */
static void test_place(void) {
  static const struct {
    const char *model, *place, *gl;
    bool embd_host, out_host, exps_host;
  } cases[] = {
      {"builtin:tiny", "token_embd=cpu,output=cpu", "", true, true, false},
      {"builtin:tiny", "output=cpu", "", false, true, false},
      {"builtin:tiny", "token_embd=device", "3", false, true, false},
      {"builtin:moe-tiny", "exps=cpu", "", false, false, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    model = cases[i].model;
    place = "";
    gpu_layers = "";
    il_engine *one = NULL, *e = NULL;
    IL_CHECK_OK(open_with("sim:64MiB", "", &one));
    place = cases[i].place;
    gpu_layers = cases[i].gl;
    IL_CHECK_OK(open_with("sim:64MiB,sim:64MiB,sim:64MiB", "", &e));
    if (one && e) {
      const size_t n = (size_t)N_TOK * (size_t)one->model->hp.n_vocab;
      float *want = calloc(n, 4), *got = calloc(n, 4);
      run(one, want);
      run(e, got);
      if (memcmp(got, want, n * 4)) fprintf(stderr, "--place %s on 3 devices: logits differ\n", cases[i].place);
      IL_CHECK(memcmp(got, want, n * 4) == 0);
      IL_CHECK((e->weights.embd_b == e->host) == cases[i].embd_host);
      IL_CHECK((e->weights.out_b == e->host) == cases[i].out_host);
      IL_CHECK((e->weights.exps_b == e->host) == cases[i].exps_host);
      free(want);
      free(got);
    }
    il_engine_free(one);
    il_engine_free(e);
  }
  model = "builtin:tiny";
  place = "blk.0-1=cpu";
  gpu_layers = "";
  il_engine *e = NULL;
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--gpu-layers A,B");
  place = "";
}

/* --offload stream on a device list: every device streams its own layers through two slots of
 * its own (its weights: the slots, plus the embedding on the first and the head on the last);
 * one device's logits; each pass copies every layer once into its device. */
static void test_stream(void) {
  il_engine *one = NULL, *e = NULL;
  IL_CHECK_OK(open_with("sim:64MiB", "", &one));
  offload = "stream";
  static const char *splits[] = {"1,3", "2,2", "1,1,2"};
  static const char *devs[] = {"sim:64MiB,sim:64MiB", "sim:64MiB,sim:64MiB", "sim:64MiB,sim:64MiB,sim:64MiB"};
  for (int i = 0; i < 3 && one; i++) {
    IL_CHECK_OK(open_with(devs[i], splits[i], &e));
    if (!e) continue;
    const size_t n = (size_t)N_TOK * (size_t)one->model->hp.n_vocab;
    float *want = calloc(n, 4), *got = calloc(n, 4);
    run(one, want);
    for (int s = 0; s < 1; s++) IL_CHECK_OK(il_engine_seq_remove(one, s));
    run(e, got);
    if (memcmp(got, want, n * 4)) fprintf(stderr, "--offload stream --split %s: logits differ\n", splits[i]);
    IL_CHECK(memcmp(got, want, n * 4) == 0);
    IL_CHECK(e->weights.stream);
    IL_CHECK_INT(e->weights.n_streams, e->n_devs);
    const uint64_t lb = il_model_layer_bytes(e->model, 0);
    /* three passes (a prompt, two steps): each layer copied at least once, at most once a
     * pass (a layer still in its slot from the pass before is not copied again) */
    int on = 0;
    for (int k = 0; k < e->n_devs; k++) {
      on += e->split_n[k];
      IL_CHECK(e->weights.streams[k].b == e->devs[k]);
    }
    IL_CHECK(e->weights.streamed_bytes % lb == 0);
    IL_CHECK(e->weights.streamed_bytes >= (uint64_t)on * lb && e->weights.streamed_bytes <= 3 * (uint64_t)on * lb);
    /* each device's weights: two slots instead of its layers */
    offload = "";
    il_engine *full = NULL;
    IL_CHECK_OK(open_with(devs[i], splits[i], &full));
    offload = "stream";
    il_engine_snapshot a, b;
    il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &a);
    if (full) il_engine_snapshot_get(full, IL_ENGINE_SNAP_MEMORY, &b);
    for (int k = 0; k < e->n_devs && full; k++) {
      const size_t ws = a.devs[k].alloc.cat[IL_MEM_WEIGHTS].peak_allocated,
                   wf = b.devs[k].alloc.cat[IL_MEM_WEIGHTS].peak_allocated;
      IL_CHECK(ws + (size_t)e->split_n[k] * lb <= wf + 2 * lb + 64 * 1024);
      IL_CHECK(ws + (size_t)e->split_n[k] * lb + 64 * 1024 >= wf + 2 * lb);
    }
    il_engine_free(full);
    free(want);
    free(got);
    il_engine_free(e);
    e = NULL;
  }
  il_engine_free(one);
  offload = "";
}

/* The default context on a list: halved while some device's KV cache (its layers' cells) takes
 * more than half of what that device has beside its weights, not only the first device's. */
static void test_default_ctx(void) {
  static const struct {
    const char *device;
    bool capped;
  } cases[] = {{"sim:64MiB,sim:5632KiB", true}, {"sim:64MiB,sim:6MiB", false}};
  for (int i = 0; i < 2; i++) {
    il_config c;
    il_config_defaults(&c);
    c.threads = 2;
    c.batch = 32;
    snprintf(c.device, sizeof c.device, "%s", cases[i].device);
    snprintf(c.split, sizeof c.split, "3,1");
    il_engine *e = NULL;
    IL_CHECK_OK(il_engine_open(&c, &e));
    if (!e) continue;
    /* the first device has room for the whole training context's cells; the second decides */
    IL_CHECK(e->ctx_capped == cases[i].capped);
    IL_CHECK_INT(e->n_ctx, cases[i].capped ? e->model->hp.n_ctx_train / 2 : e->model->hp.n_ctx_train);
    il_engine_free(e);
  }
}

static void test_errors(void) {
  il_engine *e;
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "1,2,3", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB,sim:64MiB", "1,2", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "1,x", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB,sim:64MiB", "0,0", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB", "1", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--split");
  IL_CHECK_INT(open_with("sim:64MiB,,sim:64MiB", "", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--device");
  IL_CHECK_INT(open_with("sim:64MiB,tpu:0", "", &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--device");
  IL_CHECK(e == NULL);
}


/* --micro-batches: the prompt cut into micro-batches that the stages (one per device) run as a
 * pipeline, on threads; the same logits bit for bit as one device and as one pass, the same
 * residual bytes moved as one pass, the paged cache too; a placement where one device would
 * hold two stages runs as one pass. */
static void test_pipelined(void) {
  il_engine *one;
  IL_CHECK_OK(open_with("sim:64MiB", "", &one));
  if (!one) return;
  const size_t n = (size_t)N_TOK * (size_t)one->model->hp.n_vocab;
  float *want = calloc(n, 4), *got = calloc(n, 4);
  run(one, want);
  il_engine_free(one);
  static const struct {
    const char *device, *kv;
    int mb, stages;
  } cases[] = {
      {"sim:64MiB,sim:64MiB", "contiguous", 2, 2},
      {"sim:64MiB,sim:64MiB", "contiguous", 3, 2},
      {"sim:64MiB,sim:64MiB", "contiguous", 7, 2},
      {"sim:64MiB,sim:64MiB", "contiguous", 64, 2}, /* more micro-batches than entries: one entry each */
      {"sim:64MiB,sim:64MiB", "paged", 3, 2},
      {"sim:64MiB,sim:64MiB,sim:64MiB,sim:64MiB", "contiguous", 4, 4},
      {"sim:64MiB,cpu", "contiguous", 2, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t moved[2];
    for (int pass = 0; pass < 2; pass++) {
      kv_layout = cases[i].kv;
      micro_batches = pass ? cases[i].mb : 0;
      il_engine *e;
      il_status st = open_with(cases[i].device, "", &e);
      IL_CHECK_OK(st);
      if (st != IL_OK) continue;
      IL_CHECK_INT(il_model_pipeline_stages(&e->weights), cases[i].stages);
      memset(got, 0, n * 4);
      run(e, got);
      if (memcmp(got, want, n * 4))
        fprintf(stderr, "--device %s --kv %s --micro-batches %d: logits differ from one device\n", cases[i].device,
                cases[i].kv, micro_batches);
      IL_CHECK(memcmp(got, want, n * 4) == 0);
      moved[pass] = e->fs.bytes_moved;
      /* run's "pipeline:" line: the passes counted against run()'s three calls, of which the
       * prompt's (7 entries) is the one with more than one entry */
      il_engine_snapshot es;
      il_engine_snapshot_get(e, IL_ENGINE_SNAP_ALL, &es);
      IL_CHECK_INT(es.passes, 3);
      IL_CHECK_INT(es.pipelined_passes, pass ? 1 : 0);
      IL_CHECK_INT(es.micro_batches, micro_batches);
      IL_CHECK_INT(es.pipeline_stages, cases[i].stages);
      il_engine_free(e);
    }
    IL_CHECK(moved[0] > 0);
    IL_CHECK_INT(moved[1], moved[0]);
  }
  kv_layout = "contiguous";
  /* layer 1 on the CPU, the rest on the device: the device would hold two stages */
  place = "blk.1=cpu";
  micro_batches = 3;
  il_engine *e;
  IL_CHECK_OK(open_with("sim:64MiB", "", &e));
  if (e) {
    IL_CHECK_INT(il_model_pipeline_stages(&e->weights), 0);
    run(e, got);
    IL_CHECK(memcmp(got, want, n * 4) == 0);
    il_engine_free(e);
  }
  place = "";
  micro_batches = 0;
  free(want);
  free(got);
}

int main(void) {
  test_list_parse();
  test_equal_logits();
  test_paged();
  test_pipelined();
  test_gpu_layers();
  test_place();
  test_stream();
  test_default_ctx();
  test_errors();
  return il_test_finish();
}
