/* probe/k8s: the NVIDIA Kubernetes device plugin's MIG strategy (none / single / mixed), from
 * what a pod or a node lets a process read.
 *
 * The strategy decides how MIG devices become resources (NVIDIA/k8s-device-plugin README,
 * "--mig-strategy"; per-node through the plugin's config file, `version: v1 / flags:
 * migStrategy: mixed`, https://github.com/NVIDIA/gpu-operator/issues/704):
 * - none: whole GPUs as nvidia.com/gpu, MIG ignored: a pod given a MIG-enabled GPU gets the
 *   parent GPU and CUDA finds no device to run on;
 * - single: every GPU in MIG mode with one profile, each MIG device an nvidia.com/gpu;
 * - mixed: each profile its own resource, nvidia.com/mig-1g.10gb, ...
 * Either way the plugin names the devices it hands a container in NVIDIA_VISIBLE_DEVICES:
 * "MIG-<uuid>" entries for MIG devices, "GPU-<uuid>" for whole GPUs (issue #960 shows a pod's
 * MIG UUIDs). Only one MIG device is usable per CUDA process ("CUDA can only run on a single MIG
 * device anyway", https://github.com/NVIDIA/k8s-device-plugin/issues/728; a pod given four
 * 1g.10gb devices used only the first: issue #446).
 * What is readable:
 * - in a pod: NVIDIA_VISIBLE_DEVICES and NVML's view of the GPUs it was given (MIG mode);
 * - on a node: GPU feature discovery's label file, /etc/kubernetes/node-feature-discovery/
 *   features.d/gfd ("nvidia.com/mig.strategy=single", the label it publishes with the
 *   strategy; https://github.com/NVIDIA/deepops/pull/673 deploys it for MIG), and NVML.
 * What is not: the resource name a pod requested (nvidia.com/gpu vs nvidia.com/mig-*: pod
 * limits are not in the container's environment), node labels from inside a pod (the
 * downward API exposes the pod's own labels only), and the plugin's flags or ConfigMap from the
 * node's files (they live in the plugin's pod). The check says so instead of guessing.
 * Not for: MIG mode without instances on a bare machine (probe/driver gpu.mig).
 */
#include "probe/k8s.h"

#include <stdio.h>
#include <string.h>

#include "probe/doctor.h"

#define IL_K8S_GFD_FILE "/etc/kubernetes/node-feature-discovery/features.d/gfd"

static int il__mig_enabled_gpus(const il_doctor *dr, int *n_gpus) {
  int n = 0;
  *n_gpus = 0;
  for (int i = 0; i < dr->nvml.n_devices; i++) {
    if (dr->nvml.devices[i].handle_rc) continue;
    (*n_gpus)++;
    n += dr->nvml.devices[i].mig_current == 1;
  }
  return n;
}

static void il__fix_strategy(il_check *c) {
  il__check_fix(c, "Run the device plugin with a MIG strategy: mixed (request nvidia.com/mig-<profile>, e.g. nvidia.com/mig-1g.10gb: 1) or, "
                   "with every GPU in one MIG profile, single (request nvidia.com/gpu: 1): helm upgrade nvdp nvdp/nvidia-device-plugin "
                   "--set migStrategy=mixed (GPU Operator: mig.strategy=mixed in the ClusterPolicy), or per node the plugin's config "
                   "file 'version: v1 / flags: migStrategy: mixed'");
}

