/* tests/test_archs: the architectures beyond llama (qwen3, phi3, gemma3) against a plain
 * reference (qwen3moe's experts: tests/test_moe).
 *
 * The reference here is written from the architectures' descriptions (llama.cpp's graph for
 * each: qwen3's per-head q/k RMSNorm before NeoX RoPE, phi3's fused attn_qkv and gate/up
 * tensors; gemma3's embedding scaled by sqrt(n_embd), QK-norm, RoPE base 10000 on the local
 * layers (all but every 6th), post-attention and post-FFN norms, GeGLU) with plain loops and its own KV arrays, reading the built-in model's tensors by
 * their GGUF names; it shares no code with src/model. For each built-in model it checks: the
 * engine's logits on the CPU against the reference; the simulated device bit-identical to the
 * CPU; half the layers on the CPU beside the device (offload), --offload stream, the paged KV
 * cache and F16 activations against the CPU run; and the exported GGUF reads back with the
 * architecture's keys and tensor names and gives the same logits.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "format/gguf.h"
#include "harness.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "model/export.h"
#include "model/llama.h"
#include "ref_ops.h"

/* 160 tokens: past gemma3-tiny's window of 24 by more than two of the flash kernel's 64-key
 * tiles, so its local layers mask keys and skip whole tiles */
enum { N_TOK = 160 };
static int toks[N_TOK];

/* ---- the reference ---- */

typedef struct {
  const il_model *m;
  int dim, ff, heads, kv_heads, hd, q_dim, kv_dim, vocab;
  float **kc, **vc; /* [layer][pos * kv_dim] */
} ref_t;

/* NeoX RoPE (qwen3, phi3 pair i with i + n_rot/2) on one head. */
static void rope_neox(float *v, int pos, int n_rot, float base) {
  for (int i = 0; i < n_rot / 2; i++) {
    const double ang = pos * pow(base, -2.0 * i / n_rot);
    const double x0 = v[i], x1 = v[i + n_rot / 2];
    v[i] = (float)(x0 * cos(ang) - x1 * sin(ang));
    v[i + n_rot / 2] = (float)(x0 * sin(ang) + x1 * cos(ang));
  }
}

static void ref_init(ref_t *r, const il_model *m) {
  const il_hparams *hp = &m->hp;
  *r = (ref_t){m, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_head * hp->head_dim,
               hp->n_head_kv * hp->head_dim, hp->n_vocab, NULL, NULL};
  r->kc = calloc((size_t)hp->n_layer, sizeof(float *));
  r->vc = calloc((size_t)hp->n_layer, sizeof(float *));
  for (int l = 0; l < hp->n_layer; l++) {
    r->kc[l] = calloc((size_t)N_TOK * r->kv_dim, sizeof(float));
    r->vc[l] = calloc((size_t)N_TOK * r->kv_dim, sizeof(float));
  }
}

static void ref_free(ref_t *r) {
  for (int l = 0; l < r->m->hp.n_layer; l++) free(r->kc[l]), free(r->vc[l]);
  free(r->kc), free(r->vc);
}

