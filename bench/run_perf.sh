#!/usr/bin/env bash
# run_perf.sh - the whole performance comparison in ONE command, on the GPU machine:
#   1. builds flashattn (meson setup build-perf -Dtests=false -Dbuildtype=release -Dgpu_arch=...; ninja)
#      and bench/bench_gpu (the meson target when bench/meson.build has it, else cc against the
#      libraries just built)
#   2. runs bench_gpu (CSV + log to the output folder)
#   3. runs bench/peers.py (PyTorch SDPA cuDNN / flash / efficient, FlexAttention, a Triton paged
#      decode, torch ops) on the same shapes; writes peers.csv, perf_tables.md and the PNG plots
#   4. prints the summary last (bench_gpu's, then ours vs the best peer)
#
# usage: bench/run_perf.sh [options] [-- extra bench_gpu arguments]
#   --out DIR        output folder (default: $OUT when set, else build-perf/perf-out)
#   --quick          small subset in both programs (the targets' shapes)
#   --only LIST      categories for both: decode,splits,prefill,mixed,verify,cascade,cache,merge
#   --no-peers       skip peers.py's measurements (tables then hold ours only)
#   --peers-only     skip the build and bench_gpu; run peers.py on OUT/bench_gpu.csv
#   --skip-build     use the existing build (build-perf, or --build DIR)
#   --build DIR      build directory (default build-perf; e.g. build-gpu after tools/gpu_run.sh)
#   --no-flex        peers.py without FlexAttention (no torch.compile time)
#   --flex-all       peers.py compiles Flex for every decode row too
#   --arch LIST      gpu_arch for meson (default sm_90a, the H200's; "default" = meson_options.txt's)
#   --bench-args S   extra arguments for bench_gpu (one string)
#   --peers-args S   extra arguments for peers.py (one string)
# Exit status: bench_gpu's (0 = every check passed; 1 = a check failed; 2 = setup error), or the
# build's failure.
# One device command is limited to 10 minutes: a full run is build + bench_gpu (~2-4 min) +
# peers (~2-5 min); split it with --skip-build / --no-peers / --peers-only when the build is slow.
set -uo pipefail
export NCCL_NVLS_ENABLE=0

cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT_DIR="${OUT:-$ROOT/build-perf/perf-out}"
QUICK=""
ONLY=""
NO_PEERS=0
PEERS_ONLY=0
SKIP_BUILD=0
ARCH="${FA_GPU_ARCH:-sm_90a}"
BENCH_EXTRA=()
PEERS_EXTRA=()
FLEX=()
BUILD=build-perf

while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --quick) QUICK="--quick"; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --no-peers) NO_PEERS=1; shift ;;
    --peers-only) PEERS_ONLY=1; shift ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --build) BUILD="$2"; shift 2 ;;
    --no-flex) FLEX=(--no-flex); shift ;;
    --flex-all) FLEX=(--flex-all); shift ;;
    --arch) ARCH="$2"; shift 2 ;;
    --bench-args) read -r -a _a <<<"$2"; BENCH_EXTRA+=("${_a[@]}"); shift 2 ;;
    --peers-args) read -r -a _a <<<"$2"; PEERS_EXTRA+=("${_a[@]}"); shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    --) shift; BENCH_EXTRA+=("$@"); break ;;
    *) echo "run_perf: unknown option $1 (--help)"; exit 2 ;;
  esac
done
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
log() { echo "[run_perf $(date +%H:%M:%S)] $*"; }

# ---- toolchain: nvcc and the CUDA libraries
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
CUDA_HOME_GUESS=""
if command -v nvcc >/dev/null 2>&1; then CUDA_HOME_GUESS="$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)"; fi
CUDA_LIBDIRS=()
for d in "$CUDA_HOME_GUESS/lib64" "$CUDA_HOME_GUESS/targets/x86_64-linux/lib" /usr/local/cuda/lib64 \
         /usr/lib/x86_64-linux-gnu; do
  [ -d "$d" ] && CUDA_LIBDIRS+=("$d")
done
for d in ${CUDA_LIBDIRS[@]+"${CUDA_LIBDIRS[@]}"}; do LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
export LD_LIBRARY_PATH

MESON=(meson)
if ! command -v meson >/dev/null 2>&1; then
  if python3 -c "import mesonbuild" >/dev/null 2>&1; then MESON=(python3 -m mesonbuild.mesonmain); fi
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | wc -l) modified/untracked paths"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  nvidia-smi 2>&1 || true
} >"$OUT_DIR/machine.txt"

