/* model/quantize: llama-quantize's type mixes and the quantize driver (see quantize.h). */
#include "model/quantize.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/quant.h"
#include "core/timer.h"
#include "format/gguf_writer.h"
#include "memory/mem.h"
#include "model/builtin.h"

/* ---- file types ---- */

static const struct {
  const char *name;
  il_ftype ft;
  il_dtype base;
} il__ftypes[] = {
    {"f32", IL_FTYPE_F32, IL_DTYPE_F32},          {"f16", IL_FTYPE_F16, IL_DTYPE_F16},
    {"bf16", IL_FTYPE_BF16, IL_DTYPE_BF16},       {"q8_0", IL_FTYPE_Q8_0, IL_DTYPE_Q8_0},
    {"q4_0", IL_FTYPE_Q4_0, IL_DTYPE_Q4_0},       {"q4_1", IL_FTYPE_Q4_1, IL_DTYPE_Q4_1},
    {"q4_k_s", IL_FTYPE_Q4_K_S, IL_DTYPE_Q4_K},   {"q4_k_m", IL_FTYPE_Q4_K_M, IL_DTYPE_Q4_K},
    {"q5_k_s", IL_FTYPE_Q5_K_S, IL_DTYPE_Q5_K},   {"q5_k_m", IL_FTYPE_Q5_K_M, IL_DTYPE_Q5_K},
    {"q6_k", IL_FTYPE_Q6_K, IL_DTYPE_Q6_K},
    {"q5_0", IL_FTYPE_Q5_0, IL_DTYPE_Q5_0},       {"q5_1", IL_FTYPE_Q5_1, IL_DTYPE_Q5_1},
    {"iq4_nl", IL_FTYPE_IQ4_NL, IL_DTYPE_IQ4_NL},
    /* llama-quantize's aliases */
    {"q4_k", IL_FTYPE_Q4_K_M, IL_DTYPE_Q4_K},     {"q5_k", IL_FTYPE_Q5_K_M, IL_DTYPE_Q5_K},
};

bool il_ftype_parse(const char *name, il_ftype *out) {
  for (size_t i = 0; i < sizeof il__ftypes / sizeof il__ftypes[0]; i++)
    if (strcasecmp(name, il__ftypes[i].name) == 0) {
      *out = il__ftypes[i].ft;
      return true;
    }
  return false;
}

const char *il_ftype_name(il_ftype ft) {
  for (size_t i = 0; i < sizeof il__ftypes / sizeof il__ftypes[0]; i++)
    if (il__ftypes[i].ft == ft) return il__ftypes[i].name;
  return "unknown";
}

il_dtype il_ftype_base(il_ftype ft) {
  for (size_t i = 0; i < sizeof il__ftypes / sizeof il__ftypes[0]; i++)
    if (il__ftypes[i].ft == ft) return il__ftypes[i].base;
  return IL_DTYPE_F32;
}

/* ---- visit order ---- */

static int il__layer_of(const char *name) {
  int l = -1;
  if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
  return l;
}

/* llama_model_loader's weight_name_comparer: layer number first (-1 for none), then name. */
static bool il__before(const char *na, int la, const char *nb, int lb) {
  if (la != lb) return la < lb;
  return strcmp(na, nb) < 0;
}

void il_quant_sort_order(const char *const *names, int64_t n, int64_t *order) {
  /* insertion sort on indices: stable, no shared state, and a model has at most a few
   * thousand tensors */
  for (int64_t i = 0; i < n; i++) {
    const int64_t cur = order[i] = i;
    const int lc = il__layer_of(names[cur]);
    int64_t j = i;
    while (j > 0 && il__before(names[cur], lc, names[order[j - 1]], il__layer_of(names[order[j - 1]]))) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = cur;
  }
}

/* ---- the rule ---- */

typedef enum { IL__CAT_OTHER, IL__CAT_OUTPUT, IL__CAT_TOKEN_EMBD, IL__CAT_QKV, IL__CAT_KV_B, IL__CAT_V, IL__CAT_K,
               IL__CAT_Q, IL__CAT_ATTN_OUT, IL__CAT_FFN_UP, IL__CAT_FFN_GATE, IL__CAT_FFN_DOWN } il__cat;

