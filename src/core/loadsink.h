/* core/loadsink: what the layers below engine/ report while a model loads (a file mapped,
 * weights converted at placement) to whoever listens, so format/ and model/ need not know the
 * engine's startup timeline (engine/startup), which is the listener. Without one, reports are
 * dropped. Not for: the timeline itself. */
#ifndef IL_CORE_LOADSINK_H
#define IL_CORE_LOADSINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef void (*il_load_mapped_fn)(const char *path, const void *map, size_t size);
typedef void (*il_load_converted_fn)(double seconds, uint64_t bytes);

/* Sets the process's listener (one per process; a later call replaces it). */
void il_load_listen(il_load_mapped_fn mapped, il_load_converted_fn converted);

/* A model file was mapped at map (size bytes), before anything read it. */
void il_load_mapped(const char *path, const void *map, size_t size);

/* Placement converted a weight in seconds (bytes of the source the backend keeps a layout of). */
void il_load_converted(double seconds, uint64_t bytes);

/* A device backend backed `bytes` of a weight's device memory in seconds at its allocation (the
 * sim's host pages), so the timeline counts it as allocation, not as the upload. */
typedef void (*il_load_backed_fn)(double seconds, uint64_t bytes);
void il_load_listen_backed(il_load_backed_fn backed);
void il_load_backed(double seconds, uint64_t bytes);

/* Blocks until the bytes [p, p+n) of weights being read in the background are in memory
 * (--no-mmap --load-pipeline); IL_OK at once for any other memory or without a listener.
 * Errors: the read's IL_ERR_IO. */
typedef il_status (*il_load_wait_fn)(const void *p, size_t n);
void il_load_listen_wait(il_load_wait_fn wait);
il_status il_load_wait(const void *p, size_t n);

#endif
