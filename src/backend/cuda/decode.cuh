/* backend/cuda/decode: weight decoders shared by every kernel that reads weights.
 *
 * A row of any weight type is cut into units of 32 elements: one block of Q8_0/Q4_0/Q4_1 (and
 * of Q5_0/Q5_1/IQ4_NL, llama-quantize's fallback types), one
 * 32-element sub-block of a K-quant super-block (Q4_K, Q5_K: sub-block j of 8; Q6_K: two of its
 * 16-element sub-blocks), or 32 consecutive values of F32/F16/BF16 (the last unit of a float
 * row may be shorter). il__unit<T>(row, u, n_in, v) writes unit u's values to v[0..32) and
 * returns how many are valid. The byte layouts are core/dtype.h's (GGUF's).
 *
 * The functions are __host__ __device__: selftest.cu runs them on the host against the
 * library's il_dequantize_row for every type, bit for bit, so the decoding is verified on a
 * machine without a GPU (the kernels around them are not). For that the arithmetic is the
 * reference's, in its order, without fused multiply-add (il__mul/il__sub use the _rn
 * intrinsics on the device, which nvcc never contracts): get_rows on cuda equals cpu exactly.
 *
 * Loads of the quantized types are byte loads: rows need only be 2-byte aligned (every block size
 * is even) and no load crosses a row; float units at a 16-byte boundary are read with 16-byte
 * loads on the device (the host keeps the byte loads the self-test checks). Version 1, written without a GPU to measure: wider loads (u32/uint4
 * for the K-quants, whose 144/176-byte blocks keep 16-byte alignment) and integer dot products
 * (dp4a on activations quantized to 8 bits, as llama.cpp's MMVQ) are the next versions, each
 * to be kept only if bench_cuda shows it faster.
 */
#ifndef IL_BACKEND_CUDA_DECODE_CUH
#define IL_BACKEND_CUDA_DECODE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "core/dtype.h"
}

#define IL__HD __host__ __device__ __forceinline__

IL__HD float il__mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

IL__HD float il__sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

IL__HD float il__add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

IL__HD uint16_t il__ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

IL__HD float il__f16(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return il_fp16_to_f32(h);
#endif
}

IL__HD float il__bf16(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __uint_as_float((uint32_t)h << 16);
#else
  return il_bf16_to_f32(h);
#endif
}

