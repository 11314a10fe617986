/* sys/pool: a persistent thread pool for the CPU kernels.
 *
 * n-1 worker threads plus the calling thread run one task at a time: il_pool_run calls
 * fn(ctx, ith, nth) on every thread and returns when all have finished. Workers spin briefly
 * between tasks (a decode step issues a task every few microseconds) and then sleep on a
 * condition variable, so an idle engine uses no CPU. il_pool_barrier synchronises the threads
 * inside one task, for kernels with phases (quantize activations, then multiply).
 * Not for: general job queues; tasks must not call il_pool_run recursively.
 */
#ifndef IL_SYS_POOL_H
#define IL_SYS_POOL_H

#include "core/status.h"

typedef struct il_pool il_pool;
typedef void (*il_pool_fn)(void *ctx, int ith, int nth);

/* Starts n_threads-1 workers (n_threads <= 0: one per online core). On failure returns
 * IL_ERR_OOM or IL_ERR_INTERNAL and *out is NULL. Free with il_pool_free. */
il_status il_pool_new(int n_threads, il_pool **out);
/* Stops and joins the workers. NULL is ignored. */
void il_pool_free(il_pool *pool);
int il_pool_size(const il_pool *pool);
/* Runs fn on all threads (ith = 0 is the caller) and waits for all. Can't fail. */
void il_pool_run(il_pool *pool, il_pool_fn fn, void *ctx);
/* Waits until all nth threads of the current task reach it. Only inside a task. */
void il_pool_barrier(il_pool *pool);
/* Online CPU count (>= 1). */
int il_pool_default_threads(void);

#endif
