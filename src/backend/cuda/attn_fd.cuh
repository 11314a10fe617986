/* backend/cuda/attn_fd: flash-decoding, the per-CTA work as __host__ __device__ code.
 *
 * One CTA of IL__FD_THREADS threads takes (token t, KV head kvh, split s): the G query heads of
 * the group (G = n_heads / n_kv_heads) against split s of the token's positions lo..pos[t] (lo 0,
 * or with a sliding window pos[t] - window + 1). The
 * positions are cut into tiles of il__fd_tile(head_dim) positions; the n_tiles of the token go
 * to the S splits as tiles [s * n_tiles / S, (s + 1) * n_tiles / S), so every split has work at
 * any context length. Per tile:
 *   1. table:  thread i < (blocks the tile spans) reads block-table entry i once and checks it;
 *   2. load:   the tile's K and V rows of head kvh go to shared memory as floats, in chunks of
 *              16 bytes (4 F32 or 8 F16/BF16 values, one LDG.128 each) when every row address is
 *              16-byte aligned, else element by element; a Q8_0 chunk is one 34-byte block. Each
 *              K/V byte of the tile is read once for all G heads;
 *   3. scores: thread i takes (head g, position j) pairs i, i + THREADS, ...: a dot product over
 *              the head's dims in order d = 0, 1, ... with fused multiply-adds, times
 *              scale * log2(e) (scores live in the base-2 domain: exp2 below);
 *   4. softmax: thread g < G takes head g's tile max, the correction exp2(m_old - m_new), the
 *              weights exp2(s - m_new) and their sum, in position order;
 *   5. output: thread i owns outputs i, i + THREADS, ... of the G x head_dim block and adds the
 *              tile's weighted V rows in position order after the correction.
 * The split's (m, l, o) go to the workspace; il__fd_combine merges the S splits of (t, head h) in
 * split order with the log-sum-exp rule. Every float operation is an explicit fmaf / il__mul /
 * il__add / il__div (never contracted differently by the two compilers) and exp2 is il__exp2
 * (a polynomial of those), so the device result equals the host twin (il__fd_cta_host,
 * il__fd_combine_host) bit for bit; tests/test_cuda_attn_twin.cpp runs the twin against the
 * scalar CPU reference. A bad block-table entry goes to the fault record and its positions are
 * skipped (weight 0); a bad sequence or position skips the token (the op then fails by name).
 */
#ifndef IL_BACKEND_CUDA_ATTN_FD_CUH
#define IL_BACKEND_CUDA_ATTN_FD_CUH

#include <math.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/decode.cuh"

/* #pragma unroll for nvcc's device pass; nothing for host compilers (they warn on it) */
#ifdef __CUDA_ARCH__
#define IL__PRAGMA(x) _Pragma(#x)
#else
#define IL__PRAGMA(x)
#endif

#define IL__FD_THREADS 128
#define IL__FD_MAX_OUT 16   /* outputs per thread: G * head_dim <= 2048 */
#define IL__FD_MAX_SPLITS 32
#define IL__FD_TARGET_CTAS 264 /* two CTAs per SM on a 132-SM GPU */
#define IL__FD_BATCH 4 /* tile chunks a thread loads before storing any */

IL__HD float il__div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/* 2^x to about 2 ulp from the operations above only: x = n + f, |f| <= 1/2, 2^f by Cephes'
 * exp2f polynomial, times 2^n built from bits. 0 below -125 (weights that small do not
 * change a float sum), NaN stays NaN. */
IL__HD float il__exp2(float x) {
  if (x != x) return x;
  if (!(x > -125.0f)) return 0.0f;
  if (x > 127.0f) x = 127.0f;
  const float n = rintf(x), f = il__sub(x, n);
  float p = 1.535336188319500e-4f;
  p = fmaf(p, f, 1.339887440266574e-3f);
  p = fmaf(p, f, 9.618437357674640e-3f);
  p = fmaf(p, f, 5.550332471162809e-2f);
  p = fmaf(p, f, 2.402264791363012e-1f);
  p = fmaf(p, f, 6.931472028550421e-1f);
  p = fmaf(p, f, 1.0f);
  const uint32_t bits = (uint32_t)((int)n + 127) << 23;
#ifdef __CUDA_ARCH__
  const float sc = __uint_as_float(bits);
#else
  float sc;
  memcpy(&sc, &bits, 4);
#endif
  return il__mul(p, sc);
}

