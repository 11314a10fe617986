/* backend/cpu/isa: which matmul kernel table each instruction-set level uses on this CPU.
 *
 * A level is usable when sys/cpuid detects it and this binary was compiled with its kernels;
 * within a level the table may still depend on optional extensions (the AVX-512 Q4 kernels
 * with GFNI or VBMI, the AVX2 GEMM with AVX-VNNI). Resolved once by each CPU backend: nothing
 * is chosen per call.
 * Not for: reading CPUID (sys/cpuid), the kernels themselves (matmul_*.c, gemm_*.c).
 */
#include "backend/cpu/isa.h"

#include <pthread.h>
#include <string.h>

#include "backend/cpu/kernels.h"

const il__kernels *il_cpu_isa_kernels(il_isa isa) {
  const il_cpu_features *f = il_cpu_features_get();
  if (isa > f->best) return NULL;
  switch (isa) {
  case IL_ISA_SCALAR: return &il__matmul_scalar;
  case IL_ISA_AVX2:
    if (!il__matmul_avx2.compiled) return NULL;
    return f->avxvnni ? &il__matmul_avx2_vnni : &il__matmul_avx2;
  case IL_ISA_AVX512:
    if (!il__matmul_avx512.compiled) return NULL;
    return f->gfni ? (f->vbmi ? &il__matmul_avx512_vbmi : &il__matmul_avx512_gfni) : &il__matmul_avx512;
  }
  return NULL;
}

static il__kernels il__tiles[IL_ISA_AVX512 + 1];
static pthread_once_t il__tiles_once = PTHREAD_ONCE_INIT;

static void il__tiles_init(void) {
  for (int i = IL_ISA_SCALAR; i <= IL_ISA_AVX512; i++) {
    const il__kernels *k = il_cpu_isa_kernels((il_isa)i);
    if (!k) continue;
    il__tiles[i] = *k;
    memset(il__tiles[i].gemm, 0, sizeof il__tiles[i].gemm);
  }
}

const il__kernels *il_cpu_isa_kernels_tiles(il_isa isa) {
  if (!il_cpu_isa_kernels(isa)) return NULL;
  pthread_once(&il__tiles_once, il__tiles_init);
  return &il__tiles[isa];
}

const il__kernels *il_cpu_isa_kernels_avx2_plain(void) {
  return il_cpu_isa_kernels(IL_ISA_AVX2) ? &il__matmul_avx2 : NULL;
}

il_isa il_cpu_isa_best(void) {
  il_isa isa = il_cpu_isa_detected();
  while (isa > IL_ISA_SCALAR && !il_cpu_isa_kernels(isa)) isa = (il_isa)(isa - 1);
  return isa;
}

const char *il_cpu_isa_compiled(void) {
  if (il__matmul_avx512.compiled && il__matmul_avx2.compiled) return "scalar,avx2,avx512";
  if (il__matmul_avx2.compiled) return "scalar,avx2";
  return "scalar";
}
