/* tests/test_cuda_graph: one recorded device step per decode step (engine/graph.h, backend/cuda/
 * graph.c), on builtin:tiny.
 *
 * Needs the CUDA module and a device; otherwise it prints why and skips (exit 77). On the fake
 * module (INFERLAB_CUDA_MODULE names libinferlab-cuda-fake) the runtime's trace
 * (tests/fakes/fake_graph.h) shows what each step did:
 * - greedy generation: the first decode step runs as separate launches (8 per layer, the fused
 *   matmul_multi, rope_kv_store, matmul_add and gate_up_swiglu included), the second is captured
 *   and runs as one graph launch, every later one is one graph launch and nothing else on the
 *   device: no kernel launched outside it, one upload of the batch (16 bytes per sequence), one
 *   download of the sampled ids (4 bytes per sequence) and the fault record read with it, and
 *   one stream sync, at that download (none between the upload and the graph launch);
 * - the tokens, and the logits of a logits run, equal those of the same engine with graphs off
 *   (IL_CUDA_GRAPHS=0) bit for bit;
 * - batches of 2, 4 and 3 sequences: one graph per batch-size bucket (2; 3-4), a 3 after a 4
 *   updates the bucket's graph in place (cudaGraphExecUpdate) instead of instantiating another,
 *   and 4 bytes per sequence come back per step;
 * - capture refused (FAKE_CUDA_CAPTURE_FAIL=begin, =end): the eager path, the same tokens, and
 *   one warning for the process.
 * On a device the same runs check the tokens, the transfers and the engine's step counts.
 * The capture ops on the backend itself: a recorded get_rows replayed over new ids; a bad id in
 * a replayed step named after 70 later launches; a download inside a capture refused and the
 * capture with it (nothing ran); an abandoned capture running nothing; a capture over a step
 * updating it in place; a step refused after the workspace moved.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"
#include "core/quant.h"
#include "engine/engine_impl.h"
#include "harness.h"

static bool fake;
static char trace[64];
static int warnings;

static void on_log(void *ud, il_log_level level, const char *msg) {
  if (strstr(msg, "could not be recorded as one graph")) warnings++;
}

static void mark(const char *what) {
  if (!fake) return;
  FILE *f = fopen(trace, "a");
  if (f) {
    fprintf(f, "-- %s\n", what);
    fclose(f);
  }
}

/* What the trace shows between two marks. */
typedef struct {
  int launches, nodes, graph_launches, captures, instantiations, updates_ok, h2d, h2d_batch, d2h, d2h_ids, syncs,
      esyncs, sync_before_d2h;
} seg;

/* Segment k (the lines after the k-th mark) of the trace; n: the step's batch size. */
static seg seg_of(int k, int n) {
  seg s = {0};
  FILE *f = fopen(trace, "r");
  if (!f) return s;
  char line[256];
  int at = -1;
  bool seen_d2h = false;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "-- ", 3)) {
      at++;
      continue;
    }
    if (at != k) continue;
    int st = 0;
    size_t bytes = 0;
    if (!strncmp(line, "launch ", 7)) s.launches++;
    else if (!strncmp(line, "node ", 5)) s.nodes++;
    else if (!strncmp(line, "graph-launch ", 13)) s.graph_launches++;
    else if (!strncmp(line, "capture-end ", 12)) s.captures += strstr(line, "nodes") != NULL;
    else if (!strncmp(line, "instantiate x", 13)) s.instantiations++;
    else if (!strncmp(line, "update ", 7)) s.updates_ok += strstr(line, " ok") != NULL;
    else if (sscanf(line, "h2d s%d %zu", &st, &bytes) == 2) {
      s.h2d++;
      s.h2d_batch += bytes == (size_t)16 * n;
    } else if (sscanf(line, "d2h s%d %zu", &st, &bytes) == 2) {
      s.d2h++;
      s.d2h_ids += bytes == (size_t)4 * n;
      seen_d2h = true;
    } else if (!strncmp(line, "sync ", 5)) {
      s.syncs++;
      s.sync_before_d2h += !seen_d2h;
    } else if (!strncmp(line, "esync ", 6)) {
      s.esyncs++;
      s.sync_before_d2h += !seen_d2h;
    }
  }
  fclose(f);
  return s;
}

static void trace_start(void) {
  if (!fake) return;
  snprintf(trace, sizeof trace, "/tmp/il_graph_trace_XXXXXX");
  const int fd = mkstemp(trace);
  IL_CHECK(fd >= 0);
  close(fd);
  setenv("FAKE_CUDA_TRACE", trace, 1);
}

