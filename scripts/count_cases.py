"""Counts individual test cases in a meson test log (testlog.json, one JSON object a line).
TAP tests (Criterion) count their `ok` / `not ok` lines; GPU programs count their own
`N passed, M failed` line; any other test counts as one case. Prints "N passed, M failed"."""
import json
import re
import sys

passed = failed = 0
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        t = json.loads(line)
        out = t.get("stdout", "") or ""
        ok = len(re.findall(r"^ok\b", out, re.M))
        nok = len(re.findall(r"^not ok\b", out, re.M))
        summary = re.findall(r"^(\d+) passed, (\d+) failed", out, re.M)
        if summary:  # a self-checking program's own count
            p, m = map(int, summary[-1])
            passed += p
            failed += m
            if t.get("result") != "OK" and m == 0:
                failed += 1
        elif ok or nok:  # TAP (Criterion prints "ok - suite::name")
            passed += ok
            failed += nok
            if t.get("result") not in ("OK", "EXPECTEDFAIL", "SKIP") and nok == 0:
                failed += 1  # crashed or timed out before reporting a failure
        else:
            if t.get("result") == "OK":
                passed += 1
            elif t.get("result") != "SKIP":
                failed += 1
print(f"{passed} passed, {failed} failed")