/* One token at pos through the reference; logits [vocab]. */
static void ref_step(ref_t *r, int token, int pos, float *logits) {
  const il_model *m = r->m;
  const il_hparams *hp = &m->hp;
  const bool fused = !strcmp(hp->arch, "phi3"), gemma = !strcmp(hp->arch, "gemma3");
  const bool qk_norm = !strcmp(hp->arch, "qwen3") || gemma;
  float *x = calloc((size_t)r->dim, 4), *xb = calloc((size_t)r->dim, 4), *o = calloc((size_t)r->dim, 4);
  float *qkv = calloc((size_t)(r->q_dim + 2 * r->kv_dim), 4), *att = calloc((size_t)r->q_dim, 4);
  float *h = calloc((size_t)2 * r->ff, 4), *sc = calloc((size_t)pos + 1, 4);
  memcpy(x, tensor(m, "token_embd.weight") + (size_t)token * r->dim, (size_t)r->dim * 4);
  if (gemma)
    for (int i = 0; i < r->dim; i++) x[i] *= sqrtf((float)r->dim);
  for (int l = 0; l < hp->n_layer; l++) {
    const float base = gemma && l % 6 != 5 ? 10000.0f : hp->rope_base;
    rmsnorm(xb, x, lt(m, l, "attn_norm.weight"), r->dim, hp->norm_eps);
    float *q = qkv, *k = qkv + r->q_dim, *v = k + r->kv_dim;
    if (fused) { /* one matrix: q rows, then k, then v */
      matvec(lt(m, l, "attn_qkv.weight"), xb, qkv, r->dim, r->q_dim + 2 * r->kv_dim);
    } else {
      matvec(lt(m, l, "attn_q.weight"), xb, q, r->dim, r->q_dim);
      matvec(lt(m, l, "attn_k.weight"), xb, k, r->dim, r->kv_dim);
      matvec(lt(m, l, "attn_v.weight"), xb, v, r->dim, r->kv_dim);
    }
    for (int hh = 0; hh < r->heads; hh++) {
      if (qk_norm) rmsnorm(q + hh * r->hd, q + hh * r->hd, lt(m, l, "attn_q_norm.weight"), r->hd, hp->norm_eps);
      rope_neox(q + hh * r->hd, pos, hp->n_rot, base);
    }
    for (int hh = 0; hh < r->kv_heads; hh++) {
      if (qk_norm) rmsnorm(k + hh * r->hd, k + hh * r->hd, lt(m, l, "attn_k_norm.weight"), r->hd, hp->norm_eps);
      rope_neox(k + hh * r->hd, pos, hp->n_rot, base);
    }
    memcpy(r->kc[l] + (size_t)pos * r->kv_dim, k, (size_t)r->kv_dim * 4);
    memcpy(r->vc[l] + (size_t)pos * r->kv_dim, v, (size_t)r->kv_dim * 4);
    /* gemma3's local layers (all but every 6th) see the last swa positions */
    const int first = gemma && l % 6 != 5 && pos - hp->swa + 1 > 0 ? pos - hp->swa + 1 : 0;
    for (int hh = 0; hh < r->heads; hh++) {
      const int g = hh / (r->heads / r->kv_heads);
      double mx = -INFINITY, sum = 0;
      for (int t = first; t <= pos; t++) {
        double d = 0;
        for (int i = 0; i < r->hd; i++) d += (double)q[hh * r->hd + i] * r->kc[l][(size_t)t * r->kv_dim + g * r->hd + i];
        sc[t] = (float)(d / sqrt((double)r->hd));
        mx = fmax(mx, sc[t]);
      }
      for (int t = first; t <= pos; t++) sum += sc[t] = (float)exp(sc[t] - mx);
      for (int i = 0; i < r->hd; i++) {
        double a = 0;
        for (int t = first; t <= pos; t++) a += sc[t] / sum * r->vc[l][(size_t)t * r->kv_dim + g * r->hd + i];
        att[hh * r->hd + i] = (float)a;
      }
    }
    matvec(lt(m, l, "attn_output.weight"), att, o, r->q_dim, r->dim);
    if (gemma) rmsnorm(o, o, lt(m, l, "post_attention_norm.weight"), r->dim, hp->norm_eps);
    for (int i = 0; i < r->dim; i++) x[i] += o[i];
    rmsnorm(xb, x, lt(m, l, "ffn_norm.weight"), r->dim, hp->norm_eps);
    float *gate = h, *up = h + r->ff;
    if (fused) { /* ffn_up holds gate rows, then up rows (llama.cpp's swiglu of the halves) */
      matvec(lt(m, l, "ffn_up.weight"), xb, h, r->dim, 2 * r->ff);
    } else {
      matvec(lt(m, l, "ffn_gate.weight"), xb, gate, r->dim, r->ff);
      matvec(lt(m, l, "ffn_up.weight"), xb, up, r->dim, r->ff);
    }
    for (int i = 0; i < r->ff; i++) {
      const double g = gate[i];
      gate[i] = gemma ? (float)(0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * up[i])
                      : gate[i] / (1.0f + expf(-gate[i])) * up[i];
    }
    matvec(lt(m, l, "ffn_down.weight"), gate, o, r->ff, r->dim);
    if (gemma) rmsnorm(o, o, lt(m, l, "post_ffw_norm.weight"), r->dim, hp->norm_eps);
    for (int i = 0; i < r->dim; i++) x[i] += o[i];
  }
  rmsnorm(xb, x, tensor(m, "output_norm.weight"), r->dim, hp->norm_eps);
  const float *out = tensor(m, "output.weight");
  matvec(out ? out : tensor(m, "token_embd.weight"), xb, logits, r->dim, r->vocab);
  free(x), free(xb), free(o), free(qkv), free(att), free(h), free(sc);
}

/* ---- the engine ---- */

/* The engine's logits of every position of toks as one batch, with the options in cfg; NULL
 * when the engine did not open (the check has failed then). */
