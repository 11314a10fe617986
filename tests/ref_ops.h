/* tests/ref_ops.h: the plain scalar pieces the tests' reference forwards share (test_archs,
 * test_moe): a built-in model's tensors by GGUF name, a double-accumulated matvec and RMSNorm.
 * They share no code with src/model, so a reference built from them checks the engine, not
 * itself. */
#ifndef IL_TESTS_REF_OPS_H
#define IL_TESTS_REF_OPS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/llama.h"

/* The model's tensor `name` (F32: the built-in models are generated so), NULL when absent. */
static inline const float *tensor(const il_model *m, const char *name) {
  for (int64_t i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return m->tensors[i].type == IL_DTYPE_F32 ? m->tensors[i].data : NULL;
  return NULL;
}

/* Layer l's tensor "blk.l.suffix". */
static inline const float *lt(const il_model *m, int l, const char *suffix) {
  char name[96];
  snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
  return tensor(m, name);
}

/* y[r] = sum_k w[r][k] x[k], w rows of n_in, summed in double */
static inline void matvec(const float *w, const float *x, float *y, int n_in, int n_out) {
  for (int r = 0; r < n_out; r++) {
    double acc = 0;
    for (int k = 0; k < n_in; k++) acc += (double)w[(size_t)r * n_in + k] * x[k];
    y[r] = (float)acc;
  }
}

static inline void rmsnorm(float *y, const float *x, const float *g, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  const double s = 1.0 / sqrt(ss / n + eps);
  for (int i = 0; i < n; i++) y[i] = (float)(x[i] * s * g[i]);
}

#endif
