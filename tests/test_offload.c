/* tests/test_offload: CPU offloading and component placement on the simulated GPU.
 *
 * - logits with --gpu-layers 0..n and with --place (token_embd, output, layer ranges on the
 *   CPU) equal the all-device logits bit for bit (cpu and sim run the same kernels);
 * - the bytes moved between the backends per pass equal the computed figure: two copies
 *   (download + upload) of n_tokens x n_embd floats at every change of backend along
 *   embedding -> layers -> output;
 * - the device holds only what is placed there (weights of the device layers, their KV);
 * - --gpu-layers auto on a device too small for the whole model picks the largest count whose
 *   predicted need fits, and the run succeeds;
 * - bad --place and --gpu-layers values are errors naming the flag.
 */
#include <string.h>

#include "engine/engine_impl.h" /* white-box: reads the engine's own state */
#include "harness.h"
#include "memory/mem.h"

#define N_TOK 9

static il_engine *open_with(const char *device, const char *ngl, const char *place) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 64;
  c.threads = 2;
  c.logits_all = true;
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", ngl);
  snprintf(c.place, sizeof c.place, "%s", place);
  il_engine *e = NULL;
  il_status st = il_engine_open(&c, &e);
  if (st != IL_OK) fprintf(stderr, "open %s -ngl %s --place '%s': %s\n", device, ngl, place, il_error_detail());
  IL_CHECK_OK(st);
  return e;
}

/* A prompt of N_TOK - 2 tokens, then two single steps; logits of all. Returns bytes moved. */
static uint64_t run(il_engine *e, float *out) {
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){1 + i * 29 % 300, 0, i, true};
  const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
  IL_CHECK_OK(il_engine_decode(e, b, N_TOK - 2, out));
  for (int i = N_TOK - 2; i < N_TOK; i++) IL_CHECK_OK(il_engine_decode(e, &b[i], 1, out + (size_t)i * nv));
  return e->fs.bytes_moved;
}

/* Changes of backend along embedding -> layers -> output. */
static int switches(const il_engine *e) {
  int n = 0;
  const il_backend *cur = e->weights.embd_b;
  for (int l = 0; l < il_engine_model(e)->hp.n_layer; l++) {
    n += e->weights.layer_b[l] != cur;
    cur = e->weights.layer_b[l];
  }
  return n + (e->weights.out_b != cur);
}

