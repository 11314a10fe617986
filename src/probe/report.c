/* probe/report: human text and JSON for a doctor report. See report.h. */
#include "probe/report.h"

#include <string.h>

#include "il_build_info.h"
#include "memory/mem.h"
#include "probe/classes.h"

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), 0 when the bytes there are not one. */
static size_t il__utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return (p[1] & 0xc0) == 0x80 ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 && (p[3] & 0xc0) == 0x80 ? 4 : 0;
  }
  return 0;
}

void il_report_json_string(FILE *out, const char *s) {
  if (!s) {
    fputs("null", out);
    return;
  }
  /* Text in a report comes from files, environment variables and library answers, and is cut
   * to fixed buffers: any byte that does not start a well-formed UTF-8 sequence (including a
   * sequence cut by truncation) is written as U+FFFD, so the document is always valid UTF-8. */
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t l = il__utf8_len(p);
    if (l == 0) {
      fputs("\\ufffd", out);
      p++;
      continue;
    }
    if (l > 1) {
      fwrite(p, 1, l, out);
      p += l;
      continue;
    }
    switch (*p) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\r': fputs("\\r", out); break;
      case '\t': fputs("\\t", out); break;
      default:
        if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\u%04x", *p);
        else fputc(*p, out);
    }
    p++;
  }
  fputc('"', out);
}

/* ---- text ----------------------------------------------------------------------------- */

/* "%d<unit>" or "unknown" for a value NVML did not report (-1). */
static const char *il__num(int v, const char *unit, char *buf, size_t n) {
  if (v < 0) snprintf(buf, n, "unknown");
  else snprintf(buf, n, "%d%s", v, unit);
  return buf;
}

static void il__text_devices(const il_doctor *dr, FILE *out) {
  const il_nvml_snapshot_t *s = &dr->nvml;
  if (il_nvml_usable_count(&dr->nvml) == 0) return;
  fprintf(out, "\nDevices (driver %s)\n", s->driver_version[0] ? s->driver_version : "unknown");
  for (int i = 0; i < s->n_devices; i++) {
    const il_nvml_device *d = &s->devices[i];
    if (d->handle_rc) {
      fprintf(out, "  %d  (no handle: %s)\n", i, il_nvml_code_name(d->handle_rc));
      continue;
    }
    char used[32] = "unknown", total[32] = "unknown", freeb[32] = "unknown", cc[16] = "sm_unknown";
    if (d->mem_used >= 0) il_mem_format_bytes((size_t)d->mem_used, used, sizeof used);
    if (d->mem_total >= 0) il_mem_format_bytes((size_t)d->mem_total, total, sizeof total);
    if (d->mem_free >= 0) il_mem_format_bytes((size_t)d->mem_free, freeb, sizeof freeb);
    if (d->cc_major >= 0) snprintf(cc, sizeof cc, "sm_%d%d", d->cc_major, d->cc_minor);
    fprintf(out, "  %d  %s  %s  %s  %s\n", i, d->name[0] ? d->name : "unknown", d->uuid[0] ? d->uuid : "unknown",
            d->pci_bus_id[0] ? d->pci_bus_id : "unknown", cc);
    char ug[16], um[16], t[16], p[24], pl[24], sm[16], mm[16], ecc[24];
    if (d->power_mw >= 0) snprintf(p, sizeof p, "%.0f", d->power_mw / 1000.0);
    else snprintf(p, sizeof p, "unknown");
    if (d->power_limit_mw >= 0) snprintf(pl, sizeof pl, "%.0f W", d->power_limit_mw / 1000.0);
    else snprintf(pl, sizeof pl, "unknown W");
    if (d->ecc_uncorrected_volatile >= 0) snprintf(ecc, sizeof ecc, "%lld", d->ecc_uncorrected_volatile);
    else snprintf(ecc, sizeof ecc, "unknown");
    fprintf(out, "     memory %s used / %s total (%s free); util gpu %s mem %s; %s; %s / %s; sm %s, mem %s\n", used, total, freeb,
            il__num(d->util_gpu, "%", ug, sizeof ug), il__num(d->util_mem, "%", um, sizeof um), il__num(d->temp_c, " C", t, sizeof t), p, pl,
            il__num(d->clock_sm_mhz, " MHz", sm, sizeof sm), il__num(d->clock_mem_mhz, " MHz", mm, sizeof mm));
    fprintf(out, "     MIG %s; ECC uncorrected (volatile) %s; processes %d", d->mig_current == 1 ? "enabled" : d->mig_current == 0 ? "disabled" : "n/a",
            ecc, d->n_procs_total);
    for (int k = 0; k < d->n_procs; k++) {
      char b[32];
      il_mem_format_bytes((size_t)d->procs[k].used_gpu_memory, b, sizeof b);
      fprintf(out, "%s pid %u (%s)", k ? "," : ":", d->procs[k].pid, b);
    }
    if (d->n_procs_total > d->n_procs) fprintf(out, " and %d more", d->n_procs_total - d->n_procs);
    fputc('\n', out);
  }
}

