#!/bin/sh
# Side by side with llama.cpp on the same files, threads and machine, in one run (not part of
# the tests or CI). Installs llama-cpp-python (built from source by pip, ~15 minutes on 2
# cores) into a venv outside the repository; on the native level also checks that llama.cpp
# loads the stories260K GGUF inferlab converts and gives the same logits; then runs
# bench/peer_table.py: builtin:1b exported per weight type, inferlab then llama.cpp for every
# cell (type x threads), several rounds, one Markdown table of both engines and their ratios.
#
# usage: bench/peer_llamacpp.sh [--level native|avx2] [--types LIST] [--threads LIST]
#                               [--rounds N] [BUILD_DIR (build/release)] [WORK_DIR (/tmp/inferlab-peer)]
# --level native: inferlab's best kernels against llama.cpp built for this CPU (GGML_NATIVE).
# --level avx2: inferlab's plain AVX2 kernels (IL_ISA=avx2 IL_CPU_AVXVNNI=0) against llama.cpp
#   built with AVX2/FMA/F16C only, what an AVX2-only server runs, measured on any newer x86 CPU.
# Exit codes: those of peer_table.py (0 done, 1 an engine failed, 130 interrupted), 2 bad usage.
set -eu
cd "$(dirname "$0")/.."
level=native types=q8_0,q4_0,q4_k,f16,bf16 threads="1,$(nproc)" rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --level) level="${2:?--level needs native or avx2}"; shift 2 ;;
    --types) types="${2:?--types needs a list}"; shift 2 ;;
    --threads) threads="${2:?--threads needs a list}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "peer_llamacpp.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
build="${1:-build/release}"
work="${2:-/tmp/inferlab-peer}"
case "$level" in
  native) venv="${INFERLAB_PEER_VENV:-$HOME/.cache/inferlab/venv-llamacpp}"; flags="-DGGML_NATIVE=ON" ;;
  avx2) venv="${INFERLAB_PEER_VENV_AVX2:-$HOME/.cache/inferlab/venv-llamacpp-avx2}"
        flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF" ;;
  *) echo "peer_llamacpp.sh: --level $level: expected native or avx2" >&2; exit 2 ;;
esac
mkdir -p "$work"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install -q --no-binary llama-cpp-python \
    llama-cpp-python numpy
fi
fx=../shared/fixtures/models
if [ "$level" = native ] && [ -f "$fx/stories260K.bin" ]; then
  "$build/inferlab" convert --from llama2c "$fx/stories260K.bin" --tokenizer "$fx/tok512.bin" -o "$work/stories.gguf" 2>/dev/null
  "$venv/bin/python" bench/peer_llamacpp.py --logits "$work/stories.gguf" --inferlab "$build/inferlab"
fi
exec python3 bench/peer_table.py --peer-python "$venv/bin/python" --build "$build" --dir "$work" --level "$level" \
  --types "$types" --threads "$threads" --rounds "$rounds"
