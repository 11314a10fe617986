/* tests/test_doctor_elf: probe/elfver reads a libcuda's driver version and SONAME from the ELF
 * file without loading it, and cuda.loader / driver.version_match use it when the file name
 * carries no version.
 *
 * What a real library holds (sources, also in probe/elfver.h): the driver installs
 * libcuda.so.VERSION with SONAME libcuda.so.1 and a libcuda.so.1 link (the file-suffix rule of
 * NVIDIA's own toolkit: https://github.com/NVIDIA/nvidia-container-toolkit/pull/1451); the user
 * space carries its version string and hands it to the kernel module, which answers "NVRM: API
 * mismatch: the client has the version 535.54.03, but this kernel module has the version
 * 530.30.02" (https://github.com/stackhpc/ansible-slurm-appliance/issues/287). No real NVIDIA
 * library is available here, so the files below are synthesized: a 64-bit little-endian ELF
 * with .shstrtab, .dynstr, .dynamic (DT_SONAME, DT_NULL) and a .rodata holding the version
 * among other strings. The scenario: a bare libcuda.so.1 (a regular file, no versioned name)
 * from a 470 install on LD_LIBRARY_PATH in front of a 535 driver, as in
 * https://github.com/NVIDIA/nvidia-docker/issues/1256 (an image's own older libcuda).
 * On a machine with an NVIDIA driver (scripts/gpu-check.sh runs this test there), the installed
 * libcuda.so.VERSION files are read too and the version found inside must be the one in the
 * file name: the check of the layout above on a real library. Without a driver that part says
 * it did not run; IL_TEST_LIBCUDA_DIRS adds directories to read (a libcuda unpacked from a
 * driver package, such as Debian 12's libcuda1 535.261.03, whose .rodata layout the
 * synthesized test_scan_real_layout copies).
 * Bad input: every truncation of a valid file, 3000 seeded random corruptions and hand-made
 * bad headers must give an error value naming the file and an offset, never a crash (run under
 * ASan in the sanitizer tier).
 */
#include <dirent.h>
#include <stdint.h>

#include "sysroots/scenario.h"
#include "probe/elfver.h"

typedef struct {
  unsigned char *b;
  size_t n, cap;
} buf_t;

static size_t put(buf_t *w, const void *p, size_t n) {
  while (w->n + n + 8 > w->cap) {
    w->cap = w->cap ? w->cap * 2 : 4096;
    w->b = realloc(w->b, w->cap);
  }
  size_t at = w->n;
  memcpy(w->b + w->n, p, n);
  w->n += n;
  return at;
}
static void align8(buf_t *w) {
  static const unsigned char z[8] = {0};
  if (w->n % 8) put(w, z, 8 - w->n % 8);
}
static void le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A shared object: section 0 null, 1 .shstrtab, 2 .dynstr, 3 .dynamic, 4 .rodata. */
static buf_t make_elf(const char *soname, const char *rodata, size_t rlen) {
  buf_t w = {0};
  unsigned char eh[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  put(&w, eh, sizeof eh);
  static const char names[] = "\0.shstrtab\0.dynstr\0.dynamic\0.rodata";
  size_t o_names = put(&w, names, sizeof names);
  char dynstr[160] = "";
  size_t ldyn = (size_t)snprintf(dynstr + 1, sizeof dynstr - 1, "%s", soname) + 2;
  size_t o_dynstr = put(&w, dynstr, ldyn);
  align8(&w);
  unsigned char dyn[32] = {0};
  le(dyn, 14, 8); /* DT_SONAME */
  le(dyn + 8, 1, 8);
  size_t o_dyn = put(&w, dyn, sizeof dyn);
  size_t o_ro = put(&w, rodata, rlen);
  align8(&w);
  struct {
    uint32_t name, type, link;
    size_t off, size;
  } sh[5] = {{0, 0, 0, 0, 0}, {1, 3, 0, o_names, sizeof names}, {11, 3, 0, o_dynstr, ldyn}, {19, 6, 2, o_dyn, sizeof dyn}, {28, 1, 0, o_ro, rlen}};
  size_t shoff = w.n;
  for (int i = 0; i < 5; i++) {
    unsigned char s[64] = {0};
    le(s, sh[i].name, 4);
    le(s + 4, sh[i].type, 4);
    le(s + 24, sh[i].off, 8);
    le(s + 32, sh[i].size, 8);
    le(s + 40, sh[i].link, 4);
    put(&w, s, sizeof s);
  }
  le(w.b + 16, 3, 2);  /* ET_DYN */
  le(w.b + 18, 62, 2); /* EM_X86_64 */
  le(w.b + 40, shoff, 8);
  le(w.b + 52, 64, 2);
  le(w.b + 58, 64, 2);
  le(w.b + 60, 5, 2);
  le(w.b + 62, 1, 2);
  return w;
}

static const char ro_535[] = "\0cuInit\0%s: version %s\0" "535.54.03\0" "12.2\0" "1.0\0libcuda.so.1\0" "535.54.03\0" "r535_00\0";

static const char *write_tmp(const buf_t *w) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/inferlab-elf-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, w->b, w->n) != (ssize_t)w->n) abort();
  close(fd);
  return path;
}

