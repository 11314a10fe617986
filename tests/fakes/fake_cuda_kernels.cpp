/* tests/fakes/fake_cuda_kernels: host versions of the CUDA backend's kernel launchers (cuda.h),
 * for the fake module (see fake_cudart.c). Each does what its kernel's header says, on host
 * memory, in plain loops; the weight decoders and matvec v2's block arithmetic are the real
 * ones from decode.cuh (compiled for the host), the rest is restated here. Index faults go to
 * the fault record the same way the kernels write them. Compiled by the host C++ compiler.
 */
#include <cuda_runtime.h> /* __host__, __device__ for a host compiler */

#include "fake_graph.h"
#include <math.h>
#include <string.h>

#include "backend/cuda/act.cuh"
#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"
#include "backend/cuda/mv3.cuh"
#include "backend/cuda/mv3.h"
#include "backend/cuda/sample.cuh"

extern "C" {
#include "core/quant.h" /* il_quantize_row: the q8_0 cells the kernel must write */
}

static void fake_fault(il__cu_fault *f, int kind, int launch, long long a, long long b, long long c) {
  if (f->kind) return;
  f->kind = kind, f->launch = launch, f->a = a, f->b = b, f->c = c;
}

template <int T>
static void fake_row(const uint8_t *row, int64_t n_in, float *out) {
  for (int64_t u = 0; u < il__n_units(n_in); u++) {
    float v[32];
    const int n = il__unit<T>(row, u, n_in, v);
    for (int j = 0; j < n; j++) out[u * 32 + j] = v[j];
  }
}

static bool fake_decode(il_dtype t, const uint8_t *row, int64_t n_in, float *out) {
  switch (t) {
  case IL_DTYPE_F32: fake_row<IL_DTYPE_F32>(row, n_in, out); return true;
  case IL_DTYPE_F16: fake_row<IL_DTYPE_F16>(row, n_in, out); return true;
  case IL_DTYPE_BF16: fake_row<IL_DTYPE_BF16>(row, n_in, out); return true;
  case IL_DTYPE_Q8_0: fake_row<IL_DTYPE_Q8_0>(row, n_in, out); return true;
  case IL_DTYPE_Q4_0: fake_row<IL_DTYPE_Q4_0>(row, n_in, out); return true;
  case IL_DTYPE_Q4_1: fake_row<IL_DTYPE_Q4_1>(row, n_in, out); return true;
  case IL_DTYPE_Q4_K: fake_row<IL_DTYPE_Q4_K>(row, n_in, out); return true;
  case IL_DTYPE_Q5_K: fake_row<IL_DTYPE_Q5_K>(row, n_in, out); return true;
  case IL_DTYPE_Q6_K: fake_row<IL_DTYPE_Q6_K>(row, n_in, out); return true;
  case IL_DTYPE_Q5_0: fake_row<IL_DTYPE_Q5_0>(row, n_in, out); return true;
  case IL_DTYPE_Q5_1: fake_row<IL_DTYPE_Q5_1>(row, n_in, out); return true;
  case IL_DTYPE_IQ4_NL: fake_row<IL_DTYPE_IQ4_NL>(row, n_in, out); return true;
  default: return false;
  }
}

extern "C" cudaError_t il__cu_matvec(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out,
                                     int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy) {
  FAKE_LAUNCH(s, "matvec", il__cu_matvec(s, t, w, w_stride, n_out, n_in, x, n_tok, y, ldy));
  if (n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK) return cudaErrorInvalidValue;
  float *row = new float[n_in];
  for (int64_t r = 0; r < n_out; r++) {
    if (!fake_decode(t, (const uint8_t *)w + (size_t)r * w_stride, n_in, row)) {
      delete[] row;
      return cudaErrorInvalidValue;
    }
    for (int64_t tk = 0; tk < n_tok; tk++) {
      float acc = 0;
      for (int64_t i = 0; i < n_in; i++) acc += row[i] * x[tk * n_in + i];
      y[tk * ldy + r] = acc;
    }
  }
  delete[] row;
  return cudaSuccess;
}

/* Matvec version 3: its host twin (mv3.cuh), the bits the kernels must produce. */
extern "C" bool il__cu_mv3_eligible(il_dtype t, int64_t n_in, const void *w, size_t stride, int64_t n_rows) {
  return il__mv3_eligible(t, n_in, (uintptr_t)w, stride, n_rows);
}

