/* probe/layout: containerd as K3s, RKE2 and containerd 2 lay it out, the GPU operator's driver
 * beside a host driver, and Jetson/Tegra. See layout.h.
 *
 * Sources:
 * - K3s writes its containerd config to /var/lib/rancher/k3s/agent/etc/containerd/config.toml on
 *   every start ("The config.toml will be overwritten by k3s when it restarts",
 *   https://github.com/k3s-io/k3s/issues/4070); changes go into config.toml.tmpl (config-v3.toml.tmpl
 *   for containerd 2), and nvidia-container-runtime found on PATH at start is added as runtimes
 *   "nvidia" (and "nvidia-cdi", https://github.com/k3s-io/k3s/pull/11065); pods use it through
 *   runtimeClassName: nvidia, or `default-runtime: nvidia` in /etc/rancher/k3s/config.yaml
 *   (https://github.com/NVIDIA/gpu-operator/issues/473 comments). RKE2 uses
 *   /var/lib/rancher/rke2/agent/etc/containerd/ (same issue: CONTAINERD_CONFIG=...config.toml.tmpl).
 * - containerd 2's default config is `version = 3` with single-quoted keys
 *   ([plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc],
 *   https://github.com/containerd/containerd/issues/10132); a version 3 config must put runtimes
 *   under io.containerd.cri.v1.runtime, not the version 2 plugin io.containerd.grpc.v1.cri
 *   (https://github.com/NVIDIA/nvidia-container-toolkit/pull/805, /pull/862). `imports` names
 *   drop-in files (nvidia-ctk writes one).
 * - GPU operator beside a host driver: the driver pod cannot unload the host module ("Could not
 *   unload NVIDIA driver kernel modules, driver is in use", https://github.com/NVIDIA/gpu-operator/issues/126);
 *   fix --set driver.enabled=false (https://github.com/NVIDIA/cloud-native-docs/pull/103). The
 *   operator's driver root is /run/nvidia/driver.
 * - Jetson: /etc/nv_tegra_release ("# R35 (release), REVISION: 4.1"); the container runtime mounts
 *   what the CSV files in /etc/nvidia-container-runtime/host-files-for-container.d name, and "the
 *   CSV files contain devices / files which may not be present on all Tegra variants. The NVIDIA
 *   runtime is supposed to handle these missing devices gracefully"
 *   (https://github.com/NVIDIA/nvidia-container-runtime/issues/123); without --runtime=nvidia a
 *   container gets none of them (https://github.com/flashrt-project/FlashRT/issues/7); NVML is not
 *   where non-Jetson tools look for it (https://github.com/ollama/ollama/issues/3098).
 */
#include "probe/layout.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/classes.h"
#include "probe/doctor.h"

#define IL__TOML_MAX ((size_t)1 << 18)

bool il__toml_value(const char *text, const char *key, char *buf, size_t n) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    const char *s = p + strspn(p, " \t");
    if (*s != '#' && !strncmp(s, key, kl) && (s[kl] == ' ' || s[kl] == '=' || s[kl] == '\t')) {
      const char *v = s + kl;
      v += strspn(v, " \t");
      if (*v == '=') {
        v++;
        v += strspn(v, " \t");
        if (*v == '"' || *v == '\'') {
          char q = *v++;
          size_t l = 0;
          while (v[l] && v[l] != q && v[l] != '\n') l++;
          if (l >= n) l = n - 1;
          memcpy(buf, v, l);
          buf[l] = 0;
          return true;
        }
      }
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return false;
}

/* ---- facts -------------------------------------------------------------------------------- */

void il__layout_facts(il_doctor *dr) {
  char text[1024];
  if (il_sysfs_read_line(&dr->fs, "/etc/nv_tegra_release", text, sizeof text)) {
    dr->tegra = true;
    /* "# R35 (release), REVISION: 4.1, GCID: ..." -> "R35.4.1" */
    int major = 0;
    char rev[32] = "";
    const char *r = strstr(text, "R");
    const char *v = strstr(text, "REVISION:");
    if (r) major = atoi(r + 1);
    if (v) sscanf(v + 9, " %31[0-9.]", rev);
    if (major) snprintf(dr->l4t_release, sizeof dr->l4t_release, "R%d%s%s", major, rev[0] ? "." : "", rev);
  }
  size_t len = 0;
  if (il_sysfs_read(&dr->fs, "/proc/device-tree/compatible", text, sizeof text, &len) == IL_OK) {
    for (size_t i = 0; i < len; i++)
      if (!text[i]) text[i] = ' ';
    if (strstr(text, "nvidia,tegra")) dr->tegra = true;
  }
}

