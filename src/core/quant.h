/* core/quant: scalar reference conversion between float and every tensor type.
 *
 * These are the plain-C oracles: the SIMD kernels in backend/cpu are tested against them, and
 * they are what convert/quantize use. Rows are n elements; n must be a multiple of the type's
 * block size (il_dtype_get(t)->blck), which callers check and report with the tensor name.
 * Not for: speed (see backend/cpu/matmul).
 */
#ifndef IL_CORE_QUANT_H
#define IL_CORE_QUANT_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

/* dst[0..n) = dequantized src. Supported: every type in il_dtype. IL_ERR_UNSUPPORTED for
 * unknown types, IL_ERR_INVALID_ARG when n is not a multiple of the block size. */
IL_NODISCARD il_status il_dequantize_row(il_dtype t, const void *src, float *dst, int64_t n);
/* Writes il_dtype_row_size(t, n) bytes to dst, the bytes ggml's reference quantizer writes.
 * Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K (IL_ERR_UNSUPPORTED otherwise).
 * A NaN or Inf element for a block type is IL_ERR_FORMAT naming its index (callers add
 * the tensor name); nothing is written then. */
IL_NODISCARD il_status il_quantize_row(il_dtype t, const float *src, void *dst, int64_t n);
/* True when il_quantize_row supports t. */
bool il_quantize_supported(il_dtype t);

#endif
