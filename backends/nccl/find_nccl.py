#!/usr/bin/env python3
"""Finds an NCCL installation for the build (called by the top-level meson.build).

Prints two lines, the folder holding nccl.h and the NCCL shared library file, and exits 0; exits 1
when there is none. Looks, in this order, in:
  1. $NCCL_HOME, $NCCL_ROOT, $NCCL_DIR (each a prefix with include/ and lib/ or lib64/);
  2. the CUDA toolkit prefixes given as arguments (e.g. /usr/local/cuda);
  3. the system (/usr, /usr/local);
  4. the pip wheel (nvidia-nccl-cu12 / nvidia-nccl-cu13) in this python's site-packages:
     nvidia/nccl/{include,lib}, also nvidia/cu13 and nvidia/cu12.
The unversioned libnccl.so is preferred; a wheel ships only libnccl.so.2, which the build then links
by its full path (with an rpath to its folder).
"""
import glob
import os
import site
import sys
import sysconfig


def library_in(folder):
    for name in ("libnccl.so", "libnccl.so.2"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    found = sorted(glob.glob(os.path.join(folder, "libnccl.so.*")))
    return found[0] if found else None


def site_dirs():
    dirs = []
    try:
        dirs += site.getsitepackages()
    except Exception:  # virtualenvs of old Pythons lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:
        pass
    for key in ("purelib", "platlib"):
        try:
            dirs.append(sysconfig.get_paths()[key])
        except Exception:
            pass
    dirs += [p for p in sys.path if p.endswith("site-packages") or p.endswith("dist-packages")]
    seen, out = set(), []
    for d in dirs:
        if d and d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append(d)
    return out


def prefixes():
    out = []
    for var in ("NCCL_HOME", "NCCL_ROOT", "NCCL_DIR"):
        if os.environ.get(var):
            out.append(os.environ[var])
    out += sys.argv[1:]
    out += ["/usr", "/usr/local"]
    for d in site_dirs():
        for sub in ("nccl", "cu13", "cu12"):
            out.append(os.path.join(d, "nvidia", sub))
    return out


def main():
    multiarch = ["x86_64-linux-gnu", "aarch64-linux-gnu"]
    for prefix in prefixes():
        includes = [os.path.join(prefix, "include")] + [
            os.path.join(prefix, "targets", t, "include") for t in ("x86_64-linux", "sbsa-linux")]
        libs = [os.path.join(prefix, l) for l in ("lib", "lib64")]
        libs += [os.path.join(prefix, "lib", m) for m in multiarch]
        libs += [os.path.join(prefix, "targets", t, "lib") for t in ("x86_64-linux", "sbsa-linux")]
        include = next((i for i in includes if os.path.isfile(os.path.join(i, "nccl.h"))), None)
        if include is None:
            continue
        for folder in libs:
            lib = library_in(folder)
            if lib:
                print(os.path.realpath(include))
                print(os.path.abspath(lib))
                return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
