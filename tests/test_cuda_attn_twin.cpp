/* tests/test_cuda_attn_twin: the flash attention kernels of the CUDA backend, run on the host.
 *
 * No GPU is needed. Flash-decoding's per-CTA work (src/backend/cuda/attn_fd.cuh) is
 * __host__ __device__ code with a fixed operation order, so its host twin computes what the
 * device computes, bit for bit; the prefill kernel's tile loop (attn_fa.cuh) runs here over
 * host emulations of mma.sync m16n8k16 and ldmatrix written from the PTX ISA's fragment tables.
 * Both are compared with the scalar CPU reference (backend/cpu/attn.c, "naive", scalar ISA)
 * over odd context lengths, split counts, GQA ratios, head sizes, paged and contiguous caches
 * and every KV cell type; the decoder's byte counters check that each K/V byte of a head is read
 * once per token and KV head, and block-table reads stay at one per block per tile.
 */
#include <cuda_runtime.h> /* __host__, __device__ for a host compiler */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "backend/cuda/attn_fd.cuh"

extern "C" {
#include "backend/cpu/attn.h"
#include "core/quant.h"
#include "harness.h"
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* One attention problem: caches, table, queries; the CPU reference's output. */
struct Problem {
  int64_t n_tok, n_heads, n_kv, hd;
  il_dtype kt;
  int32_t block, n_seq, max_blocks, n_ctx;
  size_t stride;
  int64_t n_cells;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> table, seq, pos;
  std::vector<float> q, ref;
  float scale;
};

static void fill_row(il_dtype t, const float *x, uint8_t *dst, int64_t n) {
  if (t == IL_DTYPE_F32) memcpy(dst, x, (size_t)n * 4);
  else if (t == IL_DTYPE_F16 || t == IL_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) {
      const uint16_t h = t == IL_DTYPE_F16 ? il_f32_to_fp16(x[i]) : il_f32_to_bf16(x[i]);
      memcpy(dst + 2 * i, &h, 2);
    }
  else il_quantize_row(t, x, dst, n);
}

/* paged: blocks of `block` cells handed out in a shuffled order; else one block per sequence.
 * pad: bytes added to each cell's stride. Tokens: the last n_tok positions of each sequence
 * (a prefill chunk), sequences in turn. */
static Problem make(int64_t n_tok, int64_t n_heads, int64_t n_kv, int64_t hd, il_dtype kt, int32_t n_seq, int32_t n_ctx,
                    int32_t block, size_t pad, const int32_t *lens) {
  Problem p;
  p.n_tok = n_tok * n_seq, p.n_heads = n_heads, p.n_kv = n_kv, p.hd = hd, p.kt = kt;
  p.block = block, p.n_seq = n_seq, p.n_ctx = n_ctx;
  p.max_blocks = (n_ctx + block - 1) / block;
  p.n_ctx = p.max_blocks * block;
  p.n_cells = (int64_t)(p.max_blocks * n_seq + 1) * block; /* block 0 is never handed out */
  p.stride = il_dtype_row_size(kt, n_kv * hd) + pad;
  p.k.assign((size_t)p.n_cells * p.stride, 0), p.v.assign((size_t)p.n_cells * p.stride, 0);
  std::vector<float> row((size_t)(n_kv * hd));
  for (int64_t c = 0; c < p.n_cells; c++) {
    for (auto &x : row) x = frand();
    fill_row(kt, row.data(), p.k.data() + (size_t)c * p.stride, n_kv * hd);
    for (auto &x : row) x = frand();
    fill_row(kt, row.data(), p.v.data() + (size_t)c * p.stride, n_kv * hd);
  }
  const int32_t nb = p.max_blocks * n_seq;
  std::vector<int32_t> order((size_t)nb);
  for (int32_t i = 0; i < nb; i++) order[(size_t)i] = i + 1; /* block 0 stays unused */
  for (int32_t i = nb - 1; i > 0; i--) std::swap(order[(size_t)i], order[(size_t)((rng >> 33) % (uint64_t)(i + 1))]), frand();
  p.table.assign(order.begin(), order.end());
  for (int32_t s = 0; s < n_seq; s++)
    for (int64_t i = 0; i < n_tok; i++) {
      p.seq.push_back(s);
      p.pos.push_back(lens[s] - (int32_t)n_tok + (int32_t)i);
    }
  p.q.resize((size_t)(p.n_tok * n_heads * hd));
  for (auto &x : p.q) x = frand();
  p.scale = 1.0f / sqrtf((float)hd);
  p.ref.assign(p.q.size(), 0.0f);
  il_cpu_attn_args a;
  memset(&a, 0, sizeof a);
  a.out = p.ref.data(), a.q = p.q.data(), a.seq = p.seq.data(), a.pos = p.pos.data(), a.n_tok = p.n_tok;
  a.k = p.k.data(), a.v = p.v.data(), a.kv_type = kt, a.kv_row_stride = p.stride, a.n_cells = p.n_cells;
  a.block_table = p.table.data(), a.block = block, a.max_blocks = p.max_blocks, a.n_seq = n_seq;
  a.n_heads = n_heads, a.n_kv_heads = n_kv, a.head_dim = hd, a.scale = p.scale, a.isa = IL_ISA_SCALAR;
  const il_cpu_attn_kernel *naive = il_cpu_attn_find("naive");
  std::vector<uint8_t> work(naive->workspace(&a, 1) + 64);
  IL_CHECK_OK(naive->run(NULL, &a, work.data(), work.size()));
  return p;
}

static il__cu_attn args_of(Problem &p, std::vector<float> &out, il__cu_fault *fault) {
  il__cu_attn a;
  memset(&a, 0, sizeof a);
  out.assign(p.q.size(), NAN);
  a.out = out.data(), a.q = p.q.data(), a.out_stride = (size_t)(p.n_heads * p.hd) * 4, a.q_stride = a.out_stride;
  a.seq = p.seq.data(), a.pos = p.pos.data(), a.table = p.table.data();
  a.k = p.k.data(), a.v = p.v.data(), a.k_stride = p.stride, a.v_stride = p.stride, a.kv_type = p.kt;
  a.n_tok = p.n_tok, a.n_heads = p.n_heads, a.n_kv_heads = p.n_kv, a.head_dim = p.hd, a.n_cells = p.n_cells;
  a.block = p.block, a.n_seq = p.n_seq, a.max_blocks = p.max_blocks, a.n_ctx = p.n_ctx, a.scale = p.scale;
  a.fault = fault;
  return a;
}

static double max_err(const std::vector<float> &x, const std::vector<float> &ref) {
  double e = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double d = fabs((double)x[i] - (double)ref[i]);
    e = d > e || d != d ? d : e;
  }
  return e;
}

