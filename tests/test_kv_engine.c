/* tests/test_kv_engine: KV cache layouts, cell types, attention kernels and sequence
 * operations, through the engine on builtin:tiny (cpu and sim).
 *
 * - paged and contiguous caches give identical logits (bitwise: the kernels read the same
 *   cells through the block table), with several sequences interleaved in one batch;
 * - a forked sequence continues exactly like one computed independently (paged: shared blocks
 *   and copy-on-write; contiguous: copied cells); truncating and rewriting gives the logits of
 *   the rewritten text;
 * - f16 cells stay within a stated tolerance of f32 cells (2e-2), bf16 cells within 5e-2, q8_0
 *   cells within 1e-1 (one fp16 scale per 32 values: a small value next to a large one in its
 *   block keeps few bits; measured 4.7e-2 on builtin:tiny, whose random weights have no
 *   structure; a misplaced block would be off by whole logits);
 * - every attention kernel gives logits within 1e-4 of naive's (they agree to 1e-5 per
 *   attention output in test_attn_kernels; the difference grows a little through the layers);
 * - the workspace the engine allocates for the chosen kernel is what the device reports;
 * - gemma3's sliding-window layers keep a ring of window + batch - 1 positions (builtin:gemma3-tiny,
 *   window 24, ctx 256, batch 16: 39): the logits of 120 positions equal those of the same engine
 *   with every layer keeping the whole context, contiguous and paged; the device's KV bytes are
 *   the formula's (1 global layer x 256 positions + 5 local x 39) and the planner's; truncating
 *   past the ring is refused, within it continues as the unbounded cache does; a fork copies the
 *   ring.
 */
#include <string.h>

#include "engine/engine_impl.h" /* white-box: reads the engine's own state */
#include "harness.h"
#include "lab/plan.h"
#include "memory/mem.h"

static il_engine *open_engine(const char *device, const char *kv, const char *kv_type, const char *attn, int n_seq) {
  il_config c;
  il_config_defaults(&c);
  c.ctx = 96;
  c.threads = 2;
  c.n_seq = n_seq;
  c.logits_all = true;
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.kv, sizeof c.kv, "%s", kv);
  snprintf(c.kv_type, sizeof c.kv_type, "%s", kv_type);
  snprintf(c.attn, sizeof c.attn, "%s", attn);
  c.kv_block = 16;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

#define N_A 40 /* long enough to span three 16-position blocks */

static void tokens(int *t, int n, int seed) {
  for (int i = 0; i < n; i++) t[i] = 1 + (i * 37 + seed * 101) % 400;
}

/* Three sequences interleaved in one batch (lengths 40, 23, 7), logits of every entry. */
static void run_mixed(il_engine *e, float *out) {
  int a[N_A], b[N_A], c[N_A];
  tokens(a, N_A, 1), tokens(b, N_A, 2), tokens(c, N_A, 3);
  il_batch_entry batch[3 * N_A];
  int n = 0;
  for (int i = 0; i < N_A; i++) {
    batch[n++] = (il_batch_entry){a[i], 0, i, true};
    if (i < 23) batch[n++] = (il_batch_entry){b[i], 1, i, true};
    if (i < 7) batch[n++] = (il_batch_entry){c[i], 2, i, true};
  }
  IL_CHECK_OK(il_engine_decode(e, batch, n, out));
}

static double max_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

