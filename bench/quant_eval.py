#!/usr/bin/env python3
"""bench/quant_eval: what every quantization type saves and what it costs, measured in one run.

Not a test. For each model (builtin:tiny exported to an f32 GGUF, the stories260K fixture, and
with --with-1b builtin:1b exported as f16) and every --type of `inferlab quant`, it measures
  size      output file bytes, and its ratio to the f32/f16 source;
  quant     MB per CPU-second: source tensor bytes / (user + system) CPU seconds of the whole
            `inferlab quant` process, all threads (load, convert, write; without --report/--json,
            whose statistics cost time), measured the same way for llama-quantize. CPU time, not
            wall time, because the machines this runs on are shared and wall time swings 3x;
            at equal thread counts the ratio of the two columns is the speed ratio;
  eval      `inferlab eval --ref SOURCE` on the text: perplexity, its ratio to the source's,
            KL(source || quantized) mean / p99 / max, top-1 agreement;
  speed     (--speed) `inferlab bench` on the file, source included: load milliseconds, prompt and
            generation tokens/s (--speed-prompt / --speed-gen tokens, best of 3 repetitions),
            and the run's memory by category (weights: mapped from the file plus allocated).
With --llama-bin DIR (a folder holding llama.cpp's llama-quantize and llama-perplexity) it also
  - quantizes the same source with llama-quantize, compares the two files byte for byte, and
    reports llama-quantize's MB/s in the same run;
  - runs llama-perplexity on the source (and the quantized file when the bytes are equal) with
    the same --ctx, to compare perplexity definitions.
For built-in models (random weights) only KL and top-1 are meaningful; the text is the
stories260K samples file for every model.

usage: bench/quant_eval.py [--inferlab build/release/inferlab] [--types q8_0,q4_k_m,...]
                           [--ctx 128] [--chunks N] [--threads 2] [--llama-bin DIR]
                           [--with-1b | --only-1b] [--work /tmp/il-quant-bench]
                           [--speed [--speed-prompt 128] [--speed-gen 32]]
"""
import argparse
import filecmp
import json
import os
import re
import resource
import subprocess
import sys
import time

TYPES = "f16,bf16,q8_0,q6_k,q5_k_m,q5_k_s,q4_k_m,q4_k_s,q5_1,q5_0,q4_1,q4_0,iq4_nl"


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, want_cpu=False):
    """Runs cmd; returns stdout, stderr and wall seconds (or CPU seconds, user + system, of the
    process and its threads, with want_cpu: robust when other jobs share the machine)."""
    t0, c0 = time.monotonic(), cpu_children()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt, dc = time.monotonic() - t0, cpu_children() - c0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return p.stdout, p.stderr, (dc if want_cpu else dt)


def llama_ppl(bin_dir, model, text, ctx, threads):
    _, err, _ = run([os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", text, "-c", str(ctx), "-b", str(ctx),
                     "-t", str(threads)])
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", err)
    return float(m.group(1)) if m else float("nan")


