/* tests/test_gguf: GGUF reader validation, typed getters, writer, byte-identical round trips.
 *
 * Files are built byte by byte with a small builder so every malformed case states exactly
 * which field is wrong; each case asserts the status and a substring of the detail (offset and
 * field). Truncation at every prefix, a random byte-mutation loop and injected allocation
 * failures must give errors, never crashes (this test also runs under ASan/UBSan). The
 * llama.cpp-written fixtures (stories260K-f32.gguf, the vocabulary files) are read, checked
 * against known facts and rewritten byte for byte when ../shared/fixtures is present.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "harness.h"
#include "memory/mem.h"

/* ---- byte builder ---- */

typedef struct {
  uint8_t *p;
  size_t n, cap;
} buf;

static void b_put(buf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(buf *b, const char *s) {
  b_u64(b, strlen(s));
  b_put(b, s, strlen(s));
}
static void b_header(buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
  b_put(b, "GGUF", 4);
  b_u32(b, version);
  b_u64(b, nt);
  b_u64(b, nkv);
}
static void b_kv_u32(buf *b, const char *k, uint32_t v) {
  b_str(b, k);
  b_u32(b, IL_GGUF_U32);
  b_u32(b, v);
}
static void b_kv_str(buf *b, const char *k, const char *v) {
  b_str(b, k);
  b_u32(b, IL_GGUF_STRING);
  b_str(b, v);
}
static void b_tinfo(buf *b, const char *name, uint32_t nd, const int64_t *ne, uint32_t type, uint64_t off) {
  b_str(b, name);
  b_u32(b, nd);
  for (uint32_t d = 0; d < nd; d++) b_u64(b, (uint64_t)ne[d]);
  b_u32(b, type);
  b_u64(b, off);
}
static void b_pad(buf *b, size_t a) {
  while (b->n % a) b_u8(b, 0);
}
static void b_fill(buf *b, size_t n, uint8_t start) {
  for (size_t i = 0; i < n; i++) b_u8(b, (uint8_t)(start + i * 7));
}

/* Opens an image that must fail with `want` and a detail containing `sub`. The image is copied
 * into an exactly sized heap block so ASan sees any read past its end. */
static void expect_err_at(int line, const buf *b, il_status want, const char *sub) {
  uint8_t *img = malloc(b->n ? b->n : 1);
  memcpy(img, b->p, b->n);
  il_gguf *g = (il_gguf *)1;
  il_status st = il_gguf_open_memory(img, b->n, "bad.gguf", &g);
  const char *d = il_error_detail();
  if (st == want && strstr(d, sub) && g == NULL) {
    il_test_passed++;
  } else {
    il_test_failed++;
    fprintf(stderr, "test_gguf.c:%d: FAILED: want %s containing \"%s\", got %s: \"%s\"\n", line,
            il_status_name(want), sub, il_status_name(st), d);
  }
  if (st == IL_OK) il_gguf_close(g);
  free(img);
}
#define EXPECT_ERR(b, want, sub) expect_err_at(__LINE__, (b), (want), (sub))

static void expect_ok_at(int line, const buf *b) {
  il_gguf *g = NULL;
  il_status st = il_gguf_open_memory(b->p, b->n, "ok.gguf", &g);
  if (st == IL_OK) il_test_passed++;
  else {
    il_test_failed++;
    fprintf(stderr, "test_gguf.c:%d: FAILED: expected OK, got %s: %s\n", line, il_status_name(st), il_error_detail());
  }
  il_gguf_close(g);
}
#define EXPECT_OK(b) expect_ok_at(__LINE__, (b))

static void check_detail_at(int line, il_status st, il_status want, const char *sub) {
  if (st == want && strstr(il_error_detail(), sub)) il_test_passed++;
  else {
    il_test_failed++;
    fprintf(stderr, "test_gguf.c:%d: FAILED: want %s containing \"%s\", got %s: \"%s\"\n", line,
            il_status_name(want), sub, il_status_name(st), il_error_detail());
  }
}
#define CHECK_DETAIL(expr, want, sub) check_detail_at(__LINE__, (expr), (want), (sub))

/* ---- a canonical file with every value type and several tensor types ---- */

static const int64_t ne_f32[2] = {8, 3};  /* 96 bytes */
static const int64_t ne_f16[1] = {10};    /* 20 bytes */
static const int64_t ne_q8[2] = {64, 2};  /* 4 blocks x 34 = 136 bytes */
static const int64_t ne_q4[1] = {32};     /* 18 bytes */
static const int64_t ne_last[1] = {8};    /* 32 bytes, so the file ends aligned */

/* Builds it by hand in the layout llama.cpp writes; `align` is general.alignment (written as a
 * key unless 32). */
static void build_all(buf *b, uint32_t align) {
  uint32_t nkv = 17 + (align != 32);
  b_header(b, 3, 5, nkv);
  if (align != 32) b_kv_u32(b, "general.alignment", align);
  b_kv_str(b, "general.architecture", "llama");
  b_str(b, "t.u8"), b_u32(b, IL_GGUF_U8), b_u8(b, 200);
  b_str(b, "t.i8"), b_u32(b, IL_GGUF_I8), b_u8(b, (uint8_t)-100);
  b_str(b, "t.u16"), b_u32(b, IL_GGUF_U16), b_u8(b, 0x34), b_u8(b, 0x12);
  b_str(b, "t.i16"), b_u32(b, IL_GGUF_I16), b_u8(b, 0x00), b_u8(b, 0x80); /* -32768 */
  b_kv_u32(b, "t.u32", 4000000000u);
  b_str(b, "t.i32"), b_u32(b, IL_GGUF_I32), b_u32(b, (uint32_t)-7);
  float f = 1.5f;
  b_str(b, "t.f32"), b_u32(b, IL_GGUF_F32), b_put(b, &f, 4);
  b_str(b, "t.bool"), b_u32(b, IL_GGUF_BOOL), b_u8(b, 1);
  b_kv_str(b, "t.str", "héllo\n");
  b_str(b, "t.u64"), b_u32(b, IL_GGUF_U64), b_u64(b, 1ull << 40);
  b_str(b, "t.i64"), b_u32(b, IL_GGUF_I64), b_u64(b, (uint64_t)-5);
  double d = -2.25;
  b_str(b, "t.f64"), b_u32(b, IL_GGUF_F64), b_put(b, &d, 8);
  /* array of i32 */
  b_str(b, "t.arr_i32"), b_u32(b, IL_GGUF_ARRAY), b_u32(b, IL_GGUF_I32), b_u64(b, 3);
  b_u32(b, 1), b_u32(b, (uint32_t)-2), b_u32(b, 3);
  /* array of strings, one with an embedded NUL and one empty */
  b_str(b, "t.arr_str"), b_u32(b, IL_GGUF_ARRAY), b_u32(b, IL_GGUF_STRING), b_u64(b, 3);
  b_str(b, "a"), b_u64(b, 3), b_put(b, "x\0y", 3), b_str(b, "");
  /* nested: array of 2 arrays of u16 (lengths 2 and 0) */
  b_str(b, "t.nested"), b_u32(b, IL_GGUF_ARRAY), b_u32(b, IL_GGUF_ARRAY), b_u64(b, 2);
  b_u32(b, IL_GGUF_U16), b_u64(b, 2), b_u8(b, 1), b_u8(b, 0), b_u8(b, 2), b_u8(b, 0);
  b_u32(b, IL_GGUF_U16), b_u64(b, 0);
  /* empty array of f64 */
  b_str(b, "t.empty"), b_u32(b, IL_GGUF_ARRAY), b_u32(b, IL_GGUF_F64), b_u64(b, 0);
  uint64_t off = 0;
  const uint64_t sizes[5] = {96, 20, 136, 18, 32};
  b_tinfo(b, "w.f32", 2, ne_f32, IL_DTYPE_F32, off), off = (off + sizes[0] + align - 1) / align * align;
  b_tinfo(b, "w.f16", 1, ne_f16, IL_DTYPE_F16, off), off = (off + sizes[1] + align - 1) / align * align;
  b_tinfo(b, "w.q8_0", 2, ne_q8, IL_DTYPE_Q8_0, off), off = (off + sizes[2] + align - 1) / align * align;
  b_tinfo(b, "w.q4_0", 1, ne_q4, IL_DTYPE_Q4_0, off), off = (off + sizes[3] + align - 1) / align * align;
  b_tinfo(b, "w.last", 1, ne_last, IL_DTYPE_F32, off);
  b_pad(b, align);
  for (int i = 0; i < 5; i++) {
    b_fill(b, sizes[i], (uint8_t)(i * 40 + 1));
    b_pad(b, align);
  }
}

static void test_read_all_types(void) {
  buf b = {0};
  build_all(&b, 32);
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open_memory(b.p, b.n, "all.gguf", &g));
  if (!g) return;
  IL_CHECK_INT(il_gguf_version(g), 3);
  IL_CHECK_INT(il_gguf_alignment(g), 32);
  IL_CHECK_INT(il_gguf_kv_count(g), 17);
  IL_CHECK_INT(il_gguf_tensor_count(g), 5);
  IL_CHECK_STR(il_gguf_key(g, 1), "t.u8");
  IL_CHECK_INT(il_gguf_kv_type(g, 1), IL_GGUF_U8);
  IL_CHECK_INT(il_gguf_find_key(g, "t.nested"), 15);
  IL_CHECK_INT(il_gguf_find_key(g, "t.nope"), -1);
  IL_CHECK(il_gguf_key(g, 17) == NULL);

  uint32_t u32 = 0;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  float f = 0;
  bool bo = false;
  il_gguf_str s;
  IL_CHECK_OK(il_gguf_get_u32(g, "t.u8", &u32));
  IL_CHECK_INT(u32, 200);
  IL_CHECK_OK(il_gguf_get_i64(g, "t.i8", &i64));
  IL_CHECK_INT(i64, -100);
  IL_CHECK_OK(il_gguf_get_u32(g, "t.u16", &u32));
  IL_CHECK_INT(u32, 0x1234);
  IL_CHECK_OK(il_gguf_get_i64(g, "t.i16", &i64));
  IL_CHECK_INT(i64, -32768);
  IL_CHECK_OK(il_gguf_get_u32(g, "t.u32", &u32));
  IL_CHECK_INT(u32, 4000000000u);
  IL_CHECK_OK(il_gguf_get_i64(g, "t.i32", &i64));
  IL_CHECK_INT(i64, -7);
  IL_CHECK_OK(il_gguf_get_f32(g, "t.f32", &f));
  IL_CHECK_NEAR(f, 1.5, 0);
  IL_CHECK_OK(il_gguf_get_bool(g, "t.bool", &bo));
  IL_CHECK(bo);
  IL_CHECK_OK(il_gguf_get_str(g, "t.str", &s));
  IL_CHECK_INT(s.len, 7);
  IL_CHECK(s.len == 7 && memcmp(s.ptr, "héllo\n", 7) == 0);
  IL_CHECK_OK(il_gguf_get_u64(g, "t.u64", &u64));
  IL_CHECK_INT(u64, 1ull << 40);
  IL_CHECK_OK(il_gguf_get_i64(g, "t.i64", &i64));
  IL_CHECK_INT(i64, -5);
  IL_CHECK_OK(il_gguf_get_f32(g, "t.f64", &f));
  IL_CHECK_NEAR(f, -2.25, 0);

  il_gguf_type et;
  uint64_t n;
  const void *data;
  IL_CHECK_OK(il_gguf_get_arr(g, "t.arr_i32", &et, &n, &data));
  IL_CHECK_INT(et, IL_GGUF_I32);
  IL_CHECK_INT(n, 3);
  if (data) {
    int32_t v[3];
    memcpy(v, data, sizeof v);
    IL_CHECK_INT(v[1], -2);
  }
  IL_CHECK_OK(il_gguf_get_arr(g, "t.arr_str", &et, &n, &data));
  IL_CHECK_INT(et, IL_GGUF_STRING);
  IL_CHECK_INT(n, 3);
  IL_CHECK(data == NULL);
  IL_CHECK_OK(il_gguf_arr_str(g, "t.arr_str", 1, &s));
  IL_CHECK(s.len == 3 && memcmp(s.ptr, "x\0y", 3) == 0);
  IL_CHECK_OK(il_gguf_arr_str(g, "t.arr_str", 2, &s));
  IL_CHECK_INT(s.len, 0);
  IL_CHECK_OK(il_gguf_get_arr(g, "t.nested", &et, &n, &data));
  IL_CHECK_INT(et, IL_GGUF_ARRAY);
  IL_CHECK_INT(n, 2);
  IL_CHECK(data == NULL);
  IL_CHECK_OK(il_gguf_get_arr(g, "t.empty", &et, &n, &data));
  IL_CHECK_INT(n, 0);

  /* getter errors: wrong type names the key, the expected and the found type */
  CHECK_DETAIL(il_gguf_get_u32(g, "t.str", &u32), IL_ERR_FORMAT, "key 't.str': expected an integer (u32), found string");
  CHECK_DETAIL(il_gguf_get_str(g, "t.u32", &s), IL_ERR_FORMAT, "key 't.u32': expected string, found u32");
  CHECK_DETAIL(il_gguf_get_f32(g, "t.arr_str", &f), IL_ERR_FORMAT, "key 't.arr_str': expected f32 or f64, found array of string");
  CHECK_DETAIL(il_gguf_get_bool(g, "t.u8", &bo), IL_ERR_FORMAT, "key 't.u8': expected bool, found u8");
  CHECK_DETAIL(il_gguf_get_arr(g, "t.i64", &et, &n, &data), IL_ERR_FORMAT, "key 't.i64': expected array, found i64");
  CHECK_DETAIL(il_gguf_arr_str(g, "t.arr_i32", 0, &s), IL_ERR_FORMAT, "key 't.arr_i32': expected array of string, found array of i32");
  CHECK_DETAIL(il_gguf_get_u32(g, "t.f32", &u32), IL_ERR_FORMAT, "found f32");
  CHECK_DETAIL(il_gguf_get_u32(g, "missing.key", &u32), IL_ERR_NOT_FOUND, "all.gguf: key 'missing.key' not found");
  CHECK_DETAIL(il_gguf_get_u32(g, "t.i32", &u32), IL_ERR_RANGE, "key 't.i32': value -7 does not fit u32");
  CHECK_DETAIL(il_gguf_get_u32(g, "t.u64", &u32), IL_ERR_RANGE, "value 1099511627776 does not fit u32");
  CHECK_DETAIL(il_gguf_get_u64(g, "t.i64", &u64), IL_ERR_RANGE, "value -5 does not fit u64");
  CHECK_DETAIL(il_gguf_arr_str(g, "t.arr_str", 3, &s), IL_ERR_RANGE, "index 3 is out of range (3 strings)");

  /* tensors */
  const il_gguf_tensor *t = il_gguf_find_tensor(g, "w.q8_0");
  IL_CHECK(t != NULL);
  if (t) {
    IL_CHECK_INT(t->type, IL_DTYPE_Q8_0);
    IL_CHECK_INT(t->n_dims, 2);
    IL_CHECK_INT(t->ne[0], 64);
    IL_CHECK_INT(t->ne[1], 2);
    IL_CHECK_INT(t->ne[2], 1);
    IL_CHECK_INT(t->nbytes, 136);
    IL_CHECK_INT(t->offset, 128);
    IL_CHECK(t->data == b.p + il_gguf_data_offset(g) + 128);
    IL_CHECK_INT(((const uint8_t *)t->data)[0], 81);
  }
  IL_CHECK(il_gguf_find_tensor(g, "w.none") == NULL);
  IL_CHECK_STR(il_gguf_tensor_at(g, 4)->name, "w.last");
  IL_CHECK(il_gguf_tensor_at(g, 5) == NULL);
  IL_CHECK_INT(il_gguf_data_offset(g) % 32, 0);
  IL_CHECK_INT(il_gguf_data_offset(g) + 352, b.n);
  il_gguf_close(g);

  /* version 2 has the same layout */
  b.p[4] = 2;
  EXPECT_OK(&b);
  free(b.p);
}

