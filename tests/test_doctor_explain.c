/* tests/test_doctor_explain: --explain on pasted messages, the visibility rules, the report
 * formats (text layout, JSON that python3 -m json.tool accepts, escaping), and the sampler
 * that `monitor` uses, all through the library API. */
#include "sysroots/sysroot.h"

#include "memory/mem.h"
#include "probe/doctor.h"
#include "probe/explain.h"
#include "probe/report.h"
#include "probe/gpu_sampler.h"
#include "probe/visible.h"

static void expect_explain(int line, const char *text, int scenario) {
  il_explain_match m[8];
  int n = il_explain(text, m, 8);
  if (n > 0 && m[0].scenario == scenario) {
    il_test_passed++;
    return;
  }
  il_test_failed++;
  fprintf(stderr, "test_doctor_explain.c:%d: FAILED: \"%s\" -> want scenario %d first, got %d matches%s", line, text, scenario, n,
          n ? ", first " : "\n");
  if (n) fprintf(stderr, "%d (%s)\n", m[0].scenario, m[0].matched);
}
#define EXPECT_EXPLAIN(text, scen) expect_explain(__LINE__, text, scen)

static void test_explain(void) {
  EXPECT_EXPLAIN("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178", 3);
  EXPECT_EXPLAIN("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
                 "calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW",
                 2);
  EXPECT_EXPLAIN("RuntimeError: cuda runtime error (802) : system not yet initialized", 12);
  EXPECT_EXPLAIN("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].", 18);
  EXPECT_EXPLAIN("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", 19);
  EXPECT_EXPLAIN("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
                 "installed and running.", 4);
  EXPECT_EXPLAIN("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service", 5);
  EXPECT_EXPLAIN("NVRM: GPU 0000:01:00.0 is already bound to vfio-pci.", 7);
  EXPECT_EXPLAIN("RuntimeError: CUDA error: no kernel image is available for execution on the device", 15);
  EXPECT_EXPLAIN("Error: error setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", 23);
  EXPECT_EXPLAIN("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file: "
                 "no such file or directory: unknown", 20);
  EXPECT_EXPLAIN("RuntimeError: No CUDA GPUs are available", 14);
  EXPECT_EXPLAIN("THCudaCheck FAIL file=torch/csrc/cuda/Module.cpp line=109 error=38 : no CUDA-capable device is detected", 14);
  EXPECT_EXPLAIN("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer "
                 "version, or use an earlier cuda container", 1);
  EXPECT_EXPLAIN("ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory utilization", 25);
  EXPECT_EXPLAIN("NVRM: The NVIDIA GPU 0000:09:00.0 (PCI ID: 10de:1d01) NVRM: installed in this system is not supported by open "
                 "NVRM: nvidia.ko because it does not include the required GPU", 8);
  EXPECT_EXPLAIN("Failed to initialize NVML: GPU access blocked by the operating system", 24);
  EXPECT_EXPLAIN("fatal: MIG mode is enabled, but no MIG devices were found. Please either create MIG instances", 13);
  /* Issue 17: more real wordings. Sources: lockdown (research scenario 5 and kernel_lockdown(7)
   * as printed by modprobe); Fabric Manager log lines (https://github.com/NVIDIA/gpu-operator/issues/544,
   * https://github.com/NVIDIA/gpu-operator/issues/610); cgroup v2 (https://github.com/NVIDIA/nvidia-docker/issues/1447);
   * device plugin (https://github.com/NVIDIA/k8s-device-plugin/issues/1220, /issues/348); unsupported
   * GPU (https://github.com/NixOS/nixos-hardware/issues/1880, research B.1); error 803
   * (https://github.com/NVIDIA/nvidia-docker/issues/1256). */
  EXPECT_EXPLAIN("Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7", 5);
  EXPECT_EXPLAIN("nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with driver version "
                 "530.41.03. Please update with matching NVIDIA driver package.", 12);
  EXPECT_EXPLAIN("nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING "
                 "Nothing to do [NV_WARN_NOTHING_TO_DO]", 12);
  EXPECT_EXPLAIN("stderr: nvidia-container-cli: container error: cgroup subsystem devices not found: unknown.", 105);
  EXPECT_EXPLAIN("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown", 4);
  EXPECT_EXPLAIN("E0402 22:17:31.198643 1 factory.go:112] Incompatible strategy detected auto\n"
                 "E0402 22:17:31.198657 1 factory.go:113] If this is a GPU node, did you configure the NVIDIA Container Toolkit?", 19);
  EXPECT_EXPLAIN("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available", 106);
  EXPECT_EXPLAIN("NVRM: The NVIDIA NVIDIA GeForce GTX 1050 GPU installed in this system is NVRM:  supported through the NVIDIA 580.xx Legacy "
                 "drivers. The 595.71.05 NVIDIA driver will ignore NVRM:  this GPU.", 103);
  EXPECT_EXPLAIN("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:25a0) installed in this system is not supported by the NVIDIA 520.56.06 "
                 "driver release.", 103);
  EXPECT_EXPLAIN("NVRM: installed in this system requires use of the NVIDIA open kernel modules.", 104);
  EXPECT_EXPLAIN("cuInit failed: system has unsupported display driver / cuda driver combination (Error 803)", 3);
  EXPECT_EXPLAIN("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", 25);

  /* The out-of-memory family, split by what the message's own numbers say. */
  /* This process's model does not fit: https://github.com/pytorch/pytorch/issues/16417 (23.60 of 23.65 GiB is its own). */
  EXPECT_EXPLAIN("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of "
                 "which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated memory "
                 "22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
                 "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.", 110);
  /* Fragmentation: 4.84 GiB reserved-unallocated > 3.00 GiB asked (https://github.com/kerrj/lerf/issues/73). */
  EXPECT_EXPLAIN("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacty of 23.65 GiB of "
                 "which 1.66 GiB is free. Including non-PyTorch memory, this process has 20.81 GiB memory in use. Of the allocated memory "
                 "12.09 GiB is allocated by PyTorch, and 4.84 GiB is reserved by PyTorch but unallocated.", 113);
  /* Other processes: the old format, 1.24 GiB reserved by this process of 6 GiB with 3.03 GiB
   * free (https://github.com/pytorch/pytorch/issues/59778). */
  EXPECT_EXPLAIN("CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already allocated; "
                 "3.03 GiB free; 1.24 GiB reserved in total by PyTorch)", 25);
  /* Same old format, this process holds nearly everything (https://github.com/CompVis/stable-diffusion/issues/702). */
  EXPECT_EXPLAIN("OutOfMemoryError: CUDA out of memory. Tried to allocate 192.00 MiB (GPU 0; 4.00 GiB total capacity; 3.08 GiB already "
                 "allocated; 0 bytes free; 3.47 GiB reserved in total by PyTorch)", 110);
  /* llama.cpp / ggml (https://github.com/ggml-org/llama.cpp/issues/20431). */
  EXPECT_EXPLAIN("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: out of memory\n"
                 "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\nllama_model_load: error loading model: unable to "
                 "allocate CUDA0 buffer", 110);
  /* vLLM (https://github.com/vllm-project/vllm/issues/2248). */
  EXPECT_EXPLAIN("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", 110);
  /* Host OOM killer: kernel log and a shell's report of the SIGKILLed job. */
  EXPECT_EXPLAIN("[12345.678] Out of memory: Killed process 4711 (python3) total-vm:98765432kB, anon-rss:61234567kB", 112);
  EXPECT_EXPLAIN("./serve.sh: line 3: 4711 Killed                  python3 -m vllm.entrypoints.openai.api_server", 112);
  {
    il_explain_match mm[8];
    int k = il_explain("CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already allocated; "
                       "3.03 GiB free; 1.24 GiB reserved in total by PyTorch)", mm, 8);
    IL_CHECK(k >= 1 && strstr(mm[0].detail, "other processes hold about 1.73 GiB"));
    for (int i = 0; i < k; i++) IL_CHECK(mm[i].scenario != 110 && mm[i].scenario != 113); /* one cause, not the whole family */
    IL_CHECK_INT(il_explain("Killed by the referee in the 3rd minute", mm, 8), 0); /* negative: no OOM word, no bare Killed line */
    /* inferlab's own report (engine/oom.c, as `run --device sim:20MiB --ctx 2048` prints it) */
    k = il_explain("inferlab run: error: out of memory on sim:20MiB: cannot allocate 1.0 MiB for kv cache keys (layer 3) (kv)\n"
                   "  device: 20.0 MiB total, 20.0 MiB reserved (19.0 MiB allocated), 0 B free, largest free block 512.0 KiB\n"
                   "  in use by category: weights 13.0 MiB kv 6.0 MiB\n"
                   "  cause: capacity: this run needs more than the device holds\n"
                   "  this run needs 27.1 MiB: weights 13.0 MiB, kv 8.0 MiB, activations 6.0 MiB\n"
                   "  fix: --ctx 256 -> needs 17.0 MiB of 20.0 MiB (shorter context per sequence)", mm, 8);
    IL_CHECK(k >= 1 && mm[0].scenario == 110);
    IL_CHECK(k >= 1 && strstr(mm[0].detail, "its fix: --ctx 256") != NULL);
  }
  il_explain_match m[8];
  IL_CHECK_INT(il_explain("the weather is nice today", m, 8), 0);
  IL_CHECK_INT(il_explain(NULL, m, 8), 0);
  /* The output names the checks and the fix. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int n = il_explain_print_text("Failed to initialize NVML: Driver/library version mismatch", f);
  fclose(f);
  IL_CHECK(n >= 1);
  IL_CHECK(buf && strstr(buf, "driver.version_match") && strstr(buf, "Reboot"));
  free(buf);
}

static void test_visible(void) {
  il_visible_gpu gpus[3] = {{"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", false},
                            {"GPU-8932aaaa-0000-0000-0000-000000000000", false},
                            {"GPU-1234abcd-0000-0000-0000-000000000000", false}};
  il_cudavis v;
  il_visible_cuda(NULL, gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 3);
  il_visible_cuda("", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 0);
  IL_CHECK_INT(v.invalid_at, -1);
  il_visible_cuda("2,1", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 2);
  IL_CHECK_INT(v.phys[0], 2);
  IL_CHECK_INT(v.phys[1], 1);
  /* Documented example: 0,2,-1,1 -> 0 and 2 visible. */
  il_visible_cuda("0,2,-1,1", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 2);
  IL_CHECK_INT(v.invalid_at, 2);
  IL_CHECK_STR(v.invalid_entry, "-1");
  IL_CHECK_INT(v.n_hidden_after, 1);
  il_visible_cuda("GPU-1234", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 1);
  IL_CHECK_INT(v.phys[0], 2);
  il_visible_cuda("GPU-8932", gpus, 3, &v); /* ambiguous prefix */
  IL_CHECK_INT(v.n_visible, 0);
  IL_CHECK_CONTAINS(v.invalid_reason, "matches 2 GPUs");
  il_visible_cuda("0,0", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 1);
  IL_CHECK_INT(v.invalid_at, 1);
  il_visible_cuda("MIG-c6d4f1ef-0000", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 0);
  gpus[1].mig_enabled = true;
  il_visible_cuda("MIG-c6d4f1ef-0000", gpus, 3, &v);
  IL_CHECK_INT(v.n_visible, 1);
  IL_CHECK_INT(v.phys[0], 1);

  il_nvvis nv;
  il_visible_nvidia(NULL, false, &nv);
  IL_CHECK_INT(nv.mode, IL_NVVIS_UNSET_VOID);
  il_visible_nvidia(NULL, true, &nv);
  IL_CHECK_INT(nv.mode, IL_NVVIS_UNSET_LEGACY);
  il_visible_nvidia("", false, &nv);
  IL_CHECK_INT(nv.mode, IL_NVVIS_UNSET_VOID);
  il_visible_nvidia("all,void", false, &nv); /* void > none > all */
  IL_CHECK_INT(nv.mode, IL_NVVIS_VOID);
  il_visible_nvidia("none, all", false, &nv);
  IL_CHECK_INT(nv.mode, IL_NVVIS_NONE);
  il_visible_nvidia(" 0, GPU-fef8089b ,MIG-abc,0:1,0000:3b:00.0,,x", false, &nv);
  IL_CHECK_INT(nv.mode, IL_NVVIS_LIST);
  IL_CHECK_INT(nv.n_entries, 6);
  IL_CHECK_STR(nv.kind[0], "index");
  IL_CHECK_STR(nv.entries[1], "GPU-fef8089b");
  IL_CHECK_STR(nv.kind[1], "uuid");
  IL_CHECK_STR(nv.kind[2], "mig");
  IL_CHECK_STR(nv.kind[3], "gpu:mig");
  IL_CHECK_STR(nv.kind[4], "pci");
  IL_CHECK_STR(nv.kind[5], "unknown");
}

