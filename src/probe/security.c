/* probe/security: SELinux/AppArmor, the toolkit against cgroup v2, the hook's user, /dev/shm.
 *
 * Sources:
 * - SELinux: containers run as container_t and the NVIDIA nodes carry xserver_misc_device_t
 *   ("Source Context system_u:system_r:container_t ... Target Context ...xserver_misc_device_t ...
 *   /dev/nvidia0 [ chr_file ]", https://github.com/fedora-selinux/selinux-policy/issues/1695); the
 *   boolean container_use_devices lets containers use devices ("sudo setsebool -P
 *   container_use_devices true", https://github.com/NVIDIA/nvidia-container-toolkit/issues/210), read
 *   from /sys/fs/selinux/booleans/NAME ("current pending", e.g. "0 0").
 * - AppArmor: kernel audit lines apparmor="DENIED" ... profile="P" name="/dev/char/195:0"
 *   comm="nvidia-smi" (https://github.com/pdbear/syno_nvidia_gpu_driver/issues/18); for a container,
 *   --security-opt apparmor=unconfined (https://github.com/AbdBarho/stable-diffusion-webui-docker/issues/682).
 * - cgroup v2 needs libnvidia-container >= 1.8.0 ("Note that only versions after v1.8.0 of the
 *   NVIDIA Container Toolkit (including libnvidia-container1) support cgroupv2",
 *   https://github.com/pop-os/beta/issues/289; GA: https://github.com/NVIDIA/k8s-device-plugin/issues/273);
 *   older ones fail with "cgroup subsystem devices not found" (https://github.com/NVIDIA/nvidia-container-toolkit/issues/7).
 *   The version comes from the dpkg database.
 * - The hook's user: [nvidia-container-cli] user = "root:video" in the toolkit config, or the
 *   invoking user for rootless engines; nodes crw-rw---- root video make the hook fail with "Failed
 *   to initialize NVML: Insufficient Permissions" (https://github.com/NVIDIA/nvidia-container-toolkit/issues/268);
 *   rootless podman keeps the user's groups with --group-add keep-groups (crun,
 *   https://github.com/NVIDIA/nvidia-container-toolkit/issues/210).
 * - /dev/shm: Docker gives containers 64 MB; NCCL's shared-memory transport fails ("Error while
 *   creating shared memory segment /dev/shm/nccl-... (size 9637888)",
 *   https://github.com/NVIDIA/nccl/issues/342: "By default, the shm size is limited to 64MB under
 *   docker. After I increase the size, everything works"); --shm-size=1g fixed it
 *   (https://github.com/fal-ai-community/video-diffusion-speedrun/issues/2). The 1 GiB threshold
 *   below is that working value [inferred as a general floor].
 */
#include "probe/security.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "memory/mem.h"
#include "probe/cgroup.h"
#include "probe/classes.h"
#include "probe/distro.h"
#include "probe/doctor.h"
#include "probe/klog.h"
#include "probe/layout.h"

/* Value of field key="..." (or key=word) in an audit line; "" when absent. */
static void il__audit_field(const char *line, const char *key, char *buf, size_t n) {
  buf[0] = 0;
  const char *p = strstr(line, key);
  if (!p) return;
  p += strlen(key);
  if (*p == '"') p++;
  size_t l = strcspn(p, "\" \n");
  if (l >= n) l = n - 1;
  memcpy(buf, p, l);
  buf[l] = 0;
}

/* The SELinux type of a context "system_u:system_r:container_t:s0:c1,c2" -> "container_t". */
static void il__se_type(const char *ctx, char *buf, size_t n) {
  buf[0] = 0;
  const char *p = ctx;
  for (int i = 0; i < 2 && p; i++) {
    p = strchr(p, ':');
    if (p) p++;
  }
  if (!p) return;
  size_t l = strcspn(p, ":\" \n");
  if (l >= n) l = n - 1;
  memcpy(buf, p, l);
  buf[l] = 0;
}