/* Reads `img`, copies every kv and tensor into a writer with the same alignment and writes it
 * to `path`. */
static il_status rewrite(const il_gguf *g, const char *path) {
  il_gguf_writer *w = NULL;
  IL_TRY(il_gguf_writer_new(&w));
  il_status st = il_gguf_writer_set_alignment(w, il_gguf_alignment(g));
  for (int64_t i = 0; st == IL_OK && i < il_gguf_kv_count(g); i++) st = il_gguf_writer_copy_kv(w, g, i);
  for (int64_t i = 0; st == IL_OK && i < il_gguf_tensor_count(g); i++) {
    const il_gguf_tensor *t = il_gguf_tensor_at(g, i);
    st = il_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
  }
  if (st == IL_OK) st = il_gguf_writer_write(w, path);
  il_gguf_writer_free(w);
  return st;
}

/* Byte-identical check of path against (ref, n); prints the first difference. */
static void check_same_bytes(const char *what, const char *path, const uint8_t *ref, size_t n) {
  size_t m = 0;
  uint8_t *got = (uint8_t *)il_test_read_file(path, &m);
  size_t i = 0;
  while (got && i < n && i < m && got[i] == ref[i]) i++;
  if (got && m == n && i == n) il_test_passed++;
  else {
    il_test_failed++;
    fprintf(stderr, "FAILED: %s: rewrite differs: %zu vs %zu bytes, first difference at offset %zu\n", what, m, n, i);
  }
  free(got);
}

