/* tests/test_engine_private: struct il_engine stays private to src/engine.
 *
 * Every source file under src/, bench/ and tests/ is read: "engine/engine_impl.h" may be
 * included only by the files of src/engine and the white-box engine tests listed below; everyone else
 * reads an engine through inferlab.h's accessors and il_engine_snapshot_get. And the include
 * circle that was: engine.h must not include request.h, config.h must not include request.h.
 * Skips (77) without the source tree (IL_SRC unset).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char *const white_box[] = {"tests/test_kv_engine.c", "tests/test_offload.c", "tests/test_precision.c",
                                        "tests/test_everyday_units.c", "tests/test_prefix_cache.c",
                                        "tests/test_multi_device.c", "tests/test_cuda_graph.c", "tests/test_plan_devices.c",
                                        "tests/test_tp.c",
                                        NULL};

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static int n_files, n_bad;

static void scan(const char *root, const char *rel) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s/%s", root, rel);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
    size_t l = strlen(e->d_name);
    const bool src = (l > 2 && (!strcmp(e->d_name + l - 2, ".c") || !strcmp(e->d_name + l - 2, ".h"))) ||
                     (l > 3 && (!strcmp(e->d_name + l - 3, ".cu") || !strcmp(e->d_name + l - 4, ".cuh")));
    if (!src) {
      if (!strchr(e->d_name, '.')) scan(root, sub);
      continue;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, sub);
    char *text = slurp(path);
    if (!text) continue;
    n_files++;
    if (strstr(text, "#include \"engine/engine_impl.h\"")) {
      bool ok = !strncmp(sub, "src/engine/", 11);
      for (int i = 0; white_box[i]; i++) ok |= !strcmp(sub, white_box[i]);
      if (!ok) {
        printf("%s includes engine/engine_impl.h: read the engine through il_engine_snapshot_get\n", sub);
        n_bad++;
      }
    }
    if ((!strcmp(sub, "src/engine/engine.h") || !strcmp(sub, "src/engine/config.h")) &&
        strstr(text, "#include \"engine/request.h\"")) {
      printf("%s includes engine/request.h (the engine/request circle)\n", sub);
      n_bad++;
    }
    free(text);
  }
  closedir(d);
}

int main(void) {
  const char *root = getenv("IL_SRC");
  if (!root) {
    printf("SKIP: IL_SRC not set (the source tree is needed)\n");
    return 77;
  }
  scan(root, "src");
  scan(root, "bench");
  scan(root, "tests");
  printf("%d source files read; %d outside src/engine include the engine's private header\n", n_files, n_bad);
  IL_CHECK(n_files > 200);
  IL_CHECK_INT(n_bad, 0);
  return il_test_finish();
}
