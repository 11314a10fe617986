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
rm -f "$work/rows.md"
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
  tail -1 "$work/row.txt" >> "$work/rows.md"
done
# the chart (SVG): device peak predicted by the planner and measured, per placement
python3 - "$work/rows.md" "${OFFLOAD_SVG:-$work/offload.svg}" <<'PY'
import re, sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("|")]
data = [(r[0].strip().strip("`"), float(r[5].split()[0]), float(r[6].split()[0]), float(r[4])) for r in rows]
W, H, L, B = 760, 300, 70, 60
top = max(max(p, m) for _, p, m, _ in data) * 1.1 or 1
bw = (W - L - 20) / len(data)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 40}" font-family="sans-serif" font-size="11">',
       f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="14" font-weight="bold">device peak per placement: predicted (plan) and measured</text>']
for i in range(5):
    v = top * i / 4
    y = H - B - (H - B - 30) * i / 4
    out.append(f'<line x1="{L}" x2="{W - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/><text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.0f}</text>')
out.append(f'<text x="16" y="{(H - B + 30) / 2}" transform="rotate(-90 16 {(H - B + 30) / 2})" text-anchor="middle">MiB</text>')
for i, (name, p, m, up) in enumerate(data):
    x = L + i * bw + bw * 0.15
    for j, (v, c) in enumerate(((p, "#1f77b4"), (m, "#ff7f0e"))):
        h = (H - B - 30) * v / top
        out.append(f'<rect x="{x + j * bw * 0.35:.1f}" y="{H - B - h:.1f}" width="{bw * 0.33:.1f}" height="{h:.1f}" fill="{c}"><title>{name}: {v:.1f} MiB</title></rect>')
    out.append(f'<text x="{L + i * bw + bw / 2:.1f}" y="{H - B + 16}" text-anchor="middle">{name.replace("--", "")}</text>')
    out.append(f'<text x="{L + i * bw + bw / 2:.1f}" y="{H - B + 30}" text-anchor="middle" fill="#555">{up:.1f} MiB/tok</text>')
out.append(f'<rect x="{L}" y="{H + 8}" width="10" height="10" fill="#1f77b4"/><text x="{L + 14}" y="{H + 17}">predicted peak (inferlab plan)</text>')
out.append(f'<rect x="{L + 220}" y="{H + 8}" width="10" height="10" fill="#ff7f0e"/><text x="{L + 234}" y="{H + 17}">measured peak (allocator reserved)</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(f"chart: {sys.argv[2]}")
PY