static void test_roundtrip_handmade(const char *dir) {
  char path[512];
  uint32_t aligns[2] = {32, 64};
  for (int k = 0; k < 2; k++) {
    buf b = {0};
    build_all(&b, aligns[k]);
    il_gguf *g = NULL;
    IL_CHECK_OK(il_gguf_open_memory(b.p, b.n, "all.gguf", &g));
    if (g) {
      IL_CHECK_INT(il_gguf_alignment(g), aligns[k]);
      snprintf(path, sizeof path, "%s/rt%d.gguf", dir, k);
      IL_CHECK_OK(rewrite(g, path));
      check_same_bytes("hand-made file", path, b.p, b.n);
      il_gguf_close(g);
      /* and through il_gguf_open (mmap) */
      IL_CHECK_OK(il_gguf_open(path, &g));
      if (g) IL_CHECK_INT(il_gguf_tensor_count(g), 5);
      il_gguf_close(g);
    }
    free(b.p);
  }
}

static void test_writer(const char *dir) {
  char path[512], p2[512];
  snprintf(path, sizeof path, "%s/w.gguf", dir);
  snprintf(p2, sizeof p2, "%s/w2.gguf", dir);
  il_gguf_writer *w = NULL;
  IL_CHECK_OK(il_gguf_writer_new(&w));
  if (!w) return;
  float f32data[4 * 3];
  for (int i = 0; i < 12; i++) f32data[i] = (float)i * 0.5f;
  uint16_t bf[64];
  for (int i = 0; i < 64; i++) bf[i] = il_f32_to_bf16((float)i);
  uint8_t q4_1[2 * 20];
  for (int i = 0; i < 40; i++) q4_1[i] = (uint8_t)i;
  const char *toks[3] = {"<unk>", "\xe2\x96\x81the", "a\0b"};
  const uint64_t lens[3] = {5, 6, 3};
  const int32_t ids[4] = {1, 2, -3, 4};
  uint8_t nested[12 + 12 + 2 + 12 + 8 + 1]; /* array of arrays: [i8 x2], [string x1 "x"] */
  {
    uint8_t *p = nested;
    uint32_t t = IL_GGUF_I8, t2 = IL_GGUF_STRING;
    uint64_t n2 = 2, n1 = 1;
    memcpy(p, &(uint32_t){IL_GGUF_ARRAY}, 4), memcpy(p + 4, &n2, 8), p += 12;
    memcpy(p, &t, 4), memcpy(p + 4, &n2, 8), p[12] = 1, p[13] = 0xff, p += 14;
    memcpy(p, &t2, 4), memcpy(p + 4, &n1, 8), p += 12;
    memcpy(p, &n1, 8), p[8] = 'x';
  }
  double f64 = 3.25;
  IL_CHECK_OK(il_gguf_writer_set_str(w, "general.architecture", "llama"));
  IL_CHECK_OK(il_gguf_writer_set_u32(w, "a.u32", 7));
  IL_CHECK_OK(il_gguf_writer_set_i32(w, "a.i32", -7));
  IL_CHECK_OK(il_gguf_writer_set_u64(w, "a.u64", 1ull << 50));
  IL_CHECK_OK(il_gguf_writer_set_f32(w, "a.f32", 0.25f));
  IL_CHECK_OK(il_gguf_writer_set_bool(w, "a.bool", true));
  IL_CHECK_OK(il_gguf_writer_set_raw(w, "a.f64", IL_GGUF_F64, &f64, 8));
  IL_CHECK_OK(il_gguf_writer_set_arr(w, "a.ids", IL_GGUF_I32, ids, 4));
  IL_CHECK_OK(il_gguf_writer_set_arr_str(w, "a.toks", toks, lens, 3));
  IL_CHECK_OK(il_gguf_writer_set_raw(w, "a.nested", IL_GGUF_ARRAY, nested, sizeof nested));
  /* invalid additions */
  CHECK_DETAIL(il_gguf_writer_set_u32(w, "a.u32", 8), IL_ERR_INVALID_ARG, "duplicate key 'a.u32'");
  CHECK_DETAIL(il_gguf_writer_set_u32(w, "", 8), IL_ERR_INVALID_ARG, "empty key");
  CHECK_DETAIL(il_gguf_writer_set_arr(w, "a.bad", IL_GGUF_STRING, ids, 1), IL_ERR_INVALID_ARG, "not a fixed-size type");
  CHECK_DETAIL(il_gguf_writer_set_raw(w, "a.short", IL_GGUF_ARRAY, nested, sizeof nested - 1), IL_ERR_INVALID_ARG,
               "key 'a.short': string length 1 exceeds the 0 remaining bytes");
  CHECK_DETAIL(il_gguf_writer_set_raw(w, "a.long", IL_GGUF_U32, &f64, 8), IL_ERR_INVALID_ARG, "u32 value is 4 bytes, 8 given");
  int64_t ne2[2] = {4, 3}, ne1[1] = {64}, neq[2] = {32, 2};
  IL_CHECK_OK(il_gguf_writer_add_tensor(w, "t.f32", IL_DTYPE_F32, 2, ne2, f32data, sizeof f32data));
  IL_CHECK_OK(il_gguf_writer_add_tensor(w, "t.bf16", IL_DTYPE_BF16, 1, ne1, bf, sizeof bf));
  IL_CHECK_OK(il_gguf_writer_add_tensor(w, "t.q4_1", IL_DTYPE_Q4_1, 2, neq, q4_1, sizeof q4_1));
  CHECK_DETAIL(il_gguf_writer_add_tensor(w, "t.f32", IL_DTYPE_F32, 2, ne2, f32data, sizeof f32data),
               IL_ERR_INVALID_ARG, "duplicate tensor name 't.f32'");
  CHECK_DETAIL(il_gguf_writer_add_tensor(w, "t.x", IL_DTYPE_F32, 2, ne2, f32data, 4), IL_ERR_INVALID_ARG,
               "nbytes 4 but f32 shape implies 48");
  CHECK_DETAIL(il_gguf_writer_add_tensor(w, "t.y", IL_DTYPE_Q8_0, 1, ne2, f32data, 34), IL_ERR_INVALID_ARG,
               "ne[0] = 4 is not a multiple of the q8_0 block size 32");
  CHECK_DETAIL(il_gguf_writer_add_tensor(w, "t.z", IL_DTYPE_F32, 5, ne2, f32data, 4), IL_ERR_INVALID_ARG,
               "n_dims 5 is outside 1..4");
  CHECK_DETAIL(il_gguf_writer_add_tensor(w, "a.name.that.is.much.longer.than.sixty.three.bytes.which.llama.cpp.rejects",
                                         IL_DTYPE_F32, 2, ne2, f32data, sizeof f32data),
               IL_ERR_INVALID_ARG, "the limit is 63");
  CHECK_DETAIL(il_gguf_writer_set_alignment(w, 24), IL_ERR_INVALID_ARG, "24 is not a nonzero power of two");
  IL_CHECK_OK(il_gguf_writer_write(w, path));
  IL_CHECK(access(path, R_OK) == 0);
  char tmp[640];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  IL_CHECK(access(tmp, F_OK) != 0);

  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(path, &g));
  if (g) {
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    bool bo;
    il_gguf_str s;
    IL_CHECK_INT(il_gguf_kv_count(g), 10);
    IL_CHECK_OK(il_gguf_get_u32(g, "a.u32", &u32));
    IL_CHECK_INT(u32, 7);
    IL_CHECK_OK(il_gguf_get_i64(g, "a.i32", &i64));
    IL_CHECK_INT(i64, -7);
    IL_CHECK_OK(il_gguf_get_u64(g, "a.u64", &u64));
    IL_CHECK_INT(u64, 1ull << 50);
    IL_CHECK_OK(il_gguf_get_f32(g, "a.f32", &f));
    IL_CHECK_NEAR(f, 0.25, 0);
    IL_CHECK_OK(il_gguf_get_f32(g, "a.f64", &f));
    IL_CHECK_NEAR(f, 3.25, 0);
    IL_CHECK_OK(il_gguf_get_bool(g, "a.bool", &bo));
    IL_CHECK(bo);
    IL_CHECK_OK(il_gguf_arr_str(g, "a.toks", 1, &s));
    IL_CHECK(s.len == 6 && memcmp(s.ptr, "\xe2\x96\x81the", 6) == 0);
    IL_CHECK_OK(il_gguf_arr_str(g, "a.toks", 2, &s));
    IL_CHECK(s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    const void *raw;
    size_t rawn;
    il_gguf_kv_raw(g, il_gguf_find_key(g, "a.nested"), &raw, &rawn);
    IL_CHECK(rawn == sizeof nested && memcmp(raw, nested, rawn) == 0);
    const il_gguf_tensor *t = il_gguf_find_tensor(g, "t.bf16");
    IL_CHECK(t && t->type == IL_DTYPE_BF16 && t->nbytes == sizeof bf && memcmp(t->data, bf, sizeof bf) == 0);
    t = il_gguf_find_tensor(g, "t.f32");
    IL_CHECK(t && t->ne[0] == 4 && t->ne[1] == 3 && memcmp(t->data, f32data, sizeof f32data) == 0);
    t = il_gguf_find_tensor(g, "t.q4_1");
    IL_CHECK(t && t->offset == 192 && memcmp(t->data, q4_1, sizeof q4_1) == 0);
    IL_CHECK_INT(il_gguf_file_size(g) % 32, 0);
    /* rewrite of a writer-made file is byte-identical */
    IL_CHECK_OK(rewrite(g, p2));
    size_t n = 0;
    uint8_t *orig = (uint8_t *)il_test_read_file(path, &n);
    check_same_bytes("writer-made file", p2, orig, n);
    free(orig);
    il_gguf_close(g);
  }

  /* output failures (core/outfile): missing directory, and a directory at the path (refused
   * before anything is created) */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/no/such/dir/x.gguf", dir);
  CHECK_DETAIL(il_gguf_writer_write(w, bad), IL_ERR_OUTPUT, "no/such/dir: No such file or directory");
  snprintf(bad, sizeof bad, "%s/isdir.gguf", dir);
  mkdir(bad, 0700);
  CHECK_DETAIL(il_gguf_writer_write(w, bad), IL_ERR_OUTPUT, "isdir.gguf: is a directory");
  snprintf(tmp, sizeof tmp, "%s.tmp", bad);
  IL_CHECK(access(tmp, F_OK) != 0);
  rmdir(bad);
  il_gguf_writer_free(w);
}

