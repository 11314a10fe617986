/* backend/cuda/attn_fa: the tensor-core prefill kernel's pieces, and their host emulation.
 *
 * FlashAttention-2 over the paged cache: a CTA of IL__FA_WARPS warps takes IL__FA_ROWS
 * consecutive query tokens of one query head h (warp w: rows 16w .. 16w + 15); key tiles of
 * IL__FA_KT positions go through shared memory as F16 (F32, F16 and Q8_0 cells converted on load,
 * 16-byte chunks for F16/F32 rows at 16-byte boundaries), the block table read once per block
 * per tile. Per tile a warp computes S = Q K^T with mma.sync m16n8k16 (f16 in, f32 accumulate;
 * K fragments by ldmatrix), masks it (causal: key position <= the row's position, and the row's
 * sequence), updates its rows' running max and sum (base 2, il__exp2), rescales its O
 * accumulators, packs P to F16 as the A operand (the C fragments of two 8-key blocks are the A
 * fragment of one 16-key step) and adds P V with mma.sync (V fragments by ldmatrix .trans).
 * Causal tile skipping: the CTA stops after the last key tile its rows reach; a warp whose rows
 * end before a tile skips that tile's mma. With a sliding window (gemma3's local layers) a row
 * also masks keys before pos - window + 1, and the CTA starts at the tile of the earliest such
 * position of its rows. A tile holding tokens of several sequences runs one
 * pass per sequence (rows of other sequences masked), so any batch is correct; prompts are one
 * pass. Head sizes 32, 64 and 128.
 *
 * Fragment layouts are the PTX ISA's (section "Matrix Fragments for mma.m16n8k16 with floating
 * point type"): with groupID g = lane >> 2 and threadID_in_group c = lane & 3,
 *   A (16 x 16, .f16x2 registers a0..a3): row g for a0, a2 and g + 8 for a1, a3;
 *       columns 2c, 2c + 1 for a0, a1 and 2c + 8, 2c + 9 for a2, a3 (low half: the lower column);
 *   B (16 x 8, b0, b1): rows (k) 2c, 2c + 1 for b0 and 2c + 8, 2c + 9 for b1; column (n) g;
 *   C/D (16 x 8 f32, c0..c3): row g for c0, c1, g + 8 for c2, c3; columns 2c + (i & 1).
 * ldmatrix.m8n8.x2.b16: lanes 0-7 give the row addresses of matrix 0, lanes 8-15 of matrix 1;
 * lane l receives, in register j, elements (l >> 2, 2 (l & 3)) and (l >> 2, 2 (l & 3) + 1) of
 * matrix j; with .trans, elements (2 (l & 3), l >> 2) and (2 (l & 3) + 1, l >> 2).
 * The il__fa_emu_* functions implement exactly these tables on the host over the registers of
 * all 32 lanes, so il__fa_cta_host runs the kernel's tile loop on the CPU
 * (tests/test_cuda_attn_twin.cpp checks it against the scalar reference). The device's mma sums
 * in its own order, so device and emulation agree to rounding, not bit for bit.
 */
#ifndef IL_BACKEND_CUDA_ATTN_FA_CUH
#define IL_BACKEND_CUDA_ATTN_FA_CUH

#include "backend/cuda/attn_fd.cuh"

#define IL__FA_WARPS 4
#define IL__FA_ROWS (16 * IL__FA_WARPS)
#define IL__FA_KT 64
#define IL__FA_THREADS (32 * IL__FA_WARPS)
/* Fewer query tokens go to flash-decoding. The host cannot see how many sequences a batch holds
 * (seq is device data), and a tile of k sequences runs k passes here, so decode batches of up to
 * 63 sequences stay on flash-decoding, which reads each sequence's K/V once per KV head. */
#define IL__FA_MIN_TOK 64

IL__HD bool il__fa_head_ok(int64_t head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }
IL__HD bool il__fa_type_ok(int t) { return t == IL_DTYPE_F32 || t == IL_DTYPE_F16 || t == IL_DTYPE_Q8_0; }

