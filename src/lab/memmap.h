/* lab/memmap: reports of a caching allocator (memory/caching.h): its counters and a snapshot
 * of its segments and blocks as JSON, and the snapshot drawn as an SVG memory map (one row per
 * segment, blocks coloured by category), for bench's report, allocpat and the benches.
 * Not for: taking the snapshot or any allocator policy (memory/caching).
 */
#ifndef IL_LAB_MEMMAP_H
#define IL_LAB_MEMMAP_H

#include <stdbool.h>
#include <stdio.h>

#include "core/jsonw.h"
#include "memory/caching.h"

/* Writes stats as a JSON object: the total counters, "free_bytes", "largest_free",
 * "fragmentation", "cap" and "categories": {name: counters} for categories that have any. */
void il_memmap_stats_json(il_jsonw *w, const il_caching_stats *s);
/* Writes the snapshot as one JSON object value into w: {"space", "stats", "segments": [{"id",
 * "base", "size", "pool", "category", "blocks": [{"offset", "size", "allocated", and for an
 * allocated block "requested", "category", "name"}]}]}. */
void il_memmap_json(il_jsonw *w, const il_caching_snapshot *s);
/* The same as a whole document on f. IL_ERR_IO when a write failed. */
il_status il_memmap_write_json(const il_caching_snapshot *s, FILE *f, bool pretty);
/* Draws the memory map as one self-contained <svg> element (inline styles; well-formed XML,
 * so it embeds in the XHTML bench report): one row per segment, each scaled to its own width
 * and labelled with id, pool and size; allocated blocks coloured by category, free blocks
 * grey and hatched, a <title> tooltip per block (name, category, offset, size); a header with
 * reserved, allocated and fragmentation; a legend. `id` (letters, digits, '-') names the
 * element and its pattern so several maps can share a page; max_rows > 0 draws at most that
 * many segments and says how many were left out. IL_ERR_IO when a write failed. */
il_status il_memmap_svg(const il_caching_snapshot *s, FILE *f, const char *id, int max_rows);

#endif