static float *run(const il_config *cfg, int *n_vocab, il_engine **keep) {
  il_engine *e = NULL;
  IL_CHECK_OK(il_engine_open(cfg, &e));
  if (!e) return NULL;
  const int nv = il_engine_model(e)->hp.n_vocab;
  il_batch_entry b[N_TOK];
  for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){toks[i], 0, i, true};
  float *got = calloc((size_t)N_TOK * nv, sizeof(float));
  IL_CHECK_OK(il_engine_decode(e, b, N_TOK, got));
  *n_vocab = nv;
  if (keep) *keep = e;
  else il_engine_free(e);
  return got;
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

static double max_abs(const float *a, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i]));
  return d;
}

static void base_cfg(il_config *c, const char *model) {
  il_config_defaults(c);
  snprintf(c->model, sizeof c->model, "%s", model);
  c->ctx = 256;
  c->batch = N_TOK;
  c->threads = 2;
  snprintf(c->kv_type, sizeof c->kv_type, "f32");
}

static void check_arch(const char *model, const char *arch) {
  printf("== %s\n", model);
  il_config cfg;
  base_cfg(&cfg, model);
  int nv = 0;
  il_engine *e = NULL;
  float *cpu = run(&cfg, &nv, &e);
  if (!cpu) return;
  const il_model *m = il_engine_model(e);
  IL_CHECK_STR(m->hp.arch, arch);
  const int32_t head_dim = m->hp.head_dim;
  const size_t n = (size_t)N_TOK * nv;
  /* the reference, token by token */
  ref_t r;
  ref_init(&r, m);
  float *want = calloc(n, sizeof(float));
  for (int i = 0; i < N_TOK; i++) ref_step(&r, toks[i], i, want + (size_t)i * nv);
  ref_free(&r);
  const double scale = max_abs(want, n), err = max_diff(cpu, want, n);
  printf("  cpu vs reference: max |d| = %.3g (logits up to %.3g)\n", err, scale);
  IL_CHECK(scale > 0.1); /* the model computes something */
  IL_CHECK_NEAR(err, 0, 1e-4);
  il_engine_free(e);

  const struct {
    const char *label, *device, *gpu_layers, *offload, *kv, *dtype, *kv_type, *attn;
    double tol; /* 0: bit-identical to the CPU run */
  } runs[] = {
      {"sim", "sim:256MiB", "", "", "", "", "f32", "", 0},
      {"sim, half the layers on cpu", "sim:256MiB", "2", "", "", "", "f32", "", 1e-5},
      {"sim, --offload stream", "sim:256MiB", "", "stream", "", "", "f32", "", 1e-5},
      {"cpu, paged kv", "cpu", "", "", "paged", "", "f32", "", 1e-5},
      /* F16 activations and cells round every op's output to 11 bits */
      {"cpu, f16 activations and kv", "cpu", "", "", "", "f16", "f16", "", 0.02 * scale},
      /* every cpu attention kernel (each applies gemma3's window its own way) */
      {"cpu, --attn naive", "cpu", "", "", "", "", "f32", "naive", 1e-4},
      {"cpu, --attn sliced", "cpu", "", "", "", "", "f32", "sliced", 1e-4},
      {"cpu, --attn memeff", "cpu", "", "", "", "", "f32", "memeff", 1e-4},
      {"cpu, --attn flash", "cpu", "", "", "", "", "f32", "flash", 1e-4},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    il_config c;
    base_cfg(&c, model);
    snprintf(c.device, sizeof c.device, "%s", runs[i].device);
    snprintf(c.gpu_layers, sizeof c.gpu_layers, "%s", runs[i].gpu_layers);
    snprintf(c.offload, sizeof c.offload, "%s", runs[i].offload);
    snprintf(c.kv, sizeof c.kv, "%s", runs[i].kv);
    snprintf(c.dtype, sizeof c.dtype, "%s", runs[i].dtype);
    snprintf(c.kv_type, sizeof c.kv_type, "%s", runs[i].kv_type);
    if (*runs[i].attn) snprintf(c.attn, sizeof c.attn, "%s", runs[i].attn);
    int nv2 = 0;
    float *got = run(&c, &nv2, NULL);
    if (!got) continue;
    IL_CHECK_INT(nv2, nv);
    const double d = max_diff(got, cpu, n);
    printf("  %-30s vs cpu: max |d| = %.3g\n", runs[i].label, d);
    if (runs[i].tol == 0) IL_CHECK(memcmp(got, cpu, n * sizeof(float)) == 0);
    else IL_CHECK_NEAR(d, 0, runs[i].tol);
    free(got);
  }

  /* the last token alone after the others (decode: one query row, whose keys the flash kernel
   * may split across threads, so a split range before a local layer's window sees no key) */
  {
    il_config c;
    base_cfg(&c, model);
    snprintf(c.attn, sizeof c.attn, "flash");
    il_engine *e2 = NULL;
    IL_CHECK_OK(il_engine_open(&c, &e2));
    if (e2) {
      il_batch_entry b[N_TOK];
      for (int i = 0; i < N_TOK; i++) b[i] = (il_batch_entry){toks[i], 0, i, true};
      float *lg = calloc((size_t)N_TOK * nv, sizeof(float));
      IL_CHECK_OK(il_engine_decode(e2, b, N_TOK - 1, lg));
      IL_CHECK_OK(il_engine_decode(e2, b + N_TOK - 1, 1, lg));
      const double d = max_diff(lg, want + (size_t)(N_TOK - 1) * nv, (size_t)nv);
      printf("  %-30s vs reference: max |d| = %.3g\n", "flash, last token alone", d);
      IL_CHECK_NEAR(d, 0, 1e-4);
      free(lg);
      il_engine_free(e2);
    }
  }

  /* the exported file: the architecture's keys and tensor names, and the same logits */
  char path[256];
  snprintf(path, sizeof path, "/tmp/test_archs_%d_%s.gguf", (int)getpid(), arch);
  il_export_stats es;
  IL_CHECK_OK(il_export_gguf(model, IL_DTYPE_F32, path, 2, NULL, &es));
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(path, &g));
  if (g) {
    il_gguf_str s = {0};
    IL_CHECK_OK(il_gguf_get_str(g, "general.architecture", &s));
    IL_CHECK(s.len == strlen(arch) && !memcmp(s.ptr, arch, s.len));
    char key[96];
    int64_t v = 0;
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    IL_CHECK_OK(il_gguf_get_i64(g, key, &v));
    IL_CHECK_INT(v, head_dim);
    if (!strcmp(arch, "gemma3")) {
      snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
      IL_CHECK_OK(il_gguf_get_i64(g, key, &v));
      IL_CHECK(v > 0);
    }
    bool fused = false, qnorm = false, post = false;
    for (int64_t i = 0; i < il_gguf_tensor_count(g); i++) {
      const char *nm = il_gguf_tensor_at(g, i)->name;
      fused |= !strcmp(nm, "blk.0.attn_qkv.weight");
      qnorm |= !strcmp(nm, "blk.0.attn_q_norm.weight");
      post |= !strcmp(nm, "blk.0.post_attention_norm.weight") || !strcmp(nm, "blk.0.post_ffw_norm.weight");
    }
    IL_CHECK(fused == !strcmp(arch, "phi3"));
    IL_CHECK(qnorm == (!strcmp(arch, "qwen3") || !strcmp(arch, "gemma3")));
    IL_CHECK(post == !strcmp(arch, "gemma3"));
    il_gguf_close(g);
  }
  il_config c;
  base_cfg(&c, path);
  int nv3 = 0;
  float *file = run(&c, &nv3, NULL);
  if (file) {
    IL_CHECK(nv3 == nv && memcmp(file, cpu, n * sizeof(float)) == 0);
    free(file);
  }
  unlink(path);
  free(want), free(cpu);
}

