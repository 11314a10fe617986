/* lab/memmap: the caching allocator's state as reports: JSON and an SVG memory map. */
#include "lab/memmap.h"

#include <string.h>

#include "core/text.h"

/* ---- JSON ----------------------------------------------------------------------------- */

static void il__counts_json(il_jsonw *w, const il_caching_counts *c) {
  il_jsonw_obj(w);
  il_jsonw_kint(w, "reserved", (long long)c->reserved);
  il_jsonw_kint(w, "allocated", (long long)c->allocated);
  il_jsonw_kint(w, "requested", (long long)c->requested);
  il_jsonw_kint(w, "active", (long long)c->active);
  il_jsonw_kint(w, "inactive_split", (long long)c->inactive_split);
  il_jsonw_kint(w, "peak_reserved", (long long)c->peak_reserved);
  il_jsonw_kint(w, "peak_allocated", (long long)c->peak_allocated);
  il_jsonw_kint(w, "blocks", (long long)c->n_blocks);
  il_jsonw_kint(w, "segments", (long long)c->n_segments);
  il_jsonw_kint(w, "allocs", (long long)c->n_allocs);
  il_jsonw_kint(w, "frees", (long long)c->n_frees);
  il_jsonw_kint(w, "segment_allocs", (long long)c->segment_allocs);
  il_jsonw_kint(w, "segment_frees", (long long)c->segment_frees);
  il_jsonw_kint(w, "retries", (long long)c->retries);
  il_jsonw_kint(w, "ooms", (long long)c->ooms);
  il_jsonw_obj_end(w);
}

void il_memmap_stats_json(il_jsonw *w, const il_caching_stats *s) {
  il_jsonw_obj(w);
  il_jsonw_key(w, "total");
  il__counts_json(w, &s->total);
  il_jsonw_kint(w, "cap", (long long)s->cap);
  il_jsonw_kint(w, "free_bytes", (long long)s->free_bytes);
  il_jsonw_kint(w, "largest_free", (long long)s->largest_free);
  il_jsonw_kint(w, "largest_free_small", (long long)s->largest_free_pool[IL_CACHING_POOL_SMALL]);
  il_jsonw_kint(w, "largest_free_large", (long long)s->largest_free_pool[IL_CACHING_POOL_LARGE]);
  il_jsonw_knum(w, "fragmentation", s->fragmentation);
  il_jsonw_key(w, "categories");
  il_jsonw_obj(w);
  for (int c = 0; c < IL_MEM_CATEGORY_COUNT; c++) {
    const il_caching_counts *k = &s->cat[c];
    if (!k->peak_reserved && !k->peak_allocated && !k->n_allocs && !k->ooms) continue;
    il_jsonw_key(w, il_mem_category_name((il_mem_category)c));
    il__counts_json(w, k);
  }
  il_jsonw_obj_end(w);
  il_jsonw_obj_end(w);
}

void il_memmap_json(il_jsonw *w, const il_caching_snapshot *s) {
  il_jsonw_obj(w);
  il_jsonw_kstr(w, "space", s->space);
  il_jsonw_key(w, "stats");
  il_memmap_stats_json(w, &s->stats);
  il_jsonw_key(w, "segments");
  il_jsonw_arr(w);
  for (size_t i = 0; i < s->n_segments; i++) {
    const il_caching_snap_segment *g = &s->segments[i];
    il_jsonw_obj(w);
    il_jsonw_kint(w, "id", (long long)g->id);
    il_jsonw_kint(w, "base", (long long)g->base);
    il_jsonw_kint(w, "size", (long long)g->size);
    il_jsonw_kstr(w, "pool", il_caching_pool_name(g->pool));
    il_jsonw_kstr(w, "category", il_mem_category_name(g->cat));
    il_jsonw_key(w, "blocks");
    il_jsonw_arr(w);
    for (size_t k = g->first_block; k < g->first_block + g->n_blocks; k++) {
      const il_caching_snap_block *b = &s->blocks[k];
      il_jsonw_obj(w);
      il_jsonw_kint(w, "offset", (long long)b->offset);
      il_jsonw_kint(w, "size", (long long)b->size);
      il_jsonw_kbool(w, "allocated", b->allocated);
      if (b->allocated) {
        il_jsonw_kint(w, "requested", (long long)b->requested);
        il_jsonw_kstr(w, "category", il_mem_category_name(b->cat));
        il_jsonw_kstr(w, "name", b->name);
      }
      il_jsonw_obj_end(w);
    }
    il_jsonw_arr_end(w);
    il_jsonw_obj_end(w);
  }
  il_jsonw_arr_end(w);
  il_jsonw_obj_end(w);
}

il_status il_memmap_write_json(const il_caching_snapshot *s, FILE *f, bool pretty) {
  il_jsonw w;
  il_jsonw_init(&w, f, pretty);
  il_memmap_json(&w, s);
  return il_jsonw_finish(&w);
}

/* ---- SVG memory map ----------------------------------------------------------------- */

#define IL__SVG_W 760
#define IL__SVG_X0 180 /* bars start here; the segment label sits left of it */
#define IL__SVG_BW 564
#define IL__SVG_ROW 16
#define IL__SVG_GAP 6
#define IL__SVG_TOP 50
#define IL__SVG_LEGEND_ROW 7 /* legend entries per row, 105 px each */

static const char *const il__cat_colors[IL_MEM_CATEGORY_COUNT] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#8c564b"};

static void il__xml(FILE *f, const char *s) { il_xml_escape(f, s, false); }

