/* format/gguf: the GGUF v2/v3 reader (mmap + full validation).
 *
 * The byte layout is documented at the top of gguf.h. The reader walks the file once,
 * validating every count against the bytes that remain before it trusts it, so a hostile count
 * (2^60 key/value pairs) fails at once without allocating. What it keeps is an index into the mapping: per
 * key/value entry the key (copied, NUL-terminated), the type and the value's file offset and
 * size; per top-level string array the file offset of every element (the O(1) accessor that
 * 150k-entry tokenizer vocabularies need); per tensor its validated shape, type, size and data
 * pointer. Keys and tensor names are found through open-addressing hash tables.
 * Not for: writing GGUF (gguf_writer.c, which sits on this reader), model semantics (model/),
 * conversion from other formats (format/llama2c).
 */
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/loadsink.h"
#include "format/gguf_impl.h"
#include "memory/mem.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "format/gguf hands out little-endian file data as host values: little-endian hosts only"
#endif

#define IL__GGUF_MAX_DEPTH 8 /* array nesting levels accepted */
/* Smallest possible encodings, used to bound counts by the bytes that remain. */
#define IL__MIN_KV 14u          /* u64 key length + 1 key byte + u32 type + 1 value byte */
#define IL__MIN_TENSOR_INFO 33u /* u64 name length + 1 byte + u32 n_dims + 1 x u64 ne + u32 type + u64 offset */

/* GGML type names by id, so a file using a type inferlab lacks is reported by name. */
const char *il_gguf_type_name(uint32_t t) {
  static const char *const name[IL_GGUF_TYPE_COUNT] = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return t < IL_GGUF_TYPE_COUNT ? name[t] : "?";
}

static const char *const il__ggml_names[] = {
    [0] = "f32",      [1] = "f16",      [2] = "q4_0",     [3] = "q4_1",    [6] = "q5_0",
    [7] = "q5_1",     [8] = "q8_0",     [9] = "q8_1",     [10] = "q2_K",   [11] = "q3_K",
    [12] = "q4_K",    [13] = "q5_K",    [14] = "q6_K",    [15] = "q8_K",   [16] = "iq2_xxs",
    [17] = "iq2_xs",  [18] = "iq3_xxs", [19] = "iq1_s",   [20] = "iq4_nl", [21] = "iq3_s",
    [22] = "iq2_s",   [23] = "iq4_xs",  [24] = "i8",      [25] = "i16",    [26] = "i32",
    [27] = "i64",     [28] = "f64",     [29] = "iq1_m",   [30] = "bf16",   [34] = "tq1_0",
    [35] = "tq2_0",   [39] = "mxfp4",
};

/* ---- small helpers ---- */

static uint32_t il__rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t il__rd64(const uint8_t *p) { return (uint64_t)il__rd32(p) | (uint64_t)il__rd32(p + 4) << 32; }

/* Copies up to 64 bytes of a name from the file into buf for messages, replacing bytes that
 * are not printable ASCII with '?' and marking truncation with "...". */
