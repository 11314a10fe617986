/* tests/test_act_handover: the forward pass hands 16-bit activations to a backend op by op.
 *
 * A test backend wraps cpu with a restricted supports(): on F16/BF16 activations it accepts
 * only the elementwise ops (rmsnorm, add, swiglu, geglu, scale, get_rows), as cuda does, and
 * records the activation types each op received. For builtin:tiny, a batch of 40 tokens
 * (chunks of 16 rows) at f16 and bf16:
 * - the partial backend's logits equal those of the all-F32-scratch path (the same wrapper
 *   refusing every 16-bit op) within test_precision's tolerance (f16 1e-2, bf16 5e-2 of the
 *   largest |logit|), and both are within it of f32;
 * - the accepted ops received 16-bit tensors, the refused ones (matmul, rope + KV store) and
 *   every op of the scratch path only F32;
 * - the numerics observer saw the same op results on the partial, the scratch and the
 *   all-direct (plain cpu supports()) paths: in the same order and rows on the last two, the
 *   same rows per op on the partial one (its taken ops run unchunked), each reported once.
 * The same for builtin:gemma3-tiny (per-head q/k norms, the embedding scale, GeGLU, post-norms).
 * - il_forward_state_bytes equals the activations the state allocated (current and peak), the
 *   partial path's two F32 chunk scratches (the pass's and the backend's) included;
 * - with a batch of one chunk, the observer counts as many results per op on the f16/bf16
 *   scratch and partial paths as on f32: the inner ops of multi-op loops are reported too.
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/registry.h"
#include "engine/kv.h"
#include "harness.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "model/llama.h"

enum { MODE_SCRATCH, MODE_PARTIAL, MODE_ALL, MAX_SEEN = 4096 };

static const il_backend_ops *cpu_ops; /* the wrapped backend's own table */
static il_backend_ops test_ops;
static int mode;
static int got16[IL_OP_COUNT], got32[IL_OP_COUNT]; /* calls that received 16-bit / F32 activations */
static const char *seen[MAX_SEEN];                 /* the observer's op results, in order */
static int64_t seen_rows[MAX_SEEN];
static int n_seen;

static bool accepted(il_op op) {
  return op == IL_OP_RMSNORM || op == IL_OP_ADD || op == IL_OP_SWIGLU || op == IL_OP_GEGLU || op == IL_OP_SCALE ||
         op == IL_OP_GET_ROWS;
}

static bool t_supports(il_backend *b, il_op op, il_dtype wtype, il_dtype atype) {
  if (atype != IL_DTYPE_F32 && (mode == MODE_SCRATCH || (mode == MODE_PARTIAL && !accepted(op)))) return false;
  return cpu_ops->supports(b, op, wtype, atype);
}

static void note(il_op op, il_dtype t) { (t == IL_DTYPE_F32 ? got32 : got16)[op]++; }

static il_status t_get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor ids) {
  note(IL_OP_GET_ROWS, y.type);
  return cpu_ops->get_rows(b, y, w, ids);
}
static il_status t_matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) {
  note(IL_OP_MATMUL, x.type);
  return cpu_ops->matmul(b, y, w, x);
}
static il_status t_matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, const il_tensor *bias,
                                il_tensor x) {
  note(IL_OP_MATMUL, x.type);
  return cpu_ops->matmul_multi(b, n, y, w, bias, x);
}
static il_status t_rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) {
  note(IL_OP_RMSNORM, x.type);
  return cpu_ops->rmsnorm(b, y, x, g, eps);
}
static il_status t_rope_kv_store(il_backend *b, il_tensor q, il_tensor k, il_tensor v, il_tensor pos,
                                 const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv, il_tensor slots) {
  note(IL_OP_ROPE, q.type);
  return cpu_ops->rope_kv_store(b, q, k, v, pos, rq, rk, kv, slots);
}
static il_status t_swiglu(il_backend *b, il_tensor g, il_tensor u) {
  note(IL_OP_SWIGLU, g.type);
  return cpu_ops->swiglu(b, g, u);
}
static il_status t_geglu(il_backend *b, il_tensor g, il_tensor u) {
  note(IL_OP_GEGLU, g.type);
  return cpu_ops->geglu(b, g, u);
}
static il_status t_scale(il_backend *b, il_tensor x, float s) {
  note(IL_OP_SCALE, x.type);
  return cpu_ops->scale(b, x, s);
}
static il_status t_add(il_backend *b, il_tensor y, il_tensor x) {
  note(IL_OP_ADD, y.type);
  return cpu_ops->add(b, y, x);
}
/* il_numerics_observe measures every result it is handed with value_stats: the observer's log */
static il_status t_value_stats(il_backend *b, il_tensor x, int64_t *nonfinite, float *absmax) {
  if (n_seen < MAX_SEEN) seen[n_seen] = x.name, seen_rows[n_seen] = x.rows;
  n_seen++;
  return cpu_ops->value_stats(b, x, nonfinite, absmax);
}

