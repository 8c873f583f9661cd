"""The Python binding's meson test (suite unit), run by Debian's /usr/bin/python3:
  1. makes a venv (--system-site-packages, for Debian's numpy and pytest) in the build folder;
  2. `pip install --no-index ./python` into it (the in-tree PEP 517 backend; offline), with
     FLASHATTN_LIB_DIR set so that the wheel carries the build's shared libraries;
  3. runs pytest on python/tests (but test_gpu.py) with the venv's python, from the build folder,
     so the package under test is the installed one;
and prints TAP on stdout: one line for the install, one per pytest case, then the plan.
pip's and pytest's own output goes to stderr (meson's log).
Usage: run_meson.py <python source dir> <venv dir> <lib dir>"""
import os
import shutil
import subprocess
import sys


def main():
    src, venv, libdir = (os.path.abspath(a) for a in sys.argv[1:4])
    tests = os.path.join(src, "tests")
    work = os.path.dirname(venv)
    tap = os.path.join(work, "pytest.tap")
    py = os.path.join(venv, "bin", "python")
    env = dict(os.environ)
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1",
               FLASHATTN_LIB_DIR=libdir)
    lines = []

    def run(cmd, **kw):
        sys.stderr.write("+ %s\n" % " ".join(cmd))
        sys.stderr.flush()
        return subprocess.call(cmd, stdout=sys.stderr, stderr=sys.stderr, env=env, cwd=work, **kw)

    if not os.path.exists(py):
        shutil.rmtree(venv, ignore_errors=True)
        if run([sys.executable, "-m", "venv", "--system-site-packages", venv]) != 0:
            print("not ok 1 - python3 -m venv --system-site-packages %s" % venv)
            print("1..1")
            return 1
    rc = run([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--force-reinstall",
              "--no-deps", src])
    lines.append(("ok" if rc == 0 else "not ok") + " - pip install --no-index ./python")
    if rc != 0:
        print("%s\n1..1" % lines[0].replace(" - ", " 1 - ", 1))
        return 1
    if os.path.exists(tap):
        os.remove(tap)
    env.update(FLASHATTN_TAP_FILE=tap, FLASHATTN_EXPECT_INSTALLED=venv,
               FLASHATTN_SOURCE_ROOT=os.path.dirname(src))
    rc = run([py, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", tests,
              "--ignore", os.path.join(tests, "test_gpu.py")])
    if os.path.exists(tap):
        with open(tap) as f:
            lines += [l.rstrip("\n") for l in f if l.strip()]
    if rc != 0 and not any(l.startswith("not ok") for l in lines):
        lines.append("not ok - pytest exited with status %d" % rc)
    for i, l in enumerate(lines, 1):
        ok, rest = l.split(" - ", 1)
        print("%s %d - %s" % (ok, i, rest))
    print("1..%d" % len(lines))
    sys.stdout.flush()
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
