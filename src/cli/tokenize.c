/* cli/tokenize: `inferlab tokenize -m MODEL [--ids|--pieces] [--no-bos] [--no-parse-special] TEXT`.
 *
 * Prints the token ids of a text (from the arguments, -f FILE, or stdin with - / -f -) with
 * the vocabulary of a GGUF file or a built-in model: by default one line per token, "ID 'piece'";
 * --ids prints only the ids on one line (the input `inferlab detokenize` takes); --pieces only
 * the pieces, one per line. BOS/EOS are added as the vocabulary's metadata says unless --no-bos.
 * Not for: chat templates or generation.
 */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/text.h"
#include "memory/mem.h"
#include "model/builtin.h"
#include "model/tokenizer.h"

static void il__tokenize_help(void) {
  printf("usage: inferlab tokenize -m MODEL [OPTIONS] [--] TEXT...\n"
         "       inferlab tokenize -m MODEL [OPTIONS] -f FILE     (FILE '-' or a lone '-': stdin)\n\n"
         "Tokenizes TEXT (the arguments joined by single spaces) with the model's vocabulary and\n"
         "prints one line per token: the id and its piece in quotes (control bytes escaped; byte\n"
         "tokens, and bytes that are not UTF-8, as <0xF0>).\n"
         "MODEL is a GGUF file or a built-in model (builtin:tiny).\n\n"
         "options:\n"
         "  -m, --model S            the model whose tokenizer.ggml.* vocabulary is used\n"
         "  -f, --file F             read the text from F ('-' = stdin), byte for byte\n"
         "      --ids                print only the ids, space separated, on one line\n"
         "      --pieces             print only the pieces, one per line\n"
         "      --no-bos             do not add BOS/EOS [as the metadata says]\n"
         "      --no-parse-special   read control-token text (<s>, <|im_end|>) as plain text; by\n"
         "                           default it becomes those tokens, as in run's prompts\n"
         "      --pre NAME           use this pre-tokenizer instead of tokenizer.ggml.pre\n"
         "  --                       end of options: what follows is text, even '-x'\n"
         "\nexamples:\n"
         "  inferlab tokenize -m stories260K-f32.gguf \"Once upon a time\"\n"
         "  inferlab tokenize -m smollm2.gguf --ids -- \"<|im_start|>user\"\n"
         "  echo hello | inferlab tokenize -m model.gguf --ids -\n"
         "\nexit codes: 0 ok, 64 usage, 65 malformed model, 66 not found, 69 unsupported\n"
         "            (tokenizer model or pre-tokenizer), 71 out of memory\n");
}

/* Prints a piece: control bytes escaped, and bytes that are not (part of) valid UTF-8 written
 * as <0xF0> (the byte tokens' own notation) instead of the terminal's replacement character. */
static void il__print_escaped(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    size_t cl = c >= 0x80 ? il_utf8_char_len(p + i, n - i) : 1;
    if (cl == 0) {
      printf("<0x%02X>", c);
      continue;
    }
    if (cl > 1) {
      fwrite(p + i, 1, cl, stdout);
      i += cl - 1;
      continue;
    }
    if (c == '\n') fputs("\\n", stdout);
    else if (c == '\t') fputs("\\t", stdout);
    else if (c == '\r') fputs("\\r", stdout);
    else if (c == '\\') fputs("\\\\", stdout);
    else if (c == '\'') fputs("\\'", stdout);
    else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
    else putchar(c);
  }
}

