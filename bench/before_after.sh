#!/bin/sh
# Tokens/s of two inferlab binaries on builtin:1b, interleaved A B B A per configuration so both
# see the same (shared, noisy) machine: F32 weights with F32 activations, F32 weights with
# --dtype f16 activations, and Q4_0 weights. Prints the median over the rounds of each binary's
# prompt and generation tokens/s and the ratio new/base. Not part of the tests or CI.
# usage: [PROMPT=32] [GEN=16] [REPS=2] bench/before_after.sh BASE_BINARY NEW_BINARY [ROUNDS (default 3)] [THREADS (default 2)]
# A base build of main, outside the tree:
#   mkdir -p /tmp/base && git archive main | tar x -C /tmp/base &&
#   (cd /tmp/base && cmake --preset release && cmake --build --preset release --target inferlab)
set -eu
base="$1"
new="$2"
rounds="${3:-3}"
threads="${4:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args="-m builtin:1b --prompt ${PROMPT:-32} --gen ${GEN:-16} -r ${REPS:-2} --warmup 1 --roofline-ms 0 --no-gpu -q --csv -t $threads"
echo "builtin:1b; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $threads threads; $rounds rounds"
for i in $(seq "$rounds"); do
  for cfg in f32 f16 q4_0; do
    case $cfg in
      f32) opt="--wtype f32" ;;
      f16) opt="--wtype f32 --dtype f16" ;;
      q4_0) opt="--wtype q4_0" ;;
    esac
    # odd rounds run the base first, even rounds the new build (A B B A ...), so neither side is
    # always the one that follows the other's memory churn
    for side in $( [ $((i % 2)) = 1 ] && echo base new || echo new base ); do
      [ "$side" = base ] && bin="$base" || bin="$new"
      # shellcheck disable=SC2086
      "$bin" bench $args $opt > "$work/$side-$cfg-$i.csv"
    done
  done
done
python3 - "$work" "$rounds" <<'PY'
import csv, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'config':<22}{'base pp t/s':>12}{'new pp t/s':>12}{'ratio':>7}{'base tg t/s':>13}{'new tg t/s':>12}{'ratio':>7}")
names = {"f32": "F32", "f16": "F32, --dtype f16", "q4_0": "Q4_0"}
for cfg in ("f32", "f16", "q4_0"):
    med = {}
    for b in ("base", "new"):
        rows = [list(csv.DictReader(open(f"{work}/{b}-{cfg}-{i}.csv")))[0] for i in range(1, rounds + 1)]
        for r in rows:
            if r["status"] != "ok":
                sys.exit(f"{b} {cfg}: {r['error']}")
        med[b] = (statistics.median(float(r["prompt_tps_p50"]) for r in rows),
                  statistics.median(float(r["gen_tps_p50"]) for r in rows))
    (bp, bg), (np_, ng) = med["base"], med["new"]
    print(f"{names[cfg]:<22}{bp:>12.2f}{np_:>12.2f}{np_ / bp:>7.3f}{bg:>13.2f}{ng:>12.2f}{ng / bg:>7.3f}")
PY
