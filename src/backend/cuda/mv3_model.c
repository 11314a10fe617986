/* backend/cuda/mv3_model: the matvec dispatch table (which kernel per weight type, shape class
 * and token count) and the performance model that ranks the kernels before a GPU does.
 *
 * The model predicts t = max(DRAM, L1) / fill + launches x t0:
 *   DRAM: weight bytes at the device's copy rate (the ceiling the issue measures against);
 *   L1:   128-byte line visits of every warp load instruction, one line per clock per SM (the
 *         model that matched version 1's first H200 figures within about 10% for four of five
 *         types: its lanes read activations at a 128-byte stride, 32 lines an instruction);
 *   fill: bytes in flight against what the copy rate needs over a DRAM latency (small matrices
 *         put few warps on the device, and a lane with one load in flight covers little);
 *   t0:   per launch (the activation quantization is a launch unless a previous matmul of the
 *         same input made it).
 * It is a ranking tool, not a measurement: the default table below is what it ranks best, and
 * scripts/gpu-check.sh replaces it with what a device measures.
 * Not for: the kernels (matvec.cu, matvec_q8.cu, matvec3.cu) or dispatch (cuda.c).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/mv3.h"

static const char *const il__kind_names[IL__MV_N_KINDS] = {"v1", "v2", "w4u1", "w4u2", "w8u2"};

const char *il__mv_kind_name(il__mv_kind k) { return (unsigned)k < IL__MV_N_KINDS ? il__kind_names[k] : "?"; }
int il__mv_kind_warps(il__mv_kind k) { return k == IL__MV_W8U2 ? 8 : k >= IL__MV_FIRST_V3 && k < IL__MV_N_KINDS ? 4 : 0; }
int il__mv_kind_chunks(il__mv_kind k) { return k == IL__MV_W4U1 ? 1 : k == IL__MV_W4U2 || k == IL__MV_W8U2 ? 2 : 0; }

static const il_dtype il__types[IL__MV_N_TYPES] = {IL_DTYPE_F32,  IL_DTYPE_F16,  IL_DTYPE_BF16,
                                                   IL_DTYPE_Q8_0, IL_DTYPE_Q4_0, IL_DTYPE_Q4_1,
                                                   IL_DTYPE_Q4_K, IL_DTYPE_Q5_K, IL_DTYPE_Q6_K};
static const char *const il__type_names[IL__MV_N_TYPES] = {"f32", "f16", "bf16", "q8_0", "q4_0",
                                                           "q4_1", "q4_k", "q5_k", "q6_k"};
static const char *const il__class_names[IL__MV_N_CLASSES] = {"small", "medium", "large"};

il_dtype il__mv_type_at(int i) { return il__types[i]; }
int il__mv_type_index(il_dtype t) {
  for (int i = 0; i < IL__MV_N_TYPES; i++)
    if (il__types[i] == t) return i;
  return -1;
}

const char *il__mv_class_name(int c) { return c >= 0 && c < IL__MV_N_CLASSES ? il__class_names[c] : "?"; }
int il__mv_tok_bucket(int64_t n_tok) { return n_tok <= 1 ? 0 : n_tok == 2 ? 1 : n_tok <= 4 ? 2 : 3; }
int il__mv_tok_of_bucket(int b) { return 1 << b; }

/* Row bytes and 32-value units of the types (0 for a row that does not fill whole blocks). */
static double il__row_bytes(il_dtype t, int64_t n_in) {
  switch (t) {
  case IL_DTYPE_F32: return 4.0 * n_in;
  case IL_DTYPE_F16: case IL_DTYPE_BF16: return 2.0 * n_in;
  case IL_DTYPE_Q8_0: return n_in / 32 * 34.0;
  case IL_DTYPE_Q4_0: return n_in / 32 * 18.0;
  case IL_DTYPE_Q4_1: return n_in / 32 * 20.0;
  case IL_DTYPE_Q4_K: return n_in / 256 * 144.0;
  case IL_DTYPE_Q5_K: return n_in / 256 * 176.0;
  case IL_DTYPE_Q6_K: return n_in / 256 * 210.0;
  default: return 0;
  }
}

int il__mv_class(il_dtype t, int64_t n_out, int64_t n_in) {
  const double mib = il__row_bytes(t, n_in) * (double)n_out / (1024.0 * 1024.0);
  return mib < 8 ? 0 : mib < 64 ? 1 : 2;
}

static bool il__quantized(il_dtype t) { return t != IL_DTYPE_F32 && t != IL_DTYPE_F16 && t != IL_DTYPE_BF16; }

bool il__mv_kind_runs(il__mv_kind k, il_dtype t) {
  if (il__mv_type_index(t) < 0 || (unsigned)k >= IL__MV_N_KINDS) return false;
  if (k == IL__MV_V2) return t == IL_DTYPE_Q8_0 || t == IL_DTYPE_Q4_0 || t == IL_DTYPE_Q4_1;
  return true;
}