/* llama.cpp's tensor_get_category (the same substring tests in the same order). */
static il__cat il__category(const char *n) {
  if (!strcmp(n, "output.weight")) return IL__CAT_OUTPUT;
  if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return IL__CAT_TOKEN_EMBD;
  if (strstr(n, "attn_qkv.weight")) return IL__CAT_QKV;
  if (strstr(n, "attn_kv_b.weight")) return IL__CAT_KV_B;
  if (strstr(n, "attn_v.weight")) return IL__CAT_V;
  if (strstr(n, "attn_k.weight")) return IL__CAT_K;
  if (strstr(n, "attn_q.weight")) return IL__CAT_Q;
  if (strstr(n, "attn_output.weight")) return IL__CAT_ATTN_OUT;
  if (strstr(n, "ffn_up")) return IL__CAT_FFN_UP;
  if (strstr(n, "ffn_gate")) return IL__CAT_FFN_GATE;
  if (strstr(n, "ffn_down")) return IL__CAT_FFN_DOWN;
  return IL__CAT_OTHER;
}

static bool il__is_attn_v(il__cat c) { return c == IL__CAT_V || c == IL__CAT_QKV || c == IL__CAT_KV_B; }

/* llama.cpp's tensor_allows_quantization, for the names a Llama-family file can hold. */
static bool il__allows_quant(const char *n, uint32_t n_dims) {
  if (n_dims < 2) return false;
  const size_t len = strlen(n);
  if (len < 6 || strcmp(n + len - 6, "weight") != 0) return false;
  static const char *const never[] = {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                      "per_layer_model_proj", "ssm_conv1d", "attn_rel_b.weight",
                                      ".position_embd", ".patch_embd", "time_mix_first.weight"};
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
    if (strstr(n, never[i])) return false;
  if (!strcmp(n, "position_embd.weight") || !strcmp(n, "token_types.weight")) return false;
  return true;
}

static bool il__more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

typedef struct {
  int n_attention_wv, i_attention_wv, i_ffn_down, n_ffn_down;
  bool tied;
  bool is_70b;
  int n_gqa; /* n_head / n_head_kv (0 without KV heads), llama.cpp's hparams.n_gqa() */
} il__qstate;

/* llama_tensor_get_type_impl, the branches reachable for the file types above. */
static il_dtype il__rule(il__qstate *qs, il_ftype ft, il_dtype t, il__cat cat, int64_t nx) {
  if (cat == IL__CAT_OUTPUT || (qs->tied && cat == IL__CAT_TOKEN_EMBD)) {
    if (nx % il_dtype_get(t)->blck != 0) return IL_DTYPE_Q8_0;
    return t != IL_DTYPE_Q8_0 ? IL_DTYPE_Q6_K : t;
  }
  if (cat == IL__CAT_TOKEN_EMBD) return t;
  if (il__is_attn_v(cat)) {
    if (ft == IL_FTYPE_IQ4_NL && qs->n_gqa >= 4)
      t = IL_DTYPE_Q5_K;
    else if ((ft == IL_FTYPE_Q4_K_M || ft == IL_FTYPE_Q5_K_M) && il__more_bits(qs->i_attention_wv, qs->n_attention_wv))
      t = IL_DTYPE_Q6_K;
    else if (ft == IL_FTYPE_Q4_K_S && qs->i_attention_wv < 4)
      t = IL_DTYPE_Q5_K;
    if (qs->is_70b && t == IL_DTYPE_Q4_K) t = IL_DTYPE_Q5_K;
    qs->i_attention_wv++;
    return t;
  }
  if (cat == IL__CAT_FFN_DOWN) {
    const int i_layer = qs->i_ffn_down, n_layer = qs->n_ffn_down;
    if (ft == IL_FTYPE_Q4_K_M) {
      if (il__more_bits(i_layer, n_layer)) t = IL_DTYPE_Q6_K;
    } else if (ft == IL_FTYPE_IQ4_NL && i_layer < n_layer / 8) { /* llama.cpp: without an imatrix */
      t = IL_DTYPE_Q5_K;
    } else if (ft == IL_FTYPE_Q5_K_M && il__more_bits(i_layer, n_layer)) {
      t = IL_DTYPE_Q6_K;
    } else if (ft == IL_FTYPE_Q4_K_S && i_layer < n_layer / 8) {
      t = IL_DTYPE_Q5_K;
    }
    qs->i_ffn_down++;
    return t;
  }
  /* llama.cpp's attn_qkv branch (Q5_K / Q6_K) is never reached: fused QKV is attn_v-like above */
  return t;
}