BENCH="$ROOT/$BUILD/bench/bench_gpu"
if [ "$PEERS_ONLY" = 0 ] && [ "$SKIP_BUILD" = 0 ]; then
  log "configure $BUILD (gpu_arch=$ARCH)"
  ARCH_OPT=()
  [ "$ARCH" != "default" ] && ARCH_OPT=(-Dgpu_arch="$ARCH")
  if [ -f "$BUILD/build.ninja" ]; then
    "${MESON[@]}" setup --reconfigure "$BUILD" -Dtests=false -Dbuildtype=release ${ARCH_OPT[@]+"${ARCH_OPT[@]}"} \
      >"$OUT_DIR/meson.log" 2>&1
  else
    "${MESON[@]}" setup "$BUILD" -Dtests=false -Dbuildtype=release ${ARCH_OPT[@]+"${ARCH_OPT[@]}"} >"$OUT_DIR/meson.log" 2>&1
  fi
  rc=$?
  if [ $rc -ne 0 ]; then tail -30 "$OUT_DIR/meson.log"; log "meson setup failed"; exit 3; fi
  grep -E "cuda|attention kernels|gpu_arch" "$OUT_DIR/meson.log" | tail -5
  log "build (ninja, log in $OUT_DIR/ninja.log)"
  t0=$(date +%s)
  if ! ninja -C "$BUILD" >"$OUT_DIR/ninja.log" 2>&1; then
    tail -40 "$OUT_DIR/ninja.log"; log "build failed"; exit 3
  fi
  log "built in $(( $(date +%s) - t0 )) s"
  if [ ! -x "$BENCH" ] || [ "$ROOT/bench/bench_gpu.c" -nt "$BENCH" ]; then
    # bench/meson.build has no bench_gpu target (yet): compile it against the libraries built above
    log "bench_gpu not built by meson: compiling it with cc"
    mkdir -p "$BUILD/bench"
    CUBLAS=()
    CUBLAS_DEF=()
    for d in ${CUDA_LIBDIRS[@]+"${CUDA_LIBDIRS[@]}"}; do
      if ls "$d"/libcublas.so* >/dev/null 2>&1; then CUBLAS_DEF=(-DFA_HAVE_CUBLAS); CUBLAS=(-lcublas); break; fi
    done
    LDIRS=()
    for d in ${CUDA_LIBDIRS[@]+"${CUDA_LIBDIRS[@]}"}; do LDIRS+=(-L"$d"); done
    INCS=(-I"$ROOT" -I"$ROOT/backends/cuda" -I"$ROOT/backends/cpu" -I"$ROOT/$BUILD")
    [ -n "$CUDA_HOME_GUESS" ] && INCS+=(-I"$CUDA_HOME_GUESS/include")
    [ -d /usr/local/cuda/include ] && INCS+=(-I/usr/local/cuda/include)
    if ! cc -std=c99 -O2 -D_GNU_SOURCE ${CUBLAS_DEF[@]+"${CUBLAS_DEF[@]}"} "${INCS[@]}" "$ROOT/bench/bench_gpu.c" -o "$BENCH" \
         "$BUILD/backends/cuda/libflashattn_cuda.a" "$BUILD/backends/cpu/libflashattn_cpu.a" "$BUILD/libflashattn.a" \
         ${LDIRS[@]+"${LDIRS[@]}"} ${CUBLAS[@]+"${CUBLAS[@]}"} -lcudart -lstdc++ -lm -lpthread >"$OUT_DIR/cc.log" 2>&1; then
      cat "$OUT_DIR/cc.log"; log "compiling bench_gpu failed"; exit 3
    fi
  fi
fi

BENCH_RC=0
if [ "$PEERS_ONLY" = 0 ]; then
  if [ ! -x "$BENCH" ]; then log "no $BENCH (build first)"; exit 3; fi
  BARGS=(--csv "$OUT_DIR/bench_gpu.csv")
  [ -n "$QUICK" ] && BARGS+=("$QUICK")
  [ -n "$ONLY" ] && BARGS+=(--only "$ONLY")
  log "bench_gpu ${BARGS[*]} ${BENCH_EXTRA[*]+"${BENCH_EXTRA[*]}"}"
  "$BENCH" "${BARGS[@]}" ${BENCH_EXTRA[@]+"${BENCH_EXTRA[@]}"} 2>&1 | tee "$OUT_DIR/bench_gpu.log"
  BENCH_RC=${PIPESTATUS[0]}
  log "bench_gpu exit status $BENCH_RC"
fi

PARGS=(--ours "$OUT_DIR/bench_gpu.csv" --out "$OUT_DIR")
[ -n "$QUICK" ] && PARGS+=("$QUICK")
[ -n "$ONLY" ] && PARGS+=(--only "$(echo "$ONLY" | tr ',' '\n' | grep -v -x splits | paste -sd, -)")
[ "$NO_PEERS" = 1 ] && PARGS+=(--ours-only)
PARGS+=(${FLEX[@]+"${FLEX[@]}"} ${PEERS_EXTRA[@]+"${PEERS_EXTRA[@]}"})
log "peers.py ${PARGS[*]}"
python3 "$ROOT/bench/peers.py" "${PARGS[@]}" 2>&1 | tee "$OUT_DIR/peers.log"
PEERS_RC=${PIPESTATUS[0]}
[ "$PEERS_RC" != 0 ] && log "peers.py exit status $PEERS_RC (tables may be partial)"

echo
echo "######################################## SUMMARY ########################################"
echo "outputs in $OUT_DIR: bench_gpu.csv bench_gpu.log peers.csv perf_tables.md *.png machine.txt"
if [ -f "$OUT_DIR/bench_gpu.log" ]; then sed -n '/^=* summary =*$/,$p' "$OUT_DIR/bench_gpu.log"; fi
sed -n '/^ours vs best peer/,$p' "$OUT_DIR/peers.log"
exit "$BENCH_RC"