/* ---- malformed files ---- */

static void test_malformed(void) {
  buf b = {0};
  const int64_t ne8[1] = {8};

  b_header(&b, 3, 0, 0);
  b.p[3] = 'X';
  EXPECT_ERR(&b, IL_ERR_FORMAT, "bad.gguf: offset 0: magic: expected \"GGUF\"");
  b.n = 0;
  b_header(&b, 4, 0, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 4: version: unknown version 4");
  b.n = 0;
  b_header(&b, 1, 0, 0);
  EXPECT_ERR(&b, IL_ERR_UNSUPPORTED, "offset 4: version: GGUF v1");
  b.n = 0;
  b_header(&b, 0x03000000u, 0, 0);
  EXPECT_ERR(&b, IL_ERR_UNSUPPORTED, "big-endian");
  b.n = 0;
  b_header(&b, 3, 1ull << 60, 0);
  b_fill(&b, 1000, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 8: n_tensors: 1152921504606846976 tensor infos cannot fit in 1000 remaining bytes");
  b.n = 0;
  b_header(&b, 3, 0, 1ull << 60);
  b_fill(&b, 1000, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 16: n_kv: 1152921504606846976 key/value pairs cannot fit in 1000 remaining bytes");
  b.n = 0;
  b_header(&b, 3, 0, 72); /* 72 x 14 > 1000 */
  b_fill(&b, 1000, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "n_kv: 72 key/value pairs cannot fit");

  /* huge key length, empty key, control byte in key */
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_u64(&b, 1ull << 62);
  b_fill(&b, 20, 'a');
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 24: kv[0] key: length 4611686018427387904 exceeds the 20 remaining bytes");
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_kv_u32(&b, "", 1);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 24: kv[0] key: empty name");
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_kv_u32(&b, "a\nb", 1);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 33: kv[0] key: control byte 0x0a");

  /* huge string value length */
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.s"), b_u32(&b, IL_GGUF_STRING), b_u64(&b, 1ull << 62), b_fill(&b, 5, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 39: key 'k.s': string length 4611686018427387904 exceeds the 5 remaining bytes");
  /* unknown value type, unknown array element type */
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.t"), b_u32(&b, 13), b_u32(&b, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 35: key 'k.t': unknown value type 13");
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.a"), b_u32(&b, IL_GGUF_ARRAY), b_u32(&b, 99), b_u64(&b, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "key 'k.a': unknown array element type 99");
  /* huge array lengths: fixed size, string, nested */
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.a"), b_u32(&b, IL_GGUF_ARRAY), b_u32(&b, IL_GGUF_U32), b_u64(&b, 1ull << 60), b_fill(&b, 64, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 43: key 'k.a': array of 1152921504606846976 u32 elements cannot fit in 64 remaining bytes");
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.a"), b_u32(&b, IL_GGUF_ARRAY), b_u32(&b, IL_GGUF_STRING), b_u64(&b, 9), b_fill(&b, 64, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "array of 9 string elements cannot fit in 64 remaining bytes");
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.a"), b_u32(&b, IL_GGUF_ARRAY), b_u32(&b, IL_GGUF_U64), b_u64(&b, 3), b_u64(&b, 1), b_u64(&b, 2);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "array of 3 u64 elements cannot fit in 16 remaining bytes");
  /* nesting: 8 levels is fine, 9 is too deep */
  for (int levels = 8; levels <= 9; levels++) {
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_str(&b, "k.n"), b_u32(&b, IL_GGUF_ARRAY);
    for (int l = 1; l < levels; l++) b_u32(&b, IL_GGUF_ARRAY), b_u64(&b, 1);
    b_u32(&b, IL_GGUF_U8), b_u64(&b, 1), b_u8(&b, 5);
    if (levels == 8) EXPECT_OK(&b);
    else EXPECT_ERR(&b, IL_ERR_FORMAT, "key 'k.n': arrays nested more than 8 levels deep");
  }
  /* a very deep nesting claim does not recurse without bound */
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "k.n"), b_u32(&b, IL_GGUF_ARRAY);
  for (int l = 1; l < 5000; l++) b_u32(&b, IL_GGUF_ARRAY), b_u64(&b, 1);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "nested more than 8 levels");

  /* duplicate key */
  b.n = 0;
  b_header(&b, 3, 0, 3);
  b_kv_u32(&b, "k.a", 1), b_kv_u32(&b, "k.b", 1), b_kv_str(&b, "k.a", "x");
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 62: key 'k.a': duplicate key (first defined at offset 24)");

  /* alignment: 0, 3, wrong type; 16 accepted */
  uint32_t bad_al[2] = {0, 3};
  for (int k = 0; k < 2; k++) {
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", bad_al[k]);
    char sub[96];
    snprintf(sub, sizeof sub, "offset 53: key 'general.alignment': %u is not a nonzero power of two", bad_al[k]);
    EXPECT_ERR(&b, IL_ERR_FORMAT, sub);
  }
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_str(&b, "general.alignment"), b_u32(&b, IL_GGUF_U64), b_u64(&b, 32);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "key 'general.alignment': type is u64, expected u32");

  /* tensor infos: a helper layout with one tensor, header + tensor info at offset 24 */
