#!/bin/sh
# Builds a program against flashattn the three ways a project consumes it, on the CPU backend
# (-Dcuda=disabled, for speed), and runs it (tests/consumers/consumer.c: the CPU backend, a
# builder, one forward, statuses checked):
#   1. pkg-config + cc   meson install into a temporary prefix, then
#                        cc consumer.c $(pkg-config --cflags --libs flashattn-cpu)
#   2. CMake             find_package(flashattn) from that prefix, flashattn::cpu (shared, then
#                        static with -Dflashattn_USE_STATIC_LIBS=ON)
#   3. Meson subproject  subprojects/flashattn -> this checkout, dependency('flashattn-cpu')
# Prints a TAP line per route, then "N passed, M failed"; exit status 0 when none failed.
# Needs meson, ninja, a C compiler, pkg-config and cmake (scripts/deps.sh consumers installs
# them on Debian/Ubuntu). KEEP=1 keeps the temporary folder (its path is printed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/flashattn-consumers.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "# keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
sh "$root/scripts/deps.sh" consumers >&2 || echo "# scripts/deps.sh consumers failed; trying with what is installed"

passed=0; failed=0; n=0
now() { date +%s; }
# result NAME LOG STATUS START: one TAP line; the log's tail as TAP comments on failure
result() {
  n=$((n + 1))
  secs=$(( $(now) - $4 ))
  if [ "$3" = 0 ]; then
    passed=$((passed + 1)); echo "ok $n - $1 (${secs}s)"
  else
    failed=$((failed + 1)); echo "not ok $n - $1 (${secs}s; log: $2)"
    tail -n 25 "$2" 2>/dev/null | sed 's/^/#   /'
  fi
}

# step LOG CMD...: runs CMD, appending its output to LOG and showing ninja's and CMake's progress
# lines as TAP comments; returns CMD's exit status
step() {
  _log=$1; shift
  { "$@" 2>&1; echo $? > "$work/.rc"; } | tee -a "$_log" | grep -E '^\[ *[0-9]+(/[0-9]+\]|%\])' | cut -c1-100 | sed 's/^/#   /'
  return "$(cat "$work/.rc")"
}

echo "1..3"
prefix="$work/prefix"

# --- flashattn, built and installed into $prefix (routes 1 and 2) ------------------------------
echo "# building flashattn (CPU backend only) and installing it into $prefix (about 15 seconds on 2 cores)..."
t0=$(now)
install_log="$work/install.log"
install_ok=0
step "$install_log" meson setup "$work/build" "$root" --prefix "$prefix" -Dcuda=disabled -Dnccl=disabled \
    -Dtests=disabled -Dbench=disabled &&
  step "$install_log" ninja -C "$work/build" &&
  step "$install_log" meson install -C "$work/build" --quiet && install_ok=1
if [ $install_ok = 1 ]; then
  echo "# installed in $(( $(now) - t0 ))s:"
  (cd "$prefix" && find . -type f -o -type l | sort | sed 's|^\./|#   |')
else
  echo "# the build or install of flashattn failed:"; tail -n 25 "$install_log" | sed 's/^/#   /'
fi
pcdir=$(find "$prefix" -name flashattn-cpu.pc -path '*/pkgconfig/*' 2>/dev/null | head -n 1)
pcdir=${pcdir%/*}

# --- 1. pkg-config + cc ------------------------------------------------------------------------
echo "# route 1: pkg-config + cc (about 1 second)..."
t0=$(now)
log="$work/pkgconfig.log"
rc=1
if [ $install_ok = 1 ] && [ -n "$pcdir" ]; then
  (
    set -e
    export PKG_CONFIG_PATH="$pcdir"
    echo "pkg-config --modversion flashattn-cpu: $(pkg-config --modversion flashattn-cpu)"
    flags=$(pkg-config --cflags --libs flashattn-cpu)
    libdir=$(pkg-config --variable=libdir flashattn-cpu)
    echo "cc -std=c99 -Wall -Wextra -Werror consumer.c $flags -Wl,-rpath,$libdir"
    ${CC:-cc} -std=c99 -Wall -Wextra -Werror "$here/consumer.c" $flags -Wl,-rpath,"$libdir" \
      -o "$work/consumer-pkgconfig"
    "$work/consumer-pkgconfig"
  ) > "$log" 2>&1 && rc=0
else
  echo "flashattn was not installed (see $install_log)" > "$log"
fi
result "pkg-config + cc: cc consumer.c \$(pkg-config --cflags --libs flashattn-cpu)" "$log" $rc "$t0"

# --- 2. CMake ----------------------------------------------------------------------------------
echo "# route 2: CMake, shared then static libraries (about 5 seconds)..."
t0=$(now)
log="$work/cmake.log"
rc=1
if [ $install_ok = 1 ] && command -v cmake >/dev/null 2>&1; then
  : > "$log"
  step "$log" cmake -S "$here/cmake" -B "$work/cmake-shared" -DCMAKE_PREFIX_PATH="$prefix" &&
    step "$log" cmake --build "$work/cmake-shared" &&
    step "$log" "$work/cmake-shared/consumer" &&
    step "$log" cmake -S "$here/cmake" -B "$work/cmake-static" -DCMAKE_PREFIX_PATH="$prefix" -Dflashattn_USE_STATIC_LIBS=ON &&
    step "$log" cmake --build "$work/cmake-static" &&
    step "$log" "$work/cmake-static/consumer" &&
    if ldd "$work/cmake-static/consumer" | grep libflashattn >> "$log"; then
      echo "the static build needs a shared libflashattn" >> "$log"; false
    fi && rc=0
elif [ $install_ok = 1 ]; then
  echo "cmake not found (sh scripts/deps.sh consumers installs it)" > "$log"
else
  echo "flashattn was not installed (see $install_log)" > "$log"
fi
result "CMake: find_package(flashattn), flashattn::cpu (shared and static)" "$log" $rc "$t0"

# --- 3. Meson subproject -----------------------------------------------------------------------
echo "# route 3: Meson subproject, building flashattn's CPU backend inside the consumer (about 5 seconds on 2 cores)..."
t0=$(now)
log="$work/subproject.log"
rc=1
proj="$work/meson-consumer"
mkdir -p "$proj/subprojects"
cp "$here/meson/meson.build" "$here/consumer.c" "$proj/"
ln -s "$root" "$proj/subprojects/flashattn"
: > "$log"
step "$log" meson setup "$proj/build" "$proj" --wrap-mode=forcefallback -Dflashattn:cuda=disabled -Dflashattn:nccl=disabled &&
  step "$log" ninja -C "$proj/build" &&
  step "$log" "$proj/build/consumer" &&
  # as a subproject, flashattn builds neither its tests nor its demo and benchmarks
  if [ -e "$proj/build/subprojects/flashattn/tests" ] || [ -e "$proj/build/subprojects/flashattn/bench" ]; then
    echo "the subproject built its tests or benchmarks" >> "$log"; false
  fi && rc=0
result "Meson subproject: dependency('flashattn-cpu') from subprojects/flashattn" "$log" $rc "$t0"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
