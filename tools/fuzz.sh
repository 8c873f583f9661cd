#!/usr/bin/env bash
# tools/fuzz.sh - builds and runs the libFuzzer targets of tests/fuzz (see tools/README.md).
#
#   tools/fuzz.sh [-t SECONDS] [-j JOBS] [-o DIR] [--build-only] [--replay] [TARGET...]
#
#   -t SECONDS   run time per target (libFuzzer -max_total_time), default 60
#   -j JOBS      targets run at once, default 2
#   -o DIR       build / work directory, default build-fuzz
#   --build-only build the fuzzers, run nothing
#   --replay     plain mode: build every target with $CC (default gcc; ASan+UBSan when it can)
#                and a plain main() (tests/fuzz/replay_main.c), replay tests/fuzz/corpus/<target>;
#                needs no libFuzzer runtime. Ends with "fuzz-replay: N targets, I inputs, F findings".
#   --tsan       with --replay: ThreadSanitizer instead of ASan+UBSan (the DCP forward runs its
#                ranks on threads over the fake comm); extra corpus dirs: FUZZ_REPLAY_DIRS
#   TARGET       fuzz_cascade, fuzz_local, ... (default: every tests/fuzz/fuzz_*.c)
#
# Fuzz mode builds each target with clang -fsanitize=fuzzer,address,undefined
# -fno-sanitize-recover=undefined -g -O1, runs it on a copy of its seed corpus for SECONDS with
# -print_final_stats=1, prints each target's executions and ends with
#   fuzz: N targets, E executions, F findings
# Exit status: 0 when there is no finding, 1 on a finding, 2 on a build error.
# Findings (the crashing input) are kept in DIR/artifacts/<target>-crash-*; reproduce with
#   DIR/<target> DIR/artifacts/<target>-crash-...
# Environment: CLANG (default clang), CC (replay mode), FUZZ_CFLAGS (extra flags, e.g.
# -DFA_FUZZ_SKIP_KNOWN=0 to fuzz the known-bug classes too), FUZZ_ARGS (extra libFuzzer flags).
set -u
cd "$(dirname "$0")/.."
secs=60; jobs=2; dir=build-fuzz; build_only=0; replay=0; tsan=0; targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t) secs="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    -o) dir="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --replay) replay=1; shift ;;
    --tsan) tsan=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1%.c}"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
mkdir -p "$dir"
libsrc="flashattn.c backends/cpu/fa_cpu.c backends/cpu/fa_fake_comm.c"
inc="-I. -Ibackends/cpu -Ibackends/common -Itests/fuzz"
extra="${FUZZ_CFLAGS:-}"

if [ "$replay" = 1 ]; then
  cc="${CC:-gcc}"
  san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  suffix=replay
  [ "$tsan" = 1 ] && { san="-fsanitize=thread"; suffix=replay-tsan; }
  echo 'int main(void){return 0;}' > "$dir/san_probe.c"
  if ! $cc $san "$dir/san_probe.c" -o "$dir/san_probe" >/dev/null 2>&1; then
    echo "fuzz-replay: $cc cannot build with sanitizers; plain build"; san=""
  fi
  ninputs=0; nfind=0; n=0
  for t in "${targets[@]}"; do
    n=$((n + 1))
    if ! $cc -std=c99 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -g -O1 $san $extra $inc \
         "tests/fuzz/$t.c" tests/fuzz/replay_main.c $libsrc -lm -lpthread -o "$dir/$t.$suffix" \
         > "$dir/$t.$suffix-build.log" 2>&1; then
      cat "$dir/$t.$suffix-build.log"; echo "fuzz-replay: $t does not build"; exit 2
    fi
    corpus="tests/fuzz/corpus/$t"; [ -d "$corpus" ] || corpus=""
    for extra_dir in ${FUZZ_REPLAY_DIRS:-}; do [ -d "$extra_dir/$t" ] && corpus="$corpus $extra_dir/$t"; done
    if out=$(ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1 \
             "$dir/$t.$suffix" $corpus 2>&1); then
      k=$(printf '%s\n' "$out" | sed -n 's/^replay: \([0-9]*\) inputs$/\1/p')
      echo "$t: ${k:-0} inputs replayed"; ninputs=$((ninputs + ${k:-0}))
    else
      printf '%s\n' "$out" | tail -n 30; echo "$t: FINDING while replaying $corpus"; nfind=$((nfind + 1))
    fi
  done
  echo "fuzz-replay: $n targets, $ninputs inputs, $nfind findings"
  [ "$nfind" -eq 0 ]; exit $?
fi

clang="${CLANG:-clang}"
cflags="-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined $extra $inc"
objs=""
for s in $libsrc; do
  o="$dir/$(basename "$s" .c).o"
  $clang $cflags -fsanitize=fuzzer-no-link -c "$s" -o "$o" || { echo "fuzz: cannot build $s"; exit 2; }
  objs="$objs $o"
done
for t in "${targets[@]}"; do
  $clang $cflags -fsanitize=fuzzer "tests/fuzz/$t.c" $objs -lm -lpthread -o "$dir/$t" \
    || { echo "fuzz: cannot build $t (is libclang-rt-<version>-dev installed?)"; exit 2; }
done
echo "fuzz: built ${#targets[@]} targets in $dir"
[ "$build_only" = 1 ] && exit 0

mkdir -p "$dir/artifacts"
run_one() {
  local t="$1" work="$dir/corpus/$1" seed="tests/fuzz/corpus/$1"
  mkdir -p "$work"
  [ -d "$seed" ] || seed=""
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$dir/$t" -max_total_time="$secs" -print_final_stats=1 -timeout=20 -rss_limit_mb=2560 -max_len=4096 \
    -artifact_prefix="$dir/artifacts/$t-" ${FUZZ_ARGS:-} "$work" $seed > "$dir/$t.log" 2>&1
  echo $? > "$dir/$t.rc"
}
rm -f "$dir"/*.rc
running=0
for t in "${targets[@]}"; do
  rm -f "$dir/artifacts/$t-"*
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
total=0; nfind=0
for t in "${targets[@]}"; do
  rc=$(cat "$dir/$t.rc" 2>/dev/null || echo 1)
  e=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$dir/$t.log" | tail -n 1)
  e=${e:-0}; total=$((total + e))
  arts=$(ls "$dir/artifacts/$t-"* 2>/dev/null | head -n 3 | tr '\n' ' ')
  if [ "$rc" != 0 ] || [ -n "$arts" ]; then
    nfind=$((nfind + 1))
    echo "$t: $e executions, FINDING (exit $rc) ${arts}"
    grep -E "ERROR|invariant failed|runtime error|SUMMARY|Test unit written" "$dir/$t.log" | head -n 8 | sed 's/^/  /'
  else
    echo "$t: $e executions"
  fi
done
echo "fuzz: ${#targets[@]} targets, $total executions, $nfind findings"
[ "$nfind" -eq 0 ] || exit 1