static const char *il__printable(char *buf, size_t bufsz, const char *s, uint64_t n) {
  size_t max = bufsz - 4, k = 0;
  for (uint64_t i = 0; i < n && k < max && k < 64; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if ((uint64_t)k < n) {
    memcpy(buf + k, "...", 3);
    k += 3;
  }
  buf[k] = 0;
  return buf;
}

/* ---- parsing ---- */

typedef struct {
  const char *key;  /* NUL-terminated copy in the names arena (set after parsing) */
  uint64_t key_pos; /* file offset of the key's u64 length */
  uint64_t key_len;
  uint32_t type;
  uint64_t val_pos; /* file offset of the value (after the type field) */
  uint64_t val_size;
  uint32_t elem_type; /* arrays: element type and count */
  uint64_t n;
  uint64_t *str_pos; /* top-level string arrays: file offset of each element's u64 length */
} il__kv;

typedef struct {
  il_gguf_tensor t;
  uint64_t name_pos, name_len; /* name bytes in the file */
  uint64_t off_pos;            /* file offset of the offset field */
  uint32_t type_id;            /* as stored, before mapping to il_dtype */
} il__tensor;

struct il_gguf {
  const uint8_t *base;
  size_t size;
  void *map; /* base, when this reader mapped the file (unmapped at close); else NULL */
  bool read_in; /* map holds anonymous memory read from the file (il_gguf_note_read_in) */
  char *name;
  uint32_t version, alignment;
  uint64_t data_offset;
  il__kv *kv;
  uint64_t n_kv, cap_kv;
  il__tensor *tensors;
  uint64_t n_tensors, cap_tensors;
  char *names; /* arena of NUL-terminated keys and tensor names */
  int64_t *kv_hash, *t_hash;
  uint64_t kv_hash_cap, t_hash_cap;
};

/* Records "<file>: offset <off>: <field>: <problem>". */
__attribute__((format(printf, 5, 6))) static il_status il__bad(const il_gguf *g, il_status code,
                                                               uint64_t off, const char *field,
                                                               const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return il_error(code, "%s: offset %" PRIu64 ": %s: %s", g->name, off, field, msg);
}

static il_status il__need(const il_gguf *g, uint64_t pos, uint64_t n, const char *field) {
  if (n > g->size - pos)
    return il__bad(g, IL_ERR_FORMAT, pos, field, "truncated: needs %" PRIu64 " bytes, %" PRIu64 " remain",
                   n, (uint64_t)(g->size - pos));
  return IL_OK;
}

/* Validates one value of `type` at *pos and advances past it. `depth` is the array nesting
 * level of this value (1 for a top-level array). `top` (top-level values only) receives the
 * array element type, count and, for string arrays, the element offset index. */
static il_status il__parse_value(il_gguf *g, uint64_t *pos, uint32_t type, int depth,
                                 const char *field, il__kv *top) {
  if (type != IL_GGUF_STRING && type != IL_GGUF_ARRAY) {
    IL_TRY(il__need(g, *pos, il__gguf_value_size(type), field));
    *pos += il__gguf_value_size(type);
    return IL_OK;
  }
  if (type == IL_GGUF_STRING) {
    IL_TRY(il__need(g, *pos, 8, field));
    uint64_t len = il__rd64(g->base + *pos), left = g->size - *pos - 8;
    if (len > left)
      return il__bad(g, IL_ERR_FORMAT, *pos, field,
                     "string length %" PRIu64 " exceeds the %" PRIu64 " remaining bytes", len, left);
    *pos += 8 + len;
    return IL_OK;
  }
  uint64_t at = *pos;
  if (depth > IL__GGUF_MAX_DEPTH)
    return il__bad(g, IL_ERR_FORMAT, at, field, "arrays nested more than %d levels deep",
                   IL__GGUF_MAX_DEPTH);
  IL_TRY(il__need(g, at, 12, field));
  uint32_t et = il__rd32(g->base + at);
  uint64_t n = il__rd64(g->base + at + 4), left = g->size - at - 12;
  if (et >= IL_GGUF_TYPE_COUNT)
    return il__bad(g, IL_ERR_FORMAT, at, field, "unknown array element type %" PRIu32, et);
  uint64_t min = et == IL_GGUF_STRING ? 8 : et == IL_GGUF_ARRAY ? 12 : il__gguf_value_size(et);
  if (n > left / min)
    return il__bad(g, IL_ERR_FORMAT, at + 4, field,
                   "array of %" PRIu64 " %s elements cannot fit in %" PRIu64 " remaining bytes", n,
                   il_gguf_type_name(et), left);
  *pos = at + 12;
  if (top) {
    top->elem_type = et;
    top->n = n;
  }
  if (et != IL_GGUF_STRING && et != IL_GGUF_ARRAY) {
    *pos += n * min;
    return IL_OK;
  }
  if (et == IL_GGUF_STRING && top && n) {
    top->str_pos = il_mem_alloc(IL_MEM_MODEL, (size_t)(n * sizeof(uint64_t)), "gguf string array index");
    if (!top->str_pos) return IL_ERR_OOM;
  }
  for (uint64_t i = 0; i < n; i++) {
    if (et == IL_GGUF_STRING && top) top->str_pos[i] = *pos;
    IL_TRY(il__parse_value(g, pos, et, depth + 1, field, NULL));
  }
  return IL_OK;
}

/* Finds (s, n) in a hash table whose slots index kv keys or tensor names in the file. */
static int64_t il__hfind(const il_gguf *g, bool tensors, const char *s, uint64_t n) {
  const int64_t *tab = tensors ? g->t_hash : g->kv_hash;
  uint64_t cap = tensors ? g->t_hash_cap : g->kv_hash_cap;
  if (!cap) return -1;
  for (uint64_t h = il__gguf_hash(s, n) & (cap - 1);; h = (h + 1) & (cap - 1)) {
    int64_t i = tab[h];
    if (i < 0) return -1;
    uint64_t pos = tensors ? g->tensors[i].name_pos : g->kv[i].key_pos + 8;
    uint64_t len = tensors ? g->tensors[i].name_len : g->kv[i].key_len;
    if (len == n && memcmp(g->base + pos, s, n) == 0) return i;
  }
}

/* Builds the hash table over keys or tensor names and rejects duplicates. */
static il_status il__build_hash(il_gguf *g, bool tensors) {
  uint64_t n = tensors ? g->n_tensors : g->n_kv, cap = 16;
  while (cap < 2 * n) cap *= 2;
  int64_t *tab = il_mem_alloc(IL_MEM_MODEL, cap * sizeof(int64_t), tensors ? "gguf tensor index" : "gguf key index");
  if (!tab) return IL_ERR_OOM;
  memset(tab, 0xff, cap * sizeof(int64_t));
  if (tensors) {
    g->t_hash = tab;
    g->t_hash_cap = cap;
  } else {
    g->kv_hash = tab;
    g->kv_hash_cap = cap;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint64_t pos = tensors ? g->tensors[i].name_pos : g->kv[i].key_pos + 8;
    uint64_t len = tensors ? g->tensors[i].name_len : g->kv[i].key_len;
    const char *s = (const char *)g->base + pos;
    int64_t prev = il__hfind(g, tensors, s, len);
    if (prev >= 0) {
      char nm[80], field[112];
      snprintf(field, sizeof field, "%s '%s'", tensors ? "tensor" : "key", il__printable(nm, sizeof nm, s, len));
      return il__bad(g, IL_ERR_FORMAT, pos - 8, field, "duplicate %s (first defined at offset %" PRIu64 ")",
                     tensors ? "tensor name" : "key",
                     tensors ? g->tensors[prev].t.info_offset : g->kv[prev].key_pos);
    }
    uint64_t h = il__gguf_hash(s, len) & (cap - 1);
    while (tab[h] >= 0) h = (h + 1) & (cap - 1);
    tab[h] = (int64_t)i;
  }
  return IL_OK;
}

/* Reads a u64 length-prefixed name at *pos (a key or tensor name) and checks it is 1..max
 * bytes without control characters. */
static il_status il__parse_name(il_gguf *g, uint64_t *pos, const char *field, uint64_t max,
                                uint64_t *name_pos, uint64_t *name_len) {
  IL_TRY(il__need(g, *pos, 8, field));
  uint64_t len = il__rd64(g->base + *pos), left = g->size - *pos - 8;
  if (len > left)
    return il__bad(g, IL_ERR_FORMAT, *pos, field, "length %" PRIu64 " exceeds the %" PRIu64 " remaining bytes",
                   len, left);
  if (len == 0) return il__bad(g, IL_ERR_FORMAT, *pos, field, "empty name");
  if (len > max)
    return il__bad(g, IL_ERR_FORMAT, *pos, field, "length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes",
                   len, max);
  const uint8_t *s = g->base + *pos + 8;
  for (uint64_t i = 0; i < len; i++) {
    if (s[i] < 0x20 || s[i] == 0x7f)
      return il__bad(g, IL_ERR_FORMAT, *pos + 8 + i, field, "control byte 0x%02x in name", s[i]);
  }
  *name_pos = *pos + 8;
  *name_len = len;
  *pos += 8 + len;
  return IL_OK;
}

static il_status il__parse_kvs(il_gguf *g, uint64_t *pos, uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; i++) {
    char field[112], nm[80];
    IL_TRY(il__gguf_grow((void **)&g->kv, &g->cap_kv, i + 1, sizeof(il__kv), "gguf key/value index"));
    il__kv *e = &g->kv[i];
    memset(e, 0, sizeof *e);
    g->n_kv = i + 1; /* counts initialized entries, so close frees their string indexes */
    e->key_pos = *pos;
    uint64_t kpos;
    snprintf(field, sizeof field, "kv[%" PRIu64 "] key", i);
    IL_TRY(il__parse_name(g, pos, field, IL__GGUF_MAX_KEY, &kpos, &e->key_len));
    snprintf(field, sizeof field, "key '%s'", il__printable(nm, sizeof nm, (const char *)g->base + kpos, e->key_len));
    IL_TRY(il__need(g, *pos, 4, field));
    e->type = il__rd32(g->base + *pos);
    if (e->type >= IL_GGUF_TYPE_COUNT)
      return il__bad(g, IL_ERR_FORMAT, *pos, field, "unknown value type %" PRIu32, e->type);
    *pos += 4;
    e->val_pos = *pos;
    IL_TRY(il__parse_value(g, pos, e->type, 1, field, e));
    e->val_size = *pos - e->val_pos;
  }
  return IL_OK;
}

