/* backend/allreduce: the sum across devices that tensor parallelism needs after each
 * row-parallel matmul (attention's O and the FFN's down projection), in two forms:
 *
 * - host: for cpu and sim devices. Each device's partial (an F32 rows x cols tensor) is
 *   downloaded, the partials are added in device order 0, 1, ..., n-1 (a FIXED order, so a run
 *   gives the same bits every time; the order differs from one device's single matmul, so the
 *   result matches one device within float rounding, not bitwise), and the sum is uploaded to
 *   every device. The transfers are counted by each device as usual.
 * - NCCL: for cuda devices, ncclAllReduce on every device inside ncclGroupStart/End. NCCL is
 *   loaded with dlopen ("libnccl.so.2"), never linked, so one binary runs without it; a missing
 *   library is IL_ERR_NOT_FOUND with the loader's text (exit code 66 through the CLI).
 *
 * Not for: deciding how weights are sharded (the engine), or moving activations between
 * pipeline stages (the engine's boundary copies).
 */
#ifndef IL_BACKEND_ALLREDUCE_H
#define IL_BACKEND_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/dl.h"

/* Sums parts[0..n) (all rows x cols of one type: F32, or F16/BF16 widened to F32, summed and
 * rounded once to the type; part k on devs[k]) and writes the sum into every part. scratch:
 * caller-owned host floats, 2 * rows * cols of them. IL_ERR_INVALID_ARG naming
 * the part whose type or shape differs; a transfer's error as the device returns it. */
IL_NODISCARD il_status il_allreduce_host(il_backend *const *devs, const il_tensor *parts, int n, float *scratch);

/* Bytes one all-reduce of `elems` F32 values moves per device: the host form downloads and
 * uploads each partial (2 x elems x 4); NCCL's ring sends and receives 2 (n-1)/n of it. */
uint64_t il_allreduce_bytes_host(int64_t elems);
uint64_t il_allreduce_bytes_ring(int64_t elems, int n);

/* NCCL's entry points that tensor parallelism uses, resolved from the loaded library. The
 * types are NCCL's ABI (ncclComm_t is a pointer, ncclResult_t an int, ncclDataType_t float =
 * 7, ncclRedOp_t sum = 0, cudaStream_t a pointer), spelled here so no NCCL header is needed. */
typedef struct {
  il_dl lib;
  int (*comm_init_all)(void **comms, int ndev, const int *devlist);
  int (*comm_destroy)(void *comm);
  int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream);
  int (*group_start)(void);
  int (*group_end)(void);
  const char *(*get_error_string)(int result);
} il_nccl;

#define IL_NCCL_LIBRARY "libnccl.so.2"
#define IL_NCCL_FLOAT16 6
#define IL_NCCL_FLOAT32 7
#define IL_NCCL_BFLOAT16 9
#define IL_NCCL_SUM 0

/* Loads NCCL from `filename` (NULL: IL_NCCL_LIBRARY) and resolves its entry points. IL_OK, or
 * IL_ERR_NOT_FOUND with a message naming the library, what needs it and the loader's text (a
 * symbol it lacks included). t is always initialised; il_nccl_close is safe either way. */
IL_NODISCARD il_status il_nccl_open(il_nccl *t, const char *filename);
void il_nccl_close(il_nccl *t);
/* IL_OK for ncclSuccess (0); otherwise IL_ERR_DEVICE with "NCCL <what>: <NCCL's error
 * string> (code N)". */
IL_NODISCARD il_status il_nccl_check(const il_nccl *t, int result, const char *what);
/* One ncclCommInitAll over CUDA devices devlist[0..n). comms: n slots the caller owns. */
IL_NODISCARD il_status il_nccl_init(const il_nccl *t, void **comms, int n, const int *devlist);
/* NCCL's data type of an activation type (f32, f16, bf16), or -1. */
int il_nccl_dtype(il_dtype type);
/* Sums `count` values of NCCL type dtype in place across n devices: buf[k] and stream[k] on the device of
 * comms[k], all launched inside one ncclGroupStart/End (one thread driving several devices
 * needs the group, or the first call waits for the others forever). */
IL_NODISCARD il_status il_nccl_allreduce_sum(const il_nccl *t, void *const *comms, void *const *buf, void *const *stream,
                                             int n, size_t count, int dtype);

#endif