static void test_layouts_and_types(void) {
  il_engine *cont = open_engine("cpu", "contiguous", "f32", "auto", 3);
  il_engine *paged = open_engine("sim:64MiB", "paged", "f32", "auto", 3);
  il_engine *half = open_engine("cpu", "paged", "f16", "auto", 3);
  il_engine *brain = open_engine("sim:64MiB", "contiguous", "bf16", "auto", 3);
  il_engine *q8 = open_engine("cpu", "paged", "q8_0", "auto", 3);
  if (!cont || !paged || !half || !brain || !q8) return;
  const size_t nv = (size_t)cont->model->hp.n_vocab, n = (size_t)(N_A + 23 + 7) * nv;
  float *x = calloc(n, 4), *y = calloc(n, 4), *z = calloc(n, 4), *w = calloc(n, 4), *u = calloc(n, 4);
  run_mixed(q8, u);
  run_mixed(cont, x);
  run_mixed(paged, y);
  run_mixed(half, z);
  run_mixed(brain, w);
  const double db = max_diff(x, w, n);
  printf("bf16 cells vs f32: max |logit diff| %.3g\n", db);
  IL_CHECK(db < 5e-2);
  IL_CHECK(db > 0);
  const double dq = max_diff(x, u, n);
  printf("q8_0 cells vs f32: max |logit diff| %.3g\n", dq);
  IL_CHECK(dq < 1e-1);
  IL_CHECK(dq > 0);
  IL_CHECK(memcmp(x, y, n * 4) == 0);
  const double dh = max_diff(x, z, n);
  printf("paged (sim) == contiguous (cpu) bitwise; f16 cells vs f32: max |logit diff| %.3g\n", dh);
  IL_CHECK(dh < 2e-2);
  IL_CHECK(dh > 0); /* f16 really is in use */
  il_kv_cache_stats ks;
  il_kv_cache_stats_get(&paged->kv, 16, &ks);
  IL_CHECK_INT(ks.blocks_total - ks.blocks_free, 3 + 2 + 1); /* 40, 23 and 7 positions in blocks of 16 */
  IL_CHECK(ks.bytes_used < ks.bytes_reserved);
  free(x), free(y), free(z), free(w), free(u);
  il_engine_free(q8);
  il_engine_free(brain);
  il_engine_free(cont);
  il_engine_free(paged);
  il_engine_free(half);
}

/* prompt in seq 0, fork to seq 1 and 2, each continues differently; equals fresh sequences. */
static void test_fork(const char *kv) {
  il_engine *e = open_engine("cpu", kv, "f32", "auto", 3), *ref = open_engine("cpu", kv, "f32", "auto", 1);
  if (!e || !ref) return;
  const size_t nv = (size_t)e->model->hp.n_vocab;
  int p[21];
  tokens(p, 21, 7); /* 21: the fork point falls inside a block (copy-on-write) */
  il_batch_entry b[24];
  for (int i = 0; i < 21; i++) b[i] = (il_batch_entry){p[i], 0, i, false};
  IL_CHECK_OK(il_engine_decode(e, b, 21, NULL));
  IL_CHECK_OK(il_engine_seq_fork(e, 0, 1));
  IL_CHECK_OK(il_engine_seq_fork(e, 0, 2));
  float *got = calloc(3 * 3 * nv, 4), *want = calloc(3 * nv, 4);
  int n = 0;
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 3; s++) b[n++] = (il_batch_entry){100 + 50 * s + k, s, 21 + k, true};
  IL_CHECK_OK(il_engine_decode(e, b, n, got));
  for (int s = 0; s < 3; s++) {
    il_batch_entry r[24];
    for (int i = 0; i < 21; i++) r[i] = (il_batch_entry){p[i], 0, i, false};
    for (int k = 0; k < 3; k++) r[21 + k] = (il_batch_entry){100 + 50 * s + k, 0, 21 + k, true};
    IL_CHECK_OK(il_engine_decode(ref, r, 24, want));
    for (int k = 0; k < 3; k++) IL_CHECK(memcmp(got + (size_t)(k * 3 + s) * nv, want + (size_t)k * nv, nv * 4) == 0);
  }
  if (e->kv.paged) {
    il_kv_cache_stats ks;
    il_kv_cache_stats_get(&e->kv, 24, &ks);
    IL_CHECK(ks.blocks_shared >= 1); /* the first full block of the prompt is stored once */
    IL_CHECK(ks.bytes_shared_saved > 0);
  }
  /* truncate seq 1 to 10 positions and rewrite from there: equals a fresh run of that text */
  IL_CHECK_OK(il_engine_seq_truncate(e, 1, 10));
  IL_CHECK_INT(il_kv_cache_seq_len(&e->kv, 1), 10);
  il_batch_entry t = {333, 1, 10, true};
  IL_CHECK_OK(il_engine_decode(e, &t, 1, got));
  il_batch_entry r[11];
  for (int i = 0; i < 10; i++) r[i] = (il_batch_entry){p[i], 0, i, false};
  r[10] = (il_batch_entry){333, 0, 10, true};
  IL_CHECK_OK(il_engine_decode(ref, r, 11, want));
  IL_CHECK(memcmp(got, want, nv * 4) == 0);
  IL_CHECK_OK(il_engine_seq_remove(e, 2));
  IL_CHECK_INT(il_kv_cache_seq_len(&e->kv, 2), 0);
  IL_CHECK_INT(il_engine_seq_fork(e, 0, 0), IL_ERR_INVALID_ARG);
  IL_CHECK_INT(il_engine_seq_truncate(e, 5, 0), IL_ERR_RANGE);
  printf("fork (%s): forked sequences equal independent ones; truncate + rewrite equals a fresh run\n", kv);
  free(got), free(want);
  il_engine_free(e);
  il_engine_free(ref);
}

