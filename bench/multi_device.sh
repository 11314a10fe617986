#!/bin/sh
# bench/multi_device.sh: builtin:1b decode on 1, 2 and 4 simulated devices in a pipeline, each
# behind a throttled link (pcie=16GB/s), at 1 and 16 streams: generated tokens/s against one
# device (same run) and the bytes that cross per generated token. Prints the CPU it ran on.
#
# --pipeline: --micro-batches 0,2,4(,8) on 1, 2 and 4 devices with the sim's compute model
# (builtin:tiny's matmuls take their roofline time, so the devices' stages overlap though the
# sims share the host's cores): prompt and decode tokens/s against one device in one pass, at
# hbm=1GB/s, tflops=0.002 for 1 and 4 streams, then at hbm=4GB/s, tflops=0.001 for 16 streams,
# where a decode step of 16 tokens is compute-bound.
#
# --tp: tensor parallelism (--tp N) on 1, 2 and 4 devices with the same compute model (hbm=1GB/s,
# tflops=0.002): every layer split across the devices, each on a thread, at 1 and 16 streams.
#
# usage: bench/multi_device.sh [BUILD_DIR] [--pipeline | --tp] [extra bench_multi_device options]
# e.g.   bench/multi_device.sh build/release --reps 3 --gen 32
set -eu
build=${1:-build/release}
[ $# -gt 0 ] && shift
pipeline=0
tp=0
if [ "${1:-}" = "--pipeline" ]; then pipeline=1; shift; fi
if [ "${1:-}" = "--tp" ]; then tp=1; shift; fi
bin="$build/bench_multi_device"
if [ ! -x "$bin" ]; then
  echo "multi_device.sh: $bin not found: build first (cmake --build --preset release)" >&2
  exit 66
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs online"
if [ "$tp" = 1 ]; then
  exec "$bin" --model builtin:tiny --wtype f32 --devices 1,2,4 --size 64MiB --gen 8 --reps 2 --tp --streams 1,16 \
    --prompt 16 --hbm 1GB/s --tflops 0.002 "$@"
fi
if [ "$pipeline" = 0 ]; then
  exec "$bin" --model builtin:1b --wtype q4_0 --devices 1,2,4 --size 1GiB --pcie 16GB/s --streams 1,16 "$@"
fi
tiny="--model builtin:tiny --wtype f32 --devices 1,2,4 --size 64MiB --gen 8 --reps 2"
"$bin" $tiny --micro-batches 0,2,4,8 --streams 1,4 --prompt 32 --hbm 1GB/s --tflops 0.002 "$@"
echo
"$bin" $tiny --micro-batches 0,2,4 --streams 16 --prompt 4 --hbm 4GB/s --tflops 0.001 "$@"
