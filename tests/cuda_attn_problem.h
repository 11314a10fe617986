/* tests/cuda_attn_problem: attention problems for the CUDA flash kernels' tests: random caches
 * of any cell type (paged with shuffled blocks, or contiguous), queries, tokens at the end of
 * each sequence, and the scalar CPU reference (backend/cpu/attn.c "naive", scalar ISA) on them.
 * Header-only, C++ (the kernels' headers are); included by test_cuda_attn_twin.cpp and
 * test_cuda_attn_device.cpp.
 */
#ifndef IL_TESTS_CUDA_ATTN_PROBLEM_H
#define IL_TESTS_CUDA_ATTN_PROBLEM_H

#include <cuda_runtime.h> /* __host__, __device__ for a host compiler */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "backend/cuda/attn_fa.cuh"

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
  int32_t window = 0; /* > 0: a sliding window (gemma3's local layers) */
};

static float il__kv_elem_host(il_dtype t, const uint8_t *row, int64_t i) {
  if (t == IL_DTYPE_F32) return il__kv_elem<IL_DTYPE_F32>(row, i);
  if (t == IL_DTYPE_F16) return il__kv_elem<IL_DTYPE_F16>(row, i);
  if (t == IL_DTYPE_BF16) return il__kv_elem<IL_DTYPE_BF16>(row, i);
  return il__kv_elem<IL_DTYPE_Q8_0>(row, i);
}

/* The scalar CPU reference on p; f16: on Q and K/V values rounded to F16 first (what the
 * tensor-core kernel multiplies), through an F32 copy of the cache. */
static std::vector<float> reference(const Problem &p, bool f16) {
  std::vector<float> out(p.q.size(), 0.0f), q = p.q;
  std::vector<uint8_t> k16, v16;
  il_cpu_attn_args a;
  memset(&a, 0, sizeof a);
  a.k = p.k.data(), a.v = p.v.data(), a.kv_type = p.kt, a.kv_row_stride = p.stride;
  if (f16) {
    for (auto &x : q) x = il_fp16_to_f32(il_f32_to_fp16(x));
    const int64_t C = p.n_kv * p.hd;
    k16.resize((size_t)(p.n_cells * C) * 4), v16.resize(k16.size());
    for (int64_t c = 0; c < p.n_cells; c++)
      for (int64_t i = 0; i < C; i++) {
        const float kx = il_fp16_to_f32(il_f32_to_fp16(il__kv_elem_host(p.kt, p.k.data() + (size_t)c * p.stride, i)));
        const float vx = il_fp16_to_f32(il_f32_to_fp16(il__kv_elem_host(p.kt, p.v.data() + (size_t)c * p.stride, i)));
        memcpy(&k16[(size_t)(c * C + i) * 4], &kx, 4), memcpy(&v16[(size_t)(c * C + i) * 4], &vx, 4);
      }
    a.k = k16.data(), a.v = v16.data(), a.kv_type = IL_DTYPE_F32, a.kv_row_stride = (size_t)C * 4;
  }
  a.out = out.data(), a.q = q.data(), a.seq = p.seq.data(), a.pos = p.pos.data(), a.n_tok = p.n_tok;
  a.n_cells = p.n_cells, a.block_table = p.table.data(), a.block = p.block, a.max_blocks = p.max_blocks;
  a.n_seq = p.n_seq, a.n_heads = p.n_heads, a.n_kv_heads = p.n_kv, a.head_dim = p.hd, a.scale = p.scale;
  a.window = p.window;
  a.isa = IL_ISA_SCALAR;
  const il_cpu_attn_kernel *naive = il_cpu_attn_find("naive");
  std::vector<uint8_t> work(naive->workspace(&a, 1) + 64);
  IL_CHECK_OK(naive->run(NULL, &a, work.data(), work.size()));
  return out;
}

static void fill_row(il_dtype t, const float *x, uint8_t *dst, int64_t n) {
  if (t == IL_DTYPE_F32) memcpy(dst, x, (size_t)n * 4);
  else if (t == IL_DTYPE_F16 || t == IL_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) {
      const uint16_t h = t == IL_DTYPE_F16 ? il_f32_to_fp16(x[i]) : il_f32_to_bf16(x[i]);
      memcpy(dst + 2 * i, &h, 2);
    }
  else IL_CHECK_OK(il_quantize_row(t, x, dst, n));
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
  p.ref = reference(p, false);
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
  a.window = p.window;
  a.fault = fault;
  return a;
}

/* p with a sliding window of w positions (the reference recomputed); ring: the table as the
 * engine's ring of a local layer (every block of sequence s is block s + 1, so position q is
 * cell (s + 1) * block + q % block), which needs block >= w + tokens per sequence - 1. */
static inline void windowed(Problem &p, int32_t w, bool ring) {
  p.window = w;
  if (ring)
    for (int32_t s = 0; s < p.n_seq; s++)
      for (int32_t b = 0; b < p.max_blocks; b++) p.table[(size_t)(s * p.max_blocks + b)] = s + 1;
  p.ref = reference(p, false);
}

static double max_err(const std::vector<float> &x, const std::vector<float> &ref) {
  double e = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double d = fabs((double)x[i] - (double)ref[i]);
    e = d > e || d != d ? d : e;
  }
  return e;
}

#endif