#define ONE_TENSOR(name, nd, ne, type, off, datalen)                                              \
  do {                                                                                            \
    b.n = 0;                                                                                      \
    b_header(&b, 3, 1, 0);                                                                        \
    b_tinfo(&b, name, nd, ne, type, off);                                                         \
    b_pad(&b, 32);                                                                                \
    b_fill(&b, datalen, 1);                                                                       \
  } while (0)
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, 0, 32);
  EXPECT_OK(&b);
  ONE_TENSOR("w", 0, ne8, IL_DTYPE_F32, 0, 32);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 33: tensor 'w': n_dims 0 is outside 1..4");
  {
    int64_t ne5[5] = {1, 1, 1, 1, 8};
    ONE_TENSOR("w", 5, ne5, IL_DTYPE_F32, 0, 32);
    EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': n_dims 5 is outside 1..4");
    int64_t neg[2] = {8, -5};
    ONE_TENSOR("w", 2, neg, IL_DTYPE_F32, 0, 32);
    EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 45: tensor 'w': ne[1] = -5 is negative");
    int64_t big[3] = {1ll << 32, 1ll << 20, 1ll << 12};
    ONE_TENSOR("w", 3, big, IL_DTYPE_F32, 0, 32);
    EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': element count overflows int64 at ne[2] = 4096");
    int64_t bytes_ovf[1] = {1ll << 62}; /* elements fit int64, f32 bytes do not fit 64 bits */
    ONE_TENSOR("w", 1, bytes_ovf, IL_DTYPE_F32, 0, 32);
    EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': data size overflows 64 bits");
    int64_t ne33[1] = {33};
    ONE_TENSOR("w", 1, ne33, IL_DTYPE_Q8_0, 0, 64);
    EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': ne[0] = 33 is not a multiple of the q8_0 block size 32");
  }
  ONE_TENSOR("blk.0.attn_q.weight", 1, ne8, 77, 0, 32);
  EXPECT_ERR(&b, IL_ERR_UNSUPPORTED, "offset 63: tensor 'blk.0.attn_q.weight': type 77 is not a known GGML type");
  ONE_TENSOR("blk.0.attn_q.weight", 1, ne8, 10, 0, 32);
  EXPECT_ERR(&b, IL_ERR_UNSUPPORTED, "tensor 'blk.0.attn_q.weight': type 10 (q2_K) is a GGML type inferlab does not support");
  ONE_TENSOR("w", 1, ne8, 11, 0, 32);
  EXPECT_ERR(&b, IL_ERR_UNSUPPORTED, "type 11 (q3_K)");
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, 1ull << 40, 32);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 49: tensor 'w': data [1099511627840, +32) at data offset 1099511627776 ends past end of file (96 bytes)");
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, UINT64_MAX - 31, 32);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "ends past end of file");
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, 4, 36);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': offset 4 is not a multiple of the alignment 32");
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, 0, 28); /* data overlaps the end by 4 bytes */
  EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'w': data [64, +32) at data offset 0 ends past end of file (92 bytes)");
  ONE_TENSOR("w", 1, ne8, IL_DTYPE_F32, 0, 0); /* no data section at all */
  b.n = 57;
  EXPECT_ERR(&b, IL_ERR_FORMAT, "data section starts at offset 64, past the end of the 57-byte file");
  ONE_TENSOR("w\x01", 1, ne8, IL_DTYPE_F32, 0, 32);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor[0] name: control byte 0x01");
