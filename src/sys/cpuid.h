/* sys/cpuid: what this x86 CPU can execute, read once from CPUID and XGETBV.
 *
 * These are facts about the machine, not choices: which kernel level a backend runs is the
 * CPU backend's option (backend/cpu), clamped to what is detected here and what the binary
 * was compiled with. A level is reported only when every extension its kernels are compiled
 * with is present and the OS saves the register state it needs.
 * Not for: choosing kernels (backend/cpu/matmul), reporting (probe/host).
 */
#ifndef IL_SYS_CPUID_H
#define IL_SYS_CPUID_H

#include <stdbool.h>

/* Kernel levels, lowest first. AVX2 = AVX2 + FMA + F16C; AVX512 = F, DQ, BW, VL and VNNI. */
typedef enum { IL_ISA_SCALAR = 0, IL_ISA_AVX2 = 1, IL_ISA_AVX512 = 2 } il_isa;

typedef struct {
  il_isa best; /* highest level above that the CPU and OS support */
  bool gfni;   /* GFNI (the AVX-512 Q4 kernels use one GFNI instruction when present) */
  bool vbmi;   /* AVX512_VBMI */
  bool avxvnni; /* AVX-VNNI: VEX vpdpbusd on ymm (Alder Lake, Zen 4+); the AVX2 GEMM uses it */
  bool avx512bf16; /* AVX512_BF16 with the AVX-512 level (Cooper Lake, Sapphire Rapids, Zen 4+):
                      vdpbf16ps, the BF16 GEMM's dot product when the activations are BF16 */
} il_cpu_features;

/* Detected once (thread-safe); the same value on every call. Can't fail. */
const il_cpu_features *il_cpu_features_get(void);
/* Shorthand for il_cpu_features_get()->best. */
il_isa il_cpu_isa_detected(void);
/* "scalar", "avx2", "avx512". */
const char *il_isa_name(il_isa isa);
/* Parses a level name; false for anything else. */
bool il_isa_parse(const char *name, il_isa *out);

#endif
