/* backend/cuda/kv: kv_store, rows of K and V written to their cells at slots (the paged
 * layout's slot mapping; a contiguous cache is the same with one block per sequence).
 *
 * The rows are activations (F32, F16 or BF16, --dtype; K and V of one type); the cells F32, F16,
 * BF16 or Q8_0 (--kv-type). One block of 128 threads per row: it reads its slot and writes the
 * K and V rows. Cells of the rows' own type are copied as 4-byte words when every address and
 * stride allows it (else byte by byte); other F32, F16 and BF16 cells are converted (act.cuh),
 * narrowing with round to nearest even (decode.cuh il__f16_bits / il__bf16_bits, as the
 * CPU's il_f32_to_fp16 / il_f32_to_bf16); Q8_0 cells are quantized one 32-value block per warp
 * exactly as ggml's reference quantizer (decode.cuh il__q8_inverse / il__q8_value, the CPU's
 * il_quantize_row: the same bytes). A slot outside the cells, or a Q8_0 block with a non-finite
 * value (the CPU refuses such a row by name), goes to the fault record and is not written.
 * CPU reference: backend/cpu/cpu.c il__cpu_kv_store.
 */
#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"

/* Thread 0's check of row i's slot; false (and the fault recorded) when it is out of range. */
__device__ static bool il__slot_ok(int64_t i, int64_t slot, int64_t n_cells, il__cu_fault *fault, int launch) {
  if (slot >= 0 && slot < n_cells) return true;
  if (threadIdx.x == 0 && atomicCAS(&fault->kind, 0, IL__CU_FAULT_SLOT) == 0) {
    fault->launch = launch;
    fault->a = i;
    fault->b = slot;
    fault->c = n_cells;
  }
  return false;
}

template <typename W>
__global__ void il__k_kv_store(uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells, const uint8_t *k,
                               size_t ks, const uint8_t *v, size_t vs, size_t row_bytes, const int32_t *slots,
                               il__cu_fault *fault, int launch) {
  const int64_t i = blockIdx.x;
  const int64_t slot = slots[i];
  if (!il__slot_ok(i, slot, n_cells, fault, launch)) return;
  const size_t nw = row_bytes / sizeof(W);
  W *kd = (W *)(kc + (size_t)slot * kcs), *vd = (W *)(vc + (size_t)slot * vcs);
  const W *kr = (const W *)(k + (size_t)i * ks), *vr = (const W *)(v + (size_t)i * vs);
  for (size_t j = threadIdx.x; j < nw; j += blockDim.x) {
    kd[j] = kr[j];
    vd[j] = vr[j];
  }
}

/* Cells of type C from rows of another type R (F32, F16 or BF16 each). */
template <int R, int C>
__global__ void il__k_kv_store_cvt(uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells,
                                   const uint8_t *k, size_t ks, const uint8_t *v, size_t vs, int64_t cols,
                                   const int32_t *slots, il__cu_fault *fault, int launch) {
  const int64_t i = blockIdx.x;
  const int64_t slot = slots[i];
  if (!il__slot_ok(i, slot, n_cells, fault, launch)) return;
  uint8_t *kd = kc + (size_t)slot * kcs, *vd = vc + (size_t)slot * vcs;
  const uint8_t *kr = k + (size_t)i * ks, *vr = v + (size_t)i * vs;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    il__act_st<C>(kd, j, il__act_ld<R>(kr, j));
    il__act_st<C>(vd, j, il__act_ld<R>(vr, j));
  }
}

/* One 32-value Q8_0 block from the warp's values (x: this lane's) into blk, as ggml's reference
 * quantizer; a non-finite value is recorded in fault (row, side, its column) and nothing is
 * written. */
