"""Fixtures, and a TAP reporter: with $FLASHATTN_TAP_FILE set, one line per test case is
appended there ("ok - id", "not ok - id", "ok - id # SKIP reason"); tests/run_meson.py numbers
them and adds the plan for meson's TAP parser."""
import os

import pytest

import flashattn as fa

_TAP = os.environ.get("FLASHATTN_TAP_FILE")
_results = {}


def _emit(line):
    with open(_TAP, "a") as f:
        f.write(line + "\n")


def pytest_runtest_logreport(report):
    if not _TAP:
        return
    r = _results.setdefault(report.nodeid, {"failed": False, "skipped": None})
    if report.failed:
        r["failed"] = True
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        r["skipped"] = reason
    if report.when == "teardown":
        name = report.nodeid.replace("#", "")
        if r["failed"]:
            _emit("not ok - %s" % name)
        elif r["skipped"] is not None:
            _emit("ok - %s # SKIP %s" % (name, r["skipped"].replace("\n", " ")))
        else:
            _emit("ok - %s" % name)


def pytest_collectreport(report):
    if _TAP and report.failed:
        _emit("not ok - collecting %s" % report.nodeid)


@pytest.fixture
def cpu():
    be = fa.Backend.cpu()
    yield be
    be.close()


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(20261201)
