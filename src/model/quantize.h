/* model/quantize: llama-quantize's file types and per-tensor type mixes, and the driver that
 * writes a quantized GGUF through model/export.
 *
 * A file type (q4_k_m, q8_0, ...) names a default type and a mix rule. The rule is
 * llama.cpp's llama_tensor_get_type for Llama-family models, without an importance matrix:
 *   - tensors are visited in llama.cpp's order: names without a layer first (by name), then by
 *     layer number, then by name within a layer; the output file keeps that order;
 *   - only 2-D+ tensors whose name ends in "weight" (not "_norm.weight", not
 *     "ffn_gate_inp.weight", ...) are quantized; 1-D tensors stay as they are (F32);
 *   - for a quantized default type: output.weight (or token_embd.weight when the output head
 *     is tied) becomes Q6_K (Q8_0 when its row length is not a multiple of the default's
 *     block, or when the default is already Q8_0);
 *   - attn_v: Q6_K when use_more_bits(i, n) for Q4_K_M and Q5_K_M (i counts attn_v tensors in
 *     visit order, n is their number; use_more_bits = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2),
 *     Q5_K for the first 4 in Q4_K_S; a 70B-class Llama (80 layers, GQA) lifts Q4_K to Q5_K;
 *     fused attn_qkv counts as attn_v (llama.cpp's own attn_qkv branch is unreachable);
 *   - ffn_down: Q6_K when use_more_bits(layer, n_layer) for Q4_K_M and Q5_K_M; Q5_K for layers
 *     < n_layer/8 in Q4_K_S;
 *   - --keep PATTERN=TYPE (llama-quantize's --tensor-type: a POSIX extended regex searched in
 *     the name; the first match wins) replaces the rule for the tensors it matches;
 *     --pure skips the rule (every quantizable tensor in the default type);
 *   - iq4_nl: attn_v gets Q5_K when n_head / n_head_kv >= 4, ffn_down Q5_K in layers
 *     < n_layer/8 (llama.cpp's rule without an importance matrix);
 *   - a row length that is not a multiple of the chosen type's block falls back as in
 *     llama.cpp: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, 32-blocks stay, and F16 when even
 *     the fallback does not fit.
 * Not for: the bytes of a block (core/quant), the file writing (format/gguf, model/export).
 */
#ifndef IL_MODEL_QUANTIZE_H
#define IL_MODEL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"
#include "model/export.h"

/* llama.cpp's LLAMA_FTYPE_* values for the file types inferlab writes. */
typedef enum {
  IL_FTYPE_F32 = 0,
  IL_FTYPE_F16 = 1,
  IL_FTYPE_Q4_0 = 2,
  IL_FTYPE_Q4_1 = 3,
  IL_FTYPE_Q8_0 = 7,
  IL_FTYPE_Q5_0 = 8,
  IL_FTYPE_Q5_1 = 9,
  IL_FTYPE_Q4_K_S = 14,
  IL_FTYPE_Q4_K_M = 15,
  IL_FTYPE_Q5_K_S = 16,
  IL_FTYPE_Q5_K_M = 17,
  IL_FTYPE_Q6_K = 18,
  IL_FTYPE_IQ4_NL = 25,
  IL_FTYPE_BF16 = 32,
} il_ftype;

/* Parses a --type name (case-insensitive): f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k_s
 * q4_k_m q5_k_s q5_k_m q6_k, and llama-quantize's aliases q4_k (= q4_k_m) and q5_k (= q5_k_m). */
bool il_ftype_parse(const char *name, il_ftype *out);
/* "q4_k_m", ... */
const char *il_ftype_name(il_ftype ft);
/* The default tensor type of a file type (Q4_K for q4_k_m). */
il_dtype il_ftype_base(il_ftype ft);

typedef struct {
  const char *pattern; /* POSIX extended regex, searched in the tensor name */
  il_dtype type;
} il_quant_keep;

/* What the rule needs to know of the model. */
typedef struct {
  const char *arch;  /* general.architecture */
  int32_t n_layer;
  int32_t n_head, n_head_kv;
} il_quant_model_info;

typedef struct {
  il_ftype ftype;
  bool pure;
  const il_quant_keep *keep;
  int n_keep;
} il_quant_rule;

/* One tensor's decision. */
typedef struct {
  il_dtype type;         /* the type to write */
  bool quantize;         /* false: copied as it is (1-D, norms, not a weight) */
  char note[160];        /* fallback or substitution, "" when none */
} il_quant_choice;

/* Decides the type of each tensor. names/n_dims/ne/types describe n tensors, already in
 * llama.cpp's visit order (il_quant_sort_order gives it). choices[n] is filled. Fails with
 * IL_ERR_INVALID_ARG for a --keep pattern that does not compile (naming it). */
il_status il_quant_choose(const il_quant_rule *rule, const il_quant_model_info *info, int64_t n,
                          const char *const *names, const uint32_t *n_dims, const int64_t (*ne)[4],
                          const il_dtype *types, il_quant_choice *choices);

/* Fills order[n] with the indices of names in llama.cpp's visit order. */
void il_quant_sort_order(const char *const *names, int64_t n, int64_t *order);

/* Progress: called after each tensor with bytes of source data done and in all. */
typedef void (*il_quant_progress_fn)(void *ud, uint64_t done, uint64_t total, const char *tensor);

typedef struct {
  il_quant_rule rule;
  int n_threads;
  bool measure;                 /* fill the error statistics of each quantized tensor */
  il_quant_progress_fn progress; /* may be NULL */
  void *progress_ud;
  FILE *notes;                  /* warnings and fallback notes (may be NULL) */
} il_quant_params;

typedef struct {
  char name[96];
  il_dtype type_in, type_out;
  uint32_t n_dims;
  int64_t ne[4];
  uint64_t bytes_in, bytes_out;
  bool converted;      /* data rewritten (type_out may still equal type_in for a re-encode) */
  bool has_error;      /* error statistics filled */
  il_export_error err;
  char note[160];
} il_quant_tensor_report;

typedef struct {
  il_quant_tensor_report *tensors; /* [n_tensors], in output order; free with il_quant_report_free */
  int64_t n_tensors;
  uint64_t file_in, file_out;      /* file sizes (for a built-in: its tensor bytes) */
  uint64_t tensor_bytes_in, tensor_bytes_out;
  double seconds;                  /* open + convert + write */
  bool requantized;                /* the source had quantized tensors that were converted */
  il_dtype requant_from;
} il_quant_report;

/* Quantizes src (GGUF path or builtin:NAME, generated in its default type) into out_path.
 * Refuses (IL_ERR_INVALID_ARG) when out_path is the input file itself (same device and inode,
 * whatever the names). On success report is filled (caller frees with il_quant_report_free). */
il_status il_quant_model(const char *src, const char *out_path, const il_quant_params *p, il_quant_report *report);
void il_quant_report_free(il_quant_report *r);

#endif