static const il_attn_kernel *first_kernel(void *ctx, il_backend *b) {
  (void)ctx;
  int n = 0;
  const il_attn_kernel *k = b->ops->attn_kernels(b, &n);
  return n ? &k[0] : NULL;
}

/* The last of n_tok (<= 40) tokens' logits of m with activations of act on the test backend in
 * `how` mode, into out; the observer's log left in seen/n_seen. */
static void run_n(const il_model *m, il_dtype act, int how, float *out, il_numerics *rec, int n_tok) {
  memset(got16, 0, sizeof got16), memset(got32, 0, sizeof got32);
  n_seen = 0;
  mode = how;
  il_backend *b = NULL;
  il_backend_opts bo = {.threads = 2};
  IL_CHECK_OK(il_backend_open("cpu", &bo, &b));
  if (!b) return;
  cpu_ops = b->ops;
  test_ops = *b->ops;
  test_ops.supports = t_supports, test_ops.get_rows = t_get_rows, test_ops.matmul = t_matmul;
  test_ops.matmul_multi = t_matmul_multi, test_ops.rmsnorm = t_rmsnorm, test_ops.rope_kv_store = t_rope_kv_store;
  test_ops.swiglu = t_swiglu, test_ops.geglu = t_geglu, test_ops.scale = t_scale, test_ops.add = t_add;
  test_ops.value_stats = t_value_stats;
  b->ops = &test_ops;
  il_model_dev d;
  IL_CHECK_OK(il_model_dev_init(&d, m, b, NULL));
  il_kv_cache kv;
  IL_CHECK_OK(il_kv_cache_init(&kv, b, &m->hp, 64, 1, NULL));
  il_forward_state st;
  il_mem_stats m0, m1;
  il_mem_reset_peak();
  il_mem_stats_get(&m0);
  IL_CHECK_OK(il_forward_state_init(&st, &d, act, 64, 1, first_kernel, NULL, kv.views));
  il_mem_stats_get(&m1);
  /* the estimate counts the chunk scratches the lane holds: the pass's where the backend refuses
   * an op, the backend's where it takes one, both on the partial path */
  const size_t want = il_forward_state_bytes(&m->hp, act, 64, 1, b, kv.views[0].k.type);
  IL_CHECK_INT((long long)(m1.current[IL_MEM_ACTIVATIONS] - m0.current[IL_MEM_ACTIVATIONS]), (long long)want);
  IL_CHECK_INT((long long)(m1.peak[IL_MEM_ACTIVATIONS] - m0.current[IL_MEM_ACTIVATIONS]), (long long)want);
  IL_CHECK_INT(il_forward_lane_scratches(b, act, kv.views[0].k.type),
               act == IL_DTYPE_F32 ? 0 : how == MODE_PARTIAL ? 2 : 1);
  IL_CHECK_INT(st.chunk, act == IL_DTYPE_F32 ? 64 : 16);
  il_numerics_reset(rec);
  st.numerics = rec;
  il_batch_entry batch[40];
  int32_t slots[40], n_logits = 0;
  for (int i = 0; i < n_tok; i++) {
    batch[i] = (il_batch_entry){(7 + 13 * i) % m->hp.n_vocab, 0, i, i == n_tok - 1};
    IL_CHECK_OK(il_kv_cache_prepare(&kv, 0, i, &slots[i]));
  }
  IL_CHECK_OK(il_kv_cache_sync(&kv));
  IL_CHECK_OK(il_model_forward(&d, &st, batch, n_tok, kv.views, slots, &n_logits));
  IL_CHECK_INT(n_logits, 1);
  IL_CHECK_OK(b->ops->download(b, out, st.lane[0].logits, sizeof(float) * (size_t)m->hp.n_vocab));
  il_forward_state_free(&st);
  il_kv_cache_free(&kv);
  il_model_dev_free(&d);
  b->ops = cpu_ops;
  b->ops->destroy(b);
}

