/* tests/test_doctor_input: the doctor against hostile input (issue 9, items 9 to 13).
 *
 * FIFOs planted at paths the doctor reads must not block it; docker's daemon.json is judged
 * by a real JSON parser (a valid file over 64 KiB is valid, bare words and missing values are
 * not); nvcc is run without a shell, so a quote in a PATH directory runs nothing; the JSON
 * report is valid UTF-8 whatever bytes the machine or the environment hold; a missing or
 * empty /proc/cpuinfo leaks nothing. Every check has an alarm so a regression fails instead
 * of hanging the suite.
 */
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "sysroots/scenario.h"

#include "memory/mem.h"
#include "probe/explain.h"
#include "probe/host.h"

/* Strict UTF-8 check (RFC 3629): no overlongs, surrogates or code points above U+10FFFF. */
static bool valid_utf8(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t l;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) l = 1;
    else if (c >= 0xc2 && c <= 0xdf) l = 2;
    else if (c >= 0xe0 && c <= 0xef) l = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) l = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return false;
    if (i + l > n) return false;
    if (l > 1 && (p[i + 1] < lo || p[i + 1] > hi)) return false;
    for (size_t k = 2; k < l; k++)
      if ((p[i + k] & 0xc0) != 0x80) return false;
    i += l;
  }
  return true;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_doctor_input: FAILED: the doctor blocked (alarm fired)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(2);
}

/* Item 9: a FIFO at any path doctor reads is refused at once, never opened for a blocking
 * read. Covers a /proc file, daemon.json, the driver version file, the CDI spec directory
 * and the library given to dlopen. */
