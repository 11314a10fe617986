/* sys/peak: the compute peak of this machine's cores, the other roof of every CPU benchmark.
 *
 * A loop of independent chains of the one instruction a kernel family is built on: vpdpbusd
 * zmm (AVX-512 VNNI) or ymm (AVX-VNNI) for the int8 dot products of the quantized types,
 * vpmaddubsw + vpmaddwd + vpaddd on plain AVX2 (the sequence every AVX2 int8 kernel runs),
 * vfmadd231ps zmm / ymm for F32 products (the float weight types), vdpbf16ps zmm for BF16
 * weights against BF16 activations. Each thread of a pool runs
 * it; the rate is the sum of each thread's ops over its own CPU time, so a thread another
 * tenant of a shared machine delays does not lower the peak. Ops count 2 per multiply-add.
 * bench_matmul quotes its GEMMs against it, `inferlab bench` its prompt and batched decode.
 * Not for: memory bandwidth (sys/membw), anything but x86-64 (other CPUs: unsupported).
 */
#ifndef IL_SYS_PEAK_H
#define IL_SYS_PEAK_H

#include <stdbool.h>

#include "core/dtype.h"
#include "core/status.h"
#include "sys/cpuid.h"
#include "sys/pool.h"

typedef enum {
  IL_PEAK_VNNI512, /* vpdpbusd zmm */
  IL_PEAK_AVXVNNI, /* vpdpbusd ymm (VEX) */
  IL_PEAK_AVX2,    /* vpmaddubsw + vpmaddwd + vpaddd ymm */
  IL_PEAK_FMA512,  /* vfmadd231ps zmm */
  IL_PEAK_FMA256,  /* vfmadd231ps ymm */
  IL_PEAK_BF16DOT, /* vdpbf16ps zmm (AVX512_BF16) */
  IL_PEAK_KINDS
} il_peak_kind;

/* "vpdpbusd zmm (AVX-512 VNNI)", ... */
const char *il_peak_name(il_peak_kind k);
/* Whether this CPU (and this build) runs k. */
bool il_peak_available(il_peak_kind k);
/* The instruction the CPU kernels of level isa are built on for weights of type t and
 * activations stored as act (--dtype): F32 FMA for the float types (F32, F16, BF16), except
 * BF16 weights with BF16 activations on an AVX-512 CPU with AVX512_BF16 (vdpbf16ps); an int8
 * dot product for the quantized ones (on the AVX2 level, AVX-VNNI's where the CPU has it, as
 * the kernel table does). -1 for the scalar level. */
int il_peak_kind_for(il_isa isa, il_dtype t, il_dtype act);
/* GOPS of all the pool's threads running k, best of 5 runs of 20-80 ms of CPU time each.
 * IL_ERR_UNSUPPORTED when this CPU cannot run k. */
il_status il_peak_measure(il_pool *pool, il_peak_kind k, double *gops);

#endif