/* ---- fragment maps (PTX ISA, mma.m16n8k16 .f16 / .f32) ---- */
IL__HD int il__fa_a_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); } /* element i of 8 */
IL__HD int il__fa_a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + ((i & 4) ? 8 : 0); }
IL__HD int il__fa_b_row(int lane, int i) { return 2 * (lane & 3) + (i & 1) + ((i & 2) ? 8 : 0); } /* of 4 */
IL__HD int il__fa_b_col(int lane) { return lane >> 2; }
IL__HD int il__fa_c_row(int lane, int i) { return (lane >> 2) + ((i & 2) ? 8 : 0); } /* of 4 */
IL__HD int il__fa_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

IL__HD uint32_t il__fa_pack(float lo, float hi) {
  return (uint32_t)il__f16_bits(lo) | ((uint32_t)il__f16_bits(hi) << 16);
}

/* Shared memory of one CTA: the key tile and the value tile as F16 rows padded by 8 halves
 * (16 bytes, so ldmatrix's eight row addresses fall in distinct banks), the tile's block-table
 * entries, and the rows' sequences and positions. */
template <int D>
struct il__fa_smem {
  uint16_t k[IL__FA_KT][D + 8];
  uint16_t v[IL__FA_KT][D + 8];
  int32_t blk[IL__FA_KT + 1];
  int32_t seq[IL__FA_ROWS], pos[IL__FA_ROWS]; /* seq -1: no row (past the batch, or bad) */
  uint8_t done[IL__FA_ROWS];                   /* row finished by an earlier pass */
  int32_t pass_seq, kmax;
  int32_t kmin; /* the pass's first position any row sees (0, or the earliest window's first) */
};

/* A lane's registers. */
template <int D>
struct il__fa_lane {
  uint32_t qa[D / 16][4];
  float o[D / 8][4];
  float s[IL__FA_KT / 8][4];
  float m[2], l[2]; /* rows g and g + 8 of the warp's 16 */
};

/* Thread tid's part of reading the CTA's rows (tokens t0 ..): sequence and position, checked. */
template <int D>
IL__HD void il__fa_rows(const il__cu_attn &a, il__fa_smem<D> &sh, int64_t t0, int tid) {
  if (tid >= IL__FA_ROWS) return;
  const int64_t t = t0 + tid;
  int32_t seq = -1, pos = -1;
  if (t < a.n_tok && !il__fd_token(a, t, &seq, &pos, true)) seq = -1;
  sh.seq[tid] = t < a.n_tok ? seq : -1;
  sh.pos[tid] = pos;
  sh.done[tid] = 0;
  if (tid == 0) sh.pass_seq = -1;
}

/* Lane `lane` of warp w: its Q fragments (F32 -> F16) and a reset state. */
template <int D>
IL__HD void il__fa_lane_begin(const il__cu_attn &a, int64_t t0, int64_t h, int w, int lane, il__fa_lane<D> &r) {
  for (int kk = 0; kk < D / 16; kk++)
    for (int j = 0; j < 4; j++) {
      float x[2];
      for (int e = 0; e < 2; e++) {
        const int i = 2 * j + e;
        const int64_t t = t0 + 16 * w + il__fa_a_row(lane, i);
        x[e] = t < a.n_tok ? ((const float *)((const uint8_t *)a.q + (size_t)t * a.q_stride))[h * D + 16 * kk +
                                                                                             il__fa_a_col(lane, i)]
                           : 0.0f;
      }
      r.qa[kk][j] = il__fa_pack(x[0], x[1]);
    }
  for (int nd = 0; nd < D / 8; nd++)
    for (int i = 0; i < 4; i++) r.o[nd][i] = 0.0f;
  r.m[0] = r.m[1] = -INFINITY;
  r.l[0] = r.l[1] = 0.0f;
}

/* Thread tid's part of loading key/value tile p0 .. p0 + KT of sequence seq as F16 (positions
 * past kmax or in a bad block: zeros). The table entries are in sh.blk. */