static void trace_stop(void) {
  if (!fake) return;
  unsetenv("FAKE_CUDA_TRACE");
  remove(trace);
}

static il_engine *open_tiny(int n_seq, const char *graphs, const char *fail) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 64;
  c.n_seq = n_seq;
  c.threads = 2;
  snprintf(c.device, sizeof c.device, "cuda");
  snprintf(c.model, sizeof c.model, "builtin:tiny");
  if (graphs) setenv("IL_CUDA_GRAPHS", graphs, 1);
  if (fail) setenv("FAKE_CUDA_CAPTURE_FAIL", fail, 1);
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  unsetenv("IL_CUDA_GRAPHS");
  return e;
}

#define NP 5
#define NG 8

/* Greedy generation of NG tokens after a prompt; marks the trace before every decode step. */
static void generate(il_engine *e, int32_t *toks, il_transfer_stats *per_step) {
  il_batch_entry b[NP];
  for (int i = 0; i < NP; i++) b[i] = (il_batch_entry){3 + 41 * i % 500, 0, i, i == NP - 1};
  int32_t tok = -1;
  mark("prompt");
  IL_CHECK_OK(il_engine_decode_greedy(e, b, NP, &tok));
  for (int g = 0; g < NG; g++) {
    toks[g] = tok;
    il_batch_entry one = {tok, 0, NP + g, true};
    il_transfer_stats t0, t1;
    e->backend->ops->transfers(e->backend, &t0);
    mark("step");
    IL_CHECK_OK(il_engine_decode_greedy(e, &one, 1, &tok));
    e->backend->ops->transfers(e->backend, &t1);
    per_step[g] = (il_transfer_stats){t1.upload_bytes - t0.upload_bytes, t1.download_bytes - t0.download_bytes,
                                      t1.n_uploads - t0.n_uploads, t1.n_downloads - t0.n_downloads, 0, 0};
  }
}

static int32_t want[NG]; /* the eager run's tokens */

static void test_greedy(void) {
  int32_t got[NG];
  il_transfer_stats xs[NG];
  il_engine *e = open_tiny(1, "0", NULL); /* graphs off: the eager reference */
  if (!e) return;
  generate(e, want, xs);
  IL_CHECK_INT((int64_t)e->graph_captures + (int64_t)e->graph_replays, 0);
  il_engine_free(e);

  trace_start();
  e = open_tiny(1, NULL, NULL);
  if (!e) return;
  generate(e, got, xs);
  for (int g = 0; g < NG; g++) IL_CHECK_INT(got[g], want[g]);
  /* step 0 eager, step 1 captured, 2.. replayed */
  IL_CHECK_INT((int64_t)e->graph_captures, 1);
  IL_CHECK_INT((int64_t)e->graph_replays, NG - 2);
  for (int g = 1; g < NG; g++) {
    IL_CHECK_INT((int64_t)xs[g].download_bytes, 4);
    IL_CHECK_INT((int64_t)xs[g].n_downloads, 1);
    /* the batch, and the block table on a step that opens a KV block */
    IL_CHECK(xs[g].n_uploads >= 1 && xs[g].n_uploads <= 2);
  }
  if (fake) {
    const seg p = seg_of(0, NP), s0 = seg_of(1, 1), s1 = seg_of(2, 1);
    IL_CHECK(p.launches > 0 && p.graph_launches == 0); /* a prompt is not a decode step */
    /* uncaptured, a layer is 8 launches with F32 weights: rmsnorm, Q/K/V (matmul_multi, one
     * launch), rope of q and k with the store of k and v (rope_kv_store), attention, the output
     * projection with the residual add in its epilogue (matmul_add), rmsnorm, gate and up with
     * SwiGLU in one launch (gate_up_swiglu), down with the add (16 before the fused ops); around
     * them get_rows, the final rmsnorm, the output head and the sample op */
    const int n_layer = il_engine_model(e)->hp.n_layer;
    IL_CHECK_INT(s0.launches, 8 * n_layer + 4);
    IL_CHECK_INT(s0.graph_launches, 0);
    IL_CHECK_INT(s1.launches, 0);
    IL_CHECK(s1.nodes >= s0.launches - 1); /* every launch of the step, captured */
    IL_CHECK_INT(s1.captures, 1);
    IL_CHECK_INT(s1.instantiations, 1);
    IL_CHECK_INT(s1.graph_launches, 1);
    int table_uploads = 0;
    for (int g = 1; g < NG; g++) {
      const seg s = seg_of(g + 1, 1);
      IL_CHECK_INT(s.launches, 0);
      IL_CHECK_INT(s.graph_launches, 1);
      if (g > 1) IL_CHECK_INT(s.nodes + s.captures + s.instantiations, 0);
      IL_CHECK_INT(s.h2d_batch, 1);
      table_uploads += s.h2d - s.h2d_batch;
      IL_CHECK_INT(s.d2h_ids, 1);
      IL_CHECK_INT(s.d2h, 2); /* the ids and the fault record, in one wait */
      IL_CHECK_INT(s.syncs, 1);
      IL_CHECK_INT(s.esyncs, 0);
      IL_CHECK_INT(s.sync_before_d2h, 0);
    }
    IL_CHECK(table_uploads <= 1);
    printf("greedy: step 1 %d launches (%d per layer); from step 2 on 1 graph launch (%d nodes), 1 upload of 16 bytes, "
           "4 bytes down, 1 sync per step\n", s0.launches, (s0.launches - 4) / n_layer, s1.nodes);
  }
  il_engine_free(e);
  trace_stop();
}

