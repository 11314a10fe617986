#!/usr/bin/env bash
# scripts/gpu-check.sh: the CUDA backend's whole GPU check in one run, sized to one command of
# under 8 minutes on one GPU (GPU_CHECK_BUDGET, default 450 s), leaving a 15-minute device
# lease time to rerun it.
#
#   scripts/gpu-check.sh [OUTDIR]       OUTDIR defaults to $OUT, else ./gpu-check-out
#   GPU_CHECK_BUILD=build/release scripts/gpu-check.sh [OUTDIR]
#                                       use a build made elsewhere (a device machine without
#                                       nvcc: carry the build directory there)
#
# 1. facts: nvidia-smi (name, compute capability, driver, memory), nvcc --version;
# 2. build: Release with -DIL_CUDA=ON for the present GPU's architecture only
#    (nvidia-smi --query-gpu=compute_cap), timed;
# 3. correctness: test_cuda_mv3 (matvec v3's host twin, host only), test_cuda_module,
#    test_cuda_glue, test_backend_ops (every op on cuda vs the scalar CPU, with the committed
#    matvec dispatch table, the device's sample kernel among them), test_cuda_engine (greedy
#    steps sample on the device: 4 bytes down each), each with a timeout;
# 4. the matvec tournament (bench_cuda_mv3): the ceilings (1 GiB copy, a 16-byte-load read-only
#    reduction, the cost of one small op), every matvec v3 kernel's device results against its
#    host twin bit for bit, then every kernel (v1, v2, v3 w4u1/w4u2/w8u2) x weight type x
#    Llama-3-8B and 1B shape x 1/2/4/8 tokens over weight sets rotated past L2; it writes
#    OUTDIR/mv_table.txt, the fastest passing kernel per (type, shape class, tokens): commit it
#    as src/backend/cuda/mv_table.txt with this run's report beside it;
# 5. the op test again with that table (IL_CUDA_MV_TABLE), then builtin:1b end to end (F16 and
#    Q4_0, 128 tokens at batch 1) with the dispatch before version 3 (IL_CUDA_MATVEC=2) and with
#    the measured table;
# 6. attention (attention_steps below: the attention work adds its steps there);
# 6b. several GPUs (nvidia-smi lists two or more): test_tp on cuda:0,cuda:1 (--tp 2 through NCCL
#    and the layer split against cuda:0's logits), then bench_multi_device --cuda: builtin:1b
#    F16 on 1 and 2 GPUs at 1 and 16 streams with --tp, and with the layer split and
#    --micro-batches 0,4; with one GPU, test_tp's CUDA part only skips, saying so;
# 7. smoke and the rest: a run of builtin:tiny, bench_cuda (copy roofline, matvec GB/s per type,
#    512-token GEMM TFLOP/s, builtin:1b tokens/s), the op test with IL_CUDA_NO_CUBLAS=1 and with
#    version 1, test_doctor_elf (and the real libcuda's version strings), test_sim, memcheck.
# Order: the most telling first, should the budget run out.
# Writes OUTDIR/gpu-check.txt (everything printed, in order), OUTDIR/gpu-check.json (facts,
# timings, each step's exit code), OUTDIR/bench_cuda.json, OUTDIR/bench_cuda_mv3.json and
# OUTDIR/mv_table.txt. Exit code: 0 when every step passed, 1 when one failed (the report says
# which), 2 when there is no GPU or no nvcc.
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
txt=$out/gpu-check.txt
json=$out/gpu-check.json
: > "$txt"
t_start=$(date +%s)
steps=()   # "name rc seconds"
failed=0

say() { echo "$*" | tee -a "$txt"; }
# step NAME TIMEOUT CMD...: runs CMD with a timeout, output into the report (line-buffered, so a
# step stopped at its limit still leaves what it printed); 77 counts as a skip. The whole run keeps
# to GPU_CHECK_BUDGET seconds (default 480): a step gets at most what is left of it, and a step
# that would start with under 10 s left is skipped and reported as such.
budget=${GPU_CHECK_BUDGET:-450}
buf=()
command -v stdbuf > /dev/null && buf=(stdbuf -oL -eL)
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( budget - ($(date +%s) - t_start) ))
  if [ "$left" -lt 10 ]; then
    say ""
    say "==== $name: skipped, ${left}s of the ${budget}s budget left"
    steps+=("$name skipped 0")
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say ""
  say "==== $name: $*"
  local t0 rc ms dt
  t0=$(date +%s%N)
  timeout --kill-after=10 "$limit" "${buf[@]}" "$@" >> "$txt" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  dt=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  say "==== $name: exit $rc after ${dt}s"
  steps+=("$name $rc $dt")
  if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -z "${INFO_ONLY:-}" ]; then failed=1; fi
  return 0
}
# info NAME TIMEOUT CMD...: the same, but its exit code is reported, never a failure (doctor
# exits 1 for any warning about the machine).
info() { INFO_ONLY=1 step "$@"; }

