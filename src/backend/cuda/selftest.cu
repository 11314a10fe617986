/* backend/cuda/selftest: the weight decoders of decode.cuh, run on the host.
 *
 * No GPU is needed: decode.cuh's functions are __host__ __device__, so the exact code every
 * weight-reading kernel inlines is compiled here for the CPU too and compared, element by
 * element and bit for bit, with the library's reference il_dequantize_row on rows of random
 * bytes with sane scales, Q5_0/Q5_1/IQ4_NL included (and, for the float types, a length that is not a multiple of 32).
 * It also checks matvec version 2's per-block integer arithmetic (il__block_words, il__block_dot,
 * il__quant_one) against the reference dequantizer for Q8_0, Q4_0 and Q4_1, and the KV cells'
 * code: what kv.cu writes (F16/BF16 conversion, Q8_0 quantization: il__f16_bits, il__bf16_bits,
 * il__q8_inverse, il__q8_value) against the reference quantizer byte for byte, and what the
 * attention kernels read (il__kv_elem) against the reference dequantizer bit for bit.
 * This is the module's part of the host-side tests (tests/test_cuda_module.c calls it through
 * the module table); the kernels around the decoders are checked by test_backend_ops on a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"

static uint64_t il__rng = 0x9e3779b97f4a7c15ull;
static uint32_t il__next(void) {
  il__rng ^= il__rng << 13, il__rng ^= il__rng >> 7, il__rng ^= il__rng << 17;
  return (uint32_t)(il__rng >> 16);
}

template <int T>
static int il__check_type(il__cu_ref_fn ref, char *err, size_t nerr) {
  const int64_t n_in = (T == IL_DTYPE_F32 || T == IL_DTYPE_F16 || T == IL_DTYPE_BF16) ? 300 : 512;
  const il_dtype t = (il_dtype)T;
  size_t bs, blk;
  switch (T) {
  case IL_DTYPE_F32: bs = 4, blk = 1; break;
  case IL_DTYPE_F16: case IL_DTYPE_BF16: bs = 2, blk = 1; break;
  case IL_DTYPE_Q8_0: bs = sizeof(il_block_q8_0), blk = 32; break;
  case IL_DTYPE_Q4_0: bs = sizeof(il_block_q4_0), blk = 32; break;
  case IL_DTYPE_Q4_1: bs = sizeof(il_block_q4_1), blk = 32; break;
  case IL_DTYPE_Q5_0: bs = sizeof(il_block_q5_0), blk = 32; break;
  case IL_DTYPE_Q5_1: bs = sizeof(il_block_q5_1), blk = 32; break;
  case IL_DTYPE_IQ4_NL: bs = sizeof(il_block_iq4_nl), blk = 32; break;
  case IL_DTYPE_Q4_K: bs = sizeof(il_block_q4_K), blk = 256; break;
  case IL_DTYPE_Q5_K: bs = sizeof(il_block_q5_K), blk = 256; break;
  default: bs = sizeof(il_block_q6_K), blk = 256; break;
  }
  const size_t row_bytes = (size_t)n_in / blk * bs;
  uint8_t row[2048];
  float want[512], got[512];
  for (int trial = 0; trial < 8; trial++) {
    for (size_t i = 0; i < row_bytes; i++) row[i] = (uint8_t)il__next();
    /* sane scales: finite fp16 values of either sign; float types: finite values */
    for (size_t b = 0; b < row_bytes / bs; b++) {
      uint8_t *p = row + b * bs;
      const uint16_t d = il_f32_to_fp16(((int)(il__next() % 2001) - 1000) * 1e-4f);
      const uint16_t m = il_f32_to_fp16(((int)(il__next() % 2001) - 1000) * 1e-4f);
      if (T == IL_DTYPE_F32) {
        const float f = ((int)(il__next() % 20001) - 10000) * 1e-3f;
        memcpy(p, &f, 4);
      } else if (T == IL_DTYPE_F16) {
        const uint16_t h = il_f32_to_fp16(((int)(il__next() % 20001) - 10000) * 1e-3f);
        memcpy(p, &h, 2);
      } else if (T == IL_DTYPE_Q6_K) {
        memcpy(p + bs - 2, &d, 2);
      } else if (T != IL_DTYPE_BF16) {
        memcpy(p, &d, 2);
        if (T == IL_DTYPE_Q4_1 || T == IL_DTYPE_Q4_K || T == IL_DTYPE_Q5_K || T == IL_DTYPE_Q5_1) memcpy(p + 2, &m, 2);
      }
    }
    if (T == IL_DTYPE_BF16) /* keep bf16 values finite: clear the top exponent bit */
      for (size_t i = 1; i < row_bytes; i += 2) row[i] &= 0xBF;
    if (ref(t, row, want, n_in) != 0) {
      snprintf(err, nerr, "%s: the reference dequantizer refused a row of %lld", il_dtype_name(t),
               (long long)n_in);
      return 1;
    }
    for (int64_t u = 0; u < il__n_units(n_in); u++) {
      float v[32];
      const int n = il__unit<T>(row, u, n_in, v);
      const int expect = n_in - u * 32 < 32 ? (int)(n_in - u * 32) : 32;
      if (n != expect) {
        snprintf(err, nerr, "%s: unit %lld has %d values, expected %d", il_dtype_name(t), (long long)u, n, expect);
        return 1;
      }
      for (int j = 0; j < n; j++) got[u * 32 + j] = v[j];
    }
    for (int64_t i = 0; i < n_in; i++)
      if (memcmp(&got[i], &want[i], 4) != 0) {
        snprintf(err, nerr, "%s: element %lld decodes to %.9g on the CUDA path, %.9g in the reference (trial %d)",
                 il_dtype_name(t), (long long)i, got[i], want[i], trial);
        return 1;
      }
  }
  return 0;
}

