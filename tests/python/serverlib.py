"""tests/python/serverlib: start `inferlab serve` on a free loopback port, stop it, read /metrics.

Every server test imports this: Server(...) starts the binary named by $IL_CLI with --port 0,
reads the port from its "listening on" line, waits for /health 200, and stop() sends SIGTERM
and returns the exit code. The server's stderr is read by a thread into Server.log the whole
time (a pipe nobody reads would block the server once its request log fills it).
skip(reason) prints "SKIP: reason" and exits 77 (CTest's skip code); fixture(rel) is the path of
a file under $IL_FIXTURES, or None when absent (a failure under IL_REQUIRE_FIXTURES=1).
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(77)


def fixture(rel, checks=None):
    root = os.environ.get("IL_FIXTURES", os.path.join(os.environ.get("IL_SRC", "."), "..", "shared", "fixtures"))
    path = os.path.join(root, rel)
    if os.access(path, os.R_OK):
        return path
    if os.environ.get("IL_REQUIRE_FIXTURES") == "1":
        print("FAILED: fixture %s is required (IL_REQUIRE_FIXTURES=1) but missing" % path)
        if checks:
            checks.failed += 1
    else:
        print("SKIP part: fixture %s absent" % path)
    return None


def need_server():
    cli = os.environ.get("IL_CLI")
    if not cli or not os.path.exists(cli):
        skip("IL_CLI is not set to the inferlab binary (run through ctest)")
    if os.environ.get("IL_HAVE_SERVER", "1") == "0":
        skip("built without the HTTP server (libmicrohttpd-dev / libjansson-dev missing)")
    return cli


class Server:
    def __init__(self, *args, model="builtin:tiny", timeout=120, wait_ready=True):
        cli = need_server()
        self.args = [cli, "serve", "-m", model, "--port", "0", "-t", "2"] + list(args)
        self.p = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + timeout
        self.port = None
        while time.time() < deadline and self.port is None:
            line = self.p.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            raise RuntimeError("server did not start: " + "".join(self.log) + self.p.stderr.read())
        self.log_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()
        self.base = "http://127.0.0.1:%d" % self.port
        while wait_ready and time.time() < deadline:
            try:
                # healthy, and the "ready" line (printed just after) read
                if self.get("/health")[0] == 200 and any("ready:" in ln for ln in self.lines()):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            if wait_ready:
                raise RuntimeError("server never became healthy")

    def _read_log(self):
        for line in self.p.stderr:
            with self.log_lock:
                self.log.append(line)

    def lines(self):
        """The server's stderr lines so far."""
        with self.log_lock:
            return list(self.log)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, dict(r.getheaders())

    def raw(self, request, timeout=60):
        """Sends the bytes of a request on a socket of its own and reads until the server
        closes it (send 'Connection: close'); (the socket's local port, the whole answer)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.sendall(request)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
        local = s.getsockname()[1]
        s.close()
        return local, data

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, headers=None):
        return self.request("POST", path, body, headers)

    def metrics(self):
        """{name{labels}: value} of the /metrics text."""
        status, data, _ = self.get("/metrics")
        assert status == 200, status
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def alive(self):
        return self.p.poll() is None

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.reader.join(timeout=10)
        return self.p.returncode


class Checks:
    """Counts assertions; finish() prints 'N passed, N failed' and exits 1 on any failure."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAILED: " + what, flush=True)

    def eq(self, a, b, what):
        self.check(a == b, "%s: %r != %r" % (what, a, b))

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)
