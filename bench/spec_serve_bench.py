#!/usr/bin/env python3
"""bench/spec_serve_bench: speculative decoding in `inferlab serve` at several concurrencies, as a
ratio against the same server without a draft measured in the same run.

Starts `inferlab serve MODEL` without a draft and keeps it; then, for each --drafts entry in turn,
starts `inferlab serve MODEL --draft-model DRAFT` beside it (same threads, slots and context) and
runs bench/serve_bench.py's load (C client threads, streaming /v1/completions, distinct prompts,
temperature 0.8, end of generation suppressed) at each --conc, the draft server and the plain one
back to back per level, so a change in the machine's load hits both alike. Per level it reports
both servers' generated tokens/s and TPOT p50, the ratio draft/plain, and from the draft server's
/metrics (the difference over the level): the acceptance rate, the tokens each verification gave
a choice, and where its time went: the target's passes (inferlab_engine_busy_seconds_total, the
verification) and the draft's (inferlab_spec_draft_seconds_total), next to the plain server's
passes for the same tokens. Standard library only.

usage: spec_serve_bench.py [--model builtin:1b] [--drafts derived=builtin:1b-2l,unrelated=builtin:1b-other]
                           [--conc 1,4,16] [--gen 16] [--prompt-words 4] [--requests-per-client 1]
                           [--threads 2] [--ctx 128] [--draft N] [--json OUT]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prefix_bench import start  # noqa: E402
from serve_bench import level  # noqa: E402
import urllib.request  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def counters(url):
    want = ("inferlab_spec_draft_tokens_total", "inferlab_spec_accepted_tokens_total",
            "inferlab_spec_verifications_total", "inferlab_spec_draft_seconds_total",
            "inferlab_engine_busy_seconds_total", "inferlab_generation_tokens_total")
    out = dict.fromkeys(want, 0.0)
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("#") or not line:
            continue
        k, v = line.rsplit(" ", 1)
        name = k.split("{")[0]
        if name in out:
            out[name] = float(v)
    return out


def measured(url, conc, a):
    c0 = counters(url)
    r = level(url, conc, a.gen, a.prompt_words, a.requests_per_client, None, None)
    c1 = counters(url)
    r.update({k: c1[k] - c0[k] for k in c0})
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:1b")
    ap.add_argument("--drafts", default="derived=builtin:1b-2l,unrelated=builtin:1b-other")
    ap.add_argument("--conc", default="1,4,16")
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--prompt-words", type=int, default=4)
    ap.add_argument("--requests-per-client", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--draft", type=int, default=None, help="--draft N for the draft servers (default: adaptive)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    concs = [int(x) for x in a.conc.split(",")]

    class Opts:
        model = a.model
        threads = a.threads
        parallel = max(concs)
        ctx = a.ctx

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print("cpu: %s (%d CPUs); model %s, %d threads, --parallel %d, %d tokens per request, temperature 0.8"
          % (cpu, os.cpu_count(), a.model, a.threads, max(concs), a.gen), flush=True)
    plain, plain_url = start(Opts, [])
    rows = []
    try:
        level(plain_url, 1, a.gen, a.prompt_words, 1, None, None)  # warm-up, not measured
        for spec in a.drafts.split(","):
            name, draft = spec.split("=", 1)
            extra = ["--draft-model", draft] + (["--draft", str(a.draft)] if a.draft else [])
            srv, url = start(Opts, extra)
            try:
                level(url, 1, a.gen, a.prompt_words, 1, None, None)
                for c in concs:
                    d = measured(url, c, a)
                    p = measured(plain_url, c, a)
                    row = {"draft_name": name, "draft": draft, "conc": c, "spec": d, "plain": p}
                    rows.append(row)
                    acc = d["inferlab_spec_accepted_tokens_total"] / d["inferlab_spec_draft_tokens_total"] \
                        if d["inferlab_spec_draft_tokens_total"] else 0.0
                    per_ver = (d["inferlab_spec_accepted_tokens_total"] + d["inferlab_spec_verifications_total"]) \
                        / d["inferlab_spec_verifications_total"] if d["inferlab_spec_verifications_total"] else 0.0
                    row["acceptance"], row["tokens_per_verification"] = acc, per_ver
                    row["ratio"] = d["tok_s"] / p["tok_s"]
                    print("%-10s %2d streams: draft %7.2f tok/s, plain %7.2f tok/s, %.2fx; acceptance %.3f, "
                          "%.2f tokens per verification; per token: target passes %.1f ms + draft %.1f ms, "
                          "plain passes %.1f ms"
                          % (name, c, d["tok_s"], p["tok_s"], row["ratio"], acc, per_ver,
                             1e3 * d["inferlab_engine_busy_seconds_total"] / d["tokens"],
                             1e3 * d["inferlab_spec_draft_seconds_total"] / d["tokens"],
                             1e3 * p["inferlab_engine_busy_seconds_total"] / p["tokens"]), flush=True)
            finally:
                srv.terminate()
                srv.wait()
    finally:
        plain.terminate()
        plain.wait()
    print("\n| draft | streams | acceptance | tokens / verification | tokens/s with draft | tokens/s without "
          "| ratio | TPOT p50 with / without | ms per token: target passes + draft = all, without |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d, p = r["spec"], r["plain"]
        tb = 1e3 * d["inferlab_engine_busy_seconds_total"] / d["tokens"]
        db = 1e3 * d["inferlab_spec_draft_seconds_total"] / d["tokens"]
        print("| %s (%s) | %d | %.1f%% | %.2f | %.2f | %.2f | %.2fx | %.1f / %.1f ms | %.1f + %.1f = %.1f, %.1f |"
              % (r["draft_name"], r["draft"], r["conc"], 100 * r["acceptance"], r["tokens_per_verification"],
                 d["tok_s"], p["tok_s"], r["ratio"], 1e3 * d["tpot_p50"], 1e3 * p["tpot_p50"], tb, db, tb + db,
                 1e3 * p["inferlab_engine_busy_seconds_total"] / p["tokens"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