static void test_kernels(void) {
  const char *names[] = {"naive", "sliced", "memeff", "flash"};
  float *base = NULL;
  size_t n = 0;
  for (int i = 0; i < 4; i++) {
    il_engine *e = open_engine("sim:64MiB", i % 2 ? "paged" : "contiguous", "f32", names[i], 3);
    if (!e) continue;
    IL_CHECK_STR(e->attn->name, names[i]);
    n = (size_t)(N_A + 23 + 7) * (size_t)e->model->hp.n_vocab;
    float *out = calloc(n, 4);
    run_mixed(e, out);
    /* the workspace the engine allocated is the kernel's bound, under the workspace category */
    il_caching_stats cs;
    e->backend->ops->allocator_stats(e->backend, &cs);
    IL_CHECK(cs.cat[IL_MEM_WORKSPACE].allocated >= (e->fs.lane[0].attn_ws.buf ? il_tensor_span(&e->fs.lane[0].attn_ws) : 0));
    if (!base) {
      base = out;
    } else {
      double d = max_diff(out, base, n);
      printf("attention %-6s vs naive through the engine: max |logit diff| %.3g\n", names[i], d);
      IL_CHECK(d < 1e-4);
      free(out);
    }
    il_engine_free(e);
  }
  free(base);
  /* a kernel that cannot run says why; an unknown name lists the kernels */
  il_config c;
  il_config_defaults(&c);
  snprintf(c.attn, sizeof c.attn, "fastest");
  il_engine *e = NULL;
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "flash");
  snprintf(c.attn, sizeof c.attn, "auto");
  snprintf(c.kv_type, sizeof c.kv_type, "q4_0");
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--kv-type");
  /* ctx x n_seq beyond the cache's 32-bit cell indices is refused naming both flags, before any
   * size is computed (it overflowed int arithmetic in the sizing and the OOM report) */
  snprintf(c.kv_type, sizeof c.kv_type, "f16");
  c.ctx = 4194304;
  c.n_seq = 4096;
  IL_CHECK_INT(il_engine_open(&c, &e), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "--ctx 4194304 x --n-seq 4096");
}

/* The workspace the engine sizes once must hold any batch: several sequences' prompts one after
 * another in one pass (bench's prompt phase), with a small context and every kernel. */