template <int CT, bool VEC, int D>
IL__HD void il__fa_load(const il__cu_attn &a, il__fa_smem<D> &sh, int64_t kvh, int32_t p0, int tid) {
  constexpr int E = CT == IL_DTYPE_Q8_0 ? 32 : VEC ? (CT == IL_DTYPE_F32 ? 4 : 8) : 1;
  constexpr int CB = CT == IL_DTYPE_Q8_0 ? 34 : VEC ? 16 : (CT == IL_DTYPE_F32 ? 4 : 2);
  constexpr int cpr = D / E;
  const size_t hoff = (size_t)CB * (size_t)(kvh * cpr);
  const int32_t b0 = p0 / a.block;
  for (int c = tid; c < IL__FA_KT * cpr; c += IL__FA_THREADS) {
    const int j = c / cpr, ci = c % cpr;
    const int32_t p = p0 + j;
    const int32_t blk = p <= sh.kmax && p >= sh.kmin ? sh.blk[p / a.block - b0] : -1;
    float kv[2][E];
    if (blk < 0) {
      for (int e = 0; e < E; e++) kv[0][e] = kv[1][e] = 0.0f;
    } else {
      const size_t cell = (size_t)blk * (size_t)a.block + (size_t)(p % a.block);
      il__fd_chunk<CT, VEC>((const uint8_t *)a.k + cell * a.k_stride + hoff, ci, kv[0]);
      il__fd_chunk<CT, VEC>((const uint8_t *)a.v + cell * a.v_stride + hoff, ci, kv[1]);
    }
    for (int e = 0; e < E; e++) {
      sh.k[j][ci * E + e] = il__f16_bits(kv[0][e]);
      sh.v[j][ci * E + e] = il__f16_bits(kv[1][e]);
    }
  }
}

/* Lane step after S = Q K^T: scale to base 2, mask (key past the row's position, another
 * sequence's row, a bad block), and the lane's own maxima of its two rows in rmax. */
template <int D>
IL__HD void il__fa_lane_mask(const il__cu_attn &a, const il__fa_smem<D> &sh, float scale2, int32_t p0, int w, int lane, il__fa_lane<D> &r,
                             float *rmax) {
  for (int half = 0; half < 2; half++) {
    const int row = 16 * w + (lane >> 2) + 8 * half;
    const bool live = sh.seq[row] == sh.pass_seq;
    const int32_t rp = sh.pos[row];
    float mx = -INFINITY;
    for (int nb = 0; nb < IL__FA_KT / 8; nb++)
      for (int e = 0; e < 2; e++) {
        const int i = 2 * half + e, j = 8 * nb + il__fa_c_col(lane, i);
        const int32_t kp = p0 + j;
        const bool ok = live && kp <= rp && (a.window <= 0 || kp > rp - a.window) && kp >= sh.kmin &&
                        sh.blk[kp / a.block - p0 / a.block] >= 0;
        r.s[nb][i] = ok ? il__mul(r.s[nb][i], scale2) : -INFINITY;
        mx = fmaxf(mx, r.s[nb][i]);
      }
    rmax[half] = mx;
  }
}

/* Lane step with the quad's row maxima: weights, running sum, O correction. */
template <int D>
IL__HD void il__fa_lane_softmax(il__fa_lane<D> &r, const float *qmax) {
  for (int half = 0; half < 2; half++) {
    const float mx = fmaxf(r.m[half], qmax[half]);
    float corr = 1.0f, sum = 0.0f;
    if (mx == -INFINITY) {
      for (int nb = 0; nb < IL__FA_KT / 8; nb++) r.s[nb][2 * half] = r.s[nb][2 * half + 1] = 0.0f;
    } else {
      corr = il__exp2(il__sub(r.m[half], mx));
      for (int nb = 0; nb < IL__FA_KT / 8; nb++)
        for (int e = 0; e < 2; e++) {
          float &x = r.s[nb][2 * half + e];
          x = il__exp2(il__sub(x, mx));
          sum = il__add(sum, x);
        }
      r.m[half] = mx;
    }
    r.l[half] = fmaf(r.l[half], corr, sum);
    for (int nd = 0; nd < D / 8; nd++)
      for (int e = 0; e < 2; e++) r.o[nd][2 * half + e] = il__mul(r.o[nd][2 * half + e], corr);
  }
}