void il__security_check_lsm(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char enforce[8] = "", boolean[16] = "";
  il_sysfs_read_line(fs, "/sys/fs/selinux/enforce", enforce, sizeof enforce);
  bool selinux = enforce[0] != 0;
  bool have_bool = il_sysfs_read_line(fs, "/sys/fs/selinux/booleans/container_use_devices", boolean, sizeof boolean);
  bool bool_on = have_bool && boolean[0] == '1';
  char se[300] = "", aa[300] = "", se_line[240] = "", aa_line[240] = "", profile[128] = "";
  const char *log = dr->klog ? dr->klog : "";
  char buf[2048];
  for (const char *line = log; il_sysfs_next_line(&line, buf, sizeof buf);) {
    bool dev = strstr(buf, "nvidia") || strstr(buf, "xserver_misc_device_t") || strstr(buf, "dri_device_t") || strstr(buf, "/dev/char/");
    if (!se[0] && strstr(buf, "avc:") && strstr(buf, "denied") && dev) {
      char sc[200], tc[200], st[64], tt[64], name[128];
      il__audit_field(buf, "scontext=", sc, sizeof sc);
      il__audit_field(buf, "tcontext=", tc, sizeof tc);
      il__audit_field(buf, "name=", name, sizeof name);
      if (!name[0]) il__audit_field(buf, "path=", name, sizeof name);
      il__se_type(sc, st, sizeof st);
      il__se_type(tc, tt, sizeof tt);
      snprintf(se, sizeof se, "SELinux denied %s access to %s (%s)", st[0] ? st : "a process", name[0] ? name : "a device node", tt[0] ? tt : "device");
      il_sysfs_copy(se_line, sizeof se_line, buf);
    }
    if (!aa[0] && strstr(buf, "apparmor=\"DENIED\"") && dev) {
      char name[128], comm[64];
      il__audit_field(buf, "profile=", profile, sizeof profile);
      il__audit_field(buf, "name=", name, sizeof name);
      il__audit_field(buf, "comm=", comm, sizeof comm);
      snprintf(aa, sizeof aa, "AppArmor profile %s denied %s access to %s", profile[0] ? profile : "?", comm[0] ? comm : "a process", name[0] ? name : "a device node");
      il_sysfs_copy(aa_line, sizeof aa_line, buf);
    }
  }
  il_check *c;
  if (!se[0] && !aa[0]) {
    if (!selinux && !il_sysfs_exists(fs, "/sys/kernel/security/apparmor")) {
      il__check_na(&dr->checks, "security.lsm", IL_VERDICT_OK, 0, "no SELinux or AppArmor denials of the GPU in the readable logs (neither is active here)");
      return;
    }
    c = il__check_add(&dr->checks, "security.lsm", IL_VERDICT_OK, 0, "no SELinux or AppArmor denials of the GPU in the readable logs%s%s",
                      selinux ? (enforce[0] == '1' ? "; SELinux enforcing" : "; SELinux permissive") : "",
                      have_bool ? (bool_on ? ", container_use_devices on" : ", container_use_devices off") : "");
  } else {
    c = il__check_add(&dr->checks, "security.lsm", IL_VERDICT_FAIL, se[0] ? IL_CLASS_SELINUX : IL_CLASS_APPARMOR, "%s%s%s", se, se[0] && aa[0] ? "; " : "", aa);
    if (se[0]) {
      if (!bool_on)
        il__check_fix(c, "Let containers use the device nodes: sudo setsebool -P container_use_devices on%s (or per container: --security-opt label=disable)",
                      have_bool ? "" : " (the boolean comes with container-selinux)");
      else
        il__check_fix(c, "container_use_devices is already on: the denial comes from another domain; run that container with --security-opt label=disable, "
                         "or build a local module from the denial (ausearch -m avc -ts recent | audit2allow -M nvidia-container && semodule -i nvidia-container.pp)");
    }
    if (aa[0]) {
      if (strstr(profile, "docker-default") || strstr(profile, "containers-default") || strstr(profile, "cri-containerd"))
        il__check_fix(c, "The container engine's default profile blocks the GPU: start the container with --security-opt apparmor=unconfined, "
                         "or use a profile that allows /dev/nvidia* rw and /dev/char/* r");
      else if (strncmp(profile, "snap.", 5) == 0)
        il__check_fix(c, "The snap's confinement blocks the GPU: connect its interfaces (snap connections %s), or use a non-snap install", profile + 5);
      else
        il__check_fix(c, "Allow the NVIDIA nodes in AppArmor profile %s (add '/dev/nvidia* rw, /dev/char/** r,' to /etc/apparmor.d/<profile file>, then "
                         "sudo apparmor_parser -r that file), or put the profile in complain mode: sudo aa-complain %s", profile, profile);
    }
  }
  il__check_ev(c, "selinux", "%s", selinux ? (enforce[0] == '1' ? "enforcing" : "permissive") : "off or not visible");
  if (have_bool) il__check_ev(c, "container_use_devices", "%s", bool_on ? "on" : "off");
  if (se_line[0]) il__check_ev(c, "avc", "%s", se_line);
  if (aa_line[0]) il__check_ev(c, "apparmor", "%s", aa_line);
}

