/* tests/test_cuda_attn_twin: the flash attention kernels of the CUDA backend, run on the host.
 *
 * No GPU is needed. Flash-decoding's per-CTA work (src/backend/cuda/attn_fd.cuh) is
 * __host__ __device__ code with a fixed operation order, so its host twin computes what the
 * device computes, bit for bit; the prefill kernel's tile loop (attn_fa.cuh) runs here over
 * host emulations of mma.sync m16n8k16 and ldmatrix written from the PTX ISA's fragment tables.
 * Both are compared with the scalar CPU reference (backend/cpu/attn.c, "naive", scalar ISA)
 * over odd context lengths, split counts, GQA ratios, head sizes, paged and contiguous caches
 * and every KV cell type; the decoder's byte counters check that each K/V byte of a head is read
 * once per token and KV head, and block-table reads stay at one per block per tile.
 */
#include "cuda_attn_problem.h"

/* The first position token t sees: 0, or with a window pos - window + 1. */
static int32_t first(const Problem &p, int64_t t) {
  const int32_t pos = p.pos[(size_t)t];
  return p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
}

/* The decoder's twin on p with S splits: matches the reference, reads every K/V byte of a head
 * once per token that reaches it, and each reached table entry at most once per tile. */
static void check_fd(Problem &p, int S, const char *what) {
  il__cu_fault fault = {};
  std::vector<float> out;
  il__cu_attn a = args_of(p, out, &fault);
  std::vector<float> ws((size_t)(p.n_tok * p.n_heads * S * il__fd_part(p.hd)), NAN);
  std::vector<uint8_t> tk(p.k.size(), 0), tv(p.v.size(), 0);
  std::vector<uint32_t> tt(p.table.size(), 0);
  il__fd_touch touch = {tk.data(), tv.data(), tt.data()};
  IL_CHECK(il__fd_call_host(a, ws.data(), S, &touch));
  IL_CHECK_INT(fault.kind, 0);
  const double e = max_err(out, p.ref);
  if (!(e <= 2e-5)) fprintf(stderr, "%s: S=%d max error %g\n", what, S, e);
  IL_CHECK(e <= 2e-5);
  /* expected reads: tokens reaching the cell, for the bytes of every head's row */
  std::vector<uint8_t> want(p.k.size(), 0);
  const size_t row = il_dtype_row_size(p.kt, p.n_kv * p.hd);
  for (int64_t t = 0; t < p.n_tok; t++)
    for (int32_t q = first(p, t); q <= p.pos[(size_t)t]; q++) {
      const size_t cell = (size_t)p.table[(size_t)(p.seq[(size_t)t] * p.max_blocks + q / p.block)] * p.block + q % p.block;
      for (size_t b = 0; b < row; b++) want[cell * p.stride + b]++;
    }
  IL_CHECK(tk == want);
  IL_CHECK(tv == want);
  const int T = il__fd_tile(p.hd);
  uint64_t reads = 0, bound = 0;
  bool reached = true;
  for (int64_t t = 0; t < p.n_tok; t++) {
    const int64_t n = p.pos[(size_t)t] + 1;
    bound += (uint64_t)p.n_kv * (uint64_t)((n + T - 1) / T + (n + p.block - 1) / p.block + S);
    for (int64_t b = first(p, t) / p.block; b <= p.pos[(size_t)t] / p.block; b++)
      reached = reached && tt[(size_t)(p.seq[(size_t)t] * p.max_blocks + b)] > 0;
  }
  for (uint32_t c : tt) reads += c;
  IL_CHECK(reached);
  IL_CHECK(reads <= bound);
}

static void test_exp2(void) {
  double worst = 0;
  for (float x = -124.0f; x <= 0.0f; x += 0.0137f) {
    const double r = exp2((double)x), e = fabs((double)il__exp2(x) - r) / r;
    worst = e > worst ? e : worst;
  }
  printf("il__exp2: max relative error %.3g on [-124, 0]\n", worst);
  IL_CHECK(worst < 4e-7);
  IL_CHECK(il__exp2(-INFINITY) == 0.0f);
  IL_CHECK(il__exp2(0.0f) == 1.0f);
  IL_CHECK(il__exp2(-200.0f) == 0.0f);
  IL_CHECK(isnan(il__exp2(NAN)));
}

