/* engine/engine: load, size, decode, generate. */
#include "engine/engine_impl.h"
#include "engine/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/units.h"
#include "engine/oom.h"
#include "memory/mem.h"
#include "model/builtin.h"

#define IL__DEFAULT_CTX_CAP 4096
#define IL__ALLOC_SLACK 1024 /* per device buffer: the caching allocator rounds to 512 bytes and may hand out a remainder under 512 whole */

/* ---- sizing: the same numbers the allocations below use ---- */

/* Which component a tensor belongs to: -1 embedding, -2 output head, else its layer. */
static int il__component(const char *name) {
  if (!strncmp(name, "blk.", 4)) return atoi(name + 4);
  if (!strncmp(name, "token_embd", 10)) return -1;
  return -2;
}

/* Bytes of the weights placed on a device that cannot read host memory, with 2-D weights in
 * `type` (IL_DTYPE_COUNT: as loaded), 1-D ones in F32 (as the model binds them). */
static size_t il__weights_bytes(const il_model *m, il_dtype type, const uint8_t *layer_dev, bool embd_dev, bool out_dev,
                                bool exps_dev, size_t *n_buffers) {
  size_t n = 0, nb = 0;
  for (int64_t i = 0; i < m->n_tensors; i++) {
    const il_gguf_tensor *t = &m->tensors[i];
    const int c = il__component(t->name);
    const bool on = c == -1 ? embd_dev : c == -2 ? out_dev : (c < m->hp.n_layer && layer_dev[c]);
    if (!on || (!exps_dev && strstr(t->name, "_exps."))) continue; /* --place exps=cpu: the stacks stay */
    if (t->n_dims == 3) /* an expert stack */
      n += type == IL_DTYPE_COUNT ? t->nbytes : il_dtype_row_size(type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
    else if (t->n_dims == 2) n += type == IL_DTYPE_COUNT ? t->nbytes : il_dtype_row_size(type, t->ne[0]) * (size_t)t->ne[1];
    else n += 4 * (size_t)(t->ne[0] ? t->ne[0] : 1);
    nb++;
  }
  /* a tied output head computes on the device from token_embd: a second copy unless co-located */
  if (m->tied_output && out_dev && !embd_dev) {
    n += type == IL_DTYPE_COUNT ? (size_t)m->tok_embd.n_out * m->tok_embd.row_stride
                                : il_dtype_row_size(type, m->tok_embd.n_in) * (size_t)m->tok_embd.n_out;
    nb++;
  }
  *n_buffers = nb;
  return n;
}

/* A cache view with shapes only (no buffers) for kernels' why_not and workspace, which read
 * shapes, never memory. */
static il_kv_view il__engine_shape_view(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *o) {
  const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
  const int32_t block = o->block > 0 ? o->block : n_ctx, max_blocks = (n_ctx + block - 1) / block;
  const il_tensor cells = {.rows = (int64_t)n_seq * max_blocks * block, .cols = kv_dim, .type = o->type,
                           .stride = il_tensor_row_bytes(o->type, kv_dim)};
  return (il_kv_view){.k = cells, .v = cells,
                      .block_table = {.rows = n_seq, .cols = max_blocks, .type = IL_DTYPE_I32,
                                      .stride = (size_t)max_blocks * 4},
                      .block = block, .n_seq = n_seq, .max_blocks = max_blocks, .n_ctx = n_ctx};
}

/* The same for a sliding-window layer's ring of `ring` positions per sequence (engine/kv). */
static il_kv_view il__engine_ring_view(const il_hparams *hp, int32_t n_ctx, int32_t n_seq, const il_kv_opts *o,
                                       int32_t ring) {
  il_kv_opts r = *o;
  r.block = 0;
  il_kv_view v = il__engine_shape_view(hp, ring, n_seq, &r);
  v.max_blocks = (n_ctx + ring - 1) / ring;
  v.block_table.cols = v.max_blocks;
  v.block_table.stride = (size_t)v.max_blocks * 4;
  v.n_ctx = n_ctx;
  v.ring = ring;
  return v;
}

static il_attn_args il__engine_shape_args(const il_hparams *hp, const il_kv_view *kv, int32_t n_tok) {
  const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
  const il_tensor q = {.rows = n_tok, .cols = q_dim, .type = IL_DTYPE_F32, .stride = (size_t)q_dim * 4};
  const il_tensor ids = {.rows = 1, .cols = n_tok, .type = IL_DTYPE_I32, .stride = (size_t)n_tok * 4};
  return (il_attn_args){.out = q, .q = q, .seq = ids, .pos = ids, .kv = kv, .n_heads = hp->n_head,
                        .n_kv_heads = hp->n_head_kv, .head_dim = hp->head_dim,
                        .scale = 1.0f / sqrtf((float)hp->head_dim)};
}

/* Attention workspace of kernel k for these sizes. */
static size_t il__attn_ws(il_backend *b, const il_attn_kernel *k, const il_hparams *hp, int32_t n_batch, int32_t n_ctx,
                          int32_t n_seq, const il_kv_opts *o) {
  if (!k) return 0;
  il_kv_view kv = il__engine_shape_view(hp, n_ctx, n_seq, o);
  il_attn_args a = il__engine_shape_args(hp, &kv, n_batch);
  size_t ws = k->workspace(b, &a);
  il_kv_opts ko = *o;
  ko.batch = n_batch;
  const int32_t ring = il_kv_cache_ring(hp, n_ctx, &ko);
  if (ring) { /* the forward state sizes the larger of the two views' (model/forward.c) */
    il_kv_view rv = il__engine_ring_view(hp, n_ctx, n_seq, o, ring);
    a = il__engine_shape_args(hp, &rv, n_batch);
    const size_t wr = k->workspace(b, &a);
    ws = wr > ws ? wr : ws;
  }
  return ws;
}


int32_t il__n_logits(const il_engine *e, int32_t n_batch, int32_t n_seq) {
  int32_t n = e->cfg.logits_all ? n_batch : n_seq;
  return n < n_batch ? n : n_batch;
}

/* What the device (e->backend) holds for configuration s: the numbers the allocations use. */
/* The device's own matmul scratch (ops->reserve) for this shape: the device layers' weights and
 * the output head, as shapes in the shape's weight type. */
static size_t il__reserve_bytes(const il_model *m, il_backend *b, const il__engine_shape *s, int32_t n_dev) {
  const il_backend_ops *o = b->ops;
  if (o->version < 3 || !o->reserve_bytes) return 0;
  il_tensor *w = il_mem_alloc(IL_MEM_WORKSPACE,
                              sizeof *w * ((IL_MODEL_LAYER_MATMULS + IL_MODEL_MOE_MATMULS) * (size_t)m->hp.n_layer + 1),
                              "reserve list");
  if (!w) return 0;
  int n = 0;
  for (int32_t l = 0; n_dev && l < m->hp.n_layer; l++)
    if (s->layer_dev[l]) {
      n += il_model_layer_shapes(m, l, s->wtype, w + n);
      n += s->exps_dev ? il_model_moe_shapes(m, l, s->wtype, w + n) : 0;
    }
  if (s->out_dev) w[n++] = il_model_output_shape(m, s->wtype);
  const size_t bytes = n ? o->reserve_bytes(b, s->n_batch, w, n) : 0;
  il_mem_free(w);
  return bytes ? bytes + 2 * IL__ALLOC_SLACK : 0;
}

static const il_attn_kernel *il__attn_of(const il_engine *e, il_backend *b);

/* The need of s on backend b (host_visible: it reads the weights in place) with overhead fixed,
 * for model m: the engine's, or with --tp the shard b holds (its layers' shapes; the embedding
 * and the head are the model's). */
static il_oom_need il__need_on(const il_engine *e, const il_model *m, const il__engine_shape *s, il_backend *b,
                               bool host_visible, size_t fixed) {
  const il_hparams *hp = &m->hp;
  il_oom_need n = {0};
  int32_t n_dev = 0;
  for (int l = 0; l < hp->n_layer; l++) n_dev += s->layer_dev[l];
  size_t nb = 0;
  if (!host_visible && m != e->model) { /* a shard: the model's embedding and head, the shard's layers */
    uint8_t *none = il_mem_calloc(IL_MEM_OTHER, (size_t)hp->n_layer + 1, "placement mask");
    if (none) n.weights = il__weights_bytes(e->model, s->wtype, none, s->embd_dev, s->out_dev, true, &nb);
    il_mem_free(none);
    for (int l = 0; l < hp->n_layer; l++) {
      size_t c = 0;
      if (s->layer_dev[l]) n.weights += il_model_layer_bytes_as(m, l, s->wtype, &c);
      nb += c;
    }
    n.weights += IL__ALLOC_SLACK * nb;
  } else if (!host_visible) {
    n.weights = il__weights_bytes(e->model, s->wtype, s->layer_dev, s->embd_dev, s->out_dev, s->exps_dev, &nb);
    n.weights += IL__ALLOC_SLACK * nb;
    if (s->stream && n_dev) { /* the device layers' weights become two slots of layer 0's size */
      uint8_t *none = il_mem_calloc(IL_MEM_OTHER, (size_t)hp->n_layer + 1, "placement mask");
      size_t nb2 = 0;
      if (none) n.weights = il__weights_bytes(e->model, s->wtype, none, s->embd_dev, s->out_dev, s->exps_dev, &nb2) +
                            IL__ALLOC_SLACK * (nb2 + 24) + 2 * il_model_layer_bytes(e->model, 0);
      il_mem_free(none);
    }
  }
  if (n_dev) {
    il_kv_opts ko = s->kv;
    ko.batch = s->n_batch; /* the engine's cache: sliding-window layers keep window + batch - 1 positions */
    bool ring = false;
    for (int l = 0; l < hp->n_layer; l++)
      if (s->layer_dev[l]) {
        n.kv += il_kv_cache_layer_bytes(hp, l, s->n_ctx, s->n_seq, &ko);
        ring = ring || il_kv_cache_layer_ring(hp, l, s->n_ctx, &ko);
      }
    n.kv += il_kv_cache_tables_bytes(hp, s->n_ctx, s->n_seq, &ko, ring) +
            IL__ALLOC_SLACK * (2 * (size_t)n_dev + 1 + ring);
    const il_attn_kernel *k = b == e->backend || !e->attn ? e->attn : il__attn_of(e, b);
    n.workspace = il__attn_ws(b, k, hp, s->n_batch, s->n_ctx, s->n_seq, &s->kv) + IL__ALLOC_SLACK;
  }
  if (n_dev || s->out_dev) n.workspace += il__reserve_bytes(m, b, s, n_dev);
  if (n_dev || s->embd_dev || s->out_dev)
    n.activations = il_forward_lane_bytes(hp, s->act_type, s->n_batch, il__n_logits(e, s->n_batch, s->n_seq), n_dev > 0,
                                          s->out_dev, b, s->kv.type) +
                    IL__ALLOC_SLACK * (size_t)(11 + il_forward_lane_scratches(b, s->act_type, s->kv.type));
  n.fixed = fixed;
  return n;
}

il_oom_need il__engine_need(const il_engine *e, const il__engine_shape *s) {
  return il__need_on(e, e->model, s, e->backend, e->info.host_visible, e->fixed_bytes);
}

size_t il__device_total(il_backend *b) {
  size_t free_b = 0, total = 0;
  b->ops->memory(b, &free_b, &total);
  return total;
}

/* Device k of a list holds layers [first, first + counts[k]). */
static int32_t il__split_first(const int32_t *counts, int k) {
  int32_t a = 0;
  for (int j = 0; j < k; j++) a += counts[j];
  return a;
}

/* Device k's need with layers [a, b) on it (mask: scratch of n_layer bytes). */
static il_oom_need il__need_range(const il_engine *e, const il__engine_shape *s, int k, int32_t a, int32_t b,
                                  uint8_t *mask) {
  const int32_t L = e->model->hp.n_layer;
  memset(mask, 0, (size_t)L);
  if (b > a) memset(mask + a, 1, (size_t)(b - a));
  il__engine_shape d = *s;
  d.layer_dev = mask;
  d.embd_dev = k == 0 && s->embd_dev;
  d.out_dev = k == e->n_devs - 1 && s->out_dev;
  il_backend_info info;
  e->devs[k]->ops->info(e->devs[k], &info);
  return il__need_on(e, e->model, &d, e->devs[k], info.host_visible, e->dev_fixed[k]);
}

/* --tp: device k holds shard k of every layer; the first also the embedding and the head. */
static il_oom_need il__need_shard(const il_engine *e, const il__engine_shape *s, int k, uint8_t *mask) {
  memset(mask, 1, (size_t)e->model->hp.n_layer);
  il__engine_shape d = *s;
  d.layer_dev = mask;
  d.embd_dev = k == 0 && s->embd_dev;
  d.out_dev = k == 0 && s->out_dev;
  il_backend_info info;
  e->devs[k]->ops->info(e->devs[k], &info);
  return il__need_on(e, &e->tp.shard[k], &d, e->devs[k], info.host_visible, e->dev_fixed[k]);
}

il_oom_need il__engine_need_dev(const il_engine *e, const il__engine_shape *s, int k) {
  il_oom_need n = {0};
  uint8_t *mask = il_mem_calloc(IL_MEM_OTHER, (size_t)e->model->hp.n_layer + 1, "placement mask");
  if (!mask) return n;
  if (e->tp.n > 1) {
    n = il__need_shard(e, s, k, mask);
    il_mem_free(mask);
    return n;
  }
  const int32_t a = il__split_first(s->split, k);
  n = il__need_range(e, s, k, a, a + s->split[k], mask);
  il_mem_free(mask);
  return n;
}

bool il__engine_fits(const il_engine *e, const il__engine_shape *s, size_t cap, int k, size_t *need_k) {
  if ((!s->split && e->tp.n < 2) || e->n_devs < 2) {
    il_oom_need n = il__engine_need(e, s);
    *need_k = il_oom_need_total(&n);
    return *need_k <= cap;
  }
  bool fits = true;
  for (int j = 0; j < e->n_devs; j++) {
    il_oom_need n = il__engine_need_dev(e, s, j);
    const size_t t = il_oom_need_total(&n);
    if (j == k) *need_k = t;
    fits &= t <= il__device_total(e->devs[j]);
  }
  return fits;
}

/* --split auto: every device's need for every range of layers it could hold, as a fraction of
 * its size; then, over the contiguous splits in order, the one whose largest fraction is the
 * smallest, and among those the one with the smallest sum of squared fractions (so devices
 * that could stay empty share the load instead). Two dynamic programs over (device, first
 * layer): exact, and L * L * n_devs needs (about 50000 for 80 layers on 8 devices). */
void il__engine_split_auto(const il_engine *e, const il__engine_shape *s, int32_t *counts) {
  int32_t L = 0; /* the layers on the devices: the first ones */
  while (L < e->model->hp.n_layer && s->layer_dev[L]) L++;
  const int nd = e->n_devs;
  for (int k = 0; k < nd; k++) counts[k] = k == nd - 1 ? L : 0; /* if anything below fails */
  const size_t W = (size_t)L + 1;
  double *frac = il_mem_alloc(IL_MEM_OTHER, sizeof(double) * (size_t)nd * W * W, "split table");
  double *best = il_mem_alloc(IL_MEM_OTHER, sizeof(double) * ((size_t)nd + 1) * W * 2, "split table");
  int32_t *next = il_mem_alloc(IL_MEM_OTHER, sizeof(int32_t) * (size_t)nd * W, "split table");
  uint8_t *mask = il_mem_calloc(IL_MEM_OTHER, W, "placement mask");
  if (frac && best && next && mask) {
#define IL__FRAC(k, a, b) frac[((size_t)(k) * W + (size_t)(a)) * W + (size_t)(b)]
    for (int k = 0; k < nd; k++) {
      size_t cap = il__device_total(e->devs[k]);
      if (!cap) cap = 1;
      for (int32_t a = 0; a <= L; a++)
        for (int32_t b = a; b <= L; b++) {
          il_oom_need n = il__need_range(e, s, k, a, b, mask);
          IL__FRAC(k, a, b) = (double)il_oom_need_total(&n) / (double)cap;
        }
    }
    /* pass 0: mx[k][a] = the smallest largest fraction of devices k.. holding layers a..L-1 */
    double *mx = best, *sq = best + ((size_t)nd + 1) * W;
    for (int32_t a = 0; a <= L; a++) mx[(size_t)nd * W + (size_t)a] = a == L ? 0 : 1e300;
    for (int k = nd - 1; k >= 0; k--)
      for (int32_t a = 0; a <= L; a++) {
        double m = 1e300;
        for (int32_t b = k == nd - 1 ? L : a; b <= L; b++) {
          const double f = IL__FRAC(k, a, b), rest = mx[(size_t)(k + 1) * W + (size_t)b];
          const double v = f > rest ? f : rest;
          if (v < m) m = v;
        }
        mx[(size_t)k * W + (size_t)a] = m;
      }
    const double t = mx[0] * (1 + 1e-12);
    /* pass 1: within t, the smallest sum of squares */
    for (int32_t a = 0; a <= L; a++) sq[(size_t)nd * W + (size_t)a] = a == L ? 0 : 1e300;
    for (int k = nd - 1; k >= 0; k--)
      for (int32_t a = 0; a <= L; a++) {
        double m = 1e300;
        int32_t arg = L;
        for (int32_t b = k == nd - 1 ? L : a; b <= L; b++) {
          const double f = IL__FRAC(k, a, b), rest = sq[(size_t)(k + 1) * W + (size_t)b];
          if (f > t || rest >= 1e300) continue;
          if (f * f + rest < m) m = f * f + rest, arg = b;
        }
        sq[(size_t)k * W + (size_t)a] = m;
        next[(size_t)k * W + (size_t)a] = arg;
      }
    if (sq[0] < 1e300)
      for (int k = 0, a = 0; k < nd; k++) {
        const int32_t b = next[(size_t)k * W + (size_t)a];
        counts[k] = b - a;
        a = b;
      }
#undef IL__FRAC
  }
  il_mem_free(frac);
  il_mem_free(best);
  il_mem_free(next);
  il_mem_free(mask);
}

void il_split_format(const int32_t *counts, int n, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = 0;
  for (int k = 0; k < n && o < size; k++) {
    int w = snprintf(buf + o, size - o, "%s%d", k ? "," : "", counts[k]);
    if (w < 0) break;
    o += (size_t)w;
  }
}

/* ---- open ---- */

int32_t il__engine_default_ctx(const il_engine *e, size_t available, bool *capped) {
  /* halved until the KV cache fits in half of what is left */
  const size_t budget = available / 2;
  int32_t n = e->n_ctx;
  *capped = false;
  il_kv_opts ko = e->kv_opts;
  while (n > 256 && (ko.batch = il__batch_for(e->cfg.batch, n, e->n_seq),
                     il_kv_cache_bytes(e->tp.n > 1 ? &e->tp.shard[0].hp : &e->model->hp, n, e->n_seq, &ko) > budget)) {
    n /= 2;
    *capped = true;
  }
  return n;
}

int32_t il__engine_default_ctx_list(const il_engine *e, const int32_t *counts, const size_t *available, bool *capped) {
  const il_hparams *hp = &e->model->hp;
  int32_t n = e->n_ctx;
  *capped = false;
  il_kv_opts ko = e->kv_opts;
  for (;;) {
    bool over = false;
    ko.batch = il__batch_for(e->cfg.batch, n, e->n_seq); /* sliding-window layers keep window + batch - 1 */
    for (int k = 0, l0 = 0; k < e->n_devs; l0 += counts[k], k++) {
      if (!counts[k]) continue;
      size_t bytes = 0;
      bool ring = false;
      for (int32_t l = l0; l < l0 + counts[k] && l < hp->n_layer; l++) {
        bytes += il_kv_cache_layer_bytes(hp, l, n, e->n_seq, &ko);
        ring = ring || il_kv_cache_layer_ring(hp, l, n, &ko);
      }
      if (bytes + il_kv_cache_tables_bytes(hp, n, e->n_seq, &ko, ring) > available[k] / 2) over = true;
    }
    if (!over || n <= 256) return n;
    n /= 2;
    *capped = true;
  }
}

static size_t il__available_memory(il_backend *b) {
  size_t free_b = 0, total = 0;
  b->ops->memory(b, &free_b, &total);
  return free_b ? free_b : (size_t)8 << 30;
}

static il_status il__pick_attn(il_engine *e) {
  int n = 0;
  const il_attn_kernel *ks = e->backend->ops->attn_kernels(e->backend, &n);
  const il_hparams *hp = &e->model->hp;
  il_kv_view kv = il__engine_shape_view(hp, e->n_ctx, e->n_seq, &e->kv_opts);
  il_attn_args a = il__engine_shape_args(hp, &kv, e->n_batch);
  a.slice = e->cfg.attn_slice;
  const char *want = e->cfg.attn[0] ? e->cfg.attn : "auto";
  e->attn_why[0] = 0;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const char *why = ks[i].why_not(e->backend, &a);
    if (!strcmp(want, "auto")) {
      if (!why) {
        e->attn = &ks[i];
        return IL_OK;
      }
      int w = snprintf(e->attn_why + off, sizeof e->attn_why - off, "%s%s: %s", off ? "; " : "", ks[i].name, why);
      if (w > 0 && (size_t)w < sizeof e->attn_why - off) off += (size_t)w;
    } else if (!strcmp(want, ks[i].name)) {
      if (why) return il_error(IL_ERR_UNSUPPORTED, "--attn %s: %s", want, why);
      e->attn = &ks[i];
      return IL_OK;
    }
  }
  char names[256] = "";
  for (int i = 0, o = 0; i < n && o < (int)sizeof names; i++)
    o += snprintf(names + o, sizeof names - (size_t)o, "%s%s", i ? ", " : "", ks[i].name);
  if (!strcmp(want, "auto"))
    return il_error(IL_ERR_UNSUPPORTED, "--attn auto: no attention kernel of %s can run this model (%s)", e->info.name,
                    e->attn_why);
  return il_error(IL_ERR_INVALID_ARG, "--attn: '%s' is not a kernel of %s (auto, %s)", want, e->info.name, names);
}

