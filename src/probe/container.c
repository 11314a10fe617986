/* probe/container: containers and the NVIDIA Container Toolkit.
 *
 * Inside a container (docker: /.dockerenv; podman: /run/.containerenv; Kubernetes:
 * KUBERNETES_SERVICE_HOST; or the engine named in /proc/1/cgroup) the question is whether the
 * toolkit injected the driver: libnvidia-ml / libcuda loadable, /dev/nvidia* present,
 * NVIDIA_DRIVER_CAPABILITIES with compute and utility. On a host it is whether containers can
 * get the GPU: toolkit binaries, /etc/nvidia-container-runtime/config.toml (its driver root),
 * docker's daemon.json ("runtimes": {"nvidia": ...}, "default-runtime"), containerd's
 * config.toml, and CDI specs in /etc/cdi and /var/run/cdi (present, and not stale: the driver
 * version in their library paths and their device nodes must match this machine).
 * daemon.json is parsed with jansson (a real JSON parser: what dockerd refuses, doctor calls
 * invalid, and the reverse); the TOML files by line.
 * Not for: starting or configuring anything; fixes are printed as commands.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/container.h"
#include "probe/cgroup.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/classes.h"
#include "probe/layout.h"
#include "probe/loader.h"
#include "probe/security.h"

/* dockerd reads daemon.json whole; 1 MiB is far above any real one (they are a few KiB). */
#define IL__DAEMON_JSON_MAX ((size_t)1 << 20)

/* ---- facts ---------------------------------------------------------------------------- */

void il__container_facts(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  const char *engine = NULL;
  char cg[4096] = "";
  il_sysfs_read(fs, "/proc/1/cgroup", cg, sizeof cg, NULL);
  const char *cenv = il_sysfs_getenv(fs, "container");
  if (il_sysfs_getenv(fs, "KUBERNETES_SERVICE_HOST") || strstr(cg, "kubepods")) engine = "kubernetes";
  else if (il_sysfs_exists(fs, "/run/.containerenv") || strstr(cg, "libpod") || (cenv && !strcmp(cenv, "podman"))) engine = "podman";
  else if (il_sysfs_exists(fs, "/.dockerenv") || strstr(cg, "/docker")) engine = "docker";
  else if (strstr(cg, "containerd")) engine = "containerd";
  else if (cenv && *cenv) engine = cenv;
  if (engine) {
    dr->in_container = true;
    il_sysfs_copy(dr->container_engine, sizeof dr->container_engine, engine);
  }
  /* A container whose environment asks for GPUs is expected to have one. */
  const char *nvd = il_sysfs_getenv(fs, "NVIDIA_VISIBLE_DEVICES");
  if (dr->in_container && nvd && *nvd && strcmp(nvd, "void") && strcmp(nvd, "none")) dr->gpu_expected = true;
}

/* ---- inside a container ----------------------------------------------------------------- */