/* P's A fragment for 16-key step kk: the C fragments of 8-key blocks 2kk and 2kk + 1. */
template <int D>
IL__HD void il__fa_lane_pa(const il__fa_lane<D> &r, int kk, uint32_t *pa) {
  pa[0] = il__fa_pack(r.s[2 * kk][0], r.s[2 * kk][1]);
  pa[1] = il__fa_pack(r.s[2 * kk][2], r.s[2 * kk][3]);
  pa[2] = il__fa_pack(r.s[2 * kk + 1][0], r.s[2 * kk + 1][1]);
  pa[3] = il__fa_pack(r.s[2 * kk + 1][2], r.s[2 * kk + 1][3]);
}

/* Lane's final rows: O / l (l summed over the quad: ql) to out. */
template <int D>
IL__HD void il__fa_lane_store(const il__cu_attn &a, const il__fa_smem<D> &sh, int64_t t0, int64_t h, int w, int lane,
                              const il__fa_lane<D> &r, const float *ql) {
  for (int half = 0; half < 2; half++) {
    const int row = 16 * w + (lane >> 2) + 8 * half;
    if (sh.seq[row] < 0) continue;
    float *o = (float *)((uint8_t *)a.out + (size_t)(t0 + row) * a.out_stride) + h * D;
    for (int nd = 0; nd < D / 8; nd++)
      for (int e = 0; e < 2; e++)
        o[8 * nd + il__fa_c_col(lane, 2 * half + e)] = ql[half] > 0.0f ? il__div(r.o[nd][2 * half + e], ql[half]) : 0.0f;
  }
}

/* Thread 0's choice of the next pass: the rows of the last pass are done; the first row not
 * done gives the sequence (pass_seq -1: none left), kmax the largest position of its rows, kmin
 * the first position its rows' windows reach (0 without a window): the tiles before kmin's are
 * skipped, as those after kmax's. */
template <int D>
IL__HD void il__fa_pass(const il__cu_attn &a, il__fa_smem<D> &sh, int tid) {
  if (tid) return;
  for (int i = 0; i < IL__FA_ROWS; i++)
    if (sh.seq[i] >= 0 && sh.seq[i] == sh.pass_seq) sh.done[i] = 1;
  sh.pass_seq = -1, sh.kmax = -1, sh.kmin = 0x7fffffff;
  for (int i = 0; i < IL__FA_ROWS; i++) {
    if (sh.seq[i] < 0 || sh.done[i]) continue;
    if (sh.pass_seq < 0) sh.pass_seq = sh.seq[i];
    if (sh.seq[i] != sh.pass_seq) continue;
    if (sh.pos[i] > sh.kmax) sh.kmax = sh.pos[i];
    const int32_t lo = a.window > 0 && sh.pos[i] - a.window + 1 > 0 ? sh.pos[i] - a.window + 1 : 0;
    if (lo < sh.kmin) sh.kmin = lo;
  }
  if (sh.pass_seq < 0) sh.kmin = 0;
}

/* Thread tid's part of reading the block-table entries of key tile p0 (up to kmax) of the pass. */
template <int D>
IL__HD void il__fa_table(const il__cu_attn &a, il__fa_smem<D> &sh, int32_t p0, int tid) {
  const int32_t last = p0 + IL__FA_KT - 1 < sh.kmax ? p0 + IL__FA_KT - 1 : sh.kmax;
  const int32_t b0 = p0 / a.block, nb = last / a.block - b0 + 1;
  if (tid >= nb) return;
  const size_t at = (size_t)sh.pass_seq * (size_t)a.max_blocks + (size_t)(b0 + tid);
  const int32_t blk = a.table[at];
  const bool ok = blk >= 0 && ((int64_t)blk + 1) * a.block <= a.n_cells;
  if (!ok && il__fault_claim(a.fault, IL__CU_FAULT_BLOCK))
    a.fault->launch = a.launch, a.fault->a = sh.pass_seq, a.fault->b = blk, a.fault->c = a.n_cells;
  sh.blk[tid] = ok ? blk : -1;
}

/* The largest position among warp w's rows of the pass (-1: none), for the warp's tile skip. */
template <int D>
IL__HD int32_t il__fa_warp_kmax(const il__fa_smem<D> &sh, int w) {
  int32_t k = -1;
  for (int i = 16 * w; i < 16 * w + 16; i++)
    if (sh.seq[i] == sh.pass_seq && sh.pos[i] > k) k = sh.pos[i];
  return k;
}

