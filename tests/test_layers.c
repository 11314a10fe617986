/* tests/test_layers: every #include "LAYER/..." under src/ points down the layers or stays in
 * its own, as ../shared/design.md ("Layers") orders them, bottom first:
 *
 *   core < memory < sys < backend < format < model < engine < probe < lab < server < cli
 *
 * A file's layer is its first folder under src/. An include without a folder (a sibling, a
 * generated il_*.h) or of "inferlab.h" (the public header, which core itself includes) names no
 * layer and is always allowed. A violation is listed as FILE:LINE: the include and both layers.
 * The allowlist below names the violations kept on purpose, each with its reason; an entry that
 * no longer matches anything fails too, so the list cannot go stale.
 *
 * The scanner is checked first on made-up lines (one up, one down, one sideways), so a scanner
 * that finds nothing cannot pass unnoticed.
 */
#include "harness.h"

#include <dirent.h>
#include <sys/stat.h>

static const char *const layers[] = {"core", "memory", "sys", "backend", "format", "model",
                                      "engine", "probe", "lab", "server", "cli"};
enum { N_LAYERS = (int)(sizeof layers / sizeof layers[0]) };

/* "src/FILE" "included/header.h": kept on purpose, with why. Empty: the tree has none. */
static const struct {
  const char *file, *include, *why;
} allow[] = {
    {NULL, NULL, NULL},
};
enum { N_ALLOW = (int)(sizeof allow / sizeof allow[0]) };
static int allow_used[N_ALLOW];

/* The rank of the layer `name` starts with (up to '/' or end), or -1 when it is none. */
static int layer_rank(const char *name) {
  size_t n = strcspn(name, "/");
  for (int i = 0; i < N_LAYERS; i++)
    if (strlen(layers[i]) == n && strncmp(layers[i], name, n) == 0) return i;
  return -1;
}

/* The header a line #includes in quotes, copied into out; 0 when the line is no such include. */
static int quoted_include(const char *line, char *out, size_t cap) {
  const char *p = line;
  while (*p == ' ' || *p == '\t') p++;
  if (*p++ != '#') return 0;
  while (*p == ' ' || *p == '\t') p++;
  if (strncmp(p, "include", 7) != 0) return 0;
  p += 7;
  while (*p == ' ' || *p == '\t') p++;
  if (*p++ != '"') return 0;
  const char *end = strchr(p, '"');
  if (!end || (size_t)(end - p) >= cap) return 0;
  memcpy(out, p, (size_t)(end - p));
  out[end - p] = 0;
  return 1;
}

/* 1 when `line` of a file in layer `from` includes a header of a higher layer (names it in msg). */
static int points_up(int from, const char *line, char *msg, size_t cap) {
  char inc[512];
  if (!quoted_include(line, inc, sizeof inc) || !strchr(inc, '/')) return 0;
  int to = layer_rank(inc);
  if (to < 0 || to <= from) return 0;
  snprintf(msg, cap, "\"%s\": %s includes %s, a higher layer", inc, layers[from], layers[to]);
  return 1;
}

static int n_files, n_includes, n_violations;

static void scan_file(const char *root, const char *rel) {
  int from = layer_rank(rel);
  if (from < 0) return; /* not inside a layer folder */
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", root, rel) >= (int)sizeof path) {
    il_test_failed++;
    fprintf(stderr, "FAILED: path too long: %s/%s\n", root, rel);
    return;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    il_test_failed++;
    fprintf(stderr, "FAILED: cannot read %s\n", path);
    return;
  }
  n_files++;
  char line[1024], inc[512], msg[700];
  for (int ln = 1; fgets(line, sizeof line, f); ln++) {
    if (!quoted_include(line, inc, sizeof inc)) continue;
    n_includes++;
    if (!points_up(from, line, msg, sizeof msg)) continue;
    int allowed = 0;
    for (int a = 0; a < N_ALLOW; a++)
      if (allow[a].file && !strcmp(allow[a].file, rel) && !strcmp(allow[a].include, inc)) {
        allow_used[a] = allowed = 1;
      }
    if (allowed) continue;
    n_violations++;
    fprintf(stderr, "src/%s:%d: %s\n", rel, ln, msg);
  }
  fclose(f);
}

static int is_source(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".cu") || !strcmp(dot, ".cuh") ||
                 !strcmp(dot, ".cpp"));
}

static void scan_dir(const char *root, const char *rel) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", root, rel) >= (int)sizeof path) return;
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[4096], full[8192];
    if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof sub ||
        snprintf(full, sizeof full, "%s/%s", root, sub) >= (int)sizeof full) {
      il_test_failed++;
      fprintf(stderr, "FAILED: path too long under %s/%s\n", root, rel);
      continue;
    }
    struct stat st;
    if (stat(full, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) scan_dir(root, sub);
    else if (S_ISREG(st.st_mode) && is_source(e->d_name)) scan_file(root, sub);
  }
  closedir(d);
}

static void test_scanner(void) {
  char msg[700];
  IL_CHECK(points_up(layer_rank("engine"), "#include \"lab/report.h\"\n", msg, sizeof msg));
  IL_CHECK_CONTAINS(msg, "engine includes lab");
  IL_CHECK(points_up(layer_rank("sys"), "  #  include \"backend/backend.h\"", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("lab"), "#include \"engine/engine.h\"", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("model"), "#include \"model/llama.h\"", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("core"), "#include \"inferlab.h\"", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("core"), "#include \"il_build_info.h\"", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("core"), "#include <sys/stat.h>", msg, sizeof msg));
  IL_CHECK(!points_up(layer_rank("core"), "// #include \"cli/x.h\" in a comment", msg, sizeof msg));
  IL_CHECK_INT(layer_rank("core/status.h"), 0);
  IL_CHECK_INT(layer_rank("cli"), N_LAYERS - 1);
  IL_CHECK_INT(layer_rank("coreX/a.h"), -1);
}

int main(void) {
  test_scanner();
  const char *src = getenv("IL_SRC");
  if (!src) IL_SKIP("IL_SRC not set (CTest sets it to the source tree)");
  char root[4096];
  snprintf(root, sizeof root, "%s/src", src);
  scan_dir(root, "");
  printf("%d files, %d quoted includes, %d pointing up a layer\n", n_files, n_includes, n_violations);
  IL_CHECK(n_files > 100); /* the walk reached the tree */
  IL_CHECK_INT(n_violations, 0);
  for (int a = 0; a < N_ALLOW; a++)
    if (allow[a].file && !allow_used[a]) {
      il_test_failed++;
      fprintf(stderr, "FAILED: allowlist entry src/%s -> %s matches no include any more: remove it\n",
              allow[a].file, allow[a].include);
    }
  return il_test_finish();
}
