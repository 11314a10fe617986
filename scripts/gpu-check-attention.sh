#!/usr/bin/env bash
# scripts/gpu-check-attention.sh: the flash attention kernels' part of the GPU check.
#
#   source scripts/gpu-check-attention.sh; gpu_check_attention
#       from scripts/gpu-check.sh, after its build: uses its step/say, $bdir and $out
#   scripts/gpu-check-attention.sh [OUTDIR]
#       alone: OUTDIR defaults to $OUT, else ./gpu-check-out; the build is $GPU_CHECK_BUILD,
#       else build/release (built here when nvcc is present and GPU_CHECK_BUILD is unset)
#
# Steps (each with a timeout; about 3 minutes on a GPU in all, most of it bench_cuda_attn):
# 1. build_attention: test_cuda_attn_twin, test_cuda_attn_device and bench_cuda_attn (skipped
#    with a prebuilt GPU_CHECK_BUILD);
# 2. attn_twin: the host twins against the scalar CPU (no GPU; a sanity check of the build);
# 3. attn_device: the flash kernels on the GPU: flash-decoding equal to its host twin bit for
#    bit, the mma.sync prefill kernel within 3e-3 of the CPU on F16-rounded inputs;
# 4. attn_sass: the static SASS checks of the built module (HMMA/LDSM in the prefill kernel,
#    LDG.E.128 in flash-decoding, no local memory), when cuobjdump is on PATH;
# 5. bench_attention: bench_cuda_attn (decode at 512/4k/32k positions, 1 and 8 sequences,
#    contiguous and paged; prefill of 4096 tokens, head 128) with F16 cells, flash beside memeff
#    and the copy ceiling, JSON in OUTDIR/bench_cuda_attn.json; again with Q8_0 cells (--quick);
# 6. run_tiny_flash: builtin:tiny generated with --attn flash on cuda.
# Exit code (alone): 0 when every step passed, 1 when one failed.

gpu_check_attention() {
  local b=$bdir
  if [ -z "${GPU_CHECK_BUILD:-}" ] && command -v cmake > /dev/null; then
    step build_attention 300 cmake --build "$b" -j "$(nproc)" --target test_cuda_attn_twin test_cuda_attn_device \
      bench_cuda_attn inferlab
  fi
  step attn_twin 60 "$b/test_cuda_attn_twin"
  step attn_device 120 "$b/test_cuda_attn_device"
  if command -v cuobjdump > /dev/null || [ -n "${IL_CUOBJDUMP:-}" ]; then
    local objs
    objs=$(ls "$b"/CMakeFiles/inferlab_cuda.dir/src/backend/cuda/attn_f[ad].cu.o 2> /dev/null)
    # shellcheck disable=SC2086 # two object paths, or the module
    step attn_sass 120 python3 tests/sass_attn_check.py ${objs:-"$b/libinferlab-cuda.so"}
  else
    say ""
    say "==== attn_sass: skipped, no cuobjdump on PATH (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
  fi
  step bench_attention 240 "$b/bench_cuda_attn" --json "$out/bench_cuda_attn.json"
  step bench_attention_q8 120 "$b/bench_cuda_attn" --quick --kv q8_0 --json "$out/bench_cuda_attn_q8.json"
  step run_tiny_flash 60 "$b/inferlab" run --device cuda -m builtin:tiny -n 32 -p "Hello" --attn flash
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u
  cd "$(dirname "$0")/.."
  out=${1:-${OUT:-gpu-check-out}}
  mkdir -p "$out"
  txt=$out/gpu-check-attention.txt
  : > "$txt"
  failed=0
  say() { echo "$*" | tee -a "$txt"; }
  step() {
    local name=$1 limit=$2
    shift 2
    say ""
    say "==== $name: $*"
    timeout --kill-after=10 "$limit" "$@" >> "$txt" 2>&1
    local rc=$?
    say "==== $name: exit $rc"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then failed=1; fi
    return 0
  }
  bdir=${GPU_CHECK_BUILD:-build/release}
  case $bdir in /*) ;; *) bdir=$PWD/$bdir ;; esac
  say "inferlab gpu-check-attention $(date -u +%FT%TZ); build $bdir"
  gpu_check_attention
  exit $failed
fi