il__mv_hw il__mv_hw_h200(void) {
  return (il__mv_hw){.sms = 132, .clock_hz = 1.98e9, .copy_bps = 4224e9, .launch_s = 3.5e-6, .l1_lines_per_clock = 1.0};
}

/* 128-byte lines one warp instruction touches when its 32 lanes read `width` bytes each at a
 * lane stride of `stride` bytes from a 128-byte aligned start. */
static double il__lines(double width, double stride) {
  if (stride >= 128) return 32.0 * ceil(width / 128); /* every lane in lines of its own */
  return ceil(32.0 * (stride > width ? stride : width) / 128); /* one sweep over the lanes' span */
}

/* The loads of 32 units (32-value units; for float types, the same 1024 elements), per
 * instruction kind: line visits for the weights and for one token's activations. */
static void il__visits32(il__mv_kind k, il_dtype t, double *w_lines, double *x_lines) {
  const double ub = il__row_bytes(t, 256) / 8.0; /* bytes of a 32-value unit */
  if (k == IL__MV_V1) {
    if (il__quantized(t)) {
      /* byte loads: one instruction per byte of the unit, lanes a unit apart */
      *w_lines = ub * il__lines(1, ub);
    } else {
      /* 16-byte loads, lanes a unit apart */
      *w_lines = ub / 16 * il__lines(16, ub);
    }
    *x_lines = 32 * il__lines(4, 128); /* 32 scalar loads at a 128-byte lane stride */
  } else if (k == IL__MV_V2) {
    *w_lines = ub / 2 * il__lines(2, ub);                         /* 16-bit loads, lanes a block apart */
    *x_lines = 2 * il__lines(16, 32) + 2 * il__lines(4, 4);      /* 2 x 16 B of int8, the scale and sum */
  } else if (il__quantized(t)) {
    *w_lines = 32 * ub / 512 * 4;                                /* 512 contiguous bytes an instruction */
    *x_lines = 2 * il__lines(16, 32) + 2 * il__lines(4, 4);
  } else {
    *w_lines = 32 * ub / 512 * 4;
    *x_lines = 32 * 32 * 4 / 512.0 * 4;                          /* float4 loads, adjacent lanes adjacent */
  }
}

/* Bytes one warp has in flight: the loads it issues before it uses any. */
static double il__inflight(il__mv_kind k, il_dtype t) {
  const double ub = il__row_bytes(t, 256) / 8.0;
  if (k == IL__MV_V1) return il__quantized(t) ? 32.0 * 2 : 32.0 * 16; /* a scale pair, or one word */
  if (k == IL__MV_V2) return 32.0 * ub;                                 /* one block a lane */
  const double chunk = il__quantized(t) ? 32 * ub : 512;
  return il__mv_kind_chunks(k) * chunk;
}

bool il__mv_model(const il__mv_hw *hw, il__mv_kind k, il_dtype t, int64_t n_out, int64_t n_in, int64_t n_tok,
                  bool quant_shared, il__mv_cost *out) {
  memset(out, 0, sizeof *out);
  if (!il__mv_kind_runs(k, t) || n_out < 1 || n_in < 1 || n_tok < 1) return false;
  const double rb = il__row_bytes(t, n_in);
  const double units = n_in / 32.0;
  out->weight_bytes = rb * (double)n_out;
  out->act_bytes = (double)n_out * (double)n_tok * (il__quantized(t) && k != IL__MV_V1 ? n_in * 1.0 + units * 8 : n_in * 4.0);
  double wl, xl;
  il__visits32(k, t, &wl, &xl);
  /* version 1 repeats its weight loads for nothing, but its activation loads per token */
  out->line_visits = (double)n_out * units / 32.0 * (wl + xl * (double)n_tok);
  out->launches = 1 + (il__quantized(t) && k != IL__MV_V1 && !quant_shared ? 1 : 0);
  const int warps = k >= IL__MV_FIRST_V3 ? il__mv_kind_warps(k) : 4;
  /* resident warps: 32 per SM, or what shared memory allows (quantized version 3: W x U chunks
   * a block) */
  double per_sm = 32;
  if (k >= IL__MV_FIRST_V3 && il__quantized(t)) {
    const double smem = (double)warps * il__mv_kind_chunks(k) * 32 * (rb / units);
    const double blocks = (228.0 * 1024) / smem;
    if (blocks * warps < per_sm) per_sm = blocks * warps;
  }
  const double resident = per_sm * hw->sms;
  const double active = (double)n_out < resident ? (double)n_out : resident;
  out->waves = (double)n_out / warps / (resident / warps);
  const double latency = 700e-9; /* DRAM latency under load */
  const double need = hw->copy_bps * latency;
  const double fill = active * il__inflight(k, t) / need;
  out->t_dram = out->weight_bytes / hw->copy_bps / (fill < 1 ? fill : 1);
  out->t_l1 = out->line_visits / (hw->sms * hw->clock_hz * hw->l1_lines_per_clock);
  out->t_launch = out->launches * hw->launch_s;
  out->seconds = (out->t_dram > out->t_l1 ? out->t_dram : out->t_l1) + out->t_launch;
  return true;
}

