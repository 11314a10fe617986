/* format/gguf_writer: the GGUF v3 writer.
 *
 * The writer collects serialized values and borrowed tensor data and writes the canonical
 * layout llama.cpp writes (byte layout: gguf.h): header, key/values in insertion order, tensor
 * infos, zero padding to the alignment, then each tensor's data followed by zero padding to the
 * alignment. A file without tensors ends right after its tensor infos (this is how llama.cpp's
 * vocabulary-only files are laid out), so reading a canonical file and writing it back gives
 * the same bytes.
 * Not for: reading (gguf.c; this file sits on it and validates raw values with its parser),
 * model semantics (model/export, model/builtin).
 */
#include "format/gguf_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/outfile.h"
#include "format/gguf_impl.h"
#include "memory/mem.h"

#define IL__GGUF_MAX_NAME 63u /* longest tensor name the writer emits (llama.cpp's limit) */

typedef struct {
  char *key;
  uint32_t type;
  uint8_t *val; /* serialized value, as it follows the type field in the file */
  uint64_t val_size;
} il__wkv;

typedef struct {
  char *name;
  il_dtype type;
  uint32_t n_dims;
  int64_t ne[IL_GGUF_MAX_DIMS];
  const void *data; /* borrowed */
  uint64_t nbytes;
} il__wtensor;

/* Open-addressing index of the names already added (indices into kv or t; -1 = empty), so a
 * duplicate check is O(1) instead of a scan: 8000 layers' tensors no longer take seconds. */
typedef struct {
  int64_t *tab;
  uint64_t cap; /* power of two, at least twice the count; 0 before the first insert */
} il__wset;

struct il_gguf_writer {
  il__wkv *kv;
  uint64_t n_kv, cap_kv;
  il__wtensor *t;
  uint64_t n_t, cap_t;
  uint32_t alignment;
  il__wset kset, tset;
};

static const char *il__wname(const il_gguf_writer *w, bool tensors, int64_t i) {
  return tensors ? w->t[i].name : w->kv[i].key;
}

/* Index of the key or tensor called s, or -1. */
static int64_t il__wfind(const il_gguf_writer *w, bool tensors, const char *s) {
  const il__wset *h = tensors ? &w->tset : &w->kset;
  if (!h->cap) return -1;
  for (uint64_t b = il__gguf_hash(s, strlen(s)) & (h->cap - 1);; b = (b + 1) & (h->cap - 1)) {
    if (h->tab[b] < 0) return -1;
    if (!strcmp(il__wname(w, tensors, h->tab[b]), s)) return h->tab[b];
  }
}

/* Indexes entry i (the last one added; its name is stored), growing the table when needed. */
static il_status il__winsert(il_gguf_writer *w, bool tensors, int64_t i) {
  il__wset *h = tensors ? &w->tset : &w->kset;
  uint64_t need = 2 * (uint64_t)(i + 1);
  if (need > h->cap) {
    uint64_t cap = h->cap ? h->cap : 16;
    while (cap < need) cap *= 2;
    int64_t *tab = il_mem_alloc(IL_MEM_MODEL, cap * sizeof *tab, "gguf writer name index");
    if (!tab) return IL_ERR_OOM;
    memset(tab, 0xff, cap * sizeof *tab);
    il_mem_free(h->tab);
    h->tab = tab;
    h->cap = cap;
    for (int64_t j = 0; j < i; j++) {
      uint64_t b = il__gguf_hash(il__wname(w, tensors, j), strlen(il__wname(w, tensors, j))) & (cap - 1);
      while (tab[b] >= 0) b = (b + 1) & (cap - 1);
      tab[b] = j;
    }
  }
  const char *s = il__wname(w, tensors, i);
  uint64_t b = il__gguf_hash(s, strlen(s)) & (h->cap - 1);
  while (h->tab[b] >= 0) b = (b + 1) & (h->cap - 1);
  h->tab[b] = i;
  return IL_OK;
}

il_status il_gguf_writer_new(il_gguf_writer **out) {
  if (!out) return il_error(IL_ERR_INVALID_ARG, "il_gguf_writer_new: out is NULL");
  *out = il_mem_calloc(IL_MEM_MODEL, sizeof **out, "gguf writer");
  if (!*out) return IL_ERR_OOM;
  (*out)->alignment = IL_GGUF_DEFAULT_ALIGNMENT;
  return IL_OK;
}

void il_gguf_writer_free(il_gguf_writer *w) {
  if (!w) return;
  for (uint64_t i = 0; i < w->n_kv; i++) {
    il_mem_free(w->kv[i].key);
    il_mem_free(w->kv[i].val);
  }
  for (uint64_t i = 0; i < w->n_t; i++) il_mem_free(w->t[i].name);
  il_mem_free(w->kv);
  il_mem_free(w->t);
  il_mem_free(w->kset.tab);
  il_mem_free(w->tset.tab);
  il_mem_free(w);
}

