/* backend/cuda/mv3: matvec version 3's per-lane work, shared by the kernels (matvec3.cu) and
 * their host twin (tests/cuda/test_mv3.cpp).
 *
 * Geometry. One warp owns one output row and walks it in chunks. A lane's global loads are
 * 16-byte words, and lane l of a load instruction reads word l of a 32-word stretch of the row,
 * so one warp instruction covers 512 contiguous bytes:
 *   - F32/F16/BF16: a chunk is 32 words; lane l multiplies word l (4 or 8 weights) with the
 *     matching activations (16 or 32 contiguous bytes a token) in F32 with fused multiply-add.
 *   - quantized types: a chunk is a whole number of blocks whose size is a multiple of 16 bytes
 *     (32 Q8_0/Q4_0/Q4_1 blocks, 4 Q4_K/Q5_K super-blocks, 8 Q6_K super-blocks); the warp copies
 *     it word by word (il__mv3_word) into its shared-memory slot, so rows keep GGUF's byte layout
 *     on the device (get_rows, dequantize, download and copy read them unchanged) while the
 *     global loads are 16 bytes wide whatever the block size; then lane l takes 32-value unit l
 *     (and l + 32 for Q6_K) of the chunk: one block, or one sub-block of a super-block with its
 *     scale and min decoded once for the 32 values, and dot products on 8-bit activations with
 *     dp4a. The activations are quantized once per input vector (il__mv3_quant_block: the CPU's
 *     il__quant_block arithmetic, blocks of 32 with a float scale and the sum of the values), and
 *     matmul_multi shares them between the matrices that read the same input (Q/K/V, gate/up).
 * Several chunks (U, a template parameter of the kernel) are loaded before any is used, so each
 * lane has U x (1 to 4) 16-byte loads in flight; U and the warps per block change neither the
 * arithmetic nor its order, only the schedule.
 *
 * Exactness. Every sum is in a fixed order with explicit operations (il__fma, il__mul, il__add,
 * il__sub: never contracted by either compiler), and the warp's partial sums meet in the fixed
 * butterfly il__mv3_butterfly, so a GPU result equals the host twin's bit for bit for any shape.
 * The twin runs these same functions over the row in memory (the shared-memory copy is the row's
 * bytes, so the chunk pointer is the row itself there).
 * Eligible rows: 16-byte aligned with a stride that is a multiple of 16 and a byte length that is
 * a multiple of 16 (n_in a multiple of 4 for F32, 8 for F16/BF16, 256 for Q8_0/Q4_0/Q4_K/Q5_K,
 * 128 for Q4_1, 2048 for Q6_K); il__mv3_eligible says, and the caller keeps version 1/2 for the rest.
 */
#ifndef IL_BACKEND_CUDA_MV3_CUH
#define IL_BACKEND_CUDA_MV3_CUH

#include <math.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"
#include "backend/cuda/mv3.h" /* il__mv3_epi */

IL__HD float il__fma(float a, float b, float c) { return fmaf(a, b, c); }