/* True for the first fault of the launch: its writer fills in the rest. */
IL__HD bool il__fault_claim(il__cu_fault *f, int kind) {
#ifdef __CUDA_ARCH__
  return atomicCAS(&f->kind, 0, kind) == 0;
#else
  if (f->kind) return false;
  f->kind = kind;
  return true;
#endif
}

/* Positions per tile: 32, or 16 for head sizes above 128 (shared memory under 48 KiB). */
IL__HD int il__fd_tile(int64_t head_dim) { return head_dim > 128 ? 16 : 32; }

/* The shared memory one CTA uses, carved in this order (floats, then ints). */
typedef struct {
  float *q;   /* [G][D] the group's query rows */
  float *k;   /* [T][D + 1]: padded so threads on neighbouring positions hit distinct banks */
  float *v;   /* [T][D] */
  float *s;   /* [G][T] scores, then weights */
  float *m, *l, *corr; /* [G] running max (base 2), running sum, this tile's correction */
  int32_t *blk; /* [T + 1] the tile's block-table entries (-1: bad) */
} il__fd_smem;

IL__HD size_t il__fd_smem_bytes(int64_t group, int64_t head_dim) {
  const int64_t T = il__fd_tile(head_dim);
  return (size_t)(group * head_dim + T * (head_dim + 1) + T * head_dim + group * T + 3 * group) * 4 +
         (size_t)(T + 1) * 4;
}

IL__HD il__fd_smem il__fd_carve(void *base, int64_t group, int64_t head_dim) {
  const int64_t T = il__fd_tile(head_dim);
  float *f = (float *)base;
  il__fd_smem m;
  m.q = f, f += group * head_dim;
  m.k = f, f += T * (head_dim + 1);
  m.v = f, f += T * head_dim;
  m.s = f, f += group * T;
  m.m = f, f += group;
  m.l = f, f += group;
  m.corr = f, f += group;
  m.blk = (int32_t *)f;
  return m;
}

/* Splits for a call: enough CTAs for about two per SM, at most one per tile of the context. */
IL__HD int il__fd_splits(int64_t n_tok, int64_t n_kv_heads, int64_t n_ctx, int64_t head_dim) {
  const int64_t ctas = n_tok * n_kv_heads > 0 ? n_tok * n_kv_heads : 1;
  int64_t s = (IL__FD_TARGET_CTAS + ctas - 1) / ctas;
  const int64_t tiles = (n_ctx + il__fd_tile(head_dim) - 1) / il__fd_tile(head_dim);
  if (s > tiles) s = tiles;
  if (s > IL__FD_MAX_SPLITS) s = IL__FD_MAX_SPLITS;
  return s < 1 ? 1 : (int)s;
}

/* Floats of workspace per (token, head, split): m, l, then head_dim outputs. */
IL__HD int64_t il__fd_part(int64_t head_dim) { return head_dim + 2; }

/* Where the optional byte counters of the host twin go (NULL on the device). */
typedef struct {
  uint8_t *k, *v;   /* one counter per byte of the K / V cells */
  uint32_t *table;  /* one counter per block-table entry */
} il__fd_touch;

/* Tile range of split s for a token at position pos: its positions lo .. pos, lo the window's
 * first (0 without a window), cut into tiles from lo. */
IL__HD void il__fd_range_at(const il__cu_attn &a, int32_t pos, int T, int S, int s, int32_t *p0, int32_t *p1);

/* Tile range of split s for a token with n positions. */
IL__HD void il__fd_range(int32_t n, int T, int S, int s, int32_t *p0, int32_t *p1) {
  /* nt * s / S as q * s + r * s / S (nt = q S + r): 32-bit, exact, no 64-bit division */
  const int32_t nt = n / T + (n % T != 0), q = nt / S, r = nt % S;
  const int64_t t0 = (int64_t)q * s + r * s / S, t1 = (int64_t)q * (s + 1) + r * (s + 1) / S;
  *p0 = (int32_t)(t0 * T);
  *p1 = (int32_t)(t1 * T < n ? t1 * T : n);
}

IL__HD void il__fd_range_at(const il__cu_attn &a, int32_t pos, int T, int S, int s, int32_t *p0, int32_t *p1) {
  const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  il__fd_range(pos + 1 - lo, T, S, s, p0, p1);
  *p0 += lo, *p1 += lo;
}

