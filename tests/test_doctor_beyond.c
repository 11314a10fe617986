/* tests/test_doctor_beyond: the classes of issue 37, each rebuilt as a fixture machine from the
 * real messages and file layouts of the thread cited at the scenario, with the negative controls
 * that must stay OK (a healthy Jetson, a healthy containerd 2 host, a healthy K3s node).
 * Classes: what the logs already say (kernel log, journal files, DKMS make.log, Xid by number);
 * advice for a container; the layouts people run (K3s/RKE2, containerd 2, Docker as a snap, the
 * GPU operator beside a host driver, Jetson); new checks (SELinux/AppArmor, toolkit vs cgroup v2,
 * CDI paths, the hook's user, /dev/shm); the report (docs links, the tally).
 * The pasted-message side (--explain) is measured on the corpus in test_doctor_corpus.c.
 */
#include "sysroots/scenario.h"
#include "probe/classes.h"
#include "probe/explain.h"
#include "probe/klog.h"
#include "probe/xid.h"

/* Every fix line of a container's report that names a host-only action must say it is the host's. */
static void expect_container_advice(int line, const il_doctor *dr) {
  static const char *const words[] = {"reboot", "rmmod", "modprobe", "usermod", "apt ", "dnf ", "dkms", "update-initramfs", "mokutil", "systemctl", NULL};
  int bad = 0;
  for (int i = 0; i < dr->checks.n; i++) {
    const il_check *c = &dr->checks.items[i];
    for (const char *p = c->fix; *p;) {
      size_t l = strcspn(p, "\n");
      char ln[1024];
      snprintf(ln, sizeof ln, "%.*s", (int)l, p);
      for (int k = 0; words[k]; k++)
        if (il_sysfs_stristr(ln, words[k]) && !il_sysfs_stristr(ln, "host") && !il_sysfs_stristr(ln, "recreate") &&
            !il_sysfs_stristr(ln, "start the container")) {
          fprintf(stderr, "test_doctor_beyond.c:%d: FAILED: %s fix in a container is not the host's: %s\n", line, c->id, ln);
          bad++;
          break;
        }
      p += l;
      if (*p) p++;
    }
  }
  if (bad) il_test_failed++;
  else il_test_passed++;
}
#define EXPECT_CONTAINER_ADVICE(dr) expect_container_advice(__LINE__, dr)

static void expect_no_fail_at(int line, const il_doctor *dr) {
  int fails = 0;
  for (int i = 0; i < dr->checks.n; i++)
    if (dr->checks.items[i].verdict == IL_VERDICT_FAIL) {
      fprintf(stderr, "test_doctor_beyond.c:%d: FAILED: unexpected FAIL %s: %s\n", line, dr->checks.items[i].id, dr->checks.items[i].summary);
      fails++;
    }
  if (fails) {
    il_test_failed++;
    dump(dr);
  } else il_test_passed++;
}
#define EXPECT_NO_FAIL(dr) expect_no_fail_at(__LINE__, dr)

/* A host whose driver module is loaded but NVML finds no GPU (the driver could not take it). */
static const char *driver_without_gpu(scen *s) {
  const char *root = sc_two_a100(s, "");
  sr_scenario(root, "driver=550.76\nnvml_version=12.550.76\ncuda_driver=12040\ncount=0\ncuda.init=100\n");
  return root;
}

/* ---- what the logs already say --------------------------------------------------------------
 * GSP firmware of the module's version missing: "nvidia 0000:01:00.0: Direct firmware load for
 * nvidia/550.76/gsp_ga10x.bin failed with error -2" (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/639);
 * Debian's firmware-nvidia-gsp (https://github.com/endlessm/eos-meta/pull/811); a half-finished update
 * (https://github.com/ublue-os/bazzite/issues/2668). */