static char *il__strdup(const char *s, size_t n, const char *what) {
  char *p = il_mem_alloc(IL_MEM_MODEL, n + 1, what);
  if (p) {
    memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

static il_status il__check_wname(const char *s, size_t max, const char *kind) {
  if (!s || !*s) return il_error(IL_ERR_INVALID_ARG, "gguf writer: empty %s", kind);
  size_t n = strlen(s);
  if (n > max)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: %s '%.64s...' is %zu bytes, the limit is %zu", kind, s, n, max);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f)
      return il_error(IL_ERR_INVALID_ARG, "gguf writer: %s has control byte 0x%02x at %zu", kind, c, i);
  }
  return IL_OK;
}

/* Adds key with a value already serialized into `val` (ownership passes to the writer, also
 * on failure). */
static il_status il__wadd(il_gguf_writer *w, const char *key, uint32_t type, uint8_t *val, uint64_t size) {
  il_status st = il__check_wname(key, IL__GGUF_MAX_KEY, "key");
  if (st == IL_OK && il__wfind(w, false, key) >= 0)
    st = il_error(IL_ERR_INVALID_ARG, "gguf writer: duplicate key '%s'", key);
  if (st == IL_OK) st = il__gguf_grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof(il__wkv), "gguf writer keys");
  char *k = NULL;
  if (st == IL_OK && !(k = il__strdup(key, strlen(key), "gguf writer key"))) st = IL_ERR_OOM;
  if (st != IL_OK) {
    il_mem_free(val);
    return st;
  }
  w->kv[w->n_kv++] = (il__wkv){k, type, val, size};
  if (il__winsert(w, false, (int64_t)w->n_kv - 1) != IL_OK) {
    w->n_kv--;
    il_mem_free(k);
    il_mem_free(val);
    return IL_ERR_OOM;
  }
  return IL_OK;
}

static il_status il__wadd_scalar(il_gguf_writer *w, const char *key, uint32_t type, const void *v) {
  if (!w) return il_error(IL_ERR_INVALID_ARG, "gguf writer is NULL");
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, il__gguf_value_size(type), "gguf writer value");
  if (!val) return IL_ERR_OOM;
  memcpy(val, v, il__gguf_value_size(type));
  return il__wadd(w, key, type, val, il__gguf_value_size(type));
}

bool il_gguf_writer_remove_key(il_gguf_writer *w, const char *key) {
  for (uint64_t i = 0; w && i < w->n_kv; i++) {
    if (strcmp(w->kv[i].key, key) != 0) continue;
    il_mem_free(w->kv[i].key);
    il_mem_free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof w->kv[0]);
    w->n_kv--;
    /* the index holds positions, which moved: rebuild it (on OOM it stays empty, and duplicate
     * keys are then simply not detected) */
    il_mem_free(w->kset.tab);
    w->kset.tab = NULL;
    w->kset.cap = 0;
    if (w->n_kv && il__winsert(w, false, (int64_t)w->n_kv - 1) != IL_OK) il_error_clear();
    return true;
  }
  return false;
}

il_status il_gguf_writer_set_u32(il_gguf_writer *w, const char *key, uint32_t v) {
  return il__wadd_scalar(w, key, IL_GGUF_U32, &v);
}
il_status il_gguf_writer_set_i32(il_gguf_writer *w, const char *key, int32_t v) {
  return il__wadd_scalar(w, key, IL_GGUF_I32, &v);
}
il_status il_gguf_writer_set_u64(il_gguf_writer *w, const char *key, uint64_t v) {
  return il__wadd_scalar(w, key, IL_GGUF_U64, &v);
}
il_status il_gguf_writer_set_f32(il_gguf_writer *w, const char *key, float v) {
  return il__wadd_scalar(w, key, IL_GGUF_F32, &v);
}
il_status il_gguf_writer_set_bool(il_gguf_writer *w, const char *key, bool v) {
  uint8_t b = v ? 1 : 0;
  return il__wadd_scalar(w, key, IL_GGUF_BOOL, &b);
}

il_status il_gguf_writer_set_str(il_gguf_writer *w, const char *key, const char *v) {
  if (!w || !v) return il_error(IL_ERR_INVALID_ARG, "gguf writer: NULL writer or value for key '%s'", key ? key : "");
  uint64_t n = strlen(v);
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, (size_t)(8 + n), "gguf writer value");
  if (!val) return IL_ERR_OOM;
  memcpy(val, &n, 8);
  memcpy(val + 8, v, (size_t)n);
  return il__wadd(w, key, IL_GGUF_STRING, val, 8 + n);
}

