/* model/pretok: the pre-tokenizers of byte-level BPE vocabularies.
 *
 * A pre-tokenizer cuts text into words before BPE merges run inside each word. Each one is a
 * list of regular expressions applied in turn, as llama.cpp does: every expression splits every
 * word produced so far into its matches and the runs between matches (both are kept as words).
 * The expressions are llama.cpp's (which are those of the models' tokenizer.json), matched by
 * PCRE2 in UTF mode with Unicode properties, so \p{L}, \p{N}, \p{P} and \s use the Unicode
 * database compiled into Debian's libpcre2 (not a hand-typed table). Non-ASCII characters in
 * classes are written as \x{...} so no editor normalisation can change them.
 * Invalid UTF-8 never fails: PCRE2_MATCH_INVALID_UTF makes such bytes unmatchable, so they end
 * up in the runs between matches.
 * Not for: merging (bpe.c), special tokens (tokenizer.c).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/pretok.h"

#include <pcre2.h>
#include <string.h>

#include "memory/mem.h"
#include "model/utf8.h"

#define IL__PRETOK_MAX_RX 6

/* GPT-2's expression without its final "|\s+": runs it would match are kept as unmatched
 * runs anyway, with the same boundaries. */
#define IL__RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define IL__RX_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define IL__RX_LLAMA3                                                                           \
  IL__RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"  \
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define IL__RX_QWEN2                                                                            \
  IL__RX_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"       \
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Cased letters as DeepSeek's tokenizer.json lists them (an older Unicode's Lu|Ll|Lt). */
#define IL__RX_DEEPSEEK_LETTERS                                                                 \
  "\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"          \
  "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"         \
  "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}" \
  "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"    \
  "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"                \
  "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"                \
  "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"         \
  "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"        \
  "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"                \
  "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"         \
  "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"         \
  "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"                  \
  "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"                 \
  "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"                \
  "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"                \
  "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"            \
  "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"        \
  "\\x{1E900}-\\x{1E943}"
#define IL__RX_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* Poro/Bloom: anything but whitespace and . , ! ? … 。 ， 、 । ۔ ، (and the literal ( | )). */
#define IL__RX_PORO                                                                             \
  " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define IL__RX_GPT4O                                                                            \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"     \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"                                 \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"     \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"                                 \
  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define IL__RX_TEKKEN                                                                           \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"    \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"    \
  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
  const char *canon; /* the name reported back */
  const char *names; /* canonical name first, then aliases, '|'-separated */
  const char *rx[IL__PRETOK_MAX_RX];
  il__pretok_flags flags;
} il__pretok_def;

static const il__pretok_def il__pretok_defs[] = {
    {"default", "default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", IL__RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"},
     {false, false}},
    {"gpt-2", "gpt-2|gpt2|gpt-neox|mpt|olmo|jais|phi-2|jina-es|jina-de|jina-v2-es|jina-v2-de|gigachat|"
     "mellum|exaone4|trillion|granite-docling|roberta-bpe|jina-v1-en|jina-v2-code",
     {IL__RX_GPT2},
     {false, false}},
    {"llama-bpe", "llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {IL__RX_LLAMA3}, {true, true}},
    {"dbrx", "dbrx|smaug-bpe|chatglm-bpe|glm4", {IL__RX_LLAMA3}, {false, false}},
    {"qwen2", "qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan", {IL__RX_QWEN2}, {false, false}},
    {"falcon", "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", IL__RX_GPT2, "[0-9][0-9][0-9]"}, {false, false}},
    {"starcoder", "starcoder|refact|smollm|command-r|codeshell|exaone|minerva-7b",
     {"\\p{N}", IL__RX_GPT2},
     {false, false}},
    {"deepseek-llm", "deepseek-llm",
     {"[\\r\\n]", "\\s?[" IL__RX_DEEPSEEK_LETTERS "]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      /* "\s+$" made possessive: same matches (a run that is not at the end cannot end at $ by
       * giving characters back), but linear instead of quadratic on long inner runs. */
      "\\s++$", IL__RX_CJK, "\\p{N}+"},
     {false, false}},
    {"deepseek-coder", "deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", IL__RX_CJK, "\\p{N}"}, {false, false}},
    {"poro-chat", "poro-chat|bloom|gpt3-finnish", {IL__RX_PORO}, {false, false}},
    {"viking", "viking", {IL__RX_PORO, "\\p{N}"}, {false, false}},
    {"gpt-4o", "gpt-4o|llama4", {IL__RX_GPT4O}, {false, false}},
    {"tekken", "tekken", {IL__RX_TEKKEN}, {true, true}},
};

struct il__pretok {
  int n_rx;
  pcre2_code *rx[IL__PRETOK_MAX_RX];
};

static bool il__pretok_name_in(const char *names, const char *name) {
  size_t nl = strlen(name);
  const char *p = names;
  while (*p) {
    size_t l = strcspn(p, "|");
    if (l == nl && memcmp(p, name, l) == 0) return true;
    p += l;
    if (*p == '|') p++;
  }
  return false;
}

