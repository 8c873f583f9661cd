"""A small PEP 517 build backend for the flashattn binding: no dependency beyond the standard
library, so `pip install ./python` works offline and without setuptools or wheel.

It builds:
  - a wheel with the package (flashattn/*.py) and its .dist-info (METADATA, WHEEL, RECORD with
    sha256 digests). With $FLASHATTN_LIB_DIR set at build time, the shared libraries found
    there (libflashattn.so, libflashattn_cpu.so, libflashattn_cuda.so) go into the package folder
    too, and the wheel is tagged for this platform instead of py3-none-any;
  - an editable wheel (a .pth file pointing at this folder);
  - an sdist (.tar.gz of this folder's sources).
Timestamps come from $SOURCE_DATE_EPOCH when set, else 1980-01-01, so builds are reproducible.
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "flashattn"
LIBS = ("libflashattn.so", "libflashattn_cpu.so", "libflashattn_cuda.so")
SDIST_PARTS = ("pyproject.toml", "README.md", "flashattn", "_pep517", "tests", "examples")


def _project():
    """name, version, summary and requires-python from pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib
        proj = tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the few plain string keys this file uses
        section = text.split("[project]", 1)[1].split("\n[", 1)[0]
        proj = dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"', section, re.M))
    return proj["name"], proj["version"], proj.get("description", ""), proj.get(
        "requires-python", "")


def _dist_info_name():
    name, version, _, _ = _project()
    return "%s-%s.dist-info" % (name.replace("-", "_"), version)


def _metadata():
    name, version, summary, requires = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % name, "Version: %s" % version,
             "Summary: %s" % summary, "License: MIT"]
    if requires:
        lines.append("Requires-Python: %s" % requires)
    lines.append("Description-Content-Type: text/markdown")
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _libs():
    d = os.environ.get("FLASHATTN_LIB_DIR")
    found = []
    if d:
        for lib in LIBS:
            p = os.path.join(d, lib)
            if os.path.exists(p):
                found.append((lib, os.path.realpath(p)))
    return found


def _tag(platform_specific):
    if not platform_specific:
        return "py3-none-any"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-%s" % plat


def _wheel_file(tag, purelib):
    gen = "flashattn_wheel (in-tree PEP 517 backend)"
    return ("Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: %s\nTag: %s\n"
            % (gen, "true" if purelib else "false", tag)).encode()


def _date():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        t = time.gmtime(max(int(epoch), 315532800))
        return t[:6]
    return (1980, 1, 1, 0, 0, 0)


def _package_files():
    out = []
    pkg = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


class _Wheel:
    def __init__(self, path):
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []
        self.date = _date()

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=self.date)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, dist_info):
        record = dist_info + "/RECORD"
        text = "\n".join(self.records + [record + ",,"]) + "\n"
        info = zipfile.ZipInfo(record, date_time=self.date)
        info.external_attr = (0o100000 | 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, text.encode())
        self.zf.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _build(wheel_directory, editable):
    name, version, _, _ = _project()
    libs = [] if editable else _libs()
    tag = _tag(bool(libs))
    dist_info = _dist_info_name()
    fname = "%s-%s-%s.whl" % (name.replace("-", "_"), version, tag)
    w = _Wheel(os.path.join(wheel_directory, fname))
    try:
        if editable:
            w.add("%s.pth" % name.replace("-", "_"), (ROOT + "\n").encode())
        else:
            for arc, full in _package_files():
                w.add(arc, _read(full))
            for lib, real in libs:
                w.add("%s/%s" % (PACKAGE, lib), _read(real), mode=0o755)
        w.add(dist_info + "/METADATA", _metadata())
        w.add(dist_info + "/WHEEL", _wheel_file(tag, not libs))
        w.add(dist_info + "/top_level.txt", (PACKAGE + "\n").encode())
    finally:
        w.close(dist_info)
    return fname


# --- the PEP 517 / PEP 660 hooks --------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = _dist_info_name()
    d = os.path.join(metadata_directory, dist_info)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "wb") as f:
        f.write(_metadata())
    libs = _libs()
    with open(os.path.join(d, "WHEEL"), "wb") as f:
        f.write(_wheel_file(_tag(bool(libs)), not libs))
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = "%s-%s" % (name.replace("-", "_"), version)
    fname = base + ".tar.gz"
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    mtime = int(epoch) if epoch.isdigit() else 315532800

    def add(tf, arcname, data, mode=0o644):
        info = tarfile.TarInfo(arcname)
        info.size = len(data)
        info.mtime = int(mtime)
        info.mode = mode
        tf.addfile(info, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for part in SDIST_PARTS:
            full = os.path.join(ROOT, part)
            if os.path.isfile(full):
                add(tf, "%s/%s" % (base, part), _read(full))
            elif os.path.isdir(full):
                for dirpath, dirnames, filenames in os.walk(full):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                    for fn in sorted(filenames):
                        if fn.endswith((".pyc", ".so")):
                            continue
                        p = os.path.join(dirpath, fn)
                        rel = os.path.relpath(p, ROOT).replace(os.sep, "/")
                        add(tf, "%s/%s" % (base, rel), _read(p),
                            0o755 if os.access(p, os.X_OK) else 0o644)
        pkg_info = _metadata()
        add(tf, "%s/PKG-INFO" % base, pkg_info)
    return fname