static void il__check_inside(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  const char *caps = il_sysfs_getenv(fs, "NVIDIA_DRIVER_CAPABILITIES");
  /* Unset means "utility,compute" (toolkit default, as cited by nerdctl #1024). */
  const char *eff = caps && *caps ? caps : "utility,compute";
  bool all = strstr(eff, "all") != NULL;
  bool compute = all || strstr(eff, "compute"), utility = all || strstr(eff, "utility");
  bool nodes = il_sysfs_exists(fs, "/dev/nvidiactl");
  bool nvml = dr->nvml.loaded, cuda = dr->cuda.loaded;
  il_check *c;
  if (!dr->gpu_expected && !nvml && !cuda) {
    c = il__check_na(&dr->checks, "container.injection", IL_VERDICT_OK, 0,
                     "no GPU requested for this container and no NVIDIA GPU on the PCI bus: nothing to inject");
  } else if (dr->tegra && cuda) {
    /* Jetson in CSV mode: the L4T libraries and nvgpu nodes, no NVML or /dev/nvidiactl. */
    c = il__check_add(&dr->checks, "container.injection", IL_VERDICT_OK, 0, "Jetson container: the NVIDIA runtime mounted the L4T CUDA libraries (CSV mode)%s",
                      nvml ? "" : "; no NVML, as on L4T");
  } else if (!nvml && !cuda && !nodes) {
    c = il__check_add(&dr->checks, "container.injection", IL_VERDICT_FAIL, 21,
                      "container started without the NVIDIA runtime: no driver libraries, no /dev/nvidia* nodes");
    il__cgroup_fix_request_gpus(dr, c);
  } else if (!compute || (nvml && !cuda)) {
    c = il__check_add(&dr->checks, "container.injection", IL_VERDICT_FAIL, 21,
                      "NVIDIA_DRIVER_CAPABILITIES=\"%s\" lacks compute: libcuda.so.1 was not injected", eff);
    il__check_fix(c, "Restart with -e NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all)");
  } else if (!utility || (!nvml && cuda)) {
    c = il__check_add(&dr->checks, "container.injection", IL_VERDICT_WARN, 21,
                      "NVIDIA_DRIVER_CAPABILITIES=\"%s\" lacks utility: no NVML/nvidia-smi (monitoring will not work)", eff);
    il__check_fix(c, "Restart with -e NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all)");
  } else {
    c = il__check_add(&dr->checks, "container.injection", IL_VERDICT_OK, 0, "NVIDIA runtime injected the driver (%s libraries, %s device nodes; capabilities %s)",
                      nvml && cuda ? "NVML and CUDA" : nvml ? "NVML" : "CUDA", nodes ? "with" : "without", eff);
  }
  /* Who put the driver library here: the runtime bind-mounts each injected file (a mount point in
   * /proc/self/mountinfo, legacy hook and CDI alike); a file that is no mount point came with the
   * image, and an image's driver library of another version than the host's module breaks CUDA
   * ("mount error: file creation failed: ... nvidia-smi: file exists",
   * https://github.com/NVIDIA/nvidia-docker/issues/825; libcuda shipped in the image:
   * https://github.com/NVIDIA/nvidia-docker/issues/1256). */
  char *mi = il_mem_alloc(IL_MEM_OTHER, 1 << 17, "mountinfo");
  if (mi && il_sysfs_read(fs, "/proc/self/mountinfo", mi, 1 << 17, NULL) == IL_OK && mi[0]) {
    static const char *const libs[] = {"libcuda.so.1", "libnvidia-ml.so.1"};
    for (int i = 0; i < 2; i++) {
      il_lib_candidate cand[1];
      if (il__loader_search(dr, libs[i], cand, 1) != 1) continue;
      char key[600];
      snprintf(key, sizeof key, " %s ", cand[0].target[0] ? cand[0].target : cand[0].path);
      bool mounted = strstr(mi, key) != NULL;
      il__check_ev(c, i ? "libnvidia_ml_origin" : "libcuda_origin", "%s: %s%s%s", cand[0].target[0] ? cand[0].target : cand[0].path,
                   mounted ? "injected by the runtime (bind mount)" : "shipped in the image (no mount)", cand[0].version[0] ? ", version " : "",
                   cand[0].version);
      if (!mounted && cand[0].version[0] && dr->kmod_version[0] && strcmp(cand[0].version, dr->kmod_version) && c->verdict < IL_VERDICT_FAIL) {
        c->verdict = IL_VERDICT_FAIL;
        c->scenario = IL_CLASS_IMAGE_DRIVER;
        snprintf(c->summary, sizeof c->summary, "the image ships its own %s (%s), not the host driver's %s the runtime injects: CUDA/NVML fail with "
                 "a version mismatch", libs[i], cand[0].version, dr->kmod_version);
        c->fix[0] = 0;
        il__check_fix(c, "Rebuild the image without driver packages (no libnvidia-compute, cuda-drivers, nvidia-utils; remove %s): the driver's libraries "
                         "come from the host at start", cand[0].target[0] ? cand[0].target : cand[0].path);
      }
    }
  }
  il_mem_free(mi);
  il__check_ev(c, "engine", "%s", dr->container_engine);
  il__check_ev(c, "NVIDIA_DRIVER_CAPABILITIES", "%s", caps ? caps : "(unset: utility,compute)");
  il__check_ev(c, "libnvidia_ml", "%s", nvml ? "loaded" : "missing");
  il__check_ev(c, "libcuda", "%s", cuda ? "loaded" : "missing");
  il__check_ev(c, "dev_nvidiactl", "%s", nodes ? "present" : "missing");
}

