/* backend/cpu/matmul_scalar: the plain C matmul kernels and activation quantizers.
 *
 * They read the same quantized activations as the SIMD kernels (layouts in kernels.h), so the
 * tests compare every SIMD level and the blocked GEMM with them to float-rounding precision;
 * they are also the fallback on CPUs without AVX2 and for types a level has no kernel for.
 * Written for clarity, not speed: one output at a time, blocks in order.
 * Not for: dispatch and threading (matmul.c), SIMD (matmul_avx2.c, matmul_avx512.c).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"

/* ---------------------------------------------------------------- scalar activation quantization */

/* d = amax/127 and q = round-half-even(x/d): the SIMD quantizers compute the same bits.
 * Rounding adds and subtracts 1.5*2^23, which rounds to the nearest integer, ties to even, for
 * |v| < 2^22 like cvtps2dq does (lrintf would be a libm call per element: ~10 us per 2048). */
static float il__quant_block(const float *x, int n, int8_t *q) {
  float amax = 0.0f;
  for (int j = 0; j < n; j++) {
    const float a = fabsf(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float magic = 12582912.0f;
  for (int j = 0; j < n; j++) q[j] = (int8_t)(int)((x[j] * id + magic) - magic);
  return d;
}

static void il__quant_a32(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t nb = a->n_in / IL_QK;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t t = u / nb, b = u % nb;
    uint8_t *row = a->act + (size_t)t * a->act_stride;
    float *dp = (float *)(row + il__act_d_off(a->n_in));
    uint8_t *aux = row + il__act_aux_off(a->n_in, IL_QK);
    int8_t q[IL_QK];
    const float d = il__quant_block(a->x + t * a->n_in + b * IL_QK, IL_QK, q);
    int32_t sum = 0;
    for (int j = 0; j < IL_QK; j++) sum += q[j];
    dp[b] = d;
    if (il__is_a32n(a->type)) {
      memcpy(row + b * IL_QK, q, IL_QK);
      int32_t v = -128 * sum;
      memcpy(aux + 4 * b, &v, 4);
    } else {
      for (int j = 0; j < IL_QK; j++) row[il__act_q4_pos(b, j, nb)] = (uint8_t)q[j];
      if (a->type == IL_DTYPE_Q4_0) {
        int32_t v = -8 * sum;
        memcpy(aux + 4 * b, &v, 4);
      } else {
        float v = d * (float)sum;
        memcpy(aux + 4 * b, &v, 4);
      }
    }
  }
}

static void il__quant_ak(const il__mm_args *a, int64_t u0, int64_t u1) {
  const int64_t nb = a->n_in / IL_QK_K;
  for (int64_t u = u0; u < u1; u++) {
    const int64_t t = u / nb, b = u % nb;
    uint8_t *row = a->act + (size_t)t * a->act_stride;
    int8_t *q = (int8_t *)row + b * IL_QK_K;
    float *dp = (float *)(row + il__act_d_off(a->n_in));
    int16_t *bs16 = (int16_t *)(row + il__act_aux_off(a->n_in, IL_QK_K)) + 16 * b;
    int16_t *bs32 = (int16_t *)(row + il__act_bsum32_off(a->n_in)) + 8 * b;
    dp[b] = il__quant_block(a->x + t * a->n_in + b * IL_QK_K, IL_QK_K, q);
    for (int s = 0; s < 16; s++) {
      int sum = 0;
      for (int j = 0; j < 16; j++) sum += q[16 * s + j];
      bs16[s] = (int16_t)sum;
    }
    for (int s = 0; s < 8; s++) bs32[s] = (int16_t)(bs16[2 * s] + bs16[2 * s + 1]);
  }
}

/* ---------------------------------------------------------------- scalar kernels */

static float il__h(const uint8_t *p) {
  uint16_t u;
  memcpy(&u, p, 2);
  return il_fp16_to_f32(u);
}

#define IL__FLOAT_ROWS(name, LOADW)                                                          \
  static void name(const il__mm_args *a, int64_t r0, int64_t r1) {                           \
    const int64_t n = a->n_in;                                                               \
    for (int64_t r = r0; r < r1; r++) {                                                      \
      const uint8_t *w = a->w + (size_t)r * a->w_stride;                                     \
      for (int64_t t = 0; t < a->n_tok; t++) {                                               \
        const float *x = a->x + t * n;                                                       \
        float s[8] = {0};                                                                    \
        int64_t k = 0;                                                                       \
        for (; k + 8 <= n; k += 8)                                                           \
          for (int l = 0; l < 8; l++) s[l] += LOADW(w, k + l) * x[k + l];                    \
        for (; k < n; k++) s[0] += LOADW(w, k) * x[k];                                       \
        a->y[t * a->ldy + r] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])); \
      }                                                                                      \
    }                                                                                        \
  }