/* The decoder's twin on p with S splits: matches the reference, reads every K/V byte of a head
 * once per token that reaches it, and each reached table entry at most once per tile. */
static void check_fd(Problem &p, int S, const char *what) {
  il__cu_fault fault = {};
  std::vector<float> out;
  il__cu_attn a = args_of(p, out, &fault);
  std::vector<float> ws((size_t)(p.n_tok * p.n_heads * S * il__fd_part(p.hd)), NAN);
  std::vector<uint8_t> tk(p.k.size(), 0), tv(p.v.size(), 0);
  std::vector<uint32_t> tt(p.table.size(), 0);
  il__fd_touch touch = {tk.data(), tv.data(), tt.data()};
  IL_CHECK(il__fd_call_host(a, ws.data(), S, &touch));
  IL_CHECK_INT(fault.kind, 0);
  const double e = max_err(out, p.ref);
  if (!(e <= 2e-5)) fprintf(stderr, "%s: S=%d max error %g\n", what, S, e);
  IL_CHECK(e <= 2e-5);
  /* expected reads: tokens reaching the cell, for the bytes of every head's row */
  std::vector<uint8_t> want(p.k.size(), 0);
  const size_t row = il_dtype_row_size(p.kt, p.n_kv * p.hd);
  for (int64_t t = 0; t < p.n_tok; t++)
    for (int32_t q = 0; q <= p.pos[(size_t)t]; q++) {
      const size_t cell = (size_t)p.table[(size_t)(p.seq[(size_t)t] * p.max_blocks + q / p.block)] * p.block + q % p.block;
      for (size_t b = 0; b < row; b++) want[cell * p.stride + b]++;
    }
  IL_CHECK(tk == want);
  IL_CHECK(tv == want);
  const int T = il__fd_tile(p.hd);
  uint64_t reads = 0, bound = 0;
  bool reached = true;
  for (int64_t t = 0; t < p.n_tok; t++) {
    const int64_t n = p.pos[(size_t)t] + 1;
    bound += (uint64_t)p.n_kv * (uint64_t)((n + T - 1) / T + (n + p.block - 1) / p.block + S);
    for (int64_t b = 0; b <= p.pos[(size_t)t] / p.block; b++)
      reached = reached && tt[(size_t)(p.seq[(size_t)t] * p.max_blocks + b)] > 0;
  }
  for (uint32_t c : tt) reads += c;
  IL_CHECK(reached);
  IL_CHECK(reads <= bound);
}

