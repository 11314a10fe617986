/* core/quant: scalar reference conversion between float and every tensor type.
 *
 * Dequantization follows ggml's dequantize_row_* exactly (including the K-quant scale packing of
 * get_scale_min_k4), and quantization follows ggml's *_ref quantizers for F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0 and Q5_1, ggml's non-imatrix K-quant quantizers (quantize_row_q4_K_ref, _q5_K_ref,
 * _q6_K_ref: the same weighted scale search in the same float operations, in the same order) and
 * quantize_iq4_nl without importance weights (llama-quantize's IQ4_NL path),
 * so a tensor written here has the same bytes llama.cpp (llama-quantize without an importance
 * matrix) writes from the same floats. This file is compiled as ISO C (no FMA contraction),
 * like ggml-base, so the float rounding matches too.
 * A non-finite input (NaN, Inf) to a block type is IL_ERR_FORMAT naming the element: one
 * NaN would poison the scale of its whole block. Rows need no alignment: blocks are copied
 * through memcpy.
 * Not for: speed (backend/cpu/matmul has the SIMD paths).
 */
#include "core/quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* fp16 -> f32 for whole rows through a 256 KiB table (filled once from il_fp16_to_f32, so
 * exact): converting an f16 model is dominated by this otherwise (~20% of q8_0's time). */
static float il__f16_table[65536];
static pthread_once_t il__f16_once = PTHREAD_ONCE_INIT;
static void il__f16_fill(void) {
  for (uint32_t u = 0; u < 65536; u++) il__f16_table[u] = il_fp16_to_f32((uint16_t)u);
}

static il_status il__check(il_dtype t, int64_t n, const char *what) {
  const il_dtype_info *ti = il_dtype_get((uint32_t)t);
  if (!ti) return il_error(IL_ERR_UNSUPPORTED, "%s: unknown tensor type id %u", what, (unsigned)t);
  if (n < 0 || n % ti->blck != 0)
    return il_error(IL_ERR_INVALID_ARG, "%s: row of %lld elements is not a multiple of the %s block size %u",
                    what, (long long)n, ti->name, ti->blck);
  return IL_OK;
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block (ggml's
 * get_scale_min_k4): j < 4 in the low 6 bits of q[j], q[j+4]; j >= 4 split across nibbles of
 * q[j+4] and the top 2 bits of q[j-4], q[j]. */
static void il__scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

static void il__deq_q4_k(const uint8_t *src, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q4_K blk; /* copied: rows need not be 2-byte aligned */
    memcpy(&blk, src + (size_t)i * sizeof blk, sizeof blk);
    const il_block_q4_K *x = &blk;
    const uint8_t *q = x->qs;
    const float d = il_fp16_to_f32(x->d), min = il_fp16_to_f32(x->dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < IL_QK_K; j += 64) {
      il__scale_min_k4(is + 0, x->scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      il__scale_min_k4(is + 1, x->scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

static void il__deq_q5_k(const uint8_t *src, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q5_K blk; /* copied: rows need not be 2-byte aligned */
    memcpy(&blk, src + (size_t)i * sizeof blk, sizeof blk);
    const il_block_q5_K *x = &blk;
    const uint8_t *ql = x->qs, *qh = x->qh;
    const float d = il_fp16_to_f32(x->d), min = il_fp16_to_f32(x->dmin);
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < IL_QK_K; j += 64) {
      il__scale_min_k4(is + 0, x->scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      il__scale_min_k4(is + 1, x->scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = (uint8_t)(u1 << 2);
      u2 = (uint8_t)(u2 << 2);
    }
  }
}

static void il__deq_q6_k(const uint8_t *src, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q6_K blk; /* copied: rows need not be 2-byte aligned */
    memcpy(&blk, src + (size_t)i * sizeof blk, sizeof blk);
    const il_block_q6_K *x = &blk;
    const float d = il_fp16_to_f32(x->d);
    const uint8_t *ql = x->ql, *qh = x->qh;
    const int8_t *sc = x->scales;
    for (int n = 0; n < IL_QK_K; n += 128) {
      for (int l = 0; l < 32; l++) {
        int is = l / 16;
        const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

/* Q5_0 (x = d * (q - 16)) and Q5_1 (x = d * q + m): the 5th bit of element j is bit j of qh. */
static void il__deq_q5(bool q51, const uint8_t *src, float *y, int64_t nb) {
  for (int64_t b = 0; b < nb; b++, y += IL_QK) {
    float d, m = 0.0f;
    uint32_t qh;
    const uint8_t *qs;
    uint8_t buf[sizeof(il_block_q5_1)];
    if (q51) {
      memcpy(buf, src + (size_t)b * sizeof(il_block_q5_1), sizeof(il_block_q5_1));
      const il_block_q5_1 *x = (const il_block_q5_1 *)buf;
      d = il_fp16_to_f32(x->d);
      m = il_fp16_to_f32(x->m);
      memcpy(&qh, x->qh, 4);
      qs = x->qs;
    } else {
      memcpy(buf, src + (size_t)b * sizeof(il_block_q5_0), sizeof(il_block_q5_0));
      const il_block_q5_0 *x = (const il_block_q5_0 *)buf;
      d = il_fp16_to_f32(x->d);
      memcpy(&qh, x->qh, 4);
      qs = x->qs;
    }
    for (int j = 0; j < IL_QK / 2; j++) {
      const int q0 = (qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
      const int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      if (q51) {
        y[j] = q0 * d + m;
        y[j + IL_QK / 2] = q1 * d + m;
      } else {
        y[j] = (q0 - 16) * d;
        y[j + IL_QK / 2] = (q1 - 16) * d;
      }
    }
  }
}

il_status il_dequantize_row(il_dtype t, const void *src, float *dst, int64_t n) {
  IL_TRY(il__check(t, n, "dequantize"));
  const uint8_t *s = src;
  switch (t) {
  case IL_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return IL_OK;
  case IL_DTYPE_F16:
    pthread_once(&il__f16_once, il__f16_fill);
    for (int64_t i = 0; i < n; i++) {
      uint16_t u;
      memcpy(&u, s + 2 * i, 2);
      dst[i] = il__f16_table[u];
    }
    return IL_OK;
  case IL_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) {
      uint16_t u;
      memcpy(&u, s + 2 * i, 2);
      dst[i] = il_bf16_to_f32(u);
    }
    return IL_OK;
  case IL_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / IL_QK; b++) {
      il_block_q8_0 blk;
      memcpy(&blk, s + (size_t)b * sizeof blk, sizeof blk);
      const il_block_q8_0 *x = &blk;
      const float d = il_fp16_to_f32(x->d);
      for (int j = 0; j < IL_QK; j++) dst[b * IL_QK + j] = x->qs[j] * d;
    }
    return IL_OK;
  case IL_DTYPE_Q4_0:
    for (int64_t b = 0; b < n / IL_QK; b++) {
      il_block_q4_0 blk;
      memcpy(&blk, s + (size_t)b * sizeof blk, sizeof blk);
      const il_block_q4_0 *x = &blk;
      const float d = il_fp16_to_f32(x->d);
      for (int j = 0; j < IL_QK / 2; j++) {
        dst[b * IL_QK + j] = ((x->qs[j] & 0x0F) - 8) * d;
        dst[b * IL_QK + j + IL_QK / 2] = ((x->qs[j] >> 4) - 8) * d;
      }
    }
    return IL_OK;
  case IL_DTYPE_Q4_1:
    for (int64_t b = 0; b < n / IL_QK; b++) {
      il_block_q4_1 blk;
      memcpy(&blk, s + (size_t)b * sizeof blk, sizeof blk);
      const il_block_q4_1 *x = &blk;
      const float d = il_fp16_to_f32(x->d), m = il_fp16_to_f32(x->m);
      for (int j = 0; j < IL_QK / 2; j++) {
        dst[b * IL_QK + j] = (x->qs[j] & 0x0F) * d + m;
        dst[b * IL_QK + j + IL_QK / 2] = (x->qs[j] >> 4) * d + m;
      }
    }
    return IL_OK;
  case IL_DTYPE_Q5_0:
  case IL_DTYPE_Q5_1:
    il__deq_q5(t == IL_DTYPE_Q5_1, s, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_IQ4_NL:
    for (int64_t b = 0; b < n / IL_QK; b++) {
      il_block_iq4_nl x;
      memcpy(&x, s + (size_t)b * sizeof x, sizeof x);
      const float d = il_fp16_to_f32(x.d);
      for (int j = 0; j < IL_QK / 2; j++) {
        dst[b * IL_QK + j] = d * il_iq4nl_values[x.qs[j] & 0x0F];
        dst[b * IL_QK + j + IL_QK / 2] = d * il_iq4nl_values[x.qs[j] >> 4];
      }
    }
    return IL_OK;
  case IL_DTYPE_Q4_K:
    il__deq_q4_k(src, dst, n / IL_QK_K);
    return IL_OK;
  case IL_DTYPE_Q5_K:
    il__deq_q5_k(src, dst, n / IL_QK_K);
    return IL_OK;
  case IL_DTYPE_Q6_K:
    il__deq_q6_k(src, dst, n / IL_QK_K);
    return IL_OK;
  default:
    return il_error(IL_ERR_UNSUPPORTED, "dequantize: no conversion from %s", il_dtype_name(t));
  }
}

bool il_quantize_supported(il_dtype t) {
  switch (t) {
  case IL_DTYPE_F32:
  case IL_DTYPE_F16:
  case IL_DTYPE_BF16:
  case IL_DTYPE_Q8_0:
  case IL_DTYPE_Q4_0:
  case IL_DTYPE_Q4_1:
  case IL_DTYPE_Q4_K:
  case IL_DTYPE_Q5_K:
  case IL_DTYPE_Q6_K:
  case IL_DTYPE_Q5_0:
  case IL_DTYPE_Q5_1:
  case IL_DTYPE_IQ4_NL:
    return true;
  default:
    return false;
  }
}

/* float -> int8 as ggml's reference code computes it on x86: the (int8_t) cast of a float is a
 * cvttss2si (truncation; NaN and values beyond the int range give INT_MIN) followed by keeping
 * the low byte. Written without undefined behaviour: the float -> int conversion only runs in
 * range, and the int -> int8 step is the implementation-defined modulo gcc and clang do. So the
 * bytes match llama.cpp's even for degenerate blocks (a subnormal scale gives an infinite
 * inverse, 0 x inf is NaN), and the sanitizers stay quiet. */
static int il__to_int8(float v) {
  const int i = (v > -2147483648.0f && v < 2147483648.0f) ? (int)v : INT32_MIN;
  return (int8_t)(uint8_t)((unsigned)i & 0xffu);
}

/* ggml's quantize_row_q8_0_ref: d = amax/127 stored as fp16, q = round(x / d) (half away from
 * zero, like roundf), using the float d before fp16 rounding. */
static void il__q8_0(const float *x, uint8_t *dst, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q8_0 out;
    float amax = 0.0f;
    for (int j = 0; j < IL_QK; j++) amax = fmaxf(amax, fabsf(x[i * IL_QK + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = il_f32_to_fp16(d);
    for (int j = 0; j < IL_QK; j++) out.qs[j] = (int8_t)il__to_int8(roundf(x[i * IL_QK + j] * id));
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out); /* dst need not be aligned */
  }
}

/* ggml's quantize_row_q4_0_ref: the element of largest magnitude (with its sign) maps to -8, so
 * d = max / -8; q = min(15, (int8)(x / d + 8.5)). */
static void il__q4_0(const float *x, uint8_t *dst, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q4_0 out;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < IL_QK; j++) {
      const float v = x[i * IL_QK + j];
      if (amax < fabsf(v)) {
        amax = fabsf(v);
        max = v;
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = il_f32_to_fp16(d);
    for (int j = 0; j < IL_QK / 2; j++) {
      const float x0 = x[i * IL_QK + j] * id, x1 = x[i * IL_QK + IL_QK / 2 + j] * id;
      int q0 = il__to_int8(x0 + 8.5f), q1 = il__to_int8(x1 + 8.5f); /* x0 is in [-8, 8] */
      if (q0 > 15) q0 = 15;
      if (q1 > 15) q1 = 15;
      out.qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out); /* dst need not be aligned */
  }
}

/* ggml's quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = min(15, (int8)((x - min)/d + 0.5)). */
static void il__q4_1(const float *x, uint8_t *dst, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    il_block_q4_1 out;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < IL_QK; j++) {
      const float v = x[i * IL_QK + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = il_f32_to_fp16(d);
    out.m = il_f32_to_fp16(min);
    for (int j = 0; j < IL_QK / 2; j++) {
      const float x0 = (x[i * IL_QK + j] - min) * id, x1 = (x[i * IL_QK + IL_QK / 2 + j] - min) * id;
      int q0 = il__to_int8(x0 + 0.5f), q1 = il__to_int8(x1 + 0.5f); /* x0 is in [0, 15] */
      if (q0 > 15) q0 = 15;
      if (q1 > 15) q1 = 15;
      out.qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out); /* dst need not be aligned */
  }
}

#define IL__MAX(a, b) ((a) > (b) ? (a) : (b))
#define IL__MIN(a, b) ((a) < (b) ? (a) : (b))
#define IL__GROUP_MAX_EPS 1e-15f

/* ggml's quantize_row_q5_0_ref: as Q4_0 with 32 levels: d = max / -16, q = min(31, (int8)(x / d
 * + 16.5)); the 5th bits of elements 0..31 go to bits 0..31 of qh. */
static void il__q5_0(const float *x, uint8_t *dst, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += IL_QK) {
    il_block_q5_0 out;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < IL_QK; j++) {
      if (amax < fabsf(x[j])) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = il_f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < IL_QK / 2; j++) {
      int q0 = il__to_int8(x[j] * id + 16.5f), q1 = il__to_int8(x[IL_QK / 2 + j] * id + 16.5f);
      if (q0 > 31) q0 = 31;
      if (q1 > 31) q1 = 31;
      const unsigned u0 = (uint8_t)q0, u1 = (uint8_t)q1; /* ggml stores MIN(31, int8) as uint8 */
      out.qs[j] = (uint8_t)((u0 & 0x0F) | ((u1 & 0x0F) << 4));
      qh |= ((u0 & 0x10u) >> 4) << j;
      qh |= ((u1 & 0x10u) >> 4) << (j + IL_QK / 2);
    }
    memcpy(out.qh, &qh, 4);
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);
  }
}

/* ggml's quantize_row_q5_1_ref: d = (max - min) / 31, m = min, q = (uint8)((x - min) / d + 0.5),
 * not clamped (the largest element gives 31 at most). */
static void il__q5_1(const float *x, uint8_t *dst, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += IL_QK) {
    il_block_q5_1 out;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < IL_QK; j++) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = il_f32_to_fp16(d);
    out.m = il_f32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < IL_QK / 2; j++) {
      const unsigned u0 = (uint8_t)il__to_int8((x[j] - min) * id + 0.5f);
      const unsigned u1 = (uint8_t)il__to_int8((x[IL_QK / 2 + j] - min) * id + 0.5f);
      out.qs[j] = (uint8_t)((u0 & 0x0F) | ((u1 & 0x0F) << 4));
      qh |= ((u0 & 0x10u) >> 4) << j;
      qh |= ((u1 & 0x10u) >> 4) << (j + IL_QK / 2);
    }
    memcpy(out.qh, &qh, 4);
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);
  }
}

/* ggml's best_index_int8: the index of the level nearest x in the sorted table val[16] (ties
 * to the upper one). */
static int il__best_index_iq4(float x) {
  const int8_t *val = il_iq4nl_values;
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav;
    else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_iq4_nl without an importance matrix, the function llama-quantize calls (not
 * quantize_row_iq4_nl_ref, which skips the search): per block of 32, weights x^2, a first scale
 * from the element of largest magnitude mapped to the lowest level, refined by least squares,
 * then 15 more candidate scales (itry - 127) / max, each fitted the same way; the best fit's
 * scale is stored and every element re-quantized against it. */
static void il__iq4_nl(const float *x, uint8_t *dst, int64_t nb) {
  const int8_t *values = il_iq4nl_values;
  const int ntry = 7;
  for (int64_t i = 0; i < nb; i++, x += IL_QK) {
    il_block_iq4_nl out;
    uint8_t L[IL_QK];
    float weight[IL_QK];
    for (int j = 0; j < IL_QK; j++) weight[j] = x[j] * x[j];
    float amax = 0, max = 0;
    for (int j = 0; j < IL_QK; j++) {
      const float ax = fabsf(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    float scale = 0.0f;
    if (amax >= IL__GROUP_MAX_EPS) {
      float d = -max / values[0];
      float id = 1 / d;
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < IL_QK; j++) {
        const float q = values[il__best_index_iq4(id * x[j])];
        const float w = weight[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
      float best = d * sumqx;
      for (int itry = -ntry; itry <= ntry; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < IL_QK; j++) {
          const float q = values[il__best_index_iq4(id * x[j])];
          const float w = weight[j];
          sumqx += w * q * x[j];
          sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
      scale = d;
    }
    out.d = il_f32_to_fp16(scale);
    const float id = scale ? 1 / scale : 0;
    for (int j = 0; j < IL_QK; j++) L[j] = (uint8_t)il__best_index_iq4(id * x[j]);
    for (int j = 0; j < IL_QK / 2; j++) out.qs[j] = (uint8_t)(L[j] | (L[16 + j] << 4));
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out);
  }
}

/* ---------------------------------------------------------------- K-quants (ggml's _ref path) */

/* ggml's nearest_int: round half to even through the float mantissa (|v| <= 4194303). */
static inline int il__nearest_int(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}


/* ggml's make_qx_quants with rmse_type 1 and no importance weights (weights x^2): a symmetric
 * scale for n values on levels [-nmax, nmax-1], tried at 19 candidate scales around nmax/max;
 * L gets the levels + nmax. Returns the scale. */
static float il__make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < IL__GROUP_MAX_EPS) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = il__nearest_int(iscale * x[i]);
    l = IL__MAX(-nmax, IL__MIN(nmax - 1, l));
    L[i] = (int8_t)(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = il__nearest_int(iscale * x[i]);
      l = IL__MAX(-nmax, IL__MIN(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = il__nearest_int(iscale * x[i]);
        L[i] = (int8_t)(nmax + IL__MAX(-nmax, IL__MIN(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* ggml's make_qkx2_quants (squared error): scale and min for n values on levels [0, nmax],
 * starting from (max - min) / nmax and trying nstep + 1 scales (rmin + rdelta*is + nmax) /
 * (max - min) with a weighted least-squares fit of scale and min each. Returns the scale;
 * *the_min gets -min (>= 0). */
static float il__make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                                  uint8_t *Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = il__nearest_int(iscale * (x[i] - min));
    L[i] = (uint8_t)IL__MAX(0, IL__MIN(nmax, l));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = il__nearest_int(iscale * (x[i] - min));
      l = IL__MAX(0, IL__MIN(nmax, l));
      Laux[i] = (uint8_t)l;
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/* The Q4_K/Q5_K scale search shared by both: 8 sub-blocks of 32 with weights av_x + |x|,
 * 6-bit scales and mins relative to the largest of each, packed as get_scale_min_k4 reads
 * them; then every element is re-quantized against the rounded scales into L[256]. */
static void il__k_scales(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t scales_out[12],
                         uint16_t *d_out, uint16_t *dmin_out, uint8_t L[IL_QK_K]) {
  uint8_t Laux[32];
  float weights[32], mins[IL_QK_K / 32], scales[IL_QK_K / 32];
  float max_scale = 0, max_min = 0; /* the min is subtracted, so scales are never negative */
  for (int j = 0; j < IL_QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
    scales[j] = il__make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < IL_QK_K / 32; ++j) {
    uint8_t ls = (uint8_t)il__nearest_int(inv_scale * scales[j]);
    uint8_t lm = (uint8_t)il__nearest_int(inv_min * mins[j]);
    ls = IL__MIN(63, ls);
    lm = IL__MIN(63, lm);
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
      scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  *d_out = il_f32_to_fp16(max_scale / 63.f);
  *dmin_out = il_f32_to_fp16(max_min / 63.f);
  const float dd = il_fp16_to_f32(*d_out), dmin = il_fp16_to_f32(*dmin_out);
  for (int j = 0; j < IL_QK_K / 32; ++j) {
    uint8_t sc, m;
    il__scale_min_k4(j, scales_out, &sc, &m);
    const float d = dd * sc;
    if (!d) continue;
    const float dm = dmin * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = il__nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = (uint8_t)IL__MAX(0, IL__MIN(nmax, l));
    }
  }
}

/* ggml's quantize_row_q4_K_ref. */
static void il__q4_k(const float *x, uint8_t *dst, int64_t nb) {
  uint8_t L[IL_QK_K];
  for (int64_t i = 0; i < nb; i++, x += IL_QK_K) {
    il_block_q4_K y;
    memset(&y, 0, sizeof y);
    il__k_scales(x, 15, -1.f, 0.1f, 20, y.scales, &y.d, &y.dmin, L);
    uint8_t *q = y.qs;
    for (int j = 0; j < IL_QK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
    memcpy(dst + (size_t)i * sizeof y, &y, sizeof y);
  }
}

/* ggml's quantize_row_q5_K_ref: as Q4_K with 31 levels; the 5th bits go to qh. */
static void il__q5_k(const float *x, uint8_t *dst, int64_t nb) {
  uint8_t L[IL_QK_K];
  for (int64_t i = 0; i < nb; i++, x += IL_QK_K) {
    il_block_q5_K y;
    memset(&y, 0, sizeof y);
    il__k_scales(x, 31, -0.5f, 0.1f, 15, y.scales, &y.d, &y.dmin, L);
    uint8_t *qh = y.qh, *ql = y.qs;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < IL_QK_K; n += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = (uint8_t)(l1 | (l2 << 4));
      }
      m1 = (uint8_t)(m1 << 2);
      m2 = (uint8_t)(m2 << 2);
      ql += 32;
    }
    memcpy(dst + (size_t)i * sizeof y, &y, sizeof y);
  }
}

/* ggml's quantize_row_q6_K_ref: 16 sub-blocks of 16 with symmetric scales from make_qx_quants
 * (levels -32..31), stored as int8 relative to the largest magnitude (-128 maps to it). */
static void il__q6_k(const float *x, uint8_t *dst, int64_t nb) {
  int8_t L[IL_QK_K];
  float scales[IL_QK_K / 16];
  for (int64_t i = 0; i < nb; i++, x += IL_QK_K) {
    il_block_q6_K y;
    memset(&y, 0, sizeof y);
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < IL_QK_K / 16; ++ib) {
      const float scale = il__make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      if (fabsf(scale) > max_abs_scale) {
        max_abs_scale = fabsf(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < IL__GROUP_MAX_EPS) { /* all (near) zero: an all-zero block */
      memcpy(dst + (size_t)i * sizeof y, &y, sizeof y);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y.d = il_f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < IL_QK_K / 16; ++ib) y.scales[ib] = (int8_t)IL__MIN(127, il__nearest_int(iscale * scales[ib]));
    const float dd = il_fp16_to_f32(y.d);
    for (int j = 0; j < IL_QK_K / 16; ++j) {
      const float d = dd * y.scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = il__nearest_int(x[16 * j + ii] / d);
        l = IL__MAX(-32, IL__MIN(31, l));
        L[16 * j + ii] = (int8_t)(l + 32);
      }
    }
    uint8_t *ql = y.ql, *qh = y.qh;
    for (int j = 0; j < IL_QK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                      q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
        ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
        qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                          ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
    memcpy(dst + (size_t)i * sizeof y, &y, sizeof y);
  }
}

il_status il_quantize_row(il_dtype t, const float *src, void *dst, int64_t n) {
  IL_TRY(il__check(t, n, "quantize"));
  if (il_dtype_get((uint32_t)t)->quantized) /* block scales need finite values: bad data, not a bad call */
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(src[i]))
        return il_error(IL_ERR_FORMAT, "quantize to %s: element %lld is %s (a block type cannot store it)",
                        il_dtype_name(t), (long long)i, isnan(src[i]) ? "nan" : "inf");
  uint8_t *d = dst;
  switch (t) {
  case IL_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return IL_OK;
  case IL_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) {
      uint16_t h = il_f32_to_fp16(src[i]);
      memcpy(d + 2 * i, &h, 2);
    }
    return IL_OK;
  case IL_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) {
      uint16_t h = il_f32_to_bf16(src[i]);
      memcpy(d + 2 * i, &h, 2);
    }
    return IL_OK;
  case IL_DTYPE_Q8_0:
    il__q8_0(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_Q4_0:
    il__q4_0(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_Q4_1:
    il__q4_1(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_Q5_0:
    il__q5_0(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_Q5_1:
    il__q5_1(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_IQ4_NL:
    il__iq4_nl(src, dst, n / IL_QK);
    return IL_OK;
  case IL_DTYPE_Q4_K:
    il__q4_k(src, dst, n / IL_QK_K);
    return IL_OK;
  case IL_DTYPE_Q5_K:
    il__q5_k(src, dst, n / IL_QK_K);
    return IL_OK;
  case IL_DTYPE_Q6_K:
    il__q6_k(src, dst, n / IL_QK_K);
    return IL_OK;
  default:
    return il_error(IL_ERR_UNSUPPORTED, "quantize: writing %s is not implemented (read-only type)",
                    il_dtype_name(t));
  }
}