__device__ static void il__q8_warp_block(float x, int lane, uint8_t *blk, il__cu_fault *fault, int launch, int64_t row,
                                         int side, int64_t col0) {
  const unsigned bad = __ballot_sync(0xffffffffu, !isfinite(x));
  if (bad) {
    if (lane == 0 && atomicCAS(&fault->kind, 0, IL__CU_FAULT_NONFINITE) == 0) {
      fault->launch = launch;
      fault->a = row;
      fault->b = side;
      fault->c = col0 + __ffs(bad) - 1;
    }
    return;
  }
  float amax = fabsf(x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  float d;
  const float id = il__q8_inverse(amax, &d);
  if (lane == 0) *(uint16_t *)blk = il__f16_bits(d); /* blocks are 34 bytes: 2-byte aligned */
  blk[2 + lane] = (uint8_t)il__q8_value(x, id);
}

/* Q8_0 cells from rows of type R: warp w quantizes blocks w, w + 4, ... of the K row, then of
 * the V row. */
template <int R>
__global__ void il__k_kv_store_q8(uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells, const uint8_t *k,
                                  size_t ks, const uint8_t *v, size_t vs, int64_t cols, const int32_t *slots,
                                  il__cu_fault *fault, int launch) {
  const int64_t i = blockIdx.x;
  const int64_t slot = slots[i];
  if (!il__slot_ok(i, slot, n_cells, fault, launch)) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int64_t nb = cols / 32;
  for (int side = 0; side < 2; side++) {
    uint8_t *dst = side ? vc + (size_t)slot * vcs : kc + (size_t)slot * kcs;
    const uint8_t *src = side ? v + (size_t)i * vs : k + (size_t)i * ks;
    for (int64_t jb = warp; jb < nb; jb += n_warps) {
      il__q8_warp_block(il__act_ld<R>(src, jb * 32 + lane), lane, dst + jb * 34, fault, launch, i, side, jb * 32);
    }
  }
}

extern "C" cudaError_t il__cu_kv_store(cudaStream_t s, uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells,
                                       il_dtype cells, const uint8_t *k, size_t ks, const uint8_t *v, size_t vs,
                                       il_dtype rows_t, int64_t cols, const int32_t *slots, int64_t n, il__cu_fault *fault,
                                       int launch) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff || !il__act_ok(rows_t)) return cudaErrorInvalidValue;
  if (cells == IL_DTYPE_Q8_0) {
    if (cols % 32) return cudaErrorInvalidValue;
    IL__ACT_CASE(rows_t, R,
                 il__k_kv_store_q8<R><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, cols, slots,
                                                                  fault, launch));
    return cudaGetLastError();
  }
  if (!il__act_ok(cells)) return cudaErrorInvalidValue;
  if (cells != rows_t) {
    IL__ACT_CASE(rows_t, R,
                 IL__ACT_CASE(cells, C,
                              il__k_kv_store_cvt<R, C><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs,
                                                                                   cols, slots, fault, launch)));
    return cudaGetLastError();
  }
  const size_t row_bytes = (size_t)cols * (rows_t == IL_DTYPE_F32 ? 4 : 2);
  const uintptr_t all = (uintptr_t)kc | (uintptr_t)vc | (uintptr_t)k | (uintptr_t)v | kcs | vcs | ks | vs | row_bytes;
  if (all % 4 == 0)
    il__k_kv_store<uint32_t><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, row_bytes, slots, fault, launch);
  else
    il__k_kv_store<uint8_t><<<(unsigned)n, 128, 0, s>>>(kc, kcs, vc, vcs, n_cells, k, ks, v, vs, row_bytes, slots, fault, launch);
  return cudaGetLastError();
}

/* ---- rope_kv_store: rope of q and k and the store, one launch ----
 * One block per row t. q is rotated in place as il__k_rope rotates it (the angle in double,
 * the rotation without fused multiply-add). k's row is widened into shared memory, rotated
 * there the same way and stored into its cell from those F32 values (the seam's rope_kv_store:
 * k stored from its rotated F32 values), converted or quantized as il__k_kv_store_cvt and
 * il__k_kv_store_q8 do; v as kv_store stores it. The rows' types are run-time values here
 * (F32, F16 or BF16 each): one kernel instead of a template per type combination. */

__device__ static float il__ld_rt(int t, const void *p, int64_t i) {
  if (t == IL_DTYPE_F16) return il__act_ld<IL_DTYPE_F16>(p, i);
  if (t == IL_DTYPE_BF16) return il__act_ld<IL_DTYPE_BF16>(p, i);
  return il__act_ld<IL_DTYPE_F32>(p, i);
}

__device__ static void il__st_rt(int t, void *p, int64_t i, float v) {
  if (t == IL_DTYPE_F16) il__act_st<IL_DTYPE_F16>(p, i, v);
  else if (t == IL_DTYPE_BF16) il__act_st<IL_DTYPE_BF16>(p, i, v);
  else il__act_st<IL_DTYPE_F32>(p, i, v);
}