static void test_decode(void) {
  const il_dtype types[] = {IL_DTYPE_F32, IL_DTYPE_F16, IL_DTYPE_BF16, IL_DTYPE_Q8_0};
  int cases = 0;
  for (il_dtype kt : types) {
    /* decode of 3 sequences at odd lengths; GQA 4, head 64, paged blocks of 16 */
    const int32_t lens3[] = {1, 77, 333};
    Problem p = make(1, 8, 2, 64, kt, 3, 400, 16, 0, lens3);
    for (int S : {1, 2, 5, 32}) check_fd(p, S, il_dtype_name(kt)), cases++;
    /* one sequence, contiguous (one block of the whole context), GQA 8, head 128 */
    const int32_t lens1[] = {1001};
    Problem c = make(1, 16, 2, 128, kt, 1, 1024, 1024, 0, lens1);
    for (int S : {1, 7, il__fd_splits(1, 2, 1024, 128)}) check_fd(c, S, il_dtype_name(kt)), cases++;
    /* a prefill chunk of 5 tokens per sequence, no GQA, head 256 (16-position tiles), blocks of 24 */
    const int32_t lens2[] = {29, 100};
    Problem f = make(5, 2, 2, 256, kt, 2, 120, 24, 0, lens2);
    for (int S : {1, 3}) check_fd(f, S, il_dtype_name(kt)), cases++;
    if (kt != IL_DTYPE_Q8_0) {
      /* rows not 16-byte aligned (head 12, a pad of one element, which keeps the CPU reference's
       * loads aligned): the element loader; GQA 3 */
      const int32_t lens4[] = {50, 9};
      const size_t pad = kt == IL_DTYPE_F32 ? 4 : 2;
      Problem u = make(1, 6, 2, 12, kt, 2, 64, 8, pad, lens4);
      il__cu_attn a = args_of(u, u.ref /* unused */, nullptr);
      IL_CHECK(!il__fd_vec_ok(a));
      Problem u2 = make(1, 6, 2, 12, kt, 2, 64, 8, pad, lens4);
      for (int S : {1, 4}) check_fd(u2, S, il_dtype_name(kt)), cases++;
    }
  }
  printf("flash-decoding twin: %d cases against the scalar CPU reference\n", cases);
}

/* Bad inputs: a block-table entry outside the cache, a sequence outside the table. */
static void test_decode_faults(void) {
  const int32_t lens[] = {40};
  Problem p = make(1, 4, 1, 32, IL_DTYPE_F16, 1, 64, 16, 0, lens);
  p.table[1] = 100000;
  il__cu_fault fault = {};
  std::vector<float> out;
  il__cu_attn a = args_of(p, out, &fault);
  std::vector<float> ws((size_t)(p.n_tok * p.n_heads * 2 * il__fd_part(p.hd)));
  IL_CHECK(il__fd_call_host(a, ws.data(), 2, nullptr));
  IL_CHECK_INT(fault.kind, IL__CU_FAULT_BLOCK);
  IL_CHECK_INT(fault.b, 100000);
  for (float x : out) IL_CHECK(isfinite(x));
  p.seq[0] = 3;
  il__cu_fault f2 = {};
  a = args_of(p, out, &f2);
  IL_CHECK(il__fd_call_host(a, ws.data(), 2, nullptr));
  IL_CHECK_INT(f2.kind, IL__CU_FAULT_SEQ);
  IL_CHECK_INT(f2.b, 3);
}

/* The fragment maps cover each matrix element exactly once (a transcription slip would leave
 * an element to two lanes and another to none), and the emulated mma and ldmatrix agree with
 * a plain matrix product and the plain tile on random data. */
