/* tests/test_allreduce: backend/allreduce, the sum tensor parallelism takes after each
 * row-parallel matmul.
 * - host form on 2 and 4 sim devices: every device ends with the sum of all partials, added in
 *   device order (checked against that order computed here, bit for bit), run twice with the
 *   same bits; the sum of the partials of a split dot product is within 1e-5 relative of the
 *   whole dot product (the bound tensor parallelism states: the order changes, not the math);
 *   a part of another shape is refused naming it; F16 and BF16 parts (16-bit activations) are
 *   widened, summed in device order in F32 and rounded once to their type, bit for bit against
 *   that computed here; a part of another type is refused.
 * - NCCL form: a missing libnccl is IL_ERR_NOT_FOUND naming the library and the loader's text;
 *   a library that is not NCCL (glibc's libm) is refused naming the symbol it lacks; an NCCL
 *   result code becomes IL_ERR_DEVICE with the call's name; through the fake libnccl
 *   (tests/fakes/fake_nccl.c, IL_FAKE_NCCL_LIB) 2 and 4 ranks are initialised, summed inside one
 *   ncclGroupStart/End (the log shows the order of calls) to the device-order sum, and an
 *   NCCL failure inside the group still closes it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/allreduce.h"
#include "core/dtype.h"
#include "backend/registry.h"
#include "harness.h"

enum { ROWS = 3, COLS = 37 };

/* Partials of y = W x with W's columns (the reduced dimension) split in n equal shards: what
 * device k computes after a row-parallel matmul. whole: the unsplit result. */
static void partials(int n, float part[][ROWS * COLS], double *whole) {
  const int kdim = 64;
  for (int i = 0; i < ROWS * COLS; i++) {
    whole[i] = 0;
    for (int k = 0; k < n; k++) part[k][i] = 0;
    for (int j = 0; j < kdim; j++) {
      float w = sinf(0.37f * (float)(i * kdim + j)), x = cosf(0.11f * (float)j);
      part[j / (kdim / n)][i] += w * x;
      whole[i] += (double)w * x;
    }
  }
}

static void host_sum(int n) {
  il_backend *devs[4] = {0};
  il_tensor t[4];
  float part[4][ROWS * COLS], got[ROWS * COLS], first[ROWS * COLS];
  double whole[ROWS * COLS];
  float *scratch = malloc(2 * sizeof(float) * ROWS * COLS);
  partials(n, part, whole);
  for (int k = 0; k < n; k++) {
    IL_CHECK_OK(il_backend_open("sim:1MiB", NULL, &devs[k]));
    IL_CHECK_OK(il_backend_tensor_new(devs[k], IL_MEM_ACTIVATIONS, ROWS, COLS, IL_DTYPE_F32, "partial", &t[k]));
  }
  for (int rep = 0; rep < 2; rep++) {
    for (int k = 0; k < n; k++) IL_CHECK_OK(devs[k]->ops->upload(devs[k], t[k], part[k], sizeof part[k]));
    IL_CHECK_OK(il_allreduce_host(devs, t, n, scratch));
    for (int k = 0; k < n; k++) {
      IL_CHECK_OK(devs[k]->ops->download(devs[k], got, t[k], sizeof got));
      int exact = 1, close = 1;
      for (int i = 0; i < ROWS * COLS; i++) {
        float want = part[0][i];
        for (int j = 1; j < n; j++) want += part[j][i];
        if (memcmp(&got[i], &want, sizeof want) != 0) exact = 0;
        if (fabs(got[i] - whole[i]) > 1e-5 * fmax(1.0, fabs(whole[i]))) close = 0;
      }
      IL_CHECK(exact);
      IL_CHECK(close);
      if (rep == 0 && k == 0) memcpy(first, got, sizeof got);
      else IL_CHECK(memcmp(first, got, sizeof got) == 0);
    }
  }
  IL_CHECK_INT((long long)il_allreduce_bytes_host(ROWS * COLS), 2LL * ROWS * COLS * 4);
  IL_CHECK_INT((long long)il_allreduce_bytes_ring(ROWS * COLS, n), 2LL * (n - 1) * ROWS * COLS * 4 / n);
  printf("host all-reduce on %d sim devices: device order sum on every device, same bits twice\n", n);
  il_tensor odd = t[n - 1];
  odd.cols = COLS - 1;
  odd.name = "odd";
  il_tensor bad[4];
  memcpy(bad, t, sizeof bad);
  bad[n - 1] = odd;
  IL_CHECK_INT(il_allreduce_host(devs, bad, n, scratch), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "(odd) is not f32");
  for (int k = 0; k < n; k++) {
    il_backend_tensor_free(devs[k], &t[k]);
    devs[k]->ops->destroy(devs[k]);
  }
  free(scratch);
}

static int fake_error_calls;
static const char *fake_error_string(int r) {
  fake_error_calls++;
  return r == 2 ? "unhandled system error" : "other";
}

static void nccl(void) {
  il_nccl t;
  IL_CHECK_INT(il_nccl_open(&t, "libinferlab-no-such-nccl.so.2"), IL_ERR_NOT_FOUND);
  IL_CHECK_CONTAINS(il_error_detail(), "tensor parallelism on cuda devices needs NCCL (libinferlab-no-such-nccl.so.2)");
  IL_CHECK_CONTAINS(il_error_detail(), "cannot open shared object file");
  il_nccl_close(&t);
  IL_CHECK_INT(il_nccl_open(&t, "libm.so.6"), IL_ERR_NOT_FOUND);
  IL_CHECK_CONTAINS(il_error_detail(), "libm.so.6 is not NCCL: it lacks ncclCommInitAll");
  IL_CHECK(t.lib.handle == NULL && t.all_reduce == NULL);
  il_nccl_close(&t);
  il_nccl f = {0};
  f.get_error_string = fake_error_string;
  IL_CHECK_OK(il_nccl_check(&f, 0, "ncclAllReduce"));
  IL_CHECK_INT(il_nccl_check(&f, 2, "ncclAllReduce"), IL_ERR_DEVICE);
  IL_CHECK_CONTAINS(il_error_detail(), "NCCL ncclAllReduce: unhandled system error (code 2)");
  IL_CHECK_INT(fake_error_calls, 1);
}