/* The attention kernel a lane's backend uses: the device's choice, or the same name on the CPU
 * backend (cpu and sim list the same kernels). */
static const il_attn_kernel *il__attn_of(const il_engine *e, il_backend *b) {
  if (b == e->backend) return e->attn;
  int n = 0;
  const il_attn_kernel *ks = b->ops->attn_kernels(b, &n);
  for (int i = 0; i < n; i++)
    if (!strcmp(ks[i].name, e->attn->name)) return &ks[i];
  return n ? &ks[0] : NULL;
}

static const il_attn_kernel *il__attn_for(void *ctx, il_backend *b) { return il__attn_of(ctx, b); }

/* The device of a --place blk.N=K: K, its position in a list of n devices (1..n), else 0. */
static int il__place_dev(const char *where, int n) {
  char *end;
  const long k = strtol(where, &end, 10);
  return end != where && *end == 0 && k >= 1 && k <= n ? (int)k : 0;
}

/* Sets one component from "NAME=cpu|device": token_embd, output, blk.N, blk.A-B, or exps (every
 * layer's MoE experts: device = with their layer); with a --device list blk.N=K too (K: a
 * device's position in the list, applied by il__split_layers). */
static il_status il__place_one(il_engine *e, const char *item) {
  const int32_t L = e->model->hp.n_layer;
  const char *eq = strchr(item, '=');
  if (!eq) return il_error(IL_ERR_INVALID_ARG, "--place: '%s' is not NAME=cpu|device", item);
  const char *where = eq + 1;
  bool dev;
  const size_t n = (size_t)(eq - item);
  if (!strcmp(where, "cpu")) dev = false;
  else if (!strcmp(where, "device") || !strcmp(where, "gpu")) dev = true;
  else if (e->n_devs > 1 && n > 4 && !strncmp(item, "blk.", 4) && il__place_dev(where, e->n_devs) > 0)
    return IL_OK; /* blk.N=K: the split moves to put it there (il__split_layers) */
  else if (e->n_devs > 1)
    return il_error(IL_ERR_INVALID_ARG, "--place: '%s': the place is cpu, device, or for blk.N the position of a device "
                                        "of the --device list (1..%d)", item, e->n_devs);
  else return il_error(IL_ERR_INVALID_ARG, "--place: '%s': the place is cpu or device", item);
  if (n == 10 && !strncmp(item, "token_embd", n)) e->embd_dev = dev;
  else if (n == 6 && !strncmp(item, "output", n)) e->out_dev = dev;
  else if (n == 4 && !strncmp(item, "exps", n)) {
    if (!e->model->hp.n_expert)
      return il_error(IL_ERR_INVALID_ARG, "--place: '%s': %s has no experts (not a mixture-of-experts model)", item,
                      e->model->name);
    e->exps_dev = dev;
  }
  else if (n > 4 && !strncmp(item, "blk.", 4)) {
    char *end;
    long a = strtol(item + 4, &end, 10), b = a;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    if (end != eq || a < 0 || b < a || b >= L)
      return il_error(IL_ERR_INVALID_ARG, "--place: '%s': layers are blk.N or blk.A-B with 0 <= A <= B < %d", item, L);
    for (long l = a; l <= b; l++) e->layer_dev[l] = dev;
  } else {
    return il_error(IL_ERR_INVALID_ARG, "--place: '%.*s' is not a component (token_embd, output, blk.N, blk.A-B, exps)",
                    (int)n, item);
  }
  return IL_OK;
}

