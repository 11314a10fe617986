/* tests/test_cuda_attn_device: the flash attention kernels on a GPU against their host twins.
 *
 * Runs the cuda backend's "flash" attention through the device seam (upload, run, download) on
 * problems from cuda_attn_problem.h and computes the same calls on the host:
 *   decode (flash-decoding, fewer than il__cu_attn_fa_min_tokens() tokens): the device output
 *     must equal the host twin (attn_fd.cuh) bit for bit, with the split count the backend uses;
 *   prefill (mma.sync kernel): within 3e-3 of the scalar CPU reference on F16-rounded inputs,
 *     and the difference from the host emulation of the tile loop is printed.
 * Every output is also checked against the scalar CPU reference; decode and prefill also with
 * gemma3's sliding window (paged tables and the engine's rings). Needs the CUDA module and a
 * device: prints why and skips (exit 77) otherwise. With INFERLAB_CUDA_MODULE set to the fake
 * module it runs on the host (the fake's flash is the twin itself: a check of this program).
 */
#include "cuda_attn_problem.h"

extern "C" {
#include "backend/backend.h"
#include "backend/registry.h"
}

static il_backend *B;

static il_tensor put(const void *h, int64_t rows, int64_t cols, il_dtype t, const char *name) {
  il_tensor x;
  IL_CHECK_OK(il_backend_tensor_new(B, IL_MEM_ACTIVATIONS, rows, cols, t, name, &x));
  if (h) IL_CHECK_OK(B->ops->upload(B, x, h, il_tensor_span(&x)));
  return x;
}

/* The device's flash output for p (the backend's own kernel entry, through the seam). */
static std::vector<float> on_device(Problem &p) {
  int nk = 0;
  const il_attn_kernel *ks = B->ops->attn_kernels(B, &nk), *fl = NULL;
  for (int i = 0; i < nk; i++)
    if (!strcmp(ks[i].name, "flash")) fl = &ks[i];
  std::vector<float> out(p.q.size(), NAN);
  IL_CHECK(fl != NULL);
  if (!fl) return out;
  const int64_t C = p.n_kv * p.hd;
  il_tensor K, V;
  IL_CHECK_OK(il_backend_tensor_new(B, IL_MEM_KV, p.n_cells, C, p.kt, "k cells", &K));
  IL_CHECK_OK(il_backend_tensor_new(B, IL_MEM_KV, p.n_cells, C, p.kt, "v cells", &V));
  /* cells at the problem's stride: the seam's rows are packed, so pad-free problems only */
  IL_CHECK(K.stride == p.stride);
  IL_CHECK_OK(B->ops->upload(B, K, p.k.data(), il_tensor_span(&K)));
  IL_CHECK_OK(B->ops->upload(B, V, p.v.data(), il_tensor_span(&V)));
  il_tensor Q = put(p.q.data(), p.n_tok, p.n_heads * p.hd, IL_DTYPE_F32, "q");
  il_tensor O = put(out.data(), p.n_tok, p.n_heads * p.hd, IL_DTYPE_F32, "out");
  il_tensor S = put(p.seq.data(), 1, p.n_tok, IL_DTYPE_I32, "seq"), P = put(p.pos.data(), 1, p.n_tok, IL_DTYPE_I32, "pos");
  il_tensor TB = put(p.table.data(), p.n_seq, p.max_blocks, IL_DTYPE_I32, "table");
  il_kv_view kv = {K, V, TB, p.block, p.n_seq, p.max_blocks, p.n_ctx, 0};
  il_attn_args a = {O, Q, S, P, &kv, p.n_heads, p.n_kv, p.hd, p.scale, 0, p.window};
  const char *why = fl->why_not(B, &a);
  IL_CHECK(why == NULL);
  il_tensor W = {};
  const size_t wsz = fl->workspace(B, &a);
  if (wsz) IL_CHECK_OK(il_backend_tensor_new(B, IL_MEM_WORKSPACE, 1, (int64_t)(wsz + 3) / 4, IL_DTYPE_F32, "ws", &W));
  IL_CHECK_OK(fl->run(B, &a, W));
  IL_CHECK_OK(B->ops->sync(B));
  IL_CHECK_OK(B->ops->download(B, out.data(), O, out.size() * 4));
  il_tensor *all[] = {&K, &V, &Q, &O, &S, &P, &TB, &W};
  for (il_tensor *t : all)
    if (t->buf) il_backend_tensor_free(B, t);
  return out;
}

