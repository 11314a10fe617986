/* tests/test_cuda_sample: the CUDA sample op's per-row work (src/backend/cuda/sample.cuh), run
 * on the host as the kernel's twin, against the CPU: the CPU backend's sample op for every
 * setting of il_sample_args, the engine's sampler (engine/sampler.c) for greedy.
 *
 * No GPU and no toolkit are needed: the header is plain C off nvcc. Rows are random, with
 * coarse values (many ties, the lower id must win) or fine ones, widths from 1 to a few
 * thousand; the draws come from the engine sampler's own seeded generator
 * (il_sampler_uniform), the value the engine would pass as u. Every (row, setting, draw) must
 * give the same token id on both sides; a row with a NaN or an infinity gives -1 on both. The
 * kernel's argmax tree (256 lanes, then shared-memory halving) runs here in sequence and must
 * equal the plain argmax on every row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/sample.cuh"
#include "backend/registry.h"
#include "engine/sampler.h"
#include "harness.h"

static uint64_t rng = 31;

/* The twin of one row, as the kernel composes it (argmax first; -1 on a non-finite logit). */
static int32_t twin(const float *l, int64_t n, float u, const il_sample_args *a) {
  const int64_t best = il__cu_smp_argmax(l, n);
  return best < 0 ? -1 : il__cu_smp_row(l, n, u, a->temperature, a->top_k, a->top_p, best);
}

/* The kernel's argmax as its CTA computes it: 256 lanes' strided scans, then the shared-memory
 * tree (sample.cu), here in sequence; -1 when a logit is not finite. */
static int64_t tree_argmax(const float *l, int64_t n) {
  enum { NT = 256 };
  float v[NT];
  int64_t id[NT];
  int bad[NT];
  for (int t = 0; t < NT; t++) il__cu_smp_lane(l, n, t, NT, &v[t], &id[t], &bad[t]);
  for (int s = NT / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; t++) il__cu_smp_join(&v[t], &id[t], &bad[t], v[t + s], id[t + s], bad[t + s]);
  return bad[0] ? -1 : id[0];
}

static void fill(float *l, int64_t n, int coarse) {
  for (int64_t i = 0; i < n; i++) {
    const float v = il_test_randf(&rng) * 6.0f;
    l[i] = coarse ? roundf(v) * 0.5f : v;
  }
}