static inline float il__ld_f32(const uint8_t *w, int64_t k) {
  float v;
  memcpy(&v, w + 4 * k, 4);
  return v;
}
static inline float il__ld_f16(const uint8_t *w, int64_t k) { return il__h(w + 2 * k); }
static inline float il__ld_bf16(const uint8_t *w, int64_t k) {
  uint16_t u;
  memcpy(&u, w + 2 * k, 2);
  return il_bf16_to_f32(u);
}
IL__FLOAT_ROWS(il__rows_f32, il__ld_f32)
IL__FLOAT_ROWS(il__rows_f16, il__ld_f16)
IL__FLOAT_ROWS(il__rows_bf16, il__ld_bf16)

/* Every quantized scalar kernel is a dot product of one weight row with one token's quantized
 * activation row (kernels.h layouts); this runs it for rows [r0, r1) x all tokens. */
typedef float (*il__dot_fn)(const il__mm_args *a, const uint8_t *w, const uint8_t *row);

static void il__rows_each(const il__mm_args *a, int64_t r0, int64_t r1, il__dot_fn dot) {
  for (int64_t r = r0; r < r1; r++)
    for (int64_t t = 0; t < a->n_tok; t++)
      a->y[t * a->ldy + r] = dot(a, a->w + (size_t)r * a->w_stride, a->act + (size_t)t * a->act_stride);
}

static float il__dot_q8_0(const il__mm_args *a, const uint8_t *w, const uint8_t *row) {
  const int64_t nb = a->n_in / IL_QK;
  const float *dx = (const float *)(row + il__act_d_off(a->n_in));
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = w + b * sizeof(il_block_q8_0);
    int32_t is = 0;
    for (int j = 0; j < IL_QK; j++) is += (int8_t)blk[2 + j] * (int8_t)row[b * IL_QK + j];
    sum += (float)is * (il__h(blk) * dx[b]);
  }
  return sum;
}

static float il__dot_q4(const il__mm_args *a, const uint8_t *w, const uint8_t *row) {
  const int64_t nb = a->n_in / IL_QK;
  const bool q41 = a->type == IL_DTYPE_Q4_1;
  const size_t bsz = q41 ? sizeof(il_block_q4_1) : sizeof(il_block_q4_0);
  const int8_t *xq = (const int8_t *)row;
  const float *dx = (const float *)(row + il__act_d_off(a->n_in));
  const uint8_t *aux = row + il__act_aux_off(a->n_in, IL_QK);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = w + b * bsz;
    const uint8_t *qs = blk + (q41 ? 4 : 2);
    int32_t is = 0;
    for (int j = 0; j < 16; j++) {
      is += (qs[j] & 0xF) * xq[il__act_q4_pos(b, j, nb)];
      is += (qs[j] >> 4) * xq[il__act_q4_pos(b, j + 16, nb)];
    }
    if (q41) {
      float s;
      memcpy(&s, aux + 4 * b, 4);
      sum += (float)is * (il__h(blk) * dx[b]) + il__h(blk + 2) * s;
    } else {
      int32_t c;
      memcpy(&c, aux + 4 * b, 4);
      sum += (float)(is + c) * (il__h(blk) * dx[b]);
    }
  }
  return sum;
}