/* Step 0: thread tid's part of loading the group's query rows and resetting (m, l). */
IL__HD void il__fd_begin(const il__cu_attn &a, il__fd_smem &sh, int64_t t, int64_t kvh, int tid) {
  const int64_t G = (int)a.n_heads / (int)a.n_kv_heads, D = a.head_dim;
  const float *q = (const float *)((const uint8_t *)a.q + (size_t)t * a.q_stride) + kvh * G * D;
  for (int i = tid; i < (int)(G * D); i += IL__FD_THREADS) sh.q[i] = q[i]; /* 32-bit index math: no division calls */
  if (tid < G) sh.m[tid] = -INFINITY, sh.l[tid] = 0.0f;
}

/* Step 1: the block-table entries of the tile at p0 (n positions). */
IL__HD void il__fd_table(const il__cu_attn &a, il__fd_smem &sh, int32_t seq, int32_t p0, int n, int tid,
                         il__fd_touch *touch) {
  const int32_t b0 = p0 / a.block, nb = (p0 + n - 1) / a.block - b0 + 1;
  if (tid >= nb) return;
  const size_t at = (size_t)seq * (size_t)a.max_blocks + (size_t)(b0 + tid);
  const int32_t blk = a.table[at];
  if (touch) touch->table[at]++;
  const bool ok = blk >= 0 && ((int64_t)blk + 1) * a.block <= a.n_cells;
  if (!ok) {
    if (il__fault_claim(a.fault, IL__CU_FAULT_BLOCK))
      a.fault->launch = a.launch, a.fault->a = seq, a.fault->b = blk, a.fault->c = a.n_cells;
  }
  sh.blk[tid] = ok ? blk : -1;
}

/* Chunk c of a row of type CT at p into v; returns the number of elements. */
template <int CT, bool VEC>
IL__HD int il__fd_chunk(const uint8_t *p, int64_t c, float *v) {
  if constexpr (CT == IL_DTYPE_Q8_0) {
    const uint8_t *b = p + c * 34;
    const float d = il__f16(il__ld16(b));
    for (int j = 0; j < 32; j++) v[j] = il__mul((float)(int8_t)b[2 + j], d);
    return 32;
  } else if constexpr (VEC) {
    uint32_t w[4];
#ifdef __CUDA_ARCH__
    const uint4 q = *(const uint4 *)(p + 16 * c);
    w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
#else
    memcpy(w, p + 16 * c, 16);
#endif
    if constexpr (CT == IL_DTYPE_F32) {
      for (int i = 0; i < 4; i++) memcpy(&v[i], &w[i], 4);
      return 4;
    } else {
      for (int i = 0; i < 4; i++) {
        const uint16_t lo = (uint16_t)(w[i] & 0xFFFF), hi = (uint16_t)(w[i] >> 16);
        v[2 * i] = CT == IL_DTYPE_F16 ? il__f16(lo) : il__bf16(lo);
        v[2 * i + 1] = CT == IL_DTYPE_F16 ? il__f16(hi) : il__bf16(hi);
      }
      return 8;
    }
  } else if constexpr (CT == IL_DTYPE_F32) {
#ifdef __CUDA_ARCH__
    v[0] = *(const float *)(p + 4 * c);
#else
    memcpy(v, p + 4 * c, 4);
#endif
    return 1;
  } else {
    const uint16_t h = *(const uint16_t *)(p + 2 * c);
    v[0] = CT == IL_DTYPE_F16 ? il__f16(h) : il__bf16(h);
    return 1;
  }
}

/* Elements per chunk and bytes per chunk of the loader. */
template <int CT, bool VEC>
IL__HD constexpr int il__fd_chunk_elems() {
  return CT == IL_DTYPE_Q8_0 ? 32 : VEC ? (CT == IL_DTYPE_F32 ? 4 : 8) : 1;
}
template <int CT, bool VEC>
IL__HD constexpr int il__fd_chunk_bytes() {
  return CT == IL_DTYPE_Q8_0 ? 34 : VEC ? 16 : (CT == IL_DTYPE_F32 ? 4 : 2);
}

