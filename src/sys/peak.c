/* sys/peak: the compute peak per instruction family. See peak.h. */
#include "sys/peak.h"

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
/* The loops are written in assembly: compiled from intrinsics, GCC kept part of the
 * accumulator array on the stack and stored it every iteration, which halved the AVX-VNNI
 * figure. 12 independent chains (6 for AVX2, whose chain is the 1-cycle vpaddd) cover latency
 * x throughput on current cores. Returns n so the call is not dropped. */
#define IL__DP(ins, r, k) ins " %%" r "13, %%" r "12, %%" r #k "\n"
#define IL__DP12(ins, r)                                                                                      \
  IL__DP(ins, r, 0) IL__DP(ins, r, 1) IL__DP(ins, r, 2) IL__DP(ins, r, 3) IL__DP(ins, r, 4) IL__DP(ins, r, 5) \
  IL__DP(ins, r, 6) IL__DP(ins, r, 7) IL__DP(ins, r, 8) IL__DP(ins, r, 9) IL__DP(ins, r, 10) IL__DP(ins, r, 11)
/* chain k: ymm t = maddubs, maddwd with ones; ymm k += it */
#define IL__MADD(k, t)                                                                                        \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #t "\n"                                                                \
  "vpmaddwd %%ymm14, %%ymm" #t ", %%ymm" #t "\n"                                                              \
  "vpaddd %%ymm" #t ", %%ymm" #k ", %%ymm" #k "\n"
#define IL__REGS(r) r "0", r "1", r "2", r "3", r "4", r "5", r "6", r "7", r "8", r "9", r "10", r "11", r "12", r "13", r "14"
#define IL__LOOP(name, tgt, init, body, r)                                                                    \
  __attribute__((target(tgt))) static int64_t name(int64_t n) {                                               \
    int64_t i = n;                                                                                            \
    __asm__ volatile(init "1:\n" body "dec %0\n"                                                             \
                          "jnz 1b\n"                                                                          \
                     : "+r"(i)                                                                                \
                     :                                                                                        \
                     : IL__REGS(r), "cc");                                                                    \
    return n + i;                                                                                             \
  }
IL__LOOP(il__vnni512, "avx512f",
         "vpternlogd $0xff, %%zmm12, %%zmm12, %%zmm12\n vpternlogd $0xff, %%zmm13, %%zmm13, %%zmm13\n",
         IL__DP12("vpdpbusd", "zmm"), "zmm")
IL__LOOP(il__avxvnni, "avx2", "vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n vpcmpeqd %%ymm13, %%ymm13, %%ymm13\n",
         IL__DP12("%{vex%} vpdpbusd", "ymm"), "xmm")
/* AVX2 has no int8 dot product into int32: vpmaddubsw (u8 x s8 pairs to int16), vpmaddwd with
 * ones (to int32), vpaddd (6 chains: 12 temporaries would not fit in 16 registers). */
IL__LOOP(il__avx2, "avx2", "vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n vpabsb %%ymm12, %%ymm13\n vpabsw %%ymm12, %%ymm14\n",
         IL__MADD(0, 6) IL__MADD(1, 7) IL__MADD(2, 8) IL__MADD(3, 9) IL__MADD(4, 10) IL__MADD(5, 11), "xmm")
/* F32 FMA: 12 independent chains, every register zeroed first (a VEX vxorps clears the whole
 * zmm) so no denormal or NaN operand can slow a core down. */
#define IL__Z(k) "vxorps %%xmm" #k ", %%xmm" #k ", %%xmm" #k "\n"
#define IL__Z14                                                                                               \
  IL__Z(0) IL__Z(1) IL__Z(2) IL__Z(3) IL__Z(4) IL__Z(5) IL__Z(6) IL__Z(7) IL__Z(8) IL__Z(9) IL__Z(10) IL__Z(11) \
  IL__Z(12) IL__Z(13)
IL__LOOP(il__fma512, "avx512f", IL__Z14, IL__DP12("vfmadd231ps", "zmm"), "zmm")
IL__LOOP(il__fma256, "avx2,fma", IL__Z14, IL__DP12("vfmadd231ps", "ymm"), "xmm")
/* BF16 pairs: each vdpbf16ps adds 2 products per 32-bit lane, 32 per zmm; zeroed operands */
IL__LOOP(il__bf16dot, "avx512f", IL__Z14, IL__DP12("vdpbf16ps", "zmm"), "zmm")
#endif