# json_or_null FILE: FILE's text when it is whole JSON (a benchmark stopped midway leaves half a
# document), else null.
json_or_null() {
  if [ -s "$1" ] && python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2> /dev/null; then
    cat "$1"
  else
    echo null
  fi
}

write_json() {
  {
    echo "{"
    echo "  \"gpu\": \"${gpu_name:-}\", \"compute_cap\": \"${cc:-}\", \"driver\": \"${driver:-}\","
    echo "  \"nvcc\": \"${nvcc_version:-}\", \"archs\": \"${cc:-}\", \"total_seconds\": $(( $(date +%s) - t_start )),"
    echo "  \"failed\": $failed,"
    echo "  \"steps\": ["
    local first=1
    for s in "${steps[@]}"; do
      set -- $s
      [ $first = 1 ] || echo ","
      first=0
      if [ "$2" = skipped ]; then
        printf '    {"name": "%s", "exit": null, "skipped": true, "seconds": 0}' "$1"
      else
        printf '    {"name": "%s", "exit": %s, "seconds": %s}' "$1" "$2" "${3:-0}"
      fi
    done
    echo ""
    echo "  ],"
    echo "  \"bench_cuda_mv3\": $(json_or_null "$out/bench_cuda_mv3.json"),"
    echo "  \"bench_cuda\": $(json_or_null "$out/bench_cuda.json")"
    echo "}"
  } > "$json"
}

say "inferlab gpu-check $(date -u +%FT%TZ) on $(hostname)"
if ! command -v nvidia-smi > /dev/null; then
  say "no nvidia-smi: this machine has no NVIDIA driver; nothing to check"
  write_json
  exit 2
fi
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee -a "$txt"
say "kernel $(uname -r), $(nproc) CPUs, $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2)"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -n "${GPU_CHECK_BUILD:-}" ]; then
  # A build made elsewhere (e.g. carried to a device machine without the toolkit); its
  # architectures must include this GPU's (the default list does for sm_80/86/89/90).
  bdir=$GPU_CHECK_BUILD
  nvcc_version="(prebuilt: $bdir)"
  say "using the prebuilt $bdir (GPU_CHECK_BUILD); not building"
  [ -x "$bdir/inferlab" ] && [ -f "$bdir/libinferlab-cuda.so" ] || { say "$bdir lacks inferlab or libinferlab-cuda.so"; write_json; exit 2; }
else
  if [ ! -x "$nvcc" ]; then
    say "no nvcc (looked on PATH and /usr/local/cuda/bin): the CUDA module cannot be built here;"
    say "build elsewhere and pass the build directory in GPU_CHECK_BUILD"
    write_json
    exit 2
  fi
  nvcc_version=$("$nvcc" --version | tail -2 | head -1)
  say "nvcc: $nvcc ($nvcc_version); building for sm_$cc only"
  bdir=build/gpu-check
  jobs=$(nproc)
  step configure 120 cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DIL_CUDA=ON -DIL_CUDA_ARCHS="$cc" \
    -DCMAKE_CUDA_COMPILER="$nvcc"
  step build_module 300 cmake --build "$bdir" -j "$jobs" --target inferlab_cuda
  step build 300 cmake --build "$bdir" -j "$jobs" --target inferlab test_cuda_module test_cuda_glue \
    test_backend_ops test_cuda_engine test_sim test_doctor_elf bench_cuda bench_cuda_mv3 test_cuda_mv3 test_tp \
    bench_multi_device
fi