/* Step 2: thread tid's chunks of the tile's K and V rows (positions p0 .. p0 + n). */
template <int CT, bool VEC>
IL__HD void il__fd_load(const il__cu_attn &a, il__fd_smem &sh, int64_t kvh, int32_t p0, int n, int tid,
                        il__fd_touch *touch) {
  constexpr int E = il__fd_chunk_elems<CT, VEC>(); /* a compile-time count: v stays in registers */
  constexpr int NB = CT == IL_DTYPE_Q8_0 ? 1 : IL__FD_BATCH; /* a Q8_0 chunk is already 32 values */
  const int D = (int)a.head_dim, cpr = D / E;
  const size_t hoff = (size_t)il__fd_chunk_bytes<CT, VEC>() * (size_t)(kvh * cpr);
  const int32_t b0 = p0 / a.block;
  /* IL__FD_BATCH chunks per thread per round, all loads issued before the first store (several
   * 16-byte loads in flight per lane); the rounds are not unrolled (no stack frame on sm_8x) */
IL__PRAGMA(unroll 1)
  for (int c0 = tid; c0 < n * cpr; c0 += NB * IL__FD_THREADS) {
    float kv[NB][2][E];
    int at[NB], av[NB]; /* where chunk u goes in the K and V tiles (-1: none) */
IL__PRAGMA(unroll)
    for (int u = 0; u < NB; u++) {
      const int c = c0 + u * IL__FD_THREADS, j = c / cpr, ci = c % cpr;
      const int32_t p = p0 + j, blk = c < n * cpr ? sh.blk[p / a.block - b0] : -1;
      at[u] = c < n * cpr ? j * (D + 1) + ci * E : -1;
      av[u] = j * D + ci * E;
      const size_t cell = (size_t)(blk < 0 ? 0 : blk) * (size_t)a.block + (size_t)(p % a.block);
      if (blk < 0) { /* scored -inf below; zeros keep 0 * V finite */
        for (int e = 0; e < E; e++) kv[u][0][e] = kv[u][1][e] = 0.0f;
      } else {
        il__fd_chunk<CT, VEC>((const uint8_t *)a.k + cell * a.k_stride + hoff, ci, kv[u][0]);
        il__fd_chunk<CT, VEC>((const uint8_t *)a.v + cell * a.v_stride + hoff, ci, kv[u][1]);
        if (touch) {
          const int cb = il__fd_chunk_bytes<CT, VEC>();
          for (int b = 0; b < cb; b++) {
            touch->k[cell * a.k_stride + hoff + (size_t)ci * cb + b]++;
            touch->v[cell * a.v_stride + hoff + (size_t)ci * cb + b]++;
          }
        }
      }
    }
IL__PRAGMA(unroll)
    for (int u = 0; u < NB; u++) {
      if (at[u] < 0) continue;
      for (int e = 0; e < E; e++) sh.k[at[u] + e] = kv[u][0][e], sh.v[av[u] + e] = kv[u][1][e];
    }
  }
}

/* Step 3: scores (base 2) of (head g, position j) pairs; -inf for a bad block's positions. */
IL__HD void il__fd_scores(const il__cu_attn &a, il__fd_smem &sh, float scale2, int32_t p0, int n, int tid) {
  const int G = (int)((int)a.n_heads / (int)a.n_kv_heads), D = (int)a.head_dim, T = il__fd_tile(D);
  const int32_t b0 = p0 / a.block;
IL__PRAGMA(unroll 1)
  for (int i = tid; i < G * n; i += IL__FD_THREADS) {
    const int g = i / n, j = i % n;
    const float *q = sh.q + g * D, *k = sh.k + j * (D + 1);
    float d = 0.0f;
    for (int e = 0; e < D; e++) d = fmaf(q[e], k[e], d); /* a bad block's rows are zeros */
    sh.s[g * T + j] = sh.blk[(p0 + j) / a.block - b0] < 0 ? -INFINITY : il__mul(d, scale2);
  }
}

/* Step 4: head tid's online-softmax update over the tile's n scores. */
IL__HD void il__fd_softmax(const il__cu_attn &a, il__fd_smem &sh, int n, int tid) {
  const int64_t G = (int)a.n_heads / (int)a.n_kv_heads, T = il__fd_tile(a.head_dim);
  if (tid >= G) return;
  float *s = sh.s + tid * T;
  float mx = sh.m[tid];
  for (int j = 0; j < n; j++) mx = fmaxf(mx, s[j]);
  if (mx == -INFINITY) { /* nothing valid yet: keep the state, weigh the tile 0 */
    for (int j = 0; j < n; j++) s[j] = 0.0f;
    sh.corr[tid] = 1.0f;
    return;
  }
  const float corr = il__exp2(il__sub(sh.m[tid], mx));
  float sum = 0.0f;
  for (int j = 0; j < n; j++) {
    s[j] = il__exp2(il__sub(s[j], mx));
    sum = il__add(sum, s[j]);
  }
  sh.l[tid] = fmaf(sh.l[tid], corr, sum);
  sh.m[tid] = mx;
  sh.corr[tid] = corr;
}