/* Where each component runs, from --gpu-layers and --place. Opens the CPU backend when a
 * component runs there and the device is not the CPU. */
static il_status il__placement(il_engine *e) {
  const il_config *cfg = &e->cfg;
  const int32_t L = e->model->hp.n_layer;
  int32_t n = L;
  e->embd_dev = e->out_dev = e->exps_dev = true;
  const char *g = cfg->gpu_layers[0] ? cfg->gpu_layers : "all";
  if (!strcmp(g, "all")) {
    n = L;
  } else if (!strcmp(g, "auto")) {
    e->auto_layers = true; /* a --device list: il__split_layers */
  } else if (strchr(g, ',')) {
    /* one count per device of a list, in order: llama.cpp's -ngl with the split given as
     * counts; the rest on the CPU */
    if (e->n_devs < 2)
      return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s': one count per device of a --device list; --device "
                                          "names one device", g);
    int k = 0;
    n = 0;
    for (const char *p = g;; k++) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || v < 0 || v > L)
        return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s': count %d is not a layer count (0..%d)", g, k + 1, L);
      if (k < e->n_devs) e->gl_counts[k] = (int32_t)v;
      n += (int32_t)v;
      if (*end == 0) break;
      if (*end != ',') return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s': counts are separated by commas", g);
      p = end + 1;
    }
    if (k + 1 != e->n_devs)
      return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s': %s counts than the %d devices of --device", g,
                      k + 1 > e->n_devs ? "more" : "fewer", e->n_devs);
    if (n > L) return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s': %d layers in all; the model has %d", g, n, L);
    if (cfg->split[0])
      return il_error(IL_ERR_INVALID_ARG, "--gpu-layers '%s' gives each device's layers; --split '%s' would too: give "
                                          "one of them", g, cfg->split);
    e->gl_list = true;
    e->embd_dev = false;
    e->out_dev = n == L;
  } else if (cfg->auto_from > 0) { /* auto, one layer fewer than predicted (see il_engine_open) */
    n = (int32_t)strtol(g, NULL, 10);
    e->auto_layers = false;
    e->embd_dev = false;
    e->out_dev = n == L;
    e->auto_retry = true;
  } else {
    char *end;
    long v = strtol(g, &end, 10);
    if (*end || end == g || v < 0)
      return il_error(IL_ERR_INVALID_ARG, "--gpu-layers: '%s' is not all, auto or a layer count", g);
    n = v > L ? L : (int32_t)v;
    /* offloading as llama.cpp does it: the embedding lookup on the CPU, the output head with the
     * last layer */
    e->embd_dev = false;
    e->out_dev = n == L;
  }
  for (int32_t l = 0; l < L; l++) e->layer_dev[l] = l < n;
  if (cfg->place[0]) {
    char buf[sizeof cfg->place];
    snprintf(buf, sizeof buf, "%s", cfg->place);
    char *save = NULL;
    for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) IL_TRY(il__place_one(e, it));
  }
  bool any_cpu = !e->embd_dev || !e->out_dev || e->auto_layers || !e->exps_dev;
  for (int32_t l = 0; l < L; l++) any_cpu |= !e->layer_dev[l];
  if (any_cpu && !e->info.host_visible) {
    il_backend_opts bo = {.threads = cfg->threads, .isa = cfg->isa, .repack = cfg->repack};
    IL_TRY(il_backend_open("cpu", &bo, &e->host));
  } else {
    e->host = e->backend; /* the device is the CPU: every component is there already */
    if (e->info.host_visible && (any_cpu || cfg->place[0]))
      il_log(IL_LOG_INFO, "--gpu-layers/--place: the device is the CPU (%s), so every component runs there", e->info.name);
    if (e->info.host_visible) {
      e->embd_dev = e->out_dev = e->exps_dev = true;
      memset(e->layer_dev, 1, (size_t)L);
      e->auto_layers = false;
    }
  }
  return IL_OK;
}

