#!/bin/sh
# Installs what inferlab's build and tests need on Debian 12, only when missing.
# Run as root (or with sudo available). Safe to run repeatedly.
set -eu
PKGS="build-essential cmake pkg-config libpcre2-dev python3 libmicrohttpd-dev libjansson-dev libyaml-dev"
# Optional, for tests that skip visibly without them: promtool (prometheus) checks /metrics,
# headless chromium loads the chat page, pip installs the openai client, qemu-user runs the
# matmul kernels as an AVX2-only CPU would (tests/emulated.sh).
OPTIONAL_PKGS="prometheus chromium python3-pip qemu-user"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
missing_of() {
  m=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
  done
  echo "$m"
}
missing=$(missing_of $PKGS)
optional=$(missing_of $OPTIONAL_PKGS)
if [ -n "$missing$optional" ]; then
  $SUDO apt-get update -qq || true
fi
if [ -n "$missing" ]; then
  echo "deps.sh: installing:$missing"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
if [ -n "$optional" ]; then
  echo "deps.sh: installing optional test tools:$optional"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $optional ||
    echo "deps.sh: optional packages not installed; the tests that need them will skip"
fi
# Python packages the server tests use (the official openai client).
req="$(dirname "$0")/../tests/python/requirements.txt"
if command -v python3 >/dev/null && ! python3 -c "import openai, yamllint, check_jsonschema, kubernetes_validate" 2>/dev/null; then
  echo "deps.sh: pip install -r tests/python/requirements.txt"
  python3 -m pip install -q -r "$req" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages -r "$req" 2>/dev/null ||
    echo "deps.sh: could not pip install $req; the tests that need them will skip"
fi
exit 0
