"""tests/python/test_serve_figures: the times and counts serve reports (each response's usage,
/metrics' histograms and counters, uptime) held against what this client measures itself: the
wall time of each request (sent to last byte read), the time since it started the server, the
tokens it asked for (--ignore-eos, max_tokens) and /v1/tokenize's count of its prompts.
Every bound holds on any load: a time the server measures inside a request can only be
shorter than the client's round trip around it. Nothing here asserts a speed.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
started = time.monotonic()
srv = Server("--parallel", "1", "--alias", "tiny", "--ignore-eos")
lbl = '{model_name="tiny"}'
try:
    n, max_tokens = 4, 8
    walls, prompts, completions = [], 0, 0
    for i in range(n):
        prompt = "Hello number %d" % i
        status, data, _ = srv.post("/v1/tokenize", {"prompt": prompt})
        t.eq(status, 200, "tokenize")
        counted = json.loads(data)["count"]
        t0 = time.monotonic()
        status, data, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "seed": i})
        walls.append(time.monotonic() - t0)
        t.eq(status, 200, "completion")
        u = json.loads(data)["usage"]
        t.eq(u["completion_tokens"], max_tokens, "usage: the tokens asked for")
        t.eq(u["prompt_tokens"], counted, "usage: the prompt's tokens as /v1/tokenize counts them")
        t.eq(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"], "usage: total")
        prompts += u["prompt_tokens"]
        completions += u["completion_tokens"]
    m = srv.metrics()
    since_start = time.monotonic() - started
    t.eq(m.get("inferlab_generation_tokens_total" + lbl), completions, "generated tokens: the usage's sum")
    t.eq(m.get("inferlab_prompt_tokens_total" + lbl), prompts, "prompt tokens: the usage's sum")
    e2e = m.get("inferlab_e2e_request_latency_seconds_sum" + lbl, -1)
    ttft = m.get("inferlab_time_to_first_token_seconds_sum" + lbl, -1)
    tpot = m.get("inferlab_time_per_output_token_seconds_sum" + lbl, -1)
    queue = m.get("inferlab_request_queue_time_seconds_sum" + lbl, -1)
    t.eq(m.get("inferlab_e2e_request_latency_seconds_count" + lbl), n, "one e2e sample per request")
    t.check(0 < e2e <= sum(walls), "e2e latency sum %.4f s within the clients' %.4f s" % (e2e, sum(walls)))
    t.check(0 < ttft <= e2e, "TTFT sum %.4f s within e2e %.4f s" % (ttft, e2e))
    t.check(0 <= queue <= ttft, "queue time sum %.4f s within TTFT %.4f s" % (queue, ttft))
    # the tokens after the first come max_tokens - 1 gaps apart, all inside e2e
    t.check(0 < tpot * (max_tokens - 1) <= e2e - ttft + 1e-6, "TPOT x gaps %.4f s within e2e - TTFT %.4f s"
            % (tpot * (max_tokens - 1), e2e - ttft))
    up = m.get("inferlab_uptime_seconds", -1)
    t.check(0 < up <= since_start, "uptime %.3f s within the %.3f s since the test started it" % (up, since_start))
finally:
    srv.stop()
t.finish()