static void decode_case(Problem &p, const char *what) {
  const std::vector<float> dev = on_device(p);
  std::vector<float> twin;
  il__cu_fault fault = {};
  il__cu_attn a = args_of(p, twin, &fault);
  const int S = il__fd_splits(p.n_tok, p.n_kv, p.n_ctx, p.hd);
  std::vector<float> ws((size_t)(p.n_tok * p.n_heads * S * il__fd_part(p.hd)));
  IL_CHECK(il__fd_call_host(a, ws.data(), S, nullptr));
  const bool same = memcmp(dev.data(), twin.data(), dev.size() * 4) == 0;
  const double e = max_err(dev, p.ref);
  printf("decode %-28s S=%-2d device == twin bit for bit: %s; max error vs CPU %.3g\n", what, S, same ? "yes" : "NO", e);
  IL_CHECK(same);
  IL_CHECK(e <= 2e-5);
}

static void prefill_case(Problem &p, const char *what) {
  const std::vector<float> dev = on_device(p);
  std::vector<float> emu;
  il__cu_fault fault = {};
  il__cu_attn a = args_of(p, emu, &fault);
  IL_CHECK(il__fa_call_host(a));
  const std::vector<float> r16 = reference(p, true);
  const double e = max_err(dev, r16), de = max_err(dev, emu);
  printf("prefill %-27s max error vs CPU (f16 inputs) %.3g; vs host emulation %.3g\n", what, e, de);
  IL_CHECK(e <= 3e-3);
}

int main(void) {
  B = il_test_open_cuda_or_skip();
  const il_dtype types[] = {IL_DTYPE_F16, IL_DTYPE_F32, IL_DTYPE_BF16, IL_DTYPE_Q8_0};
  for (il_dtype kt : types) {
    char what[64];
    const int32_t l3[] = {1, 300, 777};
    Problem p = make(1, 32, 8, 128, kt, 3, 800, 16, 0, l3);
    snprintf(what, sizeof what, "%s 3 seqs, 32/8 x 128", il_dtype_name(kt));
    decode_case(p, what);
    const int32_t l1[] = {4000};
    Problem c = make(4, 16, 2, 64, kt, 1, 4096, 4096, 0, l1);
    snprintf(what, sizeof what, "%s 4 tokens at 4k, 16/2 x 64", il_dtype_name(kt));
    decode_case(c, what);
    /* gemma3's sliding window: a paged table, and the engine's ring of a local layer */
    windowed(p, 256, false);
    snprintf(what, sizeof what, "%s 3 seqs, window 256", il_dtype_name(kt));
    decode_case(p, what);
    Problem r = make(1, 8, 1, 128, kt, 3, 800, 600, 0, l3);
    windowed(r, 512, true);
    snprintf(what, sizeof what, "%s 3 seqs, window 512, ring 600", il_dtype_name(kt));
    decode_case(r, what);
    if (kt == IL_DTYPE_BF16) continue; /* the prefill kernel reads f16, f32 and q8_0 cells */
    const int32_t l2[] = {200};
    Problem f = make(200, 8, 2, 128, kt, 1, 256, 16, 0, l2);
    snprintf(what, sizeof what, "%s 200 tokens, 8/2 x 128", il_dtype_name(kt));
    prefill_case(f, what);
    const int32_t l4[] = {70, 130};
    Problem m = make(50, 4, 4, 64, kt, 2, 160, 32, 0, l4);
    snprintf(what, sizeof what, "%s 2 x 50 tokens, 4/4 x 64", il_dtype_name(kt));
    prefill_case(m, what);
    windowed(f, 64, false);
    snprintf(what, sizeof what, "%s 200 tokens, window 64", il_dtype_name(kt));
    prefill_case(f, what);
    Problem g = make(50, 4, 1, 64, kt, 2, 160, 128, 0, l4);
    windowed(g, 40, true);
    snprintf(what, sizeof what, "%s 2 x 50 tokens, window 40, ring 128", il_dtype_name(kt));
    prefill_case(g, what);
  }
  B->ops->destroy(B);
  return il_test_finish();
}