/* ---- container.containerd ------------------------------------------------------------------- */

/* Appends the files an `imports = ["DIR/STAR.toml", "file.toml"] (STAR = *)` line names to text. */
static void il__imports(const il_sysfs *fs, char *text, size_t cap) {
  const char *im = strstr(text, "\nimports");
  if (!im && !strncmp(text, "imports", 7)) im = text;
  if (!im) return;
  char list[1024];
  size_t l = strcspn(im + 1, "\n");
  if (l >= sizeof list) l = sizeof list - 1;
  memcpy(list, im + 1, l);
  list[l] = 0;
  size_t len = strlen(text);
  for (char *p = list; (p = strpbrk(p, "\"'")) != NULL;) {
    char q = *p++;
    char *e = strchr(p, q);
    if (!e) break;
    *e = 0;
    char *star = strstr(p, "/*");
    if (star) {
      *star = 0;
      const char *suffix = star + 2;
      char **names;
      int n;
      if (il_sysfs_list(fs, p, &names, &n) == IL_OK) {
        for (int i = 0; i < n; i++) {
          size_t nl = strlen(names[i]), sl = strlen(suffix);
          if (nl < sl || strcmp(names[i] + nl - sl, suffix)) continue;
          char rel[1200];
          snprintf(rel, sizeof rel, "%s/%s", p, names[i]);
          size_t got = 0;
          if (len + 2 < cap) {
            text[len++] = '\n';
            if (il_sysfs_read(fs, rel, text + len, cap - len, &got) == IL_OK) len += got;
            text[len] = 0;
          }
        }
        il_sysfs_list_free(names, n);
      }
    } else if (len + 2 < cap) {
      size_t got = 0;
      text[len++] = '\n';
      if (il_sysfs_read(fs, p, text + len, cap - len, &got) == IL_OK) len += got;
      text[len] = 0;
    }
    p = e + 1;
  }
}

/* Where the nvidia runtime table sits: 0 absent, 1 under the version 2 CRI plugin
 * (io.containerd.grpc.v1.cri or plugins.cri), 3 under containerd 2's io.containerd.cri.v1.runtime. */
static int il__nvidia_runtime(const char *text) {
  int where = 0;
  for (const char *p = text; (p = strchr(p, '[')) != NULL; p++) {
    const char *e = strchr(p, ']');
    const char *nl = strchr(p, '\n');
    if (!e || (nl && nl < e)) continue;
    size_t l = (size_t)(e - p);
    char h[512];
    if (l >= sizeof h) continue;
    memcpy(h, p, l);
    h[l] = 0;
    if (!(strstr(h, "runtimes.nvidia") || strstr(h, "runtimes.'nvidia'") || strstr(h, "runtimes.\"nvidia\""))) continue;
    if (strstr(h, ".options")) continue;
    if (strstr(h, "io.containerd.cri.v1.runtime")) where = 3;
    else if (where < 1) where = 1;
  }
  return where;
}

