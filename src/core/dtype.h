/* core/dtype: tensor element types and their GGUF block layouts.
 *
 * The enum values are the GGML type ids that GGUF files store, so a file's type field maps
 * to il_dtype without a table. Each block struct is defined once here, with a static size
 * check, and shared by the reference code, the SIMD kernels and the CUDA decoders
 * (backend/cuda/decode.cuh).
 *
 * Byte layouts (all little-endian, fp16 scales stored as raw uint16 bits):
 *   Q4_0  (32 elems, 18 B): d:f16, qs[16]: element j in low nibble of qs[j], j+16 in high;
 *                           x = d * (q - 8)
 *   Q4_1  (32 elems, 20 B): d:f16, m:f16, qs[16] as Q4_0; x = d * q + m
 *   Q8_0  (32 elems, 34 B): d:f16, qs[32]:int8; x = d * q
 *   Q4_K (256 elems, 144 B): d:f16, dmin:f16, scales[12] (8 6-bit scales + 8 6-bit mins),
 *                           qs[128]; 8 sub-blocks of 32; x = d*sc*q - dmin*m
 *   Q5_K (256 elems, 176 B): d, dmin, scales[12], qh[32] (5th bits), qs[128]
 *   Q6_K (256 elems, 210 B): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16]:int8,
 *                           d:f16; 16 sub-blocks of 16; x = d * sc * (q - 32)
 *   Q5_0  (32 elems, 22 B): d:f16, qh[4] (uint32 LE: bit j = 5th bit of element j), qs[16]
 *                           as Q4_0; x = d * (q - 16), q = nibble | bit << 4
 *   Q5_1  (32 elems, 24 B): d:f16, m:f16, qh[4], qs[16] as Q5_0; x = d * q + m
 *   IQ4_NL (32 elems, 18 B): d:f16, qs[16] as Q4_0; x = d * il_iq4nl_values[nibble]
 * Not for: arithmetic on tensors (backend/) or quantization algorithms (core/quant).
 */
#ifndef IL_CORE_DTYPE_H
#define IL_CORE_DTYPE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
  IL_DTYPE_F32 = 0,
  IL_DTYPE_F16 = 1,
  IL_DTYPE_Q4_0 = 2,
  IL_DTYPE_Q4_1 = 3,
  IL_DTYPE_Q8_0 = 8,
  IL_DTYPE_Q4_K = 12,
  IL_DTYPE_Q5_K = 13,
  IL_DTYPE_Q6_K = 14,
  IL_DTYPE_I32 = 26, /* ids, positions, slots, block tables: not a weight type (il_dtype_get does not list it) */
  IL_DTYPE_BF16 = 30,
  /* the 32-element types llama-quantize falls back to when a row is not a multiple of 256 */
  IL_DTYPE_Q5_0 = 6,
  IL_DTYPE_Q5_1 = 7,
  IL_DTYPE_IQ4_NL = 20,
  IL_DTYPE_COUNT = 40 /* bound for tables indexed by type id */
} il_dtype;

#define IL_QK 32    /* elements per block of the 32-element types */
#define IL_QK_K 256 /* elements per K-quant super-block */
#define IL_K_SCALE_SIZE 12

typedef struct {
  uint16_t d;
  uint8_t qs[IL_QK / 2];
} il_block_q4_0;
static_assert(sizeof(il_block_q4_0) == 18, "q4_0 block layout");

typedef struct {
  uint16_t d;
  uint16_t m;
  uint8_t qs[IL_QK / 2];
} il_block_q4_1;
static_assert(sizeof(il_block_q4_1) == 20, "q4_1 block layout");

typedef struct {
  uint16_t d;
  int8_t qs[IL_QK];
} il_block_q8_0;
static_assert(sizeof(il_block_q8_0) == 34, "q8_0 block layout");

typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[IL_K_SCALE_SIZE];
  uint8_t qs[IL_QK_K / 2];
} il_block_q4_K;
static_assert(sizeof(il_block_q4_K) == 144, "q4_K block layout");

typedef struct {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[IL_K_SCALE_SIZE];
  uint8_t qh[IL_QK_K / 8];
  uint8_t qs[IL_QK_K / 2];
} il_block_q5_K;
static_assert(sizeof(il_block_q5_K) == 176, "q5_K block layout");

typedef struct {
  uint8_t ql[IL_QK_K / 2];
  uint8_t qh[IL_QK_K / 4];
  int8_t scales[IL_QK_K / 16];
  uint16_t d;
} il_block_q6_K;
static_assert(sizeof(il_block_q6_K) == 210, "q6_K block layout");

typedef struct {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[IL_QK / 2];
} il_block_q5_0;
static_assert(sizeof(il_block_q5_0) == 22, "q5_0 block layout");

typedef struct {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[IL_QK / 2];
} il_block_q5_1;
static_assert(sizeof(il_block_q5_1) == 24, "q5_1 block layout");

typedef struct {
  uint16_t d;
  uint8_t qs[IL_QK / 2];
} il_block_iq4_nl;
static_assert(sizeof(il_block_iq4_nl) == 18, "iq4_nl block layout");

/* IQ4_NL's 16 levels (ggml's kvalues_iq4nl): a non-uniform grid, denser near zero. */
static const int8_t il_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

typedef struct {
  const char *name;  /* "f32", "q4_0", ... (lower case, as llama.cpp prints them) */
  uint32_t blck;     /* elements per block (1 for float types) */
  uint32_t size;     /* bytes per block */
  bool quantized;
} il_dtype_info;

/* Traits of a type id, or NULL for an id inferlab does not support (the caller reports it
 * with the tensor name). */
const il_dtype_info *il_dtype_get(uint32_t type_id);
/* Name of a type id, or "type#N" text in a static buffer per thread for unknown ids. */
const char *il_dtype_name(uint32_t type_id);
/* Parses "f32", "F16", "q4_0", "Q8_0", "bf16", ... Returns false for unknown names. */
bool il_dtype_parse(const char *name, il_dtype *out);
/* Bytes of one row of n elements; 0 when n is not a multiple of the block size. */
size_t il_dtype_row_size(il_dtype t, int64_t n);

/* llama.cpp's general.file_type value (LLAMA_FTYPE_*) for a file whose weights are mostly t. */
uint32_t il_dtype_file_type(il_dtype t);

/* ---- fp16 / bf16 scalar conversions (IEEE binary16, bfloat16), exact round-to-nearest-even ---- */

static inline uint32_t il__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float il__bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float il_fp16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0) {
    if (man == 0) return il__bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return il__bits_f32(sign | 0x7f800000u | (man << 13));
  return il__bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t il_f32_to_fp16(float f) {
  uint32_t x = il__f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
  if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
    float v = il__bits_f32(ax) * 16777216.0f;               /* in units of 2^-24 */
    uint32_t m = (uint32_t)v;
    float r = v - (float)m;
    if (r > 0.5f || (r == 0.5f && (m & 1))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t e = ((ax >> 23) - 112) << 10;
  uint32_t m = (ax >> 13) & 0x3ff;
  uint32_t rest = ax & 0x1fff;
  uint32_t h = e | m;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static inline float il_bf16_to_f32(uint16_t h) { return il__bits_f32((uint32_t)h << 16); }

static inline uint16_t il_f32_to_bf16(float f) {
  uint32_t x = il__f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

#endif
