#!/usr/bin/env python3
"""Reference dump of a GGUF model made by llama.cpp (through the PyPI package llama-cpp-python).

Writes one small JSON file that tests/python/test_llamacpp_ref_*.py compare inferlab against:
tokenizer ids, greedy continuations, logits of a prompt and a perplexity, each computed by
llama.cpp alone (no inferlab code), so a mismatch points at inferlab or at the file, never at a
shared helper.

Usage (in a venv with llama-cpp-python==0.3.36, numpy and gguf; see tests/data/README-llamacpp.md):
  scripts/llamacpp_reference.py MODEL.gguf -o OUT.json [--source SPEC]
      [--tokenize NAME=FILE]... [--generate NAME=TEXT]... [-n 32]
      [--logits NAME=TEXT] [--top 40] [--ppl FILE --ctx 1024 --chunks 2] [--threads 2]

The JSON object ("format": "inferlab-llamacpp-ref-1"):
  model       {"file": basename, "bytes": size, "sha256": hex, "source": SPEC}; SPEC says how a
              test gets the same bytes ("cache:NAME" for scripts/fetch_*.sh's cache, or
              "builtin:NAME f32" for `inferlab convert builtin:NAME --type f32`)
  llama_cpp   the llama-cpp-python version
  tokenize    [{"name", "file" (relative to tests/data), "special": bool, "ids"}]: llama_tokenize of
              the file's bytes without BOS, once with control-token text parsed, once as text
  generate    [{"name", "prompt", "prompt_ids", "ids", "text"}]: prompt_ids = tokenize(prompt, BOS
              as the vocabulary says, control-token text parsed); ids = up to n greedy tokens
              (argmax of the last position's logits, lowest id on ties), stopping after an
              end-of-generation token (which is kept in ids); text = the pieces of ids without
              control-token text, as llama.cpp's token_to_piece(special=false) prints them;
              variant_text (with --variants): the greedy text of llama.cpp with flash attention
              ("flash_attn") and with f32 KV cells ("kv_f32"), both exact paths of llama.cpp
  logits      {"name", "prompt", "ids", "n_vocab", "rows": [{"pos", "argmax", "max",
              "logsumexp", "top": [[id, logit]...], "sample": [[id, logit]...]}]}: one row per
              position; top = the `--top` largest logits; sample = every (n_vocab // 64)-th id, so
              a test sees the bulk of the distribution too; spread (with --variants) = the largest
              |logit difference| on those ids between llama.cpp's default and its variants, i.e.
              how far llama.cpp itself moves. Logits rounded to 1e-5.
  perplexity  {"file", "ctx", "chunks", "tokens", "scored", "ppl", "nll_sum"}: as llama-perplexity's
              default path: the file tokenized with BOS (add_bos) and control-token text as text;
              cut into floor(tokens / ctx) windows (the first `chunks` of them), each evaluated on an
              empty KV cache with its first token replaced by BOS; the logits at positions
              ctx/2 .. ctx-2 score the tokens at ctx/2+1 .. ctx-1; ppl = exp(mean nll), nll from a
              log-softmax in double.
"""
import argparse
import hashlib
import json
import math
import os
import sys

import llama_cpp
import numpy as np


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def name_value(s, what):
    if "=" not in s:
        sys.exit(f"llamacpp_reference.py: {what} '{s}': expected NAME=VALUE")
    return s.split("=", 1)