static size_t fake_mv3_xd_off(int64_t n_in, int64_t n_tok) { return ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256; }

/* The token rows of 8-bit activations in work (il__cu_mv3_quant's layout); nothing when NULL. */
static void fake_mv3_acts(const void *work, int64_t n_in, int64_t n_tok, il__mv3_act *a) {
  if (!work) return;
  const int64_t nb = n_in / 32;
  const float *xd = (const float *)((const uint8_t *)work + fake_mv3_xd_off(n_in, n_tok));
  const int *xs = (const int *)(xd + nb * n_tok);
  for (int64_t tk = 0; tk < n_tok; tk++) a[tk] = il__mv3_act{(const int8_t *)work + tk * n_in, xd + tk * nb, xs + tk * nb};
}

extern "C" size_t il__cu_mv3_work(int64_t n_in, int64_t n_tok) {
  return fake_mv3_xd_off(n_in, n_tok) + (size_t)(n_in / 32) * (size_t)n_tok * 8 + 256;
}

extern "C" cudaError_t il__cu_mv3_quant(cudaStream_t s, const float *x, int64_t n_in, int64_t n_tok, void *work) {
  FAKE_LAUNCH(s, "mv3_quant", il__cu_mv3_quant(s, x, n_in, n_tok, work));
  if (n_in % 32 || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK) return cudaErrorInvalidValue;
  const int64_t nb = n_in / 32;
  int8_t *xq = (int8_t *)work;
  float *xd = (float *)((uint8_t *)work + fake_mv3_xd_off(n_in, n_tok));
  int *xs = (int *)(xd + nb * n_tok);
  for (int64_t t = 0; t < n_tok; t++) il__mv3_quant_twin(x + t * n_in, n_in, xq + t * n_in, xd + t * nb, xs + t * nb);
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_mv3(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                  int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                  float *y, int64_t ldy) {
  FAKE_LAUNCH(s, "mv3", il__cu_mv3(s, k, t, w, stride, n_out, n_in, x, work, n_tok, y, ldy));
  if (k < IL__MV_FIRST_V3 || k >= IL__MV_N_KINDS || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || n_out < 1 ||
      !il__mv3_eligible(t, n_in, (uintptr_t)w, stride, n_out) || (il__mv3_quantized(t) && !work))
    return cudaErrorInvalidValue;
  il__mv3_act a[IL__CU_MV_MAX_TOK];
  fake_mv3_acts(work, n_in, n_tok, a);
  return il__mv3_matvec_twin(t, (const uint8_t *)w, stride, n_out, n_in, x, a, (int)n_tok, y, ldy) ? cudaSuccess
                                                                                                  : cudaErrorInvalidValue;
}

extern "C" cudaError_t il__cu_mv3_multi(cudaStream_t s, il__mv_kind k, il_dtype t, int n, const il__mv3_mat *m,
                                        int64_t n_in, const float *x, const void *work, int64_t n_tok) {
  il__mv3_mat M[IL__MV3_MAX_MATS] = {};
  for (int i = 0; i < n && i < IL__MV3_MAX_MATS; i++) M[i] = m[i];
  FAKE_LAUNCH(s, "mv3_multi", il__cu_mv3_multi(s, k, t, n, M, n_in, x, work, n_tok));
  if (n < 1 || n > IL__MV3_MAX_MATS || k < IL__MV_FIRST_V3 || k >= IL__MV_N_KINDS || n_tok < 1 ||
      n_tok > IL__CU_MV_MAX_TOK || (il__mv3_quantized(t) && !work))
    return cudaErrorInvalidValue;
  for (int i = 0; i < n; i++)
    if (M[i].n_out < 1 || !il__mv3_eligible(t, n_in, (uintptr_t)M[i].w, M[i].stride, M[i].n_out)) return cudaErrorInvalidValue;
  il__mv3_act a[IL__CU_MV_MAX_TOK];
  fake_mv3_acts(work, n_in, n_tok, a);
  for (int i = 0; i < n; i++)
    if (!il__mv3_matvec_twin(t, (const uint8_t *)M[i].w, M[i].stride, M[i].n_out, n_in, x, a, (int)n_tok, M[i].y, M[i].ldy))
      return cudaErrorInvalidValue;
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_mv3_gate_up(cudaStream_t s, il__mv_kind k, il_dtype t, const il__mv3_mat *gate,
                                          const void *w_up, size_t up_stride, int64_t n_in, const float *x,
                                          const void *work, int64_t n_tok) {
  const il__mv3_mat G = *gate;
  FAKE_LAUNCH(s, "mv3_gate_up", il__cu_mv3_gate_up(s, k, t, &G, w_up, up_stride, n_in, x, work, n_tok));
  if (k < IL__MV_FIRST_V3 || k >= IL__MV_N_KINDS || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || G.n_out < 1 ||
      (il__mv3_quantized(t) && !work) || !il__mv3_eligible(t, n_in, (uintptr_t)G.w, G.stride, G.n_out) ||
      !il__mv3_eligible(t, n_in, (uintptr_t)w_up, up_stride, G.n_out))
    return cudaErrorInvalidValue;
  il__mv3_act a[IL__CU_MV_MAX_TOK];
  fake_mv3_acts(work, n_in, n_tok, a);
  const bool ok = il__mv3_matvec_epi_twin(t, (const uint8_t *)G.w, G.stride, G.n_out, n_in, x, a, (int)n_tok, G.y, G.ldy,
                                          IL__MV3_STORE) &&
                  il__mv3_matvec_epi_twin(t, (const uint8_t *)w_up, up_stride, G.n_out, n_in, x, a, (int)n_tok, G.y, G.ldy,
                                          IL__MV3_SWIGLU);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

extern "C" cudaError_t il__cu_mv3_epi(cudaStream_t s, il__mv_kind k, il_dtype t, const void *w, size_t stride,
                                      int64_t n_out, int64_t n_in, const float *x, const void *work, int64_t n_tok,
                                      float *y, int64_t ldy, int epi) {
  FAKE_LAUNCH(s, "mv3", il__cu_mv3_epi(s, k, t, w, stride, n_out, n_in, x, work, n_tok, y, ldy, epi));
  if (k < IL__MV_FIRST_V3 || k >= IL__MV_N_KINDS || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK || n_out < 1 ||
      !il__mv3_eligible(t, n_in, (uintptr_t)w, stride, n_out) || (il__mv3_quantized(t) && !work) || epi < IL__MV3_STORE ||
      epi > IL__MV3_SWIGLU)
    return cudaErrorInvalidValue;
  il__mv3_act a[IL__CU_MV_MAX_TOK];
  fake_mv3_acts(work, n_in, n_tok, a);
  return il__mv3_matvec_epi_twin(t, (const uint8_t *)w, stride, n_out, n_in, x, a, (int)n_tok, y, ldy, epi) ? cudaSuccess
                                                                                                  : cudaErrorInvalidValue;
}

extern "C" bool il__cu_matvec_q8_supports(il_dtype t) {
  return t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q4_0 || t == IL_DTYPE_Q4_1;
}

extern "C" size_t il__cu_matvec_q8_work(int64_t n_in, int64_t n_tok) {
  const size_t nb = (size_t)(n_in / 32) * (size_t)n_tok;
  return ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256 + nb * 8 + 256;
}

template <int T>
static void fake_q8(const uint8_t *w, size_t w_stride, int64_t n_out, int64_t n_in, const int8_t *xq, const float *xd,
                    const int *xs, int64_t n_tok, float *y, int64_t ldy) {
  const int64_t nb = n_in / 32;
  const size_t bs = T == IL_DTYPE_Q8_0 ? sizeof(il_block_q8_0) : T == IL_DTYPE_Q4_0 ? sizeof(il_block_q4_0)
                                                                                     : sizeof(il_block_q4_1);
  for (int64_t r = 0; r < n_out; r++)
    for (int64_t t = 0; t < n_tok; t++) {
      float acc = 0;
      for (int64_t b = 0; b < nb; b++) {
        int wq[8], xw[8];
        float mw;
        const float dw = il__block_words<T>(w + (size_t)r * w_stride + (size_t)b * bs, wq, &mw);
        memcpy(xw, xq + t * n_in + b * 32, 32);
        acc += il__block_dot<T>(wq, dw, mw, xw, xd[t * nb + b], xs[t * nb + b]);
      }
      y[t * ldy + r] = acc;
    }
}

extern "C" cudaError_t il__cu_matvec_q8(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t n_out,
                                        int64_t n_in, const float *x, int64_t n_tok, float *y, int64_t ldy, void *work) {
  FAKE_LAUNCH(s, "matvec_q8", il__cu_matvec_q8(s, t, w, w_stride, n_out, n_in, x, n_tok, y, ldy, work));
  if (!il__cu_matvec_q8_supports(t) || n_in % 32 || n_tok < 1 || n_tok > IL__CU_MV_MAX_TOK) return cudaErrorInvalidValue;
  const int64_t nb = n_in / 32, n_blocks = nb * n_tok;
  int8_t *xq = (int8_t *)work;
  float *xd = (float *)((uint8_t *)work + ((size_t)n_in * (size_t)n_tok + 255) / 256 * 256);
  int *xs = (int *)(xd + n_blocks);
  for (int64_t blk = 0; blk < n_blocks; blk++) {
    const float *v = x + (blk / nb) * n_in + (blk % nb) * 32;
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
      const int q = il__quant_one(v[j], id);
      xq[(blk / nb) * n_in + (blk % nb) * 32 + j] = (int8_t)q;
      sum += q;
    }
    xd[blk] = d, xs[blk] = sum;
  }
  const uint8_t *wp = (const uint8_t *)w;
  if (t == IL_DTYPE_Q8_0) fake_q8<IL_DTYPE_Q8_0>(wp, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  else if (t == IL_DTYPE_Q4_0) fake_q8<IL_DTYPE_Q4_0>(wp, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  else fake_q8<IL_DTYPE_Q4_1>(wp, w_stride, n_out, n_in, xq, xd, xs, n_tok, y, ldy);
  return cudaSuccess;
}

/* An activation element (F32, F16 or BF16) as the kernels load and store it (act.cuh: core/dtype's
 * conversions, round to nearest even). */
static bool fake_act(il_dtype t) { return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16; }
static float fake_ld(il_dtype t, const void *p, int64_t i) {
  return t == IL_DTYPE_F16 ? il__act_ld<IL_DTYPE_F16>(p, i) : t == IL_DTYPE_BF16 ? il__act_ld<IL_DTYPE_BF16>(p, i)
                                                                                 : il__act_ld<IL_DTYPE_F32>(p, i);
}
static void fake_st(il_dtype t, void *p, int64_t i, float v) {
  if (t == IL_DTYPE_F16) il__act_st<IL_DTYPE_F16>(p, i, v);
  else if (t == IL_DTYPE_BF16) il__act_st<IL_DTYPE_BF16>(p, i, v);
  else il__act_st<IL_DTYPE_F32>(p, i, v);
}

extern "C" cudaError_t il__cu_dequant(cudaStream_t s, il_dtype t, const void *w, size_t w_stride, int64_t w_rows,
                                      int64_t n_in, const int32_t *ids, int64_t n, void *out, size_t out_stride,
                                      il_dtype out_type, il__cu_fault *fault, int launch) {
  FAKE_LAUNCH(s, "dequant", il__cu_dequant(s, t, w, w_stride, w_rows, n_in, ids, n, out, out_stride, out_type, fault, launch));
  if (!fake_act(out_type)) return cudaErrorInvalidValue;
  float *row = new float[n_in];
  for (int64_t r = 0; r < n; r++) {
    int64_t src = r;
    if (ids) {
      src = ids[r];
      if (src < 0 || src >= w_rows) {
        fake_fault(fault, IL__CU_FAULT_ROW_ID, launch, r, src, w_rows);
        continue;
      }
    }
    if (!fake_decode(t, (const uint8_t *)w + (size_t)src * w_stride, n_in, row)) {
      delete[] row;
      return cudaErrorInvalidValue;
    }
    for (int64_t i = 0; i < n_in; i++) fake_st(out_type, (uint8_t *)out + (size_t)r * out_stride, i, row[i]);
  }
  delete[] row;
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_rmsnorm(cudaStream_t s, void *y, size_t ys, il_dtype yt, const void *x, size_t xs,
                                      il_dtype xt, const float *g, int64_t rows, int64_t cols, float eps) {
  FAKE_LAUNCH(s, "rmsnorm", il__cu_rmsnorm(s, y, ys, yt, x, xs, xt, g, rows, cols, eps));
  if (!fake_act(yt) || !fake_act(xt)) return cudaErrorInvalidValue;
  float *xr = new float[cols > 0 ? cols : 1];
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t i = 0; i < cols; i++) xr[i] = fake_ld(xt, (const uint8_t *)x + r * xs, i);
    uint8_t *yr = (uint8_t *)y + r * ys;
    double ss = 0;
    for (int64_t i = 0; i < cols; i++) ss += (double)xr[i] * xr[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)cols + eps));
    for (int64_t i = 0; i < cols; i++) fake_st(yt, yr, i, xr[i] * scale * g[i]);
  }
  delete[] xr;
  return cudaSuccess;
}

/* One row of rope in place: each pair rotated at its angle, every head. */
static void fake_rope_row(il_dtype t, uint8_t *row, int32_t pos, const il__cu_rope_p *rp) {
  const float p = (float)pos / rp->scale;
  for (int64_t i = 0; i < rp->n_rot; i += 2) {
    const double theta = (double)p * pow((double)rp->base, -(double)i / (double)rp->n_rot);
    const float cs = (float)cos(theta), sn = (float)sin(theta);
    const int64_t a = rp->mode == 2 ? i / 2 : i, b = rp->mode == 2 ? i / 2 + rp->n_rot / 2 : i + 1;
    for (int64_t h = 0; h < rp->n_heads; h++) {
      const int64_t o = h * rp->head_dim;
      const float x0 = fake_ld(t, row, o + a), x1 = fake_ld(t, row, o + b);
      fake_st(t, row, o + a, x0 * cs - x1 * sn);
      fake_st(t, row, o + b, x0 * sn + x1 * cs);
    }
  }
}

extern "C" cudaError_t il__cu_rope(cudaStream_t s, void *x, size_t xs, il_dtype t, int64_t rows, const int32_t *pos,
                                   int64_t n_heads, int64_t head_dim, int64_t n_rot, float base, float scale, int mode) {
  FAKE_LAUNCH(s, "rope", il__cu_rope(s, x, xs, t, rows, pos, n_heads, head_dim, n_rot, base, scale, mode));
  if (!fake_act(t)) return cudaErrorInvalidValue;
  const il__cu_rope_p p = {n_heads, head_dim, n_rot, base, scale, mode};
  for (int64_t r = 0; r < rows; r++) fake_rope_row(t, (uint8_t *)x + r * xs, pos[r], &p);
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_swiglu(cudaStream_t s, void *g, il_dtype gt, const void *u, il_dtype ut, int64_t n) {
  FAKE_LAUNCH(s, "swiglu", il__cu_swiglu(s, g, gt, u, ut, n));
  if (!fake_act(gt) || !fake_act(ut)) return cudaErrorInvalidValue;
  for (int64_t i = 0; i < n; i++) {
    const float x = fake_ld(gt, g, i);
    fake_st(gt, g, i, x / (1.0f + expf(-x)) * fake_ld(ut, u, i));
  }
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_geglu(cudaStream_t s, void *g, il_dtype gt, const void *u, il_dtype ut, int64_t n) {
  FAKE_LAUNCH(s, "geglu", il__cu_geglu(s, g, gt, u, ut, n));
  if (!fake_act(gt) || !fake_act(ut)) return cudaErrorInvalidValue;
  for (int64_t i = 0; i < n; i++) {
    const float x = fake_ld(gt, g, i);
    fake_st(gt, g, i, 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * fake_ld(ut, u, i));
  }
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_scale(cudaStream_t s, void *x, il_dtype t, float v, int64_t n) {
  FAKE_LAUNCH(s, "scale", il__cu_scale(s, x, t, v, n));
  if (!fake_act(t)) return cudaErrorInvalidValue;
  for (int64_t i = 0; i < n; i++) fake_st(t, x, i, fake_ld(t, x, i) * v);
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_add(cudaStream_t s, void *y, il_dtype yt, const void *x, il_dtype xt, int64_t n) {
  FAKE_LAUNCH(s, "add", il__cu_add(s, y, yt, x, xt, n));
  if (!fake_act(yt) || !fake_act(xt)) return cudaErrorInvalidValue;
  for (int64_t i = 0; i < n; i++) fake_st(yt, y, i, fake_ld(yt, y, i) + fake_ld(xt, x, i));
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_add_bias(cudaStream_t s, void *y, size_t ys, il_dtype t, int64_t rows, int64_t cols,
                                       const float *b) {
  FAKE_LAUNCH(s, "add_bias", il__cu_add_bias(s, y, ys, t, rows, cols, b));
  if (!fake_act(t)) return cudaErrorInvalidValue;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      uint8_t *row = (uint8_t *)y + r * ys;
      fake_st(t, row, c, fake_ld(t, row, c) + b[c]);
    }
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_count_nonfinite(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                              unsigned long long *count) {
  FAKE_LAUNCH(s, "count_nonfinite", il__cu_count_nonfinite(s, x, xs, rows, cols, count));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) *count += !isfinite(((const float *)((const uint8_t *)x + r * xs))[c]);
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_kv_store(cudaStream_t s, uint8_t *kc, size_t kcs, uint8_t *vc, size_t vcs, int64_t n_cells,
                                       il_dtype cells, const uint8_t *k, size_t ks, const uint8_t *v, size_t vs,
                                       il_dtype rows_t, int64_t cols, const int32_t *slots, int64_t n, il__cu_fault *fault,
                                       int launch) {
  FAKE_LAUNCH(s, "kv_store", il__cu_kv_store(s, kc, kcs, vc, vcs, n_cells, cells, k, ks, v, vs, rows_t, cols, slots, n, fault, launch));
  if ((!fake_act(cells) && cells != IL_DTYPE_Q8_0) || !fake_act(rows_t)) return cudaErrorInvalidValue;
  if (cells == IL_DTYPE_Q8_0 && cols % 32) return cudaErrorInvalidValue;
  float *src = new float[cols > 0 ? cols : 1];
  for (int64_t i = 0; i < n; i++) {
    if (slots[i] < 0 || slots[i] >= n_cells) {
      fake_fault(fault, IL__CU_FAULT_SLOT, launch, i, slots[i], n_cells);
      continue;
    }
    for (int side = 0; side < 2; side++) {
      for (int64_t j = 0; j < cols; j++) src[j] = fake_ld(rows_t, (side ? v : k) + i * (side ? vs : ks), j);
      uint8_t *dst = (side ? vc : kc) + (size_t)slots[i] * (side ? vcs : kcs);
      if (cells == IL_DTYPE_Q8_0) { /* the library's reference quantizer, as the kernel's bytes */
        int64_t j = 0;
        while (j < cols && isfinite(src[j])) j++;
        if (j < cols) {
          fake_fault(fault, IL__CU_FAULT_NONFINITE, launch, i, side, j);
          continue;
        }
        if (il_quantize_row(IL_DTYPE_Q8_0, src, dst, cols) != IL_OK) {
          delete[] src;
          return cudaErrorInvalidValue;
        }
        continue;
      }
      for (int64_t j = 0; j < cols; j++) fake_st(cells, dst, j, src[j]);
    }
  }
  delete[] src;
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_rope_kv_store(cudaStream_t s, const il__cu_rkv *a, il__cu_fault *fault, int launch) {
  const il__cu_rkv A = *a;
  FAKE_LAUNCH(s, "rope_kv_store", il__cu_rope_kv_store(s, &A, fault, launch));
  if (A.n <= 0) return cudaSuccess;
  if (A.cols > IL__CU_RKV_MAX_COLS || !fake_act(A.qt) || !fake_act(A.kt) || !fake_act(A.vt) || !(A.rq.scale > 0) ||
      !(A.rk.scale > 0))
    return cudaErrorInvalidValue;
  if (A.cells == IL_DTYPE_Q8_0 ? A.cols % 32 != 0 : !fake_act(A.cells)) return cudaErrorInvalidValue;
  float *kf = new float[A.cols], *vf = new float[A.cols];
  for (int64_t t = 0; t < A.n; t++) {
    fake_rope_row(A.qt, (uint8_t *)A.q + t * A.qs, A.pos[t], &A.rq);
    uint8_t *kr = (uint8_t *)A.k + t * A.ks;
    const uint8_t *vr = (const uint8_t *)A.v + t * A.vs;
    for (int64_t j = 0; j < A.cols; j++) kf[j] = fake_ld(A.kt, kr, j), vf[j] = fake_ld(A.vt, vr, j);
    fake_rope_row(IL_DTYPE_F32, (uint8_t *)kf, A.pos[t], &A.rk);
    if (A.k_back)
      for (int64_t j = 0; j < A.cols; j++) fake_st(A.kt, kr, j, kf[j]);
    const int32_t slot = A.slots[t];
    if (slot < 0 || slot >= A.n_cells) {
      fake_fault(fault, IL__CU_FAULT_SLOT, launch, t, slot, A.n_cells);
      continue;
    }
    for (int side = 0; side < 2; side++) {
      const float *src = side ? vf : kf;
      uint8_t *dst = (side ? A.vc : A.kc) + (size_t)slot * (side ? A.vcs : A.kcs);
      if (A.cells != IL_DTYPE_Q8_0) {
        for (int64_t j = 0; j < A.cols; j++) fake_st(A.cells, dst, j, src[j]);
        continue;
      }
      int64_t j = 0;
      while (j < A.cols && isfinite(src[j])) j++;
      if (j < A.cols) {
        fake_fault(fault, IL__CU_FAULT_NONFINITE, launch, t, side, j);
        continue;
      }
      if (il_quantize_row(IL_DTYPE_Q8_0, src, dst, A.cols) != IL_OK) {
        delete[] kf, delete[] vf;
        return cudaErrorInvalidValue;
      }
    }
  }
  delete[] kf, delete[] vf;
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_convert(cudaStream_t s, void *dst, size_t ds, int dk, const void *src, size_t ss, int sk,
                                      int64_t rows, int64_t cols) {
  FAKE_LAUNCH(s, "convert", il__cu_convert(s, dst, ds, dk, src, ss, sk, rows, cols));
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *sr = (const uint8_t *)src + r * ss;
    uint8_t *dr = (uint8_t *)dst + r * ds;
    for (int64_t c = 0; c < cols; c++) {
      if (sk == 0) {
        float v;
        memcpy(&v, sr + 4 * c, 4);
        const uint16_t h = dk == 2 ? il_f32_to_bf16(v) : il_f32_to_fp16(v);
        memcpy(dr + 2 * c, &h, 2);
      } else {
        uint16_t h;
        memcpy(&h, sr + 2 * c, 2);
        const float v = sk == 2 ? il_bf16_to_f32(h) : il_fp16_to_f32(h);
        memcpy(dr + 4 * c, &v, 4);
      }
    }
  }
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_round_to(cudaStream_t s, float *x, size_t xs, int64_t rows, int64_t cols, bool bf16) {
  FAKE_LAUNCH(s, "round_to", il__cu_round_to(s, x, xs, rows, cols, bf16));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      float *p = (float *)((uint8_t *)x + r * xs) + c;
      *p = bf16 ? il_bf16_to_f32(il_f32_to_bf16(*p)) : il_fp16_to_f32(il_f32_to_fp16(*p));
    }
  return cudaSuccess;
}

extern "C" cudaError_t il__cu_value_stats(cudaStream_t s, const float *x, size_t xs, int64_t rows, int64_t cols,
                                          unsigned long long *stats) {
  FAKE_LAUNCH(s, "value_stats", il__cu_value_stats(s, x, xs, rows, cols, stats));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      const float v = ((const float *)((const uint8_t *)x + r * xs))[c];
      if (!isfinite(v)) stats[0]++;
      else {
        uint32_t bits;
        const float a = fabsf(v);
        memcpy(&bits, &a, 4);
        if (bits > stats[1]) stats[1] = bits;
      }
    }
  return cudaSuccess;
}

static float fake_kv(const void *base, size_t stride, il_dtype t, int64_t cell, int64_t i) {
  const uint8_t *row = (const uint8_t *)base + (size_t)cell * stride;
  if (t == IL_DTYPE_F32) return ((const float *)row)[i];
  uint16_t h;
  if (t == IL_DTYPE_Q8_0) {
    const uint8_t *b = row + (i / 32) * 34;
    memcpy(&h, b, 2);
    return il_fp16_to_f32(h) * (float)(int8_t)b[2 + i % 32];
  }
  memcpy(&h, row + 2 * i, 2);
  return t == IL_DTYPE_BF16 ? il_bf16_to_f32(h) : il_fp16_to_f32(h);
}

/* Both attention kernels: the same arithmetic on the host (scores in the workspace when there is one). */
static cudaError_t fake_attn(const il__cu_attn *a) {
  const int64_t group = a->n_heads / a->n_kv_heads;
  float *sc = new float[a->n_ctx > 0 ? a->n_ctx : 1];
  for (int64_t t = 0; t < a->n_tok; t++) {
    const int32_t seq = a->seq[t], pos = a->pos[t];
    if (seq < 0 || seq >= a->n_seq) {
      fake_fault(a->fault, IL__CU_FAULT_SEQ, a->launch, t, seq, a->n_seq);
      continue;
    }
    if (pos < 0 || pos >= a->n_ctx) {
      fake_fault(a->fault, IL__CU_FAULT_POS, a->launch, t, pos, a->n_ctx);
      continue;
    }
    const int32_t *tab = a->table + (size_t)seq * a->max_blocks;
    const int32_t lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0; /* sliding window */
    for (int64_t h = 0; h < a->n_heads; h++) {
      const float *q = (const float *)((const uint8_t *)a->q + t * a->q_stride) + h * a->head_dim;
      const int64_t koff = (h / group) * a->head_dim;
      float mx = -INFINITY;
      for (int32_t p = lo; p <= pos; p++) {
        const int32_t blk = tab[p / a->block];
        if (blk < 0 || ((int64_t)blk + 1) * a->block > a->n_cells) {
          fake_fault(a->fault, IL__CU_FAULT_BLOCK, a->launch, seq, blk, a->n_cells);
          sc[p] = -INFINITY;
          continue;
        }
        const int64_t cell = (int64_t)blk * a->block + p % a->block;
        float d = 0;
        for (int64_t i = 0; i < a->head_dim; i++) d += q[i] * fake_kv(a->k, a->k_stride, a->kv_type, cell, koff + i);
        sc[p] = d * a->scale;
        mx = sc[p] > mx ? sc[p] : mx;
      }
      float sum = 0;
      for (int32_t p = lo; p <= pos; p++) sum += sc[p] = sc[p] == -INFINITY ? 0.0f : expf(sc[p] - mx);
      float *o = (float *)((uint8_t *)a->out + t * a->out_stride) + h * a->head_dim;
      for (int64_t i = 0; i < a->head_dim; i++) {
        float acc = 0;
        for (int32_t p = lo; p <= pos; p++) {
          const int32_t blk = tab[p / a->block];
          if (blk < 0 || ((int64_t)blk + 1) * a->block > a->n_cells) continue;
          acc += sc[p] / sum * fake_kv(a->v, a->v_stride, a->kv_type, (int64_t)blk * a->block + p % a->block, koff + i);
        }
        o[i] = acc;
      }
    }
  }
  delete[] sc;
  return cudaSuccess;
}

extern "C" int64_t il__cu_attn_naive_rows(int64_t n_items) { return n_items < 1024 ? n_items : 1024; }

extern "C" cudaError_t il__cu_attn_naive(cudaStream_t s, const il__cu_attn *a) {
  const il__cu_attn ax = *a; /* a node keeps its own copy */
  FAKE_LAUNCH(s, "attn_naive", il__cu_attn_naive(s, &ax));
  if (!a->scores) return cudaErrorInvalidValue; /* the glue must hand naive its workspace */
  return fake_attn(a);
}

extern "C" int64_t il__cu_attn_memeff_max_head_dim(void) { return 256; }

extern "C" cudaError_t il__cu_attn_memeff(cudaStream_t s, const il__cu_attn *a) {
  const il__cu_attn ax = *a; /* a node keeps its own copy */
  FAKE_LAUNCH(s, "attn_memeff", il__cu_attn_memeff(s, &ax));
  if (a->head_dim > 256) return cudaErrorInvalidValue;
  return fake_attn(a);
}

extern "C" cudaError_t il__cu_probe_image(int *binary, int *ptx) {
  *binary = 90;
  *ptx = 90;
  return cudaSuccess;
}

/* The sample op: the kernel's per-row work (sample.cuh) row by row. */
extern "C" cudaError_t il__cu_sample(cudaStream_t s, int32_t *ids, const float *logits, size_t ls, int64_t rows,
                                     int64_t cols, const float *u, float temp, int32_t top_k, float top_p) {
  FAKE_LAUNCH(s, "sample", il__cu_sample(s, ids, logits, ls, rows, cols, u, temp, top_k, top_p));
  if (rows < 1 || cols < 1) return cudaErrorInvalidValue;
  for (int64_t r = 0; r < rows; r++) {
    const float *l = (const float *)((const uint8_t *)logits + (size_t)r * ls);
    const int64_t best = il__cu_smp_argmax(l, cols);
    ids[r] = best < 0 ? -1 : il__cu_smp_row(l, cols, temp > 0 ? u[r] : 0.0f, temp, top_k, top_p, best);
  }
  return cudaSuccess;
}
