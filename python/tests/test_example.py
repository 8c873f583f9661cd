"""examples/decode_loop.py runs on the CPU backend and matches its dense recomputation."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_decode_loop_example_cpu():
    ex = os.path.join(os.path.dirname(HERE), "examples", "decode_loop.py")
    r = subprocess.run([sys.executable, ex, "--device", "cpu", "--steps", "6"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("OK") and "cpu backend" in r.stdout
