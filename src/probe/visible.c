/* probe/visible: NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES semantics. See visible.h. */
#include "probe/visible.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "probe/sysfs.h"

/* Splits a comma list into trimmed, non-empty entries. */
static int il__split(const char *value, char out[][96], int max) {
  int n = 0;
  const char *p = value;
  while (*p && n < max) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    while (l && isspace((unsigned char)*p)) p++, l--;
    while (l && isspace((unsigned char)p[l - 1])) l--;
    if (l) {
      if (l > 95) l = 95;
      memcpy(out[n], p, l);
      out[n][l] = 0;
      n++;
    }
    if (!e) break;
    p = e + 1;
  }
  return n;
}

static bool il__is_uint(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return false;
  return true;
}

const char *il_visible_nvidia_mode_name(il_nvvis_mode m) {
  switch (m) {
    case IL_NVVIS_UNSET_VOID: return "unset";
    case IL_NVVIS_UNSET_LEGACY: return "unset (legacy image: all)";
    case IL_NVVIS_VOID: return "void";
    case IL_NVVIS_NONE: return "none";
    case IL_NVVIS_ALL: return "all";
    case IL_NVVIS_LIST: return "list";
  }
  return "?";
}

void il_visible_nvidia(const char *value, bool legacy_image, il_nvvis *out) {
  memset(out, 0, sizeof *out);
  if (!value) {
    out->mode = legacy_image ? IL_NVVIS_UNSET_LEGACY : IL_NVVIS_UNSET_VOID;
    return;
  }
  out->n_entries = il__split(value, out->entries, IL_VISIBLE_MAX);
  if (out->n_entries == 0) {
    out->mode = IL_NVVIS_UNSET_VOID;
    return;
  }
  bool v = false, none = false, all = false;
  for (int i = 0; i < out->n_entries; i++) {
    const char *e = out->entries[i];
    const char *k = "unknown";
    if (!strcasecmp(e, "void")) v = true, k = "special";
    else if (!strcasecmp(e, "none")) none = true, k = "special";
    else if (!strcasecmp(e, "all")) all = true, k = "special";
    else if (!strncasecmp(e, "GPU-", 4)) k = "uuid";
    else if (!strncasecmp(e, "MIG-", 4)) k = "mig";
    else if (il__is_uint(e)) k = "index";
    else if (strchr(e, ':') && strchr(e, '.')) k = "pci";
    else if (strchr(e, ':')) {
      char a[96];
      il_sysfs_copy(a, sizeof a, e);
      char *c = strchr(a, ':');
      *c = 0;
      if (il__is_uint(a) && il__is_uint(c + 1)) k = "gpu:mig";
    }
    il_sysfs_copy(out->kind[i], sizeof out->kind[i], k);
  }
  out->mode = v ? IL_NVVIS_VOID : none ? IL_NVVIS_NONE : all ? IL_NVVIS_ALL : IL_NVVIS_LIST;
}

void il_visible_cuda(const char *value, const il_visible_gpu *gpus, int n, il_cudavis *out) {
  memset(out, 0, sizeof *out);
  out->invalid_at = -1;
  if (n > IL_VISIBLE_MAX) n = IL_VISIBLE_MAX;
  if (!value) {
    for (int i = 0; i < n; i++) out->phys[i] = i;
    out->n_visible = n;
    return;
  }
  out->set = true;
  char entries[IL_VISIBLE_MAX][96];
  /* Unlike the toolkit, CUDA does not skip empty entries: "0,,1" stops at the empty one. We
   * split on commas keeping empties, then trim. */
  int ne = 0;
  const char *p = value;
  bool any = false;
  for (const char *q = value; *q; q++)
    if (!isspace((unsigned char)*q)) any = true;
  if (any) {
    while (ne < IL_VISIBLE_MAX) {
      const char *e = strchr(p, ',');
      size_t l = e ? (size_t)(e - p) : strlen(p);
      while (l && isspace((unsigned char)*p)) p++, l--;
      while (l && isspace((unsigned char)p[l - 1])) l--;
      if (l > 95) l = 95;
      memcpy(entries[ne], p, l);
      entries[ne][l] = 0;
      ne++;
      if (!e) break;
      p = e + 1;
    }
  }
  bool any_mig = false;
  for (int i = 0; i < n; i++) any_mig |= gpus[i].mig_enabled;
  for (int k = 0; k < ne; k++) {
    const char *e = entries[k];
    int found = -1;
    char reason[160] = "";
    if (il__is_uint(e)) {
      long idx = strtol(e, NULL, 10);
      if (idx < n) found = (int)idx;
      else snprintf(reason, sizeof reason, "index %ld does not exist (%d GPU%s, indices 0..%d)", idx, n, n == 1 ? "" : "s", n - 1);
    } else if (!strncasecmp(e, "MIG-", 4)) {
      if (any_mig) {
        /* [inferred] a MIG id selects a slice of some MIG-enabled GPU; which one is not
         * resolved here. Count it as visible on the first MIG-enabled GPU. */
        for (int i = 0; i < n && found < 0; i++)
          if (gpus[i].mig_enabled) found = i;
      } else {
        snprintf(reason, sizeof reason, "MIG device id but no GPU has MIG enabled");
      }
    } else if (*e) {
      /* UUID or prefix, "GPU-" optional for the match [inferred for non-GPU- prefixes]. */
      const char *want = e;
      int matches = 0;
      for (int i = 0; i < n; i++) {
        const char *u = gpus[i].uuid;
        bool m = !strncasecmp(u, want, strlen(want)) ||
                 (!strncasecmp(u, "GPU-", 4) && !strncasecmp(u + 4, want, strlen(want)));
        if (m && u[0]) {
          matches++;
          found = i;
        }
      }
      if (matches == 0) {
        found = -1;
        if (e[0] == '-' || isdigit((unsigned char)e[0])) snprintf(reason, sizeof reason, "'%.60s' is not a valid index", e);
        else snprintf(reason, sizeof reason, "no GPU UUID starts with '%.60s'", e);
      } else if (matches > 1) {
        found = -1;
        snprintf(reason, sizeof reason, "'%.40s' matches %d GPUs: give more UUID digits [inferred: ambiguous prefix is invalid]", e, matches);
      }
    } else {
      snprintf(reason, sizeof reason, "empty entry");
    }
    for (int j = 0; j < out->n_visible && found >= 0; j++)
      if (out->phys[j] == found) {
        snprintf(reason, sizeof reason, "GPU %d listed twice [inferred: a repeated device is invalid]", found);
        found = -1;
      }
    if (found < 0) {
      out->invalid_at = k;
      il_sysfs_copy(out->invalid_entry, sizeof out->invalid_entry, e);
      il_sysfs_copy(out->invalid_reason, sizeof out->invalid_reason, reason);
      out->n_hidden_after = ne - k - 1;
      return;
    }
    out->phys[out->n_visible++] = found;
  }
}
