"""tests/python/test_serve_ttft: time to first token in parts, per request (queue, prefill, first decode).

One slot and a 4-token step budget, so a long prompt is spread over several prefill chunks and
concurrent requests wait for the slot. For every request the log line's parts (json and text)
must add up to its ttft_ms (they come from the same clock readings), each part must be >= 0 and
the whole within the client's own wall clock for that request (one-sided: the server's token
exists before the client reads its answer), and a prompt of P tokens needs at least ceil(P / 4)
chunks. /metrics: each per-request histogram counts every request once, and the sum of the three
parts' sums equals the per-request TTFT histogram's sum. No assert depends on how fast the
machine is.
"""
import json
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
STEP = 4
PROMPTS = ["Once upon a time", "The little dog ran into the garden and saw a big red ball under the tree",
           "Hi", "She said that the weather was nice today and they should go to the park after lunch"]


def wait_lines(srv, pred, n, timeout=30):
    deadline = time.time() + timeout
    while True:
        got = [ln for ln in srv.lines() if pred(ln)]
        if len(got) >= n or time.time() > deadline:
            return got
        time.sleep(0.05)


def run_requests(srv):
    """All prompts at once from threads; returns {id: (client wall ms, usage)}."""
    out, lock = {}, threading.Lock()

    def one(i, prompt):
        t0 = time.time()
        status, data, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 3, "seed": i})
        wall = (time.time() - t0) * 1e3
        if status == 200:
            r = json.loads(data)
            with lock:
                out[r["id"]] = (wall, r["usage"])
    th = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(PROMPTS)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return out


def text_fields(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


for fmt in ("json", "text"):
    srv = Server("--log-format", fmt, "--alias", "tiny", "--ignore-eos", "--parallel", "1", "--step-tokens", str(STEP))
    try:
        got = run_requests(srv)
        t.eq(len(got), len(PROMPTS), "%s: every request answered 200" % fmt)
        for rid, (wall, usage) in got.items():
            lines = wait_lines(srv, lambda ln: rid in ln, 1)
            t.eq(len(lines), 1, "%s: one line for %s" % (fmt, rid))
            if not lines:
                continue
            if fmt == "json":
                e = json.loads(lines[0])
                tol = 0.0015 * 4  # four figures printed to 0.001 ms
            else:
                e = {k: (int(v) if k == "prefill_chunks" else float(v)) for k, v in text_fields(lines[0]).items()
                     if k in ("ttft_ms", "queue_ms", "prefill_ms", "first_decode_ms", "prefill_chunks")}
                tol = 0.051 * 4  # to 0.1 ms
            parts = [e.get(k, -1) for k in ("queue_ms", "prefill_ms", "first_decode_ms")]
            ttft = e.get("ttft_ms", -1)
            t.check(all(p >= 0 for p in parts), "%s %s: parts >= 0: %r" % (fmt, rid, parts))
            t.check(abs(sum(parts) - ttft) <= tol, "%s %s: queue + prefill + first decode = ttft (%r vs %r)"
                    % (fmt, rid, parts, ttft))
            t.check(0 <= ttft <= wall, "%s %s: ttft %.3f ms within the client's wall clock %.3f ms" % (fmt, rid, ttft, wall))
            need = math.ceil((usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]) / STEP)
            t.check(e.get("prefill_chunks", -1) >= need, "%s %s: %s chunks for %d prompt tokens in steps of %d"
                    % (fmt, rid, e.get("prefill_chunks"), usage["prompt_tokens"], STEP))
        m = srv.metrics()
        lbl = '{model_name="tiny"}'
        names = ["inferlab_request_queue_seconds", "inferlab_request_prefill_seconds",
                 "inferlab_request_first_decode_seconds", "inferlab_request_time_to_first_token_seconds",
                 "inferlab_request_prefill_time_seconds"]
        for n in names:
            t.eq(m.get(n + "_count" + lbl), len(PROMPTS), "%s: %s counts every request once" % (fmt, n))
            t.eq(m.get(n + '_bucket{model_name="tiny",le="+Inf"}'), len(PROMPTS), "%s: %s +Inf bucket" % (fmt, n))
        s = [m.get(n + "_sum" + lbl, -1) for n in names]
        t.check(abs(s[0] + s[1] + s[2] - s[3]) <= 1e-9 * 8 + 1e-12 * 8, "%s: parts' sums add up to TTFT's: %r" % (fmt, s))
        t.check(abs(s[1] + s[2] - s[4]) <= 1e-9 * 8, "%s: prefill + first decode = admission to first token: %r" % (fmt, s))
        t.check(all(x >= 0 for x in s), "%s: sums >= 0" % fmt)
    finally:
        t.eq(srv.stop(), 0, "%s: exit code" % fmt)

t.finish()
