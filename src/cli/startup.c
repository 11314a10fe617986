/* cli/startup: the startup timeline's outputs that commands share (--startup-json FILE). */
#include <stdio.h>

#include "cli/cli.h"
#include "core/outfile.h"
#include "engine/startup.h"

il_status il_cli_write_startup_json(const char *path, const il_startup *s) {
  il_outfile o;
  IL_TRY(il_outfile_open(&o, "--startup-json", path, NULL, 0)); /* run checked it against the model already */
  il_status st = il_startup_write_json(s, o.f);
  fputc('\n', o.f);
  il_status cst = il_outfile_close(&o);
  return st != IL_OK ? st : cst;
}
