/* tests/test_lab_report: the bench writers on synthetic results (a 2 x 2 sweep with one
 * failed combination): the JSON document validates against a schema check written in
 * python3 (json module), the HTML parses as XML (xml.etree) and has one <svg> chart per
 * charted metric plus the percentile and memory charts and nothing external, CSV has one row
 * per combination with a constant column count, JSONL one parseable line per repetition, and
 * the table names every combination. */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "lab/report.h"
#include "memory/mem.h"

static const char *py_check =
    "import csv, json, sys, xml.etree.ElementTree as ET\n"
    "kind, path = sys.argv[1], sys.argv[2]\n"
    "bad = []\n"
    "def need(c, msg):\n"
    "    if not c: bad.append(msg)\n"
    "def num(v): return v is None or isinstance(v, (int, float)) and not isinstance(v, bool)\n"
    "if kind == 'json':\n"
    "    d = json.load(open(path))\n"
    "    need(d.get('schema_version') == 1, 'schema_version')\n"
    "    for k, t in [('tool', str), ('command', str), ('environment', dict), ('options', dict), ('axes', list),\n"
    "                 ('metrics', list), ('results', list)]:\n"
    "        need(isinstance(d.get(k), t), 'top-level %s is not %s' % (k, t.__name__))\n"
    "    keys = [m['key'] for m in d['metrics']]\n"
    "    need(len(keys) >= 10 and all(isinstance(m['label'], str) and m['better'] in (-1, 0, 1) for m in d['metrics']), 'metrics')\n"
    "    need([a['name'] for a in d['axes']] == ['batch', 'threads'], 'axes %r' % d['axes'])\n"
    "    need(len(d['results']) == int(sys.argv[3]), 'results %d' % len(d['results']))\n"
    "    for r in d['results']:\n"
    "        for k in ['label', 'point', 'config', 'status', 'model', 'summary', 'tpot_steps', 'memory_peak_bytes', 'samples', 'step_seconds']:\n"
    "            need(k in r, 'result key %s' % k)\n"
    "        need(set(r['point']) == {'batch', 'threads'}, 'point %r' % r['point'])\n"
    "        need('threads' in r['config'] and 'prompt' in r['config'], 'config')\n"
    "        if r['status'] != 'ok':\n"
    "            need(isinstance(r['error'], str) and r['error'], 'failed result without error')\n"
    "            continue\n"
    "        need(r['error'] is None, 'error on ok result')\n"
    "        for k in keys:\n"
    "            s = r['summary'][k]\n"
    "            need(set(s) == {'n','mean','stddev','min','max','p50','p90','p99'} and all(num(v) for v in s.values()), 'summary %s' % k)\n"
    "        need(len(r['samples']) == int(sys.argv[4]), 'samples')\n"
    "        for s in r['samples']:\n"
    "            need(all(num(s[k]) for k in keys), 'sample values')\n"
    "            need(set(s['memory_peak_bytes']) >= {'weights','kv','activations','workspace'}, 'memory categories')\n"
    "        need(all(isinstance(x, (int, float)) for x in r['step_seconds']), 'steps')\n"
    "elif kind == 'html':\n"
    "    ns = '{http://www.w3.org/2000/svg}'\n"
    "    root = ET.parse(path).getroot()\n"
    "    svgs = list(root.iter(ns + 'svg'))\n"
    "    ids = [s.get('id') for s in svgs]\n"
    "    want = sys.argv[3].split(',')\n"
    "    need(ids == ['chart-' + w for w in want], 'charts %r, want %r' % (ids, want))\n"
    "    for s in svgs:\n"
    "        need(s.find(ns + 'title') is not None, 'chart without title')\n"
    "    text = open(path).read()\n"
    "    need('<script' not in text and '<link' not in text and '<img' not in text and 'url(' not in text, 'external resource')\n"
    "    need(text.count('http') == text.count('http://www.w3.org/'), 'a URL other than a namespace')\n"
    "elif kind == 'htmllabels':\n"
    "    # x labels never overlap (each line at most its slot wide, at 6.5 px a character, the\n"
    "    # width the writer fits them to), and p50/p90/p99 keep their colours across charts\n"
    "    ns = '{http://www.w3.org/2000/svg}'\n"
    "    root = ET.parse(path).getroot()\n"
    "    legends = {}\n"
    "    for s in root.iter(ns + 'svg'):\n"
    "        xs = [t for t in s.iter(ns + 'text') if t.get('class') == 'xt']\n"
    "        pos = sorted(float(t.get('x')) for t in xs)\n"
    "        slot = min([b - a for a, b in zip(pos, pos[1:])] or [1e9])\n"
    "        for t in xs:\n"
    "            lines = [ts.text or '' for ts in t.iter(ns + 'tspan')] or [t.text or '']\n"
    "            for l in lines:\n"
    "                need(len(l) * 6.5 <= slot, '%s: x label line %r is wider than its %.0f px slot' % (s.get('id'), l, slot))\n"
    "            need(t.find(ns + 'title') is not None, 'x label without its whole text as title')\n"
    "        kids = list(s)\n"
    "        for i, k in enumerate(kids):\n"
    "            if k.tag == ns + 'text' and k.get('class') == 'lg' and k.text in ('p50', 'p90', 'p99'):\n"
    "                legends.setdefault(k.text, set()).add(kids[i - 1].get('fill'))\n"
    "    need(sorted(legends) == ['p50', 'p90', 'p99'], 'percentile legends %r' % legends)\n"
    "    need(all(len(v) == 1 for v in legends.values()), 'p50/p90/p99 colours differ between charts: %r' % legends)\n"
    "    need(len(set(min(v) for v in legends.values())) == 3, 'p50/p90/p99 share a colour: %r' % legends)\n"
    "elif kind == 'csv':\n"
    "    rows = list(csv.reader(open(path)))\n"
    "    need(len(rows) == int(sys.argv[3]) + 1, 'rows %d' % len(rows))\n"
    "    need(len(set(len(r) for r in rows)) == 1, 'ragged rows')\n"
    "    need(rows[0][:3] == ['label', 'sweep_batch', 'sweep_threads'], 'header %r' % rows[0][:3])\n"
    "    need('gen_tps_mean' in rows[0] and 'mem_kv_peak_bytes' in rows[0], 'columns')\n"
    "elif kind == 'jsonl':\n"
    "    lines = [json.loads(l) for l in open(path) if l.strip()]\n"
    "    need(len(lines) == int(sys.argv[3]), 'lines %d' % len(lines))\n"
    "    need(all('gen_tps' in l and 'rep' in l for l in lines), 'line keys')\n"
    "for b in bad: print('schema check:', kind, b)\n"
    "sys.exit(1 if bad else 0)\n";