void il__security_check_toolkit_cgroup(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  const size_t cap = (size_t)1 << 20;
  char *db = il_mem_alloc(IL_MEM_OTHER, cap, "dpkg status");
  if (!db) {
    dr->checks.oom = true;
    return;
  }
  char lib[64] = "", tk[64] = "";
  if (il__klog_read_tail(fs, "/var/lib/dpkg/status", db, cap) > 0) {
    il__dpkg_version(db, "libnvidia-container1", false, lib, sizeof lib);
    il__dpkg_version(db, "nvidia-container-toolkit", false, tk, sizeof tk);
  }
  il_mem_free(db);
  const char *ver = lib[0] ? lib : tk;
  bool v2 = il_sysfs_exists(fs, "/sys/fs/cgroup/cgroup.controllers");
  il_check *c;
  if (!ver[0]) {
    il__check_na(&dr->checks, "container.cgroupv2", IL_VERDICT_OK, 0, "NVIDIA Container Toolkit version unknown (not in the dpkg database)");
    return;
  }
  if (v2 && il_sysfs_vercmp(ver, "1.8.0") < 0) {
    c = il__check_add(&dr->checks, "container.cgroupv2", IL_VERDICT_FAIL, 105,
                      "libnvidia-container %s on a cgroup v2 host: cgroup v2 needs 1.8.0 or newer; GPU containers fail with "
                      "'nvidia-container-cli: container error: cgroup subsystem devices not found'", ver);
    char cmd[200];
    il__check_fix(c, "Upgrade the NVIDIA Container Toolkit (libnvidia-container1 >= 1.8.0): %s, then restart the container engine",
                  il__distro_cmd(dr, IL_CMD_INSTALL_TOOLKIT, NULL, cmd, sizeof cmd));
  } else {
    c = il__check_add(&dr->checks, "container.cgroupv2", IL_VERDICT_OK, 0, "libnvidia-container %s%s", ver,
                      v2 ? " supports this host's cgroup v2" : " (cgroup v1 host)");
  }
  if (lib[0]) il__check_ev(c, "libnvidia-container1", "%s", lib);
  if (tk[0]) il__check_ev(c, "nvidia-container-toolkit", "%s", tk);
  il__check_ev(c, "cgroup", "%s", v2 ? "v2" : "v1");
}

/* uid of user name from /etc/passwd, gid of group name from /etc/group; -1 when unknown. */
static long il__id_of(const il_sysfs *fs, const char *file, const char *name) {
  if (name[0] >= '0' && name[0] <= '9') return atol(name);
  char text[16384];
  if (il_sysfs_read(fs, file, text, sizeof text, NULL) != IL_OK) return !strcmp(name, "root") ? 0 : -1;
  size_t nl = strlen(name);
  for (char *line = text; line && *line;) {
    char *e = strchr(line, '\n');
    if (!strncmp(line, name, nl) && line[nl] == ':') {
      const char *f = strchr(line + nl + 1, ':');
      return f ? atol(f + 1) : -1;
    }
    line = e ? e + 1 : NULL;
  }
  return !strcmp(name, "root") ? 0 : -1;
}

