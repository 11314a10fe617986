"""tests/python/test_serve_limits: what one request can make the server hold, and what idle
sockets can take from the others.

Memory: the issue's load at once (ten 1 MB /v1/tokenize requests with pieces, a 150-byte chat
asking n=16 x 960 tokens x 20 logprobs, the same streamed, a 1 MB body of empty arrays) must
leave the server's peak RSS within a bound (it was 3.9 GB on this load), answer what is too big
with 413/400 naming --max-request-memory, count what requests hold in /metrics, and give it all
back afterwards. A stream whose client does not read is ended when its unsent bytes reach the
budget.
Under AddressSanitizer (10-20x slower) the prompts are 128 KB and the stream 120 tokens long,
and RSS is not bounded (ASan's shadow memory and quarantine); the budgets are checked the same.
"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
SANITIZED = "ASAN_OPTIONS" in os.environ
MiB = 1 << 20
PROMPT_BYTES = (128 << 10) if SANITIZED else 1000000
STREAM_TOKENS = 120 if SANITIZED else 960


def proc_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def wait_metric(srv, name, pred, timeout=60):
    deadline = time.time() + timeout
    while True:
        v = srv.metrics().get(name, 0)
        if pred(v) or time.time() > deadline:
            return v
        time.sleep(0.1)


# ---- memory under the concurrent load ----
srv = Server("--parallel", "16", "--ignore-eos")
try:
    for i in range(3):
        srv.post("/v1/completions", {"prompt": "warm up %d" % i, "max_tokens": 4})
    base_hwm = proc_kib(srv.p.pid, "VmHWM")
    prompt = "ab c" * (PROMPT_BYTES // 4)  # 1 MB
    tok_body = json.dumps({"prompt": prompt, "with_pieces": True}).encode()
    st, one, _ = srv.post("/v1/tokenize", tok_body)
    t.eq(st, 200, "one 1 MB tokenize with pieces")
    want_count = json.loads(one)["count"]
    big_chat = {"messages": [{"role": "user", "content": "hi"}], "n": 16, "logprobs": True, "top_logprobs": 20,
                "max_tokens": 960}
    junk = b'{"prompt": "x", "junk": [' + b",".join([b"[]"] * 340000) + b"]}"
    results = {}
    lock = threading.Lock()

    def run(name, fn):
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001
            r = (-1, repr(e).encode(), {})
        with lock:
            results[name] = r

    jobs = [("tok%d" % i, lambda: srv.post("/v1/tokenize", tok_body)) for i in range(10)]
    jobs.append(("chat", lambda: srv.post("/v1/chat/completions", big_chat)))
    jobs.append(("stream", lambda: srv.post("/v1/chat/completions", dict(big_chat, stream=True,
                                                                          max_tokens=STREAM_TOKENS))))
    jobs.append(("junk", lambda: srv.post("/v1/completions", junk)))
    peak_held = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak_held[0] = max(peak_held[0], srv.metrics().get("inferlab_http_request_memory_bytes", 0))
            except OSError:
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    ths = [threading.Thread(target=run, args=j) for j in jobs]
    t0 = time.time()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    stop.set()
    sampler.join()
    dt = time.time() - t0
    for i in range(10):
        st, data, _ = results["tok%d" % i]
        ok = st == 200 and json.loads(data)["count"] == want_count and data == one
        t.check(ok, "tokenize %d: 200 with the whole body (%d, %d bytes)" % (i, st, len(data)))
    st, data, _ = results["chat"]
    err = json.loads(data).get("error", {}) if st != 200 else {}
    t.check(st == 400 and "--max-request-memory" in err.get("message", "") and err.get("param") == "top_logprobs",
            "n=16 x 960 x 20 logprobs, not streamed: 400 naming the limit: %d %r" % (st, data[:200]))
    st, data, _ = results["stream"]
    t.check(st == 200 and data.rstrip().endswith(b"data: [DONE]"), "the same request streamed: 200, complete")
    t.eq(data.count(b'"finish_reason":"length"'), 16, "the stream: 16 choices finished")
    st, data, _ = results["junk"]
    err = json.loads(data).get("error", {}) if st != 200 else {}
    t.check(st == 413 and err.get("code") == "request_too_large" and "--max-request-memory" in err.get("message", ""),
            "1 MB of empty arrays: 413 naming the limit: %d %r" % (st, data[:200]))
    hwm = proc_kib(srv.p.pid, "VmHWM")
    m = srv.metrics()
    limit = m["inferlab_http_request_memory_limit_bytes"]
    t.eq(limit, 16 * MiB, "the default budget: 16 x --max-body")
    t.check(0 < m["inferlab_http_request_memory_peak_bytes"] <= len(jobs) * limit,
            "the peak requests held is counted, at most %d budgets: %d" % (len(jobs), m["inferlab_http_request_memory_peak_bytes"]))
    t.check(m["inferlab_http_requests_over_memory_total"] >= 1, "the request over its budget is counted")
    print("load: %d requests in %.1f s; peak RSS %d MiB (baseline %d MiB); requests held at most %.1f MiB "
          "(sampled), peak %.1f MiB" % (len(jobs), dt, hwm >> 10, base_hwm >> 10, peak_held[0] / MiB,
                                        m["inferlab_http_request_memory_peak_bytes"] / MiB))
    if SANITIZED:
        print("note: RSS not bounded under AddressSanitizer (shadow memory and its quarantine)")
    else:
        t.check((hwm - base_hwm) < 512 * 1024, "peak RSS grew by less than 512 MiB (was 3.9 GB before the budgets)")
    held = wait_metric(srv, "inferlab_http_request_memory_bytes", lambda v: v == 0, 10)
    t.eq(held, 0, "requests hold nothing once answered")
finally:
    t.eq(srv.stop(), 0, "exit code")

# ---- a stream whose client does not read is ended at its budget ----
BUDGET = 1 << 20
srv = Server("--parallel", "16", "--ignore-eos", "--max-request-memory", str(BUDGET))
try:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", srv.port))
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": 16, "logprobs": True, "top_logprobs": 20,
                       "max_tokens": 960, "stream": True}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    over = wait_metric(srv, "inferlab_http_requests_over_memory_total", lambda v: v >= 1, 120)
    t.eq(over, 1, "the unread stream ran into its budget")
    cancelled = wait_metric(srv, 'inferlab_request_success_total{model_name="builtin:tiny",finished_reason="cancelled"}',
                            lambda v: v >= 16, 60)
    t.eq(cancelled, 16, "its 16 choices were cancelled")
    t.check(srv.metrics()["inferlab_http_request_memory_peak_bytes"] <= BUDGET, "it never held more than its budget")
    s.close()
finally:
    t.eq(srv.stop(), 0, "exit code")
t.finish()