il_status il_quant_choose(const il_quant_rule *rule, const il_quant_model_info *info, int64_t n,
                          const char *const *names, const uint32_t *n_dims, const int64_t (*ne)[4],
                          const il_dtype *types, il_quant_choice *choices) {
  il__qstate qs = {0};
  qs.tied = true;
  qs.n_ffn_down = info->n_layer;
  qs.n_gqa = info->n_head_kv > 0 ? info->n_head / info->n_head_kv : 0;
  qs.is_70b = info->arch && !strcmp(info->arch, "llama") && info->n_layer == 80 && info->n_head != info->n_head_kv;
  for (int64_t i = 0; i < n; i++) {
    const il__cat c = il__category(names[i]);
    if (il__is_attn_v(c)) qs.n_attention_wv++;
    if (c == IL__CAT_OUTPUT) qs.tied = false;
  }
  regex_t re[16];
  const int n_keep = rule->n_keep < 16 ? rule->n_keep : 16;
  for (int k = 0; k < n_keep; k++) {
    if (regcomp(&re[k], rule->keep[k].pattern, REG_EXTENDED | REG_NOSUB) != 0) {
      for (int j = 0; j < k; j++) regfree(&re[j]);
      return il_error(IL_ERR_INVALID_ARG, "--keep: '%s' is not a valid extended regular expression", rule->keep[k].pattern);
    }
  }
  const il_dtype base = il_ftype_base(rule->ftype);
  const bool base_quantized = il_dtype_get(base)->quantized;
  for (int64_t i = 0; i < n; i++) {
    il_quant_choice *ch = &choices[i];
    memset(ch, 0, sizeof *ch);
    ch->quantize = il__allows_quant(names[i], n_dims[i]);
    if (!ch->quantize) {
      ch->type = types[i];
      continue;
    }
    il_dtype t = base;
    if (base_quantized) {
      bool manual = false;
      for (int k = 0; k < n_keep && !manual; k++)
        if (regexec(&re[k], names[i], 0, NULL, 0) == 0) {
          t = rule->keep[k].type;
          manual = true;
        }
      if (!manual && !rule->pure) t = il__rule(&qs, rule->ftype, t, il__category(names[i]), ne[i][0]);
      /* tensor_type_fallback */
      const int64_t nx = ne[i][0];
      const uint32_t blck = il_dtype_get(t)->blck;
      if (nx % blck != 0) {
        il_dtype fb = t; /* a 32-block type has no smaller block: F16 below */
        switch (t) {
        case IL_DTYPE_Q4_K: fb = IL_DTYPE_Q5_0; break;
        case IL_DTYPE_Q5_K: fb = IL_DTYPE_Q5_1; break;
        case IL_DTYPE_Q6_K: fb = IL_DTYPE_Q8_0; break;
        default: break;
        }
        if (nx % il_dtype_get(fb)->blck != 0) fb = IL_DTYPE_F16;
        snprintf(ch->note, sizeof ch->note, "row length %lld is not a multiple of %u (%s): fell back to %s",
                 (long long)nx, blck, il_dtype_name(t), il_dtype_name(fb));
        ch->type = fb;
        continue;
      }
    }
    ch->type = t;
  }
  for (int k = 0; k < n_keep; k++) regfree(&re[k]);
  return IL_OK;
}

/* ---- the driver ---- */

void il_quant_report_free(il_quant_report *r) {
  if (!r) return;
  il_mem_free(r->tensors);
  memset(r, 0, sizeof *r);
}

