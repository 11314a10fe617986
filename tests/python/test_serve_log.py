"""tests/python/test_serve_log: one line per finished request on stderr (--log-format text|json).

Each line's figures are checked against what the client saw: the request id, status and client
address (the test's own socket), prompt/generated/cached tokens against the response's usage,
the finish reason, TTFT against the client's time to the first streamed chunk (the server's
token exists before the client reads it), TTFT and TPOT within the whole time. Paths a client
chose are escaped (a newline cannot forge a line); successful /health and /metrics are not
logged; --log-format off logs nothing.
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()


def wait_lines(srv, pred, n=1, timeout=20):
    deadline = time.time() + timeout
    while True:
        got = [ln for ln in srv.lines() if pred(ln)]
        if len(got) >= n or time.time() > deadline:
            return got
        time.sleep(0.05)


def post(body):
    b = json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % (body.pop("_path", "/v1/completions").encode(), len(b)) + b)


# ---- json ----
srv = Server("--log-format", "json", "--ignore-eos")
try:
    body = {"prompt": "Once upon a time", "max_tokens": 6, "seed": 3}
    t0 = time.time()
    port, data = srv.raw(post(dict(body)))
    wall_ms = (time.time() - t0) * 1e3
    resp = json.loads(data.split(b"\r\n\r\n", 1)[1])
    lines = wait_lines(srv, lambda ln: ln.startswith("{") and resp["id"] in ln)
    t.eq(len(lines), 1, "one line for the completion")
    e = json.loads(lines[0]) if lines else {}
    t.eq(e.get("event"), "request", "event")
    t.eq((e.get("method"), e.get("path"), e.get("status")), ("POST", "/v1/completions", 200), "method, path, status")
    t.eq(e.get("client"), "127.0.0.1:%d" % port, "the client's address and port")
    u = resp["usage"]
    t.eq((e.get("prompt_tokens"), e.get("generated_tokens"), e.get("cached_tokens")),
         (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"]), "tokens = usage")
    t.eq(e.get("finish_reason"), resp["choices"][0]["finish_reason"], "finish reason")
    t.check(0 <= e.get("ttft_ms", -1) <= e.get("time_ms", 0), "0 <= TTFT <= the request's time")
    t.check(0 <= e.get("tpot_ms", -1) * 5 <= e.get("time_ms", 0), "TPOT x 5 gaps <= the request's time")
    t.check(e.get("time_ms", 1e9) <= wall_ms + 1000, "the request's time within the client's (%.1f vs %.1f ms)"
            % (e.get("time_ms", -1), wall_ms))

    # streamed, n = 2: TTFT against the client's first chunk
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    t0 = time.time()
    s.sendall(post({"_path": "/v1/chat/completions", "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 5, "n": 2, "stream": True, "seed": 4,
                    "stream_options": {"include_usage": True}}))
    data, first_ms = b"", None
    while True:
        d = s.recv(65536)
        if not d:
            break
        if first_ms is None and b"data: {" in data + d:
            first_ms = (time.time() - t0) * 1e3
        data += d
    s.close()
    chunks = [json.loads(ln[6:]) for ln in data.decode().split("\n") if ln.startswith("data: {")]
    rid = chunks[0]["id"]
    usage = chunks[-1]["usage"]
    e = json.loads((wait_lines(srv, lambda ln: rid in ln) or ["{}"])[0])
    t.eq((e.get("status"), e.get("generated_tokens"), e.get("finish_reason")), (200, usage["completion_tokens"], "length"),
         "the stream's line: 200, tokens of both choices, one reason")
    t.check(first_ms is not None and e.get("ttft_ms", 1e9) < first_ms,
            "server TTFT %.1f ms < the client's first chunk %.1f ms" % (e.get("ttft_ms", -1), first_ms or -1))
    # errors are logged; successful probes are not
    st, _, _ = srv.get("/v1/nowhere")
    t.eq(st, 404, "404")
    srv.get("/health")
    srv.get("/metrics")
    got = wait_lines(srv, lambda ln: '"/v1/nowhere"' in ln)
    t.check(got and json.loads(got[0])["status"] == 404 and json.loads(got[0])["id"] is None, "the 404 is logged")
    time.sleep(0.3)
    # (the 503s while the server was loading are logged: serverlib polled /health then)
    t.check(not any(('"/health"' in ln or '"/metrics"' in ln) and '"status":200' in ln for ln in srv.lines()),
            "successful probes are not logged")
    # a path with a newline in it stays on its line
    srv.raw(b"GET /v1/x%0a{%22event%22:%22forged%22} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    got = wait_lines(srv, lambda ln: "forged" in ln)
    t.check(len(got) == 1 and json.loads(got[0])["path"] == '/v1/x\n{"event":"forged"}',
            "an escaped path: one line, the path as sent: %r" % got)
finally:
    t.eq(srv.stop(), 0, "exit code")

# ---- text, and off ----
srv = Server("--ignore-eos")
try:
    port, data = srv.raw(post({"prompt": "Hello", "max_tokens": 3}))
    rid = json.loads(data.split(b"\r\n\r\n", 1)[1])["id"]
    got = wait_lines(srv, lambda ln: ln.startswith("inferlab serve: request %s " % rid))
    t.eq(len(got), 1, "text: one line")
    ln = got[0] if got else ""
    t.check(" POST /v1/completions 200 client=127.0.0.1:%d " % port in ln and " generated=3 " in ln and
            " finish=length " in ln and " ttft_ms=" in ln and " time_ms=" in ln, "text fields: %r" % ln)
    srv.raw(b"GET /a%20b%0ac HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    got = wait_lines(srv, lambda ln: "/a%20b%0Ac 404" in ln)
    t.eq(len(got), 1, "text: a space and a newline in the path are %XX")
finally:
    t.eq(srv.stop(), 0, "exit code")
srv = Server("--log-format", "off")
try:
    srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    srv.get("/v1/nowhere")
    time.sleep(0.3)
finally:
    t.eq(srv.stop(), 0, "exit code")
t.check(not any("request" in ln and "client=" in ln for ln in srv.lines()), "off: no request lines")
t.finish()
