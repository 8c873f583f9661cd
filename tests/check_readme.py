#!/usr/bin/env python3
"""Checks that the README's usage example is the code examples/readme_example.c compiles and runs:
every line of the README's C block, except its #define/#include lines, appears in that order,
verbatim (re-indented by four spaces), between the file's README markers."""
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
readme = open(os.path.join(root, "README.md")).read()
start = readme.index("```c\n") + 5
block = readme[start:readme.index("```", start)].rstrip("\n").split("\n")
lines = [l for l in block if not l.startswith("#define") and not l.startswith("#include")]
while lines and not lines[0].strip():
    lines.pop(0)
src = open(os.path.join(root, "examples", "readme_example.c")).read()
begin = "/* ---- README begin ---- */\n"
inner = src[src.index(begin) + len(begin):src.index("    /* ---- README end ---- */")]
want = "\n".join(("    " + l) if l else l for l in lines) + "\n"
if inner != want:
    import difflib
    sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), inner.splitlines(True), "README.md", "examples/readme_example.c"))
    print("check_readme: the README's usage example and examples/readme_example.c differ")
    sys.exit(1)
print("check_readme: the README's usage example is examples/readme_example.c")