/* Pair j of rope p at position pos: its elements (a, b) within a head and its angle's cos and sin. */
__device__ static void il__rkv_pair(const il__cu_rope_p &p, int32_t pos, int64_t j, float *cs, float *sn, int64_t *a,
                                    int64_t *b) {
  const int64_t i = 2 * j;
  const float ps = (float)pos / p.scale;
  const double theta = (double)ps * pow((double)p.base, -(double)i / (double)p.n_rot);
  *cs = (float)cos(theta), *sn = (float)sin(theta);
  *a = p.mode == 2 ? i / 2 : i, *b = p.mode == 2 ? i / 2 + p.n_rot / 2 : i + 1;
}

__global__ void il__k_rope_kv_store(il__cu_rkv a, il__cu_fault *fault, int launch) {
  extern __shared__ float sk[]; /* k's row, widened, then rotated */
  const int64_t t = blockIdx.x;
  const int32_t pos = a.pos[t];
  uint8_t *qr = (uint8_t *)a.q + (size_t)t * a.qs;
  for (int64_t j = threadIdx.x; j < a.rq.n_rot / 2; j += blockDim.x) {
    float cs, sn;
    int64_t ia, ib;
    il__rkv_pair(a.rq, pos, j, &cs, &sn, &ia, &ib);
    for (int64_t h = 0; h < a.rq.n_heads; h++) {
      const int64_t o = h * a.rq.head_dim;
      const float x0 = il__ld_rt(a.qt, qr, o + ia), x1 = il__ld_rt(a.qt, qr, o + ib);
      il__st_rt(a.qt, qr, o + ia, __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)));
      il__st_rt(a.qt, qr, o + ib, __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs)));
    }
  }
  uint8_t *kr = (uint8_t *)a.k + (size_t)t * a.ks;
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) sk[j] = il__ld_rt(a.kt, kr, j);
  __syncthreads();
  for (int64_t j = threadIdx.x; j < a.rk.n_rot / 2; j += blockDim.x) {
    float cs, sn;
    int64_t ia, ib;
    il__rkv_pair(a.rk, pos, j, &cs, &sn, &ia, &ib);
    for (int64_t h = 0; h < a.rk.n_heads; h++) {
      const int64_t o = h * a.rk.head_dim;
      const float x0 = sk[o + ia], x1 = sk[o + ib];
      sk[o + ia] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
      sk[o + ib] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
  }
  __syncthreads();
  if (a.k_back)
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) il__st_rt(a.kt, kr, j, sk[j]);
  const int64_t slot = a.slots[t];
  if (!il__slot_ok(t, slot, a.n_cells, fault, launch)) return;
  const uint8_t *vr = (const uint8_t *)a.v + (size_t)t * a.vs;
  uint8_t *kd = a.kc + (size_t)slot * a.kcs, *vd = a.vc + (size_t)slot * a.vcs;
  if (a.cells != IL_DTYPE_Q8_0) {
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      il__st_rt(a.cells, kd, j, sk[j]);
      il__st_rt(a.cells, vd, j, il__ld_rt(a.vt, vr, j));
    }
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int side = 0; side < 2; side++) {
    uint8_t *dst = side ? vd : kd;
    for (int64_t jb = warp; jb < a.cols / 32; jb += n_warps) {
      const float x = side ? il__ld_rt(a.vt, vr, jb * 32 + lane) : sk[jb * 32 + lane];
      il__q8_warp_block(x, lane, dst + jb * 34, fault, launch, t, side, jb * 32);
    }
  }
}

extern "C" cudaError_t il__cu_rope_kv_store(cudaStream_t s, const il__cu_rkv *a, il__cu_fault *fault, int launch) {
  if (a->n <= 0) return cudaSuccess;
  if (a->n > 0x7fffffff || a->cols > IL__CU_RKV_MAX_COLS || !il__act_ok(a->qt) || !il__act_ok(a->kt) ||
      !il__act_ok(a->vt) || !(a->rq.scale > 0) || !(a->rk.scale > 0))
    return cudaErrorInvalidValue;
  if (a->cells == IL_DTYPE_Q8_0 ? a->cols % 32 != 0 : !il__act_ok(a->cells)) return cudaErrorInvalidValue;
  il__k_rope_kv_store<<<(unsigned)a->n, 128, (size_t)a->cols * sizeof(float), s>>>(*a, fault, launch);
  return cudaGetLastError();
}