il_status il_gguf_writer_set_arr(il_gguf_writer *w, const char *key, il_gguf_type elem_type, const void *data,
                                 uint64_t n) {
  if (!w) return il_error(IL_ERR_INVALID_ARG, "gguf writer is NULL");
  if ((unsigned)elem_type >= IL_GGUF_TYPE_COUNT || elem_type == IL_GGUF_STRING || elem_type == IL_GGUF_ARRAY)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': element type %d is not a fixed-size type",
                    key ? key : "", (int)elem_type);
  uint64_t bytes;
  if (!il__gguf_mul_u64(n, il__gguf_value_size(elem_type), &bytes) || bytes > SIZE_MAX - 12)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': array of %" PRIu64 " elements is too large",
                    key ? key : "", n);
  if (n && !data) return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': data is NULL", key ? key : "");
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, (size_t)(12 + bytes), "gguf writer array");
  if (!val) return IL_ERR_OOM;
  uint32_t et = (uint32_t)elem_type;
  memcpy(val, &et, 4);
  memcpy(val + 4, &n, 8);
  if (bytes) memcpy(val + 12, data, (size_t)bytes);
  return il__wadd(w, key, IL_GGUF_ARRAY, val, 12 + bytes);
}

il_status il_gguf_writer_set_arr_str(il_gguf_writer *w, const char *key, const char *const *strs,
                                     const uint64_t *lens, uint64_t n) {
  if (!w || (n && (!strs || !lens)))
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': NULL writer, strings or lengths", key ? key : "");
  uint64_t total = 12;
  for (uint64_t i = 0; i < n; i++) {
    if (lens[i] > SIZE_MAX - total - 8)
      return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': string array too large", key ? key : "");
    total += 8 + lens[i];
  }
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, (size_t)total, "gguf writer string array");
  if (!val) return IL_ERR_OOM;
  uint32_t et = IL_GGUF_STRING;
  memcpy(val, &et, 4);
  memcpy(val + 4, &n, 8);
  uint8_t *p = val + 12;
  for (uint64_t i = 0; i < n; i++) {
    memcpy(p, &lens[i], 8);
    if (lens[i]) memcpy(p + 8, strs[i], (size_t)lens[i]);
    p += 8 + lens[i];
  }
  return il__wadd(w, key, IL_GGUF_ARRAY, val, total);
}

il_status il_gguf_writer_set_raw(il_gguf_writer *w, const char *key, il_gguf_type type, const void *value,
                                 size_t size) {
  if (!w || (size && !value)) return il_error(IL_ERR_INVALID_ARG, "gguf writer: NULL writer or value");
  if ((unsigned)type >= IL_GGUF_TYPE_COUNT)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': unknown value type %d", key ? key : "", (int)type);
  /* Validate the bytes with the reader's own value parser. */
  uint64_t pos = 0;
  char field[96];
  snprintf(field, sizeof field, "key '%.64s'", key ? key : "");
  if (il__gguf_check_value((uint32_t)type, value, size, field, &pos) != IL_OK)
    return il_error_wrap(IL_ERR_INVALID_ARG, "gguf writer: set_raw: ");
  if (pos != size)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: key '%s': %s value is %" PRIu64 " bytes, %zu given",
                    key ? key : "", il_gguf_type_name((uint32_t)type), pos, size);
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, size ? size : 1, "gguf writer value");
  if (!val) return IL_ERR_OOM;
  if (size) memcpy(val, value, size);
  return il__wadd(w, key, (uint32_t)type, val, size);
}

il_status il_gguf_writer_copy_kv(il_gguf_writer *w, const il_gguf *g, int64_t i) {
  if (!w || !g || i < 0 || i >= il_gguf_kv_count(g))
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: copy_kv: no entry %" PRId64, i);
  const void *data;
  size_t size;
  il_gguf_kv_raw(g, i, &data, &size);
  uint8_t *val = il_mem_alloc(IL_MEM_MODEL, size ? size : 1, "gguf writer value");
  if (!val) return IL_ERR_OOM;
  memcpy(val, data, size);
  return il__wadd(w, il_gguf_key(g, i), (uint32_t)il_gguf_kv_type(g, i), val, size);
}

