/* backend/dry: refusals for the planner's dry devices. See dry.h. */
#include "backend/dry.h"

static il_status il__refuse(il_backend *b) {
  il_backend_info info;
  b->ops->info(b, &info);
  return il_error(IL_ERR_UNSUPPORTED, "%s: a dry device computes nothing (the planner only sizes)", info.name);
}

static il_status il__upload(il_backend *b, il_tensor d, const void *s, size_t n) { return IL_OK; }
static il_status il__sync(il_backend *b) { return IL_OK; }
static il_status il__download(il_backend *b, void *d, il_tensor s, size_t n) { return il__refuse(b); }
static il_status il__copy(il_backend *b, il_tensor d, il_tensor s) { return il__refuse(b); }
static il_status il__get_rows(il_backend *b, il_tensor y, il_tensor w, il_tensor i) { return il__refuse(b); }
static il_status il__matmul(il_backend *b, il_tensor y, il_tensor w, il_tensor x) { return il__refuse(b); }
static il_status il__matmul_multi(il_backend *b, int n, const il_tensor *y, const il_tensor *w, const il_tensor *bias,
                                  il_tensor x) {
  return il__refuse(b);
}
static il_status il__rope_kv_store(il_backend *b, il_tensor q, il_tensor k, il_tensor v, il_tensor pos,
                                   const il_rope_params *rq, const il_rope_params *rk, const il_kv_view *kv, il_tensor s) {
  return il__refuse(b);
}
static il_status il__rmsnorm(il_backend *b, il_tensor y, il_tensor x, il_tensor g, float eps) { return il__refuse(b); }
static il_status il__rope(il_backend *b, il_tensor x, il_tensor p, const il_rope_params *r) { return il__refuse(b); }
static il_status il__kv_store(il_backend *b, const il_kv_view *kv, il_tensor k, il_tensor v, il_tensor s) {
  return il__refuse(b);
}
static il_status il__binary(il_backend *b, il_tensor y, il_tensor x) { return il__refuse(b); }
static il_status il__scale(il_backend *b, il_tensor x, float s) { return il__refuse(b); }
static il_status il__count(il_backend *b, il_tensor x, int64_t *n) { return il__refuse(b); }
static il_status il__round(il_backend *b, il_tensor x, il_dtype t) { return il__refuse(b); }
static il_status il__stats(il_backend *b, il_tensor x, int64_t *n, float *m) { return il__refuse(b); }

void il_backend_dry_ops(il_backend_ops *o) {
  o->upload = il__upload;
  o->download = il__download;
  o->copy = il__copy;
  o->sync = il__sync;
  o->get_rows = il__get_rows;
  o->matmul = il__matmul;
  o->matmul_multi = il__matmul_multi;
  o->rmsnorm = il__rmsnorm;
  o->rope = il__rope;
  o->kv_store = il__kv_store;
  o->rope_kv_store = il__rope_kv_store;
  o->swiglu = il__binary;
  o->add = il__binary;
  o->geglu = il__binary;
  o->scale = il__scale;
  o->add_bias = il__binary;
  o->count_nonfinite = il__count;
  o->round_to = il__round;
  o->value_stats = il__stats;
  /* the optional members a caller composes or does in order when they are absent */
  o->rmsnorm_quant = NULL;
  o->gate_up_swiglu = NULL;
  o->matmul_add = NULL;
  o->sample = NULL;
  o->upload_async = NULL;
  o->event_wait = NULL;
}
