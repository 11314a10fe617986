/* tests/test_cuda_module: the CUDA module as the host sees it, on any machine.
 *
 * - a CPU-only build: the registry says so, and `--device cuda` fails with that reason;
 * - a CUDA build: the module next to this test loads (its archs equal the build's), its
 *   self-test passes (every weight decoder the kernels use, run on the host, equals the
 *   library's dequantizer bit for bit; matvec v2's 8-bit block dot products match it), and opening cuda either works (a device) or fails with
 *   IL_ERR_UNSUPPORTED naming the runtime's reason (no driver here);
 * - a module that cannot be loaded: `inferlab run --device cuda` with INFERLAB_CUDA_MODULE
 *   pointing at a missing file and at a file that is not a shared object prints the loader's
 *   own message (dlerror) and exits nonzero; so does a copy of the binary without the module.
 */
#include <unistd.h>

#include "backend/cudamod.h"
#include "backend/registry.h"
#include "harness.h"
#include "il_build_info.h"

static void test_cli_messages(const char *cli) {
  char out[8192], cmd[4096];
  /* a path that does not exist: the loader's "No such file" */
  snprintf(cmd, sizeof cmd, "INFERLAB_CUDA_MODULE=/nonexistent/dir/libinferlab-cuda.so '%s' run --device cuda -m builtin:tiny -n 1 2>&1", cli);
  int code = il_test_run(cmd, out, sizeof out);
  IL_CHECK(code != 0);
#if IL_HAVE_CUDA
  IL_CHECK_CONTAINS(out, "INFERLAB_CUDA_MODULE=/nonexistent/dir/libinferlab-cuda.so");
  IL_CHECK_CONTAINS(out, "No such file");
  /* a file that is not a shared object: dlopen's own complaint */
  char junk[] = "/tmp/il_cuda_junk_XXXXXX";
  int fd = mkstemp(junk);
  IL_CHECK(fd >= 0);
  if (fd >= 0) {
    IL_CHECK(write(fd, "not an ELF file, just text\n", 27) == 27);
    close(fd);
    snprintf(cmd, sizeof cmd, "INFERLAB_CUDA_MODULE='%s' '%s' run --device cuda -m builtin:tiny -n 1 2>&1", junk, cli);
    code = il_test_run(cmd, out, sizeof out);
    IL_CHECK(code != 0);
    IL_CHECK_CONTAINS(out, junk);
    IL_CHECK(strstr(out, "invalid ELF header") != NULL || strstr(out, "file too short") != NULL);
    printf("junk module: %s", strstr(out, "error:") ? strstr(out, "error:") : out);
    unlink(junk);
  }
#else
  IL_CHECK_CONTAINS(out, "built without the CUDA backend");
#endif
}

int main(void) {
  const char *cli = getenv("IL_CLI");
  if (cli && *cli) test_cli_messages(cli);
  else printf("SKIP (part): IL_CLI not set: the CLI messages are not checked\n");
#if !IL_HAVE_CUDA
  IL_CHECK(il_backend_cuda_unavailable() != NULL);
  IL_CHECK_CONTAINS(il_backend_cuda_unavailable(), "CPU-only build");
  printf("SKIP: CPU-only build (configure with -DIL_CUDA=ON and nvcc): %s\n", il_backend_cuda_unavailable());
  il_test_finish();
  return 77;
#else
  const il_cudamod_module *m = il_cudamod_get();
  if (!m) fprintf(stderr, "module did not load: %s\n", il_cudamod_error());
  IL_CHECK(m != NULL);
  IL_CHECK(il_backend_cuda_unavailable() == NULL);
  if (!m) return il_test_finish();
  printf("module %s: archs %s, CUDA %s\n", il_cudamod_path(), m->archs, m->cuda_version);
  IL_CHECK_INT(m->abi, IL_CUDAMOD_ABI);
  IL_CHECK_INT(m->ops_version, IL_BACKEND_OPS_VERSION);
  /* the module records the archs the build recorded ("80-real;90" vs "80-real,90") */
  char want[256];
  snprintf(want, sizeof want, "%s", IL_BUILD_CUDA_ARCHS);
  for (char *p = want; *p; p++)
    if (*p == ';') *p = ',';
  IL_CHECK_STR(m->archs, want);
  IL_CHECK_STR(m->cuda_version, IL_BUILD_CUDA_VERSION);
  il_status st = m->selftest();
  if (st != IL_OK) fprintf(stderr, "selftest: %s\n", il_error_detail());
  IL_CHECK_OK(st);
  printf("self-test: the kernels' decoders equal the CPU dequantizer for f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k q5_k q6_k;\n"
         "           matvec v2's block dot products (q8_0 q4_0 q4_1) match the reference;\n"
         "           KV cells (f16 bf16 q8_0) are written byte for byte as the reference quantizer and read back\n"
         "           as the reference dequantizer\n");
  int rt = 0, drv = 0;
  m->versions(&rt, &drv);
  IL_CHECK(rt >= 12000);
  il_cudamod_device devs[8];
  char err[256] = "";
  int n = m->devices(devs, 8, err, sizeof err);
  il_backend *b = NULL;
  st = il_backend_open("cuda", NULL, &b);
  if (n <= 0) {
    IL_CHECK_INT(st, IL_ERR_UNSUPPORTED);
    IL_CHECK(b == NULL);
    IL_CHECK_CONTAINS(il_error_detail(), "--device cuda");
    printf("runtime %d, driver %d; no device: %s\n", rt, drv, il_error_detail());
    printf("SKIP (part): no CUDA device: opening it was checked to fail with the reason\n");
  } else {
    IL_CHECK_OK(st);
    for (int i = 0; i < n && i < 8; i++)
      printf("device %d: %s sm_%d%d, %s\n", i, devs[i].name, devs[i].cc_major, devs[i].cc_minor,
             devs[i].sass ? "SASS" : devs[i].ptx ? "PTX (JIT)" : "no kernel image");
    if (b) {
      il_backend_info info;
      b->ops->info(b, &info);
      IL_CHECK_STR(info.kind, "cuda");
      IL_CHECK(!info.host_visible);
      printf("opened: %s\n", info.device);
      b->ops->destroy(b);
    }
  }
  return il_test_finish();
#endif
}