il_status il_gguf_writer_add_tensor(il_gguf_writer *w, const char *name, il_dtype type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t nbytes) {
  if (!w || !ne) return il_error(IL_ERR_INVALID_ARG, "gguf writer: NULL writer or shape");
  IL_TRY(il__check_wname(name, IL__GGUF_MAX_NAME, "tensor name"));
  if (il__wfind(w, true, name) >= 0) return il_error(IL_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
  if (n_dims < 1 || n_dims > IL_GGUF_MAX_DIMS)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %" PRIu32 " is outside 1..4", name, n_dims);
  const il_dtype_info *ti = il_dtype_get((uint32_t)type);
  if (!ti) return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': unknown type %d", name, (int)type);
  uint64_t nel = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    if (ne[d] < 0 || !il__gguf_mul_u64(nel, (uint64_t)ne[d], &nel) || nel > (uint64_t)INT64_MAX)
      return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[%" PRIu32 "] = %" PRId64 " is negative or overflows",
                      name, d, ne[d]);
  }
  if (ne[0] % ti->blck)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32,
                    name, ne[0], ti->name, ti->blck);
  uint64_t expect = 0, row_bytes = 0;
  if (ne[0] && (!il__gguf_mul_u64((uint64_t)ne[0] / ti->blck, ti->size, &row_bytes) ||
                !il__gguf_mul_u64(row_bytes, nel / (uint64_t)ne[0], &expect)))
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': size overflows", name);
  if (nbytes != expect)
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': nbytes %" PRIu64 " but %s shape implies %" PRIu64,
                    name, nbytes, ti->name, expect);
  if (nbytes && !data) return il_error(IL_ERR_INVALID_ARG, "gguf writer: tensor '%s': data is NULL", name);
  IL_TRY(il__gguf_grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof(il__wtensor), "gguf writer tensors"));
  il__wtensor *t = &w->t[w->n_t];
  memset(t, 0, sizeof *t);
  if (!(t->name = il__strdup(name, strlen(name), "gguf writer tensor name"))) return IL_ERR_OOM;
  t->type = type;
  t->n_dims = n_dims;
  for (uint32_t d = 0; d < IL_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
  t->data = data;
  t->nbytes = nbytes;
  w->n_t++;
  if (il__winsert(w, true, (int64_t)w->n_t - 1) != IL_OK) {
    w->n_t--;
    il_mem_free(t->name);
    return IL_ERR_OOM;
  }
  return IL_OK;
}

il_status il_gguf_writer_set_alignment(il_gguf_writer *w, uint32_t alignment) {
  if (!w || !il__gguf_is_pow2(alignment))
    return il_error(IL_ERR_INVALID_ARG, "gguf writer: alignment %" PRIu32 " is not a nonzero power of two", alignment);
  w->alignment = alignment;
  return IL_OK;
}

/* Buffered output that remembers the first error. */
typedef struct {
  FILE *f;
  uint64_t pos;
  int err; /* errno of the first failure, 0 when none */
} il__out;

static void il__put(il__out *o, const void *p, uint64_t n) {
  if (o->err || !n) return;
  if (fwrite(p, 1, (size_t)n, o->f) != (size_t)n) o->err = errno ? errno : EIO;
  o->pos += n;
}
static void il__put32(il__out *o, uint32_t v) { il__put(o, &v, 4); }
static void il__put64(il__out *o, uint64_t v) { il__put(o, &v, 8); }
static void il__pad(il__out *o, uint32_t alignment) {
  static const uint8_t zeros[256];
  uint64_t n = il__gguf_align_up(o->pos, alignment) - o->pos;
  while (n) {
    uint64_t k = n < sizeof zeros ? n : sizeof zeros;
    il__put(o, zeros, k);
    n -= k;
  }
}

il_status il_gguf_writer_write(il_gguf_writer *w, const char *path) {
  if (!w || !path) return il_error(IL_ERR_INVALID_ARG, "gguf writer: NULL writer or path");
  il_outfile of;
  IL_TRY(il_outfile_open(&of, "output", path, NULL, 0));
  il__out o = {of.f, 0, 0};
  il__put32(&o, IL__GGUF_MAGIC);
  il__put32(&o, 3);
  il__put64(&o, w->n_t);
  il__put64(&o, w->n_kv);
  for (uint64_t i = 0; i < w->n_kv; i++) {
    uint64_t kl = strlen(w->kv[i].key);
    il__put64(&o, kl);
    il__put(&o, w->kv[i].key, kl);
    il__put32(&o, w->kv[i].type);
    il__put(&o, w->kv[i].val, w->kv[i].val_size);
  }
  uint64_t off = 0;
  for (uint64_t i = 0; i < w->n_t; i++) {
    const il__wtensor *t = &w->t[i];
    uint64_t nl = strlen(t->name);
    il__put64(&o, nl);
    il__put(&o, t->name, nl);
    il__put32(&o, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; d++) il__put64(&o, (uint64_t)t->ne[d]);
    il__put32(&o, (uint32_t)t->type);
    il__put64(&o, off);
    off = il__gguf_align_up(off + t->nbytes, w->alignment);
  }
  if (w->n_t) il__pad(&o, w->alignment);
  for (uint64_t i = 0; i < w->n_t; i++) {
    il__put(&o, w->t[i].data, w->t[i].nbytes);
    il__pad(&o, w->alignment);
  }
  if (o.err) {
    il_outfile_discard(&of);
    return il_error(IL_ERR_OUTPUT, "%s: write failed after %" PRIu64 " bytes: %s", path, o.pos, strerror(o.err));
  }
  return il_outfile_close(&of);
}
