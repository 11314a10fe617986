/* model/trie: a byte trie with Aho-Corasick links, for finding every occurrence of a set of
 * keys (the vocabulary's special-token texts) in one pass over a text.
 *
 * Nodes are numbered from 0 in insertion order; a node's children are a sibling list
 * (first child, next sibling), the root's children a table by first byte. After il_trie_link
 * each node has its failure link (the node of its longest proper suffix that is in the trie,
 * -1 = the root) and its output link (the nearest node on the failure chain that ends a key,
 * -1 = none), so a scan follows
 *
 *   while ((g = il_trie_step(t, state, c)) < 0 && state >= 0) state = t->fail[state];
 *   state = g;  then the keys ending here: t->key[state] (if >= 0), then along t->out.
 *
 * Not for: lookups of one key by text (model/strhash), or changes after il_trie_link.
 */
#ifndef IL_MODEL_TRIE_H
#define IL_MODEL_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "memory/mem.h"

typedef struct {
  int32_t *child;  /* [nodes] first child, -1 */
  int32_t *next;   /* [nodes] next sibling, -1 */
  uint8_t *byte;   /* [nodes] edge byte into the node */
  int32_t *key;    /* [nodes] id of the key ending here, -1 */
  int32_t *fail;   /* [nodes] Aho-Corasick failure link, -1 = the root */
  int32_t *out;    /* [nodes] nearest node on the failure chain that ends a key, -1 */
  int32_t root[256];
  int32_t n_nodes;
} il_trie;

/* Allocates room for max_nodes nodes (at most the keys' total length), counted under cat.
 * IL_ERR_OOM (t is then empty, and il_trie_free is still safe). */
il_status il_trie_init(il_trie *t, size_t max_nodes, il_mem_category cat, const char *what);
/* Adds key[0..n) (n >= 1) with id; a key added twice keeps its first id. The node budget of
 * il_trie_init must hold it (programmer error otherwise). */
void il_trie_add(il_trie *t, const uint8_t *key, size_t n, int32_t id);
/* Computes the failure and output links, breadth first. IL_ERR_OOM for its queue. */
il_status il_trie_link(il_trie *t);
/* The child of node (-1 = the root) along byte c, or -1. */
int32_t il_trie_step(const il_trie *t, int32_t node, uint8_t c);
/* Frees the arrays; t is empty after. */
void il_trie_free(il_trie *t);

#endif