static void test_fragments(void) {
  int a[16][16] = {}, b[16][8] = {}, c[16][8] = {};
  for (int l = 0; l < 32; l++) {
    for (int i = 0; i < 8; i++) a[il__fa_a_row(l, i)][il__fa_a_col(l, i)]++;
    for (int i = 0; i < 4; i++) b[il__fa_b_row(l, i)][il__fa_b_col(l)]++, c[il__fa_c_row(l, i)][il__fa_c_col(l, i)]++;
  }
  bool once = true;
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) once = once && a[r][k] == 1 && (k >= 8 || (b[r][k] == 1 && c[r][k] == 1));
  IL_CHECK(once);
  /* lane 5: group 1, thread 1 -> A rows 1/9, columns 2,3 and 10,11 (the PTX table's example) */
  IL_CHECK_INT(il__fa_a_row(5, 0), 1);
  IL_CHECK_INT(il__fa_a_row(5, 2), 9);
  IL_CHECK_INT(il__fa_a_col(5, 1), 3);
  IL_CHECK_INT(il__fa_a_col(5, 4), 10);
  IL_CHECK_INT(il__fa_b_row(5, 3), 11);
  IL_CHECK_INT(il__fa_c_row(5, 3), 9);
  float A[16][16], B[16][8], C[16][8];
  uint32_t fa[32][4] = {}, fb[32][2] = {};
  float fc[32][4], fd[32][4];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) A[r][k] = il_fp16_to_f32(il_f32_to_fp16(frand()));
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 8; n++) B[k][n] = il_fp16_to_f32(il_f32_to_fp16(frand())), C[k][n] = frand();
  for (int l = 0; l < 32; l++) {
    for (int i = 0; i < 8; i++) fa[l][i / 2] |= (uint32_t)il_f32_to_fp16(A[il__fa_a_row(l, i)][il__fa_a_col(l, i)]) << (16 * (i & 1));
    for (int i = 0; i < 4; i++) fb[l][i / 2] |= (uint32_t)il_f32_to_fp16(B[il__fa_b_row(l, i)][il__fa_b_col(l)]) << (16 * (i & 1));
    for (int i = 0; i < 4; i++) fc[l][i] = C[il__fa_c_row(l, i)][il__fa_c_col(l, i)];
  }
  il__fa_emu_mma(fd, fa, fb, fc);
  double e = 0;
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++) {
      const int r = il__fa_c_row(l, i), n = il__fa_c_col(l, i);
      double want = C[r][n];
      for (int k = 0; k < 16; k++) want += (double)A[r][k] * B[k][n];
      e = fmax(e, fabs(want - fd[l][i]));
    }
  IL_CHECK(e < 1e-5);
  /* ldmatrix of rows of a 16 x 8 tile: plain gives B of K^T (element (n, k) at B[k][n]) */
  uint16_t tile[16][8];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 8; k++) tile[r][k] = (uint16_t)(r * 8 + k);
  const uint16_t *rows[32];
  for (int l = 0; l < 32; l++) rows[l] = tile[l & 15];
  uint32_t out[32][2];
  il__fa_emu_ldsm_x2(out, rows, false);
  IL_CHECK_INT(out[5][0] & 0xFFFF, 1 * 8 + 2);        /* matrix 0, row 1, column 2 */
  IL_CHECK_INT(out[5][1] >> 16, (8 + 1) * 8 + 3);    /* matrix 1, row 1, column 3 */
  il__fa_emu_ldsm_x2(out, rows, true);
  IL_CHECK_INT(out[5][0] & 0xFFFF, 2 * 8 + 1);        /* transposed: row 2, column 1 */
  IL_CHECK_INT(out[5][1] >> 16, (8 + 3) * 8 + 1);
}

static void check_fa(Problem &p, const char *what) {
  il__cu_fault fault = {};
  std::vector<float> out;
  il__cu_attn a = args_of(p, out, &fault);
  IL_CHECK(il__fa_call_host(a));
  IL_CHECK_INT(fault.kind, 0);
  const std::vector<float> r16 = reference(p, true);
  const double e = max_err(out, r16), e32 = max_err(out, p.ref);
  if (!(e <= 3e-3)) fprintf(stderr, "%s: max error %g against the f16-rounded reference\n", what, e);
  IL_CHECK(e <= 3e-3);
  IL_CHECK(e32 <= 2e-2);
}