void il__layout_check_containerd(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char p[512];
  const char *flavor = "containerd", *dir = "/etc/containerd", *svc = "containerd";
  const char *kcfg = NULL;
  if (il_sysfs_exists(fs, "/var/lib/rancher/k3s/agent/etc/containerd") || il_sysfs_which(fs, "k3s", p, sizeof p)) {
    flavor = "K3s", dir = "/var/lib/rancher/k3s/agent/etc/containerd", svc = "k3s", kcfg = "/etc/rancher/k3s/config.yaml";
  } else if (il_sysfs_exists(fs, "/var/lib/rancher/rke2/agent/etc/containerd") || il_sysfs_which(fs, "rke2", p, sizeof p)) {
    flavor = "RKE2", dir = "/var/lib/rancher/rke2/agent/etc/containerd", svc = "rke2-server (or rke2-agent)", kcfg = "/etc/rancher/rke2/config.yaml";
  }
  bool rancher = kcfg != NULL;
  char *text = il_mem_alloc(IL_MEM_OTHER, IL__TOML_MAX, "containerd config");
  if (!text) {
    dr->checks.oom = true;
    return;
  }
  char file[300];
  snprintf(file, sizeof file, "%s/config.toml", dir);
  size_t len = 0;
  bool have = il_sysfs_read(fs, file, text, IL__TOML_MAX - 1, &len) == IL_OK;
  il_check *c;
  bool installed = have || il_sysfs_which(fs, "containerd", p, sizeof p) || rancher;
  if (!have && !rancher) {
    il__check_na(&dr->checks, "container.containerd", IL_VERDICT_OK, 0, "no /etc/containerd/config.toml%s", installed ? " (containerd defaults)" : "");
    il_mem_free(text);
    return;
  }
  if (have) il__imports(fs, text, IL__TOML_MAX);
  else text[0] = 0;
  int version = 1;
  const char *v = strstr(text, "version");
  if (v && (v == text || v[-1] == '\n')) version = atoi(v + strcspn(v, "0123456789"));
  int where = il__nvidia_runtime(text);
  char deflt[64] = "";
  il__toml_value(text, "default_runtime_name", deflt, sizeof deflt);
  /* K3s/RKE2: the default can come from their own config instead. */
  char kdef[64] = "";
  if (kcfg) {
    char y[8192];
    if (il_sysfs_read(fs, kcfg, y, sizeof y, NULL) == IL_OK) {
      const char *d = strstr(y, "default-runtime:");
      if (d) sscanf(d + 16, " %63[A-Za-z0-9_.-]", kdef);
    }
  }
  bool is_default = !strcmp(deflt, "nvidia") || !strcmp(kdef, "nvidia");
  bool ncr = il_sysfs_which(fs, "nvidia-container-runtime", p, sizeof p);
  bool kube = rancher || il_sysfs_which(fs, "kubelet", p, sizeof p);
  char tmpl[300] = "";
  for (int i = 0; i < 2 && !tmpl[0]; i++) {
    char t[300];
    snprintf(t, sizeof t, "%s/%s", dir, i ? "config-v3.toml.tmpl" : "config.toml.tmpl");
    if (il_sysfs_exists(fs, t)) il_sysfs_copy(tmpl, sizeof tmpl, t);
  }
  if (version >= 3 && where == 1) {
    c = il__check_add(&dr->checks, "container.containerd", IL_VERDICT_FAIL, IL_CLASS_CONTAINERD2,
                      "%s config is version 3 (containerd 2) but its nvidia runtime sits under the version 2 plugin io.containerd.grpc.v1.cri, "
                      "which containerd 2 does not read for a version 3 config: pods get no nvidia runtime", file);
    il__check_fix(c, "Regenerate it with a toolkit that knows version 3 (>= 1.17.4): sudo nvidia-ctk runtime configure --runtime=containerd, or move the table to "
                     "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]; then sudo systemctl restart %s", svc);
  } else if (rancher && !where) {
    bool gpu = dr->gpu_expected;
    c = il__check_add(&dr->checks, "container.containerd", gpu ? IL_VERDICT_WARN : IL_VERDICT_OK, gpu ? IL_CLASS_K3S : 0,
                      "%s: its generated containerd config %s has no nvidia runtime%s", flavor, have ? file : "(not written yet)",
                      !gpu ? " (no GPU here)" : ncr ? ": it adds one only when nvidia-container-runtime is on PATH when it starts"
                                                 : ": the NVIDIA Container Toolkit is not installed");
    if (gpu && ncr) il__check_fix(c, "Restart %s so it finds nvidia-container-runtime: sudo systemctl restart %s (do not edit %s: %s rewrites it on start; "
                                     "changes go into %s/config.toml.tmpl)", flavor, svc, file, flavor, dir);
    else if (gpu) il__check_fix(c, "Install the NVIDIA Container Toolkit, then sudo systemctl restart %s (it adds the nvidia runtime itself)", svc);
    if (gpu && il_sysfs_exists(fs, "/etc/containerd/config.toml"))
      il__check_fix(c, "%s does not read /etc/containerd/config.toml: the nvidia runtime configured there does not reach its pods", flavor);
  } else if (!where && dr->gpu_expected) {
    c = il__check_add(&dr->checks, "container.containerd", IL_VERDICT_WARN, 19, "containerd has no 'nvidia' runtime: Kubernetes pods on this node get no GPU");
    il__check_fix(c, "sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default && sudo systemctl restart containerd");
  } else if (where && !is_default && kube && !rancher) {
    c = il__check_add(&dr->checks, "container.containerd", IL_VERDICT_WARN, 19,
                      "containerd has the 'nvidia' runtime but default is \"%s\": pods need runtimeClassName: nvidia", deflt[0] ? deflt : "runc");
    il__check_fix(c, "sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default && sudo systemctl restart containerd   "
                     "(or create a RuntimeClass 'nvidia' and set runtimeClassName in the pod spec)");
  } else if (where && rancher) {
    c = il__check_add(&dr->checks, "container.containerd", IL_VERDICT_OK, 0, "%s: nvidia runtime in %s%s", flavor, file,
                      is_default ? ", default runtime nvidia" : "; pods select it with runtimeClassName: nvidia (or set default-runtime: nvidia)");
  } else {
    c = il__check_add(&dr->checks, "container.containerd", IL_VERDICT_OK, 0, "containerd%s: nvidia runtime %s%s%s", version >= 3 ? " 2 (config version 3)" : "",
                      where ? "registered" : "absent (no GPU here)", deflt[0] ? ", default " : "", deflt);
  }
  il__check_ev(c, "config", "%s", have ? file : "absent");
  il__check_ev(c, "flavor", "%s", flavor);
  il__check_ev(c, "config_version", "%d", version);
  il__check_ev(c, "runtimes.nvidia", "%s", where == 3 ? "io.containerd.cri.v1.runtime" : where == 1 ? "io.containerd.grpc.v1.cri" : "absent");
  il__check_ev(c, "default_runtime_name", "%s", deflt[0] ? deflt : "(unset)");
  if (kdef[0]) il__check_ev(c, "default-runtime", "%s (%s)", kdef, kcfg);
  if (tmpl[0]) il__check_ev(c, "template", "%s", tmpl);
  il_mem_free(text);
}

