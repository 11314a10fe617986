"""tests/python/test_deploy: the deployment files in deploy/ are valid and say what the docs say.

Each validator runs when installed (scripts/deps.sh installs them from PyPI and Debian) and is
reported as skipped otherwise: hadolint (Dockerfile), yamllint, check-jsonschema with the
Compose specification, kubernetes-validate (the Kubernetes API schemas), systemd-analyze
verify (the unit, with ExecStart pointed at the built binary). Then the facts the docs rely
on: non-root user, HEALTHCHECK on /health, GPU reservation, runtimeClassName nvidia, the
nvidia.com/gpu limit, probes on /health, Prometheus annotations.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Checks  # noqa: E402

src = os.environ.get("IL_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
dep = os.path.join(src, "deploy")
t = Checks()
skipped = []


def tool(name):
    p = shutil.which(name)
    if not p:
        skipped.append(name)
    return p


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    t.eq(r.returncode, 0, what + ": " + (r.stdout + r.stderr)[-600:])


dockerfile = open(os.path.join(dep, "Dockerfile")).read()
compose = os.path.join(dep, "compose.yaml")
k8s = [os.path.join(dep, "k8s", f) for f in sorted(os.listdir(os.path.join(dep, "k8s")))]
unit = os.path.join(dep, "inferlab.service")

if tool("hadolint"):
    run(["hadolint", "--no-color", os.path.join(dep, "Dockerfile")], "hadolint")
if tool("yamllint"):
    run(["yamllint", "-d", "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}",
         compose] + k8s, "yamllint")
if tool("check-jsonschema"):
    run(["check-jsonschema", "--builtin-schema", "vendor.compose-spec", compose], "compose schema")
# the Gateway API Inference Extension's InferencePool is a CRD: kubernetes-validate has no
# schema for it (it warns and passes), so it is checked against one written from the CRD
pool = os.path.join(dep, "k8s", "inferencepool.yaml")
pool_schema = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", "inferencepool-v1.json")
if tool("kubernetes-validate"):
    run(["kubernetes-validate", "--strict"] + [f for f in k8s if f != pool], "kubernetes schemas")
if shutil.which("check-jsonschema"):
    run(["check-jsonschema", "--schemafile", pool_schema, pool], "InferencePool against its CRD's schema")
    with tempfile.TemporaryDirectory() as d:  # the schema can fail: a port out of range is refused
        bad = os.path.join(d, "pool.yaml")
        open(bad, "w").write(open(pool).read().replace("number: 8080", "number: 0"))
        r = subprocess.run(["check-jsonschema", "--schemafile", pool_schema, bad], capture_output=True, text=True)
        t.check(r.returncode != 0, "InferencePool schema refuses targetPorts number 0")
if tool("systemd-analyze"):
    cli = os.environ.get("IL_CLI")
    if cli and os.path.exists(cli):
        with tempfile.TemporaryDirectory() as d:
            text = open(unit).read().replace("/usr/local/bin/inferlab", os.path.abspath(cli))
            path = os.path.join(d, "inferlab.service")
            open(path, "w").write(text)
            run(["systemd-analyze", "verify", path], "systemd-analyze verify")
    else:
        skipped.append("systemd-analyze (IL_CLI unset)")

# what the docs promise
t.check(re.search(r"^USER 10001", dockerfile, re.M) is not None, "Dockerfile: non-root USER")
t.check("HEALTHCHECK" in dockerfile and "/health" in dockerfile, "Dockerfile: HEALTHCHECK on /health")
t.eq(len(re.findall(r"^FROM nvidia/cuda:\S+-(devel|runtime)-", dockerfile, re.M)), 2, "Dockerfile: two CUDA stages")
ctext = open(compose).read()
t.check("driver: nvidia" in ctext and "capabilities: [gpu]" in ctext, "compose: GPU reservation")
dtext = open(os.path.join(dep, "k8s", "deployment.yaml")).read()
t.check("runtimeClassName: nvidia" in dtext, "k8s: runtimeClassName nvidia")
t.check(re.search(r"limits:\s*\n\s*nvidia.com/gpu: 1", dtext) is not None, "k8s: nvidia.com/gpu limit")
t.eq(dtext.count("path: /health"), 2, "k8s: readiness and liveness on /health")
t.check('prometheus.io/scrape: "true"' in dtext and "prometheus.io/path: /metrics" in dtext, "k8s: scrape annotations")
t.check("kind: Service" in open(os.path.join(dep, "k8s", "service.yaml")).read(), "k8s: a Service")
# the Inference Extension and the autoscaler read the series serve exports (src/server/metrics.c)
ptext = open(pool).read()
t.check("matchLabels:\n      app.kubernetes.io/name: inferlab" in ptext and "number: 8080" in ptext,
        "InferencePool selects the Deployment's pods on its port")
etext = open(os.path.join(dep, "k8s", "epp.yaml")).read()
metrics_c = open(os.path.join(src, "src", "server", "metrics.c")).read()
for name in re.findall(r'"(vllm:\w+)"', etext):
    t.check('"%s"' % name in metrics_c, "epp.yaml reads %s, which serve exports" % name)
t.check("vllm:num_requests_waiting" in etext and "vllm:kv_cache_usage_perc" in etext, "epp: queue depth, KV usage")
htext = open(os.path.join(dep, "k8s", "hpa.yaml")).read()
atext = open(os.path.join(dep, "k8s", "prometheus-adapter.yaml")).read()
t.check("name: inferlab_num_requests_waiting" in htext and "inferlab_num_requests_waiting{" in atext,
        "HPA on the adapter's queue-depth metric")
t.check("inferlab_num_requests_waiting" in metrics_c, "serve exports inferlab_num_requests_waiting")
utext = open(unit).read()
t.check("ExecStart=/usr/local/bin/inferlab serve" in utext and "DynamicUser=yes" in utext, "unit: serve, own user")
for s in skipped:
    print("SKIP (part): %s not installed" % s)
t.finish()
