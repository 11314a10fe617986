#!/usr/bin/env python3
"""bench/peer_table: inferlab against llama.cpp cell by cell, the table issue 10 is judged on.

For every round, weight type and thread count it runs inferlab (bench_engine) and then llama.cpp
(bench/peer_llamacpp.py, in the Python that has llama-cpp-python) on the same builtin:1b GGUF
file, so the two engines of a cell see the same moment of a shared machine, and prints one
Markdown row per cell: prompt (pp) and generation (tg) tokens/s of both, their ratios, and
inferlab's generation against the read bandwidth bench_engine measured between its passes.

Not a test (it needs llama-cpp-python; bench/peer_llamacpp.sh installs one into a venv outside
the repository and calls this). BF16 runs inferlab with --dtype bf16, the like-for-like setting
(llama.cpp converts a BF16 matmul's activations to bf16).

--level avx2 runs inferlab with IL_ISA=avx2 IL_CPU_AVXVNNI=0, the plain AVX2 kernels an AVX2-only
server (Zen 2/3, Haswell to Cascade Lake) runs; the llama.cpp it is compared with must then be
built without AVX-512 and AVX-VNNI as well (peer_llamacpp.sh --level avx2 does that).

Ctrl-C stops after the running engine and prints the cells measured so far.
Exit codes: 0 done, 1 an engine failed (its output is printed), 2 bad arguments, 130 interrupted.

usage: peer_table.py --peer-python PY [--build build/release] [--dir /tmp/inferlab-peer]
                     [--level native|avx2] [--types q8_0,q4_0,q4_k,f16,bf16] [--threads 1,N]
                     [--pp 512] [--tg 64] [--reps 2] [--rounds 2]
"""
import argparse
import os
import subprocess
import sys
import time


def cpu_name():
    name, family = "unknown CPU", "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name" and name == "unknown CPU":
                    name = v.strip()
                elif k.strip() == "cpu family" and family == "?":
                    family = v.strip()
    except OSError:
        pass
    return f"{name} (family {family}), {os.cpu_count()} logical CPUs"


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"{what} exited with {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def row(out, first, second, what):
    """The fields of the Markdown row whose first two cells are first and second."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] == first and cells[1] == second:
            return cells
    raise RuntimeError(f"{what}: no row for {first}, {second} threads in its output:\n{out}")


def fmt(vals, spec):
    return ", ".join(format(v, spec) for v in vals) if vals else "-"


def table(a, cells):
    print(f"\ncpu: {cpu_name()}; level {a.level}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"| level | type | threads | pp{a.pp} inferlab | pp{a.pp} llama.cpp | pp ratio | tg{a.tg} inferlab "
          f"| tg{a.tg} llama.cpp | tg ratio | tg % bw |")
    print("|---|---|---:|---|---|---|---|---|---|---|")
    for (ty, t), c in cells.items():
        n = min(len(c["ipp"]), len(c["lpp"]))
        if not n:
            continue
        ppr = [c["ipp"][i] / c["lpp"][i] for i in range(n) if c["lpp"][i] > 0]
        tgr = [c["itg"][i] / c["ltg"][i] for i in range(n) if c["ltg"][i] > 0]
        print(f"| {a.level} | {ty} | {t} | {fmt(c['ipp'][:n], '.1f')} | {fmt(c['lpp'][:n], '.1f')} | "
              f"{fmt(ppr, '.2f')}x | {fmt(c['itg'][:n], '.2f')} | {fmt(c['ltg'][:n], '.2f')} | {fmt(tgr, '.2f')}x | "
              f"{', '.join(c['pct'][:n])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer-python", required=True, help="a Python with llama-cpp-python")
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--dir", default="/tmp/inferlab-peer", help="where the GGUF files are (exported if absent)")
    ap.add_argument("--level", default="native", choices=["native", "avx2"])
    ap.add_argument("--types", default="q8_0,q4_0,q4_k,f16,bf16")
    ap.add_argument("--threads", default="1,%d" % os.cpu_count())
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        ap.error(f"--threads {a.threads}: expected a comma list of integers")
    if min(threads) < 1 or min(a.pp, a.tg, a.reps, a.rounds) < 1:
        ap.error("--threads, --pp, --tg, --reps and --rounds must be at least 1")
    types = [t for t in a.types.split(",") if t]
    engine = os.path.join(a.build, "bench_engine")
    if not os.access(engine, os.X_OK):
        ap.error(f"--build {a.build}: no bench_engine there (cmake --build --preset release first)")
    os.makedirs(a.dir, exist_ok=True)
    env = dict(os.environ)
    if a.level == "avx2":
        env.update(IL_ISA="avx2", IL_CPU_AVXVNNI="0")
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_llamacpp.py")
    cells = {(ty, t): {"ipp": [], "itg": [], "pct": [], "lpp": [], "ltg": []} for ty in types for t in threads}
    try:
        for r in range(a.rounds):
            for ty in types:
                for t in threads:
                    sys.stderr.write(f"round {r + 1}/{a.rounds}: {ty}, threads {t}, {time.strftime('%H:%M:%S')}\n")
                    out = run([engine, "--types", ty, "--threads", str(t), "--pp", str(a.pp), "--tg", str(a.tg),
                               "--reps", str(a.reps), "--dir", a.dir, "--keep", "--dtype",
                               "bf16" if ty == "bf16" else "f32"], env, "bench_engine")
                    c = row(out, ty, str(t), "bench_engine")
                    if len(c) < 9:
                        raise RuntimeError(f"bench_engine: short row {c}")
                    gguf = os.path.join(a.dir, f"inferlab-bench-1b-{ty}.gguf")
                    out = run([a.peer_python, peer, "--files", gguf, "--threads", str(t), "--pp", str(a.pp),
                               "--tg", str(a.tg), "--reps", str(a.reps)], os.environ, "peer_llamacpp.py")
                    p = row(out, os.path.basename(gguf), str(t), "peer_llamacpp.py")
                    cell = cells[(ty, t)]
                    cell["ipp"].append(float(c[2]))
                    cell["itg"].append(float(c[3]))
                    cell["pct"].append(c[8])
                    cell["lpp"].append(float(p[2]))
                    cell["ltg"].append(float(p[3]))
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: the cells measured so far\n")
        table(a, cells)
        return 130
    except (RuntimeError, OSError, ValueError) as e:
        sys.stderr.write(f"peer_table: {e}\n")
        table(a, cells)
        return 1
    table(a, cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