/* matvec version 2's per-block arithmetic: words, nibble order, dp4a, the Q4_0 offset and the
 * Q4_1 min, against sum_j w_j * (d_x * q_j) with w from the reference dequantizer. */
template <int T>
static int il__check_q8_dot(il__cu_ref_fn ref, char *err, size_t nerr) {
  const size_t bs = T == IL_DTYPE_Q8_0 ? sizeof(il_block_q8_0) : T == IL_DTYPE_Q4_0 ? sizeof(il_block_q4_0)
                                                                                     : sizeof(il_block_q4_1);
  for (int trial = 0; trial < 64; trial++) {
    uint8_t blk[64];
    for (size_t i = 0; i < bs; i++) blk[i] = (uint8_t)il__next();
    const uint16_t d = il_f32_to_fp16(((int)(il__next() % 2001) - 1000) * 1e-4f);
    const uint16_t m = il_f32_to_fp16(((int)(il__next() % 2001) - 1000) * 1e-4f);
    memcpy(blk, &d, 2);
    if (T == IL_DTYPE_Q4_1) memcpy(blk + 2, &m, 2);
    float wref[32], x[32];
    if (ref((il_dtype)T, blk, wref, 32) != 0) {
      snprintf(err, nerr, "%s: the reference dequantizer refused a block", il_dtype_name((il_dtype)T));
      return 1;
    }
    float amax = 0;
    for (int j = 0; j < 32; j++) {
      x[j] = ((int)(il__next() % 20001) - 10000) * 1e-3f * (trial % 4 == 3 ? 0.0f : 1.0f);
      amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    }
    const float dx = amax / 127.0f, id = dx != 0.0f ? 1.0f / dx : 0.0f;
    int8_t q[32];
    int sx = 0;
    for (int j = 0; j < 32; j++) {
      const int v = il__quant_one(x[j], id);
      if (v < -127 || v > 127 || fabsf(dx * v - x[j]) > dx * 0.5001f) {
        snprintf(err, nerr, "activation quantization: %.9g -> %d with scale %.9g", x[j], v, dx);
        return 1;
      }
      q[j] = (int8_t)v;
      sx += v;
    }
    int xw[8], wq[8];
    memcpy(xw, q, 32);
    float mw;
    const float dw = il__block_words<T>(blk, wq, &mw);
    const float got = il__block_dot<T>(wq, dw, mw, xw, dx, sx);
    double want = 0, mag = 0;
    for (int j = 0; j < 32; j++) want += (double)wref[j] * dx * q[j], mag += fabs((double)wref[j] * dx * q[j]);
    if (fabs(got - want) > 1e-5 * mag + 1e-30) {
      snprintf(err, nerr, "%s block dot (matvec v2): %.9g, reference %.9g (trial %d)", il_dtype_name((il_dtype)T), got,
               want, trial);
      return 1;
    }
  }
  return 0;
}