static il_status il__parse_tensor(il_gguf *g, uint64_t *pos, uint64_t i, uint64_t *first_unsupported) {
  char field[112], nm[80];
  il__tensor *t = &g->tensors[i];
  memset(t, 0, sizeof *t);
  t->t.info_offset = *pos;
  snprintf(field, sizeof field, "tensor[%" PRIu64 "] name", i);
  IL_TRY(il__parse_name(g, pos, field, IL__GGUF_MAX_KEY, &t->name_pos, &t->name_len));
  snprintf(field, sizeof field, "tensor '%s'", il__printable(nm, sizeof nm, (const char *)g->base + t->name_pos, t->name_len));

  IL_TRY(il__need(g, *pos, 4, field));
  uint32_t nd = il__rd32(g->base + *pos);
  if (nd < 1 || nd > IL_GGUF_MAX_DIMS)
    return il__bad(g, IL_ERR_FORMAT, *pos, field, "n_dims %" PRIu32 " is outside 1..%d", nd, IL_GGUF_MAX_DIMS);
  *pos += 4;
  t->t.n_dims = nd;
  IL_TRY(il__need(g, *pos, 8ull * nd, field));
  uint64_t nel = 1;
  for (uint32_t d = 0; d < IL_GGUF_MAX_DIMS; d++) t->t.ne[d] = 1;
  for (uint32_t d = 0; d < nd; d++) {
    uint64_t v = il__rd64(g->base + *pos + 8ull * d);
    if (v > (uint64_t)INT64_MAX)
      return il__bad(g, IL_ERR_FORMAT, *pos + 8ull * d, field, "ne[%" PRIu32 "] = %" PRId64 " is negative", d,
                     (int64_t)v);
    if (!il__gguf_mul_u64(nel, v, &nel) || nel > (uint64_t)INT64_MAX)
      return il__bad(g, IL_ERR_FORMAT, *pos + 8ull * d, field,
                     "element count overflows int64 at ne[%" PRIu32 "] = %" PRIu64, d, v);
    t->t.ne[d] = (int64_t)v;
  }
  *pos += 8ull * nd;

  IL_TRY(il__need(g, *pos, 4, field));
  uint32_t type = il__rd32(g->base + *pos);
  t->type_id = type;
  const il_dtype_info *ti = il_dtype_get(type);
  if (!ti) {
    /* Reported after all infos parsed, so a corrupt file is a format error first. */
    if (*first_unsupported == UINT64_MAX) *first_unsupported = i;
  } else {
    t->t.type = (il_dtype)type;
    if (t->t.ne[0] % ti->blck != 0)
      return il__bad(g, IL_ERR_FORMAT, *pos, field,
                     "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32, t->t.ne[0],
                     ti->name, ti->blck);
    uint64_t ne0 = (uint64_t)t->t.ne[0], rows = ne0 ? nel / ne0 : 0, row_bytes;
    if (!il__gguf_mul_u64(ne0 / ti->blck, ti->size, &row_bytes) || !il__gguf_mul_u64(row_bytes, rows, &t->t.nbytes))
      return il__bad(g, IL_ERR_FORMAT, *pos, field, "data size overflows 64 bits");
  }
  *pos += 4;
  IL_TRY(il__need(g, *pos, 8, field));
  t->off_pos = *pos;
  t->t.offset = il__rd64(g->base + *pos);
  *pos += 8;
  return IL_OK;
}