/* --gpu-layers auto: the most layers (first ones) whose device need fits the device. */
static il_status il__auto_layers(il_engine *e, il__engine_shape *shape) {
  const int32_t L = e->model->hp.n_layer;
  size_t free_b = 0, cap = 0;
  e->backend->ops->memory(e->backend, &free_b, &cap);
  int32_t best = -1;
  for (int32_t k = L; k >= 0; k--) {
    memset(e->layer_dev, 0, (size_t)L);
    memset(e->layer_dev, 1, (size_t)k);
    e->embd_dev = false;
    e->out_dev = k == L;
    shape->out_dev = e->out_dev, shape->embd_dev = e->embd_dev;
    il_oom_need n = il__engine_need(e, shape);
    if (il_oom_need_total(&n) <= cap) {
      best = k;
      break;
    }
  }
  if (best < 0) best = 0;
  memset(e->layer_dev, 0, (size_t)L);
  memset(e->layer_dev, 1, (size_t)best);
  e->out_dev = best == L;
  shape->out_dev = e->out_dev;
  return IL_OK;
}

/* --device LIST: each device takes whole layers in order, as many as its share of --split (or
 * of the devices' sizes) gives: device k holds layers [round(L * c_k / C), round(L * c_(k+1) / C))
 * with c_k the sum of the shares before it and C all of them; --split auto: the counts that
 * balance each device's whole need against its size (il__engine_split_auto). The embedding
 * runs on the first device, the output head on the last; the residual crosses once per
 * boundary. --gpu-layers N: the first N layers are shared out so, the rest (and the output head
 * unless N is all) run on the CPU; --gpu-layers A,B,...: device k takes the k-th count;
 * --gpu-layers auto: the most layers (the first ones) that fit every device, shared out so.
 * --place token_embd=, output= and exps= place components (device: the first device for the
 * embedding, the last for the head, each layer's own for its experts); --place blk.N=K moves
 * the split's boundaries so that layer N runs on the list's K-th device (layers stay in list
 * order: the ones before it on devices up to K, the ones after from K on); blk.N=cpu puts the
 * last layers on the CPU as --gpu-layers does (a layer on the CPU between two on devices is an
 * error); --offload stream: each device streams its own layers through two slots of its own. */

/* The counts of n_on layers (the first ones) from --gpu-layers A,B,..., --split auto, the
 * --split ratios or the devices' sizes. */
static il_status il__split_counts(const il_engine *e, const il__engine_shape *shape, int32_t n_on, int32_t *counts) {
  const il_config *cfg = &e->cfg;
  const int nd = e->n_devs;
  if (e->gl_list) {
    memcpy(counts, e->gl_counts, sizeof e->gl_counts);
  } else if (!strcmp(cfg->split, "auto")) {
    il__engine_split_auto(e, shape, counts);
  } else {
    double share[IL_BACKEND_LIST_MAX], sum = 0;
    if (cfg->split[0]) {
      int n = 0;
      for (const char *p = cfg->split; n <= nd;) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || v < 0 || v != v || v > 1e12)
          return il_error(IL_ERR_INVALID_ARG, "--split '%s': ratio %d is not a number >= 0 (or: --split auto)",
                          cfg->split, n + 1);
        if (n < nd) share[n] = v;
        n++;
        if (*end == 0) break;
        if (*end != ',') return il_error(IL_ERR_INVALID_ARG, "--split '%s': ratios are separated by commas", cfg->split);
        p = end + 1;
      }
      if (n != nd)
        /* --device is not echoed in these messages: under plan it holds the trial specs
         * (sim:BYTES,dry), not what the user typed */
        return il_error(IL_ERR_INVALID_ARG, "--split '%s': %s ratios than the %d devices of --device", cfg->split,
                        n > nd ? "more" : "fewer", nd);
    } else {
      for (int k = 0; k < nd; k++) share[k] = (double)il__device_total(e->devs[k]);
    }
    for (int k = 0; k < nd; k++) sum += share[k];
    if (!(sum > 0)) return il_error(IL_ERR_INVALID_ARG, "--split '%s': every ratio is 0", cfg->split);
    double c = 0;
    for (int k = 0; k < nd; k++) {
      const int32_t a = (int32_t)llround(n_on * c / sum);
      c += share[k];
      const int32_t b = k == nd - 1 ? n_on : (int32_t)llround(n_on * c / sum);
      counts[k] = b - a;
    }
  }
  return IL_OK;
}

/* Applies --place blk.A-B=K to counts (of the n_on layers on the devices): each such layer is
 * put on device K, the layers before it on devices up to K and the ones after from K on.
 * IL_ERR_INVALID_ARG when a layer is on the CPU or two items ask for the layers out of order. */