static void test_scan(void) {
  char v[32];
  /* Highest, not most frequent, and compared as numbers. */
  static const char ok[] = "x\0" "570.144\0" "535.54.03\0" "535.54.03\0";
  IL_CHECK_INT(il_elfver_scan(ok, sizeof ok - 1, v, sizeof v), 2);
  IL_CHECK_STR(v, "570.144");
  static const char num[] = "535.86.06\0" "535.261.03\0" "535.86.06\0";
  IL_CHECK_INT(il_elfver_scan(num, sizeof num - 1, v, sizeof v), 2);
  IL_CHECK_STR(v, "535.261.03");
  /* Not driver versions: CUDA versions, 4-digit majors, empty groups, 3 groups, leading zero,
   * a version inside a longer string that is not a library or profile name, names whose
   * version is not at the end or not of the shape, and a string cut by the end of the buffer. */
  static const char bad[] = "1.0\0" "12.2\0" "5354.03\0" "535.\0" "535..1\0" "535.54.03.1\0" "053.1\0" "abc535.54.03\0" "535.1234\0"
                            "libnvidia-ml.so.1\0" "libx.so.535.54.03.bak\0" "libx.so.53.54\0" "profiles-535.54.03-r\0" "profiles-535.54.03.rc\0" "470.82.01";
  IL_CHECK_INT(il_elfver_scan(bad, sizeof bad - 1, v, sizeof v), 0);
  IL_CHECK_STR(v, "");
}

/* The former rule, kept to show the real layout defeats it: the most frequent NUL-delimited
 * string (the first of equals). Only for buffers whose other strings are all distinct. */
static void most_frequent(const char *buf, size_t n, char *out, size_t nout) {
  int best = 0;
  out[0] = 0;
  for (size_t a = 0; a < n; a += strlen(buf + a) + 1) {
    int k = 0;
    for (size_t b = 0; b < n; b += strlen(buf + b) + 1) k += !strcmp(buf + a, buf + b);
    if (buf[a] && k > best) best = k, snprintf(out, nout, "%s", buf + a);
  }
}

/* The layout of Debian 12's libcuda.so.535.261.03 (observed, see elfver.h): its own version
 * once bare and inside two library names and the profile path list, a table of older versions
 * (five of them twice each) around it. */
