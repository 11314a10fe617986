/* format/llama2c: llama2.c checkpoint + tokenizer -> GGUF (layouts in llama2c.h).
 *
 * The checkpoint is mapped read-only, its header validated and its size compared with the
 * size the header implies, then one walk over the file in its own order records where each
 * weight starts. Tensors are emitted in the order llama.cpp's converter writes them; f32
 * output borrows the mapping directly, every other type is converted row by row into buffers
 * that live until the GGUF writer has written them.
 * Not for: other checkpoint formats; reading GGUF (format/gguf).
 */
#include "format/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/quant.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "memory/mem.h"

#define IL__AK42 0x616b3432u /* "ak42" as written by export.py's struct.pack('I', ...) */
#define IL__V0_HEADER 28u
#define IL__V12_HEADER 256u

/* llama.cpp's llama_ftype values for general.file_type. */
static uint32_t il__ftype(il_dtype t) {
  switch (t) {
  case IL_DTYPE_F32: return 0;
  case IL_DTYPE_F16: return 1;
  case IL_DTYPE_Q4_0: return 2;
  case IL_DTYPE_Q4_1: return 3;
  case IL_DTYPE_Q8_0: return 7;
  case IL_DTYPE_BF16: return 32;
  default: return UINT32_MAX;
  }
}

static uint32_t il__rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- file mapping ---- */

typedef struct {
  uint8_t *p; /* mapped PROT_READ: only read */
  size_t size;
} il__map;

static il_status il__map_file(const char *path, il__map *m) {
  m->p = NULL;
  m->size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return il_error(e == ENOENT ? IL_ERR_NOT_FOUND : IL_ERR_IO, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    int e = errno;
    close(fd);
    return il_error(IL_ERR_IO, "%s: not a readable regular file: %s", path, strerror(e));
  }
  m->size = (size_t)sb.st_size;
  if (m->size) {
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    if (p == MAP_FAILED) {
      close(fd);
      return il_error(IL_ERR_IO, "%s: cannot map %zu bytes: %s", path, m->size, strerror(e));
    }
    m->p = p;
  }
  close(fd);
  return IL_OK;
}

static void il__unmap(il__map *m) {
  if (m->p) munmap(m->p, m->size);
  m->p = NULL;
}

/* ---- header ---- */

/* acc += a * b * c, false on overflow. */
static bool il__mac(uint64_t *acc, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x;
  return !__builtin_mul_overflow(a, b, &x) && !__builtin_mul_overflow(x, c, &x) && !__builtin_add_overflow(*acc, x, acc);
}

