#!/bin/sh
# Installs what inferlab's build and tests need on Debian 12, only when missing.
# Run as root (or with sudo available). Safe to run repeatedly.
set -eu
PKGS="build-essential cmake pkg-config libpcre2-dev libjansson-dev python3"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  exit 0
fi
echo "deps.sh: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
