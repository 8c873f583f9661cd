"""ctypes binding for flashattn (issue 14) -- WORK IN PROGRESS.

Only library loading, version() and Error are implemented. No struct is
mirrored yet: nothing here touches fa_metadata / fa_layer memory.
"""
import ctypes
import ctypes.util
import os

__all__ = ["Error", "load_library", "version", "last_error", "status_string"]


class Error(RuntimeError):
    """A non-OK fa_status, with fa_last_error() text (thread-local in C)."""

    def __init__(self, status, message):
        super().__init__("flashattn status %d: %s" % (status, message))
        self.status = status
        self.message = message


_libs = {}


def _candidates(stem):
    name = "lib%s.so" % stem
    env = os.environ.get("FLASHATTN_LIB_DIR")
    if env:
        yield os.path.join(env, name)
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    found = ctypes.util.find_library(stem)
    if found:
        yield found
    yield name


def load_library(stem="flashattn"):
    """Load lib<stem>.so from $FLASHATTN_LIB_DIR, the package folder, or the system."""
    if stem in _libs:
        return _libs[stem]
    errors = []
    for path in _candidates(stem):
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        _libs[stem] = lib
        return lib
    raise OSError("cannot load lib%s.so (set FLASHATTN_LIB_DIR); tried: %s"
                  % (stem, "; ".join(errors) or "nothing found"))


def _core():
    lib = load_library("flashattn")
    lib.fa_version.restype = ctypes.c_char_p
    lib.fa_version.argtypes = []
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_last_error.argtypes = []
    lib.fa_status_string.restype = ctypes.c_char_p
    lib.fa_status_string.argtypes = [ctypes.c_int]
    return lib


def version():
    return _core().fa_version().decode()


def last_error():
    s = _core().fa_last_error()
    return s.decode() if s else ""


def status_string(status):
    s = _core().fa_status_string(int(status))
    return s.decode() if s else ""


def check(status):
    """Raise Error for a non-zero fa_status (assumes FA_OK == 0)."""
    if status != 0:
        raise Error(status, last_error() or status_string(status))
