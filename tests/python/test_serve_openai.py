"""tests/python/test_serve_openai: `inferlab serve` through the official openai client.

Chat and completions, streaming and not, n, seed, stop, logprobs, usage, the error classes
the client raises for 400/404/401; then concurrency: 32 clients with fixed seeds get exactly
the tokens of the same requests run one at a time; and a client that disconnects mid-stream
frees its sequence slot. Skips (exit 77) when the openai package is not installed
(scripts/deps.sh installs it from tests/python/requirements.txt).
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, skip  # noqa: E402

try:
    import openai
except ImportError:
    skip("the openai Python package is not installed (pip install -r tests/python/requirements.txt)")

t = Checks()
srv = Server("--parallel", "8", "--ignore-eos", "--max-queue", "64")
try:
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=60)
    models = client.models.list()
    model = models.data[0].id
    t.eq(model, "builtin:tiny", "model id")

    # chat, not streaming
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                       max_tokens=12, seed=5, temperature=0.7)
    t.eq(r.object, "chat.completion", "chat object")
    t.eq(r.choices[0].message.role, "assistant", "role")
    t.eq(r.choices[0].finish_reason, "length", "finish reason")
    t.eq(r.usage.completion_tokens, 12, "completion tokens")
    t.check(r.usage.prompt_tokens > 3, "prompt tokens counted")
    t.eq(r.usage.total_tokens, r.usage.prompt_tokens + 12, "total tokens")
    text = r.choices[0].message.content
    t.check(len(text) > 0, "chat text")

    # the same seed again: the same text; streaming gives the same text too
    r2 = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                        max_tokens=12, seed=5, temperature=0.7)
    t.eq(r2.choices[0].message.content, text, "same seed, same text")
    chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                                 max_tokens=12, seed=5, temperature=0.7, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    t.eq(streamed, text, "streamed text equals the non-streamed one")
    t.eq(chunks[0].choices[0].delta.role, "assistant", "first delta has the role")
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    t.eq(finals, ["length"], "one finish reason")
    t.check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12, "include_usage chunk")

    # completions: n, logprobs, stop
    c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, n=3, seed=9,
                                  temperature=1.0, logprobs=2)
    t.eq(len(c.choices), 3, "n=3 choices")
    t.eq(sorted(ch.index for ch in c.choices), [0, 1, 2], "choice indexes")
    t.eq(c.usage.completion_tokens, 30, "usage over all choices")
    lp = c.choices[0].logprobs
    t.eq(len(lp.tokens), 10, "a logprob per token")
    t.check(all(x <= 0 for x in lp.token_logprobs), "logprobs are <= 0")
    t.check(all(len(d) <= 2 for d in lp.top_logprobs), "top_logprobs has at most 2 entries")
    t.eq("".join(lp.tokens), c.choices[0].text, "tokens join to the text")
    full = client.completions.create(model=model, prompt="Once upon a time", max_tokens=30, seed=3, temperature=0)
    ftext = full.choices[0].text
    if len(ftext) > 10:
        stop = ftext[len(ftext) // 2: len(ftext) // 2 + 2]
        cut = client.completions.create(model=model, prompt="Once upon a time", max_tokens=30, seed=3,
                                        temperature=0, stop=[stop])
        t.eq(cut.choices[0].text, ftext[:ftext.index(stop)], "stop string cuts the text")
        t.eq(cut.choices[0].finish_reason, "stop", "stop finish reason")
    # chat logprobs
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                       logprobs=True, top_logprobs=3, seed=1)
    t.eq(len(r.choices[0].logprobs.content), 4, "chat logprobs per token")
    t.eq(len(r.choices[0].logprobs.content[0].top_logprobs), 3, "chat top_logprobs")

    # errors the client turns into exceptions
    def raises(cls, fn, what):
        try:
            fn()
        except cls as e:
            t.check(True, what)
            return e
        except Exception as e:  # noqa: BLE001
            t.check(False, "%s: raised %r" % (what, e))
            return None
        t.check(False, what + ": no exception")
        return None

    e = raises(openai.NotFoundError, lambda: client.chat.completions.create(
        model="no-such-model", messages=[{"role": "user", "content": "x"}]), "unknown model is 404")
    if e is not None:
        t.eq(e.body.get("code"), "model_not_found", "404 code")
    raises(openai.BadRequestError, lambda: client.completions.create(model=model, prompt="x", max_tokens=0),
           "max_tokens 0 is 400")
    raises(openai.BadRequestError, lambda: client.completions.create(model=model, prompt="x", max_tokens=10 ** 9),
           "huge max_tokens is 400")
    raises(openai.BadRequestError, lambda: client.chat.completions.create(
        model=model, messages=[{"role": "wizard", "content": "x"}]), "unknown role is 400")
    raises(openai.BadRequestError, lambda: client.completions.create(model=model, prompt="x", temperature=5),
           "temperature out of range is 400")
    raises(openai.BadRequestError, lambda: client.completions.create(model=model, prompt="x " * 2000, max_tokens=5),
           "prompt over the context is 400")

    # concurrency: 32 clients with fixed seeds == the same requests one at a time
    reqs = [dict(model=model, prompt="Story %d:" % i + " and then" * (i % 5), max_tokens=16 + i % 7, seed=1000 + i,
                 temperature=0.9, logprobs=0) for i in range(32)]
    alone = []
    for q in reqs:
        r = client.completions.create(**q)
        alone.append((r.choices[0].text, r.choices[0].logprobs.tokens))
    together = [None] * 32
    start = threading.Barrier(32)

    def worker(i):
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
        start.wait()
        r = cl.completions.create(**reqs[i])
        together[i] = (r.choices[0].text, r.choices[0].logprobs.tokens)

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    t0 = time.time()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    same = sum(1 for i in range(32) if together[i] == alone[i])
    t.eq(same, 32, "concurrent requests with fixed seeds equal sequential ones")
    m = srv.metrics()
    t.check(m.get('inferlab_num_requests_running{model_name="builtin:tiny"}', -1) == 0, "nothing running after")
    print("32 concurrent requests in %.2f s" % (time.time() - t0))

finally:
    rc = srv.stop()
t.eq(rc, 0, "server exit code after SIGTERM")

# a client that disconnects mid-stream frees its sequence (a server of its own with a long
# context: 8,000 tokens take seconds even on a fast machine, so the stream is still generating
# when the client goes away)
dsrv = Server("--parallel", "2", "--ctx", "8192", "--ignore-eos")
try:
    lbl = '{model_name="builtin:tiny"}'
    s = socket.create_connection(("127.0.0.1", dsrv.port))
    body = '{"prompt":"Once","max_tokens":8000,"stream":true,"seed":1}'
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    s.settimeout(30)
    while got.count(b"data:") < 3:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    t.check(got.count(b"data:") >= 3, "the stream started")
    m = dsrv.metrics()
    t.eq(m.get("inferlab_num_requests_running" + lbl), 1, "the stream runs")
    s.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        m = dsrv.metrics()
        if m.get("inferlab_num_requests_running" + lbl) == 0:
            break
        time.sleep(0.05)
    t.eq(m.get("inferlab_num_requests_running" + lbl), 0, "slot freed after disconnect")
    t.eq(m.get('inferlab_kv_cache_blocks{model_name="builtin:tiny",state="used"}'), 0, "no block in use")
    t.eq(m.get('inferlab_request_success_total{model_name="builtin:tiny",finished_reason="cancelled"}', 0), 1,
         "the stream was cancelled")
    t.check(m.get("inferlab_generation_tokens_total" + lbl, 0) < 8000, "it stopped before max_tokens")
    st, data, _ = dsrv.post("/v1/completions", {"prompt": "after", "max_tokens": 3, "seed": 1})
    t.eq(st, 200, "serves after a disconnect")
finally:
    t.eq(dsrv.stop(), 0, "exit code (disconnect server)")
t.finish()
