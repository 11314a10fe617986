"""tests/python/test_serve_spec: speculative decoding in serve's continuous batching
(--draft-model). Greedy answers with a draft equal those without, token for token, for 6
concurrent requests on 4 slots, with a derived draft (builtin:tiny-2l: high acceptance) and an
unrelated one (builtin:tiny-other: low), on the contiguous and the paged KV cache (the paged one
with its prefix cache, requests sharing a prompt); /metrics' drafted and accepted counters equal
the sums of the per-request log lines, vLLM's names beside; a draft with another vocabulary is
refused; --draft without --draft-model is a usage error (64).
"""
import json
import os
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, need_server  # noqa: E402

cli = need_server()

t = Checks()
prompts = ["Once upon a time", "The cat", "Once upon a time", "Hello world, this is", "A B C", "Once upon a"]


def answers(srv):
    out = [None] * len(prompts)

    def one(i):
        st, data, _ = srv.post("/v1/completions", {"prompt": prompts[i], "max_tokens": 24, "temperature": 0,
                                                   "ignore_eos": True})
        out[i] = (st, json.loads(data)["choices"][0]["text"] if st == 200 else data)
    th = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for x in th:
        x.start()
    for x in th:
        x.join()
    return out


for kv in [[], ["--kv", "paged", "--kv-block", "8"]]:
    base = Server("--parallel", "4", *kv)
    try:
        want = answers(base)
    finally:
        base.stop()
    for draft in [["--draft-model", "builtin:tiny-2l"], ["--draft-model", "builtin:tiny-other", "--draft", "3"]]:
        srv = Server("--parallel", "4", *kv, *draft)
        try:
            got = answers(srv)
            t.eq(got, want, "greedy answers with %s %s" % (" ".join(draft), " ".join(kv)))
            m = srv.metrics()
        finally:
            srv.stop()
        log = "\n".join(srv.log)
        lbl = '{model_name="builtin:tiny"}'
        drafted = sum(int(x) for x in re.findall(r"drafted=(\d+)", log))
        accepted = sum(int(x) for x in re.findall(r"accepted=(\d+)", log))
        t.check(drafted > 0, "tokens were drafted (%s)" % draft[1])
        t.eq(m.get("inferlab_spec_draft_tokens_total" + lbl), drafted, "drafted counter = the log lines' sum")
        t.eq(m.get("inferlab_spec_accepted_tokens_total" + lbl), accepted, "accepted counter = the log lines' sum")
        t.eq(m.get("vllm:spec_decode_num_draft_tokens_total" + lbl), drafted, "vLLM's drafted name")
        t.eq(m.get("vllm:spec_decode_num_accepted_tokens_total" + lbl), accepted, "vLLM's accepted name")
        if draft[1] == "builtin:tiny-2l":
            hi = accepted / drafted
        else:
            lo = accepted / drafted
print("acceptance: derived %.3f, unrelated %.3f" % (hi, lo))
t.check(hi > lo, "the derived draft is accepted more often than the unrelated one (%.2f > %.2f)" % (hi, lo))

r = subprocess.run([cli, "serve", "-m", "builtin:tiny", "--port", "0", "--draft", "3"], capture_output=True, text=True)
t.eq(r.returncode, 64, "--draft without --draft-model: usage error")
t.check("--draft-model" in r.stderr, "the error names --draft-model")
r = subprocess.run([cli, "serve", "-m", "builtin:tiny", "--port", "0", "--draft-model", "builtin:1b-2l"],
                   capture_output=True, text=True, timeout=300)
t.check(r.returncode != 0 and "vocabulary" in r.stderr, "a draft with another vocabulary is refused: " + r.stderr[-300:])
t.finish()
