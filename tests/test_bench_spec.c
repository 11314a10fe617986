/* tests/test_bench_spec: `inferlab bench --draft-model` through $IL_CLI on builtin:tiny drafting
 * for itself at temperature 0 (every drafted token accepted): the --json figures against the
 * generate loop's own counts (tokens generated = --gen, accepted = drafted, tokens per target pass
 * = tokens / passes, a fixed length's passes and drafted tokens from the arithmetic of the rule),
 * the tokens/s and TPOT against the generation time bench reports beside them, the speed-up
 * against the no-draft row's mean; the table's columns; the HTML report's; the bad inputs' exit
 * codes (absent draft model 66, another vocabulary 64, --draft without --draft-model, a length
 * out of range, more than one sequence: 64), each message naming the input. */
#include <stdbool.h>
#include <unistd.h>

#include "harness.h"

int main(void) {
  const char *cli = getenv("IL_CLI");
  if (!cli || access(cli, X_OK) != 0) IL_SKIP("IL_CLI is not set to the inferlab binary");
  static char out[1 << 16], cmd[4096], tmp[256];
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  const char *small = "-m builtin:tiny --prompt 8 --gen 12 -r 2 --warmup 0 -t 1 --roofline-ms 0 --no-gpu";

  /* the table: one row per draft length, the no-draft row first */
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model builtin:tiny --draft 2,0,adaptive -q 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
  IL_CHECK_CONTAINS(out, "| draft | accept % | tok/pass | speed-up |");
  IL_CHECK_CONTAINS(out, "| none | - | 1.00 |");
  /* draft 2 over 12 tokens: every pass gives 2 accepted + 1 of the target's: 4 passes */
  IL_CHECK_CONTAINS(out, "| 2 | 100.0 | 3.00 |");
  IL_CHECK_CONTAINS(out, "| adaptive | 100.0 |");
  IL_CHECK_CONTAINS(out, "draft=2: ");
  if (il_test_failed) printf("%s\n", out);

  /* --json and --report: the figures against the counts */
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model builtin:tiny --draft 2,adaptive --json --report %s/s.html -q > %s/s.json",
           cli, small, tmp, tmp);
  IL_CHECK_INT(il_test_run(cmd, NULL, 0), 0);
  if (system("python3 -c '' 2>/dev/null") == 0) {
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys,math\n"
             "d=json.load(open(sys.argv[1])); r=d[\"results\"]\n"
             "assert [x[\"speculative\"][\"draft\"] for x in r]==[-1,2,0], r\n"
             "assert all(x[\"status\"]==\"ok\" and len(x[\"samples\"])==2 for x in r)\n"
             "close=lambda a,b: abs(a-b)<=1e-9*max(abs(a),abs(b))\n"
             "base=r[0][\"summary\"][\"gen_tps\"][\"mean\"]\n"
             "for x in r:\n"
             "  k=x[\"speculative\"][\"draft\"]; assert x[\"speculative\"][\"baseline_result\"]==0\n"
             "  assert len(x[\"step_seconds\"])==24, len(x[\"step_seconds\"])\n"
             "  for s in x[\"samples\"]:\n"
             "    g=s[\"gen_tokens\"]; assert g==12, g\n"
             "    assert 0<=s[\"accepted\"]<=s[\"drafted\"]\n"
             "    assert close(s[\"gen_tps\"], g/s[\"gen_s\"]) and close(s[\"gen_tps_seq\"], s[\"gen_tps\"])\n"
             "    assert close(s[\"tpot_s\"], s[\"gen_s\"]/g)\n"
             "    assert s[\"ttft_s\"]+s[\"gen_s\"]<=s[\"e2e_s\"]+1e-9\n"
             "    assert close(s[\"spec_tokens_per_pass\"], g/s[\"target_passes\"])\n"
             "    assert close(s[\"spec_speedup\"], s[\"gen_tps\"]/base)\n"
             "    if k<0: assert s[\"drafted\"]==0 and s[\"target_passes\"]==g and s[\"spec_accept_rate\"] is None\n"
             "    else: assert s[\"accepted\"]==s[\"drafted\"]>0 and s[\"spec_accept_rate\"]==1 and g==s[\"accepted\"]+s[\"target_passes\"], s\n"
             "    if k==2: assert s[\"target_passes\"]==4 and s[\"drafted\"]==8, s\n"
             "  m=[s[\"spec_speedup\"] for s in x[\"samples\"]]\n"
             "  assert close(x[\"summary\"][\"spec_speedup\"][\"mean\"], sum(m)/len(m))\n"
             "assert close(r[0][\"summary\"][\"spec_speedup\"][\"mean\"], 1.0)\n"
             "h=open(sys.argv[2]).read(); assert \"tokens per target pass\" in h and \"draft=adaptive\" in h\n"
             "' %s/s.json %s/s.html",
             tmp, tmp);
    IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 0);
    if (il_test_failed) printf("%s\n", out);
  }

  /* bad input: named, with run's exit codes */
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model %s/absent.gguf --draft 2 -q 2>&1", cli, small, tmp);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 66);
  IL_CHECK_CONTAINS(out, "--draft-model ");
  IL_CHECK_CONTAINS(out, "absent.gguf");
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model builtin:1b-2l --draft 2 -q 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--draft-model builtin:1b-2l: its vocabulary has 32000 tokens");
  snprintf(cmd, sizeof cmd, "%s bench %s --draft 2 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--draft 2: needs --draft-model");
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model builtin:tiny --draft 17 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--draft 17");
  snprintf(cmd, sizeof cmd, "%s bench %s --draft-model builtin:tiny --parallel 1,2 2>&1", cli, small);
  IL_CHECK_INT(il_test_run(cmd, out, sizeof out), 64);
  IL_CHECK_CONTAINS(out, "--parallel 1, not 2");
  return il_test_finish();
}
