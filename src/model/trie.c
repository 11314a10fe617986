/* model/trie: building the trie and its Aho-Corasick links (see trie.h). */
#include "model/trie.h"

#include <string.h>

il_status il_trie_init(il_trie *t, size_t max_nodes, il_mem_category cat, const char *what) {
  memset(t, 0, sizeof *t);
  for (int c = 0; c < 256; c++) t->root[c] = -1;
  const size_t n = max_nodes ? max_nodes : 1;
  t->child = il_mem_alloc(cat, n * sizeof *t->child, what);
  t->next = il_mem_alloc(cat, n * sizeof *t->next, what);
  t->byte = il_mem_alloc(cat, n, what);
  t->key = il_mem_alloc(cat, n * sizeof *t->key, what);
  t->fail = il_mem_alloc(cat, n * sizeof *t->fail, what);
  t->out = il_mem_alloc(cat, n * sizeof *t->out, what);
  if (!t->child || !t->next || !t->byte || !t->key || !t->fail || !t->out) {
    il_trie_free(t);
    return IL_ERR_OOM;
  }
  return IL_OK;
}

void il_trie_add(il_trie *t, const uint8_t *key, size_t n, int32_t id) {
  int32_t *slot = &t->root[key[0]];
  int32_t node = -1;
  for (size_t j = 0; j < n; j++) {
    if (j > 0) slot = &t->child[node];
    int32_t c = *slot;
    while (c >= 0 && t->byte[c] != key[j]) c = t->next[c];
    if (c < 0) {
      c = t->n_nodes++;
      t->byte[c] = key[j];
      t->child[c] = -1;
      t->key[c] = -1;
      t->next[c] = *slot;
      *slot = c;
    }
    node = c;
  }
  if (node >= 0 && t->key[node] < 0) t->key[node] = id;
}

int32_t il_trie_step(const il_trie *t, int32_t node, uint8_t c) {
  int32_t k = node < 0 ? t->root[c] : t->child[node];
  if (node < 0) return k;
  while (k >= 0 && t->byte[k] != c) k = t->next[k];
  return k;
}

/* fail(child of u along c) = the deepest node reached by c from fail(u), fail(fail(u)), ...,
 * the root; out(u) = the nearest node on u's failure chain that ends a key. A node's failure
 * target is shallower, so breadth first does it first. */
il_status il_trie_link(il_trie *t) {
  int32_t *queue = il_mem_alloc(IL_MEM_WORKSPACE, ((size_t)t->n_nodes + 1) * sizeof *queue, "trie links");
  if (!queue) return IL_ERR_OOM;
  int32_t head = 0, tail = 0;
  for (int c = 0; c < 256; c++)
    if (t->root[c] >= 0) {
      t->fail[t->root[c]] = -1;
      queue[tail++] = t->root[c];
    }
  while (head < tail) {
    int32_t u = queue[head++];
    int32_t fu = t->fail[u];
    t->out[u] = fu < 0 ? -1 : t->key[fu] >= 0 ? fu : t->out[fu];
    for (int32_t c = t->child[u]; c >= 0; c = t->next[c]) {
      int32_t f = fu, g;
      while ((g = il_trie_step(t, f, t->byte[c])) < 0 && f >= 0) f = t->fail[f];
      t->fail[c] = g;
      queue[tail++] = c;
    }
  }
  il_mem_free(queue);
  return IL_OK;
}

void il_trie_free(il_trie *t) {
  il_mem_free(t->child);
  il_mem_free(t->next);
  il_mem_free(t->byte);
  il_mem_free(t->key);
  il_mem_free(t->fail);
  il_mem_free(t->out);
  t->child = t->next = t->key = t->fail = t->out = NULL;
  t->byte = NULL;
  t->n_nodes = 0;
}