static void test_klog_gsp_firmware(void) {
  scen s;
  const char *root = driver_without_gpu(&s);
  sr_write(root, "/etc/os-release", "ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n");
  sr_write(root, "/var/log/kern.log",
           "May 11 06:41:02 knut kernel: nvidia 0000:07:00.0: Direct firmware load for nvidia/550.76/gsp_ga10x.bin failed with error -2\n"
           "May 11 06:41:02 knut kernel: NVRM: GPU 0000:07:00.0: RmInitAdapter failed! (0x61:0x56:1770)\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_FAIL, IL_CLASS_GSP_FIRMWARE, "firmware-nvidia-gsp");
  EXPECT_SUMMARY(dr, "kmod.log", "/lib/firmware/nvidia/550.76/gsp_ga10x.bin");
  il_doctor_free(dr);
  /* Firmware of another version installed: the update replaced it, the old module is loaded. */
  sr_mkdirs(strcat(strcpy((char[PATH_MAX]){0}, root), "/lib/firmware/nvidia/570.153.02"));
  dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_FAIL, IL_CLASS_GSP_FIRMWARE, "reboot so the module of the installed version loads");
  il_doctor_free(dr);
  /* Negative: the GPUs work now, the line is from an earlier boot: a warning, not a failure. */
  sr_scenario(root, "%s", SR_TWO_A100);
  dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_WARN, IL_CLASS_GSP_FIRMWARE, NULL);
  EXPECT_SUMMARY(dr, "kmod.log", "earlier in the kernel log");
  il_doctor_free(dr);
  /* Negative: no driver errors in the log. */
  sr_write(root, "/var/log/kern.log", "May 11 06:41:02 knut kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.54.03\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* BAR not assigned: in a VM (https://github.com/NVIDIA/gpu-operator/issues/492, fixed with
 * pciPassthru.use64bitMMIO) and on bare metal (https://github.com/h8d13/archinstoo/issues/244:
 * pci=realloc=on); "None of the NVIDIA devices were initialized" after it
 * (https://github.com/system76/firmware-open/issues/66). */
static void test_klog_bar(void) {
  scen s;
  const char *root = driver_without_gpu(&s);
  const char *bar = "[83260.063553] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
                    "               NVRM: BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)\n"
                    "[83260.063557] nvidia: probe of 0000:14:00.0 failed with error -1\n"
                    "[83260.106438] NVRM: The NVIDIA probe routine failed for 2 device(s).\n"
                    "[83260.106441] NVRM: None of the NVIDIA devices were initialized.\n";
  sr_write(root, "/var/log/dmesg", "%s", bar);
  sr_write(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse4_2 avx avx2 hypervisor\n\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_FAIL, IL_CLASS_BAR, "pciPassthru.use64bitMMIO");
  EXPECT_SUMMARY(dr, "kmod.log", "BAR1 is 0M at 0000:14:00.0");
  il_doctor_free(dr);
  sr_write(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse4_2 avx avx2\n\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_FAIL, IL_CLASS_BAR, "pci=realloc");
  il_doctor_free(dr);
  /* The summary line alone: the probe failed, the lines before it say why. */
  sr_write(root, "/var/log/dmesg", "[   28.109102] NVRM: None of the NVIDIA devices were initialized.\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.log", IL_VERDICT_FAIL, IL_CLASS_PROBE_FAILED, "NVRM lines just before it");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* A systemd journal file as the documented format lays it out (https://systemd.io/JOURNAL_FILE_FORMAT/):
 * the "LPKSHHRH" header, then DATA objects (type 1, 64-byte object header, payload "FIELD=value")
 * padded to 8 bytes. The message is the Xid 79 line of https://github.com/NVIDIA/NVSentinel/issues/155. */
static size_t journal_object(unsigned char *p, const char *payload) {
  size_t pl = strlen(payload), size = 64 + pl, padded = (size + 7) & ~(size_t)7;
  memset(p, 0, padded);
  p[0] = 1; /* OBJECT_DATA */
  for (int i = 0; i < 8; i++) p[8 + i] = (unsigned char)(size >> (8 * i));
  memcpy(p + 64, payload, pl);
  return padded;
}

static void test_klog_journal(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  unsigned char buf[4096];
  memset(buf, 0, sizeof buf);
  memcpy(buf, "LPKSHHRH", 8);
  size_t off = 256;
  off += journal_object(buf + off, "_TRANSPORT=kernel");
  off += journal_object(buf + off, "MESSAGE=NVRM: Xid (PCI:0000:0b:00): 79, GPU has fallen off the bus.");
  off += journal_object(buf + off, "SYSLOG_IDENTIFIER=kernel");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/var/log/journal/0123456789abcdef0123456789abcdef", root);
  sr_mkdirs(path);
  strcat(path, "/system.journal");
  FILE *f = fopen(path, "wb");
  IL_CHECK(f != NULL);
  if (f) {
    fwrite(buf, 1, off, f);
    fclose(f);
  }
  char out[512];
  IL_CHECK(il__klog_journal_messages((const char *)buf, off, out, sizeof out) > 0);
  IL_CHECK(strstr(out, "_TRANSPORT") == NULL && strstr(out, "fallen off the bus.\n") != NULL);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "gpu.xid", IL_VERDICT_FAIL, 10, "Xid 79 on PCI:0000:0b:00: drain the node");
  EXPECT_SUMMARY(dr, "gpu.xid", "GPU has fallen off the bus");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Xids judged by number (NVIDIA's Xid catalog): 31 and 13 are the application's, 94 contained,
 * 119 a GSP RPC timeout (https://github.com/NVIDIA/NVSentinel/pull/1270), 154 by the action it asks
 * for (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1134: "Xid 154 (Node Reboot Required)"). */
static void test_xid_by_number(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  struct {
    const char *line;
    il_verdict v;
    const char *summary;
  } cases[] = {
      {"NVRM: Xid (PCI:0000:08:00): 31, pid=169800, name=chrome, Ch 00000023, intr 00000000. MMU Fault: ENGINE CE0 HUBCLIENT_HSCE0 faulted @ 0x0_0abe0000",
       IL_VERDICT_OK, "GPU memory page fault"},
      {"NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error", IL_VERDICT_WARN, "Contained ECC error"},
      {"NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, name=nvc:[driver], Timeout after 6s of waiting for RPC response from GPU1 GSP!", IL_VERDICT_FAIL,
       "GSP RPC Timeout"},
      {"NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", IL_VERDICT_FAIL, "Node Reboot Required"},
      {"NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", IL_VERDICT_OK, "None"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sr_write(root, "/var/log/kern.log", "Apr 29 19:20:01 host kernel: %s\n", cases[i].line);
    il_doctor *dr = sc_run(&s);
    EXPECT(dr, "gpu.xid", cases[i].v, -1, NULL);
    EXPECT_SUMMARY(dr, "gpu.xid", cases[i].summary);
    il_doctor_free(dr);
  }
  /* The scanner: "caused by previous Xid 149" is the 149 (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150). */
  il_xid_event ev[4];
  IL_CHECK_INT(il_xid_scan("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n", ev, 4), 1);
  IL_CHECK_INT(ev[0].xid, 149);
  IL_CHECK(il_xid_lookup(79) && il_xid_lookup(79)->kind == IL_XID_HW && il_xid_lookup(31)->kind == IL_XID_APP);
  sr_destroy(root);
}

/* DKMS: make.log of https://github.com/pop-os/pop/issues/3117 (kernel built by gcc-12, cc 11 used)
 * and the missing headers of https://github.com/zen-kernel/zen-kernel/issues/305. */
static void test_dkms(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:01:00.0", 0x2684, "");
  sr_write(root, "/etc/os-release", "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\nPRETTY_NAME=\"Ubuntu 22.04.3 LTS\"\n");
  sr_write(root, "/var/lib/dkms/nvidia/535.98/build/make.log",
           "DKMS make.log for nvidia-535.98 for kernel 6.1.0-test (x86_64)\n"
           "make[1]: Entering directory '/usr/src/linux-headers-6.1.0-test'\n"
           "warning: the compiler differs from the one used to build the kernel\n"
           "  The kernel was built by: x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0\n"
           "  You are using:           cc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\n"
           "cc: error: unrecognized command-line option '-ftrivial-auto-var-init=zero'\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "kmod.dkms", IL_VERDICT_FAIL, IL_CLASS_DKMS, "sudo apt install gcc-12");
  EXPECT_SUMMARY(dr, "kmod.dkms", "x86_64-linux-gnu-gcc-12");
  il_doctor_free(dr);
  sr_write(root, "/var/lib/dkms/nvidia/535.98/build/make.log",
           "DKMS make.log for nvidia-535.98 for kernel 6.1.0-test (x86_64)\n"
           "<command-line>: fatal error: /lib/modules/6.1.0-test/build/include/linux/autoconf.h: No such file or directory\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.dkms", IL_VERDICT_FAIL, IL_CLASS_DKMS, "sudo apt install linux-headers-6.1.0-test");
  il_doctor_free(dr);
  /* A make.log of another kernel says nothing about this one. */
  sr_write(root, "/var/lib/dkms/nvidia/535.98/build/make.log", "DKMS make.log for nvidia-535.98 for kernel 5.15.0-old (x86_64)\nerror: x\n");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.dkms", IL_VERDICT_WARN, IL_CLASS_DKMS, "dkms autoinstall -k 6.1.0-test");
  il_doctor_free(dr);
  /* Negative: the module is built for the running kernel. */
  sr_touch(root, "/var/lib/dkms/nvidia/535.98/6.1.0-test/x86_64/module/nvidia.ko.zst");
  dr = sc_run(&s);
  EXPECT(dr, "kmod.dkms", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- inside a container ---------------------------------------------------------------------- */

static const char *docker_container(scen *s) {
  const char *root = sc_two_a100(s, "");
  sr_touch(root, "/.dockerenv");
  sr_write(root, "/proc/1/cgroup", "0::/docker/0123456789abcdef\n");
  sc_env(s, "NVIDIA_VISIBLE_DEVICES=all");
  return root;
}

/* Host-only fixes in a container: a version mismatch (NVML 18) and a missing nvidia_uvm
 * (https://github.com/pytorch/pytorch/issues/144835: "This environment is in a container and I don't
 * have root privileges"). */
static void test_container_advice(void) {
  scen s;
  const char *root = docker_container(&s);
  sr_scenario(root, "%snvml.init=18\n", SR_TWO_A100);
  sr_write(root, "/proc/modules", "nvidia 1 0 - Live 0x0\n");
  sr_rm(root, "/dev/nvidia-uvm");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 3, "On the host (it cannot be done inside this container): Reboot");
  EXPECT(dr, "kmod.uvm", IL_VERDICT_FAIL, 16, "On the host");
  EXPECT_CONTAINER_ADVICE(dr);
  il_doctor_free(dr);
  /* Non-root user in the container, nodes 0660 with the host's group
   * (https://github.com/podman-container-tools/podman/issues/23016): the container's groups, no usermod. */
  sr_scenario(root, "%s", SR_TWO_A100);
  sr_chmod(root, "/dev/nvidiactl", 0660);
  sr_chmod(root, "/dev/nvidia0", 0660);
  sr_chmod(root, "/dev/nvidia1", 0660);
  s.uid = 1000;
  dr = sc_run(&s);
  EXPECT(dr, "devnodes", IL_VERDICT_FAIL, 17, "--group-add");
  const il_check *c = il_doctor_find(dr, "devnodes");
  IL_CHECK(c && !strstr(c->fix, "usermod"));
  EXPECT_CONTAINER_ADVICE(dr);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Library provenance: the runtime bind-mounts what it injects (/proc/self/mountinfo); an image
 * that bakes in its own libcuda (https://github.com/NVIDIA/nvidia-docker/issues/1256). And CDI:
 * NVIDIA_VISIBLE_DEVICES=void set by the spec itself (https://github.com/NVIDIA/nvidia-container-toolkit/pull/395). */
static void test_container_provenance_and_cdi(void) {
  scen s;
  const char *root = docker_container(&s);
  sr_write(root, "/proc/self/mountinfo",
           "600 500 8:1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.54.03 /usr/lib/x86_64-linux-gnu/libcuda.so.535.54.03 ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw\n"
           "601 500 8:1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03 ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.injection", IL_VERDICT_OK, 0, NULL);
  const il_check *c = il_doctor_find(dr, "container.injection");
  IL_CHECK(c && il_check_evidence(c, "libcuda_origin") && strstr(il_check_evidence(c, "libcuda_origin"), "injected by the runtime"));
  il_doctor_free(dr);
  /* The image's own libcuda, older than the host module, no mount. */
  char tgt[64];
  sr_write(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.418.87.01", "ELF stand-in");
  snprintf(tgt, sizeof tgt, "libcuda.so.418.87.01");
  sr_link(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", tgt);
  dr = sc_run(&s);
  EXPECT(dr, "container.injection", IL_VERDICT_FAIL, IL_CLASS_IMAGE_DRIVER, "Rebuild the image without driver packages");
  il_doctor_free(dr);
  sr_link(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.535.54.03");
  /* CDI: void on purpose, the GPUs are there. */
  sc_pop(&s);
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=void");
  dr = sc_run(&s);
  EXPECT(dr, "visibility.nvidia", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "visibility.nvidia", "CDI");
  il_doctor_free(dr);
  /* CDI nodes without libraries: not "nothing injected". */
  s.nvml[0] = s.cuda[0] = 0;
  dr = sc_run(&s);
  EXPECT(dr, "driver.nvml", IL_VERDICT_FAIL, 23, "regenerate the CDI spec");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* NCCL's /dev/shm: Docker's 64 MB (https://github.com/NVIDIA/nccl/issues/342). */
static void test_container_shm(void) {
  scen s;
  const char *root = docker_container(&s);
  sr_write(root, "/proc/mounts", "overlay / overlay rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.shm", IL_VERDICT_WARN, IL_CLASS_NCCL_SHM, "--shm-size");
  il_doctor_free(dr);
  sc_env(&s, "KUBERNETES_SERVICE_HOST=10.0.0.1");
  dr = sc_run(&s);
  EXPECT(dr, "container.shm", IL_VERDICT_WARN, IL_CLASS_NCCL_SHM, "medium: Memory");
  il_doctor_free(dr);
  sc_pop(&s);
  sr_write(root, "/proc/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=8388608k 0 0\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.shm", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- layouts ----------------------------------------------------------------------------------
 * K3s: its generated config (https://github.com/k3s-io/k3s/issues/4391 layout), default-runtime in
 * /etc/rancher/k3s/config.yaml (https://github.com/NVIDIA/gpu-operator/issues/473 comments). */
static void test_k3s(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_exe(root, "/usr/local/bin/k3s");
  sr_exe(root, "/usr/bin/nvidia-container-runtime");
  sr_write(root, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
           "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.containerd", IL_VERDICT_WARN, IL_CLASS_K3S, "sudo systemctl restart k3s");
  il_doctor_free(dr);
  /* Negative control: a healthy K3s node. */
  sr_write(root, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
           "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"nvidia\"]\n  runtime_type = \"io.containerd.runc.v2\"\n"
           "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"nvidia\".options]\n  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n");
  sr_write(root, "/etc/rancher/k3s/config.yaml", "default-runtime: nvidia\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.containerd", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.containerd", "K3s: nvidia runtime");
  EXPECT_NO_FAIL(dr);
  il_doctor_free(dr);
  sr_destroy(root);
  /* A hand edit that K3s throws away (quoted from https://github.com/k3s-io/k3s/issues/4070). */
  il_explain_match m[4];
  int n = il_explain("The config.toml will be overwritten by k3s when it restarts", m, 4);
  IL_CHECK(n >= 1 && m[0].scenario == IL_CLASS_K3S);
}

/* containerd 2: version 3 with single quotes and the cri.v1.runtime plugin
 * (https://github.com/containerd/containerd/issues/10132), runtimes that must move there
 * (https://github.com/NVIDIA/nvidia-container-toolkit/pull/805), drop-ins through imports. */
static void test_containerd2(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_exe(root, "/usr/bin/containerd");
  sr_exe(root, "/usr/bin/kubelet");
  sr_write(root, "/etc/containerd/config.toml",
           "version = 3\nroot = '/var/lib/containerd'\nimports = ['/etc/containerd/conf.d/*.toml']\n\n[plugins]\n"
           "  [plugins.'io.containerd.cri.v1.runtime'.containerd]\n    default_runtime_name = 'nvidia'\n");
  sr_write(root, "/etc/containerd/conf.d/99-nvidia.toml",
           "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n  runtime_type = 'io.containerd.runc.v2'\n"
           "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n  BinaryName = '/usr/bin/nvidia-container-runtime'\n");
  il_doctor *dr = sc_run(&s);
  /* Negative control: a healthy containerd 2 host. */
  EXPECT(dr, "container.containerd", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.containerd", "containerd 2 (config version 3): nvidia runtime registered, default nvidia");
  EXPECT_NO_FAIL(dr);
  il_doctor_free(dr);
  sr_write(root, "/etc/containerd/conf.d/99-nvidia.toml",
           "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.containerd", IL_VERDICT_FAIL, IL_CLASS_CONTAINERD2, "io.containerd.cri.v1.runtime");
  il_doctor_free(dr);
  sr_destroy(root);
  /* The toolkit's own message on such a node (https://github.com/NVIDIA/gpu-operator/issues/2060). */
  il_explain_match m[4];
  int n = il_explain("time=\"2026-01-21T12:32:09Z\" level=fatal msg=\"Error: unable to load config: unsupported config version: 3\"", m, 4);
  IL_CHECK(n >= 1 && m[0].scenario == IL_CLASS_CONTAINERD2);
}

/* Docker as a snap (https://github.com/NVIDIA/nvidia-container-toolkit/issues/522, https://github.com/canonical/docker-snap/issues/148). */
static void test_docker_snap(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_exe(root, "/snap/bin/docker");
  sr_exe(root, "/usr/bin/nvidia-ctk");
  sr_exe(root, "/usr/bin/nvidia-container-runtime-hook");
  sr_write(root, "/etc/docker/daemon.json", "{\"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}, \"default-runtime\": \"nvidia\"}\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_WARN, IL_CLASS_DOCKER_SNAP, "snap logs docker.nvidia-container-toolkit");
  EXPECT_SUMMARY(dr, "container.docker", "/etc/docker/daemon.json, where the host toolkit writes, is not read");
  il_doctor_free(dr);
  sr_write(root, "/var/snap/docker/current/config/daemon.json", "{\"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}, \"default-runtime\": \"nvidia\"}\n");
  sr_exe(root, "/usr/bin/nvidia-container-runtime");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.docker", "(snap)");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* The GPU operator's driver container beside a host driver (https://github.com/NVIDIA/gpu-operator/issues/126). */
static void test_operator_host_driver(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_write(root, "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "ELF stand-in");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.operator", IL_VERDICT_FAIL, IL_CLASS_OPERATOR_HOST, "--set driver.enabled=false");
  il_doctor_free(dr);
  sr_destroy(root);
  /* Negative: only the operator's driver. */
  root = sr_new_host();
  sc_init(&s, root);
  sr_write(root, "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "ELF stand-in");
  dr = sc_run(&s);
  EXPECT(dr, "container.operator", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Jetson: /etc/nv_tegra_release, the nvgpu nodes, CSV mode
 * (https://github.com/NVIDIA/nvidia-container-runtime/issues/123), no NVML (https://github.com/ollama/ollama/issues/3098). */
static void test_jetson(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_write(root, "/etc/nv_tegra_release", "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n");
  sr_touch(root, "/dev/nvmap");
  sr_touch(root, "/dev/nvhost-ctrl-gpu");
  sr_write(root, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-runtime]\nmode = \"csv\"\n");
  sr_write(root, "/etc/nvidia-container-runtime/host-files-for-container.d/l4t.csv", "dev, /dev/nvidiactl\nlib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so\n");
  sr_install_cuda(root, "/usr/lib/aarch64-linux-gnu/tegra", "1.1", s.cuda, sizeof s.cuda);
  sr_scenario(root, "cuda_driver=12020\ncount=1\ndev0.name=Orin\ndev0.cc=8.7\ncuda.init=0\n");
  il_doctor *dr = sc_run(&s);
  /* Negative control: a healthy Jetson. */
  EXPECT_NO_FAIL(dr);
  EXPECT(dr, "jetson.platform", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "jetson.platform", "R35.4.1");
  EXPECT(dr, "driver.nvml", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* A Jetson container started without the NVIDIA runtime. */
  sr_touch(root, "/.dockerenv");
  s.cuda[0] = 0;
  dr = sc_run(&s);
  EXPECT(dr, "jetson.platform", IL_VERDICT_FAIL, IL_CLASS_JETSON, "--runtime nvidia");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- new checks -------------------------------------------------------------------------------
 * SELinux: the contexts of https://github.com/fedora-selinux/selinux-policy/issues/1695 as an AVC
 * line; the boolean of https://github.com/NVIDIA/nvidia-container-toolkit/issues/210. AppArmor: the
 * line of https://github.com/pdbear/syno_nvidia_gpu_driver/issues/18. */
static void test_lsm(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_write(root, "/sys/fs/selinux/enforce", "1\n");
  sr_write(root, "/sys/fs/selinux/booleans/container_use_devices", "0 0\n");
  sr_write(root, "/var/log/audit/audit.log",
           "type=AVC msg=audit(1684465329.146:35): avc:  denied  { read write } for  pid=4711 comm=\"python\" name=\"nvidia0\" dev=\"devtmpfs\" "
           "ino=1234 scontext=system_u:system_r:container_t:s0:c380,c597 tcontext=system_u:object_r:xserver_misc_device_t:s0 tclass=chr_file permissive=0\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "security.lsm", IL_VERDICT_FAIL, IL_CLASS_SELINUX, "setsebool -P container_use_devices on");
  EXPECT_SUMMARY(dr, "security.lsm", "container_t access to nvidia0 (xserver_misc_device_t)");
  il_doctor_free(dr);
  sr_rm(root, "/var/log/audit/audit.log");
  sr_write(root, "/var/log/kern.log",
           "[  651.640415] audit: type=1400 audit(1716191113.203:186): apparmor=\"DENIED\" operation=\"unlink\" profile=\"/usr/bin/snmpd\" "
           "name=\"/dev/char/195:0\" pid=17728 comm=\"nvidia-smi\" requested_mask=\"d\" denied_mask=\"d\" fsuid=0 ouid=0\n");
  dr = sc_run(&s);
  EXPECT(dr, "security.lsm", IL_VERDICT_FAIL, IL_CLASS_APPARMOR, "aa-complain /usr/bin/snmpd");
  il_doctor_free(dr);
  /* Negative: enforcing, no denials. */
  sr_rm(root, "/var/log/kern.log");
  dr = sc_run(&s);
  EXPECT(dr, "security.lsm", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Toolkit older than 1.8.0 on cgroup v2 (https://github.com/pop-os/beta/issues/289,
 * https://github.com/NVIDIA/nvidia-container-toolkit/issues/7). */
static void test_toolkit_cgroup_v2(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_touch(root, "/sys/fs/cgroup/cgroup.controllers");
  sr_write(root, "/var/lib/dpkg/status", "Package: libnvidia-container1\nStatus: install ok installed\nVersion: 1.7.0-1\n\n"
                                         "Package: nvidia-container-toolkit\nStatus: install ok installed\nVersion: 1.7.0-1\n\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.cgroupv2", IL_VERDICT_FAIL, 105, "libnvidia-container1 >= 1.8.0");
  il_doctor_free(dr);
  sr_write(root, "/var/lib/dpkg/status", "Package: libnvidia-container1\nStatus: install ok installed\nVersion: 1.14.3-1\n\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.cgroupv2", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Every host path of a CDI spec: a library renamed by an update
 * (https://github.com/homelab-00/TranscriptionSuite/pull/313). */
static void test_cdi_paths(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_exe(root, "/usr/bin/nvidia-ctk");
  sr_write(root, "/usr/lib/libnvidia-egl-wayland.so.1.1.22", "x");
#define CDI_SPEC "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n" \
                     "containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  mounts:\n" \
                     "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.54.03\n    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.54.03\n" \
                     "  - hostPath: /usr/lib/libnvidia-egl-wayland.so.1.1.%d\n    containerPath: /usr/lib/libnvidia-egl-wayland.so.1.1.%d\n"
  sr_write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC, 21, 21);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_FAIL, 23, "nvidia-ctk cdi generate");
  EXPECT_SUMMARY(dr, "container.cdi", "/usr/lib/libnvidia-egl-wayland.so.1.1.21");
  il_doctor_free(dr);
  sr_write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC, 22, 22);
  dr = sc_run(&s);
  EXPECT(dr, "container.cdi", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "container.cdi", "all 3 host paths exist");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* The hook's user: user = "root:video" in the toolkit config against nodes of another group
 * (https://github.com/NVIDIA/nvidia-container-toolkit/issues/268). */
static void test_hook_user(void) {
  scen s;
  const char *root = sc_two_a100(&s, "");
  /* The nodes belong to the test's own group (named "render" here unless it is root's 0). */
  if (getgid() == 0) sr_write(root, "/etc/group", "root:x:0:\nvideo:x:44:\n");
  else sr_write(root, "/etc/group", "root:x:0:\nvideo:x:44:\nrender:x:%u:\n", (unsigned)getgid());
  sr_chmod(root, "/dev/nvidiactl", 0660);
  sr_write(root, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nuser = \"nobody:video\"\nno-cgroups = false\n");
  sr_write(root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.hook_user", IL_VERDICT_FAIL, 17, getgid() == 0 ? "user = \"root:root\"" : "user = \"root:render\"");
  il_doctor_free(dr);
  /* Negative: root (no user line). */
  sr_write(root, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\n#user = \"root:video\"\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.hook_user", IL_VERDICT_OK, 0, NULL);
  IL_CHECK(il_doctor_find(dr, "container.hook_user")->na);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* ---- the report ------------------------------------------------------------------------------- */

/* Every class a check or --explain names has its section in docs/doctor.md, and the report links
 * it instead of a research-file number; not-applicable checks are counted apart from OK. */
static void test_report_links_and_tally(void) {
  const char *src = getenv("IL_SRC");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/docs/doctor.md", src ? src : ".");
  FILE *f = fopen(path, "r");
  static char doc[1 << 18];
  size_t n = f ? fread(doc, 1, sizeof doc - 1, f) : 0;
  if (f) fclose(f);
  doc[n] = 0;
  IL_CHECK(n > 0);
  for (int i = 0; i < il_class_count(); i++) {
    char h[96];
    snprintf(h, sizeof h, "\n### %s\n", il_class_slug(il_class_id_at(i)));
    if (!strstr(doc, h)) {
      il_test_failed++;
      fprintf(stderr, "test_doctor_beyond.c: FAILED: docs/doctor.md has no section '### %s'\n", il_class_slug(il_class_id_at(i)));
    } else il_test_passed++;
  }
  scen s;
  const char *root = sc_two_a100(&s, "");
  sr_scenario(root, "%snvml.init=18\n", SR_TWO_A100);
  il_doctor *dr = sc_run(&s);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  il_report_text(dr, m);
  fclose(m);
  IL_CHECK(buf && strstr(buf, "[FAIL driver.nvml] (docs/doctor.md#driver-library-mismatch)") && !strstr(buf, "scenario"));
  int ok = 0, na = 0, warn = 0, fail = 0;
  for (int i = 0; i < dr->checks.n; i++) {
    const il_check *c = &dr->checks.items[i];
    if (c->na && c->verdict == IL_VERDICT_OK) na++;
    else if (c->verdict == IL_VERDICT_OK) ok++;
    else if (c->verdict == IL_VERDICT_WARN) warn++;
    else fail++;
  }
  char tally[160];
  snprintf(tally, sizeof tally, "%d OK, %d not applicable, %d WARN, %d FAIL", ok, na, warn, fail);
  IL_CHECK(buf && strstr(buf, tally));
  free(buf);
  buf = NULL;
  m = open_memstream(&buf, &len);
  il_report_json(dr, m);
  fclose(m);
  char js[160];
  snprintf(js, sizeof js, "\"summary\":{\"ok\":%d,\"warn\":%d,\"fail\":%d,\"not_applicable\":%d}", ok, warn, fail, na);
  IL_CHECK(buf && strstr(buf, js) && strstr(buf, "\"class\":\"driver-library-mismatch\",\"doc\":\"docs/doctor.md#driver-library-mismatch\""));
  free(buf);
  il_doctor_free(dr);
  sr_destroy(root);
}

int main(void) {
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) IL_SKIP("fake NVML/CUDA libraries not built");
  test_klog_gsp_firmware();
  test_klog_bar();
  test_klog_journal();
  test_xid_by_number();
  test_dkms();
  test_container_advice();
  test_container_provenance_and_cdi();
  test_container_shm();
  test_k3s();
  test_containerd2();
  test_docker_snap();
  test_operator_host_driver();
  test_jetson();
  test_lsm();
  test_toolkit_cgroup_v2();
  test_cdi_paths();
  test_hook_user();
  test_report_links_and_tally();
  return il_test_finish();
}
