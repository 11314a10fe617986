/* tests/test_strhash_trie: the vocabulary's two index structures against plain references.
 *
 * model/strhash: 3000 random byte strings (some repeated) inserted as the vocabulary does it
 * (probe, compare, insert where empty); every inserted string is found with the id it first
 * got, 3000 strings never inserted are not found. model/trie: the textbook Aho-Corasick case
 * ("he", "she", "his", "hers" in "ushers"), then 200 random key sets over a 3-letter alphabet
 * (so keys overlap and nest) scanned over random texts: every (end position, key) occurrence
 * the trie reports is exactly the set a brute-force memcmp at every position finds.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model/strhash.h"
#include "model/trie.h"

static uint32_t rng = 12345;
static uint32_t next_rand(void) {
  rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
  return rng;
}

#define N_STR 3000
static char strs[N_STR][12];
static size_t lens[N_STR];

static int32_t find(const il_strhash *h, const char *s, size_t n) {
  for (size_t i = il_strhash_start(h, il_strhash_fnv(IL_STRHASH_FNV_BASIS, s, n)); h->slot[i] >= 0;
       i = il_strhash_next(h, i)) {
    const int32_t id = h->slot[i];
    if (lens[id] == n && !memcmp(strs[id], s, n)) return id;
  }
  return -1;
}

static void test_strhash(void) {
  il_strhash h;
  IL_CHECK_OK(il_strhash_init(&h, N_STR, IL_MEM_WORKSPACE, "test index"));
  if (!h.slot) return;
  IL_CHECK((h.mask + 1) >= 2 * N_STR);
  int32_t first[N_STR];
  int dup = 0;
  for (int32_t i = 0; i < N_STR; i++) {
    lens[i] = 1 + next_rand() % 4; /* short strings over 4 letters: many repeats */
    for (size_t k = 0; k < lens[i]; k++) strs[i][k] = (char)('a' + next_rand() % 4);
    int32_t o = find(&h, strs[i], lens[i]);
    if (o >= 0) {
      first[i] = o, dup++;
      continue;
    }
    size_t j = il_strhash_start(&h, il_strhash_fnv(IL_STRHASH_FNV_BASIS, strs[i], lens[i]));
    while (h.slot[j] >= 0) j = il_strhash_next(&h, j);
    h.slot[j] = i;
    first[i] = i;
  }
  int found = 0;
  for (int32_t i = 0; i < N_STR; i++) found += find(&h, strs[i], lens[i]) == first[i];
  IL_CHECK_INT(found, N_STR);
  int absent = 0;
  for (int i = 0; i < N_STR; i++) {
    char s[8];
    size_t n = 5 + next_rand() % 3; /* longer than any key: never inserted */
    for (size_t k = 0; k < n; k++) s[k] = (char)('a' + next_rand() % 4);
    absent += find(&h, s, n) < 0;
  }
  IL_CHECK_INT(absent, N_STR);
  /* the hash of a string in pieces is the hash of the whole (what merge lookups rely on) */
  uint64_t a = il_strhash_fnv(il_strhash_fnv(IL_STRHASH_FNV_BASIS, "ab", 2), " cd", 3);
  IL_CHECK(a == il_strhash_fnv(IL_STRHASH_FNV_BASIS, "ab cd", 5));
  printf("strhash: %d strings (%d repeats) found with their first id, %d absent ones not found\n", N_STR, dup,
         absent);
  il_strhash_free(&h);
  IL_CHECK(h.slot == NULL);
}

/* Occurrences reported by the trie: hits[end * n_keys + key]++ . */
static void scan(const il_trie *t, const char *text, size_t n, int n_keys, int *hits) {
  int32_t state = -1;
  for (size_t p = 0; p < n; p++) {
    int32_t g;
    while ((g = il_trie_step(t, state, (uint8_t)text[p])) < 0 && state >= 0) state = t->fail[state];
    state = g;
    int32_t node = state >= 0 && t->key[state] >= 0 ? state : state >= 0 ? t->out[state] : -1;
    for (; node >= 0; node = t->out[node]) hits[p * (size_t)n_keys + (size_t)t->key[node]]++;
  }
}

static void test_trie_textbook(void) {
  const char *keys[] = {"he", "she", "his", "hers"};
  il_trie t;
  IL_CHECK_OK(il_trie_init(&t, 16, IL_MEM_WORKSPACE, "test trie"));
  for (int k = 0; k < 4; k++) il_trie_add(&t, (const uint8_t *)keys[k], strlen(keys[k]), k);
  IL_CHECK_OK(il_trie_link(&t));
  int hits[6 * 4] = {0};
  scan(&t, "ushers", 6, 4, hits);
  IL_CHECK_INT(hits[3 * 4 + 1], 1); /* she ends at 3 */
  IL_CHECK_INT(hits[3 * 4 + 0], 1); /* he ends at 3 */
  IL_CHECK_INT(hits[5 * 4 + 3], 1); /* hers ends at 5 */
  int total = 0;
  for (int i = 0; i < 24; i++) total += hits[i];
  IL_CHECK_INT(total, 3);
  il_trie_free(&t);
}

static void test_trie_random(void) {
  int bad = 0, n_occ = 0;
  for (int round = 0; round < 200; round++) {
    const int n_keys = 1 + (int)(next_rand() % 12);
    char keys[12][6];
    size_t kl[12], nodes = 0;
    for (int k = 0; k < n_keys; k++) {
      kl[k] = 1 + next_rand() % 5;
      for (size_t j = 0; j < kl[k]; j++) keys[k][j] = (char)('a' + next_rand() % 3);
      nodes += kl[k];
    }
    il_trie t;
    IL_CHECK_OK(il_trie_init(&t, nodes, IL_MEM_WORKSPACE, "test trie"));
    for (int k = 0; k < n_keys; k++) il_trie_add(&t, (const uint8_t *)keys[k], kl[k], k);
    IL_CHECK_OK(il_trie_link(&t));
    char text[64];
    const size_t n = 1 + next_rand() % 64;
    for (size_t p = 0; p < n; p++) text[p] = (char)('a' + next_rand() % 3);
    int got[64 * 12] = {0}, want[64 * 12] = {0};
    scan(&t, text, n, n_keys, got);
    for (int k = 0; k < n_keys; k++) {
      int first = k; /* a key given twice counts under its first id, as il_trie_add keeps it */
      for (int j = 0; j < k; j++)
        if (kl[j] == kl[k] && !memcmp(keys[j], keys[k], kl[k])) {
          first = j;
          break;
        }
      if (first != k) continue;
      for (size_t e = kl[k] - 1; e < n; e++)
        if (!memcmp(text + e + 1 - kl[k], keys[k], kl[k])) want[e * (size_t)n_keys + (size_t)k]++, n_occ++;
    }
    bad += memcmp(got, want, sizeof got) != 0;
    il_trie_free(&t);
  }
  printf("trie: 200 random key sets, %d occurrences, %d rounds where the trie and brute force differ\n", n_occ, bad);
  IL_CHECK_INT(bad, 0);
  IL_CHECK(n_occ > 500);
}

int main(void) {
  test_strhash();
  test_trie_textbook();
  test_trie_random();
  return il_test_finish();
}