il_status il_report_text(const il_doctor *dr, FILE *out) { return il_report_text_ex(dr, out, false); }

il_status il_report_text_ex(const il_doctor *dr, FILE *out, bool show_all) {
  int counts[3] = {0, 0, 0}, n_na = 0;
  for (int i = 0; i < dr->checks.n; i++) {
    const il_check *c = &dr->checks.items[i];
    counts[c->verdict]++;
    if (c->na && c->verdict == IL_VERDICT_OK) {
      n_na++;
      if (!show_all) continue;
      fprintf(out, "n/a   %s: %s\n", c->id, c->summary);
      continue;
    }
    fprintf(out, "%-4s  %s: %s\n", il_check_verdict_name(c->verdict), c->id, c->summary);
  }
  if (n_na && !show_all) {
    /* "Not applicable" checks on one line: nothing to check here (no GPU, no docker, ...). */
    fprintf(out, "n/a   %d check%s not applicable here:", n_na, n_na == 1 ? "" : "s");
    for (int i = 0; i < dr->checks.n; i++)
      if (dr->checks.items[i].na && dr->checks.items[i].verdict == IL_VERDICT_OK) fprintf(out, " %s", dr->checks.items[i].id);
    fputs("   (--all shows them)\n", out);
  }
  il__text_devices(dr, out);
  if (counts[1] + counts[2]) {
    fputs("\nWhat to fix\n", out);
    int step = 1;
    for (int pass = 2; pass >= 1; pass--)
      for (int i = 0; i < dr->checks.n; i++) {
        const il_check *c = &dr->checks.items[i];
        if ((int)c->verdict != pass || !c->fix[0]) continue;
        fprintf(out, "  %d. [%s %s]", step++, il_check_verdict_name(c->verdict), c->id);
        char doc[96];
        if (c->scenario && il_class_doc(c->scenario, doc, sizeof doc)[0]) fprintf(out, " (%s)", doc);
        /* Each fix line on its own indented line. */
        const char *p = c->fix;
        while (*p) {
          size_t l = strcspn(p, "\n");
          fprintf(out, "\n     %.*s", (int)l, p);
          p += l;
          if (*p) p++;
        }
        fputc('\n', out);
      }
  }
  /* Checks that do not apply here are counted on their own, not as OK. */
  fprintf(out, "\n%d OK, %d not applicable, %d WARN, %d FAIL -> exit code %d (0 all OK, 1 warnings, 2 failures)\n", counts[0] - n_na, n_na,
          counts[1], counts[2], il_doctor_exit_code(dr));
  return ferror(out) ? il_error(IL_ERR_IO, "doctor: writing the report failed") : IL_OK;
}

/* ---- JSON ----------------------------------------------------------------------------- */

static void il__jkey(FILE *out, const char *k) {
  il_report_json_string(out, k);
  fputc(':', out);
}

static void il__jstr(FILE *out, const char *k, const char *v, bool comma) {
  il__jkey(out, k);
  il_report_json_string(out, v);
  if (comma) fputc(',', out);
}