def r5(x):
    return round(float(x), 5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--source", default="")
    ap.add_argument("--tokenize", action="append", default=[])
    ap.add_argument("--generate", action="append", default=[])
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--logits")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--ppl")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--chunks", type=int, default=0, help="0 = every window")
    ap.add_argument("--variants", action="store_true",
                    help="also run llama.cpp with flash attention and with f32 KV cells (spread, variant_text)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()

    n_ctx = max(a.ctx if a.ppl else 0, 512)
    def load(**kw):
        return llama_cpp.Llama(model_path=a.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                               logits_all=True, n_threads=a.threads, n_threads_batch=a.threads,
                               verbose=False, **kw)

    llm = load()
    vocab = llm._model.vocab
    nv = llm.n_vocab()
    out = {"format": "inferlab-llamacpp-ref-1", "llama_cpp": llama_cpp.__version__,
           "model": {"file": os.path.basename(a.model), "bytes": os.path.getsize(a.model),
                     "sha256": sha256(a.model), "source": a.source}}

    def run(ids, m=None):
        m = m or llm
        m.reset()
        m.eval(ids)
        return m.scores[:len(ids)]

    def greedy(m, pids):
        ids = []
        logits = run(pids, m)[-1]
        for _ in range(a.n):
            t = int(np.argmax(logits))
            ids.append(t)
            if llama_cpp.llama_vocab_is_eog(vocab, t):
                break
            m.eval([t])
            logits = m.scores[m.n_tokens - 1]
        return ids

    # llama.cpp's own spread: the same file under its other exact paths (flash attention on, the
    # default being off; f32 KV cells instead of f16). A model as sensitive to rounding as Gemma 3
    # 270M moves its logits by units between them, so the tests' tolerance is measured, not guessed.
    variants = [("flash_attn", load(flash_attn=True)), ("kv_f32", load(type_k=0, type_v=0))] \
        if a.variants else []

    data_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
    out["tokenize"] = []
    for spec in a.tokenize:
        name, path = name_value(spec, "--tokenize")
        text = open(path, "rb").read()
        for special in (True, False):
            out["tokenize"].append({"name": name, "file": os.path.relpath(path, data_dir),
                                    "special": special,
                                    "ids": llm.tokenize(text, add_bos=False, special=special)})

    out["generate"] = []
    for spec in a.generate:
        name, prompt = name_value(spec, "--generate")
        pids = llm.tokenize(prompt.encode(), add_bos=llm._model.add_bos_token(), special=True)
        ids = greedy(llm, pids)
        text = llm._model.detokenize(ids, special=False).decode("utf-8", errors="replace")
        alt = {}
        for vn, vm in variants:
            alt[vn] = vm._model.detokenize(greedy(vm, pids), special=False).decode("utf-8", errors="replace")
        out["generate"].append({"name": name, "prompt": prompt, "prompt_ids": pids, "ids": ids,
                                "text": text, "variant_text": alt})

    if a.logits:
        name, prompt = name_value(a.logits, "--logits")
        ids = llm.tokenize(prompt.encode(), add_bos=llm._model.add_bos_token(), special=True)
        rows = []
        stride = max(1, nv // 64)
        alts = [run(ids, vm).astype(np.float64) for _, vm in variants]
        for pos, row in enumerate(run(ids)):
            row = row.astype(np.float64)
            top = np.argsort(-row, kind="stable")[:a.top]
            m = row.max()
            cmp = list(top) + list(range(0, nv, stride))
            spread = max([float(np.abs(v[pos][cmp] - row[cmp]).max()) for v in alts] or [0.0])
            rows.append({"pos": pos, "argmax": int(np.argmax(row)), "max": r5(m),
                         "logsumexp": r5(m + math.log(np.exp(row - m).sum())),
                         "spread": r5(spread),
                         "top": [[int(i), r5(row[i])] for i in top],
                         "sample": [[i, r5(row[i])] for i in range(0, nv, stride)]})
        out["logits"] = {"name": name, "prompt": prompt, "ids": ids, "n_vocab": nv, "rows": rows}

    if a.ppl:
        text = open(a.ppl, "rb").read()
        toks = llm.tokenize(text, add_bos=llm._model.add_bos_token(), special=False)
        n_chunk = len(toks) // a.ctx
        if a.chunks:
            n_chunk = min(n_chunk, a.chunks)
        if n_chunk < 1:
            sys.exit(f"llamacpp_reference.py: {a.ppl}: {len(toks)} tokens, fewer than --ctx {a.ctx}")
        first = a.ctx // 2
        nll_sum, scored = 0.0, 0
        for c in range(n_chunk):
            w = toks[c * a.ctx:(c + 1) * a.ctx]
            if llm._model.add_bos_token():
                w[0] = llama_cpp.llama_vocab_bos(vocab)
            lg = run(w).astype(np.float64)
            for p in range(first, a.ctx - 1):
                row = lg[p]
                m = row.max()
                nll_sum += -(row[toks[c * a.ctx + p + 1]] - m - math.log(np.exp(row - m).sum()))
                scored += 1
        out["perplexity"] = {"file": os.path.relpath(a.ppl, data_dir) if "tests/data" in
                             os.path.abspath(a.ppl) else os.path.basename(a.ppl),
                             "ctx": a.ctx, "chunks": n_chunk, "tokens": len(toks),
                             "scored": scored, "nll_sum": round(nll_sum, 6),
                             "ppl": round(math.exp(nll_sum / scored), 6)}

    with open(a.output + ".part", "w") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    os.replace(a.output + ".part", a.output)


if __name__ == "__main__":
    main()