/* ---- container.operator --------------------------------------------------------------------- */

/* Version from the libnvidia-ml.so.<ver> file in directory rel, "" when none. */
static void il__nvml_version_in(const il_sysfs *fs, const char *rel, char *buf, size_t n) {
  char **names;
  int k;
  buf[0] = 0;
  if (il_sysfs_list(fs, rel, &names, &k) != IL_OK) return;
  for (int i = 0; i < k && !buf[0]; i++)
    if (!strncmp(names[i], "libnvidia-ml.so.", 16) && strchr(names[i] + 16, '.')) il_sysfs_copy(buf, n, names[i] + 16);
  il_sysfs_list_free(names, k);
}

void il__layout_check_operator(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  il_sysfs_stat_t st;
  il_sysfs_stat(fs, "/run/nvidia/driver", true, &st);
  if (!st.is_dir) {
    il__check_na(&dr->checks, "container.operator", IL_VERDICT_OK, 0, "no GPU operator driver root (/run/nvidia/driver)");
    return;
  }
  static const char *const libdirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu"};
  char host[64] = "", op[64] = "";
  for (int i = 0; i < 3; i++) {
    char rel[200];
    if (!host[0]) il__nvml_version_in(fs, libdirs[i], host, sizeof host);
    snprintf(rel, sizeof rel, "/run/nvidia/driver%s", libdirs[i]);
    if (!op[0]) il__nvml_version_in(fs, rel, op, sizeof op);
  }
  il_check *c;
  if (host[0]) {
    c = il__check_add(&dr->checks, "container.operator", IL_VERDICT_FAIL, IL_CLASS_OPERATOR_HOST,
                      "the GPU operator's driver root /run/nvidia/driver (%s) and a host driver (libnvidia-ml %s) are both here%s%s: the driver pod "
                      "cannot unload the host module ('Could not unload NVIDIA driver kernel modules, driver is in use')",
                      op[0] ? op : "no driver libraries", host, dr->kmod_version[0] ? "; kernel module " : "", dr->kmod_version);
    il__check_fix(c, "Use one driver. Keep the host's: helm upgrade gpu-operator nvidia/gpu-operator -n gpu-operator --reuse-values --set driver.enabled=false "
                     "(or label the node nvidia.com/gpu.deploy.driver=false). Or let the operator own it: remove the host driver packages and reboot");
  } else {
    c = il__check_add(&dr->checks, "container.operator", IL_VERDICT_OK, 0, "the GPU operator's driver container provides the driver%s%s (/run/nvidia/driver)",
                      op[0] ? " " : "", op);
  }
  if (host[0]) il__check_ev(c, "host_libnvidia_ml", "%s", host);
  if (op[0]) il__check_ev(c, "operator_libnvidia_ml", "%s", op);
}

