#!/usr/bin/env python3
"""bench/prefix_bench: time to first token with and without the prefix cache across requests.

Starts `inferlab serve --kv paged` three times on the same model, threads and slots: with the
prefix cache (the default), with --no-prefix-cache (per-slot reuse only), and --kv contiguous
(the server's default layout, per-slot reuse). Each replays the same --requests streaming
/v1/completions (token-id prompts: one of --systems system prompts of --system-tokens tokens,
then a random suffix of 16-64 tokens; --conc client threads, so arrivals interleave) after one
unmeasured warm-up request, and reports TTFT p50/p99, the prompt tokens taken from a cache
(usage cached_tokens, per-slot or prefix cache), and the prefix cache's own counters from
/metrics. Ratios are against --no-prefix-cache in the same run. Standard library only.

usage: prefix_bench.py [--model builtin:tiny] [--threads 2] [--parallel 4] [--ctx 1024]
                       [--requests 64] [--conc 4] [--systems 4] [--system-tokens 384] [--gen 8]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import one, pct  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("IL_CLI", os.path.join(ROOT, "build", "release", "inferlab"))


def start(args, extra):
    cmd = [CLI, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "--parallel", str(args.parallel),
           "--ctx", str(args.ctx), "--ignore-eos", "--log-format", "off"] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    while True:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError("server did not start: " + " ".join(cmd))
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line and port:
            break
    threading.Thread(target=lambda: p.stderr.read(), daemon=True).start()
    return p, "http://127.0.0.1:%d" % port


def metrics(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k.split("{")[0] + ("{" + k.split("{")[1] if 'state="' in k else "")] = float(v)
    return out


def replay(url, prompts, conc, gen):
    lock = threading.Lock()
    samples, cached, errors = [], [], []
    todo = list(range(len(prompts)))

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            body = {"prompt": prompts[i], "max_tokens": gen, "stream": True, "temperature": 0,
                    "stream_options": {"include_usage": True}}
            try:
                s = one(url, body)
                with lock:
                    samples.append(s)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

    ths = [threading.Thread(target=client) for _ in range(conc)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        raise RuntimeError("%d errors, first: %s" % (len(errors), errors[0]))
    ttft = [s[1] - s[0] for s in samples]
    return {"ttft_p50": pct(ttft, .5), "ttft_p99": pct(ttft, .99), "n": len(samples)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--conc", type=int, default=4)
    ap.add_argument("--systems", type=int, default=4)
    ap.add_argument("--system-tokens", type=int, default=384)
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    systems = [[rng.randrange(10, 400) for _ in range(args.system_tokens)] for _ in range(args.systems)]
    prompts = [systems[rng.randrange(args.systems)] + [rng.randrange(10, 400) for _ in range(rng.randrange(16, 65))]
               for _ in range(args.requests)]
    cpu = "unknown CPU"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("prefix_bench: %s, -t %d, --parallel %d, %d requests (%d system prompts of %d tokens + 16-64), %d streams, "
          "gen %d; CPU: %s" % (args.model, args.threads, args.parallel, args.requests, args.systems, args.system_tokens,
                               args.conc, args.gen, cpu))
    configs = [("prefix cache", ["--kv", "paged"]), ("--no-prefix-cache", ["--kv", "paged", "--no-prefix-cache"]),
               ("contiguous", ["--kv", "contiguous"])]
    res = {}
    for name, extra in configs:
        p, url = start(args, extra)
        try:
            one(url, {"prompt": [1, 2, 3], "max_tokens": 2, "stream": True})  # warm-up, unmeasured
            m0 = metrics(url)
            r = replay(url, prompts, args.conc, args.gen)
            m1 = metrics(url)
            q = m1["inferlab_prefix_cache_queries_total"] - m0["inferlab_prefix_cache_queries_total"]
            h = m1["inferlab_prefix_cache_hits_total"] - m0["inferlab_prefix_cache_hits_total"]
            r["reused"] = h / q if q else 0
            r["evictions"] = m1.get("inferlab_prefix_cache_evictions_total", 0)
            res[name] = r
        finally:
            p.terminate()
            p.wait()
    base = res["--no-prefix-cache"]
    print("%-20s %10s %10s %10s %10s %14s %10s" % ("config", "TTFT p50", "TTFT p99", "p50 ratio", "p99 ratio",
                                                  "prompt reused", "evictions"))
    for name, _ in configs:
        r = res[name]
        print("%-20s %8.1fms %8.1fms %10.2f %10.2f %13.1f%% %10d" % (
            name, r["ttft_p50"] * 1e3, r["ttft_p99"] * 1e3, r["ttft_p50"] / base["ttft_p50"],
            r["ttft_p99"] / base["ttft_p99"], 100 * r["reused"], r["evictions"]))
    print("ratios: TTFT / TTFT with --no-prefix-cache, same run (below 1: faster)")


if __name__ == "__main__":
    main()
