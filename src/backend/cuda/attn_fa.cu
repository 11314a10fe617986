/* backend/cuda/attn_fa: the tensor-core prefill kernel ("--attn flash" for 64 or more query
 * tokens on sm_80+).
 *
 * Grid (query-token tiles of IL__FA_ROWS, query heads), IL__FA_THREADS threads. The steps are
 * attn_fa.cuh's, between barriers; this file adds the warp-wide instructions (mma.sync
 * m16n8k16 f16/f32, ldmatrix x2 and x2.trans, the quad shuffles) that attn_fa.cuh emulates on
 * the host. Built for sm_80+ only in effect: below sm_80 the kernel traps (cuda.c never
 * launches it there).
 * CPU reference: backend/cpu/attn.c (naive), through tests/test_cuda_attn_twin.cpp.
 */
#include "backend/cuda/attn_fa.cuh"
#include "backend/cuda/attn_flash.h"

__device__ __forceinline__ void il__fa_mma(float *d, const uint32_t *a, const uint32_t *b) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

template <bool TRANS>
__device__ __forceinline__ void il__fa_ldsm_x2(uint32_t *r, const uint16_t *row) {
#if __CUDA_ARCH__ >= 800
  const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
#else
  __trap();
#endif
}

template <int CT, bool VEC, int D>
__global__ void __launch_bounds__(IL__FA_THREADS) il__k_fa(il__cu_attn a) {
  __shared__ il__fa_smem<D> sh;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const int64_t t0 = (int64_t)blockIdx.x * IL__FA_ROWS, h = blockIdx.y, kvh = h / ((int)a.n_heads / (int)a.n_kv_heads);
  const float scale2 = il__mul(a.scale, 1.4426950408889634f);
  il__fa_rows(a, sh, t0, tid);
  il__fa_lane<D> r;
  il__fa_lane_begin(a, t0, h, w, lane, r);
  for (;;) {
    __syncthreads();
    il__fa_pass(a, sh, tid);
    __syncthreads();
    if (sh.pass_seq < 0) break;
    const int32_t wk = il__fa_warp_kmax(sh, w), kmax = sh.kmax;
    for (int32_t p0 = sh.kmin / IL__FA_KT * IL__FA_KT; p0 <= kmax; p0 += IL__FA_KT) {
      il__fa_table(a, sh, p0, tid);
      __syncthreads();
      il__fa_load<CT, VEC, D>(a, sh, kvh, p0, tid);
      __syncthreads();
      if (p0 <= wk) { /* warp-uniform: the warp's causal skip */
#pragma unroll
        for (int nb = 0; nb < IL__FA_KT / 8; nb++) {
#pragma unroll
          for (int i = 0; i < 4; i++) r.s[nb][i] = 0.0f;
#pragma unroll
          for (int kk = 0; kk < D / 16; kk++) {
            uint32_t b[2];
            il__fa_ldsm_x2<false>(b, &sh.k[8 * nb + (lane & 7)][16 * kk + 8 * ((lane >> 3) & 1)]);
            il__fa_mma(r.s[nb], r.qa[kk], b);
          }
        }
        float mx[2];
        il__fa_lane_mask(a, sh, scale2, p0, w, lane, r, mx);
#pragma unroll
        for (int k = 0; k < 2; k++) {
          mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 1));
          mx[k] = fmaxf(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], 2));
        }
        il__fa_lane_softmax(r, mx);
#pragma unroll
        for (int kk = 0; kk < IL__FA_KT / 16; kk++) {
          uint32_t pa[4];
          il__fa_lane_pa(r, kk, pa);
#pragma unroll
          for (int nd = 0; nd < D / 8; nd++) {
            uint32_t b[2];
            il__fa_ldsm_x2<true>(b, &sh.v[16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)][8 * nd]);
            il__fa_mma(r.o[nd], pa, b);
          }
        }
      }
      __syncthreads();
    }
  }
  float ql[2];
#pragma unroll
  for (int k = 0; k < 2; k++) {
    ql[k] = il__add(r.l[k], __shfl_xor_sync(0xffffffffu, r.l[k], 1));
    ql[k] = il__add(ql[k], __shfl_xor_sync(0xffffffffu, ql[k], 2));
  }
  il__fa_lane_store(a, sh, t0, h, w, lane, r, ql);
}

extern "C" bool il__cu_attn_fa_supports(il_dtype kv_type, int64_t head_dim) {
  return il__fa_head_ok(head_dim) && il__fa_type_ok(kv_type);
}

extern "C" int64_t il__cu_attn_fa_min_tokens(void) { return IL__FA_MIN_TOK; }

extern "C" cudaError_t il__cu_attn_fa(cudaStream_t st, const il__cu_attn *a) {
  if (a->n_tok <= 0) return cudaSuccess;
  if (!il__cu_attn_fa_supports(a->kv_type, a->head_dim) || a->n_heads > 65535 || a->n_kv_heads <= 0 ||
      a->n_heads % a->n_kv_heads)
    return cudaErrorInvalidValue;
  const dim3 grid((unsigned)((a->n_tok + IL__FA_ROWS - 1) / IL__FA_ROWS), (unsigned)a->n_heads);
  const bool vec = il__fd_vec_ok(*a);
#define IL__FA_GO(CT, V, D) il__k_fa<CT, V, D><<<grid, IL__FA_THREADS, 0, st>>>(*a)
#define IL__FA_D(CT, V)                          \
  do {                                           \
    if (a->head_dim == 32) IL__FA_GO(CT, V, 32); \
    else if (a->head_dim == 64) IL__FA_GO(CT, V, 64); \
    else IL__FA_GO(CT, V, 128);                  \
  } while (0)
  if (a->kv_type != IL_DTYPE_Q8_0 && !vec) return cudaErrorInvalidValue; /* cuda.c sends those to flash-decoding */
  switch (a->kv_type) {
  case IL_DTYPE_F16: IL__FA_D(IL_DTYPE_F16, true); break;
  case IL_DTYPE_F32: IL__FA_D(IL_DTYPE_F32, true); break;
  case IL_DTYPE_Q8_0: IL__FA_D(IL_DTYPE_Q8_0, false); break;
  default: return cudaErrorInvalidValue;
  }
#undef IL__FA_D
#undef IL__FA_GO
  return cudaGetLastError();
}