def speed(il, model, threads, prompt, gen):
    """load s, prompt tok/s, gen tok/s and MiB by category from one `inferlab bench --json` run."""
    out, _, _ = run([il, "bench", "-m", model, "--prompt", str(prompt), "--gen", str(gen), "-r", "3", "-t", str(threads),
                     "--roofline-ms", "0", "--json", "-q"])
    r = json.loads(out)["results"][0]
    s = r["summary"]
    mib = lambda k: (r["memory_peak_bytes"].get(k, 0) + r["memory_mapped_bytes"].get(k, 0)) / 2**20
    best = lambda k: max(s[k]["max"], 0) if k in s else float("nan")
    return (f"{1000 * s['load_s']['min']:.1f} | {best('prompt_tps'):.1f} | {best('gen_tps'):.2f} | "
            f"{mib('weights'):.1f} | {mib('kv'):.1f} | {mib('activations'):.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inferlab", default="build/release/inferlab")
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-bin")
    ap.add_argument("--with-1b", action="store_true")
    ap.add_argument("--only-1b", action="store_true", help="skip builtin:tiny and stories260K")
    ap.add_argument("--chunks", type=int, default=0, help="evaluate only the first N windows (0 = all)")
    ap.add_argument("--work", default="/tmp/il-quant-bench")
    ap.add_argument("--speed", action="store_true", help="also load time, tokens/s and memory of every file")
    ap.add_argument("--speed-prompt", type=int, default=128)
    ap.add_argument("--speed-gen", type=int, default=32)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    fx = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "fixtures", "models")
    text = os.path.join(fx, "stories260K-samples.txt")
    if not os.path.exists(text):
        sys.exit(f"{text} absent: the benchmark needs the stories260K fixture")
    il = a.inferlab
    sources = []
    if not a.only_1b:
        tiny = os.path.join(a.work, "tiny-f32.gguf")
        run([il, "quant", "-m", "builtin:tiny", "-o", tiny, "--type", "f32", "-t", str(a.threads)])
        sources.append(("builtin:tiny", tiny))
        sources.append(("stories260K", os.path.join(fx, "stories260K-f32.gguf")))
    if a.with_1b or a.only_1b:
        b1 = os.path.join(a.work, "1b-f16.gguf")
        if not os.path.exists(b1):
            run([il, "quant", "-m", "builtin:1b", "-o", b1, "--type", "f16", "-t", str(a.threads)])
        sources.append(("builtin:1b", b1))

    print(f"CPU: {cpu_name()}, threads {a.threads}, eval --ctx {a.ctx} on {os.path.basename(text)}\n")
    for name, src in sources:
        src_size = os.path.getsize(src)
        chunks = ["--chunks", str(a.chunks)] if a.chunks else []
        ev, _, _ = run([il, "eval", "-m", src, "--text", text, "--ctx", str(a.ctx), "-t", str(a.threads), "--json"] + chunks)
        base = json.loads(ev)
        line = f"### {name} (source {os.path.basename(src)}, {src_size / 1e6:.2f} MB, perplexity {base['perplexity']:.4f}"
        if a.llama_bin and not a.chunks:
            line += f"; llama-perplexity {llama_ppl(a.llama_bin, src, text, a.ctx, a.threads):.4f}"
        print(line + ")\n")
        hdr = "| type | file MB | size vs source | quant MB per CPU-s | perplexity | ppl ratio | KL mean | KL p99 | KL max | top-1 |"
        sep = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        if a.llama_bin:
            hdr += " llama-quantize MB per CPU-s | same bytes |"
            sep += "---:|:---:|"
        if a.speed:
            hdr += f" load ms | pp{a.speed_prompt} tok/s | tg{a.speed_gen} tok/s | weights MiB | kv MiB | activations MiB |"
            sep += "---:|---:|---:|---:|---:|---:|"
        print(hdr)
        print(sep)
        if a.speed:
            blanks = "| - " * (9 + (2 if a.llama_bin else 0))
            print(f"| source {blanks}| {speed(il, src, a.threads, a.speed_prompt, a.speed_gen)}", flush=True)
        tensor_in = None
        for t in a.types.split(","):
            out = os.path.join(a.work, f"{name.replace(':', '_')}-{t}.gguf")
            if tensor_in is None:  # source tensor bytes, from one --json run (its statistics cost time)
                qj, _, _ = run([il, "quant", "-m", src, "-o", out, "--type", t, "-t", str(a.threads), "--json"])
                tensor_in = sum(x["bytes_in"] for x in json.loads(qj)["tensors"])
            _, _, qdt = run([il, "quant", "-m", src, "-o", out, "--type", t, "-t", str(a.threads)], want_cpu=True)
            out_size = os.path.getsize(out)
            ev, _, _ = run([il, "eval", "-m", out, "--ref", src, "--text", text, "--ctx", str(a.ctx), "-t", str(a.threads),
                            "--json"] + chunks)
            e = json.loads(ev)
            row = (f"| {t} | {out_size / 1e6:.3f} | {out_size / src_size:.3f} | "
                   f"{tensor_in / 1e6 / qdt:.1f} | {e['perplexity']:.4f} | {e['perplexity_ratio']:.4f} | "
                   f"{e['kl']['mean']:.5f} | {e['kl']['p99']:.5f} | {e['kl']['max']:.5f} | {100 * e['top1_agreement']:.1f}% |")
            if a.llama_bin:
                lo = out + ".llama.gguf"
                _, _, dt = run([os.path.join(a.llama_bin, "llama-quantize"), src, lo, t.upper(), str(a.threads)], want_cpu=True)
                same = filecmp.cmp(lo, out, shallow=False)
                row += f" {tensor_in / 1e6 / dt:.1f} | {'yes' if same else 'no'} |"
            if a.speed:
                row += " " + speed(il, out, a.threads, a.speed_prompt, a.speed_gen)
            print(row, flush=True)
        print()


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