static void test_scan_real_layout(void) {
  static const char ro[] = "RM dup object call failed\0" "535.261.03\0"
                           "libnvidia-pkcs11-openssl3.so.535.261.03\0" "libnvidia-pkcs11.so.535.261.03\0"
                           "__RM_NO_VERSION_CHECK\0" "450.36.05\0" "DeviceFileUID\0" "/sys/devices/system/node/node%d/meminfo\0"
                           "450.36.05\0" "450.51.02\0" "/dev/nvidia-caps\0" "450.51.02\0" "450.79\0" "450.111\0" "470.57.01\0"
                           "Tegra\0" "470.57.01\0" "510.48\0" "515.39\0" "525.65\0" "535.54.02\0" "/dev/char/%d:%d\0" "535.54.02\0"
                           "535.86.06\0" "535.86.06\0"
                           "/etc/nvidia/nvidia-application-profiles-rc:/etc/nvidia/nvidia-application-profiles-rc.d/:"
                           "/usr/share/nvidia/nvidia-application-profiles-535.261.03-rc:/usr/share/nvidia/nvidia-application-profiles-rc\0";
  char v[32], old[32];
  IL_CHECK_INT(il_elfver_scan(ro, sizeof ro - 1, v, sizeof v), 11);
  IL_CHECK_STR(v, "535.261.03");
  most_frequent(ro, sizeof ro - 1, old, sizeof old);
  IL_CHECK_STR(old, "450.36.05"); /* what the former rule read: a table entry */

  /* The own version only inside a name, not bare: the name outranks the bare versions. */
  static const char named_only[] = "535.86.06\0" "535.86.06\0" "libnvidia-pkcs11.so.535.261.03\0" "535.54.02\0";
  IL_CHECK_INT(il_elfver_scan(named_only, sizeof named_only - 1, v, sizeof v), 3);
  IL_CHECK_STR(v, "535.261.03");
  /* A name outranks a higher bare version; only the profile-list form present. */
  static const char profile[] = "580.1.1\0" "x:/usr/share/nvidia/nvidia-application-profiles-570.144-rc:y\0";
  IL_CHECK_INT(il_elfver_scan(profile, sizeof profile - 1, v, sizeof v), 2);
  IL_CHECK_STR(v, "570.144");
  /* No name at all: the highest bare version (a library is not older than its table). */
  static const char bare[] = "450.36.05\0" "450.36.05\0" "535.261.03\0" "535.54.02\0" "535.54.02\0";
  IL_CHECK_INT(il_elfver_scan(bare, sizeof bare - 1, v, sizeof v), 3);
  IL_CHECK_STR(v, "535.261.03");

  /* Read through the ELF path too, with the layout split across the 1 MiB pieces. */
  size_t big = ((size_t)1 << 20) + 4096;
  char *buf = calloc(1, big);
  memcpy(buf + (1 << 20) - 20, ro, sizeof ro - 1);
  buf_t w = make_elf("libcuda.so.1", buf, big);
  const char *p = write_tmp(&w);
  il_elfver_info info;
  IL_CHECK_OK(il_elfver_read(p, &info));
  IL_CHECK_STR(info.version, "535.261.03");
  IL_CHECK_INT(info.n_versions, 11);
  unlink(p);
  free(w.b);
  free(buf);
}

static void test_read_valid(void) {
  buf_t w = make_elf("libcuda.so.1", ro_535, sizeof ro_535 - 1);
  const char *p = write_tmp(&w);
  il_elfver_info info;
  IL_CHECK_OK(il_elfver_read(p, &info));
  IL_CHECK_STR(info.soname, "libcuda.so.1");
  IL_CHECK_STR(info.version, "535.54.03");
  IL_CHECK_INT(info.n_versions, 1);
  unlink(p);
  free(w.b);

  /* A 3 MiB .rodata with the version cut by the 1 MiB piece boundary: read whole. */
  size_t big = (size_t)3 << 20;
  char *ro = calloc(1, big);
  memset(ro + 100, 'a', 1000);
  memcpy(ro + (1 << 20) - 4, "470.82.01", 9);
  w = make_elf("libcuda.so.1", ro, big);
  p = write_tmp(&w);
  IL_CHECK_OK(il_elfver_read(p, &info));
  IL_CHECK_STR(info.version, "470.82.01");
  unlink(p);
  free(w.b);
  free(ro);
}

/* Every error names the file and an offset; none reads outside the file (ASan). */
static void expect_format_error(const char *p, const char *what, int line) {
  il_elfver_info info;
  il_status st = il_elfver_read(p, &info);
  const char *d = il_error_detail();
  if (st == IL_OK) { /* a corruption may leave a readable file: then the fields must be bounded */
    IL_CHECK(strlen(info.version) < sizeof info.version && strlen(info.soname) < sizeof info.soname);
    return;
  }
  if (st == IL_ERR_FORMAT && strstr(d, p) && strstr(d, "offset")) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  fprintf(stderr, "test_doctor_elf.c:%d: FAILED (%s): %s: %s\n", line, what, il_status_name(st), d);
}