IL__HD float il__f32(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  return __uint_as_float((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
#else
  float f;
  memcpy(&f, p, 4);
  return f;
#endif
}

/* ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K/Q5_K block. */
IL__HD void il__scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/* Unit u of a row; returns the number of valid values (32, or fewer at the end of a float row). */
template <int T>
IL__HD int il__unit(const uint8_t *row, int64_t u, int64_t n_in, float *v) {
  if (T == IL_DTYPE_F32 || T == IL_DTYPE_F16 || T == IL_DTYPE_BF16) {
    const int64_t left = n_in - u * 32;
    const int n = left < 32 ? (int)left : 32;
#ifdef __CUDA_ARCH__
    /* a whole unit at a 16-byte boundary (rows of packed float weights are): 16-byte loads,
     * the same exact conversions as below */
    const int ub = T == IL_DTYPE_F32 ? 128 : 64;
    if (n == 32 && ((uintptr_t)(row + (size_t)ub * u) & 15) == 0) {
      const uint4 *p = (const uint4 *)(row + (size_t)ub * u);
#pragma unroll
      for (int k = 0; k < ub / 16; k++) {
        const uint4 q = p[k];
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          if (T == IL_DTYPE_F32) v[4 * k + i] = __uint_as_float(w[i]);
          else if (T == IL_DTYPE_F16) {
            v[8 * k + 2 * i] = il__f16((uint16_t)(w[i] & 0xFFFF));
            v[8 * k + 2 * i + 1] = il__f16((uint16_t)(w[i] >> 16));
          } else {
            v[8 * k + 2 * i] = __uint_as_float(w[i] << 16);
            v[8 * k + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
          }
        }
      }
      return 32;
    }
#endif
    for (int j = 0; j < n; j++) {
      const int64_t i = u * 32 + j;
      if (T == IL_DTYPE_F32) v[j] = il__f32(row + 4 * i);
      else if (T == IL_DTYPE_F16) v[j] = il__f16(il__ld16(row + 2 * i));
      else v[j] = il__bf16(il__ld16(row + 2 * i));
    }
    return n;
  } else if (T == IL_DTYPE_Q8_0) {
    const uint8_t *b = row + u * sizeof(il_block_q8_0);
    const float d = il__f16(il__ld16(b));
    for (int j = 0; j < 32; j++) v[j] = il__mul((float)(int8_t)b[2 + j], d);
    return 32;
  } else if (T == IL_DTYPE_Q4_0) {
    const uint8_t *b = row + u * sizeof(il_block_q4_0);
    const float d = il__f16(il__ld16(b));
    for (int j = 0; j < 16; j++) {
      const uint8_t q = b[2 + j];
      v[j] = il__mul((float)((q & 0x0F) - 8), d);
      v[j + 16] = il__mul((float)((q >> 4) - 8), d);
    }
    return 32;
  } else if (T == IL_DTYPE_Q4_1) {
    const uint8_t *b = row + u * sizeof(il_block_q4_1);
    const float d = il__f16(il__ld16(b)), m = il__f16(il__ld16(b + 2));
    for (int j = 0; j < 16; j++) {
      const uint8_t q = b[4 + j];
      v[j] = il__add(il__mul((float)(q & 0x0F), d), m);
      v[j + 16] = il__add(il__mul((float)(q >> 4), d), m);
    }
    return 32;
  } else if (T == IL_DTYPE_Q5_0 || T == IL_DTYPE_Q5_1) {
    const bool q51 = T == IL_DTYPE_Q5_1;
    const uint8_t *b = row + u * (q51 ? sizeof(il_block_q5_1) : sizeof(il_block_q5_0));
    const float d = il__f16(il__ld16(b)), m = q51 ? il__f16(il__ld16(b + 2)) : 0.0f;
    const uint8_t *qh = b + (q51 ? 4 : 2), *qs = qh + 4;
    const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
      const int q0 = (qs[j] & 0x0F) | (int)((h >> j & 1) << 4), q1 = (qs[j] >> 4) | (int)((h >> (j + 16) & 1) << 4);
      if (q51) {
        v[j] = il__add(il__mul((float)q0, d), m);
        v[j + 16] = il__add(il__mul((float)q1, d), m);
      } else {
        v[j] = il__mul((float)(q0 - 16), d);
        v[j + 16] = il__mul((float)(q1 - 16), d);
      }
    }
    return 32;
  } else if (T == IL_DTYPE_IQ4_NL) {
    /* the 16 levels (il_iq4nl_values) as bytes of two words: registers, no table in memory */
    const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
    const uint8_t *b = row + u * sizeof(il_block_iq4_nl);
    const float d = il__f16(il__ld16(b));
    for (int j = 0; j < 16; j++) {
      const int n0 = b[2 + j] & 0x0F, n1 = b[2 + j] >> 4;
      v[j] = il__mul(d, (float)(int8_t)((n0 < 8 ? lo : hi) >> (8 * (n0 & 7))));
      v[j + 16] = il__mul(d, (float)(int8_t)((n1 < 8 ? lo : hi) >> (8 * (n1 & 7))));
    }
    return 32;
  } else if (T == IL_DTYPE_Q4_K || T == IL_DTYPE_Q5_K) {
    /* sub-block j of super-block s: pair j/2 reads qs[32*(j/2) ..], low nibbles for even j */
    const size_t bs = T == IL_DTYPE_Q4_K ? sizeof(il_block_q4_K) : sizeof(il_block_q5_K);
    const uint8_t *b = row + (u / 8) * bs;
    const int j = (int)(u % 8);
    const float d = il__f16(il__ld16(b)), dmin = il__f16(il__ld16(b + 2));
    int sc, m;
    il__scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = il__mul(d, (float)sc), m1 = il__mul(dmin, (float)m);
    const uint8_t *qs = b + 4 + IL_K_SCALE_SIZE + (T == IL_DTYPE_Q5_K ? IL_QK_K / 8 : 0) + 32 * (j / 2);
    const uint8_t *qh = b + 4 + IL_K_SCALE_SIZE; /* Q5_K only */
    const int shift = (j & 1) * 4;
    for (int l = 0; l < 32; l++) {
      int q = (qs[l] >> shift) & 0xF;
      if (T == IL_DTYPE_Q5_K) q += (qh[l] >> j) & 1 ? 16 : 0;
      v[l] = il__sub(il__mul(d1, (float)q), m1);
    }
    return 32;
  } else { /* Q6_K: unit j = half j/4, quarter j%4 of 32 values */
    const uint8_t *b = row + (u / 8) * sizeof(il_block_q6_K);
    const int j = (int)(u % 8), h = j / 4, k = j % 4;
    const uint8_t *ql = b + 64 * h + 32 * (k & 1), *qh = b + IL_QK_K / 2 + 32 * h;
    const int8_t *sc = (const int8_t *)(b + IL_QK_K / 2 + IL_QK_K / 4) + 8 * h + 2 * k;
    const float d = il__f16(il__ld16(b + IL_QK_K / 2 + IL_QK_K / 4 + IL_QK_K / 16));
    const int lshift = 4 * (k >> 1), hshift = 2 * k;
    for (int l = 0; l < 32; l++) {
      const int q = (int8_t)(((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
      v[l] = il__mul(il__mul(d, (float)sc[l / 16]), (float)q);
    }
    return 32;
  }
}

/* ---- 8-bit integer dot products (matvec_q8.cu) ---- */

/* One activation to 8 bits with the inverse scale id = 1 / (amax / 127) (0 for an all-zero
 * block): round half to even by adding and subtracting 1.5 * 2^23, exactly the CPU's
 * il__quant_block. */
IL__HD int il__quant_one(float v, float id) {
  const float magic = 12582912.0f;
  return (int)il__sub(il__add(il__mul(v, id), magic), magic);
}

/* c + the sum of the four products of the signed bytes of a and b. */
IL__HD int il__dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; k++) c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * k)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * k));
  return c;
