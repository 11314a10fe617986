#!/usr/bin/env python3
"""bench/serve_bench: load an OpenAI-compatible server with C concurrent streams and report
aggregate generated tokens/s, p50/p99 time to first token and time per output token.

For each concurrency C: C client threads each send --requests-per-client streaming
/v1/completions requests one after another (prompt: --prompt-words distinct words, so no two
requests share a prefix; --gen tokens, end of generation suppressed: --ignore-eos on inferlab,
a -100 logit bias on the EOS token for llama.cpp). TTFT is send -> first streamed chunk with a
choice, TPOT (last such chunk - first) / (tokens - 1), tokens/s all generated tokens / wall time of the
level, after one unmeasured warm-up request. Standard library only (http.client), so the client costs the same for every server.

usage: serve_bench.py --target inferlab=http://127.0.0.1:18080 [--target llama.cpp=http://127.0.0.1:18081,eos=2]
                      [--conc 1,4,16,32] [--gen 64] [--prompt-words 48] [--requests-per-client 2]
                      [--reps 3] [--json OUT]
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse


def one(url, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    first = last = None
    n = 0
    usage = None
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            ev = ev.strip()
            if not ev.startswith(b"data:"):
                continue
            data = ev[5:].strip()
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"]["completion_tokens"]
            if not j.get("choices"):
                continue
            now = time.perf_counter()
            if first is None:
                first = now
            last = now
            n += 1
    c.close()
    # tokens: the usage chunk when the server sends one; else max_tokens, which every request
    # reaches because end of generation is suppressed (chunks are not tokens: a token that is
    # half a UTF-8 character streams no text)
    return t0, first, last, usage if usage is not None else body["max_tokens"], n


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


_nonce = [0]


def level(url, conc, gen, words, per_client, eos_bias, model):
    # every request of every level gets a prompt seen nowhere before: no server finds a prefix
    # of it in its cache (inferlab keeps finished prompts in their slots)
    _nonce[0] += 1
    nonce = _nonce[0]
    lock = threading.Lock()
    samples = []
    errors = []

    def client(ci):
        for k in range(per_client):
            i = ci * per_client + k
            prompt = " ".join("w%d_%d_%d" % (nonce, i, j) for j in range(words))
            body = {"prompt": prompt, "max_tokens": gen, "stream": True, "temperature": 0.8, "seed": i,
                    "stream_options": {"include_usage": True}}
            if model:
                body["model"] = model
            if eos_bias is not None:
                body["logit_bias"] = {str(eos_bias): -100}
            try:
                s = one(url, body)
                with lock:
                    samples.append(s)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

    ths = [threading.Thread(target=client, args=(c,)) for c in range(conc)]
    t0 = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("%d errors, first: %s" % (len(errors), errors[0]))
    toks = sum(s[3] for s in samples)
    chunks = sum(s[4] for s in samples)
    ttft = [s[1] - s[0] for s in samples]
    tpot = [(s[2] - s[1]) / (s[3] - 1) for s in samples if s[3] > 1]
    return {"conc": conc, "tok_s": toks / wall, "tokens": toks, "chunks": chunks, "wall": wall, "ttft_p50": pct(ttft, .5),
            "ttft_p99": pct(ttft, .99), "tpot_p50": pct(tpot, .5), "tpot_p99": pct(tpot, .99)}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", action="append", required=True,
                    help="NAME=URL[,eos=ID]; several are interleaved level by level")
    ap.add_argument("--model", default=None)
    ap.add_argument("--conc", default="1,4,16,32")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=48)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    targets = []
    for t in a.target:
        name, rest = t.split("=", 1)
        url, _, opt = rest.partition(",")
        eos = int(opt.split("=", 1)[1]) if opt.startswith("eos=") else None
        targets.append((name, url, eos))
    concs = [int(x) for x in a.conc.split(",")]
    # one request first, not measured: the first request pays one-time costs on either server
    for name, url, eos in targets:
        level(url, 1, a.gen, a.prompt_words, 1, eos, a.model)
    rows = []
    # interleaved: every repetition runs each level on each server back to back, so a change in
    # the machine's load hits both alike; the table gives the median over repetitions
    for rep in range(a.reps):
        for c in concs:
            for name, url, eos in targets:
                r = level(url, c, a.gen, a.prompt_words, a.requests_per_client, eos, a.model)
                r["name"] = name
                r["rep"] = rep
                rows.append(r)
                print("%-10s rep %d conc %3d: %8.1f tok/s  TTFT p50 %8.1f ms p99 %8.1f ms  TPOT p50 %7.2f ms "
                      "p99 %7.2f ms  (%d tokens, %d chunks)"
                      % (name, rep, c, r["tok_s"], r["ttft_p50"] * 1e3, r["ttft_p99"] * 1e3, r["tpot_p50"] * 1e3,
                         r["tpot_p99"] * 1e3, r["tokens"], r["chunks"]), flush=True)
    print("\nmedian of %d repetition(s):\n" % a.reps)
    print("| streams | server | tokens/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 |")
    print("|---|---|---|---|---|---|---|")
    med = {}
    for c in concs:
        for name, _, _ in targets:
            sel = [r for r in rows if r["conc"] == c and r["name"] == name]
            m = {k: median([r[k] for r in sel]) for k in ("tok_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")}
            med[(c, name)] = m
            print("| %d | %s | %.1f | %.1f ms | %.1f ms | %.2f ms | %.2f ms |" % (
                c, name, m["tok_s"], m["ttft_p50"] * 1e3, m["ttft_p99"] * 1e3, m["tpot_p50"] * 1e3,
                m["tpot_p99"] * 1e3))
    if len(targets) == 2:
        a0, b0 = targets[0][0], targets[1][0]
        print("\n%s / %s, tokens/s: %s" % (a0, b0, ", ".join(
            "%d streams %.2fx" % (c, med[(c, a0)]["tok_s"] / med[(c, b0)]["tok_s"]) for c in concs)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