/* ---- jetson.platform ----------------------------------------------------------------------- */

void il__layout_check_jetson(il_doctor *dr) {
  if (!dr->tegra) return;
  const il_sysfs *fs = &dr->fs;
  il_check *c;
  bool nodes = il_sysfs_exists(fs, "/dev/nvmap") || il_sysfs_exists(fs, "/dev/nvhost-ctrl-gpu") || il_sysfs_exists(fs, "/dev/nvgpu/igpu0/ctrl") ||
               il_sysfs_exists(fs, "/dev/nvidia0");
  int csv = 0;
  char **names;
  int n;
  if (il_sysfs_list(fs, "/etc/nvidia-container-runtime/host-files-for-container.d", &names, &n) == IL_OK) {
    for (int i = 0; i < n; i++) csv += strstr(names[i], ".csv") != NULL;
    il_sysfs_list_free(names, n);
  }
  char cfg[8192] = "", mode[32] = "";
  if (il_sysfs_read(fs, "/etc/nvidia-container-runtime/config.toml", cfg, sizeof cfg, NULL) == IL_OK) il__toml_value(cfg, "mode", mode, sizeof mode);
  bool cuda_ok = dr->cuda.loaded && dr->cuda.init_rc == 0;
  if (dr->in_container && !dr->cuda.loaded) {
    c = il__check_add(&dr->checks, "jetson.platform", IL_VERDICT_FAIL, IL_CLASS_JETSON,
                      "Jetson (%s) container without the L4T CUDA libraries: it was started without the NVIDIA runtime, which mounts what the CSV "
                      "files list", dr->l4t_release[0] ? dr->l4t_release : "L4T");
    il__check_fix(c, "Restart the container with --runtime nvidia (Jetson containers get the GPU through CSV mode, not --gpus)");
  } else if (!nodes && !dr->in_container) {
    c = il__check_add(&dr->checks, "jetson.platform", IL_VERDICT_FAIL, IL_CLASS_JETSON,
                      "Jetson (%s) without the integrated GPU's device nodes (/dev/nvmap, /dev/nvhost-ctrl-gpu, /dev/nvgpu): the nvgpu driver is not loaded",
                      dr->l4t_release[0] ? dr->l4t_release : "L4T");
    il__check_fix(c, "Reflash or repair the L4T BSP (sudo apt install --reinstall nvidia-l4t-core nvidia-l4t-cuda) and reboot");
  } else {
    c = il__check_add(&dr->checks, "jetson.platform", IL_VERDICT_OK, 0, "Jetson (%s): integrated GPU%s; %s%s", dr->l4t_release[0] ? dr->l4t_release : "L4T",
                      cuda_ok ? ", CUDA initializes" : "", dr->nvml.loaded ? "NVML present" : "no NVML (normal on L4T: CUDA is the check)",
                      csv ? "; container runtime in CSV mode" : "");
  }
  il__check_ev(c, "l4t", "%s", dr->l4t_release[0] ? dr->l4t_release : "unknown");
  il__check_ev(c, "csv_files", "%d", csv);
  if (mode[0]) il__check_ev(c, "runtime_mode", "%s", mode);
}