/* ---- on a host ---------------------------------------------------------------------------- */

typedef struct {
  bool runtime, ctk, cli, hook, docker, containerd, podman;
  char runtime_path[512];
} il__tools;

static void il__check_toolkit(il_doctor *dr, il__tools *t) {
  const il_sysfs *fs = &dr->fs;
  char p[512];
  t->runtime = il_sysfs_which(fs, "nvidia-container-runtime", t->runtime_path, sizeof t->runtime_path);
  t->ctk = il_sysfs_which(fs, "nvidia-ctk", p, sizeof p);
  t->cli = il_sysfs_which(fs, "nvidia-container-cli", p, sizeof p);
  t->hook = il_sysfs_which(fs, "nvidia-container-runtime-hook", p, sizeof p);
  t->docker = il_sysfs_which(fs, "dockerd", p, sizeof p) || il_sysfs_which(fs, "docker", p, sizeof p) ||
              il_sysfs_exists(fs, "/etc/docker/daemon.json") || il_sysfs_exists(fs, "/snap/bin/docker");
  t->containerd = il_sysfs_which(fs, "containerd", p, sizeof p) || il_sysfs_exists(fs, "/etc/containerd/config.toml");
  t->podman = il_sysfs_which(fs, "podman", p, sizeof p);
  bool any_tool = t->runtime || t->ctk || t->cli || t->hook;
  bool engine = t->docker || t->containerd || t->podman;
  char cfg[16384];
  bool have_cfg = il_sysfs_read(fs, "/etc/nvidia-container-runtime/config.toml", cfg, sizeof cfg, NULL) == IL_OK;
  il_check *c;
  char root[512] = "", ldc[512] = "";
  if (have_cfg) {
    il__toml_value(cfg, "root", root, sizeof root);
    il__toml_value(cfg, "ldconfig", ldc, sizeof ldc);
  }
  char tools[200];
  snprintf(tools, sizeof tools, "%s%s%s%s", t->runtime ? "nvidia-container-runtime " : "", t->ctk ? "nvidia-ctk " : "",
           t->cli ? "nvidia-container-cli " : "", t->hook ? "nvidia-container-runtime-hook" : "");
  /* A driver root other than "/" (GPU operator: /run/nvidia/driver) must exist and hold NVML. */
  bool root_bad = false;
  if (root[0] && strcmp(root, "/")) {
    char lib1[700], lib2[700];
    snprintf(lib1, sizeof lib1, "%s/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", root);
    snprintf(lib2, sizeof lib2, "%s/usr/lib64/libnvidia-ml.so.1", root);
    root_bad = !il_sysfs_exists(fs, root) || (!il_sysfs_exists(fs, lib1) && !il_sysfs_exists(fs, lib2));
  }
  if (root_bad) {
    c = il__check_add(&dr->checks, "container.toolkit", IL_VERDICT_FAIL, 20,
                      "toolkit config points at driver root \"%s\", which %s: containers fail with 'load library failed: libnvidia-ml.so.1'",
                      root, il_sysfs_exists(fs, root) ? "holds no libnvidia-ml.so.1" : "does not exist");
    il__check_fix(c, "For a driver installed on the host, set root = \"/\" and ldconfig = \"@/sbin/ldconfig.real\" (Debian/Ubuntu; \"@/sbin/ldconfig\" elsewhere): "
                     "sudo nvidia-ctk config --set nvidia-container-cli.root=/ --in-place");
  } else if (!any_tool && engine && dr->gpu_expected) {
    c = il__check_add(&dr->checks, "container.toolkit", IL_VERDICT_WARN, 18,
                      "a container engine is installed but the NVIDIA Container Toolkit is not: containers cannot use the GPU "
                      "('could not select device driver \"\" with capabilities: [[gpu]]')");
    char cmd[200];
    il__check_fix(c, "Install it: %s, then sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
                  il__distro_cmd(dr, IL_CMD_INSTALL_TOOLKIT, NULL, cmd, sizeof cmd));
  } else if (any_tool && t->docker && !t->hook) {
    c = il__check_add(&dr->checks, "container.toolkit", IL_VERDICT_WARN, 18,
                      "nvidia-container-runtime-hook is not on PATH: dockerd registers its GPU device driver only when it finds it (--gpus fails)");
    il__check_fix(c, "Reinstall the toolkit (sudo apt install --reinstall nvidia-container-toolkit) and restart docker: sudo systemctl restart docker");
  } else if (!any_tool) {
    c = il__check_na(&dr->checks, "container.toolkit", IL_VERDICT_OK, 0, "NVIDIA Container Toolkit not installed (%s)",
                      engine ? "no GPU here" : "no container engine either");
  } else {
    c = il__check_add(&dr->checks, "container.toolkit", IL_VERDICT_OK, 0, "NVIDIA Container Toolkit: %s%s%s", tools,
                      have_cfg ? "; config root " : "", have_cfg ? (root[0] ? root : "/ (default)") : "");
  }
  il__check_ev(c, "tools", "%s", tools);
  il__check_ev(c, "config", "%s", have_cfg ? "/etc/nvidia-container-runtime/config.toml" : "absent");
  if (root[0]) il__check_ev(c, "root", "%s", root);
  if (ldc[0]) il__check_ev(c, "ldconfig", "%s", ldc);
}