/* Little-endian 32-bit word at a 4-byte aligned address. */
IL__HD uint32_t il__w32(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return *(const uint32_t *)p;
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

/* Four words at a 16-byte aligned address (one 16-byte load on the device). */
IL__HD void il__w128(const uint8_t *p, uint32_t *w) {
#ifdef __CUDA_ARCH__
  const uint4 q = *(const uint4 *)p;
  w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
#else
  memcpy(w, p, 16);
#endif
}

/* Four floats at a 16-byte aligned address. */
IL__HD void il__f128(const float *p, float *v) {
#ifdef __CUDA_ARCH__
  const float4 q = *(const float4 *)p;
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#else
  memcpy(v, p, 16);
#endif
}

/* ---- geometry ---- */

/* Whether T is a quantized type (8-bit activations, shared-memory chunks). */
IL__HD bool il__mv3_quantized(int t) { return t != IL_DTYPE_F32 && t != IL_DTYPE_F16 && t != IL_DTYPE_BF16; }

/* Bytes of one chunk: 32 words for the float types, whole blocks for the others. */
IL__HD int il__mv3_chunk_bytes(int t) {
  switch (t) {
  case IL_DTYPE_Q8_0: return 32 * 34;
  case IL_DTYPE_Q4_0: return 32 * 18;
  case IL_DTYPE_Q4_1: return 32 * 20;
  case IL_DTYPE_Q4_K: return 4 * 144;
  case IL_DTYPE_Q5_K: return 4 * 176;
  case IL_DTYPE_Q6_K: return 8 * 210;
  default: return 512;
  }
}

/* Elements of one chunk. */
IL__HD int il__mv3_chunk_elems(int t) {
  if (t == IL_DTYPE_F32) return 128;
  if (t == IL_DTYPE_F16 || t == IL_DTYPE_BF16) return 256;
  return t == IL_DTYPE_Q6_K ? 2048 : 1024;
}

/* Loads a lane issues for one chunk (quantized types: the copy into shared memory). */
IL__HD int il__mv3_loads(int t) { return (il__mv3_chunk_bytes(t) / 16 + 31) / 32; }

/* 32-value units a lane multiplies per chunk (quantized types). */
IL__HD int il__mv3_lane_units(int t) { return t == IL_DTYPE_Q6_K ? 2 : 1; }

/* Word (16 bytes, counted from the row's start) that load k of `lane` reads for chunk c of a
 * row of row_words words; -1 when it reads nothing. Every word of the row is read by exactly
 * one (c, k, lane). */
IL__HD int64_t il__mv3_word(int t, int64_t row_words, int64_t c, int k, int lane) {
  const int cw = il__mv3_chunk_bytes(t) / 16;
  const int i = 32 * k + lane;
  const int64_t w = c * cw + i;
  return i < cw && w < row_words ? w : -1;
}

/* Bytes of a row of n_in elements of type t (0 when n_in does not fill whole blocks). */
IL__HD int64_t il__mv3_row_bytes(int t, int64_t n_in) {
  switch (t) {
  case IL_DTYPE_F32: return 4 * n_in;
  case IL_DTYPE_F16: case IL_DTYPE_BF16: return 2 * n_in;
  case IL_DTYPE_Q8_0: return n_in % 32 ? 0 : n_in / 32 * 34;
  case IL_DTYPE_Q4_0: return n_in % 32 ? 0 : n_in / 32 * 18;
  case IL_DTYPE_Q4_1: return n_in % 32 ? 0 : n_in / 32 * 20;
  case IL_DTYPE_Q4_K: return n_in % 256 ? 0 : n_in / 256 * 144;
  case IL_DTYPE_Q5_K: return n_in % 256 ? 0 : n_in / 256 * 176;
  case IL_DTYPE_Q6_K: return n_in % 256 ? 0 : n_in / 256 * 210;
  default: return 0;
  }
}

/* Whether version 3 takes rows of n_in elements of type t at `addr`, `stride` bytes apart. */
IL__HD bool il__mv3_eligible(int t, int64_t n_in, uintptr_t addr, size_t stride, int64_t n_rows) {
  const int64_t rb = il__mv3_row_bytes(t, n_in);
  if (rb <= 0 || rb % 16 || addr % 16 || (n_rows > 1 && stride % 16)) return false;
  if (t == IL_DTYPE_F32) return n_in % 4 == 0;
  if (t == IL_DTYPE_F16 || t == IL_DTYPE_BF16) return n_in % 8 == 0;
  return t != IL_DTYPE_COUNT;
}

/* The row a warp owns (blocks of W warps), and the blocks that cover n_out rows. */
IL__HD int64_t il__mv3_row_of(int64_t block, int warp, int w) { return block * w + warp; }
IL__HD int64_t il__mv3_blocks(int64_t n_out, int w) { return (n_out + w - 1) / w; }

/* ---- the fixed reduction ---- */

/* The warp's butterfly: after step o every lane holds s[l] + s[l ^ o] (the device's
 * __shfl_xor_sync order); lane 0's final value is the row's result. s has 32 entries. */
IL__HD float il__mv3_butterfly_host(float *s) {
  for (int o = 16; o > 0; o >>= 1) {
    float n[32];
    for (int l = 0; l < 32; l++) n[l] = il__add(s[l], s[l ^ o]);
    for (int l = 0; l < 32; l++) s[l] = n[l];
  }
  return s[0];
}

/* ---- 8-bit activations ---- */

/* One block of 32 activations to int8 q, its scale (returned) and the sum of q: the CPU's
 * il__quant_block (d = amax / 127, q = round-half-even(x / d) by the 1.5 * 2^23 trick). */
IL__HD float il__mv3_quant_block(const float *x, int8_t *q, int *sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) {
    const float a = fabsf(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int s = 0;
  for (int j = 0; j < 32; j++) {
    q[j] = (int8_t)il__quant_one(x[j], id);
    s += q[j];
  }
  *sum = s;
  return d;
}

/* The activations of one token as the quantized kernels read them. */
typedef struct {
  const int8_t *q;   /* n_in values, 16-byte aligned */
  const float *d;    /* n_in / 32 scales */
  const int *s;      /* n_in / 32 sums of q */
} il__mv3_act;

/* The 8 words of block b's 8-bit activations. */
IL__HD void il__mv3_xwords(const il__mv3_act *a, int64_t b, int *xw) {
  uint32_t w[8];
  il__w128((const uint8_t *)(a->q + 32 * b), w);
  il__w128((const uint8_t *)(a->q + 32 * b + 16), w + 4);
  for (int k = 0; k < 8; k++) xw[k] = (int)w[k];
}

/* Byte i of the 12 bytes of scales and mins in a K-quant header held as 4 words (selects, not
 * an indexed array: no local memory). */
IL__HD int il__mv3_hbyte(const uint32_t *h, int i) {
  const uint32_t w = i < 4 ? h[1] : i < 8 ? h[2] : h[3];
  return (int)((w >> (8 * (i & 3))) & 0xFF);
}

/* ggml's get_scale_min_k4 (decode.cuh's il__scale_min_k4) on the header words. */
IL__HD void il__mv3_scale_min(int j, const uint32_t *h, int *d, int *m) {
  if (j < 4) {
    *d = il__mv3_hbyte(h, j) & 63;
    *m = il__mv3_hbyte(h, j + 4) & 63;
  } else {
    *d = (il__mv3_hbyte(h, j + 4) & 0xF) | ((il__mv3_hbyte(h, j - 4) >> 6) << 4);
    *m = (il__mv3_hbyte(h, j + 4) >> 4) | ((il__mv3_hbyte(h, j) >> 6) << 4);
  }
}

/* ---- per-unit dot products (quantized types) ----
 * unit v (0 .. 32 x lane_units) of a chunk at `ch` (16-byte aligned), against activation block
 * b (the unit's 32 values). */

template <int T>
IL__HD float il__mv3_unit_dot(const uint8_t *ch, int v, const il__mv3_act *a, int64_t b) {
  int xw[8];
  il__mv3_xwords(a, b, xw);
  const float dx = a->d[b];
  if (T == IL_DTYPE_Q8_0 || T == IL_DTYPE_Q4_0 || T == IL_DTYPE_Q4_1) {
    const int bs = T == IL_DTYPE_Q8_0 ? 34 : T == IL_DTYPE_Q4_0 ? 18 : 20;
    const uint8_t *blk = ch + bs * v;
    const float dw = il__f16(il__ld16(blk));
    int isum = 0;
    if (T == IL_DTYPE_Q8_0) {
      for (int k = 0; k < 8; k++) isum = il__dp4a(il__ld32_a2(blk + 2 + 4 * k), xw[k], isum);
    } else {
      const int qoff = T == IL_DTYPE_Q4_0 ? 2 : 4;
      for (int k = 0; k < 4; k++) {
        const int q = il__ld32_a2(blk + qoff + 4 * k);
        isum = il__dp4a(q & 0x0F0F0F0F, xw[k], isum);
        isum = il__dp4a((q >> 4) & 0x0F0F0F0F, xw[4 + k], isum);
      }
    }
    const int sx = a->s[b];
    if (T == IL_DTYPE_Q4_0) isum -= 8 * sx;
    const float r = il__mul(il__mul(dw, dx), (float)isum);
    if (T == IL_DTYPE_Q4_1) return il__fma(il__mul(il__f16(il__ld16(blk + 2)), dx), (float)sx, r);
    return r;
  } else if (T == IL_DTYPE_Q4_K || T == IL_DTYPE_Q5_K) {
    const int bs = T == IL_DTYPE_Q4_K ? 144 : 176;
    const uint8_t *sb = ch + bs * (v / 8);
    const int j = v % 8;
    uint32_t h[4];
    il__w128(sb, h); /* d, dmin, the 12 bytes of scales and mins */
    int sc, m;
    il__mv3_scale_min(j, h, &sc, &m);
    const float d = il__f16((uint16_t)(h[0] & 0xFFFF)), dmin = il__f16((uint16_t)(h[0] >> 16));
    uint32_t qs[8];
    const uint8_t *qp = sb + 16 + (T == IL_DTYPE_Q5_K ? 32 : 0) + 32 * (j / 2);
    il__w128(qp, qs);
    il__w128(qp + 16, qs + 4);
    const int shift = 4 * (j & 1);
    int isum = 0;
    if (T == IL_DTYPE_Q4_K) {
      for (int k = 0; k < 8; k++) isum = il__dp4a((int)((qs[k] >> shift) & 0x0F0F0F0Fu), xw[k], isum);
    } else {
      uint32_t qh[8];
      il__w128(sb + 16, qh);
      il__w128(sb + 32, qh + 4);
      for (int k = 0; k < 8; k++) {
        const uint32_t q5 = ((qs[k] >> shift) & 0x0F0F0F0Fu) | (((qh[k] >> j) & 0x01010101u) << 4);
        isum = il__dp4a((int)q5, xw[k], isum);
      }
    }
    const float d1 = il__mul(d, (float)sc), m1 = il__mul(dmin, (float)m);
    return il__mul(dx, il__sub(il__mul(d1, (float)isum), il__mul(m1, (float)a->s[b])));
  } else { /* Q6_K: unit j = half j/4, quarter j%4 of a 210-byte super-block (2-byte aligned) */
    const uint8_t *sb = ch + 210 * (v / 8);
    const int j = v % 8, hh = j / 4, k4 = j % 4;
    const uint8_t *ql = sb + 64 * hh + 32 * (k4 & 1), *qh = sb + 128 + 32 * hh;
    const int lshift = 4 * (k4 >> 1), hshift = 2 * k4;
    int is0 = 0, is1 = 0;
    for (int k = 0; k < 8; k++) {
      const uint32_t lo = ((uint32_t)il__ld32_a2(ql + 4 * k) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = (((uint32_t)il__ld32_a2(qh + 4 * k) >> hshift) & 0x03030303u) << 4;
      /* q - 32 in each byte, without borrows between bytes */
      const int q = (int)((((lo | hi) | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
      if (k < 4) is0 = il__dp4a(q, xw[k], is0);
      else is1 = il__dp4a(q, xw[k], is1);
    }
    const int8_t s0 = (int8_t)sb[192 + 8 * hh + 2 * k4], s1 = (int8_t)sb[192 + 8 * hh + 2 * k4 + 1];
    const float d = il__f16(il__ld16(sb + 208));
    return il__mul(il__mul(d, dx), (float)(s0 * is0 + s1 * is1));
  }
}

/* ---- per-lane work: one chunk ----
 * acc[t] for t < n_tok gains lane `lane`'s share of chunk c of the row.
 * Float types: w holds the lane's word of the chunk (valid when `has`), x the n_tok activation
 * rows (n_in floats apart). Quantized types: ch is the chunk's bytes (the shared-memory copy on
 * the device, the row itself on the host), a the n_tok tokens' activations. */

template <int T, int NT>
IL__HD void il__mv3_lane_float(const uint32_t *w, int64_t word, const float *x, int64_t n_in, int n_tok,
                               float *acc) {
  const int e = T == IL_DTYPE_F32 ? 4 : 8;
  float wv[8];
  for (int i = 0; i < 4; i++) {
    if (T == IL_DTYPE_F32) {
#ifdef __CUDA_ARCH__
      wv[i] = __uint_as_float(w[i]);
#else
      memcpy(&wv[i], &w[i], 4);
#endif
    }
    else if (T == IL_DTYPE_F16) {
      wv[2 * i] = il__f16((uint16_t)(w[i] & 0xFFFF));
      wv[2 * i + 1] = il__f16((uint16_t)(w[i] >> 16));
    } else {
      wv[2 * i] = il__bf16((uint16_t)(w[i] & 0xFFFF));
      wv[2 * i + 1] = il__bf16((uint16_t)(w[i] >> 16));
    }
  }
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int t = 0; t < NT; t++) {
    if (t < n_tok) {
      const float *xt = x + (size_t)t * (size_t)n_in + (size_t)word * e;
      float xv[8];
      il__f128(xt, xv);
      if (e == 8) il__f128(xt + 4, xv + 4);
      float s = acc[t];
      for (int i = 0; i < e; i++) s = il__fma(wv[i], xv[i], s);
      acc[t] = s;
    }
  }
}

template <int T, int NT>
IL__HD void il__mv3_lane_quant(const uint8_t *ch, int64_t c, int lane, int64_t n_units, const il__mv3_act *a,
                               int n_tok, float *acc) {
  const int upc = 32 * il__mv3_lane_units(T); /* units per chunk */
  for (int i = 0; i < il__mv3_lane_units(T); i++) {
    const int v = lane + 32 * i;
    const int64_t b = c * upc + v; /* the unit's activation block in the row */
    if (b >= n_units) break;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int t = 0; t < NT; t++)
      if (t < n_tok) acc[t] = il__add(acc[t], il__mv3_unit_dot<T>(ch, v, &a[t], b));
  }
}

/* ---- the host twin of one row ----
 * y[t] for t < n_tok: what the kernel writes for this row, bit for bit. Float types read x
 * (n_tok rows of n_in floats), quantized types a[0 .. n_tok). */
template <int T>
inline void il__mv3_row_twin(const uint8_t *row, int64_t n_in, const float *x, const il__mv3_act *a, int n_tok,
                             float *y) {
  float acc[32][IL__CU_MV_MAX_TOK];
  for (int l = 0; l < 32; l++)
    for (int t = 0; t < IL__CU_MV_MAX_TOK; t++) acc[l][t] = 0.0f;
  const int64_t rb = il__mv3_row_bytes(T, n_in), row_words = rb / 16;
  const int cb = il__mv3_chunk_bytes(T);
  const int64_t n_chunks = (rb + cb - 1) / cb;
  for (int64_t c = 0; c < n_chunks; c++)
    for (int l = 0; l < 32; l++) {
      if (il__mv3_quantized(T)) {
        il__mv3_lane_quant<T, IL__CU_MV_MAX_TOK>(row + c * cb, c, l, n_in / 32, a, n_tok, acc[l]);
      } else {
        const int64_t w = il__mv3_word(T, row_words, c, 0, l);
        if (w < 0) continue;
        uint32_t wd[4];
        il__w128(row + 16 * w, wd);
        il__mv3_lane_float<T, IL__CU_MV_MAX_TOK>(wd, w, x, n_in, n_tok, acc[l]);
      }
    }
  for (int t = 0; t < n_tok; t++) {
    float s[32];
    for (int l = 0; l < 32; l++) s[l] = acc[l][t];
    y[t] = il__mv3_butterfly_host(s);
  }
}

/* The epilogue of il__mv3_epi (mv3.h) on y's old value and the dot product: the add and swiglu
 * ops' own expressions, so a fused launch gives their bits. */
__host__ __device__ inline float il__mv3_apply(int epi, float old, float d) {
  return epi == IL__MV3_ADD ? old + d : epi == IL__MV3_SWIGLU ? old / (1.0f + expf(-old)) * d : d;
}

/* The host twin of il__cu_mv3_epi: every row of the matrix (quantized types read a[0 .. n_tok)). */
inline bool il__mv3_matvec_epi_twin(il_dtype t, const uint8_t *w, size_t stride, int64_t n_out, int64_t n_in,
                                    const float *x, const il__mv3_act *a, int n_tok, float *y, int64_t ldy, int epi) {
  float out[IL__CU_MV_MAX_TOK];
  for (int64_t r = 0; r < n_out; r++) {
    const uint8_t *row = w + (size_t)r * stride;
    switch (t) {
#define IL__MV3_T(T) \
  case T: il__mv3_row_twin<T>(row, n_in, x, a, n_tok, out); break;
      IL__MV3_T(IL_DTYPE_F32) IL__MV3_T(IL_DTYPE_F16) IL__MV3_T(IL_DTYPE_BF16) IL__MV3_T(IL_DTYPE_Q8_0)
      IL__MV3_T(IL_DTYPE_Q4_0) IL__MV3_T(IL_DTYPE_Q4_1) IL__MV3_T(IL_DTYPE_Q4_K) IL__MV3_T(IL_DTYPE_Q5_K)
      IL__MV3_T(IL_DTYPE_Q6_K)
#undef IL__MV3_T
    default: return false;
    }
    for (int tk = 0; tk < n_tok; tk++) {
      float *yp = y + (size_t)tk * (size_t)ldy + (size_t)r;
      *yp = epi == IL__MV3_STORE ? out[tk] : il__mv3_apply(epi, *yp, out[tk]);
    }
  }
  return true;
}

/* The host twin of il__cu_mv3. */
inline bool il__mv3_matvec_twin(il_dtype t, const uint8_t *w, size_t stride, int64_t n_out, int64_t n_in,
                                const float *x, const il__mv3_act *a, int n_tok, float *y, int64_t ldy) {
  return il__mv3_matvec_epi_twin(t, w, stride, n_out, n_in, x, a, n_tok, y, ldy, IL__MV3_STORE);
}

/* The host twin of il__cu_mv3_quant for one token row: n_in / 32 blocks. */
inline void il__mv3_quant_twin(const float *x, int64_t n_in, int8_t *q, float *d, int *s) {
  for (int64_t b = 0; b < n_in / 32; b++) d[b] = il__mv3_quant_block(x + 32 * b, q + 32 * b, &s[b]);
}

#endif