/* Integer, null when negative (unknown). */
static void il__jint(FILE *out, const char *k, long long v, bool comma) {
  il__jkey(out, k);
  if (v < 0) fputs("null", out);
  else fprintf(out, "%lld", v);
  if (comma) fputc(',', out);
}

static void il__jbool(FILE *out, const char *k, bool v, bool comma) {
  il__jkey(out, k);
  fputs(v ? "true" : "false", out);
  if (comma) fputc(',', out);
}

static void il__json_device(FILE *out, const il_nvml_device *d) {
  fputc('{', out);
  il__jint(out, "index", d->index, true);
  il__jstr(out, "handle_status", il_nvml_code_name(d->handle_rc), true);
  il__jstr(out, "name", d->name, true);
  il__jstr(out, "uuid", d->uuid, true);
  il__jstr(out, "pci_bus_id", d->pci_bus_id, true);
  il__jint(out, "memory_total_bytes", d->mem_total, true);
  il__jint(out, "memory_used_bytes", d->mem_used, true);
  il__jint(out, "memory_free_bytes", d->mem_free, true);
  il__jint(out, "utilization_gpu_pct", d->util_gpu, true);
  il__jint(out, "utilization_memory_pct", d->util_mem, true);
  il__jint(out, "temperature_c", d->temp_c, true);
  il__jint(out, "power_mw", d->power_mw, true);
  il__jint(out, "power_limit_mw", d->power_limit_mw, true);
  il__jint(out, "clock_sm_mhz", d->clock_sm_mhz, true);
  il__jint(out, "clock_mem_mhz", d->clock_mem_mhz, true);
  il__jint(out, "clock_graphics_mhz", d->clock_gfx_mhz, true);
  il__jkey(out, "compute_capability");
  if (d->cc_major >= 0) fprintf(out, "\"%d.%d\",", d->cc_major, d->cc_minor);
  else fputs("null,", out);
  il__jstr(out, "mig_mode", d->mig_current == 1 ? "enabled" : d->mig_current == 0 ? "disabled" : "unsupported", true);
  il__jint(out, "mig_devices", d->mig_devices, true);
  il__jint(out, "ecc_uncorrected_volatile", d->ecc_uncorrected_volatile, true);
  il__jint(out, "ecc_uncorrected_aggregate", d->ecc_uncorrected_aggregate, true);
  il__jstr(out, "compute_mode", d->compute_mode == 0 ? "default" : d->compute_mode == 2 ? "prohibited" : d->compute_mode == 3 ? "exclusive_process"
                                : d->compute_mode < 0 ? "unknown" : "other", true);
  il__jint(out, "processes_total", d->n_procs_total, true);
  il__jkey(out, "processes");
  fputc('[', out);
  for (int k = 0; k < d->n_procs; k++) {
    fprintf(out, "%s{\"pid\":%u,\"used_bytes\":%llu}", k ? "," : "", d->procs[k].pid, d->procs[k].used_gpu_memory);
  }
  fputs("]}", out);
}

