/* probe/cgroup: containers beyond Docker: device cgroup rules, LXC/LXD/Proxmox container
 * configs, rootless engines, and fixes that fit the engine found.
 *
 * A container may see /dev/nvidia* and still be refused by the device cgroup: CUDA then fails
 * in cuInit (999, or "cudaGetDeviceCount returned 30" with old runtimes,
 * https://github.com/canonical/lxd/issues/5618, where re-adding nvidia-uvm fixed it). The
 * major numbers that matter come from /proc/devices: "nvidia-frontend" (or "nvidia") is 195,
 * but "nvidia-uvm" gets a dynamic major that can change when the driver changes
 * (https://github.com/negativo17/nvidia-driver/issues/29: "the major is hardcoded for the main
 * nvidia devices but not for the UVM ones"; a CDI spec with the old uvm major 510 instead of
 * 509 made cuInit return 999: https://github.com/NVIDIA/nvidia-container-toolkit/issues/1934).
 * cgroup v1 lists the rules in devices.list ("c 195:* rwm", "a *:* rwm"); cgroup v2 enforces
 * them with an eBPF program that cannot be read back, so inside a v2 container the rules are
 * judged from their effect only (the host side is checked through the LXC configs).
 * Rootless Docker/Podman cannot write device rules: the toolkit needs no-cgroups = true
 * ("failed to add device rules", https://github.com/NVIDIA/nvidia-docker/issues/1546; setting:
 * nvidia-ctk config --set nvidia-container-cli.no-cgroups=true, nvidia-ctk README).
 * systemd services are cgroups too: a unit with PrivateDevices=yes, or DevicePolicy=closed/strict
 * whose DeviceAllow= misses the NVIDIA device classes, runs without the GPU and falls back to the
 * CPU (NixOS's ollama unit lacked "char-nvidia-frontend": https://github.com/NixOS/nixpkgs/issues/331069,
 * fixed in https://github.com/NixOS/nixpkgs/pull/331125; PrivateDevices hid CUDA devices:
 * https://github.com/NixOS/nixpkgs/pull/266167; on WSL the list needs /dev/dxg:
 * https://github.com/NixOS/nixpkgs/issues/363357).
 * Not for: Docker's daemon.json, containerd or CDI specs (container.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/cgroup.h"
#include "probe/distro.h"
#include "probe/doctor.h"

int il__cgroup_devices_major(const il_sysfs *fs, const char *name) {
  char text[8192];
  if (il_sysfs_read(fs, "/proc/devices", text, sizeof text, NULL) != IL_OK) return -1;
  /* Only the "Character devices:" section; block majors are another namespace. */
  char *blk = strstr(text, "Block devices:");
  if (blk) *blk = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    int major;
    char dev[64];
    if (sscanf(line, " %d %63s", &major, dev) == 2 && !strcmp(dev, name)) return major;
  }
  return -1;
}

void il__cgroup_fix_request_gpus(const il_doctor *dr, il_check *c) {
  const char *e = dr->container_engine;
  if (!strcmp(e, "kubernetes")) {
    il__check_fix(c, "Request the GPU in the pod spec: resources: limits: nvidia.com/gpu: 1   (the NVIDIA device plugin must run on the node; "
                     "if containerd's default runtime is not nvidia, also set runtimeClassName: nvidia)");
  } else if (!strcmp(e, "podman")) {
    il__check_fix(c, "podman run --device nvidia.com/gpu=all IMAGE ...   (CDI: on the host, sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)");
  } else if (!strcmp(e, "lxc")) {
    int uvm = il__cgroup_devices_major(&dr->fs, "nvidia-uvm");
    char uvm_rule[128] = " (and c M:* rwm with M the nvidia-uvm major from /proc/devices on the host)";
    if (uvm >= 0) snprintf(uvm_rule, sizeof uvm_rule, " and c %d:* rwm", uvm);
    il__check_fix(c, "On the host, give the container the GPU: LXD: lxc config device add NAME gpu gpu; LXC/Proxmox: lxc.mount.entry for "
                     "/dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm plus lxc.cgroup2.devices.allow: c 195:* rwm%s", uvm_rule);
  } else {
    il__check_fix(c, "Start the container with GPUs: docker run --gpus all IMAGE ...   (or --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all)");
  }
}

