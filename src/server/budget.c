/* server/budget: per-request byte budgets and the JSON arena jansson allocates from. */
#include "server/budget.h"

#include <string.h>

#include "memory/mem.h"

struct il_budget {
  atomic_size_t used;
  size_t limit;
  atomic_int refs;
  atomic_bool over;
};

static atomic_size_t il__held, il__peak;
static atomic_uint_least64_t il__over;

static void il__held_add(size_t n) {
  size_t now = atomic_fetch_add(&il__held, n) + n, p = atomic_load(&il__peak);
  while (now > p && !atomic_compare_exchange_weak(&il__peak, &p, now)) {
  }
}

il_budget *il_budget_new(size_t limit) {
  il_budget *b = il_mem_calloc(IL_MEM_SERVER, sizeof *b, "request budget");
  if (!b) return NULL;
  b->limit = limit;
  atomic_init(&b->refs, 1);
  return b;
}

il_budget *il_budget_ref(il_budget *b) {
  if (b) atomic_fetch_add(&b->refs, 1);
  return b;
}

void il_budget_unref(il_budget *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  atomic_fetch_sub(&il__held, atomic_load(&b->used));
  il_mem_free(b);
}

bool il_budget_take(il_budget *b, size_t n) {
  if (!b) return true;
  size_t u = atomic_load(&b->used);
  do {
    if (n > b->limit || u > b->limit - n) {
      if (!atomic_exchange(&b->over, true)) atomic_fetch_add(&il__over, 1);
      return false;
    }
  } while (!atomic_compare_exchange_weak(&b->used, &u, u + n));
  il__held_add(n);
  return true;
}

void il_budget_give(il_budget *b, size_t n) {
  if (!b) return;
  atomic_fetch_sub(&b->used, n);
  atomic_fetch_sub(&il__held, n);
}

bool il_budget_over(const il_budget *b) { return b && atomic_load(&b->over); }
size_t il_budget_limit(const il_budget *b) { return b ? b->limit : 0; }
size_t il_budget_used(const il_budget *b) { return b ? atomic_load(&b->used) : 0; }
size_t il_budget_room(const il_budget *b) {
  if (!b) return SIZE_MAX;
  size_t u = atomic_load(&b->used);
  return u < b->limit ? b->limit - u : 0;
}

void il_budget_totals(size_t *held, size_t *peak, uint64_t *over) {
  if (held) *held = atomic_load(&il__held);
  if (peak) *peak = atomic_load(&il__peak);
  if (over) *over = atomic_load(&il__over);
}

/* ---- the JSON arena ---- */

struct il__jchunk {
  struct il__jchunk *next;
  size_t cap;         /* bytes of data */
  size_t charged;     /* bytes charged to the budget for this chunk */
  uint64_t pad;       /* data starts 32 bytes in: 8-byte aligned */
  char data[];
};

#define IL__JCHUNK ((size_t)64 << 10)
#define IL__JBIG ((size_t)16 << 10) /* larger blocks get a chunk of their own */
#define IL__MEM_OVERHEAD 64         /* memory/'s header on every chunk */
#define IL__TAG_ARENA 0x41524e41ull /* "ARNA": freed with its scope */
#define IL__TAG_MEM 0x4d454d21ull   /* "MEM!": a memory/ block of its own */

static _Thread_local il_jarena *il__cur;

void il_jarena_begin(il_jarena *a, il_budget *b) {
  memset(a, 0, sizeof *a);
  a->budget = b;
  a->prev = il__cur;
  il__cur = a;
}

void il_jarena_end(il_jarena *a) {
  for (struct il__jchunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    il_budget_give(a->budget, c->charged);
    il_mem_free(c);
  }
  a->chunks = NULL;
  if (il__cur == a) il__cur = a->prev;
}

static struct il__jchunk *il__jchunk_new(il_jarena *a, size_t cap) {
  const size_t charge = sizeof(struct il__jchunk) + cap + IL__MEM_OVERHEAD;
  if (!il_budget_take(a->budget, charge)) return NULL;
  struct il__jchunk *c = il_mem_alloc(IL_MEM_SERVER, sizeof *c + cap, "request JSON");
  if (!c) {
    il_budget_give(a->budget, charge);
    return NULL;
  }
  c->cap = cap;
  c->charged = charge;
  return c;
}

static void *il__arena_alloc(il_jarena *a, size_t n) {
  if (n > SIZE_MAX - 16) return NULL;
  const size_t need = 8 + ((n + 7) & ~(size_t)7);
  char *at;
  if (need > IL__JBIG) { /* its own chunk, behind the one being filled */
    struct il__jchunk *c = il__jchunk_new(a, need);
    if (!c) return NULL;
    if (a->chunks) {
      c->next = a->chunks->next;
      a->chunks->next = c;
    } else {
      a->chunks = c;
      a->off = a->cap = need;
    }
    at = c->data;
  } else {
    if (!a->chunks || a->off + need > a->cap) {
      struct il__jchunk *c = il__jchunk_new(a, IL__JCHUNK);
      if (!c) return NULL;
      c->next = a->chunks;
      a->chunks = c;
      a->off = 0;
      a->cap = IL__JCHUNK;
    }
    at = a->chunks->data + a->off;
    a->off += need;
  }
  const uint64_t tag = IL__TAG_ARENA;
  memcpy(at, &tag, 8);
  return at + 8;
}

void *il_budget_json_malloc(size_t n) {
  if (il__cur) return il__arena_alloc(il__cur, n);
  if (n > SIZE_MAX - 16) return NULL;
  char *p = il_mem_alloc(IL_MEM_SERVER, n + 16, "json");
  if (!p) return NULL;
  const uint64_t tag = IL__TAG_MEM;
  memcpy(p + 8, &tag, 8);
  return p + 16;
}

void il_budget_json_free(void *p) {
  if (!p) return;
  uint64_t tag;
  memcpy(&tag, (char *)p - 8, 8);
  if (tag == IL__TAG_MEM) il_mem_free((char *)p - 16);
  /* IL__TAG_ARENA: freed with its scope */
}
