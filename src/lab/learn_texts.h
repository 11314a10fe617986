/* lab/learn_texts: the concept texts of `inferlab learn`, embedded at build time.
 *
 * cmake/learn_embed.cmake turns every docs/learn/LANG/NN-name.md into one entry of
 * il_learn_texts (in a generated C file), so the texts travel inside the binary and a
 * translator edits one concept in one file. lab/learn parses and checks them.
 * Not for: parsing (lab/learn).
 */
#ifndef IL_LAB_LEARN_TEXTS_H
#define IL_LAB_LEARN_TEXTS_H

typedef struct {
  const char *lang; /* the folder: "en", "de" */
  const char *file; /* "17-attention-slicing.md" */
  const char *text; /* the file's bytes, NUL-terminated */
} il_learn_embedded;

/* Sorted by language, then file name; terminated by an entry of NULLs. */
extern const il_learn_embedded il_learn_texts[];
extern const int il_learn_n_texts;

#endif
