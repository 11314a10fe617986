"""tests/python/test_serve_repack: `inferlab serve` repacks a GGUF model's CPU weights by default.

A server decodes several sequences per step, which the repacked weights (--repack,
docs/devices.md) run faster, so serve turns --repack on unless it is given, for a GGUF file on
the CPU. This checks the default and both ways of overriding it, on builtin:tiny converted to
Q8_0; and that with repacked weights 8 concurrent requests with fixed seeds get exactly the
tokens of the same requests run one at a time (every batch size multiplies through the same
micro-kernels, so a sequence's tokens do not depend on what it was batched with).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, need_server  # noqa: E402

REPACKED = "weights repacked (--repack)"


def ready_line(srv):
    lines = [ln for ln in "".join(srv.log).splitlines() if "ready:" in ln]
    return lines[0] if lines else ""


def complete(srv, seed):
    st, data, _ = srv.post("/v1/completions", {"prompt": "Once upon", "max_tokens": 16, "seed": seed,
                                                "temperature": 0.8})
    return st, json.loads(data)["choices"][0]["text"] if st == 200 else data


t = Checks()
cli = need_server()
with tempfile.TemporaryDirectory() as tmp:
    gguf = os.path.join(tmp, "tiny-q8_0.gguf")
    r = subprocess.run([cli, "convert", "builtin:tiny", "--type", "q8_0", "-o", gguf], capture_output=True, text=True)
    t.eq(r.returncode, 0, "convert builtin:tiny to q8_0: " + r.stderr)

    srv = Server("--parallel", "8", "--ignore-eos", model=gguf)
    try:
        one = [complete(srv, s) for s in range(8)]
        t.check(all(st == 200 and text for st, text in one), "one at a time: 200 with text")
        got = [None] * 8

        def worker(i):
            got[i] = complete(srv, i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        t.eq(got, one, "8 concurrent requests: the tokens of the same requests one at a time")
    finally:
        t.eq(srv.stop(), 0, "exit code (default)")
    t.check(REPACKED in ready_line(srv), "a GGUF file on the CPU is repacked by default: " + ready_line(srv))

    for args, model, what in ((["--repack=false"], gguf, "--repack=false keeps the file's layout"),
                              ([], "builtin:tiny", "a built-in model is not repacked by default")):
        srv = Server(*args, model=model)
        try:
            st, _ = complete(srv, 1)
            t.eq(st, 200, what + ": serves")
        finally:
            t.eq(srv.stop(), 0, what + ": exit code")
        line = ready_line(srv)
        t.check(line and REPACKED not in line, what + ": " + line)

    # a config file's repack = false is a given value too
    conf = os.path.join(tmp, "serve.conf")
    with open(conf, "w") as f:
        f.write("repack = false\n")
    srv = Server("--config", conf, model=gguf)
    t.eq(srv.stop(), 0, "config file: exit code")
    line = ready_line(srv)
    t.check(line and REPACKED not in line, "repack = false in a config file is kept: " + line)
t.finish()
