#!/bin/sh
# Installs what building flashattn needs on Debian/Ubuntu (meson, ninja, a C compiler,
# pkg-config, Criterion for the tests, cmake for the consumer tests). Skips what is already
# there. Usage: deps.sh [tests|consumers]
set -e
need=""
command -v meson >/dev/null 2>&1 || need="$need meson"
command -v ninja >/dev/null 2>&1 || need="$need ninja-build"
command -v cc >/dev/null 2>&1 || need="$need gcc"
command -v c++ >/dev/null 2>&1 || need="$need g++"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
command -v python3 >/dev/null 2>&1 || need="$need python3"
if [ "${1:-}" = tests ] && ! pkg-config --exists criterion 2>/dev/null; then need="$need libcriterion-dev"; fi
if [ "${1:-}" = consumers ] && ! command -v cmake >/dev/null 2>&1; then need="$need cmake"; fi
if [ -n "$need" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing:$need"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi
