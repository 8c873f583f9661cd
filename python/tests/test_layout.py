"""The ctypes mirrors against the C structs: a C program, compiled here with the system's C
compiler against the repository's headers, prints sizeof / alignment of every mirrored struct,
offsetof / sizeof of every field, and the value of every mirrored enum constant."""
import ctypes
import os
import shutil
import subprocess

import pytest

from flashattn import _structs as S

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("FLASHATTN_SOURCE_ROOT", os.path.normpath(os.path.join(HERE, "..", "..")))


def _c_program():
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flashattn.h"',
             '#include "fa_cpu.h"', "int main(void) {"]
    for cname, cls, _ in S.MIRRORED:
        lines.append('    { struct a_ { char c; %s t; }; printf("struct %s %%zu %%zu\\n", '
                     'sizeof(%s), offsetof(struct a_, t)); }' % (cname, cname, cname))
        for field in cls._fields_:
            f = field[0]
            lines.append('    printf("field %s.%s %%zu %%zu\\n", offsetof(%s, %s), '
                         'sizeof(((%s *)0)->%s));' % (cname, f, cname, f, cname, f))
    for name, _ in S.ENUM_VALUES:
        lines.append('    printf("enum %s %%lld\\n", (long long)(%s));' % (name, name))
    lines.append("    return 0;\n}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler (cc) to compile the layout probe")
    if not os.path.exists(os.path.join(ROOT, "flashattn.h")):
        pytest.skip("flashattn.h not found at %s (set FLASHATTN_SOURCE_ROOT)" % ROOT)
    d = tmp_path_factory.mktemp("layout")
    src = d / "layout.c"
    exe = d / "layout"
    src.write_text(_c_program())
    subprocess.run([cc, "-std=c99", "-I", ROOT, "-I", os.path.join(ROOT, "backends", "cpu"),
                    str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    structs, fields, enums = {}, {}, {}
    for line in out.splitlines():
        kind, name, *vals = line.split()
        if kind == "struct":
            structs[name] = tuple(map(int, vals))
        elif kind == "field":
            fields[name] = tuple(map(int, vals))
        else:
            enums[name] = int(vals[0])
    return structs, fields, enums


@pytest.mark.parametrize("cname,cls", [(c, k) for c, k, _ in S.MIRRORED], ids=[c for c, _, _ in S.MIRRORED])
def test_struct_layout(c_layout, cname, cls):
    structs, fields, _ = c_layout
    size, align = structs[cname]
    assert ctypes.sizeof(cls) == size, "sizeof(%s)" % cname
    assert ctypes.alignment(cls) == align, "alignment of %s" % cname
    for field in cls._fields_:
        f = field[0]
        off, fsize = fields["%s.%s" % (cname, f)]
        assert getattr(cls, f).offset == off, "offsetof(%s, %s)" % (cname, f)
        assert getattr(cls, f).size == fsize, "sizeof %s.%s" % (cname, f)


def test_every_field_mirrored(c_layout):
    # the C struct has no bytes the mirror does not name: the last field ends where sizeof
    # (less tail padding) says
    structs, fields, _ = c_layout
    for cname, cls, _ in S.MIRRORED:
        last = cls._fields_[-1][0]
        off, fsize = fields["%s.%s" % (cname, last)]
        size, align = structs[cname]
        assert size - (off + fsize) < align, "%s has fields past %s" % (cname, last)


def test_enum_values(c_layout):
    _, _, enums = c_layout
    for name, value in S.ENUM_VALUES:
        assert enums[name] == value, name