static il_status il__split_pins(const il_engine *e, int32_t n_on, int32_t *counts) {
  const il_config *cfg = &e->cfg;
  const int nd = e->n_devs;
  if (!strstr(cfg->place, "blk.")) return IL_OK;
  int8_t dev[4096];
  if (n_on > (int32_t)sizeof dev) return il_error(IL_ERR_INVALID_ARG, "--place blk.N: at most %zu layers", sizeof dev);
  int8_t pin[4096];
  memset(pin, -1, (size_t)n_on);
  for (int k = 0, l = 0; k < nd; k++)
    for (int32_t j = 0; j < counts[k]; j++) dev[l++] = (int8_t)k;
  char buf[sizeof cfg->place];
  snprintf(buf, sizeof buf, "%s", cfg->place);
  char *save = NULL;
  for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
    const char *eq = strchr(it, '=');
    if (strncmp(it, "blk.", 4) || !eq) continue;
    const int K = il__place_dev(eq + 1, nd) - 1;
    char *end;
    long a = strtol(it + 4, &end, 10), b = a;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    if (end != eq || a < 0 || b < a || b >= e->model->hp.n_layer)
      return il_error(IL_ERR_INVALID_ARG, "--place: '%s': layers are blk.N or blk.A-B with 0 <= A <= B < %d", it,
                      e->model->hp.n_layer);
    if (K < 0) continue; /* cpu or device: between the devices and the CPU (il__place_one) */
    if (b >= n_on)
      return il_error(IL_ERR_INVALID_ARG, "--place '%s': layer %ld runs on the CPU (--gpu-layers %s)", it, b,
                      cfg->gpu_layers);
    for (long l = a; l <= b; l++) {
      if (pin[l] >= 0 && pin[l] != K)
        return il_error(IL_ERR_INVALID_ARG, "--place '%s': layer %ld is placed on device %d already", it, l, pin[l] + 1);
      pin[l] = (int8_t)K;
    }
  }
  for (int32_t l = 0; l < n_on; l++) {
    if (pin[l] < 0) continue;
    for (int32_t j = 0; j < n_on; j++) {
      if (j < l && dev[j] > pin[l]) dev[j] = pin[l];
      if (j > l && dev[j] < pin[l]) dev[j] = pin[l];
    }
    dev[l] = pin[l];
  }
  for (int32_t l = 0; l < n_on; l++)
    if (pin[l] >= 0 && dev[l] != pin[l])
      return il_error(IL_ERR_INVALID_ARG, "--place '%s': layer %d on device %d and a later one on an earlier device: "
                                          "layers run on the devices in list order", cfg->place, l, pin[l] + 1);
  memset(counts, 0, sizeof(int32_t) * (size_t)nd);
  for (int32_t l = 0; l < n_on; l++) counts[dev[l]]++;
  return IL_OK;
}

/* --gpu-layers auto on a list: the most layers on the devices (the first ones) whose split fits
 * every device, by bisection over the count (the output head with the layers when all are). */
static void il__split_auto_layers(il_engine *e, il__engine_shape *shape) {
  const int32_t L = e->model->hp.n_layer;
  int32_t lo = 0, hi = L + 1, c[IL_BACKEND_LIST_MAX];
  e->embd_dev = shape->embd_dev = false; /* as llama.cpp offloads: the embedding lookup on the CPU */
  while (hi - lo > 1) {
    const int32_t k = lo + (hi - lo) / 2;
    memset(e->layer_dev, 0, (size_t)L);
    memset(e->layer_dev, 1, (size_t)k);
    e->out_dev = shape->out_dev = k == L;
    size_t need;
    shape->split = c;
    const bool ok = il__split_counts(e, shape, k, c) == IL_OK && il__split_pins(e, k, c) == IL_OK &&
                    il__engine_fits(e, shape, 0, 0, &need);
    if (ok) lo = k;
    else hi = k;
  }
  il_error_clear();
  memset(e->layer_dev, 0, (size_t)L);
  memset(e->layer_dev, 1, (size_t)lo);
  e->out_dev = shape->out_dev = lo == L;
}

static il_status il__split_layers(il_engine *e, il__engine_shape *shape) {
  const int32_t L = e->model->hp.n_layer;
  const int nd = e->n_devs;
  if (e->auto_layers) il__split_auto_layers(e, shape);
  int32_t n_on = 0; /* the layers on the devices: the first ones (--gpu-layers), the rest on the CPU */
  while (n_on < L && e->layer_dev[n_on]) n_on++;
  for (int32_t l = n_on; l < L; l++)
    if (e->layer_dev[l])
      return il_error(IL_ERR_INVALID_ARG, "--place '%s': with a --device list the layers on the CPU are the last ones: "
                                          "give --gpu-layers N or one count per device (--gpu-layers A,B,...)",
                      e->cfg.place);
  shape->split = e->split_n;
  IL_TRY(il__split_counts(e, shape, n_on, e->split_n));
  IL_TRY(il__split_pins(e, n_on, e->split_n));
  for (int k = 0, l = 0; k < nd; k++)
    for (int32_t j = 0; j < e->split_n[k]; j++, l++) e->layer_b[l] = e->devs[k];
  for (int32_t l = n_on; l < L; l++) e->layer_b[l] = e->host; /* auto may have taken layers off */
  return IL_OK;
}

static il_status il__kv_options(const il_config *cfg, il_kv_opts *o) {
  IL_TRY(il_kv_type_parse(cfg->kv_type, &o->type));
  if (!strcmp(cfg->kv, "contiguous") || !*cfg->kv) o->block = 0;
  else if (!strcmp(cfg->kv, "paged")) o->block = cfg->kv_block > 0 ? cfg->kv_block : 16;
  else return il_error(IL_ERR_INVALID_ARG, "--kv: '%s' is not a KV cache layout (contiguous, paged)", cfg->kv);
  return IL_OK;
}

/* Tokens per pass: the config's, at most every cell of the cache (ctx x n_seq can exceed an int). */
int32_t il__batch_for(int32_t batch, int32_t n_ctx, int32_t n_seq) {
  const int64_t cells = (int64_t)n_ctx * n_seq;
  return batch < cells ? batch : (int32_t)cells;
}

/* --preload: one forward pass of one token, so the first request meets kernels, buffers and
 * weights already touched; the cache is emptied again. */
static il_status il__warmup(il_engine *e) {
  const int32_t bos = il_vocab_bos(e->vocab);
  const il_batch_entry b = {.token = bos >= 0 ? bos : 0, .seq = 0, .pos = 0, .logits = true};
  IL_TRY(il_engine_decode(e, &b, 1, NULL));
  IL_TRY(il_engine_seq_remove(e, 0));
  il_startup_mark(&e->startup, IL_STARTUP_WARMUP, 0);
  il_startup_note(&e->startup, IL_STARTUP_WARMUP, "one forward pass of one token (--preload)");
  return IL_OK;
}

/* --tp N: one device per shard, and none of the options that place layers or cut passes. */
static il_status il__tp_check(const il_engine *e) {
  const il_config *c = &e->cfg;
  if (e->n_devs != c->tp)
    return il_error(IL_ERR_INVALID_ARG, "--tp %d: --device names %d device%s; tensor parallelism needs one device per "
                    "shard (--device sim:24GiB,sim:24GiB --tp 2)", c->tp, e->n_devs, e->n_devs == 1 ? "" : "s");
  const struct {
    bool set;
    const char *opt, *why;
  } no[] = {
      {c->split[0] != 0, "--split", "shares out whole layers; with --tp every device holds a share of every layer"},
      {c->gpu_layers[0] && strcmp(c->gpu_layers, "all"), "--gpu-layers", "keeps layers on the CPU; with --tp every layer "
       "is on every device"},
      {c->place[0] != 0, "--place", "moves components; with --tp the embedding and the output head are on the first "
       "device and every layer is on every device"},
      {e->stream, "--offload stream", "streams whole layers through one device's slots"},
      {c->micro_batches > 1, "--micro-batches", "pipelines the stages of a layer split; with --tp every device runs "
       "every layer"},
  };
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (no[i].set) return il_error(IL_ERR_INVALID_ARG, "--tp %d with %s: %s %s", c->tp, no[i].opt, no[i].opt, no[i].why);
  return IL_OK;
}