/* Writes the report JSON to a file and has python3 validate it. */
static int json_valid(const char *path) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "python3 -m json.tool '%s' > /dev/null", path);
  return system(cmd) == 0;
}

static void test_report_formats(void) {
  const char *root = sr_new_host();
  char nvml[PATH_MAX], cuda[PATH_MAX];
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_pci_gpu(root, "0000:0b:00.0", 0x20b2, "nvidia");
  sr_driver(root, "535.54.03", 0, 2, 1);
  sr_install_nvml(root, "535.54.03", nvml, sizeof nvml);
  sr_install_cuda(root, "/usr/lib/x86_64-linux-gnu", "535.54.03", cuda, sizeof cuda);
  /* A name with quotes, a backslash and a control character must come out escaped. */
  sr_scenario(root, "%sdev0.name=Weird \"GPU\" \\ name\x01\ndev0.mem_used=75161927680\ndev0.procs=77:42949672960\n", SR_TWO_A100);
  char *env[] = {(char *)"CUDA_VISIBLE_DEVICES=1,x", NULL};
  il_doctor_options o;
  il_doctor_options_default(&o, env);
  o.sysroot = root;
  o.nvml_lib = nvml;
  o.cuda_lib = cuda;
  o.build_have_cuda = false;
  o.bandwidth_ms = 20; /* exercises the measurement */
  il_doctor *dr;
  IL_CHECK_OK(il_doctor_run(&o, &dr));
  if (!dr) return;
  IL_CHECK(dr->host.read_gbps > 0.01);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/report.json", root);
  FILE *f = fopen(path, "w");
  IL_CHECK_OK(il_report_json(dr, f));
  fclose(f);
  if (system("python3 -c 'import json' 2>/dev/null") == 0) {
    IL_CHECK(json_valid(path));
    char cmd[PATH_MAX * 2];
    /* Stable keys and values a consumer relies on. */
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json,sys; d=json.load(open('%s')); "
             "assert d['schema_version']==1, d['schema_version']; "
             "assert d['exit_code']==1, d['exit_code']; "
             "assert len(d['devices'])==2; assert d['devices'][0]['name']=='Weird \\\"GPU\\\" \\\\\\\\ name\\x01', repr(d['devices'][0]['name']); "
             "assert d['devices'][0]['processes'][0]['pid']==77; "
             "assert d['visibility']['cuda_devices']==[1]; assert d['visibility']['cuda_invalid_entry']=='x'; "
             "c={x['id']:x for x in d['checks']}; assert c['gpu.memory']['verdict']=='WARN'; assert c['gpu.memory']['scenario']==25; "
             "assert c['driver.nvml']['evidence']['driver_version']=='535.54.03'; assert c['driver.nvml']['fix'] is None; "
             "assert d['fixes'][0]['step']==1 and d['fixes'][0]['commands']; "
             "assert d['summary']['not_applicable']==sum(1 for x in d['checks'] if not x['applicable']); assert d['build']['cpu_only'] is True; assert d['host']['read_bandwidth_gbps']>0\"",
             path);
    IL_CHECK_INT(system(cmd), 0);
  } else {
    printf("note: python3 not available, JSON structure not validated\n");
  }
  /* Text: one line per check with the verdict first, then "What to fix" with numbered steps. */
  char *buf = NULL;
  size_t len = 0;
  f = open_memstream(&buf, &len);
  IL_CHECK_OK(il_report_text(dr, f));
  fclose(f);
  IL_CHECK(buf && strncmp(buf, "OK    driver.nvml: ", 19) == 0);
  IL_CHECK(buf && strstr(buf, "\nWARN  gpu.memory: GPU 0:"));
  IL_CHECK(buf && strstr(buf, "\nWhat to fix\n  1. [WARN "));
  IL_CHECK(buf && strstr(buf, "-> exit code 1"));
  /* One line per applicable check plus one shared "n/a" line for the others. */
  int lines = 0, n_na = 0;
  for (const char *p = buf; p && *p && strncmp(p, "\nDevices", 8); p++) lines += *p == '\n';
  for (int i = 0; i < dr->checks.n; i++) n_na += dr->checks.items[i].na;
  IL_CHECK(n_na > 0);
  IL_CHECK_INT(lines, dr->checks.n - n_na + 1);
  IL_CHECK(buf && strstr(buf, "checks not applicable here: "));
  free(buf);
  /* --all: every check on its own line, the inapplicable ones marked n/a. */
  buf = NULL;
  f = open_memstream(&buf, &len);
  IL_CHECK_OK(il_report_text_ex(dr, f, true));
  fclose(f);
  lines = 0;
  for (const char *p = buf; p && *p && strncmp(p, "\nDevices", 8); p++) lines += *p == '\n';
  IL_CHECK_INT(lines, dr->checks.n);
  IL_CHECK(buf && strstr(buf, "\nn/a   gpu.fabric: no NVSwitch"));
  free(buf);
  il_doctor_free(dr);
  sr_destroy(root);
}