static void test_prefill(void) {
  int cases = 0;
  for (il_dtype kt : {IL_DTYPE_F16, IL_DTYPE_F32, IL_DTYPE_Q8_0}) {
    /* one prompt of 100 tokens (two tiles, the second part full), head 128, GQA 4, paged by 16 */
    const int32_t l1[] = {100};
    Problem p = make(100, 8, 2, 128, kt, 1, 128, 16, 0, l1);
    check_fa(p, "prompt 100, head 128"), cases++;
    /* chunked prefill: 40 tokens at positions 157..196 of a 197-position sequence, head 64,
     * contiguous cache; and two sequences' chunks sharing one 64-row tile (two passes) */
    const int32_t l2[] = {197};
    Problem c = make(40, 4, 4, 64, kt, 1, 256, 256, 0, l2);
    check_fa(c, "chunk at 157, head 64"), cases++;
    const int32_t l3[] = {30, 77};
    Problem m = make(20, 4, 1, 64, kt, 2, 96, 8, 0, l3);
    check_fa(m, "two sequences in a tile"), cases++;
    const int32_t l5[] = {33};
    Problem h32 = make(33, 2, 1, 32, kt, 1, 40, 40, 0, l5);
    check_fa(h32, "head 32"), cases++;
  }
  /* F16 rows that are not 16-byte aligned: the element loader */
  const int32_t l4[] = {70};
  Problem u = make(70, 2, 1, 64, IL_DTYPE_F16, 1, 80, 16, 2, l4);
  {
    il__cu_fault f = {};
    std::vector<float> o;
    IL_CHECK(!il__fd_vec_ok(args_of(u, o, &f)));
  }
  check_fa(u, "unaligned rows"), cases++;
  printf("prefill tile loop (emulated mma.sync/ldmatrix): %d cases against the scalar CPU reference\n", cases);
}

/* Sliding windows (gemma3's local layers): both kernels against the reference with the window,
 * over a paged table, a contiguous one, and the engine's ring (one block per sequence that every
 * table entry of the sequence names); windows shorter than a tile, spanning tiles, and longer
 * than some sequences. The decoder's byte counters: positions before the window are not read. */
static void test_window(void) {
  int cases = 0;
  for (il_dtype kt : {IL_DTYPE_F16, IL_DTYPE_F32, IL_DTYPE_Q8_0}) {
    const int32_t lens3[] = {1, 77, 333};
    Problem d = make(1, 8, 2, 64, kt, 3, 400, 16, 0, lens3);
    windowed(d, 24, false);
    for (int S : {1, 2, 5, 32}) check_fd(d, S, "decode, window 24, paged"), cases++;
    Problem r = make(1, 8, 2, 64, kt, 3, 400, 40, 0, lens3);
    windowed(r, 24, true);
    for (int S : {1, 3}) check_fd(r, S, "decode, window 24, ring of 40"), cases++;
    const int32_t l1[] = {100};
    Problem p = make(100, 8, 2, 128, kt, 1, 128, 16, 0, l1);
    windowed(p, 24, false);
    check_fa(p, "prompt 100, window 24"), cases++;
    const int32_t l2[] = {197};
    Problem c = make(40, 4, 4, 64, kt, 1, 256, 256, 0, l2);
    windowed(c, 90, false);
    check_fa(c, "chunk at 157, window 90 (two tiles)"), cases++;
    Problem g = make(40, 4, 4, 64, kt, 1, 256, 64, 0, l2);
    windowed(g, 24, true);
    check_fa(g, "chunk at 157, window 24, ring of 64"), cases++;
    for (int S : {1, 4}) check_fd(g, S, "chunk at 157, window 24, ring of 64"), cases++;
    const int32_t l3[] = {30, 77};
    Problem m = make(20, 4, 1, 64, kt, 2, 96, 8, 0, l3);
    windowed(m, 40, false);
    check_fa(m, "two sequences in a tile, window 40"), cases++;
  }
  printf("sliding window: %d cases of both kernels against the scalar CPU reference\n", cases);
}

int main(void) {
  test_exp2();
  test_window();
  test_fragments();
  test_prefill();
  test_decode();
  test_decode_faults();
  return il_test_finish();
}