int main(void) {
  il_backend_opts o = {.threads = 1, .isa = "scalar"};
  il_backend *cpu = NULL;
  IL_CHECK_OK(il_backend_open("cpu", &o, &cpu));
  if (!cpu) return il_test_finish();
  static const int64_t widths[] = {1, 2, 7, 50, 257, 1031, 2053};
  static const il_sample_args settings[] = {
      {0, 0, 1},       {0.3f, 0, 1},     {1.0f, 0, 1},  {2.5f, 0, 1},     {1.0f, 1, 1},     {0.7f, 3, 1},
      {1.0f, 40, 1},   {1.3f, 0, 0.5f},  {0.8f, 0, 0.9f}, {1.0f, 0, 0.05f}, {0.5f, 10, 0.9f}, {2.0f, 7, 0.3f},
      {1.0f, 5000, 1}, {1e-3f, 0, 1},
  };
  enum { NR = 6 };
  const int ns = (int)(sizeof settings / sizeof settings[0]);
  long compared = 0, greedy = 0, sampled_not_argmax = 0;
  for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
    const int64_t n = widths[w];
    float *l = malloc(sizeof(float) * (size_t)(NR * n));
    IL_CHECK(l != NULL);
    il_tensor L, U, IDS;
    IL_CHECK_OK(il_backend_tensor_new(cpu, IL_MEM_ACTIVATIONS, NR, n, IL_DTYPE_F32, "logits", &L));
    IL_CHECK_OK(il_backend_tensor_new(cpu, IL_MEM_ACTIVATIONS, 1, NR, IL_DTYPE_F32, "draws", &U));
    IL_CHECK_OK(il_backend_tensor_new(cpu, IL_MEM_ACTIVATIONS, 1, NR, IL_DTYPE_I32, "ids", &IDS));
    for (int coarse = 0; coarse < 2; coarse++)
      for (uint64_t seed = 1; seed <= 3; seed++) {
        fill(l, NR * n, coarse);
        IL_CHECK_OK(cpu->ops->upload(cpu, L, l, sizeof(float) * (size_t)(NR * n)));
        /* the engine's generator gives the draws, as its requests would */
        il_sampler_params sp = {.temp = 1, .top_p = 1, .repeat_penalty = 1, .seed = seed * 977 + (uint64_t)w};
        il_sampler *s = NULL;
        IL_CHECK_OK(il_sampler_new(&sp, (int32_t)n, &s));
        for (int c = 0; c < ns; c++) {
          float u[NR];
          for (int r = 0; r < NR; r++) u[r] = il_sampler_uniform(s);
          IL_CHECK_OK(cpu->ops->upload(cpu, U, u, sizeof u));
          IL_CHECK_OK(cpu->ops->sample(cpu, IDS, L, U, &settings[c]));
          int32_t want[NR];
          IL_CHECK_OK(cpu->ops->download(cpu, want, IDS, sizeof want));
          for (int r = 0; r < NR; r++) {
            const float *row = l + (size_t)r * (size_t)n;
            const int32_t got = twin(row, n, u[r], &settings[c]);
            if (c == 0) IL_CHECK_INT(tree_argmax(row, n), il__cu_smp_argmax(row, n));
            if (got != want[r])
              fprintf(stderr, "width %lld seed %llu setting %d row %d: twin %d, cpu %d\n", (long long)n,
                      (unsigned long long)seed, c, r, got, want[r]);
            IL_CHECK_INT(got, want[r]);
            sampled_not_argmax += settings[c].temperature > 0 && got != (int32_t)il__cu_smp_argmax(row, n);
            compared++;
          }
        }
        il_sampler_free(s);
        /* greedy against the engine's sampler (temperature 0, no penalty) */
        il_sampler_params gp = {.temp = 0, .top_p = 1, .repeat_penalty = 1, .seed = seed};
        IL_CHECK_OK(il_sampler_new(&gp, (int32_t)n, &s));
        for (int r = 0; r < NR; r++) {
          const float *row = l + (size_t)r * (size_t)n;
          IL_CHECK_INT(twin(row, n, 0, &settings[0]), il_sampler_sample(s, row));
          greedy++;
        }
        il_sampler_free(s);
      }
    /* a NaN or an infinity anywhere in a row: -1 on both sides, at every setting */
    fill(l, NR * n, 0);
    l[n - 1] = NAN;
    if (NR > 1) l[n + n / 2] = INFINITY;
    if (NR > 2) l[2 * n] = -INFINITY;
    IL_CHECK_OK(cpu->ops->upload(cpu, L, l, sizeof(float) * (size_t)(NR * n)));
    const float u[NR] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    IL_CHECK_OK(cpu->ops->upload(cpu, U, u, sizeof u));
    for (int c = 0; c < ns; c += 3) {
      int32_t want[NR];
      IL_CHECK_OK(cpu->ops->sample(cpu, IDS, L, U, &settings[c]));
      IL_CHECK_OK(cpu->ops->download(cpu, want, IDS, sizeof want));
      for (int r = 0; r < 3; r++) {
        IL_CHECK_INT(want[r], -1);
        IL_CHECK_INT(twin(l + (size_t)r * (size_t)n, n, u[r], &settings[c]), -1);
        IL_CHECK_INT(tree_argmax(l + (size_t)r * (size_t)n, n), -1);
      }
      for (int r = 3; r < NR; r++) IL_CHECK_INT(twin(l + (size_t)r * (size_t)n, n, u[r], &settings[c]), want[r]);
    }
    il_backend_tensor_free(cpu, &L), il_backend_tensor_free(cpu, &U), il_backend_tensor_free(cpu, &IDS);
    free(l);
  }
  /* the settings must reach past the argmax, or the walk was never exercised */
  IL_CHECK(sampled_not_argmax > compared / 10);
  printf("sample twin: %ld (row, setting, draw) cases equal the cpu backend's sample op (%ld drew past the argmax), "
         "%ld greedy rows equal the engine's sampler\n",
         compared, sampled_not_argmax, greedy);
  cpu->ops->destroy(cpu);
  return il_test_finish();
}
