#!/usr/bin/env python3
"""tools/sass_overlap.py SASS_FILE [FUNCTION_REGEX]: for each function of a cuobjdump --dump-sass
listing (those matching the regex), where the softmax's exponents sit against the P V wait: in each
stretch from a `WARPGROUP.DEPBAR.LE gsb0, 0x1` (S done, P V in flight) to the next HGMMA, the
MUFU.EX2 before the following `DEPBAR.LE gsb0, 0x0` (under P V) and after it (P V already
waited for). A line per function: name, instructions, then before/after counts per stretch."""
import re
import sys

path = sys.argv[1]
want = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
funcs, cur = [], None
for line in open(path, errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = [m.group(1), []]
        funcs.append(cur)
        continue
    m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
    if m and cur is not None:
        cur[1].append(m.group(1))
for name, ins in funcs:
    if not want.search(name):
        continue
    parts, i = [], 0
    while i < len(ins):
        if "DEPBAR.LE gsb0, 0x1" in ins[i]:
            before = after = 0
            waited = False
            j = i + 1
            while j < len(ins) and "HGMMA" not in ins[j]:
                if "DEPBAR.LE gsb0, 0x0" in ins[j]:
                    waited = True
                elif "MUFU.EX2" in ins[j]:
                    if waited:
                        after += 1
                    else:
                        before += 1
                j += 1
            parts.append("%d/%d" % (before, after))
            i = j
        else:
            i += 1
    print("%s n=%d ex2 under/after the P V wait: %s" % (name[:110], len(ins), " ".join(parts) or "-"))
