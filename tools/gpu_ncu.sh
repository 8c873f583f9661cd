#!/usr/bin/env bash
# tools/gpu_ncu.sh - one GPU-machine call: where the decode, cache-write, merge and dcp_correct
# kernels stand, with ncu numbers.
#
# "A" is the tree, built for sm_90a at -Dhead_dims=64,128,256. Jobs, in order (each bounded in
# time):
#   ops      A: bench_ops (cache write bf16 / fp8, merge, dcp_correct against a device copy)
#   small    A: bench_gpu --only splits on the launch-bound rows (batch 1 and 8 at 1k, every
#            head, bf16 and fp8): fixed splits against the planner
#   grid     A: bench_gpu's decode grid at 32/8 heads (heads 64 / 128 / 256, bf16 and fp8)
#   sm90dec  bench_gpu's bf16 decode grid (32/8; heads FA_NCU_DEC_DIMS, default 128) under the
#            default family (A: the decode tiles) and --family wgmma (S): time per row and S/A
#   san      A: compute-sanitizer (FA_NCU_SANITIZERS) on the --quick sets of FA_NCU_SAN_TESTS
#   ncu      A: one ncu report per kernel and shape (DECODE_NCU below; the memory-bound ops
#            through bench_ops; the wgmma family's head-128 dense prefill, bf16 and fp8 query),
#            the key metrics in summary.txt
#
#   tools/gpu_ncu.sh [JOB...]     default: tests gather grid small ops pblocks sm90dec ncu
#
# Env: FA_NCU_BUDGET (s, default 570), FA_NCU_TESTS (the tests job's "program:group" list, comma
# separated), FA_NCU_SANITIZERS, FA_NCU_SAN_TESTS, FA_NCU_BLOCKS, FA_NCU_DEC_DIMS, FA_NCU_PROFS (only these ncu
# reports, by name, comma separated).
#
# $OUT/summary.txt, and every log in $OUT/ncu_logs.tgz.
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-ncu}; out=$top/logs; mkdir -p "$out"
finish() { cp "$out/summary.txt" "$top/summary.txt"; tar czf "$top/ncu_logs.tgz" -C "$out" . 2>/dev/null && rm -rf "$out"; }
trap finish EXIT
jobs=("$@"); [ ${#jobs[@]} -eq 0 ] && jobs=(tests gather grid small ops pblocks sm90dec ncu)
want() { [[ " ${jobs[*]} " == *" $1 "* ]]; }
sum() { echo "$*" | tee -a "$out/summary.txt"; }
deadline=$(( $(date +%s) + ${FA_NCU_BUDGET:-570} ))
left() { echo $(( deadline - $(date +%s) )); }
root=$(pwd)
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$out/machine.txt" 2>&1
sum "== tools/gpu_ncu.sh ${jobs[*]} at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), tree $(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet 2>/dev/null || echo +dirty)"

build() { # tree dir name head_dims
    (cd "$1" && meson setup "$2" -Dcuda=enabled -Dtests=false -Dnccl=disabled -Dgpu_arch=sm_90a \
        -Dhead_dims="$4" --buildtype=release > "$out/setup_$3.txt" 2>&1 &&
        timeout 300 ninja -C "$2" bench/bench_gpu bench/bench_ops $5 > "$out/build_$3.txt" 2>&1)
}
s=$(date +%s)
tprogs=""
if want tests || want gather || want san; then
    tprogs="tests/gpu/test_gpu_attention tests/gpu/test_gpu_checks tests/gpu/test_gpu_ops tests/gpu/test_gpu_fp8q"
fi
build "$root" build-ncuA A 64,128,256 "$tprogs" & pa=$!
wait $pa; ra=$?
sum "build: rc $ra, $(( $(date +%s) - s )) s"
[ $ra -eq 0 ] || { grep -hE "error|FAILED" "$out"/build_*.txt | head -20; exit 1; }
A=$root/build-ncuA

if want tests; then
    tl=("test_gpu_attention:multi-warp decode" "test_gpu_attention:batch invariance" "test_gpu_attention:fp8"
        "test_gpu_ops:" "test_gpu_checks:")
    [ -n "${FA_NCU_TESTS:-}" ] && IFS=',' read -r -a tl <<< "$FA_NCU_TESTS" # e.g. "test_gpu_checks:,test_gpu_ops:"
    for t in "${tl[@]}"; do
        prog=${t%%:*}; grp=${t#*:}
        s=$(date +%s)
        # shellcheck disable=SC2086
        timeout 150 "$A/tests/gpu/$prog" ${grp:+"$grp"} > "$out/tests_${prog}_${grp// /_}.txt" 2>&1
        sum "$prog \"$grp\": rc $?, $(( $(date +%s) - s )) s, $(tail -n 1 "$out/tests_${prog}_${grp// /_}.txt")"
        grep -E "^not ok" -A3 "$out/tests_${prog}_${grp// /_}.txt" | head -24 | tee -a "$out/summary.txt"
    done
    for grp in "multi-warp decode" "kernel family" "splits"; do # decode calls in the wgmma family
        s=$(date +%s)
        FA_GPU_FAMILY=wgmma timeout 150 "$A/tests/gpu/test_gpu_attention" "$grp" > "$out/tests_wgmma_${grp// /_}.txt" 2>&1
        sum "test_gpu_attention \"$grp\" (FA_GPU_FAMILY=wgmma): rc $?, $(( $(date +%s) - s )) s, $(tail -n 1 "$out/tests_wgmma_${grp// /_}.txt")"
        grep -E "^not ok" -A3 "$out/tests_wgmma_${grp// /_}.txt" | head -24 | tee -a "$out/summary.txt"
    done
fi
if want gather; then
    for t in "test_gpu_attention:family edges" "test_gpu_checks:bad block"; do
        prog=${t%%:*}; grp=${t#*:}
        s=$(date +%s)
        timeout 150 "$A/tests/gpu/$prog" "$grp" > "$out/gather_$prog.txt" 2>&1
        sum "$prog \"$grp\": rc $?, $(( $(date +%s) - s )) s, $(tail -n 1 "$out/gather_$prog.txt")"
        grep -E "^not ok" -A3 "$out/gather_$prog.txt" | head -24 | tee -a "$out/summary.txt"
    done
    for tool in ${FA_NCU_SANITIZERS:-memcheck racecheck}; do
        s=$(date +%s)
        timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$A/tests/gpu/test_gpu_attention" --quick \
            "family edges" > "$out/gather_san_$tool.txt" 2>&1
        sum "$tool (family edges): rc $?, $(( $(date +%s) - s )) s, $(grep -E 'ERROR SUMMARY|passed, ' "$out/gather_san_$tool.txt" | tr '\n' ' ')"
    done
fi
if want pblocks; then
    for bs in ${FA_NCU_BLOCKS:-16 1 3 8}; do
        [ "$(left)" -gt 60 ] || { sum "pblocks $bs: skipped (time)"; continue; }
        s=$(date +%s)
        timeout 90 "$A/bench/bench_gpu" --only prefill --filter prefill-paged --dim 64,128,256 --no-check --block $bs \
            --csv "$out/pb_$bs.csv" > "$out/pb_$bs.txt" 2>&1
        sum "pblocks $bs: rc $?, $(( $(date +%s) - s )) s"
    done
    python3 - "$out" <<'EOF2' | tee -a "$out/summary.txt"
import csv, os, re, sys
out = sys.argv[1]
def rows(bs):
    p = os.path.join(out, "pb_%d.csv" % bs)
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return {re.sub(r" bs=\d+", "", r["name"]): r for r in csv.DictReader(f)}
base = rows(16)
others = {bs: rows(bs) for bs in (1, 3, 8)}
print("%-40s %9s %9s %9s %9s  1/16  3/16  8/16 check(1)" % ("prefill-paged (us)", "bs 16", "bs 1", "bs 3", "bs 8"))
for n, a in base.items():
    if not a["time_us"]:
        continue
    t = [others[bs].get(n, {}).get("time_us", "") for bs in (1, 3, 8)]
    q = ["%5.3f" % (float(x) / float(a["time_us"])) if x else "    -" for x in t]
    print("%-40s %9s %9s %9s %9s %s %s" % (n[:40], a["time_us"], t[0], t[1], t[2], " ".join(q),
                                          others[1].get(n, {}).get("check", "")))
EOF2
fi
if want ops; then
    s=$(date +%s)
    timeout 120 "$A/bench/bench_ops" > "$out/ops.txt" 2>&1
    sum "ops: rc $?, $(( $(date +%s) - s )) s"
    grep '^# perf' "$out/ops.txt" | tee -a "$out/summary.txt"
fi
if want small; then
    s=$(date +%s)
    timeout $(( $(left) > 100 ? 90 : 30 )) "$A/bench/bench_gpu" --only splits --sweep-all --batch 1,8 --ctx 1k \
        --dim 64,128,256 --kv bf16,fp8 --heads 32/8 --csv "$out/small.csv" > "$out/small.txt" 2>&1
    sum "small: rc $?, $(( $(date +%s) - s )) s"
    s=$(date +%s)
    timeout 60 "$A/bench/bench_gpu" --only splits --sweep-all --batch 1,8 --ctx 8k,32k --dim 64 --kv bf16,fp8 \
        --heads 32/8 --csv "$out/small64.csv" > "$out/small64.txt" 2>&1
    sum "small (head 64, 8k / 32k): rc $?, $(( $(date +%s) - s )) s"
    grep -h "split-choice" "$out/small.txt" "$out/small64.txt" | tee -a "$out/summary.txt"
    grep -E "planner|^decode-split" "$out/small.txt" | awk '{print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' |
        head -80 | tee -a "$out/summary.txt"
fi
if want grid; then
    s=$(date +%s)
    timeout 120 "$A/bench/bench_gpu" --only decode --dim 64,128,256 --kv bf16,fp8 --heads 32/8 \
        --csv "$out/grid.csv" > "$out/grid.txt" 2>&1
    sum "grid: rc $?, $(( $(date +%s) - s )) s"
    cp "$out/grid.csv" "$top/grid.csv"
    python3 tools/grid_tables.py "$out/grid.csv" | tail -n 16 | tee -a "$out/summary.txt"
fi
if want san; then # compute-sanitizer on the --quick sets of FA_NCU_SAN_TESTS ("program:group,...")
    sl=("test_gpu_attention:multi-warp decode" "test_gpu_attention:splits" "test_gpu_checks:")
    [ -n "${FA_NCU_SAN_TESTS:-}" ] && IFS=',' read -r -a sl <<< "$FA_NCU_SAN_TESTS"
    for tool in ${FA_NCU_SANITIZERS:-memcheck racecheck}; do
        for t in "${sl[@]}"; do
            prog=${t%%:*}; grp=${t#*:}
            [ "$(left)" -gt 40 ] || { sum "$tool $prog \"$grp\": skipped (time)"; continue; }
            s=$(date +%s); f="$out/san_${tool}_${prog}_${grp// /_}.txt"
            # shellcheck disable=SC2086
            timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$A/tests/gpu/$prog" --quick \
                ${grp:+"$grp"} > "$f" 2>&1
            sum "$tool $prog \"$grp\": rc $?, $(( $(date +%s) - s )) s, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, ' "$f" | tr '\n' ' ')"
        done
    done
fi
if want sm90dec; then
    for r in A S; do
        fam=auto; [ $r = S ] && fam=wgmma
        s=$(date +%s)
        timeout $(( $(left) > 150 ? 100 : 30 )) "$A/bench/bench_gpu" --only decode --dim ${FA_NCU_DEC_DIMS:-128} \
            --kv bf16 --heads 32/8 --family $fam --csv "$out/dec_$r.csv" > "$out/dec_$r.txt" 2>&1
        sum "sm90dec $r: rc $?, $(( $(date +%s) - s )) s"
    done
    python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import csv, os, sys
out = sys.argv[1]
def rows(r):
    p = os.path.join(out, "dec_%s.csv" % r)
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return {x["name"]: x for x in csv.DictReader(f) if x["category"] == "decode"}
a, s = rows("A"), rows("S")
print("%-44s %9s %9s %7s %6s" % ("decode row (us)", "decode", "wgmma", "S/A", "check"))
for n, x in a.items():
    y = s.get(n)
    if y and x["time_us"] and y["time_us"]:
        print("%-44s %9s %9s %7.2f %6s" % (n[:44], x["time_us"], y["time_us"],
                                           float(y["time_us"]) / float(x["time_us"]), y["check"]))
EOF
fi
if want ncu; then
    # shellcheck source=tools/ncu_prof.sh
    . tools/ncu_prof.sh # prof NAME KERNEL-REGEX SKIP PROGRAM ARGS...: one report, its line in summary.txt
    dec=(--only decode --heads 32/8 --no-check --no-ceilings --no-graph)
    prof dec_h128_fp8_64x8k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 128 --kv fp8 --batch 64 --ctx 8k
    prof dec_h64_bf16_64x8k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 64 --kv bf16 --batch 64 --ctx 8k
    prof dec_h64_fp8_64x8k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 64 --kv fp8 --batch 64 --ctx 8k
    prof dec_h128_bf16_1x32k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 128 --kv bf16 --batch 1 --ctx 32k
    prof comb_h128_bf16_1x32k combine_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 128 --kv bf16 --batch 1 --ctx 32k
    prof dec_h128_fp8_1x1k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 128 --kv fp8 --batch 1 --ctx 1k
    prof dec_h128_bf16_1x1k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 128 --kv bf16 --batch 1 --ctx 1k
    prof dec_h64_fp8_1x1k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 64 --kv fp8 --batch 1 --ctx 1k
    prof dec_h64_bf16_1x1k decode_mw_kernel 2 "$A/bench/bench_gpu" "${dec[@]}" --dim 64 --kv bf16 --batch 1 --ctx 1k
    pre=(--quick --only prefill --no-ceilings --no-check --reps 20 --warmup 1)
    prof pre_h128_bf16_4x4k sm90_attention_kernel 1 "$A/bench/bench_gpu" "${pre[@]}" --filter "prefill-dense 4x4096 h=32/8 d=128"
    prof pre_h128_fp8q_4x4k sm90_attention_kernel 1 "$A/bench/bench_gpu" "${pre[@]}" --filter "prefill-dense 4x4096 h=32/8 d=128 q=fp8"
    # paged at block 16 (TMA boxes of 16 rows, 24 a tile) against the dense row above (4 a tile)
    prof pre_h128_paged_4x4k sm90_attention_kernel 1 "$A/bench/bench_gpu" "${pre[@]}" --filter "prefill-paged 4x4096 h=32/8 d=128"
    prof pre_h128_paged_1x16k sm90_attention_kernel 1 "$A/bench/bench_gpu" "${pre[@]}" --filter "prefill-paged 1x16384 h=32/8 d=128"
    prof pre_h128_bf16_1x16k sm90_attention_kernel 1 "$A/bench/bench_gpu" "${pre[@]}" --filter "prefill-dense 1x16384 h=32/8 d=128"
    prof cache_bf16 "reshape_and_cache_kernel.*TF16ELi0" 30 "$A/bench/bench_ops"
    prof cache_fp8 "reshape_and_cache_kernel.*TBF16ELi1" 30 "$A/bench/bench_ops"
    prof merge merge_states_kernel 30 "$A/bench/bench_ops"
    prof dcp dcp_correct_kernel 30 "$A/bench/bench_ops"
fi
