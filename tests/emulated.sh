#!/bin/sh
# tests/emulated.sh CPU ISA PROGRAM [ARGS]: runs a test program under QEMU's user-mode emulation
# of another x86-64 CPU (qemu-x86_64 -cpu CPU), so the kernel dispatch of a CPU this machine is
# not (an AVX2-only Zen 3 or Haswell: no AVX-512, no AVX-VNNI) picks its tables from CPUID and
# runs them against the scalar kernels. Passes when the program passes and reports
# "isa detected ISA," (ISA "-": the program passing is enough). Exits 77 (skip, with the reason) without qemu-x86_64 (scripts/deps.sh
# installs Debian's qemu-user), on a host that is not x86-64, or in a sanitizer build
# (IL_SANITIZE=1: an ASan build of test_cpu_ops, which takes under a second, ran 120 s under
# qemu-user without printing anything and was killed).
set -eu
cpu=$1 want=$2
shift 2
if [ "${IL_SANITIZE:-0}" = 1 ]; then
  echo "SKIP: sanitizer build: ASan binaries hang under qemu-user (tests/emulated.sh)"
  exit 77
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "SKIP: host is $(uname -m), not x86-64"
  exit 77
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "SKIP: qemu-x86_64 not installed (Debian: qemu-user; scripts/deps.sh installs it)"
  exit 77
fi
status=0
out=$(qemu-x86_64 -cpu "$cpu" "$@" 2>&1) || status=$?
printf '%s\n' "$out" | grep -E "isa detected|passed|FAILED" | head -20
if [ "$status" -ne 0 ]; then
  echo "emulated.sh: $* failed under -cpu $cpu (exit $status)"
  exit 1
fi
if [ "$want" != - ] && ! printf '%s\n' "$out" | grep -q "isa detected $want,"; then
  echo "emulated.sh: expected 'isa detected $want,' under -cpu $cpu"
  exit 1
fi