il_status il_quant_model(const char *src, const char *out_path, const il_quant_params *p, il_quant_report *report) {
  memset(report, 0, sizeof *report);
  const double t0 = il_time_now();
  const bool builtin = il_builtin_is(src);
  struct stat si, so;
  if (!builtin && stat(src, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
    return il_error(IL_ERR_INVALID_ARG, "-o %s is the input file itself (%s): refusing to write over the model being read",
                    out_path, src);
  for (int k = 0; k < p->rule.n_keep; k++)
    if (!il_quantize_supported(p->rule.keep[k].type))
      return il_error(IL_ERR_UNSUPPORTED, "--keep %s=%s: cannot write that type", p->rule.keep[k].pattern,
                      il_dtype_name(p->rule.keep[k].type));
  il_model *m = NULL;
  IL_TRY(il_export_open(src, NULL, p->n_threads, &m));
  const int64_t n = m->n_tensors;
  const size_t nn = (size_t)(n ? n : 1);
  const char **names = il_mem_calloc(IL_MEM_MODEL, sizeof *names * nn, "quantize plan");
  uint32_t *n_dims = il_mem_calloc(IL_MEM_MODEL, sizeof *n_dims * nn, "quantize plan");
  int64_t(*ne)[4] = il_mem_calloc(IL_MEM_MODEL, sizeof *ne * nn, "quantize plan");
  il_dtype *types = il_mem_calloc(IL_MEM_MODEL, sizeof *types * nn, "quantize plan");
  il_quant_choice *choices = il_mem_calloc(IL_MEM_MODEL, sizeof *choices * nn, "quantize plan");
  int64_t *order = il_mem_calloc(IL_MEM_MODEL, sizeof *order * nn, "quantize plan");
  void **bufs = il_mem_calloc(IL_MEM_MODEL, sizeof *bufs * nn, "quantize plan");
  report->tensors = il_mem_calloc(IL_MEM_MODEL, sizeof(il_quant_tensor_report) * nn, "quantize report");
  il_gguf_writer *w = NULL;
  il_status st = names && n_dims && ne && types && choices && order && bufs && report->tensors ? IL_OK : IL_ERR_OOM;
  il_gguf_tensor *sorted = NULL;
  if (st == IL_OK) {
    for (int64_t i = 0; i < n; i++) names[i] = m->tensors[i].name;
    il_quant_sort_order(names, n, order);
    sorted = il_mem_alloc(IL_MEM_MODEL, sizeof *sorted * (size_t)(n ? n : 1), "quantize order");
    if (!sorted) st = IL_ERR_OOM;
  }
  if (st == IL_OK) {
    for (int64_t i = 0; i < n; i++) {
      sorted[i] = m->tensors[order[i]];
      names[i] = sorted[i].name;
      n_dims[i] = sorted[i].n_dims;
      memcpy(ne[i], sorted[i].ne, sizeof ne[i]);
      types[i] = sorted[i].type;
    }
    const il_quant_model_info info = {m->hp.arch, m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv};
    st = il_quant_choose(&p->rule, &info, n, names, n_dims, (const int64_t(*)[4])ne, types, choices);
  }
  if (st == IL_OK) st = il_gguf_writer_new(&w);
  if (st == IL_OK) st = il_export_metadata(m, builtin, w, (uint32_t)p->rule.ftype);
  uint64_t total = 0, done = 0;
  for (int64_t i = 0; st == IL_OK && i < n; i++) total += sorted[i].nbytes;
  for (int64_t i = 0; st == IL_OK && i < n; i++) {
    const il_gguf_tensor *t = &sorted[i];
    const il_quant_choice *ch = &choices[i];
    il_quant_tensor_report *tr = &report->tensors[i];
    snprintf(tr->name, sizeof tr->name, "%s", t->name);
    tr->type_in = t->type;
    tr->type_out = ch->type;
    tr->n_dims = t->n_dims;
    memcpy(tr->ne, t->ne, sizeof tr->ne);
    tr->bytes_in = t->nbytes;
    snprintf(tr->note, sizeof tr->note, "%s", ch->note);
    const void *data = t->data;
    uint64_t nbytes = t->nbytes;
    if (ch->quantize && ch->type != t->type) {
      if (il_dtype_get(t->type)->quantized && !report->requantized) {
        report->requantized = true;
        report->requant_from = t->type;
      }
      st = il_export_convert_tensor(t, ch->type, p->n_threads, &bufs[i], &nbytes, p->measure ? &tr->err : NULL);
      if (st != IL_OK) break;
      data = bufs[i];
      tr->converted = true;
      tr->has_error = p->measure;
    }
    if (ch->note[0] && p->notes) fprintf(p->notes, "note: %s: %s\n", t->name, ch->note);
    tr->bytes_out = nbytes;
    report->tensor_bytes_in += t->nbytes;
    report->tensor_bytes_out += nbytes;
    st = il_gguf_writer_add_tensor(w, t->name, ch->type, t->n_dims, t->ne, data, nbytes);
    done += t->nbytes;
    if (p->progress) p->progress(p->progress_ud, done, total, t->name);
  }
  if (st == IL_OK) st = il_gguf_writer_write(w, out_path);
  if (st == IL_OK) {
    report->n_tensors = n;
    report->file_in = builtin ? report->tensor_bytes_in : (uint64_t)il_gguf_file_size(m->gguf);
    report->file_out = stat(out_path, &so) == 0 ? (uint64_t)so.st_size : 0;
    report->seconds = il_time_now() - t0;
  }
  il_gguf_writer_free(w);
  for (int64_t i = 0; bufs && i < n; i++) il_mem_free(bufs[i]);
  il_mem_free(sorted);
  il_mem_free(names);
  il_mem_free(n_dims);
  il_mem_free(ne);
  il_mem_free(types);
  il_mem_free(choices);
  il_mem_free(order);
  il_mem_free(bufs);
  il_model_free(m);
  if (st != IL_OK) il_quant_report_free(report);
  return st;
}