static il_status il__parse_config(const char *path, const il__map *m, il_llama2c_config *c) {
  memset(c, 0, sizeof *c);
  const uint8_t *p = m->p;
  const uint8_t *params;
  if (m->size >= 8 && il__rd32(p) == IL__AK42) {
    c->version = (int32_t)il__rd32(p + 4);
    if (c->version != 1 && c->version != 2)
      return il_error(IL_ERR_UNSUPPORTED, "%s: llama2.c export version %d is not supported (versions 0, 1 and 2 are)",
                      path, c->version);
    if (m->size < IL__V12_HEADER)
      return il_error(IL_ERR_FORMAT, "%s: file is %zu bytes, too small for the %u-byte version %d header", path,
                      m->size, IL__V12_HEADER, c->version);
    params = p + 8;
    if (p[36] > 1) return il_error(IL_ERR_FORMAT, "%s: offset 36: shared_classifier flag is %u, expected 0 or 1", path, p[36]);
    c->shared_classifier = p[36] == 1;
    if (c->version == 2) c->group_size = (int32_t)il__rd32(p + 37);
    c->data_offset = IL__V12_HEADER;
  } else {
    if (m->size < IL__V0_HEADER)
      return il_error(IL_ERR_FORMAT, "%s: file is %zu bytes, too small for the %u-byte llama2.c header", path, m->size,
                      IL__V0_HEADER);
    params = p;
    c->data_offset = IL__V0_HEADER;
  }
  int32_t v[7];
  static const char *const names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; i++) v[i] = (int32_t)il__rd32(params + 4 * i);
  c->dim = v[0], c->hidden_dim = v[1], c->n_layers = v[2], c->n_heads = v[3], c->n_kv_heads = v[4];
  c->seq_len = v[6];
  if (c->version == 0) {
    c->shared_classifier = v[5] > 0;
    if (v[5] < 0 && v[5] != INT32_MIN) v[5] = -v[5];
  }
  c->vocab_size = v[5];
  uint64_t hdr_off = c->version == 0 ? 0 : 8;
  for (int i = 0; i < 7; i++) {
    if (v[i] <= 0)
      return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": header field %s = %d must be positive", path,
                      hdr_off + 4u * (unsigned)i, names[i], (int)((int32_t)il__rd32(params + 4 * i)));
  }
  if (c->dim % c->n_heads)
    return il_error(IL_ERR_FORMAT, "%s: n_heads = %d does not divide dim = %d", path, c->n_heads, c->dim);
  if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
    return il_error(IL_ERR_FORMAT, "%s: n_kv_heads = %d must divide n_heads = %d", path, c->n_kv_heads, c->n_heads);
  /* the limits the model loader applies (model/llama.c), so a converted file is never one that
   * `run` then refuses (and 8000 tiny layers are refused in microseconds, not written) */
  if (c->n_layers > 4096 || c->dim > (1 << 20) || c->hidden_dim > (1 << 22))
    return il_error(IL_ERR_FORMAT, "%s: implausible model size (%d layers, dim %d, hidden_dim %d; the limits are 4096, "
                                   "%d, %d)", path, c->n_layers, c->dim, c->hidden_dim, 1 << 20, 1 << 22);
  int32_t hs = c->dim / c->n_heads;
  if (hs % 2) return il_error(IL_ERR_FORMAT, "%s: head size dim / n_heads = %d is odd; RoPE needs pairs", path, hs);

  uint64_t D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers, V = (uint64_t)c->vocab_size;
  uint64_t KV = D / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads, S = (uint64_t)c->seq_len;
  uint64_t f32s = 0, quant = 0; /* f32 values and int8-quantized values in the file */
  bool ok = il__mac(&f32s, 2, L, D) && il__mac(&f32s, 1, 1, D);
  uint64_t *mat = c->version == 2 ? &quant : &f32s;
  ok = ok && il__mac(mat, V, D, c->shared_classifier ? 1 : 2) && il__mac(mat, 2 * L, D, D) && il__mac(mat, 2 * L, KV, D) &&
       il__mac(mat, 3 * L, H, D);
  if (c->version == 0) ok = ok && il__mac(&f32s, S, (uint64_t)hs, 1); /* freq_cis real + imag */
  uint64_t expect = c->data_offset;
  if (c->version == 2) {
    uint64_t gs = (uint64_t)c->group_size;
    if (c->group_size <= 0)
      return il_error(IL_ERR_FORMAT, "%s: offset 37: group_size = %d must be positive", path, c->group_size);
    if ((D * D) % gs || (KV * D) % gs || (H * D) % gs || (V * D) % gs)
      return il_error(IL_ERR_FORMAT, "%s: group_size = %d does not divide every quantized tensor's size", path,
                      c->group_size);
    ok = ok && il__mac(&expect, quant, 1, 1) && il__mac(&expect, quant / gs, 4, 1);
  }
  ok = ok && il__mac(&expect, f32s, 4, 1);
  if (!ok) return il_error(IL_ERR_FORMAT, "%s: header dimensions imply a size that overflows 64 bits", path);
  if (expect != m->size)
    return il_error(IL_ERR_FORMAT,
                    "%s: file is %zu bytes but its version %d header (dim=%d hidden_dim=%d n_layers=%d n_heads=%d "
                    "n_kv_heads=%d vocab_size=%d seq_len=%d, %s classifier) implies %" PRIu64 " bytes",
                    path, m->size, c->version, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                    c->vocab_size, c->seq_len, c->shared_classifier ? "shared" : "separate", expect);
  c->file_size = expect;
  return IL_OK;
}