static char tmp[256], script[300];

static int py(const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 %s %s", script, args);
  int rc = system(cmd);
  return WEXITSTATUS(rc);
}

static void fill(il_bench_result *r, int idx, int reps, int gen) {
  r->status = IL_OK;
  snprintf(r->model, sizeof r->model, "synthetic \"model\" <&>");
  snprintf(r->model_type, sizeof r->model_type, "f32");
  r->n_params = 1000000;
  r->threads = 1 + idx % 2;
  r->batch = r->point.cfg.n_seq;
  r->prompt = r->point.prompt;
  r->gen = gen;
  r->samples = il_mem_calloc(IL_MEM_OTHER, sizeof *r->samples * (size_t)reps, "t");
  r->step_s = il_mem_alloc(IL_MEM_OTHER, sizeof *r->step_s * (size_t)(reps * gen), "t");
  r->n_samples = reps;
  r->n_steps = reps * gen;
  for (int i = 0; i < reps; i++) {
    for (int m = 0; m < IL_BM_COUNT; m++) r->samples[i].v[m] = (idx + 1) * (m + 1) * (1 + 0.01 * i);
    r->samples[i].v[IL_BM_GEN_ROOF] = NAN; /* unmeasured metrics must stay valid JSON */
    r->samples[i].mem_peak[IL_MEM_WEIGHTS] = 1 << 20;
    r->samples[i].mem_peak[IL_MEM_KV] = (size_t)(idx + 1) << 16;
  }
  for (int i = 0; i < reps * gen; i++) r->step_s[i] = 0.001 * (1 + i % 5);
  IL_CHECK_OK(il_bench_summarize(r));
}