/* Q5_0 (q - 16), Q5_1 (d * q + m) and IQ4_NL (d * level[q]) against the Q8_0 activation
 * layout: an int32 dot product per block, Q5_0's offset from the activation sum (aux / 8 =
 * -16 * sum(x)), Q5_1's min times the activation sum in float. */
static float il__dot_q5_iq4(const il__mm_args *a, const uint8_t *w, const uint8_t *row) {
  const int64_t nb = a->n_in / IL_QK;
  const int8_t *xq = (const int8_t *)row;
  const float *dx = (const float *)(row + il__act_d_off(a->n_in));
  const int32_t *aux = (const int32_t *)(row + il__act_aux_off(a->n_in, IL_QK));
  const size_t bsz = il_dtype_get(a->type)->size;
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = w + b * bsz;
    const int8_t *x = xq + b * IL_QK;
    int32_t is = 0;
    if (a->type == IL_DTYPE_IQ4_NL) {
      const uint8_t *qs = blk + 2;
      for (int j = 0; j < 16; j++)
        is += il_iq4nl_values[qs[j] & 0xF] * x[j] + il_iq4nl_values[qs[j] >> 4] * x[j + 16];
      sum += (float)is * (il__h(blk) * dx[b]);
      continue;
    }
    const bool q51 = a->type == IL_DTYPE_Q5_1;
    const uint8_t *qs = blk + (q51 ? 8 : 6);
    uint32_t qh;
    memcpy(&qh, blk + (q51 ? 4 : 2), 4);
    for (int j = 0; j < 16; j++) {
      is += ((qs[j] & 0xF) | (int)((qh >> j & 1) << 4)) * x[j];
      is += ((qs[j] >> 4) | (int)((qh >> (j + 16) & 1) << 4)) * x[j + 16];
    }
    if (q51) sum += (float)is * (il__h(blk) * dx[b]) + il__h(blk + 2) * (dx[b] * (float)(aux[b] / -128));
    else sum += (float)(is + aux[b] / 8) * (il__h(blk) * dx[b]);
  }
  return sum;
}

/* Q4_K and Q5_K: sum over sub-blocks j of sc_j * dot(q_j, x_j), minus the mins times the
 * activation sums of 32, each scaled once per super-block. */
