#!/usr/bin/env python3
"""bench/startup: where the seconds of a start go, against each phase's roofline, in one run.

builtin:1b exported to GGUF as F16 and Q4_0; for each file, with a warm and with a cold page
cache (the file's pages dropped with posix_fadvise DONTNEED after an fdatasync), `inferlab run
-n 1` with the weights read three ways: mmap on first use (the default), --preload (mmap, every
page touched at load) and --no-mmap (read() into memory at load); and on sim with a throttled
link (sim:SIZE,pcie=RATE) with --preload, where the weights are uploaded. Each run writes its
timeline with --startup-json.

Rooflines, measured in the same run on the same file: `cat FILE >/dev/null` warm and cold (the
denominator of "vs cat"), a plain sequential read (16 MiB os.read requests) beside it, and the
time to fault in as many new pages as the file has (the floor under any read into new memory
of the process); the link's rate is the sim spec's. The overlap rows run --no-mmap on a slower
sim link (--pipe-pcie) with and without --load-pipeline: their read + upload against the sum
and the longer of the two without it. The report gives each phase's rate as a fraction of its roofline, and names the CPU.
Then the issue's targets as ratios from the same rows: a warm read at load (--no-mmap, and
mmap --preload) >= 0.80 of the plain warm read, a cold one >= 0.80 of the plain cold read, the
sim upload >= 0.80 of the link. Where llama-cpp-python is installed (the venv
bench/peer_llamacpp.sh makes: $INFERLAB_PEER_VENV, else ~/.cache/inferlab/venv-llamacpp; or
--peer-python), llama.cpp loads the same file in the same run, warm and cold, with mmap and
without: the seconds of its Llama() (load and context) and of its first token, against
inferlab's whole timeline (process start to first token); otherwise a line says why not.
Not part of the tests (a benchmark: the numbers depend on the machine and its load).

usage: bench/startup.py [--work DIR] [--reps N] [--pcie RATE] [--types f16,q4_0] [--peer-python PY]
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


def cat_read(path):
    """Seconds of `cat FILE >/dev/null` (the issue's roofline: cat's own requests into one small buffer)."""
    t0 = time.monotonic()
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t0


def new_pages(size):
    """Seconds to fault in `size` bytes of fresh anonymous memory (MADV_POPULATE_WRITE), no copy:
    the floor under any read into new memory of the process (--no-mmap's), which cat's reused
    small buffer never pays."""
    import mmap
    m = mmap.mmap(-1, size)
    t0 = time.monotonic()
    try:
        m.madvise(23)  # MADV_POPULATE_WRITE (Linux 5.14)
    except OSError:
        for i in range(0, size, 4096):
            m[i] = 1
    t = time.monotonic() - t0
    m.close()
    return t


def set_cache(path, cache):
    """The file's pages dropped ("cold") or read once ("warm") before a run."""
    if cache == "cold":
        drop(path)
    else:
        plain_read(path)


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


PEER = r'''
import sys, time
t0 = time.monotonic()
from llama_cpp import Llama
path, mmap, threads = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
t1 = time.monotonic()
m = Llama(model_path=path, n_ctx=256, n_threads=threads, use_mmap=mmap, verbose=False)
t2 = time.monotonic()
m.create_completion("Hello", max_tokens=1, temperature=0)
t3 = time.monotonic()
print("%.6f %.6f %.6f" % (t1 - t0, t2 - t1, t3 - t2))
'''


def peer_python(arg):
    """The python that has llama_cpp, and None with the reason when there is none."""
    cands = [arg] if arg else [os.path.join(os.environ.get("INFERLAB_PEER_VENV", os.path.expanduser(
        "~/.cache/inferlab/venv-llamacpp")), "bin", "python")]
    for py in cands:
        if py and os.access(py, os.X_OK) and subprocess.run([py, "-c", "import llama_cpp"],
                                                            capture_output=True).returncode == 0:
            return py, None
    return None, "no python with llama_cpp at %s (bench/peer_llamacpp.sh installs one; or --peer-python)" % cands[0]


def peer_load(py, model, mmap):
    """llama.cpp's (import, Llama() load + context, first token) seconds on model."""
    r = subprocess.run([py, "-c", PEER, model, "1" if mmap else "0", str(os.cpu_count() or 1)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return [float(x) for x in r.stdout.split()[-3:]]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/inferlab-startup")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pcie", default="4GB/s")
    ap.add_argument("--types", default="f16,q4_0")
    ap.add_argument("--pipe-pcie", default="500MB/s",
                    help="the sim link of the overlap rows (--no-mmap with and without --load-pipeline), slow "
                         "enough that the upload and the read take comparable time")
    ap.add_argument("--peer-python", default=None, help="a python with llama_cpp (default: the peer venv)")
    a = ap.parse_args()
    peer, why = peer_python(a.peer_python)
    rows, peers = [], []
    if not os.access(CLI, os.X_OK):
        sys.exit("build first: cmake --preset release && cmake --build --preset release --target inferlab")
    os.makedirs(a.work, exist_ok=True)
    rate = a.pcie
    units = {"GB/s": 1e9, "MB/s": 1e6}
    link = next(float(rate[:-len(u)]) * m for u, m in units.items() if rate.endswith(u))
    pipe_link = next(float(a.pipe_pcie[:-len(u)]) * m for u, m in units.items() if a.pipe_pcie.endswith(u))
    overlaps = []
    js = os.path.join(a.work, "startup.json")
    print("# inferlab startup: %s, %d CPUs; %d repetitions, medians" % (cpu_name(), os.cpu_count() or 1, a.reps))
    print()
    print("| file | cache | read | total s | read s | read MB/s | vs cat | first_token s | upload MB/s | vs link | dominant |")
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
        print("| %s (%.0f MB) | roofline | plain read | | | warm %.0f, cold %.0f | | | | | |"
              % (os.path.basename(model), size / 1e6, warm_roof / 1e6, cold_roof / 1e6))
        # cat, the roofline and the denominator of "vs cat"
        warm_cat = size / median([cat_read(model) for _ in range(a.reps)])
        cold = []
        for _ in range(a.reps):
            drop(model)
            cold.append(cat_read(model))
        cold_cat = size / median(cold)
        print("| %s | roofline | cat FILE >/dev/null | | | warm %.0f, cold %.0f | 1.00 | | | | |"
              % (os.path.basename(model), warm_cat / 1e6, cold_cat / 1e6))
        warm_roof, cold_roof = warm_cat, cold_cat
        pages = size / median([new_pages(size) for _ in range(a.reps)])
        print("| %s | floor | new pages for the file (fault in, no copy) | | | %.0f | %.2f | | | | |"
              % (os.path.basename(model), pages / 1e6, pages / warm_cat))
        inferlab_total = {}
        sim = "sim:%dGiB,pcie=%s" % (max(2, size * 2 // (1 << 30) + 1), rate)
        slow = "sim:%dGiB,pcie=%s" % (max(2, size * 2 // (1 << 30) + 1), a.pipe_pcie)
        for cache in ("warm", "cold"):
            seq = {}
            for how, extra in (("mmap", []), ("mmap --preload", ["--preload"]), ("--no-mmap", ["--no-mmap"]),
                               ("--direct-io", ["--direct-io"]),
                               ("sim --preload", ["--preload", "--device", sim]),
                               ("sim(%s) --no-mmap" % a.pipe_pcie, ["--no-mmap", "--device", slow]),
                               ("sim(%s) --no-mmap --load-pipeline" % a.pipe_pcie,
                                ["--no-mmap", "--load-pipeline", "--device", slow])):
                tls = []
                for _ in range(a.reps):
                    set_cache(model, cache)
                    tls.append(run(model, extra, js))
                tot = median([x["total_seconds"] for x in tls])
                rd = median([x["by"]["read"]["seconds"] for x in tls])
                ft = median([x["by"].get("first_token", {"seconds": 0})["seconds"] for x in tls])
                at_load = tls[0]["read_at_load"]
                rrate = size / rd if at_load and rd > 0 else 0
                roof = warm_roof if cache == "warm" else cold_roof
                up = [x["by"]["upload"] for x in tls if x["by"].get("upload", {}).get("bytes")]
                urate = median([u["rate"] for u in up]) if up else 0
                this_link = pipe_link if how.startswith("sim(") else link
                if how.startswith("sim("):  # the overlap rows: the read's and the upload's seconds
                    ups = median([x["by"]["upload"]["seconds"] for x in tls])
                    seq[how.endswith("--load-pipeline")] = (rd, ups)
                    if len(seq) == 2:
                        (r0, u0), (r1, u1) = seq[False], seq[True]
                        overlaps.append((os.path.basename(model), cache, r0, u0, r1 + u1))
                if how == "--no-mmap --load-pipeline" or how.endswith("--load-pipeline"):
                    rrate = 0  # the read ran inside the upload's time: no rate of its own
                dom = tls[len(tls) // 2]["verdict"]["phase"]
                rows.append({"file": os.path.basename(model), "cache": cache, "how": how,
                             "read": rrate / roof if rrate else None,
                             "link": urate / this_link if urate else None})
                inferlab_total[(cache, how)] = tot
                print("| %s | %s | %s | %.3f | %.3f | %s | %s | %.3f | %s | %s | %s |" % (
                    os.path.basename(model), cache, how, tot, rd,
                    "%.0f" % (rrate / 1e6) if rrate else
                    ("beside the upload" if how.endswith("--load-pipeline") else "on first use"),
                    "%.2f" % (rrate / roof) if rrate else "", ft,
                    "%.0f" % (urate / 1e6) if urate else "", "%.2f" % (urate / this_link) if urate else "", dom))
        if peer:
            for cache in ("warm", "cold"):
                for mm in (True, False):
                    got = []
                    for _ in range(a.reps):
                        set_cache(model, cache)
                        r = peer_load(peer, model, mm)
                        if r:
                            got.append(r)
                    if got:
                        how = "mmap" if mm else "--no-mmap"
                        peers.append((os.path.basename(model), cache, how, median([g[1] for g in got]),
                                      median([g[2] for g in got]), inferlab_total.get((cache, how))))
    print()
    print("Targets, from the rows above (ratio, target 0.80):")
    print()
    for r in rows:
        if r["read"] is not None and r["how"] in ("--no-mmap", "--direct-io", "mmap --preload"):
            print("- %s, %s, %s: read at load %.2f of cat's %s read: %s" % (
                r["file"], r["cache"], r["how"], r["read"], r["cache"], "met" if r["read"] >= 0.8 else "NOT met"))
        if r["link"] is not None:
            print("- %s, %s, %s: upload %.2f of the link: %s" % (
                r["file"], r["cache"], r["how"], r["link"], "met" if r["link"] >= 0.8 else "NOT met"))
    print()
    if overlaps:
        print("Parallel read + upload (--no-mmap on sim with a %s link; read and upload medians):" % a.pipe_pcie)
        print()
        print("| file | cache | read s | upload s | sum s | max s | --load-pipeline read + upload s | vs sum | vs max |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for f, cache, r0, u0, both in overlaps:
            print("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |" % (
                f, cache, r0, u0, r0 + u0, max(r0, u0), both, both / (r0 + u0), both / max(r0, u0)))
        print()
    if peer:
        print("llama.cpp (llama-cpp-python, %s) on the same files in this run, medians:" % peer)
        print()
        print("| file | cache | read | llama.cpp load s | llama.cpp first token s | inferlab total s | inferlab / llama.cpp (load + first token) |")
        print("|---|---|---|---:|---:|---:|---:|")
        for f, cache, how, ld, ft, il in peers:
            print("| %s | %s | %s | %.3f | %.3f | %s | %s |" % (
                f, cache, how, ld, ft, "%.3f" % il if il else "", "%.2f" % (il / (ld + ft)) if il else ""))
        print()
        print("llama.cpp load: its Llama() (the model's load and a 256-token context), the import not counted; "
              "inferlab total: process start to the first token (the python interpreter's start is not in "
              "llama.cpp's figure, so the ratio favours llama.cpp).")
    else:
        print("llama.cpp: not run: " + why)
    print()
    print("read MB/s: file bytes over the read phase (at load only: with mmap on first use the read is in "
          "first_token). vs cat: against `cat FILE >/dev/null` of the same file in this run, warm or cold. "
          "vs link: the upload phase's rate over the sim spec's %s." % rate)


if __name__ == "__main__":
    main()