il_status il_report_json(const il_doctor *dr, FILE *out) {
  int counts[3] = {0, 0, 0}, n_na = 0;
  for (int i = 0; i < dr->checks.n; i++) {
    counts[dr->checks.items[i].verdict]++;
    n_na += dr->checks.items[i].na && dr->checks.items[i].verdict == IL_VERDICT_OK;
  }
  char buf[64];
  fputc('{', out);
  il__jint(out, "schema_version", IL_REPORT_SCHEMA_VERSION, true);
  il__jstr(out, "tool", "inferlab doctor", true);
  il__jstr(out, "inferlab_version", IL_VERSION_STRING, true);
  il__jstr(out, "sysroot", dr->fs.root[0] ? dr->fs.root : "/", true);
  il__jint(out, "exit_code", il_doctor_exit_code(dr), true);
  /* ok counts the checks that apply and passed; not_applicable the others (ok + not_applicable +
   * warn + fail = every check). */
  fprintf(out, "\"summary\":{\"ok\":%d,\"warn\":%d,\"fail\":%d,\"not_applicable\":%d},", counts[0] - n_na, counts[1], counts[2], n_na);

  fputs("\"build\":{", out);
  bool cpu_only = !dr->opt.build_have_cuda || !dr->opt.build_cuda_version || !dr->opt.build_cuda_version[0];
  il__jbool(out, "cpu_only", cpu_only, true);
  il__jstr(out, "cuda_version", dr->opt.build_cuda_version ? dr->opt.build_cuda_version : "", true);
  il__jstr(out, "cuda_archs", dr->opt.build_cuda_archs ? dr->opt.build_cuda_archs : "", false);
  fputs("},", out);

  fputs("\"driver\":{", out);
  il__jbool(out, "nvml_loaded", dr->nvml.loaded, true);
  il__jstr(out, "nvml_library", dr->nvml_loaded[0] ? dr->nvml_loaded : dr->nvml_path, true);
  il__jstr(out, "nvml_load_error", dr->nvml_error[0] ? dr->nvml_error : NULL, true);
  il__jstr(out, "nvml_init", dr->nvml.loaded ? il_nvml_code_name(dr->nvml.init_rc) : NULL, true);
  il__jstr(out, "driver_version", dr->nvml.driver_version[0] ? dr->nvml.driver_version : NULL, true);
  il__jstr(out, "cuda_driver_version", dr->nvml.cuda_driver_version > 0 ? il_cudadrv_version_text(dr->nvml.cuda_driver_version, buf, sizeof buf) : NULL, true);
  il__jstr(out, "kernel_module_version", dr->kmod_version[0] ? dr->kmod_version : NULL, true);
  il__jstr(out, "kernel_module_flavor", dr->kmod_loaded ? (dr->kmod_open ? "open" : "proprietary") : NULL, false);
  fputs("},", out);

  fputs("\"cuda\":{", out);
  il__jbool(out, "loaded", dr->cuda.loaded, true);
  il__jstr(out, "library", dr->cuda_loaded[0] ? dr->cuda_loaded : dr->cuda_path, true);
  il__jstr(out, "load_error", dr->cuda_error[0] ? dr->cuda_error : NULL, true);
  il__jstr(out, "init", dr->cuda.loaded ? dr->cuda.init_name : NULL, true);
  il__jint(out, "init_code", dr->cuda.loaded ? dr->cuda.init_rc : -1, true);
  il__jstr(out, "driver_api_version", dr->cuda.driver_version > 0 ? il_cudadrv_version_text(dr->cuda.driver_version, buf, sizeof buf) : NULL, true);
  il__jint(out, "device_count", dr->cuda.loaded ? dr->cuda.n_devices : -1, false);
  fputs("},", out);

  fputs("\"devices\":[", out);
  for (int i = 0; i < dr->nvml.n_devices; i++) {
    if (i) fputc(',', out);
    il__json_device(out, &dr->nvml.devices[i]);
  }
  fputs("],", out);

  fputs("\"pci\":[", out);
  for (int i = 0; i < dr->n_pci; i++) {
    const il_pci_gpu *g = &dr->pci[i];
    fprintf(out, "%s{", i ? "," : "");
    il__jstr(out, "bdf", g->bdf, true);
    snprintf(buf, sizeof buf, "10de:%04x", g->device_id);
    il__jstr(out, "id", buf, true);
    il__jstr(out, "driver", g->driver[0] ? g->driver : NULL, true);
    il__jstr(out, "iommu_group", g->iommu_group[0] ? g->iommu_group : NULL, false);
    fputc('}', out);
  }
  fputs("],", out);

  fputs("\"visibility\":{", out);
  il__jstr(out, "cuda_visible_devices", il_sysfs_getenv(&dr->fs, "CUDA_VISIBLE_DEVICES"), true);
  il__jkey(out, "cuda_devices");
  fputc('[', out);
  for (int i = 0; i < dr->cudavis.n_visible; i++) fprintf(out, "%s%d", i ? "," : "", dr->cudavis.phys[i]);
  fputs("],", out);
  il__jstr(out, "cuda_invalid_entry", dr->cudavis.invalid_at >= 0 ? dr->cudavis.invalid_entry : NULL, true);
  il__jstr(out, "cuda_device_order", il_sysfs_getenv(&dr->fs, "CUDA_DEVICE_ORDER"), true);
  il__jstr(out, "nvidia_visible_devices", il_sysfs_getenv(&dr->fs, "NVIDIA_VISIBLE_DEVICES"), true);
  il__jstr(out, "nvidia_mode", il_visible_nvidia_mode_name(dr->nvvis.mode), false);
  fputs("},", out);

  fputs("\"container\":{", out);
  il__jbool(out, "inside", dr->in_container, true);
  il__jstr(out, "engine", dr->in_container ? dr->container_engine : NULL, false);
  fputs("},", out);

  const il_host_info *h = &dr->host;
  fputs("\"host\":{", out);
  il__jstr(out, "cpu_model", h->cpu_model, true);
  il__jstr(out, "simd", h->simd, true);
  il__jstr(out, "cpu_backend", h->cpu_backend, true);
  il__jint(out, "logical_cpus", h->logical_cpus, true);
  il__jint(out, "ram_total_bytes", h->ram_total, true);
  il__jint(out, "ram_available_bytes", h->ram_available, true);
  il__jkey(out, "read_bandwidth_gbps");
  if (h->read_gbps > 0) fprintf(out, "%.3f,", h->read_gbps);
  else fputs("null,", out);
  il__jstr(out, "transparent_hugepages", h->thp, true);
  il__jint(out, "hugepages_total", h->hugepages_total, true);
  il__jstr(out, "kernel", h->kernel, true);
  il__jbool(out, "hypervisor", h->hypervisor_flag, true);
  il__jbool(out, "wsl", dr->wsl, false);
  fputs("},", out);

  fputs("\"checks\":[", out);
  for (int i = 0; i < dr->checks.n; i++) {
    const il_check *c = &dr->checks.items[i];
    fprintf(out, "%s{", i ? "," : "");
    il__jstr(out, "id", c->id, true);
    il__jstr(out, "verdict", il_check_verdict_name(c->verdict), true);
    il__jbool(out, "applicable", !c->na, true);
    il__jint(out, "scenario", c->scenario ? c->scenario : -1, true);
    {
      char doc[96];
      il__jstr(out, "class", il_class_slug(c->scenario), true);
      il__jstr(out, "doc", c->scenario && il_class_doc(c->scenario, doc, sizeof doc)[0] ? doc : NULL, true);
    }
    il__jstr(out, "summary", c->summary, true);
    fputs("\"evidence\":{", out);
    for (int k = 0; k < c->n_evidence; k++) {
      if (k) fputc(',', out);
      il__jstr(out, c->evidence[k].key, c->evidence[k].value, false);
    }
    fputs("},", out);
    il__jstr(out, "fix", c->fix[0] ? c->fix : NULL, false);
    fputc('}', out);
  }
  fputs("],", out);

  fputs("\"fixes\":[", out);
  int step = 0;
  for (int pass = 2; pass >= 1; pass--)
    for (int i = 0; i < dr->checks.n; i++) {
      const il_check *c = &dr->checks.items[i];
      if ((int)c->verdict != pass || !c->fix[0]) continue;
      fprintf(out, "%s{", step++ ? "," : "");
      il__jint(out, "step", step, true);
      il__jstr(out, "check", c->id, true);
      il__jstr(out, "verdict", il_check_verdict_name(c->verdict), true);
      fputs("\"commands\":[", out);
      const char *p = c->fix;
      bool first = true;
      while (*p) {
        size_t l = strcspn(p, "\n");
        char line[sizeof c->fix];
        memcpy(line, p, l);
        line[l] = 0;
        if (!first) fputc(',', out);
        il_report_json_string(out, line);
        first = false;
        p += l;
        if (*p) p++;
      }
      fputs("]}", out);
    }
  fputs("]}\n", out);
  return ferror(out) ? il_error(IL_ERR_IO, "doctor: writing the JSON report failed") : IL_OK;
}
