#!/bin/sh
# backends/hip/ci_check.sh - the HIP backend's CI checks (.ci/run calls each step as one check;
# no GPU needed). Needs Debian's hipcc and libamdhip64-dev (ROCm 5.2; .ci/run installs them).
#
#   sh backends/hip/ci_check.sh build      meson setup + ninja of a clean build-hip-ci
#                                          (-Dhip=enabled -Dhip_arch=gfx90a -Dcuda=disabled
#                                          -Dtests=disabled -Dbench=disabled -Dwerror=true):
#                                          libflashattn_hip, the GPU programs *_hip and
#                                          test_gpu_portable_hip; fails on any error or warning
#   sh backends/hip/ci_check.sh tilemath   test_gpu_portable_hip of that build without a GPU: the
#                                          host-side tile math of the 32- and 64-lane groups as
#                                          hipcc compiled it for gfx90a (coverage, banks, smem)
#   sh backends/hip/ci_check.sh emu        the portable kernel on the CPU emulation of 64-lane
#                                          wavefronts (emu/run_emu.sh, FA_WARP_SIZE=64), one
#                                          attention case (FA_HIP_CI_EMU_CASE, default
#                                          "decode GQA 8:1": 32- and 64-lane groups vs the CPU
#                                          reference) plus the tile math
# Exit status 0 when the step passed.
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=${FA_HIP_CI_DIR:-build-hip-ci}

case "${1:-}" in
build)
    if ! command -v hipcc >/dev/null 2>&1 || [ ! -f /usr/include/hip/hip_runtime.h ]; then
        echo "hip: no hipcc or no HIP headers (apt-get install hipcc libamdhip64-dev)"
        exit 1
    fi
    t0=$(date +%s)
    rm -rf "$dir"
    if ! meson setup "$dir" -Dhip=enabled -Dhip_arch=gfx90a -Dcuda=disabled -Dtests=disabled \
        -Dbench=disabled -Dwerror=true > "$dir.setup.log" 2>&1; then
        tail -n 30 "$dir.setup.log"
        echo "hip: meson setup failed"
        exit 1
    fi
    if ! ninja -C "$dir" > "$dir/build.log" 2>&1; then
        grep -E -B2 -A8 "error|FAILED" "$dir/build.log" | head -60
        echo "hip: build failed"
        exit 1
    fi
    # -Werror turns every compiler warning into an error; this also catches what it does not
    # cover (the linker, meson's own)
    if grep -iq "warning" "$dir/build.log"; then
        grep -i "warning" "$dir/build.log" | head -20
        echo "hip: the build printed warnings"
        exit 1
    fi
    n=$(grep -c '^\[' "$dir/build.log")
    echo "hip: gfx90a build in $(($(date +%s) - t0)) s, $n build steps, no warning: $(cd "$dir/backends/hip" && ls libflashattn_hip.a *_hip | tr '\n' ' ')"
    ;;
tilemath)
    exe=$dir/backends/hip/test_gpu_portable_hip
    [ -x "$exe" ] || { echo "hip: $exe not built (run the build step first)"; exit 1; }
    # a case filter that matches no case: only the host-side checks run (no GPU here)
    FA_PORTABLE_CASE="(no case: tile math only)" timeout 120 "$exe" > "$dir/tilemath.log" 2>&1
    rc=$?
    grep -E '^(not )?ok ' "$dir/tilemath.log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$dir/tilemath.log" | tail -n 1)
    echo "hip tile math (hipcc gfx90a build, host side): ${line:-no summary line} (rc $rc)"
    [ "$rc" = 0 ] && [ -n "$line" ] && [ "${line#*passed, }" = "0 failed" ] && [ "${line%% passed*}" -ge 6 ]
    ;;
emu)
    log=$(mktemp)
    FA_EMU_WARP_SIZES=64 FA_PORTABLE_CASE=${FA_HIP_CI_EMU_CASE:-decode GQA 8:1} \
        timeout 300 bash backends/hip/emu/run_emu.sh > "$log" 2>&1
    rc=$?
    grep -E '^(not )?ok |^==|^#' "$log" | grep -v '^# *$' | head -30
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    rm -f "$log"
    echo "hip wave-64 emulation: ${line:-no summary line} (rc $rc)"
    # the tile math (6) and the case at both group widths (2)
    [ "$rc" = 0 ] && [ -n "$line" ] && [ "${line#*passed, }" = "0 failed" ] && [ "${line%% passed*}" -ge 8 ]
    ;;
*)
    echo "usage: $0 build|tilemath|emu"
    exit 2
    ;;
esac