static void test_fifo_does_not_block(void) {
  scen s;
  const char *root = sr_new_host();
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  char p[PATH_MAX];
  const char *fifos[] = {"/proc/cpuinfo", "/proc/meminfo", "/etc/docker/daemon.json", "/proc/driver/nvidia/version",
                         "/etc/cdi/nvidia.yaml", "/proc/1/cgroup", "/etc/os-release", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"};
  for (size_t i = 0; i < sizeof fifos / sizeof fifos[0]; i++) {
    sr_rm(root, fifos[i]);
    snprintf(p, sizeof p, "%s%s", root, fifos[i]);
    sr_parent(p);
    IL_CHECK_INT(mkfifo(p, 0644), 0);
  }
  sr_exe(root, "/usr/bin/dockerd");
  snprintf(s.nvml, sizeof s.nvml, "%s/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", root);
  alarm(20);
  il_doctor *dr = sc_run(&s);
  alarm(0);
  IL_CHECK(dr != NULL);
  EXPECT_SUMMARY(dr, "driver.nvml", "not a regular file");
  EXPECT_SUMMARY(dr, "container.docker", "not a regular file");
  EXPECT_SUMMARY(dr, "host.cpu", "unknown CPU");
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Item 10: daemon.json through a real parser. */
static void test_daemon_json_parser(void) {
  scen s;
  const char *root = sr_new_host();
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_exe(root, "/usr/bin/dockerd");
  sr_exe(root, "/usr/bin/nvidia-ctk");
  sr_exe(root, "/usr/bin/nvidia-container-runtime");
  sr_exe(root, "/usr/bin/nvidia-container-runtime-hook");
  /* Valid, 100 KiB (a long registry-mirrors list), nvidia registered and default: OK. */
  size_t big = 100 * 1024;
  char *doc = malloc(big + 512);
  size_t o = (size_t)sprintf(doc, "{\"default-runtime\": \"nvidia\", \"registry-mirrors\": [");
  for (int i = 0; o < big; i++) o += (size_t)sprintf(doc + o, "%s\"https://mirror%05d.example.com\"", i ? ", " : "", i);
  sprintf(doc + o, "], \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\", \"args\": []}}}\n");
  sr_write(root, "/etc/docker/daemon.json", "%s", doc);
  free(doc);
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  /* Bare word as a value: dockerd refuses it ("invalid character 'n' looking for beginning of value"). */
  sr_write(root, "/etc/docker/daemon.json", "{\"runtimes\": {\"nvidia\": {\"path\": nvidia-container-runtime}}}\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_FAIL, 19, "json.tool");
  EXPECT_SUMMARY(dr, "container.docker", "line 1 column");
  il_doctor_free(dr);
  /* Missing value. */
  sr_write(root, "/etc/docker/daemon.json", "{\"default-runtime\": , \"runtimes\": {}}\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_FAIL, 19, NULL);
  il_doctor_free(dr);
  /* Trailing comma (accepted by the old scanner's tolerant loop? it must be invalid). */
  sr_write(root, "/etc/docker/daemon.json", "{\"default-runtime\": \"nvidia\",}\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_FAIL, 19, NULL);
  il_doctor_free(dr);
  /* Escapes are decoded: "nvi\u0064ia" is "nvidia". */
  sr_write(root, "/etc/docker/daemon.json",
           "{\"default-runtime\": \"nvi\\u0064ia\", \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\"}}}\n");
  dr = sc_run(&s);
  EXPECT(dr, "container.docker", IL_VERDICT_OK, 0, NULL);
  il_doctor_free(dr);
  sr_destroy(root);
}

/* Item 11: nvcc found in a PATH directory whose name holds a quote and a command
 * substitution. Run on the real root (the only place doctor executes anything). */
static void test_nvcc_no_shell(void) {
  char base[256], dir[PATH_MAX], marker[PATH_MAX], cwd[PATH_MAX];
  snprintf(base, sizeof base, "%s", il_test_tmpdir());
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  IL_CHECK_INT(chdir(base), 0);
  snprintf(dir, sizeof dir, "%s/it's $(touch pwned)/bin", base);
  snprintf(marker, sizeof marker, "%s/pwned", base);
  char nvcc[PATH_MAX + 16];
  snprintf(nvcc, sizeof nvcc, "%s/nvcc", dir);
  sr_write("", nvcc, "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n");
  chmod(nvcc, 0755);
  char pathenv[PATH_MAX + 16];
  snprintf(pathenv, sizeof pathenv, "PATH=%s", dir);
  char *env[] = {pathenv, NULL};
  il_doctor_options o;
  il_doctor_options_default(&o, env);
  o.allow_exec = true;
  o.nvml_lib = "/nonexistent/libnvidia-ml.so.1";
  o.cuda_lib = "/nonexistent/libcuda.so.1";
  il_doctor *dr = NULL;
  alarm(20);
  IL_CHECK_OK(il_doctor_run(&o, &dr));
  alarm(0);
  const il_check *c = dr ? il_doctor_find(dr, "runtime.nvcc") : NULL;
  IL_CHECK(c != NULL);
  if (c) {
    IL_CHECK_STR(il_check_evidence(c, "nvcc"), nvcc);
    IL_CHECK_STR(il_check_evidence(c, "nvcc_version"), "12.4.131");
  }
  IL_CHECK(access(marker, F_OK) != 0); /* the $(touch pwned) in the name did not run */
  il_doctor_free(dr);
  if (cwd[0] && chdir(cwd) != 0) perror("chdir");
  sr_destroy(base);
}

/* Item 12: doctor --json is valid UTF-8: raw bytes in the environment, in machine files, a
 * multi-byte character cut by a fixed-size buffer, and a sysroot path that is not UTF-8. */
static void test_json_utf8(void) {
  const char *parent = sr_new_host();
  char root[PATH_MAX];
  snprintf(root, sizeof root, "%s/sys\xff\xferoot", parent);
  sr_mkdirs(root);
  char cpu[2048] = "processor\t: 0\nmodel name\t: ";
  /* 200 two-byte characters: the 128-byte model field cuts one in half. */
  for (int i = 0; i < 200; i++) strcat(cpu, "\xc3\xa9");
  strcat(cpu, "\nflags\t\t: fpu avx2 fma\n\n");
  sr_write(root, "/proc/cpuinfo", "%s", cpu);
  sr_write(root, "/proc/sys/kernel/osrelease", "6.1.0-\xed\xa0\x80-surrogate-\xc0\xaf-overlong\n");
  sr_write(root, "/sys/class/dmi/id/product_name", "Box \xf8\x88\x80\x80\x80 %s\n", "\xe2\x82");
  scen s;
  sc_init(&s, root);
  sc_env(&s, "CUDA_VISIBLE_DEVICES=\xff\xfe,GPU-\xe9t\xe9");
  sc_env(&s, "NVIDIA_VISIBLE_DEVICES=\x80");
  il_doctor *dr = sc_run(&s);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  IL_CHECK_OK(il_report_json(dr, f));
  fclose(f);
  IL_CHECK(valid_utf8((const unsigned char *)buf, len));
  json_error_t err;
  json_t *doc = json_loadb(buf, len, 0, &err); /* jansson refuses invalid UTF-8 */
  if (!doc) fprintf(stderr, "jansson: line %d column %d: %s\n", err.line, err.column, err.text);
  IL_CHECK(doc != NULL);
  if (doc) {
    const char *sr = json_string_value(json_object_get(doc, "sysroot"));
    IL_CHECK(sr && strstr(sr, "sys\xef\xbf\xbd\xef\xbf\xbdroot")); /* each bad byte -> U+FFFD */
    const char *model = json_string_value(json_object_get(json_object_get(doc, "host"), "cpu_model"));
    IL_CHECK(model && !strncmp(model, "\xc3\xa9\xc3\xa9", 4));
  }
  json_decref(doc);
  free(buf);
  /* --explain --json with raw bytes in the pasted text. */
  buf = NULL;
  f = open_memstream(&buf, &len);
  il_explain_print_json("Failed to initialize NVML: Driver/library version mismatch \xff\xc3", f);
  fclose(f);
  IL_CHECK(valid_utf8((const unsigned char *)buf, len));
  free(buf);
  il_doctor_free(dr);
  sr_destroy(parent);
}

/* Item 13: no leak when /proc/cpuinfo is missing or empty. */
static void test_cpuinfo_missing_no_leak(void) {
  const char *root = sr_new_host();
  il_sysfs fs;
  IL_CHECK_OK(il_sysfs_init(&fs, root, NULL));
  il_mem_stats a, b;
  il_host_info h;
  for (int round = 0; round < 3; round++) {
    if (round == 0) sr_rm(root, "/proc/cpuinfo");
    else if (round == 1) sr_write(root, "/proc/cpuinfo", "%s", "");
    else sr_write(root, "/proc/cpuinfo", "processor\t: 0\nflags\t\t: avx2 fma\n");
    il_mem_stats_get(&a);
    il_host_probe(&fs, &h);
    il_mem_stats_get(&b);
    IL_CHECK_INT(b.current[IL_MEM_OTHER], a.current[IL_MEM_OTHER]);
    IL_CHECK_INT(h.logical_cpus, round == 2 ? 1 : 0);
  }
  sr_destroy(root);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  test_cpuinfo_missing_no_leak();
  test_json_utf8();
  test_daemon_json_parser();
  test_nvcc_no_shell();
  test_fifo_does_not_block();
  return il_test_finish();
}