static void test_workspace_bound(void) {
  const char *names[] = {"flash", "memeff", "sliced", "naive"};
  for (int k = 0; k < 4; k++) {
    il_config c;
    il_config_defaults(&c);
    c.ctx = 96;
    c.n_seq = 4;
    c.threads = 2;
    snprintf(c.attn, sizeof c.attn, "%s", names[k]);
    il_engine *e = NULL;
    IL_CHECK_OK(il_engine_open(&c, &e));
    if (!e) continue;
    il_batch_entry b[4 * 64];
    int n = 0;
    for (int s = 0; s < 4; s++)
      for (int i = 0; i < 64; i++) b[n++] = (il_batch_entry){1 + (s * 64 + i) % 300, s, i, i == 63};
    IL_CHECK_OK(il_engine_decode(e, b, n, NULL));
    /* then one decode step per sequence at the end of the context */
    for (int s = 0; s < 4; s++) b[s] = (il_batch_entry){7, s, 95, true};
    for (int s = 0; s < 4; s++)
      for (int i = 64; i < 95; i++) {
        il_batch_entry one = {5, s, i, false};
        IL_CHECK_OK(il_engine_decode(e, &one, 1, NULL));
      }
    IL_CHECK_OK(il_engine_decode(e, b, 4, NULL));
    il_engine_free(e);
  }
  printf("workspace bound: 4 prompts of 64 in one pass and 4 decode rows at the end of a 96 context, every kernel\n");
}

/* ---- sliding-window rings (gemma3) ---- */

#define W_CTX 256
#define W_BATCH 16
#define W_N 120

static il_engine *open_gemma(const char *device, const char *kv, int n_seq) {
  il_config c;
  il_config_defaults(&c);
  snprintf(c.model, sizeof c.model, "builtin:gemma3-tiny");
  c.ctx = W_CTX;
  c.batch = W_BATCH;
  c.threads = 2;
  c.n_seq = n_seq;
  c.logits_all = true;
  snprintf(c.device, sizeof c.device, "%s", device);
  snprintf(c.kv, sizeof c.kv, "%s", kv);
  snprintf(c.kv_type, sizeof c.kv_type, "f32");
  c.kv_block = 16;
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(&c, &e));
  return e;
}

/* The same engine with every layer keeping the whole context (white-box: the cache re-made
 * without the batch that bounds the rings). */
static void unbound(il_engine *e) {
  il_kv_cache_free(&e->kv);
  il_kv_opts ko = e->kv_opts;
  ko.layer_b = e->layer_b;
  ko.batch = 0;
  IL_CHECK_OK(il_kv_cache_init(&e->kv, e->backend, &e->model->hp, e->n_ctx, e->n_seq, &ko));
  IL_CHECK_INT(e->kv.ring, 0);
}

/* Positions [p0, p1) of sequence seq, logits of each into out (rows p0..). */
static void run_w(il_engine *e, int seq, int p0, int p1, float *out) {
  il_batch_entry b[W_N];
  int t[W_N];
  tokens(t, W_N, 7);
  for (int i = p0; i < p1; i++) b[i - p0] = (il_batch_entry){t[i], seq, i, true};
  IL_CHECK_OK(il_engine_decode(e, b, p1 - p0, out + (size_t)p0 * (size_t)e->model->hp.n_vocab));
}

static size_t r512(size_t n) { return (n + 511) / 512 * 512; }

static size_t kv_bytes(const il_engine *e) {
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  return es.mem.current[IL_MEM_KV];
}