static void test_sampler(void) {
  const char *root = sr_new_host();
  char nvml[PATH_MAX];
  sr_install_nvml(root, "535.54.03", nvml, sizeof nvml);
  sr_scenario(root, "%s", SR_TWO_A100);
  il_gpu_sampler *s = NULL;
  IL_CHECK_OK(il_gpu_sampler_start(nvml, 10, &s));
  if (!s) return;
  il_sample_set set;
  il_gpu_sampler_read(s, &set);
  IL_CHECK_INT(set.seq, 1);
  IL_CHECK_INT(set.n_devices, 2);
  IL_CHECK_INT(set.dev[0].util_gpu, 3);
  IL_CHECK_INT(set.dev[1].power_mw, 58000);
  IL_CHECK_INT(set.dev[0].mem_total, 85899345920ll);
  IL_CHECK_STR(il_gpu_sampler_device_name(s, 1), "NVIDIA A100-SXM4-80GB");
  uint64_t seen = set.seq;
  for (int i = 0; i < 3; i++) {
    IL_CHECK_OK(il_gpu_sampler_next(s, seen, 2000, &set));
    IL_CHECK(set.seq > seen);
    seen = set.seq;
  }
  il_gpu_sampler_stats st;
  il_gpu_sampler_stats_get(s, &st);
  IL_CHECK(st.samples >= 4);
  IL_CHECK_NEAR(st.util_gpu_mean[0], 3.0, 1e-9);
  IL_CHECK_INT(st.util_gpu_peak[0], 3);
  IL_CHECK_INT(st.power_mw_peak[0], 61000);
  il_gpu_sampler_stop(s);
  /* No library: a clean error, nothing leaked. */
  s = NULL;
  IL_CHECK_INT(il_gpu_sampler_start("/nonexistent/libnvidia-ml.so.1", 100, &s), IL_ERR_NOT_FOUND);
  IL_CHECK(s == NULL);
  /* NVML present but failing. */
  sr_scenario(root, "nvml.init=9\n");
  IL_CHECK_INT(il_gpu_sampler_start(nvml, 100, &s), IL_ERR_DEVICE);
  IL_CHECK_CONTAINS(il_error_detail(), "NVML_ERROR_DRIVER_NOT_LOADED");
  sr_destroy(root);
}