static int il__cmp_u64pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Offsets aligned, ranges inside the file, no two tensors sharing bytes. */
static il_status il__check_data(il_gguf *g) {
  char field[112];
  uint64_t size = g->size, base = g->data_offset;
  if (g->n_tensors && base > size)
    return il__bad(g, IL_ERR_FORMAT, size, "tensor data",
                   "data section starts at offset %" PRIu64 ", past the end of the %" PRIu64 "-byte file", base, size);
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    il__tensor *t = &g->tensors[i];
    snprintf(field, sizeof field, "tensor '%s'", t->t.name);
    if (t->t.offset % g->alignment)
      return il__bad(g, IL_ERR_FORMAT, t->off_pos, field, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                     t->t.offset, g->alignment);
    if (t->t.offset > size - base || t->t.nbytes > size - base - t->t.offset) {
      uint64_t start = base + t->t.offset; /* may wrap for absurd offsets: print the parts too */
      return il__bad(g, IL_ERR_FORMAT, t->off_pos, field,
                     "data [%" PRIu64 ", +%" PRIu64 ") at data offset %" PRIu64 " ends past end of file (%" PRIu64 " bytes)",
                     start, t->t.nbytes, t->t.offset, size);
    }
    t->t.data = g->base + base + t->t.offset;
  }
  if (g->n_tensors < 2) return IL_OK;
  uint64_t *ord = il_mem_alloc(IL_MEM_MODEL, (size_t)(g->n_tensors * 2 * sizeof(uint64_t)), "gguf overlap check");
  if (!ord) return IL_ERR_OOM;
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    ord[2 * i] = g->tensors[i].t.offset;
    ord[2 * i + 1] = i;
  }
  qsort(ord, (size_t)g->n_tensors, 2 * sizeof(uint64_t), il__cmp_u64pair);
  il_status st = IL_OK;
  const il__tensor *prev = NULL;
  for (uint64_t k = 0; k < g->n_tensors && st == IL_OK; k++) {
    const il__tensor *t = &g->tensors[ord[2 * k + 1]];
    if (t->t.nbytes == 0) continue;
    if (prev && t->t.offset < prev->t.offset + prev->t.nbytes) {
      snprintf(field, sizeof field, "tensor '%s'", t->t.name);
      st = il__bad(g, IL_ERR_FORMAT, t->off_pos, field,
                   "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                   base + t->t.offset, base + t->t.offset + t->t.nbytes, prev->t.name, base + prev->t.offset,
                   base + prev->t.offset + prev->t.nbytes);
    }
    prev = t;
  }
  il_mem_free(ord);
  return st;
}