il_status il_memmap_svg(const il_caching_snapshot *s, FILE *f, const char *id, int max_rows) {
  char sid[64];
  size_t k = 0;
  for (const char *p = id && *id ? id : "memory-map"; *p && k < sizeof sid - 1; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    sid[k++] = ok ? c : '-';
  }
  sid[k] = 0;
  size_t rows = s->n_segments;
  if (max_rows > 0 && rows > (size_t)max_rows) rows = (size_t)max_rows;
  size_t left_out = s->n_segments - rows;
  int body = (int)(rows ? rows : 1) * (IL__SVG_ROW + IL__SVG_GAP) + (left_out ? 18 : 0);
  const int legend_rows = (IL_MEM_CATEGORY_COUNT + 1 + IL__SVG_LEGEND_ROW - 1) / IL__SVG_LEGEND_ROW; /* + free */
  int h = IL__SVG_TOP + body + 34 + 18 * (legend_rows - 1);
  const il_caching_stats *st = &s->stats;
  char res[32], al[32], fr[32], lf[32], cap[32];

  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"%s\" class=\"memory-map\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n",
          sid, IL__SVG_W, h, IL__SVG_W, h);
  fprintf(f, "<title>Memory map of ");
  il__xml(f, s->space);
  fprintf(f, "</title>\n<defs><pattern id=\"%s-free\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/>"
             "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#a0a0a0\" stroke-width=\"2\"/></pattern></defs>\n",
          sid);
  fprintf(f, "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">Memory map: ");
  il__xml(f, s->space);
  fprintf(f, " (%zu segment%s, one row each, scaled to its own size)</text>\n", s->n_segments,
          s->n_segments == 1 ? "" : "s");
  fprintf(f, "<text x=\"8\" y=\"36\">reserved %s%s%s, allocated %s, free %s, largest free block %s, "
             "fragmentation %.1f%%</text>\n",
          il_mem_format_bytes(st->total.reserved, res, sizeof res), st->cap ? " of cap " : "",
          st->cap ? il_mem_format_bytes(st->cap, cap, sizeof cap) : "",
          il_mem_format_bytes(st->total.allocated, al, sizeof al), il_mem_format_bytes(st->free_bytes, fr, sizeof fr),
          il_mem_format_bytes(st->largest_free, lf, sizeof lf), st->fragmentation * 100.0);

  int y = IL__SVG_TOP;
  if (!s->n_segments) fprintf(f, "<text x=\"8\" y=\"%d\">no segments reserved</text>\n", y + 12);
  for (size_t i = 0; i < rows; i++, y += IL__SVG_ROW + IL__SVG_GAP) {
    const il_caching_snap_segment *g = &s->segments[i];
    char sz[32];
    fprintf(f, "<text x=\"8\" y=\"%d\">#%llu %s %s</text>\n", y + 12, (unsigned long long)g->id,
            il_caching_pool_name(g->pool), il_mem_format_bytes(g->size, sz, sizeof sz));
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#606060\" stroke-width=\"0.5\"/>\n",
            IL__SVG_X0, y, IL__SVG_BW, IL__SVG_ROW);
    for (size_t b = g->first_block; b < g->first_block + g->n_blocks; b++) {
      const il_caching_snap_block *blk = &s->blocks[b];
      double x = IL__SVG_X0 + (double)blk->offset / (double)g->size * IL__SVG_BW;
      double w = (double)blk->size / (double)g->size * IL__SVG_BW;
      if (w < 0.5) w = 0.5; /* a tiny block still shows */
      char bs[32], fill[96];
      if (blk->allocated) snprintf(fill, sizeof fill, "%s", il__cat_colors[blk->cat]);
      else snprintf(fill, sizeof fill, "url(#%s-free)", sid);
      fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#ffffff\" "
                 "stroke-width=\"%s\"><title>",
              x, y, w, IL__SVG_ROW, fill, w > 3 ? "0.5" : "0");
      if (blk->allocated) {
        il__xml(f, blk->name[0] ? blk->name : "(unnamed)");
        fprintf(f, " (%s)", il_mem_category_name(blk->cat));
      } else {
        fputs("free", f);
      }
      fprintf(f, ": %s at offset %zu</title></rect>\n", il_mem_format_bytes(blk->size, bs, sizeof bs), blk->offset);
    }
  }
  if (!s->n_segments) y += IL__SVG_ROW + IL__SVG_GAP;
  if (left_out) {
    fprintf(f, "<text x=\"8\" y=\"%d\">... and %zu more segment%s not drawn</text>\n", y + 10, left_out,
            left_out == 1 ? "" : "s");
    y += 18;
  }
  y += 8;
  for (int c = 0; c <= IL_MEM_CATEGORY_COUNT; c++) {
    bool is_free = c == IL_MEM_CATEGORY_COUNT;
    const int x = 8 + (c % IL__SVG_LEGEND_ROW) * 105;
    if (c && c % IL__SVG_LEGEND_ROW == 0) y += 18;
    if (is_free)
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"url(#%s-free)\" stroke=\"#606060\" "
                 "stroke-width=\"0.5\"/>",
              x, y, sid);
    else
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", x, y, il__cat_colors[c]);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x + 16, y + 10,
            is_free ? "free" : il_mem_category_name((il_mem_category)c));
  }
  fprintf(f, "</svg>\n");
  return ferror(f) ? il_error(IL_ERR_IO, "memory map of %s: write failed", s->space) : IL_OK;
}
