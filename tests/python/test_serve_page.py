"""tests/python/test_serve_page: the chat page at / loads in headless Chromium and completes
one chat turn (a streamed /v1/chat/completions); its max tokens and temperature are the
server's defaults (serve -n, --temp), code fences render as monospace <pre><code>, Stop and
clear cancel the running request; driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: fd 3 in, fd 4 out, NUL-separated JSON; no extra Python packages).
Skips when chromium is not installed (scripts/deps.sh installs Debian's chromium).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server, skip  # noqa: E402

chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if not chrome:
    skip("chromium is not installed (apt-get install chromium)")

t = Checks()
srv = Server("--parallel", "2", "-n", "48", "--temp", "0.25")
profile = tempfile.mkdtemp(prefix="il-chrome-")
to_chrome_r, to_chrome_w = os.pipe()
from_chrome_r, from_chrome_w = os.pipe()


def child_fds():
    os.dup2(to_chrome_r, 3)
    os.dup2(from_chrome_w, 4)


br = subprocess.Popen([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                       "--no-first-run", "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      preexec_fn=child_fds, close_fds=False)
os.close(to_chrome_r)
os.close(from_chrome_w)
inbox = b""
next_id = [0]


def call(method, params=None, session=None, timeout=20):
    global inbox
    next_id[0] += 1
    msg = {"id": next_id[0], "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
    deadline = time.time() + timeout
    while time.time() < deadline:
        while b"\0" in inbox:
            raw, inbox = inbox.split(b"\0", 1)
            j = json.loads(raw)
            if j.get("id") == next_id[0]:
                if "error" in j:
                    raise RuntimeError("%s: %s" % (method, j["error"]))
                return j["result"]
        chunk = os.read(from_chrome_r, 65536)
        if not chunk:
            raise RuntimeError("chromium closed the pipe")
        inbox += chunk
    raise RuntimeError(method + ": no answer")


def evaluate(session, expr):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    return r["result"].get("value")


try:
    target = call("Target.createTarget", {"url": srv.base + "/#ask=Hello%20there"})["targetId"]
    session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    deadline = time.time() + 40
    turns = None
    while time.time() < deadline:
        turns = evaluate(session, "document.body && document.body.dataset.turns")
        err = evaluate(session, "document.body && document.body.dataset.error")
        if turns or err:
            break
        time.sleep(0.2)
    t.eq(evaluate(session, "document.title"), "inferlab chat", "the page loaded")
    t.eq(turns, "1", "one chat turn completed")
    t.eq(evaluate(session, "document.body.dataset.error || ''"), "", "no error shown")
    reply = evaluate(session, "document.querySelector('.msg.assistant').firstChild.textContent")
    t.check(isinstance(reply, str) and len(reply) > 0, "the reply text is shown")
    meta = evaluate(session, "document.querySelector('.msg.assistant .meta').textContent")
    t.check(isinstance(meta, str) and "tokens" in meta, "the reply shows tokens and speed: %r" % meta)
    # the server's request defaults fill the boxes (not the page's own numbers)
    defaults = json.loads(evaluate(session, "document.body.dataset.defaults || '{}'"))
    t.eq(defaults.get("max_tokens"), 48, "/v1/models gives serve's -n as max_tokens")
    t.eq(evaluate(session, "$('max').value"), "48", "the max tokens box shows the server's default")
    t.eq(evaluate(session, "$('temp').value"), "0.25", "the temperature box shows the server's default")
    # code: a fence becomes <pre><code> in a monospace font; `inline` code too; no raw fences
    code = evaluate(session, """(() => {
        const d = document.createElement('div'); d.className = 'msg assistant'; $('log').appendChild(d);
        render(d, 'see `x`:\\n```c\\nint x = 1;\\n```\\ndone');
        const c = d.querySelector('pre code'), i = d.querySelector(':not(pre) > code');
        const r = [c && c.textContent, c && c.className, c && getComputedStyle(c).fontFamily,
                   i && i.textContent, d.textContent.includes('```')];
        d.remove(); return r; })()""")
    t.eq(code[0], "int x = 1;", "the fenced code is a <pre><code> block: %r" % (code,))
    t.eq(code[1], "language-c", "the fence's language is the code's class")
    t.check(isinstance(code[2], str) and "mono" in code[2].lower(), "code is in a monospace font: %r" % code[2])
    t.eq(code[3], "x", "inline `code`")
    t.eq(code[4], False, "no raw fences are shown")
    # Stop: the request being sent is cancelled; the page is ready for the next message
    evaluate(session, "send('Tell me a long story'); $('stop').click(); 1")
    deadline = time.time() + 20
    while time.time() < deadline and evaluate(session, "document.body.dataset.stopped || ''") != "1":
        time.sleep(0.1)
    t.eq(evaluate(session, "document.body.dataset.stopped || ''"), "1", "Stop ended the request")
    t.eq(evaluate(session, "document.body.dataset.error || ''"), "", "a stop is not an error")
    t.eq(evaluate(session, "[$('send').disabled, $('stop').disabled, running === null]"), [False, True, True],
         "after Stop: Send enabled, Stop disabled, nothing running")
    t.eq(evaluate(session, "document.querySelector('.msg.assistant:last-child .meta').textContent"), "stopped",
         "the stopped reply says so")
    # clear: cancels the running request too, and the conversation is empty
    evaluate(session, "send('And another one'); $('clear').click(); 1")
    deadline = time.time() + 20
    while time.time() < deadline and evaluate(session, "document.body.dataset.stopped || ''") != "2":
        time.sleep(0.1)
    t.eq(evaluate(session, "document.body.dataset.stopped || ''"), "2", "clear ended the running request")
    t.eq(evaluate(session, "[history.length, document.querySelectorAll('.msg').length, running === null]"),
         [0, 0, True], "after clear: no history, no messages, nothing running")
    t.eq(evaluate(session, "document.body.dataset.turns"), "1", "the cancelled requests completed no turn")
    # the server's side of the cancel: nothing left running there (the closed connection ends it)
    deadline = time.time() + 30
    running_n = None
    while time.time() < deadline:
        running_n = sum(v for k, v in srv.metrics().items() if k.startswith("inferlab_num_requests_running"))
        if running_n == 0:
            break
        time.sleep(0.1)
    t.eq(running_n, 0, "no request left running on the server after Stop and clear")
    time.sleep(2.2)  # one metrics poll
    rows = evaluate(session, "[...document.querySelectorAll('#metrics td')].map(td => td.textContent).join('|')")
    t.check("generated tokens|" in rows and "ready|yes" in rows, "live metrics table: %r" % rows[:200])
    m = srv.metrics()
    t.check(m.get('inferlab_generation_tokens_total{model_name="builtin:tiny"}', 0) > 0, "the server generated")
finally:
    try:
        call("Browser.close", timeout=5)
    except Exception:  # noqa: BLE001
        pass
    try:
        br.wait(timeout=10)
    except subprocess.TimeoutExpired:
        br.kill()
    shutil.rmtree(profile, ignore_errors=True)
    srv.stop()
t.finish()