/* Copies keys and tensor names into one arena of NUL-terminated strings. */
static il_status il__copy_names(il_gguf *g) {
  uint64_t total = 1;
  for (uint64_t i = 0; i < g->n_kv; i++) total += g->kv[i].key_len + 1;
  for (uint64_t i = 0; i < g->n_tensors; i++) total += g->tensors[i].name_len + 1;
  g->names = il_mem_alloc(IL_MEM_MODEL, (size_t)total, "gguf names");
  if (!g->names) return IL_ERR_OOM;
  char *p = g->names;
  for (uint64_t i = 0; i < g->n_kv; i++) {
    memcpy(p, g->base + g->kv[i].key_pos + 8, (size_t)g->kv[i].key_len);
    g->kv[i].key = p;
    p += g->kv[i].key_len;
    *p++ = 0;
  }
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    memcpy(p, g->base + g->tensors[i].name_pos, (size_t)g->tensors[i].name_len);
    g->tensors[i].t.name = p;
    p += g->tensors[i].name_len;
    *p++ = 0;
  }
  return IL_OK;
}

static il_status il__parse(il_gguf *g) {
  uint64_t pos = 0;
  IL_TRY(il__need(g, 0, 4, "magic"));
  uint32_t magic = il__rd32(g->base);
  if (magic != IL__GGUF_MAGIC)
    return il__bad(g, IL_ERR_FORMAT, 0, "magic", "expected \"GGUF\" (47 47 55 46), found %02x %02x %02x %02x",
                   g->base[0], g->base[1], g->base[2], g->base[3]);
  IL_TRY(il__need(g, 4, 4, "version"));
  g->version = il__rd32(g->base + 4);
  if (g->version == 1)
    return il__bad(g, IL_ERR_UNSUPPORTED, 4, "version",
                   "GGUF v1 (32-bit counts) is not supported; re-convert the model to v3");
  if (g->version == 0x02000000u || g->version == 0x03000000u)
    return il__bad(g, IL_ERR_UNSUPPORTED, 4, "version", "big-endian GGUF is not supported");
  if (g->version != 2 && g->version != 3)
    return il__bad(g, IL_ERR_FORMAT, 4, "version", "unknown version %" PRIu32 " (expected 2 or 3)", g->version);
  IL_TRY(il__need(g, 8, 16, "n_tensors"));
  uint64_t n_tensors = il__rd64(g->base + 8), n_kv = il__rd64(g->base + 16), left = g->size - 24;
  if (n_tensors > left / IL__MIN_TENSOR_INFO)
    return il__bad(g, IL_ERR_FORMAT, 8, "n_tensors", "%" PRIu64 " tensor infos cannot fit in %" PRIu64 " remaining bytes",
                   n_tensors, left);
  if (n_kv > left / IL__MIN_KV)
    return il__bad(g, IL_ERR_FORMAT, 16, "n_kv", "%" PRIu64 " key/value pairs cannot fit in %" PRIu64 " remaining bytes",
                   n_kv, left);
  pos = 24;

  IL_TRY(il__parse_kvs(g, &pos, n_kv));
  IL_TRY(il__build_hash(g, false));

  g->alignment = IL_GGUF_DEFAULT_ALIGNMENT;
  int64_t ai = il__hfind(g, false, "general.alignment", strlen("general.alignment"));
  if (ai >= 0) {
    const il__kv *e = &g->kv[ai];
    if (e->type != IL_GGUF_U32)
      return il__bad(g, IL_ERR_FORMAT, e->val_pos - 4, "key 'general.alignment'", "type is %s, expected u32",
                     il_gguf_type_name(e->type));
    uint32_t a = il__rd32(g->base + e->val_pos);
    if (!il__gguf_is_pow2(a))
      return il__bad(g, IL_ERR_FORMAT, e->val_pos, "key 'general.alignment'", "%" PRIu32 " is not a nonzero power of two", a);
    g->alignment = a;
  }

  uint64_t first_unsupported = UINT64_MAX;
  for (uint64_t i = 0; i < n_tensors; i++) {
    IL_TRY(il__gguf_grow((void **)&g->tensors, &g->cap_tensors, i + 1, sizeof(il__tensor), "gguf tensor index"));
    g->n_tensors = i + 1;
    IL_TRY(il__parse_tensor(g, &pos, i, &first_unsupported));
  }
  IL_TRY(il__build_hash(g, true));
  IL_TRY(il__copy_names(g));
  if (first_unsupported != UINT64_MAX) {
    const il__tensor *t = &g->tensors[first_unsupported];
    char field[112];
    uint32_t id = t->type_id;
    snprintf(field, sizeof field, "tensor '%s'", t->t.name);
    const char *known = id < sizeof il__ggml_names / sizeof il__ggml_names[0] ? il__ggml_names[id] : NULL;
    if (known)
      return il__bad(g, IL_ERR_UNSUPPORTED, t->off_pos - 4, field,
                     "type %" PRIu32 " (%s) is a GGML type inferlab does not support "
                     "(supported: f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)", id, known);
    return il__bad(g, IL_ERR_UNSUPPORTED, t->off_pos - 4, field, "type %" PRIu32 " is not a known GGML type", id);
  }
  g->data_offset = il__gguf_align_up(pos, g->alignment);
  return il__check_data(g);
}

