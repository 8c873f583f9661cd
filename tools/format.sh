#!/bin/sh
# tools/format.sh - clang-format over the project's C and CUDA sources (.clang-format at the root).
#
#   tools/format.sh            format every source in place
#   tools/format.sh --check    change nothing; list the files that are not formatted and exit 1
#                              if there is any (0 when all are, 2 when clang-format is missing)
#   tools/format.sh [--check] FILE...    the same for the named files only
#
# The sources: the git-tracked *.c *.h *.cpp *.cu *.cuh files, less the generated instance files
# of backends/cuda/attention/instances/ and dispatch_generated.h (gen_instances.py writes those;
# its --check checks them)
# and examples/readme_example.c (its README part is the README's text, hand-laid-out; the
# readme_in_sync test keeps the two equal). backends/cuda/.clang-format adjusts the root file
# for the CUDA C++ sources.
# Needs clang-format 19 (Debian: apt-get install clang-format-19); $CLANG_FORMAT overrides.
set -u
cd "$(dirname "$0")/.." || exit 2

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
    for c in clang-format-19 clang-format; do
        if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
    done
fi
if [ -z "$cf" ] || ! command -v "$cf" >/dev/null 2>&1; then
    echo "format.sh: no clang-format found (apt-get install clang-format-19, or set CLANG_FORMAT)" >&2
    exit 2
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p' | head -n 1)
if [ -z "$major" ] || [ "$major" -lt 19 ]; then
    echo "format.sh: $cf is version ${major:-unknown}; .clang-format needs 19 or newer" \
         "(apt-get install clang-format-19, or set CLANG_FORMAT)" >&2
    exit 2
fi

if [ $# -gt 0 ]; then
    files=$(printf '%s\n' "$@")
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files -- '*.c' '*.h' '*.cpp' '*.cu' '*.cuh' |
            grep -v -e '^backends/cuda/attention/instances/' -e '^backends/cuda/attention/dispatch_generated\.h$' \
                -e '^examples/readme_example\.c$')
else
    files=$(find . -path ./.git -prune -o -path './build*' -prune -o \
                 -path ./backends/cuda/attention/instances -prune -o \
                 -path ./backends/cuda/attention/dispatch_generated.h -prune -o \
                 -path ./examples/readme_example.c -prune -o -type f \
                 \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
                 -print | sed 's|^\./||' | sort)
fi

bad=0
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT INT TERM
for f in $files; do
    [ -f "$f" ] || { echo "format.sh: $f: no such file" >&2; bad=$((bad + 1)); continue; }
    if [ $check -eq 1 ]; then
        "$cf" --style=file "$f" > "$tmp" || { echo "format.sh: $cf failed on $f" >&2; exit 2; }
        if ! cmp -s "$f" "$tmp"; then
            n=$(diff "$f" "$tmp" | grep -c '^<')
            echo "$f: not formatted ($n lines differ)"
            bad=$((bad + 1))
        fi
    else
        "$cf" --style=file -i "$f" || { echo "format.sh: $cf failed on $f" >&2; exit 2; }
    fi
done
if [ $check -eq 1 ]; then
    if [ $bad -gt 0 ]; then
        echo "format.sh: $bad file(s) not formatted; run tools/format.sh to format them"
        exit 1
    fi
    echo "format.sh: all files formatted ($cf)"
fi
[ $bad -eq 0 ]