static void run(const il_model *m, il_dtype act, int how, float *out, il_numerics *rec) { run_n(m, act, how, out, rec, 40); }

static double rel_diff(const float *a, const float *b, int n) {
  double m = 0, top = 0;
  for (int i = 0; i < n; i++) {
    m = fmax(m, fabs((double)a[i] - b[i]));
    top = fmax(top, fabs((double)b[i]));
  }
  return m / top;
}

/* Rows the observer saw under op name `name` in a log of n results. */
static int64_t rows_of(const char **names, const int64_t *rows, int n, const char *name) {
  int64_t r = 0;
  for (int j = 0; j < n && j < MAX_SEEN; j++) r += names[j] == name ? rows[j] : 0;
  return r;
}

/* A batch that fits one chunk (12 tokens): the observer counts the same op results per op on
 * the 16-bit scratch and partial paths as on the F32 path, the inner ops of the multi-op loops
 * included (the embedding's get_rows before gemma3's scale, the per-head q/k norms). */
static void check_counts(const char *spec) {
  il_model *m = NULL;
  IL_CHECK_OK(il_builtin_open(spec, "f32", 2, &m));
  if (!m) return;
  float *out = calloc((size_t)m->hp.n_vocab, 4);
  il_numerics f32, rec;
  run_n(m, IL_DTYPE_F32, MODE_PARTIAL, out, &f32, 12);
  const int n_layer = m->hp.n_layer;
  IL_CHECK_INT(f32.observed[IL_OP_GET_ROWS], 1);
  IL_CHECK_INT(f32.observed[IL_OP_ATTENTION], n_layer);
  IL_CHECK_INT(f32.observed[IL_OP_ROPE], n_layer);
  if (m->hp.gemma) { /* per layer: attn, q, k, post-attention, ffn and post-ffw norms; then the output norm */
    IL_CHECK_INT(f32.observed[IL_OP_SCALE], 1);
    IL_CHECK_INT(f32.observed[IL_OP_RMSNORM], 6 * n_layer + 1);
  }
  const il_dtype acts[] = {IL_DTYPE_F16, IL_DTYPE_BF16};
  const int modes[] = {MODE_SCRATCH, MODE_PARTIAL};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      run_n(m, acts[i], modes[j], out, &rec, 12);
      int differ = 0;
      for (int op = 0; op < IL_OP_COUNT; op++)
        if (rec.observed[op] != f32.observed[op]) {
          fprintf(stderr, "  %s %s %s: op %d observed %lld times, %lld on f32\n", spec, il_dtype_name(acts[i]),
                  modes[j] == MODE_SCRATCH ? "scratch" : "partial", op, (long long)rec.observed[op],
                  (long long)f32.observed[op]);
          differ++;
        }
      IL_CHECK_INT(differ, 0);
    }
  int64_t total = 0;
  for (int op = 0; op < IL_OP_COUNT; op++) total += f32.observed[op];
  printf("%-20s: %lld op results observed per pass on f32, and per op the same on the f16/bf16 scratch and partial "
         "paths\n", spec, (long long)total);
  free(out);
  il_model_free(m);
}

