#!/usr/bin/env python3
"""bench/peer_llamacpp: llama.cpp (through the llama-cpp-python package) on the same GGUF files
and thread counts as bench_engine, in the same run, so the two engines are compared side by side.

Not a test: it needs llama-cpp-python (bench/peer_llamacpp.sh installs it into a venv outside
the repository). For each file it measures
  pp: one llama_eval over a 512-token prompt         -> prompt tokens/s
  tg: 128 single-token llama_eval calls after it     -> generated tokens/s
best of --reps, the same method as bench_engine. With --logits MODEL it also checks that
llama.cpp loads a file inferlab wrote and prints the largest logit difference between the two
engines on a token sequence (inferlab's side comes from `inferlab logits`).

usage: peer_llamacpp.py --files a.gguf,b.gguf [--threads 1,2] [--pp 512] [--tg 128] [--reps 3]
       peer_llamacpp.py --logits stories.gguf --inferlab build/release/inferlab
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from llama_cpp import Llama


def bench(path, threads, pp, tg, reps):
    llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=pp + tg + 16,
                n_batch=pp, n_ubatch=pp, verbose=False, logits_all=False)
    nv = llm.n_vocab()
    prompt = [3 + (i * 7919) % (nv - 3) for i in range(pp)]
    llm.reset()
    llm.eval(prompt[:8])  # warm-up: touches the weights once
    best_pp = best_tg = 0.0
    for _ in range(reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        best_pp = max(best_pp, pp / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(prompt[:8])
        t0 = time.perf_counter()
        for i in range(tg):
            llm.eval([3 + (i * 31) % (nv - 3)])
        best_tg = max(best_tg, tg / (time.perf_counter() - t0))
    del llm
    return best_pp, best_tg


def logits_check(path, inferlab):
    tokens = [1, 403, 407, 261, 378, 30, 263, 264]
    llm = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, verbose=False)
    llm.reset()
    llm.eval(tokens)
    ref = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.f32")
        subprocess.run([inferlab, "logits", "-m", path, "--tokens", ",".join(map(str, tokens)), "-o", out],
                       check=True, stderr=subprocess.DEVNULL)
        ours = np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1)
    diff = float(np.abs(ours - ref).max())
    print(f"llama.cpp loaded {path}; max |logit(inferlab) - logit(llama.cpp)| over {len(tokens)} positions = {diff:.3g};"
          f" same argmax at {int((ours.argmax(1) == ref.argmax(1)).sum())}/{len(tokens)} positions")
    return diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="")
    ap.add_argument("--threads", default="1,%d" % os.cpu_count())
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--logits", default="")
    ap.add_argument("--inferlab", default="build/release/inferlab")
    a = ap.parse_args()
    if a.logits:
        logits_check(a.logits, a.inferlab)
    if a.files:
        print(f"\n| file | threads | llama.cpp pp{a.pp} tok/s | llama.cpp tg{a.tg} tok/s |")
        print("|---|---|---|---|")
        for f in a.files.split(","):
            for t in map(int, a.threads.split(",")):
                pp, tg = bench(f, t, a.pp, a.tg, a.reps)
                print(f"| {os.path.basename(f)} | {t} | {pp:.1f} | {tg:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
