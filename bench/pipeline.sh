#!/bin/sh
# bench/pipeline.sh: --micro-batches on 1, 2 and 4 simulated devices with the sim's compute
# model (hbm=1GB/s, tflops=0.002: builtin:tiny's matmuls take their roofline time, so the
# devices' stages overlap though the sims share the host's cores): prompt and decode tokens/s
# against one device in one pass (same run); then 16 streams with tflops=0.001, hbm=4GB/s, where
# a decode step of 16 tokens is compute-bound. Prints the CPU it ran on.
#
# usage: bench/pipeline.sh [BUILD_DIR] [extra bench_multi_device options]
# e.g.   bench/pipeline.sh build/release --reps 3
set -eu
build=${1:-build/release}
[ $# -gt 0 ] && shift
bin="$build/bench_multi_device"
if [ ! -x "$bin" ]; then
  echo "pipeline.sh: $bin not found: build first (cmake --build --preset release)" >&2
  exit 66
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs online"
"$bin" --model builtin:tiny --wtype f32 --devices 1,2,4 --size 64MiB --micro-batches 0,2,4,8 --streams 1,4 \
  --prompt 32 --gen 8 --reps 2 --hbm 1GB/s --tflops 0.002 "$@"
echo
"$bin" --model builtin:tiny --wtype f32 --devices 1,2,4 --size 64MiB --micro-batches 0,2,4 --streams 16 \
  --prompt 4 --gen 8 --reps 2 --hbm 4GB/s --tflops 0.001 "$@"