void il__security_check_hook_user(il_doctor *dr) {
  const il_sysfs *fs = &dr->fs;
  char cfg[16384] = "", user[96] = "", p[512];
  il_sysfs_read(fs, "/etc/nvidia-container-runtime/config.toml", cfg, sizeof cfg, NULL);
  il__toml_value(cfg, "user", user, sizeof user);
  const char *home = il_sysfs_getenv(fs, "HOME");
  char rel[600] = "";
  if (home) snprintf(rel, sizeof rel, "%s/.config/docker/daemon.json", home);
  bool rootless = (home && il_sysfs_exists(fs, rel)) || il_sysfs_which(fs, "dockerd-rootless.sh", p, sizeof p) ||
                  (fs->uid != 0 && il_sysfs_which(fs, "podman", p, sizeof p));
  il_sysfs_stat_t st;
  il_sysfs_stat(fs, "/dev/nvidiactl", true, &st);
  if ((!user[0] && !rootless) || !st.exists) {
    il__check_na(&dr->checks, "container.hook_user", IL_VERDICT_OK, 0, "the container hook runs as root (no user in the toolkit config, no rootless engine)");
    return;
  }
  il_sysfs judge = *fs;
  char who[128];
  if (user[0]) {
    char uname[64] = "", gname[64] = "";
    sscanf(user, "%63[^:]:%63s", uname, gname);
    long uid = il__id_of(fs, "/etc/passwd", uname), gid = gname[0] ? il__id_of(fs, "/etc/group", gname) : -1;
    judge.uid = uid < 0 ? 65534 : (uid_t)uid;
    judge.gid = gid < 0 ? 65534 : (gid_t)gid;
    judge.n_groups = 0;
    snprintf(who, sizeof who, "user = \"%s\" of the toolkit config", user);
  } else {
    snprintf(who, sizeof who, "the rootless engine's user (uid %u)", (unsigned)fs->uid);
  }
  char grp[64];
  il_sysfs_group_name(fs, st.gid, grp, sizeof grp);
  il_check *c;
  if (!il_sysfs_may(&judge, &st, 6)) {
    c = il__check_add(&dr->checks, "container.hook_user", IL_VERDICT_FAIL, 17,
                      "the container hook runs as %s, which cannot open /dev/nvidiactl (mode %04o, group %s): GPU containers fail with "
                      "'Failed to initialize NVML: Insufficient Permissions'", who, st.mode, grp);
    if (user[0]) il__check_fix(c, "Set user = \"root:%s\" (a group that may open the nodes) in /etc/nvidia-container-runtime/config.toml, or remove the line", grp);
    else
      il__check_fix(c, "Rootless: add the user to group %s on the host (sudo usermod -aG %s $USER, then log in again) and keep the groups in the container: "
                       "podman run --group-add keep-groups --device nvidia.com/gpu=all ... (needs crun); or restore the driver's mode 0666", grp, grp);
  } else {
    c = il__check_add(&dr->checks, "container.hook_user", IL_VERDICT_OK, 0, "the container hook runs as %s and may open the NVIDIA device nodes", who);
  }
  il__check_ev(c, "dev_nvidiactl", "mode %04o group %s", st.mode, grp);
}

void il__security_check_shm(il_doctor *dr) {
  if (!dr->in_container) return;
  char mounts[16384] = "";
  il_sysfs_read(&dr->fs, "/proc/mounts", mounts, sizeof mounts, NULL);
  const char *m = strstr(mounts, " /dev/shm ");
  int gpus = il_nvml_usable_count(&dr->nvml);
  if (!gpus && dr->cuda.loaded && dr->cuda.init_rc == 0) gpus = dr->cuda.n_devices;
  il_check *c;
  if (!m) {
    il__check_na(&dr->checks, "container.shm", IL_VERDICT_OK, 0, "no /dev/shm mount listed in /proc/mounts");
    return;
  }
  long long kb = -1;
  char line[400];
  size_t l = strcspn(m, "\n");
  if (l >= sizeof line) l = sizeof line - 1;
  memcpy(line, m, l);
  line[l] = 0;
  const char *sz = strstr(line, "size=");
  if (sz) {
    char *end;
    kb = strtoll(sz + 5, &end, 10);
    if (*end == 'm' || *end == 'M') kb *= 1024;
    else if (*end == 'g' || *end == 'G') kb *= 1024 * 1024;
  }
  if (kb >= 0 && kb < 1024 * 1024 && gpus >= 2) {
    c = il__check_add(&dr->checks, "container.shm", IL_VERDICT_WARN, IL_CLASS_NCCL_SHM,
                      "/dev/shm is %lld MiB in this container with %d GPUs: NCCL (tensor parallelism, multi-GPU vLLM) fails with "
                      "'Error while creating shared memory segment /dev/shm/nccl-...'", kb / 1024, gpus);
    if (!strcmp(dr->container_engine, "kubernetes"))
      il__check_fix(c, "Mount a memory-backed emptyDir at /dev/shm in the pod spec (volumes: - name: dshm emptyDir: medium: Memory, sizeLimit: 8Gi; "
                       "volumeMounts: - name: dshm mountPath: /dev/shm)");
    else
      il__check_fix(c, "Recreate the container with a larger /dev/shm: %s run --shm-size=8g ... (or --ipc=host); or NCCL_SHM_DISABLE=1 to use another transport",
                    !strcmp(dr->container_engine, "podman") ? "podman" : "docker");
  } else if (gpus < 2) {
    c = il__check_na(&dr->checks, "container.shm", IL_VERDICT_OK, 0, "one GPU or none: NCCL's shared memory is not needed (/dev/shm %lld MiB)", kb >= 0 ? kb / 1024 : -1);
  } else {
    c = il__check_add(&dr->checks, "container.shm", IL_VERDICT_OK, 0, "/dev/shm %lld MiB is large enough for NCCL between %d GPUs", kb / 1024, gpus);
  }
  il__check_ev(c, "mount", "%s", line);
}
