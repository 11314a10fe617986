/* engine/grammar: constrained decoding with llama.cpp's GBNF grammars.
 *
 * Three objects, from the longest-lived to the shortest:
 *   il_grammar        a parsed grammar: a compact rule table (one flat array of elements, each
 *                     rule's alternatives separated by ALT and closed by END, char classes as
 *                     code point ranges). Immutable: one per request, shared by its choices.
 *   il_grammar_vocab  the token vocabulary pre-indexed as a trie of the tokens' bytes, built once
 *                     per vocabulary. Immutable and shareable between threads.
 *   il_grammar_state  where one generation stands in the grammar: a set of pushdown stacks (each
 *                     stack a persistent linked list, so stacks share their tails) plus the
 *                     bytes of an incomplete UTF-8 character. Advances on bytes; the grammar
 *                     matches Unicode code points.
 * A step's mask walks the trie once against the state: a subtree whose prefix no stack can
 * take is pruned whole, so the cost follows the tokens the grammar allows (and their shared
 * prefixes), not the vocabulary's size. A character class under `*` (JSON strings, spaces)
 * loops in place without allocating, which keeps the common "anything but a quote" walk cheap.
 * End-of-generation tokens are allowed exactly when the grammar can accept (an empty stack).
 *
 * GBNF as llama.cpp reads it: `name ::= alternatives` (a rule ends at the end of its line unless
 * inside parentheses or after `|`), "literals" and [classes] with \n \r \t \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH escapes, [^...] negation, `.` any character, ( groups ), `|`, the
 * repetitions * + ? {m} {m,} {m,n}, # comments. The start rule is `root`. Left recursion
 * (also through rules that can match nothing) is refused at parse time, since a pushdown
 * matcher would loop on it.
 * Not for: the JSON Schema translation (server/schema), sampling itself (engine/sampler).
 */
#ifndef IL_ENGINE_GRAMMAR_H
#define IL_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "model/vocab.h"

typedef struct il_grammar il_grammar;
typedef struct il_grammar_vocab il_grammar_vocab;
typedef struct il_grammar_state il_grammar_state;

#define IL_GRAMMAR_MAX_REPEAT 1000 /* largest m or n of x{m,n} */

/* Parses GBNF text[0..len) (UTF-8, need not be NUL-terminated). `what` names the input in
 * errors ("grammar.gbnf", "request grammar"): IL_ERR_FORMAT with "WHAT:LINE:COL: problem" for a
 * syntax error, an undefined rule (at its first use), a missing root, a rule defined twice or a
 * left-recursive rule; IL_ERR_OOM. On success the caller owns *out (il_grammar_free). */
il_status il_grammar_parse(const char *text, size_t len, const char *what, il_grammar **out);
/* NULL is ignored. */
void il_grammar_free(il_grammar *g);
/* Bytes the grammar holds (for a request's memory budget). */
size_t il_grammar_bytes(const il_grammar *g);
int32_t il_grammar_n_rules(const il_grammar *g);

/* Indexes v's tokens (their bytes as il_vocab_token_piece gives them without special text).
 * Tokens with no bytes (control, unknown) are never allowed under a grammar; end-of-generation
 * tokens are allowed when the grammar accepts. v is only read during the call. The caller owns
 * *out (il_grammar_vocab_free). IL_ERR_OOM. */
il_status il_grammar_vocab_new(const il_vocab *v, il_grammar_vocab **out);
void il_grammar_vocab_free(il_grammar_vocab *tv);
size_t il_grammar_vocab_bytes(const il_grammar_vocab *tv);
int32_t il_grammar_vocab_nodes(const il_grammar_vocab *tv);
/* The token the sampler ends on when the grammar allows no token at all (the vocabulary's EOS). */
int32_t il_grammar_vocab_eos(const il_grammar_vocab *tv);

/* Work space of a state, bytes: the stacks of one step and the trie walk live in it. A grammar
 * too ambiguous for it is IL_ERR_RANGE naming this limit, never an unbounded allocation. */
#define IL_GRAMMAR_STATE_ARENA (256u << 10)

/* A state at the start of g (borrowed, with tv: both must outlive the state; tv may be NULL
 * when only il_grammar_state_accept_bytes is used). IL_ERR_OOM; IL_ERR_RANGE when the start
 * does not fit the work space. The caller owns *out. */
il_status il_grammar_state_new(const il_grammar *g, const il_grammar_vocab *tv, il_grammar_state **out);
void il_grammar_state_free(il_grammar_state *s);
/* The vocabulary index the state was made with (NULL if none). */
const il_grammar_vocab *il_grammar_state_vocab(const il_grammar_state *s);
/* Bytes a state allocates (for a request's memory budget). */
size_t il_grammar_state_bytes(void);

/* Advances over bytes[0..n). Returns IL_OK, or IL_ERR_INVALID_ARG naming the byte offset when
 * the grammar does not allow them (the state is then unchanged), IL_ERR_RANGE when the work
 * space is exhausted. */
il_status il_grammar_state_accept_bytes(il_grammar_state *s, const char *bytes, size_t n);
/* Advances over token tok's bytes (an end-of-generation token changes nothing when the grammar
 * accepts). Errors as il_grammar_state_accept_bytes. */
il_status il_grammar_state_accept_token(il_grammar_state *s, int32_t tok);
/* The grammar can end here: some stack is empty and no UTF-8 character is half read. */
bool il_grammar_state_accepting(const il_grammar_state *s);
/* Nothing but the end may follow: accepting and no stack can take another character. */
bool il_grammar_state_finished(const il_grammar_state *s);

/* The mask of one step: bit i of allowed (n_vocab bits, LSB first in each byte) is set when
 * token i may follow. *n_allowed gets the count. allowed must hold (n_vocab + 7) / 8 bytes.
 * IL_ERR_RANGE when the work space is exhausted. The hot path of constrained decoding. */
il_status il_grammar_state_mask(il_grammar_state *s, uint8_t *allowed, int32_t *n_allowed);

#endif