#ifndef __CUDA_ARCH__
/* ---- host emulation of the warp-wide instructions ---- */

static inline float il__fa_h2f(uint16_t h) { return il_fp16_to_f32(h); }

/* d = a b + c for the 32 lanes' fragments (A: 4 regs, B: 2 regs, C/D: 4 floats per lane). */
static inline void il__fa_emu_mma(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2],
                                  const float c[32][4]) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    for (int i = 0; i < 8; i++) A[il__fa_a_row(l, i)][il__fa_a_col(l, i)] = il__fa_h2f((uint16_t)(a[l][i / 2] >> (16 * (i & 1))));
    for (int i = 0; i < 4; i++) B[il__fa_b_row(l, i)][il__fa_b_col(l)] = il__fa_h2f((uint16_t)(b[l][i / 2] >> (16 * (i & 1))));
    for (int i = 0; i < 4; i++) C[il__fa_c_row(l, i)][il__fa_c_col(l, i)] = c[l][i];
  }
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++) {
      const int row = il__fa_c_row(l, i), col = il__fa_c_col(l, i);
      float acc = C[row][col];
      for (int k = 0; k < 16; k++) acc = fmaf(A[row][k], B[k][col], acc);
      d[l][i] = acc;
    }
}

/* ldmatrix.m8n8.x2(.trans).b16: rows[l] is lane l's row address (lanes 0-15 used). */
static inline void il__fa_emu_ldsm_x2(uint32_t out[32][2], const uint16_t *const rows[32], bool trans) {
  for (int l = 0; l < 32; l++)
    for (int j = 0; j < 2; j++) {
      uint16_t e[2];
      for (int k = 0; k < 2; k++) {
        const int r = trans ? 2 * (l & 3) + k : l >> 2, c = trans ? l >> 2 : 2 * (l & 3) + k;
        e[k] = rows[8 * j + r][c];
      }
      out[l][j] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
    }
}

/* The host run of CTA (tile bx of IL__FA_ROWS tokens, query head h): the kernel's steps with
 * the warp-wide instructions emulated, CTA steps for every thread in turn between barriers. */