il_status il_llama2c_read_config(const char *ckpt_path, il_llama2c_config *out) {
  if (!ckpt_path || !out) return il_error(IL_ERR_INVALID_ARG, "il_llama2c_read_config: NULL argument");
  il__map m;
  IL_TRY(il__map_file(ckpt_path, &m));
  il_status st = il__parse_config(ckpt_path, &m, out);
  il__unmap(&m);
  return st;
}

/* ---- weights ---- */

/* Where one weight lives in the mapping: f32 values, or int8 values with group scales. */
typedef struct {
  const uint8_t *f32;
  const int8_t *q;
  const uint8_t *scale; /* f32 scales, possibly unaligned */
} il__src;

enum { IL__RMS_ATT, IL__RMS_FFN, IL__WQ, IL__WK, IL__WV, IL__WO, IL__W1, IL__W2, IL__W3, IL__NPER };

typedef struct {
  il__src tok, cls, rms_final;
  il__src *layer; /* [n_layers][IL__NPER] */
} il__weights;

typedef struct {
  const uint8_t *base;
  uint64_t pos;
  uint64_t gs;
} il__cursor;

static il__src il__take_f32(il__cursor *c, uint64_t n) {
  il__src s = {c->base + c->pos, NULL, NULL};
  c->pos += 4 * n;
  return s;
}

static il__src il__take_q8(il__cursor *c, uint64_t n) {
  il__src s = {NULL, (const int8_t *)(c->base + c->pos), c->base + c->pos + n};
  c->pos += n + 4 * (n / c->gs);
  return s;
}

/* Records every weight's position, in the file's own order. The size was checked against the
 * header first, so the walk stays inside the mapping. */
static void il__locate(const il_llama2c_config *c, const uint8_t *base, il__weights *w) {
  uint64_t D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
  uint64_t KV = D / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads;
  int L = c->n_layers;
  il__cursor cur = {base, c->data_offset, (uint64_t)(c->group_size > 0 ? c->group_size : 1)};
  il__src *ly = w->layer;
  il__src (*mat)(il__cursor *, uint64_t) = c->version == 2 ? il__take_q8 : il__take_f32;
  if (c->version == 0) {
    w->tok = il__take_f32(&cur, V * D);
    for (int l = 0; l < L; l++) ly[l * IL__NPER + IL__RMS_ATT] = il__take_f32(&cur, D);
  } else {
    for (int l = 0; l < L; l++) ly[l * IL__NPER + IL__RMS_ATT] = il__take_f32(&cur, D);
    for (int l = 0; l < L; l++) ly[l * IL__NPER + IL__RMS_FFN] = il__take_f32(&cur, D);
    w->rms_final = il__take_f32(&cur, D);
    w->tok = mat(&cur, V * D);
  }
  const int order_v0[] = {IL__WQ, IL__WK, IL__WV, IL__WO, IL__RMS_FFN, IL__W1, IL__W2, IL__W3};
  const int order_v12[] = {IL__WQ, IL__WK, IL__WV, IL__WO, IL__W1, IL__W2, IL__W3};
  const int *order = c->version == 0 ? order_v0 : order_v12;
  int n_order = c->version == 0 ? 8 : 7;
  for (int k = 0; k < n_order; k++) {
    int which = order[k];
    uint64_t n = which == IL__RMS_FFN ? D : (which == IL__WK || which == IL__WV) ? KV * D
                                        : (which == IL__WQ || which == IL__WO) ? D * D : H * D;
    for (int l = 0; l < L; l++) ly[l * IL__NPER + which] = which == IL__RMS_FFN ? il__take_f32(&cur, n) : mat(&cur, n);
  }
  if (c->version == 0) {
    w->rms_final = il__take_f32(&cur, D);
    cur.pos += 4 * (uint64_t)c->seq_len * (D / (uint64_t)c->n_heads); /* freq_cis_real + imag */
  }
  w->cls = c->shared_classifier ? w->tok : mat(&cur, V * D);
}

