/* backend/cuda/sample: the per-row work of the sample op (backend.h's il_sample_args), shared by
 * the kernel (sample.cu), the fake module and tests/test_cuda_sample.c as its host twin.
 *
 * A row is ranked by the seam's order: descending logit, the lower id first on ties. Greedy is
 * the argmax (any reduction order gives the same pair, so the kernel's tree is free to differ
 * from this loop). With a temperature the row is walked in that order without a sort or any
 * scratch: each next candidate is found by one scan for the best one after the previous, so a
 * walk of m candidates costs m scans of the row. The sums are formed in the walk's order and in
 * double, term for term as the CPU backend forms them (backend/cpu/cpu.c il__sample_row), which
 * is what makes the twin equal the CPU token for token.
 * A row holding a NaN or infinite logit gives -1 (the seam's rule; the caller reads the row to
 * say which).
 * Not for: the engine's sampler chain (min-p, penalties, grammars: engine/sampler.c).
 */
#ifndef IL_BACKEND_CUDA_SAMPLE_CUH
#define IL_BACKEND_CUDA_SAMPLE_CUH

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Plain C for the host (tests/test_cuda_sample.c builds without the toolkit), both sides under
 * nvcc. */
#ifdef __CUDACC__
#define IL__SMP_FN __host__ __device__ static inline
#else
#define IL__SMP_FN static inline
#endif

/* a comes before b in the seam's order (finite logits) */
IL__SMP_FN bool il__cu_smp_before(float la, int64_t ia, float lb, int64_t ib) {
  return la > lb || (la == lb && ia < ib);
}

/* The first candidate after (pl, pi) in the order; (pl, pi) = (+Inf, -1) gives the first. */
IL__SMP_FN int64_t il__cu_smp_next(const float *l, int64_t n, float pl, int64_t pi) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (il__cu_smp_before(pl, pi, l[i], i) && (best < 0 || il__cu_smp_before(l[i], i, l[best], best))) best = i;
  return best;
}

/* -1 when a logit of l[n] is not finite, else the argmax with the lowest id on ties. */
IL__SMP_FN int64_t il__cu_smp_argmax(const float *l, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(l[i])) return -1;
    if (l[i] > l[best]) best = i;
  }
  return best;
}

/* The kernel's argmax in two parts, so the host can run its tree (test_cuda_sample): lane t of
 * nt scans l[t], l[t + nt], ... keeping the first of equals and whether any is non-finite
 * (*bi = -1 when the lane has no element); join folds another lane's result into one. */
IL__SMP_FN void il__cu_smp_lane(const float *l, int64_t n, int t, int nt, float *bv, int64_t *bi, int *bad) {
  *bi = -1, *bv = 0, *bad = 0;
  for (int64_t i = t; i < n; i += nt) {
    const float v = l[i];
    *bad |= !isfinite(v);
    if (*bi < 0 || v > *bv) *bi = i, *bv = v;
  }
}
IL__SMP_FN void il__cu_smp_join(float *bv, int64_t *bi, int *bad, float ov, int64_t oi, int obad) {
  if (oi >= 0 && (*bi < 0 || il__cu_smp_before(ov, oi, *bv, *bi))) *bv = ov, *bi = oi;
  *bad |= obad;
}

/* The candidate's weight at temperature t against the row's maximum mx, as the CPU forms it. */
IL__SMP_FN double il__cu_smp_w(float li, float mx, float t) { return exp(((double)li - mx) / t); }

/* The token il_sample_args picks from l[n] with draw u, given its argmax (il__cu_smp_argmax,
 * not -1). */
IL__SMP_FN int32_t il__cu_smp_row(const float *l, int64_t n, float u, float temp, int32_t top_k,
                                                  float top_p, int64_t best) {
  if (!(temp > 0)) return (int32_t)best;
  const float mx = l[best];
  const int64_t k = top_k > 0 && top_k < n ? top_k : n;
  double total = 0;
  int64_t c = best;
  for (int64_t i = 0; i < k; i++) {
    if (i > 0) c = il__cu_smp_next(l, n, l[c], c);
    total += il__cu_smp_w(l[c], mx, temp);
  }
  /* the shortest prefix reaching top_p of the total (at least one) */
  int64_t m = 0, last;
  c = best;
  double kept = 0;
  while (m < k && (m == 0 || kept < (double)top_p * total)) {
    if (m > 0) c = il__cu_smp_next(l, n, l[c], c);
    kept += il__cu_smp_w(l[c], mx, temp), m++;
  }
  last = c;
  const double r = (double)u * kept;
  double cum = 0;
  c = best;
  for (int64_t i = 0; i < m; i++) {
    if (i > 0) c = il__cu_smp_next(l, n, l[c], c);
    cum += il__cu_smp_w(l[c], mx, temp);
    if (cum > r) return (int32_t)c;
  }
  return (int32_t)last;
}

#endif