/* KV cells of type T: a row of 96 values (three Q8_0 blocks: ordinary values, an all-zero block,
 * and one with a tiny maximum whose scale is subnormal in F16) written as kv.cu writes it, then
 * read back as the attention kernels read it. */
template <int T>
static int il__check_kv(il__cu_ref_fn ref, il__cu_qref_fn qref, char *err, size_t nerr) {
  const il_dtype t = (il_dtype)T;
  enum { N = 96 };
  for (int trial = 0; trial < 16; trial++) {
    float x[N], want[N];
    for (int i = 0; i < N; i++) x[i] = ((int)(il__next() % 200001) - 100000) * 1e-4f * (trial % 4 + 1);
    for (int i = 32; i < 64; i++) x[i] = 0.0f;
    for (int i = 64; i < 96; i++) x[i] *= 1e-9f;
    uint8_t got_row[N * 4], want_row[N * 4];
    size_t bytes = 0;
    if (T == IL_DTYPE_Q8_0) {
      for (int b = 0; b < N / 32; b++) {
        float amax = 0.0f, d;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float id = il__q8_inverse(amax, &d);
        const uint16_t h = il__f16_bits(d);
        memcpy(got_row + b * 34, &h, 2);
        for (int j = 0; j < 32; j++) got_row[b * 34 + 2 + j] = (uint8_t)il__q8_value(x[b * 32 + j], id);
      }
      bytes = N / 32 * 34;
    } else {
      for (int i = 0; i < N; i++) {
        const uint16_t h = T == IL_DTYPE_BF16 ? il__bf16_bits(x[i]) : il__f16_bits(x[i]);
        memcpy(got_row + 2 * i, &h, 2);
      }
      bytes = N * 2;
    }
    if (qref(t, x, want_row, N) != 0 || ref(t, want_row, want, N) != 0) {
      snprintf(err, nerr, "%s: the reference refused a KV row", il_dtype_name(t));
      return 1;
    }
    if (memcmp(got_row, want_row, bytes) != 0) {
      size_t i = 0;
      while (got_row[i] == want_row[i]) i++;
      snprintf(err, nerr, "%s KV cells (kv.cu): byte %zu is 0x%02x, the reference quantizer writes 0x%02x (trial %d)",
               il_dtype_name(t), i, got_row[i], want_row[i], trial);
      return 1;
    }
    for (int i = 0; i < N; i++) {
      const float v = il__kv_elem<T>(want_row, i);
      if (memcmp(&v, &want[i], 4) != 0) {
        snprintf(err, nerr, "%s KV cells (attention): element %d reads %.9g, the reference %.9g (trial %d)",
                 il_dtype_name(t), i, v, want[i], trial);
        return 1;
      }
    }
  }
  return 0;
}

extern "C" int il__cu_selftest(il__cu_ref_fn ref, il__cu_qref_fn qref, char *err, size_t nerr) {
  int bad = 0;
  bad = bad || il__check_type<IL_DTYPE_F32>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_F16>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_BF16>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q8_0>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q4_0>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q4_1>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q4_K>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q5_K>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q6_K>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q5_0>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_Q5_1>(ref, err, nerr);
  bad = bad || il__check_type<IL_DTYPE_IQ4_NL>(ref, err, nerr);
  bad = bad || il__check_q8_dot<IL_DTYPE_Q8_0>(ref, err, nerr);
  bad = bad || il__check_q8_dot<IL_DTYPE_Q4_0>(ref, err, nerr);
  bad = bad || il__check_q8_dot<IL_DTYPE_Q4_1>(ref, err, nerr);
  bad = bad || il__check_kv<IL_DTYPE_F16>(ref, qref, err, nerr);
  bad = bad || il__check_kv<IL_DTYPE_BF16>(ref, qref, err, nerr);
  bad = bad || il__check_kv<IL_DTYPE_Q8_0>(ref, qref, err, nerr);
  return bad;
}