static il_status il__open(il_engine *e) {
  const il_config *cfg = &e->cfg;
  double t0 = il_time_now();
  il_backend_opts bo = {.threads = cfg->threads, .isa = cfg->isa, .repack = cfg->repack};
  if (cfg->mem_limit[0] && !il_parse_bytes(cfg->mem_limit, &bo.mem_limit))
    return il_error(IL_ERR_INVALID_ARG, "--mem-limit '%s': %s", cfg->mem_limit, il_parse_bytes_why(cfg->mem_limit));
  IL_TRY(il__kv_options(cfg, &e->kv_opts));
  if (!strcmp(cfg->offload, "stream")) e->stream = true; /* (a device that reads host memory needs none: noted below) */
  else if (*cfg->offload && strcmp(cfg->offload, "none"))
    return il_error(IL_ERR_INVALID_ARG, "--offload: '%s' is not none or stream", cfg->offload);
  IL_TRY(il_config_act_type(cfg->dtype, &e->act_type));
  char items[IL_BACKEND_LIST_MAX][IL_BACKEND_SPEC_MAX];
  IL_TRY(il_backend_list_parse(cfg->device, items, &e->n_devs));
  for (int i = 0; i < e->n_devs; i++) {
    IL_TRY(il_backend_open(items[i], &bo, &e->devs[i]));
    if (i == 0) e->backend = e->devs[0]; /* freed as the backend from here on */
  }
  if (cfg->split[0] && e->n_devs == 1)
    return il_error(IL_ERR_INVALID_ARG, "--split '%s': it shares the layers of a --device list (cpu,sim:SIZE,...); "
                                        "--device names one device", cfg->split);
  if (cfg->tp > 1) IL_TRY(il__tp_check(e));
  e->backend->ops->info(e->backend, &e->info);
  if (cfg->repack && strcmp(e->info.kind, "cpu"))
    il_log(IL_LOG_INFO, "--repack: only the weights of components on the CPU are repacked; %s keeps its own as uploaded",
           e->info.name);
  if (e->act_type != IL_DTYPE_F32 && !e->backend->ops->round_to)
    return il_error(IL_ERR_UNSUPPORTED, "--dtype %s: %s cannot store activations at that precision", cfg->dtype,
                    e->info.name);
  for (int k = 0; k < e->n_devs; k++) {
    size_t free_b = 0, total = 0;
    il_backend_info di;
    e->devs[k]->ops->info(e->devs[k], &di);
    e->devs[k]->ops->memory(e->devs[k], &free_b, &total);
    e->dev_fixed[k] = di.host_visible ? 0 : total - free_b;
  }
  e->fixed_bytes = e->dev_fixed[0];
  il_startup_mark(&e->startup, IL_STARTUP_BACKEND, 0);
  if (il_builtin_is(cfg->model)) {
    /* a dry run (the planner) needs shapes only: no weights are generated */
    IL_TRY(il_builtin_open_ex(cfg->model, cfg->wtype, e->info.threads, !e->info.dry, &e->model));
    il_startup_builtin(&e->startup, e->model->weight_bytes);
    IL_TRY(il_builtin_vocab(e->model, &e->vocab));
    il_startup_mark(&e->startup, IL_STARTUP_TOKENIZER, 0);
  } else {
    if (*cfg->wtype)
      return il_error(IL_ERR_INVALID_ARG, "--wtype applies to built-in models only; convert '%s' with "
                                          "'inferlab convert --type' instead", cfg->model);
    IL_TRY(il_model_open_gguf(cfg->model, &e->model));
    il_startup_mark(&e->startup, IL_STARTUP_METADATA, 0);
    il_status st = il_vocab_from_gguf(e->model->gguf, &e->vocab);
    if (st != IL_OK) return il_error_wrap(st, "%s: ", cfg->model);
    il_startup_mark(&e->startup, IL_STARTUP_TOKENIZER, 0);
    IL_TRY(il_startup_read_gguf(&e->startup, e->model->gguf, cfg));
  }
  const il_hparams *hp = &e->model->hp;
  if (il_vocab_size(e->vocab) != hp->n_vocab)
    return il_error(IL_ERR_FORMAT, "%s: the vocabulary has %d tokens but token_embd.weight has %d rows", cfg->model,
                    il_vocab_size(e->vocab), hp->n_vocab);

  /* warnings a user should see once per process (bench opens the engine per combination) */
  static bool warned_ctx, warned_threads;
  if (cfg->ctx > 0 && !cfg->ctx_is_hint && hp->n_ctx_train > 0 && cfg->ctx > hp->n_ctx_train && !warned_ctx) {
    warned_ctx = true;
    il_log(IL_LOG_WARN, "warning: --ctx %d is beyond the model's training context of %d; text past it degrades",
            cfg->ctx, hp->n_ctx_train);
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && cfg->threads > cpus && !warned_threads) {
    warned_threads = true;
    il_log(IL_LOG_WARN, "warning: -t %d is more threads than the %ld CPUs here; they share cores and run slower",
            cfg->threads, cpus);
  }
  e->n_seq = cfg->n_seq;
  e->n_ctx = cfg->ctx > 0 ? cfg->ctx : (hp->n_ctx_train < IL__DEFAULT_CTX_CAP ? hp->n_ctx_train : IL__DEFAULT_CTX_CAP);
  if (cfg->ctx_is_hint) { /* sized for the run by the caller: never more than the default would be */
    const int32_t dflt = hp->n_ctx_train < IL__DEFAULT_CTX_CAP ? hp->n_ctx_train : IL__DEFAULT_CTX_CAP;
    if (e->n_ctx > dflt) e->n_ctx = dflt;
  }
  if ((int64_t)e->n_ctx * e->n_seq > INT32_MAX) /* KV cells and slots are int32 indices */
    return il_error(IL_ERR_INVALID_ARG, "--ctx %d x --n-seq %d = %lld KV cells: more than %d; lower --ctx or --n-seq",
                    e->n_ctx, e->n_seq, (long long)e->n_ctx * e->n_seq, INT32_MAX);
  e->n_batch = il__batch_for(cfg->batch, e->n_ctx, e->n_seq);
  e->n_logits_max = il__n_logits(e, e->n_batch, e->n_seq);
  IL_TRY(il__pick_attn(e));
  e->layer_dev = il_mem_calloc(IL_MEM_OTHER, (size_t)hp->n_layer + 1, "placement");
  e->layer_b = il_mem_calloc(IL_MEM_OTHER, sizeof(il_backend *) * ((size_t)hp->n_layer + 1), "placement");
  if (!e->layer_dev || !e->layer_b) return IL_ERR_OOM;
  IL_TRY(il__placement(e));
  il__engine_shape shape = {e->n_ctx,     e->n_seq,    e->n_batch,  IL_DTYPE_COUNT, e->kv_opts,
                     e->layer_dev, e->embd_dev, e->out_dev, e->exps_dev, e->stream, e->act_type, NULL};
  if (e->auto_layers && e->n_devs == 1) IL_TRY(il__auto_layers(e, &shape));
  for (int l = 0; l < hp->n_layer; l++) e->layer_b[l] = e->layer_dev[l] ? e->backend : e->host;
  if (cfg->tp > 1) IL_TRY(il_model_tp_split(&e->tp, e->model, cfg->tp, e->info.dry)); /* every layer on every device */
  else if (e->n_devs > 1) IL_TRY(il__split_layers(e, &shape));
  e->n_dev_layers = 0;
  for (int l = 0; l < hp->n_layer; l++) e->n_dev_layers += e->layer_dev[l];
  const il_placement place = {e->embd_dev ? e->backend : e->host,
                              e->out_dev ? e->devs[e->tp.n > 1 ? 0 : e->n_devs - 1] : e->host,
                              e->layer_b,
                              e->stream,
                              cfg->load_pipeline,
                              e->exps_dev ? NULL : e->host,
                              false};

  if (e->stream && e->info.host_visible)
    il_log(IL_LOG_INFO, "--offload stream: %s reads the weights in place from host memory; nothing to stream", e->info.name);
  il_status st = e->tp.n > 1 ? il_model_tp_place(&e->tp, e->devs, &e->weights, &place)
                             : il_model_dev_init(&e->weights, e->model, e->backend, &place);
  il_status rst = IL_OK;
  const double beside = il_startup_read_finish(&e->startup, &rst); /* --no-mmap --load-pipeline */
  if (st == IL_OK) st = rst;
  if (st == IL_ERR_OOM) return il__oom_fail(e, &shape);
  IL_TRY(st);
  size_t uploaded = e->weights.uploaded_bytes;
  for (int s = 1; s < e->tp.n; s++) uploaded += e->tp.dev[s]->uploaded_bytes;
  il_startup_upload(&e->startup, e->info.kind, e->info.name, uploaded);
  if (beside > 0) { /* the file's read ran during the placements: its time, in the upload's note */
    char n[sizeof e->startup.phase[0].note];
    snprintf(n, sizeof n, "%s", e->startup.phase[IL_STARTUP_UPLOAD].note);
    il_startup_note(&e->startup, IL_STARTUP_UPLOAD, "%s; file read beside it: %.3f s, %.0f MB/s (--load-pipeline)", n,
                    beside, (double)il_gguf_file_size(e->model->gguf) / beside / 1e6);
  }
  if (il_model_dev_pipeline_seconds(&e->weights) > 0) { /* --load-pipeline: the overlap, in the upload's note */
    char n[sizeof e->startup.phase[0].note];
    snprintf(n, sizeof n, "%s", e->startup.phase[IL_STARTUP_UPLOAD].note);
    il_startup_note(&e->startup, IL_STARTUP_UPLOAD, "%s; pages read beside it: %.3f s (--load-pipeline)", n,
                    il_model_dev_pipeline_seconds(&e->weights));
  }
  if (cfg->ctx <= 0) {
    /* the default context: halved until the KV cache fits in half of what is left */
    if (e->tp.n > 1) { /* every device holds a shard of every layer's cache: the device with least left */
      size_t avail = il__available_memory(e->devs[0]);
      for (int k = 1; k < e->n_devs; k++) {
        const size_t a = il__available_memory(e->devs[k]);
        avail = a < avail ? a : avail;
      }
      e->n_ctx = il__engine_default_ctx(e, avail, &e->ctx_capped);
    } else if (e->n_devs > 1) { /* each device's KV cache in half of what it has left */
      size_t avail[IL_BACKEND_LIST_MAX];
      for (int k = 0; k < e->n_devs; k++) avail[k] = il__available_memory(e->devs[k]);
      e->n_ctx = il__engine_default_ctx_list(e, e->split_n, avail, &e->ctx_capped);
    } else {
      e->n_ctx = il__engine_default_ctx(e, il__available_memory(e->n_dev_layers ? e->backend : e->host), &e->ctx_capped);
    }
    if (e->ctx_capped) {
      il_log(IL_LOG_INFO, "context reduced to %d so the KV cache fits in %s memory (set --ctx to override)",
              e->n_ctx, e->info.kind);
      e->n_batch = il__batch_for(cfg->batch, e->n_ctx, e->n_seq);
      e->n_logits_max = il__n_logits(e, e->n_batch, e->n_seq);
      shape.n_ctx = e->n_ctx, shape.n_batch = e->n_batch;
    }
  }
  e->ctx_sized = true;
  il_kv_opts ko = e->kv_opts;
  ko.layer_b = e->layer_b;
  ko.batch = e->n_batch;
  if (e->tp.n > 1) ko.tp = e->tp.n, ko.tp_b = e->devs;
  st = il_kv_cache_init(&e->kv, e->backend, e->tp.n > 1 ? &e->tp.shard[0].hp : hp, e->n_ctx, e->n_seq, &ko);
  if (st == IL_OK && e->kv.paged && !cfg->no_prefix_cache && e->kv.ring)
    il_log(IL_LOG_INFO, "prefix cache: off: the sliding-window layers keep the last %d positions of a sequence, not "
                        "a whole prefix", e->kv.ring);
  else if (st == IL_OK && e->kv.paged && !cfg->no_prefix_cache) st = il_kv_cache_prefix_enable(&e->kv);
  if (st == IL_OK && e->tp.n > 1)
    st = il_model_tp_state(&e->tp, &e->fs, e->act_type, e->n_batch, e->n_logits_max, il__attn_for, e, e->kv.views);
  else if (st == IL_OK)
    st = il_forward_state_init(&e->fs, &e->weights, e->act_type, e->n_batch, e->n_logits_max, il__attn_for, e, e->kv.views);
  e->fs.attn_slice = cfg->attn_slice;
  il_numerics_reset(&e->numerics);
  e->fs.numerics = cfg->check_numerics ? &e->numerics : NULL;
  if (st == IL_ERR_OOM) return il__oom_fail(e, &shape);
  IL_TRY(st);
  e->slots = il_mem_alloc(IL_MEM_STAGING, sizeof(int32_t) * (size_t)e->n_batch, "kv slots");
  if (!e->slots) return IL_ERR_OOM;
  il_startup_alloc(&e->startup, e->n_ctx, il_kv_cache_bytes(hp, e->n_ctx, e->n_seq, &ko),
                   il_forward_state_bytes(hp, e->act_type, e->n_batch, e->n_logits_max, e->backend, ko.type));
  if (cfg->preload) IL_TRY(il__warmup(e));
  e->load_seconds = il_time_now() - t0;
  return IL_OK;
}

