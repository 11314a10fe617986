/* backend/cpu/ops: per-ISA kernels for the CPU backend's non-matmul ops (attention of one
 * query head, SwiGLU), chosen by backend/cpu/cpu.c from the matmul's instruction-set level.
 *
 * The portable C versions stay in cpu.c (they are the fallback and the reference); a level's
 * table has compiled = false when this binary was built without it.
 * Also the F32 <-> F16/BF16 row conversions (copy, the KV store).
 * Not for: matmul kernels (backend/cpu/kernels.h) or op dispatch and threading (cpu.c).
 */
#ifndef IL_BACKEND_CPU_OPS_H
#define IL_BACKEND_CPU_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* out[0..hd) = softmax(q . k_s * scale for s in [0, n_pos)) weighted sum of v_s, where
 * k_s = k + s * kv_stride and v_s = v + s * kv_stride (floats). scores holds n_pos floats. */
typedef void (*il__attn_head_fn)(float *out, const float *q, const float *k, const float *v, size_t kv_stride,
                                 int64_t hd, int32_t n_pos, float scale, float *scores);
/* gate[i] = silu(gate[i]) * up[i] for i < n. */
typedef void (*il__swiglu_fn)(float *gate, const float *up, int64_t n);

typedef struct {
  bool compiled;
  il__attn_head_fn attn_head;
  il__swiglu_fn swiglu;
} il__ops;

extern const il__ops il__ops_avx512;
extern const il__ops il__ops_avx2; /* swiglu only (attn_head NULL) */

/* Row conversions between F32 and F16/BF16, n elements, rounding to nearest even (F16
 * overflows to inf; NaN stays NaN): copy's conversions of 16-bit activations and the KV store's
 * f16/bf16 cells. The C versions in cpu.c are the reference. */
typedef void (*il__cvt_fn)(void *dst, const void *src, int64_t n);
typedef struct {
  bool compiled;
  il__cvt_fn f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16;
} il__cvt;

extern const il__cvt il__cvt_avx2; /* AVX2 + F16C (every AVX2 CPU has F16C) */

#endif
