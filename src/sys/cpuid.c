/* sys/cpuid: CPUID/XGETBV detection of the kernel levels. */
#include "sys/cpuid.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define IL__X86 1
#endif

static il_cpu_features il__feat;
static pthread_once_t il__once = PTHREAD_ONCE_INIT;

static void il__detect(void) {
  il__feat = (il_cpu_features){IL_ISA_SCALAR, false, false, false, false};
#ifdef IL__X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !avx) return;
  uint32_t xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const uint64_t xcr0 = ((uint64_t)xhi << 32) | xlo;
  if ((xcr0 & 0x6) != 0x6) return; /* OS saves XMM and YMM state */
  if (__get_cpuid_max(0, NULL) < 7) return;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
             vl = b & (1u << 31), vnni = c & (1u << 11);
  il__feat.gfni = c & (1u << 8);
  il__feat.vbmi = c & (1u << 1);
  if (!(avx2 && fma && f16c)) return;
  il__feat.best = IL_ISA_AVX2;
  bool bf16 = false;
  if (a >= 1) { /* leaf 7 sub-leaf 1: EAX bit 4 AVX-VNNI, bit 5 AVX512_BF16 */
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    il__feat.avxvnni = a1 & (1u << 4);
    bf16 = a1 & (1u << 5);
  }
  /* opmask, upper ZMM0-15 and ZMM16-31 state saved by the OS */
  if (f && dq && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0) {
    il__feat.best = IL_ISA_AVX512;
    il__feat.avx512bf16 = bf16;
  }
#endif
}

const il_cpu_features *il_cpu_features_get(void) {
  pthread_once(&il__once, il__detect);
  return &il__feat;
}

il_isa il_cpu_isa_detected(void) { return il_cpu_features_get()->best; }

const char *il_isa_name(il_isa isa) {
  switch (isa) {
  case IL_ISA_SCALAR: return "scalar";
  case IL_ISA_AVX2: return "avx2";
  case IL_ISA_AVX512: return "avx512";
  }
  return "unknown";
}

bool il_isa_parse(const char *name, il_isa *out) {
  for (int i = IL_ISA_SCALAR; i <= IL_ISA_AVX512; i++)
    if (!strcmp(name, il_isa_name((il_isa)i))) {
      *out = (il_isa)i;
      return true;
    }
  return false;
}