il_status il_engine_open(const il_config *cfg, il_engine **out) {
  *out = NULL;
  il_engine *e = il_mem_calloc(IL_MEM_OTHER, sizeof *e, "engine");
  if (!e) return IL_ERR_OOM;
  e->cfg = *cfg;
  il_startup_begin(&e->startup);
  il_status st = il__open(e);
  il_startup_read_finish(&e->startup, NULL); /* a read beside the upload, ended by an error before it */
  il_startup_end(&e->startup, st == IL_OK);
  if (st == IL_ERR_OOM && (e->auto_layers || e->auto_retry) && e->n_dev_layers > 0) {
    /* --gpu-layers auto: the prediction counts allocated bytes; when the allocator's segments
     * need a little more, one layer fewer, until it opens */
    il_config c = *cfg;
    snprintf(c.gpu_layers, sizeof c.gpu_layers, "%d", e->n_dev_layers - 1);
    c.auto_from = e->n_dev_layers;
    il_engine_free(e);
    return il_engine_open(&c, out);
  }
  il_oom_report r;
  if (st == IL_ERR_OOM && cfg->fit && cfg->fit_depth < 6 && il_oom_report_last(&r)) {
    /* --fit: the report's first fix that is an option change; if the device's allocator still
     * needs a little more, the next report's fix is applied too (at most a few steps) */
    for (int i = 0; i < r.n_fixes; i++) {
      il_config c = *cfg;
      if (il_oom_fix_apply(&r, r.fixes[i].option, r.fixes[i].value, &c) != IL_OK) continue;
      c.fit_depth++;
      il_engine_free(e);
      char before[64] = "";
      const il_opt *o = il_config_find(r.fixes[i].option);
      if (o) il_config_format(cfg, NULL, o, before, sizeof before);
      il_log(IL_LOG_INFO, "--fit: out of memory on %s (%zu bytes needed at ctx %d); changing --%s %s -> %s (%s)",
             r.device, r.need_total, r.n_ctx, r.fixes[i].option, before, r.fixes[i].value, r.fixes[i].effect);
      return il_engine_open(&c, out);
    }
  }
  if (st != IL_OK) {
    il_engine_free(e);
    return st;
  }
  *out = e;
  return IL_OK;
}

void il_engine_free(il_engine *e) {
  if (!e) return;
  il_mem_free(e->slots);
  if (e->backend) il__graph_free(e);
  if (e->smp_ids.buf) il_backend_tensor_free(e->weights.out_b, &e->smp_ids);
  if (e->smp_u.buf) il_backend_tensor_free(e->weights.out_b, &e->smp_u);
  il_forward_state_free(&e->fs);
  il_kv_cache_free(&e->kv);
  il_model_dev_free(&e->weights);
  il_model_tp_free(&e->tp);
  il_vocab_free(e->vocab);
  il_model_free(e->model);
  il_mem_free(e->layer_dev);
  il_mem_free(e->layer_b);
  if (e->host && e->host != e->backend) e->host->ops->destroy(e->host);
  if (e->backend) e->backend->ops->destroy(e->backend);
  for (int i = 1; i < e->n_devs; i++)
    if (e->devs[i]) e->devs[i]->ops->destroy(e->devs[i]);
  il_mem_free(e);
}

/* ---- decode ---- */

/* Either output: the logits rows into logits_out, or (ids_out) their argmax ids sampled where
 * they are, by the output backend's sample op. */
static il_status il__decode(il_engine *e, const il_batch_entry *batch, int32_t n, float *logits_out, int32_t *ids_out) {
  const size_t nv = (size_t)e->model->hp.n_vocab;
  il_backend *b = e->backend;
  size_t written = 0;
  bool stepped = false; /* the pass ran as a decode step of engine/graph.c */
  for (int32_t off = 0; off < n;) {
    /* a pass ends at n_batch entries or n_logits_max entries that want logits */
    int32_t chunk = 0, want = 0;
    while (off + chunk < n && chunk < e->n_batch) {
      const il_batch_entry *be = &batch[off + chunk];
      if (be->logits && want == e->n_logits_max) break;
      if (be->seq < 0 || be->seq >= e->n_seq || be->pos < 0 || be->pos >= e->n_ctx)
        return il_error(IL_ERR_RANGE, "batch entry %d: sequence %d position %d outside %d sequences of %d positions",
                        off + chunk, be->seq, be->pos, e->n_seq, e->n_ctx);
      il_status st = il_kv_cache_prepare(&e->kv, be->seq, be->pos, &e->slots[chunk]);
      if (st != IL_OK) return il_error_wrap(st, "batch entry %d: ", off + chunk);
      want += be->logits;
      chunk++;
    }
    int32_t n_logits = 0;
    IL_TRY(il_kv_cache_sync(&e->kv));
    /* a decode step may run as one recorded device step, sample op included (engine/graph.h) */
    if (off == 0 && chunk == n) IL_TRY(il__graph_pass(e, batch, n, ids_out != NULL, &n_logits, &stepped));
    if (!stepped && e->tp.n > 1)
      IL_TRY(il_model_forward_tp(&e->tp, batch + off, chunk, e->kv.views, e->slots, &n_logits));
    else if (!stepped)
      IL_TRY(il_model_forward_pipelined(&e->weights, &e->fs, batch + off, chunk, e->kv.views, e->slots,
                                        e->cfg.micro_batches, &n_logits));
    if (n_logits && ids_out) {
      il_forward_lane *lo = il_forward_lane_of(&e->fs, e->weights.out_b);
      const il_sample_args greedy = {0, 0, 1};
      if (!stepped)
        IL_TRY(lo->b->ops->sample(lo->b, e->smp_ids, il_tensor_rows(lo->logits, 0, n_logits), e->smp_u, &greedy));
      IL_TRY(lo->b->ops->download(lo->b, ids_out + written, e->smp_ids, (size_t)n_logits * sizeof(int32_t)));
    } else if (n_logits && logits_out) {
      il_forward_lane *lo = il_forward_lane_of(&e->fs, e->weights.out_b);
      IL_TRY(lo->b->ops->download(lo->b, logits_out + written * nv, lo->logits, (size_t)n_logits * nv * sizeof(float)));
    }
    written += (size_t)n_logits;
    off += chunk;
  }
  IL_TRY(il_model_dev_sync(&e->weights)); /* the next pass's first layer, copied while this one ended */
  for (int i = 1; i < e->n_devs; i++) IL_TRY(e->devs[i]->ops->sync(e->devs[i]));
  /* a decode step ends at its download, which waited for the stream and read its faults */
  if (stepped && e->graph_recorded && written && (ids_out || logits_out)) return IL_OK;
  return b->ops->sync(b);
}