#undef ONE_TENSOR

  /* duplicate tensor names; overlapping tensors */
  b.n = 0;
  b_header(&b, 3, 2, 0);
  b_tinfo(&b, "w", 1, ne8, IL_DTYPE_F32, 0);
  b_tinfo(&b, "w", 1, ne8, IL_DTYPE_F32, 32);
  b_pad(&b, 32), b_fill(&b, 64, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 57: tensor 'w': duplicate tensor name (first defined at offset 24)");
  b.n = 0;
  const int64_t ne16[1] = {16};
  b_header(&b, 3, 2, 0);
  b_tinfo(&b, "a", 1, ne16, IL_DTYPE_F32, 0);
  b_tinfo(&b, "b", 1, ne8, IL_DTYPE_F32, 32);
  b_pad(&b, 32), b_fill(&b, 64, 0);
  EXPECT_ERR(&b, IL_ERR_FORMAT, "tensor 'b': data [128, 160) overlaps tensor 'a' [96, 160)");

  /* zero-sized tensors and a file with no tensors and no padding are valid */
  b.n = 0;
  const int64_t ne0[2] = {0, 4};
  b_header(&b, 3, 1, 1);
  b_kv_str(&b, "general.name", "x");
  b_tinfo(&b, "empty", 2, ne0, IL_DTYPE_Q4_0, 0);
  b_pad(&b, 32);
  EXPECT_OK(&b);
  b.n = 0;
  b_header(&b, 3, 0, 1);
  b_kv_str(&b, "general.name", "x");
  EXPECT_OK(&b);

  /* empty image and NULL arguments */
  b.n = 0;
  EXPECT_ERR(&b, IL_ERR_FORMAT, "offset 0: magic: truncated: needs 4 bytes, 0 remain");
  il_gguf *g = NULL;
  CHECK_DETAIL(il_gguf_open("/nonexistent/model.gguf", &g), IL_ERR_NOT_FOUND, "/nonexistent/model.gguf: cannot open");
  free(b.p);
}

