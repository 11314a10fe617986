/* cli/plan: `inferlab plan`: the device memory a run will need, before it runs. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "lab/plan.h"

static void il__plan_help(void) {
  printf("usage: inferlab plan -m MODEL --device sim:SIZE[,ctx=SIZE][,sim:SIZE...] [any engine option] [--json]\n\n"
         "Predicts, per category, the device memory this exact configuration needs at its peak,\n"
         "by a dry run of the engine's own allocation paths (nothing is computed, no memory is\n"
         "touched); says whether it fits the device and with what margin; and when it does not,\n"
         "the single option changes that make it fit, each checked by a dry run of its own, best\n"
         "first. peak is the smallest sim: device that runs the job (a 3%% smaller one does not).\n"
         "--fit on run and bench applies the first fix by itself.\n"
         "Without --ctx it plans the engine's default context, sized to the device (it says so);\n"
         "run sizes its context for its prompt and -n instead: give --ctx to plan that run.\n"
         "A --device list is planned per device: one column each (layers, categories, peak, fits),\n"
         "each device's peak found with the others large, the split (--split, auto) pinned.\n\noptions:\n");
  printf("  %-24s %s\n", "    --json", "one JSON document (peak_bytes, fits, by_category, fixes, ...)");
  il_cli_print_options(stdout, "model,wtype,device,split,tp,ctx,batch,n-seq,kv-type,kv,kv-block,attn,gpu-layers,place,threads");
  printf("\nexamples:\n"
         "  inferlab plan -m builtin:1b --wtype q4_0 --device sim:2GiB --ctx 4096\n"
         "  inferlab plan -m model.gguf --device sim:8GiB,ctx=300MiB -ngl auto --json\n"
         "  inferlab plan -m builtin:1b --device sim:2GiB,sim:1GiB --split auto --ctx 4096\n"
         "\nexit codes: 0 fits, 1 does not fit (fixes printed), 64 usage (also: no --device),\n"
         "            65 malformed model, 66 model not found, 69 unsupported device\n");
}

int il_cli_plan(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  bool help = false, json = false;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},
      {"json", 0, false, NULL, &json},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("plan", argc, argv, &cfg, NULL, flags, 2, pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__plan_help();
    return IL_EXIT_OK;
  }
  if (!strcmp(cfg.device, "cpu") || !cfg.device[0]) /* the default: plan was not told which device */
    return il_cli_usage_error("plan", "plan sizes a device: give --device sim:SIZE (e.g. sim:8GiB) or cuda[:N] (the "
                                      "host, --device cpu, has no budget to plan against)");
  il_plan p;
  il_status st = il_plan_run(&cfg, &p);
  if (st != IL_OK) return il_cli_fail("plan", st);
  if (json) il_plan_json(&p, stdout);
  else il_plan_print(&p, stdout);
  return p.fits ? IL_EXIT_OK : 1;
}
