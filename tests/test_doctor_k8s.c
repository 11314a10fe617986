/* tests/test_doctor_k8s: the Kubernetes device plugin's MIG strategy (k8s.mig), from inside a
 * pod and on a node, rebuilt from public reports:
 * - strategy none on a MIG-enabled GPU: the pod gets the parent GPU (NVIDIA_VISIBLE_DEVICES=
 *   GPU-...) and CUDA finds no device; the strategies and the per-node config file
 *   ('flags: migStrategy: mixed') as in https://github.com/NVIDIA/gpu-operator/issues/704;
 * - a pod given several MIG devices uses only the first
 *   (https://github.com/NVIDIA/k8s-device-plugin/issues/446, #728: "CUDA can only run on a
 *   single MIG device anyway");
 * - on a node, GPU feature discovery's label file carries nvidia.com/mig.strategy
 *   (https://github.com/NVIDIA/deepops/pull/673 deploys GFD for MIG): 'none' with GPUs in MIG
 *   mode, and 'single' with only some GPUs in MIG mode, are warnings; mixed stays OK.
 * Negative cases: a pod with one MIG device, a pod without MIG, a node without the label file.
 */
#include "sysroots/scenario.h"

#define MIG0 "MIG-b2925bc6-41ca-5ccd-bf5e-24259386f88e"
#define MIG1 "MIG-fdfd2afa-5cbd-5d1d-b1ae-6f0e13cc0ff8"

/* k8s.mig does not apply here: an OK marked na. */
static void expect_na(const il_doctor *dr) {
  EXPECT(dr, "k8s.mig", IL_VERDICT_OK, 0, NULL);
  const il_check *c = il_doctor_find(dr, "k8s.mig");
  IL_CHECK(c && c->na);
}

static void pod(scen *s, const char *visible) {
  sc_env(s, "KUBERNETES_SERVICE_HOST=10.96.0.1");
  sc_env(s, visible);
}

static void test_pod(void) {
  scen s;
  /* Strategy none: the parent of a MIG-enabled GPU, no MIG device. */
  const char *root = sc_two_a100(&s, "dev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=3\n");
  pod(&s, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa1111-2222-3333-4444-555555555555");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_FAIL, 13, "migStrategy=mixed");
  EXPECT_SUMMARY(dr, "k8s.mig", "MIG strategy 'none'");
  EXPECT(dr, "k8s.mig", IL_VERDICT_FAIL, 13, "nvidia.com/mig-1g.10gb");
  il_doctor_free(dr);
  sr_destroy(root);

  /* Negative: one MIG device. */
  root = sc_two_a100(&s, "dev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=3\n");
  pod(&s, "NVIDIA_VISIBLE_DEVICES=" MIG0);
  dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "k8s.mig", "cannot be seen from inside the pod");
  il_doctor_free(dr);
  sr_destroy(root);

  /* Two MIG devices: only the first is used. */
  root = sc_two_a100(&s, "dev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=3\n");
  pod(&s, "NVIDIA_VISIBLE_DEVICES=" MIG0 "," MIG1);
  dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_WARN, 0, "one process per MIG device");
  EXPECT_SUMMARY(dr, "k8s.mig", "2 MIG devices");
  il_doctor_free(dr);
  sr_destroy(root);

  /* Negative: no MIG anywhere. */
  root = sc_two_a100(&s, "");
  pod(&s, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa1111-2222-3333-4444-555555555555");
  dr = sc_run(&s);
  expect_na(dr);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_node(void) {
  scen s;
  const char *gfd = "/etc/kubernetes/node-feature-discovery/features.d/gfd";
  /* none, with a GPU in MIG mode. */
  const char *root = sc_two_a100(&s, "dev0.mig=1\ndev0.mig_max=7\ndev0.mig_count=3\n");
  sr_write(root, gfd, "nvidia.com/cuda.driver.major=535\nnvidia.com/mig.strategy=none\nnvidia.com/gpu.count=2\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_WARN, 13, "migStrategy=mixed");
  EXPECT_SUMMARY(dr, "k8s.mig", "1 of 2 GPUs are in MIG mode");
  il_doctor_free(dr);

  /* single with only one GPU in MIG mode. */
  sr_write(root, gfd, "nvidia.com/mig.strategy=single\n");
  dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_WARN, 0, "switch the plugin to migStrategy=mixed");
  il_doctor_free(dr);

  /* Negative: mixed. */
  sr_write(root, gfd, "nvidia.com/mig.strategy=mixed\n");
  dr = sc_run(&s);
  EXPECT(dr, "k8s.mig", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "k8s.mig", "'mixed' (1 of 2 GPUs in MIG mode)");
  il_doctor_free(dr);

  /* Negative: no label file. */
  sr_rm(root, gfd);
  dr = sc_run(&s);
  expect_na(dr);
  il_doctor_free(dr);
  sr_destroy(root);
}

int main(void) {
  test_pod();
  test_node();
  return il_test_finish();
}
