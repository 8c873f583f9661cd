"""Version, library loading, packaging. Run: FLASHATTN_LIB_DIR=<builddir>/packaging
PYTHONPATH=python python3 -m pytest python/tests (or after `pip install ./python`)."""
import base64
import csv
import hashlib
import io
import os
import sys
import tarfile
import zipfile

import flashattn as fa

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)


def test_version():
    v = fa.version()
    assert v and v[0].isdigit()
    with open(os.path.join(PYDIR, "pyproject.toml")) as f:
        assert 'version = "%s"' % v in f.read()
    assert fa.__version__ == v


def test_error():
    e = fa.Error(3, "head_size 100")
    assert e.status == fa.Status.ERR_WORKSPACE
    assert "head_size 100" in str(e)


def test_libraries_load_from_lib_dir():
    d = os.environ.get("FLASHATTN_LIB_DIR")
    p = fa.library_path("flashattn")
    if d:
        assert os.path.dirname(p) == os.path.abspath(d).rstrip("/") or p.startswith(d)
    assert os.path.basename(fa.library_path("flashattn_cpu")) == "libflashattn_cpu.so"


def test_imports_the_installed_package():
    # set by tests/run_meson.py: the package under test is the one pip installed into the venv
    prefix = os.environ.get("FLASHATTN_EXPECT_INSTALLED")
    if prefix:
        assert os.path.realpath(fa.__file__).startswith(os.path.realpath(prefix)), fa.__file__
        assert os.path.realpath(sys.prefix) == os.path.realpath(prefix)


def _backend():
    sys.path.insert(0, os.path.join(PYDIR, "_pep517"))
    try:
        import flashattn_wheel
    finally:
        sys.path.pop(0)
    return flashattn_wheel


def test_build_wheel_record(tmp_path, monkeypatch):
    monkeypatch.delenv("FLASHATTN_LIB_DIR", raising=False)
    w = _backend()
    assert w.get_requires_for_build_wheel() == []
    name = w.build_wheel(str(tmp_path))
    assert name == "flashattn-%s-py3-none-any.whl" % fa.version()
    zf = zipfile.ZipFile(tmp_path / name)
    names = zf.namelist()
    assert "flashattn/__init__.py" in names and "flashattn/_structs.py" in names
    meta = zf.read("flashattn-%s.dist-info/METADATA" % fa.version()).decode()
    assert "Name: flashattn" in meta and "Version: %s" % fa.version() in meta
    assert "Root-Is-Purelib: true" in zf.read("flashattn-%s.dist-info/WHEEL" % fa.version()).decode()
    rows = list(csv.reader(io.StringIO(zf.read("flashattn-%s.dist-info/RECORD"
                                               % fa.version()).decode())))
    assert sorted(r[0] for r in rows) == sorted(names)
    for path, digest, size in rows:
        if path.endswith("RECORD"):
            assert digest == "" and size == ""
            continue
        data = zf.read(path)
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == "sha256=" + want and int(size) == len(data)


def test_build_wheel_with_libraries(tmp_path, monkeypatch):
    d = os.path.dirname(fa.library_path("flashattn"))
    monkeypatch.setenv("FLASHATTN_LIB_DIR", d)
    name = _backend().build_wheel(str(tmp_path))
    assert not name.endswith("-any.whl")
    zf = zipfile.ZipFile(tmp_path / name)
    assert "flashattn/libflashattn.so" in zf.namelist()
    assert "flashattn/libflashattn_cpu.so" in zf.namelist()
    assert zf.read("flashattn/libflashattn.so")[:4] == b"\x7fELF"


def test_build_sdist(tmp_path):
    name = _backend().build_sdist(str(tmp_path))
    names = tarfile.open(tmp_path / name).getnames()
    base = name[:-len(".tar.gz")]
    for part in ("pyproject.toml", "PKG-INFO", "flashattn/__init__.py",
                 "_pep517/flashattn_wheel.py"):
        assert "%s/%s" % (base, part) in names
