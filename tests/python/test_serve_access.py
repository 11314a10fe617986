"""tests/python/test_serve_access: who may use the server.

API key: an empty --api-key is refused (exit 64: it used to run without authentication); a key
of any length is compared whole (a 300-byte key's 255-byte prefix used to be accepted and the
real key refused), from the flag or the first line of --api-key-file, and the Bearer scheme is
case-insensitive.

A web page cannot drive the server: a Host that is not the server's (DNS rebinding) is 403, a
page from another origin is 403 unless --cors-origins lists it (then its preflight is answered
and responses carry Access-Control-Allow-Origin), and a POST that is not declared
application/json (what a page can send anywhere without a preflight: text/plain, a form) is 415
and generates nothing. The server's own chat page (same origin) is served as before
(test_serve_page drives it in Chromium).
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, need_server  # noqa: E402

t = Checks()
cli = need_server()


def status(srv, key, scheme="Bearer"):
    h = {} if key is None else {"Authorization": "%s %s" % (scheme, key)}
    return srv.request("GET", "/v1/models", headers=h)[0]


# ---- API key ----
r = subprocess.run([cli, "serve", "--port", "0", "--api-key", ""], capture_output=True, text=True, timeout=60)
t.eq(r.returncode, 64, "--api-key '' is a usage error")
t.check("--api-key" in r.stderr and "empty" in r.stderr, "the message names the flag: " + r.stderr.strip()[:120])
with tempfile.TemporaryDirectory() as tmp:
    for content, what in [("\n", "an empty first line"), (" k \n", "surrounding spaces"), ("k" * 9000 + "\n", "9000 bytes")]:
        path = os.path.join(tmp, "key")
        with open(path, "w") as f:
            f.write(content)
        r = subprocess.run([cli, "serve", "--port", "0", "--api-key-file", path], capture_output=True, text=True,
                           timeout=60)
        t.check(r.returncode != 0 and "--api-key-file" in r.stderr, "a key file with %s is refused: %d %s"
                % (what, r.returncode, r.stderr.strip()[:120]))
    long_key = "k" * 300 + "/x-" + "z" * 700  # 1003 bytes
    path = os.path.join(tmp, "key")
    with open(path, "w") as f:
        f.write(long_key + "\nsecond line ignored\n")
    for args in (["--api-key", long_key], ["--api-key-file", path]):
        srv = Server(*args)
        try:
            t.eq(status(srv, long_key), 200, "%s: the whole 1003-byte key" % args[0])
            t.eq(status(srv, long_key, "bearer"), 200, "%s: the scheme in lower case" % args[0])
            t.eq(status(srv, long_key[:255]), 401, "%s: its 255-byte prefix is refused" % args[0])
            t.eq(status(srv, long_key[:-1]), 401, "%s: all but its last byte is refused" % args[0])
            t.eq(status(srv, long_key + "z"), 401, "%s: one byte more is refused" % args[0])
            t.eq(status(srv, None), 401, "%s: no key" % args[0])
            t.eq(srv.get("/health")[0], 200, "%s: /health needs no key" % args[0])
        finally:
            t.eq(srv.stop(), 0, "exit code")


# ---- Host, Origin, Content-Type ----


def req(srv, method, path, headers, body=None):
    """A request with exactly these headers (http.client adds Host unless given)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
    for k, v in headers.items():
        c.putheader(k, v)
    if body is not None:
        c.putheader("Content-Length", str(len(body)))
    c.endheaders(body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data, {k.lower(): v for k, v in r.getheaders()}


def code_of(data):
    try:
        return json.loads(data)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


GEN = 'inferlab_generation_tokens_total{model_name="builtin:tiny"}'
COMPLETION = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
srv = Server()
try:
    port = srv.port
    for host in ["127.0.0.1:%d" % port, "localhost:%d" % port, "LocalHost.:%d" % port, "[::1]:%d" % port]:
        t.eq(req(srv, "GET", "/v1/models", {"Host": host})[0], 200, "Host %s is this server" % host)
    for host in ["evil.example:%d" % port, "127.0.0.1.evil.example", "10.0.0.1:%d" % port, "localhost.evil.example"]:
        st, data, _ = req(srv, "GET", "/v1/models", {"Host": host})
        t.check(st == 403 and code_of(data) == "host_not_allowed", "Host %s: 403 host_not_allowed (%d)" % (host, st))
    st, data, _ = req(srv, "GET", "/health", {"Host": "rebound.example:%d" % port})
    t.eq(st, 403, "/health is not answered to a rebound name either")
    t.check(b"--allowed-hosts" in data, "the 403 names --allowed-hosts")
    # HTTP/1.0 without Host: curl and scripts may; a browser never does
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
    head = s.recv(100)
    t.check(head.split(b" ")[1:2] == [b"200"], "HTTP/1.0 without Host: %r" % head[:40])
    s.close()
    before = srv.metrics()[GEN]
    for ct in [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
               "application/jsonx"]:
        h = {"Content-Type": ct} if ct else {}
        st, data, _ = req(srv, "POST", "/v1/completions", h, COMPLETION)
        t.check(st == 415 and code_of(data) == "unsupported_media_type", "POST with Content-Type %s: 415 (%d)" % (ct, st))
    for ct in ["application/json", "application/json; charset=utf-8", "Application/JSON"]:
        t.eq(req(srv, "POST", "/v1/completions", {"Content-Type": ct}, COMPLETION)[0], 200, "POST as %s" % ct)
    t.eq(srv.metrics()[GEN], before + 6, "only the three JSON requests generated")
    own = "http://127.0.0.1:%d" % port
    st, data, h = req(srv, "POST", "/v1/completions", {"Content-Type": "application/json", "Origin": own}, COMPLETION)
    t.eq(st, 200, "a POST from the server's own page")
    t.check("access-control-allow-origin" not in h, "same origin needs no CORS header")
    for origin in ["http://evil.example", "null", "http://127.0.0.1:%d" % (port + 1), "https://127.0.0.1.evil.example"]:
        st, data, _ = req(srv, "POST", "/v1/completions", {"Content-Type": "application/json", "Origin": origin},
                          COMPLETION)
        t.check(st == 403 and code_of(data) == "origin_not_allowed", "a page at %s: 403 (%d)" % (origin, st))
        t.eq(req(srv, "GET", "/v1/models", {"Origin": origin})[0], 403, "GET from %s: 403" % origin)
    st, _, h = req(srv, "OPTIONS", "/v1/completions", {"Origin": "http://evil.example",
                                                        "Access-Control-Request-Method": "POST"})
    t.eq(st, 403, "a preflight from a foreign page: 403")
    t.check("access-control-allow-origin" not in h, "and no CORS header")
finally:
    t.eq(srv.stop(), 0, "exit code")

app = "http://app.example:3000"
srv = Server("--cors-origins", app + "/, https://other.example", "--allowed-hosts", "chat.example,.corp.example")
try:
    st, _, h = req(srv, "OPTIONS", "/v1/chat/completions", {"Origin": app, "Access-Control-Request-Method": "POST",
                                                             "Access-Control-Request-Headers": "content-type"})
    t.eq(st, 204, "the preflight of a --cors-origins page")
    t.eq(h.get("access-control-allow-origin"), app, "it may call")
    t.check("POST" in h.get("access-control-allow-methods", "") and "Content-Type" in h.get("access-control-allow-headers", ""),
            "methods and headers allowed: %r" % h)
    st, data, h = req(srv, "POST", "/v1/completions", {"Content-Type": "application/json", "Origin": app}, COMPLETION)
    t.eq((st, h.get("access-control-allow-origin"), h.get("vary")), (200, app, "Origin"), "its POST, readable by it")
    t.eq(req(srv, "GET", "/v1/models", {"Origin": "https://other.example"})[0], 200, "the second origin")
    t.eq(req(srv, "GET", "/v1/models", {"Origin": "http://app.example:3001"})[0], 403, "another port is another origin")
    for host, want in [("chat.example", 200), ("chat.example:8080", 200), ("corp.example", 200), ("a.b.corp.example", 200),
                       ("xcorp.example", 403), ("chat.example.evil", 403), ("localhost", 200)]:
        t.eq(req(srv, "GET", "/v1/models", {"Host": host})[0], want, "--allowed-hosts: Host %s" % host)
finally:
    t.eq(srv.stop(), 0, "exit code")
r = subprocess.run([cli, "serve", "--port", "0", "--cors-origins", "app.example"], capture_output=True, text=True, timeout=60)
t.check(r.returncode == 64 and "--cors-origins" in r.stderr, "an origin without a scheme is refused: %s" % r.stderr.strip())

t.finish()