static void test_read_hostile(void) {
  buf_t w = make_elf("libcuda.so.1", ro_535, sizeof ro_535 - 1);
  buf_t m = {0};
  put(&m, w.b, w.n);
  char path[64];
  snprintf(path, sizeof path, "/tmp/inferlab-elf-XXXXXX");
  int fd = mkstemp(path);
  IL_CHECK(fd >= 0);
  /* Every truncation. */
  for (size_t len = 0; len < w.n; len++) {
    IL_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, w.b, len, 0) == (ssize_t)len);
    il_elfver_info info;
    il_status st = il_elfver_read(path, &info);
    if (st != IL_ERR_FORMAT || !strstr(il_error_detail(), "offset")) {
      il_test_failed++;
      fprintf(stderr, "truncated to %zu: %s %s\n", len, il_status_name(st), il_error_detail());
      break;
    }
  }
  il_test_passed++;
  /* Seeded random corruptions of 1-8 bytes anywhere (headers included). */
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(m.b, w.b, w.n);
    int k = 1 + (int)(seed % 8);
    for (int j = 0; j < k; j++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = (size_t)(seed >> 33) % (iter % 2 ? 64 : w.n); /* half of them in the ELF header */
      if (iter % 3 == 0) at = w.n - 5 * 64 + (size_t)(seed >> 40) % (5 * 64); /* a third in the section headers */
      m.b[at] = (unsigned char)(seed >> 24);
    }
    IL_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, m.b, w.n, 0) == (ssize_t)w.n);
    il_elfver_info info;
    il_status st = il_elfver_read(path, &info);
    if (st != IL_OK && (st != IL_ERR_FORMAT || !strstr(il_error_detail(), "offset"))) {
      il_test_failed++;
      fprintf(stderr, "corruption %d: %s %s\n", iter, il_status_name(st), il_error_detail());
      break;
    }
  }
  il_test_passed++;
  /* Hand-made: 32-bit class, big-endian, a section table past the end, a section past the end,
   * a SONAME index outside .dynstr, a .dynamic linking to a missing section. */
  struct {
    size_t off;
    uint64_t val;
    int bytes;
    const char *what;
  } cases[] = {
      {4, 1, 1, "ELF class 1"},
      {5, 2, 1, "big-endian"},
      {40, 1u << 30, 8, "section table past the end"},
      {w.n - 5 * 64 + 4 * 64 + 32, 1u << 30, 8, ".rodata size past the end"},
      {w.n - 5 * 64 + 4 * 64 + 24, UINT64_MAX - 4, 8, ".rodata offset overflowing"},
      {w.n - 5 * 64 + 3 * 64 + 40, 77, 4, ".dynamic links to section 77"},
      {62, 9, 2, "section names in section 9 of 5"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memcpy(m.b, w.b, w.n);
    le(m.b + cases[i].off, cases[i].val, cases[i].bytes);
    IL_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, m.b, w.n, 0) == (ssize_t)w.n);
    expect_format_error(path, cases[i].what, __LINE__);
  }
  /* SONAME index beyond .dynstr. */
  memcpy(m.b, w.b, w.n);
  size_t dyn_off = 0;
  for (size_t i = 0; i + 8 <= w.n; i += 8)
    if (m.b[i] == 14 && !memcmp(m.b + i + 1, "\0\0\0\0\0\0\0\1", 8)) dyn_off = i;
  IL_CHECK(dyn_off > 0);
  le(m.b + dyn_off + 8, 5000, 8);
  IL_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, m.b, w.n, 0) == (ssize_t)w.n);
  expect_format_error(path, "SONAME index outside .dynstr", __LINE__);
  close(fd);
  unlink(path);
  /* Not an ELF at all; a directory; a missing file. */
  IL_CHECK_INT(il_elfver_read("/etc/hostname", &(il_elfver_info){0}), IL_ERR_FORMAT);
  IL_CHECK_CONTAINS(il_error_detail(), "/etc/hostname: offset 0: not an ELF file");
  IL_CHECK_INT(il_elfver_read("/tmp", &(il_elfver_info){0}), IL_ERR_IO);
  IL_CHECK_INT(il_elfver_read("/nonexistent/libcuda.so.1", &(il_elfver_info){0}), IL_ERR_NOT_FOUND);
  free(w.b);
  free(m.b);
}

/* A bare libcuda.so.1 (no versioned name) from a 470 install first on LD_LIBRARY_PATH, on a
 * 535.54.03 kernel module: found from the library's bytes. Negative: the same bare file
 * holding 535.54.03 is OK. */
