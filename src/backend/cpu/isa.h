/* backend/cpu/isa: the kernel table of each instruction-set level, clamped to this CPU.
 *
 * Not for: CPUID itself (sys/cpuid), which reports facts; this module makes the choice.
 */
#ifndef IL_BACKEND_CPU_ISA_H
#define IL_BACKEND_CPU_ISA_H

#include "sys/cpuid.h"

/* One instruction-set level's kernels (backend/cpu/kernels.h); opaque outside backend/cpu. */
typedef struct il__kernels il__kernels;

/* The kernel table for a level on this CPU (the AVX-512 one with GFNI/VBMI Q4 kernels when the
 * CPU has them), or NULL when the CPU or this binary lacks the level. The table is static;
 * nothing to free. Can't fail otherwise. */
const il__kernels *il_cpu_isa_kernels(il_isa isa);
/* The same table with its batched-GEMM entries removed, so every batch runs the tile kernels:
 * how the GEMM is measured against what it replaced in one build (IL_CPU_GEMM=0 in the
 * environment of the CPU backend). NULL when il_cpu_isa_kernels(isa) is NULL. */
const il__kernels *il_cpu_isa_kernels_tiles(il_isa isa);
/* The AVX2 table without AVX-VNNI (what an AVX2-only CPU runs), on any CPU with AVX2, so it
 * can be measured on one that has AVX-VNNI (IL_CPU_AVXVNNI=0 in the environment of the CPU
 * backend). NULL when il_cpu_isa_kernels(IL_ISA_AVX2) is NULL. */
const il__kernels *il_cpu_isa_kernels_avx2_plain(void);
/* The highest level both detected and compiled in. */
il_isa il_cpu_isa_best(void);
/* Comma list of levels compiled into this binary, e.g. "scalar,avx2,avx512" (static string). */
const char *il_cpu_isa_compiled(void);

#endif