/* ---- conversion ---- */

typedef struct {
  const il_llama2c_config *cfg;
  il_gguf_writer *w;
  il_dtype out_type;
  FILE *notes;
  il_llama2c_stats stats;
  void **bufs; /* converted data, freed after the write */
  uint64_t n_bufs, cap_bufs;
  const char *path;
} il__conv;

static il_status il__keep(il__conv *cv, void *p) {
  if (cv->n_bufs == cv->cap_bufs) {
    uint64_t ncap = cv->cap_bufs ? cv->cap_bufs * 2 : 64;
    void **nb = il_mem_alloc(IL_MEM_MODEL, (size_t)ncap * sizeof(void *), "llama2c buffer list");
    if (!nb) {
      il_mem_free(p);
      return IL_ERR_OOM;
    }
    if (cv->bufs) memcpy(nb, cv->bufs, (size_t)cv->n_bufs * sizeof(void *));
    il_mem_free(cv->bufs);
    cv->bufs = nb;
    cv->cap_bufs = ncap;
  }
  cv->bufs[cv->n_bufs++] = p;
  return IL_OK;
}

/* Adds one tensor of shape {ne0} (ne1 == 0) or {ne0, ne1} from `src`, converted as the
 * requested type allows. */
static il_status il__emit(il__conv *cv, const char *name, const il__src *src, int64_t ne0, int64_t ne1) {
  int nd = ne1 ? 2 : 1;
  int64_t rows = ne1 ? ne1 : 1, n = ne0 * rows;
  const float *f;
  float *deq = NULL;
  if (src->f32) {
    f = (const float *)(const void *)src->f32; /* 4-byte aligned: every f32 section starts at 28/256 + 4k */
  } else {
    deq = il_mem_alloc(IL_MEM_STAGING, (size_t)n * sizeof(float), "llama2c dequantized weight");
    if (!deq) return IL_ERR_OOM;
    uint64_t gs = (uint64_t)cv->cfg->group_size;
    for (int64_t g = 0; g < n / (int64_t)gs; g++) {
      float s;
      memcpy(&s, src->scale + 4 * g, 4);
      for (uint64_t j = 0; j < gs; j++) deq[(uint64_t)g * gs + j] = (float)src->q[(uint64_t)g * gs + j] * s;
    }
    f = deq;
  }
  il_dtype t = nd == 1 ? IL_DTYPE_F32 : cv->out_type;
  const il_dtype_info *ti = il_dtype_get((uint32_t)t);
  if (ne0 % ti->blck) {
    if (cv->notes)
      fprintf(cv->notes, "note: %s (ne = {%" PRId64 ", %" PRId64 "}) kept in f32: row length %" PRId64
                         " is not a multiple of the %s block size %u\n",
              name, ne0, rows, ne0, ti->name, ti->blck);
    t = IL_DTYPE_F32;
    ti = il_dtype_get((uint32_t)t);
  }
  if (t == cv->out_type) cv->stats.n_converted++;
  else cv->stats.n_kept++;
  size_t row_bytes = il_dtype_row_size(t, ne0);
  uint64_t nbytes = (uint64_t)row_bytes * (uint64_t)rows;
  const void *data = f;
  if (t != IL_DTYPE_F32) {
    uint8_t *dst = il_mem_alloc(IL_MEM_STAGING, (size_t)nbytes, "llama2c converted weight");
    if (!dst) {
      il_mem_free(deq);
      return IL_ERR_OOM;
    }
    il_status st = IL_OK;
    for (int64_t r = 0; r < rows && st == IL_OK; r++) st = il_quantize_row(t, f + r * ne0, dst + (size_t)r * row_bytes, ne0);
    il_mem_free(deq);
    deq = NULL;
    if (st != IL_OK) {
      il_mem_free(dst);
      return il_error_wrap(st, "%s: tensor '%s': ", cv->path, name);
    }
    IL_TRY(il__keep(cv, dst));
    data = dst;
  } else if (deq) {
    IL_TRY(il__keep(cv, deq));
  }
  int64_t ne[2] = {ne0, rows};
  IL_TRY(il_gguf_writer_add_tensor(cv->w, name, t, (uint32_t)nd, ne, data, nbytes));
  cv->stats.n_tensors++;
  cv->stats.bytes_out += nbytes;
  return IL_OK;
}

