#!/bin/sh
# bench/multi_device.sh: builtin:1b decode on 1, 2 and 4 simulated devices in a pipeline, each
# behind a throttled link (pcie=16GB/s), at 1 and 16 streams: generated tokens/s against one
# device (same run) and the bytes that cross per generated token. Prints the CPU it ran on.
#
# usage: bench/multi_device.sh [BUILD_DIR] [extra bench_multi_device options]
# e.g.   bench/multi_device.sh build/release --reps 3 --gen 32
set -eu
build=${1:-build/release}
[ $# -gt 0 ] && shift
bin="$build/bench_multi_device"
if [ ! -x "$bin" ]; then
  echo "multi_device.sh: $bin not found: build first (cmake --build --preset release)" >&2
  exit 66
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs online"
exec "$bin" --model builtin:1b --wtype q4_0 --devices 1,2,4 --size 1GiB --pcie 16GB/s --streams 1,16 "$@"