static void il__check_docker(il_doctor *dr, const il__tools *t) {
  const il_sysfs *fs = &dr->fs;
  il_check *c;
  if (!t->docker) {
    il__check_na(&dr->checks, "container.docker", IL_VERDICT_OK, 0, "docker not installed");
    return;
  }
  char *text = il_mem_alloc(IL_MEM_OTHER, IL__DAEMON_JSON_MAX + 1, "daemon.json");
  if (!text) {
    dr->checks.oom = true;
    return;
  }
  /* Docker as a snap reads its own daemon.json; the host toolkit configures /etc/docker's
   * (https://github.com/NVIDIA/nvidia-container-toolkit/issues/522: snap docker not supported;
   * the snap's own NVIDIA support: https://github.com/canonical/docker-snap/pull/161). */
  bool snap = il_sysfs_exists(fs, "/snap/docker") || il_sysfs_exists(fs, "/snap/bin/docker");
  const char *file = snap ? "/var/snap/docker/current/config/daemon.json" : "/etc/docker/daemon.json";
  size_t len = 0;
  il_status rs = il_sysfs_read(fs, file, text, IL__DAEMON_JSON_MAX + 1, &len);
  const char *home = il_sysfs_getenv(fs, "HOME");
  char rootless[600];
  if (rs == IL_ERR_NOT_FOUND && home) {
    /* Rootless docker reads $HOME/.config/docker/daemon.json. */
    snprintf(rootless, sizeof rootless, "%s/.config/docker/daemon.json", home);
    if (il_sysfs_read(fs, rootless, text, IL__DAEMON_JSON_MAX + 1, &len) == IL_OK) {
      rs = IL_OK;
      file = rootless;
    }
  }
  bool has_nvidia = false, is_default = false, malformed = false, too_big = false, unreadable = false;
  char deflt[64] = "runc", rpath[256] = "", why[240] = "";
  if (rs == IL_OK && len > IL__DAEMON_JSON_MAX) {
    too_big = true;
  } else if (rs == IL_OK) {
    json_error_t err;
    /* JSON_REJECT_DUPLICATES: dockerd's Go decoder keeps the last duplicate silently, so a
     * duplicate "runtimes" key is a real trap worth naming. */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
      malformed = true;
      if (root) snprintf(why, sizeof why, "the top level is not an object");
      else snprintf(why, sizeof why, "line %d column %d: %s", err.line, err.column, err.text);
    } else {
      json_t *rts = json_object_get(root, "runtimes");
      json_t *nv = json_is_object(rts) ? json_object_get(rts, "nvidia") : NULL;
      has_nvidia = json_is_object(nv);
      const char *ps = has_nvidia ? json_string_value(json_object_get(nv, "path")) : NULL;
      if (ps) il_sysfs_copy(rpath, sizeof rpath, ps);
      const char *ds = json_string_value(json_object_get(root, "default-runtime"));
      if (ds) il_sysfs_copy(deflt, sizeof deflt, ds);
      is_default = !strcmp(deflt, "nvidia");
    }
    json_decref(root);
  } else if (rs != IL_ERR_NOT_FOUND) {
    unreadable = true;
    il_sysfs_copy(why, sizeof why, il_error_detail());
  }
  if (too_big || unreadable) {
    c = il__check_add(&dr->checks, "container.docker", IL_VERDICT_WARN, 0, "%s %s: not checked", file,
                      too_big ? "is larger than 1 MiB" : why);
    il__check_fix(c, "Check the file by hand: python3 -m json.tool %s", file);
    il__check_ev(c, "daemon_json", "%s", file);
    il_mem_free(text);
    return;
  }
  if (malformed) {
    c = il__check_add(&dr->checks, "container.docker", IL_VERDICT_FAIL, 19, "%s is not valid JSON (%s): dockerd will not start with it", file, why);
    il__check_fix(c, "Fix the syntax (python3 -m json.tool %s shows where), then sudo systemctl restart docker", file);
  } else if (!has_nvidia && snap) {
    bool etc = il_sysfs_exists(fs, "/etc/docker/daemon.json");
    c = il__check_add(&dr->checks, "container.docker", dr->gpu_expected ? IL_VERDICT_WARN : IL_VERDICT_OK, dr->gpu_expected ? IL_CLASS_DOCKER_SNAP : 0,
                      "docker is the snap, which reads %s (no 'nvidia' runtime there)%s", file,
                      etc ? "; /etc/docker/daemon.json, where the host toolkit writes, is not read by it" : "");
    if (dr->gpu_expected)
      il__check_fix(c, "Use the snap's own NVIDIA support (it configures itself when the host driver is present: sudo snap restart docker; "
                       "snap logs docker.nvidia-container-toolkit shows why not), or remove the snap (sudo snap remove docker) and install "
                       "docker from the distribution with the NVIDIA Container Toolkit");
  } else if (!has_nvidia) {
    bool toolkit = t->runtime || t->ctk;
    c = il__check_add(&dr->checks, "container.docker", dr->gpu_expected && toolkit ? IL_VERDICT_WARN : IL_VERDICT_OK, dr->gpu_expected && toolkit ? 19 : 0,
                      "docker has no 'nvidia' runtime in %s%s", rs == IL_OK ? file : "daemon.json (absent)",
                      toolkit ? ": --runtime=nvidia fails with 'unknown or invalid runtime name: nvidia' (--gpus still works)" : "");
    if (dr->gpu_expected && toolkit)
      il__check_fix(c, "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker   then: docker run --gpus all IMAGE ...");
  } else if (!is_default) {
    c = il__check_add(&dr->checks, "container.docker", IL_VERDICT_WARN, 19,
                      "docker has the 'nvidia' runtime but the default runtime is %s: containers get no GPU unless started with --gpus or --runtime=nvidia", deflt);
    il__check_fix(c, "Make it the default: sudo nvidia-ctk runtime configure --runtime=docker --set-as-default && sudo systemctl restart docker");
    il__check_fix(c, "Or per container: docker run --gpus all IMAGE ...   or docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all IMAGE ...");
  } else {
    c = il__check_add(&dr->checks, "container.docker", IL_VERDICT_OK, 0, "docker%s: 'nvidia' runtime registered and default", snap ? " (snap)" : "");
  }
  if (has_nvidia && rpath[0]) {
    char found[512];
    bool exists = rpath[0] == '/' ? il_sysfs_exists(fs, rpath) : il_sysfs_which(fs, rpath, found, sizeof found);
    il__check_ev(c, "nvidia_runtime_path", "%s (%s)", rpath, exists ? "found" : "missing");
    if (!exists && c->verdict < IL_VERDICT_FAIL) {
      c->verdict = IL_VERDICT_FAIL;
      c->scenario = 19;
      size_t l = strlen(c->summary);
      snprintf(c->summary + l, sizeof c->summary - l, "; its binary %s is missing", rpath);
      il__check_fix(c, "Install the toolkit that provides %s: sudo apt install nvidia-container-toolkit && sudo systemctl restart docker", rpath);
    }
  }
  il__check_ev(c, "daemon_json", "%s", rs == IL_OK ? file : "absent");
  il__check_ev(c, "runtimes.nvidia", "%s", has_nvidia ? "present" : "absent");
  il__check_ev(c, "default-runtime", "%s", deflt);
  il_mem_free(text);
}

/* CRI-O: /etc/crio/crio.conf plus the drop-ins of /etc/crio/crio.conf.d (where
 * `nvidia-ctk runtime configure --runtime=crio` writes [crio.runtime.runtimes.nvidia]); a node
 * whose CRI-O lacks the runtime leaves the device plugin without GPUs ("Incompatible strategy
 * detected auto ... did you configure the NVIDIA Container Toolkit?", on CRI-O:
 * https://github.com/NVIDIA/k8s-device-plugin/issues/1134). */
static void il__check_crio(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char p[512];
  bool installed = il_sysfs_which(fs, "crio", p, sizeof p) || il_sysfs_exists(fs, "/etc/crio");
  if (!installed) {
    il__check_na(&dr->checks, "container.crio", IL_VERDICT_OK, 0, "CRI-O not installed");
    return;
  }
  char *text = il_mem_alloc(IL_MEM_OTHER, 65536, "CRI-O config");
  if (!text) {
    dr->checks.oom = true;
    return;
  }
  bool has = false;
  char deflt[64] = "", where[300] = "";
  char files[17][300];
  int nf = 0;
  il_sysfs_copy(files[nf++], sizeof files[0], "/etc/crio/crio.conf");
  char **names;
  int n;
  if (il_sysfs_list(fs, "/etc/crio/crio.conf.d", &names, &n) == IL_OK) {
    for (int i = 0; i < n && nf < 17; i++) snprintf(files[nf++], sizeof files[0], "/etc/crio/crio.conf.d/%.200s", names[i]);
    il_sysfs_list_free(names, n);
  }
  /* Later drop-ins override earlier ones: the last default_runtime wins. */
  for (int i = 0; i < nf; i++) {
    if (il_sysfs_read(fs, files[i], text, 65536, NULL) != IL_OK) continue;
    if (strstr(text, "runtimes.nvidia]") || strstr(text, "runtimes.\"nvidia\"]")) {
      has = true;
      il_sysfs_copy(where, sizeof where, files[i]);
    }
    char d[64];
    if (il__toml_value(text, "default_runtime", d, sizeof d)) il_sysfs_copy(deflt, sizeof deflt, d);
  }
  il_mem_free(text);
  bool kube = il_sysfs_which(fs, "kubelet", p, sizeof p);
  il_check *c;
  if (!has && dr->gpu_expected) {
    c = il__check_add(&dr->checks, "container.crio", IL_VERDICT_WARN, 19,
                      "CRI-O has no 'nvidia' runtime: pods on this node get no GPU and the device plugin reports 'Incompatible strategy detected'");
    il__check_fix(c, "sudo nvidia-ctk runtime configure --runtime=crio --set-as-default && sudo systemctl restart crio");
  } else if (has && strcmp(deflt, "nvidia") && kube) {
    c = il__check_add(&dr->checks, "container.crio", IL_VERDICT_WARN, 19,
                      "CRI-O has the 'nvidia' runtime (%s) but the default is \"%s\": pods need runtimeClassName: nvidia", where, deflt[0] ? deflt : "crun/runc");
    il__check_fix(c, "sudo nvidia-ctk runtime configure --runtime=crio --set-as-default && sudo systemctl restart crio   "
                     "(or a RuntimeClass 'nvidia' and runtimeClassName in the pod spec)");
  } else {
    c = il__check_add(&dr->checks, "container.crio", IL_VERDICT_OK, 0, "CRI-O: nvidia runtime %s%s%s", has ? "registered" : "absent (no GPU here)",
                      deflt[0] ? ", default " : "", deflt);
  }
  il__check_ev(c, "runtimes.nvidia", "%s", has ? where : "absent");
  il__check_ev(c, "default_runtime", "%s", deflt[0] ? deflt : "(unset)");
}

