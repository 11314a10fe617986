/* core/units: size and rate parsing. */
#include "core/units.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool il__parse_scaled(const char *text, size_t len, double *out) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return false;
  memcpy(buf, text, len);
  buf[len] = 0;
  if (!isdigit((unsigned char)buf[0]) && buf[0] != '.') return false;
  char *end = NULL;
  double v = strtod(buf, &end);
  if (end == buf || !isfinite(v) || v < 0) return false;
  static const struct {
    const char *s;
    double m;
  } units[] = {{"", 1},        {"b", 1},          {"kib", 1024.0},  {"mib", 1048576.0}, {"gib", 1073741824.0},
               {"tib", 1099511627776.0}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
               {"k", 1e3},     {"m", 1e6},        {"g", 1e9},       {"t", 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcasecmp(end, units[i].s)) {
      *out = v * units[i].m;
      return true;
    }
  return false;
}

bool il_parse_bytes(const char *text, size_t *out) {
  double v;
  if (!text || !il__parse_scaled(text, strlen(text), &v) || v >= 18446744073709551615.0) return false;
  if (v != floor(v)) v = floor(v);
  *out = (size_t)v;
  return true;
}

bool il_parse_rate(const char *text, double *bytes_per_s) {
  size_t n = text ? strlen(text) : 0;
  if (n < 3 || strcmp(text + n - 2, "/s")) return false;
  double v;
  if (!il__parse_scaled(text, n - 2, &v) || v <= 0) return false;
  *bytes_per_s = v;
  return true;
}
