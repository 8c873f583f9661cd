#!/usr/bin/env python3
"""tools/apply_variant.py SPEC VARIANT [TREE] - make a variant's text replacements in a tree.

SPEC is a tools/variants/*.py file defining VARIANTS = {name: [(path, old, new), ...]}; each
`old` must occur exactly once in TREE/path (TREE defaults to the current directory), else
nothing further is changed and the exit status is 1. Prints one line a changed file. Used by
tools/gpu_variants.sh (copies of the tree), tools/gpu_prefill.sh (FA_PF_APPLY) and
tools/gpu_gates.sh (FA_GT_SPEC)."""
import os
import runpy
import sys


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__.splitlines()[0])
    spec, name = argv[1], argv[2]
    tree = argv[3] if len(argv) == 4 else "."
    variants = runpy.run_path(spec)["VARIANTS"]
    if name not in variants:
        sys.exit("apply_variant.py: %s has no variant %r (it has %s)" % (spec, name, ", ".join(variants)))
    for path, old, new in variants[name]:
        p = os.path.join(tree, path)
        s = open(p).read()
        if s.count(old) != 1:
            sys.exit("apply_variant.py: %s %s: %r is in %s %d times, want once" % (spec, name, old[:60], path,
                                                                                    s.count(old)))
        open(p, "w").write(s.replace(old, new))
        print("applied %s %s to %s" % (spec, name, path))


if __name__ == "__main__":
    main(sys.argv)
