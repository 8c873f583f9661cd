#!/usr/bin/env bash
# tools/gpu_prefill.sh - one GPU-machine call for the wgmma family's prefill work: jobs in order,
# each with a time limit, one summary line a job.
#   variants  tools/gpu_variants.sh on $FA_PF_SPEC (default tools/variants/sm90_softmax.py; only
#             the variants named in $FA_VAR_ONLY when set) with bench_gpu's $FA_PF_ARGS (default
#             the quick prefill rows at heads 64 / 128 / 256; $FA_PF_ARGS2: a second argument set)
#   peers     bench/run_perf.sh --only prefill,mixed --quick --no-flex on the variants job's tree
#             build (build-var: ours and cuDNN SDPA in the same machine session; $FA_PF_PEERS_ARGS:
#             extra bench_gpu arguments, e.g. "--dim 128" after a variants build of head 128 only)
#   inorder   the variants job's tree build (build-var): the paged prefill rows with block ids
#             handed out in order (--blocks-in-order) and shuffled, interleaved, 2 runs each
#             ($FA_PF_INORDER_ARGS, default the quick head-128 prefill rows): inorder.txt
#   tests     tests/gpu/run_gpu_tests.sh without sanitizers on $FA_PF_PROGRAMS (default the
#             attention and fp8-query programs), both kernel families
#   proto     tools/hopper_proto.sh: the dense prototype's cases and timed sizes (the same card)
#   ncu       ncu (tools/ncu_prof.sh) of the tree build's dense / paged 1 x 16384 and 16 x 1024
#             head-128 rows and of the dense prototype's ping-pong loop at 1 x 16384
#             ($FA_NCU_PROFS: only the named profiles, e.g. lib_dense_16x1k,lib_paged_16x1k)
#   ncusrc    ncu's per-instruction stall sampling (SourceCounters) of the library's dense 1 x 16384
#             row and the prototype's ping-pong loop, as CSV: src_lib.csv, src_proto.csv
#   sass      cuobjdump of the variants job's builds (the tree and each variant): sass_TREE.txt.gz,
#             sass_counts.txt, sass_overlap.txt (tools/sass_overlap.py)
#   san       compute-sanitizer ($FA_PF_TOOLS, default memcheck racecheck synccheck) on the quick
#             sets of the same programs
# FA_PF_APPLY="SPEC VARIANT" makes a variant's replacements in this checkout before the first
# tests / san job.
# $OUT/summary.txt, the jobs' outputs beside it (variants.txt, perf_tables.md, bench_gpu.csv,
# peers.csv), the logs in $OUT/pf_logs.tgz.
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-pf}; mkdir -p "$top"; logs=$top/pf; mkdir -p "$logs"
sum=$top/summary.txt; : > "$sum"
start=$(date +%s)
note() { echo "$*" | tee -a "$sum"; }
left() { echo $(( ${FA_PF_BUDGET:-570} - ($(date +%s) - start) )); }
finish() { tar czf "$top/pf_logs.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"; }
trap finish EXIT
note "== tools/gpu_prefill.sh $* at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null) ($(git status --porcelain 2>/dev/null | wc -l) changed paths)"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$sum" 2>&1
programs=${FA_PF_PROGRAMS:-test_gpu_attention test_gpu_fp8q}
# FA_PF_APPLY="SPEC VARIANT": that variant's replacements made in this checkout before the first
# tests / san job (after the variants job, which builds the tree and the spec's variants from the
# checkout as it was), so that the tests run it; e.g. "tools/variants/sm90_stages.py q8gather"
applied=0
apply_once() {
    [ -n "${FA_PF_APPLY:-}" ] && [ $applied -eq 0 ] || return 0
    applied=1
    # shellcheck disable=SC2086
    python3 tools/apply_variant.py ${FA_PF_APPLY} | tee -a "$sum"
}
for job in "$@"; do
    t0=$(date +%s); budget=$(left)
    [ "$budget" -gt 20 ] || { note "$job: skipped (no time left)"; continue; }
    case $job in
    variants)
        OUT=$logs/var timeout $((budget - 5)) bash tools/gpu_variants.sh "${FA_PF_SPEC:-tools/variants/sm90_softmax.py}" \
            "${FA_PF_ARGS:---only prefill --dim 64,128,256 --quick --no-ceilings --no-check}" \
            ${FA_PF_ARGS2:+"$FA_PF_ARGS2"} > "$logs/variants.out" 2>&1
        rc=$?; cp "$logs/var/variants.txt" "$top/" 2>/dev/null
        note "variants: rc $rc, $(( $(date +%s) - t0 )) s (table in variants.txt)" ;;
    peers)
        timeout $((budget - 5)) bash bench/run_perf.sh --build build-var --skip-build --only prefill,mixed --quick \
            --no-flex --out "$logs/perf" ${FA_PF_PEERS_ARGS:+--bench-args "$FA_PF_PEERS_ARGS"} > "$logs/peers.out" 2>&1
        rc=$?; cp "$logs/perf/perf_tables.md" "$logs/perf/bench_gpu.csv" "$logs/perf/peers.csv" "$top/" 2>/dev/null
        note "peers: rc $rc, $(( $(date +%s) - t0 )) s"; tail -n 25 "$logs/peers.out" >> "$sum" ;;
    inorder)
        b=build-var/bench/bench_gpu
        if [ ! -x "$b" ]; then note "inorder: no $b (run the variants job first)"; continue; fi
        for rep in 1 2; do
            for m in shuffled inorder; do
                extra=(); [ $m = inorder ] && extra=(--blocks-in-order)
                # shellcheck disable=SC2086
                timeout $(( $(left) / 2 > 10 ? $(left) / 2 : 10 )) "$b" ${FA_PF_INORDER_ARGS:---only prefill --quick --no-ceilings --no-check} \
                    "${extra[@]}" --csv "$logs/inorder_${m}_$rep.csv" > "$logs/inorder_${m}_$rep.txt" 2>&1
            done
        done
        python3 - "$logs" <<'PY' > "$top/inorder.txt"