static il_status il__emit_all(il__conv *cv, const il__weights *w) {
  const il_llama2c_config *c = cv->cfg;
  int64_t D = c->dim, H = c->hidden_dim, V = c->vocab_size, KV = D / c->n_heads * c->n_kv_heads;
  IL_TRY(il__emit(cv, "token_embd.weight", &w->tok, D, V));
  IL_TRY(il__emit(cv, "output_norm.weight", &w->rms_final, D, 0));
  if (!c->shared_classifier) IL_TRY(il__emit(cv, "output.weight", &w->cls, D, V));
  static const struct {
    const char *suffix;
    int which;
  } blk[IL__NPER] = {{"attn_q", IL__WQ},      {"attn_k", IL__WK},   {"attn_v", IL__WV},
                     {"attn_output", IL__WO}, {"attn_norm", IL__RMS_ATT}, {"ffn_gate", IL__W1},
                     {"ffn_down", IL__W2},    {"ffn_up", IL__W3},   {"ffn_norm", IL__RMS_FFN}};
  for (int l = 0; l < c->n_layers; l++) {
    for (int k = 0; k < IL__NPER; k++) {
      char name[64];
      snprintf(name, sizeof name, "blk.%d.%s.weight", l, blk[k].suffix);
      const il__src *s = &w->layer[l * IL__NPER + blk[k].which];
      int64_t ne0, ne1;
      switch (blk[k].which) {
      case IL__WQ: case IL__WO: ne0 = D, ne1 = D; break;
      case IL__WK: case IL__WV: ne0 = D, ne1 = KV; break;
      case IL__W1: case IL__W3: ne0 = D, ne1 = H; break;
      case IL__W2: ne0 = H, ne1 = D; break;
      default: ne0 = D, ne1 = 0; break;
      }
      IL_TRY(il__emit(cv, name, s, ne0, ne1));
    }
  }
  return IL_OK;
}

/* ---- tokenizer ---- */

typedef struct {
  char **strs;
  uint64_t *lens;
  float *scores;
  int32_t *types;
  char *arena;
} il__vocab;

static void il__vocab_free(il__vocab *v) {
  il_mem_free(v->strs);
  il_mem_free(v->lens);
  il_mem_free(v->scores);
  il_mem_free(v->types);
  il_mem_free(v->arena);
  memset(v, 0, sizeof *v); /* safe to call again */
}

static bool il__is_byte_piece(const uint8_t *s, int32_t n) {
  static const char hex[] = "0123456789ABCDEFabcdef";
  return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] && s[4] && strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* Two pieces that are equal after the conversion (" a" and "\xe2\x96\x81a", or a piece "<s>" next
 * to the fixed BOS) make a vocabulary the loader refuses (duplicate token): found here, before
 * anything is written, with a hash set (O(n)). */
static il_status il__check_unique(const char *path, const il__vocab *v, int32_t n) {
  uint64_t cap = 16;
  while (cap < 2 * (uint64_t)n) cap *= 2;
  int32_t *tab = il_mem_alloc(IL_MEM_WORKSPACE, cap * sizeof *tab, "llama2c vocab check");
  if (!tab) return IL_ERR_OOM;
  memset(tab, 0xff, cap * sizeof *tab);
  il_status st = IL_OK;
  for (int32_t i = 0; i < n && st == IL_OK; i++) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t k = 0; k < v->lens[i]; k++) h = (h ^ (uint8_t)v->strs[i][k]) * 1099511628211ull;
    for (uint64_t b = h & (cap - 1);; b = (b + 1) & (cap - 1)) {
      int32_t o = tab[b];
      if (o < 0) {
        tab[b] = i;
        break;
      }
      if (v->lens[o] == v->lens[i] && !memcmp(v->strs[o], v->strs[i], v->lens[i])) {
        int shown = v->lens[i] > 64 ? 64 : (int)v->lens[i];
        st = il_error(IL_ERR_FORMAT,
                      "%s: tokens %d and %d are both '%.*s' after conversion (spaces become U+2581; ids 0-2 are "
                      "<unk> <s> </s>): the GGUF would hold a duplicate token",
                      path, (int)o, (int)i, shown, v->strs[i]);
        break;
      }
    }
  }
  il_mem_free(tab);
  return st;
}

