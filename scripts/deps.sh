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
# the Python binding's test (python/meson.build): Debian's python3 with numpy, pytest and venv
if [ "${1:-}" = tests ]; then
  if [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 -c 'import numpy' 2>/dev/null || need="$need python3-numpy"
    /usr/bin/python3 -c 'import pytest' 2>/dev/null || need="$need python3-pytest"
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need="$need python3-venv"
  else
    need="$need python3 python3-numpy python3-pytest python3-venv"
  fi
fi
if [ "${1:-}" = consumers ] && ! command -v cmake >/dev/null 2>&1; then need="$need cmake"; fi
if [ -n "$need" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing:$need"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi
