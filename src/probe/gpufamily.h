/* probe/gpufamily: GPU generation from the PCI device id alone, and the kmod.branch check (GPU
 * generation vs driver branch). See gpufamily.c. Not for: compute capability (NVML's).
 */
#ifndef IL_PROBE_GPUFAMILY_H
#define IL_PROBE_GPUFAMILY_H

typedef struct il_doctor il_doctor;

typedef enum {
  IL_GPU_UNKNOWN = 0, IL_GPU_KEPLER, IL_GPU_MAXWELL, IL_GPU_PASCAL, IL_GPU_VOLTA,
  IL_GPU_TURING, IL_GPU_AMPERE, IL_GPU_HOPPER, IL_GPU_ADA, IL_GPU_BLACKWELL,
} il_gpu_family;

/* Generation of PCI device id (0x2330 -> IL_GPU_HOPPER); IL_GPU_UNKNOWN when no range holds it. */
il_gpu_family il_gpufamily_of(unsigned device_id);
/* "Hopper", ... (static strings). */
const char *il_gpufamily_name(il_gpu_family f);
void il__gpufamily_check(il_doctor *dr);

#endif
