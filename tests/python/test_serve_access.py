"""tests/python/test_serve_access: who may use the server.

API key: an empty --api-key is refused (exit 64: it used to run without authentication); a key
of any length is compared whole (a 300-byte key's 255-byte prefix used to be accepted and the
real key refused), from the flag or the first line of --api-key-file, and the Bearer scheme is
case-insensitive.
"""
import os
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

t.finish()
