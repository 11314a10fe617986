#!/bin/sh
# Side-by-side with llama.cpp on the same files, threads and machine, in one run (not part of
# the tests or CI). Installs llama-cpp-python (built from source by pip, ~15 minutes on 2
# cores) into a venv outside the repository, exports builtin:1b as f16, q8_0 and q4_0 with
# bench_engine, measures inferlab, then llama.cpp on the same files; also checks that llama.cpp
# loads the stories260K GGUF inferlab converts and gives the same logits.
# usage: bench/peer_llamacpp.sh [BUILD_DIR (default build/release)] [WORK_DIR (default /tmp/inferlab-peer)]
set -eu
cd "$(dirname "$0")/.."
build="${1:-build/release}"
work="${2:-/tmp/inferlab-peer}"
venv="${INFERLAB_PEER_VENV:-$HOME/.cache/inferlab/venv-llamacpp}"
mkdir -p "$work"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/pip" install -q llama-cpp-python numpy
fi
fx=../shared/fixtures/models
if [ -f "$fx/stories260K.bin" ]; then
  "$build/inferlab" convert --from llama2c "$fx/stories260K.bin" --tokenizer "$fx/tok512.bin" -o "$work/stories.gguf" 2>/dev/null
  "$venv/bin/python" bench/peer_llamacpp.py --logits "$work/stories.gguf" --inferlab "$build/inferlab"
fi
"$build/bench_engine" --dir "$work" --keep
files="$work/inferlab-bench-1b-f16.gguf,$work/inferlab-bench-1b-q8_0.gguf,$work/inferlab-bench-1b-q4_0.gguf"
"$venv/bin/python" bench/peer_llamacpp.py --files "$files"
