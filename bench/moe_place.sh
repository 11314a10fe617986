#!/bin/sh
# A mixture of experts with its experts on the device against on the CPU (--place exps=cpu):
# generation tokens/s and the device's peak allocation, builtin:moe-tiny on sim in one run,
# each figure as a ratio to the all-on-device row. Not part of the tests or CI; prints markdown.
# usage: bench/moe_place.sh [TOKENS (default 64)] [DEVICE (default sim:256MiB)]
set -eu
cd "$(dirname "$0")/.."
B=build/release/inferlab
[ -x "$B" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 1; }
n="${1:-64}"
dev="${2:-sim:256MiB}"
echo "builtin:moe-tiny (f32, 8 experts, 2 per token); device $dev; $n generated tokens;" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
echo
echo "| experts | gen tok/s | vs on device | device peak allocated (MiB) | vs on device |"
echo "|---|---:|---:|---:|---:|"
base=""
for place in "" "exps=cpu"; do
  out=$("$B" run -m builtin:moe-tiny --device "$dev" ${place:+--place $place} -p "Once upon a time" -n "$n" \
    --temp 0 --ignore-eos 2>&1 >/dev/null)
  row=$(python3 - "$place" "$base" "$out" <<'PY'
import re, sys
place, base, out = sys.argv[1], sys.argv[2], sys.argv[3]
tps = float(re.search(r"generation:\s+\d+ tokens in\s+[\d.]+ s \(\s*([\d.]+) tokens/s\)", out).group(1))
m = re.search(r"allocated ([\d.]+) (MiB|GiB|KiB|B);", out)
mib = float(m.group(1)) * {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]
b_tps, b_mib = (float(x) for x in base.split()) if base else (tps, mib)
print(f"{tps} {mib}||| {'on the CPU' if place else 'on the device'} | {tps:.1f} | {tps / b_tps:.2f}x | {mib:.1f} | {mib / b_mib:.2f}x |")
PY
)
  [ -z "$base" ] && base="${row%%||*}"
  echo "${row#*||}"
done
