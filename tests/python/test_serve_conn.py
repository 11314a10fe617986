"""tests/python/test_serve_conn: connections that go away or never come to the point.

A non-streaming request whose client closes the connection is cancelled (its slot freed, its
tokens no longer computed), as a stream's already was.

Slowloris: idle sockets beyond --max-connections (and beyond the 64 reserve places above it)
cannot lock anyone out: /health answers within 5 s while they are open, the oldest idle ones
are closed to make room, and headers or a body that trickle in byte by byte are cut when their
total time (--header-timeout, --body-timeout; short here) is up, however steadily the bytes
come. /metrics counts each reason.

SIGTERM and SIGINT stop the server while the model is still loading (weights copied to a
simulated device at 1 MB/s: about 13 s for builtin:tiny), as they do once it is ready.
"""
import json
import os
import signal
import socket
import subprocess
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
    deadline = time.time() + 120  # generous: a loaded machine is slow, never wrong
    while not any(" 499 " in ln for ln in srv.lines()) and time.time() < deadline:
        time.sleep(0.05)
    logged = [ln for ln in srv.lines() if " 499 " in ln]
    t.check(len(logged) == 1 and "finish=cancelled" in logged[0], "the request log says 499, cancelled: %r" % logged)
finally:
    t.eq(srv.stop(), 0, "exit code")

# ---- slowloris ----


def closed_within(sock, trickle, seconds):
    """Sends trickle one byte every 0.25 s until the server closes the socket; the seconds taken,
    or None when it is still open after `seconds`."""
    t0 = time.time()
    sock.settimeout(0.25)
    i = 0
    while time.time() - t0 < seconds:
        try:
            sock.send(trickle[i % len(trickle):i % len(trickle) + 1])
            i += 1
            if sock.recv(4096) == b"":
                return time.time() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.time() - t0
    return None


srv = Server("--max-connections", "8", "--header-timeout", "2", "--body-timeout", "3")
try:
    held = []
    for i in range(8 + 64 + 8):  # beyond --max-connections and the reserve
        try:
            h = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            h.sendall(b"GET /health HTTP/1.1\r\n")  # a request line, and then nothing
            held.append(h)
        except OSError:
            pass
    time.sleep(0.5)  # they are open and idle (the header timeout is 2 s)
    # answered at all (no bound on how soon: that depends on the machine's load); the eviction
    # counter below shows room was made by evicting idle connections, not by their timeouts
    st, data, _ = srv.request("GET", "/health", timeout=120)
    t.eq(st, 200, "/health with %d idle sockets open" % len(held))
    st, data, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
    t.eq(st, 200, "a request is served too")
    m = wait_metrics(srv, lambda m: m.get('inferlab_http_connections_dropped_total{reason="evicted"}', 0) >= 1)
    t.check(m.get('inferlab_http_connections_dropped_total{reason="evicted"}', 0) >= 1,
            "idle connections were evicted to make room: %r" % m.get('inferlab_http_connections_dropped_total{reason="evicted"}'))
    m = wait_metrics(srv, lambda m: m.get('inferlab_http_connections_dropped_total{reason="header_timeout"}', 0) >= 1, 30)
    t.check(m.get('inferlab_http_connections_dropped_total{reason="header_timeout"}', 0) >= 1,
            "the rest timed out waiting for headers")
    for h in held:
        h.close()
    # a header that keeps coming, a byte at a time: cut by total time, not by idleness
    h = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    took = closed_within(h, b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 4000, 30)
    h.close()
    t.check(took is not None and took >= 1.5, "a header trickling a byte every 0.25 s is closed after the 2 s "
            "header timeout, not kept alive by its bytes (%s s)" % (None if took is None else "%.1f" % took))
    # a body the same way
    h = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    h.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100000\r\n\r\n")
    took = closed_within(h, b'{"prompt": "' + b"a" * 4000, 30)
    h.close()
    t.check(took is not None and took >= 2.5, "a body trickling in is closed after the 3 s body timeout (%s s)"
            % (None if took is None else "%.1f" % took))
    m = wait_metrics(srv, lambda m: m.get('inferlab_http_connections_dropped_total{reason="body_timeout"}', 0) >= 1, 10)
    t.eq(m.get('inferlab_http_connections_dropped_total{reason="body_timeout"}', 0), 1, "the body timeout is counted")
    st, _, _ = srv.get("/health")
    t.eq(st, 200, "served afterwards")
finally:
    t.eq(srv.stop(), 0, "exit code")

# ---- signals while the model loads ----
for sig in (signal.SIGTERM, signal.SIGINT):
    slow = Server("--device", "sim:1GiB,pcie=1MB/s", wait_ready=False)
    try:
        t.eq(slow.get("/health")[0], 503, "loading")
        slow.p.send_signal(sig)
        try:
            rc = slow.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None
        t.eq(rc, 0, "%s while loading: the server stops (exit 0)" % sig.name)
        slow.reader.join(timeout=10)
        t.check(any("%s while loading: stopping" % sig.name in ln for ln in slow.lines()),
                "it says so: %r" % slow.lines()[-1:])
    finally:
        if slow.p.poll() is None:
            slow.p.kill()
            slow.p.wait()

t.finish()