#endif
}

/* 4 bytes at a 2-byte aligned address, little-endian. */
IL__HD int il__ld32_a2(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  const uint16_t *h = (const uint16_t *)p;
  return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
#else
  return (int)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
#endif
}

/* A block's weights as 8 words of signed bytes in element order (elements 4k..4k+3 in word k),
 * its scale and (Q4_1) min. */
template <int T>
IL__HD float il__block_words(const uint8_t *blk, int *wq, float *mw) {
  *mw = 0.0f;
  if (T == IL_DTYPE_Q8_0) {
    for (int k = 0; k < 8; k++) wq[k] = il__ld32_a2(blk + 2 + 4 * k);
  } else {
    const int qoff = T == IL_DTYPE_Q4_0 ? 2 : 4;
    if (T == IL_DTYPE_Q4_1) *mw = il__f16(il__ld16(blk + 2));
    for (int k = 0; k < 4; k++) {
      const int v = il__ld32_a2(blk + qoff + 4 * k);
      wq[k] = v & 0x0F0F0F0F;            /* low nibbles: elements 4k .. 4k+3 */
      wq[4 + k] = (v >> 4) & 0x0F0F0F0F; /* high nibbles: elements 16+4k .. */
    }
  }
  return il__f16(il__ld16(blk));
}

/* One block's contribution to y: the weights (words, scale dw, min mw) times 32 activations
 * quantized to xw (8 words), scale dx, sum of the values sx. */
template <int T>
IL__HD float il__block_dot(const int *wq, float dw, float mw, const int *xw, float dx, int sx) {
  int isum = 0;
  for (int k = 0; k < 8; k++) isum = il__dp4a(wq[k], xw[k], isum);
  if (T == IL_DTYPE_Q4_0) isum -= 8 * sx;
  float r = dw * dx * (float)isum;
  if (T == IL_DTYPE_Q4_1) r += mw * dx * (float)sx;
  return r;
}