template <int CT, bool VEC, int D>
static void il__fa_cta_host(const il__cu_attn &a, int64_t bx, int64_t h) {
  typedef il__fa_lane<D> L;
  il__fa_smem<D> *shp = new il__fa_smem<D>();
  il__fa_smem<D> &sh = *shp;
  L(*r)[32] = new L[IL__FA_WARPS][32];
  const int64_t t0 = bx * IL__FA_ROWS, kvh = h / ((int)a.n_heads / (int)a.n_kv_heads);
  const float scale2 = il__mul(a.scale, 1.4426950408889634f);
  for (int tid = 0; tid < IL__FA_THREADS; tid++) il__fa_rows(a, sh, t0, tid);
  for (int w = 0; w < IL__FA_WARPS; w++)
    for (int l = 0; l < 32; l++) il__fa_lane_begin(a, t0, h, w, l, r[w][l]);
  static thread_local uint32_t A[32][4], B[32][2];
  static thread_local float C[32][4], Dd[32][4];
  const uint16_t *rows[32];
  for (;;) {
    il__fa_pass(a, sh, 0);
    if (sh.pass_seq < 0) break;
    for (int32_t p0 = sh.kmin / IL__FA_KT * IL__FA_KT; p0 <= sh.kmax; p0 += IL__FA_KT) {
      for (int tid = 0; tid < IL__FA_THREADS; tid++) il__fa_table(a, sh, p0, tid);
      for (int tid = 0; tid < IL__FA_THREADS; tid++) il__fa_load<CT, VEC, D>(a, sh, kvh, p0, tid);
      for (int w = 0; w < IL__FA_WARPS; w++) {
        if (p0 > il__fa_warp_kmax(sh, w)) continue; /* the warp's causal skip */
        for (int nb = 0; nb < IL__FA_KT / 8; nb++) {
          for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) r[w][l].s[nb][i] = 0.0f;
          for (int kk = 0; kk < D / 16; kk++) {
            for (int l = 0; l < 32; l++) rows[l] = &sh.k[8 * nb + (l & 7)][16 * kk + 8 * ((l >> 3) & 1)];
            il__fa_emu_ldsm_x2(B, rows, false);
            for (int l = 0; l < 32; l++) {
              memcpy(A[l], r[w][l].qa[kk], sizeof A[l]);
              memcpy(C[l], r[w][l].s[nb], sizeof C[l]);
            }
            il__fa_emu_mma(Dd, A, B, C);
            for (int l = 0; l < 32; l++) memcpy(r[w][l].s[nb], Dd[l], sizeof Dd[l]);
          }
        }
        float rmax[32][2];
        for (int l = 0; l < 32; l++) il__fa_lane_mask(a, sh, scale2, p0, w, l, r[w][l], rmax[l]);
        float q1[32][2], q2[32][2];
        for (int l = 0; l < 32; l++)
          for (int k = 0; k < 2; k++) q1[l][k] = fmaxf(rmax[l][k], rmax[l ^ 1][k]);
        for (int l = 0; l < 32; l++)
          for (int k = 0; k < 2; k++) q2[l][k] = fmaxf(q1[l][k], q1[l ^ 2][k]);
        for (int l = 0; l < 32; l++) il__fa_lane_softmax(r[w][l], q2[l]);
        for (int kk = 0; kk < IL__FA_KT / 16; kk++) {
          for (int l = 0; l < 32; l++) il__fa_lane_pa(r[w][l], kk, A[l]);
          for (int nd = 0; nd < D / 8; nd++) {
            for (int l = 0; l < 32; l++) rows[l] = &sh.v[16 * kk + (l & 7) + 8 * ((l >> 3) & 1)][8 * nd];
            il__fa_emu_ldsm_x2(B, rows, true);
            for (int l = 0; l < 32; l++) memcpy(C[l], r[w][l].o[nd], sizeof C[l]);
            il__fa_emu_mma(Dd, A, B, C);
            for (int l = 0; l < 32; l++) memcpy(r[w][l].o[nd], Dd[l], sizeof Dd[l]);
          }
        }
      }
    }
  }
  for (int w = 0; w < IL__FA_WARPS; w++) {
    float s1[32][2], s2[32][2];
    for (int l = 0; l < 32; l++)
      for (int k = 0; k < 2; k++) s1[l][k] = il__add(r[w][l].l[k], r[w][l ^ 1].l[k]);
    for (int l = 0; l < 32; l++)
      for (int k = 0; k < 2; k++) s2[l][k] = il__add(s1[l][k], s1[l ^ 2][k]);
    for (int l = 0; l < 32; l++) il__fa_lane_store(a, sh, t0, h, w, l, r[w][l], s2[l]);
  }
  delete[] r;
  delete shp;
}

/* The host run of a whole call; false for a cell type or head size the kernel does not take. */
template <int D>
static bool il__fa_call_host_d(const il__cu_attn &a) {
  const bool vec = il__fd_vec_ok(a);
  for (int64_t bx = 0; bx * IL__FA_ROWS < a.n_tok; bx++)
    for (int64_t h = 0; h < a.n_heads; h++) {
      if (a.kv_type == IL_DTYPE_F16 && vec) il__fa_cta_host<IL_DTYPE_F16, true, D>(a, bx, h);
      else if (a.kv_type == IL_DTYPE_F16) il__fa_cta_host<IL_DTYPE_F16, false, D>(a, bx, h);
      else if (a.kv_type == IL_DTYPE_F32 && vec) il__fa_cta_host<IL_DTYPE_F32, true, D>(a, bx, h);
      else if (a.kv_type == IL_DTYPE_F32) il__fa_cta_host<IL_DTYPE_F32, false, D>(a, bx, h);
      else if (a.kv_type == IL_DTYPE_Q8_0) il__fa_cta_host<IL_DTYPE_Q8_0, false, D>(a, bx, h);
      else return false;
    }
  return true;
}

static inline bool il__fa_call_host(const il__cu_attn &a) {
  if (a.head_dim == 32) return il__fa_call_host_d<32>(a);
  if (a.head_dim == 64) return il__fa_call_host_d<64>(a);
  if (a.head_dim == 128) return il__fa_call_host_d<128>(a);
  return false;
}
#endif

#endif