/* Reads tokenizer.bin for `n` tokens and applies llama.cpp's llama2.c vocabulary rules. */
static il_status il__read_vocab(const char *path, const il__map *m, int32_t n, il__vocab *v) {
  memset(v, 0, sizeof *v);
  if (m->size < 4)
    return il_error(IL_ERR_FORMAT, "%s: offset 0: max_token_length: truncated (file is %zu bytes)", path, m->size);
  int32_t maxlen = (int32_t)il__rd32(m->p);
  if (maxlen <= 0) return il_error(IL_ERR_FORMAT, "%s: offset 0: max_token_length = %d must be positive", path, maxlen);
  /* First pass: validate and size the arena (each space becomes 3 bytes of U+2581). */
  uint64_t pos = 4, arena = 16;
  for (int32_t i = 0; i < n; i++) {
    if (m->size - pos < 8)
      return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": token %d: truncated: the checkpoint's vocab_size is %d", path,
                      pos, i, n);
    int32_t len = (int32_t)il__rd32(m->p + pos + 4);
    if (len < 0 || (uint64_t)len > m->size - pos - 8)
      return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": token %d: length %d does not fit in the %" PRIu64 " remaining bytes",
                      path, pos + 4, i, len, (uint64_t)(m->size - pos - 8));
    arena += 3 * (uint64_t)len + 8;
    pos += 8 + (uint64_t)len;
  }
  if (pos != m->size)
    return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": %" PRIu64 " bytes left after the %d tokens the checkpoint's vocab_size asks for",
                    path, pos, (uint64_t)(m->size - pos), n);
  v->strs = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(char *), "llama2c vocab");
  v->lens = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(uint64_t), "llama2c vocab");
  v->scores = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(float), "llama2c vocab");
  v->types = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)n * sizeof(int32_t), "llama2c vocab");
  v->arena = il_mem_alloc(IL_MEM_TOKENIZER, (size_t)arena, "llama2c vocab");
  if (!v->strs || !v->lens || !v->scores || !v->types || !v->arena) {
    il__vocab_free(v);
    return IL_ERR_OOM;
  }
  char *a = v->arena;
  pos = 4;
  for (int32_t i = 0; i < n; i++) {
    memcpy(&v->scores[i], m->p + pos, 4);
    int32_t len = (int32_t)il__rd32(m->p + pos + 4);
    const uint8_t *s = m->p + pos + 8;
    pos += 8 + (uint64_t)len;
    v->strs[i] = a;
    const char *fixed = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : NULL;
    if (fixed) {
      v->types[i] = i == 0 ? 2 : 3;
      memcpy(a, fixed, strlen(fixed));
      a += strlen(fixed);
    } else {
      v->types[i] = len == 0 ? 3 : il__is_byte_piece(s, len) ? 6 : 1;
      for (int32_t j = 0; j < len; j++) {
        if (s[j] == ' ') {
          memcpy(a, "\xe2\x96\x81", 3);
          a += 3;
        } else {
          *a++ = (char)s[j];
        }
      }
    }
    v->lens[i] = (uint64_t)(a - v->strs[i]);
  }
  return il__check_unique(path, v, n);
}

/* ---- metadata + driver ---- */