/* Step 5: thread tid's outputs o[k] (output i = tid + k * THREADS of the G x D block). */
IL__HD void il__fd_output(const il__cu_attn &a, il__fd_smem &sh, int n, int tid, float *o) {
  const int G = (int)((int)a.n_heads / (int)a.n_kv_heads), D = (int)a.head_dim, T = il__fd_tile(D);
IL__PRAGMA(unroll)
  for (int k = 0; k < IL__FD_MAX_OUT; k++) {
    const int i = tid + k * IL__FD_THREADS;
    if (i >= G * D) break;
    const int g = i / D, d = i % D;
    const float *p = sh.s + g * T;
    float acc = il__mul(o[k], sh.corr[g]);
    for (int j = 0; j < n; j++) acc = fmaf(p[j], sh.v[j * D + d], acc);
    o[k] = acc;
  }
}

/* Step 6: the split's partial (m, l, o) of every head of the group to the workspace. */
IL__HD void il__fd_store(const il__cu_attn &a, const il__fd_smem &sh, float *ws, int64_t t, int64_t kvh, int S, int s,
                         int tid, const float *o) {
  const int G = (int)((int)a.n_heads / (int)a.n_kv_heads), D = (int)a.head_dim;
  const int64_t P = il__fd_part(D);
IL__PRAGMA(unroll)
  for (int k = 0; k < IL__FD_MAX_OUT; k++) {
    const int i = tid + k * IL__FD_THREADS;
    if (i >= G * D) break;
    const int g = i / D, d = i % D;
    const int64_t h = kvh * G + g;
    ws[((t * a.n_heads + h) * S + s) * P + 2 + d] = o[k];
  }
  if (tid < G) {
    float *p = ws + ((t * a.n_heads + kvh * G + tid) * S + s) * P;
    p[0] = sh.m[tid];
    p[1] = sh.l[tid];
  }
}

/* The combine of (t, h), output dims d = tid, tid + nthr, ...: out = sum_s o_s 2^(m_s - M) /
 * sum_s l_s 2^(m_s - M), splits in order (a split without positions has m = -inf: weight 0). */
IL__HD void il__fd_combine(const il__cu_attn &a, const float *ws, int S, int64_t t, int64_t h, int tid, int nthr) {
  const int64_t D = a.head_dim, P = il__fd_part(D);
  const float *p = ws + (t * a.n_heads + h) * S * P;
  float M = -INFINITY;
  for (int s = 0; s < S; s++) M = fmaxf(M, p[s * P]);
  float L = 0.0f;
  for (int s = 0; s < S; s++)
    if (p[s * P] != -INFINITY) L = fmaf(p[s * P + 1], il__exp2(il__sub(p[s * P], M)), L);
  float *o = (float *)((uint8_t *)a.out + (size_t)t * a.out_stride) + h * D;
  for (int d = tid; d < (int)D; d += nthr) {
    float acc = 0.0f;
    for (int s = 0; s < S; s++)
      if (p[s * P] != -INFINITY) acc = fmaf(p[s * P + 2 + d], il__exp2(il__sub(p[s * P], M)), acc);
    o[d] = L > 0.0f ? il__div(acc, L) : 0.0f;
  }
}

/* The sequence and position of token t, or false (and the fault recorded) when out of range. */
IL__HD bool il__fd_token(const il__cu_attn &a, int64_t t, int32_t *seq, int32_t *pos, bool report) {
  *seq = a.seq[t], *pos = a.pos[t];
  int kind = 0;
  long long b = 0, c = 0;
  if (*seq < 0 || *seq >= a.n_seq) kind = IL__CU_FAULT_SEQ, b = *seq, c = a.n_seq;
  else if (*pos < 0 || *pos >= a.n_ctx) kind = IL__CU_FAULT_POS, b = *pos, c = a.n_ctx;
  if (!kind) return true;
  if (report) {
    if (il__fault_claim(a.fault, kind))
      a.fault->launch = a.launch, a.fault->a = t, a.fault->b = b, a.fault->c = c;
  }
  return false;
}