/* Checks every host path of a CDI spec (YAML or JSON, parsed with libyaml): the values of
 * hostPath and path keys. Counts them and the missing ones, and lists the first few missing. */
static void il__cdi_paths(const il_sysfs *fs, const char *text, int *n_paths, int *n_miss, char *miss, size_t nm) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
  bool want = false;
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) break;
    bool done = ev.type == YAML_STREAM_END_EVENT;
    if (ev.type == YAML_SCALAR_EVENT) {
      const char *v = (const char *)ev.data.scalar.value;
      if (want && v[0] == '/') {
        (*n_paths)++;
        if (!il_sysfs_exists(fs, v)) {
          if (*n_miss < 3) il_appendf(miss, nm, "%s%s", *n_miss ? ", " : "", v);
          (*n_miss)++;
        }
        want = false;
      } else {
        want = !strcmp(v, "hostPath") || !strcmp(v, "path");
      }
    } else {
      want = false;
    }
    yaml_event_delete(&ev);
    if (done) break;
  }
  yaml_parser_delete(&parser);
}

static void il__check_cdi(il_doctor *dr, const il__tools *t) {
  const il_sysfs *fs = &dr->fs;
  static const char *const dirs[] = {"/etc/cdi", "/var/run/cdi"};
  char specs[300] = "", stale[400] = "", gone[500] = "";
  int n_specs = 0, n_paths = 0;
  char *text = il_mem_alloc(IL_MEM_OTHER, 1 << 18, "CDI spec");
  if (!text) return;
  const char *drv = dr->kmod_version[0] ? dr->kmod_version : dr->nvml.driver_version;
  for (int d = 0; d < 2; d++) {
    char **names;
    int n;
    if (il_sysfs_list(fs, dirs[d], &names, &n) != IL_OK) continue;
    for (int i = 0; i < n; i++) {
      size_t nl = strlen(names[i]);
      if (nl < 5 || (strcmp(names[i] + nl - 5, ".yaml") && strcmp(names[i] + nl - 5, ".json"))) continue;
      char rel[600];
      snprintf(rel, sizeof rel, "%s/%s", dirs[d], names[i]);
      if (il_sysfs_read(fs, rel, text, 1 << 18, NULL) != IL_OK || !strstr(text, "nvidia.com/")) continue;
      n_specs++;
      size_t l = strlen(specs);
      il_appendf(specs, sizeof specs, "%s%s", l ? " " : "", rel);
      /* Stale: library paths carry the driver version the spec was generated for. */
      const char *lib = strstr(text, "libcuda.so.");
      if (!lib) lib = strstr(text, "libnvidia-ml.so.");
      if (lib && drv[0]) {
        char ver[64] = "";
        sscanf(strstr(lib, ".so.") + 4, "%63[0-9.]", ver);
        size_t vl = strlen(ver);
        while (vl && ver[vl - 1] == '.') ver[--vl] = 0;
        if (strchr(ver, '.') && strcmp(ver, drv)) {
          l = strlen(stale);
          il_appendf(stale, sizeof stale, "%s%s was generated for driver %s (running %s)", l ? "; " : "", rel, ver, drv);
        }
      }
      /* Stale: the nvidia-uvm major in the spec differs from /proc/devices (its major is
       * dynamic; nvidia-container-toolkit#1934: spec said 510, kernel 509, cuInit 999). */
      int uvm_major = il__cgroup_devices_major(fs, "nvidia-uvm");
      const char *u = strstr(text, "path: /dev/nvidia-uvm\n");
      const char *mj = u ? strstr(u, "major:") : NULL;
      if (mj && uvm_major >= 0 && mj - u < 200) {
        int spec_major = atoi(mj + 6);
        if (spec_major != uvm_major) {
          l = strlen(stale);
          il_appendf(stale, sizeof stale, "%s%s gives /dev/nvidia-uvm major %d but /proc/devices says %d", l ? "; " : "", rel, spec_major, uvm_major);
        }
      }
      /* Every host path the spec names (mounts' hostPath, deviceNodes' and hooks' path) must
       * exist: a spec is a snapshot, and an update that renames a library leaves it pointing at
       * a file that is gone ("failed to fulfil mount request: open
       * /usr/lib/libnvidia-egl-wayland.so.1.1.21: no such file or directory",
       * https://github.com/homelab-00/TranscriptionSuite/pull/313). */
      int nmiss = 0, npaths = 0;
      char miss[300] = "";
      il__cdi_paths(fs, text, &npaths, &nmiss, miss, sizeof miss);
      n_paths += npaths;
      if (nmiss) {
        l = strlen(gone);
        il_appendf(gone, sizeof gone, "%s%s names %d host path%s that do%s not exist (%s)", l ? "; " : "", rel, nmiss, nmiss == 1 ? "" : "s",
                   nmiss == 1 ? "es" : "", miss);
      }
    }
    il_sysfs_list_free(names, n);
  }
  il_mem_free(text);
  il_check *c;
  if (gone[0] && !stale[0]) {
    c = il__check_add(&dr->checks, "container.cdi", IL_VERDICT_FAIL, 23, "stale CDI spec: %s; containers requesting it fail to start", gone);
    il__check_fix(c, "Regenerate it: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml   (and remove stale copies in /var/run/cdi); "
                     "regenerate after every driver or library update (toolkit >= 1.18: systemctl enable --now nvidia-cdi-refresh.path)");
  } else if (stale[0]) {
    if (gone[0]) il_appendf(stale, sizeof stale, "; %s", gone);
    c = il__check_add(&dr->checks, "container.cdi", IL_VERDICT_FAIL, 23, "stale CDI spec: %s", stale);
    il__check_fix(c, "Regenerate it: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml   (and remove stale copies in /var/run/cdi); "
                     "regenerate after every driver or MIG change");
  } else if (n_specs == 0 && (t->ctk || t->podman) && dr->gpu_expected) {
    /* Podman asks for GPUs through CDI (--device nvidia.com/gpu=all): without a spec it fails
     * with "unresolvable CDI devices" (research scenario 23). */
    c = il__check_add(&dr->checks, "container.cdi", IL_VERDICT_WARN, 23,
                      "no NVIDIA CDI spec in /etc/cdi or /var/run/cdi: %s requests fail with 'unresolvable CDI devices nvidia.com/gpu=all'",
                      t->podman ? "podman" : "CDI");
    if (t->ctk) il__check_fix(c, "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml && nvidia-ctk cdi list");
    else {
      char cmd[200];
      il__check_fix(c, "Install the NVIDIA Container Toolkit (%s), then sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
                    il__distro_cmd(dr, IL_CMD_INSTALL_TOOLKIT, NULL, cmd, sizeof cmd));
    }
  } else if (n_specs == 0) {
    c = il__check_na(&dr->checks, "container.cdi", IL_VERDICT_OK, 0, "no NVIDIA CDI spec (CDI not in use)");
  } else {
    c = il__check_add(&dr->checks, "container.cdi", IL_VERDICT_OK, 0, "CDI spec%s %s match driver %s; all %d host paths exist", n_specs == 1 ? "" : "s", specs,
                      drv[0] ? drv : "(unknown)", n_paths);
  }
  il__check_ev(c, "specs", "%s", specs);
}

void il__container_checks(il_doctor *dr) {
  il_check *c;
  if (dr->in_container) {
    c = il__check_add(&dr->checks, "container.detect", IL_VERDICT_OK, 0, "running inside a %s container", dr->container_engine);
    il__check_ev(c, "engine", "%s", dr->container_engine);
    il__check_inside(dr);
    il__cgroup_check_devices(dr);
    il__security_check_shm(dr);
    il__security_check_lsm(dr);
    il__layout_check_jetson(dr);
    return;
  }
  il__check_add(&dr->checks, "container.detect", IL_VERDICT_OK, 0, "not in a container (no /.dockerenv, /run/.containerenv or container cgroup)");
  il__tools t;
  memset(&t, 0, sizeof t);
  il__check_toolkit(dr, &t);
  il__check_docker(dr, &t);
  il__layout_check_containerd(dr);
  il__layout_check_operator(dr);
  il__check_crio(dr);
  il__check_cdi(dr, &t);
  il__cgroup_check_rootless(dr);
  il__cgroup_check_lxc(dr);
  il__cgroup_check_systemd(dr);
  il__security_check_toolkit_cgroup(dr);
  il__security_check_hook_user(dr);
  il__security_check_lsm(dr);
  il__layout_check_jetson(dr);
}
