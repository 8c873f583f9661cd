# tools/ncu_prof.sh - sourced by the GPU-machine scripts (tools/gpu_ncu.sh, tools/gpu_prefill.sh):
#   prof NAME KERNEL-REGEX SKIP PROGRAM ARGS...
# profiles the (SKIP + 1)-th launch of the kernel whose mangled name matches KERNEL-REGEX in
# PROGRAM ARGS with ncu (the key metrics: time, DRAM, issue slots, tensor pipe, L2 hit rate, stall
# reasons per issue), writes $out/ncu_NAME.csv / .err and appends one summary line to
# $out/summary.txt (and stdout). The caller defines out, left (seconds of its budget left) and sum;
# FA_NCU_PROFS (comma separated names) keeps only those reports.
m="dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum"
m="$m,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed"
m="$m,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
m="$m,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
m="$m,lts__t_sector_hit_rate.pct,launch__grid_size,launch__occupancy_limit_shared_mem"
for x in long_scoreboard short_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle \
         not_selected no_instruction drain; do
    m="$m,smsp__average_warps_issue_stalled_${x}_per_issue_active.ratio"
done
prof() { # name kernel-regex skip program args...
    local name=$1 k=$2 skip=$3; shift 3
    [ -n "${FA_NCU_PROFS:-}" ] && [[ ",$FA_NCU_PROFS," != *",$name,"* ]] && return
    [ "$(left)" -gt 25 ] || { sum "ncu $name: skipped (time)"; return; }
    timeout 60 ncu --kernel-name-base mangled -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
        --metrics "$m" --csv --page raw "$@" > "$out/ncu_$name.csv" 2> "$out/ncu_$name.err"
    python3 - "$out/ncu_$name.csv" "$name" <<'EOF' | tee -a "$out/summary.txt"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 3:
    print("ncu %s: no report" % sys.argv[2]); sys.exit(0)
h, v = rows[0], rows[2]
get = lambda k: v[h.index(k)] if k in h else "?"
short = lambda k: k.replace("smsp__average_warps_issue_stalled_", "stall_").replace("_per_issue_active.ratio", "")
want = ("dram__throughput.avg", "dram__bytes", "gpu__time_duration.sum", "sm__throughput.avg", "issue_active.avg",
        "inst_executed.sum", "warps_active.avg", "hmma_cycles_active.avg", "sector_hit", "grid_size",
        "stalled", "occupancy_limit_shared", "occupancy_limit_reg")
keys = [k for k in h if any(w in k for w in want)]
print("ncu %s: %s" % (sys.argv[2], get("Kernel Name")[:60]))
print("   " + "; ".join("%s %s" % (short(k), get(k)) for k in keys))
EOF
}