/* The logits path: the same bits with and without graphs. */
static void test_logits(void) {
  float *a = NULL, *b = NULL;
  for (int run = 0; run < 2; run++) {
    il_engine *e = open_tiny(1, run ? NULL : "0", NULL);
    if (!e) return;
    const size_t nv = (size_t)il_engine_model(e)->hp.n_vocab;
    float *l = calloc(NG * nv, 4);
    il_batch_entry pr[NP];
    for (int i = 0; i < NP; i++) pr[i] = (il_batch_entry){5 + 13 * i, 0, i, i == NP - 1};
    IL_CHECK_OK(il_engine_decode(e, pr, NP, l));
    for (int g = 0; g < NG; g++) {
      il_batch_entry one = {9 + 7 * g, 0, NP + g, true};
      IL_CHECK_OK(il_engine_decode(e, &one, 1, l + (size_t)g * nv));
    }
    if (run) IL_CHECK_INT((int64_t)e->graph_replays, NG - 2);
    *(run ? &b : &a) = l;
    if (run) IL_CHECK(memcmp(a, b, NG * nv * 4) == 0);
    il_engine_free(e);
  }
  free(a);
  free(b);
}

/* Steps of 2, 4, 3 sequences on one engine; ids[k][s] the tokens of step k. */
#define NB 9
static const int batch_n[NB] = {2, 2, 2, 4, 4, 4, 3, 3, 3};

static void run_batches(il_engine *e, int32_t ids[NB][4]) {
  int32_t tok[4] = {0}, pos[4] = {0};
  for (int s = 0; s < 4; s++) { /* a short prompt per sequence */
    il_batch_entry b[3];
    for (int i = 0; i < 3; i++) b[i] = (il_batch_entry){11 + 17 * s + 5 * i, s, i, i == 2};
    IL_CHECK_OK(il_engine_decode_greedy(e, b, 3, &tok[s]));
    pos[s] = 3;
  }
  for (int k = 0; k < NB; k++) {
    il_batch_entry b[4];
    const int n = batch_n[k];
    for (int s = 0; s < n; s++) b[s] = (il_batch_entry){tok[s], s, pos[s]++, true};
    il_transfer_stats t0, t1;
    e->backend->ops->transfers(e->backend, &t0);
    mark("batch");
    IL_CHECK_OK(il_engine_decode_greedy(e, b, n, ids[k]));
    e->backend->ops->transfers(e->backend, &t1);
    IL_CHECK_INT((int64_t)(t1.download_bytes - t0.download_bytes), 4 * n);
    for (int s = 0; s < n; s++) tok[s] = ids[k][s];
  }
}