static const char *const il__names[IL_PEAK_KINDS] = {
    "vpdpbusd zmm (AVX-512 VNNI)", "vpdpbusd ymm (AVX-VNNI)", "vpmaddubsw+vpmaddwd+vpaddd ymm (AVX2)",
    "vfmadd231ps zmm (F32 FMA)", "vfmadd231ps ymm (F32 FMA)", "vdpbf16ps zmm (AVX512_BF16)"};
/* ops (2 per multiply-add) per loop iteration */
static const double il__ops_per_iter[IL_PEAK_KINDS] = {12 * 128.0, 12 * 64.0, 6 * 64.0, 12 * 32.0, 12 * 16.0, 12 * 64.0};

const char *il_peak_name(il_peak_kind k) { return k < IL_PEAK_KINDS ? il__names[k] : "unknown"; }

bool il_peak_available(il_peak_kind k) {
#if defined(__x86_64__)
  const il_cpu_features *f = il_cpu_features_get();
  if (k == IL_PEAK_VNNI512 || k == IL_PEAK_FMA512) return f->best >= IL_ISA_AVX512;
  if (k == IL_PEAK_BF16DOT) return f->avx512bf16;
  if (k == IL_PEAK_AVXVNNI) return f->best >= IL_ISA_AVX2 && f->avxvnni;
  return k < IL_PEAK_KINDS && f->best >= IL_ISA_AVX2;
#else
  (void)k;
  return false;
#endif
}

int il_peak_kind_for(il_isa isa, il_dtype t, il_dtype act) {
  if (isa == IL_ISA_SCALAR) return -1;
  if (t == IL_DTYPE_BF16 && act == IL_DTYPE_BF16 && isa == IL_ISA_AVX512 && il_cpu_features_get()->avx512bf16)
    return IL_PEAK_BF16DOT;
  if (t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_BF16) return isa == IL_ISA_AVX512 ? IL_PEAK_FMA512 : IL_PEAK_FMA256;
  if (isa == IL_ISA_AVX512) return IL_PEAK_VNNI512;
  return il_cpu_features_get()->avxvnni ? IL_PEAK_AVXVNNI : IL_PEAK_AVX2;
}

typedef struct {
  il_peak_kind kind;
  int64_t n;
  volatile int64_t sink;
  double cpu[256]; /* each thread's CPU seconds for its loop */
} il__peak_ctx;

static double il__thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void il__peak_run(void *p, int ith, int nth) {
  il__peak_ctx *c = p;
  (void)nth;
  int64_t r = 0;
  const double t0 = il__thread_cpu();
#if defined(__x86_64__)
  switch (c->kind) {
  case IL_PEAK_VNNI512: r = il__vnni512(c->n); break;
  case IL_PEAK_AVXVNNI: r = il__avxvnni(c->n); break;
  case IL_PEAK_FMA512: r = il__fma512(c->n); break;
  case IL_PEAK_FMA256: r = il__fma256(c->n); break;
  case IL_PEAK_BF16DOT: r = il__bf16dot(c->n); break;
  default: r = il__avx2(c->n); break;
  }
#endif
  if (ith < 256) c->cpu[ith] = il__thread_cpu() - t0;
  if (ith == 0) c->sink = r;
}

il_status il_peak_measure(il_pool *pool, il_peak_kind k, double *gops) {
  *gops = 0;
  if (!il_peak_available(k))
    return il_error(IL_ERR_UNSUPPORTED, "compute peak: this CPU does not run %s", il_peak_name(k));
  il__peak_ctx c = {.kind = k, .n = 1000};
  const int nth = il_pool_size(pool) < 256 ? il_pool_size(pool) : 256;
  for (;;) { /* grow the loop to about 20-80 ms of CPU time */
    il_pool_run(pool, il__peak_run, &c);
    if (c.cpu[0] > 0.02 || c.n > ((int64_t)1 << 40)) break;
    c.n *= 4;
  }
  double best = 0;
  for (int r = 0; r < 5; r++) {
    il_pool_run(pool, il__peak_run, &c);
    double g = 0;
    for (int i = 0; i < nth; i++) g += c.cpu[i] > 0 ? il__ops_per_iter[k] * (double)c.n / c.cpu[i] / 1e9 : 0;
    if (g > best) best = g;
  }
  *gops = best;
  return IL_OK;
}