/* Every strict prefix of a valid file (whose last tensor ends on the file's last byte) is a
 * format error. */
static void test_truncation(void) {
  buf b = {0};
  build_all(&b, 32);
  int bad = 0;
  size_t first_bad = 0;
  for (size_t n = 0; n < b.n; n++) {
    uint8_t *img = malloc(n ? n : 1);
    memcpy(img, b.p, n);
    il_gguf *g = NULL;
    il_status st = il_gguf_open_memory(img, n, "cut.gguf", &g);
    if (st != IL_ERR_FORMAT || g != NULL || strncmp(il_error_detail(), "cut.gguf: offset ", 17) != 0) {
      if (!bad++) first_bad = n;
    }
    il_gguf_close(g);
    free(img);
  }
  if (bad) fprintf(stderr, "FAILED: %d prefixes not rejected, first at length %zu: %s\n", bad, first_bad, il_error_detail());
  IL_CHECK_INT(bad, 0);
  printf("truncation: all %zu prefixes rejected\n", b.n);
  free(b.p);
}

/* Random byte flips in the metadata part: any outcome but a crash is fine; OK results are
 * exercised through every accessor. */
static void test_mutation(void) {
  buf b = {0};
  build_all(&b, 32);
  uint64_t rng = 12345;
  int ok = 0, err = 0;
  const int iters = 4000;
  size_t meta = 0;
  {
    il_gguf *g = NULL;
    il_gguf_open_memory(b.p, b.n, "m", &g);
    meta = g ? (size_t)il_gguf_data_offset(g) : b.n;
    il_gguf_close(g);
  }
  for (int it = 0; it < iters; it++) {
    uint8_t *img = malloc(b.n);
    memcpy(img, b.p, b.n);
    int flips = 1 + (int)((il_test_randf(&rng) + 1.0f) * 2.0f);
    for (int k = 0; k < flips; k++) {
      size_t pos = (size_t)((il_test_randf(&rng) + 1.0f) * 0.5f * (float)meta) % meta;
      float r = il_test_randf(&rng);
      if (r < -0.5f) img[pos] ^= (uint8_t)(1u << ((unsigned)(pos + it) % 8));
      else if (r < 0.0f) img[pos] = 0xff;
      else if (r < 0.5f) img[pos] = 0;
      else img[pos] = (uint8_t)(img[pos] + 1);
    }
    il_gguf *g = NULL;
    il_status st = il_gguf_open_memory(img, b.n, "mut.gguf", &g);
    if (st == IL_OK) {
      ok++;
      volatile uint64_t sink = 0;
      for (int64_t i = 0; i < il_gguf_kv_count(g); i++) {
        const char *k = il_gguf_key(g, i);
        const void *raw;
        size_t rn;
        il_gguf_kv_raw(g, i, &raw, &rn);
        if (rn) sink += ((const uint8_t *)raw)[rn - 1];
        il_gguf_type et;
        uint64_t n;
        const void *data;
        uint32_t u;
        il_gguf_str s;
        il_gguf_get_u32(g, k, &u);
        if (il_gguf_get_str(g, k, &s) == IL_OK && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        if (il_gguf_get_arr(g, k, &et, &n, &data) == IL_OK && et == IL_GGUF_STRING) {
          for (uint64_t j = 0; j < n; j++) {
            if (il_gguf_arr_str(g, k, j, &s) == IL_OK && s.len) sink += (uint8_t)s.ptr[s.len - 1];
          }
        }
        IL_CHECK(il_gguf_find_key(g, k) == i);
      }
      for (int64_t i = 0; i < il_gguf_tensor_count(g); i++) {
        const il_gguf_tensor *t = il_gguf_tensor_at(g, i);
        if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        if (il_gguf_find_tensor(g, t->name) != t) IL_CHECK(0);
      }
      (void)sink;
      il_gguf_close(g);
    } else {
      err++;
      if (g != NULL) IL_CHECK(g == NULL);
    }
    free(img);
  }
  printf("mutation: %d iterations, %d opened, %d rejected\n", iters, ok, err);
  IL_CHECK(err > iters / 4);
  free(b.p);
}

/* Every allocation made while opening can fail; each failure is IL_ERR_OOM and leaks nothing. */
static void test_oom(void) {
  buf b = {0};
  build_all(&b, 32);
  il_mem_stats before, after;
  il_mem_stats_get(&before);
  int n_fail = 0;
  for (long k = 1; k < 100; k++) {
    il_mem_fail_after(k);
    il_gguf *g = NULL;
    il_status st = il_gguf_open_memory(b.p, b.n, "oom.gguf", &g);
    il_mem_fail_after(0);
    if (st == IL_OK) {
      il_gguf_close(g);
      break;
    }
    n_fail++;
    IL_CHECK_INT(st, IL_ERR_OOM);
  }
  IL_CHECK(n_fail >= 5);
  il_mem_stats_get(&after);
  IL_CHECK_INT(after.current[IL_MEM_MODEL] + after.current[IL_MEM_OTHER], before.current[IL_MEM_MODEL] + before.current[IL_MEM_OTHER]);
  printf("oom: %d allocation sites failed cleanly\n", n_fail);
  free(b.p);
}

/* ---- llama.cpp-written fixtures ---- */

static void test_fixture_model(const char *dir) {
  const char *fx = il_test_fixture("models/stories260K-f32.gguf");
  if (!fx) {
    printf("SKIP (part): models/stories260K-f32.gguf not found under $IL_FIXTURES\n");
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s", fx);
  il_mem_stats before, during, after;
  il_mem_stats_get(&before);
  il_gguf *g = NULL;
  IL_CHECK_OK(il_gguf_open(path, &g));
  if (!g) return;
  il_mem_stats_get(&during);
  IL_CHECK_INT(during.mapped[IL_MEM_WEIGHTS] - before.mapped[IL_MEM_WEIGHTS], 1185376);
  IL_CHECK_INT(il_gguf_version(g), 3);
  IL_CHECK_INT(il_gguf_kv_count(g), 19);
  IL_CHECK_INT(il_gguf_tensor_count(g), 48);
  IL_CHECK_INT(il_gguf_data_offset(g), 14176);
  il_gguf_str s = {0};
  IL_CHECK_OK(il_gguf_get_str(g, "general.architecture", &s));
  IL_CHECK(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
  uint32_t u = 0;
  IL_CHECK_OK(il_gguf_get_u32(g, "llama.embedding_length", &u));
  IL_CHECK_INT(u, 64);
  IL_CHECK_OK(il_gguf_get_u32(g, "llama.block_count", &u));
  IL_CHECK_INT(u, 5);
  IL_CHECK_OK(il_gguf_get_u32(g, "llama.feed_forward_length", &u));
  IL_CHECK_INT(u, 172);
  IL_CHECK_OK(il_gguf_get_u32(g, "llama.attention.head_count_kv", &u));
  IL_CHECK_INT(u, 4);
  float eps = 0;
  IL_CHECK_OK(il_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps));
  IL_CHECK_NEAR(eps, 1e-5, 1e-9);
  IL_CHECK_OK(il_gguf_arr_str(g, "tokenizer.ggml.tokens", 3, &s));
  IL_CHECK(s.len == 6 && memcmp(s.ptr, "<0x00>", 6) == 0);
  IL_CHECK_OK(il_gguf_arr_str(g, "tokenizer.ggml.tokens", 259, &s));
  IL_CHECK(s.len == 4 && memcmp(s.ptr, "\xe2\x96\x81t", 4) == 0);
  il_gguf_type et;
  uint64_t n;
  const void *data;
  IL_CHECK_OK(il_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data));
  IL_CHECK_INT(et, IL_GGUF_I32);
  IL_CHECK_INT(n, 512);
  const il_gguf_tensor *t = il_gguf_find_tensor(g, "token_embd.weight");
  IL_CHECK(t != NULL);
  if (t) {
    IL_CHECK_INT(t->type, IL_DTYPE_F32);
    IL_CHECK_INT(t->n_dims, 2);
    IL_CHECK_INT(t->ne[0], 64);
    IL_CHECK_INT(t->ne[1], 512);
    IL_CHECK_INT(t->nbytes, 64 * 512 * 4);
  }
  t = il_gguf_find_tensor(g, "blk.4.ffn_down.weight");
  IL_CHECK(t && t->ne[0] == 172 && t->ne[1] == 64 && t->offset == 1082880);
  snprintf(path, sizeof path, "%s/stories-rewrite.gguf", dir);
  IL_CHECK_OK(rewrite(g, path));
  check_same_bytes("stories260K-f32.gguf", path, (const uint8_t *)il_gguf_tensor_at(g, 0)->data - il_gguf_data_offset(g),
                   il_gguf_file_size(g));
  il_gguf_close(g);
  il_mem_stats_get(&after);
  IL_CHECK_INT(after.mapped[IL_MEM_WEIGHTS], before.mapped[IL_MEM_WEIGHTS]);
  remove(path);
}

static void test_fixture_vocabs(const char *dir) {
  static const char *names[] = {"llama-spm", "gpt-2", "deepseek-llm"};
  for (int k = 0; k < 3; k++) {
    char rel[128], path[4096], out[600];
    snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", names[k]);
    const char *fx = il_test_fixture(rel);
    if (!fx) {
      printf("SKIP (part): %s not found\n", rel);
      continue;
    }
    snprintf(path, sizeof path, "%s", fx);
    il_gguf *g = NULL;
    IL_CHECK_OK(il_gguf_open(path, &g));
    if (!g) continue;
    uint64_t n = 0;
    il_gguf_type et;
    IL_CHECK_OK(il_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL));
    il_gguf_str s = {0};
    IL_CHECK_OK(il_gguf_arr_str(g, "tokenizer.ggml.tokens", n - 1, &s));
    IL_CHECK(s.len > 0);
    IL_CHECK_INT(il_gguf_tensor_count(g), 0);
    snprintf(out, sizeof out, "%s/vocab-%s.gguf", dir, names[k]);
    IL_CHECK_OK(rewrite(g, out));
    size_t m = 0;
    uint8_t *ref = (uint8_t *)il_test_read_file(path, &m);
    check_same_bytes(rel, out, ref, m);
    free(ref);
    printf("%s: %llu tokens, rewritten byte for byte\n", rel, (unsigned long long)n);
    il_gguf_close(g);
    remove(out);
  }
}

int main(void) {
  const char *dir = il_test_tmpdir();
  if (!dir) IL_SKIP("cannot create a temporary directory");
  char d[256];
  snprintf(d, sizeof d, "%s", dir);
  test_read_all_types();
  test_roundtrip_handmade(d);
  test_writer(d);
  test_malformed();
  test_truncation();
  test_mutation();
  test_oom();
  test_fixture_model(d);
  test_fixture_vocabs(d);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", d);
  return il_test_finish();
}