/* Inside a pod: what the plugin handed over. */
static void il__in_pod(il_doctor *dr) {
  const il_nvvis *v = &dr->nvvis;
  int n_mig = 0, n_gpu_uuid = 0;
  for (int i = 0; i < v->n_entries; i++) {
    if (!strncmp(v->entries[i], "MIG-", 4)) n_mig++;
    else if (!strncmp(v->entries[i], "GPU-", 4)) n_gpu_uuid++;
  }
  int n_gpus, n_mig_on = il__mig_enabled_gpus(dr, &n_gpus);
  il_check *c;
  if (n_mig == 0 && n_mig_on == 0) {
    c = il__check_na(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "Kubernetes pod without MIG devices (NVIDIA_VISIBLE_DEVICES has no MIG- entries, "
                     "NVML shows no GPU in MIG mode)");
  } else if (n_mig == 0 && n_mig_on > 0) {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_FAIL, 13, "this pod was given %s with MIG mode on (%d of %d GPUs) but no MIG device: the "
                      "device plugin runs with MIG strategy 'none', so CUDA finds no device to run on",
                      n_gpu_uuid ? "a whole GPU (NVIDIA_VISIBLE_DEVICES=GPU-...)" : "a GPU", n_mig_on, n_gpus);
    il__fix_strategy(c);
  } else if (n_mig > 1) {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_WARN, 0, "this pod was given %d MIG devices: a CUDA process uses only the first "
                      "(one MIG device per process)", n_mig);
    il__check_fix(c, "Request one MIG device per container (nvidia.com/mig-<profile>: 1, or nvidia.com/gpu: 1 with strategy single) and run one "
                     "process per MIG device, or use a larger profile");
  } else {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "this pod was given a MIG device by the device plugin (strategy single or mixed; "
                      "which one, and the resource requested, cannot be seen from inside the pod)");
  }
  il__check_ev(c, "mig_devices_given", "%d", n_mig);
  il__check_ev(c, "gpu_uuids_given", "%d", n_gpu_uuid);
  il__check_ev(c, "gpus_in_mig_mode", "%d of %d", n_mig_on, n_gpus);
  il__check_ev(c, "not_visible_here", "the resource requested (nvidia.com/gpu or nvidia.com/mig-*), node labels, the plugin's flags");
}

/* On a node: GPU feature discovery's label for the strategy against the GPUs' MIG modes. */
static void il__on_node(il_doctor *dr) {
  char text[4096], strategy[32] = "";
  size_t len = 0;
  bool have = il_sysfs_read(&dr->fs, IL_K8S_GFD_FILE, text, sizeof text, &len) == IL_OK;
  if (have) {
    for (char *line = text; line && *line;) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = 0;
      if (!strncmp(line, "nvidia.com/mig.strategy=", 24)) il_sysfs_copy(strategy, sizeof strategy, line + 24);
      line = nl ? nl + 1 : NULL;
    }
  }
  int n_gpus, n_mig_on = il__mig_enabled_gpus(dr, &n_gpus);
  il_check *c;
  if (!strategy[0]) {
    c = il__check_na(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "%s", have ? "GPU feature discovery labels without nvidia.com/mig.strategy"
                                                                          : "no GPU feature discovery labels (" IL_K8S_GFD_FILE "): not a Kubernetes GPU node, or the "
                                                                            "strategy is not published here");
    if (n_mig_on) il__check_ev(c, "gpus_in_mig_mode", "%d of %d", n_mig_on, n_gpus);
    return;
  }
  if (!strcmp(strategy, "none") && n_mig_on > 0) {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_WARN, 13, "the device plugin's MIG strategy is 'none' but %d of %d GPUs are in MIG mode: "
                      "pods requesting nvidia.com/gpu get a MIG-enabled GPU and CUDA finds no device", n_mig_on, n_gpus);
    il__fix_strategy(c);
  } else if (!strcmp(strategy, "single") && n_mig_on > 0 && n_mig_on < n_gpus) {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_WARN, 0, "the device plugin's MIG strategy is 'single' but only %d of %d GPUs are in MIG "
                      "mode: single needs every GPU in MIG mode with the same profile", n_mig_on, n_gpus);
    il__check_fix(c, "Put every GPU of this node in MIG mode with one profile, or switch the plugin to migStrategy=mixed "
                     "(pods then request nvidia.com/mig-<profile>)");
  } else if ((!strcmp(strategy, "single") || !strcmp(strategy, "mixed")) && n_gpus > 0 && n_mig_on == 0) {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "the device plugin's MIG strategy is '%s' and no GPU is in MIG mode: whole GPUs are "
                      "offered as nvidia.com/gpu", strategy);
  } else {
    c = il__check_add(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "the device plugin's MIG strategy is '%s' (%d of %d GPUs in MIG mode)", strategy,
                      n_mig_on, n_gpus);
  }
  il__check_ev(c, "strategy", "%s", strategy);
  il__check_ev(c, "source", "%s", IL_K8S_GFD_FILE);
  il__check_ev(c, "gpus_in_mig_mode", "%d of %d", n_mig_on, n_gpus);
}

void il__k8s_check_mig(il_doctor *dr) {
  if (dr->in_container && !strcmp(dr->container_engine, "kubernetes")) il__in_pod(dr);
  else if (!dr->in_container) il__on_node(dr);
  else il__check_na(&dr->checks, "k8s.mig", IL_VERDICT_OK, 0, "not a Kubernetes pod (%s container)", dr->container_engine);
}
