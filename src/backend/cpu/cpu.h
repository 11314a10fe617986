/* backend/cpu/cpu: the CPU backend, and the parts of it the simulated device reuses.
 *
 * A CPU buffer is host memory: allocated through memory/ under its category, or wrapped around
 * caller-owned memory (the mmap of a GGUF file: weights are read in place, never copied, unless
 * --repack asks for the GEMM's panel copy of the matmul weights: prepare_weight). The
 * ops resolve a tensor to base + off and call the raw-pointer kernels (matmul.c, ops_*.c) on
 * the backend's thread pool with the kernel table chosen when the backend was opened.
 *
 * sim (backend/sim) runs the same ops on buffers of its own space: it builds its ops table
 * from il__cpu_ops_template and replaces the memory and transfer members, so logits on sim
 * equal those on cpu bit for bit.
 * Not for: anything above backend/ (open backends through backend/registry.h).
 */
#ifndef IL_BACKEND_CPU_CPU_H
#define IL_BACKEND_CPU_CPU_H

#include "backend/backend.h"
#include "backend/cpu/attn.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "sys/pool.h"

/* Buffers of the cpu and sim backends. */
struct il_buffer {
  uint8_t *base;
  size_t size;
  il_backend *owner; /* the backend that made it; the view checks refuse it on any other */
  il_mem_category cat;
  bool wrapped;  /* caller-owned memory: never freed, not counted */
  void *handle;  /* the allocator's block (sim) */
  /* cpu --repack: the weight's copy in the GEMM's panel layout (il_cpu_matmul_pack), under
   * IL_MEM_WEIGHTS, for the tensor placed in this buffer (offset 0, these rows and columns);
   * NULL when none */
  uint8_t *packed;
  int64_t packed_rows, packed_cols;
};

typedef struct {
  il_pool *pool;
  il_isa isa;
  const il__kernels *kernels; /* matmul table for isa on this CPU */
  const il__ops *ops;         /* SIMD swiglu, NULL for the portable C */
  const il__cvt *cvt;         /* SIMD F32 <-> F16/BF16 rows for copy, NULL for the portable C */
  bool repack;                /* prepare_weight keeps weights in the GEMM's panel layout */
  bool repack_noted;          /* the log line about a weight type that has no panel layout */
  void *work;                 /* matmul activation workspace (host scratch) */
  size_t work_size;
  char name[64];
  il_buffer *wide;            /* reserve_act: the F32 copies of an op on 16-bit activations */
  void *qrow, *cand;          /* rmsnorm_quant's F32 row; sample's candidates (host scratch) */
  size_t qrow_size, cand_size;
  int32_t wide_rows;          /* rows per chunk there (0: none reserved) */
  /* rope: cos and sin of one position's angles, the last one rotated (a decode step rotates
   * q and k of every layer at one position: stories260K spent 3% of a token in pow, sin and
   * cos); valid when pairs > 0, for that position, base, scale and n_rot */
  struct {
    int32_t pos, pairs;
    float base, scale;
    float cs[64], sn[64];
  } rope;
} il__cpu;

/* An event of the cpu and sim backends: when it happened, and (sim's upload_async) whether the
 * copy it stands for is still queued, and how it ended. */
struct il_event {
  double t;
  bool pending;
  il_status st;
  char msg[256];
};

/* Options of a CPU kernel set. */
typedef struct {
  int threads;   /* 0 = one per core */
  const char *isa; /* NULL or "" = best available (IL_ISA in the environment may lower it) */
  bool repack;     /* weights repacked at load (cpu backend only; sim ignores it) */
} il__cpu_opts;

/* Fills c (pool, kernel tables). IL_ERR_UNSUPPORTED naming the level when the CPU or binary
 * lacks it. Release with il__cpu_fini. */
il_status il__cpu_init(il__cpu *c, const il__cpu_opts *o);
void il__cpu_fini(il__cpu *c);

/* The cpu ops table; sim copies it and overrides memory and transfers. Its ops expect
 * b->impl to point at an il__cpu as the first member of the backend's impl struct. */
extern const il_backend_ops il__cpu_ops_template;

/* base + off of a cpu/sim tensor. */
static inline void *il__cpu_ptr(il_tensor t) { return t.buf ? t.buf->base + t.off : NULL; }

/* Frees the scratch of reserve_act (cpu and sim call it before il__cpu_fini). */
void il__cpu_release_act(il_backend *b);

/* Creates the CPU backend. */
il_status il__cpu_backend_new(const il__cpu_opts *o, il_backend **out);

#endif
