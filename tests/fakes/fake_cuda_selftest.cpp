/* tests/fakes/fake_cuda_selftest: the module's self-test (src/backend/cuda/selftest.cu, host code
 * only) compiled by the host C++ compiler for the fake module, which has no nvcc objects (they
 * would need the real CUDA runtime to register their device code). */
#include <cuda_runtime.h>

#include "backend/cuda/selftest.cu"
