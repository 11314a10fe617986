/* probe/layout: the layouts people run, each judged by its own rules: containerd's config as
 * plain containerd, K3s or RKE2 write it (their generated config.toml and the templates that
 * replace it), containerd 2's version 3 format (single-quoted keys, the io.containerd.cri.v1.runtime
 * plugin, imports of drop-in files), the GPU operator's driver container beside a host driver, and
 * Jetson/Tegra boards (integrated GPU, no NVML in the usual sense, CSV-mode container support).
 * See layout.c. Not for: Docker's daemon.json, CRI-O or CDI (probe/container).
 */
#ifndef IL_PROBE_LAYOUT_H
#define IL_PROBE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct il_doctor il_doctor;

/* Value of `key = "v"` or `key = 'v'` in a TOML text (first occurrence, any table, comments
 * skipped). Returns false when absent. */
bool il__toml_value(const char *text, const char *key, char *buf, size_t n);
/* Sets dr->tegra and dr->l4t_release from /etc/nv_tegra_release and the device tree. */
void il__layout_facts(il_doctor *dr);
/* container.containerd (plain, K3s, RKE2; config version 1-3). */
void il__layout_check_containerd(il_doctor *dr);
/* container.operator: the GPU operator's driver container and a host driver. */
void il__layout_check_operator(il_doctor *dr);
/* jetson.platform, on Jetson/Tegra only. */
void il__layout_check_jetson(il_doctor *dr);

#endif