/* Refusals that name what is refused: an architecture not in the table, and phi3's LongRoPE
 * factor tensors (the 128k models), which the pass does not apply. */
static void check_refusals(void) {
  il_hparams hp = {0};
  IL_CHECK_INT(il_hparams_set_arch(&hp, "gemma2"), IL_ERR_UNSUPPORTED);
  IL_CHECK(strstr(il_error_detail(), "'gemma2'") && strstr(il_error_detail(), "qwen3, phi3, gemma3, qwen3moe"));
  /* qwen3moe: qwen3's attention (its MoE FFN and logits are test_moe's) */
  IL_CHECK_OK(il_hparams_set_arch(&hp, "qwen3moe"));
  IL_CHECK(hp.qk_norm && !hp.qkv_bias && !hp.fused && !hp.gemma && hp.rope_mode == IL_ROPE_NEOX);
  il_model *src = NULL;
  IL_CHECK_OK(il_builtin_open("builtin:phi3-tiny", NULL, 2, &src));
  if (!src) return;
  il_gguf_tensor *ts = calloc((size_t)src->n_tensors + 1, sizeof *ts);
  memcpy(ts, src->tensors, sizeof *ts * (size_t)src->n_tensors);
  static const float factors[16] = {1};
  ts[src->n_tensors] = (il_gguf_tensor){.name = "rope_factors_long.weight", .n_dims = 1, .ne = {16, 1, 1, 1},
                                        .type = IL_DTYPE_F32, .nbytes = sizeof factors, .data = factors};
  il_model m = {.hp = src->hp};
  IL_CHECK_INT(il_model_bind(&m, ts, src->n_tensors + 1), IL_ERR_UNSUPPORTED);
  IL_CHECK(strstr(il_error_detail(), "'rope_factors_long.weight'") && strstr(il_error_detail(), "LongRoPE"));
  for (int64_t i = 0; i < m.n_owned; i++) il_mem_free(m.owned[i]);
  il_mem_free(m.owned);
  il_mem_free(m.layers);
  free(ts);
  il_model_free(src);
}

