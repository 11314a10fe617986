/* core/quant: scalar reference conversion between float and every tensor type.
 *
 * Dequantization follows ggml's dequantize_row_* exactly (including the K-quant scale packing of
 * get_scale_min_k4), and quantization follows ggml's *_ref quantizers for F16, BF16, Q8_0, Q4_0
 * and Q4_1, so a tensor written here has the same bytes llama.cpp would write from the same
 * floats. K-quant quantization is not implemented (IL_ERR_UNSUPPORTED): those types are read only.
 * Rows need no alignment: blocks are copied through memcpy.
 * Not for: speed (backend/cpu/matmul has the SIMD paths).
 */
#include "core/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

static float il__h(const uint8_t *p) {
  uint16_t u;
  memcpy(&u, p, 2);
  return il_fp16_to_f32(u);
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

il_status il_dequantize_row(il_dtype t, const void *src, float *dst, int64_t n) {
  IL_TRY(il__check(t, n, "dequantize"));
  const uint8_t *s = src;
  switch (t) {
  case IL_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return IL_OK;
  case IL_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = il__h(s + 2 * i);
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
    return true;
  default:
    return false;
  }
}

/* float -> int in [lo, hi], truncating toward zero like the (int8_t) casts of ggml's reference
 * code (then clamped as it clamps), but defined for every input: a value outside the range (a
 * subnormal scale gives an infinite inverse, 0 x inf is NaN) is clamped instead of being
 * undefined behaviour. */
static int il__to_int(float v, int lo, int hi) {
  if (!(v > (float)lo)) return lo; /* also NaN (rejected earlier; defensive) */
  if (v >= (float)hi) return hi;
  return (int)v;
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
    for (int j = 0; j < IL_QK; j++) out.qs[j] = (int8_t)il__to_int(roundf(x[i * IL_QK + j] * id), -128, 127);
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
      int q0 = il__to_int(x0 + 8.5f, 0, 15), q1 = il__to_int(x1 + 8.5f, 0, 15); /* x0 is in [-8, 8] */
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
      int q0 = il__to_int(x0 + 0.5f, 0, 15), q1 = il__to_int(x1 + 0.5f, 0, 15); /* x0 is in [0, 15] */
      out.qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
    memcpy(dst + (size_t)i * sizeof out, &out, sizeof out); /* dst need not be aligned */
  }
}

il_status il_quantize_row(il_dtype t, const float *src, void *dst, int64_t n) {
  IL_TRY(il__check(t, n, "quantize"));
  uint8_t *d = dst;
  if (t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q4_0 || t == IL_DTYPE_Q4_1) /* block scales need finite values */
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(src[i]))
        return il_error(IL_ERR_FORMAT, "element %lld is %s: cannot quantize to %s", (long long)i,
                        isnan(src[i]) ? "NaN" : "infinite", il_dtype_name(t));
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
  default:
    return il_error(IL_ERR_UNSUPPORTED, "quantize: writing %s is not implemented (read-only type)",
                    il_dtype_name(t));
  }
}
