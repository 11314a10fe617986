#!/bin/sh
# The cost of the device seam: tokens/s of this build against a build of an older commit
# (default 7a159c7, the last commit before the seam), and of --device sim against --device cpu,
# on the same GGUF file and threads, interleaved A B C A B C so both see the same machine.
# Not part of the tests or CI. Prints the best-of-N prompt and generation tokens/s per binary.
# On a shared machine tokens/s swing by 2x between identical runs; the deterministic figure is
# the instruction count per generated token under callgrind (set SEAM_CALLGRIND=1: stories260K
# from ../shared/fixtures, 1 thread, f32 KV as the base had, n=8 and n=72, the difference / 64).
# usage: bench/seam_cost.sh [BASE_COMMIT] [ROUNDS (default 5)] [MODEL (default: builtin:1b as q4_0 in the work dir)]
set -eu
cd "$(dirname "$0")/.."
base="${1:-7a159c7}"
rounds="${2:-5}"
work="${INFERLAB_SEAM_WORK:-/tmp/inferlab-seam}"
mkdir -p "$work"
new=build/release/inferlab
[ -x "$new" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 1; }
if [ ! -x "$work/base/build/inferlab" ]; then
  rm -rf "$work/base"
  git worktree add -f "$work/base" "$base" >/dev/null
  cmake -S "$work/base" -B "$work/base/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/base/build" -j"$(nproc)" --target inferlab >/dev/null
fi
old="$work/base/build/inferlab"
model="${3:-$work/1b-q4_0.gguf}"
[ -f "$model" ] || "$new" convert builtin:1b --type q4_0 -o "$model" >/dev/null
args="-m $model --batch 1 --prompt 128 --gen 64 -r 3 --roofline-ms 0 -q --csv"
echo "model $model; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(nproc) threads; $rounds rounds"
for i in $(seq "$rounds"); do
  $old bench $args > "$work/old$i.csv"
  $new bench $args > "$work/new$i.csv"
  $new bench $args --device sim:4GiB > "$work/sim$i.csv"
done
python3 - "$work" "$rounds" <<'PY'
import csv, sys
work, rounds = sys.argv[1], int(sys.argv[2])
best = {}
for name in ("old", "new", "sim"):
    rows = [list(csv.DictReader(open(f"{work}/{name}{i}.csv")))[0] for i in range(1, rounds + 1)]
    best[name] = (max(float(r["prompt_tps_p50"]) for r in rows), max(float(r["gen_tps_p50"]) for r in rows))
print(f"{'binary':8} {'pp128 tok/s':>12} {'tg64 tok/s':>11} {'pp ratio':>9} {'tg ratio':>9}")
for name, label in (("old", "before"), ("new", "cpu"), ("sim", "sim")):
    pp, tg = best[name]
    print(f"{label:8} {pp:12.2f} {tg:11.2f} {pp / best['old'][0]:9.3f} {tg / best['old'][1]:9.3f}")
PY

if [ "${SEAM_CALLGRIND:-0}" = 1 ]; then
  fx=../shared/fixtures/models/stories260K-f32.gguf
  echo
  echo "instructions per generated token (callgrind, stories260K, 1 thread):"
  for b in "$old" "$new"; do
    extra=""
    [ "$b" = "$new" ] && extra="--kv-type f32 --ctx 128"
    c8=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$b" run -m "$fx" -p "Once upon a time" -n 8 --temp 0 -t 1 $extra 2>&1 >/dev/null | awk '/Collected/ {print $4}')
    c72=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$b" run -m "$fx" -p "Once upon a time" -n 72 --temp 0 -t 1 $extra 2>&1 >/dev/null | awk '/Collected/ {print $4}')
    echo "  $b: $(( (c72 - c8) / 64 ))"
  done
fi