/* The real-shape built-ins: shapes only (nothing generated), their parameter counts from the
 * published configs computed here, per layer and for the whole model, and gemma3-270m's window. */
static void check_real_shapes(void) {
  const struct {
    const char *name, *arch;
    int64_t vocab, dim, ff, layers, heads, kv_heads, hd, experts, used;
    bool tied;
  } ms[] = {
      {"builtin:gemma3-270m", "gemma3", 262144, 640, 2048, 18, 4, 1, 256, 0, 0, true},
      {"builtin:qwen3-0.6b-4l", "qwen3", 151936, 1024, 3072, 4, 16, 8, 128, 0, 0, true},
      {"builtin:phi3-mini-2l", "phi3", 32064, 3072, 8192, 2, 32, 32, 96, 0, 0, false},
      {"builtin:qwen3moe-30b-a3b-2l", "qwen3moe", 151936, 2048, 768, 2, 32, 4, 128, 128, 8, false},
  };
  /* the whole published models: 268,098,176 (Gemma 3 270M), 596,049,920 (Qwen3-0.6B, 28
   * layers), 3,821,079,552 (Phi-3-mini, 32), 30,532,122,624 (Qwen3-30B-A3B, 48) */
  const int64_t full_layers[] = {18, 28, 32, 48}, full[] = {268098176LL, 596049920LL, 3821079552LL, 30532122624LL};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    il_model *m = NULL;
    IL_CHECK_OK(il_builtin_open_ex(ms[i].name, NULL, 2, false, &m));
    if (!m) continue;
    const il_hparams *hp = &m->hp;
    IL_CHECK_STR(hp->arch, ms[i].arch);
    IL_CHECK(hp->n_vocab == ms[i].vocab && hp->n_embd == ms[i].dim && hp->n_layer == ms[i].layers &&
             hp->n_head == ms[i].heads && hp->n_head_kv == ms[i].kv_heads && hp->head_dim == ms[i].hd &&
             hp->n_expert == ms[i].experts && hp->n_expert_used == ms[i].used && m->tied_output == ms[i].tied);
    const int64_t d = ms[i].dim, q = ms[i].heads * ms[i].hd, kv = ms[i].kv_heads * ms[i].hd, ff = ms[i].ff;
    const bool qk = strcmp(ms[i].arch, "phi3") != 0, gemma = !strcmp(ms[i].arch, "gemma3");
    const int64_t ffn = ms[i].experts ? d * ms[i].experts + 3 * d * ff * ms[i].experts : 3 * d * ff;
    const int64_t layer = d * q + 2 * d * kv + q * d + ffn + 2 * d + (qk ? 2 * ms[i].hd : 0) + (gemma ? 2 * d : 0);
    const int64_t outer = ms[i].vocab * d * (ms[i].tied ? 1 : 2) + d;
    IL_CHECK_INT((int64_t)m->n_params, outer + ms[i].layers * layer);
    IL_CHECK_INT(outer + full_layers[i] * layer, full[i]);
    printf("%-28s %s, %lld of %lld layers: %.1fM params (the whole model: %.1fM)\n", ms[i].name, ms[i].arch,
           (long long)ms[i].layers, (long long)full_layers[i], (double)m->n_params / 1e6, (double)full[i] / 1e6);
    if (gemma) IL_CHECK_INT(hp->swa, 512);
    il_model_free(m);
  }
}

int main(void) {
  toks[0] = 1;
  for (int i = 1; i < N_TOK; i++) toks[i] = 3 + (i * 37 + 11) % 500;
  check_refusals();
  check_real_shapes();
  check_arch("builtin:qwen3-tiny", "qwen3");
  check_arch("builtin:phi3-tiny", "phi3");
  check_arch("builtin:gemma3-tiny", "gemma3");
  return il_test_finish();
}