static void fake_nccl(int n) {
  const char *path = getenv("IL_FAKE_NCCL_LIB");
  if (!path) {
    printf("fake NCCL not built (IL_FAKE_NCCL_LIB unset): its part skipped\n");
    return;
  }
  il_nccl t;
  IL_CHECK_OK(il_nccl_open(&t, path));
  if (!t.all_reduce) return;
  const char *(*log)(void) = NULL;
  IL_CHECK_OK(il_dl_sym(&t.lib, "fake_nccl_log", (void **)&log));
  size_t log0 = strlen(log());
  void *comms[4] = {0}, *bufs[4], *streams[4] = {0};
  int devlist[4] = {0, 1, 2, 3};
  float part[4][ROWS * COLS];
  double whole[ROWS * COLS];
  partials(n, part, whole);
  for (int k = 0; k < n; k++) bufs[k] = part[k];
  float want[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) {
    want[i] = part[0][i];
    for (int j = 1; j < n; j++) want[i] += part[j][i];
  }
  IL_CHECK_OK(il_nccl_init(&t, comms, n, devlist));
  IL_CHECK_OK(il_nccl_allreduce_sum(&t, comms, bufs, streams, n, ROWS * COLS, IL_NCCL_FLOAT32));
  for (int k = 0; k < n; k++) IL_CHECK(memcmp(part[k], want, sizeof want) == 0);
  char expect[256] = "ncclCommInitAll\nncclGroupStart\n";
  for (int k = 0; k < n; k++) strcat(expect, "ncclAllReduce\n");
  strcat(expect, "ncclGroupEnd\n");
  IL_CHECK_STR(log() + log0, expect);
  /* NCCL's refusals reach the caller with its words; a lone call of several ranks is refused */
  IL_CHECK_INT(il_nccl_init(&t, comms, 9, devlist), IL_ERR_DEVICE);
  IL_CHECK_CONTAINS(il_error_detail(), "NCCL ncclCommInitAll: invalid argument (code 4)");
  IL_CHECK_INT(t.all_reduce(bufs[0], bufs[0], 4, IL_NCCL_FLOAT32, IL_NCCL_SUM, comms[0], NULL), 5);
  printf("NCCL path on the fake libnccl, %d ranks: one group, device-order sum\n", n);
  il_nccl_close(&t);
}

static void host_sum_16(il_dtype type, int n) {
  il_backend *devs[4] = {0};
  il_tensor t[4];
  float part[4][ROWS * COLS];
  double whole[ROWS * COLS];
  uint16_t h[4][ROWS * COLS], got[ROWS * COLS];
  float *scratch = malloc(2 * sizeof(float) * ROWS * COLS);
  partials(n, part, whole);
  for (int k = 0; k < n; k++) {
    IL_CHECK_OK(il_backend_open("sim:1MiB", NULL, &devs[k]));
    IL_CHECK_OK(il_backend_tensor_new(devs[k], IL_MEM_ACTIVATIONS, ROWS, COLS, type, "partial", &t[k]));
    for (int i = 0; i < ROWS * COLS; i++) h[k][i] = type == IL_DTYPE_F16 ? il_f32_to_fp16(part[k][i]) : il_f32_to_bf16(part[k][i]);
    IL_CHECK_OK(devs[k]->ops->upload(devs[k], t[k], h[k], sizeof h[k]));
  }
  IL_CHECK_OK(il_allreduce_host(devs, t, n, scratch));
  for (int k = 0; k < n; k++) {
    IL_CHECK_OK(devs[k]->ops->download(devs[k], got, t[k], sizeof got));
    int exact = 1;
    for (int i = 0; i < ROWS * COLS; i++) {
      float want = 0;
      for (int j = 0; j < n; j++) want += type == IL_DTYPE_F16 ? il_fp16_to_f32(h[j][i]) : il_bf16_to_f32(h[j][i]);
      const uint16_t w16 = type == IL_DTYPE_F16 ? il_f32_to_fp16(want) : il_f32_to_bf16(want);
      if (got[i] != w16) exact = 0;
    }
    IL_CHECK(exact);
  }
  il_tensor mixed[4];
  memcpy(mixed, t, sizeof mixed);
  mixed[n - 1].type = type == IL_DTYPE_F16 ? IL_DTYPE_BF16 : IL_DTYPE_F16;
  IL_CHECK_INT(il_allreduce_host(devs, mixed, n, scratch), IL_ERR_INVALID_ARG);
  IL_CHECK_CONTAINS(il_error_detail(), "is not");
  for (int k = 0; k < n; k++) {
    il_backend_tensor_free(devs[k], &t[k]);
    devs[k]->ops->destroy(devs[k]);
  }
  free(scratch);
}

int main(void) {
  host_sum(2);
  host_sum(4);
  host_sum_16(IL_DTYPE_F16, 2);
  host_sum_16(IL_DTYPE_BF16, 4);
  nccl();
  fake_nccl(2);
  fake_nccl(4);
  return il_test_finish();
}