const char *il__cgroup_engine_recreate(const il_doctor *dr) {
  const char *e = dr->container_engine;
  if (!strcmp(e, "kubernetes")) return "kubectl delete pod POD (its controller recreates it with the GPU)";
  if (!strcmp(e, "podman")) return "podman rm -f NAME && podman run --device nvidia.com/gpu=all ...";
  if (!strcmp(e, "lxc")) return "restart the container from the host (lxc restart NAME; Proxmox: pct reboot ID)";
  return "docker rm -f NAME && docker run --gpus all ...";
}

/* ---- inside a container: the device cgroup --------------------------------------------- */

/* True when a devices.list text allows rw on character device major:minor. */
static bool il__v1_allows(const char *list, int major, int minor) {
  char tmp[8192];
  il_sysfs_copy(tmp, sizeof tmp, list);
  char *save = NULL;
  for (char *line = strtok_r(tmp, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char type, maj[16], min[16], acc[8];
    if (sscanf(line, " %c %15[^:]:%15s %7s", &type, maj, min, acc) != 4) continue;
    if (type != 'a' && type != 'c') continue;
    bool mok = !strcmp(maj, "*") || atoi(maj) == major;
    bool nok = !strcmp(min, "*") || atoi(min) == minor;
    if (mok && nok && strchr(acc, 'r') && strchr(acc, 'w')) return true;
  }
  return false;
}

void il__cgroup_check_devices(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  il_check *c;
  bool any_node = il_sysfs_exists(fs, "/dev/nvidiactl") || il_sysfs_exists(fs, "/dev/nvidia-uvm");
  if (!any_node) {
    il__check_na(&dr->checks, "container.devices", IL_VERDICT_OK, 0, "no /dev/nvidia* nodes in this container: no device rules to check (see container.injection)");
    return;
  }
  int nv_major = il__cgroup_devices_major(fs, "nvidia-frontend");
  if (nv_major < 0) nv_major = il__cgroup_devices_major(fs, "nvidia");
  if (nv_major < 0) nv_major = 195; /* fixed major of the NVIDIA character devices */
  int uvm_major = il__cgroup_devices_major(fs, "nvidia-uvm");
  /* The devices hierarchy of this process (cgroup v1): "N:devices:/path". */
  char cg[4096] = "", rel[600] = "/sys/fs/cgroup/devices/devices.list";
  il_sysfs_read(fs, "/proc/self/cgroup", cg, sizeof cg, NULL);
  const char *d = strstr(cg, ":devices:");
  char list[8192] = "";
  bool have_list = false;
  if (d) {
    char path[400];
    il_sysfs_copy(path, sizeof path, d + 9);
    path[strcspn(path, "\n")] = 0;
    char nested[600];
    snprintf(nested, sizeof nested, "/sys/fs/cgroup/devices%s/devices.list", strcmp(path, "/") ? path : "");
    have_list = il_sysfs_read(fs, nested, list, sizeof list, NULL) == IL_OK;
    if (have_list) il_sysfs_copy(rel, sizeof rel, nested);
  }
  if (!have_list) have_list = il_sysfs_read(fs, rel, list, sizeof list, NULL) == IL_OK;
  bool v2 = il_sysfs_exists(fs, "/sys/fs/cgroup/cgroup.controllers");
  if (!have_list) {
    c = il__check_add(&dr->checks, "container.devices", IL_VERDICT_OK, 0, "%s: device rules are an eBPF program that cannot be read from inside; "
                      "judged by their effect (cuda.init, driver.nvml)", v2 ? "cgroup v2" : "no devices.list");
    il__check_ev(c, "cgroup", "%s", v2 ? "v2" : "unknown");
    if (uvm_major >= 0) il__check_ev(c, "nvidia_uvm_major", "%d", uvm_major);
    return;
  }
  char blocked[300] = "";
  if (!il__v1_allows(list, nv_major, 255)) il_appendf(blocked, sizeof blocked, "%s/dev/nvidiactl (c %d:255)", blocked[0] ? ", " : "", nv_major);
  if (il_sysfs_exists(fs, "/dev/nvidia0") && !il__v1_allows(list, nv_major, 0))
    il_appendf(blocked, sizeof blocked, "%s/dev/nvidia0 (c %d:0)", blocked[0] ? ", " : "", nv_major);
  if (uvm_major >= 0 && !il__v1_allows(list, uvm_major, 0))
    il_appendf(blocked, sizeof blocked, "%s/dev/nvidia-uvm (c %d:0)", blocked[0] ? ", " : "", uvm_major);
  if (blocked[0]) {
    c = il__check_add(&dr->checks, "container.devices", IL_VERDICT_FAIL, 22,
                      "the device cgroup (%s) does not allow %s: opening it fails with EPERM and CUDA cannot initialize", rel, blocked);
    if (!strcmp(dr->container_engine, "lxc")) {
      char uvm[48] = "";
      if (uvm_major >= 0) snprintf(uvm, sizeof uvm, " and c %d:* rwm", uvm_major);
      il__check_fix(c, "On the host, allow the majors in the container's config (Proxmox: /etc/pve/lxc/ID.conf): lxc.cgroup.devices.allow = c %d:* rwm%s, "
                       "then restart the container", nv_major, uvm);
    } else
      il__check_fix(c, "Recreate the container with the NVIDIA runtime so it adds the device rules: %s; "
                       "on a host with the systemd cgroup driver: sudo nvidia-ctk system create-dev-char-symlinks --create-all", il__cgroup_engine_recreate(dr));
  } else {
    c = il__check_add(&dr->checks, "container.devices", IL_VERDICT_OK, 0, "the device cgroup allows the NVIDIA devices (c %d:*%s)", nv_major,
                      uvm_major >= 0 ? " and nvidia-uvm" : "");
  }
  il__check_ev(c, "devices_list", "%s", rel);
  il__check_ev(c, "nvidia_major", "%d", nv_major);
  if (uvm_major >= 0) il__check_ev(c, "nvidia_uvm_major", "%d", uvm_major);
  else il__check_ev(c, "nvidia_uvm_major", "unknown (no nvidia-uvm in /proc/devices)");
}

/* ---- on a host: LXC / Proxmox container configs ----------------------------------------- */

/* Checks one LXC config text that passes NVIDIA nodes through; appends what is wrong. */
static void il__lxc_config(const char *file, const char *text, int nv_major, int uvm_major, char *bad, size_t nb, char *fixes, size_t nf) {
  if (!strstr(text, "/dev/nvidia")) return;
  bool all = false, nv_ok = false, uvm_ok = false;
  int listed_uvm = -1;
  char tmp[16384];
  il_sysfs_copy(tmp, sizeof tmp, text);
  char *save = NULL;
  for (char *line = strtok_r(tmp, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    const char *a = strstr(line, "devices.allow");
    if (!a || line[strspn(line, " \t")] == '#') continue;
    a += strlen("devices.allow");
    a += strspn(a, " \t:=");
    char type, maj[16];
    if (sscanf(a, "%c %15[^:]", &type, maj) != 2) continue;
    if (type == 'a') all = true;
    if (type != 'c') continue;
    if (!strcmp(maj, "*")) all = true;
    else if (atoi(maj) == nv_major) nv_ok = true;
    else if (atoi(maj) == uvm_major) uvm_ok = true;
    /* Any other dynamic major (DRM is 226) next to the nvidia lines is taken for an old
     * nvidia-uvm major [inferred]. */
    else if (atoi(maj) >= 234) listed_uvm = atoi(maj);
  }
  if (all || (nv_ok && (uvm_ok || uvm_major < 0))) return;
  size_t l = strlen(bad);
  if (!nv_ok) il_appendf(bad, nb, "%s%s allows no c %d:* (nvidia)", l ? "; " : "", file, nv_major);
  else if (listed_uvm >= 0)
    il_appendf(bad, nb, "%s%s allows c %d:* but nvidia-uvm is now major %d (/proc/devices)", l ? "; " : "", file, listed_uvm, uvm_major);
  else il_appendf(bad, nb, "%s%s allows no c %d:* (nvidia-uvm)", l ? "; " : "", file, uvm_major);
  l = strlen(fixes);
  il_appendf(fixes, nf, "%sin %s: lxc.cgroup2.devices.allow: c %d:* rwm%s", l ? "; " : "", file, !nv_ok ? nv_major : uvm_major,
             !nv_ok && uvm_major >= 0 ? " (and the nvidia-uvm major from /proc/devices)" : "");
}

void il__cgroup_check_lxc(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  static const char *const dirs[] = {"/etc/pve/lxc", "/var/lib/lxc"};
  int nv_major = il__cgroup_devices_major(fs, "nvidia-frontend");
  if (nv_major < 0) nv_major = il__cgroup_devices_major(fs, "nvidia");
  if (nv_major < 0) nv_major = 195;
  int uvm_major = il__cgroup_devices_major(fs, "nvidia-uvm");
  char bad[600] = "", fixes[600] = "";
  int n_gpu_configs = 0;
  char *text = il_mem_alloc(IL_MEM_OTHER, 16384, "LXC config");
  if (!text) {
    dr->checks.oom = true;
    return;
  }
  for (int d = 0; d < 2; d++) {
    char **names;
    int n;
    if (il_sysfs_list(fs, dirs[d], &names, &n) != IL_OK) continue;
    for (int i = 0; i < n; i++) {
      char rel[600];
      /* Proxmox: /etc/pve/lxc/ID.conf; LXC: /var/lib/lxc/NAME/config. */
      if (d == 0) snprintf(rel, sizeof rel, "%s/%s", dirs[d], names[i]);
      else snprintf(rel, sizeof rel, "%s/%s/config", dirs[d], names[i]);
      if (il_sysfs_read(fs, rel, text, 16384, NULL) != IL_OK || !strstr(text, "/dev/nvidia")) continue;
      n_gpu_configs++;
      il__lxc_config(rel, text, nv_major, uvm_major, bad, sizeof bad, fixes, sizeof fixes);
    }
    il_sysfs_list_free(names, n);
  }
  il_mem_free(text);
  if (n_gpu_configs == 0) {
    il__check_na(&dr->checks, "container.lxc", IL_VERDICT_OK, 0, "no LXC/Proxmox container passes NVIDIA devices through");
    return;
  }
  il_check *c;
  if (bad[0]) {
    c = il__check_add(&dr->checks, "container.lxc", IL_VERDICT_WARN, 22, "LXC container device rules block the GPU: %s", bad);
    il__check_fix(c, "Allow the current majors, then restart the container: %s", fixes);
  } else {
    c = il__check_add(&dr->checks, "container.lxc", IL_VERDICT_OK, 0, "%d LXC container config%s pass the NVIDIA devices with matching device rules",
                      n_gpu_configs, n_gpu_configs == 1 ? "" : "s");
  }
  il__check_ev(c, "nvidia_major", "%d", nv_major);
  if (uvm_major >= 0) il__check_ev(c, "nvidia_uvm_major", "%d", uvm_major);
  else il__check_ev(c, "nvidia_uvm_major", "unknown (no nvidia-uvm in /proc/devices)");
}

/* ---- on a host: rootless engines ---------------------------------------------------------- */

void il__cgroup_check_rootless(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  const char *home = il_sysfs_getenv(fs, "HOME");
  const char *dh = il_sysfs_getenv(fs, "DOCKER_HOST");
  char rel[600] = "", p[512];
  bool rootless_docker = dh && strstr(dh, "/run/user/");
  if (home) {
    snprintf(rel, sizeof rel, "%s/.config/docker/daemon.json", home);
    rootless_docker |= il_sysfs_exists(fs, rel);
  }
  rootless_docker |= il_sysfs_which(fs, "dockerd-rootless.sh", p, sizeof p);
  char cfg[16384];
  bool have_cfg = il_sysfs_read(fs, "/etc/nvidia-container-runtime/config.toml", cfg, sizeof cfg, NULL) == IL_OK;
  bool no_cgroups = false;
  if (have_cfg) {
    /* An uncommented "no-cgroups = true" line. */
    for (const char *q = cfg; (q = strstr(q, "no-cgroups")) != NULL; q++) {
      const char *ls = q;
      while (ls > cfg && ls[-1] != '\n') ls--;
      if (*(ls + strspn(ls, " \t")) == '#') continue;
      const char *v = q + strlen("no-cgroups");
      v += strspn(v, " \t=");
      if (!strncmp(v, "true", 4)) no_cgroups = true;
    }
  }
  il_check *c;
  if (!rootless_docker) {
    il__check_na(&dr->checks, "container.rootless", IL_VERDICT_OK, 0, "no rootless Docker for this user");
    return;
  }
  if (dr->gpu_expected && !no_cgroups) {
    c = il__check_add(&dr->checks, "container.rootless", IL_VERDICT_WARN, 17,
                      "rootless Docker, but the toolkit still manages device cgroups: GPU containers fail with 'failed to add device rules'");
    il__check_fix(c, "sudo nvidia-ctk config --set nvidia-container-cli.no-cgroups=true --in-place   (or request GPUs through CDI: "
                     "docker run --device nvidia.com/gpu=all with a spec from nvidia-ctk cdi generate)");
  } else {
    c = il__check_add(&dr->checks, "container.rootless", IL_VERDICT_OK, 0, "rootless Docker%s", no_cgroups ? " with no-cgroups = true in the toolkit config" : "");
  }
  il__check_ev(c, "no_cgroups", "%s", no_cgroups ? "true" : "false");
  if (dh) il__check_ev(c, "DOCKER_HOST", "%s", dh);
}

/* ---- on a host: systemd services that serve models -------------------------------------- */

/* True when a unit text looks like a model server: the engines users run as services. */
static bool il__inference_unit(const char *name, const char *text) {
  static const char *const words[] = {"ollama", "vllm", "llama-server", "llama.cpp", "inferlab", "sglang", "tritonserver",
                                      "text-generation", "local-ai", "localai", "comfyui", "whisper", NULL};
  for (int i = 0; words[i]; i++)
    if (il_sysfs_stristr(name, words[i]) || il_sysfs_stristr(text, words[i])) return true;
  return false;
}

/* Last value of `Key=` in a unit text (drop-ins appended after the unit); "" when absent. */
static void il__unit_value(const char *text, const char *key, char *buf, size_t n) {
  buf[0] = 0;
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    const char *ls = p + strspn(p, " \t");
    if (!strncmp(ls, key, kl) && ls[kl] == '=') {
      size_t l = strcspn(ls + kl + 1, "\r\n");
      if (l >= n) l = n - 1;
      memcpy(buf, ls + kl + 1, l);
      buf[l] = 0;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
}

/* True when some DeviceAllow= line names the device class `cls` ("char-nvidia-uvm") or the
 * node `node` ("/dev/nvidia-uvm"), or all NVIDIA nodes ("/dev/nvidia*", "char-nvidia*"). */
static bool il__unit_allows(const char *text, const char *cls, const char *node) {
  for (const char *p = text; (p = strstr(p, "DeviceAllow=")) != NULL; p++) {
    char v[200];
    size_t l = strcspn(p + 12, "\r\n");
    if (l >= sizeof v) l = sizeof v - 1;
    memcpy(v, p + 12, l);
    v[l] = 0;
    char *sp = strpbrk(v, " \t");
    if (sp) *sp = 0;
    if (!strcmp(v, cls) || !strcmp(v, node) || !strcmp(v, "/dev/nvidia*") || !strcmp(v, "char-nvidia*")) return true;
  }
  return false;
}

void il__cgroup_check_systemd(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  static const char *const dirs[] = {"/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"};
  char bad[500] = "", fixes[700] = "", seen[400] = "";
  int n_units = 0;
  char *text = il_mem_alloc(IL_MEM_OTHER, 65536, "systemd unit");
  if (!text) {
    dr->checks.oom = true;
    return;
  }
  for (int d = 0; d < 3; d++) {
    char **names;
    int n;
    if (il_sysfs_list(fs, dirs[d], &names, &n) != IL_OK) continue;
    for (int i = 0; i < n; i++) {
      size_t nl = strlen(names[i]);
      if (nl < 9 || strcmp(names[i] + nl - 8, ".service")) continue;
      char key[140];
      snprintf(key, sizeof key, " %.120s ", names[i]);
      if (strstr(seen, key)) continue; /* /etc overrides /usr/lib */
      char rel[600];
      snprintf(rel, sizeof rel, "%s/%s", dirs[d], names[i]);
      size_t len = 0;
      if (il_sysfs_read(fs, rel, text, 65535, &len) != IL_OK || !il__inference_unit(names[i], text)) continue;
      il_appendf(seen, sizeof seen, "%s", key);
      /* Drop-ins: the .conf files of /etc/systemd/system/NAME.service.d, appended in name order. */
      char ddir[600];
      snprintf(ddir, sizeof ddir, "/etc/systemd/system/%s.d", names[i]);
      char **drops;
      int nd;
      if (il_sysfs_list(fs, ddir, &drops, &nd) == IL_OK) {
        for (int k = 0; k < nd && len + 2 < 65535; k++) {
          char drel[800];
          snprintf(drel, sizeof drel, "%s/%s", ddir, drops[k]);
          size_t got = 0;
          text[len++] = '\n';
          if (il_sysfs_read(fs, drel, text + len, 65535 - len, &got) == IL_OK) len += got;
          text[len] = 0;
        }
        il_sysfs_list_free(drops, nd);
      }
      n_units++;
      char priv[32], policy[32];
      il__unit_value(text, "PrivateDevices", priv, sizeof priv);
      il__unit_value(text, "DevicePolicy", policy, sizeof policy);
      char missing[200] = "";
      bool private_dev = !strcmp(priv, "yes") || !strcmp(priv, "true") || !strcmp(priv, "1");
      if (!strcmp(policy, "closed") || !strcmp(policy, "strict") || private_dev) {
        if (dr->wsl) {
          if (!il__unit_allows(text, "/dev/dxg", "/dev/dxg")) il_appendf(missing, sizeof missing, "/dev/dxg");
        } else {
          if (!il__unit_allows(text, "char-nvidia-frontend", "/dev/nvidia0")) il_appendf(missing, sizeof missing, "char-nvidia-frontend ");
          if (!il__unit_allows(text, "char-nvidiactl", "/dev/nvidiactl") && !il__unit_allows(text, "char-nvidia-frontend", "/dev/nvidiactl"))
            il_appendf(missing, sizeof missing, "char-nvidiactl ");
          if (!il__unit_allows(text, "char-nvidia-uvm", "/dev/nvidia-uvm")) il_appendf(missing, sizeof missing, "char-nvidia-uvm");
        }
      }
      if (!private_dev && !missing[0]) continue;
      il_appendf(bad, sizeof bad, "%s%s: %s%s%s", bad[0] ? "; " : "", names[i], private_dev ? "PrivateDevices=yes hides /dev/nvidia*" : "",
                 private_dev && missing[0] ? ", " : "", missing[0] ? "DeviceAllow= lacks " : "");
      if (missing[0]) il_appendf(bad, sizeof bad, "%s", missing);
      char allow[300];
      if (dr->wsl) snprintf(allow, sizeof allow, "DeviceAllow=/dev/dxg rw");
      else snprintf(allow, sizeof allow, "DeviceAllow=char-nvidia-frontend rw, DeviceAllow=char-nvidiactl rw, DeviceAllow=char-nvidia-uvm rw");
      il_appendf(fixes, sizeof fixes, "%ssudo systemctl edit %s  ->  [Service] %s%s; then sudo systemctl restart %s", fixes[0] ? "\n" : "", names[i],
                 private_dev ? "PrivateDevices=no, " : "", allow, names[i]);
    }
    il_sysfs_list_free(names, n);
  }
  il_mem_free(text);
  if (!n_units) {
    il__check_na(&dr->checks, "service.devices", IL_VERDICT_OK, 0, "no systemd service of a model server (ollama, vllm, llama-server, ...)");
    return;
  }
  il_check *c;
  if (bad[0] && dr->gpu_expected) {
    c = il__check_add(&dr->checks, "service.devices", IL_VERDICT_FAIL, 22, "systemd sandboxing keeps the GPU from the service, so it runs on the CPU: %s", bad);
    il__check_fix(c, "%s", fixes);
  } else {
    c = il__check_add(&dr->checks, "service.devices", IL_VERDICT_OK, 0, "%d model-server service%s can open the GPU devices", n_units, n_units == 1 ? "" : "s");
  }
  il__check_ev(c, "units", "%s", seen);
}

/* ---- inside a container: advice that works there ------------------------------------------
 * Reboots, rmmod/modprobe, package managers, group changes, DKMS, initramfs, Secure Boot keys and
 * service restarts cannot be done from inside a container: they change the host. Every fix line
 * of a container's report that names one is marked as the host's (or the runtime's) job, so a
 * user in a container is never told to run what cannot work where they are. */

static bool il__host_only(const char *line) {
  static const char *const words[] = {"reboot", "rmmod", "modprobe", "usermod", "apt ", "apt-get", "apt-mark", "dnf ", "yum ", "zypper",
                                      "pacman", "dkms", "update-initramfs", "dracut", "mkinitcpio", "mokutil", "systemctl", "setsebool",
                                      "update-grub", "grub2-mkconfig", "akmods", "nvidia-ctk", "snap ", "ubuntu-drivers", "kmodgenca",
                                      "power-cycle", "nvidia-smi -r", "nvidia-smi -i", "nvidia-smi mig", "/etc/modprobe.d", "log out", "newgrp",
                                      "sbios", "firmware setup", NULL};
  for (int i = 0; words[i]; i++)
    if (il_sysfs_stristr(line, words[i])) return true;
  return false;
}

void il__cgroup_container_advice(il_doctor *dr) {
  if (!dr->in_container) return;
  for (int i = 0; i < dr->checks.n; i++) {
    il_check *c = &dr->checks.items[i];
    if (!c->fix[0]) continue;
    char out[sizeof c->fix] = "";
    for (const char *p = c->fix; *p;) {
      size_t l = strcspn(p, "\n");
      char line[sizeof c->fix];
      memcpy(line, p, l);
      line[l] = 0;
      bool host = il_sysfs_stristr(line, "on the host") || il_sysfs_stristr(line, "recreate") || il_sysfs_stristr(line, "restart the container") ||
                  il_sysfs_stristr(line, "start the container");
      il_appendf(out, sizeof out, "%s%s%s", out[0] ? "\n" : "", !host && il__host_only(line) ? "On the host (it cannot be done inside this container): " : "",
                 line);
      p += l;
      if (*p) p++;
    }
    il_sysfs_copy(c->fix, sizeof c->fix, out);
  }
}
