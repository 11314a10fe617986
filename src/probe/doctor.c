/* probe/doctor: the run: facts first, then the check groups in report order. See doctor.h.
 * Not for: any verdict of its own (the groups decide; this file only orders them).
 */
#include "probe/doctor.h"

#include <string.h>

#include "il_build_info.h"
#include "memory/mem.h"
#include "probe/cgroup.h"
#include "probe/container.h"
#include "probe/driver.h"
#include "probe/health.h"
#include "probe/k8s.h"
#include "probe/klog.h"
#include "probe/layout.h"
#include "probe/loader.h"
#include "sys/membw.h"

/* ---- the run ---------------------------------------------------------------------------- */

void il_doctor_options_default(il_doctor_options *o, char *const *env) {
  memset(o, 0, sizeof *o);
  o->sysroot = "/";
  o->env = env;
  o->build_have_cuda = IL_HAVE_CUDA;
  o->build_cuda_version = IL_BUILD_CUDA_VERSION;
  o->build_cuda_archs = IL_BUILD_CUDA_ARCHS;
}

static const char *il__lib_choice(const il_doctor *dr, const char *given, const char *envname, const char *deflt) {
  if (given && *given) return given;
  const char *e = il_sysfs_getenv(&dr->fs, envname);
  if (e && *e) return e;
  return il_sysfs_is_real(&dr->fs) ? deflt : NULL;
}

il_status il_doctor_run(const il_doctor_options *opt, il_doctor **out) {
  *out = NULL;
  il_doctor *dr = il_mem_calloc(IL_MEM_OTHER, sizeof *dr, "doctor report");
  if (!dr) return IL_ERR_OOM;
  dr->opt = *opt;
  il_status st = il_sysfs_init(&dr->fs, opt->sysroot, opt->env);
  if (st != IL_OK) {
    il_mem_free(dr);
    return st;
  }
  if (opt->identity_set) {
    dr->fs.uid = opt->uid;
    dr->fs.gid = opt->gid;
    dr->fs.n_groups = opt->n_groups < IL_SYSFS_MAX_GROUPS ? opt->n_groups : IL_SYSFS_MAX_GROUPS;
    for (int i = 0; i < dr->fs.n_groups; i++) dr->fs.groups[i] = opt->groups[i];
  }
  il_host_probe(&dr->fs, &dr->host);
  if (opt->bandwidth_ms > 0) il_cpu_read_bandwidth(0, IL_MEMBW_DEFAULT_BYTES, opt->bandwidth_ms, &dr->host.read_gbps);
  il__distro_facts(dr);
  il__platform_facts(dr);
  il__layout_facts(dr);
  il__container_facts(dr);
  il__klog_gather(dr);

  il_nvml nv;
  const char *nvpath = il__lib_choice(dr, opt->nvml_lib, "INFERLAB_NVML_LIB", "libnvidia-ml.so.1");
  if (nvpath) {
    il_sysfs_copy(dr->nvml_path, sizeof dr->nvml_path, nvpath);
    if (il_nvml_open(&nv, nvpath) == IL_OK) {
      il_sysfs_copy(dr->nvml_loaded, sizeof dr->nvml_loaded, nv.loaded);
      il_nvml_snapshot(&nv, &dr->nvml);
    } else {
      il_sysfs_copy(dr->nvml_error, sizeof dr->nvml_error, nv.error);
    }
    il_nvml_close(&nv);
  } else {
    il_sysfs_copy(dr->nvml_path, sizeof dr->nvml_path, "libnvidia-ml.so.1");
    il_sysfs_copy(dr->nvml_error, sizeof dr->nvml_error, "no NVML library given for this sysroot (--nvml-lib)");
  }
  il_cudadrv cu;
  const char *cupath = il__lib_choice(dr, opt->cuda_lib, "INFERLAB_CUDA_LIB", "libcuda.so.1");
  if (cupath) {
    il_sysfs_copy(dr->cuda_path, sizeof dr->cuda_path, cupath);
    if (il_cudadrv_open(&cu, cupath) == IL_OK) {
      il_sysfs_copy(dr->cuda_loaded, sizeof dr->cuda_loaded, cu.loaded);
      il_cudadrv_snapshot(&cu, &dr->cuda);
    } else {
      il_sysfs_copy(dr->cuda_error, sizeof dr->cuda_error, cu.error);
    }
    il_cudadrv_close(&cu);
  } else {
    il_sysfs_copy(dr->cuda_path, sizeof dr->cuda_path, "libcuda.so.1");
    il_sysfs_copy(dr->cuda_error, sizeof dr->cuda_error, "no CUDA driver library given for this sysroot (--cuda-lib)");
  }
  if (dr->nvml.loaded || dr->cuda.loaded || dr->tegra) dr->gpu_expected = true;

  /* Visibility first: cuda.init's fix refers to its result. Reports list checks in the
   * order of the sections below, so visibility is computed here and added later. */
  il__driver_check_nvml(dr);
  il__driver_check_version_match(dr);
  int vis_at = dr->checks.n;
  il__driver_check_visibility(dr);
  il_check vis[2];
  int nvis = dr->checks.n - vis_at;
  if (nvis > 2) nvis = 2;
  memcpy(vis, &dr->checks.items[vis_at], sizeof vis[0] * (size_t)nvis);
  dr->checks.n = vis_at;
  il__driver_check_cuda_init(dr);
  il__driver_check_cuda_compat(dr);
  il__loader_check(dr);
  il__loader_check_wsl(dr);
  il__driver_check_runtime_build(dr);
  il__driver_check_runtime_arch(dr);
  il__driver_check_runtime_features(dr);
  il__driver_check_nvcc(dr);
  il__platform_checks_kmod(dr);
  il__klog_check_driver(dr);
  il__klog_check_dkms(dr);
  for (int i = 0; i < nvis; i++) *il__check_add(&dr->checks, vis[i].id, vis[i].verdict, vis[i].scenario, "%s", "") = vis[i];
  il__container_checks(dr);
  il__k8s_check_mig(dr);
  il__platform_checks_virt(dr);
  il__driver_check_gpus(dr);
  il__health_checks(dr);
  il__platform_checks_host(dr);
  il__klog_link_causes(dr);
  il__cgroup_container_advice(dr);
  if (dr->checks.oom) {
    il_doctor_free(dr);
    return il_error(IL_ERR_OOM, "doctor: out of memory while building the report");
  }
  *out = dr;
  return IL_OK;
}

void il_doctor_free(il_doctor *dr) {
  if (!dr) return;
  il_check_list_free(&dr->checks);
  il_mem_free(dr->klog);
  il_mem_free(dr);
}

const il_check *il_doctor_find(const il_doctor *dr, const char *id) { return il_check_find(&dr->checks, id); }

int il_doctor_exit_code(const il_doctor *dr) { return il_check_worst(&dr->checks); }