static il_status il__open_image(const void *data, size_t size, const char *name, void *map, il_gguf **out) {
  *out = NULL;
  il_gguf *g = il_mem_calloc(IL_MEM_MODEL, sizeof *g, "gguf reader");
  if (!g) return IL_ERR_OOM;
  size_t nlen = strlen(name);
  g->name = il_mem_alloc(IL_MEM_MODEL, nlen + 1, "gguf file name");
  if (!g->name) {
    il_mem_free(g);
    return IL_ERR_OOM;
  }
  memcpy(g->name, name, nlen + 1);
  g->base = data;
  g->size = size;
  il_status st = il__parse(g);
  if (st != IL_OK) {
    il_gguf_close(g); /* not mapped yet: close leaves the caller's image alone */
    return st;
  }
  g->map = map;
  *out = g;
  return IL_OK;
}

il_status il_gguf_open_memory(const void *data, size_t size, const char *name, il_gguf **out) {
  if (!out) return il_error(IL_ERR_INVALID_ARG, "il_gguf_open_memory: out is NULL");
  *out = NULL;
  if (!data && size) return il_error(IL_ERR_INVALID_ARG, "il_gguf_open_memory: data is NULL");
  static const uint8_t empty[1];
  return il__open_image(data ? data : empty, size, name ? name : "(memory)", NULL, out);
}