/* The kernel's choice of loader: 16-byte chunks when every K/V row of a head starts 16-byte
 * aligned (F32/F16/BF16), else element loads; Q8_0 always reads whole blocks. */
IL__HD bool il__fd_vec_ok(const il__cu_attn &a) {
  if (a.kv_type == IL_DTYPE_Q8_0) return false;
  const size_t es = a.kv_type == IL_DTYPE_F32 ? 4 : 2;
  return ((uintptr_t)a.k % 16 == 0) && ((uintptr_t)a.v % 16 == 0) && a.k_stride % 16 == 0 && a.v_stride % 16 == 0 &&
         ((size_t)a.head_dim * es) % 16 == 0;
}

#ifndef __CUDA_ARCH__
/* The host twin of one CTA (t, kvh, split s of S): the steps above for every thread in turn,
 * each step finished by all threads before the next starts (the kernel's barriers). */
template <int CT, bool VEC>
static void il__fd_cta_host(const il__cu_attn &a, float *ws, int64_t t, int64_t kvh, int S, int s, il__fd_touch *touch) {
  const int64_t G = (int)a.n_heads / (int)a.n_kv_heads, D = a.head_dim;
  const int T = il__fd_tile(D);
  int32_t seq, pos;
  if (!il__fd_token(a, t, &seq, &pos, kvh == 0 && s == 0)) return;
  float *mem = new float[il__fd_smem_bytes(G, D) / 4 + 1];
  il__fd_smem sh = il__fd_carve(mem, G, D);
  static thread_local float o[IL__FD_THREADS][IL__FD_MAX_OUT];
  memset(o, 0, sizeof o);
  const float scale2 = il__mul(a.scale, 1.4426950408889634f);
  for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_begin(a, sh, t, kvh, tid);
  int32_t p0, p1;
  il__fd_range_at(a, pos, T, S, s, &p0, &p1);
  for (int32_t pt = p0; pt < p1; pt += T) {
    const int n = p1 - pt < T ? p1 - pt : T;
    for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_table(a, sh, seq, pt, n, tid, touch);
    for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_load<CT, VEC>(a, sh, kvh, pt, n, tid, touch);
    for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_scores(a, sh, scale2, pt, n, tid);
    for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_softmax(a, sh, n, tid);
    for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_output(a, sh, n, tid, o[tid]);
  }
  for (int tid = 0; tid < IL__FD_THREADS; tid++) il__fd_store(a, sh, ws, t, kvh, S, s, tid, o[tid]);
  delete[] mem;
}

/* The host twin of a whole call: every CTA, then every combine. ws: n_tok * n_heads * S *
 * il__fd_part(head_dim) floats. */
template <int CT, bool VEC>
static void il__fd_call_host_t(const il__cu_attn &a, float *ws, int S, il__fd_touch *touch) {
  for (int64_t t = 0; t < a.n_tok; t++)
    for (int64_t kvh = 0; kvh < a.n_kv_heads; kvh++)
      for (int s = 0; s < S; s++) il__fd_cta_host<CT, VEC>(a, ws, t, kvh, S, s, touch);
  for (int64_t t = 0; t < a.n_tok; t++) {
    int32_t seq, pos;
    if (!il__fd_token(a, t, &seq, &pos, false)) continue;
    for (int64_t h = 0; h < a.n_heads; h++) il__fd_combine(a, ws, S, t, h, 0, 1);
  }
}

/* False for a cell type without a loader. */
static inline bool il__fd_call_host(const il__cu_attn &a, float *ws, int S, il__fd_touch *touch) {
  const bool vec = il__fd_vec_ok(a);
#define IL__FD_H(CT)                                          \
  do {                                                        \
    if (vec) il__fd_call_host_t<CT, true>(a, ws, S, touch);   \
    else il__fd_call_host_t<CT, false>(a, ws, S, touch);      \
  } while (0)
  switch (a.kv_type) {
  case IL_DTYPE_F32: IL__FD_H(IL_DTYPE_F32); return true;
  case IL_DTYPE_F16: IL__FD_H(IL_DTYPE_F16); return true;
  case IL_DTYPE_BF16: IL__FD_H(IL_DTYPE_BF16); return true;
  case IL_DTYPE_Q8_0: il__fd_call_host_t<IL_DTYPE_Q8_0, false>(a, ws, S, touch); return true;
  default: return false;
  }
#undef IL__FD_H
}
#endif

#endif