static void test_batches(void) {
  int32_t ref[NB][4] = {{0}}, got[NB][4] = {{0}};
  il_engine *e = open_tiny(4, "0", NULL);
  if (!e) return;
  run_batches(e, ref);
  il_engine_free(e);
  trace_start();
  e = open_tiny(4, NULL, NULL);
  if (!e) return;
  run_batches(e, got);
  IL_CHECK(memcmp(ref, got, sizeof ref) == 0);
  /* 2: eager, captured, replayed; 4: eager, captured, replayed; 3: captured over 4's, replayed twice */
  IL_CHECK_INT((int64_t)e->graph_captures, 3);
  IL_CHECK_INT((int64_t)e->graph_replays, 4);
  if (fake) {
    int inst = 0, upd = 0;
    for (int k = 0; k < NB; k++) {
      const seg s = seg_of(k, batch_n[k]);
      inst += s.instantiations;
      upd += s.updates_ok;
      if (k % 3) IL_CHECK_INT(s.graph_launches, 1);
      if (k % 3) IL_CHECK_INT(s.launches, 0);
      IL_CHECK_INT(s.d2h_ids, 1);
      IL_CHECK_INT(s.sync_before_d2h, 0);
    }
    IL_CHECK_INT(inst, 2); /* one per bucket */
    IL_CHECK_INT(upd, 1);  /* 3 over 4 */
    IL_CHECK_INT(seg_of(6, 3).graph_launches, 1);
    printf("batches of 2, 4, 3: %d graphs instantiated, %d updated in place\n", inst, upd);
  }
  il_engine_free(e);
  trace_stop();
}

/* Capture refused by the runtime: the eager path, the same tokens, one warning per process. */
static void test_capture_fails(const char *where) {
  int32_t got[NG];
  il_transfer_stats xs[NG];
  trace_start();
  il_engine *e = open_tiny(1, NULL, where);
  if (!e) return;
  generate(e, got, xs);
  unsetenv("FAKE_CUDA_CAPTURE_FAIL");
  for (int g = 0; g < NG; g++) IL_CHECK_INT(got[g], want[g]);
  IL_CHECK(e->graph_off);
  IL_CHECK_INT((int64_t)e->graph_replays, 0);
  IL_CHECK_INT((int64_t)e->graph_captures, 0);
  IL_CHECK_INT((int64_t)e->graph_eager, 2); /* the bucket's first step, and the one whose capture failed */
  for (int g = 0; g < NG; g++) {
    const seg s = seg_of(g + 1, 1);
    IL_CHECK_INT(s.graph_launches, 0);
    IL_CHECK(s.launches > 0);
    IL_CHECK_INT((int64_t)xs[g].download_bytes, 4);
  }
  IL_CHECK_INT(warnings, 1);
  il_engine_free(e);
  trace_stop();
}

/* The seam's capture ops on the backend itself: a recorded get_rows replayed over new ids, a
 * fault in a replayed step named after the launch ring has moved on, a transfer inside a
 * capture refused (nothing runs), an abandoned capture running nothing, an update in place,
 * and a step refused once the workspace has moved. */