/* Units in a row of n_in elements. */
IL__HD int64_t il__n_units(int64_t n_in) { return (n_in + 31) / 32; }

/* ---- KV cells (attention.cu reads them, kv.cu writes them) ---- */

/* Element i of a KV cell row of type T (F32, F16, BF16, Q8_0; F32 rows 4-byte aligned, the
 * others 2-byte): the value the CPU's attention kernels read. Q8_0: d x q of the element's
 * 34-byte block, as il_dequantize_row computes it. */
template <int T>
IL__HD float il__kv_elem(const uint8_t *row, int64_t i) {
  if (T == IL_DTYPE_F32) return ((const float *)row)[i];
  if (T == IL_DTYPE_F16) return il__f16(((const uint16_t *)row)[i]);
  if (T == IL_DTYPE_BF16) return il__bf16(((const uint16_t *)row)[i]);
  const uint8_t *b = row + (i >> 5) * 34;
  return il__mul(il__f16(il__ld16(b)), (float)(int8_t)b[2 + (i & 31)]);
}

/* F32 -> F16 / BF16 bits, round to nearest even (BF16: a NaN stays a quiet NaN), as core/dtype's
 * il_f32_to_fp16 and il_f32_to_bf16. */
IL__HD uint16_t il__f16_bits(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return il_f32_to_fp16(f);
#endif
}

IL__HD uint16_t il__bf16_bits(float f) {
#ifdef __CUDA_ARCH__
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
#else
  return il_f32_to_bf16(f);
#endif
}

/* ggml's quantize_row_q8_0_ref, the CPU's il_quantize_row: a block's scale d = amax / 127 (in
 * float, then stored as F16) and its inverse (0 for an all-zero block)... */
IL__HD float il__q8_inverse(float amax, float *d) {
  *d = amax / 127.0f;
  return *d != 0.0f ? 1.0f / *d : 0.0f;
}

/* ...and each value: round(x * id) half away from zero; a value out of int range (an infinite
 * inverse of a subnormal scale, 0 x inf) wraps as x86's conversion does, to the same bytes. */
IL__HD int8_t il__q8_value(float x, float id) {
  const float v = roundf(il__mul(x, id));
  const int i = (v > -2147483648.0f && v < 2147483648.0f) ? (int)v : (-2147483647 - 1);
  return (int8_t)(uint8_t)((unsigned)i & 0xffu);
}

/* Calls f<T>() for a runtime type; false for a type without decoder. */
#define IL__FOR_TYPE(t, CALL)                 \
  switch (t) {                                \
  case IL_DTYPE_F32: CALL(IL_DTYPE_F32); break; \
  case IL_DTYPE_F16: CALL(IL_DTYPE_F16); break; \
  case IL_DTYPE_BF16: CALL(IL_DTYPE_BF16); break; \
  case IL_DTYPE_Q8_0: CALL(IL_DTYPE_Q8_0); break; \
  case IL_DTYPE_Q4_0: CALL(IL_DTYPE_Q4_0); break; \
  case IL_DTYPE_Q4_1: CALL(IL_DTYPE_Q4_1); break; \
  case IL_DTYPE_Q4_K: CALL(IL_DTYPE_Q4_K); break; \
  case IL_DTYPE_Q5_K: CALL(IL_DTYPE_Q5_K); break; \
  case IL_DTYPE_Q6_K: CALL(IL_DTYPE_Q6_K); break; \
  case IL_DTYPE_Q5_0: CALL(IL_DTYPE_Q5_0); break; \
  case IL_DTYPE_Q5_1: CALL(IL_DTYPE_Q5_1); break; \
  case IL_DTYPE_IQ4_NL: CALL(IL_DTYPE_IQ4_NL); break; \
  default: return cudaErrorInvalidValue;      \
  }

#endif
