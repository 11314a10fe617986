/* backend/cuda/act: activation elements as the kernels load and store them.
 *
 * Activations are F32, F16 or BF16 (--dtype): a kernel templated on an activation type A
 * loads element i as F32 (il__act_ld), computes in F32 and stores its result narrowed to A
 * with round to nearest even (il__act_st: decode.cuh's il__f16_bits / il__bf16_bits, which
 * equal core/dtype's il_f32_to_fp16 / il_f32_to_bf16 bit for bit, so a cuda op on 16-bit
 * tensors stores what the cpu's widen-compute-narrow stores). __host__ __device__: the fake
 * module's host launchers (tests/fakes/fake_cuda_kernels.cpp) use the same two functions.
 * IL__ACT_CASE dispatches a launcher's run-time type to a template argument.
 * Not for: weights (decode.cuh) or KV cells (decode.cuh il__kv_elem).
 */
#ifndef IL_BACKEND_CUDA_ACT_CUH
#define IL_BACKEND_CUDA_ACT_CUH

#include "backend/cuda/decode.cuh"

template <int A>
IL__HD float il__act_ld(const void *p, int64_t i) {
  if (A == IL_DTYPE_F16) return il__f16(((const uint16_t *)p)[i]);
  if (A == IL_DTYPE_BF16) return il__bf16(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

template <int A>
IL__HD void il__act_st(void *p, int64_t i, float v) {
  if (A == IL_DTYPE_F16) ((uint16_t *)p)[i] = il__f16_bits(v);
  else if (A == IL_DTYPE_BF16) ((uint16_t *)p)[i] = il__bf16_bits(v);
  else ((float *)p)[i] = v;
}

/* Whether t is an activation type the kernels take. */
IL__HD bool il__act_ok(int t) { return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16; }

/* The statement after A with the template constant `A` set to run-time type t (F32, F16 or BF16); any other
 * type returns cudaErrorInvalidValue from the enclosing launcher. */
#define IL__ACT_CASE(t, A, ...)                                                                                       \
  switch (t) {                                                                                                         \
  case IL_DTYPE_F32: { constexpr int A = IL_DTYPE_F32; __VA_ARGS__; } break;                                                 \
  case IL_DTYPE_F16: { constexpr int A = IL_DTYPE_F16; __VA_ARGS__; } break;                                                 \
  case IL_DTYPE_BF16: { constexpr int A = IL_DTYPE_BF16; __VA_ARGS__; } break;                                               \
  default: return cudaErrorInvalidValue;                                                                               \
  }

#endif