int main(void) {
  if (system("python3 -c 'import json, xml.etree.ElementTree' 2>/dev/null") != 0) IL_SKIP("python3 is not available");
  snprintf(tmp, sizeof tmp, "%s", il_test_tmpdir());
  snprintf(script, sizeof script, "%s/check.py", tmp);
  FILE *f = fopen(script, "w");
  fputs(py_check, f);
  fclose(f);

  il_sweep_point base;
  il_sweep_point_defaults(&base);
  il_sweep sw;
  il_sweep_init(&sw);
  IL_CHECK_OK(il_sweep_add(&sw, &base, "batch", "1,2", "--batch"));
  IL_CHECK_OK(il_sweep_add(&sw, &base, "threads", "1,2", "--threads"));
  const int n = 4, reps = 3, gen = 4;
  il_bench_result res[4];
  memset(res, 0, sizeof res);
  for (int i = 0; i < n; i++) {
    IL_CHECK_OK(il_sweep_point_at(&sw, &base, (size_t)i, &res[i].point, res[i].label, sizeof res[i].label));
    if (i == 3) {
      res[i].status = IL_ERR_OOM;
      for (int m = 0; m < IL_BM_COUNT; m++) il_stats_summarize(NULL, 0, &res[i].sum[m]);
      snprintf(res[i].error, sizeof res[i].error, "out of memory: kv cache \"x\" <big>");
    } else {
      fill(&res[i], i, reps, gen);
    }
  }
  il_bench_options opt;
  il_bench_options_default(&opt);
  opt.reps = reps;
  opt.roofline_gbps = 10;
  il_env env;
  il_env_collect(&env, "/nonexistent/libnvidia-ml.so.1", false);
  IL_CHECK_CONTAINS(env.gpu, "NVML not loaded");
  il_report rep = {&sw, res, n, &opt, &env, "inferlab bench --batch 1,2 --threads 1,2 \"quoted\""};

  char path[512], args[1024];
  const char *kinds[] = {"json", "html", "csv", "jsonl", "txt"};
  for (int k = 0; k < 5; k++) {
    snprintf(path, sizeof path, "%s/out.%s", tmp, kinds[k]);
    f = fopen(path, "w");
    il_status st = k == 0 ? il_report_json_write(&rep, f)
                   : k == 1 ? il_report_html_write(&rep, f)
                   : k == 2 ? il_report_csv_write(&rep, f)
                   : k == 3 ? il_report_jsonl_write(&rep, NULL, f)
                            : il_report_table_write(&rep, f);
    IL_CHECK_OK(st);
    fclose(f);
  }
  snprintf(args, sizeof args, "json %s/out.json %d %d", tmp, n, reps);
  IL_CHECK_INT(py(args), 0);
  char want[512] = "";
  for (int c = 0; c < il_report_n_chart_metrics; c++) {
    strcat(want, il_bench_metric_info_of(il_report_chart_metrics[c])->key);
    strcat(want, ",");
  }
  strcat(want, "latency-percentiles,ttft-percentiles,memory");
  snprintf(args, sizeof args, "html %s/out.html %s", tmp, want);
  IL_CHECK_INT(py(args), 0);
  snprintf(args, sizeof args, "htmllabels %s/out.html", tmp);
  IL_CHECK_INT(py(args), 0);
  /* eight combinations with long labels: the percentile charts' slots are 71 px wide */
  {
    il_sweep wide;
    il_sweep_init(&wide);
    IL_CHECK_OK(il_sweep_add(&wide, &base, "batch", "1,2,4,8", "--batch"));
    IL_CHECK_OK(il_sweep_add(&wide, &base, "threads", "1,16", "--threads"));
    il_bench_result wres[8];
    memset(wres, 0, sizeof wres);
    for (int i = 0; i < 8; i++) {
      IL_CHECK_OK(il_sweep_point_at(&wide, &base, (size_t)i, &wres[i].point, wres[i].label, sizeof wres[i].label));
      fill(&wres[i], i, reps, gen);
    }
    il_report wrep = {&wide, wres, 8, &opt, &env, "inferlab bench --batch 1,2,4,8 --threads 1,16"};
    /* the table's summary: each combination's context, and no roof named when neither is near */
    for (int i = 0; i < 8; i++) {
      wres[i].n_ctx = 64 * (i + 1);
      wres[i].peak_gops = 100;
      snprintf(wres[i].peak_name, sizeof wres[i].peak_name, "fma");
      wres[i].sum[IL_BM_GEN_ROOF].mean = i == 0 ? 0.10 : 0.90;
      wres[i].sum[IL_BM_GEN_PEAK].mean = 0.05;
      wres[i].sum[IL_BM_PROMPT_ROOF].mean = 0.2;
      wres[i].sum[IL_BM_PROMPT_PEAK].mean = 0.7;
    }
    snprintf(path, sizeof path, "%s/wide.txt", tmp);
    f = fopen(path, "w");
    IL_CHECK_OK(il_report_table_write(&wrep, f));
    fclose(f);
    char *tt = il_test_read_file(path, NULL);
    IL_CHECK(tt && strstr(tt, "ctx 64 to 512 by combination") != NULL);
    IL_CHECK(tt && strstr(tt, "generation below both limits (5% of the peak, 10% of the read bandwidth") != NULL);
    IL_CHECK(tt && strstr(tt, "generation bandwidth-bound (5% of the peak, 90% of the read bandwidth)") != NULL);
    IL_CHECK(tt && strstr(tt, "prompt compute-bound (70% of the peak, 20%") != NULL);
    if (il_test_failed && tt) printf("%s\n", tt);
    free(tt);
    snprintf(path, sizeof path, "%s/wide.html", tmp);
    f = fopen(path, "w");
    IL_CHECK_OK(il_report_html_write(&wrep, f));
    fclose(f);
    snprintf(args, sizeof args, "htmllabels %s/wide.html", tmp);
    IL_CHECK_INT(py(args), 0);
    for (int i = 0; i < 8; i++) il_bench_result_free(&wres[i]);
    il_sweep_free(&wide);
  }
  snprintf(args, sizeof args, "csv %s/out.csv %d", tmp, n);
  IL_CHECK_INT(py(args), 0);
  snprintf(args, sizeof args, "jsonl %s/out.jsonl %d", tmp, 3 * reps);
  IL_CHECK_INT(py(args), 0);
  /* the checker itself must catch a broken document */
  snprintf(path, sizeof path, "%s/broken.json", tmp);
  f = fopen(path, "w");
  fputs("{\"schema_version\": 1, \"results\": []}\n", f);
  fclose(f);
  snprintf(args, sizeof args, "json %s/broken.json %d %d >/dev/null 2>&1", tmp, n, reps);
  IL_CHECK_INT(py(args), 1);
  /* the table: a row per combination, the failure spelled out */
  snprintf(path, sizeof path, "%s/out.txt", tmp);
  f = fopen(path, "r");
  char text[16384];
  size_t len = fread(text, 1, sizeof text - 1, f);
  text[len] = 0;
  fclose(f);
  IL_CHECK_CONTAINS(text, "| TTFT ms |");
  IL_CHECK_CONTAINS(text, "| 2 | 128 | 128 | 2 | error: out of memory");
  IL_CHECK_CONTAINS(text, "batch=1 threads=2: TPOT p50");
  if (il_test_failed) printf("%s\n", text);

  for (int i = 0; i < n; i++) il_bench_result_free(&res[i]);
  il_sweep_free(&sw);
  snprintf(args, sizeof args, "rm -rf %s", tmp);
  if (system(args) != 0) printf("could not remove %s\n", tmp);
  return il_test_finish();
}
