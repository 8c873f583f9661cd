#!/usr/bin/env python3
"""Compile test for FLASHATTN_STATIC (run by meson as a test, not at build time, so that a
failure is one failed test instead of a broken build).

  check_static.py INCLUDE_DIR SOURCE COMPILER [ARG...]

Compiles SOURCE (a file that defines FLASHATTN_STATIC and FLASHATTN_IMPLEMENTATION and calls
one function) with COMPILER ARG... -I INCLUDE_DIR -c and passes only when the compiler succeeds
and prints nothing: the args carry -Wall -Wextra -Werror, so every public function the file does
not call must draw no unused-function warning. First a control file with an unused static
function must fail under the same command, which shows that the warnings are really on.
"""
import os
import subprocess
import sys
import tempfile

CONTROL = "static int fa_test_unused(void) { return 0; }\nint main(void) { return 0; }\n"


def compile_one(cmd, src, inc, out):
    argv = list(cmd) + ["-I" + inc, "-c", src, "-o", out]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    return r.returncode, r.stdout.strip(), argv


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: check_static.py INCLUDE_DIR SOURCE COMPILER [ARG...]")
    inc, src, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    with tempfile.TemporaryDirectory() as tmp:
        ext = os.path.splitext(src)[1]
        control = os.path.join(tmp, "control" + ext)
        with open(control, "w") as f:
            f.write(CONTROL.replace("(void)", "()") if ext != ".c" else CONTROL)
        rc, out, argv = compile_one(cmd, control, inc, os.path.join(tmp, "control.o"))
        if rc == 0:
            print("FAIL: the control file with an unused static function compiled cleanly;")
            print("      the flags do not turn the warning into an error: " + " ".join(argv))
            return 1
        rc, out, argv = compile_one(cmd, src, inc, os.path.join(tmp, "static.o"))
    print(" ".join(argv))
    if rc != 0 or out:
        print(out)
        print("FAIL: %s (FLASHATTN_STATIC + FLASHATTN_IMPLEMENTATION) does not compile cleanly" % src)
        return 1
    print("ok: no warnings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