case $bdir in /*) ;; *) bdir=$PWD/$bdir ;; esac
export IL_CLI=$bdir/inferlab IL_SRC=$PWD IL_FIXTURES=$PWD/../shared/fixtures
# attention_steps: the attention kernels' checks and measurements (decode splits and tiles,
# prefill) go here, each as a `step` with its own timeout; called after the matvec tournament.
attention_steps() {
  :
}

# e2e_1b WTYPE LABEL ENV...: builtin:1b, 128 generated tokens at batch 1 on cuda, greedy.
e2e_1b() {
  local wt=$1 label=$2
  shift 2
  step "e2e_1b_${wt}_${label}" 90 env "$@" "$bdir/inferlab" run --device cuda -m builtin:1b --wtype "$wt" \
    -p "The history of the transistor" -n 128 --temp 0
}

step version 30 "$bdir/inferlab" --version
info doctor 60 "$bdir/inferlab" doctor --bandwidth-ms 0
step test_cuda_mv3 60 "$bdir/test_cuda_mv3"
step test_cuda_module 60 "$bdir/test_cuda_module"
step test_cuda_glue 60 "$bdir/test_cuda_glue"
step test_backend_ops 120 "$bdir/test_backend_ops"
if grep -q "SKIP (part): backend cuda" "$txt"; then
  # the op test ran on the CPU backends only: cuda did not open (driver too old for this CUDA,
  # module not loadable, ...); its reason is in the report just above
  say "==== cuda did not open on this machine: the GPU tests below only skip (reason above)"
  steps+=("cuda_open 1 0")
  failed=1
fi
step test_cuda_engine 180 "$bdir/test_cuda_engine"
step matvec_tournament 200 "$bdir/bench_cuda_mv3" --budget 150 --json "$out/bench_cuda_mv3.json" \
  --table-out "$out/mv_table.txt"
if [ -s "$out/mv_table.txt" ]; then
  step test_backend_ops_measured_table 120 env IL_CUDA_MV_TABLE="$out/mv_table.txt" "$bdir/test_backend_ops"
  for wt in f16 q4_0; do
    e2e_1b "$wt" v2_dispatch IL_CUDA_MATVEC=2
    e2e_1b "$wt" measured_table IL_CUDA_MV_TABLE="$out/mv_table.txt"
  done
fi
attention_steps
n_gpus=$(nvidia-smi -L | grep -c '^GPU ')
say "GPUs: $n_gpus"
step test_tp 120 "$bdir/test_tp"
if [ "$n_gpus" -ge 2 ]; then
  step bench_tp_cuda 120 "$bdir/bench_multi_device" --cuda --tp --model builtin:1b --wtype f16 --devices 1,2 \
    --streams 1,16 --prompt 16 --gen 32 --reps 2
  step bench_split_cuda 120 "$bdir/bench_multi_device" --cuda --model builtin:1b --wtype f16 --devices 1,2 \
    --streams 1,16 --prompt 16 --gen 32 --reps 2 --micro-batches 0,4
fi
step run_tiny 60 "$bdir/inferlab" run --device cuda -m builtin:tiny -n 32 -p "Hello"
# bench_cuda's "matvec table" passes read the measured table when the tournament wrote one
table_env=()
[ -s "$out/mv_table.txt" ] && table_env=(IL_CUDA_MV_TABLE="$out/mv_table.txt")
step bench_cuda 240 env "${table_env[@]}" "$bdir/bench_cuda" --json "$out/bench_cuda.json"
step test_backend_ops_no_cublas 120 env IL_CUDA_NO_CUBLAS=1 "$bdir/test_backend_ops"
step test_backend_ops_matvec1 120 env IL_CUDA_MATVEC=1 IL_CUDA_NO_CUBLAS=1 "$bdir/test_backend_ops"
step test_doctor_elf 60 "$bdir/test_doctor_elf" # the real libcuda's ELF: its version string where doctor reads it
# the evidence behind probe/elfver's rule: every driver-version-shaped string in the real
# libcuda files, bare (NUL-delimited) or inside a name, with counts
info libcuda_strings 30 python3 -c '
import collections, glob, re
for f in sorted(set(glob.glob("/usr/lib*/**/libcuda.so.*.*", recursive=True) + glob.glob("/usr/local/nvidia/lib*/libcuda.so.*.*"))):
    d = open(f, "rb").read()
    bare = collections.Counter(m.group(1).decode() for m in re.finditer(rb"\x00(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\x00", d))
    named = collections.Counter(m.group(0).decode(errors="replace") for m in re.finditer(rb"[\x20-\x7e]{0,60}(?:\.so\.|-)\d{3}\.\d{1,3}(?:\.\d{1,3})?(?=\x00|-rc)", d))
    print(f, "bare:", dict(bare.most_common()), "in names:", dict(named.most_common(12)))
'
step test_sim 120 "$bdir/test_sim"
sanitizer=$(command -v compute-sanitizer || echo "$(dirname "$nvcc")/compute-sanitizer")
[ -x "$sanitizer" ] || sanitizer=$(dirname "$(dirname "$nvcc")")/compute-sanitizer/compute-sanitizer
if [ -x "$sanitizer" ]; then
  step memcheck_backend_ops 150 "$sanitizer" --tool memcheck --error-exitcode 3 "$bdir/test_backend_ops"
else
  say "compute-sanitizer not found (PATH, next to nvcc, the toolkit's compute-sanitizer/): memcheck skipped"
fi

write_json
say ""
say "summary ($(( $(date +%s) - t_start ))s):"
for s in "${steps[@]}"; do say "  $s"; done
say "report: $txt, $json"
exit $failed