void il__pretok_free(il__pretok *p) {
  if (!p) return;
  for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->rx[i]);
  il_mem_free(p);
}

il_status il__pretok_new(const char *name, il__pretok **out, il__pretok_flags *flags, const char **canon) {
  *out = NULL;
  const il__pretok_def *def = NULL;
  for (size_t i = 0; i < sizeof il__pretok_defs / sizeof il__pretok_defs[0]; i++) {
    if (il__pretok_name_in(il__pretok_defs[i].names, name)) {
      def = &il__pretok_defs[i];
      break;
    }
  }
  if (!def) {
    return il_error(IL_ERR_UNSUPPORTED,
                    "unknown pre-tokenizer '%s' (tokenizer.ggml.pre); known: default, gpt-2, "
                    "llama-bpe, qwen2, falcon, starcoder, refact, deepseek-llm, deepseek-coder, mpt, "
                    "gpt-neox, smollm, dbrx, poro-chat, viking, gpt-4o, tekken and aliases; force "
                    "one with --pre NAME",
                    name);
  }
  *canon = def->canon;
  *flags = def->flags;

  il__pretok *p = il_mem_calloc(IL_MEM_TOKENIZER, sizeof *p, "pre-tokenizer");
  if (!p) return IL_ERR_OOM;
  for (int i = 0; i < IL__PRETOK_MAX_RX && def->rx[i]; i++) {
    int err = 0;
    PCRE2_SIZE erroff = 0;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)def->rx[i], PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff,
                                  NULL);
    if (!c) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      il__pretok_free(p);
      return il_error(IL_ERR_INTERNAL, "pre-tokenizer '%s': expression %d at %zu: %s", name, i,
                      (size_t)erroff, (const char *)msg);
    }
    /* JIT is an optimisation only; without it (some platforms) matching still works. */
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    p->rx[p->n_rx++] = c;
  }
  *out = p;
  return IL_OK;
}

typedef struct {
  size_t off, len;
} il__span;

/* Appends the matches of rx in text[w.off .. w.off+w.len) and the runs between them. */
static il_status il__pretok_split_one(pcre2_code *rx, pcre2_match_data *md, const char *text,
                                   il__span w, il__vec *dst) {
  PCRE2_SPTR subj = (PCRE2_SPTR)(text + w.off);
  size_t start = 0, last = 0;
  while (start < w.len) {
    int rc = pcre2_match(rx, subj, w.len, start, 0, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT)
      rc = pcre2_match(rx, subj, w.len, start, PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return il_error(IL_ERR_INTERNAL, "pre-tokenizer match at byte %zu: %s", w.off + start,
                      (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* empty match: none of the expressions can, but never loop */
      start = ms + il__utf8_len((uint8_t)text[w.off + ms]);
      continue;
    }
    if (ms > last) {
      il__span gap = {w.off + last, ms - last};
      IL_TRY(il__vec_push(dst, &gap));
    }
    il__span m = {w.off + ms, me - ms};
    IL_TRY(il__vec_push(dst, &m));
    last = start = me;
  }
  if (last < w.len) {
    il__span gap = {w.off + last, w.len - last};
    IL_TRY(il__vec_push(dst, &gap));
  }
  return IL_OK;
}

il_status il__pretok_split(const il__pretok *p, const char *text, size_t len, il__vec *words) {
  if (len == 0) return IL_OK;
  il__vec a, b;
  il__vec_init(&a, sizeof(il__span));
  il__vec_init(&b, sizeof(il__span));
  il_status s = IL_OK;
  pcre2_match_data *md = NULL;
  for (int i = 0; i < p->n_rx && !md; i++) md = pcre2_match_data_create_from_pattern(p->rx[i], NULL);
  if (!md) {
    return il_error(IL_ERR_OOM, "pre-tokenizer: out of memory for PCRE2 match data");
  }
  il__span all = {0, len};
  s = il__vec_push(&a, &all);
  for (int r = 0; r < p->n_rx && s == IL_OK; r++) {
    b.n = 0;
    for (size_t i = 0; i < a.n && s == IL_OK; i++)
      s = il__pretok_split_one(p->rx[r], md, text, IL__VEC_AT(&a, il__span, i), &b);
    il__vec t = a;
    a = b;
    b = t;
  }
  if (s == IL_OK) s = il__vec_reserve(words, a.n);
  if (s == IL_OK) {
    for (size_t i = 0; i < a.n; i++) {
      il__span sp = IL__VEC_AT(&a, il__span, i);
      size_t pair[2] = {sp.off, sp.len};
      memcpy((char *)words->p + words->n * words->elem, pair, sizeof pair);
      words->n++;
    }
  }
  pcre2_match_data_free(md);
  il__vec_free(&a);
  il__vec_free(&b);
  return s;
}
