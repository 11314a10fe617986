"""tests/python/test_serve_conn: connections that go away or never come to the point.

A non-streaming request whose client closes the connection is cancelled (its slot freed, its
tokens no longer computed), as a stream's already was.
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
MODEL = 'model_name="builtin:tiny"'


def wait_metrics(srv, pred, timeout=60):
    deadline = time.time() + timeout
    while True:
        m = srv.metrics()
        if pred(m) or time.time() > deadline:
            return m
        time.sleep(0.05)


def raw_post(port, path, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    b = json.dumps(body).encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(b) + b)
    return s


# ---- a non-streaming request whose client leaves is cancelled ----
srv = Server("--parallel", "1", "--ignore-eos", "--ctx", "4096")
try:
    s = raw_post(srv.port, "/v1/completions", {"prompt": "Once", "max_tokens": 4000})
    running = 'inferlab_num_requests_running{%s}' % MODEL
    gen = 'inferlab_generation_tokens_total{%s}' % MODEL
    m = wait_metrics(srv, lambda m: m.get(running) == 1 and m.get(gen, 0) > 0)
    t.eq(m.get(running), 1, "the request runs")
    s.close()
    done = lambda m: (m.get('inferlab_request_success_total{%s,finished_reason="cancelled"}' % MODEL, 0) +  # noqa: E731
                      m.get('inferlab_request_success_total{%s,finished_reason="length"}' % MODEL, 0)) >= 1
    m = wait_metrics(srv, done, 120)
    t.eq(m.get('inferlab_request_success_total{%s,finished_reason="cancelled"}' % MODEL), 1, "cancelled when the client left")
    t.eq(m.get('inferlab_request_success_total{%s,finished_reason="length"}' % MODEL), 0, "not generated to the end")
    t.check(m.get(gen, 0) < 4000, "fewer than the 4000 tokens asked were computed: %d" % m.get(gen, 0))
    t.eq(m.get(running), 0, "its slot is free")
    st, data, _ = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 4})
    t.eq(st, 200, "the next request is served")
finally:
    t.eq(srv.stop(), 0, "exit code")

t.finish()
