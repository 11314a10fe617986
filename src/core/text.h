/* core/text: small string helpers shared by report writers.
 * Not for: parsing (each format has its own reader). */
#ifndef IL_CORE_TEXT_H
#define IL_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Appends printf-formatted text to the NUL-terminated string in buf[cap], truncating at the
 * end of the buffer (always NUL-terminated). Returns the length it would have had without
 * truncation. Can't fail. */
size_t il_appendf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Length (1-4) of the valid UTF-8 character at s[0..n), or 0 when the bytes there are not one
 * (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, a code
 * point past U+10FFFF). n must be at least 1. Can't fail. */
size_t il_utf8_char_len(const char *s, size_t n);

/* Writes s escaped for XML text and attribute values (& < > " '), control characters other
 * than newline and tab as spaces (XML 1.0 does not allow them); keep_lines = false turns
 * newlines and tabs into spaces too. Can't fail (write errors show on f). */
void il_xml_escape(FILE *f, const char *s, bool keep_lines);

#endif
