#!/usr/bin/env python3
"""bench/startup: where the seconds of a start go, against each phase's roofline, in one run.

builtin:1b exported to GGUF as F16 and Q4_0; for each file, with a warm and with a cold page
cache (the file's pages dropped with posix_fadvise DONTNEED after an fdatasync), `inferlab run
-n 1` with the weights read three ways: mmap on first use (the default), --preload (mmap, every
page touched at load) and --no-mmap (read() into memory at load); and on sim with a throttled
link (sim:SIZE,pcie=RATE) with --preload, where the weights are uploaded. Each run writes its
timeline with --startup-json.

Rooflines, measured in the same run on the same file: a plain sequential read (16 MiB read()
requests to nothing, as `cat FILE >/dev/null` does) warm and cold; the link's rate is the sim
spec's. The report gives each phase's rate as a fraction of its roofline, and names the CPU.
Not part of the tests (a benchmark: the numbers depend on the machine and its load).

usage: bench/startup.py [--work DIR] [--reps N] [--pcie RATE] [--types f16,q4_0]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "release", "inferlab")


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def plain_read(path):
    """Seconds of a sequential read of the whole file in 16 MiB requests (the `cat` roofline)."""
    t0 = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 16 << 20):
            pass
    finally:
        os.close(fd)
    return time.monotonic() - t0


def run(model, extra, out_json):
    cmd = [CLI, "run", "-m", model, "-n", "1", "-p", "Hello", "--no-echo", "-t", str(os.cpu_count() or 1),
           "--startup-json", out_json] + extra
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("inferlab run failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr))
    with open(out_json) as f:
        tl = json.load(f)
    tl["wall"] = wall
    tl["by"] = {p["name"]: p for p in tl["phases"]}
    return tl


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/inferlab-startup")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pcie", default="4GB/s")
    ap.add_argument("--types", default="f16,q4_0")
    a = ap.parse_args()
    if not os.access(CLI, os.X_OK):
        sys.exit("build first: cmake --preset release && cmake --build --preset release --target inferlab")
    os.makedirs(a.work, exist_ok=True)
    rate = a.pcie
    units = {"GB/s": 1e9, "MB/s": 1e6}
    link = next(float(rate[:-len(u)]) * m for u, m in units.items() if rate.endswith(u))
    js = os.path.join(a.work, "startup.json")
    print("# inferlab startup: %s, %d CPUs; %d repetitions, medians" % (cpu_name(), os.cpu_count() or 1, a.reps))
    print()
    print("| file | cache | read | total s | read s | read MB/s | vs plain read | first_token s | upload MB/s | vs link | dominant |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for t in a.types.split(","):
        model = os.path.join(a.work, "1b-%s.gguf" % t)
        if not os.path.exists(model):
            subprocess.run([CLI, "convert", "builtin:1b", "--type", t, "-o", model], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        size = os.path.getsize(model)
        # the rooflines of this file, in this run
        plain_read(model)
        warm_roof = size / median([plain_read(model) for _ in range(a.reps)])
        cold = []
        for _ in range(a.reps):
            drop(model)
            cold.append(plain_read(model))
        cold_roof = size / median(cold)
        print("| %s (%.0f MB) | roofline | plain read | | | warm %.0f, cold %.0f | 1.00 | | | | |"
              % (os.path.basename(model), size / 1e6, warm_roof / 1e6, cold_roof / 1e6))
        sim = "sim:%dGiB,pcie=%s" % (max(2, size * 2 // (1 << 30) + 1), rate)
        for cache in ("warm", "cold"):
            for how, extra in (("mmap", []), ("mmap --preload", ["--preload"]), ("--no-mmap", ["--no-mmap"]),
                               ("sim --preload", ["--preload", "--device", sim])):
                tls = []
                for _ in range(a.reps):
                    if cache == "cold":
                        drop(model)
                    else:
                        plain_read(model)
                    tls.append(run(model, extra, js))
                tot = median([x["total_seconds"] for x in tls])
                rd = median([x["by"]["read"]["seconds"] for x in tls])
                ft = median([x["by"].get("first_token", {"seconds": 0})["seconds"] for x in tls])
                at_load = tls[0]["read_at_load"]
                rrate = size / rd if at_load and rd > 0 else 0
                roof = warm_roof if cache == "warm" else cold_roof
                up = [x["by"]["upload"] for x in tls if x["by"].get("upload", {}).get("bytes")]
                urate = median([u["rate"] for u in up]) if up else 0
                dom = tls[len(tls) // 2]["verdict"]["phase"]
                print("| %s | %s | %s | %.3f | %.3f | %s | %s | %.3f | %s | %s | %s |" % (
                    os.path.basename(model), cache, how, tot, rd,
                    "%.0f" % (rrate / 1e6) if rrate else "on first use",
                    "%.2f" % (rrate / roof) if rrate else "", ft,
                    "%.0f" % (urate / 1e6) if urate else "", "%.2f" % (urate / link) if urate else "", dom))
    print()
    print("read MB/s: file bytes over the read phase (at load only: with mmap on first use the read is in "
          "first_token). vs plain read: against the sequential read of the same file in this run, warm or cold. "
          "vs link: the upload phase's rate over the sim spec's %s." % rate)


if __name__ == "__main__":
    main()