int il_cli_tokenize(int argc, char **argv) {
  const char *model = NULL, *file = NULL, *pre = NULL;
  /* special-token text is parsed by default, as `run` does with a prompt, so tokenize shows
   * what run feeds the model; --no-parse-special as in run */
  bool help = false, ids_only = false, pieces_only = false, no_bos = false, parse_special = false, no_parse = false;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},      {"model", 'm', true, &model, NULL},
      {"file", 'f', true, &file, NULL},       {"ids", 0, false, NULL, &ids_only},
      {"pieces", 0, false, NULL, &pieces_only}, {"no-bos", 0, false, NULL, &no_bos},
      {"parse-special", 0, false, NULL, &parse_special}, {"pre", 0, true, &pre, NULL},
      {"no-parse-special", 0, false, NULL, &no_parse},
  };
  const char *pos[256];
  int n_pos = 0;
  int rc = il_cli_parse("tokenize", argc, argv, NULL, NULL, flags, (int)(sizeof flags / sizeof flags[0]),
                        pos, 256, &n_pos);
  if (rc) return rc;
  if (help) {
    il__tokenize_help();
    return IL_EXIT_OK;
  }
  if (!model) return il_cli_usage_error("tokenize", "-m MODEL is required");
  if (ids_only && pieces_only) return il_cli_usage_error("tokenize", "--ids and --pieces exclude each other");
  if (parse_special && no_parse)
    return il_cli_usage_error("tokenize", "--parse-special and --no-parse-special exclude each other");
  parse_special = !no_parse;
  if (n_pos == 1 && strcmp(pos[0], "-") == 0 && !file) {
    file = "-";
    n_pos = 0;
  }
  if (file && n_pos > 0) return il_cli_usage_error("tokenize", "give the text either with -f or as arguments");
  if (!file && n_pos == 0) return il_cli_usage_error("tokenize", "no text (give it as arguments, -f FILE or -)");

  char *text = NULL;
  size_t len = 0;
  if (file) {
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (!f) {
      il_error(IL_ERR_NOT_FOUND, "-f %s: cannot open", file);
      return il_cli_fail("tokenize", IL_ERR_NOT_FOUND);
    }
    const il_status rs = il_cli_read_all(f, file, &text, &len);
    if (f != stdin) fclose(f);
    if (rs != IL_OK) return il_cli_fail("tokenize", rs);
  } else {
    for (int i = 0; i < n_pos; i++) len += strlen(pos[i]) + 1;
    text = il_mem_alloc(IL_MEM_TOKENIZER, len + 1, "input text");
    if (!text) return il_cli_fail("tokenize", IL_ERR_OOM);
    len = 0;
    for (int i = 0; i < n_pos; i++) {
      if (i) text[len++] = ' ';
      size_t l = strlen(pos[i]);
      memcpy(text + len, pos[i], l);
      len += l;
    }
  }

  il_vocab *v = NULL;
  il_status s = il_vocab_open(model, pre, &v);
  if (s != IL_OK) {
    il_mem_free(text);
    return il_cli_fail("tokenize", s);
  }
  int32_t *ids = NULL;
  size_t n = 0;
  s = il_tokenize_alloc(v, text, len, !no_bos, parse_special, &ids, &n);
  il_mem_free(text);
  if (s != IL_OK) {
    il_vocab_free(v);
    return il_cli_fail("tokenize", s);
  }
  char *piece = il_mem_alloc(IL_MEM_TOKENIZER, il_vocab_max_piece(v) + 1, "piece");
  for (size_t i = 0; i < n && piece; i++) {
    if (ids_only) {
      printf(i ? " %d" : "%d", (int)ids[i]);
      continue;
    }
    size_t pl = il_vocab_token_piece(v, ids[i], true, piece, il_vocab_max_piece(v) + 1);
    const char *shown = piece;
    if (il_vocab_token_type(v, ids[i]) == IL_TOKEN_BYTE) shown = il_vocab_token_text(v, ids[i], &pl); /* "<0x0A>" */
    if (pieces_only) {
      putchar('\'');
      il__print_escaped(shown, pl);
      fputs("'\n", stdout);
    } else {
      printf("%6d -> '", (int)ids[i]);
      il__print_escaped(shown, pl);
      fputs("'\n", stdout);
    }
  }
  if (ids_only) putchar('\n');
  il_mem_free(piece);
  il_mem_free(ids);
  il_vocab_free(v);
  return IL_EXIT_OK;
}
