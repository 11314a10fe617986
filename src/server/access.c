/* server/access: the API key, Host and Origin rules. */
#include "server/access.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "memory/mem.h"

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

/* ---- Host and Origin ---- */

#define IL__MAX_RULES 64

struct il_access {
  char bound[80];           /* the listen address, as a Host names it: 127.0.0.1, [::1] */
  bool wildcard;            /* listening on every interface: any IP literal is this server */
  bool any_host, any_origin;
  char *hosts[IL__MAX_RULES];   /* --allowed-hosts entries, lower case */
  int n_hosts;
  char *origins[IL__MAX_RULES]; /* --cors-origins entries, lower case, no trailing '/' */
  int n_origins;
  char note[160];
};

static char *il__dup_lower(const char *s, size_t n) {
  char *d = il_mem_alloc(IL_MEM_SERVER, n + 1, "access rule");
  if (!d) return NULL;
  for (size_t i = 0; i < n; i++) d[i] = (char)tolower((unsigned char)s[i]);
  d[n] = 0;
  return d;
}

/* Splits a comma-separated list into lower-case entries (spaces around commas ignored). */
static il_status il__rules(const char *list, const char *flag, char **out, int *n, bool *any) {
  for (const char *p = list; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    size_t len = (size_t)(e - p);
    while (len && p[len - 1] == ' ') len--;
    if (len) {
      if (len == 1 && *p == '*') {
        *any = true;
      } else {
        if (*n == IL__MAX_RULES) return il_error(IL_ERR_INVALID_ARG, "%s: more than %d entries", flag, IL__MAX_RULES);
        for (size_t i = 0; i < len; i++)
          if ((unsigned char)p[i] <= 0x20 || p[i] == 0x7f)
            return il_error(IL_ERR_INVALID_ARG, "%s: '%.*s' has a space or control character", flag, (int)len, p);
        if (len > 1 && p[len - 1] == '/') len--; /* "http://a.example/" is "http://a.example" */
        if (!(out[*n] = il__dup_lower(p, len))) return IL_ERR_OOM;
        (*n)++;
      }
    }
    p = e;
  }
  return IL_OK;
}

il_status il_access_new(const char *host, const char *allowed_hosts, const char *cors_origins, il_access **out) {
  *out = NULL;
  il_access *a = il_mem_calloc(IL_MEM_SERVER, sizeof *a, "access rules");
  if (!a) return IL_ERR_OOM;
  struct in6_addr a6;
  const bool v6 = inet_pton(AF_INET6, host, &a6) == 1;
  snprintf(a->bound, sizeof a->bound, v6 ? "[%s]" : "%s", host);
  for (char *c = a->bound; *c; c++) *c = (char)tolower((unsigned char)*c);
  a->wildcard = !strcmp(host, "0.0.0.0") || (v6 && IN6_IS_ADDR_UNSPECIFIED(&a6));
  il_status st = il__rules(allowed_hosts, "--allowed-hosts", a->hosts, &a->n_hosts, &a->any_host);
  if (st == IL_OK) st = il__rules(cors_origins, "--cors-origins", a->origins, &a->n_origins, &a->any_origin);
  for (int i = 0; st == IL_OK && i < a->n_origins; i++)
    if (strncmp(a->origins[i], "http://", 7) && strncmp(a->origins[i], "https://", 8))
      st = il_error(IL_ERR_INVALID_ARG, "--cors-origins: '%s' is not an origin (scheme://host[:port], or *)",
                    a->origins[i]);
  if (st != IL_OK) {
    il_access_free(a);
    return st;
  }
  snprintf(a->note, sizeof a->note, "localhost, 127.0.0.1, [::1]%s%s%s", strcmp(a->bound, "127.0.0.1") ? ", " : "",
           strcmp(a->bound, "127.0.0.1") ? (a->wildcard ? "any IP address" : a->bound) : "",
           a->n_hosts ? " and --allowed-hosts" : "");
  *out = a;
  return IL_OK;
}

void il_access_free(il_access *a) {
  if (!a) return;
  for (int i = 0; i < a->n_hosts; i++) il_mem_free(a->hosts[i]);
  for (int i = 0; i < a->n_origins; i++) il_mem_free(a->origins[i]);
  il_mem_free(a);
}

const char *il_access_hosts_note(const il_access *a) { return a->note; }

/* The host part of a Host value ("[::1]:8080" -> "[::1]", "a.example:80" -> "a.example"),
 * lower case, without a trailing dot; false when it does not fit or is malformed. */
static bool il__host_name(const char *h, char *out, size_t cap) {
  size_t n;
  if (h[0] == '[') {
    const char *e = strchr(h, ']');
    if (!e) return false;
    n = (size_t)(e - h) + 1;
    if (e[1] && e[1] != ':') return false;
  } else {
    const char *e = strchr(h, ':');
    n = e ? (size_t)(e - h) : strlen(h);
  }
  if (!n || n >= cap) return false;
  for (size_t i = 0; i < n; i++) out[i] = (char)tolower((unsigned char)h[i]);
  if (n > 1 && out[n - 1] == '.') n--;
  out[n] = 0;
  return true;
}

static bool il__is_ip(const char *name) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, name, buf) == 1) return true;
  size_t n = strlen(name);
  if (n < 3 || name[0] != '[' || name[n - 1] != ']') return false;
  char inner[64];
  if (n - 2 >= sizeof inner) return false;
  memcpy(inner, name + 1, n - 2);
  inner[n - 2] = 0;
  return inet_pton(AF_INET6, inner, buf) == 1;
}

bool il_access_host_ok(const il_access *a, const char *host) {
  if (!host) return true;
  if (a->any_host) return true;
  char name[256];
  if (!il__host_name(host, name, sizeof name)) return false;
  if (!strcmp(name, "localhost") || !strcmp(name, "127.0.0.1") || !strcmp(name, "[::1]") || !strcmp(name, a->bound))
    return true;
  if (a->wildcard && il__is_ip(name)) return true;
  for (int i = 0; i < a->n_hosts; i++) {
    const char *r = a->hosts[i];
    if (r[0] == '.') { /* the domain and its subdomains */
      size_t rl = strlen(r), nl = strlen(name);
      if (!strcmp(name, r + 1) || (nl > rl && !strcmp(name + nl - rl, r))) return true;
    } else if (!strcmp(name, r)) {
      return true;
    }
  }
  return false;
}

bool il_access_origin_ok(const il_access *a, const char *origin, const char *host, bool *cors) {
  *cors = false;
  if (!origin) return true;
  char o[512];
  size_t n = strlen(origin);
  if (n >= sizeof o) return false;
  for (size_t i = 0; i <= n; i++) o[i] = (char)tolower((unsigned char)origin[i]);
  /* the server's own page: the origin's authority is the Host the request was sent to */
  const char *auth = !strncmp(o, "http://", 7) ? o + 7 : !strncmp(o, "https://", 8) ? o + 8 : NULL;
  if (auth && host && !strchr(auth, '/')) {
    char h[512];
    size_t hl = strlen(host);
    if (hl < sizeof h) {
      for (size_t i = 0; i <= hl; i++) h[i] = (char)tolower((unsigned char)host[i]);
      if (!strcmp(auth, h)) return true;
    }
  }
  for (int i = 0; i < a->n_origins; i++)
    if (!strcmp(o, a->origins[i])) return *cors = true;
  if (a->any_origin) return *cors = true;
  return false;
}