/* Allocation failures anywhere in a doctor run give IL_ERR_OOM or a (possibly thinner) report,
 * never a crash or a leak (the sanitizer build checks the latter). */
static void test_oom_injection(void) {
  const char *root = sr_new_host();
  char nvml[PATH_MAX];
  sr_pci_gpu(root, "0000:07:00.0", 0x20b2, "nvidia");
  sr_driver(root, "535.54.03", 0, 2, 1);
  sr_install_nvml(root, "535.54.03", nvml, sizeof nvml);
  sr_scenario(root, "%s", SR_TWO_A100);
  int ok = 0, oom = 0;
  for (long n = 1; n <= 40; n++) {
    il_doctor_options o;
    il_doctor_options_default(&o, NULL);
    o.sysroot = root;
    o.nvml_lib = nvml;
    il_doctor *dr = NULL;
    il_mem_fail_after(n);
    il_status st = il_doctor_run(&o, &dr);
    il_mem_fail_after(0);
    if (st == IL_OK) {
      ok++;
      IL_CHECK(dr != NULL && dr->checks.n > 0);
      il_doctor_free(dr);
    } else {
      oom++;
      IL_CHECK_INT(st, IL_ERR_OOM);
      IL_CHECK(dr == NULL);
    }
  }
  IL_CHECK(oom > 0);
  IL_CHECK(ok > 0);
  sr_destroy(root);
}

int main(void) {
  test_explain();
  test_visible();
  if (!sr_fake_lib("nvml") || !sr_fake_lib("cuda")) {
    printf("SKIP (partial): fake NVML/CUDA libraries not built; report and sampler tests skipped\n");
    return il_test_finish();
  }
  test_report_formats();
  test_sampler();
  test_oom_injection();
  return il_test_finish();
}