il_status il_gguf_open(const char *path, il_gguf **out) {
  if (!out || !path) return il_error(IL_ERR_INVALID_ARG, "il_gguf_open: path or out is NULL");
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return il_error(e == ENOENT ? IL_ERR_NOT_FOUND : IL_ERR_IO, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return il_error(IL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return il_error(IL_ERR_IO, "%s: not a regular file", path);
  }
  size_t size = (size_t)sb.st_size;
  if (size == 0) {
    close(fd);
    return il_error(IL_ERR_FORMAT, "%s: offset 0: magic: truncated: the file is empty", path);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED) return il_error(IL_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
  il_load_mapped(path, map, size); /* the page cache before any read (core/loadsink) */
  il_status st = il__open_image(map, size, path, map, out);
  if (st != IL_OK) {
    munmap(map, size);
    return st;
  }
  il_mem_note_mapped(IL_MEM_WEIGHTS, (int64_t)size);
  return IL_OK;
}

void il_gguf_close(il_gguf *g) {
  if (!g) return;
  /* n_kv counts initialized entries, also after a failed parse. */
  for (uint64_t i = 0; i < g->n_kv; i++) il_mem_free(g->kv[i].str_pos);
  il_mem_free(g->kv);
  il_mem_free(g->tensors);
  il_mem_free(g->names);
  il_mem_free(g->kv_hash);
  il_mem_free(g->t_hash);
  if (g->map) {
    munmap(g->map, g->size);
    if (g->read_in) il_mem_space_release(il_mem_host(), IL_MEM_WEIGHTS, g->size);
    else il_mem_note_mapped(IL_MEM_WEIGHTS, -(int64_t)g->size);
  }
  il_mem_free(g->name);
  il_mem_free(g);
}

uint32_t il_gguf_version(const il_gguf *g) { return g->version; }
uint32_t il_gguf_alignment(const il_gguf *g) { return g->alignment; }
const char *il_gguf_path(const il_gguf *g) { return g->name; }
size_t il_gguf_file_size(const il_gguf *g) { return g->size; }
uint64_t il_gguf_data_offset(const il_gguf *g) { return g->data_offset; }
const void *il_gguf_image(const il_gguf *g) { return g->map; }

il_status il_gguf_note_read_in(il_gguf *g) {
  if (!g->map || g->read_in) return IL_OK;
  IL_TRY(il_mem_space_reserve(il_mem_host(), IL_MEM_WEIGHTS, g->size, "the model file read into memory (--no-mmap)"));
  il_mem_note_mapped(IL_MEM_WEIGHTS, -(int64_t)g->size);
  g->read_in = true;
  return IL_OK;
}

bool il_gguf_read_in(const il_gguf *g) { return g->read_in; }

/* ---- metadata access ---- */

int64_t il_gguf_kv_count(const il_gguf *g) { return (int64_t)g->n_kv; }

int64_t il_gguf_find_key(const il_gguf *g, const char *key) {
  if (!key) return -1;
  return il__hfind(g, false, key, strlen(key));
}

const char *il_gguf_key(const il_gguf *g, int64_t i) {
  return i >= 0 && (uint64_t)i < g->n_kv ? g->kv[i].key : NULL;
}

il_gguf_type il_gguf_kv_type(const il_gguf *g, int64_t i) {
  return i >= 0 && (uint64_t)i < g->n_kv ? (il_gguf_type)g->kv[i].type : IL_GGUF_TYPE_COUNT;
}

void il_gguf_kv_raw(const il_gguf *g, int64_t i, const void **data, size_t *size) {
  if (i < 0 || (uint64_t)i >= g->n_kv) {
    *data = NULL;
    *size = 0;
    return;
  }
  *data = g->base + g->kv[i].val_pos;
  *size = (size_t)g->kv[i].val_size;
}

static il_status il__get(const il_gguf *g, const char *key, const il__kv **out) {
  int64_t i = il_gguf_find_key(g, key);
  if (i < 0) return il_error(IL_ERR_NOT_FOUND, "%s: key '%s' not found", g->name, key ? key : "(null)");
  *out = &g->kv[i];
  return IL_OK;
}

static il_status il__wrong_type(const il_gguf *g, const il__kv *e, const char *expected) {
  if (e->type == IL_GGUF_ARRAY)
    return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": key '%s': expected %s, found array of %s", g->name,
                    e->key_pos, e->key, expected, il_gguf_type_name(e->elem_type));
  return il_error(IL_ERR_FORMAT, "%s: offset %" PRIu64 ": key '%s': expected %s, found %s", g->name, e->key_pos,
                  e->key, expected, il_gguf_type_name(e->type));
}

/* Integer value of e as (negative?, two's complement bits); false when not an integer type. */
static bool il__int_of(const il_gguf *g, const il__kv *e, bool *neg, uint64_t *u) {
  const uint8_t *p = g->base + e->val_pos;
  int64_t s;
  switch (e->type) {
  case IL_GGUF_U8: *u = p[0]; *neg = false; return true;
  case IL_GGUF_U16: *u = (uint64_t)p[0] | (uint64_t)p[1] << 8; *neg = false; return true;
  case IL_GGUF_U32: *u = il__rd32(p); *neg = false; return true;
  case IL_GGUF_U64: *u = il__rd64(p); *neg = false; return true;
  case IL_GGUF_I8: s = (int8_t)p[0]; break;
  case IL_GGUF_I16: s = (int16_t)(uint16_t)((uint16_t)p[0] | (uint16_t)(p[1] << 8)); break;
  case IL_GGUF_I32: s = (int32_t)il__rd32(p); break;
  case IL_GGUF_I64: s = (int64_t)il__rd64(p); break;
  default: return false;
  }
  *neg = s < 0;
  *u = (uint64_t)s;
  return true;
}

static il_status il__range(const il_gguf *g, const il__kv *e, bool neg, uint64_t u, const char *target) {
  if (neg)
    return il_error(IL_ERR_RANGE, "%s: key '%s': value %" PRId64 " does not fit %s", g->name, e->key, (int64_t)u, target);
  return il_error(IL_ERR_RANGE, "%s: key '%s': value %" PRIu64 " does not fit %s", g->name, e->key, u, target);
}

il_status il_gguf_get_u32(const il_gguf *g, const char *key, uint32_t *out) {
  const il__kv *e = NULL;
  bool neg;
  uint64_t u;
  IL_TRY(il__get(g, key, &e));
  if (!il__int_of(g, e, &neg, &u)) return il__wrong_type(g, e, "an integer (u32)");
  if (neg || u > UINT32_MAX) return il__range(g, e, neg, u, "u32");
  *out = (uint32_t)u;
  return IL_OK;
}

il_status il_gguf_get_u64(const il_gguf *g, const char *key, uint64_t *out) {
  const il__kv *e = NULL;
  bool neg;
  uint64_t u;
  IL_TRY(il__get(g, key, &e));
  if (!il__int_of(g, e, &neg, &u)) return il__wrong_type(g, e, "an integer (u64)");
  if (neg) return il__range(g, e, neg, u, "u64");
  *out = u;
  return IL_OK;
}

il_status il_gguf_get_i64(const il_gguf *g, const char *key, int64_t *out) {
  const il__kv *e = NULL;
  bool neg;
  uint64_t u;
  IL_TRY(il__get(g, key, &e));
  if (!il__int_of(g, e, &neg, &u)) return il__wrong_type(g, e, "an integer (i64)");
  if (!neg && u > (uint64_t)INT64_MAX) return il__range(g, e, neg, u, "i64");
  *out = (int64_t)u;
  return IL_OK;
}

il_status il_gguf_get_f32(const il_gguf *g, const char *key, float *out) {
  const il__kv *e = NULL;
  IL_TRY(il__get(g, key, &e));
  const uint8_t *p = g->base + e->val_pos;
  if (e->type == IL_GGUF_F32) {
    memcpy(out, p, 4);
  } else if (e->type == IL_GGUF_F64) {
    double d;
    memcpy(&d, p, 8);
    *out = (float)d;
  } else {
    return il__wrong_type(g, e, "f32 or f64");
  }
  return IL_OK;
}

il_status il_gguf_get_bool(const il_gguf *g, const char *key, bool *out) {
  const il__kv *e = NULL;
  IL_TRY(il__get(g, key, &e));
  if (e->type != IL_GGUF_BOOL) return il__wrong_type(g, e, "bool");
  *out = g->base[e->val_pos] != 0;
  return IL_OK;
}

il_status il_gguf_get_str(const il_gguf *g, const char *key, il_gguf_str *out) {
  const il__kv *e = NULL;
  IL_TRY(il__get(g, key, &e));
  if (e->type != IL_GGUF_STRING) return il__wrong_type(g, e, "string");
  out->len = il__rd64(g->base + e->val_pos);
  out->ptr = (const char *)g->base + e->val_pos + 8;
  return IL_OK;
}

il_status il_gguf_get_arr(const il_gguf *g, const char *key, il_gguf_type *elem_type, uint64_t *n,
                          const void **data) {
  const il__kv *e = NULL;
  IL_TRY(il__get(g, key, &e));
  if (e->type != IL_GGUF_ARRAY) return il__wrong_type(g, e, "array");
  if (elem_type) *elem_type = (il_gguf_type)e->elem_type;
  if (n) *n = e->n;
  if (data) {
    bool fixed = e->elem_type != IL_GGUF_STRING && e->elem_type != IL_GGUF_ARRAY;
    *data = fixed ? g->base + e->val_pos + 12 : NULL;
  }
  return IL_OK;
}

il_status il_gguf_arr_str(const il_gguf *g, const char *key, uint64_t i, il_gguf_str *out) {
  const il__kv *e = NULL;
  IL_TRY(il__get(g, key, &e));
  if (e->type != IL_GGUF_ARRAY || e->elem_type != IL_GGUF_STRING) return il__wrong_type(g, e, "array of string");
  if (i >= e->n)
    return il_error(IL_ERR_RANGE, "%s: key '%s': index %" PRIu64 " is out of range (%" PRIu64 " strings)", g->name,
                    e->key, i, e->n);
  uint64_t p = e->str_pos[i];
  out->len = il__rd64(g->base + p);
  out->ptr = (const char *)g->base + p + 8;
  return IL_OK;
}

int64_t il_gguf_tensor_count(const il_gguf *g) { return (int64_t)g->n_tensors; }

const il_gguf_tensor *il_gguf_tensor_at(const il_gguf *g, int64_t i) {
  return i >= 0 && (uint64_t)i < g->n_tensors ? &g->tensors[i].t : NULL;
}

const il_gguf_tensor *il_gguf_find_tensor(const il_gguf *g, const char *name) {
  if (!name) return NULL;
  int64_t i = il__hfind(g, true, name, strlen(name));
  return i >= 0 ? &g->tensors[i].t : NULL;
}

/* ---- shared with the writer ---- */

il_status il__gguf_check_value(uint32_t type, const void *value, size_t size, const char *field,
                               uint64_t *end) {
  static const uint8_t empty[1];
  il_gguf view = {.base = size ? value : empty, .size = size, .name = "gguf writer value"};
  *end = 0;
  return il__parse_value(&view, end, type, 1, field, NULL);
}
