#!/usr/bin/env python3
"""tools/grid_tables.py - the decode grid of a bench_gpu CSV as markdown tables (for docs/perf.md).

    python3 tools/grid_tables.py BENCH.csv [--times]

Prints, per cache type, the fraction of the copy ceiling of every decode row (the planner's
split count in brackets) by heads x head size, batch x context; then the fp8 time over the bf16
time of each row (below 1: fp8 faster), and the grid's median and minimum. --times prints the
times in microseconds instead of the fractions.
"""
import csv
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    times = "--times" in sys.argv[2:]
    rows = {}
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            if r["category"] != "decode" or not r["time_us"]:
                continue
            key = (r["kv"], r["hq"] + "/" + r["hkv"], int(r["d"]), int(r["batch"]), int(r["ctx"]))
            rows[key] = r
    heads = sorted({k[1] for k in rows}, key=lambda h: (int(h.split("/")[0]), int(h.split("/")[1])))
    dims = sorted({k[2] for k in rows})
    cols = sorted({(k[3], k[4]) for k in rows})
    head = "| heads | d | " + " | ".join("b=%d %dk" % (b, c // 1024) for b, c in cols) + " |"
    sep = "|---|---|" + "---|" * len(cols)
    for kv in ("bf16", "fp8"):
        fr = []
        print("\n**%s cache** — %s\n" % (kv, "time in µs" if times else "fraction of copy (planner's splits)"))
        print(head)
        print(sep)
        for h in heads:
            for d in dims:
                cells = []
                for b, c in cols:
                    r = rows.get((kv, h, d, b, c))
                    if r is None:
                        cells.append("—")
                        continue
                    fr.append(float(r["frac_copy"]))
                    cells.append(r["time_us"] if times else "%.2f (%s)" % (float(r["frac_copy"]), r["splits"]))
                print("| %s | %d | %s |" % (h, d, " | ".join(cells)))
        if fr:
            print("\nmedian %.3f, min %.3f over %d rows" % (statistics.median(fr), min(fr), len(fr)))
    print("\n**fp8 time / bf16 time** (below 1: fp8 faster)\n")
    print(head)
    print(sep)
    q = []
    for h in heads:
        for d in dims:
            cells = []
            for b, c in cols:
                a, f = rows.get(("bf16", h, d, b, c)), rows.get(("fp8", h, d, b, c))
                if a is None or f is None:
                    cells.append("—")
                    continue
                x = float(f["time_us"]) / float(a["time_us"])
                q.append(x)
                cells.append("%.3f" % x)
            print("| %s | %d | %s |" % (h, d, " | ".join(cells)))
    if q:
        print("\nmedian %.3f, max %.3f over %d rows" % (statistics.median(q), max(q), len(q)))


if __name__ == "__main__":
    main()