/* ---------------------------------------------------------------- the table */

/* The shape the default table ranks for a class: rows of 4096 inputs, the matrix at the middle
 * of its class's size range (4, 32, 128 MiB). */
static int64_t il__class_rows(il_dtype t, int c) {
  const double mib = c == 0 ? 4 : c == 1 ? 32 : 128;
  const int64_t r = (int64_t)(mib * 1024 * 1024 / il__row_bytes(t, 4096));
  return r > 0 ? r : 1;
}

void il__mv_table_default(il__mv_table *tab) {
  const il__mv_hw hw = il__mv_hw_h200();
  for (int i = 0; i < IL__MV_N_TYPES; i++)
    for (int c = 0; c < IL__MV_N_CLASSES; c++)
      for (int b = 0; b < IL__MV_N_TOK; b++) {
        il__mv_kind best = IL__MV_V1;
        double bt = 0;
        for (int k = 0; k < IL__MV_N_KINDS; k++) {
          il__mv_cost cost;
          if (!il__mv_model(&hw, (il__mv_kind)k, il__types[i], il__class_rows(il__types[i], c), 4096,
                            il__mv_tok_of_bucket(b), false, &cost))
            continue;
          if (k == IL__MV_V1 || cost.seconds < bt) best = (il__mv_kind)k, bt = cost.seconds;
        }
        tab->kind[i][c][b] = (uint8_t)best;
      }
}

static int il__find(const char *const *names, int n, const char *w) {
  for (int i = 0; i < n; i++) {
    size_t j = 0;
    while (names[i][j] && tolower((unsigned char)w[j]) == names[i][j]) j++;
    if (!names[i][j] && !w[j]) return i;
  }
  return -1;
}

int il__mv_table_parse(const char *text, il__mv_table *tab, char *err, size_t nerr) {
  int line = 0;
  const char *p = text;
  while (*p) {
    line++;
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char buf[256];
    if (len >= sizeof buf) {
      snprintf(err, nerr, "line %d: longer than %zu characters", line, sizeof buf - 1);
      return -1;
    }
    memcpy(buf, p, len);
    buf[len] = 0;
    char *hash = strchr(buf, '#');
    if (hash) *hash = 0;
    char w[5][64];
    const int n = sscanf(buf, "%63s %63s %63s %63s %63s", w[0], w[1], w[2], w[3], w[4]);
    p = end ? end + 1 : p + len;
    if (n <= 0) continue;
    if (n != 4) {
      snprintf(err, nerr, "line %d: expected 'TYPE CLASS TOKENS KIND', got %d field%s", line, n, n == 1 ? "" : "s");
      return -1;
    }
    const int ti = il__find(il__type_names, IL__MV_N_TYPES, w[0]);
    const int ci = il__find(il__class_names, IL__MV_N_CLASSES, w[1]);
    const int ki = il__find(il__kind_names, IL__MV_N_KINDS, w[3]);
    char *tend = NULL;
    const long tok = strtol(w[2], &tend, 10);
    if (ti < 0) {
      snprintf(err, nerr, "line %d: '%s' is not a weight type (f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)", line, w[0]);
      return -1;
    }
    if (ci < 0) {
      snprintf(err, nerr, "line %d: '%s' is not a shape class (small medium large)", line, w[1]);
      return -1;
    }
    if (*tend || (tok != 1 && tok != 2 && tok != 4 && tok != 8)) {
      snprintf(err, nerr, "line %d: tokens '%s' is not 1, 2, 4 or 8", line, w[2]);
      return -1;
    }
    if (ki < 0) {
      snprintf(err, nerr, "line %d: '%s' is not a kernel (v1 v2 w4u1 w4u2 w8u2)", line, w[3]);
      return -1;
    }
    if (!il__mv_kind_runs((il__mv_kind)ki, il__types[ti])) {
      snprintf(err, nerr, "line %d: kernel %s does not run %s weights", line, w[3], il__type_names[ti]);
      return -1;
    }
    tab->kind[ti][ci][il__mv_tok_bucket(tok)] = (uint8_t)ki;
  }
  return 0;
}

int il__mv_table_format(const il__mv_table *tab, char *out, size_t n) {
  int w = snprintf(out, n, "# matvec dispatch: TYPE CLASS TOKENS KIND\n");
  for (int i = 0; i < IL__MV_N_TYPES; i++)
    for (int c = 0; c < IL__MV_N_CLASSES; c++)
      for (int b = 0; b < IL__MV_N_TOK; b++) {
        const size_t at = (size_t)w < n ? (size_t)w : n;
        w += snprintf(out + at, n - at, "%s %s %d %s\n", il__type_names[i], il__class_names[c], il__mv_tok_of_bucket(b),
                      il__mv_kind_name((il__mv_kind)tab->kind[i][c][b]));
      }
  return w;
}