static il_status il__write_meta(il__conv *cv, const char *ckpt_path, const il__vocab *v) {
  const il_llama2c_config *c = cv->cfg;
  il_gguf_writer *w = cv->w;
  const char *base = strrchr(ckpt_path, '/');
  base = base ? base + 1 : ckpt_path;
  char name[256];
  snprintf(name, sizeof name, "%s", base);
  char *dot = strrchr(name, '.');
  if (dot && dot != name) *dot = 0;
  IL_TRY(il_gguf_writer_set_str(w, "general.architecture", "llama"));
  IL_TRY(il_gguf_writer_set_str(w, "general.name", name));
  IL_TRY(il_gguf_writer_set_u32(w, "general.file_type", il__ftype(cv->out_type)));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->seq_len));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->dim));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->n_layers));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads));
  IL_TRY(il_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(c->dim / c->n_heads)));
  IL_TRY(il_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
  IL_TRY(il_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f));
  if (!v) return IL_OK;
  uint64_t n = (uint64_t)c->vocab_size;
  IL_TRY(il_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
  IL_TRY(il_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->strs, v->lens, n));
  IL_TRY(il_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IL_GGUF_F32, v->scores, n));
  IL_TRY(il_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IL_GGUF_I32, v->types, n));
  IL_TRY(il_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
  IL_TRY(il_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
  IL_TRY(il_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
  return IL_OK;
}

il_status il_llama2c_convert(const char *ckpt_path, const char *tokenizer_path, il_dtype out_type,
                             const char *out_path) {
  return il_llama2c_convert_ex(ckpt_path, tokenizer_path, out_type, out_path, stderr, NULL);
}

il_status il_llama2c_convert_ex(const char *ckpt_path, const char *tokenizer_path, il_dtype out_type,
                                const char *out_path, FILE *notes, il_llama2c_stats *stats) {
  if (stats) memset(stats, 0, sizeof *stats);
  if (!ckpt_path || !out_path) return il_error(IL_ERR_INVALID_ARG, "il_llama2c_convert: NULL checkpoint or output path");
  if (il__ftype(out_type) == UINT32_MAX)
    return il_error(IL_ERR_UNSUPPORTED, "llama2c import: output type %s is not supported (f32, f16, bf16, q8_0, q4_0, q4_1)",
                    il_dtype_name((uint32_t)out_type));
  il__map ck = {0}, tk = {0};
  il__vocab vocab = {0};
  il_llama2c_config cfg;
  il__weights w = {0};
  il__conv cv = {.cfg = &cfg, .out_type = out_type, .notes = notes, .path = ckpt_path};
  il_status st = il__map_file(ckpt_path, &ck);
  if (st == IL_OK) st = il__parse_config(ckpt_path, &ck, &cfg);
  if (st == IL_OK && tokenizer_path) {
    st = il__map_file(tokenizer_path, &tk);
    if (st == IL_OK) st = il__read_vocab(tokenizer_path, &tk, cfg.vocab_size, &vocab);
  }
  if (st == IL_OK) {
    w.layer = il_mem_alloc(IL_MEM_MODEL, (size_t)cfg.n_layers * IL__NPER * sizeof(il__src), "llama2c weight index");
    if (!w.layer) st = IL_ERR_OOM;
  }
  if (st == IL_OK) {
    il__locate(&cfg, ck.p, &w);
    st = il_gguf_writer_new(&cv.w);
  }
  if (st == IL_OK) st = il__write_meta(&cv, ckpt_path, tokenizer_path ? &vocab : NULL);
  if (st == IL_OK) st = il__emit_all(&cv, &w);
  if (st == IL_OK) st = il_gguf_writer_write(cv.w, out_path);
  if (st == IL_OK && stats) *stats = cv.stats;
  il_gguf_writer_free(cv.w);
  for (uint64_t i = 0; i < cv.n_bufs; i++) il_mem_free(cv.bufs[i]);
  il_mem_free(cv.bufs);
  il_mem_free(w.layer);
  il__vocab_free(&vocab);
  il__unmap(&tk);
  il__unmap(&ck);
  return st;
}
