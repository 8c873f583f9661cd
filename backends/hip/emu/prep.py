# backends/hip/emu/prep.py - rewrites kernel launches (name<<<grid, block, ...>>>(args);) of the
# given files in place as emu_launch(dim3(grid), dim3(block), [&] { name(args); }); for g++.
import re, sys
def split_top(s):
    out, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{': depth += 1
        if ch in ')]}': depth -= 1
        if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''
        else: cur += ch
    out.append(cur.strip()); return out
def fix(src):
    def rep(m):
        name, cfg, args = m.group(1), m.group(2), m.group(3)
        a = split_top(cfg)
        return 'emu_launch(dim3(%s), dim3(%s), [&] { %s(%s); });' % (a[0], a[1], name, args)
    return re.sub(r'(\w+(?:<[^<>;]*>)?)<<<(.+?)>>>\(([^;]*)\);', rep, src, flags=re.S)
for f in sys.argv[1:]:
    s = open(f).read(); open(f, 'w').write(fix(s))
