"""tests/python/test_serve_metrics: /metrics is valid Prometheus text (promtool check metrics,
from Debian's prometheus package; skipped visibly without it) with the vLLM-style metrics,
and the numbers follow the traffic: counters and histograms after requests, the chat template
note, the tokenize round trip; /health 503 while loading (a throttled sim device), device memory
metrics; exit 71 when the model does not fit, and --fit applying the report's suggested change;
with --kv paged the KV block metrics count the pool's pages (they said 4 blocks of 1024), and a
finished request's full blocks stay in the prefix cache, evictable.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks, Server  # noqa: E402

t = Checks()
promtool = shutil.which("promtool")


def promtool_problems(r):
    """promtool's complaints but its lint on the vllm: names, which keep vLLM's colon on purpose
    (the Gateway API Inference Extension's endpoint picker reads them as vLLM writes them). A
    format error (not a lint line) leaves its text, so it fails."""
    if r.returncode == 0:
        return []
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    return [x for x in lines if not re.match(r"^vllm:\w+ metric names should not contain ':'$", x)]
srv = Server("--parallel", "2", "--alias", "tiny", "--ignore-eos")
try:
    for i in range(3):
        status, data, _ = srv.post("/v1/completions", {"prompt": "Hello %d" % i, "max_tokens": 5, "seed": i})
        t.eq(status, 200, "completion")
    status, data, _ = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                        "max_tokens": 4, "model": "tiny"})
    t.eq(status, 200, "chat with the alias as model")
    status, data, _ = srv.post("/v1/completions", {"prompt": [1, 50, 60], "max_tokens": 2, "seed": 1})
    t.eq(status, 200, "prompt as token ids")
    t.eq(json.loads(data)["usage"]["prompt_tokens"], 3, "token-id prompt length")
    status, data, _ = srv.post("/v1/tokenize", {"prompt": "Once upon a time", "with_pieces": True})
    tok = json.loads(data)
    t.eq(status, 200, "tokenize")
    t.eq(len(tok["tokens"]), tok["count"], "count")
    status, data, _ = srv.post("/v1/detokenize", {"tokens": tok["tokens"]})
    t.eq(json.loads(data)["prompt"], "Once upon a time", "detokenize round trip")
    status, data, _ = srv.post("/v1/detokenize", {"tokens": [10 ** 7]})
    t.eq(status, 400, "token id out of range")

    status, text, headers = srv.get("/metrics")
    t.eq(status, 200, "/metrics")
    t.check(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"), "content type")
    text = text.decode()
    m = srv.metrics()
    lbl = '{model_name="tiny"}'
    for name in ["inferlab_num_requests_running", "inferlab_num_requests_waiting", "inferlab_prompt_tokens_total",
                 "inferlab_generation_tokens_total", "inferlab_kv_cache_usage_perc",
                 "inferlab_time_to_first_token_seconds_count", "inferlab_time_per_output_token_seconds_count",
                 "inferlab_e2e_request_latency_seconds_count", "inferlab_request_queue_time_seconds_count"]:
        t.check(name + lbl in m, "metric " + name)
    t.eq(m.get("inferlab_generation_tokens_total" + lbl), 21, "generated tokens counted")
    # the endpoint picker's and the autoscaler's series under vLLM's names (deploy/k8s): the same values
    for vname, iname in [("vllm:num_requests_waiting", "inferlab_num_requests_waiting"),
                         ("vllm:num_requests_running", "inferlab_num_requests_running"),
                         ("vllm:kv_cache_usage_perc", "inferlab_kv_cache_usage_perc"),
                         ("vllm:gpu_cache_usage_perc", "inferlab_kv_cache_usage_perc")]:
        t.check(vname + lbl in m, "metric " + vname)
        t.eq(m.get(vname + lbl), m.get(iname + lbl), vname + " = " + iname)
    t.eq(m.get("inferlab_e2e_request_latency_seconds_count" + lbl), 5, "5 requests in the e2e histogram")
    t.eq(m.get('inferlab_request_success_total{model_name="tiny",finished_reason="length"}'), 5, "finished by length")
    t.eq(m.get('inferlab_time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"}'), 5, "+Inf bucket")
    t.check(m.get('inferlab_host_memory_bytes{category="kv"}', 0) > 0, "kv memory")
    # the categories users read: the server's connections and buffers, the scheduler's slots,
    # the vocabulary, the model's tables, each counted on its own
    for c in ("server", "scheduler", "tokenizer", "model"):
        t.check(m.get('inferlab_host_memory_bytes{category="%s"}' % c, 0) > 0, "%s memory" % c)
    t.check(m.get('inferlab_http_responses_total{code="200"}', 0) >= 6, "responses by code")
    t.check(m.get('inferlab_http_responses_total{code="400"}', 0) >= 1, "400 counted")
    # the startup timeline: one gauge per phase that ran; they add up to the startup total, and
    # the ready line on stderr quotes the same total
    phases = {k[len('inferlab_startup_phase_seconds{phase="'):-2]: v for k, v in m.items()
              if k.startswith("inferlab_startup_phase_seconds{")}
    t.check({"backend", "convert", "tokenizer", "alloc"} <= set(phases), "startup phases: %r" % sorted(phases))
    total = m.get("inferlab_startup_seconds", -1)
    t.check(abs(sum(phases.values()) - total) <= 1e-6 * (1 + len(phases)), "phases add up: %r vs %r" % (phases, total))
    ready = [ln for ln in srv.lines() if "ready:" in ln]
    t.check(ready and ("started in %.3f s" % total) in ready[0], "ready line quotes the startup: %r" % ready[:1])

    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        t.eq(promtool_problems(r), [], "promtool check metrics: " + r.stdout + r.stderr)
        print("promtool check metrics: ok")
    else:
        print("SKIP (part): promtool not installed (apt-get install prometheus); format not validated")
finally:
    t.eq(srv.stop(), 0, "exit code")
t.check(any("chat template: chatml" in line for line in srv.log), "startup names the chat template")

# the paged cache: /metrics reports its pages, not one block of ctx cells per slot
paged = Server("--kv", "paged", "--kv-block", "16", "--parallel", "4", "--ignore-eos")
try:
    lbl = '{model_name="builtin:tiny"%s}'
    m = paged.metrics()
    t.eq(m.get("inferlab_kv_cache_block_size" + lbl % ""), 16, "paged: the block size is --kv-block")
    t.eq(m.get("inferlab_kv_cache_blocks" + lbl % ',state="free"'), 4 * 1024 // 16, "paged: 256 pages free at first")
    t.eq(m.get("inferlab_kv_cache_blocks" + lbl % ',state="used"'), 0, "paged: none used")
    st, data, _ = paged.post("/v1/completions", {"prompt": "Once upon a time " * 8, "max_tokens": 8, "seed": 1})
    n = json.loads(data)["usage"]["prompt_tokens"] + 8
    m = paged.metrics()
    used = m.get("inferlab_kv_cache_blocks" + lbl % ',state="used"')
    # the prefix cache (on with --kv paged): the finished request holds no page; its full blocks
    # (the last sampled token is never decoded, so n - 1 positions) stay indexed, evictable
    t.eq(used, 0, "paged: a finished request holds no page")
    t.eq(m.get("inferlab_prefix_cache_blocks" + lbl % ',state="evictable"'), (n - 1) // 16,
         "paged: the request's %d positions leave their full blocks in the prefix cache" % (n - 1))
    t.eq(used + m.get("inferlab_kv_cache_blocks" + lbl % ',state="free"'), 256, "paged: used + free = the pool")
finally:
    t.eq(paged.stop(), 0, "exit code (paged)")
contig = Server("--parallel", "4")
try:
    m = contig.metrics()
    t.eq(m.get('inferlab_kv_cache_block_size{model_name="builtin:tiny"}'), 1024, "contiguous: a block is a slot's context")
    t.eq(m.get('inferlab_kv_cache_blocks{model_name="builtin:tiny",state="free"}'), 4, "contiguous: a block per slot")
finally:
    contig.stop()

# /health is 503 while the model loads (weights copied to a simulated device at 20 MB/s), then
# 200; /metrics then has the device's memory by category and its fragmentation
slow = Server("--device", "sim:1GiB,pcie=20MB/s", wait_ready=False)
try:
    status, data, headers = slow.get("/health")
    t.eq(status, 503, "/health while loading")
    t.eq(json.loads(data)["status"], "loading", "loading status")
    t.check("Retry-After" in headers, "503 has Retry-After")
    status, data, _ = slow.post("/v1/completions", {"prompt": "x"})
    t.eq(status, 503, "generation while loading")
    import time
    deadline = time.time() + 30
    while time.time() < deadline and slow.get("/health")[0] != 200:
        time.sleep(0.1)
    t.eq(slow.get("/health")[0], 200, "/health once loaded")
    status, data, _ = slow.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
    t.eq(status, 200, "generation on the simulated device")
    m = slow.metrics()
    t.check(m.get('inferlab_device_memory_allocated_bytes{device="sim0",category="kv"}', 0) > 0 or
            any(k.startswith("inferlab_device_memory_allocated_bytes") and 'category="kv"' in k and v > 0
                for k, v in m.items()), "device kv memory")
    t.check(any(k.startswith("inferlab_device_memory_fragmentation_ratio") for k in m), "fragmentation metric")
    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=slow.get("/metrics")[1].decode(),
                           capture_output=True, text=True)
        t.eq(promtool_problems(r), [], "promtool on the device metrics: " + r.stdout + r.stderr)
finally:
    t.eq(slow.stop(), 0, "exit code (sim)")

# a configuration that does not fit: exit 71 with the report; --fit applies its suggestion
cli = os.environ["IL_CLI"]
r = subprocess.run([cli, "serve", "--port", "0", "-t", "2", "--device", "sim:64MiB", "--ctx", "4096",
                    "--parallel", "8"], capture_output=True, text=True, timeout=60)
t.eq(r.returncode, 71, "out of memory at start: exit 71")
fixm = re.search(r"fix: --n-seq (\d+)", r.stderr)
t.check(fixm is not None, "the report names the fix (fewer sequences)")
want_seq = int(fixm.group(1)) if fixm else 2
fit = Server("--device", "sim:64MiB", "--ctx", "4096", "--parallel", "8", "--fit")
try:
    m = fit.metrics()
    t.eq(m.get('inferlab_kv_cache_blocks{model_name="builtin:tiny",state="free"}'), want_seq, "--fit: the report's slot count")
    t.eq(fit.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0], 200, "--fit: serves")
finally:
    fit.stop()
t.check(any(("--fit: out of memory on sim:64MiB" in line and "changing --n-seq 8 -> %d" % want_seq in line) for line in fit.log), "--fit says what it changed")
t.finish()
