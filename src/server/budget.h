/* server/budget: the bytes one request may make the server hold.
 *
 * Each request gets an il_budget with a limit (serve's --max-request-memory). Every buffer the
 * server allocates for it is charged to it before it is allocated: the body as it arrives, the
 * parsed JSON, the prompt's tokens, the response while it is built or waits to be sent. A
 * charge over the limit fails and marks the budget `over`, so the request fails (413 naming the
 * limit) instead of the process growing; 64 connections can then hold at most 64 x the limit.
 * Not charged: the scheduler's own per-request state (samplers, sized by the vocabulary and n)
 * and the tokenizer's scratch while it runs (memory/ category workspace, proportional to a
 * prompt that --max-body bounds).
 * The bytes all live budgets hold, their peak, and the requests that ran over are process-wide
 * counters (il_budget_totals) for /metrics.
 *
 * JSON: jansson takes one process-wide malloc/free pair (json_set_alloc_funcs);
 * il_budget_json_malloc/free are that pair. Inside an arena scope (il_jarena_begin ..
 * il_jarena_end, on one thread) jansson's small nodes are carved out of 64 KiB chunks charged
 * to the scope's budget, 8 bytes of overhead each, where memory/ would take a 64-byte header and
 * round to 64 (a 24-byte integer node cost 128 bytes); freeing inside a scope is a no-op and
 * il_jarena_end frees every chunk at once, so no JSON value made in a scope may outlive it.
 * Outside a scope the pair falls back to memory/ (category other), uncharged.
 * Not for: the engine's memory (memory/).
 */
#ifndef IL_SERVER_BUDGET_H
#define IL_SERVER_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct il_budget il_budget;

/* A budget of `limit` bytes with one reference. NULL when out of memory. */
il_budget *il_budget_new(size_t limit);
/* One more reference (the connection's and a stream's). */
il_budget *il_budget_ref(il_budget *b);
/* Drops one; the last frees it (what is still charged is given back to the totals). NULL is
 * ignored. */
void il_budget_unref(il_budget *b);

/* Charges n bytes: false (nothing charged, `over` set) when used + n would pass the limit.
 * A NULL budget accepts everything. Thread-safe. */
bool il_budget_take(il_budget *b, size_t n);
/* Gives back n bytes taken earlier. NULL is ignored. */
void il_budget_give(il_budget *b, size_t n);
/* A charge failed on this budget. */
bool il_budget_over(const il_budget *b);
size_t il_budget_limit(const il_budget *b);
/* Bytes that may still be taken (SIZE_MAX for NULL). */
size_t il_budget_room(const il_budget *b);
size_t il_budget_used(const il_budget *b);

/* Process-wide: bytes charged to live budgets now, the peak of that, and budgets that ran over. */
void il_budget_totals(size_t *held, size_t *peak, uint64_t *over);

/* One JSON arena scope: a stack object, between begin and end on the same thread. */
typedef struct il_jarena {
  il_budget *budget;
  struct il__jchunk *chunks;
  size_t off, cap;            /* bump offset and size of the newest chunk */
  struct il_jarena *prev;     /* the scope this one interrupts (restored at end) */
} il_jarena;

void il_jarena_begin(il_jarena *a, il_budget *b);
/* Frees the scope's chunks and gives their bytes back. */
void il_jarena_end(il_jarena *a);

/* jansson's allocation pair (json_set_alloc_funcs). malloc returns NULL when the scope's budget
 * or memory runs out (jansson then fails the call: a parse says "out of memory"). */
void *il_budget_json_malloc(size_t n);
void il_budget_json_free(void *p);

#endif
