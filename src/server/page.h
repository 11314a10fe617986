/* server/page: the chat page served at / (src/server/page.html, embedded at build time by
 * cmake/parts/server.cmake). One file of HTML, CSS and JavaScript with no external assets:
 * it streams /v1/chat/completions and polls /metrics.
 * Not for: anything the API itself needs. */
#ifndef IL_SERVER_PAGE_H
#define IL_SERVER_PAGE_H

#include <stddef.h>

extern const char *const il_page_html;
extern const size_t il_page_html_len;

#endif
