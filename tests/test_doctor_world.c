/* tests/test_doctor_world: the failures beyond the research file (issue 17), each rebuilt as a
 * fixture machine from a real report, with the source cited at the scenario, and negative
 * cases that must stay OK. Classes: which libcuda the loader picks; containers beyond Docker;
 * distribution-specific fixes; hardware and firmware health; GPU generation vs driver branch;
 * precision of the verdicts. --explain wordings are in test_doctor_explain.c.
 */
#include "sysroots/scenario.h"

/* A healthy host with two A100s on 535.54.03; callers change one thing. */
static const char *healthy(scen *s) {
  const char *root = sr_new_host();
  sc_init(s, root);
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_pci_gpu(root, "0000:0b:00.0", 0x20b2, "nvidia");
  sr_driver(root, "535.54.03", 0, 2, 1);
  sr_install_nvml(root, "535.54.03", s->nvml, sizeof s->nvml);
  sr_install_cuda(root, "/usr/lib/x86_64-linux-gnu", "535.54.03", s->cuda, sizeof s->cuda);
  sr_scenario(root, "%s", SR_TWO_A100);
  s->have_cuda = true;
  s->cuda_version = "12.2";
  s->archs = "80;90";
  return root;
}

/* A soname link dir/libcuda.so.1 -> libcuda.so.<ver> (a stand-in file: never loaded). */
static void stale_lib(const char *root, const char *dir, const char *lib, const char *ver) {
  char rel[512], target[128];
  snprintf(rel, sizeof rel, "%s/%s.%s", dir, lib, ver);
  sr_write(root, rel, "ELF stand-in");
  snprintf(rel, sizeof rel, "%s/%s.1", dir, lib);
  snprintf(target, sizeof target, "%s.%s", lib, ver);
  sr_link(root, rel, target);
}

static void expect_fix_lacks(int line, const il_doctor *dr, const char *id, const char *part) {
  const il_check *c = il_doctor_find(dr, id);
  if (c && !strstr(c->fix, part)) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  fprintf(stderr, "test_doctor_world.c:%d: FAILED: %s fix must not contain \"%s\": %s\n", line, id, part, c ? c->fix : "(no check)");
}
#define EXPECT_FIX_LACKS(dr, id, part) expect_fix_lacks(__LINE__, dr, id, part)

/* ---- which libcuda is really loaded -------------------------------------------------------
 * An older libcuda.so.1 earlier on the loader's path than the driver's own: cuInit answers
 * "system has unsupported display driver / cuda driver combination" (error 803), as in
 * https://github.com/NVIDIA/nvidia-docker/issues/1256 (an image's libcuda older than the host
 * driver) and https://github.com/ai-dynamo/nixl/issues/441 (LD_LIBRARY_PATH full of CUDA dirs);
 * a compat directory first in the ld.so cache: https://github.com/NVIDIA/nvidia-container-toolkit/pull/1679
 * ("ldconfig -p | grep libcuda.so.1" listing /usr/local/cuda-13.0/compat first). */
static void test_loader_order(void) {
  scen s;
  const char *root = healthy(&s);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL); /* negative: the driver's own library */
  EXPECT_SUMMARY(dr, "cuda.loader", "same version as the kernel module");
  il_doctor_free(dr);

  /* LD_LIBRARY_PATH: a copy from a 470 install. */
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "470.82.01");
  sc_env(&s, "LD_LIBRARY_PATH=/usr/local/cuda/lib64:/opt/nvidia-470/lib");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "Remove /opt/nvidia-470/lib from LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.loader", "/opt/nvidia-470/lib/libcuda.so.1, version 470.82.01, from LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.loader", "a reboot does not help");
  EXPECT_FIX_LACKS(dr, "cuda.loader", "Reboot");
  const il_check *c = il_doctor_find(dr, "cuda.loader");
  IL_CHECK(c && il_check_evidence(c, "also_on_path") && strstr(il_check_evidence(c, "also_on_path"), "535.54.03"));
  il_doctor_free(dr);
  /* The same directory holding the right version: OK. */
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "535.54.03");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sc_pop(&s);

  /* A conda environment that shipped a driver library. */
  stale_lib(root, "/home/u/miniconda3/envs/llm/lib", "libcuda.so", "525.60.13");
  sc_env(&s, "CONDA_PREFIX=/home/u/miniconda3/envs/llm");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "rm /home/u/miniconda3/envs/llm/lib/libcuda.so*");
  EXPECT_SUMMARY(dr, "cuda.loader", "conda environment");
  il_doctor_free(dr);
  sc_pop(&s);

  /* An ld.so.conf.d entry listed before the system directories. */
  sr_write(root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  sr_write(root, "/etc/ld.so.conf.d/00-nvidia-old.conf", "# left by a .run install\n/opt/nvidia-470/lib\n");
  stale_lib(root, "/opt/nvidia-470/lib", "libcuda.so", "470.82.01");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "Remove the line /opt/nvidia-470/lib from /etc/ld.so.conf.d/00-nvidia-old.conf, then sudo ldconfig");
  il_doctor_free(dr);
  sr_rm(root, "/etc/ld.so.conf.d/00-nvidia-old.conf");

  /* NVML cannot be loaded here, yet the version of libnvidia-ml.so.1 is read from its file
   * name: libraries older than the module are found, and the fix is not a reboot. */
  stale_lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "470.82.01");
  s.nvml[0] = 0;
  dr = sc_run(&s);
  EXPECT(dr, "driver.version_match", IL_VERDICT_FAIL, 3, "a reboot cannot help");
  EXPECT_SUMMARY(dr, "driver.version_match", "kernel module 535.54.03 but user-space driver library 470.82.01");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A CUDA image that bakes in its own libcuda (nvidia-docker#1256: "cuda driver mismatch
 * between host & docker"): inside the container, the image's copy comes first. */
static void test_loader_image_libcuda(void) {
  scen s;
  const char *root = healthy(&s);
  sr_touch(root, "/.dockerenv");
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=all");
  stale_lib(root, "/lib/x86_64-linux-gnu", "libcuda.so", "418.87.01");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "rebuild it without driver libraries");
  EXPECT_SUMMARY(dr, "cuda.loader", "system directory of the image");
  il_doctor_free(dr);
  sr_destroy(root);
}

int main(void) {
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) IL_SKIP("fake NVML/CUDA libraries not built (target il_fake_nvml, il_fake_cuda)");
  test_loader_order();
  test_loader_image_libcuda();
  return il_test_finish();
}