static void check_model(const char *spec) {
  il_model *m = NULL;
  IL_CHECK_OK(il_builtin_open(spec, "f32", 2, &m));
  if (!m) return;
  const int nv = m->hp.n_vocab;
  const bool gemma = m->hp.gemma;
  float *ref = calloc((size_t)nv, 4), *scr = calloc((size_t)nv, 4), *part = calloc((size_t)nv, 4),
        *all = calloc((size_t)nv, 4);
  const char **log = calloc(MAX_SEEN, sizeof *log);
  int64_t *log_rows = calloc(MAX_SEEN, sizeof *log_rows);
  il_numerics rec;
  run(m, IL_DTYPE_F32, MODE_PARTIAL, ref, &rec);
  const il_dtype acts[] = {IL_DTYPE_F16, IL_DTYPE_BF16};
  const double tol[] = {1e-2, 5e-2};
  for (int i = 0; i < 2; i++) {
    run(m, acts[i], MODE_ALL, all, &rec);
    const int n_all = n_seen;
    memcpy(log, seen, sizeof *log * MAX_SEEN), memcpy(log_rows, seen_rows, sizeof *log_rows * MAX_SEEN);
    IL_CHECK(n_all > 0 && n_all <= MAX_SEEN);

    run(m, acts[i], MODE_SCRATCH, scr, &rec);
    for (int op = 0; op < IL_OP_COUNT; op++) IL_CHECK_INT(got16[op], 0);
    if (!m->hp.gemma) { /* (gemma3's per-head norms: the cpu chunks the heads, the pass the tokens) */
      IL_CHECK_INT(n_seen, n_all);
      for (int j = 0; j < n_all && j < n_seen; j++) IL_CHECK(log[j] == seen[j] && log_rows[j] == seen_rows[j]);
    }
    for (int j = 0; j < n_all; j++) IL_CHECK_INT(rows_of(seen, seen_rows, n_seen, log[j]), rows_of(log, log_rows, n_all, log[j]));
    IL_CHECK_INT(rec.bad_layer, -1);
    const float scr_max = rec.max_abs;

    run(m, acts[i], MODE_PARTIAL, part, &rec);
    const il_op want16[] = {IL_OP_GET_ROWS, IL_OP_RMSNORM, IL_OP_ADD, gemma ? IL_OP_GEGLU : IL_OP_SWIGLU, IL_OP_SCALE};
    for (int j = 0; j < (gemma ? 5 : 4); j++) {
      IL_CHECK(got16[want16[j]] > 0);
      /* gemma3's per-head norms run inside the refused rope loop, on its F32 copies */
      if (!(gemma && want16[j] == IL_OP_RMSNORM)) IL_CHECK_INT(got32[want16[j]], 0);
    }
    IL_CHECK_INT(got16[IL_OP_MATMUL], 0);
    IL_CHECK_INT(got16[IL_OP_ROPE], 0);
    IL_CHECK(got32[IL_OP_MATMUL] > 0 && got32[IL_OP_ROPE] > 0);
    /* the ops taken run on the whole batch, the others chunk by chunk: the same results, in
     * another order */
    for (int j = 0; j < n_all; j++) IL_CHECK_INT(rows_of(seen, seen_rows, n_seen, log[j]), rows_of(log, log_rows, n_all, log[j]));
    IL_CHECK_INT(rows_of(seen, seen_rows, n_seen, NULL), 0);
    IL_CHECK_INT(rec.bad_layer, -1);
    IL_CHECK(fabs(rec.max_abs - scr_max) <= tol[i] * scr_max);

    const double d = rel_diff(part, scr, nv), d_scr = rel_diff(scr, ref, nv), d_part = rel_diff(part, ref, nv);
    printf("%-20s %-4s: partial vs all-scratch %.2e, scratch vs f32 %.2e, partial vs f32 %.2e (tolerance %.0e); "
           "%d op results observed on each path\n",
           spec, il_dtype_name(acts[i]), d, d_scr, d_part, tol[i], n_all);
    IL_CHECK(d < tol[i] && d_scr < tol[i] && d_part < tol[i]);
    IL_CHECK(d_part > 0); /* the 16-bit rounding really happens */
  }
  free(ref), free(scr), free(part), free(all), free(log), free(log_rows);
  il_model_free(m);
}

int main(void) {
  check_model("builtin:tiny");
  check_model("builtin:gemma3-tiny");
  check_counts("builtin:tiny");
  check_counts("builtin:gemma3-tiny");
  return il_test_finish();
}