static void test_window_ring(const char *kv) {
  il_engine *e = open_gemma("sim:256MiB", kv, 2), *ref = open_gemma("sim:256MiB", kv, 2);
  if (!e || !ref) return;
  const il_hparams *hp = &e->model->hp;
  IL_CHECK_INT(hp->swa, 24);
  IL_CHECK_INT(e->kv.ring, 24 + W_BATCH - 1);
  /* the device's bytes: 1 global layer x 2 sequences x 256 positions, 5 local x 2 x 39, K and V of
   * 96 f32; the block tables (paged: 16 blocks of 16; contiguous: one) and the ring table (7) */
  const size_t row = 96 * 4, table = 2 * 4 * (size_t)(!strcmp(kv, "paged") ? 16 : 1), ring_table = 2 * 4 * 7;
  const size_t want = 2 * row * (2 * W_CTX + 5 * 2 * 39) + table + ring_table, got = kv_bytes(e);
  /* the device counts what its allocator hands out: each buffer rounded up to 512 bytes */
  const size_t dev_want = 2 * r512(row * 2 * W_CTX) + 10 * r512(row * 2 * 39) + r512(table) + r512(ring_table);
  unbound(ref);
  const size_t full = kv_bytes(ref);
  printf("gemma3-tiny %s, ctx %d, batch %d, 2 sequences: KV %zu bytes on the device (formula %zu), %zu unbounded "
         "(%.2fx)\n", kv, W_CTX, W_BATCH, got, want, full, (double)got / (double)full);
  IL_CHECK_INT(got, dev_want);
  IL_CHECK_INT(full, 12 * r512(row * 2 * W_CTX) + r512(table));
  IL_CHECK_INT(il_kv_cache_bytes(hp, W_CTX, 2, &(il_kv_opts){.type = IL_DTYPE_F32, .block = e->kv_opts.block, .batch = W_BATCH}), want);
  IL_CHECK(!il_kv_cache_prefix_enabled(&e->kv)); /* a ring does not hold a whole prefix */
  /* the planner's prediction is the run's */
  il_plan p;
  il_config c = *il_engine_config(e);
  IL_CHECK_OK(il_plan_run(&c, &p));
  IL_CHECK_INT(p.by_cat[IL_MEM_KV], dev_want);

  const size_t nv = (size_t)hp->n_vocab, n = (size_t)W_N * nv;
  float *x = calloc(n, 4), *y = calloc(n, 4), *x1 = calloc(nv, 4), *y1 = calloc(nv, 4);
  run_w(e, 0, 0, W_N, x);
  run_w(ref, 0, 0, W_N, y);
  const double d = max_diff(x, y, n);
  printf("  logits of %d positions (the ring wrapped %d times): max |diff| vs unbounded %.3g\n", W_N, W_N / 39, d);
  IL_CHECK(d == 0);
  /* positions 81.. are in the ring: truncating to 110 keeps the window 87..109, to 100 it does not */
  IL_CHECK_INT(il_kv_cache_seq_keep(&e->kv, 0, 100), 0);
  IL_CHECK_INT(il_kv_cache_seq_keep(&e->kv, 0, 110), 110);
  IL_CHECK_INT(il_engine_seq_truncate(e, 0, 100), IL_ERR_UNSUPPORTED);
  IL_CHECK_CONTAINS(il_error_detail(), "window 24");
  il_error_clear();
  /* fork to 1 (copies the ring), truncate both to 110 and rewrite 110..119 differently on 1 */
  IL_CHECK_OK(il_engine_seq_fork(e, 0, 1));
  IL_CHECK_OK(il_engine_seq_fork(ref, 0, 1));
  IL_CHECK_OK(il_engine_seq_truncate(e, 1, 110));
  IL_CHECK_OK(il_engine_seq_truncate(ref, 1, 110));
  memset(x, 0, n * 4), memset(y, 0, n * 4);
  run_w(e, 1, 110, W_N, x);
  run_w(ref, 1, 110, W_N, y);
  IL_CHECK(max_diff(x, y, n) == 0);
  const il_batch_entry b0 = {5, 0, W_N, true};
  IL_CHECK_OK(il_engine_decode(e, &b0, 1, x1));
  IL_CHECK_OK(il_engine_decode(ref, &b0, 1, y1));
  IL_CHECK(max_diff(x1, y1, nv) == 0);
  printf("  truncate past the ring refused; fork + truncate within it + rewrite equal unbounded\n");
  free(x), free(y), free(x1), free(y1);
  il_engine_free(e);
  il_engine_free(ref);
}

int main(void) {
  test_workspace_bound();
  test_layouts_and_types();
  test_fork("paged");
  test_fork("contiguous");
  test_kernels();
  test_window_ring("contiguous");
  test_window_ring("paged");
  return il_test_finish();
}