il_status il_engine_decode(il_engine *e, const il_batch_entry *batch, int32_t n, float *logits_out) {
  return il__decode(e, batch, n, logits_out, NULL);
}

bool il_engine_samples_on_device(const il_engine *e) {
  il_backend *b = e->weights.out_b;
  il_backend_info info;
  b->ops->info(b, &info);
  return b->ops->sample && !info.host_visible;
}

il_status il_engine_decode_greedy(il_engine *e, const il_batch_entry *batch, int32_t n, int32_t *ids_out) {
  if (!il_engine_samples_on_device(e))
    return il_error(IL_ERR_UNSUPPORTED, "%s samples on the host (no sample op, or its buffers are host memory)",
                    e->info.name);
  il_backend *b = e->weights.out_b;
  if (!e->smp_u.buf) {
    /* the draws first, zeroed (greedy reads none; they stay defined all the same): the ids'
     * buffer existing means both are ready */
    const size_t bytes = (size_t)e->n_logits_max * sizeof(float);
    float *zero = il_mem_calloc(IL_MEM_STAGING, bytes, "sampling draws");
    if (!zero) return IL_ERR_OOM;
    il_status st = il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, e->n_logits_max, IL_DTYPE_F32, "sampling draws", &e->smp_u);
    if (st == IL_OK) st = b->ops->upload(b, e->smp_u, zero, bytes);
    il_mem_free(zero);
    if (st != IL_OK) {
      if (e->smp_u.buf) il_backend_tensor_free(b, &e->smp_u);
      return st;
    }
  }
  if (!e->smp_ids.buf)
    IL_TRY(il_backend_tensor_new(b, IL_MEM_ACTIVATIONS, 1, e->n_logits_max, IL_DTYPE_I32, "sampled ids", &e->smp_ids));
  return il__decode(e, batch, n, NULL, ids_out);
}

il_status il_engine_seq_remove(il_engine *e, int32_t seq) { return il_kv_cache_seq_remove(&e->kv, seq); }

il_status il_engine_seq_truncate(il_engine *e, int32_t seq, int32_t n_pos) {
  return il_kv_cache_seq_truncate(&e->kv, seq, n_pos);
}

il_status il_engine_seq_fork(il_engine *e, int32_t src, int32_t dst) { return il_kv_cache_seq_fork(&e->kv, src, dst); }

il_status il_engine_tokenize(il_engine *e, const char *text, bool add_bos, bool parse_special, int32_t **out,
                             int32_t *n_out) {
  size_t n = 0;
  *out = NULL;
  IL_TRY(il_tokenize_alloc(e->vocab, text, strlen(text), add_bos, parse_special, out, &n));
  *n_out = (int32_t)n;
  return IL_OK;
}

const il_model *il_engine_model(const il_engine *e) { return e->model; }
const il_vocab *il_engine_vocab(const il_engine *e) { return e->vocab; }
int32_t il_engine_n_ctx(const il_engine *e) { return e->n_ctx; }
const il_startup *il_engine_startup(const il_engine *e) { return &e->startup; }

const il_config *il_engine_config(const il_engine *e) { return &e->cfg; }

il_status il_engine_memory_map(const il_engine *e, il_caching_snapshot *out) {
  memset(out, 0, sizeof *out);
  il_backend *b = e->backend;
  if (!b->ops->allocator_snapshot) return il_error(IL_ERR_UNSUPPORTED, "%s has no caching allocator", e->info.name);
  return b->ops->allocator_snapshot(b, out);
}

void il_engine_snapshot_get(const il_engine *e, il_engine_snap_parts parts, il_engine_snapshot *out) {
  memset(out, 0, sizeof *out);
  out->device = e->info;
  out->load_seconds = e->load_seconds;
  out->n_ctx = e->n_ctx, out->n_seq = e->n_seq, out->n_batch = e->n_batch, out->n_logits_max = e->n_logits_max;
  out->ctx_capped = e->ctx_capped;
  out->n_layer = e->model->hp.n_layer, out->n_dev_layers = e->n_dev_layers;
  out->embd_dev = e->embd_dev, out->out_dev = e->out_dev;
  out->split = e->host != e->backend;
  out->n_expert = e->model->hp.n_expert, out->exps_dev = e->exps_dev;
  out->stream = e->weights.stream;
  snprintf(out->attn, sizeof out->attn, "%s", e->attn ? e->attn->name : "");
  snprintf(out->attn_why, sizeof out->attn_why, "%s", e->attn_why);
  out->kv_paged = e->kv.paged, out->kv_block = e->kv.paged ? e->kv.block : e->n_ctx;
  out->kv_type = e->kv.type, out->act_type = e->act_type;
  out->check_numerics = e->cfg.check_numerics;
  out->has_allocator = e->backend->ops->allocator_stats != NULL;
  if (out->has_allocator) e->backend->ops->allocator_stats(e->backend, &out->alloc);
  il_mem_space_stats(e->backend->space, &out->mem);
  out->fixed_bytes = e->fixed_bytes;
  out->bad_layer = -1;
  out->n_devs = e->n_devs;
  out->tp = e->tp.n > 1 ? e->tp.n : 0;
  out->tp_nccl = e->tp.use_nccl;
  for (int i = 0; i < e->n_devs && e->n_devs > 1; i++) {
    il_backend *b = e->devs[i];
    b->ops->info(b, &out->devs[i].device);
    for (int l = 0; l < e->model->hp.n_layer; l++) out->devs[i].n_layers += e->tp.n > 1 || e->layer_b[l] == b;
    out->devs[i].has_allocator = b->ops->allocator_stats != NULL;
    if (out->devs[i].has_allocator) b->ops->allocator_stats(b, &out->devs[i].alloc);
    il_mem_space_stats(b->space, &out->devs[i].mem);
    out->devs[i].fixed_bytes = e->dev_fixed[i];
    if (parts == IL_ENGINE_SNAP_ALL && b->ops->transfers) b->ops->transfers(b, &out->devs[i].transfers);
  }
  if ((parts & IL_ENGINE_SNAP_ALL) != IL_ENGINE_SNAP_ALL) return;
  out->streamed_bytes = e->weights.streamed_bytes;
  out->residual_bytes = e->fs.bytes_moved;
  out->micro_batches = e->cfg.micro_batches;
  out->pipeline_stages = il_model_pipeline_stages(&e->weights);
  out->pipelined_passes = e->fs.pipelined_passes;
  out->passes = e->fs.passes;
  out->expert_bytes = e->fs.expert_bytes;
  out->tp_allreduces = e->tp.allreduces;
  out->tp_allreduce_bytes = e->tp.allreduce_bytes;
  out->tp_broadcast_bytes = e->tp.broadcast_bytes;
  if (e->backend->ops->transfers) e->backend->ops->transfers(e->backend, &out->transfers);
  const il_numerics *nr = &e->numerics;
  out->bad_layer = nr->bad_layer;
  snprintf(out->bad_block, sizeof out->bad_block, "%s", nr->bad_block ? nr->bad_block : "");
  out->bad_count = nr->bad_count;
  out->max_abs = nr->max_abs, out->max_abs_layer = nr->max_abs_layer;
  snprintf(out->max_abs_op, sizeof out->max_abs_op, "%s", nr->max_abs_op ? nr->max_abs_op : "");
}
