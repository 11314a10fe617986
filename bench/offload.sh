#!/bin/sh
# Offloading on the simulated GPU: generation tokens/s and bytes copied per token against
# --gpu-layers and --offload stream, builtin:1b (Q4_0 GGUF) on sim with a PCIe-like 16 GB/s
# throttle, all in one run; and the planner's predicted peak beside the device's measured peak.
# Not part of the tests or CI. Prints a markdown table.
# usage: bench/offload.sh [MODEL.gguf (default: builtin:1b as q4_0 in the work dir)] [TOKENS (default 32)]
set -eu
cd "$(dirname "$0")/.."
B=build/release/inferlab
[ -x "$B" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 1; }
work="${INFERLAB_OFFLOAD_WORK:-/tmp/inferlab-offload}"
mkdir -p "$work"
model="${1:-$work/1b-q4_0.gguf}"
n="${2:-32}"
[ -f "$model" ] || "$B" convert builtin:1b --type q4_0 -o "$model" >/dev/null
dev="sim:1GiB,pcie=16GB/s"
common="-m $model -p 'Once upon a time' -n $n --temp 0 --ignore-eos --ctx 512 --device $dev"
echo "model $model; device $dev; $n generated tokens; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads"
echo
echo "| placement | layers on device | gen tok/s | vs all on device | MiB copied per token | predicted peak | measured peak |"
echo "|---|---:|---:|---:|---:|---:|---:|"
base=""
for cfg in "--gpu-layers all" "--gpu-layers 12" "--gpu-layers 8" "--gpu-layers 4" "--gpu-layers 0" "--offload stream"; do
  out=$(eval "$B run $common $cfg" 2>&1 >/dev/null)
  plan=$(eval "$B plan -m $model --ctx 512 --device $dev $cfg --json" 2>/dev/null || true)
  python3 - "$cfg" "$n" "$base" "$out" "$plan" <<'PY' > "$work/row.txt"
import json, re, sys
cfg, n, base, out, plan = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
tps = float(re.search(r"generation:\s+\d+ tokens in\s+[\d.]+ s \(\s*([\d.]+) tokens/s\)", out).group(1))
layers = re.search(r"; (\d+/\d+) layers", out).group(1)
m = re.search(r"reserved ([\d.]+) (MiB|GiB|KiB|B), allocated.*copied ([\d.]+) (MiB|GiB|KiB|B) up", out)
unit = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
reserved = float(m.group(1)) * unit[m.group(2)] if m else 0.0
up = float(m.group(3)) * unit[m.group(4)] if m else 0.0
streamed = re.search(r"([\d.]+) MiB copied through two device slots", out)
moved = re.search(r"residual moved between them: ([\d.]+) KiB", out)
# per token: everything copied up, less the one-time weight upload; the run has n + prompt passes
p = json.loads(plan) if plan else {}
pred = p.get("peak_bytes", 0) / 2**20
b = float(base) if base else tps
print(f"{tps}")
print(f"| `{cfg}` | {layers} | {tps:.2f} | {tps / b:.2f}x | {(float(streamed.group(1)) if streamed else float(moved.group(1)) / 1024 if moved else 0.0) / (n + 1):.2f} | {pred:.1f} MiB | {reserved:.1f} MiB |")
PY
  [ -z "$base" ] && base=$(head -1 "$work/row.txt")
  tail -1 "$work/row.txt"
done
