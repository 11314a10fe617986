/* probe/visible: what NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES mean for this process.
 *
 * NVIDIA_VISIBLE_DEVICES is read by the NVIDIA Container Toolkit when a container starts
 * (nvidia-container-toolkit internal/config/image/cuda_image.go, libnvidia-container
 * src/cli/common.c): unset/empty/"void" = behave like runc (nothing injected) except for legacy
 * images (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA unset) where unset means "all"; "none" = driver
 * libraries but no GPU; "all"; otherwise a comma list of indices, full GPU-/MIG- UUIDs, PCI bus
 * ids or GPU:MIG pairs. Special values take precedence void > none > all.
 * CUDA_VISIBLE_DEVICES is read by the CUDA driver in this process (CUDA programming guide,
 * "CUDA Environment Variables"): unset = all; "" = none; indices or UUID prefixes in list order
 * (renumbered 0..n-1); the first invalid entry hides it and everything after it.
 * Three details are inferred, not documented, and marked [inferred] where used: an unknown or
 * ambiguous UUID prefix truncates the list like an invalid index; a repeated entry counts as
 * invalid; MIG entries are accepted when some GPU has MIG enabled.
 * Not for: containers or drivers themselves (probe/driver judges the result).
 */
#ifndef IL_PROBE_VISIBLE_H
#define IL_PROBE_VISIBLE_H

#include <stdbool.h>

#define IL_VISIBLE_MAX 16

typedef enum {
  IL_NVVIS_UNSET_VOID,   /* unset or empty: nothing injected */
  IL_NVVIS_UNSET_LEGACY, /* unset on a legacy CUDA image: treated as all */
  IL_NVVIS_VOID,
  IL_NVVIS_NONE,
  IL_NVVIS_ALL,
  IL_NVVIS_LIST,
} il_nvvis_mode;

typedef struct {
  il_nvvis_mode mode;
  int n_entries;
  char entries[IL_VISIBLE_MAX][96];
  char kind[IL_VISIBLE_MAX][16]; /* "index", "uuid", "mig", "pci", "gpu:mig", "unknown" */
} il_nvvis;

/* A GPU as the visibility rules need it: position in host enumeration and its UUID. */
typedef struct {
  char uuid[96];
  bool mig_enabled;
} il_visible_gpu;

typedef struct {
  bool set;              /* variable present in the environment */
  int n_visible;         /* devices CUDA will enumerate */
  int phys[IL_VISIBLE_MAX]; /* host index of CUDA device i */
  int invalid_at;        /* list position of the first invalid entry, -1 when none */
  char invalid_entry[96];
  char invalid_reason[160];
  int n_hidden_after;    /* entries after the invalid one (hidden by it) */
} il_cudavis;

/* Classifies NVIDIA_VISIBLE_DEVICES. value NULL = unset; legacy_image = CUDA_VERSION set and
 * NVIDIA_REQUIRE_CUDA unset. Can't fail; entries beyond IL_VISIBLE_MAX are ignored. */
void il_visible_nvidia(const char *value, bool legacy_image, il_nvvis *out);
const char *il_visible_nvidia_mode_name(il_nvvis_mode m);
/* Applies CUDA_VISIBLE_DEVICES (value NULL = unset) to the n GPUs of gpus (host order). */
void il_visible_cuda(const char *value, const il_visible_gpu *gpus, int n, il_cudavis *out);

#endif