static void test_backend_steps(void) {
  il_backend *b = NULL;
  IL_CHECK_OK(il_backend_open("cuda", NULL, &b));
  if (!b) return;
  const il_backend_ops *o = b->ops;
  float w[4 * 8], y[2 * 8], zero[2 * 8] = {0};
  for (int i = 0; i < 32; i++) w[i] = (float)i;
  il_tensor W, ids, Y, Y2;
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_WEIGHTS, 4, 8, IL_DTYPE_F32, "w", &W));
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, 2, IL_DTYPE_I32, "ids", &ids));
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 2, 8, IL_DTYPE_F32, "y", &Y));
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 2, 8, IL_DTYPE_F32, "y2", &Y2));
  IL_CHECK_OK(o->upload(b, W, w, sizeof w));
  IL_CHECK_OK(o->upload(b, Y2, zero, sizeof zero));
  const int32_t a[2] = {1, 2}, c[2] = {3, 0}, bad[2] = {9, 0};
  IL_CHECK_OK(il_backend_upload_i32(b, ids, a, 2));
  il_step *s = NULL;
  IL_CHECK_OK(o->capture_begin(b));
  IL_CHECK_OK(o->get_rows(b, Y, W, ids));
  IL_CHECK_OK(o->capture_end(b, &s));
  IL_CHECK(s != NULL);
  IL_CHECK_OK(o->download(b, y, Y, sizeof y));
  IL_CHECK(y[0] == 8 && y[8] == 16); /* rows 1 and 2: it ran at capture_end */
  IL_CHECK_OK(il_backend_upload_i32(b, ids, c, 2));
  IL_CHECK_OK(o->replay(b, s));
  IL_CHECK_OK(o->download(b, y, Y, sizeof y));
  IL_CHECK(y[0] == 24 && y[8] == 0); /* rows 3 and 0: the ids as they are now */
  /* a bad id in a replayed step, found after 70 other launches have filled the ring */
  for (int i = 0; i < 70; i++) IL_CHECK_OK(o->get_rows(b, Y2, W, ids));
  IL_CHECK_OK(il_backend_upload_i32(b, ids, bad, 2));
  IL_CHECK_OK(o->replay(b, s));
  IL_CHECK_INT(o->download(b, y, Y, sizeof y), IL_ERR_RANGE);
  IL_CHECK(strstr(il_error_detail(), "get_rows from 'w'") && strstr(il_error_detail(), "token id 9"));
  printf("a fault in a replayed step: %s\n", il_error_detail());
  IL_CHECK_OK(il_backend_upload_i32(b, ids, a, 2));
  /* a transfer inside a capture: refused, and the capture with it; nothing ran */
  IL_CHECK_OK(o->upload(b, Y2, zero, sizeof zero));
  IL_CHECK_OK(o->capture_begin(b));
  IL_CHECK_OK(o->get_rows(b, Y2, W, ids));
  IL_CHECK_INT(o->download(b, y, Y, sizeof y), IL_ERR_UNSUPPORTED);
  il_step *s2 = NULL;
  IL_CHECK_INT(o->capture_end(b, &s2), IL_ERR_UNSUPPORTED);
  IL_CHECK(s2 == NULL && strstr(il_error_detail(), "download of 'y' inside the step"));
  IL_CHECK_OK(o->download(b, y, Y2, sizeof y));
  IL_CHECK(memcmp(y, zero, sizeof y) == 0);
  /* abandoned: nothing runs */
  IL_CHECK_OK(o->capture_begin(b));
  IL_CHECK_OK(o->get_rows(b, Y2, W, ids));
  IL_CHECK_OK(o->capture_end(b, NULL));
  IL_CHECK_OK(o->download(b, y, Y2, sizeof y));
  IL_CHECK(memcmp(y, zero, sizeof y) == 0);
  /* captured again over s: the same kernels, so s is updated in place and handed back */
  il_step *again = s;
  IL_CHECK_OK(o->capture_begin(b));
  IL_CHECK_OK(o->get_rows(b, Y2, W, ids));
  IL_CHECK_OK(o->capture_end(b, &again));
  IL_CHECK(again == s);
  IL_CHECK_OK(o->download(b, y, Y2, sizeof y));
  IL_CHECK(y[0] == 8 && y[8] == 16);
  /* the workspace moves (a quantized matmul's 8-bit activations): the step is refused */
  const int64_t NI = 4096;
  float *xf = calloc((size_t)(8 * NI), 4), *wf = calloc((size_t)(4 * NI), 4);
  uint8_t *wq = malloc(il_dtype_row_size(IL_DTYPE_Q8_0, NI) * 4);
  for (int r = 0; r < 4; r++)
    IL_CHECK_OK(il_quantize_row(IL_DTYPE_Q8_0, wf, wq + r * il_dtype_row_size(IL_DTYPE_Q8_0, NI), NI));
  il_tensor WQ, X, YQ;
  IL_CHECK_OK(il_backend_tensor_from_host(b, IL_MEM_WEIGHTS, wq, 4, NI, 0, IL_DTYPE_Q8_0, "wq", &WQ));
  IL_CHECK_OK(il_backend_tensor_from_host(b, IL_MEM_ACTIVATIONS, xf, 8, NI, 0, IL_DTYPE_F32, "x", &X));
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 8, 4, IL_DTYPE_F32, "yq", &YQ));
  IL_CHECK_OK(o->matmul(b, YQ, WQ, X));
  IL_CHECK_INT(o->replay(b, again), IL_ERR_UNSUPPORTED);
  IL_CHECK(strstr(il_error_detail(), "moved") != NULL);
  o->step_free(b, again);
  o->step_free(b, NULL);
  il_tensor *all[] = {&W, &ids, &Y, &Y2, &WQ, &X, &YQ};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) il_backend_tensor_free(b, all[i]);
  free(xf), free(wf), free(wq);
  o->destroy(b);
}

int main(void) {
  il_backend *b = il_test_open_cuda_or_skip();
  b->ops->destroy(b);
  const char *mod = getenv("INFERLAB_CUDA_MODULE");
  fake = mod && strstr(mod, "fake");
  il_log_set(on_log, NULL);
  test_backend_steps();
  test_greedy();
  test_logits();
  test_batches();
  if (fake) {
    test_capture_fails("begin");
    test_capture_fails("end");
    printf("capture refused at begin and at end: eager steps, the same tokens, %d warning\n", warnings);
  }
  IL_CHECK_INT(warnings, fake ? 1 : 0);
  return il_test_finish();
}