static void test_equal_logits(void) {
  il_engine *all = open_with("sim:64MiB", "all", "");
  if (!all) return;
  const il_hparams hpv = all->model->hp, *hp = &hpv; /* a copy: `all` is freed below */
  const size_t n = (size_t)N_TOK * (size_t)hp->n_vocab;
  float *want = calloc(n, 4), *got = calloc(n, 4);
  IL_CHECK_INT(run(all, want), 0);
  il_mem_stats full;
  il_mem_space_stats(all->backend->space, &full);
  il_engine_free(all);
  const char *cases[][2] = {{"0", ""},  {"1", ""}, {"2", ""}, {"3", ""}, {"4", ""},
                            {"all", "token_embd=cpu"}, {"all", "output=cpu"}, {"all", "blk.1-2=cpu"},
                            {"2", "output=device,token_embd=device"}, {"all", "blk.0=cpu,blk.3=cpu,output=cpu"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    il_engine *e = open_with("sim:64MiB", cases[i][0], cases[i][1]);
    if (!e) continue;
    const uint64_t moved = run(e, got);
    const int sw = switches(e);
    /* per pass: download + upload of the residual rows at every switch; passes of 7, 1, 1 tokens */
    const uint64_t expect = (uint64_t)sw * 2 * (uint64_t)N_TOK * (uint64_t)hp->n_embd * 4;
    IL_CHECK_INT(moved, expect);
    const bool same = memcmp(got, want, n * 4) == 0;
    if (!same) fprintf(stderr, "-ngl %s --place '%s': logits differ from all-device\n", cases[i][0], cases[i][1]);
    IL_CHECK(same);
    il_mem_stats st;
    il_mem_space_stats(e->backend->space, &st);
    if (e->n_dev_layers < hp->n_layer) IL_CHECK(st.peak[IL_MEM_KV] < full.peak[IL_MEM_KV]);
    if (e->n_dev_layers == 0 && !e->embd_dev && !e->out_dev) IL_CHECK_INT(st.peak[IL_MEM_WEIGHTS], 0);
    printf("-ngl %-3s --place %-32s %d/%d layers on sim, %d switches, %llu bytes moved, device weights %zu: logits == all-device\n",
           cases[i][0], *cases[i][1] ? cases[i][1] : "-", e->n_dev_layers, hp->n_layer, sw, (unsigned long long)moved,
           st.peak[IL_MEM_WEIGHTS]);
    il_engine_free(e);
  }
  free(want), free(got);
}

/* --offload stream: logits equal all-device; the device holds two layer slots, not the layers;
 * every pass copies each layer in once. */
static void test_stream(void) {
  il_engine *all = open_with("sim:64MiB", "all", ""), *st = NULL;
  il_config c;
  il_config_defaults(&c);
  c.ctx = 64;
  c.threads = 2;
  c.logits_all = true;
  snprintf(c.device, sizeof c.device, "sim:64MiB");
  snprintf(c.offload, sizeof c.offload, "stream");
  IL_CHECK_OK(il_engine_open(&c, &st));
  if (!all || !st) return;
  const il_model *m = all->model;
  const size_t n = (size_t)N_TOK * (size_t)m->hp.n_vocab;
  float *want = calloc(n, 4), *got = calloc(n, 4);
  run(all, want);
  il_transfer_stats x0, x1;
  st->backend->ops->transfers(st->backend, &x0);
  run(st, got);
  st->backend->ops->transfers(st->backend, &x1);
  IL_CHECK(memcmp(got, want, n * 4) == 0);
  /* three passes (a prompt of 7, two single steps), each copying every layer once, and layer 0
   * prefetched for the pass after the last (4 layers: an even count wraps into the right slot) */
  size_t layers = 0;
  for (int l = 0; l < m->hp.n_layer; l++) layers += il_model_layer_bytes(m, l);
  IL_CHECK_INT(m->hp.n_layer % 2, 0);
  const uint64_t streamed = 3 * layers + il_model_layer_bytes(m, 0), batch_up = (uint64_t)N_TOK * 16;
  IL_CHECK_INT(x1.upload_bytes - x0.upload_bytes, streamed + batch_up);
  IL_CHECK_INT(st->weights.streamed_bytes, streamed);
  il_mem_stats sa, ss;
  il_mem_space_stats(all->backend->space, &sa);
  il_mem_space_stats(st->backend->space, &ss);
  const size_t slots = 2 * il_model_layer_bytes(m, 0);
  IL_CHECK(ss.peak[IL_MEM_WEIGHTS] < sa.peak[IL_MEM_WEIGHTS] - layers + slots + 65536);
  printf("--offload stream: logits == all-device; device weights %zu (all-device %zu); %zu bytes streamed in 3 passes\n",
         ss.peak[IL_MEM_WEIGHTS], sa.peak[IL_MEM_WEIGHTS], (size_t)st->weights.streamed_bytes);
  free(want), free(got);
  il_engine_free(all);
  il_engine_free(st);
}

static void test_auto(void) {
  /* builtin:tiny f32: about 13 MiB of weights in 4 layers plus embedding and output */
  il_engine *e = open_with("sim:10MiB", "auto", "");
  if (!e) return;
  const int L = il_engine_model(e)->hp.n_layer, chosen = e->n_dev_layers;
  IL_CHECK(e->n_dev_layers > 0 && e->n_dev_layers < L);
  float *out = calloc((size_t)N_TOK * (size_t)il_engine_model(e)->hp.n_vocab, 4);
  run(e, out);
  size_t fr, tot;
  e->backend->ops->memory(e->backend, &fr, &tot);
  IL_CHECK(tot - fr <= tot);
  printf("-ngl auto on sim:10MiB: %d of %d layers on the device\n", e->n_dev_layers, L);
  free(out);
  il_engine_free(e);
  /* one more layer than auto chose does not fit */
  il_config c;
  il_config_defaults(&c);
  c.ctx = 64;
  snprintf(c.device, sizeof c.device, "sim:10MiB");
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "%d", chosen + 1);
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_OOM);
  IL_CHECK_CONTAINS(il_error_detail(), "--gpu-layers"); /* and the report suggests the count */
}

static void test_errors(void) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.device, sizeof c.device, "sim:64MiB");
  il_engine *e = NULL;
  snprintf(c.place, sizeof c.place, "blk.9=cpu");
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--place");
  snprintf(c.place, sizeof c.place, "vae=cpu");
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  snprintf(c.place, sizeof c.place, "output=tpu");
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  c.place[0] = 0;
  snprintf(c.gpu_layers, sizeof c.gpu_layers, "most");
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--gpu-layers");
  IL_CHECK(e == NULL);
}

int main(void) {
  test_equal_logits();
  test_stream();
  test_auto();
  test_errors();
  return il_test_finish();
}
