#!/bin/sh
# bench/spec_bench.sh: speculative decoding's speed-up at batch 1 (inferlab run), as a ratio
# against plain decoding measured in the same run on the same machine.
#
#   bench/spec_bench.sh [INFERLAB] [TARGET] [DRAFT] [N_TOKENS] [THREADS]
#
# Defaults: build/release/inferlab, builtin:1b, builtin:1b-2l (the target's first two layers),
# 32 tokens, 2 threads. Greedy (--temp 0), so every configuration prints the same text (checked
# here). Each configuration prints its generation rate, acceptance and the ratio of its rate to
# the plain run's; the CPU is named first.
# Under serve's continuous batching at several concurrencies: bench/spec_serve_bench.py.
set -eu
BIN=${1:-build/release/inferlab}
TARGET=${2:-builtin:1b}
DRAFT=${3:-builtin:1b-2l}
N=${4:-32}
T=${5:-2}
PROMPT="Once upon a time"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "target $TARGET, draft $DRAFT, $N tokens, $T threads, greedy"
run() { # name, extra args
  "$BIN" run -m "$TARGET" -p "$PROMPT" -n "$N" --temp 0 --no-echo -t "$T" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
}
rate() { sed -n 's/^generation: .*(\s*\([0-9.]*\) tokens\/s).*/\1/p' "$TMP/$1.err"; }
name=plain; run
base=$(rate plain)
printf '%-22s %10s tokens/s  %-40s %s\n' plain "$base" "" "1.00x"
for cfg in "adaptive:--draft-model $DRAFT" "draft4:--draft-model $DRAFT --draft 4" "self-draft:--draft-model $TARGET --draft 4"; do
  name=${cfg%%:*}
  # shellcheck disable=SC2086
  run ${cfg#*:}
  cmp -s "$TMP/plain.out" "$TMP/$name.out" || { echo "$name: output differs from plain decoding" >&2; exit 1; }
  r=$(rate "$name")
  acc=$(sed -n 's/^speculative: .*; \([0-9]* drafted, [0-9]* accepted ([0-9.]*%)\).*/\1/p' "$TMP/$name.err")
  printf '%-22s %10s tokens/s  %-40s %sx\n' "$name" "$r" "$acc" "$(awk -v a="$r" -v b="$base" 'BEGIN{printf "%.2f", a/b}')"
done
