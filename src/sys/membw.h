/* sys/membw: how fast this machine reads memory, the roofline of every CPU benchmark.
 *
 * A STREAM-style read: the pool's threads each sum their slice of a buffer far larger than
 * the caches, with the widest loads the CPU has (64-byte AVX-512, else 32-byte AVX2, else
 * 8-byte; a plain 8-byte loop reads ~30% less than a vector kernel can on recent Xeons), and
 * the best pass counts. The doctor reports it, the lab and the benchmarks divide by it.
 * Not for: cache bandwidth (the buffer is sized to miss them).
 */
#ifndef IL_SYS_MEMBW_H
#define IL_SYS_MEMBW_H

#include <stddef.h>
#include <stdint.h>

#include "sys/pool.h"
#include "core/status.h"

#define IL_MEMBW_DEFAULT_BYTES ((size_t)512 << 20)

/* A filled buffer to time passes over, for benchmarks that interleave bandwidth passes with
 * their own (both then see the same neighbours on a shared machine). */
typedef struct {
  uint64_t *buf;
  size_t bytes;
} il_membw;

/* Allocates and fills `bytes` (at least 64 MiB). IL_ERR_OOM when it cannot. */
il_status il_membw_init(il_membw *m, size_t bytes);
void il_membw_free(il_membw *m);
/* One timed read pass over the buffer on all threads of the pool; GB/s. Can't fail. */
double il_membw_pass(il_membw *m, il_pool *pool);

/* Measures read bandwidth in GB/s (1e9 bytes/s) with n_threads threads (0 = one per core)
 * over a buffer of `bytes` (at least 64 MiB; it is filled first so every page is real),
 * repeating for about `ms` milliseconds (at least 2 passes) and keeping the best pass.
 * IL_ERR_OOM when the buffer cannot be allocated (counted as workspace while it lives). */
il_status il_cpu_read_bandwidth(int n_threads, size_t bytes, int ms, double *gbps);

#endif
