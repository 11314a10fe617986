/* core/units: size and rate parsing. */
#include "core/units.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
               {"tib", 1099511627776.0}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcasecmp(end, units[i].s)) {
      *out = v * units[i].m;
      return true;
    }
  return false;
}

/* Letters that other tools read both ways (`ls -h`, docker and Kubernetes: binary; disks and
 * `dd`: decimal), so a bare one is refused instead of guessed. */
const char *il_units_ambiguous(const char *text) {
  if (!text) return NULL;
  size_t n = strlen(text);
  if (n >= 2 && strcmp(text + n - 2, "/s") == 0) n -= 2;
  if (n >= 2 && isdigit((unsigned char)text[n - 2]) && strchr("kKmMgGtT", text[n - 1])) {
    static _Thread_local char why[96];
    char u = (char)toupper((unsigned char)text[n - 1]);
    snprintf(why, sizeof why, "'%c' is ambiguous: write %ciB (powers of 1024) or %cB (powers of 1000)", text[n - 1],
             u, u);
    return why;
  }
  return NULL;
}

const char *il_parse_bytes_why(const char *text) {
  if (!text || !*text) return "empty";
  const char *amb = il_units_ambiguous(text);
  return amb ? amb : "not a size (e.g. 4GiB, 512MiB, 1.5GB, 300000000)";
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