static void test_exp2(void) {
  double worst = 0;
  for (float x = -124.0f; x <= 0.0f; x += 0.0137f) {
    const double r = exp2((double)x), e = fabs((double)il__exp2(x) - r) / r;
    worst = e > worst ? e : worst;
  }
  printf("il__exp2: max relative error %.3g on [-124, 0]\n", worst);
  IL_CHECK(worst < 4e-7);
  IL_CHECK(il__exp2(-INFINITY) == 0.0f);
  IL_CHECK(il__exp2(0.0f) == 1.0f);
  IL_CHECK(il__exp2(-200.0f) == 0.0f);
  IL_CHECK(isnan(il__exp2(NAN)));
}

static void test_decode(void) {
  const il_dtype types[] = {IL_DTYPE_F32, IL_DTYPE_F16, IL_DTYPE_BF16, IL_DTYPE_Q8_0};
  int cases = 0;
  for (il_dtype kt : types) {
    /* decode of 3 sequences at odd lengths; GQA 4, head 64, paged blocks of 16 */
    const int32_t lens3[] = {1, 77, 333};
    Problem p = make(1, 8, 2, 64, kt, 3, 400, 16, 0, lens3);
    for (int S : {1, 2, 5, 32}) check_fd(p, S, il_dtype_name(kt)), cases++;
    /* one sequence, contiguous (one block of the whole context), GQA 8, head 128 */
    const int32_t lens1[] = {1001};
    Problem c = make(1, 16, 2, 128, kt, 1, 1024, 1024, 0, lens1);
    for (int S : {1, 7, il__fd_splits(1, 2, 1024, 128)}) check_fd(c, S, il_dtype_name(kt)), cases++;
    /* a prefill chunk of 5 tokens per sequence, no GQA, head 256 (16-position tiles), blocks of 24 */
    const int32_t lens2[] = {29, 100};
    Problem f = make(5, 2, 2, 256, kt, 2, 120, 24, 0, lens2);
    for (int S : {1, 3}) check_fd(f, S, il_dtype_name(kt)), cases++;
    if (kt != IL_DTYPE_Q8_0) {
      /* rows not 16-byte aligned (head 12, a 2-byte pad): the element loader; GQA 3 */
      const int32_t lens4[] = {50, 9};
      Problem u = make(1, 6, 2, 12, kt, 2, 64, 8, 2, lens4);
      il__cu_attn a = args_of(u, u.ref /* unused */, nullptr);
      IL_CHECK(!il__fd_vec_ok(a));
      Problem u2 = make(1, 6, 2, 12, kt, 2, 64, 8, 2, lens4);
      for (int S : {1, 4}) check_fd(u2, S, il_dtype_name(kt)), cases++;
    }
  }
  printf("flash-decoding twin: %d cases against the scalar CPU reference\n", cases);
}

/* Bad inputs: a block-table entry outside the cache, a sequence outside the table. */
static void test_decode_faults(void) {
  const int32_t lens[] = {40};
  Problem p = make(1, 4, 1, 32, IL_DTYPE_F16, 1, 64, 16, 0, lens);
  p.table[1] = 100000;
  il__cu_fault fault = {};
  std::vector<float> out;
  il__cu_attn a = args_of(p, out, &fault);
  std::vector<float> ws((size_t)(p.n_tok * p.n_heads * 2 * il__fd_part(p.hd)));
  IL_CHECK(il__fd_call_host(a, ws.data(), 2, nullptr));
  IL_CHECK_INT(fault.kind, IL__CU_FAULT_BLOCK);
  IL_CHECK_INT(fault.b, 100000);
  for (float x : out) IL_CHECK(isfinite(x));
  p.seq[0] = 3;
  il__cu_fault f2 = {};
  a = args_of(p, out, &f2);
  IL_CHECK(il__fd_call_host(a, ws.data(), 2, nullptr));
  IL_CHECK_INT(f2.kind, IL__CU_FAULT_SEQ);
  IL_CHECK_INT(f2.b, 3);
}

int main(void) {
  test_exp2();
  test_decode();
  test_decode_faults();
  return il_test_finish();
}
