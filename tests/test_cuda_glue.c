/* tests/test_cuda_glue: the CUDA backend's memory, transfers and events, on a device or on the
 * fake module (CTest's test_cuda_glue_fakecuda); skips (77) when cuda cannot be opened.
 *
 * - uploads and downloads larger than the two 8 MiB pinned staging buffers, at odd sizes and
 *   offsets, come back byte for byte, and are counted in transfers();
 * - copy between views with different row strides;
 * - events: elapsed time is >= 0 and grows across work;
 * - a request larger than the device is IL_ERR_OOM from cudaMalloc itself (not the cap), with the
 *   thread's OOM record naming the buffer, and the backend still works afterwards;
 * - buffers are counted per category in the backend's space and released on free.
 */
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"
#include "harness.h"
#include "memory/mem.h"

int main(void) {
  il_backend *b = il_test_open_cuda_or_skip();
  const il_backend_ops *o = b->ops;
  il_backend_info info;
  o->info(b, &info);
  printf("device: %s\n", info.device);

  /* 1. large, odd transfers through the staging buffers */
  const size_t n = (size_t)20 * 1024 * 1024 + 12345;
  uint8_t *src = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
  il_tensor t;
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, (int64_t)(n / 4 + 2), IL_DTYPE_I32, "big", &t));
  il_transfer_stats x0, x1;
  o->transfers(b, &x0);
  il_tensor at3 = t;
  at3.off = 3;
  at3.cols = (int64_t)n / 4;
  IL_CHECK_OK(o->upload(b, at3, src, n));
  memset(back, 0, n);
  IL_CHECK_OK(o->download(b, back, at3, n));
  IL_CHECK(memcmp(src, back, n) == 0);
  o->transfers(b, &x1);
  IL_CHECK_INT(x1.upload_bytes - x0.upload_bytes, n);
  IL_CHECK_INT(x1.download_bytes - x0.download_bytes, n);
  /* an upload right after another one reuses staging buffers that may still be in flight */
  for (int rep = 0; rep < 3; rep++) {
    src[rep] ^= 0xFF;
    IL_CHECK_OK(o->upload(b, at3, src, n));
  }
  IL_CHECK_OK(o->download(b, back, at3, n));
  IL_CHECK(memcmp(src, back, n) == 0);
  printf("transfers: %zu bytes up and back at offset 3, byte for byte\n", n);

  /* 2. copy between strided views */
  float host[6 * 10], got[6 * 10];
  for (int i = 0; i < 60; i++) host[i] = (float)i;
  il_tensor wide, narrow;
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 6, 10, IL_DTYPE_F32, "wide", &wide));
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 6, 4, IL_DTYPE_F32, "narrow", &narrow));
  IL_CHECK_OK(o->upload(b, wide, host, sizeof host));
  il_tensor mid = wide; /* columns 3..6 of each row */
  mid.off = 3 * 4, mid.cols = 4;
  IL_CHECK_OK(o->copy(b, narrow, mid));
  IL_CHECK_OK(o->download(b, got, narrow, 6 * 4 * 4));
  int bad = 0;
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 4; c++) bad += got[r * 4 + c] != host[r * 10 + 3 + c];
  IL_CHECK_INT(bad, 0);

  /* 2b. upload_async: the bytes go on the copy stream (stream 1; compute is 0), the compute
   * stream does not wait for them until event_wait, and then waits for the event recorded on
   * the copy stream after the last byte (the fake runtime's trace, fake_cudart.c) */
  {
    char trace[] = "/tmp/il_cuda_trace_XXXXXX";
    const int fd = mkstemp(trace);
    IL_CHECK(fd >= 0);
    close(fd);
    setenv("FAKE_CUDA_TRACE", trace, 1);
    float hs[6 * 10];
    for (int i = 0; i < 60; i++) hs[i] = (float)(i * 3);
    il_event *up = NULL;
    IL_CHECK_OK(o->upload_async(b, wide, hs, sizeof hs, &up));
    IL_CHECK(up != NULL);
    FILE *f = fopen(trace, "a");
    IL_CHECK(f != NULL);
    fputs("-- event_wait\n", f);
    fclose(f);
    IL_CHECK_OK(o->event_wait(b, up));
    IL_CHECK_OK(o->download(b, got, wide, sizeof got));
    unsetenv("FAKE_CUDA_TRACE");
    o->event_free(b, up);
    IL_CHECK(memcmp(got, hs, sizeof hs) == 0);
    f = fopen(trace, "r");
    IL_CHECK(f != NULL);
    char line[64];
    int h2d = 0, h2d_off = 0, last_rec = -1, waited = -1, before_wait = 1, early_compute_wait = 0;
    while (fgets(line, sizeof line, f)) {
      int e = 0, s = 0;
      if (!strncmp(line, "-- event_wait", 13)) before_wait = 0;
      else if (sscanf(line, "h2d s%d", &s) == 1 && before_wait) h2d++, h2d_off += s != 1;
      else if (sscanf(line, "record e%d s%d", &e, &s) == 2 && before_wait && s == 1) last_rec = e;
      else if (sscanf(line, "wait s%d e%d", &s, &e) == 2 && s == 0) {
        if (before_wait) early_compute_wait++;
        else if (waited < 0) waited = e;
      }
    }
    fclose(f);
    remove(trace);
    /* only the fake runtime writes the trace (on a device: the bytes above are the check) */
    const char *mod = getenv("INFERLAB_CUDA_MODULE");
    if (mod && strstr(mod, "fake")) {
      IL_CHECK(h2d >= 1);
      IL_CHECK_INT(h2d_off, 0);            /* every host-to-device byte on the copy stream */
      IL_CHECK_INT(early_compute_wait, 0); /* the ops were not made to wait by upload_async */
      IL_CHECK(last_rec >= 0);
      IL_CHECK_INT(waited, last_rec);      /* event_wait: compute waits for the copy's last event */
      printf("upload_async: %d copies on the copy stream, compute waits for event %d at event_wait\n", h2d, waited);
    }
  }

  /* 3. events */
  il_event *e0 = NULL, *e1 = NULL, *e2 = NULL;
  il_tensor u;
  IL_CHECK_OK(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, (int64_t)(n / 4 + 2), IL_DTYPE_I32, "big copy", &u));
  IL_CHECK_OK(o->event_record(b, &e0));
  IL_CHECK_OK(o->event_record(b, &e1));
  for (int rep = 0; rep < 4; rep++) IL_CHECK_OK(o->copy(b, u, t));
  IL_CHECK_OK(o->event_record(b, &e2));
  double s01 = -1, s02 = -1;
  if (e0 && e1 && e2) {
    IL_CHECK_OK(o->event_elapsed(b, e0, e1, &s01));
    IL_CHECK_OK(o->event_elapsed(b, e0, e2, &s02));
    IL_CHECK(s01 >= 0 && s02 >= s01);
    printf("events: 4 copies of %zu bytes in %.3f ms\n", n, (s02 - s01) * 1e3);
  }
  o->event_free(b, e0), o->event_free(b, e1), o->event_free(b, e2);

  /* 4. more than the device holds: cudaMalloc refuses, an OOM value, not a crash */
  size_t fr, tot;
  o->memory(b, &fr, &tot);
  il_mem_stats before, after;
  il_mem_space_stats(b->space, &before);
  IL_CHECK(before.current[IL_MEM_ACTIVATIONS] >= n);
  il_tensor huge;
  il_status st = il_backend_tensor_new(b, IL_MEM_KV, 1, (int64_t)(tot / 4 + (64 << 20)), IL_DTYPE_F32, "more than the device", &huge);
  IL_CHECK_INT(st, IL_ERR_OOM);
  printf("device of %zu bytes asked for more: %s\n", tot, il_error_detail());
  il_mem_oom oom;
  IL_CHECK(il_mem_last_oom(&oom));
  IL_CHECK_STR(oom.what, "more than the device");
  IL_CHECK_CONTAINS(il_error_detail(), "cudaMalloc");
  /* still usable */
  IL_CHECK_OK(o->download(b, back, at3, 1024));
  IL_CHECK(memcmp(src, back, 1024) == 0);

  /* 5. accounting returns to where it was */
  il_backend_tensor_free(b, &t);
  il_backend_tensor_free(b, &u);
  il_backend_tensor_free(b, &wide);
  il_backend_tensor_free(b, &narrow);
  il_mem_space_stats(b->space, &after);
  IL_CHECK_INT(after.current[IL_MEM_ACTIVATIONS], 0);
  IL_CHECK_OK(o->sync(b));
  o->destroy(b);
  free(src), free(back);
  return il_test_finish();
}
