/* tests/test_attn_paged: the attention kernels reading a paged cache managed by engine/kvpages.
 *
 * A prompt is written into sequence 0, forked twice (copy-on-write), each branch grows with its
 * own tokens (the copies kvpages asks for are performed on the simulated cache), one branch is
 * truncated and regrown; sequence 3 holds the same tokens as branch 1 written independently, and
 * a contiguous cache (block = n_ctx) holds every sequence too. For every kernel and 1 and 2
 * threads: attention through the paged table equals attention through the contiguous one
 * bitwise, and the forked branch equals the independent sequence bitwise (the kernels' key
 * order does not depend on the block layout).
 */
#include "backend/cpu/attn.h"
#include "engine/kvpages.h"
#include "harness.h"

#define HD 64
#define NKV 2
#define NH 8
#define KVD (NKV * HD)
#define BL 16
#define NB 64
#define MB 16
#define NS 4
#define CTX (MB * BL)

static float pk[NB * BL][KVD], pv[NB * BL][KVD]; /* paged cache */
static float ck[NS * CTX][KVD], cv[NS * CTX][KVD]; /* contiguous cache */
static uint64_t rng = 0xfeedULL;

/* Writes positions [from, to) of seq with fresh random rows (or copies of seq `like`'s rows). */
static void write_rows(il_kvpages *p, int s, int from, int to, int like) {
  il_kvpages_copy cp[1];
  int nc = 0;
  IL_CHECK_OK(il_kvpages_reserve(p, s, to, cp, &nc));
  if (nc) {
    memcpy(pk[cp[0].dst * BL], pk[cp[0].src * BL], sizeof(float) * KVD * (size_t)cp[0].n_pos);
    memcpy(pv[cp[0].dst * BL], pv[cp[0].src * BL], sizeof(float) * KVD * (size_t)cp[0].n_pos);
  }
  for (int pos = from; pos < to; pos++) {
    int64_t cell;
    IL_CHECK_OK(il_kvpages_slot(p, s, pos, &cell));
    for (int i = 0; i < KVD; i++) {
      ck[s * CTX + pos][i] = like >= 0 ? ck[like * CTX + pos][i] : il_test_randf(&rng);
      cv[s * CTX + pos][i] = like >= 0 ? cv[like * CTX + pos][i] : il_test_randf(&rng);
      pk[cell][i] = ck[s * CTX + pos][i];
      pv[cell][i] = cv[s * CTX + pos][i];
    }
  }
}

int main(void) {
  il_cpu_attn_par_min(0); /* small shapes run threaded too */
  il_kvpages *p;
  IL_CHECK_OK(il_kvpages_new(NB, BL, MB, NS, sizeof(float) * KVD * 2, &p));
  IL_CHECK_OK(il_kvpages_seq_add(p, 0));
  write_rows(p, 0, 0, 75, -1); /* the prompt: 4 full blocks and 11 positions */
  IL_CHECK_OK(il_kvpages_seq_fork(p, 0, 1));
  IL_CHECK_OK(il_kvpages_seq_fork(p, 0, 2));
  for (int pos = 0; pos < 75; pos++) { /* the forks share the prompt: same rows in the contiguous copy */
    memcpy(ck[CTX + pos], ck[pos], sizeof ck[0]);
    memcpy(cv[CTX + pos], cv[pos], sizeof cv[0]);
    memcpy(ck[2 * CTX + pos], ck[pos], sizeof ck[0]);
    memcpy(cv[2 * CTX + pos], cv[pos], sizeof cv[0]);
  }
  write_rows(p, 0, 75, 85, -1);
  write_rows(p, 1, 75, 98, -1);
  write_rows(p, 2, 75, 80, -1);
  IL_CHECK_OK(il_kvpages_seq_truncate(p, 2, 60));
  write_rows(p, 2, 60, 140, -1);
  IL_CHECK_OK(il_kvpages_seq_add(p, 3));
  write_rows(p, 3, 0, 98, 1); /* sequence 1's tokens, written independently */
  IL_CHECK_OK(il_kvpages_check(p));
  il_kvpages_stats st;
  il_kvpages_stats_get(p, 1, &st);
  IL_CHECK(st.blocks_shared >= 3); /* the prompt's 3 full blocks left shared by 0 and 1 */

  /* batch: decode rows of 0 and 2, the last 7 rows of 1 and the same rows of 3 (same queries) */
  int32_t seq[16], pos[16];
  int n = 0;
  seq[n] = 0, pos[n++] = 84;
  seq[n] = 2, pos[n++] = 139;
  for (int i = 0; i < 7; i++) seq[n] = 1, pos[n++] = 91 + i;
  for (int i = 0; i < 7; i++) seq[n] = 3, pos[n++] = 91 + i;
  static float q[16][NH * HD], out_p[16][NH * HD], out_c[16][NH * HD];
  for (int t = 0; t < n; t++)
    for (int i = 0; i < NH * HD; i++) q[t][i] = t >= 9 ? q[t - 7][i] : il_test_randf(&rng);
  int32_t ptable[NS * MB], ctable[NS] = {0, 1, 2, 3};
  il_kvpages_export(p, ptable);
  il_cpu_attn_args pa = {.out = out_p[0], .q = q[0], .seq = seq, .pos = pos, .n_tok = n, .k = pk, .v = pv,
                         .kv_type = IL_DTYPE_F32, .kv_row_stride = sizeof pk[0], .n_cells = NB * BL,
                         .block_table = ptable, .block = BL, .max_blocks = MB, .n_seq = NS, .n_heads = NH,
                         .n_kv_heads = NKV, .head_dim = HD, .scale = 0.125f, .slice = 3};
  il_cpu_attn_args ca = pa;
  ca.out = out_c[0];
  ca.k = ck;
  ca.v = cv;
  ca.n_cells = NS * CTX;
  ca.block_table = ctable;
  ca.block = CTX;
  ca.max_blocks = 1;
  int nk;
  const il_cpu_attn_kernel *ks = il_cpu_attn_kernels(&nk);
  for (int th = 1; th <= 2; th++) {
    il_pool *pool;
    IL_CHECK_OK(il_pool_new(th, &pool));
    for (int ki = 0; ki < nk; ki++) {
      const size_t wp = ks[ki].workspace(&pa, th), wc = ks[ki].workspace(&ca, th);
      void *w = malloc(wp > wc ? wp : wc);
      memset(out_p, 0, sizeof out_p);
      memset(out_c, 0, sizeof out_c);
      IL_CHECK_OK(ks[ki].run(pool, &pa, w, wp));
      IL_CHECK_OK(ks[ki].run(pool, &ca, w, wc));
      free(w);
      const int same_layout = memcmp(out_p, out_c, sizeof(float) * NH * HD * (size_t)n) == 0;
      const int same_fork = memcmp(out_p[2], out_p[9], sizeof(float) * NH * HD * 7) == 0;
      if (!same_layout || !same_fork)
        fprintf(stderr, "%s, %d threads: paged == contiguous %d, fork == independent %d\n", ks[ki].name, th,
                same_layout, same_fork);
      IL_CHECK(same_layout);
      IL_CHECK(same_fork);
      IL_CHECK(out_p[0][0] != 0 || out_p[0][1] != 0);
    }
    il_pool_free(pool);
  }
  il_kvpages_free(p);
  return il_test_finish();
}
