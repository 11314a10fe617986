"""tests/python/test_serve_archs: `inferlab serve` on every architecture's built-in model.

For builtin:gemma3-tiny, qwen3-tiny, phi3-tiny, moe-tiny and qwen3moe-tiny: a greedy completion
of 8 tokens (--ignore-eos) answers 200 with 8 completion tokens, finish reason "length", and the
text `inferlab run` prints for the same prompt, settings and model; a chat request through the
model's template answers 200. Requests go one at a time, so each step's batch is the same in
both programs and nothing depends on timing.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, need_server  # noqa: E402

t = Checks()
MODELS = ["builtin:gemma3-tiny", "builtin:qwen3-tiny", "builtin:phi3-tiny", "builtin:moe-tiny", "builtin:qwen3moe-tiny"]
PROMPT = "Once upon a time"
N = 8

cli = need_server()
for model in MODELS:
    r = subprocess.run([cli, "run", "-m", model, "-p", PROMPT, "-n", str(N), "--temp", "0", "--ignore-eos",
                        "--no-echo", "-t", "2"], capture_output=True, timeout=120)
    t.eq(r.returncode, 0, "%s: run exit code" % model)
    out = r.stdout.decode("utf-8", errors="replace")  # random weights pick byte tokens too
    want = out[:-1] if out.endswith("\n") else out
    srv = Server("--ignore-eos", "--parallel", "2", model=model)
    try:
        status, data, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": N, "temperature": 0})
        t.eq(status, 200, "%s: completion status" % model)
        if status == 200:
            a = json.loads(data)
            t.eq(a["usage"]["completion_tokens"], N, "%s: completion tokens" % model)
            t.eq(a["choices"][0]["finish_reason"], "length", "%s: finish reason" % model)
            t.eq(a["choices"][0]["text"], want, "%s: serve's greedy text vs run's" % model)
        status, data, _ = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 4, "temperature": 0})
        t.eq(status, 200, "%s: chat status %s" % (model, data[:200]))
    finally:
        t.eq(srv.stop(), 0, "%s: server exit code" % model)

t.finish()