static float il__dot_q45k(const il__mm_args *a, const uint8_t *w, const uint8_t *row) {
  const int64_t nb = a->n_in / IL_QK_K;
  const bool q5 = a->type == IL_DTYPE_Q5_K;
  const size_t bsz = q5 ? sizeof(il_block_q5_K) : sizeof(il_block_q4_K);
  const int8_t *xq = (const int8_t *)row;
  const float *dx = (const float *)(row + il__act_d_off(a->n_in));
  const int16_t *bs32 = (const int16_t *)(row + il__act_bsum32_off(a->n_in));
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = w + b * bsz;
    uint64_t sc8, mn8;
    il__k4_scales(blk + 4, &sc8, &mn8);
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
      sc[j] = (int)(sc8 >> (8 * j) & 0xff);
      mn[j] = (int)(mn8 >> (8 * j) & 0xff);
    }
    const uint8_t *qs = blk + (q5 ? offsetof(il_block_q5_K, qs) : offsetof(il_block_q4_K, qs));
    const uint8_t *qh = q5 ? blk + offsetof(il_block_q5_K, qh) : NULL;
    const int8_t *x = xq + b * IL_QK_K;
    int32_t is = 0, im = 0;
    for (int j = 0; j < 4; j++) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; l++) {
        int ql = qs[32 * j + l] & 0xF, qhh = qs[32 * j + l] >> 4;
        if (q5) {
          ql += ((qh[l] >> (2 * j)) & 1) << 4;
          qhh += ((qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        lo += ql * x[64 * j + l];
        hi += qhh * x[64 * j + 32 + l];
      }
      is += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
    for (int j = 0; j < 8; j++) im += mn[j] * bs32[8 * b + j];
    sum += (float)is * (il__h(blk) * dx[b]) - (float)im * (il__h(blk + 2) * dx[b]);
  }
  return sum;
}

static float il__dot_q6k(const il__mm_args *a, const uint8_t *w, const uint8_t *row) {
  const int64_t nb = a->n_in / IL_QK_K;
  const float *dx = (const float *)(row + il__act_d_off(a->n_in));
  const int16_t *bs16 = (const int16_t *)(row + il__act_aux_off(a->n_in, IL_QK_K));
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const int8_t *x = (const int8_t *)row + b * IL_QK_K;
    il_block_q6_K blk; /* copied: rows need not be 2-byte aligned */
    memcpy(&blk, w + b * sizeof blk, sizeof blk);
    int32_t sub[16] = {0};
    for (int n = 0; n < 2; n++) {
      const uint8_t *ql = blk.ql + 64 * n, *qh = blk.qh + 32 * n;
      const int8_t *xx = x + 128 * n;
      for (int l = 0; l < 32; l++) {
        const int q1 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
        const int q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        sub[8 * n + l / 16 + 0] += q1 * xx[l];
        sub[8 * n + l / 16 + 2] += q2 * xx[l + 32];
        sub[8 * n + l / 16 + 4] += q3 * xx[l + 64];
        sub[8 * n + l / 16 + 6] += q4 * xx[l + 96];
      }
    }
    int32_t is = 0;
    for (int s = 0; s < 16; s++) is += blk.scales[s] * (sub[s] - 32 * bs16[16 * b + s]);
    sum += (float)is * (il_fp16_to_f32(blk.d) * dx[b]);
  }
  return sum;
}

#define IL__QUANT_ROWS(name, dot) \
  static void name(const il__mm_args *a, int64_t r0, int64_t r1) { il__rows_each(a, r0, r1, dot); }
IL__QUANT_ROWS(il__rows_q8_0, il__dot_q8_0)
IL__QUANT_ROWS(il__rows_q4, il__dot_q4)
IL__QUANT_ROWS(il__rows_q45k, il__dot_q45k)
IL__QUANT_ROWS(il__rows_q5_iq4, il__dot_q5_iq4)
IL__QUANT_ROWS(il__rows_q6k, il__dot_q6k)

const il__kernels il__matmul_scalar = {
    .compiled = true,
    .rows =
        {
            [IL_DTYPE_F32] = il__rows_f32,
            [IL_DTYPE_F16] = il__rows_f16,
            [IL_DTYPE_BF16] = il__rows_bf16,
            [IL_DTYPE_Q8_0] = il__rows_q8_0,
            [IL_DTYPE_Q4_0] = il__rows_q4,
            [IL_DTYPE_Q4_1] = il__rows_q4,
            [IL_DTYPE_Q4_K] = il__rows_q45k,
            [IL_DTYPE_Q5_K] = il__rows_q45k,
            [IL_DTYPE_Q6_K] = il__rows_q6k,
            [IL_DTYPE_Q5_0] = il__rows_q5_iq4,
            [IL_DTYPE_Q5_1] = il__rows_q5_iq4,
            [IL_DTYPE_IQ4_NL] = il__rows_q5_iq4,
        },
    .quant =
        {
            [IL_DTYPE_Q8_0] = il__quant_a32,
            [IL_DTYPE_Q4_0] = il__quant_a32,
            [IL_DTYPE_Q4_1] = il__quant_a32,
            [IL_DTYPE_Q4_K] = il__quant_ak,
            [IL_DTYPE_Q5_K] = il__quant_ak,
            [IL_DTYPE_Q6_K] = il__quant_ak,
            [IL_DTYPE_Q5_0] = il__quant_a32,
            [IL_DTYPE_Q5_1] = il__quant_a32,
            [IL_DTYPE_IQ4_NL] = il__quant_a32,
        },
};
