/* model/vec: the growable array the tokenizer modules build their results and scratch in.
 *
 * Token ids, word spans, escaped text and merge symbols all grow while one text is tokenized;
 * this is the one array type for them. Storage comes from memory/mem in the WORKSPACE category,
 * so tokenizer scratch is counted and reached by fault injection like every other allocation.
 * Not for: long-lived tables (a vocabulary allocates its tables once, at their final size), or
 * code outside the tokenizer modules of src/model/. It sits below every other tokenizer module
 * and includes none of them.
 */
#ifndef IL_MODEL_VEC_H
#define IL_MODEL_VEC_H

#include <stddef.h>
#include <string.h>

#include "core/status.h"
#include "memory/mem.h"

/* n elements of elem bytes each in p[0 .. cap * elem); p is NULL until the first reserve. */
typedef struct {
  void *p;
  size_t n, cap, elem;
} il__vec;

#define IL__VEC_AT(vec, type, i) (((type *)(vec)->p)[i])

/* An empty vector of elem-byte elements. Allocates nothing; can't fail. */
static inline void il__vec_init(il__vec *v, size_t elem) {
  v->p = NULL;
  v->n = v->cap = 0;
  v->elem = elem;
}

/* Frees the storage and leaves an empty vector (elem kept), so it can be reused. */
static inline void il__vec_free(il__vec *v) {
  il_mem_free(v->p);
  v->p = NULL;
  v->n = v->cap = 0;
}

/* Makes room for `more` elements after the n present (capacity doubles). IL_ERR_OOM on failure,
 * the vector unchanged. */
static inline il_status il__vec_reserve(il__vec *v, size_t more) {
  if (v->n + more <= v->cap) return IL_OK;
  size_t cap = v->cap ? v->cap : 16;
  while (cap < v->n + more) cap *= 2;
  void *p = il_mem_alloc(IL_MEM_WORKSPACE, cap * v->elem, "tokenizer scratch");
  if (!p) return IL_ERR_OOM;
  if (v->n) memcpy(p, v->p, v->n * v->elem);
  il_mem_free(v->p);
  v->p = p;
  v->cap = cap;
  return IL_OK;
}

/* Appends one element, copied from elem. IL_ERR_OOM on failure, the vector unchanged. */
static inline il_status il__vec_push(il__vec *v, const void *elem) {
  if (v->n == v->cap) IL_TRY(il__vec_reserve(v, 1));
  memcpy((char *)v->p + v->n * v->elem, elem, v->elem);
  v->n++;
  return IL_OK;
}

#endif
