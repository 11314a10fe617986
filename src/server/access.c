/* server/access: the API key. */
#include "server/access.h"

#include <string.h>

il_status il_access_key_check(const char *key, const char *flag) {
  const size_t n = strlen(key);
  if (!n) return il_error(IL_ERR_INVALID_ARG, "%s: the key is empty (leave the flag out to serve without a key)", flag);
  if (n > IL_ACCESS_KEY_MAX)
    return il_error(IL_ERR_INVALID_ARG, "%s: the key has %zu bytes; at most %d (a request's headers must carry it)", flag,
                    n, IL_ACCESS_KEY_MAX);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
      return il_error(IL_ERR_INVALID_ARG, "%s: byte %zu of the key is a control character", flag, i);
  if (key[0] == ' ' || key[n - 1] == ' ')
    return il_error(IL_ERR_INVALID_ARG, "%s: the key starts or ends with a space (a header value cannot)", flag);
  return IL_OK;
}

bool il_access_key_equal(const char *want, size_t wl, const char *got, size_t gl) {
  if (!wl) return false;
  size_t diff = gl ^ wl;
  for (size_t i = 0; i < gl; i++) {
    /* byte i of want, or byte 0 past its end, chosen without a branch on the lengths */
    const size_t in = (size_t)0 - (size_t)(i < wl);
    diff |= (unsigned char)got[i] ^ (unsigned char)want[i & in];
  }
  return diff == 0;
}
