/* server/schema: JSON Schema -> GBNF, for the OpenAI API's response_format and `run
 * --json-schema`.
 *
 * The grammar it writes accepts only JSON that validates against the schema (for the subset
 * below), so decoding under it (engine/grammar) always yields a valid document once it ends:
 *   type (one or a list), enum, const, anyOf, oneOf (its alternatives should not overlap: the
 *   grammar takes any of them), $ref to "#/$defs/NAME" or "#/definitions/NAME" (recursion
 *   allowed), nested to any depth;
 *   object: properties (in the order written), required; additionalProperties is accepted with
 *   any value: only the listed properties are generated, which every value allows;
 *   array: items, minItems, maxItems;
 *   string: minLength, maxLength, pattern (a regex subset: literals, escapes \d \w \s \D \W \S
 *   and escaped punctuation, [classes] with ranges and ^, ., groups ( ) and (?: ), |, * + ? {m}
 *   {m,} {m,n}; the string matches the whole pattern, ^ and $ at its ends are implied);
 *   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (an exact digit grammar);
 *   number: minimum, maximum with integer values;
 *   boolean, null; annotations (title, description, default, examples, $schema, $id,
 *   $comment) are ignored.
 * Integers have at most 16 digits, fractions at most 16, exponents 3, and whitespace between
 * tokens is at most one newline and 20 spaces or tabs, so a grammar with bounded strings and
 * arrays has a bounded language. Any other keyword is IL_ERR_UNSUPPORTED naming the keyword and
 * its JSON path ("$.properties.age.format"): the server's 400.
 * {"type":"json_object"} is il_schema_any_gbnf: any JSON object.
 * Not for: validating documents (the grammar does that by construction), GBNF itself.
 */
#ifndef IL_SERVER_SCHEMA_H
#define IL_SERVER_SCHEMA_H

#include <jansson.h>

#include "core/status.h"
#include "server/sbuf.h"

/* Appends the GBNF for schema (borrowed) to out (its budget is charged). Errors:
 * IL_ERR_UNSUPPORTED (a keyword outside the subset, naming it and its path), IL_ERR_INVALID_ARG
 * (a keyword with a wrong value: "minLength" not a number, a $ref that does not resolve, ...),
 * IL_ERR_OOM (out's growth failed). */
il_status il_schema_to_gbnf(json_t *schema, il_sbuf *out);
/* The same from JSON text; `what` names it in errors (a file name). IL_ERR_FORMAT when the
 * text is not JSON (line and column). */
il_status il_schema_text_to_gbnf(const char *text, size_t len, const char *what, il_sbuf *out);
/* Appends a GBNF grammar for any JSON object (response_format json_object). */
il_status il_schema_any_gbnf(il_sbuf *out);

#endif