import csv, os, statistics, sys
d = sys.argv[1]; t = {}
for m in ("shuffled", "inorder"):
    for rep in (1, 2):
        p = os.path.join(d, "inorder_%s_%d.csv" % (m, rep))
        if not os.path.exists(p): continue
        for r in csv.DictReader(open(p)):
            if r.get("time_us") and r["name"].startswith("prefill-paged"):
                t.setdefault(r["name"].replace(" inorder", ""), {}).setdefault(m, []).append(float(r["time_us"]))
print("%-55s %12s %12s %8s" % ("row (us, median of 2)", "shuffled", "in order", "ratio"))
for n, v in t.items():
    a, b = statistics.median(v.get("shuffled", [0])), statistics.median(v.get("inorder", [0]))
    print("%-55s %12.1f %12.1f %8.3f" % (n, a, b, b / a if a else 0))
PY
        note "inorder: $(( $(date +%s) - t0 )) s (table in inorder.txt)"; cat "$top/inorder.txt" >> "$sum" ;;
    tests)
        apply_once
        OUT=$logs/tests FA_GPU_SANITIZE=0 FA_GPU_PROGRAMS="$programs" FA_GPU_TIMEOUT=${FA_PF_TEST_TIMEOUT:-150} \
            timeout $((budget - 5)) bash tests/gpu/run_gpu_tests.sh > "$logs/tests.out" 2>&1
        note "tests: rc $?, $(( $(date +%s) - t0 )) s: $(tail -n 1 "$logs/tests.out")"
        grep -E "^test_gpu|FAIL" "$logs/tests.out" | head -20 >> "$sum" ;;
    san)
        apply_once
        OUT=$logs/san FA_GPU_PLAIN=0 FA_GPU_SECOND_FAMILY=0 FA_GPU_PROGRAMS="$programs" \
            FA_GPU_SANITIZE_TOOLS="${FA_PF_TOOLS:-memcheck racecheck synccheck}" \
            FA_GPU_SANITIZE_TIMEOUT=$(( (budget - 30) / 3 )) \
            timeout $((budget - 5)) bash tests/gpu/run_gpu_tests.sh > "$logs/san.out" 2>&1
        note "san: rc $?, $(( $(date +%s) - t0 )) s: $(tail -n 1 "$logs/san.out")"
        grep -E "sanitize|FAIL" "$logs/san.out" | head -20 >> "$sum" ;;
    proto)
        OUT=$logs/proto timeout $((budget - 5)) bash tools/hopper_proto.sh > "$logs/proto.out" 2>&1
        note "proto: rc $?, $(( $(date +%s) - t0 )) s"; grep -E "TFLOP|passed|^ *[0-9]+ x" "$logs/proto.out" | tail -n 30 >> "$sum" ;;
    sass)
        # the SASS of the variants job's builds (build-var of the tree and of each variant): per
        # tree sass_TREE.txt.gz, sass_counts.txt (instructions, HGMMA / MUFU.EX2 / BAR / SYNCS a
        # function) and sass_overlap.txt (tools/sass_overlap.py: the exponents under / after the
        # P V wait, the plain 16-bit kernels)
        : > "$top/sass_counts.txt"; : > "$top/sass_overlap.txt"
        for d in build-var /tmp/fa-var-*/build-var; do
            lib=$(find "$d" -name 'libflashattn_cuda.a' 2>/dev/null | head -n 1)
            [ -n "$lib" ] || continue
            tn=$(basename "$(dirname "$d")"); [ "$d" = build-var ] && tn=tree; tn=${tn#fa-var-}
            timeout $(( $(left) > 30 ? 30 : 10 )) cuobjdump --dump-sass "$lib" > "$logs/sass_$tn.txt" 2>&1
            awk -v t="$tn" '/Function :/ { if (f != "") printf "%s %s n=%d HGMMA=%d EX2=%d BAR=%d SYNCS=%d\n", t, f, n, h, e, b, s;
                                f = $3; n = h = e = b = s = 0; next }
                 /\/\*[0-9a-f]+\*\// { n++; if (/HGMMA/) h++; if (/MUFU.EX2/) e++; if (/ BAR/) b++; if (/SYNCS/) s++ }
                 END { if (f != "") printf "%s %s n=%d HGMMA=%d EX2=%d BAR=%d SYNCS=%d\n", t, f, n, h, e, b, s }' \
                "$logs/sass_$tn.txt" >> "$top/sass_counts.txt"
            python3 tools/sass_overlap.py "$logs/sass_$tn.txt" 'sm90_attention_kernelI13__nv_bfloat16.*Li0ELb0EE' | sed "s/^/$tn /" >> "$top/sass_overlap.txt"
            [ "$tn" = tree ] && gzip -c "$logs/sass_$tn.txt" > "$top/sass_$tn.txt.gz"
        done
        note "sass: $(( $(date +%s) - t0 )) s"; cat "$top/sass_overlap.txt" >> "$sum" ;;
    ncu)
        # ncu of the variants job's tree build (the dense and paged head-128 rows) and of the dense
        # prototype's ping-pong loop at 1 x 16384 causal (tools/ncu_prof.sh; $FA_NCU_PROFS)
        out=$logs; sum() { note "$*"; }; left() { echo $(( ${FA_PF_BUDGET:-570} - ($(date +%s) - start) )); }
        # shellcheck source=tools/ncu_prof.sh
        . tools/ncu_prof.sh
        pre=(--quick --only prefill --dim 128 --no-ceilings --no-check --reps 20 --warmup 1)
        b=build-var/bench/bench_gpu
        prof lib_dense_1x16k sm90_attention_kernel 1 "$b" "${pre[@]}" --filter "prefill-dense 1x16384 h=32/8 d=128"
        prof lib_paged_1x16k sm90_attention_kernel 1 "$b" "${pre[@]}" --filter "prefill-paged 1x16384 h=32/8 d=128"
        prof lib_dense_16x1k sm90_attention_kernel 1 "$b" "${pre[@]}" --filter "prefill-dense 16x1024 h=32/8 d=128"
        prof lib_paged_16x1k sm90_attention_kernel 1 "$b" "${pre[@]}" --filter "prefill-paged 16x1024 h=32/8 d=128"
        nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo tools/hopper_proto.cu -o "$logs/hp" > "$logs/hp_build.txt" 2>&1
        HOPPER_PROTO_PNG_TIMED=1 prof proto_png_1x16k "fa_sm90_prefill_kernelILb1ELb1ELb1E" 0 "$logs/hp"
        note "ncu: $(( $(date +%s) - t0 )) s" ;;
    ncusrc)
        # ncu's per-instruction sampling (SourceCounters, WarpStateStats) of the library's dense
        # 1 x 16384 head-128 row and of the prototype's ping-pong loop on that shape: the stall
        # reasons a SASS instruction, as CSV (src_lib.csv, src_proto.csv), to set the two loops'
        # schedules side by side
        b=build-var/bench/bench_gpu
        nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo tools/hopper_proto.cu -o "$logs/hp" > "$logs/hp_build.txt" 2>&1
        for w in lib proto; do
            [ "$(left)" -gt 40 ] || { note "ncusrc $w: skipped (time)"; continue; }
            if [ $w = lib ]; then
                set -- "$b" --quick --only prefill --dim 128 --no-ceilings --no-check --reps 20 --warmup 1 \
                    --filter "prefill-dense 1x16384 h=32/8 d=128"; k=sm90_attention_kernel; skip=1
            else
                set -- "$logs/hp"; k="fa_sm90_prefill_kernelILb1ELb1ELb1E"; skip=0
            fi
            HOPPER_PROTO_PNG_TIMED=1 timeout 120 ncu --kernel-name-base mangled -k "regex:$k" --launch-skip $skip \
                --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$logs/src_$w" "$@" \
                > "$logs/src_$w.out" 2>&1
            ncu --import "$logs/src_$w.ncu-rep" --page source --csv --print-source sass > "$top/src_$w.csv" 2>> "$logs/src_$w.out"
            note "ncusrc $w: $(wc -l < "$top/src_$w.csv") lines"
        done ;;
    *) note "$job: unknown job" ;;
    esac
done
note "total $(( $(date +%s) - start )) s"