static void test_loader_bare_file(void) {
  const char *root = sr_new_host();
  scen s;
  sc_init(&s, root);
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_driver(root, "535.54.03", 0, 1, 1);
  sr_install_cuda(root, "/usr/lib/x86_64-linux-gnu", "535.54.03", s.cuda, sizeof s.cuda);
  static const char ro_470[] = "\0cuInit\0" "470.82.01\0" "11.4\0";
  buf_t w = make_elf("libcuda.so.1", ro_470, sizeof ro_470 - 1);
  char abs[600];
  snprintf(abs, sizeof abs, "%s/opt/app/lib/libcuda.so.1", root);
  sr_write(root, "/opt/app/lib/libcuda.so.1", "%s", "");
  FILE *f = fopen(abs, "wb");
  IL_CHECK(f && fwrite(w.b, 1, w.n, f) == w.n);
  if (f) fclose(f);
  sc_env(&s, "LD_LIBRARY_PATH=/opt/app/lib");
  il_doctor *dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_FAIL, 3, "Remove /opt/app/lib from LD_LIBRARY_PATH");
  EXPECT_SUMMARY(dr, "cuda.loader", "/opt/app/lib/libcuda.so.1, version 470.82.01, from LD_LIBRARY_PATH");
  const il_check *c = il_doctor_find(dr, "cuda.loader");
  IL_CHECK(c && il_check_evidence(c, "version_from") != NULL);
  IL_CHECK_STR(c ? il_check_evidence(c, "soname") : "", "libcuda.so.1");
  il_doctor_free(dr);

  /* Negative: the same bare file from the driver's own version. */
  buf_t ok = make_elf("libcuda.so.1", ro_535, sizeof ro_535 - 1);
  f = fopen(abs, "wb");
  IL_CHECK(f && fwrite(ok.b, 1, ok.n, f) == ok.n);
  if (f) fclose(f);
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL);
  EXPECT_SUMMARY(dr, "cuda.loader", "same version as the kernel module");
  il_doctor_free(dr);

  /* A garbage file: version unknown, and the evidence says why with the offset. */
  sr_write(root, "/opt/app/lib/libcuda.so.1", "%s", "not a library");
  dr = sc_run(&s);
  EXPECT(dr, "cuda.loader", IL_VERDICT_OK, 0, NULL);
  c = il_doctor_find(dr, "cuda.loader");
  const char *e = c ? il_check_evidence(c, "elf") : NULL;
  IL_CHECK(e && strstr(e, "/opt/app/lib/libcuda.so.1: offset 0: not an ELF file"));
  il_doctor_free(dr);
  free(w.b);
  free(ok.b);
  sr_destroy(root);
}

/* Real libcuda.so.X.Y.Z files in the usual driver directories (Debian's nvidia/current
 * included) and in those IL_TEST_LIBCUDA_DIRS names (':'-separated; for a library unpacked from
 * a package, never installed): the ELF's version string must equal the file name's. */
static void test_real_libcuda(void) {
  static const char *const dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib64", "/usr/lib",
                                     "/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"};
  char extra[1024] = "";
  const char *env = getenv("IL_TEST_LIBCUDA_DIRS");
  if (env) snprintf(extra, sizeof extra, "%s", env);
  const char *all[sizeof dirs / sizeof dirs[0] + 8];
  size_t n_dirs = 0;
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) all[n_dirs++] = dirs[d];
  char *save = NULL;
  for (char *d = strtok_r(extra, ":", &save); d && n_dirs < sizeof all / sizeof all[0]; d = strtok_r(NULL, ":", &save)) all[n_dirs++] = d;
  int n_read = 0;
  for (size_t d = 0; d < n_dirs; d++) {
    DIR *dir = opendir(all[d]);
    if (!dir) continue;
    struct dirent *e;
    while ((e = readdir(dir))) {
      const char *ver = e->d_name + 11; /* after "libcuda.so.": "535.54.03", not "1" */
      if (strncmp(e->d_name, "libcuda.so.", 11) || !strchr(ver, '.')) continue;
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", all[d], e->d_name);
      il_elfver_info info;
      IL_CHECK_OK(il_elfver_read(path, &info));
      printf("real %s: SONAME '%s', version in the ELF '%s' (%d distinct)\n", path, info.soname, info.version,
             info.n_versions);
      IL_CHECK_STR(info.version, ver);
      n_read++;
    }
    closedir(dir);
  }
  if (!n_read) printf("SKIP (part): no real libcuda.so.VERSION on this machine: the layout is checked on synthesized files only\n");
}

int main(void) {
  test_scan();
  test_scan_real_layout();
  test_read_valid();
  test_read_hostile();
  test_loader_bare_file();
  test_real_libcuda();
  return il_test_finish();
}
